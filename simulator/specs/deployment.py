"""How a model is deployed: parallel layout, precisions, routing, memory share; facts derived from them.

Layouts (``tp`` is always the number of GPUs of one model instance):

- ``tp``: attention, dense MLPs and experts all tensor-parallel over the tp GPUs (ep = 1).
- ``tp-ep``: tensor-parallel attention; experts split over ``ep`` groups (each expert sliced over
  tp/ep GPUs). Activations are replicated after attention, so dispatch is a local selection and the
  MoE output is combined by the same all-reduce a TP MLP needs.
- ``dp-ep``: data-parallel attention (DeepSeek-V3 style in SGLang / TensorRT-LLM / vLLM): ``dp``
  attention groups of tp/dp GPUs each serve B/dp sequences with their own copy of the attention,
  dense-MLP, shared-expert, embedding and LM-head weights (and only their sequences' KV cache);
  experts are split over ep = tp GPUs, reached by an all-to-all dispatch and combine of each rank's
  own tokens.

Sits below the physics: the operator builders and the memory model both read these facts
(heads per GPU, sliding layers), so neither has to import the other.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from simulator.errors import PlannerError
from simulator.specs.hardware import DTYPE_BYTES
from simulator.specs.models import ModelSpec
from simulator.specs.routing import Routing


# Modules beside the decoder layers' linear layers that serving engines leave unquantized whatever the weights:
# vLLM's quantization configs quantize LinearBase and FusedMoE layers only (its LM head is a VocabParallelEmbedding,
# the DeepSeek / Qwen3-MoE routers a ReplicatedLinear built with quant_config=None); TensorRT-LLM's quantize_layers
# excludes '*lm_head', '*router', '*vocab_embedding' by default (tensorrt_llm/quantization/quantize.py); ModelOpt
# disables its '*lm_head*' and router quantizers by default. An engine whose quantizer takes some of them says so.
UNQUANTIZED_MODULES = ("embedding", "lm_head", "router")


@dataclass(frozen=True)
class EngineKernels:
    """Which kernels the serving engine runs where the physics prices them differently: facts of the engine
    profile (and of the device's L2, and the workload's sampling), not choices of the deployment. Built once
    per scenario (:func:`simulator.specs.engines.engine_kernels`)."""

    engine: str = ""  # the serving engine whose kernels run the MoE layers (tables are engine-specific there)
    # which measured all-reduce prices the TP reductions: serving engines' one-shot custom kernels
    # ("all_reduce") or NCCL ("all_reduce_nccl", e.g. torch.distributed in gpt-fast)
    allreduce: str = "all_reduce"
    # the LM head under TP: "vocab-parallel" (a vocab / tp slice per rank, then a logits all-gather),
    # "vocab-parallel-argmax" (slices, a local greedy argmax and two small all-reduces: MagicDec) or
    # "replicated" (every rank runs the whole head, no gather: gpt-fast's tp.py leaves it unsharded)
    lm_head: str = "vocab-parallel"
    # of UNQUANTIZED_MODULES, those the engine's quantizer quantizes with the weights all the same (gpt-fast's
    # handlers replace every nn.Linear, its output head and MoE gate included)
    quantized_modules: tuple[str, ...] = ()
    # self-speculation: the step's first draft pass runs two tokens for every sequence (the draft's cache
    # catches up on the last draft token after a fully accepted step; MagicDec's loop does it batch-wide)
    self_spec_catch_up: bool = False
    # decode attention kernels of that engine: query-head groups served with one KV read (() = all), and
    # the KV heads x batch below which even those fall back to one read per query head (engine profile)
    grouped_decode_groups: tuple[int, ...] = ()
    grouped_decode_min_batch_heads: float = 0.0
    l2_reread_cost: float = 1.0  # the device's cost of a KV re-read served by L2, relative to HBM
    # HBM bytes the engine's sampling reads and writes per element of the [positions, vocab] logits,
    # beyond the LM head's own output: plain decoding (B positions) and verification (B (K + 1)
    # positions, rejection sampler included), at the workload's temperature (simulator/physics/layers.py)
    logit_bytes_plain: float = 8.0
    logit_bytes_verify: float = 8.0


@dataclass(frozen=True)
class Deployment:
    """How a model runs: parallelism and precisions."""

    tp: int = 1
    ep: int = 1  # expert-parallel groups among the tp GPUs (experts split, not sliced)
    weight_dtype: str = "bf16"
    act_dtype: str = "bf16"
    kv_dtype: str = "bf16"
    expert_dtype: str | None = None  # None: the model's native expert dtype, else weight_dtype
    # the attention projections' weights ([precision] attention); None: what the checkpoint says
    # (:meth:`attention_dtype_for`), else weight_dtype
    attention_dtype: str | None = None
    routing: Routing = field(default_factory=Routing)
    memory_utilization: float = 0.9  # share of device memory the engine may use (vLLM default)
    layout: str = "tp"  # "tp" | "tp-ep" | "dp-ep" (module docstring); "tp" with ep > 1 reads as "tp-ep"
    dp: int = 1  # attention data-parallel groups (layout "dp-ep")
    kernels: EngineKernels = field(default_factory=lambda: EngineKernels())  # the engine's kernel choices

    def expert_dtype_for(self, model: ModelSpec) -> str:
        """The routed experts' precision: the deployment's [precision] experts where given; else the checkpoint's own
        expert precision where the deployment runs the checkpoint as published (its weights' dtype) or where the
        experts alone are quantized (gpt-oss: MXFP4 experts beside bf16 layers); else the weights' (a DeepSeek-V3
        fp8 checkpoint served as NVFP4 has NVFP4 experts)."""
        if self.expert_dtype:
            return self.expert_dtype
        own = model.expert_weight_dtype
        if own and (model.checkpoint_weight_dtype is None or self.weight_dtype == model.checkpoint_weight_dtype):
            return own
        return self.weight_dtype

    @property
    def quantized_weights(self) -> bool:
        """Weights narrower than bf16: the modules a quantizer leaves out stay bf16 beside them."""
        return DTYPE_BYTES[self.weight_dtype] < DTYPE_BYTES["bf16"]

    def module_dtype_for(self, model: ModelSpec, module: str) -> str:
        """The precision ``module`` ("embedding", "lm_head", "router", "mtp_fusion") is held in: bf16 for the modules
        serving engines leave unquantized (:data:`UNQUANTIZED_MODULES`) beside weights narrower than bf16, unless the
        engine's quantizer takes them too (:attr:`EngineKernels.quantized_modules`); else the checkpoint's rule
        (:meth:`ModelSpec.module_dtype`)."""
        if module in UNQUANTIZED_MODULES and module not in self.kernels.quantized_modules and self.quantized_weights:
            return "bf16"
        return model.module_dtype(module, self.weight_dtype)

    def attention_dtype_for(self, model: ModelSpec, projection: str) -> str:
        """The precision attention ``projection`` (a key of :func:`attention_projections`,
        :func:`indexer_projections` or :func:`linear_projections`) holds its weights in: the deployment's
        [precision] attention where given; else bf16 where the checkpoint leaves that projection unquantized
        (:attr:`ModelSpec.unquantized_attention`) and the deployment runs quantized weights (narrower than bf16);
        else the weights' precision."""
        if self.attention_dtype:
            return self.attention_dtype
        if projection in model.unquantized_attention and self.quantized_weights:
            return "bf16"
        return self.weight_dtype

    def attention_label(self, model: ModelSpec) -> str:
        """How the attention projections' precision differs from the weights' ("" where it does not): "bf16", or
        the projections that differ where only some do ("bf16 (q_a, q_b, kv_a, kv_b)")."""
        names = [*attention_projections(model, 1), *indexer_projections(model), *linear_projections(model, 1)]
        held = {p: self.attention_dtype_for(model, p) for p in names}
        other = sorted({d for d in held.values() if d != self.weight_dtype})
        if not other:
            return ""
        if len(other) == 1 and all(d == other[0] for d in held.values()):
            return other[0]
        return ", ".join(f"{d} ({', '.join(p for p in names if held[p] == d)})" for d in other)

    @property
    def dp_attention(self) -> bool:
        return self.layout == "dp-ep"

    @property
    def attention_tp(self) -> int:
        """GPUs one attention (and dense MLP, shared expert, LM head) instance is sliced over."""
        return self.tp // self.dp if self.dp_attention else self.tp

    @property
    def attention_dp(self) -> int:
        """Attention replicas: each holds B / attention_dp sequences."""
        return self.dp if self.dp_attention else 1


LAYOUTS = ("tp", "tp-ep", "dp-ep")


def make_deployment(tp: int = 1, ep: int | None = None, layout: str | None = None, dp: int | None = None,
                    **kwargs) -> Deployment:
    """A Deployment with layout defaults filled in: "dp-ep" defaults to dp = ep = tp (attention TP 1);
    "tp-ep" defaults to ep = tp; no layout reads ep > 1 as "tp-ep", else "tp"."""
    if layout is None:
        layout = "tp-ep" if (ep or 1) > 1 else "tp"
    if layout not in LAYOUTS:
        raise PlannerError(f"unknown layout '{layout}' (use one of {', '.join(LAYOUTS)})")
    if layout == "tp":
        ep, dp = ep or 1, dp or 1
    elif layout == "tp-ep":
        ep, dp = ep or tp, dp or 1
    else:
        ep, dp = ep or tp, dp or tp
    return Deployment(tp=tp, ep=ep, layout=layout, dp=dp, **kwargs)


def check_deployment(model: ModelSpec, dep: Deployment) -> None:
    """Raise PlannerError when the parallel layout cannot split this model."""
    if dep.tp < 1 or dep.ep < 1 or dep.dp < 1:
        raise PlannerError(f"tp, ep and dp must be >= 1, got tp={dep.tp}, ep={dep.ep}, dp={dep.dp}")
    if dep.layout not in LAYOUTS:
        raise PlannerError(f"unknown layout '{dep.layout}' (use one of {', '.join(LAYOUTS)})")
    if dep.dp > 1 and not dep.dp_attention:
        raise PlannerError(f"dp={dep.dp} needs layout 'dp-ep' (data-parallel attention)")
    if dep.dp_attention:
        if not model.is_moe:
            raise PlannerError(f"layout 'dp-ep' needs an MoE model; {model.name} is dense")
        if dep.ep == 1:
            raise PlannerError("layout 'dp-ep' needs ep > 1 (experts split over the GPUs; default ep = tp)")
        if dep.tp % dep.dp:
            raise PlannerError(f"dp={dep.dp} must divide tp={dep.tp} (each attention group gets tp/dp GPUs)")
    if model.num_heads % dep.attention_tp:
        raise PlannerError(f"tp={dep.attention_tp} does not divide the {model.num_heads} attention heads of {model.name}"
                           f" (try one of {[t for t in (1, 2, 4, 8, 16) if model.num_heads % t == 0]})")
    if model.num_linear_layers and (model.linear_num_key_heads % dep.attention_tp
                                    or model.linear_num_value_heads % dep.attention_tp):
        raise PlannerError(f"tp={dep.attention_tp} does not divide the {model.linear_num_key_heads} key /"
                           f" {model.linear_num_value_heads} value heads of {model.name}'s linear-attention layers")
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
    if dep.attention_dtype is not None and dep.attention_dtype not in DTYPE_BYTES:
        raise PlannerError(f"unknown attention dtype '{dep.attention_dtype}' ([precision] attention, --attention-dtype;"
                           f" known: {', '.join(DTYPE_BYTES)})")
    if not 0 < dep.memory_utilization <= 1:
        raise PlannerError(f"memory_utilization must be in (0, 1], got {dep.memory_utilization}")


def kv_heads_per_gpu(model: ModelSpec, tp: int) -> int:
    """KV heads are replicated when tp exceeds their number."""
    return max(1, -(-model.num_kv_heads // tp))


def attention_projections(model: ModelSpec, tp: int) -> dict[str, tuple[float, float]]:
    """One softmax-attention layer's projection GEMMs on one GPU of a TP group of ``tp``, by name: (output width n,
    input width k), the weights n x k. GQA: qkv [D -> (H_q / t (+ the output gate) + 2 kv heads per GPU) d] and
    o [H_q d / t -> D]; MLA: q_a [D -> q_lora] and kv_a [D -> kv_lora + rope] whole on every GPU (no head axis to
    split), q_b (or q without a q_lora), kv_b and o over the heads. The operator builders and the memory model both
    read it."""
    D, t = model.hidden_size, tp
    if model.attention == "mla":
        H = model.num_heads / t
        q = {"q_a": (model.q_lora_rank, D), "q_b": (H * model.qk_head_dim, model.q_lora_rank)} if model.q_lora_rank \
            else {"q": (H * model.qk_head_dim, D)}
        # kv_b is absorbed into the query and output sides in decode; same FLOPs and bytes
        return q | {"kv_a": (model.kv_lora_rank + model.qk_rope_head_dim, D),
                    "kv_b": (H * (model.qk_nope_head_dim + model.v_head_dim), model.kv_lora_rank),
                    "o": (D, H * model.v_head_dim)}
    d = model.head_dim
    kv = 1 if model.kv_shares_k_and_v else 2  # Gemma 4 global layers: K doubles as V
    gate = model.num_heads / t if model.attention_output_gate else 0.0  # Qwen3-Next: a gate per query head
    return {"qkv": ((model.num_heads / t + gate + kv * kv_heads_per_gpu(model, t)) * d, D),
            "o": (D, model.num_heads / t * d)}


def indexer_projections(model: ModelSpec) -> dict[str, tuple[float, float]]:
    """DeepSeek-V3.2's lightning indexer per layer, whole on every GPU: wq_b [q_lora -> H_i d_i], wk [D -> d_i],
    weights_proj [D -> H_i] (none without sparse attention)."""
    if not model.is_sparse_attention:
        return {}
    hi, di = model.index_n_heads, model.index_head_dim
    return {"indexer_q": (hi * di, model.q_lora_rank), "indexer_k": (di, model.hidden_size),
            "indexer_w": (hi, model.hidden_size)}


def linear_projections(model: ModelSpec, tp: int) -> dict[str, tuple[float, float]]:
    """A Gated DeltaNet layer's projections on one GPU: in_proj [D -> (2 H_k d_k + 2 H_v d_v + 2 H_v) / t] and
    out_proj [H_v d_v / t -> D] (none without linear-attention layers)."""
    if not model.num_linear_layers:
        return {}
    D, t = model.hidden_size, tp
    return {"linear_in": ((model.linear_qkvz_width + 2 * model.linear_num_value_heads) / t, D),
            "linear_out": (D, model.linear_num_value_heads * model.linear_value_head_dim / t)}


def sliding_layers(model: ModelSpec, layers: int | None = None) -> int:
    """Sliding-window layers among all of the model's layers, or among a draft head's ``layers``
    (a head copies the model's full-attention layers unless every layer slides)."""
    if layers is None:
        return model.num_sliding_layers
    return layers if model.num_sliding_layers == model.num_layers else 0


def layer_kind_counts(model: ModelSpec, layers: int | None = None) -> dict[str, int]:
    """Layers per attention kind (:meth:`ModelSpec.layer_kinds`) among all of the model's layers, or among a
    draft head's ``layers``: a head copies the model's global kind (full, or sparse MLA with its indexer)
    unless every layer slides."""
    if layers is None:
        return model.layer_kinds()
    if not layers:
        return {}
    if sliding_layers(model, layers):
        return {"sliding": layers}
    return {"sparse" if model.is_sparse_attention else "full": layers}
