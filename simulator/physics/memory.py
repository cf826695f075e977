"""Memory per GPU: weights, KV cache, draft, activations, and the one budget they share.

Every consumer (the goodput grid, the serving simulation's KV block budget, sizing's fit check)
asks :func:`step_memory_bytes` (sizing through :func:`max_batch`, its rule solved for B) /
:func:`kv_capacity_blocks`, so there is one memory model.
"""
from __future__ import annotations

import numpy as np

from simulator.physics.attention import (indexer_key_bytes_per_token, linear_state_bytes_per_gpu,
                                         sparse_latent_bytes_per_token)
from simulator.specs.deployment import (Deployment, attention_projections, indexer_projections, kv_heads_per_gpu,
                                        layer_kind_counts, linear_projections, sliding_layers)
from simulator.specs.drafts import DraftSpec, draft_defaults, draft_deployment, fusion_dtype, head_deployment, mtp_depth
from simulator.specs.hardware import DTYPE_BYTES
from simulator.specs.models import ModelSpec


def replicated_attention_params(model: ModelSpec) -> int:
    """Attention weights every GPU of the attention group holds whole: MLA's q_a [D x q_lora] and
    kv_a [D x (kv_lora + rope)] have no head axis to split (the cost model prices them whole too)."""
    if model.attention != "mla":
        return 0
    return model.hidden_size * (model.q_lora_rank + model.kv_lora_rank + model.qk_rope_head_dim)


def moe_layer_bytes_per_gpu(model: ModelSpec, dep: Deployment) -> float:
    """One MoE layer's weights on one GPU: E routed experts spread over all tp GPUs (sliced, split or
    both: E P_e / tp either way), shared experts over the attention group, the router [D x E] whole."""
    w = DTYPE_BYTES[dep.weight_dtype]
    w_e = DTYPE_BYTES[dep.expert_dtype_for(model)]
    w_router = DTYPE_BYTES[dep.module_dtype_for(model, "router")]
    return (model.num_experts * model.expert_params() * w_e / dep.tp
            + model.shared_expert_params() * w / dep.attention_tp + model.hidden_size * model.num_experts * w_router)


def attention_bytes_per_gpu(model: ModelSpec, dep: Deployment) -> float:
    """One attention block on one GPU: split over the attention group's t = attention_tp GPUs, except
    MLA's replicated down-projections and GQA KV heads replicated when t exceeds their number."""
    w = DTYPE_BYTES[dep.weight_dtype]
    t = dep.attention_tp
    rep = replicated_attention_params(model)
    attention = rep + (model.attention_params() - rep) / t
    if model.attention == "gqa":
        kv = 1 if model.kv_shares_k_and_v else 2
        attention += model.hidden_size * kv * model.head_dim * (kv_heads_per_gpu(model, t) - model.num_kv_heads / t)
    return attention * w + held_apart_bytes(model, dep, attention_projections(model, t))


def held_apart_bytes(model: ModelSpec, dep: Deployment, shapes: dict[str, tuple[float, float]]) -> float:
    """Bytes the projections of ``shapes`` (name -> (n, k) per GPU) add beyond their weights at the deployment's
    weight precision, where they are held in another (:meth:`Deployment.attention_dtype_for`: a checkpoint's
    unquantized attention, [precision] attention); 0 where every one follows the weights."""
    w = DTYPE_BYTES[dep.weight_dtype]
    return sum(n * k * (DTYPE_BYTES[held] - w) for name, (n, k) in shapes.items()
               if (held := dep.attention_dtype_for(model, name)) != dep.weight_dtype)


def weight_bytes_per_gpu(model: ModelSpec, dep: Deployment) -> float:
    """Target weights held by one GPU, per layout (the ops of :mod:`simulator.physics.layers` read the
    same split):

        L x attention_bytes_per_gpu + dense layers x 3 D F / t_a + MoE layers x moe_layer_bytes_per_gpu
        + embedding (+ untied LM head) / t_a

    t_a = attention TP (tp, or tp/dp with data-parallel attention: each replica holds its own copy of
    attention, dense MLPs, shared experts, embedding and LM head); routed experts over all tp GPUs; an
    engine that replicates the LM head (gpt-fast) holds embedding and head whole on every GPU. Embedding, head
    and routers are held in the precision the engine keeps them in (:meth:`Deployment.module_dtype_for`).
    """
    w = DTYPE_BYTES[dep.weight_dtype]
    t_a = dep.attention_tp
    dense = model.num_mlp_dense_layers * model.dense_mlp_params() * w / t_a
    moe = model.num_moe_layers * moe_layer_bytes_per_gpu(model, dep) if model.is_moe else 0.0
    embedding_split = 1 if dep.kernels.lm_head == "replicated" else t_a
    attention = model.num_layers * attention_bytes_per_gpu(model, dep) if model.uniform_attention \
        else attention_layers_bytes_per_gpu(model, dep)
    embedding = model.embedding_params() * DTYPE_BYTES[dep.module_dtype_for(model, "embedding")]
    return attention + dense + moe + embedding / embedding_split


def attention_layers_bytes_per_gpu(model: ModelSpec, dep: Deployment) -> float:
    """Every layer's attention weights on one GPU, each kind with its own (as
    :func:`simulator.physics.layers.layer_projection_ops` reads them): softmax-attention blocks (Gemma 4's
    global layers at their own shape), DeepSeek-V3.2's indexer whole on every GPU, Gated DeltaNet blocks
    split over the attention group."""
    w = DTYPE_BYTES[dep.weight_dtype]
    kinds = model.layer_kinds()
    n_linear = kinds.get("linear", 0)
    n_global = kinds.get("full", 0) if model.has_global_shape else 0
    n_attn = model.num_layers - n_linear
    return ((n_attn - n_global) * attention_bytes_per_gpu(model, dep)
            + n_global * attention_bytes_per_gpu(model.global_layer_model(), dep)
            + n_attn * model.indexer_params() * w
            + n_linear * model.linear_attention_params() * w / dep.attention_tp
            + n_attn * held_apart_bytes(model, dep, indexer_projections(model))
            + n_linear * held_apart_bytes(model, dep, linear_projections(model, dep.attention_tp)))


def kv_bytes_per_gpu(model: ModelSpec, dep: Deployment, batch, tokens_per_seq, layers: int | None = None) -> np.ndarray:
    """KV cache of B sequences of ``tokens_per_seq`` tokens on one GPU (sliding layers keep a window).

    Heads split over the attention group (MLA's latent is one shared head: whole on every GPU);
    with data-parallel attention a GPU holds its replica's B / dp sequences (on average)."""
    kv = DTYPE_BYTES[dep.kv_dtype]
    per_head_group, latent = model.kv_elements_per_token()
    per_token_layer = (per_head_group * kv_heads_per_gpu(model, dep.attention_tp) / model.num_kv_heads
                       + latent) * kv / dep.attention_dp
    n_layers = model.num_layers if layers is None else layers
    if not model.uniform_attention:
        return np.asarray(batch, dtype=float) * kinds_kv_bytes(model, dep, tokens_per_seq, layers)
    n_sliding = sliding_layers(model, layers)
    tokens = np.asarray(tokens_per_seq, dtype=float)
    sliding_tokens = np.minimum(tokens, model.sliding_window) if model.sliding_window else tokens
    return np.asarray(batch, dtype=float) * per_token_layer * ((n_layers - n_sliding) * tokens + n_sliding * sliding_tokens)


def _kv_bytes_per_token_layer(model: ModelSpec, dep: Deployment) -> float:
    """One token's KV in one softmax-attention layer on one GPU (:func:`kv_bytes_per_gpu`'s split)."""
    per_head_group, latent = model.kv_elements_per_token()
    return (per_head_group * kv_heads_per_gpu(model, dep.attention_tp) / model.num_kv_heads
            + latent) * DTYPE_BYTES[dep.kv_dtype] / dep.attention_dp


def kinds_kv_bytes(model: ModelSpec, dep: Deployment, tokens_per_seq, layers: int | None = None) -> np.ndarray:
    """One sequence's KV cache per GPU over the layer kinds (:func:`kv_bytes_per_gpu` for a model that is not
    uniform): full layers keep every token (Gemma 4's global layers at their own shape), sliding and chunked
    layers at most their window, sparse (DeepSeek-V3.2) layers every token's latent (FlashMLA's 656-byte
    format under an fp8 cache) plus its indexer key (fp8 + scale, whole on every GPU), linear layers no KV at all (their state: :func:`recurrent_state_bytes`)."""
    tokens = np.asarray(tokens_per_seq, dtype=float)
    kinds = layer_kind_counts(model, layers)
    base = _kv_bytes_per_token_layer(model, dep)
    total = np.zeros_like(tokens)
    for kind, n in kinds.items():
        if kind == "full":
            total = total + n * _kv_bytes_per_token_layer(model.global_layer_model(), dep) * tokens
        elif kind == "sparse":  # the latent whole on every GPU, in the sparse kernels' cache format
            latent = sparse_latent_bytes_per_token(model, dep.kv_dtype) + indexer_key_bytes_per_token(model)
            total = total + n * latent / dep.attention_dp * tokens
        elif kind == "sliding":
            total = total + n * base * np.minimum(tokens, model.sliding_window)
        elif kind == "chunked":
            total = total + n * base * np.minimum(tokens, model.attention_chunk_size)
    return total


def recurrent_state_bytes(model: ModelSpec, dep: Deployment, k=0.0, layers: int | None = None):
    """One sequence's recurrent states per GPU (Gated DeltaNet layers; 0 for other models): the delta-rule
    state H_v d_k d_v and the conv state per layer, kept K + 1 times while speculating (the state after each
    verified position, so a step resumes from the last accepted one), once without."""
    n_linear = layer_kind_counts(model, layers).get("linear", 0)
    if not n_linear:
        return np.zeros(np.shape(k))
    state_b, conv_b = linear_state_bytes_per_gpu(model, dep)
    return n_linear * (state_b + conv_b) * (np.asarray(k, dtype=float) + 1.0) / dep.attention_dp


def sequence_memory_bytes(model: ModelSpec, dep: Deployment, tokens, k=0.0):
    """Memory one sequence of ``tokens`` tokens holds per GPU while verifying K drafts: its KV cache (windowed,
    latent, indexer keys) and its recurrent states with the K speculative ones (:func:`recurrent_state_bytes`)."""
    return kv_bytes_per_gpu(model, dep, 1.0, tokens) + recurrent_state_bytes(model, dep, k)


def activation_bytes_per_gpu(model: ModelSpec, dep: Deployment, tokens) -> np.ndarray:
    """Working buffers of a step of ``tokens`` tokens (all replicas'): hidden states, the widest MLP
    slice and fp32 logits of the GPU's share (tokens / dp under data-parallel attention)."""
    a = DTYPE_BYTES[dep.act_dtype]
    t_a = dep.attention_tp
    width = max(model.intermediate_size, model.expert_intermediate_size * max(model.experts_per_token, 1))
    return np.asarray(tokens, dtype=float) / dep.attention_dp * ((4 * model.hidden_size + 2 * width / t_a) * a
                                                                 + model.vocab_size / t_a * 4.0)



def draft_memory_bytes(draft: DraftSpec, target: ModelSpec, dep: Deployment, batch, tokens_per_seq) -> np.ndarray:
    """Draft weights + draft KV cache per GPU."""
    w = DTYPE_BYTES[dep.weight_dtype]
    if draft.method == "ngram":
        return np.zeros(np.broadcast(np.asarray(batch), np.asarray(tokens_per_seq)).shape)
    if draft.method in ("model", "pard"):
        ddep = draft_deployment(draft.model, dep)
        return weight_bytes_per_gpu(draft.model, ddep) + kv_bytes_per_gpu(draft.model, ddep, batch, tokens_per_seq)
    if draft.method == "self":  # shares the target's weights; a compressed KV of at most W tokens
        return kv_bytes_per_gpu(target, dep, batch, np.minimum(tokens_per_seq, draft.kv_budget))
    if draft.method == "early-exit":  # shares the target's weights; own KV for its layers
        return kv_bytes_per_gpu(target, dep, batch, tokens_per_seq, layers=draft.layers)
    cfg = draft_defaults()[draft.method]
    D = target.hidden_size
    dep = head_deployment(draft, target, dep)  # the precisions the head's weights are held in (as its ops)
    w, w_fusion = DTYPE_BYTES[dep.weight_dtype], DTYPE_BYTES[fusion_dtype(draft, target, dep)]
    t_a = dep.attention_tp
    vocab = cfg.get("draft_vocab") or 0
    extra = (cfg["fusion_inputs"] * D * D * w_fusion + (vocab * D * w if vocab and vocab < target.vocab_size else 0)) / t_a
    if draft.method == "mtp":
        # D MTP modules (DeepSeek-V3: num_nextn_predict_layers), each a full decoder block of the target
        # (MoE when the target is) + the 2D -> D projection; embedding and LM head shared with the target
        depth = mtp_depth(draft, target)
        mlp = moe_layer_bytes_per_gpu(target, dep) if target.is_moe else target.dense_mlp_params() * w / t_a
        weights = depth * (attention_bytes_per_gpu(target, dep) + mlp + extra)
        return weights + kv_bytes_per_gpu(target, dep, batch, tokens_per_seq, layers=depth)
    # EAGLE heads: one target-sized layer; block heads (DFlash, DSpark, P-EAGLE): draft_layers of them, their
    # own KV per layer (DSpark: + its Markov head's [V, r] and [r, V])
    layers = int(cfg.get("draft_layers", 1))
    extra += 2 * target.vocab_size * cfg.get("markov_rank", 0) * w / t_a
    weights = layers * (attention_bytes_per_gpu(target, dep) + target.dense_mlp_params() * w / t_a) + extra
    return weights + kv_bytes_per_gpu(target, dep, batch, tokens_per_seq, layers=layers)


# --- the one memory budget -------------------------------------------------------------------------

def draft_weight_bytes(draft: DraftSpec, target: ModelSpec, dep: Deployment, speculative: bool = True) -> float:
    """Draft weights per GPU (0 without speculation)."""
    return float(draft_memory_bytes(draft, target, dep, 0.0, 0.0)) if speculative else 0.0


def _sequence_kv(draft: DraftSpec, target: ModelSpec, dep: Deployment, tokens) -> tuple:
    """(the target's KV of one sequence of ``tokens`` tokens per GPU, that plus the draft's own, the draft's
    weights): what a speculating and a plain step hold per sequence, and the draft weights that split the two."""
    plain = kv_bytes_per_gpu(target, dep, 1.0, tokens)
    weights = draft_weight_bytes(draft, target, dep)
    return plain, plain + draft_memory_bytes(draft, target, dep, 1.0, tokens) - weights, weights


def kv_bytes_per_sequence(draft: DraftSpec, target: ModelSpec, dep: Deployment, tokens, speculative: bool = True,
                          k=None):
    """KV cache of one sequence of ``tokens`` tokens per GPU: the target's, plus the draft's own when speculating.
    With ``k`` (the drafts verified a step), a hybrid's recurrent states too: K + 1 while speculating, one
    without (:func:`recurrent_state_bytes`); without it, the token-proportional part alone (a KV block's
    share, as serving's block budget counts it)."""
    kv = _sequence_kv(draft, target, dep, tokens)[1] if speculative else kv_bytes_per_gpu(target, dep, 1.0, tokens)
    if k is not None and target.num_linear_layers:
        kv = kv + recurrent_state_bytes(target, dep, k if speculative else 0)
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
    plain_kv, spec_kv, draft_weights = _sequence_kv(draft, target, dep, tokens_per_seq)
    memory = (weight_bytes_per_gpu(target, dep)
              + batch * np.where(spec, spec_kv, plain_kv)
              + np.where(spec, draft_weights, 0.0)
              + activation_bytes_per_gpu(target, dep, batch * (k + 1)))
    if target.num_linear_layers:  # recurrent states: one per sequence, K + 1 while speculating
        memory = memory + batch * recurrent_state_bytes(target, dep, k)
    return memory


def max_batch(draft: DraftSpec, target: ModelSpec, dep: Deployment, memory_bytes: float, k, tokens_per_seq) -> int:
    """The most sequences of ``tokens_per_seq`` tokens whose verify step at K = ``k`` fits
    (:func:`step_memory_bytes` <= memory_utilization x ``memory_bytes``): the grid's memory rule, solved for
    B (the step's memory is linear in B: weights, then per sequence its KV and its (K + 1) tokens'
    activations). 0 when not even one fits."""
    usable = memory_bytes * dep.memory_utilization
    fixed, one = (float(step_memory_bytes(draft, target, dep, b, k, tokens_per_seq)) for b in (0.0, 1.0))
    if one > usable:
        return 0
    b = int((usable - fixed) // (one - fixed))
    while b > 1 and float(step_memory_bytes(draft, target, dep, b, k, tokens_per_seq)) > usable:  # rounding
        b -= 1
    return b
