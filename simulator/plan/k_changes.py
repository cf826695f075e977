"""Why K* changes where it does: at each batch size where the schedule's K changes, what the old and
the new K cost against plain decoding there and what they gain.

For a draft length K at batch size B (both read from the grid, nothing new is priced)::

    step ratio  r(B, K) = ITL(B, K) / ITL(B, 0)     also the acceptance length K needs to tie plain
    reached     AL(K)                                 from the scenario's acceptance rates
    vs plain    AL(K) / r(B, K)                       goodput of K over plain decoding

K* moves from K_a to K_b at B because K_b's goodput there is the better one (within the schedule's
tolerance), or because K_a no longer fits in memory at B (its KV cache with K_a + 1 verification slots per
sequence): that is its own reason, "out of memory", never mixed with a bandwidth-bound step. Which term of the step made K_a lose is the regime of the larger K's cell (compute-,
memory-, launch- or host-bound) and, for MoE, how many experts each K loads per MoE layer: below
every expert loaded, each extra draft token pays for new expert weights; once a K loads them all,
more positions ride on them (docs/moe.md, "Why K* rises, then falls").
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike


def change_points(k_star: np.ndarray) -> np.ndarray:
    """Indices i where K*(i) != K*(i - 1), both feasible (K* >= 0; -1 where nothing fits memory)."""
    k = np.asarray(k_star)
    i = np.flatnonzero(k[1:] != k[:-1]) + 1
    return i[(k[i] >= 0) & (k[i - 1] >= 0)]


OUT_OF_MEMORY = "out of memory"


@dataclass(frozen=True)
class ScheduleGrid:
    """What :func:`k_changes` reads of a (n_batch, n_k) grid: its axes, step times [s], the acceptance
    length of each K and the schedule K* per batch size; ``regime`` (the bound of each cell),
    ``experts_touched`` (MoE: experts loaded per layer) and ``fits_memory`` where known."""
    batch_sizes: ArrayLike
    ks: ArrayLike
    itl_s: ArrayLike
    acceptance_length: ArrayLike
    k_star: np.ndarray
    regime: ArrayLike | None = None
    experts_touched: ArrayLike | None = None
    fits_memory: ArrayLike | None = None


def k_changes(grid: ScheduleGrid, graph_batch=None) -> list[dict]:
    """One record per change of K* over the batch sizes of ``grid``:
    ``{"batch_size", "previous_batch_size", "k_from", "k_to", "cells": [...]}`` with one cell per K of
    the two that is > 0: ``{"k", "step_vs_plain", "acceptance_length", "vs_plain", "bound",
    "experts_touched"}`` (bound and experts where given), plus ``experts_touched_plain`` for MoE.
    ``graph_batch(B, K)``: (the pass's size, the CUDA-graph size it is padded to) in the engine's graph
    unit (sequences or tokens); where plain's or a K's is padded the record carries ``padded``: {K: the
    padded size} of those padded. ``fits_memory`` (n_batch, n_k): a K that does not fit at B gets
    ``fits_memory`` False and the bound "out of memory" (its goodput there is what it would give)."""
    batch_sizes, ks, k_star = np.asarray(grid.batch_sizes), np.asarray(grid.ks), grid.k_star
    itl_s, al = np.asarray(grid.itl_s, dtype=float), np.asarray(grid.acceptance_length, dtype=float)
    regime, experts_touched, fits_memory = grid.regime, grid.experts_touched, grid.fits_memory
    col = {int(k): j for j, k in enumerate(ks)}
    j0 = col.get(0)
    out = []
    for i in change_points(k_star):
        k_from, k_to = int(k_star[i - 1]), int(k_star[i])
        rec = {"batch_size": int(batch_sizes[i]), "previous_batch_size": int(batch_sizes[i - 1]),
               "k_from": k_from, "k_to": k_to, "cells": []}
        for k in sorted({k_from, k_to} - {0}):
            j = col[k]
            ratio = float(itl_s[i, j] / itl_s[i, j0]) if j0 is not None else float("nan")
            cell = {"k": k, "step_vs_plain": ratio, "acceptance_length": float(al[j]),
                    "vs_plain": float(al[j]) / ratio}
            if regime is not None:
                cell["bound"] = str(regime[i, j])
            if fits_memory is not None:
                cell["fits_memory"] = bool(fits_memory[i, j])
                if not cell["fits_memory"]:
                    cell["bound"] = OUT_OF_MEMORY
            if experts_touched is not None:
                cell["experts_touched"] = float(experts_touched[i, j])
            rec["cells"].append(cell)
        if experts_touched is not None and j0 is not None:
            rec["experts_touched_plain"] = float(experts_touched[i, j0])
        if graph_batch is not None:
            b = int(batch_sizes[i])
            sizes = {k: graph_batch(b, k) for k in sorted({0, k_from, k_to})}
            if any(padded != size for size, padded in sizes.values()):
                rec["padded"] = {k: int(padded) for k, (size, padded) in sizes.items() if padded != size}
        out.append(rec)
    return out


BOUND_WORDS = {"compute": "compute-bound", "memory": "HBM-bandwidth-bound", "comm": "communication-bound",
               "launch": "launch-bound", "overhead": "host-bound"}


def describe_change(rec: dict, num_experts: int | None = None, graph_unit: str = "sequences") -> str:
    """One line, e.g. 'B=8: K* 1 -> 0: K=1 0.96x plain (step 1.72x plain, acceptance length 1.65; 51 of
    128 experts a layer vs 29 at K=0; memory-bound)', with the CUDA-graph sizes where they pad."""
    parts = []
    for c in rec["cells"]:
        if c.get("fits_memory") is False:
            parts.append(f"K={c['k']} does not fit in memory here (its KV cache with {c['k'] + 1} verification slots"
                         f" per sequence; it would give {c['vs_plain']:.2f}x plain)")
            continue
        why = [f"step {c['step_vs_plain']:.2f}x plain, acceptance length {c['acceptance_length']:.2f}"]
        if "experts_touched" in c and num_experts:
            why.append(f"{c['experts_touched']:.0f} of {num_experts} experts a layer vs"
                       f" {rec['experts_touched_plain']:.0f} at K=0")
        if c.get("bound"):
            why.append(BOUND_WORDS.get(c["bound"], c["bound"]))
        parts.append(f"K={c['k']} {c['vs_plain']:.2f}x plain ({'; '.join(why)})")
    oom = any(c.get("fits_memory") is False for c in rec["cells"])
    text = (f"B={rec['batch_size']}: K* {rec['k_from']} -> {rec['k_to']}"
            + (" (out of memory)" if oom else "") + ": " + ", ".join(parts))
    pads = rec.get("padded")
    if pads:  # a change made by CUDA-graph padding, not by the work itself
        sizes = [f"{'plain' if k == 0 else f'K={k}'} to {v}" for k, v in pads.items()]
        text += f"; its CUDA graphs are padded: {sizes[0]} {graph_unit}" + "".join(f", {x}" for x in sizes[1:])
    return text
