"""Decode attention as an operator: q queries per sequence over L cached keys (verify passes, draft passes,
prompt chunks), its FLOPs, its bytes made on first read, and the measured surface that prices it.

Letters: B sequences, q query tokens per sequence, L context length (KV entries already cached).
"""
from __future__ import annotations

import numpy as np

from simulator.physics.ops import AttentionOp, Op
from simulator.physics.terms import attention_decode_bytes, attention_decode_flops, mla_decode_bytes, mla_decode_flops
from simulator.specs.deployment import Deployment, kv_heads_per_gpu
from simulator.specs.hardware import DTYPE_BYTES
from simulator.specs.models import ModelSpec


# Largest queries per sequence priced by the decode-attention surfaces: verify passes (K + 1 <= 17)
# and small draft-tree passes; longer runs of queries are prompt chunks.
MAX_DECODE_SURFACE_QUERIES = 32


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
    # the decode surfaces were measured at q = 1 and price decode and verify passes; a prompt chunk
    # is a compute-bound prefill kernel they never saw (their efficiency at one sequence is the
    # latency floor of a tiny decode kernel). A prefill kernel runs, per sequence and KV head, the
    # GEMMs S = Q K^T (m = q g query rows, n = keys, k = d) and S V: it borrows the GEMM surface at
    # that shape (MLA prefill: the roofline). One op, one path, chosen by its largest query count: a
    # caller with chunks on both sides of the limit prices each side apart (serving.pricer)
    if float(np.max(queries)) <= MAX_DECODE_SURFACE_QUERIES:
        surface = "mla_decode" if model.attention == "mla" else "attention_decode"
    elif model.attention != "mla":
        surface = "gemm"
        shape = {"m": queries * shape["group"], "n": keys + queries, "k": shape["head_dim"]}
    else:
        surface = None
    return AttentionOp(name, "attention", flops, io, kernels=2, count=count, eff_tokens=batch * queries,
                       surface=surface, shape={"tokens": batch * queries, "batch": batch, "context": keys + 1.0, **shape},
                       dtype=dep.kv_dtype)
