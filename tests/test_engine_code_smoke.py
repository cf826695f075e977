"""Smoke tests: the engines' own schedule code (tests/engine_code.py) gives the
answers documented in docs/engine-schedules.md (each engine's section).

Needs the released wheels (downloaded once into ~/.cache/dsd-planner) and, for
TensorRT-LLM, the cached source excerpts; every test skips with the reason when
the engine code cannot be had (EngineCodeUnavailable).
"""

from __future__ import annotations

import json

import pytest

import engine_code as ec
from engine_code import EngineCodeUnavailable

pytestmark = [pytest.mark.engines, pytest.mark.slow]


def run(fn, *args, **kwargs):
    """Call into engine code; skip (not fail) when the code is unavailable."""
    try:
        return fn(*args, **kwargs)
    except EngineCodeUnavailable as exc:
        pytest.skip(f"engine code unavailable: {exc}")


# --------------------------------------------------------------------------
# vLLM: speculative_config.num_speculative_tokens_per_batch_size
# --------------------------------------------------------------------------

VLLM_CFG = {
    "num_speculative_tokens": 3,
    "num_speculative_tokens_per_batch_size": [[1, 4, 3], [5, 16, 2], [17, 64, 0]],
}


@pytest.mark.parametrize(
    "batch_size,expected",
    [(1, 3), (4, 3), (5, 2), (8, 2), (16, 2), (17, 0), (64, 0), (100, 0), (512, 0)],
)
def test_vllm_inclusive_ranges_and_tail(batch_size, expected):
    # above the last range the last K is carried forward (here 0)
    assert run(ec.vllm_k_for, VLLM_CFG, batch_size) == expected


def test_vllm_dense_lookup_matches_k_for():
    dense = run(ec.vllm_dense_lookup, VLLM_CFG, 128)
    assert len(dense) == 129 and dense[0] == 0  # index 0 unused
    assert [ec.vllm_k_for(VLLM_CFG, b, max_num_seqs=128) for b in range(1, 129)] == dense[1:]


def test_vllm_gap_carries_previous_k_and_tail_carries_last():
    cfg = {"num_speculative_tokens": 3,
           "num_speculative_tokens_per_batch_size": [[1, 16, 3], [32, 128, 2]]}
    assert run(ec.vllm_k_for, cfg, 20) == 3     # gap 17..31 -> previous K
    assert run(ec.vllm_k_for, cfg, 200) == 2    # beyond 128 -> last K, not 0


def test_vllm_k_clamped_to_num_speculative_tokens():
    cfg = {"num_speculative_tokens": 2,
           "num_speculative_tokens_per_batch_size": [[1, 8, 5], [9, 16, 1]]}
    assert run(ec.vllm_k_for, cfg, 4) == 2
    assert run(ec.vllm_k_for, cfg, 12) == 1


def test_vllm_unsorted_entries_are_sorted_and_tuples_accepted():
    sched = [(17, 64, 0), [5, 16, 2], [1, 4, 3]]
    assert run(ec.vllm_validate, sched) == [(1, 4, 3), (5, 16, 2), (17, 64, 0)]


def test_vllm_no_schedule_means_static_k():
    assert run(ec.vllm_k_for, {"num_speculative_tokens": 4,
                               "num_speculative_tokens_per_batch_size": None}, 300) == 4
    # an empty list is falsy in the scheduler's `if` -> static K as well
    assert run(ec.vllm_k_for, {"num_speculative_tokens": 4,
                               "num_speculative_tokens_per_batch_size": []}, 7) == 4


@pytest.mark.parametrize(
    "schedule,msg",
    [
        ([[2, 8, 3]], "must start at 1"),
        ([[1, 8, 3], [8, 16, 2]], "non-overlapping"),
        ([[1, 8, 3], [4, 16, 2]], "non-overlapping"),
        ([[1, 8, -1]], ">= 0"),
        ([[1, 0, 3]], "must be positive"),
        ([[1, 8, 3], [16, 9, 2]], "start must be <= end"),
        ([[1, 8, 0, 4096, 3]], "3-item sequence"),  # context-aware form: not in any release
        ([], "must not be empty"),
        ({"1-16": 3}, "non-empty list"),  # the dict form from the PR description is NOT accepted
    ],
)
def test_vllm_validation_errors(schedule, msg):
    with pytest.raises(ValueError, match=msg):
        run(ec.vllm_validate, schedule)


def test_vllm_context_len_is_ignored_by_released_code():
    assert run(ec.vllm_k_for, VLLM_CFG, 8, context_len=100_000) == 2


def test_vllm_before_024_has_no_schedule():
    with pytest.raises(EngineCodeUnavailable, match="0.24.0"):
        ec.vllm_k_for(VLLM_CFG, 8, version="0.23.0")


# --------------------------------------------------------------------------
# TensorRT-LLM: speculative_config.draft_len_schedule
# --------------------------------------------------------------------------

TRT12 = "1.2.1"
TRT13 = "1.3"  # "up to" generation (main after PR #10860, 1.3.0rc line)


@pytest.mark.parametrize("batch_size,expected",
                         [(1, 4), (3, 4), (4, 2), (5, 2), (7, 2), (8, 0), (100, 0)])
def test_trtllm_12_keys_are_lower_bounds(batch_size, expected):
    assert run(ec.trtllm_k_for, {1: 4, 4: 2, 8: 0}, batch_size, TRT12) == expected


def test_trtllm_12_last_key_extends_to_infinity():
    assert run(ec.trtllm_k_for, {1: 4, 16: 2}, 10_000, TRT12) == 2


@pytest.mark.parametrize(
    "schedule,max_draft_len,msg",
    [
        ({4: 4, 8: 2}, 4, "must include batch_size=1"),
        ({1: 3, 4: 2}, 4, r"draft_len_schedule\[1\] must equal max_draft_len"),
        ({1: 4, 4: 5}, 4, "must be <= max_draft_len"),
        ({1: 4, 4: -1}, 4, "must be >= 0"),
        ({0: 4, 1: 4}, 4, "threshold must be >= 1"),
    ],
)
def test_trtllm_12_validation(schedule, max_draft_len, msg):
    with pytest.raises(ValueError, match=msg):
        run(ec.trtllm_validate, schedule, max_draft_len, TRT12)


def test_trtllm_validator_sorts_and_accepts_json_string_keys():
    out = run(ec.trtllm_validate, json.loads('{"8": 0, "1": 4, "4": 2}'), 4, TRT12)
    assert list(out.items()) == [(1, 4), (4, 2), (8, 0)]


@pytest.mark.parametrize("batch_size,expected",
                         [(1, 4), (4, 4), (5, 2), (8, 2), (9, 1), (32, 1), (33, 0), (1000, 0)])
def test_trtllm_13_keys_are_up_to(batch_size, expected):
    assert run(ec.trtllm_k_for, {4: 4, 8: 2, 32: 1}, batch_size, TRT13) == expected


def test_trtllm_13_smallest_key_must_equal_max_draft_len_and_1_not_required():
    assert run(ec.trtllm_validate, {4: 4, 8: 2}, 4, TRT13) == {4: 4, 8: 2}
    with pytest.raises(ValueError, match=r"draft_len_schedule\[4\] must equal max_draft_len"):
        run(ec.trtllm_validate, {4: 3, 8: 2}, 4, TRT13)


def test_trtllm_same_schedule_means_different_k_across_generations():
    sched = {1: 4, 4: 2, 8: 0}
    assert run(ec.trtllm_k_for, sched, 5, TRT12) == 2   # 4 <= 5 < 8 -> key 4
    assert run(ec.trtllm_k_for, sched, 5, TRT13) == 0   # 5 <= 8 -> key 8
    assert run(ec.trtllm_k_for, sched, 2, TRT13) == 2   # 2 <= 4 -> key 4
    assert run(ec.trtllm_k_for, sched, 9, TRT12) == 0
    assert run(ec.trtllm_k_for, sched, 9, TRT13) == 0   # above last key -> 0


# --------------------------------------------------------------------------
# SGLang: --speculative-adaptive-config (per-batch-size candidate_steps)
# --------------------------------------------------------------------------

SG_CFG = {"1": {"candidate_steps": [3]}, "8": {"candidate_steps": [1]},
          "32": {"candidate_steps": [0]}}


@pytest.mark.parametrize("batch_size,expected",
                         [(1, 3), (7, 3), (8, 1), (31, 1), (32, 0), (4096, 0)])
def test_sglang_keys_are_lower_bounds(batch_size, expected):
    assert run(ec.sglang_steps_for, SG_CFG, batch_size) == expected
    assert run(ec.sglang_candidate_steps_for, SG_CFG, batch_size) == [expected]


def test_sglang_below_smallest_key_uses_smallest_slot():
    cfg = {"4": {"candidate_steps": [2]}, "16": {"candidate_steps": [1]}}
    assert run(ec.sglang_steps_for, cfg, 1) == 2


def test_sglang_cuda_graph_padding_happens_before_routing():
    # bs 5 is padded up to the captured size 8 -> slot "8"
    assert run(ec.sglang_steps_for, SG_CFG, 5, cuda_graph_bs=[1, 2, 4, 8, 16, 32]) == 1
    assert run(ec.sglang_steps_for, SG_CFG, 5) == 3


def test_sglang_initial_step_of_a_multi_candidate_slot():
    cfg = {"1": {"candidate_steps": [1, 3, 5, 7]}, "8": {"candidate_steps": [0, 1, 3]}}
    # ServerArgs default: middle of the union [0,1,3,5,7] -> 3, a candidate of both slots
    assert run(ec.sglang_steps_for, cfg, 1) == 3
    assert run(ec.sglang_steps_for, cfg, 8) == 3
    # initial step not a candidate of the slot -> the slot's middle candidate
    assert run(ec.sglang_steps_for, cfg, 8, initial_steps=7) == 1
    assert run(ec.sglang_candidate_steps_for, cfg, 100) == [0, 1, 3]


def test_sglang_loader_from_file_and_non_digit_keys(tmp_path):
    p = tmp_path / "adaptive.json"
    p.write_text(json.dumps({"ema_alpha": 0.5, "8": {"candidate_steps": [0, 1]},
                             "1": {"candidate_steps": [7, 1, 3]}}))
    entries = run(ec.sglang_load_adaptive_config, p)
    assert sorted(entries) == [1, 8]          # non-digit keys are global knobs, not slots
    assert entries[1]["candidate_steps"] == [7, 1, 3]  # stored as written; slots sort/dedupe
    assert run(ec.sglang_candidate_steps_for, str(p), 2) == [1, 3, 7]


@pytest.mark.parametrize(
    "cfg,msg",
    [
        ({"1": {"candidate_steps": []}}, "non-negative ints"),
        ({"1": {"candidate_steps": [-1, 2]}}, "non-negative ints"),
        ({"1": {"candidate_steps": [1.5]}}, "non-negative ints"),
        ({"1": {}}, "non-negative ints"),
        ({"ema_alpha": 0.2}, "at least one integer-string"),
        ({"-1": {"candidate_steps": [1]}}, "at least one integer-string"),  # "-1".isdigit() is False
    ],
)
def test_sglang_validation(cfg, msg):
    with pytest.raises(ValueError, match=msg):
        run(ec.sglang_load_adaptive_config, cfg)


def test_sglang_before_0513_has_no_per_batch_config():
    with pytest.raises(EngineCodeUnavailable, match="0.5.13"):
        ec.sglang_steps_for(SG_CFG, 1, version="0.5.12")


# --------------------------------------------------------------------------
# SGLang DSpark: --speculative-dspark-sps-table-path
# --------------------------------------------------------------------------

SPS = {"sample_batch_tokens": [1, 64, 256], "sample_steps_per_sec": [100.0, 80.0, 50.0],
       "max_batch_tokens": 512}


@pytest.mark.parametrize("tokens,expected",
                         [(0, 100.0), (1, 100.0), (63, 100.0), (64, 80.0), (255, 80.0),
                          (256, 50.0), (10_000, 50.0)])
def test_sglang_sps_floor_lookup(tokens, expected):
    assert run(ec.sglang_sps_lookup, SPS, tokens) == expected


@pytest.mark.parametrize(
    "table,msg",
    [
        ({**SPS, "sample_batch_tokens": [1, 256, 64]}, "strictly increasing"),
        ({**SPS, "sample_steps_per_sec": [1.0]}, "equal length"),
        ({**SPS, "max_batch_tokens": 100}, "max_batch_tokens must be >="),
        ({**SPS, "sample_batch_tokens": [], "sample_steps_per_sec": []}, "at least one probe"),
    ],
)
def test_sglang_sps_validation(table, msg):
    with pytest.raises(Exception, match=msg):
        run(ec.sglang_load_sps_table, table)


def test_sglang_sps_additive_table_step_time():
    t = run(ec.sglang_load_sps_table, {"bias_seconds": 0.01, "bs_probes": [1, 64],
                                       "alpha_seconds": [0.0, 0.01], "m_probes": [1, 1024],
                                       "theta_seconds": [0.0, 0.02]})
    assert type(t).__name__ == "SpsAdditiveCostTable"
    assert t.step_time(num_reqs=1, budget=0) == pytest.approx(0.01)
    assert t.step_time(num_reqs=64, budget=960) == pytest.approx(0.01 + 0.01 + 0.02 * 1023 / 1023)


def test_sglang_sps_runtime_lookup_agrees_with_table_lookup():
    pytest.importorskip("torch")
    tokens = [0, 1, 63, 64, 255, 256, 10_000]
    got = run(ec.sglang_sps_runtime_lookup, SPS, tokens)
    assert got == [run(ec.sglang_sps_lookup, SPS, n) for n in tokens]


def test_sglang_steps_table_matches_steps_for():
    sizes = [1, 5, 7, 8, 31, 32, 4096]
    cg = [1, 2, 4, 8, 16, 32]
    assert run(ec.sglang_steps_table, SG_CFG, sizes) == [run(ec.sglang_steps_for, SG_CFG, b) for b in sizes]
    assert run(ec.sglang_steps_table, SG_CFG, sizes, cuda_graph_bs=cg) == \
        [run(ec.sglang_steps_for, SG_CFG, b, cuda_graph_bs=cg) for b in sizes]
