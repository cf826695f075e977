"""How far to trust a step time: the residuals of the planner's own predictions against measurements
of the same kind of basis (``simulator/data/transfer_error.json``, written by ``calibration.transfer``
from the published GPU corpus; a CPU profile's held-out end-to-end validation error).

The band is the mean absolute relative error (MAPE) of step-time predictions on that basis and GPU,
with the worst case beside it: a prediction of 10 ms with a 15% band means measurements of the same
kind fell on average 15% away from what the planner said.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

BAND_FILE = Path(__file__).resolve().parent.parent / "data" / "transfer_error.json"
MIN_ROWS = 3  # fewer published rows on a GPU than this: quote the band over all GPUs


@dataclass(frozen=True)
class Band:
    mape: float | None  # fraction; None when nothing has been measured for this basis
    worst: float | None
    n: int
    where: str  # what the figure rests on
    measure: str = "MAPE over"  # what the figure is: residuals of that basis, or a fit's own interval

    def describe(self) -> str:
        if self.mape is None:
            return f"unknown ({self.where})"
        worst = f", worst {self.worst:.0%}" if self.worst is not None else ""
        count = f"{self.n} " if self.n else ""
        return f"+-{self.mape:.0%} step time ({self.measure} {count}{self.where}{worst})"


@lru_cache(maxsize=1)
def _bands() -> dict:
    try:
        return json.loads(BAND_FILE.read_text())
    except (OSError, json.JSONDecodeError):
        return {}


def step_time_band(hardware: str, kind: str, basis: str, profile_raw: dict | None = None) -> Band:
    """The band for a device: CPU profiles quote their own held-out validation; GPUs the transfer
    residuals of the published corpus on that GPU (all GPUs when it has too few rows); a datasheet-only
    prediction the datasheet residuals."""
    if kind == "cpu":
        engine = (profile_raw or {}).get("engine") or {}
        mape = engine.get("heldout_itl_mape")
        return Band(mape, None, 0, f"held-out rows of {engine.get('fitted_from', 'no measured run')}") \
            if mape is not None else Band(None, None, 0, "no end-to-end run measured on this CPU")
    bands = _bands()
    src = bands.get("_source", "the published corpus")
    if basis.startswith("datasheet"):
        d = bands.get("_datasheet") or {}
        return Band(d.get("step_time_mape"), None, int(d.get("n") or 0),
                    f"published rows, datasheet-only basis; {src}")
    entry = bands.get(hardware) or {}
    if int(entry.get("n") or 0) >= MIN_ROWS:
        return Band(entry.get("step_time_mape"), entry.get("step_time_worst"), int(entry["n"]),
                    f"published rows on {hardware}; {src}")
    d = bands.get("_all") or {}
    return Band(d.get("step_time_mape"), d.get("step_time_worst"), int(d.get("n") or 0),
                f"published rows on all GPUs ({hardware} has {int(entry.get('n') or 0)}); {src}")


def two_shot_model_error() -> tuple[float, str] | None:
    """(log error, what it rests on) of a few-point deployment fit's extrapolation: the 90th percentile of
    held-out misses of two-point fits on the published speedup curves; None before calibration.transfer
    has written it."""
    two = _bands().get("_two_shot") or {}
    q = two.get("model_error_log_p90")
    if q is None:
        return None
    return float(q), (f"two-point fits' held-out error on {two.get('n')} points of {two.get('curves')} published"
                      " speedup curves (calibration/data/transfer/transfer.md)")
