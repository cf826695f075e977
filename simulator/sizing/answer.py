"""The sizing answer in words: what to buy and what it costs (:func:`answer_text`), why (:func:`why_lines`), what
the planner does not check (:func:`quality_caveat`), and what comes closest when nothing meets the target."""
from __future__ import annotations

import pandas as pd

from simulator.sizing.costing import no_price_text
from simulator.sizing.ranking import evidence_margin, speculation_margin
from simulator.sizing.spec import SizingSpec
from simulator.specs.scenario import Scenario


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


def no_config_text(capacity: pd.DataFrame, rejected: pd.DataFrame, spec: SizingSpec) -> str:
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
