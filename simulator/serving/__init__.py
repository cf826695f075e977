"""Serving simulation: continuous batching over dynamic batches under K policies.

    workload.py  traffic: length distributions, categories, arrivals, [traffic]
    engine.py    engine settings ([serving]), step-time tables, KV block budget, CUDA graphs
    loop.py      the step loop (simulate) and wave sweeps
    results.py   result tables, summary row, tail analysis
    early_stop.py  the load search's exact early stop (a run bound to miss a latency SLO ends there)
The K policies themselves live one floor down, in simulator.plan.policies.
"""
from simulator.plan.policies import (POLICIES, Policy, PolicySettings, PolicyTables, make_policy, parse_policy,
                                     policy_k_table, policy_tables)
from simulator.serving.engine import (EngineConfig, engine_from_scenario, graph_profile, kv_capacity_blocks,
                                      required_graphs, running_cap)
from simulator.serving.loop import simulate, wave_sweep
from simulator.serving.pricer import StepPricer
from simulator.serving.results import SUMMARY_KEYS, ServingResult, tail_phases
from simulator.serving.workload import (ARRIVALS, DISTS, Category, LengthDist, Workload, parse_length,
                                        workload_from_scenario)

__all__ = [
    "ARRIVALS", "DISTS", "POLICIES", "SUMMARY_KEYS",
    "Category", "EngineConfig", "LengthDist", "Policy", "PolicySettings", "PolicyTables", "ServingResult",
    "StepPricer", "Workload",
    "engine_from_scenario", "graph_profile", "kv_capacity_blocks", "make_policy", "parse_length", "parse_policy", "policy_k_table",
    "policy_tables", "required_graphs", "running_cap", "simulate", "tail_phases", "wave_sweep",
    "workload_from_scenario",
]
