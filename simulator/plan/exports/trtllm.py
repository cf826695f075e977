"""TensorRT-LLM export: ``draft_len_schedule`` for the engine generation the version names.

trtllm    ``draft_len_schedule = {bs: K}`` with ``max_draft_len``. 1.2.x: key = lower bound,
          K(B) = value of the largest key <= B, key 1 required and = max_draft_len. 1.3.0rc8 and
          later: key = "up to", K(B) = value of the smallest key >= B, K = 0 above the last key,
          the smallest key's K = max_draft_len.
"""
from __future__ import annotations

import json

import numpy as np

from simulator.errors import PlannerError
from simulator.plan.exports.common import (Export, KTable, _column, _context_warning, _list,
                                          _ranges_text, _tail_warnings, k_ranges, trtllm_generation)


def trtllm_lookup(payload: dict, batch_size: int, version: str) -> int:
    """K TensorRT-LLM uses for ``batch_size`` active requests (see the module docstring)."""
    sched = {int(a): int(v) for a, v in payload["draft_len_schedule"].items()}
    keys = sorted(sched)
    if trtllm_generation(version) == "lower":
        below = [x for x in keys if x <= batch_size]
        return sched[below[-1]] if below else 0
    above = [x for x in keys if x >= batch_size]
    return sched[above[0]] if above else 0


def _trtllm(table: KTable, version: str) -> Export:
    gen = trtllm_generation(version)
    k2d = np.array(table.k_opt)
    b, k1 = _column(table, k2d)
    warns = _context_warning(table, k2d)
    feasible = k1 >= 0
    if not feasible.any():
        raise PlannerError(f"no batch size fits in memory at context {table.context_len}: nothing to export")
    j = table.context_index
    # 1. every K must be <= max_draft_len = the K of the smallest key (B = 1)
    cap = int(k1[0])
    if cap <= 0:
        raise PlannerError(f"--format trtllm: K* = 0 at batch size 1 (context {table.context_len}), and TensorRT-LLM"
                           " needs the smallest key's K = max_draft_len >= 1: speculation does not pay here, serve"
                           " without it (or use --format vllm, which can hold K = 0 everywhere)")
    if (k1 > cap).any():
        over = b[k1 > cap]
        k1 = np.where(k1 > cap, table.best_k(table.ks <= cap)[:, j], k1)
        warns.append(f"K* exceeds the K at batch size 1 ({cap}) at batch sizes {_list(over)}: TensorRT-LLM"
                     " requires every K <= max_draft_len = the smallest key's K, so those get the best K <= "
                     f"{cap} (runner-up)")
    # 2. the 'up to' generation: no return from K = 0 to K > 0
    if gen == "upto":
        pos = np.flatnonzero(k1 > 0)
        interior = (k1 == 0) & (np.arange(len(k1)) < (pos.max() if pos.size else -1))
        if interior.any():
            zeros = b[interior]
            allowed = (table.ks >= 1) & (table.ks <= cap)
            k1 = np.where(interior, table.best_k(allowed)[:, j], k1)
            warns.append(f"K* = 0 at batch sizes {_list(zeros)} followed by K > 0 at larger ones: in TensorRT-LLM"
                         f" {version} ('up to' keys) K = 0 is the tier above the largest key (speculation off),"
                         " and a schedule that returns from 0 is not a documented use, so those get the best"
                         " K >= 1 (runner-up)")
    ranges = k_ranges(b, k1)
    max_draft_len = cap
    if gen == "lower":
        sched = {r[0]: r[2] for r in ranges}
        last = ranges[-1]
        above = f"TensorRT-LLM {version} keeps K={last[2]} above batch size {last[1]} (the largest key's K)"
        rows = [{"batch sizes": _ranges_text(r), "K": r[2]} for r in ranges]
        rows.append({"batch sizes": f"> {last[1]}", "K": f"{last[2]} (largest key's K carries on)"})
    else:
        # a key at both ends of every range: the same K under 'up to' AND lower-bound lookups within
        # the grid (some 1.3 builds' two-model drafter still looks keys up as lower bounds)
        sched = {}
        for lo, hi, kk in ranges:
            sched[lo] = kk
            sched[hi] = kk
        if ranges[-1][2] == 0 and len(ranges) > 1:
            lo, hi, _ = ranges[-1]
            sched.pop(hi, None)  # the implicit tier above the last key is already 0
        last = ranges[-1]
        above = (f"TensorRT-LLM {version} turns speculation off (K=0) above the largest key {max(sched)}"
                 if last[2] > 0 else f"K=0 above batch size {last[0] - 1}")
        rows = [{"batch sizes": _ranges_text(r), "K": r[2]} for r in ranges]
        rows.append({"batch sizes": f"> {last[1]}", "K": f"0 (above the largest key {max(sched)}: speculation off)"})
    warns += _tail_warnings(table, k1, above + "; extend --batch-sizes to max_batch_size to plan them")
    payload = {"max_draft_len": max_draft_len, "draft_len_schedule": {str(key): int(v) for key, v in sorted(sched.items())}}
    meaning = "lower bounds (K of the largest key <= batch size)" if gen == "lower" else \
        "'up to' (K of the smallest key >= batch size; K = 0 above the largest key)"
    notes = [f"keys are {meaning} in TensorRT-LLM {version}; the same file means different K in the other"
             " generation (1.2.x vs 1.3.0rc8+)",
             "TensorRT-LLM wheels are not on PyPI: this format was checked against the engine's source"
             " (tensorrt_llm/llmapi/llm_args.py validate_draft_len_schedule_and_sort and the runtime lookup),"
             " not a released wheel"]
    if gen == "upto":
        notes.append("draft_len_schedule and max_concurrency are mutually exclusive in this generation")
    use = "speculative_config: {max_draft_len: %d, draft_len_schedule: %s}  (trtllm-serve --extra_llm_api_options FILE.yaml)" % (
        max_draft_len, json.dumps(payload["draft_len_schedule"]))
    return Export("trtllm", version, payload, rows, warns, notes, use)
