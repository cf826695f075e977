"""TensorRT-LLM acceptance gate keys per version, set at the break-even acceptance (exports/gate.py),
and the documented draft_len_schedule rule (tests/trtllm_rule.py) against the engine's own code.

Anchors: hand computations; TensorRT-LLM speculation_gate.py (1.2.x: accepted_len = avg decoded
tokens per iteration - 1, per request; 1.3+: accepted / drafted per iteration, in [0, 1]); the
docstring examples of utils.get_draft_len_for_batch_size.
"""
from __future__ import annotations

import random

import numpy as np
import pytest

import engine_code as ec
import trtllm_rule as rule
from simulator.plan import exports as E
from simulator.plan.exports.gate import break_even_acceptance_length, gate_keys, gate_window


def test_break_even_acceptance_length_by_hand():
    # hand: a K-step takes 30 ms, a plain step 20 ms: AL must reach 30/20 = 1.5 to match plain decoding
    assert break_even_acceptance_length(0.030, 0.020) == pytest.approx(1.5)
    assert break_even_acceptance_length([0.02, 0.04], [0.02, 0.02]) == pytest.approx([1.0, 2.0])


def test_gate_keys_by_version_by_hand():
    # hand: AL 2.0, AL* 1.5, K = 2, B = 8. 1.2.x: threshold = AL* - 1 = 0.5 accepted drafts per step;
    # accepted m = 1, Var <= 1 * (2 - 1) = 1, margin 0.5: N = ceil(16 * 1 / 0.25) = 64 requests.
    keys, text = gate_keys("lower", 2.0, 1.5, 2, 8)
    assert keys == {"acceptance_window": 64, "acceptance_length_threshold": 0.5}
    assert "AL* - 1" in text
    # 1.3+: rate threshold = (AL* - 1) / K = 0.25; a sample pools B = 8 requests: Var/B = 1/8, margin in
    # accepted drafts 0.5: N = ceil(16 * 0.125 / 0.25) = 8 -> raised to the floor of 16 iterations
    keys, _ = gate_keys("upto", 2.0, 1.5, 2, 8)
    assert keys == {"acceptance_rate_window_size": 16, "acceptance_rate_threshold": 0.25}
    assert 0 <= keys["acceptance_rate_threshold"] <= 1
    assert gate_window(1.0, 1.0, 2, 8, per_iteration=False) == 10_000  # no margin: the longest window


def _grid_table():
    # two batch sizes, K = 0..2. ITL (s): B=1: 10, 12, 14 ms; B=8: 20, 30, 40 ms.
    # AL: K=0 1, K=1 1.8, K=2 2.28 (a = 0.8, 0.6). goodput = AL / ITL.
    itl = np.array([[0.010, 0.012, 0.014], [0.020, 0.030, 0.040]])[:, :, None]
    al = np.array([1.0, 1.8, 2.28])[None, :, None]
    good = al / itl
    k = np.argmax(good[:, :, 0], axis=1)  # B=1: 100, 150, 162.9 -> 2; B=8: 50, 60, 57 -> 1
    assert list(k) == [2, 1]
    return E.KTable(np.array([1, 8]), np.array([2048]), k[:, None], np.arange(3), good,
                    np.ones_like(good, dtype=bool), itl, 0)


def test_trtllm_export_writes_the_gate_of_each_version():
    # planned batch size: the largest that still speculates, B = 8 with K = 1.
    # hand: AL* = 30 / 20 = 1.5; 1.2.x threshold AL* - 1 = 0.5; 1.3+ rate (AL* - 1) / 1 = 0.5.
    # window 1.2.x: m = 0.8, Var <= 0.8 * 0.2 = 0.16, margin 0.3: ceil(16 * 0.16 / 0.09) = 29
    e12 = E.export("trtllm", _grid_table(), "1.2.1")
    assert e12.payload["acceptance_window"] == 29 and e12.payload["acceptance_length_threshold"] == 0.5
    assert "acceptance_rate_threshold" not in e12.payload
    e13 = E.export("trtllm", _grid_table(), "1.3.0rc8")
    assert e13.payload["acceptance_rate_threshold"] == 0.5 and "acceptance_window" not in e13.payload
    # 1.3+: Var/B = 0.16 / 8 = 0.02: ceil(16 * 0.02 / 0.09) = 4 -> 16
    assert e13.payload["acceptance_rate_window_size"] == 16
    assert any("AL* = ITL(K)/ITL(0) = 1.500" in n for n in e12.notes + e13.notes)
    assert any("PR #12905" in n for n in e13.notes)
    # a planned batch size of 1 (K = 2): AL* = 14 / 10 = 1.4; rate (1.4 - 1) / 2 = 0.2
    e = E.export("trtllm", _grid_table(), "1.4.0rc4", planned_batch_size=1)
    assert e.payload["acceptance_rate_threshold"] == 0.2


def test_gate_does_not_trip_at_the_planned_acceptance_and_trips_below_break_even():
    # the 1.2.x gate (trtllm_rule.gate_trips restates speculation_gate.py) on requests whose accepted
    # drafts per step follow the chain a = 0.8 at K = 1 (mean 0.8): 5000 requests, one step each
    keys, _ = gate_keys("lower", 1.8, 1.5, 1, 8)
    window, threshold = keys["acceptance_window"], keys["acceptance_length_threshold"]
    rng = random.Random(0)
    good = [1.0 if rng.random() < 0.8 else 0.0 for _ in range(5000)]
    assert rule.gate_trips(good, window, threshold) is None
    bad = [1.0 if rng.random() < 0.4 else 0.0 for _ in range(5000)]  # acceptance fell below break-even 0.5
    assert rule.gate_trips(bad, window, threshold) is not None


def test_zero_tier_and_gate_path_warnings():
    t = E.KTable.from_1d(np.arange(1, 5), [2, 2, 0, 0])
    one_model = E.export("trtllm", t, "1.3.0rc8", draft_method="mtp")
    assert any("PR #16888" in w and "K = 1" in w for w in one_model.warnings)
    two_model = E.export("trtllm", t, "1.3.0rc8", draft_method="model")
    assert not any("PR #16888" in w for w in two_model.warnings)
    assert any("one-model path only" in w for w in two_model.warnings)
    assert any("two-model path" in w for w in E.export("trtllm", t, "1.2.1", draft_method="eagle3").warnings)


def test_documented_examples_hold_for_the_rule_and_the_engine_code():
    # the rule restated from the sources must give the sources' own examples; where the engine's
    # files are cached (~/.cache/dsd-planner/engine-src/tensorrt_llm) its code must give them too
    for sched, b, version, k in rule.DOCUMENTED:
        assert rule.k_for(sched, b, version) == k, (sched, b, version)
        assert ec.trtllm_k_for(sched, b, version) == k, (sched, b, version, ec.trtllm_code_source(version))


def test_rule_matches_engine_code_where_cached():
    """The extra check: on a machine with TensorRT-LLM's source cached, the restated rule and the
    engine's functions agree on random schedules (elsewhere both calls run the rule and agree trivially)."""
    rng = random.Random(1)
    for version in ("1.2.1", "1.3"):
        for _ in range(200):
            keys = sorted(rng.sample(range(2, 64), rng.randint(0, 4)))
            k_top = rng.randint(1, 6)
            sched = {1: k_top} | {key: rng.randint(0, k_top) for key in keys}
            for b in (1, 2, 5, 17, 63, 64, 500):
                assert rule.k_for(sched, b, version) == ec.trtllm_k_for(sched, b, version, k_top)
