"""The relative error bar on a replica's capacity, from what the prediction rests on.

The capacity comes from the serving simulation, whose step times are either datasheet rooflines or
a calibration profile's fitted curves. A band is given only where a measured, held-out error of
those step times exists; otherwise the capacity has no error bar ("unknown"). The fields read:

    calibration profile   heldout_error.<family>.fitted.mape_pct       percent  (calibration.import_tables)
                          heldout_error.<family>.calibrated.mape_pct   percent
                          (calibration.fit writes only median_pct / max_pct there: no MAPE, no band)
    scenario              [validation] itl_mape / step_time_mape       fraction (held-out ITL / step-time MAPE)
                          [validation] report = "validation.json"      its itl_mape (calibration.validate summary)

The band is the largest of these errors (the conservative choice: one number for every family and
batch size), applied symmetrically: capacity x (1 -+ error). It describes the device the
measurements were taken on only; :func:`simulator.sizing.fleet.size` gives other candidates none.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from simulator.specs.scenario import Scenario

PROFILE_FITS = ("fitted", "calibrated")  # held-out error of the profile's own fit, not of the roofline
VALIDATION_KEYS = ("itl_mape", "step_time_mape")
REPORT_KEYS = ("itl_mape",)


@dataclass(frozen=True)
class PredictionBasis:
    """What the step times of a prediction rest on, with their measured held-out errors.

    ``step_times``: "datasheet" (catalog peaks only) or the calibration source (``Scenario.cost_source``).
    ``errors``: (where, relative error) pairs, a fraction each (0.12 = 12%); empty when nothing was measured.
    """

    step_times: str
    errors: tuple = ()


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _profile_errors(sc: Scenario) -> list[tuple[str, float]]:
    heldout = sc.profile.raw.get("heldout_error") if sc.profile is not None else None
    if not heldout or not isinstance(heldout, dict):
        return []
    out = []
    for family, entry in heldout.items():
        for fit in PROFILE_FITS:
            sub = entry.get(fit) if isinstance(entry, dict) else None
            v = sub.get("mape_pct") if isinstance(sub, dict) else None
            if _number(v):
                out.append((f"calibration profile {sc.profile.path}: heldout_error.{family}.{fit}.mape_pct", v / 100))
    return out


def _validation_errors(sc: Scenario) -> list[tuple[str, float]]:
    val = sc.extra.get("validation")
    if not isinstance(val, dict):
        return []
    out = [(f"{sc.origin} [validation] {k}", float(val[k])) for k in VALIDATION_KEYS if _number(val.get(k))]
    report = val.get("report")
    if isinstance(report, str):
        path = Path(report)
        if not path.is_absolute():
            path = Path(sc.raw.get("_base_dir") or ".") / path
        try:
            summary = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            summary = {}
        if isinstance(summary, dict):
            out += [(f"validation report {report}: {k}", float(summary[k])) for k in REPORT_KEYS
                    if _number(summary.get(k))]
    return out


def prediction_basis(sc: Scenario) -> PredictionBasis:
    """The scenario's step-time source and the held-out / validation errors measured for it."""
    return PredictionBasis(sc.cost_source, tuple(_profile_errors(sc) + _validation_errors(sc)))


def capacity_band(basis: PredictionBasis) -> tuple[float | None, str]:
    """(relative error to widen capacity by, where it comes from); None when no error was measured."""
    errors = [(where, err) for where, err in basis.errors if err >= 0]
    if not errors:
        return None, ("unknown: step times are " + basis.step_times + " with no held-out or validation error;"
                      " the capacity has no measured error bar")
    where, err = max(errors, key=lambda e: e[1])
    return err, f"+-{err:.1%} from {where}"


def uncertainty(sc: Scenario) -> tuple[float | None, str]:
    """Relative error to widen capacity by, and where it comes from (None: unknown)."""
    return capacity_band(prediction_basis(sc))
