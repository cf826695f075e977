"""Decode spans (simulator/serving/decode_span.py): a run with spans equals the step-by-step run to the bit.

Anchor: "property" -- the reference is the loop's own step path (spans switched off), over arrivals,
closed loops with think time, KV-cache preemption, speculative engines at K = 0 (fixed:0, cutoff), and a load
search's early-stop checks.
"""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from simulator import serving as sv
from simulator.serving import decode_span, loop
from simulator.serving.early_stop import PercentileStop
from simulator.specs.scenario import load_scenario


def _run(sc, policy, workload, engine=None, stop=None, spans=True, monkeypatch=None):
    counted = []
    real = decode_span.run_span

    def counting(ctx, st, m):
        steps = real(ctx, st, m)
        counted.append(steps)
        return steps

    with monkeypatch.context() as mp:
        mp.setattr(loop, "run_span", counting)
        if not spans:
            mp.setattr(loop, "span_length", lambda ctx, st, max_steps: 0)
        res = sv.simulate(sc, policy, workload=workload, seed=3, engine=engine, stop=stop)
    return res, sum(counted)


CASES = {
    "poisson-plain": ("llama-3.1-8b-h100", "plain", dict(arrival="poisson", rate_per_s=30.0, n_requests=120,
                                                         prompt_len=300, output_len=120), None),
    "closed-think-plain": ("llama-3.1-8b-h100", "plain", dict(arrival="closed", concurrency=12, think_time_s=0.02,
                                                              n_requests=60, prompt_len=200, output_len=90), None),
    # the cache fills while the batch decodes: spans end before the step that preempts
    "kv-pressure-plain": ("llama-3.1-8b-h100", "plain", dict(arrival="waves", concurrency=64, n_requests=64,
                                                             max_num_seqs=64, prompt_len=100, output_len=3000),
                          {"memory_utilization": 0.3}),
    "waves-fixed-k0": ("command-a-h100", "fixed:0", dict(arrival="waves", concurrency=32, n_requests=64,
                                                        max_num_seqs=32, prompt_len=400, output_len=80), None),
    "cutoff": ("llama-3.1-8b-h100", "cutoff:4", dict(arrival="poisson", rate_per_s=40.0, n_requests=150,
                                                     max_num_seqs=64, prompt_len=300, output_len=150), None),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_run_with_spans_equals_the_step_by_step_run(case, monkeypatch):
    name, policy, wl, overrides = CASES[case]
    sc = load_scenario(name, **(overrides or {}))
    workload = sv.Workload(**wl)
    fast, span_steps = _run(sc, policy, workload, monkeypatch=monkeypatch)
    slow, none = _run(sc, policy, workload, spans=False, monkeypatch=monkeypatch)
    assert none == 0 and span_steps > (0.05 if "pressure" in case else 0.3) * len(slow.steps), \
        "spans must carry a good part of the run"
    assert fast.step_records == slow.step_records
    pd.testing.assert_frame_equal(fast.steps, slow.steps, check_exact=True)
    pd.testing.assert_frame_equal(fast.requests, slow.requests, check_exact=True)
    assert fast.summary.keys() == slow.summary.keys()
    for k, v in slow.summary.items():
        assert fast.summary[k] == v or (v != v and fast.summary[k] != fast.summary[k]), k  # noqa: PLR0124


def test_preemption_still_happens_inside_what_would_be_a_span(monkeypatch):
    # the KV cap is reached mid-decode: the span must end before the step that preempts
    sc = load_scenario("llama-3.1-8b-h100", memory_utilization=0.3)
    workload = sv.Workload(**CASES["kv-pressure-plain"][2])
    fast, _ = _run(sc, "plain", workload, monkeypatch=monkeypatch)
    assert int(fast.requests["preemptions"].sum()) > 0


def test_an_early_stopped_run_stops_at_the_same_step_with_the_same_verdict(monkeypatch):
    sc = load_scenario("llama-3.1-8b-h100")
    workload = sv.Workload(arrival="poisson", rate_per_s=400.0, n_requests=200, prompt_len=600, output_len=200)
    stop = PercentileStop.from_limits({"ttft_p99_s": 0.5, "tpot_p50_s": 0.02})
    fast, span_steps = _run(sc, "plain", workload, stop=stop, monkeypatch=monkeypatch)
    slow, _ = _run(sc, "plain", workload, stop=stop, spans=False, monkeypatch=monkeypatch)
    assert span_steps > 0 and "stopped_early" in slow.summary
    assert fast.summary["stopped_early"] == slow.summary["stopped_early"]
    assert fast.summary["stopped_at_s"] == slow.summary["stopped_at_s"]
    np.testing.assert_array_equal(fast.steps.to_numpy(), slow.steps.to_numpy())
