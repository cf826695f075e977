"""Validate predicted ITL, goodput and K* against measured speculative-decoding runs.

    python -m calibration.validate --measured calibration/data/runs/smollm2-cpu.csv \\
        --scenario scenarios/smollm2-cpu.toml --output-dir calibration/data/validation

The physics (roofline with the scenario's calibration profile, if any) predicts each (B, K) step;
two engine terms the microbenchmarks cannot see, ITL = scale * roofline + fixed + per_seq * B
(the engine's kernels against the microbenchmarks' speed; host work per step), are fitted with
non-negative least squares on a training split (three step-overhead forms were compared on the
first CPU dataset; this one had the lowest held-out error and is the one a physical reading
supports), then
held-out rows report ITL MAPE, goodput error, K* agreement and regret = measured goodput at the
predicted K* / best measured goodput at that batch size. Acceptance comes from the measured
per-position rates of the training rows at the same batch size (the planner is given acceptance,
it predicts cost), so goodput errors are those of the cost model.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.optimize import nnls

from calibration import measured as measured_io
from calibration.validate_report import REPORT_NAMES, ValidationResult, update_profile, write_report
from calibration.validate_moe import fit_routing_skew, fit_skew_and_reuse, grid_verify_expert_ms, router_reuse
from simulator.specs.acceptance import Acceptance
from simulator.errors import PlannerError
from simulator.plan.grid import compute_grid
from simulator.cli.common import OneLineParser, path_given, run_cli
from simulator.specs.scenario import Scenario, load_scenario

REQUIRED = ("batch_size", "k", "itl_ms", "acceptance_length", "per_position_acceptance")


# the product goal for choosing K: the measured goodput at the predicted K* within 3% of the best
REGRET_GOAL = 0.97


class ValidationError(PlannerError):
    """Measured data that cannot be compared with the scenario."""


def read_measured(path: str | Path) -> pd.DataFrame:
    """A measured-runs CSV with the columns validation needs (per-position acceptance included)."""
    try:
        return measured_io.read_measured(path, str(path), required=REQUIRED)
    except PlannerError as err:
        raise ValidationError(str(err)) from None


def check_matches(measured: pd.DataFrame, sc: Scenario, origin: str) -> None:
    """The measured grid must be of the scenario's target (and draft, when the file says)."""
    if "target" in measured:
        targets = set(measured.target.astype(str))
        if targets != {sc.model.name}:
            raise ValidationError(f"{origin}: measured target {sorted(targets)} but the scenario models"
                                  f" '{sc.model.name}'; pick the scenario of that run")
    if "draft" in measured:
        drafts = set(measured.draft.astype(str))
        expected = sc.draft.label
        if sc.draft.method == "model":
            expected = sc.draft.model.name
        if not any(expected in d or d in expected for d in drafts):
            raise ValidationError(f"{origin}: measured draft {sorted(drafts)} does not match the scenario's"
                                  f" draft '{sc.draft.label}'")
    if measured.k.max() > 32:
        raise ValidationError(f"{origin}: K up to {measured.k.max()} is out of range")


def pooled_acceptance(rows: pd.DataFrame, k_max: int) -> Acceptance:
    """Per-position rates pooled over rows (weighted by steps when known)."""
    sums = np.zeros(k_max)
    weights = np.zeros(k_max)
    steps = rows["n_steps"] if "n_steps" in rows else pd.Series(1.0, index=rows.index)
    for text, w in zip(rows.per_position_acceptance, steps):
        rates = json.loads(text) if isinstance(text, str) and text.strip() else []
        for i, r in enumerate(rates[:k_max]):
            if r is None:  # position never attempted in that run
                continue
            sums[i] += r * w
            weights[i] += w
    have = weights > 0
    if not have.any():
        raise ValidationError("no per-position acceptance in the training rows (need rows with K >= 1)")
    rates = np.where(have, sums / np.where(have, weights, 1), np.nan)
    last = rates[have][-1]
    rates = np.where(np.isnan(rates), last, rates)
    return Acceptance(tuple(float(min(max(r, 0.0), 0.999)) for r in rates), "measured: pooled training rows")


def split_rows(measured: pd.DataFrame) -> np.ndarray:
    """Held-out mask: every third (B, K) cell in a diagonal pattern, so every B and every K keeps
    training rows and has held-out ones. Runs at several router reuse settings (MoE) add the reuse's
    rank to the diagonal: held-out (B, K, rho) points, every rho with training rows."""
    b_rank = measured.batch_size.rank(method="dense").astype(int)
    reuse = router_reuse(measured)
    r_rank = 0 if reuse is None else reuse.rank(method="dense").astype(int) - 1
    return ((b_rank + measured.k + r_rank) % 3 == 1).to_numpy()


def k_star_rows(df: pd.DataFrame, rows: str) -> pd.DataFrame:
    """Per batch size: K* measured vs predicted among the given rows, and the regret (measured goodput
    at the predicted K* / best measured goodput). Runs at several router reuse settings (MoE) are
    compared per (batch size, reuse): they are different workloads at the same B."""
    out = []
    reuse = router_reuse(df)
    keys = [df.batch_size] if reuse is None else [df.batch_size, reuse]
    for key, g in df.groupby(keys):
        b = key[0] if isinstance(key, tuple) else key
        g = g.sort_values("k")
        best = g.goodput_per_seq.max()
        k_meas = int(g.k.iloc[int(np.argmax(g.goodput_per_seq))])
        k_pred = int(g.k.iloc[int(np.argmax(g.goodput_predicted))])
        at_pred = float(g.goodput_per_seq[g.k == k_pred].iloc[0])
        out.append({"rows": rows, "batch_size": int(b), "ks": ",".join(str(int(k)) for k in g.k),
                    "k_measured": k_meas, "k_predicted": k_pred, "best_goodput": float(best),
                    "goodput_at_predicted": at_pred, "regret": at_pred / best}
                   | ({"router_reuse": float(key[1])} if reuse is not None else {}))
    return pd.DataFrame(out)


def validate(measured: pd.DataFrame, sc: Scenario, origin: str = "measured") -> ValidationResult:
    """Fit the two engine terms on the training rows and score the held-out rows (ITL, goodput, K*)."""
    check_matches(measured, sc, origin)
    df = measured.reset_index(drop=True).copy()
    df["heldout"] = split_rows(df)
    k_max = int(df.k.max())
    train = df[~df.heldout]
    acceptance = pooled_acceptance(train[train.k > 0], max(k_max, 1))
    sc_eval = evaluation_scenario(sc, acceptance, k_max)
    sc_eval, reuse, routing = fit_routing(df, train, sc, sc_eval)
    df["routing_reuse"] = reuse
    df["itl_ms_physics"] = physics_itl_ms(df, sc, sc_eval, reuse, k_max)
    coef = fit_engine_terms(df)
    predict_goodput(df, train, acceptance, k_max)
    held = df[df.heldout]
    if _has_expert_counts(df, sc):
        predict_experts(df, sc, sc_eval, k_max)
    per_batch = k_star_rows(df, "all rows")
    per_batch_held = k_star_rows(held, "held-out rows")
    overhead = {"scale": float(coef[0]), "fixed_ms": float(coef[1]), "per_seq_ms": float(coef[2])}
    summary = summarize(df, sc, origin, per_batch, per_batch_held, overhead)
    if "experts_touched_predicted" in df:
        measured_e = df.experts_touched.astype(float)
        summary["experts_touched_mape"] = float(np.mean(np.abs(df.experts_touched_predicted / measured_e - 1)[
            df.heldout]))
        summary["routing"] = routing["note"]
        summary.update(routing["extra"])
    return ValidationResult(df, pd.concat([per_batch_held, per_batch], ignore_index=True), overhead, summary)


def evaluation_scenario(sc: Scenario, acceptance: Acceptance, k_max: int) -> Scenario:
    """The scenario the rows are predicted with, rebuilt (validated) from its TOML layout: the training rows'
    acceptance, K up to the measured maximum, and the physics from microbenchmarks alone (engine terms
    already in the profile are refitted here)."""
    return sc.with_overrides(acceptance=acceptance, acceptance_source=acceptance.source,
                             k_max=max(k_max, sc.fixed_k), engine_terms=False)


def _has_expert_counts(df: pd.DataFrame, sc: Scenario) -> bool:
    return bool(sc.model.is_moe and "experts_touched" in df and df.experts_touched.notna().any())


def fit_routing(df: pd.DataFrame, train: pd.DataFrame, sc: Scenario, sc_eval: Scenario):
    """(scenario to evaluate, effective reuse rho of each row, {"note", "extra"} for the summary): on MoE
    runs that counted experts, the routing learnt from the training rows' counts."""
    note, extra = None, {}
    reuse = pd.Series(sc.deployment.routing.reuse, index=df.index)  # effective rho of each row
    if _has_expert_counts(df, sc):
        # routing is an input like acceptance: learn it from the training rows' expert counts
        configured = router_reuse(df)
        if configured is None:
            skew = fit_routing_skew(train, sc)
            note = f"zipf skew {skew:.2f} fitted to the training rows' distinct-expert counts"
        else:
            # the Zipf skew and the router's own adjacent-token reuse rho_0 are fitted together to the
            # training rows' counts; the engine's injected reuse r composes with rho_0 as
            # rho = r + (1 - r) rho_0 (a copy of the previous position's experts, or the router's own
            # correlation), so held-out rows at any r are predicted from the two fitted numbers.
            skew, rho0 = fit_skew_and_reuse(train, sc)
            reuse = configured + (1 - configured) * rho0
            extra["routing_reuse_rho0"] = rho0
            extra["routing_skew"] = skew
            note = (f"zipf skew {skew:.2f} and the router's own adjacent-token reuse rho_0 = {rho0:.2f}"
                    f" fitted together to the training rows' distinct-expert counts; each row's reuse"
                    f" = r + (1 - r) rho_0 with its configured r")
        sc_eval = sc_eval.with_overrides(routing_skew=skew)  # a zipf router of that skew
    return sc_eval, reuse, {"note": note, "extra": extra}


def physics_itl_ms(df: pd.DataFrame, sc: Scenario, sc_eval: Scenario, reuse: pd.Series, k_max: int) -> np.ndarray:
    """The roofline step time of each row [ms], at its own context and routing reuse."""
    # the engine measures at a (nearly) fixed context per row: price each row at its own context
    contexts = df.context_len.round().astype(int) if "context_len" in df and df.context_len.notna().all() \
        else pd.Series(sc.context_len, index=df.index)
    physics = np.empty(len(df))
    for (ctx, rho), rows in df.groupby([contexts, reuse]).groups.items():
        sel = df.index.isin(rows)
        grid = compute_grid(sc_eval.with_overrides(context_len=int(ctx), routing_reuse=float(rho)),
                            batch_sizes=np.unique(df.batch_size), ks=np.arange(k_max + 1))
        bi = np.searchsorted(grid.batch_sizes, df.batch_size[sel])
        physics[sel] = grid.itl_s[bi, df.k[sel].to_numpy()] * 1e3
    return physics


def fit_engine_terms(df: pd.DataFrame) -> np.ndarray:
    """(scale, fixed ms, per-sequence ms) fitted on the training rows; sets ``itl_ms_predicted``."""
    # engine terms, fitted on training rows only (non-negative): the engine's kernels run at a
    # constant factor of the microbenchmarks' speed (eager dispatch, allocation, masks: `scale`), and
    # each step pays host work (scheduling, sampling bookkeeping) of `fixed + per_seq * B`.
    design = np.column_stack([df.itl_ms_physics, np.ones(len(df)), df.batch_size]).astype(float)
    tr = ~df.heldout.to_numpy()
    # relative least squares: weight rows by 1/ITL so fast steps count as much as slow ones
    w = 1.0 / df.itl_ms.to_numpy()
    coef, _ = nnls(design[tr] * w[tr, None], df.itl_ms.to_numpy()[tr] * w[tr])
    df["itl_ms_predicted"] = design @ coef
    return coef


def predict_goodput(df: pd.DataFrame, train: pd.DataFrame, acceptance: Acceptance, k_max: int) -> None:
    """Predicted acceptance length and goodput of each row, and the ITL and goodput errors (columns of df)."""
    # acceptance is an input the planner is given, not what it predicts: use the rates measured at
    # each batch size (its training rows; the pooled rates where a batch size has none)
    al_pred = np.empty(len(df))
    for b, idx in df.groupby("batch_size").groups.items():
        rows_b = train[(train.batch_size == b) & (train.k > 0)]
        acc_b = pooled_acceptance(rows_b, max(k_max, 1)) if len(rows_b) else acceptance
        al_pred[df.index.get_indexer(idx)] = acc_b.acceptance_length(df.loc[idx, "k"].to_numpy())
    df["acceptance_length_predicted"] = al_pred
    df["goodput_predicted"] = al_pred / (df.itl_ms_predicted / 1e3)
    if "goodput_per_seq" not in df:
        df["goodput_per_seq"] = df.acceptance_length / (df.itl_ms / 1e3)
    df["itl_error"] = df.itl_ms_predicted / df.itl_ms - 1
    df["goodput_error"] = df.goodput_predicted / df.goodput_per_seq - 1


def predict_experts(df: pd.DataFrame, sc: Scenario, sc_eval: Scenario, k_max: int) -> None:
    """MoE: predicted distinct experts per layer and routed-expert op time of each row (columns of df)."""
    from simulator.physics.experts import experts_touched_correlated
    from simulator.specs.routing import expert_probabilities
    p = expert_probabilities(sc_eval.deployment.routing, sc.model.num_experts, sc.model.experts_per_token)
    df["experts_touched_predicted"] = [float(experts_touched_correlated(b, k + 1, p, rho))
                                       for b, k, rho in zip(df.batch_size, df.k, df.routing_reuse)]
    verify = np.empty(len(df))
    for rho, rows in df.groupby("routing_reuse").groups.items():
        sel = df.index.isin(rows)
        verify[sel] = grid_verify_expert_ms(sc_eval.with_overrides(routing_reuse=float(rho)), df[sel], k_max)
    df["expert_ms_predicted"] = verify


def summarize(df: pd.DataFrame, sc: Scenario, origin: str, per_batch: pd.DataFrame, per_batch_held: pd.DataFrame,
              overhead: dict) -> dict:
    """validation.json: the held-out error figures (and K* over all rows beside them)."""
    held = df[df.heldout]
    return {
        "scenario": sc.name, "measured": origin, "step_time_source": sc.cost_source,
        "acceptance": "measured per-position rates of the training rows at each batch size",
        "n_rows": int(len(df)), "n_heldout": int(len(held)),
        "batch_sizes": sorted(int(x) for x in df.batch_size.unique()), "ks": sorted(int(x) for x in df.k.unique()),
        "itl_mape_physics": float(np.mean(np.abs(held.itl_ms_physics / held.itl_ms - 1))),
        "itl_mape": float(np.mean(np.abs(held.itl_error))),
        "goodput_mape": float(np.mean(np.abs(held.goodput_error))),
        # K* and regret over the held-out rows only: the argmax at each batch size among its held-out K
        "k_agreement": float(np.mean(per_batch_held.k_measured == per_batch_held.k_predicted)),
        "worst_regret": float(per_batch_held.regret.min()), "mean_regret": float(per_batch_held.regret.mean()),
        # over all rows (training rows set the two engine terms, so this is not a held-out figure)
        "k_agreement_all_rows": float(np.mean(per_batch.k_measured == per_batch.k_predicted)),
        "worst_regret_all_rows": float(per_batch.regret.min()),
        "mean_regret_all_rows": float(per_batch.regret.mean()),
        "regret_goal": REGRET_GOAL,
        "step_overhead": overhead,
    }


def trace_reuse(path: str | Path, sc: Scenario, summary: dict) -> dict:
    """Reuse per configured r fitted from router traces (keys ``B{B}_K{K}_r{r}``, arrays
    [steps x layers x B, K + 1, top_k] in layer order): the overlap estimator per MoE layer
    (:func:`simulator.physics.experts.reuse_from_trace`), averaged over layers; next to it the
    count fit's r + (1 - r) rho_0."""
    import re

    from simulator.physics.experts import reuse_from_trace
    try:
        data = np.load(path)
    except (OSError, ValueError) as err:
        raise ValidationError(f"{path}: not a router-trace .npz ({err})") from None
    layers = sc.model.num_moe_layers
    per_r: dict[float, list[np.ndarray]] = {}
    for key in data.files:
        m = re.fullmatch(r"B(\d+)_K(\d+)_r([0-9.]+)", key)
        if not m or int(m.group(2)) == 0:
            continue
        ids, b = data[key], int(m.group(1))
        layer = (np.arange(len(ids)) // b) % layers
        per_r.setdefault(float(m.group(3)), []).append((ids, layer))
    rho0 = summary.get("routing_reuse_rho0")
    out = {}
    for r, parts in sorted(per_r.items()):
        est = [reuse_from_trace(ids[layer == li], sc.model.num_experts)[0]
               for ids, layer in parts for li in range(layers) if (layer == li).any()]
        out[f"{r:g}"] = {"trace": float(np.mean(est)),
                         "count_fit": None if rho0 is None else float(r + (1 - r) * rho0)}
    return out


def main(argv: list[str] | None = None) -> int:
    parser = OneLineParser(prog="python -m calibration.validate",
                                     description="Compare predicted ITL/goodput/K* with measured runs.")
    parser.add_argument("--measured", required=True, help="measured runs CSV (engine sweep or vLLM readers)")
    parser.add_argument("--scenario", required=True, help="scenario TOML of the measured setup")
    parser.add_argument("--calibration", help="calibration profile (overrides the scenario's)")
    parser.add_argument("--output-dir", type=path_given, help="write validation.md / .png / .json there")
    parser.add_argument("--update-profile", action="store_true",
                        help="write the fitted engine terms into the scenario's calibration profile")
    parser.add_argument("--traces", help="MoE: router traces .npz of the run (engine sweep --trace-output):"
                                         " report the reuse fitted from them next to the count fit")
    args = parser.parse_args(argv)
    return run_cli(lambda: _run(args))


def _run(args) -> int:
    from simulator.cli.common import check_output_dir, check_output_file, check_output_spares_inputs

    if args.output_dir:
        check_output_dir(args.output_dir)
        for name in REPORT_NAMES.values():  # the rows of a previous report, validated again: read, not replaced
            check_output_spares_inputs(args, "--output-dir", Path(args.output_dir) / name)
    sc = load_scenario(args.scenario, calibration=args.calibration)
    if args.update_profile:
        if sc.profile is None:
            raise ValidationError("--update-profile needs a scenario with a calibration profile")
        check_output_file(sc.profile.path, "--update-profile")

    result = validate(read_measured(args.measured), sc, origin=str(args.measured))
    if args.traces:
        result.summary["trace_reuse"] = trace_reuse(args.traces, sc, result.summary)
    print(result.markdown())
    if args.output_dir:
        paths = write_report(result, args.output_dir)
        print(f"wrote {', '.join(str(p) for p in paths.values())}", file=sys.stderr)
    if args.update_profile:
        print(f"updated {update_profile(result, sc.profile.path, str(args.measured))}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
