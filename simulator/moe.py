"""Expert routing: how many distinct experts a step of T tokens loads.

With per-expert routing probabilities p_i (sum_i p_i = k, top-k routing) and tokens routed
independently, expert i is untouched by all T tokens with probability (1 - p_i)^T, so

    E_touched(T) = sum_i [1 - (1 - p_i)^T]        uniform p_i = k/E:  E * (1 - (1 - k/E)^T)

This is the term that makes MoE speculative decoding non-monotonic in batch size: at small T each
extra draft token pulls in new experts (more weight bytes), at mid T nearly all experts are loaded
anyway, at large T the step is compute-bound.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from simulator.errors import PlannerError


@dataclass(frozen=True)
class Routing:
    """Routing distribution over experts.

    kind "uniform"; "zipf" with exponent ``skew`` (p_i proportional to 1 / i^skew);
    "explicit" with ``probabilities`` (any positive weights, normalised to sum to k).
    """

    kind: str = "uniform"
    skew: float = 0.0
    probabilities: tuple[float, ...] = ()

    def describe(self) -> str:
        if self.kind == "zipf":
            return f"zipf(s={self.skew:g})"
        return self.kind


def expert_probabilities(routing: Routing, num_experts: int, top_k: int) -> np.ndarray:
    """p_i, the probability that one token routes to expert i; sums to top_k, each <= 1."""
    if routing.kind == "uniform":
        return np.full(num_experts, top_k / num_experts)
    if routing.kind == "zipf":
        if routing.skew < 0:
            raise PlannerError(f"routing skew must be >= 0, got {routing.skew}")
        weights = 1.0 / np.arange(1, num_experts + 1) ** routing.skew
    elif routing.kind == "explicit":
        weights = np.asarray(routing.probabilities, dtype=float)
        if weights.shape != (num_experts,):
            raise PlannerError(f"routing probabilities: expected {num_experts} values (one per expert),"
                               f" got {len(routing.probabilities)}")
        if np.any(weights < 0) or weights.sum() <= 0:
            raise PlannerError("routing probabilities must be >= 0 and not all zero")
    else:
        raise PlannerError(f"unknown routing kind '{routing.kind}' (uniform, zipf, explicit)")
    return _cap_at_one(weights / weights.sum() * top_k)


def _cap_at_one(p: np.ndarray) -> np.ndarray:
    """Top-k picks k distinct experts, so no p_i exceeds 1: clip and give the excess to the rest."""
    p = p.copy()
    for _ in range(len(p)):
        over = p > 1.0
        if not over.any():
            break
        excess = (p[over] - 1.0).sum()
        p[over] = 1.0
        free = p < 1.0
        p[free] += excess * p[free] / p[free].sum()
    return p


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
