"""FLOP and byte terms of the operators that measured kernel tables price: one definition, read by the
operator builders (:mod:`simulator.physics.layers`) and by the table importer
(``calibration/import_tables.py``), so an efficiency surface (roofline time / measured time) means
the same roofline on both sides.

Per GPU; letters as in :mod:`simulator.physics.layers` (B sequences, q query tokens per sequence,
L cached keys, T tokens); w, a, kv bytes per weight, activation and KV element.

* GEMM Y[m, n] = X[m, k] W[k, n]:  F = 2 m n k,  M = n k w + m (n + k) a
* decode attention (GQA), hq / hkv heads, head dim d:  F = 4 B q (L + (q+1)/2) hq d,
  M = B (L + q) 2 hkv d kv + 2 B q hq d a   (a kernel that re-reads KV per query head multiplies the
  KV term by its reads: physics/attention.kv_reads)
  A fused causal prefill kernel (FlashAttention) has the same terms: it never writes the score matrix; a
  full prompt of n tokens is q = n over L = 0: F = 2 B n (n + 1) hq d
* absorbed MLA, latent = kv_lora + rope:  F = 2 B q (L + (q+1)/2) hq (2 kv_lora + rope),
  M = B (L + q) latent kv + 2 B q hq latent a
* routed experts on the busiest GPU, P token-expert pairs and X experts touched there, hidden D,
  expert intermediate I sliced over expert TP t_e:  params = 3 D I / t_e,  F = 2 P params,
  M = X params w + P (2 D + 3 I / t_e) a
* roofline t0 = max(F / peak, M / bandwidth)
"""
from __future__ import annotations

import numpy as np


def gemm_terms(m, n, k, w, a):
    """(F, M) of Y[m, n] = X[m, k] W[k, n]: 2 m n k and n k w + m (n + k) a."""
    return 2.0 * m * n * k, n * k * w + m * (n + k) * a


def attention_decode_flops(batch, queries, keys, hq, d):
    """F of decode attention over ``keys`` cached keys plus the q new ones."""
    return (4.0 * hq * d) * batch * queries * (keys + (queries + 1) / 2)  # scalars first: one op over the cells


def attention_decode_bytes(batch, queries, keys, hq, hkv, d, kv, a):
    """(KV bytes read once, Q/O bytes) of decode attention."""
    return (2 * hkv * d * kv) * batch * (keys + queries), (2.0 * hq * d * a) * batch * queries


def attention_decode_terms(batch, queries, keys, hq, hkv, d, kv, a):
    """(F, KV bytes read once, Q/O bytes) of decode attention over ``keys`` cached keys plus the q new ones."""
    return (attention_decode_flops(batch, queries, keys, hq, d),
            *attention_decode_bytes(batch, queries, keys, hq, hkv, d, kv, a))


def prefill_equivalent_prompts(batch, queries, keys):
    """(B', n): the full causal prompts (q = L = n, no cache) that a prefill table measured and that run
    the same kernel as B sequences of q new queries over L cached keys: n = 2 L + q keys a query row
    reads on average (L + q / 2 for the chunk, n / 2 for a prompt), B' = B q / n prompts, so that both
    hold the same new tokens (B' n = B q, the same query tiles) and the same FLOPs
    (2 B' n (n + 1) = 4 B q (L + (q + 1) / 2)). At L = 0: the chunk itself (B, q)."""
    length = 2.0 * keys + queries
    return batch * queries / length, length


def prefill_table_coordinates(batch, queries, keys, kv_heads):
    """(launches, length) where B sequences of q queries over L cached keys read a prefill table whose
    axes are launches = prompts x KV heads and the prompt length: B' hkv and n of
    :func:`prefill_equivalent_prompts`; under one launch (a short chunk over a long cache, B' hkv < 1, a
    kernel the table never ran) one launch of the same FLOPs, n1 (n1 + 1) = B' hkv n (n + 1)."""
    prompts, length = prefill_equivalent_prompts(batch, queries, keys)
    launches = prompts * kv_heads
    one = (np.sqrt(1.0 + 4.0 * launches * length * (length + 1.0)) - 1.0) / 2.0
    return np.maximum(launches, 1.0), np.where(launches < 1.0, one, length)


def mla_decode_flops(batch, queries, keys, hq, kv_lora, rope):
    """F of absorbed MLA: every head scores against the shared latent."""
    return (2.0 * hq * (2 * kv_lora + rope)) * batch * queries * (keys + (queries + 1) / 2)


def mla_decode_bytes(batch, queries, keys, hq, kv_lora, rope, kv, a):
    """(latent bytes read, Q/O bytes) of absorbed MLA."""
    latent = kv_lora + rope
    return (latent * kv) * batch * (keys + queries), (2.0 * hq * latent * a) * batch * queries


def mla_decode_terms(batch, queries, keys, hq, kv_lora, rope, kv, a):
    """(F, latent bytes read, Q/O bytes) of absorbed MLA: every head scores against the shared latent."""
    return (mla_decode_flops(batch, queries, keys, hq, kv_lora, rope),
            *mla_decode_bytes(batch, queries, keys, hq, kv_lora, rope, kv, a))


def expert_params_slice(hidden, inter, expert_tp):
    """Parameters of one routed expert's slice on a GPU (gated MLP: gate, up, down)."""
    return 3 * hidden * inter / expert_tp


def moe_expert_terms(pairs, touched, hidden, inter, expert_tp, w, a):
    """(F, M) of the routed experts on the busiest GPU: ``pairs`` token-expert pairs, ``touched`` experts."""
    params = expert_params_slice(hidden, inter, expert_tp)
    return 2.0 * pairs * params, touched * params * w + pairs * (2 * hidden + 3 * inter / expert_tp) * a


def roofline_s(flops, nbytes, peak, bandwidth):
    """t0 = max(F / peak, M / bandwidth)."""
    return np.maximum(np.asarray(flops, float) / peak, np.asarray(nbytes, float) / bandwidth)
