"""Reading an engine profile file (``simulator/data/engines/<name>-<version>.toml``; key meanings and sources in
that folder's README): each section's keys, typed and checked, with the sourced value or else the one under
``[assumed.<section>]`` (and which were assumed). A key the planner does not read is refused (a typo would
otherwise fall back to a default silently): descriptive facts go under ``[notes]``, citations under ``[sources]``.
"""
from __future__ import annotations

from pathlib import Path

from simulator.errors import PlannerError, did_you_mean
from simulator.specs.deployment import UNQUANTIZED_MODULES

OVERLAP_WINDOWS = ("none", "step", "draft")
TOP_KEYS = ("name", "version", "display_name", "source")
FREE_TABLES = ("notes", "sources")  # descriptive facts and citations: read by no code


def _reader(data: dict, origin: str):
    """get(section, key, kind, default) over the profile's tables, falling back to [assumed.<section>];
    with the (section, key) pairs read and the assumed keys used, filled as it is called."""
    assumed_keys: list[str] = []
    read: set[tuple[str, str]] = set()

    def get(section: str, key: str, kind, default=None):
        read.add((section, key))
        table = data.get(section, {})
        assumed = data.get("assumed", {}).get(section, {})
        if key in table:
            value = table[key]
        elif key in assumed:
            value = assumed[key]
            assumed_keys.append(f"{section}.{key}")
        elif default is not None:
            return default
        else:
            raise PlannerError(f"{origin}: missing [{section}] {key} (or [assumed.{section}] {key})")
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if not isinstance(value, kind) or (kind is float and value < 0):
            raise PlannerError(f"{origin}: [{section}] {key} must be {'a number >= 0' if kind is float else kind.__name__},"
                               f" got {value!r}")
        return value

    return get, read, assumed_keys


def engine_fields(data: dict, origin: str) -> dict:
    """The EngineProfile fields of a profile file's tables; a missing key without a default, a value of the
    wrong type or a key the planner does not read is refused, naming the file and the key."""
    get, read, assumed_keys = _reader(data, origin)
    windows = (get("host", "overlap_window", str, "none"), get("speculative", "overlap_window", str, "none"))
    for w in windows:
        if w not in OVERLAP_WINDOWS:
            raise PlannerError(f"{origin}: overlap_window must be one of {', '.join(OVERLAP_WINDOWS)}, got '{w}'")
    sizes, spec_sizes = (_sizes(get("cuda_graphs", key, list, []), key, origin)
                         for key in ("capture_sizes", "spec_capture_sizes"))
    fields = dict(
        name=str(data.get("name", Path(origin).stem)), version=str(data.get("version", "")),
        display_name=str(data.get("display_name", data.get("name", ""))), source=str(data.get("source", origin)),
        size_unit=get("cuda_graphs", "size_unit", str, "tokens"), capture_sizes=sizes,
        max_capture_size=get("cuda_graphs", "max_capture_size", int, 0),
        unlimited=bool(get("cuda_graphs", "unlimited", bool, False)),
        padding=get("cuda_graphs", "padding", bool, True),
        spec_capture_max_tokens=get("cuda_graphs", "spec_capture_max_tokens", int, 0),
        spec_capture_max_batch=get("cuda_graphs", "spec_capture_max_batch", int, 0),
        verify_captured=get("cuda_graphs", "verify_captured", bool, True),
        draft_captured=get("cuda_graphs", "draft_captured", bool, True),
        eager_launch_per_kernel_s=get("cuda_graphs", "eager_launch_per_kernel_s", float),
        host_fixed_s=get("host", "step_fixed_s", float), host_per_sequence_s=get("host", "step_per_sequence_s", float),
        min_exposed_s=get("host", "min_exposed_s", float, 0.0), overlap_window=windows[0],
        spec_fixed_s=get("speculative", "step_fixed_s", float),
        spec_per_sequence_s=get("speculative", "step_per_sequence_s", float, 0.0),
        per_draft_pass_s=get("speculative", "per_draft_pass_s", float, 0.0), spec_overlap_window=windows[1],
        supports_dynamic_k=get("speculative", "supports_dynamic_k", bool, False),
        dynamic_k_option=get("speculative", "dynamic_k_option", str, ""),
        assumed=tuple(assumed_keys), path=origin,
        allreduce=_choice(get("collectives", "allreduce", str, "custom"), ALLREDUCE_KINDS, "allreduce", origin),
        lm_head=_choice(get("collectives", "lm_head", str, "vocab-parallel"), LM_HEAD_KINDS, "lm_head", origin),
        quantized_modules=_quantized_modules(get("quantization", "also_quantizes", list, []), origin),
        self_spec_catch_up=get("speculative", "self_spec_two_token_first_pass", bool, False),
        graphs_enabled=get("cuda_graphs", "enabled_by_default", bool, True),
        tp_broadcast_per_step_s=get("host", "tp_broadcast_per_step_s", float, 0.0),
        grouped_decode_groups=_groups(get("attention", "grouped_decode_groups", list, []), origin),
        grouped_decode_min_blocks_per_sm=get("attention", "grouped_decode_min_blocks_per_sm", float, 0.0),
        draft_extend_captured=_optional_bool(get, "cuda_graphs", "draft_extend_captured"),
        sampling_bytes=tuple(get("sampling", key, float, 0.0 if "top_p" in key else 8.0) for key in SAMPLING_KEYS),
        spec_capture_sizes=spec_sizes,
        spec_max_running=_count(get("speculative", "max_running_default", int, 0), "max_running_default", origin),
        **_serving_defaults(get, origin),
        moe_padding_routed=_choice(get("cuda_graphs", "moe_padding_routed", str, "all"), MOE_PADDING_RULES,
                                   "moe_padding_routed", origin, "cuda_graphs"))
    _refuse_unknown(data, read, origin)
    # every key read by now: the assumed ones include those read after the list was first taken
    return fields | {"assumed": tuple(assumed_keys)}


def _quantized_modules(names: list, origin: str) -> tuple[str, ...]:
    """[quantization] also_quantizes: modules serving engines keep in bf16 that this engine's quantizer takes too."""
    for n in names:
        if n not in UNQUANTIZED_MODULES:
            raise PlannerError(f"{origin}: [quantization] also_quantizes lists {n!r}; known:"
                               f" {', '.join(UNQUANTIZED_MODULES)}")
    return tuple(names)


MOE_PADDING_RULES = ("all", "none", "grouped-topk")
SERVING_KEYS = ("max_num_seqs", "max_num_batched_tokens")


def _serving_defaults(get, origin: str) -> dict:
    """[serving]: the engine's defaults by GPU memory tier, each list one value per ``tier_min_gib``
    (largest first, the last 0: every other GPU); absent table: no defaults."""
    tiers = get("serving", "tier_min_gib", list, [])
    lists = {key: get("serving", key, list, []) for key in SERVING_KEYS}
    names = get("serving", "small_gpu_names", list, [])
    if not tiers and not any(lists.values()):
        return {}
    floors_ok = all(isinstance(t, (int, float)) and not isinstance(t, bool) and t >= 0 for t in tiers)
    if not tiers or not floors_ok or list(tiers) != sorted(tiers, reverse=True) or tiers[-1] != 0:
        raise PlannerError(f"{origin}: [serving] tier_min_gib must list GiB floors, largest first, ending at 0;"
                           f" got {tiers!r}")
    for key, values in lists.items():  # an empty list: no default of the engine's own for that setting
        if values and len(values) != len(tiers) or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 1
                                                for v in values):
            raise PlannerError(f"{origin}: [serving] {key} must hold one whole number >= 1 per tier_min_gib entry"
                               f" ({len(tiers)}) or be empty, got {values!r}")
    return {"serving_tiers_gib": tuple(float(t) for t in tiers),
            "default_max_num_seqs": tuple(lists["max_num_seqs"]),
            "default_max_num_batched_tokens": tuple(lists["max_num_batched_tokens"]),
            "small_gpu_names": tuple(str(n).lower() for n in names)}

# [sampling] keys, in EngineProfile.sampling_bytes order (absent: 8 bytes per logit, one fp32 read and
# write, and nothing more for top-p)
SAMPLING_KEYS = ("plain_greedy_bytes_per_logit", "plain_sampled_bytes_per_logit", "plain_top_p_extra_bytes_per_logit",
                 "verify_greedy_bytes_per_logit", "verify_sampled_bytes_per_logit",
                 "verify_top_p_extra_bytes_per_logit")
_UNSET = object()


def _optional_bool(get, section: str, key: str) -> bool | None:
    """A true / false key that may be absent (None), read through ``get`` so it counts as known."""
    value = get(section, key, object, _UNSET)
    if value is _UNSET:
        return None
    if not isinstance(value, bool):
        raise PlannerError(f"[{section}] {key} must be true or false, got {value!r}")
    return value


def _count(value: int, key: str, origin: str) -> int:
    if isinstance(value, bool) or value < 0:
        raise PlannerError(f"{origin}: [speculative] {key} must be a whole number >= 0 (0: no cap), got {value!r}")
    return value


def _sizes(sizes: list, key: str, origin: str) -> tuple[int, ...]:
    if not all(isinstance(s, int) and not isinstance(s, bool) and s >= 1 for s in sizes):
        raise PlannerError(f"{origin}: [cuda_graphs] {key} must be integers >= 1")
    return tuple(sorted(sizes))


def _refuse_unknown(data: dict, read: set[tuple[str, str]], origin: str) -> None:
    """Every key is one the planner reads (``read``: the (section, key) pairs asked for), a top-level
    label, or sits under [notes] / [sources]."""
    known = {s: sorted(k for t, k in read if t == s) for s, _ in read}
    tables = []
    for key, value in data.items():
        if key in TOP_KEYS or key in FREE_TABLES:
            continue
        if key == "assumed" and isinstance(value, dict):
            tables += [(f"assumed.{s}", s, t) for s, t in value.items()]
        elif isinstance(value, dict):
            tables.append((key, key, value))
        else:
            raise PlannerError(f"{origin}: unknown top-level key '{key}'{did_you_mean(key, TOP_KEYS)};"
                               " descriptive facts go under [notes]")
    for label, section, table in tables:
        if section not in known or not isinstance(table, dict):
            raise PlannerError(f"{origin}: unknown table [{label}]{did_you_mean(section, list(known))};"
                               " descriptive facts go under [notes]")
        for key in table:
            if key not in known[section]:
                raise PlannerError(f"{origin}: unknown key [{label}] {key}{did_you_mean(key, known[section])};"
                                   " descriptive facts go under [notes]")


def _groups(groups: list, origin: str) -> tuple[int, ...]:
    if not all(isinstance(g, int) and not isinstance(g, bool) and g >= 1 for g in groups):
        raise PlannerError(f"{origin}: [attention] grouped_decode_groups must be integers >= 1, got {groups!r}")
    return tuple(sorted(groups))


ALLREDUCE_KINDS = ("custom", "nccl")
LM_HEAD_KINDS = ("vocab-parallel", "vocab-parallel-argmax", "replicated")


def _choice(kind: str, allowed: tuple[str, ...], key: str, origin: str, section: str = "collectives") -> str:
    if kind not in allowed:
        raise PlannerError(f"{origin}: [{section}] {key} must be one of {', '.join(allowed)}, got {kind!r}")
    return kind
