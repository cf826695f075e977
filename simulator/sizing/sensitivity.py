"""How far the recommendation moves: the recommended configuration rerun with kernel speed and acceptance moved
by +-10% and with other seeds, and the traffic target moved by +-20%."""
from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd

from simulator.sizing.candidate import Candidate, candidate_scenario
from simulator.sizing.costing import capacity_row, nodes_for, replicas_for
from simulator.sizing.pool import Task, run_all
from simulator.sizing.spec import SizingSpec
from simulator.specs.scenario import Scenario

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


def sensitivity(sc: Scenario, rec: dict, spec: SizingSpec, scen: dict, simulate) -> pd.DataFrame:
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
        rows.append(row(name, s.capacity, capacity_row(t.scenario, s, spec, None)))
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
