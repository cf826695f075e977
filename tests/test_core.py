"""Core simulator: formulas against hand computations and published figures, properties, CLI errors.

Each test says its anchor: hand (a computation in the comment), published (a cited figure), or
property (an invariant the physics requires).
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.specs import acceptance as acc
from simulator.plan.api import predict
from simulator.physics.forward_pass import verify_cost
from simulator.physics.gemm import GemmPrecision, gemm
from simulator.physics.layers import allreduce_s
from simulator.physics.memory import kv_bytes_per_gpu, weight_bytes_per_gpu
from simulator.specs.deployment import Deployment
from simulator.errors import PlannerError
from simulator.plan.exports import k_ranges
from simulator.specs.hardware import custom_hardware, load_hardware
from simulator.specs.models import list_models, load_model, model_from_hf_config
from simulator.physics.experts import busiest_group_load, experts_touched
from simulator.specs.routing import Routing, expert_probabilities
from simulator.specs.scenario import SCENARIO_DIR, load_scenario, parse_batch_sizes
from cli_inprocess import run_main

REPO = Path(__file__).resolve().parent.parent


# --- specs ------------------------------------------------------------------------------------

@pytest.mark.parametrize("name, total_b, active_b", [
    # published: model cards (total / activated parameters)
    ("llama-3.1-8b", 8.03, None), ("llama-3.1-70b", 70.6, None), ("command-a", 111.0, None),
    ("mixtral-8x7b", 46.7, 12.9), ("qwen3-30b-a3b", 30.5, 3.3), ("qwen3-235b-a22b", 235.0, 22.0),
    ("deepseek-v3", 671.0, 37.0), ("gpt-oss-120b", 116.8, None),
])
def test_parameter_counts_match_model_cards(name, total_b, active_b):
    m = load_model(name)
    assert m.total_params() / 1e9 == pytest.approx(total_b, rel=0.02)
    if active_b:
        assert m.active_params() / 1e9 == pytest.approx(active_b, rel=0.03)


def test_deepseek_mla_shared_expert_and_dense_layers():
    # hand: DeepSeek-V3 caches kv_lora 512 + rope 64 latent values per token per layer
    m = load_model("deepseek-v3")
    assert m.attention == "mla" and m.num_dense_layers == 3 and m.num_moe_layers == 58
    assert m.kv_elements_per_token() == (0, 576)
    assert m.shared_expert_intermediate_size == 2048
    dep = Deployment(tp=8)
    # latent cache is replicated on every TP rank: 61 layers x 576 x 2 bytes per token
    assert kv_bytes_per_gpu(m, dep, 1, 1000) == pytest.approx(61 * 576 * 2 * 1000)


def test_sliding_window_layers_from_configs():
    assert load_model("command-a").num_sliding_layers == 48  # 3 of every 4 layers
    assert load_model("gpt-oss-120b").num_sliding_layers == 18  # alternating layer_types
    assert load_model("qwen3-8b").num_sliding_layers == 0


def test_hardware_catalog_matches_reference_csv():
    # published: vendor datasheet figures, collected with their sources in docs/gpu_datasheets.csv
    import csv
    ref = REPO / "docs" / "gpu_datasheets.csv"
    rows = list(csv.DictReader(line for line in ref.open() if not line.startswith("#")))
    names = {"H100-SXM5-80GB": "h100-sxm", "H200-SXM-141GB": "h200", "MI300X-192GB": "mi300x", "L4-24GB": "l4"}
    for r in rows:
        if r["name"] in names:
            hw = load_hardware(names[r["name"]])
            assert hw.peak_bf16_flops_per_s == pytest.approx(float(r["bf16_tflops"]) * 1e12)
            assert hw.hbm_bandwidth_bytes_per_s == pytest.approx(float(r["hbm_gb_s"]) * 1e9)
            assert hw.interconnect_bandwidth_bytes_per_s == pytest.approx(float(r["link_gb_s_bidir"]) * 1e9 / 2)


@pytest.mark.parametrize("cfg, missing", [
    ({"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2, "vocab_size": 100}, "num_attention_heads"),
    ({"model_type": "mixtral", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
      "vocab_size": 100, "intermediate_size": 128, "num_experts_per_tok": 2}, "num_local_experts"),
    ({"model_type": "deepseek_v3", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
      "vocab_size": 100, "intermediate_size": 128, "n_routed_experts": 8, "moe_intermediate_size": 32,
      "num_experts_per_tok": 2, "qk_nope_head_dim": 16, "qk_rope_head_dim": 8, "v_head_dim": 16}, "kv_lora_rank"),
])
def test_config_json_missing_field_is_named(cfg, missing):
    with pytest.raises(PlannerError, match=missing):
        model_from_hf_config(cfg, "x", "config.json")


def test_config_json_unknown_model_type():
    with pytest.raises(PlannerError, match="unknown model_type 'bert'"):
        model_from_hf_config({"model_type": "bert"}, "x", "config.json")


@pytest.mark.parametrize("model_type", ["llama", "mistral", "qwen2", "qwen3", "cohere", "cohere2"])
def test_dense_config_types_parse(model_type):
    cfg = {"model_type": model_type, "hidden_size": 256, "num_hidden_layers": 4, "num_attention_heads": 8,
           "num_key_value_heads": 2, "intermediate_size": 1024, "vocab_size": 1000}
    m = model_from_hf_config(cfg, "tiny", "config.json")
    # hand: 4 x (256*(8+4)*32 + 8*32*256 + 3*256*1024) + embeddings
    per_layer = 256 * 12 * 32 + 256 * 256 + 3 * 256 * 1024
    emb = 1000 * 256 * (1 if model_type.startswith("cohere") else 2)
    assert m.total_params() == 4 * per_layer + emb


# --- cost formulas ------------------------------------------------------------------------------

def test_gemm_hand():
    # hand: T=4 tokens through a 4096x1024 bf16 weight: F = 2*4*1024*4096, M = 1024*4096*2 + 4*(1024+4096)*2
    op = gemm("x", 4, 1024, 4096, GemmPrecision(2.0, 2.0), 1)
    assert op.flops == 2 * 4 * 1024 * 4096
    assert op.nbytes == 1024 * 4096 * 2 + 4 * 5120 * 2


def test_block_fp8_gemms_run_at_the_fp8_peak():
    # DeepSeek-V3's checkpoint stores fp8 weights with 128 x 128 block scales; engines multiply them with
    # block-scaled fp8 kernels (DeepGEMM, CUTLASS blockwise) on activations quantized to fp8 per 128
    # channels, so the datasheet bound is the fp8 peak, not bf16's. hand: its attention output projection on
    # one of 8 H200s at T = 8192 tokens, n = 7168, k = 128 heads / 8 x 128 = 2048: F = 2 x 8192 x 7168 x 2048
    # = 240,518,168,576; compute 240.518e9 / 1978.9e12 = 121.54 us; memory (7168 x 2048 + 8192 x 9216) x 1 B /
    # 4.8e12 = 18.79 us; + one launch of 2 us. At the bf16 peak it was 243.1 us + 2, above the 198.2 us
    # SGLang 0.5.14 measured for DeepGEMM at this shape on an H200 (aiconfigurator-core 0.12.0
    # h200_sxm/gemm/sglang/0.5.14/gemm_perf.parquet, fp8_block, m 8192, n 7168, k 2048): no bound at all.
    from simulator.physics.forward_pass import head_ops
    from simulator.physics.layers import attention_projection_ops, moe_token_ops
    from simulator.physics.operators import evaluate
    m, hw = load_model("deepseek-v3"), load_hardware("h200")
    dep = Deployment(tp=8, weight_dtype="fp8", act_dtype="bf16")
    T = np.array([8192.0])
    op = next(o for o in attention_projection_ops(m, dep, T, 1) if o.name == "attn_o")
    assert op.dtype == "fp8_block" and float(op.flops[0]) == 240_518_168_576
    t = float(evaluate([op], hw, dep, None, (1,)).time_s[0, 0])
    assert t == pytest.approx(240_518_168_576 / 1978.9e12 + 2e-6, rel=1e-9)
    assert t < 198.2e-6
    # decode-sized (T = 64): memory-bound, the peak does not matter: (14,680,064 + 64 x 9216) B / 4.8e12 + 2 us
    op64 = next(o for o in attention_projection_ops(m, dep, np.array([64.0]), 1) if o.name == "attn_o")
    t64 = float(evaluate([op64], hw, dep, None, (1,)).time_s[0, 0])
    assert t64 == pytest.approx((14_680_064 + 64 * 9216) / 4.8e12 + 2e-6, rel=1e-9)
    # the router and the LM head are bf16 in the checkpoint (no block scales): not on this path (bf16 GEMMs:
    # test_fp8_checkpoint_keeps_head_and_router_bf16); nor are bf16 weights of the same model, nor fp8
    # weights of a per-tensor checkpoint (weight-only, as before)
    others = moe_token_ops(m, dep, hw, T, 1, "") + head_ops(m, dep, hw, T, m.vocab_size)
    assert {o.name: o.dtype for o in others if o.name in ("moe_router", "lm_head")} == {"moe_router": "bf16",
                                                                                       "lm_head": "bf16"}
    assert {o.dtype for o in attention_projection_ops(m, Deployment(tp=8), T, 1)} == {"bf16"}
    llama = load_model("llama-3.1-70b")
    assert {o.dtype for o in attention_projection_ops(llama, Deployment(tp=8, weight_dtype="fp8"), T, 1)} == {"int8_wo"}


def test_weight_only_fp8_is_fp8_weight_bytes_in_bf16_math_and_says_which_table_prices_it():
    # --dtype fp8 --act-dtype bf16 (weight-only fp8: dequantized into bf16 math). hand, Llama-3.1-70B on 4 x H100
    # (datasheet: bf16 989.4, fp8 1978.9 TFLOP/s, 3.35 TB/s, 2 us a launch), MLP gate+up n = 2 x 28672 / 4 = 14336,
    # k = 8192, one layer:
    #   T = 8192: F = 2 x 8192 x 14336 x 8192 = 1,924,145,348,608 at the bf16 peak -> 1944.76 us + 2 us (at the fp8
    #     peak, as W8A8 runs it, 972.33 us + 2): compute-bound either way (M 486.5 MB -> 145.2 us)
    #   T = 1: M = 14336 x 8192 x 1 B (fp8 weights) + 1 x (14336 + 8192) x 2 B (bf16 activations) = 117,485,568 B
    #     -> 35.070 us + 2 us (bf16 weights: 234,926,080 B -> 70.127 us + 2)
    from simulator.physics.operators import evaluate
    from simulator.physics.layers import dense_mlp_ops
    from simulator.specs.overrides import apply_overrides
    from simulator.specs.scenario import build_scenario
    m, hw = load_model("llama-3.1-70b"), load_hardware("h100-sxm")
    wo, w8a8 = Deployment(tp=4, weight_dtype="fp8", act_dtype="bf16"), Deployment(tp=4, weight_dtype="fp8", act_dtype="fp8")

    def gate_up_s(dep, tokens):
        op = dense_mlp_ops(m, dep, np.array([float(tokens)]), 1, m.intermediate_size)[0]
        return float(evaluate([op], hw, dep, None, (1,)).time_s[0, 0])
    assert gate_up_s(wo, 8192) == pytest.approx(1_924_145_348_608 / 989.4e12 + 2e-6, rel=1e-9)
    assert gate_up_s(w8a8, 8192) == pytest.approx(1_924_145_348_608 / 1978.9e12 + 2e-6, rel=1e-9)
    assert gate_up_s(wo, 1) == pytest.approx(117_485_568 / 3.35e12 + 2e-6, rel=1e-9)
    # half the bf16 bytes, but for the embedding and LM head serving engines keep in bf16 (UNQUANTIZED_MODULES):
    # 2 x 128256 x 8192 x 1 byte more over TP 4 = 525,336,576 B
    assert weight_bytes_per_gpu(m, wo) == pytest.approx(weight_bytes_per_gpu(m, Deployment(tp=4)) / 2 + 525_336_576)
    # the measured tables hold no weight-only kernel for the H100: the output says its GEMMs borrow the bf16 table's
    # efficiency (before: 'measured kernel tables' alone, as if measured); W8A8 and bf16 run their own tables
    flags = dict(model="llama-3.1-70b", hardware="h100-sxm", tp=4, draft="eagle3", dtype="fp8")
    said = {act: build_scenario(apply_overrides({"model": {}, "hardware": {}}, flags | {"act_dtype": act})).cost_source
            for act in ("bf16", "fp8")}
    assert ("weight-only fp8 GEMMs (fp8 weight bytes, bf16 math) priced on the gemm.bf16 table's efficiency"
            " (no weight-only kernel measured)") in said["bf16"]
    assert "weight-only" not in said["fp8"] and "measured kernel tables" in said["fp8"]


def test_fp8_checkpoint_keeps_head_and_router_bf16():
    # DeepSeek-V3's fp8 checkpoint quantizes its Linear layers only: the output head is built in bf16
    # (inference/model.py: ColumnParallelLinear(dim, vocab, dtype=torch.get_default_dtype())) and the router
    # (Gate) is a plain bf16 parameter; vLLM and SGLang load both unquantized. hand, 8 x H200 (TP 8), T = 64:
    # LM head n = 129280 / 8 = 16160, k = 7168: M = 16160 x 7168 x 2 + 64 x (16160 + 7168) x 2 = 234,655,744 B
    # -> 48.887 us + one 2 us launch (F = 2 x 64 x 16160 x 7168 = 14.8 GFLOP: 15.0 us at bf16's 989.4 TFLOP/s,
    # memory-bound); at fp8 weight bytes (before) it was 118,820,864 B. Router [7168 x 256], whole:
    # M = 256 x 7168 x 2 + 64 x (256 + 7168) x 2 = 4,620,288 B.
    from simulator.physics.forward_pass import head_ops
    from simulator.physics.layers import moe_token_ops
    from simulator.physics.operators import evaluate
    m, hw = load_model("deepseek-v3"), load_hardware("h200")
    dep = Deployment(tp=8, weight_dtype="fp8", act_dtype="bf16")
    T = np.array([64.0])
    assert (m.module_dtype("lm_head", "fp8"), m.module_dtype("router", "fp8")) == ("bf16", "bf16")
    head = next(o for o in head_ops(m, dep, hw, T, m.vocab_size) if o.name == "lm_head")
    router = next(o for o in moe_token_ops(m, dep, hw, T, 1, "") if o.name == "moe_router")
    assert float(head.nbytes[0]) == 234_655_744 and float(router.nbytes[0]) == 4_620_288
    t = float(evaluate([head], hw, dep, None, (1,)).time_s[0, 0])
    assert t == pytest.approx(234_655_744 / 4.8e12 + 2e-6, rel=1e-9)
    # under fp8 activations the unquantized head still multiplies bf16 x bf16 at bf16's peak: T = 8192 is
    # compute-bound, F = 2 x 8192 x 16160 x 7168 = 1,897,838,673,920 -> 1918.2 us at 989.4e12 (not 959.0 at fp8's)
    dep8 = Deployment(tp=8, weight_dtype="fp8", act_dtype="fp8")
    big = next(o for o in head_ops(m, dep8, hw, np.array([8192.0]), m.vocab_size) if o.name == "lm_head")
    t8 = float(evaluate([big], hw, dep8, None, (1,)).time_s[0, 0])
    assert t8 == pytest.approx(1_897_838_673_920 / 989.4e12 + 2e-6, rel=1e-9)
    # memory holds them at bf16 too: embedding + head 2 x 129280 x 7168 one byte more each, over TP 8
    # (231,669,760 B), and 58 MoE layers' routers whole (58 x 7168 x 256 = 106,430,464 B), against an engine whose
    # quantizer took all three
    from dataclasses import replace
    as_fp8 = replace(dep, kernels=replace(dep.kernels, quantized_modules=("embedding", "lm_head", "router")))
    assert weight_bytes_per_gpu(m, dep) - weight_bytes_per_gpu(replace(m, bf16_modules=()), as_fp8) \
        == 231_669_760 + 106_430_464
    # a deployment of another precision, or a checkpoint that is not fp8, keeps the pass's precision
    assert m.module_dtype("lm_head", "bf16") == "bf16" and m.module_dtype("lm_head", "int4") == "int4"
    assert load_model("llama-3.1-70b").module_dtype("lm_head", "fp8") == "fp8"


def test_draft_heads_precision_by_checkpoint():
    # DeepSeek-V3's MTP module is layer 61 of the same fp8 checkpoint (README_WEIGHTS.md): its decoder layer
    # runs block-scaled fp8; its eh_proj [2D -> D] is a plain nn.Linear in vLLM's deepseek_mtp.py and SGLang's
    # deepseek_nextn.py (bf16). An EAGLE-3 head is its own bf16 checkpoint: bf16 layer and fc [3D -> D].
    # hand, 8 x H200, 64 rows: eh_proj M = 7168 x 14336 x 2 + 64 x (7168 + 14336) x 2 = 208,273,408 B;
    # EAGLE-3's fc M = 7168 x 21504 x 2 + 64 x (7168 + 21504) x 2 = 311,951,360 B; its attention output
    # projection [128 heads / 8 x 128 -> 7168] M = 7168 x 2048 x 2 + 64 x 9216 x 2 = 30,539,776 B
    from simulator.physics.draft_cost import DraftSetting, draft_pass_plan
    from simulator.specs.drafts import parse_draft
    m, hw = load_model("deepseek-v3"), load_hardware("h200")
    dep = Deployment(tp=8, weight_dtype="fp8", act_dtype="bf16")

    def ops(method):
        plan = draft_pass_plan(DraftSetting(parse_draft(method), m, dep, hw), np.array([64.0]), 2048.0)
        return {o.name: o for o in plan.full()}
    mtp, eagle = ops("mtp"), ops("eagle3")
    assert mtp["draft.fusion"].dtype == "bf16" and float(mtp["draft.fusion"].nbytes[0]) == 208_273_408
    assert {mtp[n].dtype for n in ("draft.attn_q_a", "draft.attn_o", "draft.moe_experts")} == {"fp8_block"}
    assert eagle["draft.fusion"].dtype == "bf16" and float(eagle["draft.fusion"].nbytes[0]) == 311_951_360
    assert eagle["draft.attn_o"].dtype == "bf16" and float(eagle["draft.attn_o"].nbytes[0]) == 30_539_776
    # under fp8 activations the bf16 fc still reads bf16 ones (an unquantized layer): the same 311,951,360 B
    dep8 = Deployment(tp=8, weight_dtype="fp8", act_dtype="fp8")
    plan8 = draft_pass_plan(DraftSetting(parse_draft("eagle3"), m, dep8, hw), np.array([64.0]), 2048.0)
    assert float({o.name: o for o in plan8.full()}["draft.fusion"].nbytes[0]) == 311_951_360
    # a target the deployment quantizes (Llama-3.1-70B's bf16 checkpoint run at fp8) quantizes its head alike
    llama = load_model("llama-3.1-70b")
    plan = draft_pass_plan(DraftSetting(parse_draft("eagle3"), llama, dep, hw), np.array([64.0]), 2048.0)
    assert {o.name: o.dtype for o in plan.full()}["draft.attn_o"] == "int8_wo"


def test_published_prior_prices_fp8_peak_gemms_at_the_fp8_matmul_share():
    # H200's [published] table: MAMF bf16 794.5 TFLOP/s of 989.4 (0.8030), fp8 1453.4 of 1978.9 (0.7345:
    # ML-Eng MAMF FP8 table, row 'NVIDIA H200 SXM'); stream 4.15 TB/s of 4.8. hand: DeepSeek-V3's block-fp8
    # attention output projection at T = 8192 on one of 8 H200s (test_block_fp8_gemms_run_at_the_fp8_peak):
    # F = 240,518,168,576 at 1453.4 TFLOP/s = 165.49 us (at bf16's share of the fp8 peak, before: 151.36 us);
    # memory (14,680,064 + 8192 x 9216) B at 4.15 TB/s = 21.73 us; + one 2 us launch
    from simulator.physics.layers import attention_projection_ops
    from simulator.physics.operators import evaluate
    from simulator.specs.profile import prior_profile
    m, hw = load_model("deepseek-v3"), load_hardware("h200")
    prior = prior_profile(hw)
    assert prior.compute_efficiency("attn_o", "gemm", 8192.0, "fp8_block") == pytest.approx(1453.4 / 1978.9)
    assert prior.compute_efficiency("attn_o", "gemm", 8192.0, "bf16") == pytest.approx(794.5 / 989.4)
    dep = Deployment(tp=8, weight_dtype="fp8", act_dtype="bf16")
    op = next(o for o in attention_projection_ops(m, dep, np.array([8192.0]), 1) if o.name == "attn_o")
    t = float(evaluate([op], hw, dep, prior, (1,)).time_s[0, 0])
    assert t == pytest.approx(240_518_168_576 / 1453.4e12 + 2e-6, rel=1e-9)
    assert "fp8 matmul" in prior.provenance["source"] and "assumed" not in prior.provenance["source"]
    # MI325X publishes a bf16 figure only: its fp8 GEMMs keep bf16's share, and the provenance says so
    mi = prior_profile(load_hardware("mi325x"))
    assert mi.compute_efficiency("attn_o", "gemm", 8192.0, "fp8_block") == pytest.approx(784.9 / 1307.4)
    assert "fp8 GEMMs assumed at bf16's share" in mi.label


def test_allreduce_hand():
    hw = load_hardware("h100-sxm")
    # hand: 8 GPUs, 1 MB: 3 us + 2*7/8*1e6 / 450e9
    assert allreduce_s(1e6, 8, hw) == pytest.approx(3e-6 + 1.75e6 / 450e9)


def test_plain_decode_is_weight_bandwidth_plus_launches():
    # hand: Llama-3.1-8B at B=1, K=0 on one H100 reads every weight once:
    # t = (weights read + KV) / BW + kernels * tau; 11 kernels per layer + 5 in the head. The input
    # embedding table is gathered (one row), not read: weights read = total - vocab * D.
    m, hw, dep = load_model("llama-3.1-8b"), load_hardware("h100-sxm"), Deployment()
    cost = verify_cost(m, dep, hw, 1, 0, 1024, None)
    weights = m.total_params() * 2
    kv = 32 * 2 * 8 * 128 * 2 * (1024 + 1)
    launches = (32 * 11 + 5) * hw.launch_overhead_s
    hand = (weights - 128256 * 4096 * 2 + kv) / hw.hbm_bandwidth_bytes_per_s + launches
    assert float(cost.total_s) == pytest.approx(hand, rel=0.01)
    assert weight_bytes_per_gpu(m, dep) == pytest.approx(weights)


def test_large_batch_gemms_are_compute_bound_hand():
    # hand: at T = 4096 tokens the MLP GEMMs of Llama-3.1-70B on TP=8 run at 2*T*N*K / peak
    m, hw, dep = load_model("llama-3.1-70b"), load_hardware("h100-sxm"), Deployment(tp=8)
    cost = verify_cost(m, dep, hw, 1024, 3, 128, None)
    i = cost.names.index("mlp_down")
    assert cost.bound()[i] == "compute"
    hand = 80 * 2 * 4096 * 8192 * (28672 / 8) / hw.peak_bf16_flops_per_s + 80 * hw.launch_overhead_s
    assert float(cost.time_s[i]) == pytest.approx(hand, rel=1e-6)


def test_experts_touched_hand():
    p = expert_probabilities(Routing(), 8, 2)
    # hand: E=8, k=2: one token touches 2; two tokens 8*(1-0.75^2) = 3.5
    assert experts_touched(1, p) == pytest.approx(2.0)
    assert experts_touched(2, p) == pytest.approx(3.5)
    # skewed routing touches fewer distinct experts than uniform for the same tokens
    pz = expert_probabilities(Routing("zipf", skew=1.2), 8, 2)
    assert pz.sum() == pytest.approx(2.0) and pz.max() <= 1.0
    assert experts_touched(4, pz) < experts_touched(4, p)


def test_expert_parallel_busiest_gpu_hand():
    p = expert_probabilities(Routing(), 128, 8)
    touched, pairs = busiest_group_load(np.array(16.0), p, 8)
    # hand: 16 experts per GPU, each hit with p = 1/16: 16*(1-(15/16)^16); pairs mean 16*8/8 = 16 plus imbalance
    assert touched == pytest.approx(16 * (1 - (15 / 16) ** 16))
    assert pairs > 16


def test_acceptance_length_hand():
    a = acc.Acceptance((0.8,))
    assert a.acceptance_length(4) == pytest.approx((1 - 0.8 ** 5) / 0.2)  # hand: 3.3616
    b = acc.Acceptance((0.9, 0.5))
    # hand: 1 + 0.9 + 0.9*0.5 + 0.9*0.5*0.5 (last rate repeats)
    assert b.acceptance_length(3) == pytest.approx(1 + 0.9 + 0.45 + 0.225)


# --- properties (hypothesis) ----------------------------------------------------------------

MODELS = ["llama-3.1-8b", "qwen3-30b-a3b", "deepseek-v3", "gpt-oss-120b", "command-a"]


@settings(max_examples=40, deadline=None)
@given(model=st.sampled_from(MODELS), hw=st.sampled_from(["h100-sxm", "mi300x", "l4", "b200"]),
       tp=st.sampled_from([1, 2, 4, 8]), b=st.integers(1, 600), k=st.integers(0, 10),
       ctx=st.integers(1, 100_000))
def test_step_time_positive_finite_and_monotone(model, hw, tp, b, k, ctx):
    m, h = load_model(model), load_hardware(hw)
    if m.num_heads % tp:
        tp = 1
    dep = Deployment(tp=tp)
    t = verify_cost(m, dep, h, np.array([b, b + 1, b]), np.array([k, k, k + 1]), ctx, None).total_s
    assert np.all(np.isfinite(t)) and np.all(t > 0)
    assert t[1] >= t[0] * (1 - 1e-12)  # non-decreasing in B
    assert t[2] >= t[0] * (1 - 1e-12)  # non-decreasing in K


@settings(max_examples=60, deadline=None)
@given(rates=st.lists(st.floats(0.0, 0.999), min_size=1, max_size=10))
def test_acceptance_length_increasing_and_bounded(rates):
    al = acc.Acceptance(tuple(rates)).acceptance_length(np.arange(12))
    assert al[0] == 1.0
    assert np.all(np.diff(al) >= 0)
    assert np.all(al <= np.arange(12) + 1 + 1e-12)


@settings(max_examples=60, deadline=None)
@given(E=st.integers(2, 256), data=st.data())
def test_experts_touched_bounds(E, data):
    k = data.draw(st.integers(1, min(E, 16)))
    skew = data.draw(st.sampled_from([None, 0.5, 1.0, 2.0]))
    routing = Routing() if skew is None else Routing("zipf", skew=skew)
    p = expert_probabilities(routing, E, k)
    tokens = np.arange(1, 400)
    touched = experts_touched(tokens, p)
    assert touched[0] == pytest.approx(k)  # one token: exactly its top-k
    assert np.all(touched >= k - 1e-9) and np.all(touched <= E + 1e-9)
    assert np.all(np.diff(touched) >= -1e-9)


# --- goodput, policies, scenarios -------------------------------------------------------------------

DENSE = ["command-a-h100", "llama-3.1-8b-h100", "default", "rl-rollout-long-context"]


@pytest.mark.parametrize("name", DENSE + ["qwen3-235b-h200"])
def test_k_star_is_argmax_of_hand_acceptance_length_over_step_time(name):
    # hand: AL(K) = 1 + a1 + a1 a2 + ... from the scenario's per-position rates; K* = argmax AL/ITL at the engine
    # terms' centre (--decision-quantile 0; K* under their draws: tests/test_learned_step.py)
    p = predict(SCENARIO_DIR / f"{name}.toml", decision_quantile=0)
    g, t = p.grid_rows, p.table
    rates = p.scenario.acceptance.rates_upto(p.scenario.k_max)
    hand_al = np.array([1.0 + sum(np.prod(rates[:j]) for j in range(1, k + 1)) for k in range(p.scenario.k_max + 1)])
    itl = np.array(g.pivot(index="batch_size", columns="k", values="itl_ms").to_numpy(), dtype=float)
    if p.grid.dsd_k0 is not None:  # the table's K = 0 entry as the engine runs it (vLLM 0.33: + the drafter's pass)
        itl[:, 0] = p.grid.as_engine_runs.itl_s[:, 0] * 1e3
        assert np.all(itl[:, 0] > g[g.k == 0].itl_ms.to_numpy())
    fits = g.pivot(index="batch_size", columns="k", values="fits_memory").to_numpy()
    goodput = np.where(fits, hand_al[None, :] / itl, -np.inf)
    feasible = t.fits_memory.to_numpy()
    assert feasible.any()
    k_star = t.k_opt.to_numpy()[feasible].astype(int)
    best = goodput.max(axis=1)[feasible]
    at_k_star = goodput[feasible][np.arange(feasible.sum()), k_star]
    # K* is the argmax, up to the schedule tolerance (1%) the fewest-range schedule may give up
    tol = p.scenario.schedule_tolerance
    assert tol == 0.01
    assert np.all(at_k_star >= best * (1 - tol) - 1e-12)
    strict = np.sort(goodput[feasible], axis=1)[:, -2] < best * (1 - tol)  # no other K within 1%
    assert np.array_equal(k_star[strict], np.argmax(goodput, axis=1)[feasible][strict])
    # speedups over plain decoding: a server without speculation (the grid's own K = 0 column)
    plain = hand_al[0] / g[g.k == 0].itl_ms.to_numpy()[feasible]
    ok = fits[:, 0][feasible]
    assert np.allclose(t.speedup_vs_plain.to_numpy()[feasible][ok], at_k_star[ok] / plain[ok])


# Both met again since the layer's host time hides where vLLM 0.33 hides its own (2026-12-07, ninth pass); they were
# strict xfails: default's schedule rose K = 1 -> 2 at B 137, command-a-h100's per-batch K* 2 -> 3 at B 30 by 1.4%.
@pytest.mark.parametrize("name", ["default", "command-a-h100"])
def test_large_dense_k_opt_non_increasing(name):
    # the seed shape on 70-111B dense models on H100/H200: the engine's K schedule only falls as batches grow. The
    # per-batch K* may trade places between neighbours whose padded graphs differ (default, B 18-25: B (K + 1) pads
    # to 96 tokens at K = 4 and 72 at K = 3, within 1% of each other's goodput); the schedule does not follow that
    p = predict(SCENARIO_DIR / f"{name}.toml")
    t = p.table
    k = t.k_schedule.dropna().to_numpy()
    assert np.all(np.diff(k) <= 0), k
    assert k[0] >= 3


# Missed since the kernels priced off the measured tables pay their launch (2026-12-08, fifteenth pass): default's
# per-batch K* rises 3 -> 4 at B 11 with K = 3 at 98.74% of K = 4 (there K = 3 pads 44 tokens to 48, K = 4 55 to
# 56), and 1 -> 2 at B 85 at 98.96%; command-a-h100's 2 -> 3 at B 30 at 98.99%.
@pytest.mark.xfail(strict=True, reason="per-batch K* rises by 1.01-1.26% where the test allows 1% (fifteenth pass)")
@pytest.mark.parametrize("name", ["default", "command-a-h100"])
def test_large_dense_per_batch_k_rises_only_within_one_percent(name):
    p = predict(SCENARIO_DIR / f"{name}.toml")
    t = p.table[p.table.k_opt.notna()]
    per_batch = t.k_opt.to_numpy()
    g = p.grid
    score = np.where(g.fits_memory, g.selection_score, -np.inf)
    for i in np.flatnonzero(np.diff(per_batch) > 0) + 1:  # a rise: the risen K within 1% of the one before it
        row = int(np.flatnonzero(g.batch_sizes == t.batch_size.iloc[i])[0])
        assert score[row, g.k_index(int(per_batch[i - 1]))] >= 0.99 * score[row].max(), (i, per_batch[i - 3:i + 3])


@pytest.mark.parametrize("name", DENSE)
def test_dense_k_opt_falls_overall_with_tile_steps_only(name):
    # measured GEMM tables carry tile steps: once m = B (K+1) crosses a tile boundary the next K is
    # nearly free, so K* may step up by one over a short range; the trend still falls
    t = predict(SCENARIO_DIR / f"{name}.toml").table
    k = t.k_opt.dropna().to_numpy()
    assert k[-1] < k[0] and np.all(np.diff(k) <= 1), k


def test_dense_fixed_k_loses_to_plain_at_large_batch_and_k_reaches_zero():
    t = predict(SCENARIO_DIR / "default.toml").table
    assert (t.fixed_vs_plain[t.batch_size >= 192] < 1).all()  # fixed K=3 loses at large batch (70B, 2 x H200)
    small = predict(SCENARIO_DIR / "llama-3.1-8b-h100.toml").table
    assert (small.k_opt.dropna() == 0).any()  # speculation stops paying before memory runs out


def test_moe_k_opt_rises_then_falls_with_expert_loading():
    t = predict(SCENARIO_DIR / "qwen3-235b-h200.toml").table
    k = t.k_opt.to_numpy(dtype=float)
    peak = int(len(k) - 1 - np.argmax(k[::-1]))  # the last batch size at the highest K*
    assert k[peak] > k[0] and k[peak] > k[-1]
    # the cause: at B=1 each extra draft token loads new experts; by the peak all are loaded anyway
    assert t.experts_touched_plain.iloc[0] == pytest.approx(8)
    assert t.experts_touched.iloc[peak] > 0.95 * 128
    assert t.expert_load_share.iloc[0] > 0.3


def test_memory_fit_marks_rows_and_excludes_them():
    t = predict(SCENARIO_DIR / "command-a-h100.toml", hardware="h100-sxm", tp=4).table
    assert (~t.fits_memory).any() and t.fits_memory.iloc[0]
    assert t.k_opt[~t.fits_memory].isna().all()
    ranges = predict(SCENARIO_DIR / "command-a-h100.toml", tp=4).export("vllm").payload[
        "num_speculative_tokens_per_batch_size"]
    assert ranges[-1][1] == t.batch_size[t.fits_memory].max()


def test_calibrated_hardware_override_changes_prediction():
    base = predict(SCENARIO_DIR / "llama-3.1-8b-h100.toml").table
    slow = predict(SCENARIO_DIR / "llama-3.1-8b-h100.toml", hbm_bandwidth_bytes_per_s=1e12).table
    assert slow.goodput_per_seq.iloc[0] < base.goodput_per_seq.iloc[0]


# --- exports --------------------------------------------------------------------------------------

def test_vllm_ranges_merge_and_cover():
    b = np.arange(1, 11)
    k = np.array([5, 5, 4, 4, 4, 2, 2, 0, 0, 0])
    assert k_ranges(b, k) == [[1, 2, 5], [3, 5, 4], [6, 7, 2], [8, 10, 0]]


def test_vllm_ranges_from_sparse_batch_sizes_start_at_one():
    assert k_ranges([2, 4, 8], [3, 3, 1]) == [[1, 7, 3], [8, 8, 1]]


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(0, 8), min_size=1, max_size=40))
def test_vllm_ranges_contiguous_no_overlap(ks):
    ranges = k_ranges(np.arange(1, len(ks) + 1), ks)
    assert ranges[0][0] == 1 and ranges[-1][1] == len(ks)
    for (s0, e0, k0), (s1, e1, k1) in zip(ranges, ranges[1:]):
        assert s1 == e0 + 1 and k0 != k1
    for s, e, kk in ranges:
        assert all(ks[i - 1] == kk for i in range(s, e + 1))


# --- scenarios and bad input --------------------------------------------------------------------

def test_bundled_scenarios_load():
    for path in sorted(SCENARIO_DIR.glob("*.toml")):
        load_scenario(path)


def test_batch_size_parsing():
    assert list(parse_batch_sizes("1-4,8")) == [1, 2, 3, 4, 8]
    with pytest.raises(PlannerError, match="< 1"):
        parse_batch_sizes("0-4")
    # powers of two inside the range plus both ends, by hand: 3, 4, 8, 16, 20
    assert list(parse_batch_sizes("3-20:pow2")) == [3, 4, 8, 16, 20]
    assert list(parse_batch_sizes("1-64:pow2")) == [1, 2, 4, 8, 16, 32, 64]


def test_one_batch_size_syntax_in_planner_and_engine_sweeps(tmp_path, capsys):
    """calibration.engine reads --batch-sizes with the planner's parser: '1-4' is every integer there too."""
    from calibration.engine import __main__ as engine_cli
    assert engine_cli.parse_batch_sizes is parse_batch_sizes
    rc = engine_cli.main(["sweep", "--output", str(tmp_path / "o.csv"), "--batch-sizes", "1-64:pow3"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "1-256:pow2" in err and "\n" not in err


def test_scenario_unknown_key_and_wrong_type(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text('[model]\nname = "llama-3.1-8b"\n[hardware]\nname = "h100-sxm"\ntpp = 2\n')
    with pytest.raises(PlannerError, match=r"bad.toml: unknown key 'tpp' in \[hardware\]"):
        load_scenario(bad)
    bad.write_text('[model]\nname = "llama-3.1-8b"\n[hardware]\nname = "h100-sxm"\ntp = "two"\n')
    with pytest.raises(PlannerError, match="'hardware.tp' must be an integer"):
        load_scenario(bad)


def run_cli(*args, cwd=REPO):
    return run_main("simulator.predict", *args, cwd=cwd)


def run_process(*args, cwd=REPO):
    """The real ``python -m simulator.predict`` process (interpreter start, atomic file writes)."""
    return subprocess.run([sys.executable, "-m", "simulator.predict", *args], capture_output=True, text=True, cwd=cwd)


@pytest.mark.parametrize("args, message", [
    (["--model", "llama-3.1-8", "--hardware", "h100-sxm"], "did you mean 'llama-3.1-8b'"),
    (["--model", "llama-3.1-8b", "--hardware", "h100-sm"], "did you mean 'h100-sxm'"),
    (["--acceptance", "1.2"], "outside [0, 1)"),
    (["--acceptance", "abc"], "expected a rate"),
    (["--k-max", "-1"], "K must be >= 0"),
    (["--batch-sizes", "0-8"], "< 1"),
    (["--model", "llama-3.1-8b", "--hardware", "h100-sxm", "--tp", "3"], "does not divide the 32 attention heads"),
    (["--scenario", "nope.toml"], "scenario file not found"),
    (["--tp", "x"], "invalid int value"),
    (["--calibration", "missing.json"], "calibration profile not found"),
])
def test_cli_bad_input_one_line_exit_2(args, message):
    r = run_cli(*args)
    assert r.returncode == 2, r.stderr
    assert message in r.stderr
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_cli_malformed_inputs(tmp_path):
    toml = tmp_path / "s.toml"
    toml.write_text("[model\nname=")
    r = run_cli("--scenario", str(toml))
    assert r.returncode == 2 and "malformed TOML" in r.stderr
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"model_type": "llama", "hidden_size": 64}))
    r = run_cli("--model", str(cfg), "--hardware", "h100-sxm")
    assert r.returncode == 2 and "missing field 'num_hidden_layers'" in r.stderr


def test_cli_formats_and_atomic_output(tmp_path):
    # in the test process but the last run: one real process writes the engine file (run_process)
    r = run_cli("--scenario", "llama-3.1-8b-h100", "--format", "json")
    data = json.loads(r.stdout)
    row = data["rows"][0]
    for key in ("batch_size", "k_opt", "goodput_per_seq", "throughput", "speedup_vs_plain", "speedup_vs_fixed",
                "bound", "fits_memory"):
        assert key in row
    assert data["provenance"]["step_time_source"].startswith("measured kernel tables")
    assert data["provenance"]["uncertainty"]
    out = tmp_path / "vllm.json"
    out.write_text("keep me")
    r = run_cli("--scenario", "llama-3.1-8b-h100", "--acceptance", "2", "--format", "vllm", "--output", str(out))
    assert r.returncode == 2 and out.read_text() == "keep me"  # a failed run leaves the old file
    r = run_process("--scenario", "llama-3.1-8b-h100", "--format", "vllm", "--output", str(out))
    cfg = json.loads(out.read_text())
    assert cfg["num_speculative_tokens_per_batch_size"][0][0] == 1
    r = run_cli("--scenario", "qwen3-235b-h200", "--breakdown", "4,3")
    assert "moe_experts" in r.stdout and r.returncode == 0


def test_every_catalog_model_and_device_predicts():
    for model in list_models():
        m = load_model(model)
        tp = 8 if m.num_heads % 8 == 0 else 1
        p = predict(model=model, hardware="b200", tp=tp, draft="ngram", batch_sizes="1-64")
        assert np.isfinite(p.grid_rows.itl_ms).all()


def test_custom_hardware_rejects_nonpositive():
    with pytest.raises(PlannerError):
        custom_hardware(load_hardware("h100-sxm"), hbm_bandwidth_bytes_per_s=0.0)


def test_profile_engine_terms_scale_every_operator(tmp_path):
    # hand: an engine scale of 2 doubles every device operator's time (the n-gram lookup is host
    # time, not a kernel); step overhead adds fixed + per-seq * B
    from dataclasses import replace as dc_replace

    from simulator.plan.grid import compute_grid
    from simulator.specs.profile import load_profile
    sc = load_scenario(SCENARIO_DIR / "smollm2-cpu.toml")
    base = dc_replace(sc, profile=sc.profile.microbenchmarks_only())
    scaled = dc_replace(sc, profile=dc_replace(base.profile, engine_scale=2.0, step_overhead_fixed_s=0.001,
                                               step_overhead_per_seq_s=0.0001))
    g0 = compute_grid(base, batch_sizes=[1, 8], ks=[0, 3])
    g1 = compute_grid(scaled, batch_sizes=[1, 8], ks=[0, 3])
    assert np.allclose(g1.verify.total_s, 2 * g0.verify.total_s)
    overhead = 0.001 + 0.0001 * np.array([[1.0], [8.0]])
    assert np.allclose(g1.draft_s, g0.draft_s)
    assert np.allclose(g1.itl_s, 2 * g0.verify.total_s + g0.draft_s + overhead)
    bad = json.loads(Path(sc.profile.path).read_text()) | {"engine": {"scale": 50}}
    (tmp_path / "p.json").write_text(json.dumps(bad))
    with pytest.raises(PlannerError, match="engine.scale"):
        load_profile(tmp_path / "p.json")


def test_a_config_keeps_its_architectures_and_refuses_a_malformed_list():
    # the engines pick code paths by them (vLLM's default model runner: simulator/data/engine_settings.toml)
    cfg = json.loads((Path(__file__).resolve().parent.parent / "simulator/data/models/llama-3.1-8b.json").read_text())
    assert model_from_hf_config(cfg, "x", "config.json").architectures == ("LlamaForCausalLM",)
    assert model_from_hf_config({k: v for k, v in cfg.items() if k != "architectures"}, "x", "c").architectures == ()
    with pytest.raises(PlannerError, match=r"config.json: field 'architectures' must be a list of class names"):
        model_from_hf_config(cfg | {"architectures": "LlamaForCausalLM"}, "x", "config.json")
