"""MoE under a padded CUDA graph: whose padding rows load experts (engine profiles' [cuda_graphs]
moe_padding_routed), in the grid and in the serving step pricer alike.

Anchors: vLLM's token capture list [1, 2, 4, 8, 16, 24, ...] and SGLang 0.5.19's batch-size lists (engine
profiles); vLLM PR #46428 (padding rows "handled the same way as real tokens" until
VLLM_MOE_SKIP_PADDING), PR #50757 (on by default by 2026-08, grouped top-k still routes padding),
SGLang PR #25852 (TP fused_moe_triton: padded tokens activate experts); the capture sizes above.
"""
from __future__ import annotations

import warnings

import numpy as np
import pytest

from simulator import serving as sv
from simulator.errors import PlannerError
from simulator.physics.engine_time import expert_batch
from simulator.plan.grid import compute_grid
from simulator.specs.engines import engine_from_dict, load_engine
from simulator.specs.models import load_model
from simulator.specs.scenario import build_scenario

QWEN3, DSV3 = load_model("qwen3-235b-a22b"), load_model("deepseek-v3")


def _scenario(engine: str, version: str, model: str = "qwen3-235b-a22b", tp: int = 8, hardware: str = "h200"):
    raw = {"model": {"name": model}, "hardware": {"name": hardware, "tp": tp}, "draft": {"method": "eagle3"},
           "engine": {"name": engine, "version": version}, "routing": {"reuse": 0.0},
           "workload": {"context_len": 1024, "batch_sizes": [1, 2], "k_max": 4}}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return build_scenario(raw)


def _experts_s(g, b_index: int, k_index: int) -> float:
    d = g.verify.detail
    return float(sum(d.time_s[i][b_index, k_index] for i, n in enumerate(d.names) if n.endswith("moe_experts")))


def test_expert_batch_by_hand():
    v14, v29, sg = load_engine("vllm", "0.14.0"), load_engine("vllm", "0.29.0"), load_engine("sglang", "0.5.19")
    B, K = np.array([[3.0], [8.0], [9.0]]), np.array([[0.0, 2.0]])
    # vLLM 0.14 pads tokens: 3 -> 4, 8 -> 8, 9 -> 16 at K = 0; 9 -> 16, 24 -> 24, 27 -> 32 at K = 2
    assert np.array_equal(expert_batch(v14, QWEN3, B, K), [[4, 16 / 3], [8, 8], [16, 32 / 3]])
    # 0.29 skips padding rows for a plain top-k router, not for DeepSeek's grouped top-k
    assert expert_batch(v29, QWEN3, B, K) is None
    assert np.array_equal(expert_batch(v29, DSV3, B, K), expert_batch(v14, QWEN3, B, K))
    # SGLang 0.5.19 pads the batch (sequence-keyed graphs): [1, 2, 4, 8, 12, ...] at K = 0, its denser
    # speculative list [1, ..., 8, 10, 12, ...] at K > 0
    assert np.array_equal(expert_batch(sg, QWEN3, B, K), [[4, 3], [8, 8], [12, 10]])
    assert expert_batch(v14, load_model("llama-3.1-8b"), B, K) is None  # dense: no experts


@pytest.mark.parametrize("engine,version,routed", [("vllm", "0.14.0", True), ("vllm", "0.29.0", False)])
def test_grid_prices_routed_padding_as_the_padded_batch(engine, version, routed):
    # B = 9 at K = 0 replays the 16-token graph (B = 16 is captured as it is)
    g = compute_grid(_scenario(engine, version), batch_sizes=[8, 9, 16], ks=[0])
    at_8, at_9, at_16 = (_experts_s(g, i, 0) for i in range(3))
    if routed:
        assert at_9 == pytest.approx(at_16, rel=1e-12)
    else:  # the experts of its 9 tokens: more than 8 tokens load, fewer than 16
        assert at_8 < at_9 < at_16


def test_serving_skips_the_padding_rows_experts_where_the_engine_does():
    # vLLM 0.29.0, Qwen3 (plain top-k): a 9-token step runs the 16-token graph without the padding rows'
    # experts; at K = 0 (one position per sequence, no routing reuse) the serving step and the grid agree
    # on the experts: step(9) - step(16) is the grid's ITL(9) - ITL(16) but for the other ops' padding
    sc = _scenario("vllm", "0.29.0")
    pricer = sv.StepPricer(sc, sv.engine_from_scenario(sc), 2, 32, 2000, False)
    g = compute_grid(sc, batch_sizes=[9, 16], ks=[0])
    assert pricer._pad_experts[9] == pytest.approx(-(_experts_s(g, 1, 0) - _experts_s(g, 0, 0)), rel=1e-9)
    assert pricer._pad_experts[16] == 0.0 and pricer._pad_experts[8] == 0.0
    routed = sv.StepPricer(_scenario("vllm", "0.14.0"), sv.engine_from_scenario(sc), 2, 32, 2000, False)
    assert routed._pad_experts is None  # lin(16) already holds the padding rows' experts


def test_moe_padding_rule_is_checked():
    with pytest.raises(PlannerError, match=r"\[cuda_graphs\] moe_padding_routed must be one of all, none"):
        engine_from_dict({"name": "x", "cuda_graphs": {"eager_launch_per_kernel_s": 0.0, "moe_padding_routed": "some"},
                          "host": {"step_fixed_s": 0.0, "step_per_sequence_s": 0.0},
                          "speculative": {"step_fixed_s": 0.0}}, "x.toml")


def test_a_serving_decode_step_loads_the_experts_the_grid_prices():
    # Qwen3-235B with [routing] reuse = 0.5 (the bundled scenario's): a decode step of B sequences x (K + 1)
    # positions loads experts_touched(B, K + 1, 0.5) experts, as the grid prices it, not those of B (K + 1)
    # independent tokens. At token counts that are capture sizes (16, 24, 32: no padding) and at a context
    # bucket's own length the step equals the grid's ITL
    from simulator.specs.scenario import SCENARIO_DIR, load_scenario
    sc = load_scenario(SCENARIO_DIR / "qwen3-235b-h200.toml")
    assert sc.deployment.routing.reuse == 0.5
    pricer = sv.StepPricer(sc, sv.engine_from_scenario(sc), 4, 64, 3000, True)
    ctx = float(round(pricer.ctx[np.argmin(abs(pricer.ctx - 1024))]))
    cells = [(8, 1), (4, 3), (16, 1), (8, 2), (8, 3)]
    g = compute_grid(sc.with_overrides(context_len=int(ctx)), batch_sizes=[4, 8, 16], ks=[1, 2, 3])
    for b, k in cells:
        t, tokens, graph = pricer.step_s(b, k, b * (k + 1), ctx, True, 0.0)
        assert tokens == b * (k + 1) and graph
        assert t == pytest.approx(g.itl_s[[4, 8, 16].index(b), [1, 2, 3].index(k)], rel=1e-5)
    # independent tokens would load more: 16 tokens as 8 x 2 correlated positions touch fewer experts
    assert pricer._dec_experts[8, 1] < 0
