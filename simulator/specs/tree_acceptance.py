"""Acceptance of an EAGLE draft tree: the accepted length a tree gives grows with its size and shape.

A tree draft (``eagle3:tree:TxN``: SGLang --speculative-eagle-topk T, --speculative-num-draft-tokens N + 1,
--speculative-num-steps K) offers several candidates at each depth. Its acceptance rests on the draft's
top-1 rate per depth (``a_d``, what a chain of the same draft accepts) and on how the draft's lower-ranked
candidates catch the target's token when the top one misses:

    q_d(1) = a_d
    q_d(j) = (1 - a_d) (1 - m) m^(j - 2)        j >= 2

``m``, the rank tail, is the share of a depth's remaining misses that one more candidate still misses (the
top-T coverage is 1 - (1 - a_d) m^(T - 1)). Verification (greedy) accepts a node when every node on its path
matches the target, and the nodes at one depth exclude each other, so

    AL = 1 + sum over the tree's nodes v of prod_{edges e on the path to v} q_depth(e)(rank of e)

(one bonus token; the sum at depth d is P(accepted length >= d)). The tree is SGLang's: depth 1 keeps the T
children of the root; each later depth scores the T children of each of the T nodes kept at the depth before
(T^2 candidates, score = the path's product, which an EAGLE-2 draft's calibrated confidence approximates:
Li et al. 2024, arXiv:2406.16858) and keeps its T best; the N best of all T + (K - 1) T^2 candidates are
verified: :func:`simulator.specs.drafts.verify_drafts` counts the same nodes for the verify pass's cost.
A chain (T = 1, N >= K) gives 1 + a_1 + a_1 a_2 + ... exactly.

The rank tail and the top-1 rates of the tree presets, with their sources, are in
``simulator/data/acceptance.toml`` ([eagle-tree], [eagle3-tree]).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from simulator.errors import PlannerError
from simulator.specs.acceptance import RATE_CEILING, acceptance_length_prefix
from simulator.specs.drafts import tree_pool_size


def check_rank_tail(value, origin: str) -> float:
    """[acceptance] rank_tail: in (0, 1)."""
    try:
        m = float(value)
    except (TypeError, ValueError):
        m = float("nan")
    if not 0.0 < m < 1.0:
        raise PlannerError(f"{origin}: [acceptance] rank_tail = {value!r} must be in (0, 1): the share of a depth's"
                           " remaining misses that one more candidate still misses, e.g. 0.75")
    return m


def rank_probabilities(top1: float, rank_tail: float, topk: int) -> np.ndarray:
    """q(1..T): the probability that the draft's rank-j candidate at a depth is the target's token."""
    j = np.arange(2, topk + 1, dtype=float)
    return np.concatenate([[top1], (1.0 - top1) * (1.0 - rank_tail) * rank_tail ** (j - 2.0)])


def verified_nodes(top1_rates, rank_tail: float, topk: int, tokens: int) -> tuple[np.ndarray, np.ndarray]:
    """(path probability, depth) of each node SGLang's tree of depth K = len(top1_rates), topk T and N tokens
    verifies: the N best of its T + (K - 1) T^2 candidates (as many as specs.drafts.verify_drafts counts)."""
    rates = np.asarray(top1_rates, dtype=float)
    scores, depths = [], []
    kept = np.ones(1)
    for d, a in enumerate(rates, start=1):
        cand = np.sort((kept[:, None] * rank_probabilities(a, rank_tail, topk)[None, :]).ravel())[::-1]
        scores.append(cand)
        depths.append(np.full(cand.size, d))
        kept = cand[:topk]
    score, depth = np.concatenate(scores), np.concatenate(depths)
    n = int(min(tokens, tree_pool_size(topk, rates.size)))
    best = np.argsort(-score, kind="stable")[:n]  # the N nodes SGLang verifies (a parent outscores its children)
    return score[best], depth[best]


def tree_reach(top1_rates, rank_tail: float, topk: int, tokens: int) -> np.ndarray:
    """P(accepted length >= d), d = 1..K, of SGLang's tree of depth K = len(top1_rates), topk T, N tokens."""
    score, depth = verified_nodes(top1_rates, rank_tail, topk, tokens)
    return np.bincount(depth - 1, weights=score, minlength=len(top1_rates))


def tree_acceptance_length(top1_rates, rank_tail: float, topk: int, tokens: int) -> float:
    """AL of the depth-K tree (K = len(top1_rates)); 1 at K = 0."""
    if len(top1_rates) == 0:
        return 1.0
    return 1.0 + float(tree_reach(top1_rates, rank_tail, topk, tokens).sum())


def tree_acceptance_lengths(top1_rates, rank_tail: float, topk: int, tokens: int, ks, scale=None) -> np.ndarray:
    """AL(K) over integer depths ``ks`` from per-depth top-1 rates (at least max(ks) of them): (n_k,), or
    (n_k, n_ctx) with ``scale`` s(L), every top-1 rate multiplied by s(L) (capped at 0.999)."""
    ks = np.asarray(ks, dtype=int)
    rates = np.asarray(top1_rates, dtype=float)
    factors = np.ones(1) if scale is None else np.asarray(scale, dtype=float)
    al = np.array([[tree_acceptance_length(np.minimum(rates[:k] * s, RATE_CEILING), rank_tail, topk, tokens)
                    for s in factors] for k in ks.ravel()]).reshape(ks.shape + factors.shape)
    return al[..., 0] if scale is None else al


@dataclass(frozen=True)
class TreeShape:
    """A draft tree as its acceptance sees it: topk T, N draft tokens and the rank tail of its rates (None: the
    rates are the tree's own, measured per depth on it)."""

    topk: int
    tokens: int
    rank_tail: float | None = None


def tree_shape(draft, rank_tail: float | None) -> TreeShape | None:
    """The shape of ``draft`` (a specs.drafts.DraftSpec) with its rates' rank tail; None for a chain."""
    return TreeShape(int(draft.topk), int(draft.tree_tokens), rank_tail) if draft.is_tree else None


def draft_acceptance_lengths(rates, ks, scale=None, tree: TreeShape | None = None) -> np.ndarray:
    """AL(K) of a draft at integer depths ``ks`` from its rates (at least max(ks) of them): the one formula the
    planner's grid and the deployment fits use. (n_k,), or (n_k, n_s) with ``scale``: every rate multiplied
    by s (a context factor, a fitted acceptance scale), capped at 0.999.

    A tree with a rank tail: the rates are the draft's top-1 rates per depth, through SGLang's tree of its
    topk and tokens (:func:`tree_acceptance_lengths`). Otherwise the rates are the draft's own per position:
    a chain's, or a tree's measured per depth on it (a tree of N draft tokens accepts at most N, so its depth
    counts up to N): AL(K) = 1 + sum_{j <= K} prod_{i <= j} a_i."""
    ks = np.asarray(ks, dtype=int)
    rates = np.asarray(rates, dtype=float)[:max(int(ks.max(initial=0)), 1)]
    if tree is not None and tree.rank_tail is not None:
        return tree_acceptance_lengths(rates, tree.rank_tail, tree.topk, tree.tokens, ks, scale)
    deep = ks if tree is None else np.minimum(ks, tree.tokens)
    if scale is None:
        return acceptance_length_prefix(rates)[deep]
    scaled = np.minimum(rates[:, None] * np.asarray(scale, dtype=float)[None, :], RATE_CEILING)
    return acceptance_length_prefix(scaled, axis=0)[deep]
