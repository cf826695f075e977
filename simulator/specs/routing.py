"""Expert routing as a spec: the distribution over experts a router draws from.

uniform p_i = k/E; Zipf p_i proportional to 1 / i^s; or explicit per-expert weights (a router trace).
``reuse`` (rho) is the adjacent-token correlation within one sequence: the K+1 positions a verify
step scores route alike (per expert, P(routed at t | routed at t-1) = rho + (1 - rho) p_i).
How many experts a step then touches is physics (``simulator.physics.experts``).
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
    ``reuse`` in [0, 1): adjacent positions of one sequence re-use the previous position's experts
    with this probability (0: tokens route independently, the classic count).
    """

    kind: str = "uniform"
    skew: float = 0.0
    probabilities: tuple[float, ...] = ()
    reuse: float = 0.0

    def describe(self) -> str:
        base = f"zipf(s={self.skew:g})" if self.kind == "zipf" else self.kind
        return base + f", reuse {self.reuse:g}"  # printed even at 0: the expert count rests on it


def check_reuse(reuse: float, origin: str = "routing") -> float:
    """rho must lie in [0, 1): rho = 1 would route every token of a sequence to one expert set forever."""
    if not 0.0 <= reuse < 1.0:
        raise PlannerError(f"{origin}: routing reuse must be in [0, 1) (0 = independent tokens), got {reuse}")
    return float(reuse)


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
