"""The relative error bar on a replica's capacity, from what the prediction rests on.

The capacity comes from the serving simulation, whose step times are either datasheet rooflines or
a calibration profile's fitted curves. A band is given only where a measured, held-out error of
those step times exists; otherwise the capacity has no error bar ("unknown"). The fields read:

    calibration profile   heldout_error.<family>.fitted.mape_pct       percent  (calibration.import_tables)
                          heldout_error.<family>.calibrated.mape_pct   percent
                          (calibration.fit writes only median_pct / max_pct there: no MAPE, no band)
    scenario              [validation] itl_mape / step_time_mape       fraction (held-out ITL / step-time MAPE)
                          [validation] report = "validation.json"      its itl_mape (calibration.validate summary)

    calibration profile   transfer_error.<...>.mape_pct                 percent (end-to-end, published corpus)

The band is the largest of these errors (the conservative choice: one number for every family and
batch size), applied symmetrically: capacity x (1 -+ error). It describes the device the
measurements were taken on only.

Per sizing candidate (:func:`candidate_band`) the end-to-end step-time MAPE of the published corpus
for its basis and GPU (``simulator/data/transfer_error.json`` via ``simulator.specs.uncertainty``)
joins these errors, and the largest wins. A candidate whose step times rest on datasheet figures only
is flagged ``datasheet`` and gets the corpus' datasheet-only residual; when that file has none, the
median over kernel families of the roofline's held-out error on that device,

    e_datasheet = median_f heldout_error.<f>.roofline.mape_pct / 100     (simulator/data/profiles/<hw>.*)

(the datasheet roofline scored against measured kernel tables; over all shipped profiles when the
device has none), capped at DATASHEET_CAP so the low end stays above zero.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from simulator.specs.scenario import Scenario

PROFILE_DIR = Path(__file__).resolve().parent.parent / "data" / "profiles"
DATASHEET_CAP = 0.9
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


@lru_cache(maxsize=256)  # resolving touches the file system: band notes name the same few profiles many times
def _where(path) -> str:
    """A profile path relative to the repository when it lies inside it."""
    try:
        return str(Path(path).resolve().relative_to(Path(__file__).resolve().parent.parent.parent))
    except ValueError:
        return str(path)


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
                out.append((f"calibration profile {_where(sc.profile.path)}: heldout_error.{family}.{fit}.mape_pct", v / 100))
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


def _transfer_errors(sc: Scenario) -> list[tuple[str, float]]:
    """End-to-end residuals of the profile on the published corpus: every numeric mape_pct leaf."""
    data = getattr(sc.profile, "transfer_error", None) if sc.profile is not None else None
    out = []

    def walk(node, path):
        if isinstance(node, dict):
            for key, val in node.items():
                if key == "mape_pct" and _number(val) and val >= 0:
                    out.append((f"calibration profile {_where(sc.profile.path)}: transfer_error{path}.mape_pct", val / 100))
                else:
                    walk(val, f"{path}.{key}")
    walk(data or {}, "")
    return out


def datasheet_error(hardware: str) -> tuple[float, str]:
    """(relative error, where from) for step times resting on datasheet figures only (see module doc)."""
    import statistics

    def roofline_errors(paths):
        vals = []
        for path in paths:
            try:
                heldout = json.loads(path.read_text()).get("heldout_error") or {}
            except (OSError, json.JSONDecodeError, AttributeError):
                continue
            for entry in heldout.values() if isinstance(heldout, dict) else ():
                v = entry.get("roofline", {}).get("mape_pct") if isinstance(entry, dict) else None
                if _number(v) and v >= 0:
                    vals.append(v / 100)
        return vals
    own = sorted(PROFILE_DIR.glob(f"{hardware}.*.profile.json"))
    vals, where = roofline_errors(own), f"simulator/data/profiles/{hardware}.*"
    if not vals:
        vals, where = roofline_errors(sorted(PROFILE_DIR.glob("*.profile.json"))), "simulator/data/profiles/* (no profile for this device)"
    if not vals:
        return DATASHEET_CAP, f"datasheet only: no roofline error on record, band set to the cap +-{DATASHEET_CAP:.0%}"
    err = min(statistics.median(vals), DATASHEET_CAP)
    return err, (f"datasheet only: +-{err:.0%}, the median held-out error of the datasheet roofline against measured"
                 f" kernel tables ({where}, heldout_error.*.roofline.mape_pct, {len(vals)} families)")


def candidate_band(sc: Scenario, own_device: bool = True, extra=()) -> tuple[float, str, str]:
    """(relative error, where from, basis) for one candidate's capacity.

    The largest of: the measured held-out / validation / transfer errors of its step times (validation
    only on ``own_device``, the device it was measured on) and the end-to-end step-time MAPE of the
    published corpus for its basis and GPU (``simulator.specs.uncertainty.step_time_band``). basis is
    "measured" when the step times rest on a calibration profile, else "datasheet": then the band is the
    corpus' datasheet-only residual (else the roofline's kernel error, :func:`datasheet_error`),
    capped at DATASHEET_CAP. ``extra``: (where, error) pairs measured for the sizing scenario itself.
    """
    from simulator.specs.uncertainty import step_time_band
    errors = _profile_errors(sc) + _transfer_errors(sc) + (_validation_errors(sc) + list(extra) if own_device else [])
    measured = sc.profile is not None
    if measured:
        kind = "measured kernel tables" if sc.profile.surfaces else sc.profile.basis
        band = step_time_band(sc.hardware.name, sc.hardware.kind, kind, sc.profile.raw)
    else:
        band = step_time_band(sc.hardware.name, sc.hardware.kind, "datasheet only")
    if band.mape is not None:
        errors.append((f"end-to-end step time, {band.describe()}", float(band.mape)))
    if not errors:
        err, note = datasheet_error(sc.hardware.name)
        return err, note, "measured" if measured else "datasheet"
    where, err = max(errors, key=lambda e: e[1])
    err = min(err, DATASHEET_CAP)
    prefix = "" if measured else "datasheet only: "
    basis = ("published prior" if sc.profile.basis == "published prior" else "measured") if measured else "datasheet"
    return err, f"{prefix}+-{err:.1%} from {where}", basis


def prediction_basis(sc: Scenario) -> PredictionBasis:
    """The scenario's step-time source and the held-out / validation errors measured for it."""
    return PredictionBasis(sc.cost_source, tuple(_profile_errors(sc) + _transfer_errors(sc) + _validation_errors(sc)))


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
