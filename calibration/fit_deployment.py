"""Few-shot deployment calibration: a few measured steps of your deployment correct the planner.

    python -m calibration.fit_deployment --scenario S --measured runs.csv [bench.json ...] --output fit.json
    python -m simulator.predict --scenario S --deployment fit.json
    python -m calibration.fit_deployment --model llama-3.1-70b --hardware h100-sxm --tp 4 --engine vllm \
        --draft eagle3 --measured bench.json --output fit.json --save-scenario mine.toml   # no TOML needed

Each FILE is a measured-rows CSV (``batch_size, k, itl_ms``; optional ``context_len``,
``acceptance_length``, ``per_position_acceptance``, ``n_steps``) or a ``vllm bench serve --save-result``
JSON (one row: its max_concurrency, K and acceptance from the spec_decode_* fields, median ITL). The
engine terms of ``simulator/specs/step_terms.py`` (kernel scales, host time per step, per sequence, per
speculating sequence and per speculative token) are updated from their prior (the learned layer's population;
on a CPU or with --physics-only each term free over its range) by the points' log step times: a posterior,
its maximum and a Laplace approximation around it (``calibration/fewshot.py``); the acceptance rates, when the
rows carry them, are measured directly (a bootstrap over the rows' steps). Intervals (90%) are carried to goodput
over the scenario's grid.
The output names the scenario it is valid for; it ends with the one or two (B, K) cells whose
measurement would settle K* where it is least certain.
"""
from __future__ import annotations

import json
import sys
import warnings
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd

from calibration import fewshot
from calibration import measured as measured_io
from calibration.fit_deployment_file import document, report
from calibration.vllm_io import bench_to_row
from simulator.cli.common import (OneLineParser, path_given, add_save_scenario_arg, add_setting_args, check_save_scenario, command_line,
                                 run_cli, save_scenario, setting_overrides, write_atomically)
from simulator.errors import PlannerError, PlannerWarning
from simulator.files import check_output_file
from simulator.plan.draft_acceptance import draft_acceptance_lengths as grid_acceptance_lengths
from simulator.plan.grid import compute_grid
from simulator.plan.api import resolve_scenario
from simulator.specs.scenario import Scenario
from simulator.specs.tree_acceptance import draft_acceptance_lengths, tree_shape
from simulator.specs.step_terms import (A_PRIORI_SD, LOWER as TERM_LOWER, NEUTRAL as TERM_NEUTRAL, TERM_NAMES,
                                        UPPER as TERM_UPPER, to_fit)

# the deployment measured, by flag instead of a scenario file (the same flags as predict)
DEPLOYMENT_FLAGS = ("model", "hardware", "tp", "ep", "engine", "engine_version", "draft", "draft_checkpoint", "acceptance",
                    "context_len", "dtype", "act_dtype", "kv_dtype", "attention_dtype", "calibration")
N_BOOT = 200
MIN_POINTS = 2
MEASURED = "--measured"  # the subject of this command's refusals and caveats: what the user gave the points by


def with_subject(message: str, subject: str) -> str:
    """One of this command's messages about the measured points, naming ``subject`` (the dashboard: the
    uploaded file's name) instead of the command's flag: one wording, the subject of where it is read."""
    return f"{subject}: {message.removeprefix(MEASURED + ': ')}"


def read_rows(paths: list[str]) -> pd.DataFrame:
    """Every measured row of every file (a 'file' column says which); a .json file is a vLLM bench result."""
    frames = []
    for path in paths:
        if str(path).lower().endswith(".json"):
            row = bench_to_row(path)
            df = measured_io.read_measured(pd.DataFrame([row]).to_csv(index=False).encode(), Path(path).name)
            df = df.drop(columns=["target", "draft"])  # vLLM names the served checkpoint, not a catalog model
        else:
            df = measured_io.read_measured(path, Path(path).name)
        frames.append(df.assign(file=Path(path).name))
    return pd.concat(frames, ignore_index=True)


def check_rows(rows: pd.DataFrame, sc: Scenario) -> None:
    """Refuse rows of another target, or too few distinct points to fit anything."""
    if "target" in rows and rows.target.notna().any():
        targets = {str(t) for t in rows.target.dropna() if str(t)}
        if targets and targets != {sc.model.name}:
            raise PlannerError(f"{MEASURED}: rows of target {sorted(targets)} but the scenario models"
                               f" '{sc.model.name}'; give the scenario of that deployment")
    n = len(cells(rows, sc))
    if n < MIN_POINTS:
        raise PlannerError(f"{MEASURED}: {n} distinct (batch_size, k, context_len) point(s); measure at least"
                           f" {MIN_POINTS} (e.g. the smallest and a mid batch size) to fit the deployment")


def cells(rows: pd.DataFrame, sc: Scenario) -> pd.DataFrame:
    """Median step time per measured (B, K, context) cell (context: the row's, else the scenario's)."""
    df = rows.assign(context_len=rows["context_len"].fillna(sc.context_len) if "context_len" in rows
                     else float(sc.context_len))
    df["context_len"] = df.context_len.round().astype(int)
    return (df.groupby(["batch_size", "k", "context_len"], as_index=False)
            .agg(itl_ms=("itl_ms", "median"), rows=("itl_ms", "size"), file=("file", lambda f: ",".join(sorted(set(f))))))


def planner_parts(sc: Scenario, batch, ks, context_len: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(kernel s, overhead s) of the planner without any deployment fit over batch x ks."""
    return planner_step_parts(sc, batch, ks, context_len)[:2]


def planner_step_parts(sc: Scenario, batch, ks, context_len: int | None = None
                       ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(kernel s, overhead s, the steps' collective calls, their host room s) of the planner without any deployment
    fit over batch x ks: what the engine terms compose with (simulator/specs/step_terms.py)."""
    base = replace(sc, deployment_fit=None, step_prior=None) if context_len is None else replace(
        sc, deployment_fit=None, step_prior=None, context_len=int(context_len))
    g = compute_grid(base, batch_sizes=np.asarray(batch, dtype=float), ks=np.asarray(ks, dtype=float))
    return g.step_parts()


def points_for(sc: Scenario, pts: pd.DataFrame) -> fewshot.Points:
    """The planner's components at each measured cell (and at K = 0 of the same B)."""
    kern, over, kern0, over0, calls, calls0, room, room0 = (np.empty(len(pts)) for _ in range(8))
    for ctx, grp in pts.groupby("context_len"):
        b = np.unique(grp.batch_size)
        ks = np.unique(np.concatenate([[0], grp.k]))
        kernel, overhead, n_calls, n_room = planner_step_parts(sc, b, ks, ctx)
        for i, r in grp.iterrows():
            bi, ki = int(np.searchsorted(b, r.batch_size)), int(np.searchsorted(ks, r.k))
            pos = pts.index.get_loc(i)
            kern[pos], over[pos], kern0[pos], over0[pos] = kernel[bi, ki], overhead[bi, ki], kernel[bi, 0], overhead[bi, 0]
            calls[pos], calls0[pos] = n_calls[bi, ki], n_calls[bi, 0]
            room[pos], room0[pos] = n_room[bi, ki], n_room[bi, 0]
    k = pts.k.to_numpy(dtype=float)
    rates = np.tile(sc.acceptance.rates_upto(max(int(k.max()), 1)), (len(pts), 1))
    return fewshot.Points(pts.batch_size.to_numpy(dtype=float), k, kern, over, kern0, over0, rates,
                          tree=tree_shape(sc.draft, sc.acceptance.rank_tail), calls=calls, calls0=calls0,
                          room=room, room0=room0)


def _rate_lists(rows: pd.DataFrame) -> list[list]:
    if "per_position_acceptance" not in rows:
        return []
    spec = rows[rows.k > 0]
    out = []
    for cell in spec.per_position_acceptance:
        rates = json.loads(cell) if isinstance(cell, str) and cell.strip() else []
        if rates and any(r is not None for r in rates):
            out.append([np.nan if r is None else float(r) for r in rates])
    return out


def fit_acceptance(rows: pd.DataFrame, sc: Scenario, k_max: int, n_boot: int = N_BOOT, seed: int = 0) -> dict | None:
    """Per-position rates a_1..a_k_max measured on the deployment, with bootstrap samples (n_boot, k_max):
    pooled per_position_acceptance when the rows carry it (each position's mean, redrawn with its binomial
    scatter over the rows' steps, at least NOISE_FLOOR of the rate), else a scale s_a on the scenario's
    rates fitted to the rows' acceptance_length; None when no row with K > 0 says either. A draft tree's
    per_position_acceptance is its own per depth (no rank tail); its acceptance_length scales the scenario's
    top-1 rates through the tree (the grid's formula), the rank tail kept and returned as ``rank_tail``."""
    rng = np.random.default_rng(seed)
    lists = _rate_lists(rows)
    if lists:
        width = max(len(r) for r in lists)
        mat = np.array([r + [np.nan] * (width - len(r)) for r in lists])
        seen = ~np.isnan(mat).all(axis=0)
        if not seen.any():
            return None
        # a position no row reached takes the rate of the last position reached before it (as Acceptance does)
        rates = np.nanmean(np.where(np.isnan(mat), 0.0, mat), axis=0) / np.maximum(np.mean(~np.isnan(mat), axis=0), 1e-12)
        rates = pd.Series(np.where(seen, rates, np.nan)).ffill().bfill().to_numpy()
        rates = np.concatenate([rates, np.full(max(k_max - width, 0), rates[-1])])[:k_max]
        steps = float(rows.n_steps.fillna(0).sum()) if "n_steps" in rows else 0.0
        sd = np.maximum(np.sqrt(rates * (1 - rates) / steps) if steps > 0 else 0.0, fewshot.NOISE_FLOOR * rates)
        samples = np.clip(rates + rng.normal(0, 1, (n_boot, 1)) * sd, 0.0, 0.999)  # positions move together
        return {"rates": np.minimum(rates, 0.999), "samples": samples, "measured_positions": min(width, k_max),
                "source": f"per_position_acceptance of {len(lists)} row(s) with K > 0"}
    if "acceptance_length" not in rows or not rows[(rows.k > 0)].acceptance_length.notna().any():
        return None
    spec = rows[(rows.k > 0) & rows.acceptance_length.notna()]
    base = sc.acceptance.rates_upto(k_max)
    k = spec.k.to_numpy().astype(int)
    # the scale multiplies the scenario's rates through the draft's own formula (fewshot.acceptance_length): a
    # tree's top-1 rates per depth, its rank tail kept
    tree = tree_shape(sc.draft, sc.acceptance.rank_tail)
    rates = sc.acceptance.rates_upto(int(k.max()))[None, :]
    y = np.log(spec.acceptance_length.to_numpy(dtype=float))
    s_max = 1.0 / max(base.max(), 1e-3)
    log_al = lambda s: np.log(fewshot.acceptance_length(s, rates, k, tree)[0])  # noqa: E731

    def scale_for(target, al_of=log_al):
        from scipy.optimize import least_squares
        return float(least_squares(lambda s: al_of(s) - target, [1.0], bounds=([0.02], [s_max])).x[0])

    s_hat = scale_for(y)
    if k.max() < k_max:  # the lengths measure positions 1..max K together; past it only the scenario's shape speaks
        warnings.warn(PlannerWarning(
            f"{MEASURED}: acceptance_length only (no per_position_acceptance), at K up to {k.max()}: acceptance"
            f" positions {k.max() + 1}-{k_max} are not measured; their rates are extrapolated from the scenario's acceptance"
            f" ({sc.acceptance.label}; {sc.acceptance.source}) x {s_hat:.3g}, the scale fitted to the measured"
            f" lengths; rows with per_position_acceptance, or at K = {k_max}, measure them"))
    fitted = log_al(s_hat)
    sigma = fewshot.scatter(fitted - y, 1)
    # the resamples invert AL(s) tabulated on a log grid of s (a tree's length costs ~0.1 ms: 200 exact solves
    # would take seconds); between nodes 1% apart, linear in log s, the table is off by ~1e-5, far inside a
    # resample's scatter (>= 2%)
    grid_s = np.exp(np.linspace(np.log(0.02), np.log(s_max), 400))
    table = np.log(fewshot.acceptance_length(grid_s, rates, k, tree))  # (n_s, n)
    tabulated = lambda s: np.array([np.interp(np.log(s[0]), np.log(grid_s), col) for col in table.T])  # noqa: E731
    scales = np.array([scale_for(fitted + rng.normal(0, sigma, y.size), tabulated) for _ in range(n_boot)])
    tail = sc.acceptance.rank_tail if tree is not None else None
    return {"rates": np.minimum(base * s_hat, 0.999), "samples": np.minimum(scales[:, None] * base, 0.999),
            "rank_tail": tail,
            "source": f"acceptance_length of {len(spec)} row(s): scenario rates x {s_hat:.3g}"
                      + (f" (a tree's top-1 rates per depth, its rank tail {tail:g} kept)" if tail is not None else "")}


MIN_MISFIT_DOF = 2  # residual degrees of freedom from which the points' own scatter sizes the misfit


def al_by_k(sc: Scenario, rate_samples: np.ndarray, ks: np.ndarray, rank_tail: float | None = None) -> np.ndarray:
    """AL(K) of the scenario's draft for each row of rates, (m, n_k): the grid's formula (specs.tree_acceptance);
    ``rank_tail`` None: the rates are the draft's own per position (a chain's, or a tree's measured per depth)."""
    tree = tree_shape(sc.draft, rank_tail)
    return np.stack([draft_acceptance_lengths(r, ks, tree=tree) for r in np.atleast_2d(rate_samples)])


def fitted_acceptance_lengths(sc: Scenario, acc: dict | None, ks, key: str = "samples") -> np.ndarray:
    """AL(K), (m, n_k), of the fitted acceptance (its ``key``: bootstrap samples or the rates), else the scenario's
    as the grid has it."""
    if acc is None:
        return grid_acceptance_lengths(sc.draft, sc.acceptance, np.asarray(ks, dtype=int))[None, :]
    return al_by_k(sc, acc[key], ks, acc.get("rank_tail"))


def fit(sc: Scenario, rows: pd.DataFrame, n_boot: int = N_BOOT, seed: int = 0) -> dict:
    """The whole fit: cells, terms, acceptance, goodput intervals over the grid, next measurements."""
    pts_df = cells(rows, sc)
    pts = points_for(sc, pts_df)
    y = np.log(pts_df.itl_ms.to_numpy() / 1e3)
    mean, sd = deployment_prior(sc)
    res = fewshot.posterior("step", pts, y, mean, sd, n_boot, seed)
    ks = np.arange(sc.k_max + 1)
    acc = fit_acceptance(rows, sc, max(sc.k_max, 1), n_boot, seed)
    al = fitted_acceptance_lengths(sc, acc, ks)
    kernel, overhead, calls, room = planner_step_parts(sc, sc.batch_sizes, ks)
    good = fewshot.goodput_samples(res["samples"], kernel, overhead, sc.batch_sizes, ks, al, calls, room)
    steps = fewshot.step_time_s(res["samples"], np.repeat(sc.batch_sizes, ks.size), np.tile(ks, sc.batch_sizes.size),
                                kernel.ravel(), overhead.ravel(), calls.ravel(), room.ravel())
    measured = {(int(b), int(k)) for b, k in zip(pts_df.batch_size, pts_df.k)}
    # what the terms leave unexplained in a source's speedups, curve by curve (the learned layer's speedup misfit;
    # none without a layer): the goodput band's extrapolation beyond the points; the step band is the points' own
    misfit = sc.step_prior.misfit_log.get("speedup", 0.0) if sc.step_prior is not None else 0.0
    zero = fewshot.prior_samples(mean, sd, n_boot, seed)
    zero_steps = fewshot.step_time_s(zero, np.repeat(sc.batch_sizes, ks.size), np.tile(ks, sc.batch_sizes.size),
                                     kernel.ravel(), overhead.ravel(), calls.ravel(), room.ravel())
    zero_good = fewshot.goodput_samples(zero, kernel, overhead, sc.batch_sizes, ks, al, calls, room)
    return {"cells": pts_df, "points": pts, "fit": res, "acceptance": acc, "goodput": good,
            "step_rel": _rel(steps, res["sigma"]), "goodput_rel": _rel_kstar(good, np.hypot(res["sigma"], misfit)),
            "zero_shot_step_rel": _rel(zero_steps, fewshot.NOISE_FLOOR),
            "zero_shot_goodput_rel": _rel_kstar(zero_good, np.hypot(fewshot.NOISE_FLOOR, misfit)), "misfit_log": misfit,
            "disagree": bool(res["disagree"]), "prior": prior_basis(sc),
            "next": fewshot.next_measurements(good, sc.batch_sizes, ks, measured)}


# where no population was learned (CPUs, --physics-only) the prior says no more than each term's bounds: a spread
# as wide as the term's range in its fit coordinate (the kernel scale's log range; a host cost anywhere from 0 to
# its upper bound), so the points place the terms. A spread drawn from the GPU engines' (A_PRIORI_SD: ~100 us of
# host time a step, ten times that still ~1 ms) would hold a CPU engine's host loop, tens of milliseconds a
# step, near zero and push its cost into the kernel scale. The speculative kernel scale stays at the physics
# there: a few points that mostly speculate trade it against the kernel scale (only a population separates the two)
VAGUE_SD = np.where(np.array(TERM_NAMES) == "spec_kernel_scale", 0.0, to_fit(TERM_UPPER) - to_fit(TERM_LOWER))


def deployment_prior(sc: Scenario) -> tuple[np.ndarray, np.ndarray]:
    """The prior a deployment's points update: the learned population's centre, each term free to move by its
    a priori spread (step_terms.A_PRIORI_SD); without a learned layer the physics, each term free over its range."""
    if sc.step_prior is not None:
        return np.asarray(sc.step_prior.mean_fit), A_PRIORI_SD.copy()
    return to_fit(TERM_NEUTRAL), VAGUE_SD.copy()


def prior_basis(sc: Scenario) -> str:
    return (sc.step_prior.label if sc.step_prior is not None
            else "the physics with a vague spread, each term free over its range (no learned layer on this hardware,"
                 " or --physics-only)")


def _rel(samples: np.ndarray, sigma: float) -> float:
    """Median half-width of the 90% interval relative to the median, with one point's scatter added in
    quadrature (the interval of a new measurement, not of the mean)."""
    lo, hi = fewshot.interval(samples)
    half = np.median((hi - lo) / 2 / np.median(samples, axis=0))
    return float(np.hypot(half, 1.645 * sigma))


def _rel_kstar(good: np.ndarray, sigma: float) -> float:
    mid = np.median(good, axis=0)
    best = np.argmax(mid, axis=1)
    at = good[:, np.arange(good.shape[1]), best]
    return _rel(at, sigma)


def main(argv: list[str] | None = None) -> int:
    p = OneLineParser(prog="python -m calibration.fit_deployment", description=__doc__.split("\n\n")[0])
    p.add_argument("--scenario", help="scenario TOML (path or bundled name) of the deployment measured; the flags"
                   " below override it, or replace it (--model and --hardware)")
    add_setting_args(p, *DEPLOYMENT_FLAGS)
    p.add_argument("--measured", nargs="+", required=True, metavar="FILE",
                   help="measured-rows CSV(s) (batch_size, k, itl_ms, ...) or vllm bench serve --save-result JSON(s)")
    p.add_argument("--output", required=True, type=path_given, help="deployment calibration JSON to write")
    p.add_argument("--bootstrap", type=int, default=N_BOOT, help=f"bootstrap resamples (default {N_BOOT})")
    add_save_scenario_arg(p)
    args = p.parse_args(argv)
    args.command_line = command_line(p.prog, argv)

    def body() -> int:
        check_output_file(args.output)
        if not 20 <= args.bootstrap <= 10000:
            raise PlannerError(f"--bootstrap {args.bootstrap}: give 20-10000 resamples")
        check_save_scenario(args)
        if args.scenario is None and not (args.model and args.hardware):
            raise PlannerError("give --scenario FILE of the deployment measured, or --model and --hardware"
                               " (with --tp, --engine, --draft as deployed)")
        sc = resolve_scenario(args.scenario, **setting_overrides(args, *DEPLOYMENT_FLAGS))
        if sc.deployment_fit is not None:
            raise PlannerError(f"--scenario {args.scenario}: names a deployment fit already ([calibration] deployment);"
                               " fit from the scenario without it")
        rows = read_rows(args.measured)
        check_rows(rows, sc)
        doc = document(sc, fit(sc, rows, args.bootstrap), args.measured)
        write_atomically(args.output, json.dumps(doc, indent=1) + "\n")
        sys.stdout.write(report(doc))
        print(f"wrote {args.output}", file=sys.stderr)
        if args.save_scenario:
            save_scenario(args, sc.raw, sc.name)
        return 0

    return run_cli(body)


if __name__ == "__main__":
    sys.exit(main())
