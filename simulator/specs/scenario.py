"""Scenarios: TOML files (``scenarios/*.toml``) validated on load, plus overrides from flags or code.

Unknown keys and wrong types are errors naming the file, the key and the expected type. Sections
other modules own (``serving``, ``traffic``, ``slo``, ``sizing``) are kept as plain tables in
``Scenario.extra`` and validated there with :func:`check_table`.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from simulator.specs.collectives import server_collectives
from simulator.specs.acceptance import (Acceptance, ContextAcceptance, context_acceptance, parse_acceptance, parse_band,
                                        preset_for)
from simulator.specs.acceptance_files import AcceptanceFile, is_acceptance_path, read_acceptance_file
from simulator.specs.deployment import LAYOUTS, Deployment, check_deployment, make_deployment
from simulator.specs.engines import EngineProfile, default_engine, load_engine, sampling_logit_bytes, with_capture_limit
from simulator.specs.drafts import DraftSpec, check_draft, parse_draft
from simulator.specs.deployment_fit import DeploymentFit, load_deployment_fit, scenario_identity
from simulator.errors import PlannerError
from simulator.files import read_toml_file
from simulator.specs.hardware import Hardware, check_group_fits, custom_hardware, load_hardware
from simulator.specs.models import ModelSpec, load_model
from simulator.specs.routing import Routing, check_reuse
from simulator.specs.values import (NUM, STR_OR_LIST, check_table, parse_batch_sizes,  # noqa: F401 (API)
                                    parse_context_lens)
from simulator.specs.profile import (Profile, check_profile_matches, load_profile, load_shipped_profile, prior_profile,
                                     shipped_profile_path)

REPO_ROOT = Path(__file__).resolve().parent.parent.parent
SCENARIO_DIR = REPO_ROOT / "scenarios"
DEFAULT_SCENARIO = SCENARIO_DIR / "default.toml"

SCHEMA: dict[str, dict[str, type | tuple]] = {
    "": {"name": str, "description": str},
    "model": {"name": str, "source": str},
    "hardware": {"name": str, "tp": int, "ep": int, "layout": str, "dp": int,
                 "peak_bf16_flops_per_s": NUM, "peak_fp8_flops_per_s": NUM,
                 "hbm_bandwidth_bytes_per_s": NUM, "memory_bytes": NUM, "price_per_gpu_hour_usd": NUM,
                 "interconnect_bandwidth_bytes_per_s": NUM},
    "precision": {"weights": str, "activations": str, "kv_cache": str, "experts": str},
    "draft": {"method": str, "model": str, "checkpoint": str},  # checkpoint: path / HF id the engine loads
    "acceptance": {"rate": NUM, "rates": list, "source": str, "preset": str, "band": NUM, "file": str,
                   "context_points": list, "context_factors": list, "context_source": str},
    "workload": {"context_len": int, "batch_sizes": STR_OR_LIST, "k_max": int, "fixed_k": int,
                 "temperature": NUM, "top_p": NUM,
                 "memory_utilization": NUM, "allow_context_beyond_model": bool, "context_lens": STR_OR_LIST,
                 "schedule_tolerance": NUM},
    "routing": {"kind": str, "skew": NUM, "probabilities": list, "reuse": NUM},
    "calibration": {"profile": str, "deployment": str},
    "engine": {"name": str, "version": str, "max_capture_size": int},  # capture limit: with_capture_limit
}
OPEN_SECTIONS = ("serving", "traffic", "slo", "sizing", "validation")
# raw-dict marker: acceptance was given as an override, so a deployment fit's measured rates do not replace it
ACCEPTANCE_GIVEN = "_acceptance_given"


# Default share of the per-batch optimum a K* schedule may give up at any batch size for fewer ranges
# (simulator/plan/schedule.py): inside every prediction's step-time band (+-5-25%, specs/uncertainty.py)
SCHEDULE_TOLERANCE = 0.01

# Beyond this exponent a Zipf router sends every token to the same top-k experts to within 1e-9
# (2^-30 < 1e-9), and i^skew overflows float64 for i = 256 experts at skew ~ 128.
ZIPF_SKEW_MAX = 30.0


@dataclass
class Scenario:
    """A resolved scenario: specs, deployment, draft, acceptance and workload grid."""

    name: str
    description: str
    model: ModelSpec
    hardware: Hardware
    deployment: Deployment
    draft: DraftSpec
    acceptance: Acceptance
    context_len: int
    batch_sizes: np.ndarray
    k_max: int
    fixed_k: int
    profile: Profile | None = None
    engine: EngineProfile | None = None
    origin: str = "flags"
    extra: dict = field(default_factory=dict)
    raw: dict = field(default_factory=dict, repr=False)
    warnings: list = field(default_factory=list)  # one-line notes on inputs accepted with a caveat
    context_lens: np.ndarray | None = None  # [workload] context_lens: the context axis of the (B, L) K* map
    acceptance_context: "ContextAcceptance | None" = None  # acceptance factor by context length
    deployment_fit: DeploymentFit | None = None  # [calibration] deployment: terms fitted on this deployment
    acceptance_band: float = 0.0  # +- on every per-position rate: K* chosen to stay near-best across it
    schedule_tolerance: float = SCHEDULE_TOLERANCE  # [workload] schedule_tolerance: goodput K* may give up for fewer ranges
    acceptance_file: "AcceptanceFile | None" = None  # [acceptance] file / --acceptance PATH: what was read

    @property
    def cost_source(self) -> str:
        """What the step times rest on: kernels (datasheet, calibration profile or measured tables)
        and the engine profile that adds host time and graph capture."""
        kernels = self.profile.label if self.profile else "datasheet only (uncalibrated roofline)"
        fit = f"; {self.deployment_fit.label}" if self.deployment_fit else ""
        if self.engine is None or self.engine.name == "ideal":
            return kernels + fit
        return f"{kernels}; {self.engine.label}{fit}"

    def with_overrides(self, **overrides) -> "Scenario":
        """A new scenario with flat overrides applied (same keys as :func:`apply_overrides`)."""
        raw = apply_overrides(self.raw, overrides)
        return build_scenario(raw, self.origin, self.raw.get("_base_dir"))


def _resolve_path(path: str, base_dir: str | None) -> str:
    p = Path(path)
    if p.is_absolute() or p.exists():
        return str(p)
    for base in (base_dir, REPO_ROOT):
        if base and (Path(base) / p).exists():
            return str(Path(base) / p)
    return str(p)


def _check_sections(raw: dict, origin: str) -> None:
    """Unknown sections and keys, wrong types, NaN: refused before anything is resolved."""
    check_table({k: v for k, v in raw.items() if not isinstance(v, dict)}, SCHEMA[""], origin, "")
    for section, table in raw.items():
        if not isinstance(table, dict) or section in OPEN_SECTIONS:
            continue
        if section not in SCHEMA:
            raise PlannerError(f"{origin}: unknown section [{section}]"
                               f" (known: {', '.join(sorted(set(SCHEMA) - {''} | set(OPEN_SECTIONS)))})")
        check_table(table, SCHEMA[section], origin, section)


def _model_and_hardware(raw: dict, get, origin: str, base_dir: str | None) -> tuple[ModelSpec, Hardware]:
    model_name = get("model", "name")
    if model_name is None:
        raise PlannerError(f"{origin}: missing [model] name (a catalog name or a config.json path)")
    model = load_model(_resolve_path(model_name, base_dir) if model_name.endswith(".json") else model_name)
    hw_name = get("hardware", "name")
    if hw_name is None:
        raise PlannerError(f"{origin}: missing [hardware] name (a catalog name such as h100-sxm)")
    hardware = load_hardware(hw_name)
    hw_over = {k: float(v) for k, v in raw.get("hardware", {}).items() if k not in ("name", "tp", "ep", "layout", "dp")}
    if hw_over:
        hardware = custom_hardware(hardware, **hw_over, source=f"{hardware.source}; overridden: {', '.join(hw_over)}")
    return model, hardware


def _deployment(raw: dict, get, origin: str, model: ModelSpec) -> Deployment:
    routing_tbl = raw.get("routing", {})
    routing = Routing(kind=routing_tbl.get("kind", "uniform"), skew=float(routing_tbl.get("skew", 0.0)),
                      probabilities=tuple(routing_tbl.get("probabilities", ())),
                      reuse=check_reuse(float(routing_tbl.get("reuse", 0.0)), f"{origin}: [routing] reuse"))
    if routing.kind == "zipf" and "skew" not in routing_tbl:
        raise PlannerError(f"{origin}: [routing] kind = 'zipf' needs a 'skew' exponent (e.g. 1.0)")
    if not 0 <= routing.skew <= ZIPF_SKEW_MAX:
        raise PlannerError(f"{origin}: [routing] skew = {routing.skew:g} is outside [0, {ZIPF_SKEW_MAX:g}]"
                           " (Zipf exponent: 0 is uniform, 1-2 is strongly skewed)")
    layout = get("hardware", "layout")
    if layout is not None and layout not in LAYOUTS:
        raise PlannerError(f"{origin}: [hardware] layout = '{layout}' is unknown (use one of {', '.join(LAYOUTS)})")
    deployment = make_deployment(
        tp=get("hardware", "tp", 1), ep=get("hardware", "ep"), layout=layout, dp=get("hardware", "dp"),
        weight_dtype=get("precision", "weights", "bf16"), act_dtype=get("precision", "activations", "bf16"),
        kv_dtype=get("precision", "kv_cache", "bf16"), expert_dtype=get("precision", "experts"),
        routing=routing, memory_utilization=float(get("workload", "memory_utilization", 0.9)))
    check_deployment(model, deployment)
    return deployment


def _draft(get, origin: str, base_dir: str | None, model: ModelSpec, deployment: Deployment) -> DraftSpec:
    method = get("draft", "method", "eagle")
    if method == "model":
        name = get("draft", "model")
        if not name:
            raise PlannerError(f"{origin}: [draft] method = 'model' needs model = 'NAME' (a catalog model or config.json)")
        method = f"model:{_resolve_path(name, base_dir) if name.endswith('.json') else name}"
    draft = parse_draft(method)
    check_draft(draft, model, deployment)
    return draft


def _workload(get, origin: str, model: ModelSpec) -> dict:
    """context_len, K range, batch sizes, context lengths, and the caveats allowed through (warnings)."""
    context_len = get("workload", "context_len", 2048)
    if context_len < 1:
        raise PlannerError(f"{origin}: context_len must be >= 1, got {context_len}")
    warnings_: list[str] = []
    max_pos = model.max_position_embeddings
    beyond_ok = get("workload", "allow_context_beyond_model", False)
    if max_pos and context_len > max_pos:
        if not beyond_ok:
            raise PlannerError(f"{origin}: context_len={context_len} exceeds {model.name}'s max_position_embeddings"
                               f"={max_pos}; shorten it, or set [workload] allow_context_beyond_model = true"
                               " (API: allow_long_context=True) for a model served with RoPE scaling")
        warnings_.append(f"context_len={context_len} exceeds {model.name}'s max_position_embeddings={max_pos}"
                         " (allowed by allow_context_beyond_model: assumes the model is served with RoPE scaling)")
    k_max, fixed_k = get("workload", "k_max", 8), get("workload", "fixed_k", 3)
    if k_max < 0 or fixed_k < 0:
        raise PlannerError(f"{origin}: K must be >= 0 (k_max={k_max}, fixed_k={fixed_k})")
    if k_max > 32:
        raise PlannerError(f"{origin}: k_max={k_max} is out of range (at most 32)")
    if fixed_k > k_max:
        raise PlannerError(f"{origin}: fixed_k={fixed_k} exceeds k_max={k_max}")
    context_lens = None
    if get("workload", "context_lens") is not None:
        context_lens = parse_context_lens(get("workload", "context_lens"), f"{origin}: [workload] context_lens")
        if max_pos and context_lens.max() > max_pos and not beyond_ok:
            raise PlannerError(f"{origin}: context_lens up to {context_lens.max()} exceed {model.name}'s"
                               f" max_position_embeddings={max_pos}; shorten them, or set [workload]"
                               " allow_context_beyond_model = true for a model served with RoPE scaling")
    tol = float(get("workload", "schedule_tolerance", SCHEDULE_TOLERANCE))
    if not 0 <= tol < 0.5:
        raise PlannerError(f"{origin}: schedule_tolerance={tol:g} is outside [0, 0.5): the share of the best goodput"
                           " a K* schedule may give up at any batch size for fewer ranges (0.01 = 1%; 0 = per-batch"
                           " argmax)")
    return {"context_len": int(context_len), "k_max": int(k_max), "fixed_k": int(fixed_k), "schedule_tolerance": tol,
            "batch_sizes": parse_batch_sizes(get("workload", "batch_sizes", "1-512")),
            "context_lens": context_lens, "warnings": warnings_}


def build_scenario(raw: dict, origin: str = "flags", base_dir: str | None = None) -> Scenario:
    """Validate a scenario dict (TOML layout) and resolve every spec in it: model and hardware, the
    parallel layout, draft and acceptance, workload grid, then the engine profile and what the kernel
    times rest on (:func:`resolve_profile`)."""
    raw = copy.deepcopy(raw)
    raw.pop("_base_dir", None)
    acceptance_given = raw.pop(ACCEPTANCE_GIVEN, False)  # by a flag or the API: it outranks a deployment fit's
    _check_sections(raw, origin)
    get = lambda section, key, default=None: raw.get(section, {}).get(key, default)  # noqa: E731
    model, hardware = _model_and_hardware(raw, get, origin, base_dir)
    deployment = _deployment(raw, get, origin, model)
    try:
        multi_node = check_group_fits(hardware, deployment.tp, "tp")
    except PlannerError as err:
        raise PlannerError(f"{origin}: {err}") from None
    draft = _draft(get, origin, base_dir, model, deployment)
    acceptance, acc_file = _scenario_acceptance(raw.get("acceptance", {}), draft.method, origin, base_dir)
    wl = _workload(get, origin, model)
    if acc_file is not None:
        wl["k_max"], wl["fixed_k"], notes = acc_file.cap(wl["k_max"], wl["fixed_k"])
        wl["warnings"] = list(wl["warnings"]) + notes
    acceptance_context = context_acceptance(raw.get("acceptance", {}), acceptance, origin)
    engine_tbl = raw.get("engine", {})
    engine = load_engine(engine_tbl.get("name") or default_engine(hardware.kind), engine_tbl.get("version"))
    if engine_tbl.get("max_capture_size") is not None:
        engine = _capture_limit(engine, engine_tbl["max_capture_size"], origin)
    profile = resolve_profile(get("calibration", "profile"), hardware, engine.name, base_dir)
    profile = fit_to_server(profile, hardware, get("hardware", "interconnect_bandwidth_bytes_per_s"))
    deployment = replace(deployment, allreduce=engine.allreduce_table, engine=engine.name,
                         grouped_decode_groups=engine.grouped_decode_groups,
                         grouped_decode_min_batch_heads=engine.grouped_decode_min_blocks_per_sm * (hardware.compute_units or 0),
                         l2_reread_cost=hardware.l2_reread_cost,
                         **sampling_logit_bytes(engine, get("workload", "temperature", 0.0), get("workload", "top_p", 1.0), origin))
    fit_path = get("calibration", "deployment")
    fit = load_deployment_fit(_resolve_path(fit_path, base_dir), origin,
                              scenario_identity(model, hardware, deployment, engine, draft)) if fit_path else None
    if fit is not None and fit.acceptance_rates and not acceptance_given:
        acceptance = Acceptance(fit.acceptance_rates, f"measured on this deployment ({Path(fit.path).name})")
    raw["_base_dir"] = base_dir
    if acceptance_given:
        raw[ACCEPTANCE_GIVEN] = True
    return Scenario(
        name=raw.get("name", Path(origin).stem if origin != "flags" else "custom"),
        description=raw.get("description", ""), model=model, hardware=hardware, deployment=deployment,
        draft=draft, acceptance=acceptance, context_len=wl["context_len"], batch_sizes=wl["batch_sizes"],
        k_max=wl["k_max"], fixed_k=wl["fixed_k"], profile=profile, engine=engine, origin=origin,
        extra={s: raw[s] for s in OPEN_SECTIONS if s in raw}, raw=raw,
        warnings=_warn(wl["warnings"] + ([multi_node] if multi_node else [])
                       + pcie_collective_caveat(hardware, deployment, profile)),
        context_lens=wl["context_lens"], acceptance_context=acceptance_context,
        acceptance_band=parse_band(get("acceptance", "band", 0.0), origin),
        schedule_tolerance=wl["schedule_tolerance"], acceptance_file=acc_file, deployment_fit=fit)


def _capture_limit(engine: EngineProfile, limit, origin: str) -> EngineProfile:
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise PlannerError(f"{origin}: [engine] max_capture_size = {limit!r}: give the CUDA-graph capture limit as a"
                           " whole number >= 1 (tokens for vLLM, sequences for SGLang), e.g. 1024")
    return with_capture_limit(engine, limit)


def fit_to_server(profile: Profile | None, hardware: Hardware, given_bus_bandwidth) -> Profile | None:
    """The profile with its all-reduce tables fitted to the scenario's server (a given bus bandwidth,
    or a PCIe table's topology limit lifted to its own 2-GPU link rate); unchanged otherwise."""
    if profile is None or not profile.collectives:
        return profile
    given = float(given_bus_bandwidth) if given_bus_bandwidth is not None else None
    collectives, change = server_collectives(profile.collectives, hardware.interconnect, given)
    if not change:
        return profile
    return replace(profile, collectives=collectives,
                   provenance=profile.provenance | {"collectives_note": change["note"], "collectives_basis":
                                                    change["basis"], "collectives_gpus": change["gpus"]})


def pcie_collective_caveat(hardware: Hardware, dep: Deployment, profile: Profile | None) -> list[str]:
    """A measured all-reduce table over PCIe is one server's topology (switches, CPU sockets, P2P on or
    off): published PCIe Gen4 servers run 2.6-25 GB/s bus bandwidth (simulator/specs/collectives.py)."""
    if not hardware.interconnect.lower().startswith("pcie") or dep.tp < 4 or profile is None:
        return []
    entry = (profile.collectives.get(dep.allreduce) or profile.collectives.get("all_reduce") or {}).get(str(dep.tp))
    basis = profile.provenance.get("collectives_basis")
    if not entry or basis == "given":
        return []
    bus = float(entry["bus_bandwidth_bytes_per_s"]) / 1e9
    basis = "the median published PCIe server" if dep.tp in profile.provenance.get("collectives_gpus", ()) \
        else "one measured server, the median of the published ones"
    return [f"{hardware.name} x{dep.tp} over PCIe: all-reduce priced at {bus:.1f} GB/s bus bandwidth ({basis});"
            " PCIe servers differ by up to 10x: give yours (nccl-tests all_reduce_perf busbw) as [hardware]"
            f" interconnect_bandwidth_bytes_per_s (bytes/s) or predict's --allreduce-busbw (GB/s) before trusting"
            f" TP {dep.tp} step times"]


def _warn(messages: list[str]) -> list[str]:
    """Report input caveats as PlannerWarning (the CLIs print each as one 'warning:' line) and keep them."""
    import warnings

    from simulator.errors import PlannerWarning
    for msg in messages:
        warnings.warn(msg, PlannerWarning, stacklevel=3)
    return list(messages)


def resolve_profile(given: str | None, hardware: Hardware, engine: str, base_dir: str | None) -> Profile | None:
    """What the kernel times rest on, best evidence first: the profile a scenario or flag names ("none":
    the datasheet alone); else, for a GPU, the shipped profile of measured kernel tables for that device
    (the engine's own when shipped); else its published prior (attained fractions others measured);
    else nothing (datasheet only)."""
    if given == "none":
        return None
    if given:
        profile = load_profile(_resolve_path(given, base_dir))
        check_profile_matches(profile, hardware.name)
        return profile
    if hardware.kind != "gpu" or hardware.source.startswith("custom"):
        return None
    shipped = shipped_profile_path(hardware.name, engine)
    return load_shipped_profile(shipped) if shipped else prior_profile(hardware)


FALLBACK_RATE = 0.7  # used only where no preset exists (early-exit) and the scenario gives none


def _scenario_acceptance(acc_tbl: dict, method: str, origin: str,
                         base_dir: str | None = None) -> tuple[Acceptance, AcceptanceFile | None]:
    """[acceptance]: a measured file, or explicit rate / rates; else the named preset; else the draft
    method's preset. Returns the acceptance and the file it was read from (None otherwise).

    Presets (simulator/data/acceptance.toml) carry their own source; a method without one (early-exit)
    falls back to an i.i.d. FALLBACK_RATE labelled as an assumption.
    """
    if "file" in acc_tbl:
        clash = [k for k in ("rate", "rates", "preset") if k in acc_tbl]
        if clash:
            raise PlannerError(f"{origin}: [acceptance] give either 'file' or '{clash[0]}', not both")
        got = read_acceptance_file(_resolve_path(acc_tbl["file"], base_dir), flag="[acceptance] file")
        return got.acceptance(), got
    return _table_acceptance(acc_tbl, method, origin), None


def _table_acceptance(acc_tbl: dict, method: str, origin: str) -> Acceptance:
    if "rate" in acc_tbl and "rates" in acc_tbl:
        raise PlannerError(f"{origin}: [acceptance] give either 'rate' or 'rates', not both")
    explicit = "rate" in acc_tbl or "rates" in acc_tbl
    if explicit and "preset" in acc_tbl:
        raise PlannerError(f"{origin}: [acceptance] give either 'preset' or 'rate'/'rates', not both")
    if explicit:
        return parse_acceptance(acc_tbl.get("rates", acc_tbl.get("rate")), acc_tbl.get("source", "assumed"))
    name = acc_tbl.get("preset", method)
    preset = preset_for(name)
    if preset is None and "preset" in acc_tbl:
        from simulator.specs.acceptance import load_presets
        raise PlannerError(f"{origin}: [acceptance] unknown preset '{name}' (known: {', '.join(load_presets())})")
    if preset is None:
        return Acceptance((FALLBACK_RATE,), acc_tbl.get("source", f"assumed {FALLBACK_RATE:g}: no published preset for"
                                                                 f" draft method {method}; give measured rates"))
    if "source" in acc_tbl:
        return Acceptance(preset.rates, acc_tbl["source"])
    return preset


def _draft_method_of(table: dict) -> str:
    return table.get("method", "eagle") + (f":{table['model']}" if table.get("model") else "")


def read_scenario_file(path: str | Path) -> dict:
    path = Path(path)
    if not path.exists() and (SCENARIO_DIR / f"{path}.toml").exists():
        path = SCENARIO_DIR / f"{path}.toml"
    known = ", ".join(p.stem for p in sorted(SCENARIO_DIR.glob("*.toml")))
    raw = read_toml_file(path, "scenario", missing_hint=f" (bundled: {known})")
    raw["_base_dir"] = str(path.parent)
    raw["_path"] = str(path)
    return raw


def load_scenario(path: str | Path, **overrides) -> Scenario:
    raw = read_scenario_file(path)
    origin = raw.pop("_path")
    raw = apply_overrides(raw, overrides)
    return build_scenario(raw, origin, raw.get("_base_dir"))


# Flat override names (CLI flags, API keywords) -> (section, key)
OVERRIDE_KEYS = {
    "model": ("model", "name"), "hardware": ("hardware", "name"), "tp": ("hardware", "tp"), "ep": ("hardware", "ep"),
    "draft": ("draft", "method"), "acceptance": ("acceptance", None), "context_len": ("workload", "context_len"),
    "batch_sizes": ("workload", "batch_sizes"), "k_max": ("workload", "k_max"), "fixed_k": ("workload", "fixed_k"),
    "dtype": ("precision", "weights"), "weight_dtype": ("precision", "weights"),
    "act_dtype": ("precision", "activations"), "kv_dtype": ("precision", "kv_cache"),
    "calibration": ("calibration", "profile"), "memory_utilization": ("workload", "memory_utilization"),
    "routing_skew": ("routing", "skew"), "acceptance_source": ("acceptance", "source"),
    "layout": ("hardware", "layout"), "dp": ("hardware", "dp"), "routing_reuse": ("routing", "reuse"),
    "engine": ("engine", "name"), "engine_version": ("engine", "version"),
    "max_capture_size": ("engine", "max_capture_size"),
    "max_num_seqs": ("serving", "max_num_seqs"), "max_num_batched_tokens": ("serving", "max_num_batched_tokens"),
    "context_lens": ("workload", "context_lens"), "schedule_tolerance": ("workload", "schedule_tolerance"),
    "acceptance_preset": ("acceptance", "preset"), "acceptance_band": ("acceptance", "band"),
    "temperature": ("workload", "temperature"), "top_p": ("workload", "top_p"),
    "draft_checkpoint": ("draft", "checkpoint"),
    "peak_bf16_flops_per_s": ("hardware", "peak_bf16_flops_per_s"),
    "allow_long_context": ("workload", "allow_context_beyond_model"),
    "hbm_bandwidth_bytes_per_s": ("hardware", "hbm_bandwidth_bytes_per_s"),
    "allreduce_busbw": ("hardware", "interconnect_bandwidth_bytes_per_s"),  # your nccl-tests busbw, bytes/s
    "deployment": ("calibration", "deployment"),  # python -m calibration.fit_deployment's file
}


def apply_overrides(raw: dict, overrides: dict) -> dict:
    """Flat overrides (None = keep the scenario's value) applied to a TOML-layout dict."""
    raw = copy.deepcopy(raw)
    for name, value in overrides.items():
        if value is None:
            continue
        if name not in OVERRIDE_KEYS:
            raise PlannerError(f"unknown setting '{name}' (known: {', '.join(sorted(OVERRIDE_KEYS))})")
        section, key = OVERRIDE_KEYS[name]
        table = raw.setdefault(section, {})
        if name in ("acceptance", "acceptance_preset"):
            raw[ACCEPTANCE_GIVEN] = True
        if name == "acceptance":
            for old in ("rate", "rates", "preset", "file"):
                table.pop(old, None)
            if is_acceptance_path(value):
                table["file"] = str(value)
                table.pop("source", None)
                continue
            acc = parse_acceptance(value)
            table["rates"] = list(acc.rates)
            table["source"] = overrides.get("acceptance_source") or "given as an override"
        elif name == "draft":
            text = str(value)
            before = _draft_method_of(table)
            table.pop("model", None)
            if overrides.get("draft_checkpoint") is None:
                table.pop("checkpoint", None)  # a new draft method's checkpoint is not the old one's
            if text.startswith("model:"):
                table["method"], table["model"] = "model", text.split(":", 1)[1]
            else:
                table["method"] = text
            # a new draft method brings its own acceptance preset (and source) unless rates are given
            if _draft_method_of(table) != before and overrides.get("acceptance") is None \
                    and overrides.get("acceptance_preset") is None:
                acc = raw.setdefault("acceptance", {})
                for key in ("rate", "rates", "source", "preset", "file"):
                    acc.pop(key, None)
        elif name == "acceptance_preset":
            for key in ("rate", "rates", "file"):
                table.pop(key, None)
            table["preset"] = str(value)
            if overrides.get("acceptance_source") is None:
                table.pop("source", None)
        elif name == "acceptance_source":
            table["source"] = str(value)
        elif name == "routing_skew":
            table["kind"], table["skew"] = "zipf", float(value)
        elif name in ("batch_sizes", "context_lens") and isinstance(value, np.ndarray):
            table[key] = [int(x) for x in value]
        else:
            table[key] = value
    return raw
