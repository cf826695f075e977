"""Deployment calibration files: engine terms fitted from a few measurements of one deployment.

``python -m calibration.fit_deployment`` writes them; the simulator only reads them (it never imports
``calibration``). The terms (``simulator/specs/step_terms.py``: kernel scales, host time per step, per
sequence, per sequence and per speculative token when speculating, per collective call) are the posterior of the
learned population given the deployment's points; a file written before the speculative terms (or the collective
term) existed leaves them neutral (s = 1, c = 0). When the rows carried acceptance, the fitted
per-position rates replace the scenario's; with ``rank_tail`` (a draft tree's acceptance lengths fitted as a scale
on its top-1 rates) they are the tree's top-1 rates per depth and keep that rank tail (specs.tree_acceptance),
without it the draft's own rates (a tree's: measured per depth on it). Format::

    {"format": "dsd-planner-deployment-fit", "format_version": 1,
     "scenario": {"model": ..., "hardware": ..., "tp": ..., "engine": ..., "engine_version": ..., "draft": ...,
                  "weights": ..., "activations": ..., "kv_cache": ..., "kernel_basis": "h100-sxm.vllm-0.24.0.profile.json"},
     "terms": {"kernel_scale": {"value": 1.1, "interval": [1.0, 1.2], "fitted": true}, ...},
     "acceptance": {"rates": [...], "interval": [[lo, hi], ...], "source": "...", "rank_tail": 0.751} | null,
     "uncertainty": {"step_time_rel": 0.03, "goodput_rel": 0.05, "interval": "90% of the posterior ..."},
     "points": [{"batch_size": 8, "k": 0, "context_len": 2048, "itl_ms": 9.1, "file": "runs.csv"}, ...],
     "provenance": {...}}
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from simulator.errors import PlannerError
from simulator.files import read_json_file
from simulator.specs.tree_acceptance import check_rank_tail
from simulator.specs.step_terms import TERMS, added_step_s, kernel_factor, terms_added_s  # noqa: F401 (re-exported)

DEPLOYMENT_FORMAT = "dsd-planner-deployment-fit"
DEPLOYMENT_VERSION = 1
IDENTITY = ("model", "hardware", "tp", "engine", "engine_version", "draft")
# written by fits since 2026-12-05 and checked where a file has them: the precision the steps ran in
PRECISION_IDENTITY = ("weights", "activations", "kv_cache")
# written since 2026-12-07 (second pass), checked where a file has them: the attention projections' and the routed
# experts' own precision where they differ from the weights' (a fit on bf16 attention beside nvfp4 MLPs is not one
# on nvfp4 attention)
MODULE_IDENTITY = ("attention", "experts")
# written since 2026-12-07, checked where a file has it: the kernel times the terms were fitted on top of (the
# calibration profile or measured kernel tables by file name; "datasheet" without one). The terms correct that
# physics: on another profile's kernel times (another machine's microbenchmarks) they correct the wrong thing
BASIS_IDENTITY = ("kernel_basis",)
MAX_POINTS_LISTED = 6  # a provenance line names each point up to this many, else the span they cover


def kernel_basis(profile) -> str:
    """The name of what a step's kernel times rest on, as a fit records it: the profile's file name, or 'datasheet'."""
    return Path(profile.path).name if profile is not None and getattr(profile, "path", "") else "datasheet"


def scenario_identity(model, hardware, deployment, engine, draft, profile=None) -> dict:
    """What a deployment fit is valid for: the same target, GPU, TP, engine release, draft, precision and kernel
    times (the calibration profile or kernel tables the terms were fitted on top of)."""
    return {"model": model.name, "hardware": hardware.name, "tp": int(deployment.tp),
            "engine": engine.name if engine else "ideal", "engine_version": engine.version if engine else "",
            "draft": draft.label, "weights": deployment.weight_dtype, "activations": deployment.act_dtype,
            "kv_cache": deployment.kv_dtype, "kernel_basis": kernel_basis(profile),
            "attention": deployment.attention_label(model) or "as weights",
            "experts": deployment.expert_dtype_for(model) if model.is_moe else "none"}


def fit_mismatches(fit_identity: dict, identity: dict) -> list[str]:
    """What differs between the deployment a fit was made on and ``identity`` (empty: the fit applies);
    the precision and the kernel basis only where the fit file records them."""
    keys = IDENTITY + tuple(k for k in PRECISION_IDENTITY + MODULE_IDENTITY + BASIS_IDENTITY
                            if k in fit_identity and k in identity)
    return [f"{k} {fit_identity.get(k)!r} (scenario: {identity[k]!r})" for k in keys
            if str(fit_identity.get(k)) != str(identity[k])]


@dataclass(frozen=True)
class DeploymentFit:
    """A loaded deployment calibration file."""

    path: str
    identity: dict
    terms: dict  # name -> value
    intervals: dict  # name -> (lo, hi)
    fitted: tuple  # names of the terms the points identified
    acceptance_rates: tuple | None
    step_time_rel: float
    goodput_rel: float
    points: tuple
    provenance: dict = field(default_factory=dict)
    acceptance_rank_tail: float | None = None  # the rates are a draft tree's top-1 rates with this rank tail

    @property
    def kernel_scale(self) -> float:
        return self.terms["kernel_scale"]

    def kernel_factor(self, k) -> np.ndarray:
        return kernel_factor(self.terms["kernel_scale"], self.terms["spec_kernel_scale"], k)

    @property
    def collective_s(self) -> float:
        return self.terms.get("collective_s", 0.0)

    def added_s(self, batch, k, calls=0.0, room_s=0.0) -> np.ndarray:
        return terms_added_s(self.terms, batch, k, calls, room_s)

    @property
    def points_text(self) -> str:
        """The points one by one where there are a few; the batch sizes and K they span where there are many."""
        if len(self.points) <= MAX_POINTS_LISTED:
            return ", ".join(f"B={p['batch_size']} K={p['k']}" for p in self.points)
        b = sorted({int(p["batch_size"]) for p in self.points})
        k = sorted({int(p["k"]) for p in self.points})
        return (f"B {', '.join(map(str, b))} x K {k[0]}-{k[-1]}" if len(b) * len(k) == len(self.points)
                else f"B {b[0]}-{b[-1]}, K {k[0]}-{k[-1]}")

    @property
    def label(self) -> str:
        """One line for provenance: the file, the points, the fitted terms with their intervals."""
        parts = [f"{n}={_fmt(n, self.terms[n])} [{_fmt(n, self.intervals[n][0])}, {_fmt(n, self.intervals[n][1])}]"
                 for n in self.fitted]
        acc = "; acceptance measured" if self.acceptance_rates else ""
        return (f"deployment fit {Path(self.path).name} ({len(self.points)} points: {self.points_text};"
                f" {', '.join(parts) or 'no term identified'}{acc})")


def _fmt(name: str, value: float) -> str:
    return f"{value:.3g}" if name.endswith("_scale") else f"{value * 1e6:.3g} us"


def _number(value, where: str, lo: float = -np.inf, hi: float = np.inf) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not np.isfinite(value) or not lo <= value <= hi:
        raise PlannerError(f"{where}: expected a finite number in [{lo:g}, {hi:g}], got {value!r}; refit it with"
                           " python -m calibration.fit_deployment")
    return float(value)


def _terms(data: dict, path: str) -> tuple[dict, dict, tuple]:
    table = data.get("terms")
    if not isinstance(table, dict):
        raise PlannerError(f"{path}: no 'terms' table; refit it with python -m calibration.fit_deployment")
    values, intervals, fitted = {}, {}, []
    for name, (neutral, lo, hi, _) in TERMS.items():
        entry = table.get(name, {"value": neutral, "interval": [neutral, neutral], "fitted": False})
        if not isinstance(entry, dict):
            raise PlannerError(f"{path}: terms.{name} is not a table")
        values[name] = _number(entry.get("value"), f"{path}: terms.{name}.value", lo, hi)
        iv = entry.get("interval")
        if not (isinstance(iv, list) and len(iv) == 2):
            raise PlannerError(f"{path}: terms.{name}.interval must be [lo, hi]")
        intervals[name] = tuple(_number(x, f"{path}: terms.{name}.interval", lo, hi) for x in iv)
        if not intervals[name][0] <= values[name] <= intervals[name][1]:
            raise PlannerError(f"{path}: terms.{name}.interval [{intervals[name][0]:g}, {intervals[name][1]:g}] must be"
                               f" [lo, hi] around its value {values[name]:g}; refit it with"
                               " python -m calibration.fit_deployment")
        if entry.get("fitted"):
            fitted.append(name)
    return values, intervals, tuple(fitted)


def load_deployment_fit(path: str | Path, origin: str | None = None, identity: dict | None = None) -> DeploymentFit:
    """Read and check a deployment calibration file (PlannerError naming the file when it is not one);
    with ``identity`` (:func:`scenario_identity`), refuse a fit made for another deployment."""
    path = str(path)
    data = read_json_file(path, "deployment calibration")
    if not isinstance(data, dict) or data.get("format") != DEPLOYMENT_FORMAT:
        raise PlannerError(f"{path}: not a deployment calibration file (format '{DEPLOYMENT_FORMAT}'); write one with"
                           " python -m calibration.fit_deployment")
    if data.get("format_version") != DEPLOYMENT_VERSION:
        raise PlannerError(f"{path}: format_version {data.get('format_version')!r}; this planner reads"
                           f" {DEPLOYMENT_VERSION} (refit it)")
    ident = data.get("scenario")
    if not isinstance(ident, dict) or any(k not in ident for k in IDENTITY):
        raise PlannerError(f"{path}: 'scenario' must name {', '.join(IDENTITY)}")
    values, intervals, fitted = _terms(data, path)
    acc = data.get("acceptance")
    rates, rank_tail = None, None
    if acc is not None:
        r = acc.get("rates") if isinstance(acc, dict) else None
        if not isinstance(r, list) or not r:
            raise PlannerError(f"{path}: acceptance.rates must be a non-empty list of rates in [0, 1)")
        rates = tuple(_number(x, f"{path}: acceptance.rates", 0.0, 0.999) for x in r)
        if acc.get("rank_tail") is not None:
            rank_tail = check_rank_tail(acc["rank_tail"], path)
    unc = data.get("uncertainty")
    if not isinstance(unc, dict) or any(k not in unc for k in ("step_time_rel", "goodput_rel")):
        raise PlannerError(f"{path}: 'uncertainty' must be a table with step_time_rel and goodput_rel (a fit without"
                           " them would claim no error); refit it with python -m calibration.fit_deployment")
    rel = {k: _number(unc[k], f"{path}: uncertainty.{k}", 0, 10) for k in ("step_time_rel", "goodput_rel")}
    if not all(rel.values()):
        raise PlannerError(f"{path}: uncertainty.step_time_rel and goodput_rel must be > 0 (a measured fit has an"
                           " error); refit it with python -m calibration.fit_deployment")
    points = data.get("points")
    if not isinstance(points, list) or not points or not all(isinstance(p, dict) and "batch_size" in p and "k" in p
                                                             for p in points):
        raise PlannerError(f"{path}: 'points' must list the measured points the terms were fitted on")
    for i, p in enumerate(points):
        for key in ("batch_size", "k"):
            if isinstance(p[key], bool) or not isinstance(p[key], int) or not 0 <= p[key] <= 1 << 20:
                raise PlannerError(f"{path}: points[{i}].{key} must be a whole number >= 0, got {p[key]!r}")
    provenance = data.get("provenance")
    if provenance is not None and not isinstance(provenance, dict):
        raise PlannerError(f"{path}: 'provenance' must be a table (JSON object), got {type(provenance).__name__};"
                           " refit it with python -m calibration.fit_deployment")
    fit = DeploymentFit(path, dict(ident), values, intervals, fitted, rates, rel["step_time_rel"], rel["goodput_rel"],
                        tuple(points), dict(provenance or {}), rank_tail)
    if identity is not None:
        check_fit_matches(fit, identity, origin or "the scenario")
    return fit


class DeploymentMismatch(PlannerError):
    """A deployment fit made for another model, GPU, TP, engine release or draft than the scenario's."""


def check_fit_matches(fit: DeploymentFit, identity: dict, origin: str) -> None:
    """Refuse a fit made for another model, GPU, TP, engine release, draft or precision (its terms would
    not apply)."""
    diff = fit_mismatches(fit.identity, identity)
    if diff:
        basis = (f" (or give the scenario the kernel times it was fitted on: --calibration {fit.identity['kernel_basis']}"
                 " / [calibration] profile)" if any(d.startswith("kernel_basis ") for d in diff)
                 and fit.identity["kernel_basis"] != "datasheet" else "")
        than = "the flags give" if origin == "flags" else origin
        raise DeploymentMismatch(f"{fit.path}: fitted for another deployment than {than}: {'; '.join(diff)}; refit it"
                                 f" for this scenario with python -m calibration.fit_deployment{basis}")
