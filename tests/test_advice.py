"""Engine-setting advice (simulator/plan/advice.py): each rule's arithmetic against a hand computation,
each rule's code location against the released wheel's own source lines (where the wheel is cached),
the CLI's bad input, and no section when nothing binds."""
from __future__ import annotations

import json
import zipfile
from pathlib import Path

import numpy as np
import pytest

from simulator import predict
from simulator.physics.engine_time import verify_in_graph
from simulator.plan import advice as A
from simulator.plan import runner_advice as R
from simulator.plan.advice_line import batch_span
from simulator.specs.engines import load_engine, serving_default, with_capture_limit
from cli_inprocess import run_main
from engine_code import EngineCodeUnavailable, wheel_path

ROOT = Path(__file__).resolve().parent.parent


def wheel_lines(name: str, version: str, member: str) -> list[str]:
    """The lines of one module of the released wheel (downloaded into the cache on first use, as the
    export tests' engine code is: tests/engine_code.py); skips only where no wheel can be had."""
    try:
        whl = wheel_path(name, version)
    except EngineCodeUnavailable as exc:
        pytest.skip(str(exc))
    with zipfile.ZipFile(whl) as z:
        return z.read(member).decode().splitlines()


def run_predict(*args):
    return run_main("simulator.predict", *args, cwd=ROOT)


# --- pure arithmetic, by hand ----------------------------------------------------------------------

def test_verify_size_against_the_vllm_0110_ceiling():
    # vLLM 0.11.0 capture ceiling 512 tokens (min(2 * 256, 512)): B=160, K=3 -> 640 tokens > 512 -> eager;
    # B=128, K=3 -> 512 tokens, captured. SGLang counts sequences: B=160 whatever K.
    assert A.verify_size(160, 3, "tokens") == 640
    assert A.verify_size(128, 3, "tokens") == 512
    assert A.verify_size(160, 3, "sequences") == 160
    eng = load_engine("vllm", "0.11.0")
    assert eng.spec_capture_max_tokens == 512
    assert not verify_in_graph(eng, 160, 3) and verify_in_graph(eng, 128, 3)


def test_round_up_to_the_capture_stride():
    assert A.round_up(640, 8) == 640  # range(8, N + 1, 8) holds 640
    assert A.round_up(641, 8) == 648
    assert A.round_up(1176, 16) == 1184  # 74 x 16


def test_sequences_within_a_token_budget():
    # budget 512 tokens, K = 2: each sequence needs 3 tokens -> 512 // 3 = 170 of 392 verify in a step
    assert A.sequences_within_budget(392, 2, 512) == 170
    assert A.sequences_within_budget(100, 2, 512) == 100  # 300 tokens fit
    assert A.sequences_within_budget(600, 0, 512) == 512  # plain decoding: one token each


def test_gain_share_and_span():
    assert A.gain_share(110.0, 100.0) == pytest.approx(0.10)
    assert A.gain_share(5.0, 0.0) == 0.0  # nothing to compare against
    assert batch_span([1, 2, 3, 7, 9, 10]) == "1-3, 7, 9-10"


def test_gpu_default_tiers():
    # vllm/engine/arg_utils.py (0.11.0:1605-1624): >= 70 GiB and not A100 -> max_num_seqs 1024, else 256;
    # max_num_batched_tokens 8192 / 2048 for the API server (the engine profile's [serving])
    eng = load_engine("vllm", "0.11.0")
    assert serving_default(eng, "max_num_seqs", 80e9, "h100-sxm") == 1024  # 80e9 B = 74.5 GiB
    assert serving_default(eng, "max_num_seqs", 80e9, "a100-sxm-80gb") == 256
    assert serving_default(eng, "max_num_seqs", 48e9, "l40s") == 256  # 44.7 GiB
    assert serving_default(eng, "max_num_batched_tokens", 80e9, "h100-sxm") == 8192
    assert serving_default(eng, "max_num_batched_tokens", 48e9, "l40s") == 2048


def test_rules_by_engine_version():
    assert A.rule_for("capture", load_engine("vllm", "0.11.0"))["setting"] == "--cuda-graph-sizes"
    assert A.rule_for("capture", load_engine("vllm", "0.14.0"))["setting"] == "--max-cudagraph-capture-size"
    assert A.rule_for("capture", load_engine("sglang", "0.5.19"))["setting"] == "--cuda-graph-max-bs"
    assert A.rule_for("capture", load_engine("sglang", "0.4.4")) is None  # spec list hard-coded 1..32 there
    assert A.rule_for("dp_dsd_off", load_engine("vllm", "0.11.0")) is None  # no dynamic SD before PR #32374
    assert A.rule_for("dp_dsd_off", load_engine("vllm", "0.29.0")) is not None
    assert A.rule_for("dp_dsd_off", load_engine("vllm", "0.25.1")) is None  # the table is kept at DP > 1 there
    assert A.rule_for("dp_dsd_off", load_engine("vllm", "0.27.1")) is not None


def test_with_capture_limit_moves_the_ceiling():
    eng = with_capture_limit(load_engine("vllm", "0.11.0"), 1024)
    assert eng.spec_capture_max_tokens == 1024 and eng.capture_sizes[-1] == 1024
    assert np.all(np.diff(eng.capture_sizes[-10:]) == 8)  # continued on the 8-token stride
    assert verify_in_graph(eng, 160, 3)  # 640 <= 1024
    assert not verify_in_graph(eng, 300, 3)  # 1200 > 1024
    sgl = with_capture_limit(load_engine("sglang", "0.5.19"), 64)
    assert sgl.spec_capture_max_batch == 64 and not verify_in_graph(sgl, 65, 3)


# --- the rules on bundled scenarios ----------------------------------------------------------------

def test_max_num_seqs_below_the_planned_load():
    # llama-3.1-8b-h100 plans B 1-512; --max-num-seqs 128 caps it: the engine never runs more than 128
    p = predict("llama-3.1-8b-h100", max_num_seqs=128)
    (a,) = [x for x in p.engine_advice() if x.setting == "--max-num-seqs"]
    fits = p.table[p.table.fits_memory]
    assert a.current == 128 and a.suggested == int(fits.batch_size.max())
    assert min(a.at_batch_sizes) > 128
    # the gain is throughput at B over throughput at the cap: the two rows of the same table
    at = {int(r.batch_size): r.throughput for r in fits.itertuples()}
    best = max(at[b] / at[128] - 1 for b in a.at_batch_sizes)
    assert a.goodput_gain_share == pytest.approx(best, rel=1e-9)


def test_token_budget_below_b_times_k_plus_one():
    p = predict("llama-3.1-8b-h100", max_num_batched_tokens=512)
    (a,) = [x for x in p.engine_advice() if x.setting == "--max-num-batched-tokens"]
    t = p.table.set_index("batch_size")
    need = {b: b * (int(t.k_opt[b]) + 1) for b in a.at_batch_sizes}
    assert all(n > 512 for n in need.values())  # every named batch size needs more than the budget
    assert a.current == 512
    planned = t.index[t.fits_memory]
    assert a.suggested == max(b * (int(t.k_opt[b]) + 1) for b in planned)  # the budget B (K* + 1) needs at most
    # hand check at B = 392: K* + 1 tokens each, 512 // (K* + 1) sequences fit a step, so throughput
    # under the budget is at most that many sequences' goodput: the gain must be > 0 there
    b = 392
    if b in a.at_batch_sizes:
        k = int(t.k_opt[b])
        assert A.sequences_within_budget(b, k, 512) == 512 // (k + 1) < b


def test_dp_turns_dynamic_sd_off_in_vllm():
    from simulator.plan.exports import k_ranges
    # deepseek-v3-dp-ep: layout dp-ep with dp = 8 on vLLM 0.29.0: the per-batch-size table is dropped
    # (vllm/config/vllm.py:1110-1127 of 0.33.0) and num_speculative_tokens = the table's largest K runs
    p = predict("deepseek-v3-dp-ep")
    assert p.scenario.deployment.dp > 1
    (a,) = [x for x in p.engine_advice() if x.setting == "num_speculative_tokens"]
    assert a.current == max(r[2] for r in k_ranges(*p.kstar_by_batch()))  # the table's largest K
    g = p.grid_rows.set_index(["batch_size", "k"]).goodput_per_seq
    b = a.at_batch_sizes[0]
    assert g[(b, a.suggested)] > g[(b, a.current)]  # the suggested static K beats the one that runs there
    assert "vllm/config/vllm.py:1110" in a.rule_source


def _k0_checks(p):
    """What the dynamic-K table of an engine whose K = 0 entry still runs the drafter's first pass must show."""
    g = p.grid
    i0 = g.k_index(0)
    step = A.k0_step_s(g)  # the K = 0 entry as the engine runs it: plain + the drafter's pass over the B tokens
    plain = g.itl_s[:, i0]
    assert np.all(step > plain)  # the extra pass is never free
    idx, rows = g.optimal_k_index(), np.arange(len(g.batch_sizes))
    good_k = np.where(idx >= 0, g.goodput_per_seq[rows, np.maximum(idx, 0)], np.nan)
    # K* is chosen against that entry: at some batch sizes it speculates where a plain server would be faster
    # (K* >= 1 below plain decoding) because the table's K = 0 is slower still
    beaten = (g.k_star >= 1) & (good_k < 1.0 / plain) & (good_k > 1.0 / step)
    assert beaten.any()
    # where the advice still names K = 0 -> K >= 1, K* = 0 was chosen at the terms' pessimistic quantile: the
    # centre's best K there speculates (a gain inside the terms' spread, the decision line's case)
    for a in p.engine_advice():
        if a.current == "K=0":
            at = np.isin(g.batch_sizes.astype(int), a.at_batch_sizes)
            assert (g.k_star[at] == 0).all() and (g.centre_k()[at] >= 1).all()
    return beaten


def test_dsd_k0_costs_the_drafter_first_pass():
    # default scenario (draft model) on vLLM 0.33 at B up to 1024: its K = 0 entry still runs the drafter's first
    # pass (vllm/v1/spec_decode/llm_base_proposer.py:616-625), so the table's K = 0 is plain + that pass; K* is
    # chosen against it: speculation (K = 1 or 2 at B 137-152) where a plain server would be faster than both
    p = predict("default", batch_sizes="1-1024")
    assert p.scenario.engine.name == "vllm" and p.grid.dsd_k0 is not None
    beaten = _k0_checks(p)
    assert beaten.any() and set(p.grid.k_star[beaten]) <= {1, 2}


def test_sglang_adaptive_k0_costs_the_draft_extend_too():
    # the same on SGLang (0.5.23 wheel): step 0 of the adaptive config still runs the draft extend over the B
    # verified tokens (eagle_worker_v2.py:1469-1471), priced the same way
    p = predict("default", batch_sizes="1-1024", engine="sglang")
    assert p.scenario.engine.name == "sglang" and p.grid.dsd_k0 is not None
    _k0_checks(p)
    # an engine release whose K = 0 is plain decoding: no such entry (vLLM 0.11 had no dynamic-K table)
    old = predict("default", batch_sizes="1-256", engine="vllm", engine_version="0.11.0", draft="eagle")  # no draft model
    assert old.grid.dsd_k0 is None and A.k0_step_s(old.grid) is None


def test_nothing_binds_nothing_said():
    # command-a-h100 as shipped, on the physics alone: B <= 256 = max_num_seqs, 2 x 256 tokens <= 8192, verify
    # within 512 requests (the learned layer puts K* = 0 at B >= 637, where vLLM's K = 0 still runs the drafter's
    # extend pass: test_learned_layer_k0_priced_as_vllm_runs_it)
    p = predict("command-a-h100", learned=False)
    assert p.engine_advice() == []
    assert A.advice_lines([]) == []


def test_learned_layer_k0_priced_as_vllm_runs_it():
    # with the learned layer command-a's K* reaches 0 at large B (from B 637 since its host time hides behind
    # vLLM 0.33's steps; from 157 before); vLLM 0.33's K = 0 still runs the draft extend pass over the B verified
    # tokens, so the table's K = 0 is priced with it and K* is chosen against that
    p = predict("command-a-h100", batch_sizes="1-1024")
    assert p.grid.dsd_k0 is not None and np.all(A.k0_step_s(p.grid) > p.grid.itl_s[:, p.grid.k_index(0)])
    t = p.table.set_index("batch_size")
    at_zero = t[t.k_opt == 0]
    assert len(at_zero) and (at_zero.speedup_vs_plain < 1.0).all()  # K* = 0 on this engine: slower than plain


# --- code locations against the wheels' own lines ---------------------------------------------------

def test_vllm_0330_source_lines():
    cfg = wheel_lines("vllm", "0.33.0", "vllm/config/vllm.py")
    assert cfg[1110 - 1].strip() == "def _maybe_disable_dynamic_sd_for_data_parallel(self) -> None:"
    assert "data_parallel_size <= 1" in "\n".join(cfg[1110:1117])
    assert "num_speculative_tokens_per_batch_size = None" in cfg[1127 - 1]
    assert cfg[1862 - 1].strip() == "self._maybe_disable_dynamic_sd_for_data_parallel()"
    prop = wheel_lines("vllm", "0.33.0", "vllm/v1/spec_decode/llm_base_proposer.py")
    assert "Dynamic SD decided K=0" in prop[616 - 1] and prop[619 - 1].strip() == "if self.num_speculative_tokens == 0:"
    args = wheel_lines("vllm", "0.33.0", "vllm/engine/arg_utils.py")
    assert '"--max-cudagraph-capture-size"' in args[1827 - 1]


def test_vllm_0110_source_lines():
    sched = wheel_lines("vllm", "0.11.0", "vllm/config/scheduler.py")
    assert sched[227 - 1].strip() == "self.cuda_graph_sizes = [min(self.max_num_seqs * 2, 512)]"
    cfg = wheel_lines("vllm", "0.11.0", "vllm/config/__init__.py")
    assert cfg[551 - 1].strip() == "def _set_cudagraph_sizes(self):"
    run = wheel_lines("vllm", "0.11.0", "vllm/v1/core/sched/scheduler.py")
    assert run[220 - 1].strip() == "num_new_tokens = min(num_new_tokens, token_budget)"
    args = wheel_lines("vllm", "0.11.0", "vllm/engine/arg_utils.py")
    assert "UsageContext.OPENAI_API_SERVER: 1024," in "\n".join(args[1610:1614])


def test_sglang_0513_source_lines():
    sa = wheel_lines("sglang", "0.5.13", "sglang/srt/server_args.py")
    assert sa[735 - 1].strip() == "cuda_graph_max_bs: Optional[int] = None"
    assert sa[425 - 1].strip() == "max_running_requests: Optional[int] = None"
    assert sa[1444 - 1].strip().startswith("def _handle_gpu_memory_settings")


def test_sglang_0523_step_zero_keeps_the_draft_warm():
    w = wheel_lines("sglang", "0.5.23", "sglang/srt/speculative/eagle_worker_v2.py")
    assert w[1469 - 1].strip() == "elif self.speculative_num_steps == 0:"
    assert "_draft_extend below still" in w[1470 - 1] and "keeping draft KV warm" in w[1471 - 1]
    assert w[1503 - 1].strip() == "self.draft_worker._draft_extend_for_decode("
    env = wheel_lines("sglang", "0.5.23", "sglang/srt/environ.py")
    assert env[1577 - 1].strip() == "SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND = EnvBool(False)"
    adaptive = wheel_lines("sglang", "0.5.23", "sglang/srt/speculative/adaptive_spec_params.py")
    assert adaptive[47 - 1].strip() == '"64": {' and adaptive[48 - 1].strip() == '"candidate_steps": [0],'
    old = wheel_lines("sglang", "0.5.13", "sglang/srt/speculative/adaptive_spec_params.py")
    assert "s > 0 for s in steps" in "\n".join(old[97:104])  # 0.5.13 refuses step 0


@pytest.mark.parametrize("version, member, line, cap", [
    ("0.4.4", "sglang/srt/server_args.py", 282, 32),  # if self.speculative_algorithm == "EAGLE": ...
    ("0.4.5", "sglang/srt/server_args.py", 334, 48),
    ("0.5.13", "sglang/srt/arg_groups/speculative_hook.py", 283, 48),  # _handle_eagle_family
])
def test_sglang_speculation_resets_the_running_cap(version, member, line, cap):
    # the engine profiles' [speculative] max_running_default, against the released code: with a speculative
    # algorithm and no --max-running-requests SGLang sets its own cap (32 in 0.4.4, 48 from 0.4.5)
    src = wheel_lines("sglang", version, member)
    assert src[line - 1].strip() == f"server_args.max_running_requests = {cap}".replace(
        "server_args.", "self." if member.endswith("server_args.py") else "server_args.")
    assert "max_running_requests is None" in src[line - 2]
    profile = "0.4.4" if version == "0.4.4" else "0.5.19"
    assert load_engine("sglang", profile).spec_max_running == cap
    assert load_engine("vllm", "0.29.0").spec_max_running == 0  # vLLM's max_num_seqs does not depend on SD


def test_sglang_speculative_default_cap_in_the_advice():
    # SGLang 0.5.19, EAGLE-3 planned over B 1-128: no cap given, so the engine's own 48 binds above 48;
    # the gain is the table's throughput at B over the best throughput at 48 (a table of that one batch size)
    kw = dict(model="llama-3.1-8b", hardware="h100-sxm", engine="sglang", draft="eagle3")
    p = predict(batch_sizes="1-128", **kw)
    (a,) = [x for x in p.engine_advice() if x.setting == "--max-running-requests"]
    assert a.current == 48 and a.suggested == 128 and min(a.at_batch_sizes) == 49
    assert "speculative decoding on" in a.why
    fits = p.table[p.table.fits_memory]
    at = {int(r.batch_size): r.throughput for r in fits.itertuples()}
    at_cap = float(predict(batch_sizes="48", **kw).table.throughput.iloc[0])
    assert a.goodput_gain_share == pytest.approx(max(at[b] / at_cap - 1 for b in a.at_batch_sizes), rel=1e-9)
    # a cap the scenario sets is the server's own: no speculative default then
    p = predict(model="llama-3.1-8b", hardware="h100-sxm", engine="sglang", draft="eagle3", batch_sizes="1-128",
                max_num_seqs=256)
    assert not [x for x in p.engine_advice() if x.setting == "--max-running-requests"]


# --- the CLI ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("flag", ["--max-capture-size", "--max-num-seqs", "--max-num-batched-tokens"])
def test_cli_refuses_a_bad_setting(flag):
    r = run_predict("--scenario", "command-a-h100", flag, "-4")
    assert r.returncode == 2
    assert "Traceback" not in r.stderr
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and flag in lines[0] and ">= 1" in lines[0]


def test_cli_table_and_json_carry_the_advice():
    r = run_predict("--scenario", "llama-3.1-8b-h100", "--max-num-seqs", "128", "--format", "json")
    assert r.returncode == 0, r.stderr
    (a,) = [x for x in json.loads(r.stdout)["engine_advice"] if x["setting"] == "--max-num-seqs"]
    assert set(a) >= {"setting", "current", "suggested", "goodput_gain_share", "at_batch_sizes", "engine_version",
                      "rule_source"}
    assert a["current"] == 128 and a["engine_version"] == "vLLM 0.33.0"  # the newest vLLM profile
    r = run_predict("--scenario", "command-a-h100", "--physics-only")
    assert r.returncode == 0 and "engine settings" not in r.stdout  # nothing binds: no empty section


def test_sizing_report_shows_the_recommended_candidates_advice():
    from simulator.sizing import SizingOverrides, size
    from simulator.sizing.report import render_markdown
    from simulator.specs.scenario import load_scenario
    # a running-batch cap of 64 below the report's K* table (B 1-256): the recommended candidate's
    # section says so, with the setting and its current value
    sc = load_scenario(ROOT / "scenarios" / "sizing-dense-command-a.toml", max_num_seqs=64)
    res = size(sc, SizingOverrides(candidates=["h100-sxm"], tp=[8], policies=["dsd"], workers=1, sensitivity=False,
                                   n_requests=40, duration_s=15.0, max_requests=400, search_steps=1))
    if res.recommendation is None:
        pytest.skip("no recommended configuration at this small search")
    text = render_markdown(res)
    assert "--max-num-seqs 64 ->" in text


# --- vLLM's Model Runner V2 drafts the dynamic-K table's largest K (0.25-0.31) -----------------------------

def test_v2_runner_drafting_the_tables_largest_k_costs_each_smaller_k():
    # llama-3.1-8b-h100 (EAGLE-3) on vLLM 0.31.0: V2 runs it by default (every architecture from 0.29) and drafts
    # num_speculative_tokens (the table's largest K) at every step while the scheduler verifies the table's K
    p = predict("llama-3.1-8b-h100", engine_version="0.31.0")
    (a,) = [x for x in p.engine_advice() if x.setting == "VLLM_USE_V2_MODEL_RUNNER"]
    g, runs = p.grid, p.grid.as_engine_runs
    fits = p.table.fits_memory.to_numpy(bool) & (g.k_star >= 0)
    k_top = int(g.k_star[fits].max())
    assert f"K={k_top}" in a.why and a.current == "unset (Model Runner V2)"
    # by hand at the first and last batch size named: the K* cell as the V1 runner runs it, its draft passes
    # replaced by the largest K's; the same tokens a step, so goodput falls by the steps' ratio
    for b in (a.at_batch_sizes[0], a.at_batch_sizes[-1]):
        i = int(np.flatnonzero(g.batch_sizes == b)[0])
        k = int(g.k_star[i])
        assert k < k_top
        step = runs.itl_s[i, g.k_index(k)]
        v2 = step - runs.draft_step_s[i, g.k_index(k)] + g.draft_step_s[i, g.k_index(k_top)]
        assert v2 > step
        assert v2 / step - 1 <= a.goodput_gain_share + 1e-12
    # the batch sizes whose K* is the largest K lose nothing and are not named
    top = set(g.batch_sizes[fits & (g.k_star == k_top)].astype(int).tolist())
    assert top and not top & set(a.at_batch_sizes)
    # the release that reads the per-step K (0.32.0, priced with the 0.31.0 profile) and the V1 runner of 0.27.1
    # (Llama is not among its V2 architectures) draft each batch size's K: no such line
    for version in ("0.32.0", "0.27.1", "0.33.0"):
        assert not [x for x in predict("llama-3.1-8b-h100", engine_version=version).engine_advice()
                    if x.setting in ("VLLM_USE_V2_MODEL_RUNNER", "vLLM release")]


def test_v2_runner_rule_by_method_architecture_and_vendor():
    from simulator.specs.engine_settings import drafts_table_max_rule
    eng = lambda v: load_engine("vllm", v)  # noqa: E731
    llama, ds32 = ("LlamaForCausalLM",), ("DeepseekV32ForCausalLM",)
    assert drafts_table_max_rule(eng("0.31.0"), "eagle3", False, llama, "nvidia") is not None
    assert drafts_table_max_rule(eng("0.31.0"), "model", False, llama, "nvidia") is not None  # draft models from 0.31
    assert drafts_table_max_rule(eng("0.29.0"), "model", False, llama, "nvidia") is None  # V1 there
    assert drafts_table_max_rule(eng("0.31.0"), "ngram", False, llama, "nvidia") is None  # n-gram stays on V1
    assert drafts_table_max_rule(eng("0.31.0"), "p-eagle", False, llama, "nvidia") is None  # parallel drafting: V1
    assert drafts_table_max_rule(eng("0.31.0"), "mtp", False, ds32, "amd") is None  # ROCm keeps DeepSeek-V3.2 on V1
    assert drafts_table_max_rule(eng("0.31.0"), "mtp", False, ds32, "nvidia") is not None
    assert drafts_table_max_rule(eng("0.27.1"), "eagle3", False, llama, "nvidia") is None  # V2 for a few archs only
    assert drafts_table_max_rule(eng("0.27.1"), "eagle3", False, ("Qwen2MoeForCausalLM",), "nvidia") is not None
    assert drafts_table_max_rule(eng("0.27.1"), "dspark", False, llama, "nvidia") is not None  # forced onto V2
    assert drafts_table_max_rule(eng("0.31.0"), "eagle3", True, llama, "nvidia") is None  # trees: not read
    assert drafts_table_max_rule(eng("0.22.1"), "eagle3", False, llama, "nvidia") is None  # no dynamic-K table


def test_dspark_has_no_v1_runner_to_fall_back_to():
    p = predict(model="qwen3-8b", hardware="h100-sxm", draft="dspark", engine="vllm", engine_version="0.27.1")
    (a,) = [x for x in p.engine_advice() if x.setting == "vLLM release"]
    assert (a.current, a.suggested) == ("0.27.1", "0.32.0") and "dspark" in a.why


def _frozenset(lines: list[str], name: str) -> set[str] | None:
    import re
    text = "\n".join(lines)
    m = re.search(rf"^{name}\s*=\s*frozenset\(\s*(\{{.*?\}})\s*\)", text, re.S | re.M)
    return None if m is None else set(re.findall(r'"(\w+)"', m.group(1)))


@pytest.mark.engines
@pytest.mark.parametrize("version", ["0.25.1", "0.27.1", "0.28.0", "0.29.0", "0.30.0", "0.31.0"])
def test_v2_runner_rules_are_the_wheels(version):
    """Each rule's lists are its first release's own (vllm/config/vllm.py), its V2 runner reads no per-step K, and
    the source lines it cites hold what it says."""
    from simulator.specs.engine_settings import rule_for
    rule = rule_for("dsd_drafts_max", _engine_at(version), by_release=True)
    cfg = wheel_lines("vllm", version, "vllm/config/vllm.py")
    assert (_frozenset(cfg, "DEFAULT_V2_MODEL_RUNNER_ARCHITECTURES") or set()) == set(rule["architectures"])
    rocm = _frozenset(cfg, "ROCM_DEFAULT_MRV1_ARCHITECTURES") or _frozenset(cfg, "ROCM_EXCLUDED_V2_MODEL_RUNNER_ARCHITECTURES")
    assert (rocm or set()) == set(rule["rocm_v1_architectures"])
    runner = "\n".join(wheel_lines("vllm", version, "vllm/v1/worker/gpu/model_runner.py"))
    assert "num_spec_tokens_to_schedule" not in runner
    use_v2 = int(rule["source"].split("use_v2_model_runner")[0].rsplit(":", 1)[1].split("-")[0])
    assert cfg[use_v2 - 1].strip() == "def use_v2_model_runner(self) -> bool:"
    start = next(i for i, line in enumerate(cfg) if "def _get_v2_model_runner_unsupported_features" in line)
    end = next(i for i in range(start + 1, len(cfg)) if cfg[i].startswith("    def "))
    unsupported = "\n".join(cfg[start:end])
    assert ('"draft_model"' in unsupported) == (version == "0.30.0")  # 0.30 sends draft models to V1 by name
    assert ("model" in rule["methods"]) == (version == "0.31.0")


def _engine_at(version: str):
    from dataclasses import replace
    from simulator.specs.engine_catalog import nearest_profile
    return replace(load_engine("vllm", nearest_profile("vllm", version)), release=version)


@pytest.mark.engines
def test_the_release_after_reads_the_per_step_k_and_the_k0_extend_starts_with_the_table():
    assert "num_spec_tokens_to_schedule" in "\n".join(wheel_lines("vllm", "0.32.0", "vllm/v1/worker/gpu/model_runner.py"))
    assert any("Dynamic SD decided K=0" in line
               for line in wheel_lines("vllm", "0.24.0", "vllm/v1/spec_decode/llm_base_proposer.py"))
    assert "num_speculative_tokens_per_batch_size" not in "\n".join(
        wheel_lines("vllm", "0.22.1", "vllm/config/speculative.py"))
    assert A.rule_for("dsd_k0", load_engine("vllm", "0.25.1")) is not None
    assert A.rule_for("dsd_k0", load_engine("vllm", "0.22.1")) is None


def test_serve_says_its_dynamic_k_policies_draft_each_k_where_v2_would_not(tmp_path):
    toml = tmp_path / "v031.toml"
    toml.write_text('name = "v031"\n[model]\nname = "llama-3.1-8b"\n[hardware]\nname = "h100-sxm"\n[draft]\n'
                    'method = "eagle3"\n[engine]\nname = "vllm"\nversion = "0.31.0"\n')
    done = run_main("simulator.serve", "--scenario", toml, "--policy", "plain,dsd", "--waves", "8,1")
    assert done.returncode == 0, done.stderr
    assert "Model Runner V2, which drafts the per-batch-size table's largest K" in done.stderr
    assert "VLLM_USE_V2_MODEL_RUNNER=0" in done.stderr
    fixed = run_main("simulator.serve", "--scenario", toml, "--policy", "plain,fixed", "--waves", "8,1")
    assert "Model Runner V2" not in fixed.stderr  # a fixed K drafts what it verifies on either runner


@pytest.mark.engines
def test_the_033_profile_says_which_runner_runs_by_default():
    """vLLM 0.33.0's default runner for speculative decoding is V2 (what the profile's note cites), its draft graphs
    set up where the note says."""
    cfg = wheel_lines("vllm", "0.33.0", "vllm/config/vllm.py")
    assert cfg[731 - 1].strip() == "def use_v2_model_runner(self) -> bool:"
    assert cfg[3053 - 1].strip() == "def _get_v2_model_runner_unsupported_features(self) -> list[str]:"
    spec = wheel_lines("vllm", "0.33.0", "vllm/v1/worker/gpu/spec_decode/target_dependent_ar/speculator.py")
    assert spec[89 - 1].strip().startswith("def init_cudagraph_manager(")
    assert spec[147 - 1].strip() == "self._generate_fused_drafts"
    graphs = wheel_lines("vllm", "0.33.0", "vllm/v1/worker/gpu/cudagraph_utils.py")
    assert graphs[256 - 1].strip() == "def _init_candidates(self) -> None:"
    assert "rounded_num_tokens > max_cg_capture_size" in "\n".join(graphs[325:330])
    note = (ROOT / "simulator/data/engines/vllm-0.33.0.toml").read_text()
    assert "default_runner = \"Model Runner V2" in note and "speculator.py:89-149" in note


def test_the_launch_line_runs_the_table_on_the_v1_runner_where_v2_would_draft_its_largest_k():
    p = predict("llama-3.1-8b-h100", engine_version="0.31.0")
    exp = p.export("vllm")
    assert exp.how_to_use.startswith("VLLM_USE_V2_MODEL_RUNNER=0 vllm serve ")
    assert any(n.startswith("VLLM_USE_V2_MODEL_RUNNER=0: vLLM 0.31.0 runs eagle3 on Model Runner V2") for n in exp.notes)
    for version in ("0.33.0", "0.27.1"):  # the runner drafts each K there (or V1 is the default): nothing added
        other = predict("llama-3.1-8b-h100", engine_version=version).export("vllm")
        assert other.how_to_use.startswith("vllm serve ") and not any("VLLM_USE_V2" in n for n in other.notes)


@pytest.mark.engines
def test_the_variable_is_the_one_vllm_031_reads_and_0_selects_v1():
    envs = "\n".join(wheel_lines("vllm", "0.31.0", "vllm/envs.py"))
    assert '"VLLM_USE_V2_MODEL_RUNNER": lambda: maybe_convert_bool(' in envs
    assert "return bool(int(value))" in envs  # "0" -> False: use_v2_model_runner returns it as given
    cfg = wheel_lines("vllm", "0.31.0", "vllm/config/vllm.py")
    assert "if use_v2_model_runner is not None:" in "\n".join(cfg[700:725])


# --- no host work between draft passes on vLLM's Model Runner V2 (from 0.32) --------------------------------

def test_v2_fused_draft_loop_charges_no_host_time_between_draft_passes():
    from simulator.specs.scenario import SCENARIO_DIR, load_scenario
    sc = load_scenario(SCENARIO_DIR / "llama-3.1-8b-h100.toml")  # EAGLE-3, Llama (GQA), H100, vLLM 0.33.0
    assert sc.engine.per_draft_pass_s == 0.0 and "one fused draft-decode graph" in sc.cost_source
    profile = load_engine("vllm", "0.33.0")
    assert profile.per_draft_pass_s == 1e-4  # what the profile charges the V1 draft loop
    # by hand: a K = 3 step at B = 1 is 3 x 100 us shorter than with the V1 loop's host time, the rest equal
    from dataclasses import replace
    from simulator.plan.grid import compute_grid
    v1 = replace(sc, engine=replace(sc.engine, per_draft_pass_s=profile.per_draft_pass_s, runner_note=""))
    a, b = compute_grid(sc, batch_sizes=[1], ks=[0, 3]), compute_grid(v1, batch_sizes=[1], ks=[0, 3])
    assert a.itl_s[0, 0] == pytest.approx(b.itl_s[0, 0], rel=1e-12)
    assert b.itl_s[0, 1] - a.itl_s[0, 1] == pytest.approx(3e-4, rel=1e-9)
    # where it does not apply: 0.31.0 (the table is the V1 runner's there), a draft model, an MLA model, SM100
    for over in ({"engine_version": "0.31.0"}, {"draft": "model:llama-3.2-1b"}):
        assert load_scenario(SCENARIO_DIR / "llama-3.1-8b-h100.toml", **over).engine.per_draft_pass_s == 1e-4
    from simulator.specs.engine_settings import fused_draft_decode_rule
    eng = load_engine("vllm", "0.33.0")
    assert fused_draft_decode_rule(eng, "mtp", False, "mla", "hopper") is None
    assert fused_draft_decode_rule(eng, "eagle3", False, "gqa", "blackwell") is None
    assert fused_draft_decode_rule(eng, "eagle3", False, "gqa", "cdna3") is None
    assert fused_draft_decode_rule(eng, "eagle3", True, "gqa", "hopper") is None  # trees: not read
    assert fused_draft_decode_rule(eng, "mtp", False, "gqa", "ada") is not None


@pytest.mark.engines
@pytest.mark.parametrize("version, module, fused_line, fa_line", [
    ("0.32.0", "target_dependent_ar", None, 736), ("0.33.0", "target_dependent_ar", 147, 741)])
def test_the_fused_draft_loop_and_flashattention_in_place_update_are_the_wheels(version, module, fused_line, fa_line):
    spec = wheel_lines("vllm", version, f"vllm/v1/worker/gpu/spec_decode/{module}/speculator.py")
    assert any("self._generate_fused_drafts" in line for line in spec)
    if fused_line:
        assert spec[fused_line - 1].strip() == "self._generate_fused_drafts"
    fa = wheel_lines("vllm", version, "vllm/v1/attention/backends/flash_attn.py")
    assert fa[fa_line - 1].strip() == "self.supports_draft_decode_metadata_update = self.dcp_world_size == 1"
    cuda = "\n".join(wheel_lines("vllm", version, "vllm/platforms/cuda.py"))
    tail = cuda[cuda.index("def _get_backend_priorities"):]
    non_mla = tail[tail.index("if device_capability.major == 10 and not use_non_causal:"):]
    after = non_mla[non_mla.index("else:"):]
    assert after.index("AttentionBackendEnum.FLASH_ATTN,") < after.index("AttentionBackendEnum.FLASHINFER,")


# --- block drafters draft the table's largest K at every step with K > 0 (vLLM 0.32+) ------------------------

def test_a_block_drafters_table_is_capped_where_its_wide_blocks_cost_more_than_they_gain():
    p = predict(model="qwen3-8b", hardware="h100-sxm", draft="dflash", batch_sizes="1-512")
    (a,) = [x for x in p.engine_advice() if x.setting == "num_speculative_tokens"]
    g = p.grid
    fits = p.table.fits_memory.to_numpy(bool) & (g.k_star >= 0)
    assert a.current == int(g.k_star[fits].max()) and 1 <= a.suggested < a.current
    # by hand at the first batch size named: the table's K there drafts the largest K's block (K > 0), while the
    # capped table's best K <= cap drafts the cap's block; the advice's gain is at least that cell's ratio
    runs, b = g.as_engine_runs, a.at_batch_sizes[0]
    i = int(np.flatnonzero(g.batch_sizes == b)[0])
    al = np.asarray(runs.acceptance_length)

    def good(k, width):
        j = g.k_index(k)
        step = runs.itl_s[i, j] if k == 0 else (runs.itl_s[i, j] - runs.draft_step_s[i, j]
                                                   + g.draft_step_s[i, g.k_index(width)])
        return al[j] / step
    now = good(int(g.k_star[i]), a.current)
    capped = max(good(k, a.suggested) for k in range(0, a.suggested + 1) if g.fits_memory[i, g.k_index(k)])
    assert capped / now - 1 == pytest.approx(
        A.gain_share(R.capped_table(g, g.fits_memory, a.suggested, False)[1][i],
                     R.capped_table(g, g.fits_memory, a.current, False)[1][i]), rel=1e-9)
    assert capped / now - 1 <= a.goodput_gain_share + 1e-12 and capped > now
    assert "gives up at most" in a.why  # the small batch sizes, where the largest K's block still pays, say so
    # EAGLE-3 (no block) and a release before 0.32 (the V2 rule covers it there) get no such line
    eagle = predict(model="qwen3-8b", hardware="h100-sxm", draft="eagle3", batch_sizes="1-512")
    assert not [x for x in eagle.engine_advice() if x.setting == "num_speculative_tokens"]
    old = predict(model="qwen3-8b", hardware="h100-sxm", draft="dflash", batch_sizes="1-512", engine_version="0.31.0")
    assert not [x for x in old.engine_advice() if x.setting == "num_speculative_tokens"]


@pytest.mark.engines
def test_the_block_drafters_width_is_the_wheels():
    spec = wheel_lines("vllm", "0.33.0", "vllm/v1/worker/gpu/spec_decode/dflash/speculator.py")
    assert spec[65 - 1].strip() == "self.num_query_per_req = 1 + self.num_speculative_steps"
    assert spec[461 - 1].strip() == "num_speculative_tokens: int | None = None,"
    assert spec[546 - 1].strip() == "if num_speculative_tokens == 0:"
    assert "uniform_token_count=self.num_query_per_req," in "\n".join(spec[563:570])
    dspark = wheel_lines("vllm", "0.33.0", "vllm/v1/worker/gpu/spec_decode/dspark/speculator.py")
    assert dspark[40 - 1].startswith("class DSparkSpeculator(DFlashSpeculator)")
    old = wheel_lines("vllm", "0.32.0", "vllm/v1/worker/gpu/spec_decode/dflash/speculator.py")
    assert old[62 - 1].strip() == "self.num_query_per_req = 1 + self.num_speculative_steps"


@pytest.mark.engines
def test_vllm_drops_the_table_at_data_parallel_from_026():
    assert not any("_maybe_disable_dynamic_sd_for_data_parallel" in line
                   for line in wheel_lines("vllm", "0.25.1", "vllm/config/vllm.py"))
    cfg = wheel_lines("vllm", "0.26.0", "vllm/config/vllm.py")
    assert cfg[838 - 1].strip() == "def _maybe_disable_dynamic_sd_for_data_parallel(self) -> None:"
    assert cfg[1273 - 1].strip() == "self._maybe_disable_dynamic_sd_for_data_parallel()"



@pytest.mark.engines
@pytest.mark.parametrize("version, line", [("0.5.14", 1124), ("0.5.16", 1180), ("0.5.19", 1234)])
def test_sglang_step_zero_keeps_the_draft_warm_from_0514(version, line):
    worker = wheel_lines("sglang", version, "sglang/srt/speculative/eagle_worker_v2.py")
    assert "Drafting disabled (high batch size). _draft_extend below still" in worker[line - 1]
    assert not any("Drafting disabled (high batch size)" in x
                   for x in wheel_lines("sglang", "0.5.13", "sglang/srt/speculative/eagle_worker_v2.py"))


# --- TensorRT-LLM 1.2.x's draft_len_schedule (PR #8194, stage 1) --------------------------------------------

def test_trtllm_12_schedule_verifies_the_largest_k_for_two_model_drafts_and_does_not_run_for_one_model():
    kw = dict(model="llama-3.1-8b", hardware="h100-sxm", engine="trtllm", engine_version="1.2.1", batch_sizes="1-256")
    # two-model (n-gram): every step with K > 0 verifies K_top + 1 tokens: the cap that is best over the load
    p = predict(draft="ngram", **kw)
    (a,) = [x for x in p.engine_advice() if x.setting == "max_draft_len"]
    g = p.grid
    fits = p.table.fits_memory.to_numpy(bool) & (g.k_star >= 0)
    assert a.current == int(g.k_star[fits].max()) and a.suggested < a.current and "saves draft work only" in a.why
    # by hand at the first batch size named: the table's K verifying K_top's tokens against the cap's best K
    runs, b = g.as_engine_runs, a.at_batch_sizes[0]
    i = int(np.flatnonzero(g.batch_sizes == b)[0])
    al = np.asarray(runs.acceptance_length)
    verify = np.broadcast_to(g.verify_s, g.itl_s.shape)

    def good(k, width):
        j = g.k_index(k)
        step = runs.itl_s[i, j] if k == 0 else (runs.itl_s[i, j] - np.broadcast_to(runs.verify_s, g.itl_s.shape)[i, j]
                                                   + verify[i, g.k_index(width)])
        return al[j] / step
    now = good(int(g.k_star[i]), a.current)
    capped = max(good(k, a.suggested) for k in range(0, a.suggested + 1) if g.fits_memory[i, g.k_index(k)])
    assert 0 < capped / now - 1 <= a.goodput_gain_share + 1e-12
    # one-model (EAGLE-3): the schedule does not run; one K at every batch size
    e = predict(draft="eagle3", **kw)
    (o,) = [x for x in e.engine_advice() if x.setting == "max_draft_len"]
    assert "does not run" not in o.why and "runs max_draft_len" in o.why and "at every batch size" in o.why
    assert any("two-model path only" in w for w in e.export("trtllm").warnings)
    # TensorRT-LLM 1.4.0rc4 runs dynamic draft length on both paths (PR #10860, #12262): no such line
    new = predict(draft="eagle3", **(kw | {"engine_version": "1.4.0rc4"}))
    assert not [x for x in new.engine_advice() if x.setting == "max_draft_len"]
    assert not any("two-model path only" in w for w in new.export("trtllm").warnings)
