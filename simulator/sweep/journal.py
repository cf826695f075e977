"""The journal: one JSON line per finished task, appended as results arrive; the resume record.

A line is ``{"key": ..., "index": ..., "rows": [...], "elapsed_s": ...}``, keyed by the task's stable
hash (:func:`simulator.sweep.spec.task_key`). Each line is written whole and flushed to disk before
the next result is taken, so a sweep killed at any moment loses at most the tasks still running;
a torn last line (killed mid-write) is ignored on reading and that task runs again. Keys not in the
current expansion are kept in the file and ignored, so editing the sweep file never loses results.

The journal is an input too (it may have been edited, or planted): it must be a regular file, not a
symlink, and is never appended to through one (O_NOFOLLOW). On resume every line is checked
(:func:`check_record`): a line that is not UTF-8 JSON, or whose rows do not belong to the task of its key,
is named by its line number and skipped, and its task runs again.
"""
from __future__ import annotations

import json
import math
import os
import stat
import warnings
from pathlib import Path

from simulator.errors import PlannerError, PlannerWarning
from simulator.files import read_input_bytes

JOURNAL = "journal.jsonl"
# row columns that are counts, loads, times or prices: a negative (or infinite) one was not computed here
NON_NEGATIVE = ("max_load_per_replica", "load_band_low", "load_band_high", "throughput_tok_s", "tok_s_per_gpu",
                "ttft_p99_s", "tpot_p50_s", "tpot_p99_s", "mean_batch_size", "mean_k", "replicas", "gpus", "gpus_low",
                "gpus_high", "price_per_gpu_hour_usd", "fleet_usd_per_hour", "usd_per_m_output_tokens",
                "usd_per_m_tokens_at_target", "energy_j_per_token_est", "elapsed_s", "cpu_s")


def _refuse_link(p: Path) -> None:
    if p.is_symlink():
        raise PlannerError(f"{p}: is a symlink; a sweep journal must be a regular file in the output directory"
                           " (remove the link, or choose another --output-dir)")


def read_journal(path: str | Path, tasks: dict | None = None) -> dict:
    """key -> record, for every whole line that passes :func:`check_record` (the last record of a key wins).
    ``tasks``: key -> the task it stands for (SweepTask), to check each record's rows against; a bad line
    is named in one warning and skipped (its task runs again)."""
    done, bad = {}, []
    p = Path(path)
    if not os.path.lexists(p):
        return done
    _refuse_link(p)
    lines = read_input_bytes(p, "journal").split(b"\n")
    for number, raw in enumerate(lines[:-1], start=1):  # the last piece has no newline: torn or empty
        if not raw.strip():
            continue
        try:
            rec = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError):
            bad.append((number, "not a UTF-8 JSON line"))
            continue
        why = check_record(rec, tasks)
        if why:
            bad.append((number, why))
            continue
        done[rec["key"]] = rec
    if bad:
        shown = "; ".join(f"line {n}: {why}" for n, why in bad[:3]) + (f"; and {len(bad) - 3} more" if len(bad) > 3 else "")
        warnings.warn(PlannerWarning(f"{p}: skipped {len(bad)} bad line(s), their tasks run again ({shown})"),
                      stacklevel=2)
    return done


def _plain_axis(value):
    return json.loads(json.dumps(value))


def check_record(rec, tasks: dict | None = None) -> str:
    """Why a journal record cannot be used ('' when it can): its shape, and, where its task is known, that
    every row is that task's (its key, its axes, one of its policies) with finite, non-negative numbers."""
    if not isinstance(rec, dict) or not isinstance(rec.get("key"), str):
        return "not a journal record (no 'key')"
    rows = rec.get("rows")
    if not isinstance(rows, list) or not rows or not all(isinstance(r, dict) for r in rows):
        return "'rows' must be a non-empty list of rows"
    task = (tasks or {}).get(rec["key"])
    for i, row in enumerate(rows):
        for col in NON_NEGATIVE:
            v = row.get(col)
            if v is None:
                continue
            if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0 or math.isinf(v):
                return f"rows[{i}].{col} must be a number >= 0"
        if task is None:
            continue
        if row.get("task") != rec["key"]:
            return f"rows[{i}].task is not the record's key"
        for axis, value in task.axes.items():
            if row.get(axis) != _plain_axis(value):
                return f"rows[{i}].{axis} is not the task's {axis}"
        if row.get("policy") not in tuple(task.policies) + ("-",):
            return f"rows[{i}].policy is not one of the task's policies"
    return ""


def encode(record: dict) -> str:
    """One line; key order kept (it is the table's column order), NaN written as NaN."""
    return json.dumps(record)


def roundtrip(record: dict) -> dict:
    """The record exactly as a later run reads it back from the journal."""
    return json.loads(encode(record))


def write_all(fd: int, data: bytes) -> None:
    """os.write until every byte is out (a write may take fewer)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


class Journal:
    """Append-only writer; the first append repairs a torn last line left by a killed run. Never follows a
    symlink; a full disk is one PlannerError naming the journal (finished lines stay)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._fd = None

    def _open(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        flags = os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
        try:
            fd = os.open(self.path, flags, 0o644)
        except OSError as err:
            if self.path.is_symlink():
                _refuse_link(self.path)
            raise PlannerError(f"{self.path}: cannot append to the sweep journal ({err.strerror or err})") from None
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            os.close(fd)
            raise PlannerError(f"{self.path}: is not a regular file; a sweep journal must be one")
        self._fd = fd
        if st.st_size > 0 and os.pread(fd, 1, st.st_size - 1) != b"\n":
            self._write(b"\n")  # the torn fragment becomes its own (unparseable, skipped) line

    def _write(self, data: bytes) -> None:
        try:
            write_all(self._fd, data)
            os.fsync(self._fd)
        except OSError as err:
            raise PlannerError(f"{self.path}: cannot append to the sweep journal ({err.strerror or err}); the tasks"
                               " already in it are kept: free space and rerun the same command to resume") from None

    def append(self, record: dict) -> None:
        if self._fd is None:
            self._open()
        self._write((encode(record) + "\n").encode())

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
