"""Expert routing: how many distinct experts a step of T tokens loads.

With per-expert routing probabilities p_i (sum_i p_i = k, top-k routing) and tokens routed
independently, expert i is untouched by all T tokens with probability (1 - p_i)^T, so

    E_touched(T) = sum_i [1 - (1 - p_i)^T]        uniform p_i = k/E:  E * (1 - (1 - k/E)^T)

This is the term that makes MoE speculative decoding non-monotonic in batch size: at small T each
extra draft token pulls in new experts (more weight bytes), at mid T nearly all experts are loaded
anyway, at large T the step is compute-bound.
"""
from __future__ import annotations

import numpy as np


def experts_touched(tokens, probabilities: np.ndarray) -> np.ndarray:
    """Expected distinct experts touched by ``tokens`` tokens: sum_i 1 - (1 - p_i)^T.

    Vectorized over any shape of ``tokens``; non-uniform routing is evaluated once per distinct T.
    """
    tokens = np.asarray(tokens, dtype=float)
    p = np.asarray(probabilities, dtype=float)
    if np.all(p == p[0]):
        return len(p) * -np.expm1(tokens * np.log1p(-min(p[0], 1 - 1e-12)))
    unique, inverse = np.unique(tokens, return_inverse=True)
    log_miss = np.log1p(-np.minimum(p, 1 - 1e-12))
    touched = (-np.expm1(np.outer(unique, log_miss))).sum(axis=1)
    return touched[inverse].reshape(tokens.shape)


def busiest_group_load(tokens, probabilities: np.ndarray, groups: int) -> tuple[np.ndarray, np.ndarray]:
    """(experts touched, token-expert pairs routed) on the most loaded of ``groups`` GPUs.

    Experts are placed round-robin (expert i on GPU i mod groups), which spreads hot experts.
    With uniform routing all groups are alike in expectation; the busiest one still receives more
    tokens than the mean: token counts are Binomial(T*k, 1/groups), and the expected maximum of
    ``groups`` of them is about mean + sqrt(2 ln groups) * std.
    """
    tokens = np.asarray(tokens, dtype=float)
    p = np.asarray(probabilities, dtype=float)
    if groups == 1:
        return experts_touched(tokens, p), tokens * p.sum()
    per_group = [p[g::groups] for g in range(groups)]
    if np.all(p == p[0]):
        touched = experts_touched(tokens, per_group[0])
        mean = tokens * per_group[0].sum()
        std = np.sqrt(tokens * p.sum() * (1 / groups) * (1 - 1 / groups))
        return touched, mean + np.sqrt(2 * np.log(groups)) * std
    loads = [tokens * g.sum() for g in per_group]
    busiest = int(np.argmax([g.sum() for g in per_group]))
    touched = np.max([experts_touched(tokens, g) for g in per_group], axis=0)
    return touched, loads[busiest]
