"""AL(K) of a scenario's draft, read by the grid and the deployment fits: one formula (specs.tree_acceptance) for a
chain, a tree with a rank tail and a tree with its own rates per depth, and the band of it (plan.acceptance_risk)."""
from __future__ import annotations

import numpy as np

from simulator.plan.acceptance_risk import banded_acceptance_lengths
from simulator.specs.tree_acceptance import draft_acceptance_lengths as acceptance_lengths_of_draft
from simulator.specs.tree_acceptance import tree_shape


def draft_acceptance_lengths(draft, acceptance, ks, scale=None, n_ctx: int | None = None) -> np.ndarray:
    """AL(K) of the scenario's draft, (n_k,), or (n_k, n_ctx) with a context factor ``scale`` s(L) or repeated over
    ``n_ctx`` context lengths: specs.tree_acceptance's one formula
    for a draft (the deployment fits use it too). A tree whose acceptance carries a rank tail: its top-1 rates
    through the tree of its topk and N tokens at each depth K, the nodes its verify pass is priced for; a tree
    without one: its own rates per depth, depth counted up to its N tokens; a chain: the per-position rates."""
    ks = np.asarray(ks, dtype=int)
    rates = acceptance.rates_upto(max(int(ks.max(initial=0)), 1))
    al = acceptance_lengths_of_draft(rates, ks, scale, tree_shape(draft, acceptance.rank_tail))
    return al if scale is not None or n_ctx is None else np.repeat(al[:, None], n_ctx, axis=1)


def banded_draft_acceptance_lengths(draft, acceptance, ks, band: float) -> np.ndarray:
    """(3, n_k) AL(K) at the band's low, given and high rates (plan.acceptance_risk), a tree's through its shape."""
    ks = np.asarray(ks, dtype=int)
    return banded_acceptance_lengths(acceptance.rates_upto(max(int(ks.max(initial=0)), 1)), ks, band,
                                     tree_shape(draft, acceptance.rank_tail))
