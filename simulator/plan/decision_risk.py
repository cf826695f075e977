"""How sure a decision is: the probability that speculation, and each K, beats plain decoding.

The engine terms on top of the physics (``simulator/specs/step_terms.py``) are uncertain: the learned layer
is a population (a new deployment's terms are drawn from it), a deployment fit a posterior (its intervals).
Drawing the terms and re-pricing every cell of the grid from its physics parts gives goodput draws; at each
batch size the share of draws in which a K's goodput beats plain decoding's is its probability of paying:

    P(K beats plain at B) = mean_j [ AL(K) / T_j(B, K) > AL(0) / T_j(B, 0) ]

with T_j the step formula at draw j. The physics alone (``--physics-only``) has no spread to draw from: its
probabilities rest on the a priori spread of every term around the physics (``A_PRIORI_SD``).
"""
from __future__ import annotations

import numpy as np

from simulator.specs.step_terms import A_PRIORI_SD, NEUTRAL, TERM_NAMES, compose_step_s, from_fit, to_fit

N_DRAWS = 128
LOW_QUANTILE = 0.10  # the pessimistic end a robust K is judged at


def term_draws(terms, n: int = N_DRAWS, seed: int = 0) -> tuple[np.ndarray, str]:
    """(term vectors (n, 6), what they rest on) for the scenario's terms: the learned population, a deployment
    fit's intervals (each term normal in fit coordinates, its 90% interval +-1.645 sd), or the a priori spread."""
    rng = np.random.default_rng(seed)
    if terms is None:
        phi = rng.normal(to_fit(NEUTRAL), A_PRIORI_SD, (n, len(TERM_NAMES)))
        return from_fit(phi), "the a priori spread of the engine terms around the physics"
    if hasattr(terms, "samples"):
        return terms.samples(n, seed), "the learned layer's population of engine terms"
    lo = to_fit(np.array([terms.intervals[t][0] for t in TERM_NAMES]))
    hi = to_fit(np.array([terms.intervals[t][1] for t in TERM_NAMES]))
    centre = to_fit(np.array([terms.terms[t] for t in TERM_NAMES]))
    phi = rng.normal(centre, np.maximum(hi - lo, 0.0) / (2 * 1.645), (n, len(TERM_NAMES)))
    return from_fit(phi), "the deployment fit's intervals"


def physics_parts(grid, terms) -> tuple[np.ndarray, np.ndarray]:
    """(kernel s, host s) of every (B, K) cell without the scenario's terms: the grid's own times, unscaled."""
    B, K = grid.batch_sizes[:, None], grid.ks[None, :].astype(float)
    kernel = np.broadcast_to(grid.verify_s + grid.draft_step_s, grid.itl_s.shape)
    overhead = np.broadcast_to(grid.overhead_s, grid.itl_s.shape)
    if terms is None:
        return kernel, overhead
    return kernel / terms.kernel_factor(K), overhead - terms.added_s(B, K)


def goodput_draws(grid, terms, n: int = N_DRAWS, seed: int = 0) -> tuple[np.ndarray, str]:
    """(goodput per sequence (n, n_batch, n_k) under drawn terms, what the draws rest on)."""
    theta, basis = term_draws(terms, n, seed)
    kernel, overhead = physics_parts(grid, terms)
    B, K = grid.batch_sizes[:, None], grid.ks[None, :].astype(float)
    itl = compose_step_s([theta[:, i, None, None] for i in range(len(TERM_NAMES))], B, K, kernel, overhead)
    return grid.acceptance_length[None, None, :] / itl, basis


def beats_plain(grid, terms, n: int = N_DRAWS, seed: int = 0) -> tuple[np.ndarray, str]:
    """(P(K beats plain) per (B, K) cell, (n_batch, n_k); NaN where K or plain does not fit memory, what it rests on)."""
    good, basis = goodput_draws(grid, terms, n, seed)
    i0 = int(np.flatnonzero(grid.ks == 0)[0])
    p = np.mean(good > good[:, :, i0:i0 + 1], axis=0)
    ok = grid.fits_memory & grid.fits_memory[:, i0:i0 + 1]
    return np.where(ok, p, np.nan), basis


def robust_k(grid, terms, n: int = N_DRAWS, seed: int = 0) -> np.ndarray:
    """Per batch size the K whose goodput over plain decoding is best at the pessimistic end of the draws
    (the LOW_QUANTILE of the ratio); -1 where nothing fits."""
    good, _ = goodput_draws(grid, terms, n, seed)
    i0 = int(np.flatnonzero(grid.ks == 0)[0])
    ratio = np.quantile(good / good[:, :, i0:i0 + 1], LOW_QUANTILE, axis=0)
    ratio = np.where(grid.fits_memory, ratio, -np.inf)
    best = np.argmax(ratio, axis=1)
    return np.where(np.isfinite(ratio.max(axis=1)), grid.ks[best], -1)
