"""Notes that explain a surprising shape of the K* table (printed under it, one line each)."""
from __future__ import annotations

import numpy as np

# a per-token time that falls by less than this share as the batch grows is left unexplained (noise)
FALL_SHARE = 0.01


def falling_token_time(pred) -> str | None:
    """Where plain per-token time (the K = 0 step: one token per sequence) falls as the batch grows,
    by how much and which operator makes it fall (the largest drop over the table; None when it
    never falls by more than FALL_SHARE).

    Larger batches normally cost more per step; a step that gets cheaper means an operator runs more
    efficiently at the larger size: most often MoE expert GEMMs, which the measured tables price closer
    to HBM bandwidth once each loaded expert sees more tokens, or a GEMM tile-size step."""
    t = pred.table.dropna(subset=["plain_token_latency_ms"])
    if len(t) < 2:
        return None
    b, ms = t.batch_size.to_numpy(), t.plain_token_latency_ms.to_numpy()
    later_min = np.minimum.accumulate(ms[::-1])[::-1]  # min over j >= i
    drop = np.zeros(ms.size)
    drop[:-1] = 1.0 - later_min[1:] / ms[:-1]
    i = int(np.argmax(drop))
    if drop[i] <= FALL_SHARE:
        return None
    j = i + 1 + int(np.argmin(ms[i + 1:]))
    lo, hi = pred.breakdown(int(b[i]), 0), pred.breakdown(int(b[j]), 0)
    diff = (hi.groupby("op").time_ms.sum() - lo.groupby("op").time_ms.sum()).sort_values()
    op = str(diff.index[0])
    why = ("more tokens share each loaded expert, and the expert kernels run closer to HBM bandwidth at more"
           " tokens per expert" if op == "moe_experts" else "the kernel runs more efficiently at the larger size")
    if pred.scenario.profile is not None and pred.scenario.profile.surfaces:
        why += " (measured kernel tables)"
    return (f"plain per-token time falls from {ms[i]:.2f} ms at B={b[i]} to {ms[j]:.2f} ms at B={b[j]}:"
            f" {op} takes {lo.groupby('op').time_ms.sum()[op]:.2f} -> {hi.groupby('op').time_ms.sum()[op]:.2f} ms"
            f" per step; {why}")
