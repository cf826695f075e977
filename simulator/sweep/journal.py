"""The journal: one JSON line per finished task, appended as results arrive; the resume record.

A line is ``{"key": ..., "index": ..., "rows": [...], "elapsed_s": ...}``, keyed by the task's stable
hash (:func:`simulator.sweep.spec.task_key`). Each line is written whole and flushed to disk before
the next result is taken, so a sweep killed at any moment loses at most the tasks still running;
a torn last line (killed mid-write) is ignored on reading and that task runs again. Keys not in the
current expansion are kept in the file and ignored, so editing the sweep file never loses results.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

JOURNAL = "journal.jsonl"


def read_journal(path: str | Path) -> dict:
    """key -> record, for every whole line (the last record of a key wins)."""
    done = {}
    p = Path(path)
    if not p.exists():
        return done
    with p.open("r", encoding="utf-8") as f:
        for line in f:
            if not line.endswith("\n"):
                break  # torn last line
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(rec, dict) and isinstance(rec.get("key"), str) and isinstance(rec.get("rows"), list):
                done[rec["key"]] = rec
    return done


def encode(record: dict) -> str:
    """One line; key order kept (it is the table's column order), NaN written as NaN."""
    return json.dumps(record)


def roundtrip(record: dict) -> dict:
    """The record exactly as a later run reads it back from the journal."""
    return json.loads(encode(record))


class Journal:
    """Append-only writer; the first append repairs a torn last line left by a killed run."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._f = None

    def append(self, record: dict) -> None:
        if self._f is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            torn = self.path.exists() and self.path.stat().st_size > 0 and not self.path.read_bytes().endswith(b"\n")
            self._f = self.path.open("a", encoding="utf-8")
            if torn:
                self._f.write("\n")  # the torn fragment becomes its own (unparseable, skipped) line
        self._f.write(encode(record) + "\n")
        self._f.flush()
        os.fsync(self._f.fileno())

    def close(self) -> None:
        if self._f is not None:
            self._f.close()
            self._f = None
