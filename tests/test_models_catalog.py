"""Catalog models used by the published corpus load, and their parameter counts match what the
model publishers state.

ModelSpec.total_params counts the matmul weights and the embedding / LM-head tables only (no RMSNorm
vectors, no Qwen2 QKV biases), so it sits a hair under the published totals; 3% is the tolerance.
"""
from __future__ import annotations

import pytest

from simulator.specs.models import load_model

# (catalog name, published parameter count, where that count is published)
PUBLISHED_PARAMS = [
    ("llama-2-7b", 6_738_415_616,
     "meta-llama/Llama-2-7b-hf, Hugging Face model page (safetensors metadata, shown as 6.74B params)"),
    ("llama-2-13b", 13_015_864_320,
     "meta-llama/Llama-2-13b-hf, Hugging Face model page (safetensors metadata, shown as 13B params)"),
    ("llama-2-70b", 68_976_648_192,
     "meta-llama/Llama-2-70b-hf, Hugging Face model page (safetensors metadata, shown as 69B params)"),
    ("llama-2-7b-32k", 6_738_415_616,
     "togethercomputer/LLaMA-2-7B-32K is Llama-2-7B with interpolated RoPE: same weights shapes "
     "(Hugging Face model page, 6.74B params)"),
    ("llama-3.1-405b", 405e9,
     "Llama 3 Herd of Models (Dubey et al. 2024, arXiv:2407.21783) and the Llama 3.1 model card: 405B"),
    ("mistral-7b-v0.3", 7_248_023_552,
     "mistralai/Mistral-7B-v0.3, Hugging Face model page (safetensors metadata, shown as 7.25B params)"),
    ("mistral-7b-v0.1", 7_241_732_096,
     "mistralai/Mistral-7B-v0.1, Hugging Face model page (safetensors metadata, shown as 7.24B params)"),
    ("qwen2.5-7b", 7.61e9, "Qwen/Qwen2.5-7B model card: 'Number of Parameters: 7.61B'"),
    ("qwen2.5-32b", 32.5e9, "Qwen/Qwen2.5-32B model card: 'Number of Parameters: 32.5B'"),
    ("tinyllama-1.1b", 1_100_048_384,
     "TinyLlama/TinyLlama-1.1B-intermediate-step-1431k-3T, Hugging Face model page "
     "(safetensors metadata, shown as 1.1B params); Zhang et al. 2024, arXiv:2401.02385: 1.1B"),
]


@pytest.mark.parametrize("name,published,source", PUBLISHED_PARAMS, ids=[p[0] for p in PUBLISHED_PARAMS])
def test_catalog_total_params_match_published(name, published, source):
    m = load_model(name)
    assert m.source.startswith("config.json of ")  # the entry names where its values come from
    assert m.total_params() == pytest.approx(published, rel=0.03), source


# Qwen model cards also state the non-embedding count; Qwen2.5 7B/32B do not tie embeddings, so
# non-embedding = total - 2 * vocab * hidden.
QWEN_NON_EMBEDDING = [
    ("qwen2.5-7b", 6.53e9, "Qwen/Qwen2.5-7B model card: 'Number of Paramaters (Non-Embedding): 6.53B'"),
    ("qwen2.5-32b", 31.0e9, "Qwen/Qwen2.5-32B model card: 'Number of Paramaters (Non-Embedding): 31.0B'"),
]


@pytest.mark.parametrize("name,published,source", QWEN_NON_EMBEDDING, ids=[p[0] for p in QWEN_NON_EMBEDDING])
def test_qwen_non_embedding_params_match_model_card(name, published, source):
    m = load_model(name)
    assert not m.tie_word_embeddings
    assert m.total_params() - m.embedding_params() == pytest.approx(published, rel=0.03), source


def test_hand_count_llama_2_7b():
    # hand: L=32, D=4096, F=11008, V=32000, MHA (H_kv = H_q = 32, d = 128), untied head
    #   attention 4 * D^2 = 67,108,864; MLP 3 * D * F = 135,266,304; per layer 202,375,168
    #   32 layers = 6,476,005,376; embeddings 2 * V * D = 262,144,000; total 6,738,149,376
    #   (the published 6,738,415,616 adds 65 RMSNorm vectors of 4096 = 266,240)
    m = load_model("llama-2-7b")
    assert (m.num_kv_heads, m.head_dim) == (32, 128)
    assert m.total_params() == 6_738_149_376
    assert m.total_params() + 65 * 4096 == 6_738_415_616


def test_long_context_and_draft_entries_keep_their_base_shapes():
    # LLaMA-2-7B-32K changes only the RoPE scaling and context, not the weights
    assert load_model("llama-2-7b-32k").total_params() == load_model("llama-2-7b").total_params()
    # TinyLlama drafts for Llama-2 targets: same 32000-token vocabulary; GQA 32 q / 4 kv heads of 64
    tiny, target = load_model("tinyllama-1.1b"), load_model("llama-2-7b")
    assert tiny.vocab_size == target.vocab_size == 32000
    assert (tiny.num_heads, tiny.num_kv_heads, tiny.head_dim) == (32, 4, 64)


def test_mistral_v01_slides_a_4096_window_on_every_layer():
    # Mistral 7B paper (arXiv 2310.06825) Table 1: window_size 4096, 32 layers
    m = load_model("mistral-7b-v0.1")
    assert m.sliding_window == 4096 and m.num_sliding_layers == 32


def test_no_sliding_window_where_the_config_disables_it():
    # Mistral-7B-v0.3 sets sliding_window null; Qwen2.5 sets use_sliding_window false
    for name in ("mistral-7b-v0.3", "qwen2.5-7b", "qwen2.5-32b"):
        m = load_model(name)
        assert m.sliding_window is None and m.num_sliding_layers == 0, name
