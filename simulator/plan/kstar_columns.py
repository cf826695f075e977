"""The K* table's columns of a grid: per batch size, K* and what it gives beside plain decoding and a fixed K."""
from __future__ import annotations

import numpy as np

from simulator.plan.grid import Grid

MS = 1e3


def kstar_columns(g: Grid, fixed_k: int) -> dict:
    """Per batch size, as numpy arrays: K* (-1 where none fits memory) and the goodput, step time and
    speedups at it (as the engine runs it: at K* = 0 on an engine that still runs the drafter's extend pass there,
    that step, Grid.as_engine_runs), plain decoding and the fixed K beside it (NaN where they do not fit)."""
    idx = g.optimal_k_index()
    run = g.as_engine_runs
    rows = np.arange(len(g.batch_sizes))
    safe = np.maximum(idx, 0)
    feasible = idx >= 0
    fits = g.fits_memory
    nan = np.nan

    def at(arr, col):
        return np.where(feasible, arr[rows, col], nan)

    good = at(run.goodput_per_seq, safe)
    i0, i_fix = g.k_index(0), g.k_index(fixed_k)
    plain = np.where(fits[:, i0], g.goodput_per_seq[:, i0], nan)
    fixed = np.where(fits[:, i_fix], g.goodput_per_seq[:, i_fix], nan)
    with np.errstate(invalid="ignore", divide="ignore"):
        return {
            "batch_size": g.batch_sizes.astype(int),
            "k_opt": g.k_star,
            "goodput_per_seq": good,
            "throughput": good * g.batch_sizes,
            "itl_ms": at(run.itl_s, safe) * MS,
            # what a user waits per token: step time / tokens a step commits = 1 / goodput per sequence
            "token_latency_ms": MS / good,
            "plain_token_latency_ms": MS / plain,
            "acceptance_length": np.where(feasible, g.acceptance_length[safe], nan),
            "plain_goodput_per_seq": plain,
            "fixed_goodput_per_seq": fixed,
            "speedup_vs_plain": good / plain,
            "speedup_vs_fixed": good / fixed,
            "fixed_vs_plain": fixed / plain,
            "fits_memory": feasible,
            "memory_gb_per_gpu": at(g.memory_per_gpu_bytes, safe) / 1e9,
        }
