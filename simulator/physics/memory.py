"""Memory per GPU: weights, KV cache, draft, activations, and the one budget they share.

Every consumer (the goodput grid, the serving simulation's KV block budget, sizing's fit check)
asks :func:`step_memory_bytes` / :func:`kv_capacity_blocks`, so there is one memory model.
"""
from __future__ import annotations

import numpy as np

from simulator.errors import PlannerError
from simulator.specs.deployment import Deployment, kv_heads_per_gpu, sliding_layers
from simulator.specs.drafts import DraftSpec, draft_defaults, draft_tp
from simulator.specs.hardware import DTYPE_BYTES
from simulator.specs.models import ModelSpec


def weight_bytes_per_gpu(model: ModelSpec, dep: Deployment) -> float:
    """Target weights held by one GPU (experts spread over all tp GPUs; KV heads replicated if needed)."""
    w = DTYPE_BYTES[dep.weight_dtype]
    w_e = DTYPE_BYTES[dep.expert_dtype_for(model)]
    t = dep.tp
    attention = model.attention_params() / t
    if model.attention == "gqa":
        attention += model.hidden_size * 2 * model.head_dim * (kv_heads_per_gpu(model, t) - model.num_kv_heads / t)
    dense = model.num_mlp_dense_layers * model.dense_mlp_params() / t
    moe = model.num_moe_layers * (model.num_experts * model.expert_params() * w_e / w
                                  + model.shared_expert_params() + model.hidden_size * model.num_experts * t) / t
    return (model.num_layers * attention + dense + moe + model.embedding_params() / t) * w


def kv_bytes_per_gpu(model: ModelSpec, dep: Deployment, batch, tokens_per_seq, layers: int | None = None) -> np.ndarray:
    """KV cache of B sequences of ``tokens_per_seq`` tokens on one GPU (sliding layers keep a window)."""
    kv = DTYPE_BYTES[dep.kv_dtype]
    per_head_group, latent = model.kv_elements_per_token()
    per_token_layer = (per_head_group * kv_heads_per_gpu(model, dep.tp) / model.num_kv_heads + latent) * kv
    n_layers = model.num_layers if layers is None else layers
    n_sliding = sliding_layers(model, layers)
    tokens = np.asarray(tokens_per_seq, dtype=float)
    sliding_tokens = np.minimum(tokens, model.sliding_window) if model.sliding_window else tokens
    return np.asarray(batch, dtype=float) * per_token_layer * ((n_layers - n_sliding) * tokens + n_sliding * sliding_tokens)


def activation_bytes_per_gpu(model: ModelSpec, dep: Deployment, tokens) -> np.ndarray:
    """Working buffers of a step: hidden states, the widest MLP slice and fp32 logits."""
    a = DTYPE_BYTES[dep.act_dtype]
    width = max(model.intermediate_size, model.expert_intermediate_size * max(model.experts_per_token, 1))
    return np.asarray(tokens, dtype=float) * ((4 * model.hidden_size + 2 * width / dep.tp) * a
                                               + model.vocab_size / dep.tp * 4.0)



def draft_memory_bytes(draft: DraftSpec, target: ModelSpec, dep: Deployment, batch, tokens_per_seq) -> np.ndarray:
    """Draft weights + draft KV cache per GPU."""
    w = DTYPE_BYTES[dep.weight_dtype]
    if draft.method == "ngram":
        return np.zeros(np.broadcast(np.asarray(batch), np.asarray(tokens_per_seq)).shape)
    if draft.method == "model":
        ddep = Deployment(tp=draft_tp(draft.model, dep.tp), weight_dtype=dep.weight_dtype, kv_dtype=dep.kv_dtype)
        return weight_bytes_per_gpu(draft.model, ddep) + kv_bytes_per_gpu(draft.model, ddep, batch, tokens_per_seq)
    if draft.method == "early-exit":  # shares the target's weights; own KV for its layers
        return kv_bytes_per_gpu(target, dep, batch, tokens_per_seq, layers=draft.layers)
    cfg = draft_defaults()[draft.method]
    D = target.hidden_size
    layer = target.attention_params() + (target.dense_mlp_params() if not (draft.method == "mtp" and target.is_moe)
                                         else target.num_experts * target.expert_params() + target.shared_expert_params())
    vocab = cfg.get("draft_vocab") or 0
    params = layer + cfg["fusion_inputs"] * D * D + (vocab * D if vocab and vocab < target.vocab_size else 0)
    return params * w / dep.tp + kv_bytes_per_gpu(target, dep, batch, tokens_per_seq, layers=1)
