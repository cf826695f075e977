"""TensorRT-LLM export: ``draft_len_schedule`` for the engine generation the version names.

trtllm    ``draft_len_schedule = {bs: K}`` with ``max_draft_len``. 1.2.x: key = lower bound,
          K(B) = value of the largest key <= B, key 1 required and = max_draft_len. 1.3.0rc8 and
          later: key = "up to", K(B) = value of the smallest key >= B, K = 0 above the last key,
          the smallest key's K = max_draft_len.
          Every file also carries the version's acceptance gate (simulator/plan/exports/gate.py):
          1.2.x ``acceptance_window`` / ``acceptance_length_threshold`` (AL - 1 per request),
          1.3+ ``acceptance_rate_window_size`` / ``acceptance_rate_threshold`` (a rate in [0, 1]),
          set at the break-even acceptance of the planned batch size.
"""
from __future__ import annotations

import json

import numpy as np

from simulator.errors import PlannerError
from simulator.plan.exports.common import (Export, KTable, _column, _context_warning, _list,
                                          _ranges_text, _tail_warnings, k_ranges, trtllm_generation)
from simulator.plan.exports.gate import break_even_acceptance_length, gate_keys

# drafters TensorRT-LLM runs in the target's own engine (one-model path): MTP and EAGLE-3 one-model
# (EagleDecodingConfig.eagle3_one_model defaults to True in llm_args.py of 1.2.x and 1.3)
ONE_MODEL_DRAFTS = ("mtp", "eagle", "eagle3")


def trtllm_lookup(payload: dict, batch_size: int, version: str) -> int:
    """K TensorRT-LLM uses for ``batch_size`` active requests (see the module docstring)."""
    sched = {int(a): int(v) for a, v in payload["draft_len_schedule"].items()}
    keys = sorted(sched)
    if trtllm_generation(version) == "lower":
        below = [x for x in keys if x <= batch_size]
        return sched[below[-1]] if below else 0
    above = [x for x in keys if x >= batch_size]
    return sched[above[0]] if above else 0


def _gate(table: KTable, b: np.ndarray, k1: np.ndarray, gen: str, planned_batch_size: int | None) -> tuple[dict, list, list]:
    """(gate keys, notes, warnings) at the planned batch size: the largest one the schedule still
    speculates at unless given; window 0 (the gate off) where nothing speculates or no grid is held."""
    off = {"acceptance_window": 0, "acceptance_length_threshold": 0.0} if gen == "lower" else \
        {"acceptance_rate_window_size": 0, "acceptance_rate_threshold": 0.0}
    if table.itl_s is None or table.goodput is None:
        return off, ["acceptance gate off (window 0): no step-time grid to set its break-even threshold from"], []
    on = np.flatnonzero(k1 >= 1)
    if planned_batch_size is None:
        i = int(on[-1]) if on.size else 0
    else:
        i = int(np.argmin(np.abs(b - int(planned_batch_size))))
    kk, j = int(k1[i]), table.context_index
    if kk < 1:
        return off, [f"acceptance gate off (window 0): K = 0 at the planned batch size {b[i]}"], []
    ki, k0 = int(np.flatnonzero(table.ks == kk)[0]), int(np.flatnonzero(table.ks == 0)[0])
    itl = table.itl_s[i, :, j]
    al = float(table.goodput[i, ki, j] * itl[ki])
    al_star = float(break_even_acceptance_length(itl[ki], itl[k0]))
    keys, rule = gate_keys(gen, al, al_star, kk, int(b[i]))
    notes = [f"acceptance gate at the planned batch size {b[i]} with K={kk}: break-even acceptance length"
             f" AL* = ITL(K)/ITL(0) = {al_star:.3f} (planned AL {al:.3f}); {rule}; below it TensorRT-LLM turns"
             " speculation off for good (tensorrt_llm/_torch/speculative/speculation_gate.py)"]
    warns = [] if planned_batch_size is None or abs(int(b[i]) - int(planned_batch_size)) == 0 else \
        [f"planned batch size {planned_batch_size} is not in the grid: the gate uses the nearest, {b[i]}"]
    return keys, notes, warns


def _gate_path_warning(gen: str, draft_method: str | None) -> list[str]:
    """PR #12905 (description): the 1.2.x gate ran on the two-model path; 1.3+ runs it on the
    one-model path only (removed from the two-model path)."""
    if draft_method is None:
        return []
    one_model = draft_method in ONE_MODEL_DRAFTS
    if gen == "lower" and one_model:
        return [f"the 1.2.x acceptance gate runs on the two-model path: with the one-model {draft_method} drafter"
                " acceptance_window / acceptance_length_threshold may have no effect (TensorRT-LLM PR #12905)"]
    if gen == "upto" and not one_model:
        return [f"the 1.3+ acceptance gate runs on the one-model path only (TensorRT-LLM PR #12905 removed it from"
                f" the two-model path): with the {draft_method} drafter the acceptance_rate_* keys have no effect"]
    return []


def _zero_tier_warning(version: str, gen: str, k1: np.ndarray, draft_method: str | None) -> list[str]:
    """TensorRT-LLM PR #16888 (open): on the one-model path a schedule's K = 0 tier runs as K = 1."""
    has_zero = gen == "upto" or (k1 == 0).any()
    if not has_zero or (draft_method is not None and draft_method not in ONE_MODEL_DRAFTS):
        return []
    who = f"the {draft_method} drafter" if draft_method else "one-model drafters (MTP, EAGLE-3 one-model)"
    return [f"K = 0 in this schedule may run as K = 1 for {who}: TensorRT-LLM PR #16888 ('Keep drafting alive"
            " when dynamic draft length hits its floor', one-model path) raises the zero tier to 1 on builds that"
            f" include it; check {version}'s tensorrt_llm/_torch/speculative/utils.py before relying on K = 0"]


def _engine_ks(table: KTable, b: np.ndarray, k1: np.ndarray, gen: str, version: str) -> tuple[np.ndarray, int, list]:
    """K* moved to what TensorRT-LLM can hold: (K per batch size, max_draft_len, warnings)."""
    warns = []
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
    return k1, cap, warns


def _schedule_keys(ranges: list, gen: str, version: str) -> tuple[dict, str, list]:
    """draft_len_schedule's keys for the generation: (schedule, what happens above it, rows per range)."""
    if gen == "lower":
        sched = {r[0]: r[2] for r in ranges}
        last = ranges[-1]
        above = f"TensorRT-LLM {version} keeps K={last[2]} above batch size {last[1]} (the largest key's K)"
        rows = [{"batch sizes": _ranges_text(r), "K": r[2]} for r in ranges]
        rows.append({"batch sizes": f"> {last[1]}", "K": f"{last[2]} (largest key's K carries on)"})
        return sched, above, rows
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
    return sched, above, rows


def _generation_notes(gen: str, version: str) -> list[str]:
    """What the keys mean in this generation, and where the format was checked."""
    meaning = "lower bounds (K of the largest key <= batch size)" if gen == "lower" else \
        "'up to' (K of the smallest key >= batch size; K = 0 above the largest key)"
    notes = [f"keys are {meaning} in TensorRT-LLM {version}; the same file means different K in the other"
             " generation (1.2.x vs 1.3.0rc8+)",
             "TensorRT-LLM wheels are not on PyPI: this format was checked against the engine's source"
             " (tensorrt_llm/llmapi/llm_args.py validate_draft_len_schedule_and_sort and the runtime lookup),"
             " not a released wheel"]
    if gen == "upto":
        notes.append("draft_len_schedule and max_concurrency are mutually exclusive in this generation")
        notes.append("acceptance_rate_* keys: PR #12905 (merged 2026-04-09) renamed acceptance_window /"
                     " acceptance_length_threshold inside the 1.3.0rc line; an rc built before it reads the 1.2.x"
                     " keys (--export-version 1.2.1 writes them)")
    return notes


def _trtllm(table: KTable, version: str, planned_batch_size: int | None = None,
            draft_method: str | None = None) -> Export:
    gen = trtllm_generation(version)
    k2d = np.array(table.k_opt)
    b, k1 = _column(table, k2d)
    warns = _context_warning(table, k2d)
    feasible = k1 >= 0
    if not feasible.any():
        raise PlannerError(f"no batch size fits in memory at context {table.context_len}: nothing to export")
    k1, cap, cap_warns = _engine_ks(table, b, k1, gen, version)
    warns += cap_warns
    ranges = k_ranges(b, k1)
    max_draft_len = cap
    sched, above, rows = _schedule_keys(ranges, gen, version)
    warns += _tail_warnings(table, k1, above + "; extend --batch-sizes to max_batch_size to plan them")
    gate, gate_notes, gate_warns = _gate(table, b, k1, gen, planned_batch_size)
    warns += gate_warns + _gate_path_warning(gen, draft_method) + _zero_tier_warning(version, gen, k1, draft_method)
    payload = {"max_draft_len": max_draft_len, "draft_len_schedule": {str(key): int(v) for key, v in sorted(sched.items())}}
    payload |= gate
    notes = _generation_notes(gen, version) + gate_notes
    extra = ", ".join(f"{key}: {v}" for key, v in gate.items())
    use = "speculative_config: {max_draft_len: %d, draft_len_schedule: %s, %s}  (trtllm-serve --extra_llm_api_options FILE.yaml)" % (
        max_draft_len, json.dumps(payload["draft_len_schedule"]), extra)
    return Export("trtllm", version, payload, rows, warns, notes, use)
