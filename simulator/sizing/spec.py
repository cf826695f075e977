"""What to size: the ``[slo]`` and ``[sizing]`` sections and the candidates they name.

Scenario sections read here (validated with :func:`simulator.specs.scenario.check_table`)::

    [slo]      ttft_p50_s / ttft_p90_s / ttft_p99_s / tpot_p50_s / tpot_p90_s / tpot_p99_s /
               itl_p50_s / itl_p99_s  (seconds, > 0; at least one)
    [sizing]   candidates = ["h100-sxm", "h200"]   tp = [4, 8]   max_replicas = 64
               prices = {h100-sxm = 2.5}           policies = ["plain", "fixed", "dsd"]
               target_rate_per_s = 20.0 (else [traffic] rate_per_s)   n_requests = 200
               search_steps = 4   seed = 0   workers = 2   sensitivity = true
               dtypes = [""]  (default: the scenario's precision alone; add "fp8" to search W8A8 too, where the
                               GPU has fp8, or nvfp4 / mxfp4 for W4A4 where its tensor cores run that format;
                               a quantized pick carries a quality caveat)
               headroom = 0.2  spare_replicas = 1 (N+1)  gpus_per_node = 8

``[traffic]`` belongs to the serving simulation; the sizer reads its load (``rate_per_s`` or
``concurrency``) as the target and passes the rest to the serving workload. What each candidate is
(its scenario, its memory fit) is :mod:`simulator.sizing.candidate`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, fields

import numpy as np

from simulator.errors import PlannerError, did_you_mean
from simulator.sizing.candidate import FP8, LOW_PRECISION, Candidate
from simulator.specs.hardware import list_hardware, load_hardware
from simulator.specs.scenario import NUM, Scenario, check_table

SLO_KEYS = ("ttft_p50_s", "ttft_p90_s", "ttft_p99_s", "tpot_p50_s", "tpot_p90_s", "tpot_p99_s",
            "itl_p50_s", "itl_p99_s")
SLO_SCHEMA = {key: NUM for key in SLO_KEYS}
SIZING_SCHEMA = {
    "candidates": list, "tp": list, "max_replicas": int, "prices": dict, "policies": list,
    "target_rate_per_s": NUM, "target_concurrency": int, "n_requests": int, "search_steps": int,
    "seed": int, "workers": int, "sensitivity": bool, "description": str, "duration_s": NUM, "max_requests": int,
    "dtypes": list, "headroom": NUM, "spare_replicas": int, "gpus_per_node": int,
}
POLICIES = ("plain", "fixed", "dsd")
SETTINGS = ("max_replicas", "n_requests", "search_steps", "seed", "workers", "sensitivity", "duration_s",
            "max_requests", "headroom", "spare_replicas", "gpus_per_node")


def _fmt(x) -> str:
    if x is None:
        return "n/a"
    try:
        return f"{float(x):.3f}".rstrip("0").rstrip(".") if abs(float(x)) < 1000 else f"{float(x):,.0f}"
    except (TypeError, ValueError):
        return str(x)


# --- the specification --------------------------------------------------------------------------

@dataclass(frozen=True)
class SLO:
    """Upper bounds on latency percentiles [s], keyed like the serving summary."""

    targets: dict

    def violations(self, summary: dict) -> list[str]:
        out = []
        for key, limit in self.targets.items():
            value = summary.get(key)
            if value is None or not np.isfinite(value) or value > limit:
                # enough digits that the value and the limit differ in print (0.03024 s > 0.03 s)
                shown = _fmt(value) if value is None or not np.isfinite(value) else f"{value:.4g}"
                out.append(f"{key} {shown} s > {limit:g} s")
        return out

    @property
    def tpot_limit_s(self) -> float | None:
        lims = [v for k, v in self.targets.items() if k.startswith(("tpot", "itl"))]
        return min(lims) if lims else None

    def describe(self) -> str:
        return ", ".join(f"{k} <= {v:g} s" for k, v in self.targets.items())


@dataclass(frozen=True)
class SizingSpec:
    slo: SLO
    candidates: tuple
    policies: tuple
    load_kind: str  # "rate" (Poisson, requests/s) | "concurrency" (closed loop, sequences)
    target_load: float
    max_replicas: int = 64
    prices: dict = field(default_factory=dict)
    n_requests: int = 200  # at least this many requests per serving run
    duration_s: float | None = None  # simulated seconds of arrivals per run (None: search.STEADY_LIFETIMES lifetimes)
    max_requests: int = 20000
    search_steps: int = 4
    seed: int = 0
    workers: int = 2
    sensitivity: bool = True
    ttft_guard: bool = False
    headroom: float = 0.2  # buy for target x (1 + headroom): bursts and growth
    spare_replicas: int = 1  # N+1: one replica may fail or be drained
    gpus_per_node: int = 8  # GPUs are bought as whole nodes

    @property
    def load_unit(self) -> str:
        return "req/s" if self.load_kind == "rate" else "concurrent seqs"


@dataclass(frozen=True)
class SizingOverrides:
    """What a caller sets over the scenario's ``[sizing]`` (and its target load); None keeps the file's value."""
    candidates: list | None = None  # hardware names
    tp: list | None = None
    target_load: float | None = None
    policies: list | None = None
    workers: int | None = None
    n_requests: int | None = None
    search_steps: int | None = None
    seed: int | None = None
    sensitivity: bool | None = None
    max_replicas: int | None = None
    duration_s: float | None = None
    max_requests: int | None = None
    dtypes: list | None = None
    prices: dict | None = None
    headroom: float | None = None
    spare_replicas: int | None = None

    def as_kwargs(self) -> dict:
        """The keyword arguments of :func:`parse_sizing` (values as given, not copied)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


# --- parsing ------------------------------------------------------------------------------------

def parse_slo(sc: Scenario) -> SLO:
    table = sc.extra.get("slo")
    if not isinstance(table, dict) or not table:
        raise PlannerError(f"{sc.origin}: sizing needs an [slo] section (e.g. ttft_p99_s = 2.0, tpot_p50_s = 0.05)")
    check_table(table, SLO_SCHEMA, sc.origin, "slo")
    for key, value in table.items():
        if not value > 0:
            raise PlannerError(f"{sc.origin}: [slo] {key} must be > 0 seconds, got {value}")
    return SLO({k: float(v) for k, v in table.items()})


def _check_hardware(name, origin) -> str:
    if not isinstance(name, str):
        raise PlannerError(f"{origin}: [sizing] candidates must be hardware names (strings), got {name!r}")
    if name not in list_hardware():
        raise PlannerError(f"{origin}: [sizing] unknown candidate hardware '{name}'{did_you_mean(name, list_hardware())}")
    return name


def _parse_dtypes(sc: Scenario, table: dict, dtypes) -> list[str]:
    """Precision variants: the arguments, else [sizing] dtypes, else the scenario's own alone (a precision
    nobody asked for is never searched: quantizing changes the model's outputs)."""
    out = dtypes if dtypes is not None else table.get("dtypes")
    if out is None:
        return [""]
    own = sc.deployment.weight_dtype
    out = ["" if d in ("own", own) else d for d in out]  # the scenario's own precision, by name
    for d in out:
        if d not in ("",) + LOW_PRECISION:
            raise PlannerError(f"{sc.origin}: [sizing] dtypes / --dtypes entries must be \"\" or \"own\" (the scenario's"
                               f" precision, {own}) or one of {', '.join(LOW_PRECISION)}, got {d!r}")
    return list(dict.fromkeys(out)) or [""]


def _parse_candidates(sc: Scenario, table: dict, candidates, tp, dtypes=None) -> tuple:
    """(hardware x tp x dtype) candidates: the arguments, else [sizing], else the scenario's own device and TP.

    fp8 variants are made only for GPUs with fp8 tensor cores (peak_fp8_flops_per_s in the catalog), nvfp4 /
    mxfp4 ones only for GPUs whose tensor cores run that format (fp4_formats)."""
    origin = sc.origin
    hw_names = candidates if candidates is not None else table.get("candidates", [sc.hardware.name])
    if isinstance(hw_names, str):
        hw_names = [h.strip() for h in hw_names.split(",") if h.strip()]
    hw_names = [_check_hardware(h, origin) for h in hw_names]
    if not hw_names:
        raise PlannerError(f"{origin}: [sizing] candidates is empty")
    tps = tp if tp is not None else table.get("tp", [sc.deployment.tp])
    if isinstance(tps, int):
        tps = [tps]
    for t in tps:
        if not isinstance(t, int) or isinstance(t, bool) or t < 1:
            raise PlannerError(f"{origin}: [sizing] tp must be a list of integers >= 1, got {t!r}")
    variants = _parse_dtypes(sc, table, dtypes)
    return tuple(Candidate(h, int(t), d) for h in hw_names for d in variants for t in tps
                 if _runs(load_hardware(h), d))


def _runs(hw, dtype: str) -> bool:
    """Whether a precision variant is made for this device ("" always; fp8 / FP4 where its tensor cores run it)."""
    return dtype == "" or (dtype == FP8 and bool(hw.peak_fp8_flops_per_s)) or dtype in hw.fp4_formats


def _parse_prices(table: dict, origin) -> dict:
    prices = table.get("prices", {})
    for name, price in prices.items():
        _check_hardware(name, origin)
        if not isinstance(price, (int, float)) or isinstance(price, bool) or not 0 <= price < math.inf:
            raise PlannerError(f"{origin}: [sizing] prices.{name} must be a finite price per GPU-hour >= 0, got {price!r}")
    return {k: float(v) for k, v in prices.items()}


def _target_load(table: dict, traffic: dict, target_load, origin) -> tuple[str, float]:
    """(load kind, target load): [sizing] target, else the [traffic] load; an explicit target_load replaces the value."""
    rate, conc = traffic.get("rate_per_s"), traffic.get("concurrency")
    if "target_rate_per_s" in table:
        kind, load = "rate", table["target_rate_per_s"]
    elif "target_concurrency" in table:
        kind, load = "concurrency", table["target_concurrency"]
    elif isinstance(rate, (int, float)) and not isinstance(rate, bool):
        kind, load = "rate", rate
    elif isinstance(conc, int) and not isinstance(conc, bool):
        kind, load = "concurrency", conc
    elif target_load is not None:
        kind, load = "rate", target_load
    else:
        raise PlannerError(f"{origin}: sizing needs a target load: [traffic] rate_per_s (or concurrency),"
                           " or [sizing] target_rate_per_s")
    if target_load is not None:
        load = target_load
    if not (math.isfinite(load) and 0 < load <= MAX_TARGET_LOAD):
        raise PlannerError(f"{origin}: target load must be > 0 and at most {MAX_TARGET_LOAD:g}, got {load}")
    return kind, float(load)


# Upper bounds of the sizing settings: each serving run holds a few arrays of n_requests (8 bytes each), a
# search runs 2 x search_steps of them per candidate; far above any real use, far below a memory error
SETTING_CAPS = {"n_requests": 1_000_000, "max_requests": 1_000_000, "search_steps": 40, "max_replicas": 100_000,
                "duration_s": 1e7, "workers": 1024, "gpus_per_node": 1024}
MAX_TARGET_LOAD = 1e9  # requests/s (or sequences in flight)


def _parse_settings(table: dict, over: dict, origin) -> dict:
    settings = {k: table[k] for k in SETTINGS if k in table}
    settings |= {k: v for k, v in over.items() if v is not None}
    if "duration_s" in settings and not settings["duration_s"] > 0:
        raise PlannerError(f"{origin}: [sizing] duration_s must be > 0 seconds, got {settings['duration_s']}")
    if not 0 <= settings.get("headroom", 0.2) <= 10:
        raise PlannerError(f"{origin}: [sizing] headroom must be a fraction between 0 and 10 (0.2 = 20%),"
                           f" got {settings['headroom']}")
    if settings.get("spare_replicas", 1) < 0:
        raise PlannerError(f"{origin}: [sizing] spare_replicas must be >= 0, got {settings['spare_replicas']}")
    for key in ("max_replicas", "n_requests", "workers", "max_requests", "gpus_per_node"):
        if key in settings and settings[key] < 1:
            raise PlannerError(f"{origin}: [sizing] {key} must be >= 1, got {settings[key]}")
    if settings.get("search_steps", 1) < 0:
        raise PlannerError(f"{origin}: [sizing] search_steps must be >= 0")
    if settings.get("n_requests", 200) < 20:
        raise PlannerError(f"{origin}: [sizing] n_requests must be >= 20 for stable percentiles")
    for key, cap in SETTING_CAPS.items():
        if key in settings and settings[key] > cap:
            raise PlannerError(f"{origin}: [sizing] {key} = {settings[key]} is above the cap of {cap}")
    return settings


def parse_sizing(sc: Scenario, candidates=None, tp=None, target_load=None, policies=None, dtypes=None,
                 prices=None, **over) -> SizingSpec:
    """Validate ``[slo]``, ``[sizing]`` and the load of ``[traffic]``; keyword arguments override the file."""
    origin = sc.origin
    slo = parse_slo(sc)
    table = dict(sc.extra.get("sizing") or {})
    check_table(table, SIZING_SCHEMA, origin, "sizing")
    traffic = sc.extra.get("traffic") or {}
    if not isinstance(traffic, dict):
        raise PlannerError(f"{origin}: [traffic] must be a table")
    cands = _parse_candidates(sc, table, candidates, tp, dtypes)
    pols = tuple(policies or table.get("policies", POLICIES))
    for p in pols:
        if not isinstance(p, str):
            raise PlannerError(f"{origin}: [sizing] policies must be strings, got {p!r}")
    speculative = [p for p in pols if p != "plain"]
    if sc.draft.is_tree and speculative:  # refused here, not per policy as "misses the SLOs" after the search
        raise PlannerError(f"draft {sc.draft.label}: sizing prices chains only (the serving simulation verifies K + 1"
                           f" tokens a sequence, a tree N + 1), so policies {', '.join(speculative)} cannot run:"
                           " plan the tree with python -m simulator.predict, or size plain decoding alone with [sizing]"
                           " policies = [\"plain\"]")
    prices = _parse_prices(table, origin) | _parse_prices({"prices": prices or {}}, "price override")
    kind, load = _target_load(table, traffic, target_load, origin)
    settings = _parse_settings(table, over, origin)
    ttft_guard = not any(k.startswith("ttft") for k in slo.targets)
    return SizingSpec(slo=slo, candidates=cands, policies=pols, load_kind=kind, target_load=load,
                      prices=prices, ttft_guard=ttft_guard, **settings)
