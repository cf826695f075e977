"""What a speculative step runs besides the target and draft forward passes (issue: speculation under
load): the draft's extend pass over the verified tokens and the sampler's passes over the logits.

Anchors: shapes worked by hand from the Llama-3.1-8B / Command A configs (hidden 4096 / 12288,
MLP 14336, vocab 128256 / 256000) and the engine code lines cited in simulator/physics/draft_cost.py
and the engine profiles' [sampling] sections.
"""
import numpy as np
import pytest

from simulator import predict
from simulator.physics.draft_cost import DraftSetting, draft_extend_cost, draft_pass_cost
from simulator.specs.scenario import build_scenario


def _scenario(engine=None, **workload):
    raw = {"model": {"name": "llama-3.1-8b"}, "hardware": {"name": "h100-sxm", "tp": 1},
           "draft": {"method": "eagle"}, "calibration": {"profile": "none", "learned": False},  # the physics alone
           "workload": {"context_len": 512, "batch_sizes": [8], "k_max": 3, **workload}}
    if engine:
        raw["engine"] = engine
    return build_scenario(raw)


def test_extend_pass_runs_the_draft_layer_over_every_verified_token_and_the_head_over_b_rows():
    sc = _scenario()
    B, K = np.array([[8.0]]), np.array([[3.0]])
    ext = draft_extend_cost(DraftSetting.of(sc), B, K, 512.0)
    by_name = dict(zip(ext.names, ext.flops[:, 0, 0]))
    # T = B (K + 1) = 32 tokens through gate+up [4096 -> 2 x 14336]: 2 T N K FLOPs
    assert by_name["draft_extend.mlp_gate_up"] == pytest.approx(2 * 32 * 2 * 14336 * 4096)
    # the fusion of hidden state and embedding, [2 x 4096 -> 4096], over the same 32 tokens
    assert by_name["draft_extend.fusion"] == pytest.approx(2 * 32 * 4096 * 2 * 4096)
    # logits only at the last position of each of the 8 sequences: [4096 -> 128256] at m = 8
    assert by_name["draft_extend.lm_head"] == pytest.approx(2 * 8 * 128256 * 4096)


def test_draft_step_is_k_minus_one_passes_plus_the_extend_pass():
    p = predict(_scenario(engine={"name": "ideal"}))
    g = p.grid
    sc = p.scenario
    per_pass, _ = draft_pass_cost(DraftSetting.of(sc), np.array([[8.0]]), 1.0, 512.0)
    ext = draft_extend_cost(DraftSetting.of(sc), np.array([[8.0]]), np.array([[3.0]]), 512.0)
    k3 = g.k_index(3)
    assert g.draft_step_s[0, k3] == pytest.approx(2 * per_pass.total_s[0, 0] + ext.total_s[0, 0])
    assert g.draft_step_s[0, g.k_index(0)] == 0.0


def test_sglang_044_runs_the_extend_pass_eagerly():
    # forward_draft_extend_after_decode: DRAFT_EXTEND is not a CUDA-graph mode in the 0.4.4 wheel
    eager = predict(_scenario(engine={"name": "sglang", "version": "0.4.4"}))
    sc = eager.scenario
    ext = draft_extend_cost(DraftSetting.of(sc), np.array([[8.0]]), np.array([[3.0]]), 512.0)
    per_kernel = sc.engine.eager_launch_per_kernel_s
    # outside a graph: the slower of the GPU time (its per-kernel launch gaps kept) and the host's launches
    expected_extend = max(ext.total_s[0, 0], ext.n_kernels * per_kernel)
    per_pass, _ = draft_pass_cost(DraftSetting.of(sc), np.array([[8.0]]), 1.0, 512.0)
    g = eager.grid
    assert g.draft_step_s[0, g.k_index(3)] == pytest.approx(2 * per_pass.total_s[0, 0] + expected_extend)


def test_a_pass_beyond_the_capture_limit_is_never_faster_than_in_a_graph():
    # vLLM 0.14.0 captures verify passes of up to 512 tokens: at K = 8, B = 56 is 504 tokens (a graph),
    # B = 57 is 513 (eager). On the datasheet roofline each kernel carries its 2 us launch gap
    # (h100-sxm.toml launch_overhead_s); launched by the host it reaches the GPU no sooner, so the
    # eager pass takes max(GPU time, kernels x 8 us) and is never below the GPU time
    sc = _scenario(engine={"name": "vllm", "version": "0.14.0"}, batch_sizes=[56, 57], k_max=8)
    g = predict(sc).grid
    k8 = g.k_index(8)
    assert bool(g.in_graph[0, k8]) and not bool(g.in_graph[1, k8])
    gpu_57 = float(np.asarray(g.verify.total_s)[1, k8])
    launches = g.verify.n_kernels * sc.engine.eager_launch_per_kernel_s
    assert g.verify_s[1, k8] == pytest.approx(max(gpu_57, launches))
    assert g.verify_s[1, k8] >= gpu_57 > float(np.asarray(g.verify.total_s)[0, k8]) == g.verify_s[0, k8]
    assert g.itl_s[1, k8] > g.itl_s[0, k8]


def test_sampling_bytes_follow_the_engine_code_and_the_temperature():
    # vLLM 0.11.0 at temperature 0.7 with top-p 0.9: the rejection path's 28 bytes per logit plus the
    # sort-based top-p's 128 (engine profile [sampling]); plain decoding 22 + 128
    hot = predict(model="command-a", hardware="h100-sxm", tp=8, engine="vllm", engine_version="0.11.0", draft="eagle",
                  batch_sizes=[128], fixed_k=3, k_max=3, temperature=0.7, top_p=0.9)
    greedy = predict(model="command-a", hardware="h100-sxm", tp=8, engine="vllm", engine_version="0.11.0",
                     draft="eagle", batch_sizes=[128], fixed_k=3, k_max=3)
    def sampling_bytes(p, k):
        v = p.grid.verify.detail
        return v.nbytes[v.names.index("sampling"), 0, p.grid.k_index(k)]
    vocab = 256000
    assert sampling_bytes(hot, 3) == pytest.approx(128 * 4 * vocab * (28 + 128))
    assert sampling_bytes(hot, 0) == pytest.approx(128 * vocab * (22 + 128))
    assert sampling_bytes(greedy, 3) == pytest.approx(128 * 4 * vocab * 8)
    # the sort makes verification dearer at batch: the break-even acceptance length rises
    be = lambda p: float(p.table.break_even_acceptance_length.iloc[0])  # noqa: E731
    assert be(hot) > be(greedy) * 1.05


def test_temperature_out_of_range_is_refused():
    from simulator.errors import PlannerError
    with pytest.raises(PlannerError, match="temperature = -1 must be >= 0"):
        _scenario(temperature=-1.0)
    with pytest.raises(PlannerError, match="top_p = 0 in"):
        _scenario(top_p=0.0)
