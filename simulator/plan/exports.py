"""Optimal-K tables in the formats engines read.

vLLM:  {"num_speculative_tokens": Kmax, "num_speculative_tokens_per_batch_size": [[start, end, K], ...]}
       inclusive ranges, the first starting at 1, no overlaps; batch sizes past the last range use its K.
TensorRT-LLM: draft_len_schedule {batch_size_upper_bound: K, ...}; above the largest key K = 0.
"""
from __future__ import annotations

import numpy as np


def k_ranges(batch_sizes, k_opt) -> list[list[int]]:
    """Merge a K* table into inclusive [start_bs, end_bs, K] ranges.

    A listed batch size's K holds up to the next listed batch size minus one; the first range
    starts at 1 (K of the smallest listed batch size). Batch sizes with no feasible K (k < 0) end
    the table: engines cannot run them anyway.
    """
    b = np.asarray(batch_sizes, dtype=int)
    k = np.asarray(k_opt, dtype=int)
    order = np.argsort(b)
    b, k = b[order], k[order]
    keep = np.flatnonzero(k < 0)
    if keep.size:
        b, k = b[: keep[0]], k[: keep[0]]
    ranges: list[list[int]] = []
    for i, (size, kk) in enumerate(zip(b, k)):
        start = 1 if i == 0 else int(size)
        end = int(b[i + 1] - 1) if i + 1 < len(b) else int(size)
        if ranges and ranges[-1][2] == kk:
            ranges[-1][1] = end
        else:
            ranges.append([start, end, int(kk)])
    return ranges


def vllm_config(batch_sizes, k_opt) -> dict:
    ranges = k_ranges(batch_sizes, k_opt)
    return {"num_speculative_tokens": max((r[2] for r in ranges), default=0),
            "num_speculative_tokens_per_batch_size": ranges}


def trtllm_schedule(batch_sizes, k_opt) -> dict[int, int]:
    """{upper bound: K}; the last range's upper bound is the largest batch size evaluated."""
    return {r[1]: r[2] for r in k_ranges(batch_sizes, k_opt)}
