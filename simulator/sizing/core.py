"""Capacity sizing: which hardware, how many GPUs, plain vs fixed K vs dynamic K, under SLOs.

For each candidate (hardware x tensor-parallel degree) and each policy the sizer finds the highest
load one replica carries while meeting every SLO of the scenario's ``[slo]`` section, by running the
serving simulation (``simulator.serving.simulate``) at a fixed seed and bisecting on the Poisson
request rate (or on the closed-loop concurrency when ``[traffic]`` gives a concurrency). Then

    replicas          = ceil(target load / max load per replica)
    GPUs              = replicas * tp
    $ per M tokens    = price per GPU-hour * tp / (output tokens per hour of one replica at max load) * 1e6
    energy per token  = TDP * tp / (output tokens per second at max load)      [J, an estimate: GPUs at TDP]

Configurations whose weights, draft and one sequence's KV cache (with K+1 verification slots) do not
fit the usable memory (``memory_bytes * memory_utilization``) are rejected with the reason.

Scenario sections read here (validated with :func:`simulator.specs.scenario.check_table`)::

    [slo]      ttft_p50_s / ttft_p90_s / ttft_p99_s / tpot_p50_s / tpot_p90_s / tpot_p99_s /
               itl_p50_s / itl_p99_s  (seconds, > 0; at least one)
    [sizing]   candidates = ["h100-sxm", "h200"]   tp = [4, 8]   max_replicas = 64
               prices = {h100-sxm = 2.5}           policies = ["plain", "fixed", "dsd"]
               target_rate_per_s = 20.0 (else [traffic] rate_per_s)   n_requests = 200
               search_steps = 4   seed = 0   workers = 2   sensitivity = true

``[traffic]`` belongs to the serving simulation; the sizer reads its load (``rate_per_s`` or
``concurrency``) as the target and passes the rest to the serving workload.
"""
from __future__ import annotations

import copy
import dataclasses
import json
import math
import os
import types
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from simulator.plan.api import predict_scenario
from simulator.physics.memory import draft_weight_bytes, kv_budget_bytes, kv_bytes_per_sequence, weight_bytes_per_gpu
from simulator.errors import PlannerError, did_you_mean
from simulator.specs.hardware import list_hardware, load_hardware
from simulator.specs.scenario import NUM, Scenario, build_scenario, check_table, load_scenario

GB = 1e9
SLO_KEYS = ("ttft_p50_s", "ttft_p90_s", "ttft_p99_s", "tpot_p50_s", "tpot_p90_s", "tpot_p99_s",
            "itl_p50_s", "itl_p99_s")
SLO_SCHEMA = {key: NUM for key in SLO_KEYS}
SIZING_SCHEMA = {
    "candidates": list, "tp": list, "max_replicas": int, "prices": dict, "policies": list,
    "target_rate_per_s": NUM, "target_concurrency": int, "n_requests": int, "search_steps": int,
    "seed": int, "workers": int, "sensitivity": bool, "description": str, "duration_s": NUM, "max_requests": int,
}
POLICIES = ("plain", "fixed", "dsd")
# When the SLOs say nothing about TTFT, an overloaded replica still looks fine on TPOT (the queue
# grows, running sequences decode at speed). This guard marks such loads as unsustainable.
DEFAULT_TTFT_GUARD_S = 30.0
MAX_EXPANSIONS = 6


# --- inputs -------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Candidate:
    hardware: str
    tp: int

    @property
    def label(self) -> str:
        return f"{self.hardware} tp={self.tp}"


@dataclass(frozen=True)
class SLO:
    """Upper bounds on latency percentiles [s], keyed like the serving summary."""

    targets: dict

    def violations(self, summary: dict) -> list[str]:
        out = []
        for key, limit in self.targets.items():
            value = summary.get(key)
            if value is None or not np.isfinite(value) or value > limit:
                out.append(f"{key} {_fmt(value)} s > {limit:g} s")
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
    duration_s: float | None = None  # simulated seconds of arrivals per run (None: 4 request lifetimes, >= 30 s)
    max_requests: int = 4000
    search_steps: int = 4
    seed: int = 0
    workers: int = 2
    sensitivity: bool = True
    ttft_guard: bool = False

    @property
    def load_unit(self) -> str:
        return "req/s" if self.load_kind == "rate" else "concurrent seqs"


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


def parse_sizing(sc: Scenario, candidates=None, tp=None, target_load=None, policies=None, **over) -> SizingSpec:
    """Validate ``[slo]``, ``[sizing]`` and the load of ``[traffic]``; keyword arguments override the file."""
    origin = sc.origin
    slo = parse_slo(sc)
    table = dict(sc.extra.get("sizing") or {})
    check_table(table, SIZING_SCHEMA, origin, "sizing")
    traffic = sc.extra.get("traffic") or {}
    if not isinstance(traffic, dict):
        raise PlannerError(f"{origin}: [traffic] must be a table")

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
    pols = tuple(policies or table.get("policies", POLICIES))
    for p in pols:
        if not isinstance(p, str):
            raise PlannerError(f"{origin}: [sizing] policies must be strings, got {p!r}")
    prices = table.get("prices", {})
    for name, price in prices.items():
        _check_hardware(name, origin)
        if not isinstance(price, (int, float)) or isinstance(price, bool) or price < 0:
            raise PlannerError(f"{origin}: [sizing] prices.{name} must be a price per GPU-hour >= 0, got {price!r}")

    # target load: [sizing] target, else the [traffic] load; an explicit target_load replaces the value
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
    if not load > 0:
        raise PlannerError(f"{origin}: target load must be > 0, got {load}")

    settings = {k: table[k] for k in ("max_replicas", "n_requests", "search_steps", "seed", "workers", "sensitivity",
                                      "duration_s", "max_requests") if k in table}
    settings |= {k: v for k, v in over.items() if v is not None}
    if "duration_s" in settings and not settings["duration_s"] > 0:
        raise PlannerError(f"{origin}: [sizing] duration_s must be > 0 seconds, got {settings['duration_s']}")
    for key in ("max_replicas", "n_requests", "workers", "max_requests"):
        if key in settings and settings[key] < 1:
            raise PlannerError(f"{origin}: [sizing] {key} must be >= 1, got {settings[key]}")
    if settings.get("search_steps", 1) < 0:
        raise PlannerError(f"{origin}: [sizing] search_steps must be >= 0")
    if settings.get("n_requests", 200) < 20:
        raise PlannerError(f"{origin}: [sizing] n_requests must be >= 20 for stable percentiles")
    ttft_guard = not any(k.startswith("ttft") for k in slo.targets)
    cands = tuple(Candidate(h, int(t)) for h in hw_names for t in tps)
    return SizingSpec(slo=slo, candidates=cands, policies=pols, load_kind=kind, target_load=float(load),
                      prices={k: float(v) for k, v in prices.items()}, ttft_guard=ttft_guard, **settings)


# --- per candidate: scenario, memory fit --------------------------------------------------------

def candidate_scenario(sc: Scenario, cand: Candidate, acceptance_scale: float = 1.0,
                       bandwidth_scale: float = 1.0) -> Scenario:
    """The scenario moved to another device / TP degree (a calibration profile is kept only on its device)."""
    raw = copy.deepcopy(sc.raw)
    old = raw.get("hardware", {})
    hw = {"name": cand.hardware, "tp": cand.tp}
    ep = old.get("ep", 1)
    if ep > 1 and cand.tp % ep == 0:
        hw["ep"] = ep
    if cand.hardware == old.get("name"):  # user figures for this very device stay
        hw |= {k: v for k, v in old.items() if k not in ("name", "tp", "ep")}
    if bandwidth_scale != 1.0:
        base = hw.get("hbm_bandwidth_bytes_per_s", load_hardware(cand.hardware).hbm_bandwidth_bytes_per_s)
        hw["hbm_bandwidth_bytes_per_s"] = float(base) * bandwidth_scale
    raw["hardware"] = hw
    if sc.profile is not None and sc.profile.hardware != cand.hardware:
        raw.pop("calibration", None)
    if acceptance_scale != 1.0:
        rates = [min(0.99, r * acceptance_scale) for r in sc.acceptance.rates]
        raw["acceptance"] = {"rates": rates, "source": f"{sc.acceptance.source}, scaled x{acceptance_scale:g}"}
    return build_scenario(raw, sc.origin, raw.get("_base_dir"))


def _spec_mean(value, default: float) -> float:
    """Mean of a length spec: a number, a table with 'mean' (or min/max), or a list of lengths."""
    if isinstance(value, bool):
        return default
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, dict):
        for key in ("mean", "value", "median"):
            if isinstance(value.get(key), (int, float)):
                return float(value[key])
        if isinstance(value.get("min"), (int, float)) and isinstance(value.get("max"), (int, float)):
            return (value["min"] + value["max"]) / 2
    if isinstance(value, (list, tuple)) and value and all(isinstance(v, (int, float)) for v in value):
        return float(np.mean(value))
    return default


def traffic_lengths(sc: Scenario) -> tuple[float, float]:
    """(mean prompt tokens, mean output tokens) of the scenario's traffic."""
    traffic = sc.extra.get("traffic") or {}
    out = []
    for key, default in (("prompt_len", float(sc.context_len)), ("output_len", 256.0)):
        spec = traffic.get(key)
        mean = _spec_mean(spec, default)
        if isinstance(spec, dict):
            try:  # the serving simulation's own length distributions, when present
                from simulator.serving import parse_length
                mean = float(parse_length(spec, key, sc.raw.get("_base_dir")).sample(np.random.default_rng(0), 4000).mean())
            except (ImportError, PlannerError):
                pass
        out.append(mean)
    return out[0], out[1]


def memory_fit(sc: Scenario, context_tokens: float) -> dict:
    """Weights (target + draft), then how many sequences of ``context_tokens`` (+ K_max+1 verify slots) fit.

    Returns fits, reason, and the GB figures per GPU.
    """
    dep, model = sc.deployment, sc.model
    label = f"{sc.hardware.name} tp={dep.tp}"
    usable = sc.hardware.memory_bytes * dep.memory_utilization
    weights = weight_bytes_per_gpu(model, dep)
    spec = sc.k_max > 0
    draft_w = draft_weight_bytes(sc.draft, model, dep, spec)
    tokens = context_tokens + sc.k_max + 1
    kv_seq = float(kv_bytes_per_sequence(sc.draft, model, dep, tokens, spec))
    info = {"usable_gb": usable / GB, "weights_gb": weights / GB, "draft_gb": draft_w / GB,
            "kv_gb_per_seq": kv_seq / GB, "context_tokens": int(context_tokens)}
    if weights + draft_w > usable:
        what = f"weights {weights / GB:.0f} GB/GPU" + (f" + draft {draft_w / GB:.1f} GB" if draft_w else "")
        return info | {"fits": False, "max_seqs": 0,
                       "reason": f"{label}: {what} exceed {usable / GB:.0f} GB usable"
                                 f" ({sc.hardware.memory_bytes / GB:.0f} GB x {dep.memory_utilization:g})"}
    max_seqs = int(kv_budget_bytes(sc.draft, model, dep, sc.hardware.memory_bytes, spec) // kv_seq)
    if max_seqs < 1:
        return info | {"fits": False, "max_seqs": 0,
                       "reason": f"{label}: KV cache of one {tokens:.0f}-token sequence ({kv_seq / GB:.1f} GB/GPU)"
                                 f" exceeds the {(usable - weights - draft_w) / GB:.1f} GB left after weights"}
    return info | {"fits": True, "max_seqs": max_seqs, "reason": ""}


# --- serving runs and the load search -----------------------------------------------------------

def _default_simulate():
    try:
        from simulator import serving
    except ImportError as err:
        raise PlannerError(f"the serving simulation (simulator.serving) is not available: {err}") from None
    return serving.simulate


def build_workload(sc: Scenario, kind: str, load: float, n_requests: int, max_num_seqs: int | None):
    """The serving Workload for one load point: the scenario's traffic with the load replaced."""
    traffic = dict(sc.extra.get("traffic") or {})
    fields = {"arrival": "poisson" if kind == "rate" else "closed", "n_requests": int(n_requests)}
    if kind == "rate":
        fields["rate_per_s"] = float(load)
    else:
        fields["concurrency"] = int(load)
    try:
        from simulator import serving
    except ImportError:
        serving = None
    if serving is None or not hasattr(serving, "Workload"):  # stand-in simulations (tests of the search)
        base = {k: v for k, v in traffic.items() if k not in ("arrival", "rate_per_s", "concurrency")}
        return types.SimpleNamespace(**(base | fields | {"max_num_seqs": max_num_seqs}))
    base = _workload_from_traffic(serving, sc, traffic)
    names = {f.name for f in dataclasses.fields(base)}
    fields = {k: v for k, v in fields.items() if k in names}
    if max_num_seqs is not None and "max_num_seqs" in names:
        current = getattr(base, "max_num_seqs", None)
        fields["max_num_seqs"] = int(min(max_num_seqs, current)) if current else int(max_num_seqs)
    return dataclasses.replace(base, **fields)


def _workload_from_traffic(serving, sc: Scenario, traffic: dict):
    for helper in ("workload_from_scenario", "workload_from_traffic"):
        fn = getattr(serving, helper, None)
        if fn is not None:
            try:
                return fn(sc)
            except TypeError:
                return fn(traffic)
    names = {f.name for f in dataclasses.fields(serving.Workload)}
    return serving.Workload(**{k: v for k, v in traffic.items() if k in names})


def requests_for(sc: Scenario, spec: SizingSpec, kind: str, load: float) -> int:
    """Requests per run: enough simulated time for the queue to reach steady state.

    A short run at a high rate ends before the queue builds up (160 requests at 45 req/s arrive in
    3.5 s, less than one request's lifetime), so its percentiles look fine at loads no replica can
    sustain. Runs cover ``duration_s`` of arrivals (default 4 request lifetimes, at least 30 s):
    n = max(n_requests, rate * duration), at most max_requests.
    """
    if kind != "rate":
        return int(min(spec.max_requests, max(spec.n_requests, 8 * load)))
    duration = spec.duration_s
    if duration is None:
        _, out_len = traffic_lengths(sc)
        t = spec.slo.targets
        ttft = min([v for k, v in t.items() if k.startswith("ttft")] or [1.0])
        lifetime = ttft + out_len * (spec.slo.tpot_limit_s or 0.05)
        duration = max(30.0, 4.0 * lifetime)
    return int(min(spec.max_requests, max(spec.n_requests, math.ceil(load * duration))))


def run_point(sc: Scenario, policy: str, kind: str, load: float, spec: SizingSpec, max_num_seqs, simulate) -> dict:
    workload = build_workload(sc, kind, load, requests_for(sc, spec, kind, load), max_num_seqs)
    try:
        result = simulate(sc, policy, workload=workload, seed=spec.seed)
    except PlannerError as err:  # e.g. a request longer than the KV cache holds: this load cannot run
        return {"error": " ".join(str(err).split())}
    return dict(getattr(result, "summary", result))


def _check(spec: SizingSpec, summary: dict) -> list[str]:
    if "error" in summary:
        return [summary["error"]]
    bad = spec.slo.violations(summary)
    if spec.ttft_guard:
        p99 = summary.get("ttft_p99_s", np.inf)
        if not p99 <= DEFAULT_TTFT_GUARD_S:
            bad.append(f"queue grows: ttft_p99_s {_fmt(p99)} s > {DEFAULT_TTFT_GUARD_S:g} s (stability guard)")
    return bad


def analytic_guess(sc: Scenario, policy: str, spec: SizingSpec, max_seqs: int) -> float:
    """A first load to try, from the goodput table: the largest batch whose TPOT meets the SLO."""
    table = predict_scenario(sc).table
    col = {"plain": "plain_goodput_per_seq", "fixed": "fixed_goodput_per_seq"}.get(policy, "goodput_per_seq")
    g = table[col].to_numpy(dtype=float)
    b = table["batch_size"].to_numpy(dtype=float)
    ok = np.isfinite(g) & (b <= max_seqs)
    limit = spec.slo.tpot_limit_s
    if limit:
        ok &= 1.0 / np.where(g > 0, g, np.nan) <= limit
    if not ok.any():
        bstar, gstar = 1.0, float(np.nanmax(g[:1])) if np.isfinite(g[:1]).any() else 1.0
        scale = 0.25
    else:
        i = np.flatnonzero(ok)[-1]
        bstar, gstar, scale = b[i], g[i], 0.7
    if spec.load_kind == "concurrency":
        return max(1.0, round(bstar * scale))
    _, out_len = traffic_lengths(sc)
    return max(1e-3, scale * bstar * gstar / out_len)


@dataclass
class Search:
    """Result of one (candidate, policy) load search."""

    candidate: Candidate
    policy: str
    capacity: float  # highest load meeting the SLOs (0 when none does)
    summary: dict | None  # serving summary at that load
    points: list  # every load tried: {load, meets, violations, summary...}
    bounded: bool  # a failing load above the capacity was found
    reason: str = ""
    step_time_source: str = ""


def search_capacity(sc: Scenario, policy: str, spec: SizingSpec, max_seqs: int, simulate=None,
                    cand: Candidate | None = None) -> Search:
    """Bracket then bisect the load (geometric midpoints for rates, integers for concurrency).

    Starts from :func:`analytic_guess`; doubles while the SLOs hold and halves while they fail
    (at most MAX_EXPANSIONS times), then runs ``spec.search_steps`` bisection steps. The capacity is
    the highest load that passed, with a failing load above it (``bounded``).
    """
    simulate = simulate or _default_simulate()
    cand = cand or Candidate(sc.hardware.name, sc.deployment.tp)
    integer = spec.load_kind == "concurrency"
    cap_seqs = None  # the serving simulation manages the KV cache itself (preempts when full)
    points: list[dict] = []
    cache: dict[float, tuple[bool, dict, list]] = {}

    def trial(load):
        if load in cache:
            return cache[load]
        summary = run_point(sc, policy, spec.load_kind, load, spec, cap_seqs, simulate)
        bad = _check(spec, summary)
        points.append({"load": load, "meets": not bad, "violations": "; ".join(bad)} | _pick(summary))
        cache[load] = (not bad, summary, bad)
        return cache[load]

    x = analytic_guess(sc, policy, spec, max_seqs)
    if integer:
        x = float(min(max(1, int(x)), max_seqs))
    lo = hi = None
    lo_sum, last_bad = None, []
    for _ in range(MAX_EXPANSIONS + 1):
        ok, summary, bad = trial(x)
        if ok:
            lo, lo_sum = x, summary
            if hi is not None:
                break
            nxt = x * 2
            if integer:
                nxt = float(min(nxt, max_seqs))
                if nxt == x:
                    break
            x = nxt
        else:
            hi, last_bad = x, bad
            if lo is not None:
                break
            nxt = math.floor(x / 2) if integer else x / 2
            if integer and nxt < 1:
                break
            x = float(nxt)
    if lo is None:
        return Search(cand, policy, 0.0, None, points, True,
                      f"misses the SLOs even at {_fmt(hi)} {spec.load_unit}: {'; '.join(last_bad)}", sc.cost_source)
    if hi is not None:
        for _ in range(spec.search_steps):
            if integer:
                if hi - lo <= 1:
                    break
                mid = float((lo + hi) // 2)
            else:
                mid = math.sqrt(lo * hi)
            ok, summary, _ = trial(mid)
            if ok:
                lo, lo_sum = mid, summary
            else:
                hi = mid
    return Search(cand, policy, lo, lo_sum, points, hi is not None, "", sc.cost_source)


def _pick(summary: dict) -> dict:
    keys = ("throughput_tok_s", "tokens_per_s_per_user", "ttft_p50_s", "ttft_p99_s", "tpot_p50_s", "tpot_p99_s",
            "itl_p99_s", "mean_batch_size", "mean_k", "kv_peak_occupancy", "n_requests", "output_tokens", "makespan_s")
    return {k: summary.get(k, np.nan) for k in keys}


def _fmt(x) -> str:
    if x is None:
        return "n/a"
    try:
        return f"{float(x):.3g}"
    except (TypeError, ValueError):
        return str(x)


# --- one task in a worker -----------------------------------------------------------------------

@dataclass
class Task:
    scenario: Scenario
    candidate: Candidate
    policy: str
    spec: SizingSpec
    max_seqs: int
    simulate: object = None
    variant: str = ""


def _run_task(task: Task) -> tuple[str, Search]:
    s = search_capacity(task.scenario, task.policy, task.spec, task.max_seqs, task.simulate, task.candidate)
    return task.variant, s


def _run_all(tasks: list[Task], workers: int) -> list[tuple[str, Search]]:
    if workers <= 1 or len(tasks) <= 1:
        return [_run_task(t) for t in tasks]
    with ProcessPoolExecutor(max_workers=min(workers, len(tasks))) as pool:
        return list(pool.map(_run_task, tasks))


# --- uncertainty -------------------------------------------------------------------------------

def _find_mape(obj, path="") -> list[tuple[str, float]]:
    """All numbers under keys that name an ITL / step-time error (MAPE) in a nested dict."""
    found = []
    if isinstance(obj, dict):
        for k, v in obj.items():
            key = f"{path}.{k}" if path else str(k)
            low = str(k).lower()
            if isinstance(v, (int, float)) and not isinstance(v, bool) and ("mape" in low or "error" in low) \
                    and any(w in key.lower() for w in ("itl", "step", "time", "mape")):
                found.append((key, float(v)))
            else:
                found += _find_mape(v, key)
    return found


def uncertainty(sc: Scenario) -> tuple[float | None, str]:
    """Relative error to widen capacity by, and where it comes from (None: unknown)."""
    sources = []
    if sc.profile is not None and sc.profile.raw.get("heldout_error"):
        sources += [(f"calibration profile {sc.profile.path}: heldout_error.{k}", v)
                    for k, v in _find_mape(sc.profile.raw["heldout_error"])]
    val = sc.extra.get("validation")
    if isinstance(val, dict):
        sources += [(f"{sc.origin} [validation] {k}", v) for k, v in _find_mape(val)]
        report = val.get("report")
        if isinstance(report, str):
            path = Path(report)
            if not path.is_absolute():
                path = Path(sc.raw.get("_base_dir") or ".") / path
            try:
                sources += [(f"validation report {report}: {k}", v) for k, v in _find_mape(json.loads(path.read_text()))]
            except (OSError, json.JSONDecodeError):
                pass
    sources = [(s, v / 100 if v > 1 else v) for s, v in sources if v >= 0]
    if not sources:
        return None, ("unknown: step times are " + sc.cost_source + " with no held-out or validation error;"
                      " the capacity has no measured error bar")
    where, err = max(sources, key=lambda s: s[1])
    return err, f"+-{err:.1%} from {where}"


# --- the result ---------------------------------------------------------------------------------

@dataclass
class SizingResult:
    scenario: Scenario
    spec: SizingSpec
    capacity: pd.DataFrame  # one row per candidate x policy that fits memory
    ranked: pd.DataFrame  # rows that meet the target within max_replicas, best first
    rejected: pd.DataFrame  # candidates that cannot run: hardware, tp, reason
    memory: pd.DataFrame  # memory fit per candidate
    points: pd.DataFrame  # every load the searches tried
    sensitivity: pd.DataFrame
    k_tables: dict  # candidate label -> K* table (DataFrame)
    engine: dict  # candidate label -> {"vllm": ..., "trtllm": ...}
    spec_stops: dict  # candidate label -> text
    recommendation: dict | None
    message: str
    band_note: str
    elapsed_s: float = 0.0

    def to_dict(self) -> dict:
        def records(df):
            return json.loads(df.to_json(orient="records")) if len(df) else []
        return {"scenario": self.scenario.name, "message": self.message, "recommendation": self.recommendation,
                "slo": self.spec.slo.targets, "target_load": self.spec.target_load, "load_unit": self.spec.load_unit,
                "ranked": records(self.ranked), "capacity": records(self.capacity), "rejected": records(self.rejected),
                "memory": records(self.memory), "sensitivity": records(self.sensitivity),
                "engine": self.engine, "spec_stops": self.spec_stops, "uncertainty": self.band_note}


def spec_stops_paying(table: pd.DataFrame, grid: pd.DataFrame | None = None) -> str:
    """The batch size from which K* = 0 (plain decoding) for every larger batch evaluated.

    With the (B, K) ``grid``, says when the cause is memory (K = 1 no longer fits) rather than speed.
    """
    k = table["k_opt"].fillna(0).astype(int).to_numpy()
    b = table["batch_size"].to_numpy()
    speed = table["speedup_vs_plain"].to_numpy(dtype=float)
    pays = (k > 0) & (np.nan_to_num(speed) > 1.0 + 1e-9)
    fixed = table["fixed_vs_plain"].to_numpy(dtype=float)
    slower = np.flatnonzero(fixed < 1.0)
    no_fit = np.flatnonzero(np.isnan(fixed) & np.isfinite(table["plain_goodput_per_seq"].to_numpy(dtype=float)))
    fixed_txt = ""
    if slower.size and (not no_fit.size or slower[0] < no_fit[0]):
        fixed_txt = f"; a fixed K is slower than plain from B={b[slower[0]]}"
    elif no_fit.size:
        fixed_txt = f"; a fixed K no longer fits memory from B={b[no_fit[0]]}"
    if not pays.any():
        return f"speculation does not pay at any batch size evaluated{fixed_txt}"
    last = np.flatnonzero(pays)[-1]
    if last == len(b) - 1:
        return f"dynamic K still pays at the largest batch evaluated (B={b[-1]}){fixed_txt}"
    stop = b[last + 1]
    why = "K*=0 from there"
    if grid is not None:
        cell = grid[(grid.batch_size == stop) & (grid.k == 1)]
        if len(cell) and not bool(cell.fits_memory.iloc[0]):
            why = "speculation no longer fits memory from there"
    return f"dynamic K stops paying at B={stop} ({why}){fixed_txt}"


def _price(spec: SizingSpec, hw) -> tuple[float, str]:
    if hw.name in spec.prices:
        return spec.prices[hw.name], "[sizing] prices"
    if hw.price_per_gpu_hour_usd is not None:
        return hw.price_per_gpu_hour_usd, "catalog (assumed)"
    return float("nan"), "no price"


def _capacity_row(sc: Scenario, s: Search, spec: SizingSpec, err: float | None) -> dict:
    hw, tp = sc.hardware, sc.deployment.tp
    price, price_src = _price(spec, hw)
    cap = s.capacity
    summ = s.summary or {}
    thr = float(summ.get("throughput_tok_s", np.nan)) if cap > 0 else np.nan
    if cap > 0 and spec.load_kind == "rate" and summ.get("n_requests") and summ.get("output_tokens"):
        # steady state: requests/s x mean output tokens (a finite run's tokens / makespan counts ramp and drain)
        thr = cap * float(summ["output_tokens"]) / float(summ["n_requests"])
    if cap > 0:
        replicas = math.ceil(spec.target_load / cap - 1e-9)
    else:
        replicas = None
    gpus = replicas * tp if replicas else None
    ok = bool(replicas) and replicas <= spec.max_replicas
    reason = s.reason
    if replicas and replicas > spec.max_replicas:
        reason = f"needs {replicas} replicas > max_replicas={spec.max_replicas}"
    if err is not None and cap > 0:
        lo, hi = cap * (1 - err), cap * (1 + err)
        g_lo, g_hi = math.ceil(spec.target_load / hi - 1e-9) * tp, math.ceil(spec.target_load / max(lo, 1e-12) - 1e-9) * tp
    else:
        lo = hi = g_lo = g_hi = np.nan
    with np.errstate(divide="ignore", invalid="ignore"):
        cost_mtok = price * tp / (thr * 3600.0) * 1e6 if thr > 0 else np.nan
        energy = (hw.tdp_w or np.nan) * tp / thr if thr > 0 else np.nan
    return {
        "hardware": hw.name, "tp": tp, "policy": s.policy, "meets_target": ok,
        "max_load_per_replica": cap, "load_band_low": lo, "load_band_high": hi, "bounded": s.bounded,
        "throughput_tok_s": thr, "tok_s_per_gpu": thr / tp if thr == thr else np.nan,
        "ttft_p99_s": summ.get("ttft_p99_s", np.nan), "tpot_p50_s": summ.get("tpot_p50_s", np.nan),
        "tpot_p99_s": summ.get("tpot_p99_s", np.nan), "mean_batch_size": summ.get("mean_batch_size", np.nan),
        "mean_k": summ.get("mean_k", np.nan),
        "replicas": replicas if replicas else np.nan, "gpus": gpus if gpus else np.nan,
        "gpus_band": f"{g_lo}-{g_hi}" if err is not None and cap > 0 else "unknown",
        "price_per_gpu_hour_usd": price, "fleet_usd_per_hour": gpus * price if gpus else np.nan,
        "usd_per_m_output_tokens": cost_mtok,
        # the fleet runs below capacity at the target load: what a million tokens cost there
        "usd_per_m_tokens_at_target": (gpus * price / (spec.target_load * thr / cap * 3600.0) * 1e6
                                       if gpus and thr == thr and cap > 0 else np.nan),
        "energy_j_per_token_est": energy,
        "step_time_source": "calibrated" if sc.profile else "datasheet",
        "price_source": price_src, "reason": reason,
    }


def size(scenario: str | Scenario, candidates=None, tp=None, target_load=None, policies=None, workers=None,
         n_requests=None, search_steps=None, seed=None, sensitivity=None, max_replicas=None,
         duration_s=None, max_requests=None, simulate=None) -> SizingResult:
    """Size a deployment for the scenario's traffic and SLOs.

    ``scenario``: a Scenario or a TOML path / bundled name with [slo], [sizing] and [traffic].
    Keyword arguments override [sizing]. ``simulate``: the serving simulation to use (default
    ``simulator.serving.simulate``; a picklable function with the same signature for tests).
    """
    import time
    t0 = time.perf_counter()
    sc = scenario if isinstance(scenario, Scenario) else load_scenario(scenario)
    spec = parse_sizing(sc, candidates=candidates, tp=tp, target_load=target_load, policies=policies,
                        workers=workers, n_requests=n_requests, search_steps=search_steps, seed=seed,
                        sensitivity=sensitivity, max_replicas=max_replicas, duration_s=duration_s,
                        max_requests=max_requests)
    if simulate is None:
        simulate = _default_simulate()
    prompt_len, out_len = traffic_lengths(sc)
    context = max(prompt_len + out_len, 1.0)

    rejected, memory, tasks, scen = [], [], [], {}
    for cand in spec.candidates:
        try:
            csc = candidate_scenario(sc, cand)
        except PlannerError as err:
            rejected.append({"hardware": cand.hardware, "tp": cand.tp, "reason": f"{cand.label}: {err}"})
            continue
        fit = memory_fit(csc, context)
        memory.append({"hardware": cand.hardware, "tp": cand.tp} | fit)
        if not fit["fits"]:
            rejected.append({"hardware": cand.hardware, "tp": cand.tp, "reason": fit["reason"]})
            continue
        scen[cand] = (csc, fit["max_seqs"])
        tasks += [Task(csc, cand, p, spec, fit["max_seqs"], simulate) for p in spec.policies]

    results = _run_all(tasks, spec.workers)
    err, band_note = uncertainty(sc)
    rows, pts = [], []
    for _, s in results:
        csc, _ = scen[s.candidate]
        # the measured error describes the device it was measured on; other candidates have no band
        rows.append(_capacity_row(csc, s, spec, err if csc.hardware.name == sc.hardware.name else None))
        pts += [{"hardware": s.candidate.hardware, "tp": s.candidate.tp, "policy": s.policy} | p for p in s.points]
    capacity = pd.DataFrame(rows)
    points = pd.DataFrame(pts)
    ranked = capacity[capacity["meets_target"]] if len(capacity) else capacity
    if len(ranked):
        # cheapest fleet first; on a tie more headroom, then the simpler engine setting (plain, fixed, dsd)
        order = {p: i for i, p in enumerate(("plain", "fixed", "dsd"))}
        ranked = ranked.assign(_simple=ranked.policy.map(order).fillna(9), _head=-ranked.max_load_per_replica)
        ranked = ranked.sort_values(["fleet_usd_per_hour", "gpus", "usd_per_m_output_tokens", "_head", "_simple"],
                                    na_position="last").drop(columns=["_simple", "_head"]).reset_index(drop=True)
        ranked.insert(0, "rank", np.arange(1, len(ranked) + 1))

    k_tables, engine, stops = {}, {}, {}
    # K* tables at the mean context a running sequence holds: prompt + half its output
    k_context = max(1, int(round(prompt_len + out_len / 2)))
    for cand, (csc, _) in scen.items():
        pred = predict_scenario(csc.with_overrides(context_len=k_context))
        k_tables[cand.label] = pred.table
        engine[cand.label] = {"vllm": {"method": csc.draft.label} | pred.vllm(),
                              "trtllm": {"draft_len_schedule": {str(k): v for k, v in pred.trtllm().items()}}}
        stops[cand.label] = spec_stops_paying(pred.table, pred.grid)

    recommendation, message = None, ""
    if len(ranked):
        best = ranked.iloc[0]
        recommendation = {k: _plain(v) for k, v in best.to_dict().items()}
        message = _recommend_text(best, capacity, spec)
    else:
        message = _no_config_text(capacity, rejected, spec)

    sens = pd.DataFrame()
    if spec.sensitivity and recommendation is not None:
        sens = _sensitivity(sc, recommendation, spec, scen, simulate, err)

    return SizingResult(sc, spec, capacity, ranked, pd.DataFrame(rejected, columns=["hardware", "tp", "reason"]),
                        pd.DataFrame(memory), points, sens, k_tables, engine, stops, recommendation, message,
                        band_note, time.perf_counter() - t0)


def _plain(v):
    """numpy scalars -> Python, NaN -> None (JSON has no NaN)."""
    v = v.item() if hasattr(v, "item") else v
    return None if isinstance(v, float) and not math.isfinite(v) else v


def _recommend_text(best, capacity: pd.DataFrame, spec: SizingSpec) -> str:
    label = f"{best.hardware} tp={int(best.tp)}"
    text = (f"{label} with {best.policy}: {int(best.replicas)} replica(s) = {int(best.gpus)} GPUs for"
            f" {spec.target_load:g} {spec.load_unit} ({best.max_load_per_replica:.3g} {spec.load_unit} per replica"
            f" at {spec.slo.describe()})")
    if best.fleet_usd_per_hour == best.fleet_usd_per_hour:
        text += f", ${best.fleet_usd_per_hour:,.0f}/h, ${best.usd_per_m_output_tokens:.3f} per M output tokens"
    same = capacity[(capacity.hardware == best.hardware) & (capacity.tp == best.tp)]
    others = []
    for _, r in same.iterrows():
        if r.policy == best.policy:
            continue
        if r.max_load_per_replica > 0 and best.max_load_per_replica > 0:
            gp = f"{int(r.gpus)} GPUs" if r.gpus == r.gpus else "over max_replicas"
            others.append(f"{r.policy} carries {r.max_load_per_replica / best.max_load_per_replica:.2f}x"
                          f" the load ({gp})")
        else:
            others.append(f"{r.policy} cannot meet the SLOs")
    if others:
        text += "; on the same hardware " + ", ".join(others)
    return text + "."


def _no_config_text(capacity: pd.DataFrame, rejected: list, spec: SizingSpec) -> str:
    text = (f"no configuration meets {spec.slo.describe()} at {spec.target_load:g} {spec.load_unit}"
            f" within max_replicas={spec.max_replicas}.")
    if len(capacity) and (capacity.max_load_per_replica > 0).any():
        r = capacity.sort_values("max_load_per_replica", ascending=False).iloc[0]
        text += (f" Closest: {r.hardware} tp={int(r.tp)} with {r.policy} carries {r.max_load_per_replica:.3g}"
                 f" {spec.load_unit} per replica ({r.reason}).")
    elif len(capacity):
        text += " No candidate meets the SLOs at any load: " + capacity.iloc[0].reason
    if rejected:
        text += f" {len(rejected)} candidate(s) rejected for memory or parallel layout."
    return text


def _sensitivity(sc: Scenario, rec: dict, spec: SizingSpec, scen: dict, simulate, err) -> pd.DataFrame:
    cand = Candidate(rec["hardware"], int(rec["tp"]))
    variants = [("acceptance -10%", 0.9, 1.0), ("acceptance +10%", 1.1, 1.0),
                ("bandwidth -10%", 1.0, 0.9), ("bandwidth +10%", 1.0, 1.1)]
    tasks = []
    for name, acc, bw in variants:
        vsc = candidate_scenario(sc, cand, acceptance_scale=acc, bandwidth_scale=bw)
        tasks.append(Task(vsc, cand, rec["policy"], spec, scen[cand][1], simulate, name))
    results = _run_all(tasks, spec.workers)
    rows = [{"variant": "baseline", "max_load_per_replica": rec["max_load_per_replica"], "change": "-",
             "gpus": rec["gpus"], "usd_per_m_output_tokens": rec["usd_per_m_output_tokens"]}]
    for (name, s), t in zip(results, tasks):
        r = _capacity_row(t.scenario, s, spec, None)
        base = rec["max_load_per_replica"]
        rows.append({"variant": name, "max_load_per_replica": s.capacity,
                     "change": f"{s.capacity / base - 1:+.1%}" if base else "-",
                     "gpus": r["gpus"], "usd_per_m_output_tokens": r["usd_per_m_output_tokens"]})
    df = pd.DataFrame(rows)
    df.insert(0, "config", f"{cand.label} {rec['policy']}")
    return df


def bundled_sizing_scenarios() -> list[Path]:
    from simulator.specs.scenario import SCENARIO_DIR
    return sorted(SCENARIO_DIR.glob("sizing-*.toml"))


def default_workers() -> int:
    return max(1, min(2, os.cpu_count() or 1))
