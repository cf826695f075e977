"""A Hugging Face ``config.json`` read into the fields of a :class:`~simulator.specs.models.ModelSpec`, family
by family: the fields every family has, then each family's own (MLA and routed experts, chunked attention,
Gated DeltaNet layers, ...). A model type or layer kind the planner has no price for is refused by name.

:func:`simulator.specs.models.model_from_hf_config` builds the spec from these fields and checks that they agree.
"""
from __future__ import annotations

from simulator.errors import PlannerError
from simulator.specs.hf_config_fields import (HYBRID_LINEAR, bf16_modules, checkpoint_weight_dtype, chunked_layers,
                                              declared_layer_types, linear_layers, need, opt, opt_bool, opt_float,
                                              quant_method, sliding_layers, unquantized_attention, weight_block_size)

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


def model_fields(cfg: dict, name: str, origin: str) -> dict:
    """The ModelSpec fields of a Hugging Face config.json (already loaded), each type- and range-checked
    (positive integers, booleans, objects). A model type or layer kind the planner has no price for is
    refused by name."""
    if not isinstance(cfg, dict):
        raise PlannerError(f"{origin}: expected a JSON object")
    return _shape_fields(cfg, name, origin) | {"architectures": _architectures(cfg, origin)}


def _architectures(cfg: dict, origin: str) -> tuple[str, ...]:
    """The checkpoint's model classes (config.json 'architectures', the wrapper's for a multimodal release): the
    engines pick code paths by them (vLLM's default model runner, simulator/data/engine_settings.toml)."""
    names = cfg.get("architectures") or []
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise PlannerError(f"{origin}: field 'architectures' must be a list of class names, got {names!r}")
    return tuple(names)


def _shape_fields(cfg: dict, name: str, origin: str) -> dict:
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
    # dict(**a, **b) refuses a field two parts both set, as the dataclass would
    if model_type in ("deepseek_v3", "deepseek_v2", "kimi_k2", "deepseek_v32"):
        return dict(**common, **_deepseek_fields(cfg, origin, quant),
                    **(_indexer_fields(cfg, origin) if model_type == "deepseek_v32" else {}))
    if model_type == "glm4_moe":
        return dict(**common, intermediate_size=need(cfg, "intermediate_size", origin),
                    **_deepseek_moe_fields(cfg, origin, quant))
    if model_type in ("mixtral", "gpt_oss", "minimax_m2"):
        return dict(**common, **_mixtral_fields(cfg, origin, quant))
    if model_type in ("llama4", "llama4_text"):
        return dict(**common, **_llama4_fields(cfg, origin, common["num_layers"]))
    if model_type in ("qwen2_moe", "qwen3_moe", "qwen3_next", "qwen3_5_moe", "qwen3_5_moe_text"):
        return dict(**common, **_qwen_moe_fields(cfg, origin, common["num_layers"]))
    # dense: llama, mistral, qwen2, qwen3, cohere, cohere2, gemma 2 / 3 / 4, qwen3_5
    return dict(**common, intermediate_size=need(cfg, "intermediate_size", origin))


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
        if opt_bool(cfg, "enable_moe_block", origin, False):
            parts.append("the Gemma 4 MoE block (enable_moe_block)")
        if opt(cfg, "hidden_size_per_layer_input", origin):
            parts.append("per-layer input embeddings (hidden_size_per_layer_input)")
        if opt(cfg, "num_kv_shared_layers", origin):
            parts.append("KV-shared layers (num_kv_shared_layers)")
    if model_type == "deepseek_v32" and opt(cfg, "index_topk_freq", origin, 1, 1) > 1:
        parts.append("an indexer shared across layers (index_topk_freq)")
    if parts:
        raise PlannerError(f"{origin}: {parts[0]} has no price in the planner; it will not price it as another"
                           " layer kind")


def _common_fields(cfg: dict, name: str, origin: str, model_type: str) -> tuple[dict, str | None]:
    """The fields every family has (attention, vocabulary, windows and layer kinds, trained length) and the
    checkpoint's quantization method."""
    D = need(cfg, "hidden_size", origin)
    L = need(cfg, "num_hidden_layers", origin)
    H = need(cfg, "num_attention_heads", origin)
    H_kv = opt(cfg, "num_key_value_heads", origin, H, 1)
    if cfg.get("head_dim") is None and D % H:
        raise PlannerError(f"{origin}: hidden_size={D} is not a multiple of num_attention_heads={H};"
                           " give 'head_dim' explicitly")
    head_dim = opt(cfg, "head_dim", origin, D // H, 1)
    vocab = need(cfg, "vocab_size", origin)
    tie = opt_bool(cfg, "tie_word_embeddings", origin, model_type.startswith(("cohere", "gemma")))
    layer_types = declared_layer_types(cfg, L, origin)
    window, n_sliding = sliding_layers(cfg, L, origin, layer_types)
    chunk, n_chunked = chunked_layers(cfg, L, origin, layer_types)
    n_linear = linear_layers(cfg, L, origin, layer_types)
    quant = quant_method(cfg, origin)
    source = cfg.get("_source", origin)
    max_pos = opt(cfg, "max_position_embeddings", origin, 0, 1) or None
    common = dict(name=name, source=source if isinstance(source, str) else origin, model_type=model_type,
                  hidden_size=D, num_layers=L, num_heads=H, num_kv_heads=H_kv, head_dim=head_dim, vocab_size=vocab,
                  tie_word_embeddings=tie, sliding_window=window, num_sliding_layers=n_sliding,
                  max_position_embeddings=max_pos, attention_chunk_size=chunk, num_chunked_layers=n_chunked,
                  checkpoint_weight_dtype=checkpoint_weight_dtype(cfg, quant),
                  bf16_modules=bf16_modules(checkpoint_weight_dtype(cfg, quant)),
                  weight_block_size=weight_block_size(cfg, quant, origin),
                  unquantized_attention=unquantized_attention(cfg, L, {"attention": L - n_linear, "linear": n_linear},
                                                              origin),
                  attn_logit_softcapping=opt_float(cfg, "attn_logit_softcapping", origin),
                  final_logit_softcapping=opt_float(cfg, "final_logit_softcapping", origin))
    if model_type.startswith("gemma4"):
        common |= dict(global_head_dim=opt(cfg, "global_head_dim", origin),
                       num_global_kv_heads=opt(cfg, "num_global_key_value_heads", origin),
                       global_k_eq_v=opt_bool(cfg, "attention_k_eq_v", origin, False))
    if model_type in HYBRID_LINEAR:
        common |= dict(attention_output_gate=opt_bool(cfg, "attn_output_gate", origin, True),
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
    return dict(num_linear_layers=n_linear, num_mtp_layers=opt(cfg, "mtp_num_hidden_layers", origin),
                linear_num_key_heads=need(cfg, "linear_num_key_heads", origin),
                linear_num_value_heads=need(cfg, "linear_num_value_heads", origin),
                linear_key_head_dim=need(cfg, "linear_key_head_dim", origin),
                linear_value_head_dim=need(cfg, "linear_value_head_dim", origin),
                linear_conv_kernel_dim=need(cfg, "linear_conv_kernel_dim", origin),
                linear_state_dtype=_STATE_DTYPES[state_dtype])


def _indexer_fields(cfg: dict, origin: str) -> dict:
    """DeepSeek-V3.2's lightning indexer and its top-k (DeepSeek sparse attention)."""
    return dict(index_n_heads=need(cfg, "index_n_heads", origin), index_head_dim=need(cfg, "index_head_dim", origin),
                index_topk=need(cfg, "index_topk", origin))


def _llama4_fields(cfg: dict, origin: str, L: int) -> dict:
    """Llama 4: routed experts (intermediate_size wide) + one shared expert of the same width on every
    `interleave_moe_layer_step`-th layer (or the listed moe_layers); the others a dense MLP of
    intermediate_size_mlp (transformers Llama4TextConfig / Llama4TextMoe)."""
    step = opt(cfg, "interleave_moe_layer_step", origin, 1, 1)
    moe_layers = cfg.get("moe_layers")
    if moe_layers is not None and (not isinstance(moe_layers, list) or not all(
            isinstance(i, int) and not isinstance(i, bool) and 0 <= i < L for i in moe_layers)):
        raise PlannerError(f"{origin}: field 'moe_layers' must be a list of layer indices in [0, {L}), got {moe_layers!r}")
    n_moe = len(set(moe_layers)) if moe_layers else len(range(step - 1, L, step))
    F_e = need(cfg, "intermediate_size", origin)
    return dict(intermediate_size=opt(cfg, "intermediate_size_mlp", origin, F_e, 1),
                num_experts=need(cfg, "num_local_experts", origin),
                experts_per_token=need(cfg, "num_experts_per_tok", origin),
                expert_intermediate_size=F_e, shared_expert_intermediate_size=F_e, num_dense_layers=L - n_moe)


def _deepseek_fields(cfg: dict, origin: str, quant: str | None) -> dict:
    """DeepSeek V2 / V3 / V3.2, Kimi-K2: MLA attention, routed + shared experts, dense first layers, MTP layers."""
    return dict(
        intermediate_size=need(cfg, "intermediate_size", origin), attention="mla",
        q_lora_rank=opt(cfg, "q_lora_rank", origin), kv_lora_rank=need(cfg, "kv_lora_rank", origin),
        qk_nope_head_dim=need(cfg, "qk_nope_head_dim", origin),
        qk_rope_head_dim=need(cfg, "qk_rope_head_dim", origin), v_head_dim=need(cfg, "v_head_dim", origin),
        **_deepseek_moe_fields(cfg, origin, quant))


def _deepseek_moe_fields(cfg: dict, origin: str, quant: str | None) -> dict:
    """DeepSeek-style MoE (also GLM-4.5 / 4.6): routed + shared experts, dense first layers, MTP layers."""
    E = need(cfg, "n_routed_experts", origin)
    F_e = need(cfg, "moe_intermediate_size", origin)
    return dict(
        num_experts=E, experts_per_token=need(cfg, "num_experts_per_tok", origin),
        expert_intermediate_size=F_e, shared_expert_intermediate_size=opt(cfg, "n_shared_experts", origin) * F_e,
        num_dense_layers=opt(cfg, "first_k_dense_replace", origin),
        num_mtp_layers=opt(cfg, "num_nextn_predict_layers", origin),
        expert_groups=opt(cfg, "n_group", origin) if opt(cfg, "n_group", origin) > 1 else 0,
        expert_weight_dtype="fp8" if quant == "fp8" else None,
    )


def _mixtral_fields(cfg: dict, origin: str, quant: str | None) -> dict:
    """Mixtral / gpt-oss: every layer routed, experts as wide as the dense FFN would be."""
    E = need(cfg, "num_local_experts", origin)
    return dict(
        intermediate_size=need(cfg, "intermediate_size", origin), num_experts=E,
        experts_per_token=need(cfg, "num_experts_per_tok", origin),
        expert_intermediate_size=need(cfg, "intermediate_size", origin),
        expert_weight_dtype=quant if quant in ("mxfp4", "fp8") else None,  # MiniMax-M2 ships fp8 experts
    )


def _qwen_moe_fields(cfg: dict, origin: str, L: int) -> dict:
    """Qwen2-MoE / Qwen3-MoE: dense layers from decoder_sparse_step and mlp_only_layers."""
    E = need(cfg, "num_experts", origin)
    step = opt(cfg, "decoder_sparse_step", origin, 1, 1)
    mlp_only = cfg.get("mlp_only_layers") or []
    if not isinstance(mlp_only, list) or not all(isinstance(i, int) and not isinstance(i, bool)
                                                 and 0 <= i < L for i in mlp_only):
        raise PlannerError(f"{origin}: field 'mlp_only_layers' must be a list of layer indices in"
                           f" [0, {L}), got {mlp_only!r}")
    mlp_only = set(mlp_only)
    dense = sum(1 for i in range(L) if i in mlp_only or (i + 1) % step != 0)
    return dict(
        intermediate_size=opt(cfg, "intermediate_size", origin), num_experts=E,
        experts_per_token=need(cfg, "num_experts_per_tok", origin),
        expert_intermediate_size=need(cfg, "moe_intermediate_size", origin),
        shared_expert_intermediate_size=opt(cfg, "shared_expert_intermediate_size", origin),
        num_dense_layers=dense,
    )
