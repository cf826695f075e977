"""SGLang exports: the adaptive config (per-batch-size candidate steps) and the DSpark step-cost table.

sglang    ``--speculative-adaptive-config FILE``: ``{"<bs>": {"candidate_steps": [...]}}``, key =
          lower bound of the (CUDA-graph padded) batch size (SGLang >= 0.5.13; K = 0 from 0.5.14).
sglang-sps ``--speculative-dspark-sps-table-path FILE``: ``{"sample_batch_tokens": [...],
          "sample_steps_per_sec": [...], "max_batch_tokens": N}``, floor lookup on batch tokens
          (SGLang >= 0.5.16).
"""
from __future__ import annotations

import numpy as np

from simulator.errors import PlannerError
from simulator.plan.exports.common import (Export, KTable, _column, _context_warning, _list,
                                          _ranges_text, _tail_warnings, k_ranges, parse_version)


def pad_to_capture(batch_size: int, cuda_graph_bs) -> int:
    """SGLang's padding before routing: the next captured batch size >= B (B itself above the largest)."""
    if not cuda_graph_bs:
        return int(batch_size)
    sizes = sorted(int(x) for x in cuda_graph_bs)
    for s in sizes:
        if s >= batch_size:
            return s
    return int(batch_size)


def is_launch_flags(payload: dict) -> bool:
    """Whether an SGLang export is the launch flags of one fixed K (a tree or block draft, which the adaptive
    config cannot drive) rather than an adaptive config keyed by batch size."""
    return not any(str(x).isdigit() for x in payload)


def sglang_lookup(payload: dict, batch_size: int, cuda_graph_bs=None) -> list[int]:
    """Candidate steps of the slot SGLang routes to: pad B to the next captured size, then the slot
    of the largest key <= padded B (below the smallest key: the smallest key's slot)."""
    keys = sorted(int(x) for x in payload if str(x).isdigit())
    p = pad_to_capture(batch_size, cuda_graph_bs)
    below = [x for x in keys if x <= p]
    key = below[-1] if below else keys[0]
    return sorted(set(payload[str(key)]["candidate_steps"]))


def _padded_ks(b: np.ndarray, k1: np.ndarray, cuda_graph_bs) -> tuple[np.ndarray, list]:
    """K* of the padded batch size for every batch size (and the warning when padding moves any)."""
    # the engine pads B up to the next captured CUDA-graph size before routing, and the step then runs
    # at the padded size: K*(padded B) is the best K for every B that pads to it
    listed = list(b)
    padded = np.array([pad_to_capture(x, cuda_graph_bs) for x in b])
    eff = k1.copy()
    for i, p in enumerate(padded):
        if k1[i] < 0:
            continue
        # K* at the padded size; where the grid lacks it (or it does not fit), the K* of the largest
        # feasible batch size that pads to the same size: one K per padded size either way
        same = np.flatnonzero((padded == p) & (b <= p) & (k1 >= 0))
        eff[i] = k1[same[-1]]
    changed = [int(x) for x, p in zip(listed, padded) if p != x]
    if not changed:
        return eff, []
    return eff, [f"SGLang pads a batch up to the next captured CUDA-graph size ({len(cuda_graph_bs)}"
                 f" sizes up to {max(cuda_graph_bs)}) before choosing a slot, so each batch size gets the"
                 " K* of its padded size (the step runs at that size)"]


def _slots(table: KTable, b: np.ndarray, ranges: list, v, candidates: str, tolerance: float) -> tuple[dict, list]:
    """One slot per range of K*: (payload, rows); ``neighbors`` adds K*-1 and K*+1 where both are near-best."""
    j = table.context_index
    payload: dict = {}
    rows = []
    for lo, hi, kk in ranges:
        cand = [kk]
        if candidates == "neighbors" and table.goodput is not None:
            # goodput at the range's first batch size, relative to the K the slot starts at
            i = int(np.searchsorted(b, max(lo, b[0])))
            at = {int(x): float(gv) for x, gv in zip(table.ks, table.goodput[i, :, j])}
            best = at.get(kk, np.nan)
            lo_k, hi_k = kk - 1, kk + 1
            min_k = 0 if v >= parse_version("0.5.14") else 1
            if lo_k >= min_k and lo_k in at and hi_k in at and np.isfinite(best) \
                    and at[lo_k] >= (1 - tolerance) * best and at[hi_k] >= (1 - tolerance) * best:
                cand = [lo_k, kk, hi_k]
        payload[str(lo)] = {"candidate_steps": cand}
        rows.append({"batch sizes": _ranges_text((lo, hi)), "candidate_steps": cand, "K at start": kk})
    return payload, rows


def _sglang_notes(payload: dict, cuda_graph_bs) -> list[str]:
    """How SGLang reads the slots, and what it needs for adaptive speculation."""
    union = sorted({s for e in payload.values() for s in e["candidate_steps"]})
    notes = ["a slot with one candidate is a fixed K; with several, SGLang starts at --speculative-num-steps"
             " when it is a candidate of the slot (else the slot's middle candidate) and then moves by the EMA"
             " of accepted lengths",
             f"without --speculative-num-steps SGLang starts from the middle of all candidates ({union[len(union) // 2]})"
             " and requires the flag, if given, to be one of them",
             "adaptive speculation needs EAGLE/EAGLE3 with topk 1 and no attention-DP, two-batch-overlap or"
             " multi-layer EAGLE; otherwise SGLang switches it off with a warning"]
    if not cuda_graph_bs:
        notes.append("no CUDA-graph capture sizes given: routing assumed on the real batch size; with graphs"
                     " on, SGLang pads first (pass the capture sizes for an exact file)")
    return notes


def _sglang(table: KTable, version: str, cuda_graph_bs=None, candidates: str = "kstar",
            tolerance: float = 0.02) -> Export:
    v = parse_version(version)
    k2d = np.array(table.k_opt)
    b, k1 = _column(table, k2d)
    warns = _context_warning(table, k2d)
    j = table.context_index
    if not (k1 >= 0).any():
        raise PlannerError(f"no batch size fits in memory at context {table.context_len}: nothing to export")
    if v < parse_version("0.5.14") and (k1 == 0).any():
        zeros = b[k1 == 0]
        k1 = np.where(k1 == 0, table.best_k(table.ks >= 1)[:, j], k1)
        warns.append(f"K* = 0 at batch sizes {_list(zeros)}, but SGLang {version} requires positive"
                     " candidate_steps (K = 0 is accepted from 0.5.14): those get the best K >= 1; target"
                     " 0.5.14+ to switch speculation off there")
    if cuda_graph_bs:
        k1, pad_warns = _padded_ks(b, k1, cuda_graph_bs)
        warns += pad_warns
    ranges = k_ranges(b, k1)
    payload, rows = _slots(table, b, ranges, v, candidates, tolerance)
    last = ranges[-1]
    rows.append({"batch sizes": f"> {last[1]}", "candidate_steps": payload[str(last[0])]["candidate_steps"],
                 "K at start": f"{last[2]} (last slot carries on)"})
    warns += _tail_warnings(table, k1, f"SGLang keeps the last slot (K={last[2]}) above batch size {last[1]}"
                                       + ("" if last[2] == 0 else "; add a slot with candidate_steps [0] to"
                                          " switch speculation off there (0.5.14+)"))
    notes = _sglang_notes(payload, cuda_graph_bs)
    use = ("python -m sglang.launch_server --model MODEL --speculative-algorithm EAGLE3 --speculative-adaptive"
           " --speculative-adaptive-config adaptive.json")
    return Export("sglang", version, payload, rows, warns, notes, use)


def sps_lookup(payload: dict, batch_tokens: int) -> float:
    """Steps/s DSpark reads: the value at the largest probe <= tokens, clamped at both ends."""
    probes = payload["sample_batch_tokens"]
    i = max(int(np.searchsorted(probes, batch_tokens, side="right")) - 1, 0)
    return float(payload["sample_steps_per_sec"][i])


def _sglang_sps(table: KTable, version: str) -> Export:
    """Probe table along the plan: at batch size B the engine runs K*(B), a step of B (K*+1) batch
    tokens (running requests + verify budget) taking ITL(B, K*): one probe per distinct token count,
    steps/s = 1 / ITL (the faster step where two batch sizes give the same count)."""
    if table.itl_s is None:
        raise PlannerError("the step-cost table needs predicted step times (a Prediction, not a K list)")
    j = table.context_index
    b = np.asarray(table.batch_sizes, dtype=int)
    k = np.asarray(table.k_opt[:, j], dtype=int)
    ok = k >= 0
    idx = np.searchsorted(table.ks, np.maximum(k, 0))
    itl = table.itl_s[np.arange(len(b)), idx, j]
    tokens = b * (k + 1)
    probes: dict[int, float] = {}
    for t, s, good in zip(tokens, itl, ok):
        if good:
            probes[int(t)] = min(probes.get(int(t), np.inf), float(s))
    if not probes:
        raise PlannerError(f"no batch size fits in memory at context {table.context_len}: nothing to export")
    keys = sorted(probes)
    payload = {"sample_batch_tokens": keys, "sample_steps_per_sec": [round(1.0 / probes[t], 4) for t in keys],
               "max_batch_tokens": int(keys[-1])}
    rows = [{"batch tokens": t, "step ms": round(probes[t] * 1e3, 4), "steps/s": round(1.0 / probes[t], 2)}
            for t in keys]
    warns = _context_warning(table, np.array(table.k_opt))
    notes = [f"predicted step times along the planned K*(B) at context {table.context_len}, not measured: seed"
             " the engine's cost table before any hardware run, then replace it with"
             " sglang.benchmark.dspark_sps_profiler output",
             "SGLang reads the value of the largest probe <= batch tokens (clamped at both ends);"
             " SGLANG_RAGGED_VERIFY_MODE=static ignores the table"]
    use = "--speculative-dspark-sps-table-path sps.json"
    return Export("sglang-sps", version, payload, rows, warns, notes, use)
