"""The load search's early stop: its bounds by hand, its index against numpy's own percentile, and the
verdict of a stopped run against the same run taken to the end (and a passing run left untouched)."""
from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import numpy as np
import pytest

from simulator import serving
from simulator.serving.early_stop import PercentileStop, lower_bounds, order_index
from simulator.sizing import Candidate, candidate_scenario, parse_sizing
from simulator.sizing.search import _check, build_workload, requests_for, stop_rule
from simulator.specs.scenario import load_scenario

NAN = float("nan")


def test_lower_bounds_by_hand():
    # hand, clock t = 10 s: request 0 arrived at 0, first token at 1, finished at 3 with 3 tokens (TPOT
    # (3 - 1) / 2 = 1); request 1 arrived at 5, first token at 6, still decoding 5 tokens (TPOT >= (10 - 6) / 4
    # = 1); request 2 arrived at 8, waiting (TTFT >= 2); request 3 not arrived (>= 0), one token (no TPOT)
    st = SimpleNamespace(t=10.0, arrival=[0.0, 5.0, 8.0, NAN], first_tok=[1.0, 6.0, NAN, NAN],
                         finish=[3.0, NAN, NAN, NAN], gen=np.array([3, 2, 0, 0]))
    out_len = np.array([3, 5, 4, 1])
    assert lower_bounds(st, out_len, "ttft").tolist() == [1.0, 1.0, 2.0, 0.0]
    assert lower_bounds(st, out_len, "tpot").tolist() == [1.0, 1.0, 0.0]
    # with a step floor of 0.5 s and at most 2 tokens a step: request 1 has 3 tokens to come, >= 2 more
    # steps: (10 - 6 + 1) / 4 = 1.25; request 2 needs its 3 tokens after the first: >= 2 steps, 1 / 3
    assert lower_bounds(st, out_len, "tpot", 0.5, 2) == pytest.approx([1.0, 1.25, 1 / 3])
    # ttft p50 over 4: numpy's index 1.5 (floor 1); bounds sorted 0, 1, 1, 2: above 0.5 from index 1 on
    assert PercentileStop.from_limits({"ttft_p50_s": 0.5})(st, out_len) == "ttft_p50_s"
    assert PercentileStop.from_limits({"ttft_p50_s": 1.0})(st, out_len) is None  # 1 > 1 is not proven
    assert PercentileStop.from_limits({"itl_p99_s": 0.01}) is None  # no bound for ITL


@pytest.mark.parametrize("n", [1, 2, 3, 7, 10, 99, 100, 101, 200, 1000, 3999, 4000])
@pytest.mark.parametrize("q", [50, 90, 99])
def test_order_index_is_at_most_numpys(n, q):
    # numpy's linear percentile of 0..n-1 is its own virtual index: its floor is the lower order statistic
    assert order_index(q, n) <= np.floor(np.percentile(np.arange(n, dtype=float), q))
    assert order_index(q, n) >= np.floor(np.percentile(np.arange(n, dtype=float), q)) - 1


@pytest.fixture(scope="module")
def h100_tp8():
    sc = load_scenario("sizing-dense-command-a")
    spec = parse_sizing(sc)
    return candidate_scenario(sc, Candidate("h100-sxm", 8)), spec


def _workload(csc, spec, load):
    return build_workload(csc, "rate", load, requests_for(csc, spec, "rate", load), None)


def test_stopped_run_fails_as_the_full_run_does(h100_tp8):
    """At 2x the capacity (about 11 req/s, test_fleet_search) the run misses TPOT p50 <= 30 ms and TTFT p99
    <= 2 s; stopped early it is failed too, on fewer steps, and each bound is below the full run's figure."""
    csc, spec = h100_tp8
    wl = _workload(csc, spec, 22.0)
    full = serving.simulate(csc, "dsd", workload=wl, seed=spec.seed)
    cut = serving.simulate(csc, "dsd", workload=wl, seed=spec.seed, stop=stop_rule(spec))
    assert _check(spec, full.summary) and _check(spec, cut.summary)
    assert "stopped_early" in cut.summary and len(cut.steps) < len(full.steps)
    for key in ("ttft_p50_s", "ttft_p99_s", "tpot_p50_s", "tpot_p99_s"):
        assert cut.summary[key] <= full.summary[key]
    assert all(">=" in v and "lower bound" in v for v in _check(spec, cut.summary))


def test_passing_run_is_untouched_by_the_rule(h100_tp8):
    csc, spec = h100_tp8
    wl = _workload(csc, spec, 8.0)
    full = serving.simulate(csc, "dsd", workload=wl, seed=spec.seed)
    checked = serving.simulate(csc, "dsd", workload=wl, seed=spec.seed, stop=stop_rule(spec))
    assert not _check(spec, full.summary)
    assert checked.summary == full.summary
    assert checked.steps.equals(full.steps) and checked.requests.equals(full.requests)


def test_guard_alone_gives_a_rule(h100_tp8):
    _, spec = h100_tp8
    tpot_only = dataclasses.replace(spec, slo=dataclasses.replace(spec.slo, targets={"tpot_p50_s": 0.03}),
                                    ttft_guard=True)
    assert dict(stop_rule(tpot_only).limits) == {"tpot_p50_s": 0.03, "ttft_p99_s": 30.0}


def test_report_counts_the_stopped_runs():
    import pandas as pd

    from simulator.sizing.report import _stopped_note
    pts = pd.DataFrame({"load": [1.0, 2.0, 3.0], "lower_bounds": [False, True, True]})
    assert _stopped_note(pts).startswith(" (2 stopped early") and "lower bounds" in _stopped_note(pts)
    assert _stopped_note(pts.assign(lower_bounds=False)) == "" and _stopped_note(pd.DataFrame()) == ""


def test_step_floor_is_below_every_step_and_stops_a_floor_run_at_once():
    """h200 tp=2 bf16, plain, against a 25 ms TPOT p50 limit: no engine step of the run can be shorter than
    the floor (one sequence, no context, ~29 ms here), so no request can meet the limit. Every step of the
    full run is at least the floor; with it the rule stops the run at its first check, same verdict."""
    from simulator.serving.early_stop import step_floor_s
    from simulator.serving.loop import pricer_for
    sc = load_scenario("sizing-dense-command-a")
    spec = parse_sizing(sc)
    spec = dataclasses.replace(spec, slo=dataclasses.replace(spec.slo, targets={"tpot_p50_s": 0.025}))
    csc = candidate_scenario(sc, Candidate("h200", 2))
    wl = _workload(csc, spec, 0.05)
    full = serving.simulate(csc, "plain", workload=wl, seed=spec.seed)
    cut = serving.simulate(csc, "plain", workload=wl, seed=spec.seed, stop=stop_rule(spec))
    engine = serving.engine_from_scenario(csc)
    max_seqs = int(wl.max_num_seqs or engine.max_num_seqs)
    max_context = int(full.requests.prompt_len.add(full.requests.output_len).max())
    floor = step_floor_s(pricer_for(csc, engine, 0, max_seqs, max_context, False), max_seqs, False)
    assert floor > spec.slo.tpot_limit_s
    assert full.steps.step_s.min() >= floor
    assert _check(spec, full.summary) and _check(spec, cut.summary)
    assert "stopped_early" in cut.summary and len(cut.steps) <= 64 < len(full.steps)
    assert floor <= cut.summary["tpot_p50_s"] <= full.summary["tpot_p50_s"]


def test_a_speculative_floor_prices_no_draft_column_and_equals_the_fully_priced_one():
    """The floor reads K = 0 steps at no context: a speculative pricer gets it from the target's attention
    alone (its draft tables stay unpriced) and to the bit the floor of a pricer with every bucket priced."""
    from simulator.serving.early_stop import step_floor_s
    sc = load_scenario("sizing-dense-command-a")
    engine = serving.engine_from_scenario(sc)
    fresh = serving.StepPricer(sc, engine, 4, 128, 2200, True)
    full = serving.StepPricer(sc, engine, 4, 128, 2200, True)
    full.price_context_buckets()
    assert step_floor_s(fresh, 128, True) == step_floor_s(full, 128, True) > 0
    assert np.isnan(fresh.draft).all() and not np.isnan(full.draft).any()
    assert fresh._attn_have[:2] == [True, True] and not any(fresh._have)
