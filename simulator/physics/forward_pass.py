"""A whole forward pass: the decoder layers (:mod:`simulator.physics.layers`) and the LM head (embedding gather,
lm_head GEMM, logits gather, final-logit softcap, sampling), whole or in its two parts (the token-sized ops and the
per-cell ones: simulator.physics.pass_tables); the verify pass's cost.

Letters as in :mod:`simulator.physics.layers` (B sequences, q query tokens per sequence, L context length).
"""
from __future__ import annotations

from types import MappingProxyType

import numpy as np

from simulator.physics.fabric import allgather_s
from simulator.physics.gemm import gemm, module_precision
from simulator.physics.layers import (allreduce_op, attention_deployment, decoder_cell_ops, decoder_layers_ops,
                                      decoder_token_ops, rank_tokens)
from simulator.physics.operators import StepCost, evaluate
from simulator.physics.ops import Op
from simulator.specs.deployment import Deployment
from simulator.specs.hardware import DTYPE_BYTES, Hardware
from simulator.specs.models import ModelSpec
from simulator.specs.profile import Profile
from simulator.specs.wire import collective_factor


def sampling_op(name: str, tokens, vocab: float, bytes_per_logit) -> Op:
    """Sampling and acceptance over the [tokens, vocab] logits: the engine's passes over them (fp32
    cast, argmax, temperature, softmax, top-k / top-p, the rejection sampler's reads) as bytes per
    logit element (engine profile [sampling]); ~5 FLOPs per element, always memory-bound."""
    elements = np.asarray(tokens, dtype=float) * vocab
    return Op(name, "elementwise", 5.0 * elements, elements * bytes_per_logit, kernels=3, count=1, eff_tokens=tokens)


def head_ops(model: ModelSpec, dep: Deployment, hw: Hardware, tokens, vocab: int, prefix: str = "",
             sampling: bool = True, logit_bytes=None) -> list[Op]:
    """Embedding gather, LM head (vocab split over TP unless the engine replicates it), logits gather and
    sampling/acceptance (``logit_bytes`` per logit element; default: the deployment's plain-decoding figure)."""
    a = DTYPE_BYTES[dep.act_dtype]
    D = model.hidden_size
    lm_head = dep.kernels.lm_head
    split = 1 if lm_head == "replicated" else dep.tp
    ops = [Op(prefix + "embedding", "elementwise", 0.0, 2 * tokens * D * a, kernels=1, count=1, eff_tokens=tokens),
           gemm(prefix + "lm_head", tokens, vocab / split, D, module_precision(model, dep, "lm_head"), 1,
                family="lm_head")]
    if split > 1 and lm_head == "vocab-parallel-argmax":
        # each rank takes the argmax of its own slice, then two all-reduces of [tokens, tp] (max values
        # and their int64 indices) pick the winner: no logits leave the GPU
        ops.append(allreduce_op(prefix + "argmax_allreduce", np.asarray(tokens, dtype=float), dep.tp * 8.0, 2, dep, hw))
    elif split > 1:
        gathered = tokens * vocab / dep.tp * a
        ops.append(Op(prefix + "logits_gather", "comm", 0.0, collective_factor("all_gather", dep.tp) * gathered * dep.tp, kernels=1, count=1,
                      comm_s=allgather_s(gathered, dep.tp, hw)))
    if model.final_logit_softcapping:
        ops.append(logit_softcap_op(prefix + "logit_softcap", tokens, vocab))
    return ops + [head_sampling_op(dep, tokens, vocab, prefix, logit_bytes)] if sampling else ops


# Final-logit softcapping (Gemma 2 / 4): logits = cap * tanh(logits / cap) over the gathered [tokens, vocab]
# logits before sampling (vLLM LogitsProcessor), one fused pass reading and writing fp32: 8 bytes and ~4 FLOPs
# (divide, tanh, multiply) an element.
SOFTCAP_BYTES_PER_LOGIT = 8.0
SOFTCAP_FLOPS_PER_LOGIT = 4.0


def logit_softcap_op(name: str, tokens, vocab: float) -> Op:
    """The final-logit softcap over [tokens, vocab] (memory-bound, like sampling)."""
    elements = np.asarray(tokens, dtype=float) * vocab
    return Op(name, "elementwise", SOFTCAP_FLOPS_PER_LOGIT * elements, SOFTCAP_BYTES_PER_LOGIT * elements, kernels=1,
              count=1, eff_tokens=tokens)


def head_sampling_op(dep: Deployment, tokens, vocab: int, prefix: str = "", logit_bytes=None) -> Op:
    """The LM head's sampling over its logits (:func:`sampling_op`): each rank's slice under a vocab-parallel
    argmax, else the whole vocabulary; ``logit_bytes`` None: the plain-decoding figure."""
    split = 1 if dep.kernels.lm_head == "replicated" else dep.tp
    sampled = vocab / split if split > 1 and dep.kernels.lm_head == "vocab-parallel-argmax" else vocab
    return sampling_op(prefix + "sampling", tokens, sampled,
                       dep.kernels.logit_bytes_plain if logit_bytes is None else logit_bytes)


def forward_ops(model: ModelSpec, dep: Deployment, hw: Hardware, batch, queries, context_len: float,
                prefix: str = "", logit_bytes=None, expert_batch=None, token_batch=None, caches=None) -> list[Op]:
    """Ops of one full forward pass of ``model`` over q new tokens for each of B sequences (the token-sized
    ops, head included, at ``token_batch`` sequences where given: a padded graph's size); ``caches``: the step
    model's (simulator.physics.caches), None: nothing kept."""
    tb = batch if token_batch is None else token_batch
    return decoder_layers_ops(model, dep, hw, batch, queries, context_len, prefix, expert_batch=expert_batch,
                              token_batch=token_batch, caches=caches) + \
        head_ops(model, attention_deployment(dep), hw, rank_tokens(dep, tb, queries), model.vocab_size, prefix,
                 logit_bytes=logit_bytes)


def forward_token_ops(model: ModelSpec, dep: Deployment, hw: Hardware, tokens, queries=1.0, context_len=0.0,
                      prefix: str = "", logit_bytes=None, caches=None) -> list[Op]:
    """The ops of :func:`forward_ops` sized by the replica's token count (the head's included), at ``tokens``
    (none reads ``caches``: taken for the parts' one signature)."""
    tokens = np.asarray(tokens, dtype=float)
    return decoder_token_ops(model, dep, hw, tokens, prefix=prefix) + \
        head_ops(model, attention_deployment(dep), hw, tokens, model.vocab_size, prefix, logit_bytes=logit_bytes)


def forward_cell_ops(model: ModelSpec, dep: Deployment, hw: Hardware, batch, queries, context_len: float,
                     prefix: str = "", logit_bytes=None, expert_batch=None, caches=None) -> list[Op]:
    """The attention and routed experts of :func:`forward_ops` (its head's ops are all token-sized)."""
    return decoder_cell_ops(model, dep, hw, batch, queries, context_len, prefix, expert_batch=expert_batch,
                            caches=caches)


FORWARD_PARTS = MappingProxyType({"all": forward_ops, "tokens": forward_token_ops, "cells": forward_cell_ops})


def verify_logit_bytes(dep: Deployment, k):
    """Sampling bytes per logit element of a pass verifying K drafts (K = 0: plain decoding)."""
    return np.where(np.asarray(k) > 0, dep.kernels.logit_bytes_verify, dep.kernels.logit_bytes_plain)


def verify_cost(model: ModelSpec, dep: Deployment, hw: Hardware, batch, k, context_len: float,
                profile: Profile | None) -> StepCost:
    """Target pass that scores K drafts (+1 bonus position) for each of B sequences."""
    batch, k = np.broadcast_arrays(np.asarray(batch, dtype=float), np.asarray(k, dtype=float))
    ops = forward_ops(model, dep, hw, batch, k + 1.0, context_len, logit_bytes=verify_logit_bytes(dep, k))
    return evaluate(ops, hw, dep, profile, batch.shape)
