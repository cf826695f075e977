"""The attention families of late 2025-2026 (issue 48, item 2): each layer kind's verify pass at B = 8 sequences,
K = 3 drafts (q = K + 1 = 4 queries a sequence), context L = 32768, against a hand computation, and the memory one
sequence holds with its speculative states. One GPU (tp 1), bf16 activations and KV unless a test says otherwise.

Hand numbers are written out as the arithmetic of the config.json fields (docs/attention_families.md).
"""
from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

import pytest

from simulator.errors import PlannerError
from simulator.physics.attention import attention_kind_op
from simulator.physics.forward_pass import forward_ops, verify_cost
from simulator.physics.memory import (kv_bytes_per_gpu, recurrent_state_bytes, sequence_memory_bytes,
                                      step_memory_bytes, weight_bytes_per_gpu)
from simulator.specs.deployment import make_deployment
from simulator.specs.drafts import parse_draft
from simulator.specs.hardware import load_hardware
from simulator.specs.models import load_model, model_from_hf_config

B, K, L = 8.0, 3, 32768.0
Q = K + 1.0
BF16 = make_deployment(tp=1)
ROOT = Path(__file__).resolve().parent.parent


def op_of(model_name, name, dep=BF16, model=None):
    m = model or load_model(model_name)
    return attention_kind_op(m, dep, B, Q, L, 1, name)


# --- each layer kind's verify pass: bytes and FLOPs by hand ------------------------------------------------------

def test_sliding_window_caps_the_kv_read_at_the_window():
    # hand: gemma-3-27b, H_q 32, H_kv 16, d 128, window 1024: keys = min(32768, 1024) = 1024
    #   F = 4 B q (keys + (q+1)/2) H_q d = 4 * 8 * 4 * 1026.5 * 32 * 128 = 538,181,632
    #   M = B (keys + q) 2 H_kv d kv + 2 B q H_q d a = 8 * 1028 * 8192 + 2 * 8 * 4 * 32 * 128 * 2
    #     = 67,371,008 + 524,288 = 67,895,296
    op = op_of("gemma-3-27b", "attention_sliding")
    assert float(op.flops) == 538_181_632
    assert float(op.nbytes) == 67_895_296
    # the same model's global layers read all 32768 + 4 keys: 32 x the sliding layer's KV
    full = op_of("gemma-3-27b", "attention")
    assert float(full.nbytes) == 8 * 32772 * 8192 + 524_288


def test_chunked_attention_caps_the_kv_read_at_the_chunk():
    # hand: llama-4-maverick, H_q 40, H_kv 8, d 128, attention_chunk_size 8192 (the 36 RoPE layers)
    #   F = 4 * 8 * 4 * (8192 + 2.5) * 40 * 128 = 5,370,347,520
    #   M = 8 * (8192 + 4) * (2 * 8 * 128 * 2) + 2 * 8 * 4 * 40 * 128 * 2 = 268,566,528 + 655,360
    op = op_of("llama-4-maverick", "attention_chunked")
    assert float(op.flops) == 5_370_347_520
    assert float(op.nbytes) == 268_566_528 + 655_360
    m = load_model("llama-4-maverick")
    assert (m.num_chunked_layers, m.num_full_layers, m.attention_chunk_size) == (36, 12, 8192)


def test_gated_deltanet_reads_one_state_and_writes_k_plus_1():
    # hand: qwen3-next-80b-a3b, H_k 16, H_v 32, d_k = d_v 128, conv kernel 4, state fp32
    #   state S = 32 * 128 * 128 = 524,288 elements = 2,097,152 B; conv C = 3 * (2*16*128 + 32*128) = 24,576
    #   elements = 49,152 B (bf16)
    #   states moved = 1 read + q = 4 intermediate written + 2 (restore the accepted one) = 7 per sequence
    #   M = 8 * 7 * 2,146,304 + B q (2 H_k d_k + 2 H_v d_v) a = 120,193,024 + 32 * 12,288 * 2 = 120,979,456
    #   F = B q (7 S + 2 kc (2 H_k d_k + H_v d_v)) = 32 * (3,670,016 + 65,536) = 119,537,664
    op = op_of("qwen3-next-80b-a3b", "attention_linear")
    assert float(op.nbytes) == 120_979_456
    assert float(op.flops) == 119_537_664
    # no context term: the same at L = 1k
    m = load_model("qwen3-next-80b-a3b")
    assert float(attention_kind_op(m, BF16, B, Q, 1024.0, 1, "attention_linear").nbytes) == 120_979_456
    # plain decoding (q = 1): read 1, write 1, no restore: 8 * 2 * 2,146,304 + 8 * 12,288 * 2
    assert float(attention_kind_op(m, BF16, B, 1.0, L, 1, "attention_linear").nbytes) == 34_340_864 + 196_608


def test_sparse_mla_reads_top_k_latents_per_query():
    # hand: deepseek-v3.2, H_q 128, kv_lora 512, rope 64 (latent 576), index_topk 2048, KV fp8
    #   keys a query = min(32768 + 4, 2048) = 2048
    #   F = 2 H_q (2 * 512 + 64) B q k = 2 * 128 * 1088 * 32 * 2048 = 18,253,611,008
    #   an fp8 latent is 656 B in FlashMLA's sparse-decode cache (deepseek-ai/FlashMLA README, "FP8 with
    #   scale": 512 fp8 NoPE values, 4 fp32 scales, 64 bf16 RoPE values), not 576
    #   M = B q k 656 + 2 B q H_q 576 a = 42,991,616 + 9,437,184 = 52,428,800
    dep = make_deployment(tp=1, kv_dtype="fp8")
    op = op_of("deepseek-v3.2", "attention_sparse", dep)
    assert float(op.flops) == 18_253_611_008
    assert float(op.nbytes) == 52_428_800
    # each extra draft adds a query's own 2048 latents (K = 7: q = 8, twice the K = 3 read)
    m = load_model("deepseek-v3.2")
    eight = attention_kind_op(m, dep, B, 8.0, L, 1, "attention_sparse")
    assert float(eight.nbytes) == 2 * 52_428_800
    # a bf16 cache is the plain latent: 32 * 2048 * 576 * 2 + 9,437,184
    bf16 = attention_kind_op(m, make_deployment(tp=1, kv_dtype="bf16"), B, Q, L, 1, "attention_sparse")
    assert float(bf16.nbytes) == 32 * 2048 * 1152 + 9_437_184
    # dense MLA (DeepSeek-V3) at the same shapes reads the 32772 latents once per sequence
    dense = attention_kind_op(load_model("deepseek-v3"), dep, B, Q, L, 1, "attention")
    assert float(dense.nbytes) == 8 * 32772 * 576 + 9_437_184


def test_lightning_indexer_reads_the_whole_index_cache():
    # hand: deepseek-v3.2 indexer, H_i 64 heads of d_i 128 (fp8 keys + one fp32 scale = 132 B a token)
    #   F = 2 H_i (d_i + 1) B q (L + (q+1)/2) = 2 * 64 * 129 * 32 * 32770.5 = 17,315,407,872
    #   M = B (L + q) 132 + 2 * 4 B q (L + q) + B q H_i d_i = 34,607,232 + 8,389,632 + 262,144 = 43,259,008
    op = op_of("deepseek-v3.2", "attention_indexer")
    assert float(op.flops) == 17_315_407_872
    assert float(op.nbytes) == 43_259_008


def test_global_layers_with_their_own_shape_gemma4():
    # Gemma 4 31B text_config (fields as published: global_head_dim 512, num_global_key_value_heads 4,
    # attention_k_eq_v: the global layers cache K only and reuse it as V)
    m = model_from_hf_config(GEMMA4_31B, "gemma-4-31b", "test")
    assert m.layer_kinds() == {"full": 10, "sliding": 50}
    # hand: global layer, H_q 32, d 512, 4 KV heads, K only: 4 * 512 * 2 B = 4096 B a token
    #   F = 4 * 8 * 4 * 32770.5 * 32 * 512 = 68,724,719,616;  M = 8 * 32772 * 4096 + 2 * 8 * 4 * 32 * 512 * 2
    full = attention_kind_op(m, BF16, B, Q, L, 1, "attention")
    assert float(full.flops) == 68_724_719_616
    assert float(full.nbytes) == 8 * 32772 * 4096 + 2_097_152
    # sliding layers: 16 KV heads of 256, window 1024: 8 * 1028 * (2 * 16 * 256 * 2) + 2 * 8 * 4 * 32 * 256 * 2
    sliding = attention_kind_op(m, BF16, B, Q, L, 1, "attention_sliding")
    assert float(sliding.nbytes) == 8 * 1028 * 16384 + 1_048_576
    # the final-logit softcap is one more pass over the [B q, vocab] logits: 8 B an element (fp32 read + write)
    soft = [o for o in forward_ops(m, BF16, load_hardware("h100-sxm"), B, Q, L) if o.name == "logit_softcap"]
    assert len(soft) == 1 and float(soft[0].nbytes) == 32 * 262144 * 8


# --- memory per sequence, speculative states included ------------------------------------------------------------

def test_memory_per_sequence_hybrid_keeps_k_plus_1_states():
    # qwen3-next: 12 full-attention layers (2 KV heads of 256: 2048 B a token a layer) + 36 Gated DeltaNet layers
    # whose state (2,146,304 B with the conv state) is kept K + 1 = 4 times while verifying K = 3
    m = load_model("qwen3-next-80b-a3b")
    tokens = L + Q
    kv = 12 * 2048 * tokens
    states = 36 * 2_146_304 * 4
    assert float(kv_bytes_per_gpu(m, BF16, 1.0, tokens)) == kv
    assert float(recurrent_state_bytes(m, BF16, K)) == states == 309_067_776
    assert float(sequence_memory_bytes(m, BF16, tokens, K)) == kv + states
    assert float(sequence_memory_bytes(m, BF16, tokens, 0)) == kv + states / 4  # plain decoding: one state
    # the grid's fit check counts them: B = 8 sequences at K = 3 hold 3 more states each than at K = 0
    draft = parse_draft("ngram")
    spec = step_memory_bytes(draft, m, BF16, B, K, tokens) - step_memory_bytes(draft, m, BF16, B, 0, tokens)
    act = 8 * 3 * (4 * 2048 + 2 * 5120) * 2 + 8 * 3 * 151936 * 4  # activations of 24 more tokens
    assert float(spec) == pytest.approx(8 * 36 * 2_146_304 * 3 + act)


def test_memory_per_sequence_windows_latents_and_indexer_keys():
    tokens = L + Q
    # gemma-3-27b: 10 global layers keep every token, 52 sliding layers 1024 (8192 B a token a layer)
    g = load_model("gemma-3-27b")
    assert float(kv_bytes_per_gpu(g, BF16, 1.0, tokens)) == 8192 * (10 * tokens + 52 * 1024)
    # llama-4-maverick: 12 global layers, 36 chunked at 8192 (4096 B a token a layer)
    m = load_model("llama-4-maverick")
    assert float(kv_bytes_per_gpu(m, BF16, 1.0, tokens)) == 4096 * (12 * tokens + 36 * 8192)
    # deepseek-v3.2, fp8 cache: 61 layers x (656 latent in FlashMLA's FP8 format + 132 indexer) B a token,
    # no state (61 x 788 x 32768 = 1,575,092,224 B = 1502 MiB at 32k)
    dep = make_deployment(tp=1, kv_dtype="fp8")
    v32 = load_model("deepseek-v3.2")
    assert float(sequence_memory_bytes(v32, dep, tokens, K)) == 61 * (656 + 132) * tokens


def test_kinds_add_up_in_a_whole_verify_pass():
    # every layer of each new model is priced by exactly one attention op of its kind
    hw = load_hardware("h200")
    dep = make_deployment(tp=8, weight_dtype="fp8")
    expect = {"qwen3-next-80b-a3b": {"attention": 12, "attention_linear": 36},
              "deepseek-v3.2": {"attention_sparse": 61, "attention_indexer": 61},
              "llama-4-maverick": {"attention": 12, "attention_chunked": 36},
              "gemma-3-27b": {"attention": 10, "attention_sliding": 52},
              "gpt-oss-20b": {"attention": 12, "attention_sliding": 12},
              "kimi-k2": {"attention": 61}, "glm-4.6": {"attention": 92}, "minimax-m2": {"attention": 62}}
    for name, kinds in expect.items():
        m = load_model(name)
        d = dep if m.num_heads % 8 == 0 else make_deployment(tp=1)
        ops = forward_ops(m, d, hw, B, Q, L)
        got = {o.name: o.count for o in ops if o.family == "attention"}
        assert got == kinds, name
        cost = verify_cost(m, d, hw, np.array([B]), np.array([K]), L, None)
        assert np.all(np.isfinite(cost.total_s)) and float(cost.total_s[0]) > 0


# --- the catalog entries and their published sizes ------------------------------------------------------------------

# (name, total, active, whether the published active count leaves out the input embedding (a gather, no matmul),
# where published)
PUBLISHED = [
    ("gpt-oss-20b", 20.91e9, 3.61e9, True, "gpt-oss model card (arXiv:2508.10925) Table 1: 20.91B total, 3.61B active"),
    ("qwen3-next-80b-a3b", 80e9, 3.9e9, False,
     "Qwen/Qwen3-Next-80B-A3B-Instruct model card: 80B total; NVIDIA NIM model card: 3.9B active"),
    ("kimi-k2", 1.04e12, 32e9, True, "moonshotai/Kimi-K2-Instruct model card: 1T total (1.04T), 32B activated"),
    ("glm-4.6", 355e9, 32e9, True, "GLM-4.5 technical report (arXiv:2508.06471): 355B total, 32B activated"),
    ("minimax-m2", 230e9, 10e9, True, "MiniMaxAI/MiniMax-M2 model card: 230B total, 10B activated"),
    ("llama-4-maverick", 400e9, 17e9, False, "Llama 4 model card: Maverick 400B total, 17B active"),
    ("gemma-3-27b", 27e9, 27e9, False, "Gemma 3 technical report (arXiv:2503.19786): 27B"),
    ("deepseek-v3.2", 671e9, 37e9, True,
     "DeepSeek-V3 report (arXiv:2412.19437): 671B total, 37B activated; V3.2 adds the indexer (~0.8B)"),
]


@pytest.mark.parametrize("name,total,active,no_input_embedding,source", PUBLISHED, ids=[p[0] for p in PUBLISHED])
def test_new_catalog_entries_match_published_sizes(name, total, active, no_input_embedding, source):
    # published: totals within 5% (rounded figures: 80B, 230B, 400B; MTP layers and norms left out here);
    # active within 5% in the convention the publisher counts
    m = load_model(name)
    assert m.source.startswith("config.json of ")
    assert m.total_params() == pytest.approx(total, rel=0.05), source
    ours = m.active_params() - (m.vocab_size * m.hidden_size if no_input_embedding else 0)
    assert ours == pytest.approx(active, rel=0.05), source


def test_layer_kinds_of_the_catalog_entries():
    assert load_model("gemma-3-27b").layer_kinds() == {"full": 10, "sliding": 52}
    assert load_model("qwen3-next-80b-a3b").layer_kinds() == {"full": 12, "linear": 36}
    v32 = load_model("deepseek-v3.2")
    assert v32.layer_kinds() == {"sparse": 61} and (v32.index_n_heads, v32.index_head_dim, v32.index_topk) == (64, 128, 2048)
    k2 = load_model("kimi-k2")
    assert (k2.num_experts, k2.num_heads, k2.num_dense_layers, k2.attention) == (384, 64, 1, "mla")
    glm = load_model("glm-4.6")
    assert (glm.num_experts, glm.experts_per_token, glm.num_dense_layers, glm.num_kv_heads) == (160, 8, 3, 8)
    mm = load_model("minimax-m2")
    assert mm.layer_kinds() == {"full": 62} and (mm.num_experts, mm.experts_per_token) == (256, 8)
    mav = load_model("llama-4-maverick")
    assert (mav.num_moe_layers, mav.num_dense_layers, mav.intermediate_size, mav.expert_intermediate_size) == \
        (24, 24, 16384, 8192)


# --- other configs of the families: read, or refused naming the layer kind ------------------------------------------

GEMMA4_31B = {
    "model_type": "gemma4", "tie_word_embeddings": True,
    "text_config": {"model_type": "gemma4_text", "attention_k_eq_v": True, "enable_moe_block": False,
                    "final_logit_softcapping": 30.0, "global_head_dim": 512, "head_dim": 256, "hidden_size": 5376,
                    "hidden_size_per_layer_input": 0, "intermediate_size": 21504,
                    "layer_types": (["sliding_attention"] * 5 + ["full_attention"]) * 10,
                    "max_position_embeddings": 262144, "num_attention_heads": 32, "num_global_key_value_heads": 4,
                    "num_hidden_layers": 60, "num_key_value_heads": 16, "num_kv_shared_layers": 0,
                    "sliding_window": 1024, "vocab_size": 262144}}

GEMMA2_9B = {"model_type": "gemma2", "hidden_size": 3584, "num_hidden_layers": 42, "num_attention_heads": 16,
             "num_key_value_heads": 8, "head_dim": 256, "intermediate_size": 14336, "vocab_size": 256000,
             "sliding_window": 4096, "attn_logit_softcapping": 50.0, "final_logit_softcapping": 30.0}

LLAMA4_SCOUT = {"model_type": "llama4", "tie_word_embeddings": False,
                "text_config": {"model_type": "llama4_text", "attention_chunk_size": 8192, "head_dim": 128,
                                "hidden_size": 5120, "interleave_moe_layer_step": 1, "intermediate_size": 8192,
                                "intermediate_size_mlp": 16384, "num_attention_heads": 40, "num_experts_per_tok": 1,
                                "num_hidden_layers": 48, "num_key_value_heads": 8, "num_local_experts": 16,
                                "no_rope_layers": [1, 1, 1, 0] * 12, "vocab_size": 202048}}

QWEN35_MOE = {"model_type": "qwen3_5_moe", "tie_word_embeddings": False,
              "text_config": {"model_type": "qwen3_5_moe_text", "attn_output_gate": True, "head_dim": 256,
                              "hidden_size": 2048, "layer_types": ["linear_attention"] * 3 * 10 + ["full_attention"] * 10,
                              "linear_conv_kernel_dim": 4, "linear_key_head_dim": 128, "linear_num_key_heads": 16,
                              "linear_num_value_heads": 32, "linear_value_head_dim": 128, "moe_intermediate_size": 512,
                              "num_attention_heads": 16, "num_experts": 256, "num_experts_per_tok": 8,
                              "num_hidden_layers": 40, "num_key_value_heads": 2,
                              "shared_expert_intermediate_size": 512, "vocab_size": 248320}}


QWEN35_9B = {"model_type": "qwen3_5", "tie_word_embeddings": False,
             "text_config": {"model_type": "qwen3_5_text", "attn_output_gate": True, "head_dim": 256,
                             "hidden_size": 4096, "intermediate_size": 12288,
                             "layer_types": (["linear_attention"] * 3 + ["full_attention"]) * 8,
                             "linear_conv_kernel_dim": 4, "linear_key_head_dim": 128, "linear_num_key_heads": 16,
                             "linear_num_value_heads": 32, "linear_value_head_dim": 128, "mamba_ssm_dtype": "float32",
                             "num_attention_heads": 16, "num_hidden_layers": 32, "num_key_value_heads": 4,
                             "vocab_size": 248320}}


def test_family_configs_read():
    q9 = model_from_hf_config(QWEN35_9B, "qwen3.5-9b", "test")
    assert q9.layer_kinds() == {"full": 8, "linear": 24} and not q9.is_moe and q9.attention_output_gate
    g2 = model_from_hf_config(GEMMA2_9B, "gemma-2-9b", "test")
    # Gemma 2 alternates sliding (even) and global (odd) layers; softcaps 50 / 30; embeddings tied
    assert g2.layer_kinds() == {"full": 21, "sliding": 21}
    assert (g2.attn_logit_softcapping, g2.final_logit_softcapping, g2.tie_word_embeddings) == (50.0, 30.0, True)
    scout = model_from_hf_config(LLAMA4_SCOUT, "llama-4-scout", "test")
    assert scout.layer_kinds() == {"full": 12, "chunked": 36} and scout.num_moe_layers == 48
    assert scout.total_params() == pytest.approx(109e9, rel=0.03)  # Llama 4 model card: Scout 109B total
    q35 = model_from_hf_config(QWEN35_MOE, "qwen3.5-35b-a3b", "test")
    assert q35.layer_kinds() == {"full": 10, "linear": 30} and q35.num_experts == 256


REFUSED = [
    ("lightning", {"model_type": "minimax_m2", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
                   "vocab_size": 10, "intermediate_size": 8, "num_local_experts": 2, "num_experts_per_tok": 1,
                   "attn_type_list": [0, 1]}, "lightning attention"),
    ("minimax-text-01", {"model_type": "minimax"}, "lightning attention"),
    ("kimi-linear", {"model_type": "kimi_linear"}, "Kimi Delta Attention"),
    ("mamba-layer-type", {"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
                          "vocab_size": 10, "intermediate_size": 8, "sliding_window": 16,
                          "layer_types": ["mamba", "full_attention"]}, "layer kind 'mamba'"),
    ("linear-outside-qwen", {"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
                             "vocab_size": 10, "intermediate_size": 8,
                             "layer_types": ["linear_attention", "full_attention"]}, "linear_attention"),
    ("chunked-without-chunk", {"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2,
                               "num_attention_heads": 4, "vocab_size": 10, "intermediate_size": 8,
                               "layer_types": ["chunked_attention", "full_attention"]}, "attention_chunk_size"),
    ("state-dtype-list", {**QWEN35_MOE, "text_config": {**QWEN35_MOE["text_config"], "mamba_ssm_dtype": ["x"]}},
     "mamba_ssm_dtype"),
    ("gemma4-moe-block", {**GEMMA4_31B, "text_config": {**GEMMA4_31B["text_config"], "enable_moe_block": True}},
     "MoE block"),
    ("gemma4-per-layer-embeddings", {**GEMMA4_31B, "text_config": {**GEMMA4_31B["text_config"],
                                                                   "hidden_size_per_layer_input": 256}},
     "per-layer input embeddings"),
]


@pytest.mark.parametrize("label,cfg,needle", REFUSED, ids=[r[0] for r in REFUSED])
def test_unpriced_layer_kinds_are_refused_by_name(label, cfg, needle):
    with pytest.raises(PlannerError, match=needle):
        model_from_hf_config(cfg, label, "config.json")


def test_refusal_is_one_line_exit_2(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(REFUSED[0][1]))
    out = subprocess.run([sys.executable, "-m", "simulator.predict", "--model", str(path), "--hardware", "h100-sxm"],
                         capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "lightning attention" in lines[0] and "Traceback" not in out.stderr


def test_weights_per_gpu_count_each_kind():
    # qwen3-next at tp 1: the memory model's weights equal the parameter count x 2 bytes (bf16, no replication)
    m = load_model("qwen3-next-80b-a3b")
    assert weight_bytes_per_gpu(m, BF16) == pytest.approx(2 * m.total_params(), rel=1e-9)
    # deepseek-v3.2 served in bf16 (its fp8 checkpoint converted): every weight at 2 bytes, the experts too; its fp8
    # checkpoint as published: the routed experts at 1 byte (the rest of the fp8 layers too, its head and router bf16)
    v32 = load_model("deepseek-v3.2")
    assert weight_bytes_per_gpu(v32, BF16) == pytest.approx(2 * v32.total_params(), rel=1e-9)
    fp8 = replace(BF16, weight_dtype="fp8")
    experts = v32.num_moe_layers * v32.num_experts * v32.expert_params()
    assert weight_bytes_per_gpu(v32, fp8) < 2 * v32.total_params() - experts


# --- a predict command that answers for each new catalog model (docs/attention_families.md) -------------------------

PREDICT = {
    "gemma-3-27b": "--hardware h100-sxm --tp 2 --draft eagle3",
    "qwen3-next-80b-a3b": "--hardware h100-sxm --tp 4 --draft mtp",
    "deepseek-v3.2": "--hardware h200 --tp 8 --draft mtp --kv-dtype fp8",
    "kimi-k2": "--hardware b200 --tp 8 --draft eagle3",
    "glm-4.6": "--hardware h200 --tp 8 --draft mtp --dtype fp8",
    "minimax-m2": "--hardware h200 --tp 4 --draft eagle3",
    "llama-4-maverick": "--hardware h200 --tp 8 --draft eagle3 --dtype fp8",
    "gpt-oss-20b": "--hardware h100-sxm --tp 1 --draft eagle3",
}


@pytest.mark.parametrize("model", list(PREDICT))
def test_predict_answers_for_each_new_model(model):
    from tests.cli_inprocess import run_main
    args = ["--model", model, *PREDICT[model].split(), "--context-len", "32768", "--batch-sizes", "1,8", "--format", "csv"]
    r = run_main("simulator.predict", *args, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    rows = [line for line in r.stdout.splitlines() if line[:2] in ("1,", "8,")]
    assert len(rows) == 2, r.stdout  # both batch sizes fit and get a K*


def test_fit_report_counts_the_states_as_the_grid_does():
    # plan.fit's memory terms (what a 'does not fit' answer shows) and the grid's step memory agree for a hybrid
    from simulator.plan.fit import memory_terms
    from simulator.physics.memory import step_memory_bytes as step
    from simulator.specs.overrides import apply_overrides
    from simulator.specs.scenario import build_scenario
    sc = build_scenario(apply_overrides({"model": {}, "hardware": {}}, dict(
        model="qwen3-next-80b-a3b", hardware="h100-sxm", tp=4, draft="mtp", context_len=32768)))
    for k in (0, 3):
        t = memory_terms(sc, 8, k)
        assert t["need"] == pytest.approx(float(step(sc.draft, sc.model, sc.deployment, 8.0, k, 32768 + k + 1)))


def test_hand_count_qwen3_next_parameters():
    # hand, qwen3-next-80b-a3b (D 2048, 48 layers: 12 gated full attention, 36 Gated DeltaNet, 512 experts of 512):
    #   full attention a layer: q + gate 2048 * (16 * 256 * 2) = 16,777,216; k, v 2048 * (2 * 2 * 256) = 2,097,152;
    #     o 4096 * 2048 = 8,388,608 -> 27,262,976; x 12 = 327,155,712
    #   Gated DeltaNet a layer: in_proj_qkvz 2048 * 12,288 = 25,165,824; in_proj_ba 2048 * 64 = 131,072;
    #     conv 8192 * 4 = 32,768; out_proj 4096 * 2048 = 8,388,608 -> 33,718,272; x 36 = 1,213,857,792
    #   MoE a layer: 512 * 3 * 2048 * 512 = 1,610,612,736 + shared 3,145,728 + router 1,048,576; x 48 = 77,510,737,920
    #   embeddings 2 * 151,936 * 2048 = 622,329,856;  total 79,674,081,280
    # The checkpoints of this config (Qwen/Qwen3-Coder-Next shares its shapes) hold 79,674,391,296 parameters
    # (safetensors count); the 310,016 between are vectors the cost model does not price: RMSNorms 2 x 2048 x 48
    # + 2048, q/k norms 2 x 256 x 12, GDN norm 128 x 36, A_log and dt_bias 2 x 32 x 36, shared-expert gates 2048 x 48
    m = load_model("qwen3-next-80b-a3b")
    assert m.total_params() == 79_674_081_280
    vectors = 2 * 2048 * 48 + 2048 + 2 * 256 * 12 + 128 * 36 + 2 * 32 * 36 + 2048 * 48
    assert m.total_params() + vectors == 79_674_391_296


# --- hostile edits of the new families' own fields: refused in one PlannerError, or priced finite and positive ------

def _catalog_config(name):
    return json.loads((ROOT / "simulator" / "data" / "models" / f"{name}.json").read_text())


_FAMILY_KEYS = ["linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim", "linear_conv_kernel_dim",
                "full_attention_interval", "layer_types", "mamba_ssm_dtype", "index_topk", "index_n_heads",
                "index_head_dim", "attention_chunk_size", "no_rope_layers", "interleave_moe_layer_step", "moe_layers",
                "global_head_dim", "num_global_key_value_heads", "attention_k_eq_v", "final_logit_softcapping",
                "attn_type_list", "text_config", "sliding_window_pattern"]


OUTCOMES = []


def test_hostile_family_fields_refused_or_sane(tmp_path):
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    from simulator.plan.api import predict_scenario
    from simulator.specs.scenario import build_scenario
    values = st.one_of(st.integers(min_value=-3, max_value=70), st.integers(min_value=-2**40, max_value=2**40),
                       st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=5), st.booleans(), st.none(),
                       st.lists(st.sampled_from([0, 1, "linear_attention", "full_attention", "chunked_attention", 7]),
                                max_size=4))
    bases = {"qwen3-next-80b-a3b": _catalog_config("qwen3-next-80b-a3b"),
             "deepseek-v3.2": _catalog_config("deepseek-v3.2"), "minimax-m2": _catalog_config("minimax-m2"),
             "llama-4-maverick": _catalog_config("llama-4-maverick")["text_config"],
             "gemma-4-31b": GEMMA4_31B["text_config"]}

    @settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(base=st.sampled_from(sorted(bases)),
           edits=st.dictionaries(st.sampled_from(_FAMILY_KEYS), values, min_size=1, max_size=3))
    def check(base, edits):
        cfg = {**bases[base], **edits}
        folder = tmp_path / str(len(OUTCOMES))  # a path of its own: load_model caches by path
        folder.mkdir()
        path = folder / "config.json"
        try:
            path.write_text(json.dumps(cfg, allow_nan=True))
        except (TypeError, ValueError):
            OUTCOMES.append(("unwritable", base, edits))
            return
        raw = {"model": {"name": str(path)}, "hardware": {"name": "b200", "tp": 8}, "draft": {"method": "eagle"},
               "precision": {"weights": "fp8"},
               "workload": {"context_len": 4096, "batch_sizes": "1,8", "k_max": 3}}
        try:
            pred = predict_scenario(build_scenario(raw))
        except PlannerError as e:
            OUTCOMES.append(("refused", base, edits, str(e)[:150]))
            return
        OUTCOMES.append(("priced", base, edits))
        t = pred.table[pred.table.fits_memory]
        for col in ("itl_ms", "goodput_per_seq", "memory_gb_per_gpu"):
            v = t[col].to_numpy(dtype=float)
            assert np.all(np.isfinite(v)) and np.all(v > 0), (base, edits, col)

    check()


# google/gemma-3-27b-it's config.json as published (quoted whole in TensorRT-LLM's Gemma 3 tests, there with
# num_hidden_layers cut to 6): its text_config names the window but neither vocab_size nor the pattern, which
# transformers' Gemma3TextConfig fills in (vocab_size 262208, sliding_window_pattern 6).
GEMMA3_27B_PUBLISHED = {
    "architectures": ["Gemma3ForConditionalGeneration"], "boi_token_index": 255999, "eoi_token_index": 256000,
    "eos_token_id": [1, 106], "image_token_index": 262144, "initializer_range": 0.02, "mm_tokens_per_image": 256,
    "model_type": "gemma3",
    "text_config": {"head_dim": 128, "hidden_size": 5376, "intermediate_size": 21504, "model_type": "gemma3_text",
                    "num_attention_heads": 32, "num_hidden_layers": 62, "num_key_value_heads": 16,
                    "query_pre_attn_scalar": 168, "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
                    "sliding_window": 1024},
    "torch_dtype": "bfloat16", "transformers_version": "4.50.0.dev0",
    "vision_config": {"hidden_size": 1152, "image_size": 896, "intermediate_size": 4304,
                      "model_type": "siglip_vision_model", "num_attention_heads": 16, "num_hidden_layers": 27,
                      "patch_size": 14, "vision_use_head": False},
}


@pytest.mark.parametrize("pattern_key", [None, "_sliding_window_pattern"])
def test_published_gemma3_config_keeps_its_global_layers(pattern_key):
    # before: 'missing field vocab_size', and with it added every one of the 62 layers slid (no global layer)
    cfg = json.loads(json.dumps(GEMMA3_27B_PUBLISHED))
    if pattern_key:  # transformers >= 4.53 writes the pattern under this name
        cfg["text_config"][pattern_key] = 6
    m = model_from_hf_config(cfg, "gemma-3-27b-it", "config.json")
    assert m.vocab_size == 262208
    assert (m.num_sliding_layers, m.num_layers - m.num_sliding_layers) == (52, 10)  # layers 6, 12, ... 60 global
    # hand: KV a token a layer 2 x 16 x 128 x 2 = 8192 B; at 32768 tokens 8192 (10 x 32768 + 52 x 1024) = 3,120,562,176 B
    assert float(kv_bytes_per_gpu(m, BF16, 1.0, 32768.0)) == 3_120_562_176
    assert float(kv_bytes_per_gpu(m, BF16, 1.0, 32768.0)) == float(kv_bytes_per_gpu(load_model("gemma-3-27b"), BF16, 1.0, 32768.0))


def test_an_fp8_checkpoint_prices_its_linear_layers_in_fp8_by_default():
    # DeepSeek-V3's published config: quantization_config fp8, 128 x 128 blocks, nothing left unquantized, so
    # the attention projections, dense MLPs and shared experts are fp8 too (before: bf16 unless --dtype fp8,
    # the experts alone fp8; at B = 1 on 8 x H200 the step was 28% slower than with --dtype fp8)
    from simulator.physics.memory import attention_bytes_per_gpu
    from simulator.specs.scenario import build_scenario
    default = build_scenario({"model": {"name": "deepseek-v3"}, "hardware": {"name": "h200", "tp": 8}})
    assert default.model.checkpoint_weight_dtype == "fp8" and default.deployment.weight_dtype == "fp8"
    # hand: one MLA block on one of 8 GPUs, fp8 (1 B a weight): q_a 7168 x 1536 + kv_a 7168 x 576 whole
    # (15,138,816) + (q_b 1536 x 128 x 192 + kv_b 512 x 128 x 256 + o 128 x 128 x 7168) / 8 (21,495,808)
    assert attention_bytes_per_gpu(default.model, default.deployment) == 36_634_624
    # a weight dtype given still wins
    bf16 = build_scenario({"model": {"name": "deepseek-v3"}, "hardware": {"name": "h200", "tp": 8},
                           "precision": {"weights": "bf16"}})
    assert attention_bytes_per_gpu(bf16.model, bf16.deployment) == 2 * 36_634_624
    # gpt-oss's mxfp4 leaves self_attn unquantized: experts alone, the rest at the default
    oss = load_model("gpt-oss-120b")
    assert (oss.checkpoint_weight_dtype, oss.expert_weight_dtype) == (None, "mxfp4")
    dsv3 = json.loads((Path(__file__).resolve().parent.parent / "simulator/data/models/deepseek-v3.json").read_text())
    dsv3["quantization_config"] = dsv3["quantization_config"] | {"modules_to_not_convert": ["self_attn"]}
    kept = model_from_hf_config(dsv3, "deepseek-v3-attn-bf16", "test")
    assert kept.checkpoint_weight_dtype is None and kept.expert_weight_dtype == "fp8"
