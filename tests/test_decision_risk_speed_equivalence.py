"""The fast paths K* is read through give the values of the plain formulas they replace (issue 47: the K* read made
faster without changing any output): the factored step over draws (specs.step_terms.compose_step_draws_s) equals
compose_step_s elementwise, and decision_shares equals the broadcast max / sort formulation it was written as."""
from __future__ import annotations

import numpy as np
import pytest

from simulator.plan import decision_risk as dr
from simulator.plan.grid import evaluate_grid
from simulator.specs.scenario import SCENARIO_DIR, load_scenario
from simulator.specs.step_terms import compose_step_draws_s, compose_step_s


def _inputs(rng, context: bool):
    """Term draws in their natural ranges, and cells over B, K (and a context axis) with positive physics parts."""
    n, nb, nk = 64, 37, 9
    theta = np.column_stack([rng.uniform(0.5, 2.0, n), rng.uniform(0, 1e-3, n), rng.uniform(0, 1e-5, n),
                             rng.uniform(0, 5e-6, n), rng.uniform(0.5, 3.0, n), rng.uniform(0, 2e-5, n),
                             rng.uniform(0, 1e-4, n)])
    tail = (1,) if context else ()
    cells = (nb, nk, 3) if context else (nb, nk)
    B = np.arange(1, nb + 1, dtype=float).reshape((-1, 1) + tail) * 7
    K = np.arange(nk, dtype=float).reshape((1, -1) + tail)
    kernel = rng.uniform(1e-3, 5e-2, cells)
    overhead = rng.uniform(-1e-4, 1e-3, cells)  # a deployment's terms can take host time off the profile's
    calls = 161.0 + 33.0 * np.maximum(K, 0.0)  # a TP-2 verify pass and K draft passes' collective calls
    return theta, B, K, kernel, overhead, calls


@pytest.mark.parametrize("room", [False, True, "hides all", "a corner"])
@pytest.mark.parametrize("context", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_factored_step_equals_compose_step_s(context, dtype, room):
    theta, B, K, kernel, overhead, calls = _inputs(np.random.default_rng(3), context)
    # the host room of an engine that overlaps (0 at some cells: where its own host time overruns the window)
    # ("hides all": a room no draw's host time reaches, the draws' shortcut)
    rooms = np.where(np.random.default_rng(4).uniform(size=kernel.shape) < 0.2, 0.0,
                     np.random.default_rng(5).uniform(0, 2e-3, kernel.shape)) if room else 0.0
    if room in ("hides all", "a corner"):
        rooms = np.full(kernel.shape, 0.1)  # above the largest H here: 1 ms + 259 x (10 + 20 + 9 x 5) us
    if room == "a corner":  # exposed only in a box of cells (the draws form the host time there alone)
        rooms[:5, 2:4] = 0.0
    f = lambda a: np.asarray(a, dtype=dtype)  # noqa: E731
    plain = compose_step_s(list(f(theta).T), f(B[..., None]), f(K[..., None]), f(kernel[..., None]),
                           f(overhead[..., None]), f(calls[..., None]),
                           f(rooms[..., None]) if room else 0.0)
    fast = compose_step_draws_s(theta, B, K, kernel, overhead, dtype, calls, rooms)
    assert fast.shape == plain.shape == kernel.shape + (64,) and fast.dtype == plain.dtype == dtype
    np.testing.assert_allclose(fast, plain, rtol=2e-7 if dtype == np.float32 else 1e-15, atol=0)
    # the same operations in the same order: the same bits, so the draws' order statistics (K*) cannot move
    assert np.array_equal(fast, plain)


def test_factored_step_with_a_room_by_hand():
    """The host terms hide in the room: c_step + c_seq B = 100 + 8 us against a room of 50 us exposes 58 us; against
    a room of 500 us, nothing (the collective calls' 2.4 ms is paid in full either way)."""
    theta = np.array([[1.0, 1e-4, 2e-6, 0.0, 1.0, 0.0, 15e-6]])
    for room_s, exposed in ((50e-6, 58e-6), (500e-6, 0.0)):
        got = compose_step_draws_s(theta, np.array([[4.0]]), np.array([[0.0]]), np.array([[0.01]]),
                                   np.array([[2e-4]]), np.float64, np.array([[160.0]]), np.array([[room_s]]))
        assert got[0, 0, 0] == pytest.approx(0.01 + 2e-4 + exposed + 2.4e-3, rel=1e-12)


def test_factored_step_by_hand():
    """One cell, one draw, against the module formula worked by hand: s s_spec kernel + overhead + c_step + c_seq B
    + c_seq_spec B + c_spec B (K + 1) + c_coll calls at B = 4, K = 2 and 160 collective calls."""
    theta = np.array([[1.25, 1e-4, 2e-6, 3e-6, 1.5, 5e-6, 15e-6]])
    got = compose_step_draws_s(theta, np.array([[4.0]]), np.array([[2.0]]), np.array([[0.01]]),
                               np.array([[2e-4]]), np.float64, np.array([[160.0]]))
    want = 1.25 * 1.5 * 0.01 + 2e-4 + 1e-4 + 2e-6 * 4 + 5e-6 * 4 + 3e-6 * 4 * 3 + 2.4e-3  # 160 x 15 us
    assert got.shape == (1, 1, 1) and got[0, 0, 0] == pytest.approx(want, rel=1e-12)


@pytest.mark.parametrize("nk", [1, 2, 3, 8, 9, 17])
def test_max_over_k_equals_numpy_max(nk):
    rng = np.random.default_rng(nk)
    good = rng.random((11, nk, 5, 64)).astype(np.float32)
    good[0, nk // 2, 1, 7] = np.nan  # NaN propagates as numpy's max propagates it
    got, want = dr._max_over_k(good), good.max(axis=1)
    assert got.shape == want.shape and np.array_equal(got, want, equal_nan=True)


@pytest.mark.parametrize("case", ["shares", "zeros_and_nan", "negative", "negative_zero", "float64"])
def test_sorted_draws_equals_numpy_sort(case):
    rng = np.random.default_rng(7)
    x = rng.random((13, 9, 64)).astype(np.float64 if case == "float64" else np.float32)
    if case == "zeros_and_nan":
        x[0, 0, :10], x[1, 2, 5], x[2, 3, :] = 0.0, np.nan, 1.0
    elif case == "negative":
        x[3, 4, ::3] *= -1  # an int32 read of a negative float sorts the wrong way: the float sort must run
    elif case == "negative_zero":
        x[4, 1, 2] = -0.0
    want = np.sort(x, axis=-1)
    got = dr._sorted_draws(x.copy())
    assert np.array_equal(got, want, equal_nan=True)
    assert np.array_equal(np.signbit(got), np.signbit(want))


def _decision_shares_reference(itl, al_sets, fits, quantile):
    """decision_shares as it was first written: broadcast division, numpy's max over K, a full float sort."""
    n = itl.shape[-1]
    pos, pos_hi = quantile * (n - 1), 0.5 * (n - 1)
    lo, hi_i = min(int(pos), n - 2), min(int(pos_hi), n - 2)
    at = lambda part, p, i: part[..., i] + (p - i) * (part[..., i + 1] - part[..., i])  # noqa: E731
    score = near = None
    for al in al_sets:
        good = np.divide(al.astype(np.float32).reshape(al.shape + (1,))[None], itl)
        good *= fits[..., None]
        best = good.max(axis=1, keepdims=True)
        good /= np.where(best > 0, best, np.float32(1.0))
        part = np.sort(good, axis=-1)
        low, high = at(part, pos, lo), at(part, pos_hi, hi_i)
        score = low if score is None else np.minimum(score, low)
        near = high if near is None else np.minimum(near, high)
    return np.where(fits, score, -np.inf), np.where(fits, near, -np.inf)


@pytest.mark.parametrize("name", ["llama-3.1-8b-h100", "command-a-h100"])
def test_decision_shares_equals_reference(name):
    sc = load_scenario(SCENARIO_DIR / f"{name}.toml")
    g = evaluate_grid(sc, np.arange(1, 513, 8), np.arange(9)).as_engine_runs
    itl = g.term_step_draws
    fits = g.fits_memory.copy()
    fits[::5, 4] = False  # some K that do not fit at some batch sizes, whatever the scenario's memory
    al = np.asarray(g.acceptance_length)
    band = np.stack([al * 0.9, al, al * 1.05])
    for al_arg, sets in ((None, al[None]), (band, band)):
        for q in (0.1, 0.25):
            got = dr.decision_shares(g, g.step_terms, q, al_arg, fits, itl=itl)
            want = _decision_shares_reference(itl, sets, fits, q)
            for a, b in zip(got, want):
                assert a.dtype == b.dtype and np.array_equal(a, b)
    assert np.isfinite(got[0][fits]).all() and (got[0][~fits] == -np.inf).all()


@pytest.mark.parametrize("name", ["llama-3.1-8b-h100", "command-a-h100", "moe-synthetic-cpu"])
def test_rows_no_draw_moves_are_read_on_one_draw_to_the_same_values(name):
    """Outside the box of cells some draw moves (step_terms.draws_vary_box: TP 1 on an engine whose overlap room
    hides the host terms' draws) the shares are read on one draw: every score and median share as on all 64, on a
    (B, K) and a (B, K, L) grid, with K that do not fit and an acceptance band."""
    sc = load_scenario(SCENARIO_DIR / f"{name}.toml", allow_long_context=True)
    for lens in (None, np.array([512, 4096, 32768])):
        g = evaluate_grid(sc, np.arange(1, 513, 7), np.arange(9), lens).as_engine_runs
        itl, box, _ = dr.step_draws_and_box(g, g.step_terms)
        assert np.array_equal(itl, g.term_step_draws)
        outside = np.ones(itl.shape[:-1], bool)
        if box is not None:
            outside[dr._rows_box(box, itl.ndim - 1)] = False
        assert (itl[outside] == itl[outside][..., :1]).all()  # the box holds every cell a draw moves
        if name == "llama-3.1-8b-h100" and lens is not None:
            assert outside.mean() > 0.5  # most (B, L) rows: one draw (long contexts' steps hide the host terms)
        fits = g.fits_memory.copy()
        fits[::5, 4] = False
        al = np.asarray(g.acceptance_length)
        for al_arg in (None, np.stack([al * 0.9, al, al * 1.05])):
            for q in (0.1, 0.25):
                want = dr.decision_shares(g, g.step_terms, q, al_arg, fits, itl=itl)
                got = dr.decision_shares(g, g.step_terms, q, al_arg, fits, itl=itl, vary_box=box)
                for a, b in zip(got, want):
                    assert a.dtype == b.dtype and np.array_equal(a, b)
