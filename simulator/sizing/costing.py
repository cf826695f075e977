"""From one replica's capacity to a fleet: replicas, nodes, GPUs, cost and energy, one row per candidate x policy.

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
"""
from __future__ import annotations

import math

import numpy as np

from simulator.sizing.candidate import traffic_lengths
from simulator.sizing.search import Search
from simulator.sizing.spec import SizingSpec
from simulator.specs.scenario import Scenario


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


def capacity_row(sc: Scenario, s: Search, spec: SizingSpec, err: float | None, basis: str = "measured") -> dict:
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
