"""From per-replica capacities to the sizing answer: :func:`size` plans each candidate (hardware x
tensor-parallel degree x dtype) and its memory fit, runs the capacity searches of :mod:`simulator.sizing.search`
on the worker pool, and gathers what they found in a :class:`SizingResult`.

Each candidate x policy becomes a fleet row (:mod:`simulator.sizing.costing`: replicas, nodes, GPUs, $/h,
$/M tokens, energy) with its capacity band (:mod:`simulator.sizing.uncertainty`: measured where a held-out,
validation or transfer error exists; else the wide datasheet band, flagged). Ranking
(:mod:`simulator.sizing.ranking`): cost at the target, then strength of evidence; a candidate is never
ranked above one on stronger evidence (measured tables > published prior > datasheet) that meets the
target with no more GPUs than its own band allows. The answer in words: :mod:`simulator.sizing.answer`;
how far it moves: :mod:`simulator.sizing.sensitivity`.
"""
from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import pandas as pd

from simulator import serving
from simulator.errors import PlannerError
from simulator.plan.answer import spec_stops_paying
from simulator.plan.api import predict_scenario
from simulator.sizing.answer import answer_text, no_config_text, why_lines
from simulator.sizing.candidate import candidate_scenario, k_table_context, memory_fit, predict_command, traffic_lengths
from simulator.sizing.costing import capacity_row
from simulator.sizing.pool import Task, run_all
from simulator.sizing.ranking import RANK_RULE, best_per_gpu_type, rank
from simulator.sizing.sensitivity import sensitivity
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
                if len(self.ranked) else no_config_text(self.capacity, self.rejected, self.spec)
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


def _plain(v):
    """numpy scalars -> Python, NaN -> None (JSON has no NaN)."""
    v = v.item() if hasattr(v, "item") else v
    return None if isinstance(v, float) and not math.isfinite(v) else v


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
        rows.append(capacity_row(csc, s, spec, c_err, c_basis))
        pts += [{"hardware": s.candidate.hardware, "tp": s.candidate.tp, "policy": s.policy} | p for p in s.points]
    k_tables, engine, stops = tables[0]
    band_note = "; ".join(f"{k}: {v}" for k, v in sorted(notes.items())) or band_note
    result = SizingResult(sc, spec, rows, rejected, memory, pts, k_tables, engine, stops, band_note)
    if spec.sensitivity and result.recommendation is not None:
        result.sensitivity = sensitivity(sc, result.recommendation, spec, scen, simulate)
    result.elapsed_s = time.perf_counter() - t0
    return result


def bundled_sizing_scenarios() -> list[Path]:
    return sorted(SCENARIO_DIR.glob("sizing-*.toml"))
