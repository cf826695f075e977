"""Model specs, read from Hugging Face ``config.json`` files.

The catalog (``simulator/data/models/*.json``) holds the published config.json of each model (the
fields the cost model reads, plus a ``_source`` note), so a catalog model and a user's config.json go
through the same parser.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from simulator.errors import PlannerError, did_you_mean
from simulator.files import read_json_file

MODELS_DIR = Path(__file__).resolve().parent.parent / "data" / "models"

SUPPORTED_MODEL_TYPES = (
    "llama", "mistral", "mixtral", "qwen2", "qwen3", "qwen2_moe", "qwen3_moe",
    "cohere", "cohere2", "deepseek_v3", "deepseek_v2", "gpt_oss",
    # the attention families of late 2025-2026 (docs/attention_families.md)
    "gemma2", "gemma3", "gemma3_text", "gemma4", "gemma4_text",
    "qwen3_next", "qwen3_5", "qwen3_5_text", "qwen3_5_moe", "qwen3_5_moe_text",
    "deepseek_v32", "kimi_k2", "glm4_moe", "minimax_m2", "llama4", "llama4_text",
)

# Model types whose layers the planner has no price for: refused naming the layer kind it lacks, never priced
# as another family.
UNPRICED_MODEL_TYPES = {
    "minimax": "lightning attention (MiniMax-Text-01 / M1 linear-attention layers)",
    "minimax_m1": "lightning attention (MiniMax-M1 linear-attention layers)",
    "kimi_linear": "Kimi Delta Attention (KDA linear-attention layers)",
    "nemotron_h": "Mamba-2 layers",
    "falcon_h1": "Mamba-2 layers",
    "jamba": "Mamba layers",
    "mamba": "Mamba layers",
    "mamba2": "Mamba-2 layers",
    "deepseek_v4": "compressed sparse attention (compress_ratios)",
    "gemma3n": "per-layer input embeddings and KV-shared layers (Gemma 3n)",
}

# Where a config.json wraps its text model in `text_config` (multimodal releases): these top-level fields
# still apply to the text model when the text_config does not repeat them.
_WRAPPER_FIELDS = ("_source", "tie_word_embeddings", "quantization_config")

# Fields a family's transformers config class fills in when config.json omits them, as the engines load them:
# google/gemma-3-27b-it's published config.json gives neither vocab_size nor the sliding-window pattern in its
# text_config (Gemma3TextConfig: vocab_size 262208, sliding_window_pattern 6, i.e. every 6th layer global);
# Cohere2Config: sliding_window_pattern 4.
_CLASS_DEFAULTS = {
    "gemma3": {"vocab_size": 262208, "sliding_window_pattern": 6},
    "gemma3_text": {"vocab_size": 262208, "sliding_window_pattern": 6},
    "cohere2": {"sliding_window_pattern": 4},
}


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
    # modules the checkpoint keeps in bf16 beside its quantized linear layers (:func:`_bf16_modules`)
    bf16_modules: tuple[str, ...] = ()
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


# --- config.json parsing -------------------------------------------------------------------

# Largest value any field may hold: well above every published model (DeepSeek-V3: 256 experts,
# vocab 129280, hidden 7168), low enough that products of fields stay exact in float64.
_FIELD_MAX = 1 << 24


def _int_field(value, key: str, origin: str, minimum: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not minimum <= value <= _FIELD_MAX:
        kind = "a positive integer" if minimum >= 1 else "an integer >= 0"
        raise PlannerError(f"{origin}: field '{key}' must be {kind} (at most {_FIELD_MAX}), got {value!r}")
    return value


def _need(cfg: dict, key: str, origin: str, kind=int):
    if key not in cfg or cfg[key] is None:
        raise PlannerError(f"{origin}: missing field '{key}' (model_type '{cfg.get('model_type')}')")
    return _int_field(cfg[key], key, origin, 1)


def _opt(cfg: dict, key: str, origin: str, default: int = 0, minimum: int = 0) -> int:
    """An optional integer field: absent or null -> default; otherwise it must be an integer >= minimum."""
    value = cfg.get(key)
    if value is None:
        return default
    return _int_field(value, key, origin, minimum)


def _opt_bool(cfg: dict, key: str, origin: str, default: bool) -> bool:
    value = cfg.get(key, default)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise PlannerError(f"{origin}: field '{key}' must be true or false, got {value!r}")
    return value


# layer_types entries the planner prices, by the kind they are priced as
_LAYER_TYPES = {"full_attention": "full", "sliding_attention": "sliding", "chunked_attention": "chunked",
                "linear_attention": "linear"}
_QWEN_NO_SLIDING = ("qwen2", "qwen3", "qwen2_moe", "qwen3_moe", "qwen3_next", "qwen3_5", "qwen3_5_text",
                    "qwen3_5_moe", "qwen3_5_moe_text")
_HYBRID_LINEAR = ("qwen3_next", "qwen3_5", "qwen3_5_text", "qwen3_5_moe", "qwen3_5_moe_text")


def _layer_types(cfg: dict, num_layers: int, origin: str) -> list[str] | None:
    """The config's per-layer kinds (None: not given); a kind the planner cannot price is refused by name."""
    layer_types = cfg.get("layer_types")
    if layer_types is None:
        return None
    if not isinstance(layer_types, list) or not all(isinstance(t, str) for t in layer_types):
        raise PlannerError(f"{origin}: field 'layer_types' must be a list of strings such as"
                           f" \"sliding_attention\" / \"full_attention\", got {layer_types!r}")
    if not layer_types:
        return None
    if len(layer_types) != num_layers:
        raise PlannerError(f"{origin}: 'layer_types' lists {len(layer_types)} layers but"
                           f" num_hidden_layers is {num_layers}; give one entry per layer")
    unknown = sorted({t for t in layer_types if t not in _LAYER_TYPES})
    if unknown:
        raise PlannerError(f"{origin}: layer kind {unknown[0]!r} in 'layer_types' has no price in the planner"
                           f" (it prices {', '.join(_LAYER_TYPES)}); no answer rather than pricing it as another kind")
    return layer_types


def _sliding_layers(cfg: dict, num_layers: int, origin: str, layer_types: list[str] | None) -> tuple[int | None, int]:
    """(window, number of sliding-window layers) from the several ways configs say it."""
    window = cfg.get("sliding_window")
    if window is None or window is False or window == 0:
        return None, 0
    window = _int_field(window, "sliding_window", origin, 1)
    if _opt_bool(cfg, "use_sliding_window", origin, True) is False:
        return None, 0
    if layer_types is not None:
        return window, sum(1 for t in layer_types if t == "sliding_attention")
    # newer transformers write the pattern as '_sliding_window_pattern' (beside layer_types)
    key = "sliding_window_pattern" if cfg.get("sliding_window_pattern") is not None else "_sliding_window_pattern"
    pattern = _opt(cfg, key, origin, 0, 1)
    if pattern:  # Cohere2 / Gemma: every `pattern`-th layer is global
        return window, num_layers - num_layers // pattern
    if cfg.get("model_type") == "gemma2":  # Gemma 2 alternates: even layers slide (transformers Gemma2Config)
        return window, num_layers - num_layers // 2
    if cfg.get("model_type") in _QWEN_NO_SLIDING:
        return None, 0  # Qwen configs carry sliding_window but use_sliding_window defaults to false
    return window, num_layers  # Mistral v0.1 style: every layer


def _chunked_layers(cfg: dict, num_layers: int, origin: str, layer_types: list[str] | None) -> tuple[int | None, int]:
    """(chunk, number of chunked-attention layers): Llama 4 attends within chunks of `attention_chunk_size`
    on its RoPE layers (no_rope_layers[i] = 1), and over the whole context on the NoPE ones (every
    `no_rope_layer_interval`-th layer, 4 by default: transformers Llama4TextConfig)."""
    chunk = _opt(cfg, "attention_chunk_size", origin)
    if not chunk:
        if layer_types is not None and "chunked_attention" in layer_types:
            raise PlannerError(f"{origin}: 'layer_types' lists chunked_attention layers but 'attention_chunk_size'"
                               " is not given; give the chunk length")
        return None, 0
    if layer_types is not None and "chunked_attention" in layer_types:
        return chunk, sum(1 for t in layer_types if t == "chunked_attention")
    rope = cfg.get("no_rope_layers")
    if rope:
        if not isinstance(rope, list) or len(rope) != num_layers or any(v not in (0, 1) for v in rope):
            raise PlannerError(f"{origin}: field 'no_rope_layers' must list 0 or 1 for each of the {num_layers}"
                               f" layers (1: RoPE and chunked attention), got {rope!r}")
        return chunk, sum(rope)
    interval = _opt(cfg, "no_rope_layer_interval", origin, 4, 1)
    return chunk, sum(1 for i in range(num_layers) if (i + 1) % interval)


def _linear_layers(cfg: dict, num_layers: int, origin: str, layer_types: list[str] | None) -> int:
    """Gated DeltaNet layers of a hybrid: from layer_types, else all but every `full_attention_interval`-th."""
    if layer_types is not None:
        return sum(1 for t in layer_types if t == "linear_attention")
    if cfg.get("model_type") not in _HYBRID_LINEAR:
        return 0
    interval = _opt(cfg, "full_attention_interval", origin, 4, 1)
    return num_layers - num_layers // interval


def _opt_float(cfg: dict, key: str, origin: str) -> float | None:
    """An optional positive number (absent, null or 0: None)."""
    value = cfg.get(key)
    if value is None or value == 0:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < 1e6:
        raise PlannerError(f"{origin}: field '{key}' must be a positive number or null, got {value!r}")
    return float(value)


def _quant_method(cfg: dict, origin: str) -> str | None:
    quant = cfg.get("quantization_config")
    if quant is None:
        return None
    if not isinstance(quant, dict):
        raise PlannerError(f"{origin}: field 'quantization_config' must be an object such as"
                           f" {{\"quant_method\": \"fp8\"}}, got {quant!r}")
    method = quant.get("quant_method")
    if method is not None and not isinstance(method, str):
        raise PlannerError(f"{origin}: 'quantization_config.quant_method' must be a string, got {method!r}")
    return method


# module names that, listed as left unquantized, keep a checkpoint's attention out of its quantization
_ATTENTION_MODULES = ("attn", "attention")


def _checkpoint_weight_dtype(cfg: dict, quant: str | None) -> str | None:
    """"fp8" where the checkpoint stores every linear layer in fp8 (quant_method fp8 and no attention module among
    those left unquantized: DeepSeek-V3 / R1 / V3.2, Kimi-K2, MiniMax-M2 as published), which engines load as
    fp8 weights; None otherwise (gpt-oss's mxfp4 leaves self_attn out: its experts alone, expert_weight_dtype)."""
    if quant != "fp8":
        return None
    q = cfg.get("quantization_config") or {}
    kept = [m for key in ("modules_to_not_convert", "ignored_layers", "ignore") for m in (q.get(key) or [])
            if isinstance(m, str)]
    return None if any(a in m for m in kept for a in _ATTENTION_MODULES) else "fp8"


# What an fp8 checkpoint (quant_method fp8) leaves in bf16: only its Linear layers carry fp8 weights and
# scales. DeepSeek-V3's reference code builds the output head with dtype=torch.get_default_dtype() (bf16) and
# the router (Gate) as a plain bf16 parameter (inference/model.py); V3.2's notes "lm_head in the checkpoint is
# stored in bf16"; the engines load them unquantized (vLLM's Fp8Config quantizes LinearBase and FusedMoE
# layers only, so the embedding and ParallelLMHead stay bf16, and its DeepSeek / Qwen3-MoE / MiniMax-M2 routers
# are ReplicatedLinear with quant_config=None), and MTP's eh_proj is a plain nn.Linear in vLLM's deepseek_mtp.py
# and SGLang's deepseek_nextn.py (it cannot hold fp8 weights).
_FP8_CHECKPOINT_BF16_MODULES = ("embedding", "lm_head", "router", "mtp_fusion")


def _bf16_modules(checkpoint_dtype: str | None) -> tuple[str, ...]:
    """The modules a checkpoint keeps in bf16 beside its own quantized layers (:meth:`ModelSpec.module_dtype`)."""
    return _FP8_CHECKPOINT_BF16_MODULES if checkpoint_dtype == "fp8" else ()


def _weight_block_size(cfg: dict, quant: str | None, origin: str) -> tuple[int, int] | None:
    """An fp8 checkpoint's weight scale blocks [rows, columns] (quantization_config weight_block_size), or None."""
    block = (cfg.get("quantization_config") or {}).get("weight_block_size") if quant == "fp8" else None
    if block is None:
        return None
    if (not isinstance(block, list) or len(block) != 2
            or not all(isinstance(b, int) and not isinstance(b, bool) and b > 0 for b in block)):
        raise PlannerError(f"{origin}: 'quantization_config.weight_block_size' must be two positive integers such as"
                           f" [128, 128], got {block!r}")
    return block[0], block[1]


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


def _text_model_config(cfg: dict, origin: str) -> dict:
    """The text model's config of a multimodal release (Gemma 3 / 4, Llama 4, Qwen3.5: `text_config`), with the
    wrapper's source, tied-embedding flag and quantization where the text part does not repeat them."""
    text = cfg.get("text_config")
    if text is None:
        return cfg
    if not isinstance(text, dict):
        raise PlannerError(f"{origin}: field 'text_config' must be an object (the text model's config), got {text!r}")
    merged = dict(text)
    for key in _WRAPPER_FIELDS:
        if key in cfg and key not in merged:
            merged[key] = cfg[key]
    merged.setdefault("model_type", cfg.get("model_type"))
    return merged


def model_from_hf_config(cfg: dict, name: str, origin: str) -> ModelSpec:
    """Parse a Hugging Face config.json (already loaded) into a ModelSpec.

    Every field the cost model reads is type- and range-checked (positive integers, booleans,
    objects), and the fields must agree: H_q a multiple of H_kv, top-k <= E, dense layers <= L.
    A model type or layer kind the planner has no price for is refused by name.
    """
    if not isinstance(cfg, dict):
        raise PlannerError(f"{origin}: expected a JSON object")
    if cfg.get("model_type") is None:
        raise PlannerError(f"{origin}: missing field 'model_type' (is this a Hugging Face config.json?)")
    cfg = _text_model_config(cfg, origin)
    model_type = cfg.get("model_type")
    if isinstance(model_type, str) and model_type in _CLASS_DEFAULTS:
        cfg = _CLASS_DEFAULTS[model_type] | {k: v for k, v in cfg.items() if v is not None}
    if isinstance(model_type, str) and model_type in UNPRICED_MODEL_TYPES:
        raise PlannerError(f"{origin}: model_type {model_type!r} has {UNPRICED_MODEL_TYPES[model_type]}, a layer kind"
                           " the planner has no price for; it will not price them as another kind")
    if not isinstance(model_type, str) or model_type not in SUPPORTED_MODEL_TYPES:
        raise PlannerError(f"{origin}: unknown model_type {model_type!r}"
                           f" (supported: {', '.join(SUPPORTED_MODEL_TYPES)})")
    _refuse_unpriced_parts(cfg, origin, model_type)
    common, quant = _common_fields(cfg, name, origin, model_type)
    if model_type in ("deepseek_v3", "deepseek_v2", "kimi_k2", "deepseek_v32"):
        spec = ModelSpec(**common, **_deepseek_fields(cfg, origin, quant),
                         **(_indexer_fields(cfg, origin) if model_type == "deepseek_v32" else {}))
    elif model_type == "glm4_moe":
        spec = ModelSpec(**common, intermediate_size=_need(cfg, "intermediate_size", origin),
                         **_deepseek_moe_fields(cfg, origin, quant))
    elif model_type in ("mixtral", "gpt_oss", "minimax_m2"):
        spec = ModelSpec(**common, **_mixtral_fields(cfg, origin, quant))
    elif model_type in ("llama4", "llama4_text"):
        spec = ModelSpec(**common, **_llama4_fields(cfg, origin, common["num_layers"]))
    elif model_type in ("qwen2_moe", "qwen3_moe", "qwen3_next", "qwen3_5_moe", "qwen3_5_moe_text"):
        spec = ModelSpec(**common, **_qwen_moe_fields(cfg, origin, common["num_layers"]))
    else:  # dense: llama, mistral, qwen2, qwen3, cohere, cohere2, gemma 2 / 3 / 4, qwen3_5
        spec = ModelSpec(**common, intermediate_size=_need(cfg, "intermediate_size", origin))
    return _check_spec(spec, origin)


def _refuse_unpriced_parts(cfg: dict, origin: str, model_type: str) -> None:
    """Parts of a supported family the planner has no price for (one line naming the part, never a guess)."""
    parts = []
    if model_type == "minimax_m2":
        types = cfg.get("attn_type_list")
        if types is not None and (not isinstance(types, list) or any(t not in (0, 1) for t in types)):
            raise PlannerError(f"{origin}: field 'attn_type_list' must list 0 (lightning) or 1 (softmax) per layer,"
                               f" got {types!r}")
        if types and 0 in types:
            parts.append("lightning attention layers (attn_type_list 0)")
    if model_type.startswith("gemma4"):
        if _opt_bool(cfg, "enable_moe_block", origin, False):
            parts.append("the Gemma 4 MoE block (enable_moe_block)")
        if _opt(cfg, "hidden_size_per_layer_input", origin):
            parts.append("per-layer input embeddings (hidden_size_per_layer_input)")
        if _opt(cfg, "num_kv_shared_layers", origin):
            parts.append("KV-shared layers (num_kv_shared_layers)")
    if model_type == "deepseek_v32" and _opt(cfg, "index_topk_freq", origin, 1, 1) > 1:
        parts.append("an indexer shared across layers (index_topk_freq)")
    if parts:
        raise PlannerError(f"{origin}: {parts[0]} has no price in the planner; it will not price it as another"
                           " layer kind")


def _common_fields(cfg: dict, name: str, origin: str, model_type: str) -> tuple[dict, str | None]:
    """The fields every family has (attention, vocabulary, windows and layer kinds, trained length) and the
    checkpoint's quantization method."""
    D = _need(cfg, "hidden_size", origin)
    L = _need(cfg, "num_hidden_layers", origin)
    H = _need(cfg, "num_attention_heads", origin)
    H_kv = _opt(cfg, "num_key_value_heads", origin, H, 1)
    if cfg.get("head_dim") is None and D % H:
        raise PlannerError(f"{origin}: hidden_size={D} is not a multiple of num_attention_heads={H};"
                           " give 'head_dim' explicitly")
    head_dim = _opt(cfg, "head_dim", origin, D // H, 1)
    vocab = _need(cfg, "vocab_size", origin)
    tie = _opt_bool(cfg, "tie_word_embeddings", origin, model_type.startswith(("cohere", "gemma")))
    layer_types = _layer_types(cfg, L, origin)
    window, n_sliding = _sliding_layers(cfg, L, origin, layer_types)
    chunk, n_chunked = _chunked_layers(cfg, L, origin, layer_types)
    n_linear = _linear_layers(cfg, L, origin, layer_types)
    quant = _quant_method(cfg, origin)
    source = cfg.get("_source", origin)
    max_pos = _opt(cfg, "max_position_embeddings", origin, 0, 1) or None
    common = dict(name=name, source=source if isinstance(source, str) else origin, model_type=model_type,
                  hidden_size=D, num_layers=L, num_heads=H, num_kv_heads=H_kv, head_dim=head_dim, vocab_size=vocab,
                  tie_word_embeddings=tie, sliding_window=window, num_sliding_layers=n_sliding,
                  max_position_embeddings=max_pos, attention_chunk_size=chunk, num_chunked_layers=n_chunked,
                  checkpoint_weight_dtype=_checkpoint_weight_dtype(cfg, quant),
                  bf16_modules=_bf16_modules(_checkpoint_weight_dtype(cfg, quant)),
                  weight_block_size=_weight_block_size(cfg, quant, origin),
                  attn_logit_softcapping=_opt_float(cfg, "attn_logit_softcapping", origin),
                  final_logit_softcapping=_opt_float(cfg, "final_logit_softcapping", origin))
    if model_type.startswith("gemma4"):
        common |= dict(global_head_dim=_opt(cfg, "global_head_dim", origin),
                       num_global_kv_heads=_opt(cfg, "num_global_key_value_heads", origin),
                       global_k_eq_v=_opt_bool(cfg, "attention_k_eq_v", origin, False))
    if model_type in _HYBRID_LINEAR:
        common |= dict(attention_output_gate=_opt_bool(cfg, "attn_output_gate", origin, True),
                       **_linear_fields(cfg, origin, n_linear))
    elif n_linear:
        raise PlannerError(f"{origin}: 'layer_types' lists linear_attention layers, but the planner prices them"
                           f" (Gated DeltaNet) only for Qwen3-Next / Qwen3.5 configs, not model_type {model_type!r}")
    return common, quant


_STATE_DTYPES = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}


def _linear_fields(cfg: dict, origin: str, n_linear: int) -> dict:
    """Gated DeltaNet layers (Qwen3-Next / Qwen3.5): heads and dims of the recurrent state and the short conv."""
    if not n_linear:
        return {}
    state_dtype = cfg.get("mamba_ssm_dtype") or "float32"
    if not isinstance(state_dtype, str) or state_dtype not in _STATE_DTYPES:
        raise PlannerError(f"{origin}: field 'mamba_ssm_dtype' must be one of {', '.join(_STATE_DTYPES)},"
                           f" got {state_dtype!r}")
    return dict(num_linear_layers=n_linear, num_mtp_layers=_opt(cfg, "mtp_num_hidden_layers", origin),
                linear_num_key_heads=_need(cfg, "linear_num_key_heads", origin),
                linear_num_value_heads=_need(cfg, "linear_num_value_heads", origin),
                linear_key_head_dim=_need(cfg, "linear_key_head_dim", origin),
                linear_value_head_dim=_need(cfg, "linear_value_head_dim", origin),
                linear_conv_kernel_dim=_need(cfg, "linear_conv_kernel_dim", origin),
                linear_state_dtype=_STATE_DTYPES[state_dtype])


def _indexer_fields(cfg: dict, origin: str) -> dict:
    """DeepSeek-V3.2's lightning indexer and its top-k (DeepSeek sparse attention)."""
    return dict(index_n_heads=_need(cfg, "index_n_heads", origin), index_head_dim=_need(cfg, "index_head_dim", origin),
                index_topk=_need(cfg, "index_topk", origin))


def _llama4_fields(cfg: dict, origin: str, L: int) -> dict:
    """Llama 4: routed experts (intermediate_size wide) + one shared expert of the same width on every
    `interleave_moe_layer_step`-th layer (or the listed moe_layers); the others a dense MLP of
    intermediate_size_mlp (transformers Llama4TextConfig / Llama4TextMoe)."""
    step = _opt(cfg, "interleave_moe_layer_step", origin, 1, 1)
    moe_layers = cfg.get("moe_layers")
    if moe_layers is not None and (not isinstance(moe_layers, list) or not all(
            isinstance(i, int) and not isinstance(i, bool) and 0 <= i < L for i in moe_layers)):
        raise PlannerError(f"{origin}: field 'moe_layers' must be a list of layer indices in [0, {L}), got {moe_layers!r}")
    n_moe = len(set(moe_layers)) if moe_layers else len(range(step - 1, L, step))
    F_e = _need(cfg, "intermediate_size", origin)
    return dict(intermediate_size=_opt(cfg, "intermediate_size_mlp", origin, F_e, 1),
                num_experts=_need(cfg, "num_local_experts", origin),
                experts_per_token=_need(cfg, "num_experts_per_tok", origin),
                expert_intermediate_size=F_e, shared_expert_intermediate_size=F_e, num_dense_layers=L - n_moe)


def _deepseek_fields(cfg: dict, origin: str, quant: str | None) -> dict:
    """DeepSeek V2 / V3 / V3.2, Kimi-K2: MLA attention, routed + shared experts, dense first layers, MTP layers."""
    return dict(
        intermediate_size=_need(cfg, "intermediate_size", origin), attention="mla",
        q_lora_rank=_opt(cfg, "q_lora_rank", origin), kv_lora_rank=_need(cfg, "kv_lora_rank", origin),
        qk_nope_head_dim=_need(cfg, "qk_nope_head_dim", origin),
        qk_rope_head_dim=_need(cfg, "qk_rope_head_dim", origin), v_head_dim=_need(cfg, "v_head_dim", origin),
        **_deepseek_moe_fields(cfg, origin, quant))


def _deepseek_moe_fields(cfg: dict, origin: str, quant: str | None) -> dict:
    """DeepSeek-style MoE (also GLM-4.5 / 4.6): routed + shared experts, dense first layers, MTP layers."""
    E = _need(cfg, "n_routed_experts", origin)
    F_e = _need(cfg, "moe_intermediate_size", origin)
    return dict(
        num_experts=E, experts_per_token=_need(cfg, "num_experts_per_tok", origin),
        expert_intermediate_size=F_e, shared_expert_intermediate_size=_opt(cfg, "n_shared_experts", origin) * F_e,
        num_dense_layers=_opt(cfg, "first_k_dense_replace", origin),
        num_mtp_layers=_opt(cfg, "num_nextn_predict_layers", origin),
        expert_groups=_opt(cfg, "n_group", origin) if _opt(cfg, "n_group", origin) > 1 else 0,
        expert_weight_dtype="fp8" if quant == "fp8" else None,
    )


def _mixtral_fields(cfg: dict, origin: str, quant: str | None) -> dict:
    """Mixtral / gpt-oss: every layer routed, experts as wide as the dense FFN would be."""
    E = _need(cfg, "num_local_experts", origin)
    return dict(
        intermediate_size=_need(cfg, "intermediate_size", origin), num_experts=E,
        experts_per_token=_need(cfg, "num_experts_per_tok", origin),
        expert_intermediate_size=_need(cfg, "intermediate_size", origin),
        expert_weight_dtype=quant if quant in ("mxfp4", "fp8") else None,  # MiniMax-M2 ships fp8 experts
    )


def _qwen_moe_fields(cfg: dict, origin: str, L: int) -> dict:
    """Qwen2-MoE / Qwen3-MoE: dense layers from decoder_sparse_step and mlp_only_layers."""
    E = _need(cfg, "num_experts", origin)
    step = _opt(cfg, "decoder_sparse_step", origin, 1, 1)
    mlp_only = cfg.get("mlp_only_layers") or []
    if not isinstance(mlp_only, list) or not all(isinstance(i, int) and not isinstance(i, bool)
                                                 and 0 <= i < L for i in mlp_only):
        raise PlannerError(f"{origin}: field 'mlp_only_layers' must be a list of layer indices in"
                           f" [0, {L}), got {mlp_only!r}")
    mlp_only = set(mlp_only)
    dense = sum(1 for i in range(L) if i in mlp_only or (i + 1) % step != 0)
    return dict(
        intermediate_size=_opt(cfg, "intermediate_size", origin), num_experts=E,
        experts_per_token=_need(cfg, "num_experts_per_tok", origin),
        expert_intermediate_size=_need(cfg, "moe_intermediate_size", origin),
        shared_expert_intermediate_size=_opt(cfg, "shared_expert_intermediate_size", origin),
        num_dense_layers=dense,
    )


@lru_cache(maxsize=None)
def list_models() -> tuple[str, ...]:
    return tuple(sorted(p.stem for p in MODELS_DIR.glob("*.json")))


def load_model_config(path: str | Path) -> ModelSpec:
    """Read a Hugging Face config.json file."""
    path = Path(path)
    cfg = read_json_file(path, "model config.json")
    name = path.parent.name if path.name == "config.json" else path.stem
    return model_from_hf_config(cfg, name=name, origin=str(path))


@lru_cache(maxsize=None)
def load_model(name: str) -> ModelSpec:
    """A catalog name (``llama-3.1-8b``) or a path to a config.json."""
    if name in list_models():
        cfg = json.loads((MODELS_DIR / f"{name}.json").read_text())
        return model_from_hf_config(cfg, name=name, origin=f"model catalog entry '{name}'")
    if name.endswith(".json") or "/" in name:
        return load_model_config(name)
    raise PlannerError(f"unknown model '{name}'{did_you_mean(name, list_models())}")
