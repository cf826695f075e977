"""From per-replica capacities to fleets: replicas, GPUs, cost, ranking, sensitivity, :func:`size`.

For each candidate (hardware x tensor-parallel degree) and each policy, :mod:`simulator.sizing.search`
finds the highest load one replica carries within the SLOs. Then

    replicas          = ceil(target load x (1 + headroom) / max load per replica) + spare replicas (N+1)
    nodes             = ceil(replicas / (gpus_per_node // tp))   (tp <= gpus_per_node; else replicas x tp / gpus_per_node)
    GPUs              = nodes x gpus_per_node                      (bought as whole nodes; a CPU device is a
                                                                    machine of its own: gpus_per_node 1 there)
    GPU range         = the same with the capacity at the high / low end of its band
    $ per hour        = GPUs x price per GPU-hour
    $ per M tokens    = fleet $ per hour / (output tokens per hour at the target load) * 1e6
                        (rate target: rate x mean output tokens x 3600; what the buyer pays per token served)
    $ per M at full   = price per GPU-hour * tp / (output tokens per hour of one replica at max load) * 1e6
                        (one replica run at its capacity: a floor the fleet, bought with headroom, never reaches)
    energy per token  = TDP * tp / (output tokens per second at max load)      [J, an estimate: GPUs at TDP]

The capacity band comes from :mod:`simulator.sizing.uncertainty` (measured where a held-out,
validation or transfer error exists; else the wide datasheet band, flagged). Ranking
(:mod:`simulator.sizing.ranking`): cost at the target, then strength of evidence; a candidate is never
ranked above one on stronger evidence (measured tables > published prior > datasheet) that meets the
target with no more GPUs than its own band allows.
"""
from __future__ import annotations

import dataclasses
import json
import math
import time
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import numpy as np
import pandas as pd

from simulator import serving
from simulator.errors import PlannerError
from simulator.plan.answer import spec_stops_paying
from simulator.plan.api import predict_scenario
from simulator.sizing.ranking import (EVIDENCE, RANK_RULE, SIMPLICITY, best_per_gpu_type, evidence_margin, rank,
                                      speculation_margin)  # noqa: F401 (re-exported)
from simulator.sizing.pool import Task, run_all
from simulator.sizing.search import Search
from simulator.sizing.candidate import (Candidate, candidate_scenario, k_table_context, memory_fit, predict_command,
                                        traffic_lengths)
from simulator.sizing.spec import SizingOverrides, SizingSpec, parse_sizing
from simulator.sizing.uncertainty import candidate_band, prediction_basis, uncertainty
from simulator.specs.scenario import SCENARIO_DIR, Scenario, load_scenario



REJECTED_COLUMNS = ["hardware", "tp", "dtype", "reason"]


@dataclass
class SizingResult:
    """A sizing run's answer. Its tables are built from their rows when first read (a fleet sweep's task
    reads the capacity rows alone)."""

    scenario: Scenario
    spec: SizingSpec
    capacity_rows: list  # one dict per candidate x policy that fits memory
    rejected_rows: list  # candidates that cannot run: hardware, tp, dtype, reason
    memory_rows: list  # memory fit per candidate
    point_rows: list  # every load the searches tried
    k_tables: dict  # candidate label -> K* table (DataFrame)
    engine: dict  # candidate label -> {"vllm": ..., "trtllm": ...}
    spec_stops: dict  # candidate label -> text
    band_note: str
    sensitivity: pd.DataFrame = field(default_factory=pd.DataFrame)
    elapsed_s: float = 0.0
    _message: str | None = None
    command: str = ""  # the command line that ran it (the CLI sets it; the report's "Regenerate" repeats it)

    @cached_property
    def capacity(self) -> pd.DataFrame:
        return pd.DataFrame(self.capacity_rows)

    @cached_property
    def rejected(self) -> pd.DataFrame:
        return pd.DataFrame(self.rejected_rows, columns=REJECTED_COLUMNS)

    @cached_property
    def memory(self) -> pd.DataFrame:
        return pd.DataFrame(self.memory_rows)

    @cached_property
    def points(self) -> pd.DataFrame:
        return pd.DataFrame(self.point_rows)

    @cached_property
    def ranked(self) -> pd.DataFrame:
        """Rows that meet the target within max_replicas, best first (ranked when first read: a fleet
        sweep's task keeps the capacities alone)."""
        return rank(self.capacity)

    @cached_property
    def recommendation(self) -> dict | None:
        """The first ranked row as plain values, None when no candidate meets the target."""
        return {k: _plain(v) for k, v in self.ranked.iloc[0].to_dict().items()} if len(self.ranked) else None

    @property
    def message(self) -> str:
        """The headline, composed when first read (a fleet sweep's task never reads it)."""
        if self._message is None:
            self._message = answer_text(self.ranked.iloc[0], self.spec) \
                if len(self.ranked) else _no_config_text(self.capacity, self.rejected, self.spec)
        return self._message

    def why(self) -> list[str]:
        """Why the recommendation: its capacity and SLOs, the other policies on the same hardware, the
        evidence it rests on, the quality caveat of a quantized pick; one sentence each ([] without one)."""
        if not len(self.ranked):
            return []
        return why_lines(self.ranked.iloc[0], self.capacity, self.spec, self.ranked, self.scenario)

    @cached_property
    def per_gpu_type(self) -> pd.DataFrame:
        """The best option of every GPU type searched (:func:`simulator.sizing.ranking.best_per_gpu_type`)."""
        return best_per_gpu_type(self.capacity, self.ranked, self.rejected, [c.hardware for c in self.spec.candidates])

    def to_dict(self) -> dict:
        def records(df):
            return json.loads(df.to_json(orient="records")) if len(df) else []
        return {"scenario": self.scenario.name, "message": self.message, "recommendation": self.recommendation,
                "slo": self.spec.slo.targets, "target_load": self.spec.target_load, "load_unit": self.spec.load_unit,
                "why": self.why(), "per_gpu_type": records(self.per_gpu_type), "ranking_rule": RANK_RULE,
                "ranked": records(self.ranked), "capacity": records(self.capacity), "rejected": records(self.rejected),
                "memory": records(self.memory), "sensitivity": records(self.sensitivity),
                "engine": self.engine, "spec_stops": self.spec_stops, "uncertainty": self.band_note}


# --- capacity rows and ranking ------------------------------------------------------------------

def _price(spec: SizingSpec, hw) -> tuple[float, str]:
    if hw.name in spec.prices:
        return spec.prices[hw.name], "given ([sizing] prices or --price)"
    if hw.price_per_gpu_hour_usd is not None:
        return hw.price_per_gpu_hour_usd, (f"assumed: simulator/data/hardware/{hw.name}.toml (indicative on-demand"
                                           " cloud price; override with [sizing] prices)")
    return float("nan"), "no price"


def devices_per_node(spec: SizingSpec, hw) -> int:
    """How many devices are bought together: whole nodes of ``gpus_per_node`` GPUs; a CPU device (one
    machine, or a slice of one) one at a time, as a node of eight of them is nothing one buys."""
    return 1 if getattr(hw, "kind", "gpu") == "cpu" else spec.gpus_per_node


def no_price_text(hardware: str) -> str:
    """What a fleet without a price says instead of a cost, and how to give one."""
    return (f"no price is known for {hardware}: give one with --price {hardware}=USD_PER_HOUR (per device-hour;"
            " or [sizing] prices) for the fleet's $/h and $/M tokens")


def nodes_for(replicas: int, tp: int, gpus_per_node: int) -> int:
    """Whole nodes holding ``replicas`` replicas of ``tp`` GPUs: ceil(replicas / (gpn // tp)) when a
    replica fits one node, else replicas x ceil(tp / gpn)."""
    if tp <= gpus_per_node:
        return math.ceil(replicas / (gpus_per_node // tp))
    return replicas * math.ceil(tp / gpus_per_node)


def replicas_for(spec: SizingSpec, capacity: float) -> int | None:
    """ceil(target x (1 + headroom) / capacity) + spare replicas; None when the capacity is 0."""
    if not capacity > 0:
        return None
    return math.ceil(spec.target_load * (1 + spec.headroom) / capacity - 1e-9) + spec.spare_replicas


def target_output_tokens_per_hour(spec: SizingSpec, sc: Scenario, thr: float = np.nan, cap: float = np.nan) -> float:
    """Output tokens per hour the fleet serves at the target load: rate x mean output tokens x 3600 (the
    traffic's own lengths); a concurrency target: concurrency x tokens/s per sequence at capacity x 3600."""
    if spec.load_kind == "rate":
        return spec.target_load * traffic_lengths(sc)[1] * 3600.0
    return spec.target_load * thr / cap * 3600.0 if cap > 0 and thr == thr else np.nan  # noqa: PLR0124


def _capacity_row(sc: Scenario, s: Search, spec: SizingSpec, err: float | None, basis: str = "measured") -> dict:
    hw, tp = sc.hardware, sc.deployment.tp
    price, price_src = _price(spec, hw)
    cap = s.capacity
    summ = s.summary or {}
    thr = float(summ.get("throughput_tok_s", np.nan)) if cap > 0 else np.nan
    if cap > 0 and spec.load_kind == "rate" and summ.get("n_requests") and summ.get("output_tokens"):
        # steady state: requests/s x mean output tokens (a finite run's tokens / makespan counts ramp and drain)
        thr = cap * float(summ["output_tokens"]) / float(summ["n_requests"])
    gpn = devices_per_node(spec, hw)
    replicas = replicas_for(spec, cap)
    nodes = nodes_for(replicas, tp, gpn) if replicas else None
    gpus = nodes * gpn if nodes else None
    ok = bool(replicas) and replicas <= spec.max_replicas
    reason = s.reason
    if replicas and replicas > spec.max_replicas:
        reason = f"needs {replicas} replicas > max_replicas={spec.max_replicas}"
    if err is not None and cap > 0:
        lo, hi = cap * (1 - err), cap * (1 + err)
        g_lo = nodes_for(replicas_for(spec, hi), tp, gpn) * gpn
        g_hi = nodes_for(replicas_for(spec, max(lo, 1e-12)), tp, gpn) * gpn
    else:
        lo = hi = g_lo = g_hi = np.nan
    with np.errstate(divide="ignore", invalid="ignore"):
        cost_mtok = price * tp / (thr * 3600.0) * 1e6 if thr > 0 else np.nan
        energy = (hw.tdp_w or np.nan) * tp / thr if thr > 0 else np.nan
    ep = sc.deployment.ep
    layout = (f"{gpn // tp} x TP={tp}" if tp <= gpn else f"TP={tp} over {math.ceil(tp / gpn)} nodes") \
        + (f" (EP={ep})" if ep > 1 else "") + " per node"
    if hw.kind == "cpu":
        layout = "one replica per machine"
    return {
        "candidate": s.candidate.label,
        "hardware": hw.name, "tp": tp, "dtype": sc.deployment.weight_dtype, "policy": s.policy, "meets_target": ok,
        "max_load_per_replica": cap, "load_band_low": lo, "load_band_high": hi, "bounded": s.bounded,
        "throughput_tok_s": thr, "tok_s_per_gpu": thr / tp if thr == thr else np.nan,
        "ttft_p99_s": summ.get("ttft_p99_s", np.nan), "tpot_p50_s": summ.get("tpot_p50_s", np.nan),
        "tpot_p99_s": summ.get("tpot_p99_s", np.nan), "mean_batch_size": summ.get("mean_batch_size", np.nan),
        "mean_k": summ.get("mean_k", np.nan),
        "replicas": replicas if replicas else np.nan, "nodes": nodes if nodes else np.nan,
        "gpus": gpus if gpus else np.nan, "node_layout": layout, "devices_per_node": gpn, "device_kind": hw.kind,
        "gpus_range": (gpus_band := (f"{g_lo}" if g_lo == g_hi else f"{g_lo}-{g_hi}") if err is not None and cap > 0
                       else "unknown"),
        "gpus_band": gpus_band,
        "search_resolution": s.resolution or np.nan,  # a failing load lies at most this factor above the capacity
        "gpus_low": g_lo, "gpus_high": g_hi, "basis": basis,
        "price_per_gpu_hour_usd": price, "fleet_usd_per_hour": gpus * price if gpus else np.nan,
        "usd_per_m_output_tokens": cost_mtok,
        # what the buyer pays per token: the whole fleet (headroom, spare, whole nodes) at the target load
        "target_output_tokens_per_hour": (tok_h := target_output_tokens_per_hour(spec, sc, thr, cap)),
        "usd_per_m_tokens_at_target": (gpus * price / tok_h * 1e6 if gpus and tok_h > 0 else np.nan),
        "energy_j_per_token_est": energy,
        "step_time_source": "calibrated" if sc.profile else "datasheet",
        "step_basis": sc.step_basis,  # the engine terms on top of the physics: deployment fit, learned layer or none
        "price_source": price_src, "reason": reason,
    }


# --- size() -------------------------------------------------------------------------------------

def _plan_candidates(sc: Scenario, spec: SizingSpec, simulate, context: float):
    """Each candidate's scenario and memory fit: (rejected rows, memory rows, search tasks, {cand: (scenario, max seqs)})."""
    rejected, memory, tasks, scen = [], [], [], {}
    for cand in spec.candidates:
        try:
            csc = candidate_scenario(sc, cand, reuse=True)
        except PlannerError as err:
            rejected.append({"hardware": cand.hardware, "tp": cand.tp, "dtype": cand.dtype or "-",
                             "reason": f"{cand.label}: {err}"})
            continue
        fit = memory_fit(csc, context)
        memory.append({"hardware": cand.hardware, "tp": cand.tp, "dtype": csc.deployment.weight_dtype} | fit)
        if not fit["fits"]:
            rejected.append({"hardware": cand.hardware, "tp": cand.tp, "dtype": csc.deployment.weight_dtype,
                             "reason": fit["reason"]})
            continue
        scen[cand] = (csc, fit["max_seqs"])
        tasks += [Task(csc, cand, p, spec, fit["max_seqs"], simulate) for p in spec.policies]
    return rejected, memory, tasks, scen


def _engine_tables(scen: dict, k_context: int) -> tuple[dict, dict, dict]:
    """Per candidate: the K* table, engine settings (vLLM, TensorRT-LLM) and where speculation stops paying."""
    k_tables, engine, stops = {}, {}, {}
    for cand, (csc, _) in scen.items():
        pred = predict_scenario(csc.with_overrides(context_len=k_context))
        k_tables[cand.label] = pred.table
        engine[cand.label] = {"exports": pred.exports_dict(), "predict": predict_command(csc, cand, k_context),
                              "advice": [a.to_dict() for a in pred.engine_advice()]}
        stops[cand.label] = spec_stops_paying(pred.table, pred.grid)
    return k_tables, engine, stops


def size(scenario: str | Scenario, overrides: SizingOverrides | None = None, simulate=None,
         engine_tables: bool = True) -> SizingResult:
    """Size a deployment for the scenario's traffic and SLOs.

    ``scenario``: a Scenario or a TOML path / bundled name with [slo], [sizing] and [traffic].
    ``overrides`` replace [sizing] settings. ``simulate``: the serving simulation to use (default
    ``simulator.serving.simulate``; a picklable function with the same signature for tests).
    ``engine_tables``: build each candidate's K* table and engine settings (False: a fleet sweep's task,
    which keeps only the capacities; the result's k_tables, engine and stops are then empty).
    """
    t0 = time.perf_counter()
    sc = scenario if isinstance(scenario, Scenario) else load_scenario(scenario)
    spec = parse_sizing(sc, **(overrides or SizingOverrides()).as_kwargs())
    simulate = simulate or serving.simulate
    prompt_len, out_len = traffic_lengths(sc)
    rejected, memory, tasks, scen = _plan_candidates(sc, spec, simulate, max(prompt_len + out_len, 1.0))
    tables: list = []
    # K* tables at the mean context a running sequence holds (prompt + half its output), built while the
    # search's workers run
    build = (lambda: tables.append(_engine_tables(scen, k_table_context(sc)))) if engine_tables else \
        (lambda: tables.append(({}, {}, {})))
    results = run_all(tasks, spec.workers, meanwhile=build)
    err, band_note = uncertainty(sc)
    rows, pts, notes = [], [], {}
    for _, s in results:
        csc, _ = scen[s.candidate]
        # a measured error describes the device it was measured on; other candidates get their own band
        own = csc.hardware.name == sc.hardware.name
        c_err, c_note, c_basis = candidate_band(csc, own_device=own, extra=prediction_basis(sc).errors if own else ())
        notes[f"{csc.hardware.name} ({c_basis})"] = c_note
        rows.append(_capacity_row(csc, s, spec, c_err, c_basis))
        pts += [{"hardware": s.candidate.hardware, "tp": s.candidate.tp, "policy": s.policy} | p for p in s.points]
    k_tables, engine, stops = tables[0]
    band_note = "; ".join(f"{k}: {v}" for k, v in sorted(notes.items())) or band_note
    result = SizingResult(sc, spec, rows, rejected, memory, pts, k_tables, engine, stops, band_note)
    if spec.sensitivity and result.recommendation is not None:
        result.sensitivity = _sensitivity(sc, result.recommendation, spec, scen, simulate)
    result.elapsed_s = time.perf_counter() - t0
    return result


# --- prose and sensitivity ----------------------------------------------------------------------

def _plain(v):
    """numpy scalars -> Python, NaN -> None (JSON has no NaN)."""
    v = v.item() if hasattr(v, "item") else v
    return None if isinstance(v, float) and not math.isfinite(v) else v


def answer_text(best, spec: SizingSpec) -> str:
    """The answer in one sentence: what to buy, what it costs per hour and per million output tokens at
    the target load (or that no price is known, and how to give one), and the device band."""
    cpu = best.get("device_kind", "gpu") == "cpu"
    where = (f"{int(best.nodes)} machine(s)" if cpu
             else f"{int(best.nodes)} node(s) of {int(best.get('devices_per_node', spec.gpus_per_node))}")
    text = (f"buy {int(best.gpus)} x {best.hardware} ({where}; TP={int(best.tp)},"
            f" {best['dtype']}, {POLICY_WORDS.get(best.policy, best.policy)})")
    if best.fleet_usd_per_hour == best.fleet_usd_per_hour:  # noqa: PLR0124 (NaN: no price)
        text += (f": ${best.fleet_usd_per_hour:,.2f}/h, ${best.usd_per_m_tokens_at_target:.2f} per M output tokens"
                 f" at {spec.target_load:g} {spec.load_unit}")
    else:
        text += f"; {no_price_text(best.hardware)}"
    return text + f"; {best.gpus_range} {'devices' if cpu else 'GPUs'} across the capacity band ({best.basis})"


POLICY_WORDS = {"plain": "no speculation", "fixed": "fixed K", "dsd": "dynamic K per batch size"}
BASIS_WORDS = {"learned layer": "the engine terms learned from published measurements (simulator/data/learned_step.json;"
                                " --physics-only leaves them out)",
               "deployment fit": "the deployment fit's engine terms (--deployment)",
               "physics only": "no engine terms (--physics-only, or no learned layer on this hardware)"}


def quality_caveat(best, sc: Scenario | None) -> str:
    """A quantized recommendation the scenario did not run at: what the planner does not check."""
    if sc is None or best["dtype"] == sc.deployment.weight_dtype or best["dtype"] != "fp8":
        return ""
    return (f"quality: the pick runs FP8 weights and activations (W8A8), not the scenario's {sc.deployment.weight_dtype};"
            " the planner models speed and memory only, not output quality, and the acceptance rates are the"
            f" {sc.deployment.weight_dtype} ones: check the FP8 checkpoint on your own evaluation (and its acceptance)"
            " before buying")


def why_lines(best, capacity: pd.DataFrame, spec: SizingSpec, ranked: pd.DataFrame | None = None, sc=None) -> list[str]:
    label = f"{best.hardware} tp={int(best.tp)} {best['dtype']}"
    lines = [f"{label} with {best.policy} carries {best.max_load_per_replica:.2f} {spec.load_unit} per replica at"
             f" {spec.slo.describe()}; {int(best.replicas)} replicas ({best.node_layout}) = the target"
             f" {spec.target_load:g} {spec.load_unit} x {1 + spec.headroom:g} (headroom) / capacity, plus"
             f" {spec.spare_replicas} spare (N+1)"
             + (", one machine each" if best.get("device_kind", "gpu") == "cpu" else ", rounded up to whole nodes")]
    if best.fleet_usd_per_hour == best.fleet_usd_per_hour:  # noqa: PLR0124
        lines.append(f"${best.fleet_usd_per_hour:,.2f}/h = {int(best.gpus)} GPUs x ${best.price_per_gpu_hour_usd:.2f}"
                     f" per GPU-hour ({best.price_source}); per M output tokens: ${best.fleet_usd_per_hour:,.2f}/h /"
                     f" {best.target_output_tokens_per_hour / 1e6:.2f} M tokens/h at the target ="
                     f" ${best.usd_per_m_tokens_at_target:.2f} (one replica at full load would reach"
                     f" ${best.usd_per_m_output_tokens:.2f})")
    else:
        lines.append(no_price_text(best.hardware))
    unit = "devices" if best.get("device_kind", "gpu") == "cpu" else "GPUs"
    lines.append(f"{unit} needed {best.gpus_range} across the capacity band ({best.basis}"
                 f"{': datasheet figures only, not measured; calibrate (python -m calibration.run) before buying' if best.basis == 'datasheet' else ''})")
    basis = best.get("step_basis", "")
    if basis:
        lines.append(f"step times: the physics plus {BASIS_WORDS.get(basis, basis)}")
    same = capacity[(capacity.hardware == best.hardware) & (capacity.tp == best.tp) & (capacity["dtype"] == best["dtype"])]
    others = []
    for _, r in same.iterrows():
        if r.policy == best.policy:
            continue
        if r.max_load_per_replica > 0 and best.max_load_per_replica > 0:
            gp = f"{int(r.gpus)} {unit}" if r.gpus == r.gpus else "over max_replicas"  # noqa: PLR0124
            others.append(f"{r.policy} carries {r.max_load_per_replica / best.max_load_per_replica:.2f}x"
                          f" the load ({gp})")
        else:
            others.append(f"{r.policy} cannot meet the SLOs")
    if others:
        lines.append("on the same hardware " + ", ".join(others) + speculation_margin(best, same, sc))
    why = evidence_margin(ranked) if ranked is not None else ""
    if why:
        lines.append(f"ranked by cost: {why}")
    caveat = quality_caveat(best, sc)
    if caveat:
        lines.append(caveat)
    return lines


def _no_config_text(capacity: pd.DataFrame, rejected: pd.DataFrame, spec: SizingSpec) -> str:
    text = (f"no configuration meets {spec.slo.describe()} at {spec.target_load:g} {spec.load_unit}"
            f" within max_replicas={spec.max_replicas}.")
    if len(capacity) and (capacity.max_load_per_replica > 0).any():
        r = capacity.sort_values("max_load_per_replica", ascending=False).iloc[0]
        text += (f" Closest: {r.hardware} tp={int(r.tp)} with {r.policy} carries {r.max_load_per_replica:.2f}"
                 f" {spec.load_unit} per replica ({r.reason}).")
    elif len(capacity):
        text += " No candidate meets the SLOs at any load: " + capacity.iloc[0].reason
    if len(rejected):
        text += f" {len(rejected)} candidate(s) rejected for memory or parallel layout."
    return text


SENSITIVITY = (  # (name, acceptance scale, kernel speed: every kernel's time divided by it)
    ("kernel speed -10% (every kernel's time /0.9)", 1.0, 0.9),
    ("kernel speed +10% (every kernel's time /1.1)", 1.0, 1.1),
    ("acceptance -10% (every per-position rate x0.9)", 0.9, 1.0),
    ("acceptance +10% (x1.1, capped at 0.99)", 1.1, 1.0),
)
NOISE_SEEDS = (1, 2)  # the baseline rerun with these seeds: the serving simulation's run-to-run spread
SENSITIVITY_EXTRA_STEPS = 2  # the sensitivity searches resolve 4x finer than the ranking's
TRAFFIC_STEPS = (-0.2, 0.2)  # target load moved by these fractions (no rerun: replicas scale with the load)


def kernel_speed_scenario(sc: Scenario, cand: Candidate, speed: float, acceptance_scale: float = 1.0) -> Scenario:
    """The candidate with every kernel ``speed`` times faster. A calibration profile's kernel times are
    scaled (its engine_scale; scaling the datasheet peaks would move nothing, as the measured tables and
    the published prior's attained fractions are what price the kernels); without a profile, the datasheet
    bandwidth and FLOP/s. Communication is not scaled either way."""
    if speed == 1.0:
        return candidate_scenario(sc, cand, acceptance_scale=acceptance_scale)
    base = candidate_scenario(sc, cand, acceptance_scale=acceptance_scale)
    if base.profile is None:
        return candidate_scenario(sc, cand, acceptance_scale=acceptance_scale, bandwidth_scale=speed,
                                  flops_scale=speed)
    base.profile = dataclasses.replace(base.profile, engine_scale=base.profile.engine_scale / speed)
    return base


def _sensitivity(sc: Scenario, rec: dict, spec: SizingSpec, scen: dict, simulate) -> pd.DataFrame:
    """The recommended configuration rerun (at a finer resolution, the baseline too) with kernel speed and
    acceptance moved by +-10% and with other seeds, plus the traffic target moved by +-20%; each row:
    capacity, change against the fine baseline, GPUs bought, $/h."""
    cand = next(c for c in scen if c.label == rec["candidate"])
    fine = dataclasses.replace(spec, search_steps=spec.search_steps + SENSITIVITY_EXTRA_STEPS)
    tasks = [Task(scen[cand][0], cand, rec["policy"], fine, scen[cand][1], simulate, "baseline (finer search)")]
    for name, acc, speed in SENSITIVITY:
        tasks.append(Task(kernel_speed_scenario(sc, cand, speed, acc), cand, rec["policy"], fine, scen[cand][1],
                          simulate, name))
    for seed in NOISE_SEEDS:
        tasks.append(Task(scen[cand][0], cand, rec["policy"], dataclasses.replace(fine, seed=seed), scen[cand][1],
                          simulate, f"seed {seed} (noise)"))
    results = run_all(tasks, spec.workers)
    base = results[0][1].capacity
    res_txt = f"x{2 ** (1 / 2 ** fine.search_steps):.4f}"

    def row(name, cap, r):
        return {"variant": name, "fleet_usd_per_hour": r["fleet_usd_per_hour"], "gpus": r["gpus"],
                "nodes": r["nodes"], "max_load_per_replica": cap,
                "change": f"{cap / base - 1:+.1%}" if base and cap == cap and name != tasks[0].variant else "-",
                "resolution": res_txt, "usd_per_m_output_tokens": r["usd_per_m_output_tokens"]}
    rows = [{"variant": "baseline (ranking search)", "fleet_usd_per_hour": rec["fleet_usd_per_hour"],
             "gpus": rec["gpus"], "nodes": rec["nodes"], "max_load_per_replica": rec["max_load_per_replica"],
             "change": "-", "resolution": f"x{2 ** (1 / 2 ** spec.search_steps):.4f}",
             "usd_per_m_output_tokens": rec["usd_per_m_output_tokens"]}]
    for (name, s), t in zip(results, tasks):
        rows.append(row(name, s.capacity, _capacity_row(t.scenario, s, spec, None)))
    price = rec["price_per_gpu_hour_usd"] or np.nan
    for step in TRAFFIC_STEPS:
        moved = dataclasses.replace(spec, target_load=spec.target_load * (1 + step))
        reps = replicas_for(moved, rec["max_load_per_replica"])
        gpn = int(rec.get("devices_per_node") or spec.gpus_per_node)
        nodes = nodes_for(reps, int(rec["tp"]), gpn) if reps else np.nan
        gpus = nodes * gpn if reps else np.nan
        rows.append({"variant": f"traffic {step:+.0%} ({moved.target_load:g} {spec.load_unit})",
                     "fleet_usd_per_hour": gpus * price, "gpus": gpus, "nodes": nodes,
                     "max_load_per_replica": rec["max_load_per_replica"], "change": "-", "resolution": "-",
                     "usd_per_m_output_tokens": rec["usd_per_m_output_tokens"]})
    df = pd.DataFrame(rows)
    df.insert(0, "config", f"{cand.label} {rec['policy']}")
    return df


def bundled_sizing_scenarios() -> list[Path]:
    return sorted(SCENARIO_DIR.glob("sizing-*.toml"))
