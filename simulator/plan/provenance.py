"""What a scenario's numbers rest on and how far to trust them, in words: the step-time band (a deployment fit's
interval, else the published corpus's error for its basis and GPU, with how the published step rows at its TP
leaned), the serving check of its own basis, and the provenance every prediction's and serve run's JSON carries."""
from __future__ import annotations

from pathlib import Path

from simulator.plan.decision_risk import N_DRAWS, draws_basis
from simulator.plan.speedup_trust import speedup_trust_text
from simulator.specs.scenario import Scenario
from simulator.specs.uncertainty import (Band, posterior_interval_trust_text, serving_check_text, step_time_band,
                                         tp_lean_text)


def scenario_step_band(sc: Scenario) -> Band:
    """How far the scenario's step times are from measurements: the deployment fit's posterior interval,
    else the published corpus's error for its basis and device (:func:`step_time_band`)."""
    fit = sc.deployment_fit
    if fit is not None:  # the deployment's own measurements: the posterior's interval, and how often such held
        trust = posterior_interval_trust_text()
        return Band(fit.step_time_rel, None, 0, f"deployment fit {Path(fit.path).name} on {len(fit.points)} measured"
                    f" points; goodput at K* +-{fit.goodput_rel:.0%}" + (f"; {trust}" if trust else ""),
                    "90% posterior interval of the")
    basis = sc.profile.basis if sc.profile else "datasheet only"
    if sc.profile and sc.profile.surfaces:
        basis = "measured kernel tables"
    return step_time_band(sc.hardware.name, sc.hardware.kind, basis, sc.profile.raw if sc.profile else None)


def step_trust_text(sc: Scenario) -> str:
    """The step-time band in words, with how the published step rows at the scenario's TP leaned (a deployment
    fit's interval stands alone: its own points already carry its TP; a CPU profile has no TP rows)."""
    text = scenario_step_band(sc).describe()
    lean = tp_lean_text(sc.deployment.tp) if sc.deployment_fit is None and sc.hardware.kind != "cpu" else ""
    return f"{text}; {lean}" if lean else text


def scenario_serving_check_text(sc: Scenario) -> str:
    """The serving check of the scenario's GPU and engine, of its own basis: the physics alone's under
    --physics-only, else the planner as shipped (a deployment fit's too: the check never scored one)."""
    return serving_check_text(sc.hardware.name, sc.engine.name, physics_only=sc.step_basis == "physics only")


def scenario_provenance(sc: Scenario) -> dict:
    """What a scenario's numbers rest on: its sources, the step times' basis and band, the speedups' band
    (predict's and serve's JSON carry it as "provenance")."""
    return {
        "scenario": sc.name, "origin": sc.origin,
        "step_time_source": sc.cost_source,
        "acceptance": f"{sc.acceptance.label} ({sc.acceptance.source})",
        "model": f"{sc.model.name}: {sc.model.source}",
        "hardware": f"{sc.hardware.name}: {sc.hardware.source}",
        "deployment": f"tp={sc.deployment.tp} ep={sc.deployment.ep}"
                      + (f" layout={sc.deployment.layout} dp={sc.deployment.dp}" if sc.model.is_moe else "")
                      + f" weights={sc.deployment.weight_dtype} activations={sc.deployment.act_dtype}"
                      f" kv={sc.deployment.kv_dtype}"
                      + (f" attention={a}" if (a := sc.deployment.attention_label(sc.model)) else "")
                      + f" routing={sc.deployment.routing.describe()}",
        "draft": sc.draft.label, "context_len": sc.context_len,
        "uncertainty": step_trust_text(sc), "speedup_uncertainty": speedup_trust_text(sc),
        "serving_check": scenario_serving_check_text(sc),
        "step_basis": sc.step_basis,
        "decision_uncertainty": f"P(speculation pays) per batch size over {N_DRAWS} draws of "
                                + draws_basis(sc.step_terms),
    } | ({"deployment_fit": sc.deployment_fit.label} if sc.deployment_fit else {})
