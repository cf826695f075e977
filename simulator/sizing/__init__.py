"""Hardware sizing: SLO capacity search over the serving simulation, fleet ranking, reports.

Modules (each imports only the ones above it, and below the package only specs, physics, plan,
serving and errors): ``candidate`` (one candidate's scenario, traffic lengths, memory fit) -> ``spec``
([slo], [sizing], the candidates) -> ``search`` (serving runs, the load search) -> ``pool`` (the worker pool)
-> ``uncertainty`` (capacity error band) -> ``costing`` (fleet rows: replicas, GPUs, cost) -> ``answer``
(the answer in words) and ``sensitivity`` (the recommendation rerun with its inputs moved) -> ``fleet`` (:func:`size`)
-> ``report_tables`` (numbers and tables) and ``report_charts`` (inline SVG charts) -> ``report`` (HTML /
Markdown / JSON renderers).
"""
from simulator.plan.answer import spec_stops_paying
from simulator.sizing.fleet import SizingResult, bundled_sizing_scenarios, size
from simulator.sizing.ranking import rank
from simulator.sizing.pool import Task, run_all
from simulator.sizing.search import (DEFAULT_TTFT_GUARD_S, MAX_EXPANSIONS, Search, analytic_guess, build_workload,
                                     requests_for, run_point, search_capacity)
from simulator.sizing.candidate import GB, Candidate, candidate_scenario, memory_fit, traffic_lengths
from simulator.sizing.spec import (POLICIES, SIZING_SCHEMA, SLO, SLO_KEYS, SLO_SCHEMA, SizingOverrides, SizingSpec, parse_slo,
                                   parse_sizing)
from simulator.sizing.uncertainty import PredictionBasis, capacity_band, prediction_basis, uncertainty

__all__ = [
    "GB", "POLICIES", "SIZING_SCHEMA", "SLO", "SLO_KEYS", "SLO_SCHEMA", "Candidate", "SizingOverrides",
    "SizingSpec",
    "candidate_scenario", "memory_fit", "parse_slo", "parse_sizing", "traffic_lengths",
    "DEFAULT_TTFT_GUARD_S", "MAX_EXPANSIONS", "Search", "Task", "analytic_guess", "build_workload",
    "requests_for", "run_all", "run_point", "search_capacity",
    "PredictionBasis", "capacity_band", "prediction_basis", "uncertainty",
    "SizingResult", "bundled_sizing_scenarios", "rank", "size", "spec_stops_paying",
]
