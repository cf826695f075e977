"""Expert routing: how many distinct experts a step of T tokens loads, and how busy the busiest GPU is.

Independent tokens. With per-expert routing probabilities p_i (sum_i p_i = k, top-k routing),
expert i is untouched by T independent tokens with probability (1 - p_i)^T, so

    E_touched(T) = sum_i [1 - (1 - p_i)^T]        uniform p_i = k/E:  E * (1 - (1 - k/E)^T)

Correlated positions. A verify step scores q = K+1 adjacent positions of each of B sequences, and
adjacent tokens of one sequence route alike. Model each expert's membership along a sequence as a
two-state Markov chain with reuse rho: P(routed at t | routed at t-1) = rho + (1 - rho) p_i,
P(routed at t | not at t-1) = (1 - rho) p_i (equivalently: with probability rho a position re-uses
the previous position's expert set, else it draws afresh). The chain is stationary at p_i, so every
single token still routes with the marginals p_i. Expert i is missed by all q positions of one
sequence with probability (1 - p_i) (1 - (1 - rho) p_i)^(q - 1), and by B independent sequences

    E_touched(B, q, rho) = sum_i [1 - (1 - p_i)^B (1 - (1 - rho) p_i)^(B (q - 1))]      (exact)

rho = 0 gives the independent count with T = B q; rho -> 1 gives the count of B tokens. For small
p_i the ratio of a q-token step to a 1-token step is about 1 + (q - 1)(1 - rho).

This is the term that makes MoE speculative decoding non-monotonic in batch size: at small T each
extra draft token pulls in new experts (more weight bytes), at mid T nearly all experts are loaded
anyway, at large T the step is compute-bound.
"""
from __future__ import annotations

import numpy as np

from simulator.physics.caches import PhysicsCaches, make_room

_P_MAX = 1 - 1e-12


def experts_touched(tokens, probabilities: np.ndarray) -> np.ndarray:
    """Expected distinct experts touched by ``tokens`` independent tokens: sum_i 1 - (1 - p_i)^T.

    Vectorized over any shape of ``tokens``; non-uniform routing is evaluated once per distinct T.
    """
    tokens = np.asarray(tokens, dtype=float)
    p = np.asarray(probabilities, dtype=float)
    if np.all(p == p[0]):
        return len(p) * -np.expm1(tokens * np.log1p(-min(p[0], _P_MAX)))
    unique, inverse = np.unique(tokens, return_inverse=True)
    log_miss = np.log1p(-np.minimum(p, _P_MAX))
    touched = (-np.expm1(np.outer(unique, log_miss))).sum(axis=1)
    return touched[inverse].reshape(tokens.shape)


def experts_touched_correlated(batch, queries, probabilities: np.ndarray, reuse: float = 0.0) -> np.ndarray:
    """Expected distinct experts of B sequences x q adjacent positions with reuse rho (module docstring):

        sum_i 1 - exp(B ln(1 - p_i) + B (q - 1) ln(1 - (1 - rho) p_i))

    Vectorized over broadcast shapes of ``batch`` and ``queries``; ``reuse = 0`` equals
    :func:`experts_touched` at T = B q.
    """
    batch, queries = np.broadcast_arrays(np.asarray(batch, dtype=float), np.asarray(queries, dtype=float))
    p = np.minimum(np.asarray(probabilities, dtype=float), _P_MAX)
    if reuse == 0.0:
        return experts_touched(batch * queries, p)
    first = np.log1p(-p)  # ln(1 - p_i): the first position of a sequence
    later = np.log1p(-(1.0 - reuse) * p)  # ln(1 - (1 - rho) p_i): each later position
    if np.all(p == p[0]):  # uniform routing: every expert alike, no sum over experts needed
        return len(p) * -np.expm1(batch * first[0] + batch * (queries - 1) * later[0])
    pairs = np.stack([batch.ravel(), (batch * (queries - 1)).ravel()], axis=1)
    unique, inverse = np.unique(pairs, axis=0, return_inverse=True)
    touched = (-np.expm1(np.outer(unique[:, 0], first) + np.outer(unique[:, 1], later))).sum(axis=1)
    return touched[np.ravel(inverse)].reshape(batch.shape)


def _expected_max_normal(means: np.ndarray, stds: np.ndarray, points: int = 96) -> np.ndarray:
    """E[max_g X_g] of independent X_g ~ N(m_g, s_g^2) per row (rows: token counts, columns: groups).

    E[max] = x_lo + integral_{x_lo}^{inf} (1 - prod_g Phi((x - m_g) / s_g)) dx, by the trapezoid
    rule on [min(m - 7s), max(m + 7s)]. Continuous in every m_g and s_g and >= max_g m_g (Jensen),
    so it is never below the mean load.
    """
    from scipy.special import ndtr

    s = np.maximum(stds, 1e-12)
    lo = (means - 7 * s).min(axis=1)
    hi = (means + 7 * s).max(axis=1)
    u = np.linspace(0.0, 1.0, points)
    x = lo[:, None] + (hi - lo)[:, None] * u[None, :]  # [rows, points]
    cdf = np.prod(ndtr((x[:, :, None] - means[:, None, :]) / s[:, None, :]), axis=2)
    return lo + np.trapezoid(1.0 - cdf, x, axis=1)


# E[max] / mean is a smooth function of log T: past this many distinct token counts, evaluate it on
# a log-spaced grid and interpolate (a 512 x 9 grid has ~2,500 distinct T; the error is < 0.1%)
_BUSIEST_NODES = 64


def _memo(cache: dict | None, key, build):
    """``cache[key]``, built on first use (a store of the step model's caches; None: built every time); a full
    store drops its oldest entry. Grids and passes ask the same few routing settings over and over."""
    if cache is None:
        return build()
    hit = cache.get(key)
    if hit is None:
        make_room(cache, PhysicsCaches.EXPERT_SLOTS)
        hit = cache[key] = build()
    return hit


def _busiest_ratio(lo: float, hi: float, m: np.ndarray, v: np.ndarray,
                   caches: PhysicsCaches | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(log of the token-count nodes, E[max] / mean load at them) on the log-spaced nodes over [lo, hi]."""
    def build():
        nodes = np.geomspace(lo, hi, _BUSIEST_NODES)
        ratio = _expected_max_normal(nodes[:, None] * m[None, :], np.sqrt(nodes[:, None] * v[None, :])) / (nodes * m.max())
        return np.log(nodes), ratio
    return _memo(None if caches is None else caches.busiest_ratios, (lo, hi, m.tobytes(), v.tobytes()), build)


def _unique_counts(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(x, return_inverse=True)``; for whole numbers 0..2^20 by counting instead of sorting."""
    whole = x.astype(np.intp) if x.size else x
    if x.size and (whole == x).all() and 0 <= whole.min() and whole.max() < 1 << 20:
        present = np.flatnonzero(np.bincount(whole))
        where = np.empty(int(present[-1]) + 1, dtype=np.intp)
        where[present] = np.arange(present.size)
        return present.astype(x.dtype), where[whole]
    return np.unique(x, return_inverse=True)


def _busiest_pairs(tokens: np.ndarray, m: np.ndarray, v: np.ndarray, caches: PhysicsCaches | None = None) -> np.ndarray:
    """Expected token-expert pairs on the busiest group for every token count in ``tokens``."""
    unique, inverse = _unique_counts(tokens.ravel())
    if unique.size > _BUSIEST_NODES and unique[0] > 0:
        log_nodes, ratio = _busiest_ratio(float(unique[0]), float(unique[-1]), m, v, caches)
        busiest = unique * m.max() * np.interp(np.log(unique), log_nodes, ratio)
    else:
        busiest = _expected_max_normal(unique[:, None] * m[None, :], np.sqrt(unique[:, None] * v[None, :]))
    return busiest[np.ravel(inverse)].reshape(tokens.shape)


def busiest_group_load(tokens, probabilities: np.ndarray, groups: int, batch=None, queries=None,
                       reuse: float = 0.0, caches: PhysicsCaches | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(experts touched, token-expert pairs routed) on the most loaded of ``groups`` expert-parallel GPUs.

    Experts are placed round-robin (expert i on GPU i mod groups), which spreads hot experts.
    GPU g receives X_g pairs with mean m_g = T sum_{i in g} p_i and variance
    v_g = T sum_{i in g} p_i (1 - p_i) (each token picks each expert independently with p_i); the
    busiest GPU's expected load is E[max_g X_g] for independent normals (:func:`_expected_max_normal`).
    This is one formula for every routing: uniform routing gives about mean + sqrt(2 ln G) std, and
    as the skew grows the hottest group's mean takes over, continuously and never below the mean
    T k / G. Experts touched: the largest expected count over the groups (continuous in the skew too).
    ``batch`` / ``queries`` / ``reuse``: count distinct experts of correlated positions
    (:func:`experts_touched_correlated`); the pair count does not depend on the correlation.
    ``caches``: the step model's (simulator.physics.caches: the groups and load ratios of a routing), None:
    worked out every time.
    """
    tokens = np.asarray(tokens, dtype=float)
    p = np.asarray(probabilities, dtype=float)

    def touched(pg):
        if batch is None:
            return experts_touched(tokens, pg)
        return experts_touched_correlated(batch, queries, pg, reuse)

    if groups == 1:
        return touched(p), tokens * p.sum()
    per_group, m, v, alike = _groups(p, int(groups), caches)
    pairs = _busiest_pairs(tokens, m, v, caches)
    if alike:
        return touched(per_group[0]), pairs
    return np.max([touched(g) for g in per_group], axis=0), pairs


def _groups(p: np.ndarray, groups: int,
            caches: PhysicsCaches | None = None) -> tuple[list, np.ndarray, np.ndarray, bool]:
    """(each GPU's experts' probabilities, round-robin; their mean and variance of pairs per token;
    whether every GPU holds the same multiset of probabilities, so that one stands for all)."""
    def build():
        per_group = [p[g::groups] for g in range(groups)]
        m = np.array([g.sum() for g in per_group])
        v = np.array([(g * (1 - g)).sum() for g in per_group])
        alike = bool(np.allclose(m, m[0])) and all(np.array_equal(np.sort(g), np.sort(per_group[0])) for g in per_group)
        return per_group, m, v, alike
    return _memo(None if caches is None else caches.expert_groups, (p.tobytes(), groups), build)


# --- fitting the reuse rho ---------------------------------------------------------------------------

def reuse_from_trace(ids: np.ndarray, num_experts: int) -> tuple[float, np.ndarray]:
    """(rho, p_i) estimated from a router trace ``ids`` [sequences, positions, k] of expert ids.

    p_i = share of positions routed to i (times k). Under the Markov model the expected overlap of
    adjacent positions' expert sets is sum_i p_i (rho + (1 - rho) p_i) = rho k + (1 - rho) sum_i p_i^2,
    so rho = (overlap - sum p_i^2) / (k - sum p_i^2), clipped to [0, 1).
    """
    ids = np.asarray(ids)
    if ids.ndim != 3 or ids.shape[1] < 2:
        raise ValueError("router trace must be [sequences, positions >= 2, k]")
    seqs, pos, k = ids.shape
    onehot = np.zeros((seqs, pos, num_experts), dtype=bool)
    np.put_along_axis(onehot, ids.astype(int), True, axis=2)
    p = onehot.mean(axis=(0, 1))
    overlap = (onehot[:, 1:] & onehot[:, :-1]).sum(axis=2).mean()
    s2 = float((p ** 2).sum())
    rho = (overlap - s2) / (k - s2) if k > s2 else 0.0
    return float(np.clip(rho, 0.0, 0.999)), p


def fit_reuse(batch, queries, measured, probabilities: np.ndarray) -> float:
    """rho in [0, 0.99] whose E_touched(B, q, rho) best matches measured distinct-expert counts
    (least log error; a grid of 0.005 then a local refinement)."""
    batch, queries, measured = (np.asarray(x, dtype=float) for x in (batch, queries, measured))

    def err(r):
        return float(np.mean(np.log(experts_touched_correlated(batch, queries, probabilities, r) / measured) ** 2))

    grid = np.linspace(0.0, 0.99, 199)
    best = grid[int(np.argmin([err(r) for r in grid]))]
    fine = np.linspace(max(best - 0.005, 0.0), min(best + 0.005, 0.99), 21)
    return float(fine[int(np.argmin([err(r) for r in fine]))])


def table_experts_touched(tokens, num_experts: int, top_k: int, ep: int = 1) -> np.ndarray:
    """Distinct experts a measured MoE kernel table's row of T tokens loads on the GPU it times.

    aiconfigurator's collectors route with "balanced" logits: with stride = ceil(E / k), token t takes
    experts (t + i stride) mod E, i < k, once T >= stride, else (floor(t stride / T) + i stride) mod E:
    every token-expert pair goes to a new expert until all E are loaded, min(E, T k) in all when k
    divides E (their power-law routing also fills experts first, one token each once T k > E). The
    timed GPU of an expert-parallel row holds experts [0, E / ep): block i's share c_i of them is hit by
    ceil(c_i T / stride) tokens, at least one as soon as the block reaches it (token 0 takes expert 0),
    taken continuous here as max(1, c_i T / stride) (exact at the ends). Independent tokens
    (:func:`experts_touched`, the planner's routing) touch fewer: 82 of 128 at T = 16, k = 8.
    """
    tokens = np.asarray(tokens, dtype=float)
    stride = -(-int(num_experts) // int(top_k))
    local = num_experts / max(int(ep), 1)
    share = np.clip(local - np.arange(int(top_k)) * stride, 0.0, stride)
    share = share[share > 0]
    spread = np.minimum(tokens[..., None], np.maximum(1.0, share * tokens[..., None] / stride)).sum(axis=-1)
    return np.where(tokens >= stride, local, np.minimum(spread, local))
