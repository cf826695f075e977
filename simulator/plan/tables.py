"""The prediction's tables (pandas): the grid one row per (batch size, K), the K* table one row per batch
size, and one cell's per-operator breakdown; :class:`simulator.plan.api.Prediction` serves them.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from simulator.plan.acceptance_risk import break_even_acceptance_length
from simulator.plan.grid import Grid
from simulator.plan.kstar_columns import MS
from simulator.plan.speedup_trust import speedup_trust_columns
from simulator.specs.scenario import Scenario


def grid_rows_table(g: Grid) -> pd.DataFrame:
    """The grid as a table: one row per (batch size, K)."""
    nb, nk = g.itl_s.shape
    df = pd.DataFrame({
        "batch_size": np.repeat(g.batch_sizes.astype(int), nk),
        "k": np.tile(g.ks, nb),
        "acceptance_length": np.tile(g.acceptance_length, nb),
        "verify_ms": np.broadcast_to(g.verify_s, g.itl_s.shape).ravel() * MS,
        "in_graph": np.broadcast_to(g.in_graph, g.itl_s.shape).ravel(),
        "draft_ms": np.broadcast_to(g.draft_s, g.itl_s.shape).ravel() * MS,
        "overhead_ms": np.broadcast_to(g.overhead_s, g.itl_s.shape).ravel() * MS,
        "itl_ms": g.itl_s.ravel() * MS,
        "goodput_per_seq": g.goodput_per_seq.ravel(),
        "throughput": g.throughput.ravel(),
        "bound": g.regime().ravel(),
        "memory_gb_per_gpu": g.memory_per_gpu_bytes.ravel() / 1e9,
        "fits_memory": g.fits_memory.ravel(),
    })
    if g.experts_touched is not None:
        df["experts_touched"] = g.experts_touched.ravel()
        df["expert_ms"] = g.op_time_s("moe_experts").ravel() * MS
    return df


def kstar_table(g: Grid, cols: dict, sc: Scenario, p_beats_plain: np.ndarray) -> pd.DataFrame:
    """One row per batch size of ``g`` (the grid read per batch size alone): the columns ``cols``
    (:func:`simulator.plan.kstar_columns.kstar_columns` and the engine schedule's K) with K*'s bound, the acceptance
    lengths that break even, the published speedups' error, how sure the decision is (``p_beats_plain``: P(K beats
    plain decoding) per (B, K) cell) and, for MoE, the experts K* loads."""
    idx = g.optimal_k_index()
    rows = np.arange(len(g.batch_sizes))
    safe = np.maximum(idx, 0)
    feasible = cols["fits_memory"]
    fits = g.fits_memory
    nan = np.nan
    i0, i_fix = g.k_index(0), g.k_index(sc.fixed_k)
    df = pd.DataFrame(cols)
    df["k_opt"] = pd.array(np.where(feasible, cols["k_opt"], 0), dtype="Int64")
    df.loc[~feasible, "k_opt"] = pd.NA  # <NA> where K* is -1
    df["k_schedule"] = pd.array(np.where(cols["k_schedule"] >= 0, cols["k_schedule"], 0), dtype="Int64")
    df.loc[cols["k_schedule"] < 0, "k_schedule"] = pd.NA
    df.insert(df.columns.get_loc("fits_memory"), "bound", np.where(feasible, g.regime()[rows, safe], "none fits"))
    # the acceptance length the fixed K needs to tie plain decoding here, and what it reaches
    df["break_even_acceptance_length"] = np.where(fits[:, i_fix] & fits[:, i0], break_even_acceptance_length(
        g.itl_s[:, i_fix], g.itl_s[:, i0]), nan)
    df["fixed_acceptance_length"] = float(g.acceptance_length[i_fix])
    df["kopt_break_even_acceptance_length"] = np.where(
        feasible & fits[:, i0], break_even_acceptance_length(np.where(feasible, g.itl_s[rows, safe], nan),
                                                             g.itl_s[:, i0]), nan)
    df = df.assign(**speedup_trust_columns(df, sc))  # the published speedups' error at each batch size
    # how sure the decision is under the engine terms' uncertainty (simulator.plan.decision_risk)
    p = p_beats_plain
    spec = g.ks > 0
    df["p_speculation_pays"] = np.where(feasible, np.nanmax(np.where(spec[None, :], p, -1.0), axis=1), nan) \
        if spec.any() else nan
    df["p_kopt_beats_plain"] = np.where(feasible & (idx > 0), p[rows, safe], nan)
    # K* is chosen at the terms' pessimistic quantile; the K best at their centre beside it
    df["k_centre"] = pd.array(np.where(feasible, g.centre_k(), 0), dtype="Int64")
    df.loc[~feasible, "k_centre"] = pd.NA
    sensitive = g.acceptance_sensitive()
    if sensitive is not None:
        df["k_opt_depends_on_acceptance"] = sensitive & feasible
    if g.experts_touched is not None:
        expert = g.op_time_s("moe_experts")
        at = lambda arr: np.where(feasible, arr[rows, safe], nan)  # noqa: E731
        df["experts_touched"] = at(g.experts_touched)
        df["experts_touched_plain"] = g.experts_touched[:, i0]
        df["expert_load_share"] = at(expert / g.verify.total_s)
    return df


def breakdown_table(sub: Grid) -> pd.DataFrame:
    """Per-operator time, FLOPs, bytes and bound of the draft and verify steps of the one-cell grid ``sub``;
    ``attrs["step_ms"]``: the step as the K* table prices it there, ``attrs["fits_memory"]``: whether it fits."""
    frames = []
    for step, cost in (("draft", sub.draft), ("verify", sub.verify.detail)):
        bound = cost.bound()[:, 0, 0]
        time = cost.time_s[:, 0, 0]
        flops = cost.flops[:, 0, 0]
        nbytes = cost.nbytes[:, 0, 0]
        with np.errstate(invalid="ignore", divide="ignore"):
            frames.append(pd.DataFrame({
                "step": step, "op": cost.names, "family": cost.families,
                "time_ms": time * MS, "compute_ms": cost.compute_s[:, 0, 0] * MS,
                "memory_ms": cost.memory_s[:, 0, 0] * MS, "launch_ms": cost.launch_s[:, 0, 0] * MS,
                "gflops": flops / 1e9, "mbytes": nbytes / 1e6,
                "intensity_flops_per_byte": np.where(nbytes > 0, flops / nbytes, np.nan),
                "attained_tflops": np.where(time > 0, flops / time / 1e12, 0.0),
                "bound": np.where(time > 0, bound, "-"),
            }))
    df = pd.concat(frames, ignore_index=True)
    df = df[(df.time_ms > 0) | (df.step == "verify")]
    total = df.time_ms.sum() + sub.overhead_s[0, 0] * MS
    df["share"] = df.time_ms / total if total > 0 else 0.0
    df = df.reset_index(drop=True)
    df.attrs["step_ms"] = {"verify": float(sub.verify_s[0, 0] * MS), "draft": float(sub.draft_s[0, 0] * MS),
                           "host": float(sub.overhead_s[0, 0] * MS), "step": float(sub.itl_s[0, 0] * MS)}
    df.attrs["fits_memory"] = bool(np.asarray(sub.fits_memory)[0, 0])
    return df
