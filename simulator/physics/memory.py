"""Memory per GPU: weights, KV cache, draft, activations, and the one budget they share.

Every consumer (the goodput grid, the serving simulation's KV block budget, sizing's fit check)
asks :func:`step_memory_bytes` / :func:`kv_capacity_blocks`, so there is one memory model.
"""
from __future__ import annotations

import numpy as np

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


# --- the one memory budget -------------------------------------------------------------------------

def draft_weight_bytes(draft: DraftSpec, target: ModelSpec, dep: Deployment, speculative: bool = True) -> float:
    """Draft weights per GPU (0 without speculation)."""
    return float(draft_memory_bytes(draft, target, dep, 0.0, 0.0)) if speculative else 0.0


def kv_bytes_per_sequence(draft: DraftSpec, target: ModelSpec, dep: Deployment, tokens, speculative: bool = True):
    """KV cache of one sequence of ``tokens`` tokens per GPU: the target's, plus the draft's own when speculating."""
    kv = kv_bytes_per_gpu(target, dep, 1.0, tokens)
    if speculative:
        kv = kv + draft_memory_bytes(draft, target, dep, 1.0, tokens) - draft_weight_bytes(draft, target, dep)
    return kv


def kv_budget_bytes(draft: DraftSpec, target: ModelSpec, dep: Deployment, memory_bytes: float, speculative: bool,
                    step_tokens=0.0):
    """Bytes per GPU left for KV caches: usable memory (memory_utilization x device memory) minus the
    target's and draft's weights and the activation buffers of a ``step_tokens``-token step.

    The goodput grid, the serving simulation's KV blocks and sizing's fit check all start from it.
    """
    usable = memory_bytes * dep.memory_utilization
    return (usable - weight_bytes_per_gpu(target, dep) - draft_weight_bytes(draft, target, dep, speculative)
            - activation_bytes_per_gpu(target, dep, step_tokens))


def step_memory_bytes(draft: DraftSpec, target: ModelSpec, dep: Deployment, batch, k, tokens_per_seq) -> np.ndarray:
    """Memory per GPU of a verify step: weights, B sequences' KV (+ draft weights and KV when K > 0),
    activations of B (K + 1) tokens. The step fits when this is <= memory_utilization x device memory."""
    batch, k = np.asarray(batch, dtype=float), np.asarray(k, dtype=float)
    spec = k > 0
    return (weight_bytes_per_gpu(target, dep)
            + batch * np.where(spec, kv_bytes_per_sequence(draft, target, dep, tokens_per_seq, True),
                               kv_bytes_per_gpu(target, dep, 1.0, tokens_per_seq))
            + np.where(spec, draft_weight_bytes(draft, target, dep), 0.0)
            + activation_bytes_per_gpu(target, dep, batch * (k + 1)))
