"""Serving simulation: continuous batching over dynamic batches under K policies."""
from simulator.serving.simulation import *  # noqa: F401,F403
from simulator.serving.simulation import (POLICIES, EngineConfig, LengthDist, ServingResult, Workload,  # noqa: F401
                                          engine_from_scenario, kv_capacity_blocks, parse_length, parse_policy,
                                          policy_k_table, required_graphs, simulate, tail_phases, wave_sweep,
                                          workload_from_scenario)
