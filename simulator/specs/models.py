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
)


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
    num_mtp_layers: int = 0  # multi-token-prediction modules shipped with the model
    expert_groups: int = 0  # DeepSeek's n_group: a grouped top-k router picks groups, then experts (0: plain top-k)
    max_position_embeddings: int | None = None  # longest context the model was trained for (None: not given)

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

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
        return D * (self.num_heads + 2 * self.num_kv_heads) * d + self.num_heads * d * D

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
        return (self.num_layers * self.attention_params() + self.num_mlp_dense_layers * self.dense_mlp_params()
                + moe + self.embedding_params())

    def active_params(self) -> int:
        """Parameters one token touches (routed experts: k of E)."""
        moe = self.num_moe_layers * (self.experts_per_token * self.expert_params() + self.shared_expert_params())
        return (self.num_layers * self.attention_params() + self.num_mlp_dense_layers * self.dense_mlp_params()
                + moe + self.embedding_params())

    def kv_elements_per_token(self) -> tuple[int, int]:
        """KV-cache elements per token per layer: (per KV head-group unit, shared latent).

        GQA: 2 * H_kv * d (split over TP ranks). MLA: kv_lora_rank + rope dim (one latent shared by
        all heads, replicated on every TP rank).
        """
        if self.attention == "mla":
            return 0, self.kv_lora_rank + self.qk_rope_head_dim
        return 2 * self.num_kv_heads * self.head_dim, 0


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


def _sliding_layers(cfg: dict, num_layers: int, origin: str) -> tuple[int | None, int]:
    """(window, number of sliding-window layers) from the several ways configs say it."""
    window = cfg.get("sliding_window")
    if window is None or window is False or window == 0:
        return None, 0
    window = _int_field(window, "sliding_window", origin, 1)
    if _opt_bool(cfg, "use_sliding_window", origin, True) is False:
        return None, 0
    layer_types = cfg.get("layer_types")
    if layer_types is not None:
        if not isinstance(layer_types, list) or not all(isinstance(t, str) for t in layer_types):
            raise PlannerError(f"{origin}: field 'layer_types' must be a list of strings such as"
                               f" \"sliding_attention\" / \"full_attention\", got {layer_types!r}")
        if layer_types:
            if len(layer_types) != num_layers:
                raise PlannerError(f"{origin}: 'layer_types' lists {len(layer_types)} layers but"
                                   f" num_hidden_layers is {num_layers}; give one entry per layer")
            return window, sum(1 for t in layer_types if t == "sliding_attention")
    pattern = _opt(cfg, "sliding_window_pattern", origin, 0, 1)
    if pattern:  # Cohere2 / Gemma: every `pattern`-th layer is global
        return window, num_layers - num_layers // pattern
    if cfg.get("model_type") in ("qwen2", "qwen3", "qwen2_moe", "qwen3_moe"):
        return None, 0  # Qwen configs carry sliding_window but use_sliding_window defaults to false
    return window, num_layers  # Mistral v0.1 style: every layer


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
    return spec


def model_from_hf_config(cfg: dict, name: str, origin: str) -> ModelSpec:
    """Parse a Hugging Face config.json (already loaded) into a ModelSpec.

    Every field the cost model reads is type- and range-checked (positive integers, booleans,
    objects), and the fields must agree: H_q a multiple of H_kv, top-k <= E, dense layers <= L.
    """
    if not isinstance(cfg, dict):
        raise PlannerError(f"{origin}: expected a JSON object")
    model_type = cfg.get("model_type")
    if model_type is None:
        raise PlannerError(f"{origin}: missing field 'model_type' (is this a Hugging Face config.json?)")
    if not isinstance(model_type, str) or model_type not in SUPPORTED_MODEL_TYPES:
        raise PlannerError(f"{origin}: unknown model_type {model_type!r}"
                           f" (supported: {', '.join(SUPPORTED_MODEL_TYPES)})")
    common, quant = _common_fields(cfg, name, origin, model_type)
    if model_type in ("deepseek_v3", "deepseek_v2"):
        spec = ModelSpec(**common, **_deepseek_fields(cfg, origin, quant))
    elif model_type in ("mixtral", "gpt_oss"):
        spec = ModelSpec(**common, **_mixtral_fields(cfg, origin, quant))
    elif model_type in ("qwen2_moe", "qwen3_moe"):
        spec = ModelSpec(**common, **_qwen_moe_fields(cfg, origin, common["num_layers"]))
    else:  # dense: llama, mistral, qwen2, qwen3, cohere, cohere2
        spec = ModelSpec(**common, intermediate_size=_need(cfg, "intermediate_size", origin))
    return _check_spec(spec, origin)


def _common_fields(cfg: dict, name: str, origin: str, model_type: str) -> tuple[dict, str | None]:
    """The fields every family has (attention, vocabulary, sliding window, trained length) and the
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
    tie = _opt_bool(cfg, "tie_word_embeddings", origin, model_type in ("cohere", "cohere2"))
    window, n_sliding = _sliding_layers(cfg, L, origin)
    quant = _quant_method(cfg, origin)
    source = cfg.get("_source", origin)
    max_pos = _opt(cfg, "max_position_embeddings", origin, 0, 1) or None
    common = dict(name=name, source=source if isinstance(source, str) else origin, model_type=model_type,
                  hidden_size=D, num_layers=L, num_heads=H, num_kv_heads=H_kv, head_dim=head_dim, vocab_size=vocab,
                  tie_word_embeddings=tie, sliding_window=window, num_sliding_layers=n_sliding,
                  max_position_embeddings=max_pos)
    return common, quant


def _deepseek_fields(cfg: dict, origin: str, quant: str | None) -> dict:
    """DeepSeek V2 / V3: MLA attention, routed + shared experts, dense first layers, MTP layers."""
    E = _need(cfg, "n_routed_experts", origin)
    F_e = _need(cfg, "moe_intermediate_size", origin)
    return dict(
        intermediate_size=_need(cfg, "intermediate_size", origin), attention="mla",
        q_lora_rank=_opt(cfg, "q_lora_rank", origin), kv_lora_rank=_need(cfg, "kv_lora_rank", origin),
        qk_nope_head_dim=_need(cfg, "qk_nope_head_dim", origin),
        qk_rope_head_dim=_need(cfg, "qk_rope_head_dim", origin), v_head_dim=_need(cfg, "v_head_dim", origin),
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
        expert_weight_dtype="mxfp4" if quant == "mxfp4" else None,
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
