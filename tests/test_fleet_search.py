"""The cheap sizing search: the steady state it starts from (Little's law, hand numbers), the serving
simulation's speed paths (same numbers as the direct evaluation), and the search against the serving
simulation's own boundary and against the old bracket-and-bisect search."""
from __future__ import annotations

import dataclasses
import itertools

import numpy as np
import pytest

from simulator import serving
from simulator.physics.engine_time import host_exposed_s, host_exposed_scalar_s
from simulator.physics.layers import attention_op
from simulator.physics.operators import evaluate
from simulator.serving.steady import littles_law, steady_state
from simulator.sizing import Candidate, candidate_scenario, memory_fit, parse_sizing, search_capacity, traffic_lengths
from simulator.sizing.search import _check, build_workload, resolution, run_point
from simulator.specs.engines import list_engines, load_engine
from simulator.specs.scenario import load_scenario


def test_littles_law_by_hand():
    # hand: B = 40 sequences, tau = 2.5 tokens/step, s = 20 ms, one prompt adds D = 50 ms, O = 300 tokens:
    # lambda = B tau / (O s + B tau D) = 100 / (6 + 5) = 9.0909 req/s; busy = 1 - lambda D = 0.54545;
    # TPOT = s / (tau busy) = 0.02 / 1.36364 = 14.667 ms; Little: B = lambda x O x TPOT = 40
    rate, tpot = littles_law([40], [2.5], [0.020], [0.050], 300.0)
    assert rate[0] == pytest.approx(100 / 11, rel=1e-12)
    assert tpot[0] == pytest.approx(0.02 / (2.5 * (1 - 5 / 11)), rel=1e-12)
    assert rate[0] * 300 * tpot[0] == pytest.approx(40, rel=1e-12)
    # no prefill cost and plain decoding (tau = 1): lambda = B / (O s), TPOT = s
    rate, tpot = littles_law([10], [1.0], [0.03], [0.0], 100.0)
    assert rate[0] == pytest.approx(10 / 3) and tpot[0] == pytest.approx(0.03)


@pytest.mark.parametrize("key", list_engines())
def test_scalar_host_time_is_the_vector_formula(key):
    name, _, version = key.rpartition("-")
    eng = load_engine(name or key, version if name else None)
    for b, k, step, draft, tp in itertools.product([1, 7, 64, 300], [0, 1, 4], [1e-4, 3e-3, 0.05], [0.0, 1e-3],
                                                   [1, 8]):
        want = float(host_exposed_s(eng, b, k, step, draft, tp))
        assert host_exposed_scalar_s(eng, b, k, step, draft, tp) == pytest.approx(want, rel=1e-12, abs=1e-15)


@pytest.fixture(scope="module")
def dense():
    sc = load_scenario("sizing-dense-command-a")
    return sc, parse_sizing(sc)


def test_prefill_memo_prices_like_the_cost_model(dense):
    sc, _ = dense
    eng = serving.engine_from_scenario(sc)
    pricer = serving.StepPricer(sc, eng, 8, 256, 4000, True)
    chunks, cached = np.array([1024, 512, 1024, 7]), np.array([0, 1024, 0, 2000])
    ops = [attention_op(sc.model, sc.deployment, 1.0, chunks.astype(float), cached.astype(float), count,
                        sc.model.sliding_window if name.endswith("sliding") else None, name)
           for name, count in pricer._attn_ops_layers]
    cost = evaluate(ops, sc.hardware, sc.deployment, sc.profile, chunks.shape)
    direct = float((cost.time_s - cost.launch_s).sum())
    assert pricer.prefill_attention_s(chunks, cached) == pytest.approx(direct, rel=1e-12)
    assert pricer.prefill_attention_s(chunks, cached) == pytest.approx(direct, rel=1e-12)  # from the memo


def test_steady_state_lands_just_below_the_simulated_boundary(dense):
    """The estimate is where the search starts: the simulation meets the SLOs a little below it and
    misses them 20% above it (Command A, h100 tp=8, dynamic K, chat 1024/300, TPOT p50 <= 30 ms)."""
    sc, spec = dense
    csc = candidate_scenario(sc, Candidate("h100-sxm", 8))
    st = steady_state(csc, "dsd", build_workload(csc, "rate", 1.0, spec.n_requests, None), spec.seed)
    est = st.max_rate(spec.slo.tpot_limit_s)
    assert 5.0 < est < st.rate[-1]
    assert not _check(spec, run_point(csc, "dsd", "rate", 0.95 * est, spec, None, serving.simulate))
    assert _check(spec, run_point(csc, "dsd", "rate", 1.2 * est, spec, None, serving.simulate))


def test_search_agrees_with_the_old_search(dense):
    """Old bracket-and-bisect search (commit 819d335: start 0.7 x the goodput-table guess, double / halve,
    3 log-bisection steps) found 11.02 req/s for Command A on h100 tp=8 with dynamic K after 6 simulations;
    the new search agrees within its resolution 2^(1/8) with 2 simulations."""
    sc, spec = dense
    csc = candidate_scenario(sc, Candidate("h100-sxm", 8))
    fit = memory_fit(csc, sum(traffic_lengths(sc)))
    s = search_capacity(csc, "dsd", spec, fit["max_seqs"])
    rho = resolution(spec)
    assert rho == pytest.approx(2 ** (1 / 8))
    assert 11.02 / rho <= s.capacity <= 11.02 * rho
    assert s.bounded and len(s.points) <= 3 and s.start == "steady state"
    failed = [p["load"] for p in s.points if not p["meets"]]
    assert min(failed) <= s.capacity * rho * (1 + 1e-9)


def test_pricer_is_reused_across_loads(dense):
    sc, spec = dense
    csc = candidate_scenario(sc, Candidate("h200", 8))
    seen = []
    real = serving.loop.StepPricer

    class Counting(real):
        def __init__(self, *a, **k):
            seen.append(1)
            super().__init__(*a, **k)
    serving.loop.StepPricer = Counting
    try:
        small = dataclasses.replace(spec, n_requests=20, duration_s=2.0, max_requests=40)
        for load in (2.0, 3.0):
            run_point(csc, "plain", "rate", load, small, None, serving.simulate)
    finally:
        serving.loop.StepPricer = real
    assert len(seen) == 1
