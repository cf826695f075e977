"""Two-shot validation on the published speedup curves: fit the deployment terms on two points of a
curve, score the others.

    python -m calibration.transfer_twoshot [--corpus calibration/data/published/corpus.csv]

A curve is one source's speedups of one model, draft, device and context (over batch size, or over K
at one batch size); those with at least MIN_POINTS points are used. Sorted by (B, K), the fit points are
the first (the smallest batch size) and the middle one (index n // 2); the other points are held out.
What the two points fit (``calibration/fewshot.py``, kind "speedup", bounded least squares on log
speedup): the acceptance scale when the rows give no acceptance length (an i.i.d. rate, started at 0.5),
then per-speculative-token cost, kernel scale, host time per step and per sequence, in that order, as
far as the two points identify them. Scored: held-out speedup MAPE and the speculate-or-not decision,
against the zero-shot planner (acceptance anchored on the smallest batch size) on the same rows.
"""
from __future__ import annotations

import sys
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from calibration import fewshot
from simulator.specs.step_terms import A_PRIORI_SD, NEUTRAL, to_fit
from calibration.transfer_cases import (CORPUS, OUT_DIR, Case, case_for, iid_rate, read_corpus, scenario_for,
                                        speculative_running)
from simulator.cli.common import OneLineParser, run_cli
from simulator.errors import PlannerError, PlannerWarning
from simulator.plan.grid import compute_grid

MIN_POINTS = 4
START_RATE = 0.5  # i.i.d. rate the acceptance scale multiplies when a curve states no acceptance length
N_BOOT = 100
CURVE_COLUMNS = ["source_id", "hardware", "model", "draft", "context_len"]  # one curve of the held-out rows


def curve_key(row) -> tuple:
    """A curve: source, device, model, draft, context and table (K free: a K sweep is a curve too)."""
    return (row.source_id, row.device, row.model, row.draft_method,
            row.context_len if not pd.isna(row.context_len) else -1, row.locator)


def speedup_curves(cases: list[Case], min_points: int = MIN_POINTS) -> list[list[Case]]:
    """Speedup curves with >= ``min_points`` points (whole-request speedups through the serving loop are
    not step speedups and stay out), each sorted by (B, K)."""
    curves: dict[tuple, list[Case]] = {}
    for c in cases:
        if c.kind == "speedup" and not c.end_to_end:
            curves.setdefault(curve_key(c.row), []).append(c)
    out = [sorted(m, key=lambda c: (int(c.row.batch_size), int(c.row.k))) for m in curves.values()]
    return [m for m in out if len(m) >= min_points]


def fit_indices(n: int) -> tuple[int, int]:
    """The smallest batch size and the middle point."""
    return 0, n // 2


def curve_points(members: list[Case], basis: str) -> tuple[fewshot.Points, bool]:
    """The planner's components at every point of a curve, and whether acceptance is given by the rows."""
    given = all(not pd.isna(c.row.acceptance_length) for c in members)
    k_max = max(int(c.row.k) for c in members)
    parts, rates, running = [], [], []
    for c in members:
        B, K = int(c.row.batch_size), int(c.row.k)
        sc = scenario_for(c.raw, basis)
        R = speculative_running(sc, c)  # as the zero-shot prices the row (calibration.transfer.step_speedup)
        g = compute_grid(sc, batch_sizes=sorted({R, B}), ks=[0, K])
        kern, over, calls, room = g.step_parts()
        r, b = (0, 1) if R < B else (0, 0)
        parts.append((R, K, kern[r, 1], over[r, 1], kern[b, 0], over[b, 0], calls[r, 1], calls[b, 0], room[r, 1],
                      room[b, 0]))
        running.append((B, R / B))
        a = iid_rate(float(c.row.acceptance_length), K) if given else START_RATE
        rates.append([a] * k_max)
    cols = np.array(parts, dtype=float).T
    batch0, share = np.array(running, dtype=float).T
    capped = bool((share < 1).any())
    return fewshot.Points(*cols[:6], np.array(rates), batch0 if capped else None, share if capped else None,
                          calls=cols[6], calls0=cols[7], room=cols[8], room0=cols[9]), given


def fit_distance(members: list[Case], train) -> np.ndarray:
    """How far each point lies from the nearest fit point: |log2(B / B_j)| + |K - K_j| (a doubling of the batch
    counted like one more draft token), 0 at the fit points."""
    B = np.array([float(c.row.batch_size) for c in members])
    K = np.array([float(c.row.k) for c in members])
    d = [np.abs(np.log2(B / B[j])) + np.abs(K - K[j]) for j in train]
    return np.min(d, axis=0)


@dataclass(frozen=True)
class Band:
    """What a two-shot band carries beside the posterior's spread (log, in quadrature): one measurement's scatter,
    a constant misfit and a misfit growing with the distance from the fit points; ``basis`` says where it came from."""

    misfit: float = 0.0
    rate: float = 0.0  # log misfit per unit of :func:`fit_distance`
    basis: str = "the layer's speedup misfit"

    def extra(self, distance: np.ndarray) -> np.ndarray:
        """The 90% half-width (log) this adds at each point."""
        return 1.645 * np.sqrt(fewshot.NOISE_FLOOR ** 2 + self.misfit ** 2 + (self.rate * np.asarray(distance)) ** 2)


def layer_band(prior) -> Band:
    """Today's band: the learned layer's speedup misfit (learned without the curve's source), constant."""
    return Band(prior.misfit_log.get("speedup", 0.0) if prior is not None else 0.0, 0.0)


@dataclass(frozen=True)
class CurveFit:
    """The posterior of one curve from its two points: the prediction and the spreads (log 90% half-widths) of
    every point, before the band's extra term; the zero-shot spread (the prior's terms) beside it."""

    members: list
    train: tuple
    pred: np.ndarray
    spread: np.ndarray
    spread_before: np.ndarray
    distance: np.ndarray
    res: dict
    pts: fewshot.Points


def fit_curve(members: list[Case], basis: str = "planner", prior=None, points=None) -> CurveFit:
    """The posterior from the two points, every point predicted. ``prior``: the learned layer (learned without the
    curve's source) whose population the points update; None: the physics (each term within its a priori spread).
    The acceptance, where the rows give none, is a free scale (flat prior)."""
    pts, given = points or curve_points(members, basis)  # ``points``: curve_points' answer, computed already
    train = fit_indices(len(members))
    y = np.log([members[i].measured for i in train])
    mean = np.asarray(prior.mean_fit) if prior is not None else to_fit(NEUTRAL)
    res = fewshot.posterior("speedup", fewshot.subset(pts, list(train)), y, mean, A_PRIORI_SD, N_BOOT,
                            free_acceptance=not given)
    pred = np.exp(fewshot.predict_log("speedup", res["theta"], pts)[0])
    spread = np.log(fewshot.interval(np.exp(fewshot.predict_log("speedup", res["samples"], pts)))[1] / pred)
    before = zero_shot_half_width(pts, mean, given, res["theta"][fewshot.ACCEPTANCE], 0.0)
    return CurveFit(members, train, pred, np.maximum(spread, 0.0), before, fit_distance(members, train),
                    res | {"given": given}, pts)


def two_shot_curve(members: list[Case], basis: str = "planner", prior=None, band: Band | None = None) -> list[dict]:
    """One record per held-out point of :func:`fit_curve`, with its 90% interval: the posterior's spread and
    ``band`` (default: the layer's speedup misfit, :func:`layer_band`) in quadrature."""
    f = fit_curve(members, basis, prior)
    band = band or layer_band(prior)
    extra = band.extra(f.distance)
    half = np.hypot(f.spread, extra)
    before = np.hypot(f.spread_before, extra)  # the same band beside the prior's spread
    pred, res, pts, train = f.pred, f.res, f.pts, f.train
    lo, hi = pred * np.exp(-half), pred * np.exp(half)
    out = []
    for i, c in enumerate(members):
        if i in train:
            continue
        out.append({"row_id": int(c.row.row_id), "source_id": c.row.source_id, "model": c.row.model,
                    "draft": c.row.draft_method, "hardware": c.raw["hardware"]["name"],
                    "context_len": c.raw["workload"]["context_len"], "batch_size": int(c.row.batch_size),
                    "k": int(c.row.k), "measured": c.measured, "predicted": float(pred[i]),
                    "lo": float(lo[i]), "hi": float(hi[i]), "half_width_before": float(before[i]),
                    "half_width_after": float(half[i]), "fit_distance": float(f.distance[i]),
                    "band_misfit": band.misfit, "band_rate": band.rate, "band_basis": band.basis,
                    "fit_points": "; ".join(f"B={int(members[j].row.batch_size)} K={int(members[j].row.k)}" for j in train),
                    "terms": ", ".join(res["terms"]), "acceptance_given": res["given"],
                    "acceptance_length": float(fewshot.acceptance_length(res["theta"][fewshot.ACCEPTANCE], pts.rates[i:i + 1],
                                                                         pts.k[i:i + 1])[0, 0])})
    return out


def zero_shot_half_width(pts: fewshot.Points, mean: np.ndarray, given: bool, acceptance_scale: float,
                         extra) -> np.ndarray:
    """The 90% half-width (log) of each point before any point of the curve is used: the prior's terms drawn
    (the same acceptance as after), with the same measurement scatter and misfit (``extra``) as after."""
    th = fewshot.prior_samples(mean, A_PRIORI_SD, N_BOOT)
    th[:, fewshot.ACCEPTANCE] = 1.0 if given else acceptance_scale
    lo, hi = fewshot.interval(fewshot.predict_log("speedup", th, pts))
    return np.hypot((hi - lo) / 2, extra)


# --- the band calibrated on training sources only (nested inside each held-out source) -------------------------

INNER_MIN_POINTS = 3  # a calibration curve needs one point beyond its two fit points
COVERAGE = 0.90
ALPHA = 1 - COVERAGE


@dataclass(frozen=True)
class InnerPoints:
    """Held-out points of training curves, each predicted without its own source: |log residual|, the posterior's
    spread, the distance from the fit points and the misfit of the layer that predicted it."""

    abs_log_error: np.ndarray
    spread: np.ndarray
    distance: np.ndarray
    layer_misfit: np.ndarray

    def coverage(self, band_extra: np.ndarray) -> float:
        return float(np.mean(self.abs_log_error <= np.hypot(self.spread, band_extra)))

    def interval_score(self, band_extra: np.ndarray) -> float:
        """Mean interval score of the 90% intervals (width + 2 / alpha x the miss; Gneiting and Raftery 2007), log."""
        h = np.hypot(self.spread, band_extra)
        return float(np.mean(2 * h + 2 / ALPHA * np.maximum(self.abs_log_error - h, 0.0)))


def smallest_covering(inner: InnerPoints, extra_of, upper: float = 3.0) -> float:
    """The smallest x >= 0 whose band ``extra_of(x)`` holds >= COVERAGE of the inner points (bisection; the
    coverage only grows with x)."""
    if inner.coverage(extra_of(0.0)) >= COVERAGE:
        return 0.0
    if inner.coverage(extra_of(upper)) < COVERAGE:
        return upper
    lo, hi = 0.0, upper
    for _ in range(50):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if inner.coverage(extra_of(mid)) >= COVERAGE else (mid, hi)
    return hi


def calibrate_band(inner: InnerPoints | None, layer_misfit: float) -> Band:
    """The band of a held-out source from the inner points of its training sources: (A) a constant misfit, or (B)
    the layer's misfit with a misfit growing with the distance from the fit points, each sized to hold 90% of the
    inner points; the one with the lower interval score. No inner point: the layer's misfit (:func:`layer_band`)."""
    if inner is None or not inner.abs_log_error.size:
        return Band(layer_misfit, 0.0)
    m = smallest_covering(inner, lambda x: Band(x).extra(inner.distance))
    const = Band(m, 0.0, "constant misfit, calibrated on the training sources' curves")
    r = smallest_covering(inner, lambda x: 1.645 * np.sqrt(fewshot.NOISE_FLOOR ** 2 + inner.layer_misfit ** 2
                                                             + (x * inner.distance) ** 2))
    dist = Band(layer_misfit, r, "misfit growing with the distance from the fit points, calibrated on the training"
                                 " sources' curves")
    score_const = inner.interval_score(const.extra(inner.distance))
    score_dist = inner.interval_score(1.645 * np.sqrt(fewshot.NOISE_FLOOR ** 2 + inner.layer_misfit ** 2
                                                       + (r * inner.distance) ** 2))
    return dist if score_dist < score_const else const


def held_out_bands(learner, cases: list[Case]):
    """band_for(case): the band of the case's curve, calibrated without its source (:func:`calibrate_band`). The
    inner points: every training source's speedup curve with >= INNER_MIN_POINTS points, fitted on its smallest
    batch size and middle point, each predicted by the layer of the held-out source's form learned without the
    held-out source and without the curve's own source (the nested hold-out's fits, already made for the form
    choice). Each source's band is calibrated once."""
    curves = speedup_curves(cases, INNER_MIN_POINTS)
    points: dict = {}
    bands: dict = {}
    rows_source = learner.rows.source

    def band_for(case) -> Band:
        held = case.row.source_id
        if held in bands:
            return bands[held]
        outer_mask = rows_source != held
        outer = learner.learn(outer_mask)
        errs, spreads, dists, mis = [], [], [], []
        for members in curves:
            src = members[0].row.source_id
            if src == held:
                continue
            pop = learner.fit(outer_mask & (rows_source != src), outer.form)
            prior = pop.prior(None, "", *pop.centre_of(members[0].row.engine, members[0].raw["hardware"]["name"]))
            key = curve_key(members[0].row)
            if key not in points:
                points[key] = curve_points(members, "planner")
            try:
                f = fit_curve(members, "planner", prior, points[key])
            except PlannerError:
                continue
            out = np.setdiff1d(np.arange(len(members)), f.train)
            meas = np.array([members[i].measured for i in out])
            errs.append(np.abs(np.log(meas / f.pred[out])))
            spreads.append(f.spread[out])
            dists.append(f.distance[out])
            mis.append(np.full(out.size, pop.misfit_by_kind.get("speedup", 0.0)))
        inner = InnerPoints(*(np.concatenate(a) for a in (errs, spreads, dists, mis))) if errs else None
        bands[held] = calibrate_band(inner, outer.misfit_by_kind.get("speedup", 0.0))
        return bands[held]

    return band_for


def score_two_shot(cases: list[Case], layer_for=None, band_for=None) -> pd.DataFrame:
    """Held-out rows of every curve, planner and datasheet bases (errors: predicted / measured - 1);
    ``layer_for(case)``: the learned layer (without the case's source) the planner's posterior starts from;
    ``band_for(case)``: its band (calibrated without the case's source; None: the layer's misfit)."""
    rows = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PlannerWarning)
        for members in speedup_curves(cases):
            try:
                planner = two_shot_curve(members, "planner", layer_for(members[0]) if layer_for else None,
                                         band_for(members[0]) if band_for else None)
                sheet = two_shot_curve(members, "datasheet")
            except PlannerError:
                continue
            for p, d in zip(planner, sheet):
                rows.append(p | {"predicted_datasheet": d["predicted"]})
    df = pd.DataFrame(rows)
    if df.empty:
        return df
    df["error"] = df.predicted / df.measured - 1
    df["error_datasheet"] = df.predicted_datasheet / df.measured - 1
    df["decision_right"] = (df.predicted > 1) == (df.measured > 1)
    df["decision_right_datasheet"] = (df.predicted_datasheet > 1) == (df.measured > 1)
    df["inside_interval"] = (df.lo <= df.measured) & (df.measured <= df.hi)
    return df


def summarize_two_shot(two: pd.DataFrame, zero_shot_rows: pd.DataFrame | None = None) -> dict:
    """MAPE, worst and decisions of the two-shot rows; the zero-shot planner on the same rows beside them."""
    if two.empty:
        return {"n": 0}
    e = two.error.abs()
    out = {"n": int(len(two)), "curves": int(two.groupby(CURVE_COLUMNS).ngroups),
           "planner": {"mape": float(e.mean()), "worst": float(e.max())},
           "datasheet": {"mape": float(two.error_datasheet.abs().mean()), "worst": float(two.error_datasheet.abs().max())},
           "decision": {"planner": float(two.decision_right.mean()), "datasheet": float(two.decision_right_datasheet.mean())},
           "interval_coverage": float(two.inside_interval.mean()),
           # the band after the two points against the band before them, per curve (widest point of each)
           "curves_band_not_wider": float((two.groupby(CURVE_COLUMNS).half_width_after.max()
                                           <= two.groupby(CURVE_COLUMNS).half_width_before.max() + 1e-12).mean()),
           "median_half_width_before": float(np.expm1(two.half_width_before.median())),
           "median_half_width_after": float(np.expm1(two.half_width_after.median()))}
    if "band_basis" in two:  # each held-out source's band, calibrated without it
        out["bands"] = {str(src): {"misfit_log": float(g.band_misfit.iloc[0]), "rate_per_distance": float(g.band_rate.iloc[0]),
                                   "basis": str(g.band_basis.iloc[0])} for src, g in two.groupby("source_id")}
    out["leave_one_source_out"] = {"n": out["n"], "mape": out["planner"]["mape"], "worst": out["planner"]["worst"],
                                   "decision": out["decision"]["planner"]}
    if zero_shot_rows is not None and len(zero_shot_rows):
        z = zero_shot_rows.set_index("row_id").reindex(two.row_id)
        z = z[z.error.notna()]
        out["zero_shot_same_rows"] = {"n": int(len(z)), "mape": float(z.error.abs().mean()),
                                      "decision": float(z.decision_right.astype(bool).mean())}
    return out


def markdown_rows(s: dict) -> list[str]:
    """The two summary rows of transfer.md (same columns as the zero-shot rows) and what they rest on."""
    if not s.get("n"):
        return []
    pct = lambda x: f"{x:.1%}"  # noqa: E731
    lines = [f"| two-shot speculative speedup ({s['curves']} curves with >= {MIN_POINTS} points; posterior from the"
             f" smallest batch size and the middle point, those excluded) | {s['n']} | {pct(s['datasheet']['mape'])} | - |"
             f" {pct(s['planner']['mape'])} | {pct(s['planner']['worst'])} |",
             f"| two-shot decision right | {s['n']} | {pct(s['decision']['datasheet'])} | - |"
             f" {pct(s['decision']['planner'])} | |"]
    return lines


def markdown_note(s: dict) -> list[str]:
    if not s.get("n"):
        return []
    z = s.get("zero_shot_same_rows")
    same = (f" The zero-shot planner on the same {z['n']} rows: MAPE {z['mape']:.1%}, decisions {z['decision']:.1%}."
            if z else "")
    return [f"Two-shot (`calibration/transfer_twoshot.py`): per curve, the posterior of the engine terms given the"
            f" smallest batch size and the middle point (the prior: the learned layer learned without the curve's source,"
            f" each term within its a priori spread; a free acceptance scale where the rows give no acceptance length)."
            f" 90% intervals (the posterior's spread, with one measurement's 2% scatter and a misfit in quadrature: for"
            f" each held-out source, a constant misfit or one growing with the distance from the fit points, sized on"
            f" the curves of the other sources only, each predicted without its own source too) hold"
            f" {s['interval_coverage']:.0%} of"
            f" the held-out measurements (goal 85-95%); the band after the two points is no wider than before them on"
            f" {s['curves_band_not_wider']:.0%} of the curves (median half-width {s['median_half_width_before']:.1%}"
            f" before, {s['median_half_width_after']:.1%} after). Targets (issue 47): MAPE <= 5%, decisions >= 98%.{same}", ""]


def main(argv: list[str] | None = None) -> int:
    p = OneLineParser(prog="python -m calibration.transfer_twoshot", description=__doc__.split("\n\n")[0])
    p.add_argument("--corpus", default=str(CORPUS), help="published corpus CSV")
    p.add_argument("--rows", help="also write the scored held-out rows to this CSV")
    args = p.parse_args(argv)

    def body() -> int:
        corpus = read_corpus(Path(args.corpus))
        cases = [c for c in (case_for(r) for _, r in corpus.iterrows()) if isinstance(c, Case)]
        two = score_two_shot(cases)
        zero = OUT_DIR / "transfer_rows.csv"  # the committed zero-shot rows, for the same-rows comparison
        s = summarize_two_shot(two, pd.read_csv(zero) if zero.is_file() else None)
        cols = ["row_id", "source_id", "hardware", "model", "draft", "batch_size", "k", "measured", "predicted",
                "lo", "hi", "error", "terms", "fit_points"]
        print(two[cols].to_string(index=False, float_format=lambda v: f"{v:.3f}"))
        print("\n".join(markdown_rows(s) + markdown_note(s)))
        if args.rows:
            two.to_csv(args.rows, index=False)
        return 0

    return run_cli(body)


if __name__ == "__main__":
    sys.exit(main())
