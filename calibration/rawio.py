"""Raw microbenchmark samples: one CSV row per measured point, appended as it is taken.

A sidecar ``<raw>.meta.json`` records the device, dtype and versions. Rows are flushed one by one,
so a killed run loses at most the point in progress; a truncated last line is skipped on reading,
and a rerun with the same file skips the keys already present (resume).
"""
from __future__ import annotations

import csv
import json
import math
from pathlib import Path

from simulator.errors import PlannerError
from simulator.files import read_input_text

COLUMNS = [
    "key", "bench", "op", "family", "variant", "dtype", "device", "round",
    "M", "N", "K", "batch", "ctx", "q_len", "heads_q", "heads_kv", "head_dim", "experts", "tokens",
    "flops", "bytes", "n_kernels", "repeats", "median_s", "p25_s", "p75_s", "cv", "min_s", "rejected",
    "load", "unix_time",
]
_INT = {"round", "M", "N", "K", "batch", "ctx", "q_len", "heads_q", "heads_kv", "head_dim", "experts",
        "tokens", "n_kernels", "repeats", "rejected"}
_FLOAT = {"flops", "bytes", "median_s", "p25_s", "p75_s", "cv", "min_s", "load", "unix_time"}


_OPTIONAL = {"min_s", "rejected", "load"}  # columns added later; older files lack them


class CalibrationError(PlannerError):
    """Bad calibration input (unreadable raw file, device mismatch...): one line, exit code 2."""


def meta_path(raw: Path) -> Path:
    return Path(str(raw) + ".meta.json")


def read_meta(raw: str | Path) -> dict:
    p = meta_path(Path(raw))
    if not p.exists():
        return {}
    try:
        meta = json.loads(p.read_text())
    except (OSError, json.JSONDecodeError, UnicodeDecodeError, RecursionError) as err:
        raise CalibrationError(f"{p}: unreadable metadata ({str(err)[:120]})") from None
    if not isinstance(meta, dict):
        raise CalibrationError(f"{p}: metadata must be a JSON object; delete it and rerun `python -m calibration.run`")
    for key in ("hardware", "device_kind", "device_name", "dtype", "mode"):
        if key in meta and meta[key] is not None and not isinstance(meta[key], str):
            raise CalibrationError(f"{p}: '{key}' must be a string, got {meta[key]!r}")
    if "device" in meta and not isinstance(meta["device"], dict):
        raise CalibrationError(f"{p}: 'device' must be an object, got {meta['device']!r}")
    return meta


def read_raw(path: str | Path) -> list[dict]:
    """The complete rows of a raw sample file (typed), skipping a truncated or malformed row.

    A complete row whose numbers are negative or not finite (negative bytes, inf seconds) is refused
    with its line number: fitted, it would turn into efficiencies that predict nonsense.
    """
    path = Path(path)
    try:
        text = read_input_text(path, "raw sample")  # a regular file under its cap: never a FIFO or a device
    except PlannerError as err:
        raise CalibrationError(str(err)) from None
    lines = text.splitlines()
    if not lines:
        return []
    header = next(csv.reader([lines[0]]))
    if header[:3] != COLUMNS[:3] or not set(COLUMNS) - _OPTIONAL <= set(header):
        raise CalibrationError(f"{path}: not a calibration raw sample file (header {','.join(header[:4])}...);"
                               " write one with `python -m calibration.run`")
    rows = []
    # a row is complete only if its line ended with a newline (the last line may be cut by a kill)
    body = lines[1:] if text.endswith("\n") else lines[1:-1]
    for lineno, values in enumerate(csv.reader(body), 2):
        if len(values) != len(header):
            continue
        row = dict(zip(header, values))
        try:
            for k in _INT:
                row[k] = int(row[k]) if row.get(k, "") != "" else 0
            for k in _FLOAT:
                row[k] = float(row[k]) if row.get(k, "") != "" else 0.0
        except ValueError:
            continue
        bad = [k for k in sorted(_INT | _FLOAT) if not math.isfinite(row[k]) or row[k] < 0]
        if bad:
            raise CalibrationError(f"{path}: line {lineno}: {bad[0]} = {row[bad[0]]!r} (numbers must be finite and"
                                   " >= 0); delete that row, or remeasure with `python -m calibration.run`")
        if row["median_s"] <= 0:
            continue
        rows.append(row)
    return rows


class RawWriter:
    """Appends rows to a raw CSV (header written once), checking that a resumed file matches."""

    def __init__(self, path: str | Path, meta: dict):
        try:
            self._open(Path(path), meta)
        except OSError as err:
            raise CalibrationError(f"{path}: cannot write the raw sample file ({err.strerror or err});"
                                   " choose a writable --output-dir") from None

    def _open(self, path: Path, meta: dict) -> None:
        self.path = path
        self.path.parent.mkdir(parents=True, exist_ok=True)
        old = read_meta(self.path) if self.path.exists() else {}
        if old:
            for k in ("device_name", "device_kind", "dtype"):
                if old.get(k) != meta.get(k):
                    raise CalibrationError(
                        f"{self.path}: holds samples of {k} {old.get(k)!r}, this run is {meta.get(k)!r};"
                        " choose another --output-dir (samples of two devices never mix in one file)")
        self.done = {r["key"] for r in read_raw(self.path)} if self.path.exists() else set()
        if not self.path.exists() or self.path.stat().st_size == 0:
            self.path.write_text(",".join(COLUMNS) + "\n")
        else:
            text = self.path.read_text()
            if not text.endswith("\n"):  # drop a half-written last row from a killed run
                self.path.write_text(text[: text.rfind("\n") + 1])
        if not old:
            meta_path(self.path).write_text(json.dumps(meta, indent=1) + "\n")
        self._f = self.path.open("a", newline="")
        self._w = csv.DictWriter(self._f, fieldnames=COLUMNS, extrasaction="ignore")

    def write(self, row: dict) -> None:
        self._w.writerow({k: _fmt(row.get(k, "")) for k in COLUMNS})
        self._f.flush()
        self.done.add(row["key"])

    def close(self) -> None:
        self._f.close()


def _fmt(v):
    if isinstance(v, float):
        return f"{v:.6g}"
    return v
