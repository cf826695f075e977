"""Serving simulation: policy comparisons on scenarios, conservation laws, properties, CLI errors.

Anchors: "model" (the step time must equal the core cost model's), "property" (an invariant any
correct engine simulation keeps), "scenario" (a claim about a bundled scenario, checked by
simulation; the numbers are outputs of this tool, not measurements).
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simulator import serving as sv
from simulator.errors import PlannerError
from simulator.plan.grid import compute_grid
from simulator.specs.scenario import load_scenario
from cli_inprocess import run_main

REPO = Path(__file__).resolve().parent.parent
WAVE_BATCHES = (1, 4, 16, 64, 128, 256)


@pytest.fixture(scope="module")
def command_a():
    return load_scenario(REPO / "scenarios" / "command-a-h100.toml")


@pytest.fixture(scope="module")
def llama():
    return load_scenario(REPO / "scenarios" / "llama-3.1-8b-h100.toml")


# --- step pricing ------------------------------------------------------------------------------

def test_step_time_equals_core_itl_grid(command_a):
    # model: with graphs off in both (every pass eager at no launch cost) and no extra overheads, a
    # decode-only step is the core ITL(B, K) (tests/test_step_model.py: with graphs and overheads on, at every
    # bundled scenario). The step pricer interpolates attention between context buckets (exact for the
    # datasheet roofline, which is linear in L, not for measured efficiencies), so compare at a bucket's own
    # context (rounded to a whole token for the grid: 1e-5)
    from dataclasses import replace
    eng = sv.EngineConfig(cuda_graphs=False, eager_overhead_per_kernel_s=0.0, schedule_overhead_s=0.0)
    no_graphs = replace(command_a.engine, graphs_enabled=False, eager_launch_per_kernel_s=0.0)
    pricer = sv.StepPricer(replace(command_a, engine=no_graphs), eng, 8, 256, 4000, True)
    ctx = float(round(pricer.ctx[np.argmin(abs(pricer.ctx - command_a.context_len))]))
    bs, ks = [1, 16, 64, 256], [0, 1, 3, 8]
    g = compute_grid(replace(command_a.with_overrides(context_len=int(ctx)), engine=no_graphs), batch_sizes=bs, ks=ks)
    for i, b in enumerate(bs):
        for j, k in enumerate(ks):
            t, _, _ = pricer.step_s(b, k, b * (k + 1), ctx, False, 0.0)
            assert t == pytest.approx(g.itl_s[i, j], rel=1e-5)


def test_draft_passes_beyond_the_capture_limit_run_eagerly_as_in_the_grid(llama):
    # SGLang 0.4.4 with EAGLE captures batch sizes 1..32 (cuda_graph_runner.py: list(range(1, 33)) with a
    # speculative algorithm): a draft pass of 33 or more sequences is launched by the host and takes the
    # slower of its launches and its GPU time, as the grid prices it; at 32 sequences it replays its graph
    # and takes its GPU time. At [serving] eager_overhead_per_kernel_s = 50 us the EAGLE-3 layer's 17
    # kernels (850 us) outlast its GPU time (~0.37 ms at B = 33 on the H100 tables). EAGLE-1's layer (0.4.4
    # cannot run EAGLE-3: its first release with it is 0.4.4.post2, which captures larger batches too)
    from dataclasses import replace
    from simulator.physics.draft_cost import DraftSetting, draft_pass_cost
    from simulator.physics.operators import pass_time
    sc = llama.with_overrides(engine="sglang", engine_version="0.4.4", draft="eagle")
    eng = replace(sv.engine_from_scenario(sc), eager_overhead_per_kernel_s=5e-5)
    pricer = sv.StepPricer(sc, eng, 3, 64, 2000, True)
    pricer.price_context_buckets()
    j = int(np.argmin(abs(pricer.ctx - 1024)))
    for b in (32, 33, 64):
        at = np.array([[float(b)]]), 1.0, np.array([[pricer.ctx[j]]])
        gpu = draft_pass_cost(DraftSetting.of(sc), *at, pass_time)[0]
        launches = gpu.n_kernels * 5e-5
        want = gpu.total_s[0, 0] if b <= 32 else max(gpu.total_s[0, 0], launches)
        assert pricer.draft[b - 1, j] == pytest.approx(want, rel=1e-12)
    assert pricer.draft[32, j] == pytest.approx(17 * 5e-5) and pricer.draft[31, j] < 17 * 5e-5
    g = compute_grid(sc, batch_sizes=[32, 33], ks=[3])
    assert g.draft_step_s[1, 0] > g.draft_step_s[0, 0]


def test_cuda_graph_padding_and_required_graphs(command_a):
    # hand: vLLM 0.33's captured token counts (engine profile [cuda_graphs] capture_sizes: 1, 2, 4, then every
    # 8 up to 512 at its default limit); 1024 tokens run eager. The serving steps pad by the scenario's engine
    # profile (physics.engine_time.pad), the grid's rule
    from simulator.physics.engine_time import pad
    eng = sv.EngineConfig()
    graphs = sv.graph_profile(command_a.engine, eng)
    assert graphs is command_a.engine and graphs.size_unit == "tokens" and graphs.max_capture_size == 512
    got = lambda b, k: tuple(x.item() for x in pad(graphs, b, k))  # noqa: E731
    assert got(3, 0) == (4, True) and got(9, 0) == (16, True) and got(3, 2) == (16, True)
    assert got(512, 0) == (512, True) and got(1024, 0) == (1024, False)
    fixed = sv.required_graphs(sv.policy_k_table(command_a, "fixed", 256, eng), graphs)
    eager = fixed[~fixed.captured]
    assert len(eager) == 1 and eager.batch_min.iloc[0] == 129 and eager.batch_max.iloc[0] == 256
    dsd = sv.required_graphs(sv.policy_k_table(command_a, "dsd", 256, eng), graphs)
    assert dsd.captured.all()  # K*(B) keeps B (K+1) <= 512 here: K = 1 at B = 256
    assert set(dsd.k) <= set(range(9))


def test_serving_graph_sizes_default_to_the_engine_profile(llama):
    # SGLang keys its graphs by sequences (0.4.4 with EAGLE: batch sizes 1..32, tests above): a decode step of
    # 5 sequences x 4 tokens replays the graph of 5 sequences (20 tokens, not vLLM's 24); [serving]
    # cuda_graph_sizes overrides the list in the profile's unit; cuda_graphs = false runs every pass eagerly
    from simulator.physics.engine_time import pad
    sc = llama.with_overrides(engine="sglang", engine_version="0.4.4", draft="eagle")  # 0.4.4 runs EAGLE, not EAGLE-3
    eng = sv.engine_from_scenario(sc)
    assert eng.cuda_graph_sizes is None
    graphs = sv.graph_profile(sc.engine, eng)
    assert graphs.size_unit == "sequences"
    assert [x.item() for x in pad(graphs, 5, 3)] == [20.0, True]
    assert [x.item() for x in pad(graphs, 33, 3)] == [132.0, False]  # beyond the speculative capture limit
    # a step with prompt chunks runs eagerly in SGLang (only decode and verify batches are captured)
    assert [x.item() for x in pad(graphs, 5, 3, 100)] == [100.0, False]
    user = sv.graph_profile(sc.engine, sv.EngineConfig(cuda_graph_sizes=(8, 16)))
    assert [x.item() for x in pad(user, 5, 3)] == [32.0, True]
    assert not pad(sv.graph_profile(sc.engine, sv.EngineConfig(cuda_graphs=False)), 5, 3)[1]


# --- the wave sweep: DSD vs fixed K vs plain ----------------------------------------------------

@pytest.fixture(scope="module")
def waves(command_a):
    # vLLM 0.11: with speculation the verify pass is captured only up to 512 tokens (B (K+1) <= 512),
    # the engine behaviour this sweep is about (engine profile simulator/data/engines/vllm-0.11.0.toml)
    sc = command_a.with_overrides(engine="vllm", engine_version="0.11.0")
    return sv.wave_sweep(sc, WAVE_BATCHES, multiplier=20, prompt_len=1800, output_len=400)


def _pivot(df, col):
    return df.pivot(index="batch_size", columns="policy", values=col)


def test_waves_dsd_at_least_fixed_everywhere(waves):
    # scenario: DSD >= fixed K=3 at every batch size (1% tolerance: where K*(B) = 3 they are equal
    # up to the drain, and where K*(B) = 4 the core table predicts < 1% gain at B = 16)
    for col in ("tokens_per_s_per_user", "throughput_tok_s"):
        t = _pivot(waves, col)
        assert (t["dsd"] >= 0.99 * t["fixed"]).all(), t


@pytest.mark.xfail(strict=True, reason="issue 47 seed case: with the learned layer dynamic K serves B = 256 at 0.98x plain"
                   " on vLLM 0.11 (Cohere: +1.8%; within the issue's 5% of 1.018x, but below plain: K* = 0 there and a"
                   " speculating server's K = 0 step costs the scenario's spec_k0_overhead_frac, 2%, over plain)")
def test_waves_fixed_k_loses_at_largest_batch_dsd_close(waves):
    # published shape (Cohere's dynamic SD post, vLLM, Command A, an EAGLE head at fixed K = 3, 20 waves
    # of each batch size): fixed K = 3 regressed below plain at B = 256 while dynamic K stayed ahead of
    # plain by a few percent (+1.8%). The scenario's acceptance is a one-step EAGLE-1 head's, cited in
    # scenarios/command-a-h100.toml (AL(3) = 2.29), not fitted to those figures. At B = 1 hand: AL(3) =
    # 2.29 over a K = 3 step ~1.25x the plain one (a memory-bound step) -> ~1.8x per user
    tput, user = _pivot(waves, "throughput_tok_s"), _pivot(waves, "tokens_per_s_per_user")
    assert tput.loc[256, "fixed"] < tput.loc[256, "plain"]
    assert user.loc[256, "fixed"] < user.loc[256, "plain"]
    assert 1.0 < tput.loc[256, "dsd"] / tput.loc[256, "plain"] < 1.08
    assert tput.loc[256, "dsd"] > tput.loc[256, "fixed"]
    # while at small batch both speculative policies are far ahead of plain
    assert user.loc[1, "fixed"] > 1.7 * user.loc[1, "plain"]
    assert user.loc[1, "dsd"] > 1.7 * user.loc[1, "plain"]


# --- RL long tail -------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def rl_runs():
    sc = load_scenario(REPO / "scenarios" / "rl-rollout-long-tail.toml")
    wl = sv.workload_from_scenario(sc, n_requests=256, concurrency=128)
    return {p: sv.simulate(sc, p, workload=wl, seed=1) for p in ("plain", "fixed", "dsd")}


def test_rl_long_tail_makespan_and_tail_k(rl_runs):
    # scenario: makespan plain > fixed K > DSD; in the drain (<= 8 sequences left) DSD drafts deep
    ms = {p: r.summary["makespan_s"] for p, r in rl_runs.items()}
    assert ms["plain"] > ms["fixed"] > ms["dsd"]
    tail = {p: r.steps[(r.steps.batch_size > 0) & (r.steps.batch_size <= 8)] for p, r in rl_runs.items()}
    assert tail["dsd"].k.mean() >= 5 and (tail["fixed"].k == 3).all()
    tbl = sv.tail_phases(list(rl_runs.values()), batch_threshold=8)
    assert set(tbl.policy) == {"plain", "fixed", "dsd"}
    assert (tbl.tail_s > 0).all()


# --- conservation -------------------------------------------------------------------------------

def _check_conservation(res: sv.ServingResult):
    req, steps = res.requests, res.steps
    assert (req.generated == req.output_len).all()  # each request ends with exactly its length
    assert steps.committed.sum() == req.output_len.sum() == res.summary["output_tokens"]
    assert (steps.kv_blocks <= res.kv_capacity_blocks).all()
    assert res.summary["kv_peak_occupancy"] <= 1.0
    assert (req.first_token_s >= req.arrival_s).all() and (req.finish_s >= req.first_token_s).all()
    assert (steps.step_s > 0).all() and np.all(np.diff(steps.t_s) > 0)
    assert set(sv.SUMMARY_KEYS) <= set(res.summary)


@pytest.mark.parametrize("policy", sv.POLICIES)
def test_conservation_every_policy(llama, policy):
    wl = sv.Workload(arrival="bursty", rate_per_s=40, n_requests=80, max_num_seqs=16,
                     prompt_len={"dist": "uniform", "low": 20, "high": 600},
                     output_len={"dist": "pareto", "scale": 20, "alpha": 1.2, "max": 400},
                     categories=({"name": "a", "weight": 2, "rate_scale": 1.1},
                                 {"name": "b", "weight": 1, "rates": [0.3, 0.2]}))
    res = sv.simulate(llama, policy, workload=wl, seed=3)
    _check_conservation(res)
    assert set(res.requests.category) == {"a", "b"}


def test_kv_pressure_preempts_and_stays_within_capacity(llama):
    # property: a cache far too small for the offered load preempts, never overflows, still completes
    sc = llama.with_overrides(memory_utilization=0.3)
    wl = sv.Workload(arrival="waves", concurrency=64, n_requests=64, max_num_seqs=64, prompt_len=1500,
                     output_len=600)
    res = sv.simulate(sc, "fixed", workload=wl, seed=0)
    _check_conservation(res)
    assert res.requests.preemptions.sum() > 0
    assert res.summary["kv_peak_occupancy"] > 0.9


def test_same_seed_same_result_and_seed_matters(llama):
    wl = sv.Workload(arrival="poisson", rate_per_s=30, n_requests=40, max_num_seqs=8,
                     prompt_len=200, output_len={"dist": "lognormal", "median": 50, "sigma": 1.0, "max": 300})
    a = sv.simulate(llama, "dsd-adaptive", workload=wl, seed=7)
    b = sv.simulate(llama, "dsd-adaptive", workload=wl, seed=7)
    c = sv.simulate(llama, "dsd-adaptive", workload=wl, seed=8)
    pd.testing.assert_frame_equal(a.steps, b.steps)
    pd.testing.assert_frame_equal(a.requests, b.requests)
    assert a.summary == b.summary
    assert not a.requests.output_len.equals(c.requests.output_len)


def test_policies_see_the_same_requests(llama):
    # property: lengths, arrivals and categories depend on the seed, not on the policy
    wl = sv.Workload(arrival="poisson", rate_per_s=30, n_requests=30, max_num_seqs=8,
                     prompt_len={"dist": "uniform", "low": 10, "high": 100}, output_len=30)
    a = sv.simulate(llama, "plain", workload=wl, seed=2).requests
    b = sv.simulate(llama, "dsd", workload=wl, seed=2).requests
    for col in ("prompt_len", "output_len", "category", "arrival_s"):
        assert a[col].equals(b[col])


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.integers(1, 12), prompt_hi=st.integers(1, 400), out_hi=st.integers(1, 60),
       seqs=st.integers(1, 6), budget=st.integers(16, 512), policy=st.sampled_from(sv.POLICIES),
       arrival=st.sampled_from(sv.ARRIVALS), prefill=st.sampled_from(("chunked", "whole")),
       seed=st.integers(0, 10_000))
def test_property_small_random_workloads(n, prompt_hi, out_hi, seqs, budget, policy, arrival, prefill, seed):
    sc = load_scenario(REPO / "scenarios" / "llama-3.1-8b-h100.toml")
    wl = sv.Workload(arrival=arrival, rate_per_s=20.0, concurrency=seqs, n_requests=n, max_num_seqs=seqs,
                     prompt_len={"dist": "uniform", "low": 1, "high": prompt_hi},
                     output_len={"dist": "uniform", "low": 1, "high": out_hi})
    eng = sv.EngineConfig(max_num_batched_tokens=budget, prefill=prefill)
    res = sv.simulate(sc, policy, workload=wl, seed=seed, engine=eng)
    _check_conservation(res)
    assert (res.steps.batch_size <= seqs).all()
    if prefill == "chunked":
        assert (res.steps.tokens <= max(budget, seqs * (sc.k_max + 1))).all()


# --- distributions, scenario sections -------------------------------------------------------------

def test_length_distributions(tmp_path):
    rng = np.random.default_rng(0)
    x = sv.parse_length({"dist": "pareto", "scale": 100, "alpha": 1.1, "max": 5000}).sample(rng, 20000)
    assert x.min() >= 100 and x.max() == 5000  # heavy tail reaches the cap
    y = sv.parse_length({"dist": "lognormal", "median": 1000, "sigma": 1.0, "max": 8000}).sample(rng, 20000)
    assert np.median(y) == pytest.approx(1000, rel=0.05) and y.max() <= 8000
    csv = tmp_path / "lens.csv"
    csv.write_text("id,tokens\n1,5\n2,7\n")
    z = sv.parse_length({"dist": "data", "path": str(csv), "column": "tokens"}).sample(rng, 100)
    assert set(z) <= {5, 7}
    with pytest.raises(PlannerError):
        sv.parse_length({"dist": "zipf"})
    with pytest.raises(PlannerError):
        sv.parse_length({"dist": "uniform", "low": 10, "high": 2})


def test_scenario_sections_parse():
    sc = load_scenario(REPO / "scenarios" / "rl-rollout-long-tail.toml")
    wl = sv.workload_from_scenario(sc)
    assert wl.arrival == "waves" and wl.n_requests == 512 and wl.concurrency == 256
    assert [c.name for c in wl.categories] == ["math", "code", "open-ended"]
    assert sv.engine_from_scenario(sc).max_num_seqs == 256
    for name in ("command-a-h100", "rl-rollout-long-context"):
        s = load_scenario(REPO / "scenarios" / f"{name}.toml")
        sv.workload_from_scenario(s), sv.engine_from_scenario(s)


def test_bad_workloads_raise_planner_errors(llama):
    with pytest.raises(PlannerError, match="rate_per_s"):
        sv.Workload(arrival="poisson", rate_per_s=-1)
    with pytest.raises(PlannerError, match="concurrency"):
        sv.Workload(arrival="closed")
    with pytest.raises(PlannerError, match="unknown policy"):
        sv.simulate(llama, "greedy", workload=sv.Workload(n_requests=1))
    with pytest.raises(PlannerError, match="KV blocks"):
        sv.simulate(llama, "plain", workload=sv.Workload(n_requests=1, prompt_len=10_000_000, output_len=1))


# --- CLI ----------------------------------------------------------------------------------------

def _cli(*args):
    return run_main("simulator.serve", *args, cwd=REPO)


def _process(*args):
    return subprocess.run([sys.executable, "-m", "simulator.serve", *args], capture_output=True, text=True,
                          cwd=REPO, timeout=120)


@pytest.mark.parametrize("args, needle", [
    (("--scenario", "llama-3.1-8b-h100", "--policy", "speculate-harder"), "unknown policy"),
    (("--scenario", "llama-3.1-8b-h100", "--rate", "-2"), "--rate"),
    (("--scenario", "llama-3.1-8b-h100", "--waves", "4x2"), "--waves"),
    (("--scenario", "llama-3.1-8b-h100", "--format", "xml"), "format"),
])
def test_cli_bad_input_one_line_exit_2(args, needle):
    r = _cli(*args)
    assert r.returncode == 2
    assert len(r.stderr.strip().splitlines()) == 1 and needle in r.stderr
    assert "Traceback" not in r.stderr


def test_cli_malformed_section_key(tmp_path):
    text = (REPO / "scenarios" / "llama-3.1-8b-h100.toml").read_text()
    bad = tmp_path / "bad.toml"
    bad.write_text(text + "\n[serving]\nmax_num_seq = 8\n")
    r = _cli("--scenario", str(bad), "--requests", "5")
    assert r.returncode == 2 and "max_num_seq" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_cli_runs_and_formats():
    r = _process("--scenario", "llama-3.1-8b-h100", "--policy", "plain,dsd", "--rate", "20", "--requests", "30",
             "--format", "csv")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.strip().splitlines()
    assert lines[0].startswith("policy,") and len(lines) == 3


def test_fast_paths_match_their_references(llama):
    # the loop's scalar dsd-adaptive choose_k and the up-front accept runs equal the vectorized forms
    from simulator.serving.loop import accept_runs
    from simulator.serving.workload import draw_requests
    pol = sv.make_policy(llama, "dsd-adaptive", 16)
    pol.start(4)
    rng = np.random.default_rng(0)
    for _ in range(20):
        pol.rate_hat[:] = rng.uniform(0.0, 0.99, len(pol.rate_hat))
        for b in (1, 5, 16):
            assert pol.choose_k(np.arange(b)) == pol.choose_k_vectorized(np.arange(b))
    wl = sv.Workload(n_requests=30, output_len={"dist": "uniform", "low": 1, "high": 40},
                     categories=({"name": "a", "rate_scale": 1.1}, {"name": "b", "rates": [0.3, 0.2]}))
    r = draw_requests(llama, wl, 1, 6)
    runs = accept_runs(r)
    for i in range(30):
        for g in range(int(r.out_len[i])):
            ok = r.uniforms[r.offsets[i] + g + np.arange(6)] < r.rates[r.cat[i], :6]
            assert runs[r.offsets[i] + g] == np.logical_and.accumulate(ok).sum()


def test_cli_dtype_flags_mean_what_predict_means():
    """serve takes --dtype / --act-dtype / --kv-dtype as predict does (one meaning per setting), prints them
    in its header, and W8A8 + fp8 KV halves the bytes a memory-bound plain step reads: TPOT falls."""
    base = ("--scenario", "llama-3.1-8b-h100", "--policy", "plain", "--rate", "2", "--requests", "20")
    bf16 = _cli(*base)
    fp8 = _cli(*base, "--dtype", "fp8", "--act-dtype", "fp8", "--kv-dtype", "fp8")
    assert bf16.returncode == fp8.returncode == 0, fp8.stderr
    header = lambda r: next(ln for ln in r.stdout.splitlines() if ln.startswith("# llama-3.1-8b on "))  # noqa: E731
    assert "weights bf16, activations bf16, KV bf16" in header(bf16)
    assert "weights fp8, activations fp8, KV fp8" in header(fp8)
    tpot = lambda r: float(r.stdout.splitlines()[1].split()[8])  # noqa: E731  tpot_p50 ms, the plain row
    assert tpot(fp8) < 0.8 * tpot(bf16)
    bad = _cli(*base, "--act-dtype", "fp7")
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1 and "fp7" in bad.stderr


@pytest.mark.parametrize("name", ["llama-3.1-8b-h100", "sizing-dense-command-a"])
def test_a_prompt_chunk_costs_the_same_whatever_is_priced_beside_it(name):
    # a 27-token chunk over 116 cached keys is a multi-query decode (<= 32 queries), a 2101-token one a
    # prefill kernel: priced together, each keeps the price it has alone (it took the prefill kernel's
    # when the batch's largest chunk chose the path: 2.6x for the short one on llama-3.1-8b-h100)
    sc = load_scenario(name)
    pricer = sv.StepPricer(sc, sv.engine_from_scenario(sc), 4, 64, 9000, False)
    chunks, cached = np.array([27.0, 2101.0, 5.0, 300.0]), np.array([116.0, 1338.0, 0.0, 2000.0])
    together = pricer.prefill.pairs_s(chunks, cached)
    alone = [pricer.prefill.pairs_s(chunks[i:i + 1], cached[i:i + 1])[0] for i in range(4)]
    np.testing.assert_allclose(together, alone, rtol=1e-12)


def test_padding_an_array_of_token_counts_as_one_at_a_time(command_a):
    # vLLM 0.33's capture sizes 1, 2, 4, 8, 16, ..., 512 (token-keyed): a step with prompt chunks pads its tokens
    # by the plain rule, 3 -> 4, 5 -> 8, 9 -> 16, 512 stays, 513 runs eager; without graphs nothing is padded
    from simulator.physics.engine_time import pad
    graphs = sv.graph_profile(command_a.engine, sv.EngineConfig())
    tokens = np.array([1, 3, 5, 9, 512, 513, 4000])
    padded, graph = pad(graphs, 0, 0, tokens)
    assert padded.tolist() == [1, 4, 8, 16, 512, 513, 4000] and graph.tolist() == [True] * 5 + [False] * 2
    assert [tuple(x.item() for x in pad(graphs, 0, 0, int(t))) for t in tokens] == list(zip(padded.tolist(),
                                                                                            graph.tolist()))
    eager = pad(sv.graph_profile(command_a.engine, sv.EngineConfig(cuda_graphs=False)), 0, 0, tokens)
    assert eager[0].tolist() == tokens.tolist() and not eager[1].any()



def test_sglang_speculation_caps_the_running_requests_at_its_default(llama):
    # engine code: SGLang resets --max-running-requests to 48 when a speculative algorithm is on and the
    # user sets none (sglang 0.5.13 speculative_hook.py:282-283; tests/test_advice.py checks the line); a
    # closed loop of 64 users then decodes at most 48 at once under fixed K, all 64 under plain decoding,
    # and all 64 again once the scenario sets the cap itself
    sc = llama.with_overrides(engine="sglang")
    assert sc.engine.spec_max_running == 48
    wl = sv.Workload(arrival="closed", concurrency=64, n_requests=128, max_num_seqs=64, prompt_len=200,
                     output_len=60)
    running = {p: int(sv.simulate(sc, p, workload=wl).steps.batch_size.max()) for p in ("plain", "fixed")}
    assert running == {"plain": 64, "fixed": 48}
    set_cap = sv.engine_from_scenario(sc, max_num_seqs=64)
    assert set_cap.spec_max_num_seqs == 0
    assert int(sv.simulate(sc, "fixed", workload=wl, engine=set_cap).steps.batch_size.max()) == 64
    # vLLM sets no cap of its own with speculation
    assert int(sv.simulate(llama, "fixed", workload=wl).steps.batch_size.max()) == 64


def test_a_speculating_k0_step_runs_the_drafters_extend_pass_where_the_engine_does():
    # vLLM 0.33 (vllm/v1/spec_decode/llm_base_proposer.py:616-625): a dynamic-K server's K = 0 step still runs the
    # drafter's first pass over the B tokens; the serving steps and the grid's K = 0 entry price it alike, and a
    # server without speculation (or vLLM 0.11, which has no dynamic-K table) runs plain decoding
    from dataclasses import replace
    sc = load_scenario(REPO / "scenarios" / "default.toml")
    # without the assumed DSD bookkeeping at K = 0 (spec_k0_overhead_frac, a [serving] setting the grid has not)
    eng = replace(sv.engine_from_scenario(sc), spec_k0_overhead_frac=0.0)
    pricer = sv.StepPricer(sc, eng, 4, 64, 600, True)
    ctx = float(sc.context_len)
    plain, _, _ = pricer.step_s(32, 0, 32, ctx, False, 0.0)
    dsd, _, _ = pricer.step_s(32, 0, 32, ctx, True, 0.0)
    g = compute_grid(sc, batch_sizes=np.arange(1, 65), ks=np.arange(5))
    extra_grid = g.as_engine_runs.itl_s[31, 0] / g.itl_s[31, 0]
    assert dsd > plain and dsd / plain == pytest.approx(extra_grid, rel=5e-3)  # context buckets vs the grid's L
    vec = pricer.decode_steps_s(np.array([32]), np.array([0]), np.array([32]), ctx, True, 0.0)[0]
    assert vec == dsd  # the vector twin to the bit
    old = sc.with_overrides(engine="vllm", engine_version="0.11.0", draft="eagle")  # 0.11 runs no draft model
    p_old = sv.StepPricer(old, replace(sv.engine_from_scenario(old), spec_k0_overhead_frac=0.0), 4, 64, 600, True)
    assert p_old.step_s(32, 0, 32, ctx, True, 0.0)[0] == p_old.step_s(32, 0, 32, ctx, False, 0.0)[0]
