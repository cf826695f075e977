"""Engine-exact schedule exports (simulator/plan/exports/) and the (B, K, L) grid.

Fast tests check the files against hand-worked tables and our reading of each engine's rule.
Tests marked ``engines`` (and ``slow``) run the engines' OWN parsing/lookup code from their
released wheels (tests/engine_code.py; downloaded once into ~/.cache/dsd-planner, skipped offline)
on every bundled scenario and check that each file is accepted and gives the planned K at every
batch size (and context) of the grid. TensorRT-LLM has no wheel on PyPI: its validator and lookup
come from the engine's source (see tests/engine_code.py).
"""
from __future__ import annotations

import json

import numpy as np
import pytest

from simulator.cli.predict import main as predict_main
from simulator.errors import PlannerError
from simulator.plan import exports as E
from simulator.plan.api import predict
from simulator.plan.grid import compute_grid
from simulator.specs.tree_acceptance import draft_acceptance_lengths
from simulator.specs.scenario import SCENARIO_DIR, build_scenario, load_scenario, parse_context_lens, read_scenario_file

B10 = np.arange(1, 11)
K10 = np.array([5, 5, 4, 4, 4, 2, 2, 0, 0, 0])  # K* falling with B, off from B = 8


def table(k, b=B10, ks=None):
    return E.KTable.from_1d(b, k) if ks is None else E.KTable(np.asarray(b), np.array([2048]),
                                                              np.asarray(k)[:, None], np.asarray(ks))


# --- formats against hand-worked tables ----------------------------------------------------------

def test_vllm_ranges_and_tail_rule():
    e = E.export("vllm", table(K10))
    assert e.version == "0.33.0"
    assert e.payload["num_speculative_tokens_per_batch_size"] == [[1, 2, 5], [3, 5, 4], [6, 7, 2], [8, 10, 0]]
    assert e.payload["num_speculative_tokens"] == 5
    # above the last range vLLM keeps the last K (here 0): B = 11 and 500 -> 0
    assert [E.engine_k(e, b) for b in (1, 2, 3, 6, 8, 11, 500)] == [5, 5, 4, 2, 0, 0, 0]
    assert any("vLLM keeps K=0 for every batch size above 10" in w for w in e.warnings)


def test_vllm_last_k_carries_beyond_the_grid_and_is_warned():
    e = E.export("vllm", table([3, 3, 2, 2], np.arange(1, 5)), "0.24.0", method_cfg={"method": "eagle3"})
    assert e.payload == {"method": "eagle3", "num_speculative_tokens": 3,
                         "num_speculative_tokens_per_batch_size": [[1, 2, 3], [3, 4, 2]]}
    assert E.engine_k(e, 4096) == 2
    assert any("keeps K=2 for every batch size above 4" in w for w in e.warnings)


def test_vllm_all_zero_sets_num_speculative_tokens_1_and_warns():
    e = E.export("vllm", table([0, 0, 0], np.arange(1, 4)))
    assert e.payload["num_speculative_tokens"] == 1  # vLLM: num_speculative_tokens must be > 0
    assert all(E.engine_k(e, b) == 0 for b in (1, 2, 3, 99))
    assert any("speculation never pays" in w for w in e.warnings)


def test_trtllm_12_lower_bound_keys():
    e = E.export("trtllm", table(K10), "1.2.1")
    # no step-time grid behind this table: the acceptance gate is written switched off (window 0 disables it)
    assert e.payload == {"max_draft_len": 5, "draft_len_schedule": {"1": 5, "3": 4, "6": 2, "8": 0},
                         "acceptance_window": 0, "acceptance_length_threshold": 0.0}
    assert [E.engine_k(e, b) for b in range(1, 12)] == list(K10) + [0]


def test_trtllm_13_up_to_keys_hold_under_both_lookups():
    e = E.export("trtllm", table(K10), "1.3.0rc8")
    sched = e.payload["draft_len_schedule"]
    assert sched == {"1": 5, "2": 5, "3": 4, "5": 4, "6": 2, "7": 2, "8": 0}
    upto = [E.trtllm_lookup(e.payload, b, "1.3.0rc8") for b in range(1, 11)]
    lower = [E.trtllm_lookup(e.payload, b, "1.2.1") for b in range(1, 11)]
    assert upto == lower == list(K10)  # a key at both ends of each range: either rule gives K*
    assert E.trtllm_lookup(e.payload, 11, "1.3.0rc8") == 0  # implicit 0 above the largest key


def test_trtllm_same_dict_differs_across_generations():
    # the example: {1: 4, 4: 2, 8: 0} at B = 5 is 2 (1.2.x) and 0 (1.3.0rc8+)
    p = {"draft_len_schedule": {"1": 4, "4": 2, "8": 0}}
    assert E.trtllm_lookup(p, 5, "1.2.1") == 2 and E.trtllm_lookup(p, 5, "1.3.0rc8") == 0


def test_trtllm_caps_k_above_the_batch_1_value_with_the_runner_up():
    # K* = 3 at B = 1 but 4 at B = 3: max_draft_len must equal the smallest key's K (3)
    ks = np.arange(6)
    good = np.zeros((4, 6, 1))
    good[:, :, 0] = [[1, 2, 3, 4, 3, 2], [1, 2, 3, 4, 3, 2], [1, 2, 3, 3.5, 4, 1], [1, 2, 3, 3.5, 4, 1]]
    k = np.argmax(good[:, :, 0], axis=1)
    assert list(k) == [3, 3, 4, 4]
    t = E.KTable(np.arange(1, 5), np.array([2048]), k[:, None], ks, good)
    e = E.export("trtllm", t, "1.2.1")
    assert {k: e.payload[k] for k in ("max_draft_len", "draft_len_schedule")} == \
        {"max_draft_len": 3, "draft_len_schedule": {"1": 3}}  # runner-up K <= 3 is 3
    assert any("max_draft_len" in w and "3, 4" in w for w in e.warnings)


def test_trtllm_13_no_return_from_zero_and_12_allows_it():
    k = np.array([3, 0, 0, 2, 2])  # off at B = 2-3, back on at 4
    ks = np.arange(4)
    good = np.zeros((5, 4, 1))
    for i, kk in enumerate(k):
        good[i, :, 0] = [1.0, 0.9, 0.8, 0.7]
        good[i, kk, 0] = 2.0
    good[1:3, 1, 0] = 0.95  # runner-up at B = 2-3 is K = 1
    t = E.KTable(np.arange(1, 6), np.array([2048]), k[:, None], ks, good)
    e12 = E.export("trtllm", t, "1.2.1")
    assert [E.engine_k(e12, b) for b in range(1, 6)] == [3, 0, 0, 2, 2]
    e13 = E.export("trtllm", t, "1.4.0rc4")
    assert [E.engine_k(e13, b) for b in range(1, 6)] == [3, 1, 1, 2, 2]
    assert any("returns from 0" in w for w in e13.warnings)


def test_trtllm_refuses_k0_at_batch_1():
    with pytest.raises(PlannerError, match="max_draft_len >= 1"):
        E.export("trtllm", table([0, 0, 0], np.arange(1, 4)), "1.2.1")


def test_sglang_slots_are_lower_bounds_and_0513_has_no_zero():
    e = E.export("sglang", table(K10), "0.5.23")
    assert e.payload == {"1": {"candidate_steps": [5]}, "3": {"candidate_steps": [4]},
                         "6": {"candidate_steps": [2]}, "8": {"candidate_steps": [0]}}
    assert [E.engine_k(e, b) for b in range(1, 12)] == list(K10) + [0]
    old = E.export("sglang", table(K10), "0.5.13")  # no goodput grid: K* = 0 clipped to the nearest K >= 1
    assert old.payload["8"] == {"candidate_steps": [1]}
    assert any("0.5.14" in w for w in old.warnings)


def test_sglang_cuda_graph_padding_uses_k_of_the_padded_size():
    k = np.array([4, 4, 3, 3, 3, 2, 2, 2, 1, 1, 1, 1])
    e = E.export("sglang", table(k, np.arange(1, 13)), cuda_graph_bs=[1, 2, 4, 8, 12])
    # B = 5..8 pad to 8 (K* = 2), B = 9..12 pad to 12 (K* = 1), B = 3..4 pad to 4 (K* = 3)
    assert [E.engine_k(e, b, cuda_graph_bs=[1, 2, 4, 8, 12]) for b in range(1, 13)] == \
        [4, 4, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1]
    assert e.payload == {"1": {"candidate_steps": [4]}, "3": {"candidate_steps": [3]},
                         "5": {"candidate_steps": [2]}, "9": {"candidate_steps": [1]}}


def test_sglang_neighbors_only_where_both_are_within_tolerance():
    ks = np.arange(5)
    good = np.zeros((2, 5, 1))
    good[0, :, 0] = [1.0, 1.5, 1.99, 2.0, 1.985]  # K* = 3, K = 2 and 4 within 2%
    good[1, :, 0] = [1.0, 1.5, 1.99, 2.0, 1.5]    # K* = 3, K = 4 is 25% worse
    t = E.KTable(np.array([1, 8]), np.array([2048]), np.array([[3], [3]]), ks, good)
    t.k_opt = np.array([[3], [2]])  # second range starts at K = 2 to keep two slots
    good[1, :, 0] = [1.0, 1.5, 2.0, 1.5, 1.0]
    e = E.export("sglang", t, sglang_candidates="neighbors")
    assert e.payload == {"1": {"candidate_steps": [2, 3, 4]}, "8": {"candidate_steps": [2]}}
    assert E.engine_k(e, 1) == 3  # the middle candidate: what SGLang starts a slot at


def test_vllm_ctx_rectangular_rows():
    k2 = np.array([[4, 3], [4, 3], [2, 2], [2, 1]])  # rows B = 1..4, columns L = 1024, 8192
    t = E.KTable(np.arange(1, 5), np.array([1024, 8192]), k2, np.arange(5))
    e = E.export("vllm-ctx", t)
    rows = e.payload["num_speculative_tokens_per_batch_size"]
    assert rows == [[1, 2, 1, 8191, 4], [1, 2, 8192, 8192, 3], [3, 3, 1, 8191, 2], [3, 3, 8192, 8192, 2],
                    [4, 4, 1, 8191, 2], [4, 4, 8192, 8192, 1]]
    # rectangular: every batch range splits context at the same boundaries
    b_ranges = {(r[0], r[1]) for r in rows}
    c_ranges = {(r[2], r[3]) for r in rows}
    assert len(rows) == len(b_ranges) * len(c_ranges)
    for i, b in enumerate(range(1, 5)):
        for j, c in enumerate((1024, 8192)):
            assert E.engine_k(e, b, c) == k2[i, j]
    assert "PROPOSAL" in e.notes[0] or any("PROPOSAL" in n for n in e.notes)


def test_sps_table_is_strictly_increasing_and_floor_lookup():
    itl = np.full((4, 3, 1), np.nan)
    k = np.array([2, 2, 1, 0])
    for i, kk in enumerate(k):
        itl[i, kk, 0] = 0.010 + 0.001 * i
    t = E.KTable(np.arange(1, 5), np.array([2048]), k[:, None], np.arange(3), itl_s=itl)
    e = E.export("sglang-sps", t)
    # tokens B (K*+1): 3, 6, 6, 4 -> probes 3, 4, 6 (two batch sizes at 6 tokens: the faster step)
    assert e.payload["sample_batch_tokens"] == [3, 4, 6]
    assert e.payload["sample_steps_per_sec"] == [100.0, round(1 / 0.013, 4), round(1 / 0.011, 4)]
    assert e.payload["max_batch_tokens"] == 6
    assert E.sps_lookup(e.payload, 5) == e.payload["sample_steps_per_sec"][1]


def test_every_export_has_a_markdown_table():
    t = table(K10)
    for fmt in ("vllm", "trtllm", "sglang", "vllm-ctx"):
        md = E.export(fmt, t).markdown()
        assert md.count("\n|") >= 5 and "| batch sizes |" in md


# --- versions ------------------------------------------------------------------------------------

@pytest.mark.parametrize("fmt,version,msg", [
    ("vllm", "0.23.0", "first appears in vLLM 0.24.0"),
    ("vllm-ctx", "0.33.0", "no released vLLM reads 5-item"),
    ("vllm", "pr48944", "vllm-ctx only"),
    ("trtllm", "1.1.0", "no draft_len_schedule"),
    ("trtllm", "1.3.0rc3", "not verified"),
    ("sglang", "0.5.12", "flat"),
    ("sglang", "0.5.10", "no adaptive speculation"),
    ("sglang-sps", "0.5.15", "first appears in SGLang 0.5.16"),
    ("trtllm", "one.two", "expected a version"),
])
def test_wrong_versions_are_refused(fmt, version, msg):
    with pytest.raises(PlannerError, match=msg):
        E.check_version(fmt, version)


def test_version_order_and_generations():
    assert E.parse_version("1.3.0rc8") < E.parse_version("1.3.0") < E.parse_version("1.3.0.post1")
    assert E.parse_version("0.5.13.post1") > E.parse_version("0.5.13")
    assert E.trtllm_generation("1.2.0rc2") == "lower" and E.trtllm_generation("1.3.0rc8") == "upto"
    assert E.trtllm_generation("1.4.0rc4") == "upto"
    assert E.check_version("vllm", "0.40.0")[1]  # newer than checked: accepted with a note


@pytest.mark.parametrize("args,msg", [
    (["--format", "trtllm", "--export-version", "1.3.0rc2"], "1.3.0rc8"),
    (["--format", "vllm-ctx", "--export-version", "0.33.0"], "PR #48944"),
    (["--format", "table", "--export-version", "0.33.0"], "applies to an engine export"),
    (["--format", "sglang", "--cuda-graph-bs", "1,x"], "--cuda-graph-bs"),
])
def test_cli_refuses_with_one_line(args, msg, capsys):
    rc = predict_main(["--scenario", "llama-3.1-8b-h100", "--batch-sizes", "1-16"] + args)
    err = capsys.readouterr().err
    assert rc == 2 and msg in err and err.count("\n") == 1


def test_cli_writes_each_export(tmp_path, capsys):
    for fmt in E.FORMATS:
        out = tmp_path / f"{fmt}.json"
        rc = predict_main(["--scenario", "llama-3.1-8b-h100", "--batch-sizes", "1-64", "--context-lens", "1024,8192",
                           "--format", fmt, "--output", str(out)])
        assert rc == 0, capsys.readouterr().err
        assert json.loads(out.read_text())
        rc = predict_main(["--scenario", "llama-3.1-8b-h100", "--batch-sizes", "1-64", "--format", fmt, "--markdown"])
        assert rc == 0 and "| " in capsys.readouterr().out
    rc = predict_main(["--scenario", "llama-3.1-8b-h100", "--batch-sizes", "1-64", "--context-lens", "512-8192",
                       "--format", "kmap"])
    text = capsys.readouterr().out
    assert rc == 0 and "512" in text and "8192" in text


# --- the (B, K, L) grid --------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["llama-3.1-8b-h100", "qwen3-235b-h200", "smollm2-cpu", "rl-rollout-long-context",
                                  "command-a-h100"])
def test_context_grid_slice_equals_the_1d_grid(name):
    sc = load_scenario(SCENARIO_DIR / f"{name}.toml")
    b = np.array([1, 2, 7, 64, 200])
    lens = np.array([512, 4096, min(16384, sc.model.max_position_embeddings or 16384)])
    g3 = compute_grid(sc, b, None, lens)
    for j, L in enumerate(lens):
        g1 = compute_grid(sc.with_overrides(context_len=int(L)), b)
        np.testing.assert_allclose(g3.itl_s[:, :, j], g1.itl_s, rtol=1e-12)
        np.testing.assert_allclose(g3.memory_per_gpu_bytes[:, :, j], g1.memory_per_gpu_bytes, rtol=1e-12)
        assert (g3.optimal_k_index()[:, j] == g1.optimal_k_index()).all()


def test_verify_time_grows_with_context_and_kstar_map_shape():
    p = predict("llama-3.1-8b-h100", batch_sizes="1-32")
    g = p.context_grid([512, 8192, 65536])
    # longer KV read per step: never faster (0.5%: at B = 1 the measured decode kernel sits on its
    # latency floor up to ~1k keys, where the fitted surface is flat to within 0.2%), and slower
    # over the whole range
    assert (np.diff(g.verify_s, axis=2) > -5e-3 * g.verify_s[..., 1:]).all()
    assert (g.verify_s[..., -1] > 1.2 * g.verify_s[..., 0]).all()
    t = p.kstar_frame([512, 8192, 65536])
    assert list(t.columns) == [512, 1024, 8192, 65536]  # the scenario's context_len is always a column
    assert t.shape == (32, 4)


def test_acceptance_by_context_hand_computed():
    al = draft_acceptance_lengths(np.full(2, 0.8), np.arange(3), [1.0, 0.5])  # a chain: rates scaled by s(L)
    np.testing.assert_allclose(al[:, 0], [1, 1.8, 1 + 0.8 + 0.64])
    np.testing.assert_allclose(al[:, 1], [1, 1.4, 1 + 0.4 + 0.16])


def _raw(name):
    raw = read_scenario_file(SCENARIO_DIR / f"{name}.toml")
    raw.pop("_path")
    return raw


def test_scenario_acceptance_by_context_lowers_kstar_at_long_context():
    raw = _raw("llama-3.1-8b-h100")
    raw["acceptance"].update(context_points=[1024, 65536], context_factors=[1.0, 0.6],
                             context_source="test table")
    raw["workload"].update(context_lens="1024-65536", batch_sizes="1-16")
    sc = build_scenario(raw, "ctx.toml", raw.get("_base_dir"))
    assert sc.acceptance_context.factor([1024, 8192, 65536]) == pytest.approx([1.0, 0.8, 0.6])
    p = predict(sc)
    t = p.kstar_frame()
    assert (t[65536] < t[1024]).all()
    # the 1-D grid at context_len applies the same factor (1.0 at 1024): the same goodput cell for cell; each view's
    # K* within the schedule's 1% of the best there (the fewest-range schedule over (B, L) may keep a K the 1-D
    # schedule over B alone leaves where two K tie within the tolerance)
    g = p.context_grid()
    j = int(np.flatnonzero(g.context_lens == 1024)[0])
    np.testing.assert_allclose(p.grid.goodput_per_seq, g.goodput_per_seq[:, :, j], rtol=1e-12)
    best = p.grid.goodput_per_seq.max(axis=1)
    rows = np.arange(len(best))
    for k in (p.table.k_opt.to_numpy(int), t[1024].to_numpy(int)):
        assert (p.grid.goodput_per_seq[rows, k] >= (1 - p.grid.schedule_tolerance) * best).all()
    al_long = g.acceptance_length[:, -1]
    rates = np.minimum(np.asarray(sc.acceptance.rates_upto(int(g.ks.max()))) * 0.6, 0.999)
    assert al_long[2] == pytest.approx(1 + rates[0] + rates[0] * rates[1])


def test_acceptance_by_context_needs_its_source():
    raw = _raw("llama-3.1-8b-h100")
    raw["acceptance"].update(context_points=[1024], context_factors=[0.9])
    with pytest.raises(PlannerError, match="context_source"):
        build_scenario(raw, "bad.toml", raw.get("_base_dir"))


def test_context_lens_parsing():
    assert list(parse_context_lens("512-4096")) == [512, 1024, 2048, 4096]
    assert list(parse_context_lens("1000-5000")) == [1000, 1024, 2048, 4096, 5000]
    assert len(parse_context_lens("512-131072:16")) == 16
    with pytest.raises(PlannerError, match="context-lens"):
        parse_context_lens("a,b")


# --- the engines' own code -----------------------------------------------------------------------

BUNDLED = sorted(p.stem for p in SCENARIO_DIR.glob("*.toml"))


def _context_axis(name: str) -> list[int]:
    top = load_scenario(SCENARIO_DIR / f"{name}.toml").model.max_position_embeddings or 131072
    return [L for L in (512, 2048, 8192, 32768, 131072) if L <= top]


def _ec():
    import engine_code
    return engine_code


def _run(fn, *a, **k):
    ec = _ec()
    try:
        return fn(*a, **k)
    except ec.EngineCodeUnavailable as exc:
        pytest.skip(f"engine code unavailable: {exc}")


def _kstar(p: "object", lens):
    t = p.kstar_map(lens)
    return t, t.k_opt[:, t.context_index]


@pytest.mark.engines
@pytest.mark.slow
@pytest.mark.parametrize("name", BUNDLED)
def test_engines_accept_and_reproduce_kstar(name):
    ec = _ec()
    lens = _context_axis(name)
    p = predict(SCENARIO_DIR / f"{name}.toml", context_lens=lens)
    t, k = _kstar(p, None)
    b = t.batch_sizes
    fits = k >= 0
    # vLLM (released 3-item form): the engine's dense lookup gives K* at every batch size that fits
    e = p.export("vllm")
    dense = _run(ec.vllm_dense_lookup, e.payload, int(b.max()), "0.33.0")
    assert [dense[x] for x in b[fits]] == list(k[fits])
    # released vLLM rejects the 5-item proposal form; our reading of it gives K* at every (B, L)
    e5 = p.export("vllm-ctx")
    with pytest.raises(ValueError, match="3-item"):
        _run(ec.vllm_validate, e5.payload["num_speculative_tokens_per_batch_size"], "0.33.0")
    for j, L in enumerate(t.context_lens):
        col = t.k_opt[:, j]
        got = [E.engine_k(e5, int(x), int(L)) for x in b[col >= 0]]
        assert got == list(col[col >= 0]), f"context {L}"
    # TensorRT-LLM, both generations: validated by the engine's validator, K from its lookup
    for version in ("1.2.1", "1.3.0rc8"):
        if k[0] <= 0:
            with pytest.raises(PlannerError):
                p.export("trtllm", version)
            continue
        e = p.export("trtllm", version)
        sched = e.payload["draft_len_schedule"]
        _run(ec.trtllm_validate, sched, e.payload["max_draft_len"], version)
        got = [_run(ec.trtllm_k_for, sched, int(x), version, e.payload["max_draft_len"]) for x in b[fits]]
        want = [E.engine_k(e, int(x)) for x in b[fits]]
        assert got == want
        if version != "1.2.1":  # the 'up to' file reads the same under the lower-bound lookup in the grid
            other = [_run(ec.trtllm_k_for, sched, int(x), "1.2.1", e.payload["max_draft_len"]) for x in b[fits]]
            assert other == got
        # K* itself wherever no engine rule forced a runner-up (each such change is warned)
        changed = np.array(got) != k[fits]
        if changed.any():
            assert any("runner-up" in w for w in e.warnings)
        else:
            assert not any("runner-up" in w for w in e.warnings)
    # SGLang adaptive config: accepted by the loader; the engine's routing gives K* (0.5.23) and the
    # positive-only runner-up where K* = 0 (0.5.13)
    for version in ("0.5.23", "0.5.13"):
        e = p.export("sglang", version, cuda_graph_bs=[])
        _run(ec.sglang_load_adaptive_config, e.payload, version)
        got = _run(ec.sglang_steps_table, e.payload, b[fits], version)
        if version == "0.5.23":
            assert got == list(k[fits])
        else:
            assert got == [E.engine_k(e, int(x)) for x in b[fits]] and min(got) >= 1
    # with CUDA-graph padding: the K* of the padded batch size
    cg = [1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128]
    e = p.export("sglang", cuda_graph_bs=cg)
    got = _run(ec.sglang_steps_table, e.payload, b[fits], "0.5.23", cuda_graph_bs=cg)
    k_at = {int(x): int(v) for x, v in zip(b, k)}
    by_pad: dict[int, set] = {}
    for x, g in zip(b[fits], got):
        padded = E.pad_to_capture(int(x), cg)
        by_pad.setdefault(padded, set()).add(g)
        if k_at.get(padded, -1) >= 0:
            assert g == k_at[padded], f"B={x} pads to {padded}"
    assert all(len(v) == 1 for v in by_pad.values())  # one K per padded size
    # DSpark step-cost table: accepted (strictly increasing probes) and read back exactly
    s = p.export("sglang-sps")
    probes = s.payload["sample_batch_tokens"]
    got = [_run(ec.sglang_sps_lookup, s.payload, n) for n in probes]
    assert got == s.payload["sample_steps_per_sec"]


@pytest.mark.engines
@pytest.mark.slow
def test_engines_vllm_clamps_k_above_num_speculative_tokens():
    """Why the export sets num_speculative_tokens to the largest K: vLLM silently clamps larger ones."""
    ec = _ec()
    p = predict("llama-3.1-8b-h100", batch_sizes="1-64")
    e = p.export("vllm")
    cfg = dict(e.payload, num_speculative_tokens=2)
    dense = _run(ec.vllm_dense_lookup, cfg, 64)
    t, k = _kstar(p, None)
    assert [dense[x] for x in t.batch_sizes] == [min(int(v), 2) for v in k]


def test_schedule_k_index_over_a_context_axis_matches_the_per_column_rule():
    """schedule_k_index with a trailing context axis = the 1-D DP applied to each context column."""
    from simulator.plan.schedule import schedule_k_index
    rng = np.random.default_rng(7)
    g = 1 + 0.004 * rng.standard_normal((60, 6, 5))
    fits = rng.random(g.shape) > 0.1
    both = schedule_k_index(g, fits)
    for j in range(g.shape[2]):
        assert (both[:, j] == schedule_k_index(g[:, :, j], fits[:, :, j])).all()


@pytest.mark.parametrize("engine, release, fmt, said", [
    ("vllm", "0.12.0", "vllm", "cannot read it"),  # num_speculative_tokens_per_batch_size first in vLLM 0.24.0
    ("vllm", "0.30.0", "vllm", None),  # reads 0.33.0's file as written
    ("sglang", "0.5.6", "sglang", "cannot read it"),  # per-batch-size slots first in SGLang 0.5.13
    ("sglang", "0.5.20", "sglang", None),
    # 1.3.0rc8+ read draft_len_schedule keys as "up to", 1.2.1's file (the default) has lower bounds only
    ("trtllm", "1.3.0", "trtllm", "reads another file: pass --export-version 1.3.0"),
    ("trtllm", "1.2.1", "trtllm", None),
])
def test_an_engine_release_that_cannot_read_the_default_file_is_warned(engine, release, fmt, said):
    # before: --engine-version 0.12.0 --format vllm wrote vLLM 0.33.0's per-batch-size file without a word, and
    # --engine trtllm --engine-version 1.3.0 a lower-bound schedule that release reads as "up to" keys
    p = predict(model="llama-3.1-8b", hardware="h100-sxm", draft="eagle3", engine=engine, engine_version=release,
                batch_sizes="1-400")
    warned = [w for w in p.export(fmt).warnings if "(the engine release: --engine-version)" in w]
    assert len(warned) == (said is not None)
    if said:
        assert f"{engine} {release}" in warned[0] and "the --export-version default" in warned[0] and said in warned[0]
    # a release named for the file itself is the user's choice: no such warning
    assert not [w for w in p.export(fmt, E.DEFAULT_VERSION[fmt]).warnings if "--engine-version" in w]
