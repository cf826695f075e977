"""What acceptance a speculative step needs, and K* that holds when acceptance is uncertain.

A step with K drafts costs ITL(B, K) and commits AL(K) tokens per sequence; plain decoding commits
one token per ITL(B, 0). K ties plain decoding when AL(K) / ITL(B, K) = 1 / ITL(B, 0), so

    break-even AL(B, K) = ITL(B, K) / ITL(B, 0)

is the acceptance length K needs at batch size B (K pays when the drafts reach more). For i.i.d.
rates the break-even rate a solves (1 - a^(K+1)) / (1 - a) = AL (:func:`break_even_rate`).

Acceptance is the input users know least. With a band +-d on every per-position rate (clipped to
[0, 0.999]), a K is scored by its worst share of the best goodput over the low, given and high rates:

    score(B, K) = min_s  [AL_s(K) / ITL(B, K)] / max_K' [AL_s(K') / ITL(B, K')]

and K* = the K with the highest score: the draft length that stays nearest the best whatever the
rates turn out to be inside the band. Where K* at the low rates differs from K* at the high ones,
K* depends on acceptance, and the outputs say so.
"""
from __future__ import annotations

import numpy as np

from simulator.specs.acceptance import RATE_CEILING
from simulator.specs.tree_acceptance import TreeShape, draft_acceptance_lengths


def break_even_acceptance_length(itl_k, itl_plain) -> np.ndarray:
    """AL the draft length needs to tie plain decoding at the same batch size: ITL(B, K) / ITL(B, 0)."""
    return np.asarray(itl_k, dtype=float) / np.asarray(itl_plain, dtype=float)


def break_even_rate(acceptance_length, k, iterations: int = 60) -> np.ndarray:
    """i.i.d. rate a with 1 + a + ... + a^K = AL (bisection, vectorized); 0 where AL <= 1, nan where
    AL >= K + 1 (no rate below 1 reaches it)."""
    al = np.asarray(acceptance_length, dtype=float)
    k = np.broadcast_to(np.asarray(k, dtype=float), al.shape)
    lo, hi = np.zeros(al.shape), np.full(al.shape, RATE_CEILING)
    powers = np.arange(int(np.max(k, initial=0)) + 1)
    for _ in range(iterations):
        mid = (lo + hi) / 2
        al_mid = np.where(powers <= k[..., None], mid[..., None] ** powers, 0.0).sum(axis=-1)
        too_low = al_mid < al
        lo, hi = np.where(too_low, mid, lo), np.where(too_low, hi, mid)
    rate = (lo + hi) / 2
    return np.where(al <= 1.0, 0.0, np.where(al >= k + 1, np.nan, rate))


def banded_rates(rates: np.ndarray, band: float) -> np.ndarray:
    """(3, n) per-position rates: the given ones - band, as given, + band (clipped to [0, 0.999])."""
    rates = np.asarray(rates, dtype=float)
    return np.clip(np.stack([rates - band, rates, rates + band]), 0.0, RATE_CEILING)


def banded_acceptance_lengths(rates: np.ndarray, ks, band: float, tree: TreeShape | None = None) -> np.ndarray:
    """(3, n_k) AL(K) at the low, given and high rates of the band (positions past the given
    rates repeat the last one, as everywhere in the planner), each through a draft's one formula
    (specs.tree_acceptance.draft_acceptance_lengths: a chain's, or ``tree``'s)."""
    ks = np.asarray(ks, dtype=int)
    rates = np.asarray(rates, dtype=float)
    k_max = int(ks.max(initial=0))
    if k_max > rates.size:
        rates = np.concatenate([rates, np.full(k_max - rates.size, rates[-1])])
    return np.stack([draft_acceptance_lengths(r, ks, tree=tree) for r in banded_rates(rates, band)])


def robust_score(itl_s: np.ndarray, banded_al: np.ndarray, fits: np.ndarray) -> np.ndarray:
    """(n_batch, n_k) worst share of the best goodput over the band's rate sets (1 = best at all of
    them); -inf where the K does not fit. ``banded_al`` is (3, n_k), ``itl_s`` (n_batch, n_k)."""
    good = banded_al[:, None, :] / itl_s[None, :, :]  # (3, n_batch, n_k)
    good = np.where(fits[None], good, -np.inf)
    best = good.max(axis=2, keepdims=True)
    with np.errstate(invalid="ignore"):
        share = np.where(np.isfinite(best), good / best, -np.inf)
    return share.min(axis=0)


def k_at_each_rate_set(itl_s: np.ndarray, banded_al: np.ndarray, fits: np.ndarray) -> np.ndarray:
    """(3, n_batch) index of the argmax-goodput K at the low, given and high rates."""
    good = np.where(fits[None], banded_al[:, None, :] / itl_s[None, :, :], -np.inf)
    return np.argmax(good, axis=2)
