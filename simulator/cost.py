"""Roofline cost of one forward pass, per operator, vectorized over a (batch size, K) grid.

Every operator o has FLOPs F_o and bytes M_o per GPU; its time is

    t_o = count_o * (max(F_o / (P * eta_c), M_o / (BW * eta_m)) + kernels_o * tau_launch)

with eta = 1 and the catalog's assumed tau when no calibration profile is given (datasheet only).
Communication ops (tensor-parallel all-reduce, expert-parallel all-to-all) are priced as
latency + bytes / link bandwidth instead.

Letters: B sequences, q query tokens per sequence (K+1 when verifying K drafts), T = B*q tokens,
L context length (KV entries already cached), t tensor-parallel degree.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from simulator.errors import PlannerError
from simulator.hardware import DTYPE_BYTES, Hardware
from simulator.models import ModelSpec
from simulator.moe import Routing, busiest_group_load, expert_probabilities, experts_touched
from simulator.profile import Profile

FAMILIES = ("gemm", "attention", "moe", "lm_head", "elementwise", "comm")


@dataclass(frozen=True)
class Deployment:
    """How a model runs: parallelism and precisions."""

    tp: int = 1
    ep: int = 1  # expert-parallel groups among the tp GPUs (experts split, not sliced)
    weight_dtype: str = "bf16"
    act_dtype: str = "bf16"
    kv_dtype: str = "bf16"
    expert_dtype: str | None = None  # None: the model's native expert dtype, else weight_dtype
    routing: Routing = field(default_factory=Routing)
    memory_utilization: float = 0.9  # share of device memory the engine may use (vLLM default)

    def expert_dtype_for(self, model: ModelSpec) -> str:
        return self.expert_dtype or model.expert_weight_dtype or self.weight_dtype


def check_deployment(model: ModelSpec, dep: Deployment) -> None:
    """Raise PlannerError when the parallel layout cannot split this model."""
    if dep.tp < 1 or dep.ep < 1:
        raise PlannerError(f"tp and ep must be >= 1, got tp={dep.tp}, ep={dep.ep}")
    if model.num_heads % dep.tp:
        raise PlannerError(f"tp={dep.tp} does not divide the {model.num_heads} attention heads of {model.name}"
                           f" (try one of {[t for t in (1, 2, 4, 8, 16) if model.num_heads % t == 0]})")
    if dep.ep > 1:
        if not model.is_moe:
            raise PlannerError(f"ep={dep.ep} needs an MoE model; {model.name} is dense")
        if dep.tp % dep.ep:
            raise PlannerError(f"ep={dep.ep} must divide tp={dep.tp} (experts are split over the same GPUs)")
        if model.num_experts % dep.ep:
            raise PlannerError(f"ep={dep.ep} does not divide the {model.num_experts} experts of {model.name}")
    for label, value, allowed in (("weight", dep.weight_dtype, DTYPE_BYTES), ("activation", dep.act_dtype, DTYPE_BYTES),
                                  ("kv-cache", dep.kv_dtype, DTYPE_BYTES)):
        if value not in allowed:
            raise PlannerError(f"unknown {label} dtype '{value}' (known: {', '.join(DTYPE_BYTES)})")
    if not 0 < dep.memory_utilization <= 1:
        raise PlannerError(f"memory_utilization must be in (0, 1], got {dep.memory_utilization}")


@dataclass
class Op:
    """One operator, per GPU, per instance; ``count`` identical instances (layers) per pass."""

    name: str
    family: str
    flops: np.ndarray | float
    nbytes: np.ndarray | float
    kernels: float
    count: float
    eff_tokens: np.ndarray | float = 1.0  # size at which the compute efficiency is read
    comm_s: np.ndarray | float | None = None  # communication time (comm family only)


@dataclass
class StepCost:
    """Per-operator costs of a step, stacked: arrays have shape (n_ops, *grid)."""

    names: list[str]
    families: list[str]
    flops: np.ndarray
    nbytes: np.ndarray
    compute_s: np.ndarray
    memory_s: np.ndarray
    launch_s: np.ndarray
    time_s: np.ndarray

    @property
    def total_s(self) -> np.ndarray:
        return self.time_s.sum(axis=0)

    def bound(self) -> np.ndarray:
        """Per op: 'compute', 'memory' or 'comm' (which roofline term sets its time)."""
        kind = np.where(self.compute_s > self.memory_s, "compute", "memory")
        is_comm = np.array([f == "comm" for f in self.families])
        return np.where(is_comm.reshape((-1,) + (1,) * (kind.ndim - 1)), "comm", kind)

    def time_by_regime(self) -> dict[str, np.ndarray]:
        """Step time split into compute-bound, memory-bound, comm and launch seconds."""
        roof = self.time_s - self.launch_s
        bound = self.bound()
        return {regime: np.where(bound == regime, roof, 0.0).sum(axis=0) for regime in ("compute", "memory", "comm")} \
            | {"launch": self.launch_s.sum(axis=0)}

    def scaled(self, factor) -> "StepCost":
        """The same ops repeated ``factor`` times (e.g. K sequential draft passes)."""
        f = np.asarray(factor, dtype=float)
        return StepCost(self.names, self.families, self.flops * f, self.nbytes * f, self.compute_s * f,
                        self.memory_s * f, self.launch_s * f, self.time_s * f)

    def prefixed(self, prefix: str) -> "StepCost":
        return StepCost([prefix + n for n in self.names], self.families, self.flops, self.nbytes,
                        self.compute_s, self.memory_s, self.launch_s, self.time_s)

    @staticmethod
    def concat(parts: list["StepCost"]) -> "StepCost":
        shape = np.broadcast_shapes(*(p.time_s.shape[1:] for p in parts))
        stack = lambda attr: np.concatenate([np.broadcast_to(getattr(p, attr), (len(p.names),) + shape)  # noqa: E731
                                             for p in parts])
        return StepCost(sum((p.names for p in parts), []), sum((p.families for p in parts), []),
                        stack("flops"), stack("nbytes"), stack("compute_s"), stack("memory_s"),
                        stack("launch_s"), stack("time_s"))


def evaluate(ops: list[Op], hw: Hardware, dep: Deployment, profile: Profile | None, shape) -> StepCost:
    """Price each op on the device: roofline max(compute, memory) plus launch overhead."""
    peak = hw.peak_flops_per_s(dep.weight_dtype, dep.act_dtype)
    bw = hw.hbm_bandwidth_bytes_per_s
    tau = profile.launch_overhead_s if profile else hw.launch_overhead_s
    n = len(ops)
    flops = np.empty((n,) + shape)
    nbytes = np.empty((n,) + shape)
    compute_s = np.zeros((n,) + shape)
    memory_s = np.empty((n,) + shape)
    launch_s = np.array([op.count * op.kernels * tau for op in ops]).reshape((n,) + (1,) * len(shape))
    for i, op in enumerate(ops):
        np.multiply(op.flops, op.count, out=flops[i, ...])
        np.multiply(op.nbytes, op.count, out=nbytes[i, ...])
        if op.comm_s is not None:
            np.multiply(op.comm_s, op.count, out=memory_s[i, ...])
            continue
        if profile is None:
            np.multiply(flops[i, ...], 1.0 / peak, out=compute_s[i, ...])
            np.multiply(nbytes[i, ...], 1.0 / bw, out=memory_s[i, ...])
        else:
            eta_c = profile.compute_efficiency(op.name, op.family, op.eff_tokens)
            eta_m = profile.memory_efficiency(op.family, op.nbytes)
            np.divide(flops[i, ...], np.multiply(eta_c, peak), out=compute_s[i, ...])
            np.divide(nbytes[i, ...], np.multiply(eta_m, bw), out=memory_s[i, ...])
    if profile is not None and profile.engine_scale != 1.0:
        # end-to-end engine runs measured its kernels slower than the microbenchmarks by this factor
        compute_s *= profile.engine_scale
        memory_s *= profile.engine_scale
        launch_s = launch_s * profile.engine_scale
    time_s = np.maximum(compute_s, memory_s)
    time_s += launch_s
    return StepCost([o.name for o in ops], [o.family for o in ops], flops, nbytes, compute_s, memory_s,
                    np.broadcast_to(launch_s, time_s.shape), time_s)


# --- operator builders (pure functions of shapes) ---------------------------------------------

def gemm(name: str, tokens, n: float, k: float, w_bytes: float, a_bytes: float, count: float,
         family: str = "gemm") -> Op:
    """Y[T, n] = X[T, k] @ W[k, n]:  F = 2 T n k,  M = n k w + T (n + k) a."""
    return Op(name, family, 2.0 * tokens * n * k, n * k * w_bytes + tokens * (n + k) * a_bytes,
              kernels=1, count=count, eff_tokens=tokens)


def allreduce_s(nbytes, gpus: int, hw: Hardware):
    """Ring all-reduce: latency + 2 (t-1)/t * bytes / link bandwidth (one direction)."""
    return hw.interconnect_latency_s + 2.0 * (gpus - 1) / gpus * nbytes / hw.interconnect_bandwidth_bytes_per_s


def kv_heads_per_gpu(model: ModelSpec, tp: int) -> int:
    """KV heads are replicated when tp exceeds their number."""
    return max(1, -(-model.num_kv_heads // tp))


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
        flops = 2.0 * batch * queries * (keys + (queries + 1) / 2) * hq * (2 * model.kv_lora_rank + model.qk_rope_head_dim)
        kv_read = batch * (keys + queries) * latent * kv
        q_io = 2.0 * batch * queries * hq * latent * a
    else:
        d = model.head_dim
        flops = 4.0 * batch * queries * (keys + (queries + 1) / 2) * hq * d
        kv_read = batch * (keys + queries) * 2 * kv_heads_per_gpu(model, dep.tp) * d * kv
        q_io = 2.0 * batch * queries * hq * d * a
    return Op(name, "attention", flops, kv_read + q_io, kernels=2, count=count, eff_tokens=batch * queries)


def attention_projection_ops(model: ModelSpec, dep: Deployment, tokens, count: int, prefix: str = "") -> list[Op]:
    """Weights on the attention path: QKV (or MLA's low-rank projections) and the output projection."""
    w = DTYPE_BYTES[dep.weight_dtype]
    a = DTYPE_BYTES[dep.act_dtype]
    D, t = model.hidden_size, dep.tp
    if model.attention == "mla":
        H = model.num_heads / t
        ops = []
        if model.q_lora_rank:
            ops.append(gemm(prefix + "attn_q_a", tokens, model.q_lora_rank, D, w, a, count))
            ops.append(gemm(prefix + "attn_q_b", tokens, H * model.qk_head_dim, model.q_lora_rank, w, a, count))
        else:
            ops.append(gemm(prefix + "attn_q", tokens, H * model.qk_head_dim, D, w, a, count))
        ops.append(gemm(prefix + "attn_kv_a", tokens, model.kv_lora_rank + model.qk_rope_head_dim, D, w, a, count))
        # kv_b is absorbed into the query and output sides in decode; same FLOPs and bytes
        ops.append(gemm(prefix + "attn_kv_b", tokens, H * (model.qk_nope_head_dim + model.v_head_dim),
                        model.kv_lora_rank, w, a, count))
        ops.append(gemm(prefix + "attn_o", tokens, D, H * model.v_head_dim, w, a, count))
        return ops
    d = model.head_dim
    qkv_n = (model.num_heads / t + 2 * kv_heads_per_gpu(model, t)) * d
    return [gemm(prefix + "attn_qkv", tokens, qkv_n, D, w, a, count),
            gemm(prefix + "attn_o", tokens, D, model.num_heads / t * d, w, a, count)]


def dense_mlp_ops(model: ModelSpec, dep: Deployment, tokens, count: int, width: int, prefix: str = "",
                  name: str = "mlp") -> list[Op]:
    """Gated MLP: gate+up fused [D -> 2F/t], down [F/t -> D]."""
    w = DTYPE_BYTES[dep.weight_dtype]
    a = DTYPE_BYTES[dep.act_dtype]
    f = width / dep.tp
    return [gemm(f"{prefix}{name}_gate_up", tokens, 2 * f, model.hidden_size, w, a, count),
            gemm(f"{prefix}{name}_down", tokens, model.hidden_size, f, w, a, count)]


def moe_ops(model: ModelSpec, dep: Deployment, hw: Hardware, tokens, count: int, prefix: str = "") -> list[Op]:
    """Routed experts (+ router, shared experts, expert-parallel all-to-all) of one MoE layer.

    Weight bytes = experts touched on the busiest GPU x bytes of one expert slice; FLOPs =
    2 x token-expert pairs on the busiest GPU x expert params / expert TP. The compute efficiency
    is read at the tokens per touched expert (small-m expert GEMMs run far below peak).
    """
    w_e = DTYPE_BYTES[dep.expert_dtype_for(model)]
    w = DTYPE_BYTES[dep.weight_dtype]
    a = DTYPE_BYTES[dep.act_dtype]
    D = model.hidden_size
    expert_tp = dep.tp // dep.ep
    p = expert_probabilities(dep.routing, model.num_experts, model.experts_per_token)
    touched_gpu, pairs_gpu = busiest_group_load(tokens, p, dep.ep)
    touched_all = experts_touched(tokens, p)
    params_slice = model.expert_params() / expert_tp
    ops = [
        gemm(prefix + "moe_router", tokens, model.num_experts, D, w, a, count),
        Op(prefix + "moe_experts", "moe",
           flops=2.0 * pairs_gpu * params_slice,
           nbytes=touched_gpu * params_slice * w_e + pairs_gpu * (2 * D + 3 * model.expert_intermediate_size / expert_tp) * a,
           kernels=5, count=count,
           eff_tokens=tokens * model.experts_per_token / np.maximum(touched_all, 1.0)),
    ]
    if model.shared_expert_intermediate_size:
        ops += dense_mlp_ops(model, dep, tokens, count, model.shared_expert_intermediate_size, prefix, "shared_expert")
    if dep.ep > 1:
        # dispatch + combine: each token-expert pair's activation crosses to another GPU with prob (ep-1)/ep
        sent = tokens * model.experts_per_token * D * a * (dep.ep - 1) / dep.ep / dep.ep
        ops.append(Op(prefix + "all_to_all", "comm", 0.0, 2 * sent, kernels=2, count=count,
                      comm_s=2 * (hw.interconnect_latency_s + sent / hw.interconnect_bandwidth_bytes_per_s)))
    return ops


def elementwise_op(model: ModelSpec, dep: Deployment, tokens, count: int, mlp_width: float, name: str) -> Op:
    """Norms, RoPE, activation, residual adds: memory-bound passes over the activations."""
    a = DTYPE_BYTES[dep.act_dtype]
    nbytes = tokens * (10 * model.hidden_size + 3 * mlp_width / dep.tp) * a
    return Op(name, "elementwise", tokens * (8 * model.hidden_size + 4 * mlp_width / dep.tp), nbytes,
              kernels=5, count=count, eff_tokens=tokens)


def sliding_layers(model: ModelSpec, layers: int | None = None) -> int:
    """Sliding-window layers among all of the model's layers, or among a draft head's ``layers``
    (a head copies the model's full-attention layers unless every layer slides)."""
    if layers is None:
        return model.num_sliding_layers
    return layers if model.num_sliding_layers == model.num_layers else 0


def decoder_layers_ops(model: ModelSpec, dep: Deployment, hw: Hardware, batch, queries, context_len: float,
                       prefix: str = "", layer_counts: tuple[int, int] | None = None) -> list[Op]:
    """All decoder layers of one pass (dense-MLP and MoE layers, full and sliding attention)."""
    tokens = batch * queries
    a = DTYPE_BYTES[dep.act_dtype]
    n_dense, n_moe = layer_counts if layer_counts else (model.num_mlp_dense_layers, model.num_moe_layers)
    n_layers = n_dense + n_moe
    n_sliding = sliding_layers(model, None if layer_counts is None else n_layers)
    ops = attention_projection_ops(model, dep, tokens, n_layers, prefix)
    if n_layers - n_sliding:
        ops.append(attention_op(model, dep, batch, queries, context_len, n_layers - n_sliding, None, prefix + "attention"))
    if n_sliding:
        ops.append(attention_op(model, dep, batch, queries, context_len, n_sliding, model.sliding_window,
                                prefix + "attention_sliding"))
    if n_dense:
        ops += dense_mlp_ops(model, dep, tokens, n_dense, model.intermediate_size, prefix)
    if n_moe:
        ops += moe_ops(model, dep, hw, tokens, n_moe, prefix)
    mlp_width = model.intermediate_size if not model.is_moe else model.expert_intermediate_size * model.experts_per_token
    ops.append(elementwise_op(model, dep, tokens, n_layers, mlp_width, prefix + "elementwise"))
    if dep.tp > 1:
        # one all-reduce after attention, one after the MLP (expert-parallel MoE layers combine by all-to-all)
        n_allreduce = 2 * n_layers - (n_moe if dep.ep > 1 else 0)
        nbytes = tokens * model.hidden_size * a
        ops.append(Op(prefix + "allreduce", "comm", 0.0, 2 * nbytes, kernels=1, count=n_allreduce,
                      comm_s=allreduce_s(nbytes, dep.tp, hw)))
    return ops


def head_ops(model: ModelSpec, dep: Deployment, hw: Hardware, tokens, vocab: int, prefix: str = "",
             sampling: bool = True) -> list[Op]:
    """Embedding gather, LM head (vocab split over TP), logits gather and sampling/acceptance."""
    w = DTYPE_BYTES[dep.weight_dtype]
    a = DTYPE_BYTES[dep.act_dtype]
    D = model.hidden_size
    ops = [Op(prefix + "embedding", "elementwise", 0.0, 2 * tokens * D * a, kernels=1, count=1, eff_tokens=tokens),
           gemm(prefix + "lm_head", tokens, vocab / dep.tp, D, w, a, 1, family="lm_head")]
    if dep.tp > 1:
        gathered = tokens * vocab / dep.tp * a
        ops.append(Op(prefix + "logits_gather", "comm", 0.0, gathered * (dep.tp - 1), kernels=1, count=1,
                      comm_s=hw.interconnect_latency_s + gathered * (dep.tp - 1) / hw.interconnect_bandwidth_bytes_per_s))
    if sampling:
        # softmax / argmax and the acceptance test read the fp32 logits of every token once more
        ops.append(Op(prefix + "sampling", "elementwise", 5.0 * tokens * vocab, 2 * tokens * vocab * 4.0,
                      kernels=3, count=1, eff_tokens=tokens))
    return ops


def forward_ops(model: ModelSpec, dep: Deployment, hw: Hardware, batch, queries, context_len: float,
                prefix: str = "") -> list[Op]:
    """Ops of one full forward pass of ``model`` over q new tokens for each of B sequences."""
    return decoder_layers_ops(model, dep, hw, batch, queries, context_len, prefix) + \
        head_ops(model, dep, hw, batch * queries, model.vocab_size, prefix)


def verify_cost(model: ModelSpec, dep: Deployment, hw: Hardware, batch, k, context_len: float,
                profile: Profile | None) -> StepCost:
    """Target pass that scores K drafts (+1 bonus position) for each of B sequences."""
    batch, k = np.broadcast_arrays(np.asarray(batch, dtype=float), np.asarray(k, dtype=float))
    ops = forward_ops(model, dep, hw, batch, k + 1.0, context_len)
    return evaluate(ops, hw, dep, profile, batch.shape)


# --- memory fit ---------------------------------------------------------------------------------

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
