"""Deployment fits in a sweep (``--deployment``): each fit applies to the combinations of the deployment
it was fitted on (model, GPU, TP, engine release, draft, precision) and only there."""
from __future__ import annotations

from pathlib import Path

from simulator.errors import PlannerError
from simulator.specs.deployment_fit import DeploymentMismatch, fit_mismatches, load_deployment_fit, scenario_identity
from simulator.specs.scenario import build_scenario


def with_fit(spec, raw: dict, base_dir):
    """The combination's scenario, with the deployment fit measured on its deployment (model, GPU, TP,
    engine release, draft, precision) where one is given, without any other (a base scenario's own fit
    holds only where it was measured). ``raw`` is updated to what was built."""
    cal = raw.get("calibration") or {}
    if cal.get("deployment") is not None:
        try:
            return build_scenario(raw, spec.base, base_dir)
        except DeploymentMismatch:
            cal.pop("deployment")
            if not cal:
                raw.pop("calibration", None)
    sc = build_scenario(raw, spec.base, base_dir)
    if not spec.deployment_fits or sc.deployment_fit is not None:
        return sc
    ident = scenario_identity(sc.model, sc.hardware, sc.deployment, sc.engine, sc.draft, sc.profile)
    hit = next((f for f in spec.deployment_fits if not fit_mismatches(f.identity, ident)), None)
    if hit is None:
        return sc
    raw.setdefault("calibration", {})["deployment"] = hit.path  # absolute: the base's folder does not resolve it
    return build_scenario(raw, spec.base, base_dir)


def deployment_fits(paths) -> tuple:
    """The --deployment files, read and checked; two fitted on the same deployment are refused."""
    fits = []
    for path in paths:
        try:
            fit = load_deployment_fit(Path(path).resolve())
        except PlannerError as err:
            raise PlannerError(f"--deployment {err}") from None
        twin = next((f for f in fits if not fit_mismatches(f.identity, fit.identity)
                     and not fit_mismatches(fit.identity, f.identity)), None)
        if twin is not None:
            raise PlannerError(f"--deployment {twin.path} and {fit.path} were both fitted on"
                               f" {fit_deployment_text(fit)}; give one")
        fits.append(fit)
    return tuple(fits)


def fit_deployment_text(fit) -> str:
    i = fit.identity
    return f"{i['model']} on {i['tp']} x {i['hardware']}, {i['engine']} {i['engine_version']}, draft {i['draft']}"
