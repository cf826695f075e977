"""Serving-engine profiles: what an engine adds to the kernels of a decode step (data files under
``simulator/data/engines/<name>-<version>.toml``; key meanings and sources in that folder's README).

Per step: host time (scheduler, input preparation, sampling and, when speculating, rejection-sampler
and KV bookkeeping) and how much of it overlaps with GPU work; which passes replay CUDA graphs and
up to which size (the capture limit with speculation on can sit far below plain decoding's); the
per-kernel cost of passes that run eagerly; the host cost of each sequential draft pass.
Values a source gives sit in their section; values that had to be assumed sit under
``[assumed.<section>]`` and the profile's label says so. :mod:`simulator.specs.engine_files` reads a
profile's tables (and refuses a key the planner does not read); :mod:`simulator.specs.engine_catalog`
lists the profiles and picks the one that prices a release.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache

from simulator.errors import PlannerError, did_you_mean
from simulator.files import read_toml_file
from simulator.specs.deployment import EngineKernels
from simulator.specs.engine_catalog import (ENGINES_DIR, engine_names, engine_versions, list_engines, resolve_release,
                                           split_key)
from simulator.specs.engine_files import engine_fields
from simulator.specs.hardware import Hardware

DEFAULT_GPU_ENGINE = "vllm"
# The reference torch engine's host terms are fitted into its CPU profile, so CPUs default to "ideal".
DEFAULT_CPU_ENGINE = "ideal"


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
    quantized_modules: tuple[str, ...] = ()  # EngineKernels.quantized_modules
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
    # how the release's default runner runs this scenario's draft where it differs from what the profile was read
    # from (specs.engine_settings.with_runner_facts); "" where it does not
    runner_note: str = ""

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
    def release_asked(self) -> str:
        """The release the user asked for: the one a nearby release's profile prices (the version rule), else the
        profile's own."""
        return self.release or self.version

    @property
    def key(self) -> str:
        return f"{self.name}-{self.version}" if self.version and self.name != "ideal" else self.name

    @property
    def label(self) -> str:
        note = f"; {len(self.assumed)} values assumed, e.g. host time per step" if self.assumed else ""
        release = f" for {self.release_note}" if self.release_note else ""
        runner = f" ({self.runner_note})" if self.runner_note else ""
        return f"engine {self.display_name}{release}{runner}{note}"


def default_engine(hardware_kind: str) -> str:
    return DEFAULT_CPU_ENGINE if hardware_kind == "cpu" else DEFAULT_GPU_ENGINE


@lru_cache(maxsize=None)
def load_engine(name: str, version: str | None = None) -> EngineProfile:
    """An engine by name (newest version) or name and version; ``name`` may also be ``name-version``.
    A release without a profile of its own is priced with the profile
    :func:`simulator.specs.engine_catalog.nearest_profile` picks,
    and the profile says so (``release``, ``release_note``, shown in its label)."""
    if version is None and name not in engine_names() and name in list_engines():
        name, version = split_key(name)
    if name not in engine_names():
        raise PlannerError(f"unknown engine '{name}'{did_you_mean(name, engine_names())}")
    versions = engine_versions(name)
    asked = versions[-1] if version is None else str(version).strip()
    profile_version, note = resolve_release(name, asked)
    path = ENGINES_DIR / (f"{name}-{profile_version}.toml" if profile_version else f"{name}.toml")
    profile = engine_from_dict(read_toml_file(path, "engine profile"), str(path))
    return replace(profile, release=asked, release_note=note) if note else profile


def engine_from_dict(data: dict, origin: str) -> EngineProfile:
    """The profile a file's tables describe (:func:`simulator.specs.engine_files.engine_fields`)."""
    return EngineProfile(**engine_fields(data, origin))


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
                         lm_head=engine.lm_head, quantized_modules=engine.quantized_modules,
                         self_spec_catch_up=engine.self_spec_catch_up,
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
