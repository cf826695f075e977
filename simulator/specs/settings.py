"""One table of the scenario's settings: where each lives in the TOML, what type it holds, the default a
scenario without it gets, its flat override name (API keyword, sweep axis), and its command-line flag
with the help text.

Everything else is read from this table: the scenario schema (:data:`SCHEMA`, which refuses unknown keys),
the override map (:data:`OVERRIDE_KEYS`, :func:`simulator.specs.overrides.apply_overrides`), the defaults
the section parsers and the dashboard fall back on (:func:`default`), and the flags of every command
(:func:`simulator.cli.common.add_setting_args`). A new setting is one row here.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from simulator.errors import PlannerError
from simulator.specs.values import NUM, STR_OR_LIST

# Default share of the per-batch optimum a K* schedule may give up at any batch size for fewer ranges
# (simulator/plan/schedule.py): inside every prediction's step-time band (+-5-25%, specs/uncertainty.py)
SCHEDULE_TOLERANCE = 0.01
# the engine terms' quantile K* is chosen at (simulator/plan/decision_risk.py): the pessimistic 10%, so a K
# whose gain lies inside the terms' spread does not win over one that holds across it
DECISION_QUANTILE = 0.10
ROUTING_REUSE_DEFAULT = 0.5  # MoE adjacent-token expert reuse rho (docs/moe.md)


@dataclass(frozen=True)
class Setting:
    section: str  # TOML section ("" = top level)
    key: str | None  # key in that section; None: the setting fills several keys (acceptance)
    type: type | tuple = str  # what the TOML must hold (simulator.specs.values.check_table)
    default: object = None  # what a scenario without the key gets (None: nothing, or resolved elsewhere)
    name: str | None = None  # flat override name: API keyword, sweep axis, dashboard
    aliases: tuple[str, ...] = ()  # other override names of the same key
    flag: str | None = None  # command-line flag
    arg_type: type | None = None  # how argparse reads the flag (None: text)
    metavar: str | None = None
    choices: tuple | None = None
    help: str | Callable[[], str] = ""
    from_flag: Callable | None = None  # flag value -> override value (units, checks naming the flag)

    @property
    def dest(self) -> str:
        """The argparse attribute of the flag ('--draft-model' -> 'draft_model')."""
        return self.flag.lstrip("-").replace("-", "_")

    def help_text(self) -> str:
        return self.help() if callable(self.help) else self.help


# --- flag values that need more than a type ----------------------------------------------------

def busbw_from_gbps(gbps: float | None, flag: str) -> float | None:
    """GB/s -> bytes/s (refused unless a finite number > 0)."""
    if gbps is None:
        return None
    if not np.isfinite(gbps) or gbps <= 0:
        raise PlannerError(f"{flag} {gbps:g}: give your server's all-reduce bus bandwidth in GB/s (> 0), e.g. 18.6")
    return gbps * 1e9


def share_from_text(text: str | None, flag: str, zero_means: str = "the per-batch argmax") -> float | None:
    """A share given as 0.01 or 1% (refused unless a finite number in [0, 0.5))."""
    if text is None:
        return None
    t = text.strip()
    try:
        value = float(t[:-1]) / 100 if t.endswith("%") else float(t)
    except ValueError:
        value = float("nan")
    if not (np.isfinite(value) and 0 <= value < 0.5):
        raise PlannerError(f"{flag} '{text}': give a share in [0, 0.5) such as 0.01 or 1% (0: {zero_means})")
    return value


def quantile_from_text(text: str | None, flag: str) -> float | None:
    """The engine terms' quantile K* is chosen at, as 0.10 or 10% (0: at their centre)."""
    return share_from_text(text, flag, "K* at the engine terms' centre")


def engine_count(example: str, default: str = "the engine's default") -> Callable:
    """A count given on the command line: a whole number >= 1, else one line naming the flag (0 is not
    read as 'the default')."""
    def check(value: int | None, flag: str) -> int | None:
        if value is not None and value < 1:
            raise PlannerError(f"{flag} {value}: give a whole number >= 1 (e.g. {flag} {example}), or leave it out"
                               f" for {default}")
        return value
    return check


def _engine_help() -> str:
    from simulator.specs.engine_catalog import engine_names
    return (f"serving engine whose host time and CUDA-graph capture to model: {', '.join(engine_names())}"
            " (ideal: kernels only); default vllm on GPUs (--list engines: the releases)")


def _draft_help() -> str:
    from simulator.specs.drafts import draft_syntax_list
    return f"draft method: {draft_syntax_list()} (--list drafts: what each prices)"


def _dtype_help(kind: str) -> Callable[[], str]:
    def text() -> str:
        from simulator.specs.hardware import ACT_DTYPES, KV_DTYPES, WEIGHT_DTYPES
        if kind == "weights":
            return (f"weight dtype: {', '.join(WEIGHT_DTYPES)} (weights only; sizing's fp8 is W8A8:"
                    " --dtype fp8 --act-dtype fp8)")
        if kind == "activations":
            return (f"activation dtype: {', '.join(ACT_DTYPES)} (fp8 with fp8 weights runs fp8 tensor cores;"
                    " nvfp4 / mxfp4 with weights of the same format FP4 ones, where the GPU has them)")
        if kind == "attention":
            return (f"the attention projections' weights (q/k/v/o, MLA's q_a/q_b/kv_a/kv_b/o, linear attention's in/out):"
                    f" {', '.join(WEIGHT_DTYPES)}; bf16 runs them as bf16 GEMMs beside quantized MLPs / experts"
                    " (default: bf16 where the checkpoint's quantization_config leaves self_attn out, e.g. NVIDIA's"
                    " NVFP4 DeepSeek checkpoints, else the weights' dtype)")
        return f"KV-cache dtype: {', '.join(KV_DTYPES)}"
    return text


ACCEPTANCE_HELP = ("i.i.d. rate (0.8), per-position rates (0.7,0.5,0.3), or a measured file:"
                   " speculation_profile.json, vllm bench serve JSON, vLLM per-request metrics JSON, /metrics dump,"
                   " runs CSV (recognised by content; vLLM's unconditional per-position rates become conditional;"
                   " max_supported_k caps K); default: the draft method's preset (simulator/data/acceptance.toml)")
DEPLOYMENT_HELP = ("deployment calibration (python -m calibration.fit_deployment):"
                   " engine terms and acceptance fitted on a few measurements of this deployment")
CAPTURE_HELP = ("the engine's CUDA-graph capture limit for the verify pass, in the unit its setting counts (vLLM"
                " --cuda-graph-sizes / --max-cudagraph-capture-size: tokens; SGLang --cuda-graph-max-bs: sequences);"
                " default the engine profile's")

S = Setting
SETTINGS: tuple[Setting, ...] = (
    S("", "name"), S("", "description"),
    S("model", "name", name="model", flag="--model",
      help="catalog model name or path to a Hugging Face config.json"),
    S("model", "source"),
    S("hardware", "name", name="hardware", flag="--hardware",
      help="catalog hardware name (e.g. h100-sxm, h200, mi300x)"),
    S("hardware", "tp", int, 1, name="tp", flag="--tp", arg_type=int, help="tensor-parallel degree"),
    S("hardware", "ep", int, name="ep", flag="--ep", arg_type=int, from_flag=engine_count("8", "the layout's default"),
      help="expert-parallel groups (MoE; must divide tp)"),
    S("hardware", "layout", name="layout", flag="--layout", choices=("tp", "tp-ep", "dp-ep"),
      help="MoE parallel layout: TP attention + TP experts, TP attention + EP, or DP attention + EP"),
    S("hardware", "dp", int, name="dp", flag="--dp", arg_type=int, from_flag=engine_count("8", "the layout's default"),
      help="attention data-parallel groups (layout dp-ep; default = tp)"),
    S("hardware", "peak_bf16_flops_per_s", NUM, name="peak_bf16_flops_per_s"),
    S("hardware", "peak_fp8_flops_per_s", NUM), S("hardware", "peak_fp4_flops_per_s", NUM),
    S("hardware", "hbm_bandwidth_bytes_per_s", NUM, name="hbm_bandwidth_bytes_per_s"),
    S("hardware", "memory_bytes", NUM), S("hardware", "price_per_gpu_hour_usd", NUM),
    # your nccl-tests busbw: the flag takes GB/s, the TOML and the override bytes/s
    S("hardware", "interconnect_bandwidth_bytes_per_s", NUM, name="allreduce_busbw", flag="--allreduce-busbw",
      arg_type=float, metavar="GB/s", from_flag=busbw_from_gbps,
      help="your server's all-reduce bus bandwidth (nccl-tests all_reduce_perf busbw at large messages);"
           " prices every all-reduce's bandwidth term (PCIe servers differ by up to 10x); the TOML key holds bytes/s"),
    S("precision", "weights", default="bf16", name="dtype", aliases=("weight_dtype",), flag="--dtype",
      help=_dtype_help("weights")),
    S("precision", "activations", default="bf16", name="act_dtype", flag="--act-dtype", help=_dtype_help("activations")),
    S("precision", "kv_cache", default="bf16", name="kv_dtype", flag="--kv-dtype", help=_dtype_help("kv")),
    S("precision", "experts"),
    S("precision", "attention", name="attention_dtype", flag="--attention-dtype", help=_dtype_help("attention")),
    S("draft", "method", default="eagle", name="draft", flag="--draft", help=_draft_help),
    S("draft", "model"),
    # checkpoint: the path / HF id the engine loads
    S("draft", "checkpoint", name="draft_checkpoint", flag="--draft-model", metavar="PATH",
      help="the draft checkpoint (path or Hugging Face id) the engine loads for eagle / eagle3 / model drafts;"
           " written into the vLLM file as \"model\""),
    S("acceptance", None, name="acceptance", flag="--acceptance", help=ACCEPTANCE_HELP),
    S("acceptance", "rate", NUM), S("acceptance", "rates", list),
    S("acceptance", "source", name="acceptance_source"),
    S("acceptance", "preset", name="acceptance_preset"),
    S("acceptance", "band", NUM, 0.0, name="acceptance_band", flag="--acceptance-band", arg_type=float, metavar="D",
      help="uncertainty +-D on every per-position rate (e.g. 0.1): K* is the K nearest the best across"
           " the band, and the schedule says where K* depends on acceptance"),
    S("acceptance", "file"), S("acceptance", "context_points", list), S("acceptance", "context_factors", list),
    S("acceptance", "context_source"),
    S("acceptance", "rank_tail", NUM),  # a draft tree's rank tail: the rates are its top-1 rates per depth
    S("workload", "context_len", int, 2048, name="context_len", flag="--context-len", arg_type=int,
      help="tokens already in each sequence's KV cache"),
    S("workload", "batch_sizes", STR_OR_LIST, "1-512", name="batch_sizes", flag="--batch-sizes",
      help="1-256 (every integer), 1,2,4,8, or 1-256:pow2 (its powers of two and both ends)"),
    S("workload", "k_max", int, 8, name="k_max", flag="--k-max", arg_type=int, help="largest K considered"),
    S("workload", "fixed_k", int, 3, name="fixed_k", flag="--fixed-k", arg_type=int,
      help="the fixed-K policy compared against"),
    S("workload", "temperature", NUM, 0.0, name="temperature", flag="--temperature", arg_type=float,
      help="sampling temperature (0 = greedy, the default): prices the engine's sampling and rejection passes over"
           " the logits"),
    S("workload", "top_p", NUM, 1.0, name="top_p", flag="--top-p", arg_type=float,
      help="top-p of sampled requests (1 = off, the default)"),
    S("workload", "memory_utilization", NUM, 0.9, name="memory_utilization"),
    S("workload", "allow_context_beyond_model", bool, False, name="allow_long_context"),
    S("workload", "context_lens", STR_OR_LIST, name="context_lens", flag="--context-lens",
      help="context axis of the K* map: 512,2048,8192, 512-131072 (powers of two) or 512-131072:16 (16 log-spaced"
           " points); used by --format kmap and vllm-ctx"),
    S("workload", "schedule_tolerance", NUM, SCHEDULE_TOLERANCE, name="schedule_tolerance",
      flag="--schedule-tolerance", metavar="SHARE", from_flag=share_from_text,
      help="goodput share of the per-batch best the K* schedule may give up at any batch size to use"
           " fewer ranges of K (default 0.01 = 1%%; 0 = the raw per-batch argmax); also 1%%"),
    S("workload", "decision_quantile", NUM, DECISION_QUANTILE, name="decision_quantile",
      flag="--decision-quantile", metavar="Q", from_flag=quantile_from_text,
      help="K* is the K with the best goodput share at this quantile of the engine terms' draws (default 0.10:"
           " the pessimistic 10%%; 0 = at the terms' centre)"),
    S("routing", "kind", default="uniform"), S("routing", "skew", NUM, 0.0, name="routing_skew"),
    S("routing", "probabilities", list),
    # 0.5: published MoE measurements report verifying 4 tokens loads ~2.5x the experts of one
    # (1 + 3 (1 - rho) = 2.5, docs/moe.md); one default whether the model comes by flag or by scenario
    S("routing", "reuse", NUM, ROUTING_REUSE_DEFAULT, name="routing_reuse", flag="--routing-reuse", arg_type=float,
      help=f"MoE: probability that a position re-uses the previous position's experts (0 <= rho < 1; default"
           f" {ROUTING_REUSE_DEFAULT:g}, from published expert counts: docs/moe.md)"),
    S("calibration", "profile", name="calibration", flag="--calibration",
      help="calibration profile JSON (python -m calibration.fit, or a measured-table profile under"
           " simulator/data/profiles/; 'none': datasheet only)"),
    S("calibration", "deployment", name="deployment", flag="--deployment", metavar="FIT.json", help=DEPLOYMENT_HELP),
    # false: the profile's microbenchmarks alone, without its fitted engine terms (what calibration.validate refits)
    S("calibration", "engine_terms", bool, True, name="engine_terms"),
    # false: the physics alone, without the engine terms learned from the published corpus (specs.step_terms)
    S("calibration", "learned", bool, True, name="learned", flag="--physics-only", arg_type=bool,
      from_flag=lambda on, flag: False if on else None,
      help="the physics alone: leave out the engine terms learned from published measurements"
           " (simulator/data/learned_step.json); a deployment fit (--deployment) still applies"),
    S("engine", "name", name="engine", flag="--engine",
      help=_engine_help),
    S("engine", "version", name="engine_version", flag="--engine-version",
      help="engine release (vLLM from 0.6, SGLang from 0.4), PEP 440 order (0.11 = 0.11.0): priced with its own"
           " profile or the nearest one, named in the provenance line (docs/engines.md); default the newest profile;"
           " not the file format's version (--export-version)"),
    # the capture limit: specs.engines.with_capture_limit
    S("engine", "max_capture_size", int, name="max_capture_size", flag="--max-capture-size", arg_type=int,
      metavar="N", from_flag=engine_count("1024"), help=CAPTURE_HELP),
    # [serving] is an open section (simulator.serving.engine checks it); these two keys are scenario settings too
    S("serving", "max_num_seqs", int, name="max_num_seqs", flag="--max-num-seqs", arg_type=int, metavar="N",
      from_flag=engine_count("256"),
      help="the engine's running-batch cap (vLLM --max-num-seqs, SGLang --max-running-requests); default [serving]"
           " max_num_seqs, else the engine's default"),
    S("serving", "max_num_batched_tokens", int, name="max_num_batched_tokens", flag="--max-num-batched-tokens",
      arg_type=int, metavar="N", from_flag=engine_count("8192"),
      help="vLLM's token budget per step (--max-num-batched-tokens); default [serving] max_num_batched_tokens, else"
           " vLLM's default"),
)
del S

# Sections other modules check (serving, traffic, SLOs, sizing, validation): the scenario schema leaves them open
OPEN_SECTIONS = ("serving", "traffic", "slo", "sizing", "validation")

SCHEMA: dict[str, dict[str, type | tuple]] = {}
for _s in SETTINGS:
    if _s.key is not None and _s.section not in OPEN_SECTIONS:
        SCHEMA.setdefault(_s.section, {})[_s.key] = _s.type

# Flat override names (CLI flags, API keywords, sweep axes) -> (section, key)
OVERRIDE_KEYS: dict[str, tuple[str, str | None]] = {}
for _s in SETTINGS:
    for _name in ((_s.name,) if _s.name else ()) + _s.aliases:
        OVERRIDE_KEYS[_name] = (_s.section, _s.key)

BY_NAME: dict[str, Setting] = {_s.name: _s for _s in SETTINGS if _s.name}
_BY_KEY: dict[tuple[str, str], Setting] = {(_s.section, _s.key): _s for _s in SETTINGS if _s.key is not None}


def default(section: str, key: str):
    """The value a scenario without [section] key gets (None: none)."""
    return _BY_KEY[(section, key)].default
