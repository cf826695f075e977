"""vLLM exports: the released 3-item per-batch-size form and the 5-item context-aware proposal.

vllm      ``num_speculative_tokens_per_batch_size = [[bs_lo, bs_hi, K], ...]`` (vLLM >= 0.24.0):
          inclusive ranges, the first starting at 1, no overlaps; K(B) = K of the range holding B;
          above the last range the LAST K carries on; every K is capped at num_speculative_tokens.
vllm-ctx  ``[[bs_lo, bs_hi, ctx_lo, ctx_hi, K], ...]``: the context-aware form of open vLLM PR
          #48944 (a proposal; no release reads it). Rows form a rectangular grid.
"""
from __future__ import annotations

import json

import numpy as np

from simulator.errors import PlannerError
from simulator.plan.exports.common import (Export, KTable, _column, _context_warning, _ranges_text,
                                          _tail_warnings, k_ranges)


def vllm_lookup(payload: dict, batch_size: int) -> int:
    """K vLLM (>= 0.24.0) schedules for ``batch_size`` requests: the range holding it, a gap takes
    the previous range's K, above the last range the last K; capped at num_speculative_tokens."""
    sched = sorted(payload["num_speculative_tokens_per_batch_size"])
    k = sched[0][2]
    for lo, hi, kk in sched:
        if batch_size >= lo:
            k = kk
    return min(k, payload["num_speculative_tokens"])


def _vllm(table: KTable, version: str, method_cfg: dict | None) -> Export:
    k2d = table.k_opt
    b, k1 = _column(table, k2d)
    ranges = k_ranges(b, k1)
    if not ranges:
        raise PlannerError(f"no batch size fits in memory at context {table.context_len}: nothing to export")
    k_top = max(r[2] for r in ranges)
    warns = _context_warning(table, k2d)
    if k_top == 0:
        warns.append("K* = 0 at every batch size: speculation never pays here; serving without a"
                     " speculative_config is faster (vLLM needs num_speculative_tokens >= 1, so the file sets 1"
                     " with K = 0 everywhere)")
    payload = dict(method_cfg or {})
    payload |= {"num_speculative_tokens": max(k_top, 1), "num_speculative_tokens_per_batch_size": ranges}
    last = ranges[-1]
    warns += _tail_warnings(table, k1, f"vLLM keeps K={last[2]} for every batch size above {last[1]} (up to"
                                       " max_num_seqs); extend --batch-sizes to max_num_seqs to plan them")
    rows = [{"batch sizes": _ranges_text(r), "K": r[2]} for r in ranges]
    rows.append({"batch sizes": f"> {last[1]}", "K": f"{last[2]} (last K carries on)"})
    notes = [f"num_speculative_tokens = {payload['num_speculative_tokens']} (the largest K in the table, so no"
             " K is capped); vLLM's V2 model runner captures CUDA graphs for each distinct K"
             f" ({len({r[2] for r in ranges})} here)",
             "vLLM >= 0.26 drops the schedule (static K, with a warning) when data_parallel_size > 1, and on"
             " model runner V1 keeps it only for ngram, eagle, eagle3, mtp, draft_model and dflash"]
    use = ("vllm serve MODEL --speculative-config '" + json.dumps(payload) + "'")
    return Export("vllm", version, payload, rows, warns, notes, use)


def vllm_ctx_lookup(payload: dict, batch_size: int, context_len: int) -> int:
    """K of the 5-item proposal form (our reading of PR #48944): the row whose batch range holds
    the batch size (above the last: the last) and whose context range holds the context (below the
    first: the first; above the last: the last); capped at num_speculative_tokens."""
    rows = payload["num_speculative_tokens_per_batch_size"]
    b_starts = sorted({r[0] for r in rows})
    c_starts = sorted({r[2] for r in rows})
    b0 = max([s for s in b_starts if s <= batch_size] or [b_starts[0]])
    c0 = max([s for s in c_starts if s <= context_len] or [c_starts[0]])
    hit = [r[4] for r in rows if r[0] == b0 and r[2] == c0]
    return min(hit[0], payload["num_speculative_tokens"])


def fill_infeasible(k: np.ndarray) -> tuple[np.ndarray, int]:
    """(K table with every -1 cell (nothing fits) replaced by the K of the largest feasible batch size
    in its context column, or, where a column has none, the column to its left; cells filled)."""
    k = np.array(k, dtype=int)
    bad = k < 0
    for j in range(k.shape[1]):
        col = k[:, j]
        ok = np.flatnonzero(col >= 0)
        if ok.size:
            last = np.maximum.accumulate(np.where(col >= 0, np.arange(len(col)), -1))
            col[:] = np.where(last >= 0, col[np.maximum(last, 0)], col[ok[0]])
        elif j > 0:
            col[:] = k[:, j - 1]
    if (k < 0).any():  # leading columns with nothing feasible: take the first feasible column
        first = np.flatnonzero((k >= 0).all(axis=0))[0]
        k[:, : first] = k[:, first: first + 1]
    return k, int(bad.sum())


def _vllm_ctx(table: KTable, version: str, method_cfg: dict | None) -> Export:
    """Rectangular grid: batch breakpoints = the union over contexts, context breakpoints = the
    union over batch sizes (every batch range splits context at the same boundaries)."""
    b = np.asarray(table.batch_sizes, dtype=int)
    c = np.asarray(table.context_lens, dtype=int)
    k = np.asarray(table.k_opt, dtype=int)
    order_b, order_c = np.argsort(b), np.argsort(c)
    b, c, k = b[order_b], c[order_c], k[order_b][:, order_c]
    warns = []
    if (k < 0).all():
        raise PlannerError("no batch size fits in memory at any context length: nothing to export")
    k, filled = fill_infeasible(k)
    if filled:
        warns.append(f"{filled} (batch size, context) cells do not fit in memory: the engine cannot run them, so"
                     " they repeat the K of the largest batch size that fits at that context (fewer rows)")
    row_change = np.concatenate([[True], (k[1:] != k[:-1]).any(axis=1)])
    col_change = np.concatenate([[True], (k[:, 1:] != k[:, :-1]).any(axis=0)])
    bi, ci = np.flatnonzero(row_change), np.flatnonzero(col_change)
    b_lo = [1] + [int(b[i]) for i in bi[1:]]
    b_hi = [int(b[i]) - 1 for i in bi[1:]] + [int(b[-1])]
    c_lo = [1] + [int(c[j]) for j in ci[1:]]
    c_hi = [int(c[j]) - 1 for j in ci[1:]] + [int(c[-1])]
    rows = [[b_lo[x], b_hi[x], c_lo[y], c_hi[y], int(k[bi[x], ci[y]])]
            for x in range(len(bi)) for y in range(len(ci))]
    k_top = max(r[4] for r in rows)
    payload = dict(method_cfg or {})
    payload |= {"num_speculative_tokens": max(k_top, 1), "num_speculative_tokens_per_batch_size": rows}
    notes = ["PROPOSAL: 5-item rows are the format of open vLLM PR #48944 (RFC #48627); no released vLLM reads"
             " them (0.24.0-0.33.0 reject them: 'Tuple should have at most 3 items'). Rows form a rectangular"
             " grid as the RFC requires",
             f"context ranges: a listed context's K holds up to the next listed context; contexts above {c[-1]}"
             " are assumed to keep the last range's K (the proposal's rule above the last range was not seen)"]
    md = [{"batch sizes": _ranges_text((r[0], r[1])), "context": _ranges_text((r[2], r[3])), "K": r[4]}
          for r in rows]
    warns.append(f"the grid ends at batch size {b[-1]}: above it the last batch range's K is assumed to carry on"
                 " (as the released 3-item form does)")
    use = ("vllm serve MODEL --speculative-config '" + json.dumps(payload) + "'  (a build of PR #48944 only)")
    return Export("vllm-ctx", version, payload, md, warns, notes, use)
