"""Scenarios: TOML files (``scenarios/*.toml``) validated on load, plus overrides from flags or code.

Unknown keys and wrong types are errors naming the file, the key and the expected type. Sections
other modules own (``serving``, ``traffic``, ``slo``, ``sizing``) are kept as plain tables in
``Scenario.extra`` and validated there with :func:`check_table`.

The schema and the section parsers live in :mod:`simulator.specs.scenario_sections`, the flat overrides
in :mod:`simulator.specs.overrides`; their public names are importable from here as well.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from simulator.specs.collectives import server_collectives
from simulator.specs.acceptance import (Acceptance, ContextAcceptance, context_acceptance, parse_band,
                                         preset_for_model)
from simulator.specs.acceptance_files import AcceptanceFile
from simulator.specs.deployment import Deployment
from simulator.specs.engines import EngineProfile, default_engine, load_engine, engine_kernels, with_capture_limit
from simulator.specs.engine_settings import with_runner_facts
from simulator.specs.engine_catalog import RELEASES_FILE, release_running, research_draft_engine
from simulator.specs.drafts import DraftSpec
from simulator.specs.deployment_fit import DeploymentFit, load_deployment_fit, scenario_identity
from simulator.specs.step_terms import LearnedPrior, StepTerms, load_learned_prior
from simulator.errors import PlannerError
from simulator.files import read_toml_file
from simulator.specs.hardware import DTYPE_BYTES, Hardware, check_group_fits, check_precision, gemm_kernel_dtype
from simulator.specs.models import ModelSpec
from simulator.specs.overrides import OVERRIDE_KEYS, apply_overrides  # noqa: F401 (API)
from simulator.specs.settings import default
from simulator.specs.scenario_sections import (ACCEPTANCE_GIVEN, FALLBACK_RATE, OPEN_SECTIONS,  # noqa: F401 (API)
                                               PLAIN_ONLY, DECISION_QUANTILE, MAX_K, REPO_ROOT, SCHEDULE_TOLERANCE, SCHEMA,
                                               ZIPF_SKEW_MAX, _check_sections, check_section_tables,
                                               _deployment, _draft, _model_and_hardware, _resolve_path,
                                               _scenario_acceptance, _workload)
from simulator.specs.values import (NUM, STR_OR_LIST, check_table, parse_batch_sizes,  # noqa: F401 (API)
                                    parse_context_lens)
from simulator.specs.profile import (Profile, check_profile_matches, load_profile, load_shipped_profile, prior_profile,
                                     shipped_profile_path)

SCENARIO_DIR = REPO_ROOT / "scenarios"
DEFAULT_SCENARIO = SCENARIO_DIR / "default.toml"


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
    decision_quantile: float = DECISION_QUANTILE  # [workload] decision_quantile: the terms' quantile K* is chosen at
    acceptance_file: "AcceptanceFile | None" = None  # [acceptance] file / --acceptance PATH: what was read
    step_prior: LearnedPrior | None = None  # the engine terms learned from the published corpus (GPUs; not --physics-only)

    @property
    def step_terms(self) -> StepTerms | None:
        """The engine terms on top of the physics: the deployment's own fit (the posterior), else the learned
        population's centre, else none (the physics alone)."""
        return self.deployment_fit if self.deployment_fit is not None else self.step_prior

    @property
    def step_basis(self) -> str:
        """Which layer the step times' engine terms come from: deployment fit, learned layer or physics only."""
        if self.deployment_fit is not None:
            return "deployment fit"
        return "learned layer" if self.step_prior is not None else "physics only"

    @property
    def cost_source(self) -> str:
        """What the step times rest on: kernels (datasheet, calibration profile or measured tables)
        and the engine profile that adds host time and graph capture."""
        kernels = self.profile.label if self.profile else "datasheet only (uncalibrated roofline)"
        unmeasured = [label for kind, label in (("linear", "Gated DeltaNet layers"),
                                                ("sparse", "sparse MLA and its indexer"))
                      if kind in self.model.layer_kinds()]
        if self.profile is not None and self.profile.surfaces and unmeasured:
            kernels += f"; {' and '.join(unmeasured)} on the roofline at the tables' streaming bandwidth (no table measured them)"
        if self.profile is not None and self.profile.surfaces:
            kernels += self._weight_only_note()
        fit = (f"; {self.deployment_fit.label}" if self.deployment_fit else
               f"; {self.step_prior.label}" if self.step_prior is not None else "")
        if self.engine is None or self.engine.name == "ideal":
            return kernels + fit
        return f"{kernels}; {self.engine.label}{fit}{self._terms_host_hidden_note() if fit else ''}"

    def _terms_host_hidden_note(self) -> str:
        """Where the engine overlaps its host work with the GPU's: that the engine terms' host time hides there too
        (specs.step_terms: max(0, H - room))."""
        plain, spec = self.engine.overlap_window != "none", self.engine.spec_overlap_window != "none"
        if not (plain or spec):
            return ""
        steps = "plain and speculating steps" if plain and spec else "plain steps" if plain else "speculating steps"
        return f" (its host time hides where the engine overlaps host work with the GPU: {steps})"

    def _weight_only_note(self) -> str:
        """Where weight-only GEMMs (fp8 / int4 weights on bf16 activations, dequantized into bf16 math) have no
        table of their own and are priced on another kernel's (Profile.surface_name): that they are, on which."""
        dep = self.deployment
        if self.model.fp8_blocks(dep.weight_dtype):  # block-scaled fp8: fp8 x fp8 kernels, their own table
            return ""
        kind = gemm_kernel_dtype(DTYPE_BYTES[dep.weight_dtype], DTYPE_BYTES[dep.act_dtype])
        used = self.profile.surface_name("gemm", kind)
        if not kind.endswith("_wo") or used == f"gemm.{kind}":
            return ""
        return (f"; weight-only {dep.weight_dtype} GEMMs ({dep.weight_dtype} weight bytes, {dep.act_dtype} math) priced"
                f" on the {used or 'roofline'} table's efficiency (no weight-only kernel measured)")

    def with_overrides(self, **overrides) -> "Scenario":
        """A new scenario with flat overrides applied (same keys as :func:`apply_overrides`)."""
        raw = apply_overrides(self.raw, overrides)
        return build_scenario(raw, self.origin, self.raw.get("_base_dir"))


def build_scenario(raw: dict, origin: str = "flags", base_dir: str | None = None, *,
                   allow_beyond: str | None = None) -> Scenario:
    """Validate a scenario dict (TOML layout) and resolve every spec in it: model and hardware, the
    parallel layout, draft and acceptance, workload grid, then the engine profile and what the kernel
    times rest on (:func:`resolve_profile`). ``allow_beyond``: what a context beyond the model's trained
    length tells the user to do, where the caller has its own control for it (the dashboard's checkbox)."""
    raw = copy.deepcopy(raw)
    raw.pop("_base_dir", None)
    acceptance_given = raw.pop(ACCEPTANCE_GIVEN, False)  # by a flag or the API: it outranks a deployment fit's
    plain_only = raw.pop(PLAIN_ONLY, False)
    _check_sections(raw, origin)
    get = lambda section, key, default=None: raw.get(section, {}).get(key, default)  # noqa: E731
    model, hardware = _model_and_hardware(raw, get, origin, base_dir)
    deployment = _deployment(raw, get, origin, model)
    try:
        multi_node = check_group_fits(hardware, deployment.tp, "tp")
        check_precision(hardware, deployment.weight_dtype, deployment.act_dtype)
    except PlannerError as err:
        raise PlannerError(f"{origin}: {err}") from None
    draft = _draft(get, origin, base_dir, model, deployment)
    acceptance, acc_file = _scenario_acceptance(raw.get("acceptance", {}), draft.preset_key, origin, base_dir)
    acceptance = preset_for_model(draft.preset_key, acceptance, model.name)  # says whose rates a preset's are
    wl = _workload(get, origin, model, allow_beyond)
    if acc_file is not None:
        wl["k_max"], wl["fixed_k"], notes = acc_file.cap(wl["k_max"], wl["fixed_k"])
        wl["warnings"] = list(wl["warnings"]) + notes
    acceptance_context = context_acceptance(raw.get("acceptance", {}), acceptance, origin)
    engine_tbl = raw.get("engine", {})
    engine = load_engine(engine_tbl.get("name") or default_engine(hardware.kind), engine_tbl.get("version"))
    if not plain_only:
        _check_release_runs(engine, draft.method, origin)
    engine = with_runner_facts(engine, draft.method, draft.is_tree, model.attention, hardware.architecture)
    if engine_tbl.get("max_capture_size") is not None:
        engine = _capture_limit(engine, engine_tbl["max_capture_size"], origin)
    profile = scenario_profile(get, hardware, engine.name, base_dir, deployment.tp)
    kernels = engine_kernels(engine, hardware, get("workload", "temperature", default("workload", "temperature")),
                             get("workload", "top_p", default("workload", "top_p")), origin)
    deployment = replace(deployment, kernels=kernels)
    fit_path = get("calibration", "deployment")
    fit = load_deployment_fit(_resolve_path(fit_path, base_dir), origin,
                              scenario_identity(model, hardware, deployment, engine, draft, profile)) if fit_path else None
    if fit is not None and fit.acceptance_rates and not acceptance_given:
        acceptance = Acceptance(fit.acceptance_rates, f"measured on this deployment ({Path(fit.path).name})",
                                fit.acceptance_rank_tail)
    raw["_base_dir"] = base_dir
    raw.update({mark: True for mark, on in ((ACCEPTANCE_GIVEN, acceptance_given), (PLAIN_ONLY, plain_only)) if on})
    return Scenario(
        name=raw.get("name", Path(origin).stem if origin != "flags" else "custom"),
        description=raw.get("description", ""), model=model, hardware=hardware, deployment=deployment,
        draft=draft, acceptance=acceptance, context_len=wl["context_len"], batch_sizes=wl["batch_sizes"],
        k_max=wl["k_max"], fixed_k=wl["fixed_k"], profile=profile, engine=engine, origin=origin,
        extra={s: raw[s] for s in OPEN_SECTIONS if s in raw}, raw=raw,
        warnings=_warn(wl["warnings"] + ([multi_node] if multi_node else [])
                       + pcie_collective_caveat(hardware, deployment, profile)),
        context_lens=wl["context_lens"], acceptance_context=acceptance_context,
        acceptance_band=parse_band(get("acceptance", "band", default("acceptance", "band")), origin),
        schedule_tolerance=wl["schedule_tolerance"], decision_quantile=wl["decision_quantile"],
        acceptance_file=acc_file, deployment_fit=fit,
        step_prior=learned_layer(hardware, get("calibration", "learned", default("calibration", "learned")), engine.name))


def _check_release_runs(engine, method: str, origin: str) -> None:
    """A release that cannot run the draft method (engine_releases.toml [<engine>.draft_releases], read from the
    wheels) is refused with the next release that runs it, or told none does."""
    asked = engine.release_asked
    runs = release_running(engine.name, asked, method)
    if runs == asked:
        return
    where = "(--engine-version, [engine] version, the dashboard's engine release)"
    if runs is None:
        research = research_draft_engine(method)
        fix = (f"{research['code']}: use --engine {research['engine']} ([engine] name) or another draft method"
               if research else "choose another engine or draft method")
        raise PlannerError(f"{origin}: {engine.name} {asked} cannot run draft method '{method}', nor can any later"
                           f" {engine.name} release ({RELEASES_FILE.name}); {fix}")
    raise PlannerError(f"{origin}: {engine.name} {asked} cannot run draft method '{method}': the next release that"
                       f" does is {runs}; use {runs} or later {where}")


def learned_layer(hardware, wanted: bool, engine: str | None = None) -> LearnedPrior | None:
    """The learned engine terms where they were learned (GPUs: the published corpus has no CPU rows) and wanted
    (centred on the engine's family and the device's GPU family where the layer has such levels)."""
    if not wanted or hardware.kind == "cpu":
        return None
    return load_learned_prior(engine=engine, architecture=hardware.architecture)


def _capture_limit(engine: EngineProfile, limit, origin: str) -> EngineProfile:
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise PlannerError(f"{origin}: [engine] max_capture_size = {limit!r}: give the CUDA-graph capture limit as a"
                           " whole number >= 1 (tokens for vLLM, sequences for SGLang), e.g. 1024")
    return with_capture_limit(engine, limit)


def scenario_profile(get, hardware: Hardware, engine: str, base_dir: str | None, tp: int) -> Profile | None:
    """The [calibration] profile (:func:`resolve_profile`) fitted to the server; with ``engine_terms =
    false``, its microbenchmarks alone, without the end-to-end engine terms (what calibration.validate refits)."""
    profile = resolve_profile(get("calibration", "profile"), hardware, engine, base_dir)
    profile = fit_to_server(profile, hardware, get("hardware", "interconnect_bandwidth_bytes_per_s"), tp)
    if profile is not None and not get("calibration", "engine_terms", default("calibration", "engine_terms")):
        profile = profile.microbenchmarks_only()
    return profile


def fit_to_server(profile: Profile | None, hardware: Hardware, given_bus_bandwidth, tp: int) -> Profile | None:
    """The profile with its all-reduce tables fitted to the scenario's server (a given bus bandwidth,
    or a PCIe table's topology limit lifted to its own 2-GPU link rate); unchanged otherwise. Its label names the
    change where it prices this scenario's ``tp`` (a PCIe table changed at 8 GPUs says nothing at TP 4)."""
    if profile is None or not profile.collectives:
        return profile
    given = float(given_bus_bandwidth) if given_bus_bandwidth is not None else None
    collectives, change = server_collectives(profile.collectives, hardware.interconnect, given)
    if not change:
        return profile
    by_gpus = change.get("notes_by_gpus")  # a PCIe server's: one note per GPU count it changed
    note = change["note"] if by_gpus is None else by_gpus.get(str(tp), "")
    return replace(profile, collectives=collectives,
                   provenance=profile.provenance | {"collectives_note": note, "collectives_basis":
                                                    change["basis"], "collectives_gpus": change["gpus"]})


def pcie_collective_caveat(hardware: Hardware, dep: Deployment, profile: Profile | None) -> list[str]:
    """A measured all-reduce table over PCIe is one server's topology (switches, CPU sockets, P2P on or
    off): published PCIe Gen4 servers run 2.6-25 GB/s bus bandwidth (simulator/specs/collectives.py)."""
    if not hardware.interconnect.lower().startswith("pcie") or dep.tp < 4 or profile is None:
        return []
    entry = (profile.collectives.get(dep.kernels.allreduce) or profile.collectives.get("all_reduce") or {}).get(str(dep.tp))
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


def read_scenario_file(path: str | Path) -> dict:
    path = Path(path)
    if not path.exists() and (SCENARIO_DIR / f"{path}.toml").exists():
        path = SCENARIO_DIR / f"{path}.toml"
    known = ", ".join(p.stem for p in sorted(SCENARIO_DIR.glob("*.toml")))
    raw = read_toml_file(path, "scenario", missing_hint=f" (bundled: {known})")
    check_section_tables(raw, str(path))
    raw["_base_dir"] = str(path.parent)
    raw["_path"] = str(path)
    return raw


def load_scenario(path: str | Path, **overrides) -> Scenario:
    raw = read_scenario_file(path)
    origin = raw.pop("_path")
    raw = apply_overrides(raw, overrides)
    return build_scenario(raw, origin, raw.get("_base_dir"))


def per_scenario(store: dict, slots: int, sc: Scenario, key: tuple, build):
    """``build()``, kept in ``store`` (its last ``slots`` answers) per scenario object and profile (a
    sensitivity run swaps the profile) and ``key``: for tables a caller only reads. Each entry holds its
    scenario and profile, so their ids are not reused while it is kept."""
    full = (id(sc), id(sc.profile)) + key
    hit = store.get(full)
    if hit is not None and hit[0] is sc and hit[1] is sc.profile:
        return hit[2]
    value = build()
    if len(store) >= slots:
        store.pop(next(iter(store)))
    store[full] = (sc, sc.profile, value)
    return value


def resolve_scenario(scenario: str | Scenario | None = None, **overrides) -> Scenario:
    """The scenario a command runs: a Scenario or a TOML path / bundled name with the overrides applied; with
    none, model and hardware from the overrides (both needed), else the default scenario."""
    if isinstance(scenario, Scenario):
        return scenario.with_overrides(**overrides) if overrides else scenario
    if scenario is not None:
        return load_scenario(scenario, **overrides)
    if overrides.get("model") is not None or overrides.get("hardware") is not None:
        if overrides.get("model") is None or overrides.get("hardware") is None:
            raise PlannerError("give both a model and a hardware name (--model and --hardware), or a scenario")
        return build_scenario(apply_overrides({"model": {}, "hardware": {}}, overrides))
    return load_scenario(DEFAULT_SCENARIO, **overrides)
