"""Measured runs against predictions: one reader and one matcher, for validation and the dashboard.

A measured-runs CSV has one row per (batch size B, draft length K) run with at least ``batch_size``,
``k`` and ``itl_ms`` (the engine's step time); `calibration.engine sweep` and the vLLM readers write
more columns (acceptance, goodput, experts touched). Relative errors are predicted / measured - 1.
"""
from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pandas as pd

from simulator.errors import PlannerError
from simulator.files import read_input_bytes

MIN_COLUMNS = ("batch_size", "k", "itl_ms")
NUMERIC = ("batch_size", "k", "itl_ms", "goodput_per_seq", "acceptance_length", "context_len", "experts_touched",
           "verify_ms", "n_steps")


# where a measured value can lie (a step of 1000 s or under 1 us, a context of 16M tokens: a typo or a
# wrong unit; the fastest real decode step, a tiny model on one GPU, is ~1 ms)
RANGES = {"context_len": (0, 1 << 24), "itl_ms": (1e-3, 1e6), "verify_ms": (0, 1e6), "goodput_per_seq": (0, 1e6),
          "experts_touched": (0, 1e6), "n_steps": (0, 1e12)}


def read_measured(source: str | Path | bytes, name: str | None = None, required=MIN_COLUMNS) -> pd.DataFrame:
    """Read a measured-runs CSV (a path, or the bytes of an upload); refuse what cannot be compared.

    Numeric columns must hold finite numbers; batch_size >= 1, 0 <= k <= 32, itl_ms > 0.
    """
    name = name or (str(source) if not isinstance(source, bytes) else "measured.csv")
    if not isinstance(source, bytes):  # a regular file under its cap (a FIFO or a device is refused, not read)
        source = read_input_bytes(source, "measured runs")
    try:
        df = pd.read_csv(io.BytesIO(source), skipinitialspace=True)  # 'batch_size, k, itl_ms' as written by hand
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError, ValueError) as err:
        raise PlannerError(f"{name}: not a readable measured-runs CSV ({(str(err).splitlines() or [''])[0][:120]})") from None
    except OSError as err:
        raise PlannerError(f"{name}: cannot read it ({err.strerror or err})") from None
    missing = [c for c in required if c not in df.columns]
    if missing:
        raise PlannerError(f"{name}: missing column(s) {', '.join(missing)} (write it with"
                           " `python -m calibration.engine sweep` or calibration.vllm_io; need at least"
                           f" {', '.join(required)})")
    if df.empty:
        raise PlannerError(f"{name}: no measured rows")
    for col in (c for c in NUMERIC if c in df.columns):
        values = pd.to_numeric(df[col], errors="coerce")
        bad = values.isna() & df[col].notna() | ~np.isfinite(values.fillna(0.0))
        if col in MIN_COLUMNS:
            bad |= values.isna()
        if bad.any():
            row = int(np.flatnonzero(bad.to_numpy())[0]) + 2  # header is line 1
            raise PlannerError(f"{name}: column '{col}' line {row} holds {str(df[col].iloc[row - 2])[:40]!r},"
                               " not a finite number; fix or drop that row")
        df[col] = values
    for col, (lo, hi) in RANGES.items():
        if col in df.columns:
            bad = df[col].notna() & ~df[col].between(lo, hi)
            if bad.any():
                row = int(np.flatnonzero(bad.to_numpy())[0]) + 2
                raise PlannerError(f"{name}: column '{col}' line {row} holds {df[col].iloc[row - 2]:g}, outside"
                                   f" [{lo:g}, {hi:g}]; fix or drop that row")
    for col in ("batch_size", "k"):  # counts: a fraction is a typo or an average, not a run's setting
        bad = df[col] != df[col].round()
        if bad.any():
            row = int(np.flatnonzero(bad.to_numpy())[0]) + 2
            raise PlannerError(f"{name}: column '{col}' line {row} holds {df[col].iloc[row - 2]:g}, not a whole"
                               " number; fix or drop that row")
    bad = df[(df.batch_size < 1) | (df.k < 0) | ~(df.itl_ms > 0)]
    if len(bad):
        raise PlannerError(f"{name}: {len(bad)} row(s) with batch_size < 1, k < 0 or non-positive itl_ms")
    if (df.k > 32).any():
        raise PlannerError(f"{name}: k up to {int(df.k.max())}; the planner handles K <= 32")
    if (df.batch_size > 1e6).any():
        raise PlannerError(f"{name}: batch_size up to {df.batch_size.max():g}; the planner handles at most 65536")
    if "acceptance_length" in df:
        al = df.acceptance_length
        bad = al.notna() & ((al < 1) | (al > df.k + 1 + 1e-6))
        if bad.any():
            row = int(np.flatnonzero(bad.to_numpy())[0]) + 2
            raise PlannerError(f"{name}: line {row}: acceptance_length {al.iloc[row - 2]:g} outside [1, k+1]"
                               " (tokens committed per step); fix or drop that row")
    if "per_position_acceptance" in df:
        for i, cell in enumerate(df.per_position_acceptance):
            _check_rates_cell(cell, name, i + 2)
    df["batch_size"] = df["batch_size"].round().astype(int)
    df["k"] = df["k"].round().astype(int)
    return df


def _check_rates_cell(cell, name: str, line: int) -> None:
    """per_position_acceptance: empty, or a JSON list of conditional rates in [0, 1] (null: not reached)."""
    if cell is None or (isinstance(cell, float) and np.isnan(cell)) or (isinstance(cell, str) and not cell.strip()):
        return
    try:
        rates = json.loads(cell) if isinstance(cell, str) else None
    except (ValueError, RecursionError):  # ValueError: malformed, or an integer of over 4300 digits
        rates = None
    ok = isinstance(rates, list) and all(
        r is None or (isinstance(r, (int, float)) and not isinstance(r, bool) and 0 <= r <= 1) for r in rates)
    if not ok:
        raise PlannerError(f"{name}: line {line}: per_position_acceptance {str(cell)[:40]!r} is not a JSON list of"
                           " rates in [0, 1] such as [0.8, 0.6]; fix or drop that row")


def match(predicted: pd.DataFrame, measured: pd.DataFrame) -> pd.DataFrame:
    """Join predicted grid rows and measured rows (medians per cell) on (batch_size, k), with relative errors."""
    cols = [c for c in ("batch_size", "k", "itl_ms", "goodput_per_seq") if c in measured.columns]
    meas = measured[cols].groupby(["batch_size", "k"], as_index=False).median()
    if "goodput_per_seq" not in meas:
        meas["goodput_per_seq"] = np.nan
    pred = predicted[["batch_size", "k", "itl_ms", "goodput_per_seq"]]
    m = pred.merge(meas, on=["batch_size", "k"], suffixes=("_pred", "_meas"), how="inner")
    m["itl_err"] = m["itl_ms_pred"] / m["itl_ms_meas"] - 1
    m["goodput_err"] = m["goodput_per_seq_pred"] / m["goodput_per_seq_meas"] - 1
    return m


def mape(errors) -> float:
    """Mean absolute relative error (a fraction; NaN when there are none)."""
    e = pd.Series(errors, dtype=float).dropna()
    return float(np.abs(e).mean()) if len(e) else float("nan")
