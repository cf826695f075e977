"""Model specs: the shapes the cost model reads (:class:`ModelSpec`, with its parameter and cache counts), and
the catalog of models.

The catalog (``simulator/data/models/*.json``) holds the published config.json of each model (the
fields the cost model reads, plus a ``_source`` note), so a catalog model and a user's config.json go
through the same parser (:mod:`simulator.specs.hf_config`).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from simulator.errors import PlannerError, did_you_mean
from simulator.files import read_json_file
from simulator.specs.hf_config import model_fields

MODELS_DIR = Path(__file__).resolve().parent.parent / "data" / "models"


@dataclass(frozen=True)
class ModelSpec:
    """Shapes of a decoder-only transformer (dense or MoE, GQA or MLA attention).

    Letters used in the cost model: D hidden size, H_q / H_kv query / KV heads, d head dim,
    F dense MLP width, E routed experts, k experts per token, F_e expert MLP width.
    """

    name: str
    source: str
    model_type: str
    hidden_size: int  # D
    num_layers: int
    num_heads: int  # H_q
    num_kv_heads: int  # H_kv
    head_dim: int  # d
    intermediate_size: int  # F, dense MLP layers
    vocab_size: int
    tie_word_embeddings: bool = False
    # sliding-window attention: that many layers read at most `sliding_window` keys
    sliding_window: int | None = None
    num_sliding_layers: int = 0
    # multi-head latent attention (DeepSeek): latent KV cache, heads share it
    attention: str = "gqa"  # "gqa" | "mla"
    q_lora_rank: int = 0
    kv_lora_rank: int = 0
    qk_nope_head_dim: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0
    # mixture of experts
    num_experts: int = 0  # E (0: dense)
    experts_per_token: int = 0  # k
    expert_intermediate_size: int = 0  # F_e
    shared_expert_intermediate_size: int = 0  # sum over shared experts
    num_dense_layers: int = 0  # layers with a dense MLP in an MoE model (DeepSeek's first 3)
    expert_weight_dtype: str | None = None  # e.g. gpt-oss ships experts in mxfp4
    # the checkpoint's own precision of every linear layer (DeepSeek-V3's fp8 blocks): the weights' default
    checkpoint_weight_dtype: str | None = None
    # its fp8 weights' scale blocks (quantization_config weight_block_size: DeepSeek-V3's [128, 128]); None: per tensor
    weight_block_size: tuple[int, int] | None = None
    # modules the checkpoint keeps in bf16 beside its quantized linear layers
    # (:func:`simulator.specs.hf_config_fields.bf16_modules`)
    bf16_modules: tuple[str, ...] = ()
    # attention projections (simulator.specs.deployment.attention_projections' names: "q_a", "kv_b", "o", "qkv", ...)
    # the checkpoint's quantization leaves out in every layer (:func:`simulator.specs.hf_config_fields.unquantized_attention`)
    unquantized_attention: tuple[str, ...] = ()
    num_mtp_layers: int = 0  # multi-token-prediction modules shipped with the model
    expert_groups: int = 0  # DeepSeek's n_group: a grouped top-k router picks groups, then experts (0: plain top-k)
    max_position_embeddings: int | None = None  # longest context the model was trained for (None: not given)
    # --- attention families (docs/attention_families.md); every default leaves a model as it was ---
    # chunked local attention (Llama 4): that many layers attend within their chunk of `attention_chunk_size`
    attention_chunk_size: int | None = None
    num_chunked_layers: int = 0
    # global (full-attention) layers with their own shape (Gemma 4): head dim, KV heads, K reused as V
    global_head_dim: int = 0  # 0: head_dim
    num_global_kv_heads: int = 0  # 0: num_kv_heads
    global_k_eq_v: bool = False
    kv_shares_k_and_v: bool = False  # this spec's layers cache K only (set on global_layer_model())
    attn_logit_softcapping: float | None = None  # tanh cap on attention scores (Gemma 2)
    final_logit_softcapping: float | None = None  # tanh cap on the LM head's logits (Gemma 2 / 4)
    attention_output_gate: bool = False  # Qwen3-Next gated attention: q_proj also emits a gate of H_q d
    # linear attention (Gated DeltaNet, Qwen3-Next / Qwen3.5): a recurrent state per sequence instead of a KV cache
    num_linear_layers: int = 0
    linear_num_key_heads: int = 0  # H_k
    linear_num_value_heads: int = 0  # H_v (state heads)
    linear_key_head_dim: int = 0  # d_k
    linear_value_head_dim: int = 0  # d_v
    linear_conv_kernel_dim: int = 0  # short causal convolution over q, k, v
    linear_state_dtype: str = "fp32"  # mamba_ssm_dtype: the recurrent state's element type
    # DeepSeek sparse attention (V3.2): a lightning indexer scores every cached key, MLA reads the top-k
    index_n_heads: int = 0
    index_head_dim: int = 0
    index_topk: int = 0  # 0: dense attention
    # the checkpoint's model classes (config.json 'architectures'): engines choose code paths by them
    architectures: tuple[str, ...] = ()

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    def fp8_blocks(self, dtype: str) -> bool:
        """Whether weights held in ``dtype`` are this checkpoint's block-scaled fp8 ones: the GEMMs over them run
        block-scaled fp8 kernels (:meth:`simulator.specs.hardware.Hardware.peak_flops_per_s`)."""
        return dtype == "fp8" and self.weight_block_size is not None

    def module_dtype(self, module: str, dtype: str) -> str:
        """The precision ``module`` ("embedding", "lm_head", "router", "mtp_fusion") is held in when the model's
        linear layers run in ``dtype``: bf16 where the checkpoint keeps it unquantized and the deployment runs
        the checkpoint's own precision (:attr:`bf16_modules`), else ``dtype``."""
        return "bf16" if module in self.bf16_modules and dtype == self.checkpoint_weight_dtype else dtype

    @property
    def num_full_layers(self) -> int:
        """Layers with full (global) attention: neither windowed, chunked nor linear."""
        return self.num_layers - self.num_sliding_layers - self.num_chunked_layers - self.num_linear_layers

    @property
    def is_sparse_attention(self) -> bool:
        """DeepSeek sparse attention: every MLA layer has an indexer and reads only its top-k keys."""
        return self.index_topk > 0

    @property
    def uniform_attention(self) -> bool:
        """Every attention layer has the model's one shape (full or windowed over the same heads): the
        families the earlier planner priced, with no chunked, linear, sparse or differently shaped layer."""
        return not (self.num_chunked_layers or self.num_linear_layers or self.index_topk
                    or self.has_global_shape)

    @property
    def has_global_shape(self) -> bool:
        return bool((self.global_head_dim and self.global_head_dim != self.head_dim)
                    or (self.num_global_kv_heads and self.num_global_kv_heads != self.num_kv_heads)
                    or self.global_k_eq_v)

    def layer_kinds(self) -> dict[str, int]:
        """Layer count per attention kind: "full" / "sparse" (MLA with an indexer), "sliding", "chunked",
        "linear"; kinds with no layer left out."""
        kinds = {"sparse" if self.is_sparse_attention else "full": self.num_full_layers,
                 "sliding": self.num_sliding_layers, "chunked": self.num_chunked_layers,
                 "linear": self.num_linear_layers}
        return {k: n for k, n in kinds.items() if n}

    def layer_kinds_label(self) -> str:
        """e.g. "gqa: 10 full + 52 sliding(1024)"."""
        windows = {"sliding": self.sliding_window, "chunked": self.attention_chunk_size,
                   "sparse": self.index_topk}
        parts = [f"{n} {k}" + (f"({windows[k]})" if windows.get(k) else "") for k, n in self.layer_kinds().items()]
        return f"{self.attention}: " + " + ".join(parts)

    @property
    def num_moe_layers(self) -> int:
        return self.num_layers - self.num_dense_layers if self.is_moe else 0

    @property
    def num_mlp_dense_layers(self) -> int:
        return self.num_layers - self.num_moe_layers

    # --- parameter counts (elements) -------------------------------------------------------
    def attention_params(self) -> int:
        """Weights of one attention block."""
        D = self.hidden_size
        if self.attention == "mla":
            q_in = D * self.q_lora_rank + self.q_lora_rank * self.num_heads * self.qk_head_dim if self.q_lora_rank \
                else D * self.num_heads * self.qk_head_dim
            kv_in = D * (self.kv_lora_rank + self.qk_rope_head_dim) \
                + self.kv_lora_rank * self.num_heads * (self.qk_nope_head_dim + self.v_head_dim)
            return q_in + kv_in + self.num_heads * self.v_head_dim * D
        d = self.head_dim
        gate = self.num_heads * d if self.attention_output_gate else 0
        kv = 1 if self.kv_shares_k_and_v else 2
        return D * (self.num_heads + kv * self.num_kv_heads) * d + gate * D + self.num_heads * d * D

    def indexer_params(self) -> int:
        """DeepSeek-V3.2's lightning indexer per layer: wq_b [q_lora -> H_i d_i], wk [D -> d_i],
        weights_proj [D -> H_i]."""
        if not self.is_sparse_attention:
            return 0
        return (self.q_lora_rank * self.index_n_heads * self.index_head_dim
                + self.hidden_size * (self.index_head_dim + self.index_n_heads))

    @property
    def linear_qkvz_width(self) -> int:
        """Gated DeltaNet input projection width: q, k (H_k d_k each), v and the output gate z (H_v d_v each)."""
        return 2 * self.linear_num_key_heads * self.linear_key_head_dim \
            + 2 * self.linear_num_value_heads * self.linear_value_head_dim

    def linear_attention_params(self) -> int:
        """One Gated DeltaNet block: in_proj_qkvz [D -> 2 H_k d_k + 2 H_v d_v], in_proj_ba [D -> 2 H_v],
        the depthwise conv over q, k, v, out_proj [H_v d_v -> D]."""
        if not self.num_linear_layers:
            return 0
        D = self.hidden_size
        conv_channels = 2 * self.linear_num_key_heads * self.linear_key_head_dim \
            + self.linear_num_value_heads * self.linear_value_head_dim
        return (D * (self.linear_qkvz_width + 2 * self.linear_num_value_heads)
                + conv_channels * self.linear_conv_kernel_dim
                + self.linear_num_value_heads * self.linear_value_head_dim * D)

    def global_layer_model(self) -> "ModelSpec":
        """The full-attention layers' own shape (Gemma 4: global_head_dim, num_global_key_value_heads), as a
        spec the attention builders read; the model itself where they share the model's shape."""
        return _global_layer_model(self)

    def attention_layers_params(self) -> int:
        """Weights of every layer's attention block (each kind with its own shape)."""
        n_attn = self.num_layers - self.num_linear_layers
        own = self.num_full_layers * (self.global_layer_model().attention_params() - self.attention_params()) \
            if self.has_global_shape else 0
        return (n_attn * (self.attention_params() + self.indexer_params()) + own
                + self.num_linear_layers * self.linear_attention_params())

    @property
    def qk_head_dim(self) -> int:
        return self.qk_nope_head_dim + self.qk_rope_head_dim

    def dense_mlp_params(self) -> int:
        return 3 * self.hidden_size * self.intermediate_size

    def expert_params(self) -> int:
        """One routed expert (gated MLP: gate, up, down)."""
        return 3 * self.hidden_size * self.expert_intermediate_size

    def shared_expert_params(self) -> int:
        return 3 * self.hidden_size * self.shared_expert_intermediate_size

    def embedding_params(self) -> int:
        return self.vocab_size * self.hidden_size * (1 if self.tie_word_embeddings else 2)

    def total_params(self) -> int:
        moe = self.num_moe_layers * (self.num_experts * self.expert_params() + self.shared_expert_params()
                                     + self.hidden_size * self.num_experts)
        return (self.attention_layers_params() + self.num_mlp_dense_layers * self.dense_mlp_params()
                + moe + self.embedding_params())

    def active_params(self) -> int:
        """Parameters one token touches (routed experts: k of E)."""
        moe = self.num_moe_layers * (self.experts_per_token * self.expert_params() + self.shared_expert_params())
        return (self.attention_layers_params() + self.num_mlp_dense_layers * self.dense_mlp_params()
                + moe + self.embedding_params())

    def kv_elements_per_token(self) -> tuple[int, int]:
        """KV-cache elements per token per layer: (per KV head-group unit, shared latent).

        GQA: 2 * H_kv * d (split over TP ranks). MLA: kv_lora_rank + rope dim (one latent shared by
        all heads, replicated on every TP rank).
        """
        if self.attention == "mla":
            return 0, self.kv_lora_rank + self.qk_rope_head_dim
        return (1 if self.kv_shares_k_and_v else 2) * self.num_kv_heads * self.head_dim, 0

    def linear_state_elements(self) -> tuple[int, int]:
        """One sequence's recurrent state per Gated DeltaNet layer: (the delta-rule state H_v x d_k x d_v,
        the conv state (kernel - 1) x (2 H_k d_k + H_v d_v)), whole model (split over TP by heads)."""
        state = self.linear_num_value_heads * self.linear_key_head_dim * self.linear_value_head_dim
        conv = (self.linear_conv_kernel_dim - 1) * (2 * self.linear_num_key_heads * self.linear_key_head_dim
                                                    + self.linear_num_value_heads * self.linear_value_head_dim)
        return state, conv


@lru_cache(maxsize=None)
def _global_layer_model(model: ModelSpec) -> ModelSpec:
    """:meth:`ModelSpec.global_layer_model`, one object per model (the shared-op scopes key on identity)."""
    if not model.has_global_shape:
        return model
    from dataclasses import replace
    return replace(model, head_dim=model.global_head_dim or model.head_dim,
                   num_kv_heads=model.num_global_kv_heads or model.num_kv_heads,
                   global_head_dim=0, num_global_kv_heads=0, global_k_eq_v=False,
                   kv_shares_k_and_v=model.global_k_eq_v)


def _check_spec(spec: ModelSpec, origin: str) -> ModelSpec:
    """Cross-field sense: heads divide, top-k within the experts, dense layers within the layers."""
    if spec.attention == "gqa":
        if spec.num_kv_heads > spec.num_heads or spec.num_heads % spec.num_kv_heads:
            raise PlannerError(f"{origin}: num_attention_heads={spec.num_heads} is not a multiple of"
                               f" num_key_value_heads={spec.num_kv_heads}; grouped-query attention needs it")
    if spec.is_moe:
        if spec.experts_per_token > spec.num_experts:
            raise PlannerError(f"{origin}: num_experts_per_tok={spec.experts_per_token} exceeds the"
                               f" {spec.num_experts} routed experts; top-k must be <= the expert count")
        if spec.num_dense_layers >= spec.num_layers:
            raise PlannerError(f"{origin}: {spec.num_dense_layers} dense layers (first_k_dense_replace /"
                               f" decoder_sparse_step / mlp_only_layers) of {spec.num_layers}: no layer is left"
                               " for the experts")
    if spec.num_sliding_layers > spec.num_layers:
        raise PlannerError(f"{origin}: {spec.num_sliding_layers} sliding-window layers but only {spec.num_layers} layers")
    if spec.num_full_layers < 0:
        raise PlannerError(f"{origin}: {spec.num_sliding_layers} sliding, {spec.num_chunked_layers} chunked and"
                           f" {spec.num_linear_layers} linear-attention layers exceed the {spec.num_layers} layers")
    if spec.has_global_shape and spec.num_global_kv_heads and spec.num_heads % spec.num_global_kv_heads:
        raise PlannerError(f"{origin}: num_attention_heads={spec.num_heads} is not a multiple of"
                           f" num_global_key_value_heads={spec.num_global_kv_heads}")
    if spec.num_linear_layers and spec.linear_num_value_heads % spec.linear_num_key_heads:
        raise PlannerError(f"{origin}: linear_num_value_heads={spec.linear_num_value_heads} is not a multiple of"
                           f" linear_num_key_heads={spec.linear_num_key_heads}")
    if spec.is_sparse_attention and not spec.q_lora_rank:
        raise PlannerError(f"{origin}: DeepSeek sparse attention needs q_lora_rank (its indexer reads the query latent)")
    return spec


def model_from_hf_config(cfg: dict, name: str, origin: str) -> ModelSpec:
    """Parse a Hugging Face config.json (already loaded) into a ModelSpec.

    Every field the cost model reads is type- and range-checked (positive integers, booleans,
    objects: :func:`simulator.specs.hf_config.model_fields`), and the fields must agree: H_q a multiple
    of H_kv, top-k <= E, dense layers <= L. A model type or layer kind the planner has no price for is
    refused by name.
    """
    return _check_spec(ModelSpec(**model_fields(cfg, name, origin)), origin)


@lru_cache(maxsize=None)
def list_models() -> tuple[str, ...]:
    return tuple(sorted(p.stem for p in MODELS_DIR.glob("*.json")))


def load_model_config(path: str | Path) -> ModelSpec:
    """Read a Hugging Face config.json file."""
    path = Path(path)
    cfg = read_json_file(path, "model config.json")
    name = path.parent.name if path.name == "config.json" else path.stem
    return model_from_hf_config(_with_hf_quant_config(cfg, path), name=name, origin=str(path))


def _with_hf_quant_config(cfg: dict, path: Path) -> dict:
    """A checkpoint's config.json with the quantization its ModelOpt export states beside it (hf_quant_config.json's
    "quantization": quant_algo, exclude_modules; vLLM's modelopt config reads that file the same way) where the
    config.json itself has no quantization_config."""
    side = path.parent / "hf_quant_config.json"
    if path.name != "config.json" or not isinstance(cfg, dict) or "quantization_config" in cfg or not side.is_file():
        return cfg
    quant = read_json_file(side, "ModelOpt hf_quant_config.json")
    section = quant.get("quantization") if isinstance(quant, dict) else None
    if not isinstance(section, dict):
        raise PlannerError(f"{side}: expected an object with a \"quantization\" object (quant_algo, exclude_modules)")
    return cfg | {"quantization_config": {"quant_method": "modelopt", **section}}


@lru_cache(maxsize=None)
def load_model(name: str) -> ModelSpec:
    """A catalog name (``llama-3.1-8b``) or a path to a config.json."""
    if name in list_models():
        cfg = json.loads((MODELS_DIR / f"{name}.json").read_text())
        return model_from_hf_config(cfg, name=name, origin=f"model catalog entry '{name}'")
    if name.endswith(".json") or "/" in name:
        return load_model_config(name)
    raise PlannerError(f"unknown model '{name}'{did_you_mean(name, list_models())}")
