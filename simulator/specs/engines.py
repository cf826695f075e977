"""Serving-engine profiles: what an engine adds to the kernels of a decode step (data files under
``simulator/data/engines/<name>-<version>.toml``; key meanings and sources in that folder's README).

Per step: host time (scheduler, input preparation, sampling and, when speculating, rejection-sampler
and KV bookkeeping) and how much of it overlaps with GPU work; which passes replay CUDA graphs and
up to which size (the capture limit with speculation on can sit far below plain decoding's); the
per-kernel cost of passes that run eagerly; the host cost of each sequential draft pass.
Values a source gives sit in their section; values that had to be assumed sit under
``[assumed.<section>]`` and the profile's label says so. A key the planner does not read is refused
(a typo would otherwise fall back to a default silently): descriptive facts go under ``[notes]``,
citations under ``[sources]``.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path

from simulator.errors import PlannerError, did_you_mean
from simulator.files import read_toml_file
from simulator.specs.deployment import EngineKernels
from simulator.specs.hardware import Hardware
from simulator.specs.versions import parse_version, same_release, version_key

ENGINES_DIR = Path(__file__).resolve().parent.parent / "data" / "engines"
# which releases --engine-version accepts per engine, and the releases each engine published
RELEASES_FILE = ENGINES_DIR.parent / "engine_releases.toml"
DEFAULT_GPU_ENGINE = "vllm"
# The reference torch engine's host terms are fitted into its CPU profile, so CPUs default to "ideal".
DEFAULT_CPU_ENGINE = "ideal"
OVERLAP_WINDOWS = ("none", "step", "draft")
TOP_KEYS = ("name", "version", "display_name", "source")
FREE_TABLES = ("notes", "sources")  # descriptive facts and citations: read by no code


@dataclass(frozen=True)
class EngineProfile:
    name: str
    version: str
    display_name: str
    source: str
    size_unit: str  # "tokens" or "sequences": what a CUDA graph is keyed by
    capture_sizes: tuple[int, ...]
    max_capture_size: int  # 0 with unlimited: every size is captured
    unlimited: bool
    padding: bool  # a pass is padded up to the next captured size
    spec_capture_max_tokens: int  # 0: not token-limited
    spec_capture_max_batch: int  # 0: derived from the token limit
    verify_captured: bool
    draft_captured: bool
    eager_launch_per_kernel_s: float
    host_fixed_s: float
    host_per_sequence_s: float
    min_exposed_s: float
    overlap_window: str
    spec_fixed_s: float
    spec_per_sequence_s: float
    per_draft_pass_s: float
    spec_overlap_window: str
    supports_dynamic_k: bool
    dynamic_k_option: str
    assumed: tuple[str, ...]  # keys whose values are assumptions, not sourced
    path: str
    allreduce: str = "custom"  # "custom": the engine's one-shot all-reduce kernels; "nccl": NCCL's
    lm_head: str = "vocab-parallel"  # how the LM head runs under TP (EngineKernels.lm_head)
    self_spec_catch_up: bool = False  # self-speculation's first draft pass runs two tokens per sequence
    graphs_enabled: bool = True  # CUDA graphs on by default (TensorRT-LLM's C++ runtime had them off)
    tp_broadcast_per_step_s: float = 0.0  # host time to ship each step's inputs to the other TP ranks
    # decode attention: query heads per KV head that a grouped kernel (one block per KV head, one KV
    # read) serves; () = every group. Other groups run a per-query-head kernel that reads its KV head
    # once per query head (TensorRT-LLM <= 0.10: XQA for 8 only, else MMHA)
    grouped_decode_groups: tuple[int, ...] = ()
    # MoE under a padded CUDA graph: whose padding rows the router sends to experts as real tokens ("all",
    # "none", or "grouped-topk": only a grouped top-k router's, as DeepSeek's)
    moe_padding_routed: str = "all"
    grouped_decode_min_blocks_per_sm: float = 0.0  # the grouped kernel only when KV heads x B >= this x SMs
    # SGLang: the denser list captured (and padded to) when a speculative algorithm is set; () = capture_sizes
    spec_capture_sizes: tuple[int, ...] = ()
    # the draft's extend pass over the B (K + 1) verified tokens in a CUDA graph; None: as the draft passes
    draft_extend_captured: bool | None = None
    # [sampling]: HBM bytes read + written per logit element by the sampler (plain) and by the
    # verification path (rejection sampler), greedy or at temperature > 0, plus what top-p adds
    sampling_bytes: tuple[float, ...] = (8.0, 8.0, 0.0, 8.0, 8.0, 0.0)
    # the running-request cap the engine sets when a speculative algorithm is on and the user sets none
    # (SGLang's --max-running-requests default with speculation); 0: speculation sets no cap of its own
    spec_max_running: int = 0
    # [serving]: the engine's own defaults when the user sets none, by GPU memory tier: running-request cap
    # (vLLM --max-num-seqs) and step token budget (--max-num-batched-tokens); () where the profile has no
    # [serving] table (the serving simulation's fallback applies)
    serving_tiers_gib: tuple[float, ...] = ()  # GPU memory floors of the tiers, largest first, the last 0
    default_max_num_seqs: tuple[int, ...] = ()  # one per tier
    default_max_num_batched_tokens: tuple[int, ...] = ()
    small_gpu_names: tuple[str, ...] = ()  # GPUs the engine keeps on the last tier by name (vLLM: A100)
    # the release asked for when this profile prices another release (the version rule), and why
    release: str = ""
    release_note: str = ""

    def logit_bytes(self, temperature: float, top_p: float) -> tuple[float, float]:
        """(plain, verify) bytes per logit element at this temperature and top-p."""
        plain_g, plain_s, plain_top_p, verify_g, verify_s, verify_top_p = self.sampling_bytes
        if temperature <= 0:
            return plain_g, verify_g
        nucleus = top_p < 1
        return plain_s + nucleus * plain_top_p, verify_s + nucleus * verify_top_p

    @property
    def allreduce_table(self) -> str:
        """Which measured collective table of a profile prices this engine's TP all-reduce."""
        return "all_reduce_nccl" if self.allreduce == "nccl" else "all_reduce"

    @property
    def key(self) -> str:
        return f"{self.name}-{self.version}" if self.version and self.name != "ideal" else self.name

    @property
    def label(self) -> str:
        note = f"; {len(self.assumed)} values assumed, e.g. host time per step" if self.assumed else ""
        release = f" for {self.release_note}" if self.release_note else ""
        return f"engine {self.display_name}{release}{note}"


def _split(key: str) -> tuple[str, str]:
    """'vllm-0.11.0' -> ('vllm', '0.11.0'), 'gpt-fast-2024' -> ('gpt-fast', '2024'); a profile without a
    version in its file name ('ideal') -> ('ideal', '')."""
    name, _, version = key.rpartition("-")
    if not name or not version[:1].isdigit():
        return key, ""
    return name, version


@lru_cache(maxsize=None)
def list_engines() -> tuple[str, ...]:
    """Catalog keys, ``name-version``, oldest to newest per engine."""
    keys = [p.stem for p in ENGINES_DIR.glob("*.toml")]
    return tuple(sorted(keys, key=lambda k: (_split(k)[0], version_key(_split(k)[1]))))


def engine_names() -> tuple[str, ...]:
    return tuple(dict.fromkeys(_split(k)[0] for k in list_engines()))


def engine_versions(name: str) -> tuple[str, ...]:
    return tuple(_split(k)[1] for k in list_engines() if _split(k)[0] == name)


def default_engine(hardware_kind: str) -> str:
    return DEFAULT_CPU_ENGINE if hardware_kind == "cpu" else DEFAULT_GPU_ENGINE


@lru_cache(maxsize=None)
def load_engine(name: str, version: str | None = None) -> EngineProfile:
    """An engine by name (newest version) or name and version; ``name`` may also be ``name-version``.
    A release without a profile of its own is priced with the profile :func:`nearest_profile` picks,
    and the profile says so (``release``, ``release_note``, shown in its label)."""
    if version is None and name not in engine_names() and name in list_engines():
        name, version = _split(name)
    if name not in engine_names():
        raise PlannerError(f"unknown engine '{name}'{did_you_mean(name, engine_names())}")
    versions = engine_versions(name)
    asked = versions[-1] if version is None else str(version).strip()
    profile_version, note = resolve_release(name, asked)
    path = ENGINES_DIR / (f"{name}-{profile_version}.toml" if profile_version else f"{name}.toml")
    profile = engine_from_dict(read_toml_file(path, "engine profile"), str(path))
    return replace(profile, release=asked, release_note=note) if note else profile


@lru_cache(maxsize=None)
def engine_releases() -> dict:
    """simulator/data/engine_releases.toml: per engine, ``accepts_from`` and ``releases``."""
    return read_toml_file(RELEASES_FILE, "engine releases")


def release_distance(a: str, b: str) -> tuple[int, int, int]:
    """How far apart two releases are: (major lines, minor lines, patch releases), each counted only
    within the line above it (0.9.2 and 0.8.5 are one minor line apart, whatever their patches)."""
    x, y = version_key(a).head(3), version_key(b).head(3)
    major, minor, patch = (abs(p - q) for p, q in zip(x, y))
    return (major, 0, 0) if major else (0, minor, 0) if minor else (0, 0, patch)


def nearest_profile(name: str, version: str) -> str:
    """The version rule: the profile that prices ``version`` of engine ``name``. Its own profile where
    one exists (0.11 is 0.11.0); else the profile nearest in release lines (major, then minor, then
    patch within the line); at equal distance the older profile, whose code the release inherits
    (0.9.x sits between 0.8.5 and 0.10.2 and gets 0.8.5)."""
    versions = [v for v in engine_versions(name) if v]
    own = next((v for v in versions if same_release(v, version)), None)
    if own is not None or not versions:
        return own or ""
    asked = version_key(version)
    return min(versions, key=lambda v: (release_distance(v, version), version_key(v) > asked, version_key(v)))


def resolve_release(name: str, version: str) -> tuple[str, str]:
    """(profile version, note) for a release of ``name``: the note says which release the profile
    prices in its stead and how far apart they are ('' when the profile is the release's own). A
    version the engine does not accept (before its ``accepts_from`` line, more than one minor line past
    its newest profile, or any other version of an engine without a release range) is refused in one
    line that names the nearest profile."""
    versions = engine_versions(name)
    if not any(versions):  # a profile without versions ('ideal')
        return "", ""
    parsed = parse_version(version, f"--engine-version / [engine] version for {name}")
    nearest = nearest_profile(name, version)
    if same_release(nearest, version):
        return nearest, ""
    spec = engine_releases().get(name)
    newest = versions[-1]
    too_old = spec is None or parsed.head(2) < version_key(spec["accepts_from"]).head(2)
    too_new = parsed > version_key(newest) and release_distance(newest, version) > (0, 1, 0)
    if too_old or too_new:
        accepted = (f"accepts releases from {spec['accepts_from']} to one minor line past {newest}" if spec
                    else "has profiles only for")
        raise PlannerError(f"engine {name} {accepted} ({', '.join(v for v in versions if v)}), not '{version}';"
                           f" the nearest profile is {name}-{nearest}: pass --engine-version {nearest} to use it")
    lines = release_distance(nearest, version)
    way = "newer" if version_key(nearest) > parsed else "older"
    far = next((f"{n} {what}{'s' if n > 1 else ''} {way}" for n, what in zip(lines, ("major line", "minor line",
                "patch release")) if n), "same release line")
    known = "" if not spec or not spec["releases"] or any(same_release(r, version) for r in spec["releases"]) else \
        f"; '{version}' is not among {name}'s published releases ({RELEASES_FILE.name})"
    return nearest, (f"{name} {version}: no profile of its own, priced with {name}-{nearest} (nearest profile,"
                     f" {far}; docs/engines.md){known}")


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


def engine_from_dict(data: dict, origin: str) -> EngineProfile:
    get, read, assumed_keys = _reader(data, origin)
    windows = (get("host", "overlap_window", str, "none"), get("speculative", "overlap_window", str, "none"))
    for w in windows:
        if w not in OVERLAP_WINDOWS:
            raise PlannerError(f"{origin}: overlap_window must be one of {', '.join(OVERLAP_WINDOWS)}, got '{w}'")
    sizes, spec_sizes = (_sizes(get("cuda_graphs", key, list, []), key, origin)
                         for key in ("capture_sizes", "spec_capture_sizes"))
    profile = EngineProfile(
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
    return replace(profile, assumed=tuple(assumed_keys))


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


def serving_default(engine: EngineProfile | None, key: str, memory_bytes: float, hardware_name: str) -> int | None:
    """The engine's own default for ``key`` ('max_num_seqs' or 'max_num_batched_tokens') on a GPU of this
    memory and name: the first tier whose floor the memory reaches (a GPU named in small_gpu_names only
    the last tier); None where the profile states no defaults."""
    values = getattr(engine, f"default_{key}", ()) if engine is not None else ()
    if not values:
        return None
    small = any(n in hardware_name.lower() for n in engine.small_gpu_names)
    gib = memory_bytes / 2 ** 30
    return next(v for floor, v in zip(engine.serving_tiers_gib, values)
                if gib >= floor and not (small and floor > 0) or floor == 0)

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


def engine_kernels(engine: EngineProfile, hardware: Hardware, temperature, top_p, origin: str) -> EngineKernels:
    """The kernels ``engine`` runs on ``hardware`` (all-reduce, grouped decode attention, L2 re-reads) and
    its sampling bytes per logit element (plain, verify) at the workload's temperature and top-p; a
    temperature below 0 or a top-p outside (0, 1] is refused."""
    temperature, top_p = float(temperature), float(top_p)
    if temperature < 0 or not (0 < top_p <= 1):
        raise PlannerError(f"{origin}: [workload] temperature = {temperature:g} must be >= 0 (0 = greedy) and"
                           f" top_p = {top_p:g} in (0, 1]")
    plain, verify = engine.logit_bytes(temperature, top_p)
    return EngineKernels(engine=engine.name, allreduce=engine.allreduce_table,
                         lm_head=engine.lm_head, self_spec_catch_up=engine.self_spec_catch_up,
                         grouped_decode_groups=engine.grouped_decode_groups,
                         grouped_decode_min_batch_heads=engine.grouped_decode_min_blocks_per_sm
                         * (hardware.compute_units or 0),
                         l2_reread_cost=hardware.l2_reread_cost, logit_bytes_plain=plain, logit_bytes_verify=verify)


def with_capture_limit(engine: EngineProfile, limit: int) -> EngineProfile:
    """The profile with its verify-pass CUDA-graph capture limit set to ``limit``, in the unit the
    engine's setting counts (tokens where the speculative ceiling is in tokens, else the profile's
    size unit): what `--cuda-graph-sizes` / `--max-cudagraph-capture-size` (vLLM) or
    `--cuda-graph-max-bs` (SGLang) set. The captured lists are extended on their own stride so the
    serving simulation's padding sees the same ceiling."""
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise PlannerError(f"CUDA-graph capture limit must be a whole number >= 1, got {limit!r}")
    tokens_cap = engine.spec_capture_max_tokens > 0
    batch_cap = engine.spec_capture_max_batch > 0 and engine.size_unit == "sequences"
    return replace(engine, max_capture_size=limit, unlimited=False,
                   spec_capture_max_tokens=limit if tokens_cap else engine.spec_capture_max_tokens,
                   spec_capture_max_batch=limit if batch_cap else engine.spec_capture_max_batch,
                   capture_sizes=_sizes_up_to(engine.capture_sizes, limit),
                   spec_capture_sizes=_sizes_up_to(engine.spec_capture_sizes, limit))


def _sizes_up_to(sizes: tuple[int, ...], limit: int) -> tuple[int, ...]:
    """Captured sizes cut at ``limit`` or continued past their largest on their last stride, ending at it."""
    if not sizes:
        return sizes
    kept = [s for s in sizes if s <= limit]
    stride = sizes[-1] - sizes[-2] if len(sizes) > 1 else 8
    kept += list(range(sizes[-1] + stride, limit + 1, stride))
    return tuple(sorted(set(kept) | {limit}))
