"""Decode attention as an operator: q queries per sequence over L cached keys (verify passes, draft passes,
prompt chunks), its FLOPs, its bytes made on first read, and the measured surface that prices it.

Letters: B sequences, q query tokens per sequence, L context length (KV entries already cached).
"""
from __future__ import annotations

import math
from types import MappingProxyType

import numpy as np

from simulator.physics.ops import AttentionOp, Op
from simulator.physics.terms import (attention_decode_bytes, attention_decode_flops, mla_decode_bytes, mla_decode_flops,
                                     prefill_table_coordinates)
from simulator.specs.deployment import Deployment, kv_heads_per_gpu
from simulator.specs.hardware import DTYPE_BYTES
from simulator.specs.models import ModelSpec


# Largest queries per sequence priced by the decode-attention surfaces: verify passes (K + 1 <= 17)
# and small draft-tree passes; longer runs of queries are prompt chunks.
MAX_DECODE_SURFACE_QUERIES = 32
# The measured surface of fused causal prefill attention (calibration.import_rows.prepare_attention_prefill)
PREFILL_SURFACE = "attention_prefill"


def per_query_head_kernel(dep: Deployment, group: float, batch_heads):
    """Whether decode attention runs one block per query head (True) rather than one per KV head.
    Grouped kernels serve a KV head's g query heads with one read; TensorRT-LLM <= 0.10 built its
    grouped kernel (XQA) for g = 8 only, and used it only when KV heads x sequences fill the SMs
    (engine profile [attention]); elsewhere its MMHA kernel has every query-head block load its KV head."""
    if not dep.kernels.grouped_decode_groups or group <= 1:
        return False
    return ~((round(group) in dep.kernels.grouped_decode_groups)
             & (np.asarray(batch_heads, dtype=float) >= dep.kernels.grouped_decode_min_batch_heads))


def kv_reads(dep: Deployment, group: float, per_query_head) -> float | np.ndarray:
    """HBM-equivalent reads of each KV byte: 1, or for a per-query-head kernel the first read from HBM
    and the g - 1 sibling blocks' re-reads from L2 (they run side by side), priced at the device's L2
    re-read cost: max(1, g x HBM / L2 bandwidth) (g when no L2 figure is published)."""
    return np.where(per_query_head, max(1.0, group * dep.kernels.l2_reread_cost), 1.0)


def attention_op(model: ModelSpec, dep: Deployment, batch, queries, context_len: float, count: int,
                 window: int | None, name: str) -> Op:
    """Decode attention of q queries per sequence over L cached keys plus the q new ones.

    F = 4 B q (L_eff + (q+1)/2) H_q d (QK^T and PV, causal within the q new tokens)
    M = B (L_eff + q) * kv_bytes_per_token + 2 B q H_q d a   (the KV read is paid once per step,
    whatever q is: long contexts make verifying K drafts relatively cheap)
    """
    a = DTYPE_BYTES[dep.act_dtype]
    kv = DTYPE_BYTES[dep.kv_dtype]
    keys = np.minimum(context_len, window) if window else context_len
    hq = model.num_heads / dep.tp
    if model.attention == "mla":
        # absorbed MLA: every head scores against the shared latent (kv_lora + rope) and reads it once
        latent = model.kv_lora_rank + model.qk_rope_head_dim
        lora, rope = model.kv_lora_rank, model.qk_rope_head_dim
        flops = mla_decode_flops(batch, queries, keys, hq, lora, rope)
        io = lambda: mla_decode_bytes(batch, queries, keys, hq, lora, rope, kv, a)  # noqa: E731
        shape = {"q_heads": hq, "kv_elem_bytes": kv, "a_bytes": a, "keys": keys, "queries": queries, "sequences": batch,
                 "latent": latent, "score_width": 2 * model.kv_lora_rank + model.qk_rope_head_dim}
    else:
        d = model.head_dim
        if model.kv_shares_k_and_v:  # Gemma 4 global layers cache K alone and read it as V too: half the bytes
            kv = kv / 2
        hkv = kv_heads_per_gpu(model, dep.tp)
        group = hq / hkv
        per_head = per_query_head_kernel(dep, group, batch * hkv)
        # a grouped kernel everywhere (every engine but TensorRT-LLM <= 0.10): no array work here
        reads, blocks = (1.0, 1.0) if per_head is False else (kv_reads(dep, group, per_head),
                                                               np.where(per_head, group, 1.0))
        flops = attention_decode_flops(batch, queries, keys, hq, d)

        def io():
            kv_read, q_io = attention_decode_bytes(batch, queries, keys, hq, hkv, d, kv, a)
            return kv_read * reads, q_io  # per-query-head kernels re-read each KV head (kv_reads)
        # surface axes as the q = 1 decode tables measured them: group = hq / hkv. A verify pass packs
        # its q g query rows per KV head into tensor-core tiles and stays bound by the same KV read;
        # the tables' slow large-group decode kernels (g >= 48, ~3x at equal bytes) are a q = 1
        # kernel choice, so q enters through the roofline FLOPs, not through the group axis. A
        # per-query-head kernel is an MHA kernel over hq heads: group 1
        shape = {"batch_heads": batch * hkv * blocks, "head_dim": float(d), "group": group / blocks}
        if per_head is False:  # the work coordinates of its monotone envelope (physics.monotone)
            shape |= {"q_heads": hq, "kv_heads": hkv, "kv_elem_bytes": kv, "a_bytes": a, "keys": keys,
                      "queries": queries, "sequences": batch}
    # the decode surfaces were measured at q = 1 and price decode and verify passes; a prompt chunk or a
    # deep tree's verify is a fused prefill kernel (FlashAttention: S = Q K^T and S V per tile in on-chip
    # memory, S never written; the roofline above is its work), which the prefill tables measured as
    # full causal prompts, q = L = n. The chunk reads that surface at the prompts that run the same
    # kernel: n = 2 L + q, the keys a query row reads on average, and B' = B q / n prompts, the same new
    # tokens (query tiles, KV writes) and the same FLOPs, so it runs at the efficiency the table measured
    # for that kernel (the exact row at L = 0); axes B' hkv, n, d, g (terms.prefill_table_coordinates;
    # under one launch, B' hkv < 1, a short chunk over a long cache: one launch of the same FLOPs).
    # Its time: the table's for the equivalent prompts (their bytes: the new tokens' Q, K, V and O,
    # prompt_bytes), never faster than streaming the chunk's own, cached keys included (physics.measured).
    # Without the surface: this roofline (a datasheet device, a fitted profile, older tables). MLA
    # prefill: the roofline. One op, one path, chosen by its largest query count: a caller with chunks
    # on both sides of the limit prices each side apart (serving.pricer, plan.step_passes.surface_sides)
    if float(np.max(queries)) <= MAX_DECODE_SURFACE_QUERIES:
        surface = "mla_decode" if model.attention == "mla" else "attention_decode"
    elif model.attention != "mla":
        surface = PREFILL_SURFACE
        launches, length = prefill_table_coordinates(batch, queries, keys, hkv)
        new_kv, q_io = attention_decode_bytes(batch, queries, 0.0, hq, hkv, d, kv, a)
        shape = {"batch_heads": launches, "context": length, "head_dim": float(d), "group": group,
                 "prompt_bytes": new_kv + q_io}
    else:
        surface = None
    return AttentionOp(name, "attention", flops, io, kernels=2, count=count, eff_tokens=batch * queries,
                       surface=surface, shape={"tokens": batch * queries, "batch": batch, "context": keys + 1.0, **shape},
                       dtype=dep.kv_dtype)


# --- the other attention families (docs/attention_families.md) ---------------------------------------------
# Each layer kind is one op per pass, named by its kind; `attention_kind_op` builds any of them from its name,
# so a caller that re-prices a pass's attention at other sizes (serving's prompt chunks) builds the same ops.

LAYER_KIND_OPS = MappingProxyType({"full": "attention", "sparse": "attention_sparse", "sliding": "attention_sliding",
                                   "chunked": "attention_chunked", "linear": "attention_linear"})  # read-only


def kind_of_op(name: str) -> str:
    """The layer kind an attention op prices, from its name (prefixes such as "draft." aside)."""
    base = name.rsplit(".", 1)[-1]
    if base == "attention_indexer":
        return "indexer"
    for kind, op_name in LAYER_KIND_OPS.items():
        if base == op_name:
            return kind
    raise ValueError(f"not an attention op: {name}")


def attention_kind_op(model: ModelSpec, dep: Deployment, batch, queries, context_len, count: int, name: str) -> Op:
    """The attention op ``name`` prices (its kind from the name: :func:`kind_of_op`) for ``count`` layers."""
    kind = kind_of_op(name)
    if kind == "full":
        return attention_op(model.global_layer_model(), dep, batch, queries, context_len, count, None, name)
    if kind == "sliding":
        return attention_op(model, dep, batch, queries, context_len, count, model.sliding_window, name)
    if kind == "chunked":
        return attention_op(model, dep, batch, queries, context_len, count, model.attention_chunk_size, name)
    if kind == "sparse":
        return sparse_mla_op(model, dep, batch, queries, context_len, count, name)
    if kind == "indexer":
        return indexer_op(model, dep, batch, queries, context_len, count, name)
    return linear_attention_op(model, dep, batch, queries, count, name)


def sparse_mla_op(model: ModelSpec, dep: Deployment, batch, queries, context_len, count: int, name: str) -> Op:
    """DeepSeek sparse attention's main pass: absorbed MLA where each of the q queries of a sequence reads only
    the top-k latent entries its indexer picked (index_topk; all L + q while the context is shorter).

    keys per query  n = min(L + q, k)
    F = 2 B q n H_q (2 kv_lora + rope)                     (as dense MLA, over n keys a query)
    M = B q n (kv_lora + rope) kv + 2 B q H_q (kv_lora + rope) a
    Unlike dense decode the latent read is per query, not per sequence: the q queries' top-k sets differ,
    and the sparse kernel gathers each query's own (FlashMLA sparse decode). A verify pass of K + 1 queries
    reads (K + 1) x k entries per sequence: speculation does not ride on a shared KV read here.
    """
    a = DTYPE_BYTES[dep.act_dtype]
    hq = model.num_heads / dep.tp
    lora, rope = model.kv_lora_rank, model.qk_rope_head_dim
    latent = lora + rope
    picked = np.minimum(np.add(context_len, queries), float(model.index_topk))
    flops = (2.0 * hq * (2 * lora + rope)) * batch * queries * picked
    nbytes = (sparse_latent_bytes_per_token(model, dep.kv_dtype) * batch * queries * picked
              + (2.0 * hq * latent * a) * batch * queries)
    return Op(name, "attention", flops, nbytes, kernels=2, count=count, eff_tokens=batch * queries,
              shape={"tokens": batch * queries, "batch": batch, "context": picked, "queries": queries})


# FlashMLA's sparse-decode FP8 cache ("FP8 with scale", deepseek-ai/FlashMLA README: 656 bytes a token for
# DeepSeek-V3.2): the NoPE latent in fp8 with one fp32 scale per 128 values, the RoPE part kept in bf16
SPARSE_FP8_SCALE_GROUP = 128


def sparse_latent_bytes_per_token(model: ModelSpec, kv_dtype: str) -> float:
    """Bytes of one token's latent in a sparse-MLA layer: (kv_lora + rope) x KV bytes, except the FP8 cache,
    which FlashMLA's sparse kernels read as kv_lora fp8 + kv_lora / 128 fp32 scales + rope bf16
    (512 + 16 + 128 = 656 B at DeepSeek-V3.2's shape, not 576)."""
    lora, rope = model.kv_lora_rank, model.qk_rope_head_dim
    if kv_dtype != "fp8":
        return float((lora + rope) * DTYPE_BYTES[kv_dtype])
    return (lora * DTYPE_BYTES["fp8"] + math.ceil(lora / SPARSE_FP8_SCALE_GROUP) * DTYPE_BYTES["fp32"]
            + rope * DTYPE_BYTES["bf16"])


# The indexer's key cache per token: index_head_dim fp8 values and one fp32 scale (DeepSeek-V3.2 inference
# kernel.py act_quant block of 128; vLLM's indexer cache holds 132 bytes a token at index_head_dim 128)
INDEXER_SCALE_BYTES = 4.0
INDEXER_LOGIT_BYTES = 4.0  # fp32 logits, written by the scoring kernel and read by the top-k selection


def indexer_key_bytes_per_token(model: ModelSpec) -> float:
    """Bytes of the indexer's key cache per token per layer (replicated on every GPU of the attention group)."""
    return model.index_head_dim * DTYPE_BYTES["fp8"] + INDEXER_SCALE_BYTES if model.is_sparse_attention else 0.0


def indexer_op(model: ModelSpec, dep: Deployment, batch, queries, context_len, count: int, name: str) -> Op:
    """DeepSeek-V3.2's lightning indexer: each of the q queries scores every cached key with H_i fp8 heads of
    d_i, weighs the heads and keeps the top-k (index_topk) for the sparse MLA pass. Its heads are not split
    by TP (each GPU of the attention group runs all of them on its sequences).

    F = 2 B q (L + (q+1)/2) H_i (d_i + 1)                 (q.k per head, then the head weights)
    M = B (L + q) (d_i + 4) + 2 x 4 B q (L + q) + B q H_i d_i
        (the indexer key cache read once per sequence: the q queries share it as one MQA; the fp32
         logits written and read back by the top-k; the fp8 queries)
    """
    hi, di = float(model.index_n_heads), float(model.index_head_dim)
    keys = np.add(context_len, queries)
    flops = (2.0 * hi * (di + 1.0)) * batch * queries * (np.asarray(context_len, dtype=float) + (queries + 1) / 2)
    nbytes = (indexer_key_bytes_per_token(model) * batch * keys + (2 * INDEXER_LOGIT_BYTES) * batch * queries * keys
              + (hi * di * DTYPE_BYTES["fp8"]) * batch * queries)
    return Op(name, "attention", flops, nbytes, kernels=3, count=count, eff_tokens=batch * queries,
              shape={"tokens": batch * queries, "batch": batch, "context": keys, "queries": queries})


# Gated delta rule per token and value head (the recurrent kernel, e.g. fla fused_recurrent_gated_delta_rule):
# decay h *= exp(g) (d_k d_v), v - h^T k (2 d_k d_v), rank-1 update h += k v'^T (2 d_k d_v), o = h^T q (2 d_k d_v)
GDN_FLOPS_PER_STATE_ELEMENT = 7.0


def linear_state_bytes_per_gpu(model: ModelSpec, dep: Deployment) -> tuple[float, float]:
    """(delta-rule state bytes, conv state bytes) of one sequence in one Gated DeltaNet layer on one GPU
    (heads split over the attention group's TP): H_v d_k d_v x state dtype, (kernel - 1) channels x act dtype."""
    state, conv = model.linear_state_elements()
    t = dep.attention_tp
    return state * DTYPE_BYTES[model.linear_state_dtype] / t, conv * DTYPE_BYTES[dep.act_dtype] / t


def linear_attention_op(model: ModelSpec, dep: Deployment, batch, queries, count: int, name: str) -> Op:
    """A Gated DeltaNet layer over q new tokens per sequence: no KV cache, a recurrent state per sequence.

    S = H_v d_k d_v state elements (state dtype s), C = (kc - 1)(2 H_k d_k + H_v d_v) conv-state elements
    (act dtype a), per GPU (heads over TP); q tokens a sequence.
    F = B q (7 S + 2 kc (2 H_k d_k + H_v d_v))
    M = B (1 + w + r) (S s + C a) + B q (2 H_k d_k + 2 H_v d_v) a
    w = states written: q in a decode or verify pass (the state after every verified position is kept, so
    the step can resume from the last accepted one: K + 1 intermediate states), 1 for a prompt chunk (longer
    than MAX_DECODE_SURFACE_QUERIES: the chunked kernel writes the final state only); r = 2 when q > 1 in a
    verify pass (restoring the accepted position's state into the sequence's slot: one read and one write),
    else 0. The state is read once per step whatever q is, like a KV cache, but its size does not grow with
    the context: a hybrid's verify cost at long context is set by its few full-attention layers.
    """
    a = DTYPE_BYTES[dep.act_dtype]
    state_b, conv_b = linear_state_bytes_per_gpu(model, dep)
    t = dep.tp
    qk = model.linear_num_key_heads * model.linear_key_head_dim / t
    v = model.linear_num_value_heads * model.linear_value_head_dim / t
    state_elems = model.linear_num_value_heads / t * model.linear_key_head_dim * model.linear_value_head_dim
    q = np.asarray(queries, dtype=float)
    verify = (q > 1) & (q <= MAX_DECODE_SURFACE_QUERIES)
    written = np.where(q <= MAX_DECODE_SURFACE_QUERIES, q, 1.0)
    moved = 1.0 + written + np.where(verify, 2.0, 0.0)
    flops = batch * q * (GDN_FLOPS_PER_STATE_ELEMENT * state_elems + 2.0 * model.linear_conv_kernel_dim * (2 * qk + v))
    nbytes = batch * moved * (state_b + conv_b) + batch * q * (2 * qk + 2 * v) * a
    return Op(name, "attention", flops, nbytes, kernels=3, count=count, eff_tokens=batch * q,
              shape={"tokens": batch * q, "batch": batch, "queries": q, "state_bytes": state_b + conv_b})
