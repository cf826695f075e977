"""The load search: serving runs at one load, bracketing and bisection.

For one candidate (hardware x tensor-parallel degree) and one policy the search finds the highest
load one replica carries while meeting every SLO, by running the serving simulation
(``simulator.serving.simulate``) at a fixed seed on the Poisson request rate (or on the closed-loop
concurrency when ``[traffic]`` gives a concurrency). It starts from the steady-state capacity
(:mod:`simulator.serving.steady`: Little's law on the engine's step-time tables, milliseconds), so the
simulation runs only near the boundary: typically two runs, one passing and one failing a resolution
factor 2^(1/2^search_steps) apart. A forecast of the walk's far end (its requests arriving as one burst,
:meth:`simulator.serving.steady.SteadyState.burst_latency`) orders the runs: short runs, which meet the SLOs
at any load when the whole burst fits, are answered by one. :mod:`simulator.sizing.pool` runs many searches.
"""
from __future__ import annotations

import dataclasses
import inspect
import math
from dataclasses import dataclass

import numpy as np

from simulator import serving
from simulator.errors import PlannerError
from simulator.plan.api import predict_scenario
from simulator.serving.early_stop import PercentileStop
from simulator.serving.steady import SteadyState, steady_state
from simulator.sizing.candidate import Candidate, traffic_lengths
from simulator.sizing.spec import SizingSpec, _fmt
from simulator.specs.scenario import Scenario

# When the SLOs say nothing about TTFT, an overloaded replica still looks fine on TPOT (the queue
# grows, running sequences decode at speed). This guard marks such loads as unsustainable.
DEFAULT_TTFT_GUARD_S = 30.0
MAX_EXPANSIONS = 6
SUMMARY_KEYS = ("throughput_tok_s", "tokens_per_s_per_user", "ttft_p50_s", "ttft_p99_s", "tpot_p50_s", "tpot_p99_s",
                "itl_p99_s", "mean_batch_size", "mean_k", "kv_peak_occupancy", "n_requests", "output_tokens",
                "makespan_s")


# --- one serving run ----------------------------------------------------------------------------

def build_workload(sc: Scenario, kind: str, load: float, n_requests: int, max_num_seqs: int | None):
    """The serving Workload for one load point: the scenario's traffic with the load replaced."""
    fields = {"arrival": "poisson" if kind == "rate" else "closed", "n_requests": int(n_requests)}
    if kind == "rate":
        fields["rate_per_s"] = float(load)
    else:
        fields["concurrency"] = int(load)
    base = serving.workload_from_scenario(sc)
    if max_num_seqs is not None:
        current = base.max_num_seqs
        fields["max_num_seqs"] = int(min(max_num_seqs, current)) if current else int(max_num_seqs)
    return dataclasses.replace(base, **fields)


# Runs span this many request lifetimes of arrivals. Near capacity the batch settles slowly (TPOT rises
# steeply with the batch, so a fluctuation relaxes over many lifetimes): Llama-3.1-70B on 4 x H100, EAGLE-3,
# TPOT p50 <= 50 ms, dsd at 9.71 req/s gives TPOT p50 47.9 ms over 4 lifetimes (537 requests, the ramp from an
# empty engine still in it) and 72.4 ms over 16000 requests. Over 20 lifetimes the capacity run's TPOT p50 and
# mean K are within 4% of a run 4x longer at that rate (that case: 8.91 req/s, 39.7 ms / K 2.49 against
# 40.1 ms / 2.44; the bundled sizing scenarios' picks likewise); 40 lifetimes change neither capacity.
STEADY_LIFETIMES = 20.0


def requests_for(sc: Scenario, spec: SizingSpec, kind: str, load: float) -> int:
    """Requests per run: enough simulated time for the batch to reach and hold its steady state.

    A short run at a high rate ends before the queue builds up (160 requests at 45 req/s arrive in
    3.5 s, less than one request's lifetime), and one of a few lifetimes still holds the ramp from an empty
    engine and has not seen the batch's slow swings near capacity: its percentiles look fine at loads no
    replica sustains. Runs cover ``duration_s`` of arrivals (default :data:`STEADY_LIFETIMES` request
    lifetimes, at least 30 s): n = max(n_requests, rate * duration), at most max_requests.
    """
    if kind != "rate":
        return int(min(spec.max_requests, max(spec.n_requests, 8 * load)))
    duration = spec.duration_s
    if duration is None:
        _, out_len = traffic_lengths(sc)
        t = spec.slo.targets
        ttft = min([v for k, v in t.items() if k.startswith("ttft")] or [1.0])
        lifetime = ttft + out_len * (spec.slo.tpot_limit_s or 0.05)
        duration = max(30.0, STEADY_LIFETIMES * lifetime)
    return int(min(spec.max_requests, max(spec.n_requests, math.ceil(load * duration))))


def run_point(sc: Scenario, policy: str, kind: str, load: float, spec: SizingSpec, max_num_seqs, simulate,
              stop: PercentileStop | None = None) -> dict:
    """The serving summary at one load (``stop``: end the run once an SLO is bound to be missed)."""
    workload = build_workload(sc, kind, load, requests_for(sc, spec, kind, load), max_num_seqs)
    try:
        extra = {"stop": stop} if stop is not None else {}
        result = simulate(sc, policy, workload=workload, seed=spec.seed, **extra)
    except PlannerError as err:  # e.g. a request longer than the KV cache holds: this load cannot run
        return {"error": " ".join(str(err).split())}
    return dict(getattr(result, "summary", result))


def stop_rule(spec: SizingSpec) -> PercentileStop | None:
    """The early stop for the search's runs: every SLO percentile the serving run can bound, and the
    stability guard's TTFT p99 (a run bound to fail either is failed; which one says first is immaterial)."""
    limits = dict(spec.slo.targets)
    if spec.ttft_guard:
        limits["ttft_p99_s"] = min(limits.get("ttft_p99_s", np.inf), DEFAULT_TTFT_GUARD_S)
    return PercentileStop.from_limits(limits)


def _accepts_stop(simulate) -> bool:
    try:
        return "stop" in inspect.signature(simulate).parameters
    except (TypeError, ValueError):
        return False


def _check(spec: SizingSpec, summary: dict) -> list[str]:
    if "error" in summary:
        return [summary["error"]]
    if "stopped_early" in summary:
        return _bounded_violations(spec, summary)
    bad = spec.slo.violations(summary)
    if spec.ttft_guard:
        p99 = summary.get("ttft_p99_s", np.inf)
        if not p99 <= DEFAULT_TTFT_GUARD_S:
            bad.append(f"queue grows: ttft_p99_s {_fmt(p99)} s > {DEFAULT_TTFT_GUARD_S:g} s (stability guard)")
    return bad


def _bounded_violations(spec: SizingSpec, summary: dict) -> list[str]:
    """The SLOs a stopped run's lower bounds already miss, each labelled as a bound (PercentileStop
    guarantees one at least: its order statistic is above the limit, the interpolated percentile too)."""
    note = f"(lower bound: run stopped early, {summary['stopped_early']})"
    limits = dict(spec.slo.targets)
    if spec.ttft_guard:
        limits.setdefault("guard", DEFAULT_TTFT_GUARD_S)
    out = []
    for key, limit in limits.items():
        value = summary.get("ttft_p99_s" if key == "guard" else key, np.nan)
        if np.isfinite(value) and value > limit:
            what = "queue grows: ttft_p99_s" if key == "guard" else key
            tail = " (stability guard)" if key == "guard" else ""
            out.append(f"{what} >= {value:.4g} s > {limit:g} s{tail} {note}")
    return out or [f"an SLO is bound to be missed {note}"]


def _pick(summary: dict) -> dict:
    return {k: summary.get(k, np.nan) for k in SUMMARY_KEYS} | {"lower_bounds": "stopped_early" in summary}


# --- the search ---------------------------------------------------------------------------------

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
    resolution: float = 0.0  # a failing load lies at most this factor above the capacity
    start: str = ""  # where the search started: "steady state" or "goodput table"


class _Trials:
    """Serving runs at given loads, each load run once; records every point tried."""

    def __init__(self, sc: Scenario, policy: str, spec: SizingSpec, simulate):
        self.sc, self.policy, self.spec, self.simulate = sc, policy, spec, simulate
        self.points: list[dict] = []
        self.cache: dict[float, tuple[bool, dict, list]] = {}
        self.stop = stop_rule(spec) if _accepts_stop(simulate) else None

    def __call__(self, load: float) -> tuple[bool, dict, list]:
        if load in self.cache:
            return self.cache[load]
        # the serving simulation manages the KV cache itself (preempts when full): no max_num_seqs cap
        summary = run_point(self.sc, self.policy, self.spec.load_kind, load, self.spec, None, self.simulate,
                            self.stop)
        bad = _check(self.spec, summary)
        self.points.append({"load": load, "meets": not bad, "violations": "; ".join(bad)} | _pick(summary))
        self.cache[load] = (not bad, summary, bad)
        return self.cache[load]


def resolution(spec: SizingSpec) -> float:
    """The load search's resolution: the capacity is the highest load that passed, with a failing load at
    most this factor above it (a factor-2 bracket halved ``search_steps`` times on a log scale)."""
    return 2.0 ** (1.0 / 2 ** spec.search_steps)


FLOOR_MARGIN = 1.5  # steady-state TPOT at batch 1 this far above the limit: no load can meet it


def first_load(sc: Scenario, policy: str, spec: SizingSpec, max_seqs: int) -> tuple[float, str, SteadyState | None]:
    """Where the search starts: the steady-state capacity of :mod:`simulator.serving.steady` (Little's law on
    the engine's own step-time tables), else (when that cannot be built) :func:`analytic_guess`. Start
    "floor" (half the load that keeps one sequence decoding) when even batch 1 misses the TPOT limit: one
    simulation there confirms that no load meets the SLOs (two when the miss is within FLOOR_MARGIN).
    The third value is the steady state itself (None when it could not be built)."""
    st = None
    try:
        workload = build_workload(sc, spec.load_kind, 1.0, spec.n_requests, None)
        st = steady_state(sc, policy, workload, spec.seed)
        limit = spec.slo.tpot_limit_s
        x = st.max_concurrency(limit) if spec.load_kind == "concurrency" else st.max_rate(limit)
        if x > 0:
            return float(x), "steady state", st
        if limit and np.isfinite(st.rate[0]):  # even batch 1 misses the TPOT limit: confirm at low load
            clear = st.tpot_s[0] > FLOOR_MARGIN * limit
            return (1.0 if spec.load_kind == "concurrency" else float(st.rate[0]) / 2), \
                ("floor" if clear else "floor, marginal"), st
    except PlannerError:
        pass
    return analytic_guess(sc, policy, spec, max_seqs), "goodput table", st


def burst_meets(sc: Scenario, spec: SizingSpec, st: SteadyState, load: float) -> bool:
    """Whether a run at ``load`` (far above the steady-state capacity: its requests arrive as one burst) is
    forecast to meet the SLOs, from :meth:`SteadyState.burst_latency`: the TTFT forecast against every TTFT
    target (and the stability guard), the TPOT forecast against every TPOT / ITL target. A forecast only
    orders the search's runs (:func:`_bracket`); the runs decide the answer."""
    ttft, tpot = st.burst_latency(requests_for(sc, spec, "rate", load))
    limits = dict(spec.slo.targets) | ({"ttft_guard": DEFAULT_TTFT_GUARD_S} if spec.ttft_guard else {})
    return all((ttft if key.startswith("ttft") else tpot) <= limit for key, limit in limits.items()
               if key.startswith(("ttft", "tpot", "itl")))


def _next(x: float, factor: float, up: bool, integer: bool, max_seqs: int) -> float | None:
    """The next load to try, ``factor`` above or below ``x`` (integers move by at least 1); None: no room."""
    if not integer:
        return x * factor if up else x / factor
    nxt = max(x + 1, round(x * factor)) if up else min(x - 1, round(x / factor))
    nxt = float(min(nxt, max_seqs))
    return None if nxt < 1 or nxt == x else nxt


def _narrow(lo: float, hi: float, rho: float, integer: bool) -> bool:
    """Whether the bracket is at the search resolution (for integers: adjacent loads)."""
    return hi - lo <= 1 if integer else hi <= lo * rho * (1 + 1e-9)


def _walk(x0: float, rho: float, up: bool, integer: bool, max_seqs: int) -> list[float]:
    """The loads the bracket steps through from ``x0`` in one direction (``x0`` excluded): by the resolution
    factor first, then by factors that square (rho, rho^2, rho^4, ... at most 2), to 2^MAX_EXPANSIONS away."""
    path, x, factor = [], x0, rho
    while True:
        nxt = _next(x, factor, up, integer, max_seqs)
        if nxt is None or max(nxt / x0, x0 / nxt) > 2.0 ** MAX_EXPANSIONS * (1 + 1e-9):
            return path
        path.append(nxt)
        x, factor = nxt, min(factor * factor, 2.0)


# A run whose arrivals cover fewer request lifetimes than this ends before it reaches its steady state
TRANSIENT_LIFETIMES = 2.0


def transient_run(st: SteadyState | None, load: float, n_requests: int) -> bool:
    """Whether a run of ``n_requests`` arriving at ``load`` (a rate) ends before it reaches its steady
    state: its arrivals span n / lambda seconds, a request's lifetime is L = B / lambda (Little's law, B
    the steady state's sequences decoding at once), so they cover n / B lifetimes. Below
    :data:`TRANSIENT_LIFETIMES` the run's batch never builds up to B, nor its TPOT to the steady state's,
    and its capacity lies above the steady state's: the search runs the next load up first (:func:`_bracket`).
    Runs sized as :func:`requests_for` sizes them by default are not transient."""
    return st is not None and n_requests < TRANSIENT_LIFETIMES * st.batch_at_rate(load)


def _bracket(trial: _Trials, x: float, rho: float, integer: bool, max_seqs: int, forecast=None,
             step_up_first: bool = False):
    """From the first load, step up while the SLOs hold and down while they fail (:func:`_walk`) until a
    pass and a fail are found or the walk ends: (lo, lo summary, hi, violations at hi). When the
    walk has gone a factor 2 from the first load without a change, the first load was a poor estimate and
    the walk's far end is tried next: if it agrees too, every load between does (the search assumes pass /
    fail monotone in load) and the walk would have ended there, so it ends there at once.
    ``step_up_first`` (:func:`transient_run`): the walk's first load up is run before the first load; when
    it meets the SLOs so does the first load, which is not run.

    ``forecast(load)``, whether a run at the far end of the walk up is forecast to meet the SLOs
    (:func:`burst_meets`; None: no forecast): True tries that end first (one run answers when it passes:
    every load below it does), False leaves it until the walk up has gone a factor 4 unchanged. Either way
    the loads the walk tries, and so the answer, are the walk's; the forecast only saves runs."""
    up = _walk(x, rho, True, integer, max_seqs)
    far_meets = forecast(up[-1]) if forecast is not None and up else None
    if far_meets:
        ok, summary, _ = trial(up[-1])
        if ok:
            return up[-1], summary, None, []
    stepped = bool(step_up_first and up and trial(up[0])[0])  # a pass there: the first load passes too
    ok0, summary, bad = (True, None, []) if stepped else trial(x)
    lo, lo_sum, hi, last_bad = (x, summary, None, []) if ok0 else (None, None, x, bad)
    path = up if ok0 else _walk(x, rho, False, integer, max_seqs)
    probed = False
    reach = 4.0 if ok0 and far_meets is False else 2.0  # how far the walk goes unchanged before the far end
    for i, nxt in enumerate(path):
        if not probed and 0 < i < len(path) - 1 and max(path[i - 1] / x, x / path[i - 1]) >= reach * (1 - 1e-9):
            probed = True
            if trial(path[-1])[0] == ok0:
                nxt = path[-1]
        ok, summary, bad = trial(nxt)  # the far end (and a first step up), tried already, come from the cache
        if ok:
            lo, lo_sum = nxt, summary
        else:
            hi, last_bad = nxt, bad
        if ok != ok0 or nxt == path[-1]:
            break
    return lo, lo_sum, hi, last_bad


def search_capacity(sc: Scenario, policy: str, spec: SizingSpec, max_seqs: int, simulate=None,
                    cand: Candidate | None = None) -> Search:
    """The highest load meeting every SLO, to the search resolution (:func:`resolution`).

    Starts at the steady-state capacity (:func:`first_load`), which lands within a few percent of the
    simulated boundary, so the serving simulation runs only near it: step by the resolution factor until
    a passing and a failing load are found (widening the step when the estimate is off), then bisect on
    a log scale (integers for concurrency) until they are within the resolution. The capacity is the
    highest load that passed, with a failing load above it (``bounded``).
    """
    simulate = simulate or serving.simulate
    cand = cand or Candidate(sc.hardware.name, sc.deployment.tp)
    integer = spec.load_kind == "concurrency"
    rho = resolution(spec)
    trial = _Trials(sc, policy, spec, simulate)
    x, start, st = first_load(sc, policy, spec, max_seqs)
    if integer:
        x = float(min(max(1, int(x)), max_seqs))
    # the far end's forecast (a closed loop never arrives in a burst)
    forecast = (lambda load: burst_meets(sc, spec, st, load)) if start == "steady state" and not integer else None
    if start.startswith("floor"):
        # below the load that keeps one sequence decoding, TPOT is at its floor: a miss there is a miss at
        # every load (a marginal one is tried once more, 4x lower, where sequences almost never overlap)
        tries = (x,) if start == "floor" or integer else (x, x / 4)
        for x_try in tries:
            ok, _, bad = trial(x_try)
            if ok:
                x = x_try
                break
        else:
            return Search(cand, policy, 0.0, None, trial.points, True,
                          f"misses the SLOs even at {_fmt(x_try)} {spec.load_unit} (batch 1 misses the TPOT limit"
                          f" in the steady state): {'; '.join(bad)}", sc.cost_source, rho, start)
    transient = forecast is not None and transient_run(st, x, requests_for(sc, spec, "rate", x))
    lo, lo_sum, hi, last_bad = _bracket(trial, x, rho, integer, max_seqs, forecast, transient)
    if lo is None:
        return Search(cand, policy, 0.0, None, trial.points, True,
                      f"misses the SLOs even at {_fmt(hi)} {spec.load_unit}: {'; '.join(last_bad)}", sc.cost_source,
                      rho, start)
    while hi is not None and not _narrow(lo, hi, rho, integer):
        mid = float((lo + hi) // 2) if integer else math.sqrt(lo * hi)
        ok, summary, _ = trial(mid)
        if ok:
            lo, lo_sum = mid, summary
        else:
            hi = mid
    return Search(cand, policy, lo, lo_sum, trial.points, hi is not None, "", sc.cost_source, rho, start)
