"""Operator builders: the ops of a forward pass's decoder layers as pure functions of shapes (per GPU); the LM
head and the whole pass (decoder layers + head, the verify pass's cost) are composed in simulator.physics.forward_pass.

Letters: B sequences, q query tokens per sequence (K+1 when verifying K drafts), T = B*q tokens,
L context length (KV entries already cached), t tensor-parallel degree.
"""
from __future__ import annotations

import numpy as np

from dataclasses import replace
from types import MappingProxyType

from simulator.physics.attention import LAYER_KIND_OPS, attention_kind_op, attention_op
from simulator.physics.experts import busiest_group_load, experts_touched_correlated
from simulator.physics.fabric import allreduce_fabric_s, alltoall_s, node_split
from simulator.physics.gemm import GemmPrecision, gemm, module_precision
from simulator.physics.ops import Op, array_key, share_op
from simulator.physics.terms import moe_expert_terms
from simulator.specs.deployment import (Deployment, attention_projections, indexer_projections, layer_kind_counts,
                                        linear_projections, sliding_layers)
from simulator.specs.hardware import DTYPE_BYTES, Hardware
from simulator.specs.models import ModelSpec
from simulator.specs.routing import expert_probabilities
from simulator.specs.wire import collective_factor


def allreduce_s(nbytes, gpus: int, hw: Hardware):
    """Ring all-reduce: latency + 2 (t-1)/t * bytes / link bandwidth (one direction)."""
    return hw.interconnect_latency_s + collective_factor("all_reduce", gpus) * nbytes / hw.interconnect_bandwidth_bytes_per_s


def attention_projection_ops(model: ModelSpec, dep: Deployment, tokens, count: int, prefix: str = "",
                             suffix: str = "") -> list[Op]:
    """Weights on the attention path: QKV (or MLA's low-rank projections) and the output projection
    (:func:`simulator.specs.deployment.attention_projections`), each in the precision it is held in
    (:meth:`Deployment.attention_dtype_for`: a checkpoint's unquantized attention runs bf16 GEMMs).

    MLA's down-projections q_a [D -> q_lora] and kv_a [D -> kv_lora + rope] have no head axis and are
    replicated on every GPU of the attention group (full FLOPs and bytes here; the memory model
    counts them whole per GPU, :func:`simulator.physics.memory.weight_bytes_per_gpu`)."""
    return _projection_ops(model, dep, tokens, count, attention_projections(model, dep.tp), prefix, suffix)


def _projection_ops(model: ModelSpec, dep: Deployment, tokens, count: int, shapes: dict, prefix: str,
                    suffix: str = "", blocked=lambda name: True) -> list[Op]:
    """One GEMM "attn_<name>" per projection of ``shapes`` (name -> (n, k)), at its own precision; ``blocked``: which
    of them a block-scaled fp8 checkpoint stores block-scaled."""
    ops = []
    for name, (n, k) in shapes.items():
        held = dep.attention_dtype_for(model, name)
        precision = GemmPrecision.held(dep, held, blocked(name) and model.fp8_blocks(held))
        ops.append(gemm(f"{prefix}attn_{name}{suffix}", tokens, n, k, precision, count))
    return ops


def layer_projection_ops(model: ModelSpec, dep: Deployment, tokens, kinds: dict[str, int], prefix: str = "") -> list[Op]:
    """The weights on every layer's attention path, each kind with its own: softmax-attention layers
    (:func:`attention_projection_ops`; Gemma 4's global layers at their own shape), DeepSeek-V3.2's
    indexer projections (:func:`simulator.specs.deployment.indexer_projections`, replicated) and Gated DeltaNet's
    in_proj and out_proj (:func:`simulator.specs.deployment.linear_projections`)."""
    n_linear = kinds.get("linear", 0)
    n_attn = sum(kinds.values()) - n_linear
    n_global = kinds.get("full", 0)
    ops = []
    if n_attn and model.has_global_shape and n_global:
        if n_attn - n_global:
            ops += attention_projection_ops(model, dep, tokens, n_attn - n_global, prefix)
        ops += attention_projection_ops(model.global_layer_model(), dep, tokens, n_global, prefix, "_global")
    elif n_attn:
        ops += attention_projection_ops(model, dep, tokens, n_attn, prefix)
    if kinds.get("sparse"):  # weights_proj stays bf16 in the checkpoint: never block-scaled
        ops += _projection_ops(model, dep, tokens, kinds["sparse"], indexer_projections(model), prefix,
                               blocked=lambda name: name != "indexer_w")
    if n_linear:
        ops += _projection_ops(model, dep, tokens, n_linear, linear_projections(model, dep.tp), prefix)
    return ops


def dense_mlp_ops(model: ModelSpec, dep: Deployment, tokens, count: int, width: int, prefix: str = "",
                  name: str = "mlp") -> list[Op]:
    """Gated MLP: gate+up fused [D -> 2F/t], down [F/t -> D]."""
    p, f = GemmPrecision.of(model, dep), width / dep.tp
    return [gemm(f"{prefix}{name}_gate_up", tokens, 2 * f, model.hidden_size, p, count),
            gemm(f"{prefix}{name}_down", tokens, model.hidden_size, f, p, count)]


def moe_ops(model: ModelSpec, dep: Deployment, hw: Hardware, tokens, count: int, prefix: str = "",
            batch=None, queries=None, expert_batch=None, local_tokens=None, caches=None) -> list[Op]:
    """Routed experts (+ router, shared experts, dispatch/combine) of one MoE layer, on the busiest GPU.

    ``tokens`` = all T = B q tokens of the step (every attention replica's); ``batch`` / ``queries``
    (B sequences x q adjacent positions) let the distinct-expert count use the routing's reuse rho.
    Weight bytes = experts touched on the busiest GPU x bytes of one expert slice; FLOPs =
    2 x token-expert pairs on the busiest GPU x expert params / expert TP (both from
    :func:`busiest_group_load`, continuous in the routing skew). The compute efficiency is read at
    the tokens per touched expert (small-m expert GEMMs run far below peak).

    Layouts: "tp" / "tp-ep" see all T tokens on every GPU (activations replicated by the attention
    all-reduce), so dispatch is a local selection and the output joins the TP all-reduce
    (:func:`decoder_layers_ops`). "dp-ep": a rank holds T_r = ceil(B / dp) q tokens; it sends each
    token-expert pair to the rank owning the expert (a share (ep - 1)/ep leaves the GPU) and gets
    the results back: dispatch and combine all-to-alls of T_r k D a bytes per rank, each
    latency + (ep - 1)/ep x bytes / link bandwidth. Router and shared experts run on the rank's own
    tokens with the attention group's TP (:func:`moe_token_ops`; the routed experts: :func:`routed_experts_op`).
    """
    tokens = np.asarray(tokens, dtype=float)
    if batch is None:
        batch, queries = tokens, np.ones_like(tokens)
    local = local_tokens if local_tokens is not None else rank_tokens(dep, batch, queries) if dep.dp_attention \
        else tokens
    token_ops = moe_token_ops(model, dep, hw, local, count, prefix)
    return token_ops[:1] + [_routed_experts_of(model, dep, count, prefix, batch, queries, expert_batch, caches)] + \
        token_ops[1:]


def _routed_experts_of(model: ModelSpec, dep: Deployment, count: int, prefix: str, batch, queries, expert_batch,
                       caches=None):
    """The routed experts at B sequences x q positions, or at ``expert_batch`` sequences where a padded CUDA
    graph's padding rows are routed to experts as real ones (:func:`simulator.physics.engine_time.expert_batch`)."""
    b = batch if expert_batch is None else np.asarray(expert_batch, dtype=float)
    return _routed_experts(model, dep, b * queries, count, prefix, b, queries, caches)


# A layer's attention and routed experts as the verify pass and a draft head's extend pass both build them
# (simulator.physics.ops.share_op: built and priced once inside a scope of shared ops). ``caches`` here and in
# the builders below: the step model's (simulator.physics.caches; the routed experts' load tables), None:
# nothing kept.
def _attention(model: ModelSpec, dep: Deployment, adep: Deployment, sizes: tuple, count: int, window, name: str,
               caches=None) -> Op:
    """:func:`attention_op` under ``adep``, the attention deployment of ``dep`` (which keys it: ``adep`` may be
    made anew for each pass), at ``sizes`` = (B of the replica, q, L)."""
    batch, queries, context_len = sizes
    return share_op(lambda: attention_op(model, adep, batch, queries, context_len, count, window, name), count, name,
                    lambda: (("attention", id(model), id(dep), array_key(batch), array_key(queries),
                              array_key(context_len), window), (model, dep)), caches)


def _attention_kind(model: ModelSpec, dep: Deployment, adep: Deployment, sizes: tuple, count: int, kind: str,
                    name: str, caches=None) -> Op:
    """:func:`attention_kind_op` of layer kind ``kind`` (op ``name``), shared as :func:`_attention` is."""
    batch, queries, context_len = sizes
    return share_op(lambda: attention_kind_op(model, adep, batch, queries, context_len, count, name), count, name,
                    lambda: (("attention-kind", kind, id(model), id(dep), array_key(batch), array_key(queries),
                              array_key(context_len)), (model, dep)), caches)


def attention_kind_ops(model: ModelSpec, dep: Deployment, adep: Deployment, sizes: tuple, kinds: dict[str, int],
                       prefix: str = "", caches=None) -> list[Op]:
    """One attention op per layer kind of a model that is not uniform (:attr:`ModelSpec.uniform_attention`),
    with DeepSeek-V3.2's indexer beside its sparse MLA."""
    ops = []
    for kind, count in kinds.items():
        ops.append(_attention_kind(model, dep, adep, sizes, count, kind, prefix + LAYER_KIND_OPS[kind], caches))
        if kind == "sparse":
            ops.append(_attention_kind(model, dep, adep, sizes, count, "indexer", prefix + "attention_indexer",
                                       caches))
    return ops


def _routed_experts(model: ModelSpec, dep: Deployment, tokens, count: int, prefix: str, batch, queries,
                    caches=None) -> Op:
    """:func:`routed_experts_op`, shared by its inputs (``tokens`` by value too: callers size it themselves)."""
    return share_op(lambda: routed_experts_op(model, dep, tokens, count, prefix, batch, queries, caches), count,
                    prefix + "moe_experts",
                    lambda: (("moe_experts", id(model), id(dep), array_key(tokens), array_key(batch),
                              array_key(queries)), (model, dep)), caches)


def moe_token_ops(model: ModelSpec, dep: Deployment, hw: Hardware, local, count: int, prefix: str) -> list[Op]:
    """The MoE layer's ops sized by the rank's own ``local`` tokens: router, shared experts, "dp-ep" all-to-alls."""
    a, D = DTYPE_BYTES[dep.act_dtype], model.hidden_size
    ops = [gemm(prefix + "moe_router", local, model.num_experts, D, module_precision(model, dep, "router"), count)]
    if model.shared_expert_intermediate_size:
        ops += dense_mlp_ops(model, attention_deployment(dep), local, count, model.shared_expert_intermediate_size,
                             prefix, "shared_expert")
    if dep.dp_attention and dep.tp > 1:
        ops += _dispatch_combine_ops(model, dep, hw, local * model.experts_per_token * D * a * (dep.tp // dep.ep),
                                     count, prefix)
    return ops


def routed_experts_op(model: ModelSpec, dep: Deployment, tokens, count: int, prefix: str, batch, queries,
                      caches=None) -> Op:
    """The routed experts of one MoE layer on the busiest GPU (:func:`moe_ops`); ``caches``: the step model's
    (simulator.physics.experts keeps its load tables there)."""
    held = dep.expert_dtype_for(model)
    precision = GemmPrecision(DTYPE_BYTES[held], DTYPE_BYTES[dep.act_dtype], model.fp8_blocks(held))
    w_e, a = precision.w_bytes, precision.kernel_a_bytes  # block-scaled experts multiply fp8-quantized activations
    D = model.hidden_size
    expert_tp = dep.tp // dep.ep
    reuse = dep.routing.reuse
    p = expert_probabilities(dep.routing, model.num_experts, model.experts_per_token)
    touched_gpu, pairs_gpu = busiest_group_load(tokens, p, dep.ep, batch, queries, reuse, caches)
    touched_all = experts_touched_correlated(batch, queries, p, reuse)
    params_slice = model.expert_params() / expert_tp
    return Op(prefix + "moe_experts", "moe",
              *moe_expert_terms(pairs_gpu, touched_gpu, D, model.expert_intermediate_size, expert_tp, w_e, a),
              kernels=5, count=count,
              eff_tokens=tokens * model.experts_per_token / np.maximum(touched_all, 1.0), surface="moe",
              shape={"tokens_per_expert": tokens * model.experts_per_token / np.maximum(touched_all, 1.0),
                     "expert_bytes": touched_gpu * params_slice * w_e, "n": model.expert_intermediate_size / expert_tp,
                     # the exact layer shape, for a table that measured it (ShapeCorrection)
                     "tokens": tokens, "num_experts": model.num_experts, "topk": model.experts_per_token,
                     "hidden": D, "inter": model.expert_intermediate_size, "moe_tp": expert_tp, "moe_ep": dep.ep,
                     # the work coordinates of its monotone envelope (simulator.physics.monotone.moe_lattice_s)
                     "touched": touched_all, "sequences": batch, "probabilities": p, "params_slice": params_slice,
                     "w_bytes": w_e,
                        "pair_bytes": (2 * D + 3 * model.expert_intermediate_size / expert_tp) * a},
              dtype=precision.kernel_dtype)


def _dispatch_combine_ops(model: ModelSpec, dep: Deployment, hw: Hardware, sent, count: int, prefix: str) -> list[Op]:
    """The "dp-ep" all-to-alls of one MoE layer: ``sent`` bytes per rank each way (see :func:`moe_ops`)."""
    node_s, net_s = alltoall_s(sent, dep.tp, hw)  # beyond one NVLink domain: + the inter-node share
    return [Op(prefix + f"moe_{phase}", "comm", 0.0, collective_factor("all_to_all", dep.tp) * sent, kernels=1,
               count=count, comm_s=node_s, collective=("all_to_all", node_split(hw, dep.tp)[1]), shape={"bytes": sent},
               fabric_s=net_s) for phase in ("dispatch", "combine")]


def attention_deployment(dep: Deployment) -> Deployment:
    """The deployment attention, dense MLPs, shared experts, norms and the LM head run under: the
    same as ``dep`` except with data-parallel attention, where tp is the attention group's tp/dp."""
    return dep if not dep.dp_attention else replace(dep, tp=dep.attention_tp, ep=1, layout="tp", dp=1)


def rank_tokens(dep: Deployment, batch, queries):
    """Tokens on the busiest attention replica: ceil(B / dp) q (B q without data-parallel attention)."""
    batch = np.asarray(batch, dtype=float)
    return (np.ceil(batch / dep.attention_dp) if dep.dp_attention else batch) * queries


def elementwise_op(model: ModelSpec, dep: Deployment, tokens, count: int, mlp_width: float, name: str) -> Op:
    """Norms, RoPE, activation, residual adds: memory-bound passes over the activations. Under W8A8 / FP4 they
    mix widths (the residual adds read the GEMMs' bf16 outputs; a norm fused with the quantization writes the
    next GEMM's fp8 input), so they stay at the activation width, the lower bound."""
    a = DTYPE_BYTES[dep.act_dtype]
    nbytes = tokens * (10 * model.hidden_size + 3 * mlp_width / dep.tp) * a
    return Op(name, "elementwise", tokens * (8 * model.hidden_size + 4 * mlp_width / dep.tp), nbytes,
              kernels=5, count=count, eff_tokens=tokens)


def decoder_layers_ops(model: ModelSpec, dep: Deployment, hw: Hardware, batch, queries, context_len: float,
                       prefix: str = "", layer_counts: tuple[int, int] | None = None, expert_batch=None,
                       token_batch=None, caches=None) -> list[Op]:
    """All decoder layers of one pass (dense-MLP and MoE layers, full and sliding attention), per GPU.

    Attention, dense MLPs, norms and all-reduces run on the busiest attention replica's sequences
    (all B, or ceil(B / dp) under data-parallel attention) with the attention group's TP; routed
    experts see every replica's tokens (:func:`moe_ops`). All-reduces of T_r D a bytes over the
    attention group: one after attention and one after each MLP / MoE layer; under "dp-ep" the MoE
    output returns by the combine all-to-all instead. ``expert_batch``: the sequences the routed experts load
    (padding rows included where the engine routes them; None: B). ``token_batch``: the sequences the
    token-sized ops run at (a padded CUDA graph's size, physics.engine_time.pad; None: B). ``caches``: the step
    model's (simulator.physics.caches), None: nothing kept.
    """
    return _layer_ops(model, dep, hw, (batch, queries, context_len), prefix, layer_counts, "all", expert_batch,
                      token_batch, caches)


# A pass's ops in two parts (simulator.physics.pass_tables): those sized by the busiest attention replica's
# token count alone, priced once per count in a table ("tokens": the builder's first size is that count,
# its queries and context unused), and the others, priced per cell ("cells": attention and routed experts).
# Each part's builder takes the arguments of the whole pass's.
def decoder_token_ops(model: ModelSpec, dep: Deployment, hw: Hardware, tokens, queries=1.0, context_len=0.0,
                      prefix: str = "", layer_counts: tuple[int, int] | None = None, caches=None) -> list[Op]:
    """The ops of :func:`decoder_layers_ops` sized by the replica's token count, at ``tokens`` tokens (none
    reads ``caches``: taken for the parts' one signature)."""
    return _layer_ops(model, dep, hw, (tokens, 1.0, 0.0), prefix, layer_counts, "tokens")


def decoder_cell_ops(model: ModelSpec, dep: Deployment, hw: Hardware, batch, queries, context_len: float,
                     prefix: str = "", layer_counts: tuple[int, int] | None = None, expert_batch=None,
                     caches=None) -> list[Op]:
    """The attention and routed experts of :func:`decoder_layers_ops`."""
    return _layer_ops(model, dep, hw, (batch, queries, context_len), prefix, layer_counts, "cells", expert_batch,
                      caches=caches)


LAYER_PARTS = MappingProxyType({"all": decoder_layers_ops, "tokens": decoder_token_ops, "cells": decoder_cell_ops})


def _layer_ops(model: ModelSpec, dep: Deployment, hw: Hardware, sizes: tuple, prefix: str,
               layer_counts: tuple[int, int] | None, part: str, expert_batch=None, token_batch=None,
               caches=None) -> list[Op]:
    """:func:`decoder_layers_ops` at ``sizes`` = (B, q, L), or its ``part`` ("tokens": B is the token count);
    the token-sized ops at ``token_batch`` sequences where given (a padded graph)."""
    batch, queries, context_len = sizes
    batch = np.asarray(batch, dtype=float)
    adep = attention_deployment(dep)
    if part == "tokens":
        tokens = rbatch = None
        rtokens = batch
    else:
        tb = batch if token_batch is None else np.asarray(token_batch, dtype=float)
        tokens = tb * queries
        rbatch = np.ceil(batch / dep.attention_dp) if dep.dp_attention else batch
        rtokens = (np.ceil(tb / dep.attention_dp) if dep.dp_attention else tb) * queries
    sized, cells = part != "cells", part != "tokens"
    n_dense, n_moe = layer_counts if layer_counts else (model.num_mlp_dense_layers, model.num_moe_layers)
    n_layers = n_dense + n_moe
    if not model.uniform_attention:  # chunked, linear, sparse or differently shaped layers: one op per kind
        kinds = layer_kind_counts(model, None if layer_counts is None else n_layers)
        ops = layer_projection_ops(model, adep, rtokens, kinds, prefix) if sized else []
        if cells:
            ops += attention_kind_ops(model, dep, adep, (rbatch, queries, context_len), kinds, prefix, caches)
        return ops + _mlp_ops(model, dep, hw, adep, (batch, queries, tokens, rtokens), prefix, (n_dense, n_moe),
                              part, expert_batch, caches)
    n_sliding = sliding_layers(model, None if layer_counts is None else n_layers)
    ops = attention_projection_ops(model, adep, rtokens, n_layers, prefix) if sized else []
    if cells and n_layers - n_sliding:
        ops.append(_attention(model, dep, adep, (rbatch, queries, context_len), n_layers - n_sliding, None,
                              prefix + "attention", caches))
    if cells and n_sliding:
        ops.append(_attention(model, dep, adep, (rbatch, queries, context_len), n_sliding, model.sliding_window,
                              prefix + "attention_sliding", caches))
    return ops + _mlp_ops(model, dep, hw, adep, (batch, queries, tokens, rtokens), prefix, (n_dense, n_moe), part,
                          expert_batch, caches)


def _mlp_ops(model: ModelSpec, dep: Deployment, hw: Hardware, adep: Deployment, sizes: tuple, prefix: str,
             layer_counts: tuple[int, int], part: str, expert_batch, caches=None) -> list[Op]:
    """The layers' MLP / MoE, norms and all-reduces (:func:`_layer_ops` after attention)."""
    batch, queries, tokens, rtokens = sizes
    n_dense, n_moe = layer_counts
    n_layers = n_dense + n_moe
    sized = part != "cells"
    ops = []
    if sized and n_dense:
        ops += dense_mlp_ops(model, adep, rtokens, n_dense, model.intermediate_size, prefix)
    if n_moe and part == "all":
        ops += moe_ops(model, dep, hw, tokens, n_moe, prefix, batch=batch, queries=queries, expert_batch=expert_batch,
                       local_tokens=rtokens, caches=caches)
    elif n_moe:
        ops += moe_token_ops(model, dep, hw, rtokens, n_moe, prefix) if part == "tokens" else [
            _routed_experts_of(model, dep, n_moe, prefix, batch, queries, expert_batch, caches)]
    if not sized:
        return ops
    mlp_width = model.intermediate_size if not model.is_moe else model.expert_intermediate_size * model.experts_per_token
    ops.append(elementwise_op(model, adep, rtokens, n_layers, mlp_width, prefix + "elementwise"))
    if adep.tp > 1:
        n_allreduce = 2 * n_layers - (n_moe if dep.dp_attention and not model.shared_expert_intermediate_size else 0)
        ops.append(allreduce_op(prefix + "allreduce", rtokens, model.hidden_size * residual_bytes(dep.act_dtype),
                                n_allreduce, adep, hw))
    return ops


def residual_bytes(act_dtype: str) -> float:
    """Bytes per element of the residual stream, which the TP all-reduces sum: fp8 / FP4 activations are the
    GEMMs' quantized inputs, but every engine's quantized GEMM returns bf16 (vLLM's and SGLang's fp8 linear
    methods return the input's dtype; TensorRT-LLM reduces bf16 and quantizes after, fused with the norm), so
    the stream stays bf16 (fp32 on a CPU run in fp32)."""
    return max(DTYPE_BYTES[act_dtype], DTYPE_BYTES["bf16"])


def allreduce_op(name: str, tokens, bytes_per_token: float, count, dep: Deployment, hw: Hardware) -> Op:
    """``count`` TP all-reduces of ``bytes_per_token`` per token, priced by the engine's measured table
    where the profile has one, else the link model over the node's part of the group."""
    nbytes = tokens * bytes_per_token
    g_node = node_split(hw, dep.tp)[1]  # the node's part: a measured table or the link model at g GPUs
    return Op(name, "comm", 0.0, 2 * nbytes, kernels=1, count=count,
              comm_s=allreduce_s(nbytes, g_node, hw), collective=(dep.kernels.allreduce, g_node),
              shape={"bytes": nbytes, "tokens": tokens, "bytes_per_token": bytes_per_token},
              fabric_s=allreduce_fabric_s(nbytes, dep.tp, hw))
