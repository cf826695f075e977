"""The sweep file: axes, traffic profiles, acceptance presets, run settings and outputs; the expansion.

A sweep file (TOML) names a base scenario and the axes to cross::

    name = "sweep-small"
    [sweep]
    base = "sizing-dense-command-a"       # scenario with [slo] (and [traffic], [sizing]); path or bundled name
    models = ["command-a", "llama-3.1-70b"]
    hardware = ["h100-sxm", "h200"]
    tp = [4, 8]
    ep = [1]                              # expert-parallel groups (MoE models only; 1 = none)
    dtype = ["bf16", "fp8"]               # weight dtype;  act_dtype = [...], kv_dtype = [...] likewise
    draft = ["eagle"]                     # draft method, as [draft] method
    engine = ["vllm", "sglang"]           # serving-engine profile ('name' or 'name-version'), as [engine] name
    context_len = [2048]                  # [workload] context_len: the K* grid's context
    traffic = ["chat", "rag"]             # names of [traffic.NAME] tables below (default: all of them)
    acceptance = ["eagle2"]               # names of [acceptance.NAME] tables below (default: all of them)
    policies = ["plain", "fixed", "dsd"]  # searched inside each task, one result row each

    [traffic.chat]                        # a [traffic] table of the serving simulation
    rate_per_s = 40.0
    prompt_len = 1024
    output_len = 300

    [acceptance.eagle2]                   # an [acceptance] table: rate = 0.7 or rates = [...], source
    rates = [0.8, 0.7, 0.63]

    [run]                                 # per task: the grid prediction, then (size = true) the SLO search
    size = true                           # the search of `simulator.size`; each setting below defaults to the
    n_requests = 200   search_steps = 3   # base scenario's [sizing] value, so a row agrees with `size` on the
    duration_s = 44.0  max_requests = 4000   max_replicas = 64   seed = 0    # same configuration
    workers = 2

    [output]
    dir = "sweep-out"  (relative to the current directory)   formats = ["parquet", "csv", "markdown", "html"]   latency = "tpot_p50_s"

Axes left out take the base scenario's value. An axis value that names nothing (unknown model,
hardware, dtype, policy, preset) or has the wrong type is refused before anything runs
(:class:`PlannerError`). Combinations that cannot run are *filtered*, with the reason, not refused:
layouts that do not divide the model (``check_deployment``), drafts the model cannot take, and
configurations whose weights and one sequence's KV cache do not fit memory (``memory_fit``).

The ``engine`` axis is passed through as the scenario's ``[engine] name`` override; on a scenario
layer without that override it is refused.
"""
from __future__ import annotations

import copy
import hashlib
import itertools
import json
import warnings
from pathlib import Path

from simulator import serving
from simulator.errors import PlannerError, PlannerWarning, did_you_mean
from simulator.files import read_toml_file
from simulator.sizing.candidate import memory_fit, traffic_lengths
from simulator.sizing.spec import POLICIES, parse_sizing
from simulator.specs.acceptance import parse_acceptance
from simulator.specs.acceptance_files import read_acceptance_file
from simulator.specs.drafts import parse_draft
from simulator.specs.hardware import DTYPE_BYTES, list_hardware
from simulator.specs.models import list_models
from simulator.specs.scenario import OVERRIDE_KEYS, apply_overrides, build_scenario, check_table, read_scenario_file
from simulator.sweep.fits import deployment_fits, fit_deployment_text, with_fit
from simulator.sweep.schema import (AXES, FORMAT_VERSION, FORMATS, LATENCY_COLUMNS, OUTPUT_SCHEMA,  # noqa: F401 (API)
                                    OVERRIDE, RUN_DEFAULTS, RUN_SCHEMA, SWEEP_DIR, SWEEP_SCHEMA, SweepSpec, SweepTask)

def _err(origin, text):
    return PlannerError(f"{origin}: {text}")


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _check_values(origin: str, axis: str, values: list, known: dict, model_names) -> None:
    if not values:
        raise _err(origin, f"[sweep] {axis} is empty; leave the axis out to keep the base scenario's value")
    for v in values:
        if axis in ("tp", "ep", "context_len"):
            if not _is_int(v) or v < 1:
                raise _err(origin, f"[sweep] {axis} value {v!r}: expected an integer >= 1")
        elif not isinstance(v, str):
            raise _err(origin, f"[sweep] {axis} value {v!r}: expected a string")
        elif axis == "models" and v not in model_names and not v.endswith(".json"):
            raise _err(origin, f"[sweep] unknown model '{v}'{did_you_mean(v, model_names)}")
        elif axis == "hardware" and v not in list_hardware():
            raise _err(origin, f"[sweep] unknown hardware '{v}'{did_you_mean(v, list_hardware())}")
        elif axis in ("dtype", "act_dtype", "kv_dtype") and v not in DTYPE_BYTES:
            raise _err(origin, f"[sweep] {axis} '{v}' is not a dtype{did_you_mean(v, DTYPE_BYTES)}")
        elif axis == "draft":
            try:
                parse_draft(v)  # a method name, or 'model:NAME' for a separate draft model
            except PlannerError as err:
                raise _err(origin, f"[sweep] draft '{v}': {err}") from None
        elif axis == "engine":
            try:
                build_scenario(apply_overrides(known["base_raw"], {"engine": v}), origin, known["base_dir"])
            except PlannerError as err:
                raise _err(origin, f"[sweep] engine '{v}': {' '.join(str(err).split())}") from None
        elif axis in ("traffic", "acceptance") and v not in known[axis]:
            names = [n for n in known[axis] if n is not None]
            raise _err(origin, f"[sweep] {axis} '{v}' names no [{axis}.{v}] table"
                               + (did_you_mean(v, names) if names else f"; define [{axis}.{v}] in the sweep file"))
    if len(set(map(str, values))) != len(values):
        raise _err(origin, f"[sweep] {axis} lists a value twice: {values}")


def _presets(raw: dict, section: str, origin: str) -> dict:
    table = raw.get(section, {})
    if not isinstance(table, dict):
        raise _err(origin, f"[{section}] must hold named tables such as [{section}.NAME]")
    out = {}
    for name, body in table.items():
        if not isinstance(body, dict):
            raise _err(origin, f"[{section}] key '{name}': expected a table [{section}.{name}]")
        out[name] = body
    return out


def _check_presets(spec_origin: str, base_raw: dict, base_origin: str, base_dir, traffic: dict, acceptance: dict):
    """Each preset on the base scenario: acceptance parses; traffic gives a load and a valid workload."""
    for name, body in acceptance.items():
        check_table(body, {"rate": (int, float), "rates": list, "source": str, "file": str}, spec_origin,
                    f"acceptance.{name}")
        if sum(k in body for k in ("rate", "rates", "file")) != 1:
            raise _err(spec_origin, f"[acceptance.{name}] give exactly one of 'rate', 'rates' or 'file'")
        try:
            if "file" in body:  # a measured file, relative to the sweep file; read now to refuse it early
                given = Path(body["file"])
                if not given.is_absolute() and (Path(spec_origin).parent / given).exists():
                    body["file"] = str(Path(spec_origin).parent / given)
                read_acceptance_file(body["file"], flag=f"[acceptance.{name}] file")
                continue
            parse_acceptance(body.get("rates", body.get("rate")), body.get("source", "assumed"))
        except PlannerError as err:
            raise _err(spec_origin, f"[acceptance.{name}]: {err}") from None
    for name, body in traffic.items():
        raw = copy.deepcopy(base_raw)
        raw["traffic"] = copy.deepcopy(body)
        try:
            sc = build_scenario(raw, base_origin, base_dir)
            serving.workload_from_scenario(sc)
            parse_sizing(sc)
        except PlannerError as err:
            raise _err(spec_origin, f"[traffic.{name}]: {' '.join(str(err).split())}") from None


def _read(path: str | Path) -> dict:
    p = Path(path)
    if not p.exists() and (SWEEP_DIR / f"{p}.toml").exists():
        p = SWEEP_DIR / f"{p}.toml"
    return read_toml_file(p, "sweep") | {"_path": str(p)}


def _sections(raw: dict, origin: str) -> tuple[dict, dict, dict]:
    """The file's sections checked against their schemas: ([sweep], [run], [output])."""
    top = {k: v for k, v in raw.items() if not isinstance(v, dict)}
    check_table(top, {"name": str, "description": str}, origin, "")
    known_sections = {"sweep", "traffic", "acceptance", "run", "output"}
    for section, body in raw.items():
        if isinstance(body, dict) and section not in known_sections:
            raise _err(origin, f"unknown section [{section}] (known: {', '.join(sorted(known_sections))})")
    sweep = raw.get("sweep")
    if not isinstance(sweep, dict) or "base" not in sweep:
        raise _err(origin, "needs a [sweep] section with base = 'SCENARIO' (a path or bundled scenario name)")
    if "engine" in sweep and "engine" not in OVERRIDE_KEYS:
        raise _err(origin, "[sweep] engine: not a sweep axis here; this scenario layer has no engine override")
    check_table(sweep, SWEEP_SCHEMA, origin, "sweep")
    run = dict(raw.get("run") or {})
    check_table(run, RUN_SCHEMA, origin, "run")
    output = dict(raw.get("output") or {})
    check_table(output, OUTPUT_SCHEMA, origin, "output")
    return sweep, run, output


def _base(sweep: dict, run: dict, origin: str) -> tuple[dict, str, str | None]:
    """The base scenario (which must itself be valid): (its dict, its path, its directory)."""
    base_path = Path(sweep["base"])
    if not base_path.is_absolute() and not base_path.exists() and (Path(origin).parent / base_path).exists():
        base_path = Path(origin).parent / base_path
    base_raw = read_scenario_file(base_path)
    base_origin = base_raw.pop("_path")
    base_dir = base_raw.get("_base_dir")
    base = build_scenario(base_raw, base_origin, base_dir)  # the base must itself be valid
    if "slo" not in base.extra and run.get("size", True):
        raise _err(origin, f"base scenario {base_origin} has no [slo]: sizing needs one (or set [run] size = false)")
    return base_raw, base_origin, base_dir


def parse_sweep(path: str | Path, output_dir: str | None = None, workers: int | None = None,
                deployment: list | tuple = ()) -> SweepSpec:
    """Read and validate a sweep file, then expand it (see :func:`expand`). Refuses bad values.
    ``deployment``: deployment fit files (``calibration.fit_deployment``), each applied to the combinations
    of the deployment it was fitted on (:func:`simulator.sweep.fits.with_fit`)."""
    fits = deployment_fits(deployment)
    raw = _read(path)
    origin = raw.pop("_path")
    sweep, run, output = _sections(raw, origin)
    base_raw, base_origin, base_dir = _base(sweep, run, origin)

    traffic = _presets(raw, "traffic", origin)
    acceptance = _presets(raw, "acceptance", origin)
    _check_presets(origin, base_raw, base_origin, base_dir, traffic, acceptance)
    known = {"traffic": traffic or {None: None}, "acceptance": acceptance or {None: None}, "base_raw": base_raw,
             "base_dir": base_dir}

    models = list_models()
    axes = {}
    for axis in AXES:
        if axis in sweep:
            _check_values(origin, axis, sweep[axis], known, models)
            axes[axis] = tuple(sweep[axis])
        elif axis in ("traffic", "acceptance"):
            axes[axis] = tuple(known[axis])  # every preset defined, else (None,): the base's own
        else:
            axes[axis] = (None,)  # the base scenario's value
    policies = tuple(sweep.get("policies", POLICIES))
    for p in policies:
        if p not in POLICIES:
            raise _err(origin, f"[sweep] unknown policy {p!r}{did_you_mean(str(p), POLICIES)}")
    if not policies or len(set(policies)) != len(policies):
        raise _err(origin, f"[sweep] policies must list distinct policies, got {list(policies)}")

    run = _check_run(origin, RUN_DEFAULTS | run, workers)
    output = _check_output(origin, output, output_dir, raw.get("name", Path(origin).stem))
    spec = SweepSpec(name=raw.get("name", Path(origin).stem), description=raw.get("description", ""), path=origin,
                     base=base_origin, base_raw=base_raw, axes=axes, traffic=traffic, acceptance=acceptance,
                     policies=policies, run=run, output=output, deployment_fits=fits)
    expand(spec)
    return spec


def _check_run(origin: str, run: dict, workers: int | None) -> dict:
    """[run]: simulation sizes and the worker count (--workers overrides it)."""
    for key in ("n_requests", "max_requests", "max_replicas", "workers"):
        if run[key] is not None and run[key] < 1:
            raise _err(origin, f"[run] {key} must be >= 1, got {run[key]}")
    if run["n_requests"] is not None and run["n_requests"] < 20:
        raise _err(origin, f"[run] n_requests must be >= 20 for stable percentiles, got {run['n_requests']}")
    if (run["search_steps"] is not None and run["search_steps"] < 0) or (
            run["duration_s"] is not None and not run["duration_s"] > 0):
        raise _err(origin, "[run] search_steps must be >= 0 and duration_s > 0")
    if run["duration_s"] is not None:
        run["duration_s"] = float(run["duration_s"])
    if workers is not None:
        if workers < 1:
            raise PlannerError(f"--workers must be >= 1, got {workers}")
        run["workers"] = workers
    return run


def _check_output(origin: str, output: dict, output_dir: str | None, name: str) -> dict:
    """[output]: formats, the latency column of the Pareto front, the directory (--output-dir overrides it)."""
    output = {"dir": None, "formats": list(FORMATS), "latency": "tpot_p50_s"} | output
    for f in output["formats"]:
        if f not in FORMATS:
            raise _err(origin, f"[output] unknown format {f!r}{did_you_mean(str(f), FORMATS)}")
    if output["latency"] not in LATENCY_COLUMNS:
        raise _err(origin, f"[output] latency must be one of {', '.join(LATENCY_COLUMNS)}, got {output['latency']!r}")
    if output_dir is not None:
        output["dir"] = output_dir
    if output["dir"] is None:
        output["dir"] = f"{name}-out"  # in the current directory
    return output


def task_key(raw: dict, policies, run: dict) -> str:
    """Stable hash of what a task's rows depend on (the resolved scenario, the policies, the run settings)."""
    settings = {k: v for k, v in run.items() if k != "workers"}  # the pool size changes no result
    body = {"v": FORMAT_VERSION, "scenario": {k: v for k, v in raw.items() if not k.startswith("_")},
            "policies": list(policies), "run": settings}
    return hashlib.sha256(json.dumps(body, sort_keys=True, default=str).encode()).hexdigest()[:20]


def _apply(spec: SweepSpec, combo: dict) -> dict:
    raw = apply_overrides(spec.base_raw, {OVERRIDE[a]: combo[a] for a in OVERRIDE if combo[a] is not None})
    if combo["engine"] is not None:
        raw["engine"] = {"name": combo["engine"]}  # a 'name-version' key or a name (its newest profile)
    if combo["traffic"] is not None:
        raw["traffic"] = copy.deepcopy(spec.traffic[combo["traffic"]])
    if combo["acceptance"] is not None:
        raw["acceptance"] = copy.deepcopy(spec.acceptance[combo["acceptance"]])
    if combo["models"] is not None and combo["models"] != spec.base_raw.get("model", {}).get("name"):
        raw.get("model", {}).pop("source", None)
    if combo["ep"] is None and "ep" in raw.get("hardware", {}):
        # the base's expert parallelism only where it still divides this layout
        tp = raw["hardware"].get("tp", 1)
        if tp % raw["hardware"]["ep"]:
            raw["hardware"].pop("ep")
    if combo["hardware"] is not None and combo["hardware"] != spec.base_raw.get("hardware", {}).get("name"):
        # device figures and calibration profiles of the base's device do not carry over
        raw["hardware"] = {k: v for k, v in raw["hardware"].items() if k in ("name", "tp", "ep")}
        raw.pop("calibration", None)
    if "sizing" in raw:  # the base's search settings stay (a [run] setting overrides one); its candidates do not
        raw["sizing"] = {k: v for k, v in raw["sizing"].items()
                         if k in ("prices", "target_rate_per_s", "target_concurrency", "description", "n_requests",
                                  "search_steps", "duration_s", "max_requests", "max_replicas", "seed", "headroom",
                                  "spare_replicas", "gpus_per_node", "policies")}
    return raw


def _combo_label(combo: dict) -> dict:
    return {("model" if a == "models" else a): v for a, v in combo.items()}


def expand(spec: SweepSpec) -> None:
    """The product of the axes, each combination built into a scenario; filters record why one cannot run."""
    spec.tasks, spec.filtered = [], []
    base_dir = spec.base_raw.get("_base_dir")
    names = list(AXES)
    for values in itertools.product(*(spec.axes[a] for a in names)):
        combo = dict(zip(names, values))
        label = _combo_label(combo)
        raw = _apply(spec, combo)
        try:
            sc = with_fit(spec, raw, base_dir)  # divisibility (check_deployment), draft fit, dtypes
        except PlannerError as err:
            spec.filtered.append(label | {"filter": "layout", "reason": " ".join(str(err).split())})
            continue
        spec.fitted_tasks += sc.deployment_fit is not None
        if spec.run["size"]:
            prompt, out = traffic_lengths(sc)
            context = max(prompt + out, 1.0)
        else:
            context = float(sc.context_len)
        fit = memory_fit(sc, context)
        if not fit["fits"]:
            spec.filtered.append(label | {"filter": "memory", "reason": fit["reason"]})
            continue
        resolved = {a: (v if v is not None else _base_value(sc, a)) for a, v in label.items()}
        raw_clean = {k: v for k, v in sc.raw.items() if k != "_base_dir"}
        key = task_key(raw_clean, spec.policies, spec.run)
        spec.tasks.append(SweepTask(len(spec.tasks), key, resolved, raw_clean, spec.base, base_dir,
                                    spec.policies, dict(spec.run)))
    for fit in spec.deployment_fits:
        if not any(t.raw.get("calibration", {}).get("deployment") == fit.path for t in spec.tasks):
            warnings.warn(f"--deployment {fit.path}: fitted on {fit_deployment_text(fit)}, which none of the sweep's"
                          f" {spec.n_combinations} combinations is; it is not used", PlannerWarning, stacklevel=2)
    keys = [t.key for t in spec.tasks]
    if len(set(keys)) != len(keys):
        raise PlannerError(f"{spec.path}: two axis combinations give the same scenario; remove the duplicate values")
    if not spec.tasks:
        reasons = "; ".join(sorted({f["reason"] for f in spec.filtered})[:3])
        raise PlannerError(f"{spec.path}: every one of the {len(spec.filtered)} combinations is filtered out ({reasons})")


def _base_value(sc, axis: str):
    return {"model": sc.model.name, "hardware": sc.hardware.name, "tp": sc.deployment.tp, "ep": sc.deployment.ep,
            "dtype": sc.deployment.weight_dtype, "act_dtype": sc.deployment.act_dtype,
            "kv_dtype": sc.deployment.kv_dtype, "draft": sc.draft.label,
            "context_len": sc.context_len, "traffic": "base", "acceptance": "base",
            "engine": _engine_key(sc)}[axis]


def _engine_key(sc) -> str:
    eng = getattr(sc, "engine", None)
    if eng is None:
        return "-"
    return f"{eng.name}-{eng.version}" if getattr(eng, "version", "") else eng.name
