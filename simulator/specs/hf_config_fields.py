"""The fields of a Hugging Face ``config.json``, each read and checked: whole numbers and flags, the layer
kinds (sliding-window, chunked and linear attention) from the several ways configs say them, and the
checkpoint's quantization. Every refusal is one line naming the file and the field.

:mod:`simulator.specs.hf_config` reads a model family's fields with them.
"""
from __future__ import annotations

import fnmatch
import re

from simulator.errors import PlannerError

# Largest value any field may hold: well above every published model (DeepSeek-V3: 256 experts,
# vocab 129280, hidden 7168), low enough that products of fields stay exact in float64.
_FIELD_MAX = 1 << 24


def _int_field(value, key: str, origin: str, minimum: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not minimum <= value <= _FIELD_MAX:
        kind = "a positive integer" if minimum >= 1 else "an integer >= 0"
        raise PlannerError(f"{origin}: field '{key}' must be {kind} (at most {_FIELD_MAX}), got {value!r}")
    return value


def need(cfg: dict, key: str, origin: str, kind=int):
    if key not in cfg or cfg[key] is None:
        raise PlannerError(f"{origin}: missing field '{key}' (model_type '{cfg.get('model_type')}')")
    return _int_field(cfg[key], key, origin, 1)


def opt(cfg: dict, key: str, origin: str, default: int = 0, minimum: int = 0) -> int:
    """An optional integer field: absent or null -> default; otherwise it must be an integer >= minimum."""
    value = cfg.get(key)
    if value is None:
        return default
    return _int_field(value, key, origin, minimum)


def opt_bool(cfg: dict, key: str, origin: str, default: bool) -> bool:
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
HYBRID_LINEAR = ("qwen3_next", "qwen3_5", "qwen3_5_text", "qwen3_5_moe", "qwen3_5_moe_text")


def declared_layer_types(cfg: dict, num_layers: int, origin: str) -> list[str] | None:
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


def sliding_layers(cfg: dict, num_layers: int, origin: str, layer_types: list[str] | None) -> tuple[int | None, int]:
    """(window, number of sliding-window layers) from the several ways configs say it."""
    window = cfg.get("sliding_window")
    if window is None or window is False or window == 0:
        return None, 0
    window = _int_field(window, "sliding_window", origin, 1)
    if opt_bool(cfg, "use_sliding_window", origin, True) is False:
        return None, 0
    if layer_types is not None:
        return window, sum(1 for t in layer_types if t == "sliding_attention")
    # newer transformers write the pattern as '_sliding_window_pattern' (beside layer_types)
    key = "sliding_window_pattern" if cfg.get("sliding_window_pattern") is not None else "_sliding_window_pattern"
    pattern = opt(cfg, key, origin, 0, 1)
    if pattern:  # Cohere2 / Gemma: every `pattern`-th layer is global
        return window, num_layers - num_layers // pattern
    if cfg.get("model_type") == "gemma2":  # Gemma 2 alternates: even layers slide (transformers Gemma2Config)
        return window, num_layers - num_layers // 2
    if cfg.get("model_type") in _QWEN_NO_SLIDING:
        return None, 0  # Qwen configs carry sliding_window but use_sliding_window defaults to false
    return window, num_layers  # Mistral v0.1 style: every layer


def chunked_layers(cfg: dict, num_layers: int, origin: str, layer_types: list[str] | None) -> tuple[int | None, int]:
    """(chunk, number of chunked-attention layers): Llama 4 attends within chunks of `attention_chunk_size`
    on its RoPE layers (no_rope_layers[i] = 1), and over the whole context on the NoPE ones (every
    `no_rope_layer_interval`-th layer, 4 by default: transformers Llama4TextConfig)."""
    chunk = opt(cfg, "attention_chunk_size", origin)
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
    interval = opt(cfg, "no_rope_layer_interval", origin, 4, 1)
    return chunk, sum(1 for i in range(num_layers) if (i + 1) % interval)


def linear_layers(cfg: dict, num_layers: int, origin: str, layer_types: list[str] | None) -> int:
    """Gated DeltaNet layers of a hybrid: from layer_types, else all but every `full_attention_interval`-th."""
    if layer_types is not None:
        return sum(1 for t in layer_types if t == "linear_attention")
    if cfg.get("model_type") not in HYBRID_LINEAR:
        return 0
    interval = opt(cfg, "full_attention_interval", origin, 4, 1)
    return num_layers - num_layers // interval


def opt_float(cfg: dict, key: str, origin: str) -> float | None:
    """An optional positive number (absent, null or 0: None)."""
    value = cfg.get(key)
    if value is None or value == 0:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < 1e6:
        raise PlannerError(f"{origin}: field '{key}' must be a positive number or null, got {value!r}")
    return float(value)


def quant_method(cfg: dict, origin: str) -> str | None:
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


def checkpoint_weight_dtype(cfg: dict, quant: str | None) -> str | None:
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


def bf16_modules(checkpoint_dtype: str | None) -> tuple[str, ...]:
    """The modules a checkpoint keeps in bf16 beside its own quantized layers (:meth:`ModelSpec.module_dtype`)."""
    return _FP8_CHECKPOINT_BF16_MODULES if checkpoint_dtype == "fp8" else ()


def weight_block_size(cfg: dict, quant: str | None, origin: str) -> tuple[int, int] | None:
    """An fp8 checkpoint's weight scale blocks [rows, columns] (quantization_config weight_block_size), or None."""
    block = (cfg.get("quantization_config") or {}).get("weight_block_size") if quant == "fp8" else None
    if block is None:
        return None
    if (not isinstance(block, list) or len(block) != 2
            or not all(isinstance(b, int) and not isinstance(b, bool) and b > 0 for b in block)):
        raise PlannerError(f"{origin}: 'quantization_config.weight_block_size' must be two positive integers such as"
                           f" [128, 128], got {block!r}")
    return block[0], block[1]


# The checkpoint modules behind each attention projection the planner prices
# (simulator.specs.deployment.attention_projections / indexer_projections / linear_projections), as Hugging Face
# names them under a layer: each entry lists alternative spellings, each spelling the modules that must all be
# left unquantized (a fused GEMM runs one precision: vLLM refuses a qkv_proj whose shards differ).
_ATTENTION_PROJECTION_MODULES = {
    "qkv": (("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"), ("self_attn.qkv_proj",)),
    "o": (("self_attn.o_proj",),),
    "q": (("self_attn.q_proj",),),
    "q_a": (("self_attn.q_a_proj",), ("self_attn.fused_qkv_a_proj",)),
    "q_b": (("self_attn.q_b_proj",),),
    "kv_a": (("self_attn.kv_a_proj_with_mqa",), ("self_attn.fused_qkv_a_proj",)),
    "kv_b": (("self_attn.kv_b_proj",),),
    "indexer_q": (("self_attn.indexer.wq_b",),),
    "indexer_k": (("self_attn.indexer.wk",),),
    "indexer_w": (("self_attn.indexer.weights_proj",),),
    "linear_in": (("linear_attn.in_proj_qkvz", "linear_attn.in_proj_ba"),
                  ("linear_attn.in_proj_qkv", "linear_attn.in_proj_z", "linear_attn.in_proj_b",
                   "linear_attn.in_proj_a")),
    "linear_out": (("linear_attn.out_proj",),),
}
# where a layer's modules sit: text models, and the language model of a multimodal release
_LAYER_PREFIXES = ("model.layers.{}.", "model.language_model.layers.{}.", "language_model.model.layers.{}.")
# the lists a quantization_config names its unquantized modules in: ModelOpt (exclude_modules), compressed-tensors
# (ignore), transformers' quantizers (modules_to_not_convert), vLLM's fp8 config (ignored_layers)
_LEFT_OUT_KEYS = ("exclude_modules", "ignore", "modules_to_not_convert", "ignored_layers")


def _left_out_matcher(q: dict, origin: str):
    """A test: is this module (full dotted name) among those ``q`` leaves unquantized? A module is when it or a
    module above it matches an entry: a name or shell pattern ("model.layers.61*", "model.layers.*.self_attn") by
    fnmatch, or a "re:" regex (compressed-tensors' ignore) matched whole; TensorRT-LLM's
    QuantConfig.is_module_excluded_from_quantization walks a module's ancestors the same way."""
    names, globs, regexes = set(), [], []
    for key in _LEFT_OUT_KEYS:
        entries = q.get(key)
        if entries is None:
            continue
        if not isinstance(entries, list) or not all(isinstance(e, str) for e in entries):
            raise PlannerError(f"{origin}: 'quantization_config.{key}' must be a list of module names such as"
                               f" [\"lm_head\", \"model.layers.0.self_attn*\"], got {entries!r}")
        for e in entries:
            if e.startswith("re:"):
                try:
                    regexes.append(re.compile(e[3:]))
                except re.error as err:
                    raise PlannerError(f"{origin}: 'quantization_config.{key}' entry {e!r} is not a valid regex"
                                       f" ({err})") from None
            elif any(c in e for c in "*?["):
                globs.append(e)
            else:
                names.add(e)

    def left_out(module: str) -> bool:
        parts = module.split(".")
        scopes = [".".join(parts[:i]) for i in range(len(parts), 0, -1)]
        return (any(s in names for s in scopes) or any(fnmatch.fnmatchcase(s, g) for g in globs for s in scopes)
                or any(r.fullmatch(s) for r in regexes for s in scopes))
    return left_out


def unquantized_attention(cfg: dict, num_layers: int, layer_counts: dict[str, int], origin: str) -> tuple[str, ...]:
    """The attention projections a quantized checkpoint leaves in its original precision (bf16) in every layer that
    has them: those its quantization_config lists as left out (:data:`_LEFT_OUT_KEYS`; NVIDIA's ModelOpt NVFP4
    DeepSeek checkpoints list every layer's self_attn projections, docs/precision.md). ``layer_counts``: the layers
    that have each projection ("attention": softmax / MLA layers, "linear": Gated DeltaNet ones). A projection left
    out in fewer layers than that runs quantized in the rest and is priced quantized (the planner holds one
    precision per projection)."""
    q = cfg.get("quantization_config")
    if not isinstance(q, dict) or not any(q.get(k) for k in _LEFT_OUT_KEYS):
        return ()
    left_out = _left_out_matcher(q, origin)
    kept = []
    for projection, spellings in _ATTENTION_PROJECTION_MODULES.items():
        need_layers = layer_counts["linear" if projection.startswith("linear") else "attention"]
        if not need_layers:
            continue
        layers = sum(1 for i in range(num_layers)
                     if any(all(any(left_out(p.format(i) + m) for p in _LAYER_PREFIXES) for m in modules)
                            for modules in spellings))
        if layers >= need_layers:
            kept.append(projection)
    return tuple(kept)
