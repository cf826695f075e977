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
