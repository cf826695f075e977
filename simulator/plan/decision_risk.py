"""How sure a decision is: the probability that speculation, and each K, beats plain decoding.

The engine terms on top of the physics (``simulator/specs/step_terms.py``) are uncertain: the learned layer
is a population (a new deployment's terms are drawn from it), a deployment fit a posterior (its intervals).
Drawing the terms and re-pricing every cell of the grid from its physics parts gives goodput draws; at each
batch size the share of draws in which a K's goodput beats plain decoding's is its probability of paying:

    P(K beats plain at B) = mean_j [ AL(K) / T_j(B, K) > AL(0) / T_j(B, 0) ]

with T_j the step formula at draw j. K* is chosen on the same draws (:func:`decision_shares`): the K whose share of the
best goodput holds best at the scenario's ``decision_quantile`` of them (the pessimistic 10% by default).
The physics alone (``--physics-only``) has no spread to draw from: its
probabilities rest on the a priori spread of every term around the physics (``A_PRIORI_SD``).
"""
from __future__ import annotations

import functools
import json
from pathlib import Path

import numpy as np

from simulator.specs.step_terms import (A_PRIORI_SD, NEUTRAL, TERM_NAMES, compose_step_draws_s, draws_vary_box,
                                        from_fit, to_fit)

N_DRAWS = 64  # a power of two (a Sobol design)
# the draws are priced in float32: what they decide is read at a 1% tolerance, and float32's 1e-7 relative rounding
# is five orders below it, while the (n_batch, n_k, 64) arrays and their sort take half the memory traffic
DRAW_DTYPE = np.float32
# a difference outside the terms' band: one K ahead of another in at least this share of the draws (the 90% bands
# every prediction prints); the schedule never returns to an earlier K on less (plan.schedule.without_band_returns)
OUTSIDE_BAND = 0.9


# the (N_DRAWS, 7) design every prediction draws the terms from, as sobol_normal_design(64, 7, 0) made it: read from
# the file, since importing scipy.stats for it would cost 0.56 s of every command's start
# (tests/test_decision_risk_design.py makes it again and compares)
DESIGN_FILE = Path(__file__).resolve().parent.parent / "data" / "normal_design_64x7.json"


def sobol_normal_design(n: int, dims: int, seed: int = 0) -> np.ndarray:
    """(n, dims) standard normal points from a scrambled Sobol sequence (n a power of two): each term's draws
    cover its distribution evenly, so few draws give stable quantiles; deterministic for a seed."""
    from scipy.stats import norm, qmc  # imported here: only a design other than the stored one needs it
    u = qmc.Sobol(dims, scramble=True, seed=seed).random(n)
    return norm.ppf(np.clip(u, 1e-9, 1 - 1e-9))


@functools.cache  # a pure function of its arguments, built once per process (read-only)
def standard_normal_design(n: int, dims: int, seed: int = 0) -> np.ndarray:
    """:func:`sobol_normal_design`, the stored one (:data:`DESIGN_FILE`) where it is the one asked for."""
    doc = json.loads(DESIGN_FILE.read_text())
    if (doc["n"], doc["dims"], doc["seed"]) == (n, dims, seed):
        z = np.array(doc["z"], dtype=float)
    else:
        z = sobol_normal_design(n, dims, seed)
    z.setflags(write=False)
    return z


def draws_basis(terms) -> str:
    """What the terms' draws rest on: the learned population, a deployment fit's intervals, or the a priori spread."""
    if terms is None:
        return "the a priori spread of the engine terms around the physics"
    return "the learned layer's population of engine terms" if hasattr(terms, "mean_fit") else \
        "the deployment fit's intervals"


def term_draws(terms, n: int = N_DRAWS, seed: int = 0) -> tuple[np.ndarray, str]:
    """(term vectors (n, 7), what they rest on) for the scenario's terms: the learned population, a deployment
    fit's intervals (each term normal in fit coordinates, its 90% interval +-1.645 sd), or the a priori spread."""
    z = standard_normal_design(n, len(TERM_NAMES), seed)
    if terms is None:
        centre, sd = to_fit(NEUTRAL), A_PRIORI_SD
    elif hasattr(terms, "mean_fit"):
        centre, sd = np.asarray(terms.mean_fit), np.asarray(terms.sd_fit)
    else:
        lo = to_fit(np.array([terms.intervals[t][0] for t in TERM_NAMES]))
        hi = to_fit(np.array([terms.intervals[t][1] for t in TERM_NAMES]))
        centre = to_fit(np.array([terms.terms[t] for t in TERM_NAMES]))
        sd = np.maximum(hi - lo, 0.0) / (2 * 1.645)
    return from_fit(centre + sd * z), draws_basis(terms)


def physics_parts(grid, terms) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(kernel s, host s, collective calls, host room s) of every cell without the scenario's terms: the grid's own
    times, unscaled, the calls its steps run (which the terms' collective_s is paid per) and the room its engine's
    overlap window leaves (where the terms' host time hides)."""
    B, K = grid.cell_axes()
    kernel, overhead, calls, _ = grid.step_parts()
    room = grid.host_room_s  # the scalar 0 where the engine hides no host time (the formula drops its room term)
    if terms is None:
        return kernel, overhead, calls, room
    return kernel / terms.kernel_factor(K), overhead - terms.added_s(B, K, calls, room), calls, room


def step_draws(grid, terms, n: int = N_DRAWS, seed: int = 0) -> tuple[np.ndarray, str]:
    """(the step time of every cell under each draw of the terms, draws on the last axis: (n_batch, n_k[, n_ctx],
    n); what the draws rest on). The step formula (specs.step_terms) over the grid's physics parts."""
    theta, basis, cells, parts = _draw_inputs(grid, terms, n, seed)
    return compose_step_draws_s(theta, *cells, *parts[:2], DRAW_DTYPE, *parts[2:]), basis


def step_draws_and_box(grid, terms, n: int = N_DRAWS, seed: int = 0) -> tuple[np.ndarray, tuple | None, str]:
    """(:func:`step_draws`' draws, the box of cells outside which every draw gives the same step
    (specs.step_terms.draws_vary_box), what the draws rest on)."""
    theta, basis, cells, (kernel, overhead, calls, room) = _draw_inputs(grid, terms, n, seed)
    return (compose_step_draws_s(theta, *cells, kernel, overhead, DRAW_DTYPE, calls, room),
            draws_vary_box(theta, *cells, calls, room, DRAW_DTYPE), basis)


def _draw_inputs(grid, terms, n: int, seed: int) -> tuple:
    """(term draws, what they rest on, (B, K) of the cells, the cells' physics parts) the step draws are formed from."""
    theta, basis = term_draws(terms, n, seed)
    return theta, basis, grid.cell_axes(), physics_parts(grid, terms)


def goodput_draws(grid, terms, n: int = N_DRAWS, seed: int = 0) -> tuple[np.ndarray, str]:
    """(goodput per sequence (n, n_batch, n_k[, n_ctx]) under drawn terms, what the draws rest on)."""
    itl, basis = step_draws(grid, terms, n, seed)
    al = np.asarray(grid.acceptance_length)  # (n_k[, n_ctx]): the cells' axes after the batch axis
    al = al.reshape((1,) + al.shape + (1,) * (itl.ndim - 1 - al.ndim))
    return np.moveaxis(al / itl, -1, 0), basis


def beats_plain(grid, terms, n: int = N_DRAWS, seed: int = 0) -> tuple[np.ndarray, str]:
    """(P(K beats plain) per (B, K) cell, (n_batch, n_k); NaN where K or plain does not fit memory, what it rests on)."""
    good, basis = goodput_draws(grid, terms, n, seed)
    i0 = int(np.flatnonzero(grid.ks == 0)[0])
    p = np.mean(good > good[:, :, i0:i0 + 1], axis=0)
    ok = grid.fits_memory & grid.fits_memory[:, i0:i0 + 1]
    return np.where(ok, p, np.nan), basis


def decision_shares(grid, terms, quantile: float, banded_al=None, fits=None, itl=None,
                    vary_box="all") -> tuple[np.ndarray, np.ndarray]:
    """(n_batch, n_k) what K* is chosen on: each K's share of the best goodput at its batch size, per draw of the
    engine terms (and per rate set of an acceptance band, (3, n_k), when given), at the ``quantile`` of the draws
    and the worst rate set; -inf where the K does not fit (``fits``, default the grid's memory check):

        score(B, K) = min_s  Q_q over draws j of  [AL_s(K) / T_j(B, K)] / max_K' [AL_s(K') / T_j(B, K')]

    the acceptance band's robust score (plan.acceptance_risk) over the terms' draws: K* is the K that stays
    nearest the best in all but the worst q of the draws, so a K ahead at the centre by less than the terms'
    spread does not win over one that holds across it (plain decoding included: where speculation pays big in
    some draws and loses a little in others, a small K can hold best).

    Returns (that score, the same share at the median draw). A K whose median share is within the schedule's
    tolerance is as likely as not as good as the best (to the tolerance) inside the terms' spread: the
    fewest-range schedule may keep it for fewer ranges (plan.schedule, ``near_best``). ``itl``: the step draws
    (:func:`step_draws`) when the caller has them; ``vary_box``: the box of cells outside which every draw gives
    the same step (specs.step_terms.draws_vary_box; "all" where unknown): the rows of batch sizes (and contexts)
    outside it are read on one draw, where every quantile is that draw's share, the same values."""
    if itl is None:  # draws on the last axis: the quantiles read contiguous memory
        itl, _ = step_draws(grid, terms)
    fits = grid.fits_memory if fits is None else fits
    al_sets = grid.acceptance_length[None] if banded_al is None else np.asarray(banded_al)
    rows = _rows_box(vary_box, itl.ndim - 1)
    if rows is not None and all(r == slice(None) for r in rows):
        score, near = _shares(itl, al_sets, fits, quantile)
    else:  # one draw, read as two equal ones: each quantile is that draw's share, v + c (v - v), as on all of them
        score, near = _shares(np.broadcast_to(itl[..., :1], itl.shape[:-1] + (2,)), al_sets, fits, quantile)
        if rows is not None:  # the rows some draws move: every draw
            al_rows = tuple(al[(slice(None),) + rows[2:2 + al.ndim - 1]] for al in al_sets)
            score[rows], near[rows] = _shares(itl[rows], al_rows, fits[rows], quantile)
    return np.where(fits, score, -np.inf), np.where(fits, near, -np.inf)


def _rows_box(vary_box, ndim: int) -> tuple | None:
    """The box of cells to read on every draw, widened to whole rows over K (each share is of the best K in its
    row); None where no cell differs between draws."""
    if vary_box is None:
        return None
    if isinstance(vary_box, str):
        return tuple(slice(None) for _ in range(ndim))
    box = tuple(vary_box) + tuple(slice(None) for _ in range(ndim - len(vary_box)))
    return box[:1] + (slice(None),) + box[2:]


def _shares(itl: np.ndarray, al_sets, fits: np.ndarray, quantile: float) -> tuple[np.ndarray, np.ndarray]:
    """:func:`decision_shares` before its -inf where a K does not fit: (score, median share) of every cell of
    ``itl`` (cells x draws, at least two)."""
    n = itl.shape[-1]
    pos = quantile * (n - 1)  # the quantile of the draws by linear interpolation (numpy's default)
    lo = min(int(pos), n - 2)
    pos_hi = 0.5 * (n - 1)  # the median draw
    hi_i = min(int(pos_hi), n - 2)
    at = lambda part, p, i: part[..., i] + (p - i) * (part[..., i + 1] - part[..., i])  # noqa: E731
    all_fit = bool(np.all(fits))
    score = near = None
    for al in al_sets:  # each rate set: each K's share of the best K in every draw, at the quantiles
        good = np.divide(al.astype(DRAW_DTYPE).reshape(al.shape + (1,))[None], itl)
        if not all_fit:  # 0 where the K does not fit (times 1 elsewhere: the same values, so skipped when all fit)
            good *= fits[..., None]
        best = _max_over_k(good)
        good /= np.where(best > 0, best, DRAW_DTYPE(1.0))[:, None]
        part = _sorted_draws(good)
        low, high = at(part, pos, lo), at(part, pos_hi, hi_i)
        score = low if score is None else np.minimum(score, low)
        near = high if near is None else np.minimum(near, high)
    return score, near


def _max_over_k(good: np.ndarray) -> np.ndarray:
    """``good.max(axis=1)``, the same values (a maximum rounds nothing; NaN propagates alike), as a tree of maxima
    of halves along the K axis: each half is contiguous with the draws within a batch row, so numpy runs long inner
    loops, several times faster than its reduction over a middle axis."""
    n = good.shape[1]
    while n > 1:
        half = n // 2
        pairs = np.maximum(good[:, :half], good[:, half:2 * half])
        if n % 2:  # the odd one out joins the first
            np.maximum(pairs[:, :1], good[:, 2 * half:n], out=pairs[:, :1])
        good, n = pairs, half
    return good[:, 0]


def _sorted_draws(good: np.ndarray) -> np.ndarray:
    """``good`` sorted along its last axis, in place (a sort of 64 along contiguous memory beats numpy's
    partition here). Where no value has its sign bit set (shares >= +0, NaN without sign), the float32 bits read as
    int32 order alike, and numpy sorts int32 faster: the same values come out."""
    bits = good.view(np.int32) if good.dtype == np.float32 else None
    if bits is not None and good.size and bits.min() >= 0:
        bits.sort(axis=-1)
    else:
        good.sort(axis=-1)
    return good
