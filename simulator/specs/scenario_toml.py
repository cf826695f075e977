"""A scenario written back as a commented TOML file (``--save-scenario FILE`` of every command): what the
command ran, flags included, in the layout :func:`simulator.specs.scenario.load_scenario` reads, so the saved
file loads back and gives the same answer.

Only the scenario's own tables are written (the markers the loader keeps beside them are not); a relative
path that names a file beside the scenario it came from is written absolute, so the file may live anywhere.
"""
from __future__ import annotations

import json
import math
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from simulator.errors import PlannerError

# one line above each section: what it holds (scenarios/template.toml documents every key)
SECTION_NOTES = {
    "model": "the target model: a catalog name (python -m simulator.catalog models) or a config.json path",
    "hardware": "the accelerator and the tensor / expert parallel degrees of one replica",
    "precision": "weights, activations and KV cache dtypes",
    "draft": "the speculative method (eagle, eagle3, mtp, ngram, model) and its draft model",
    "acceptance": "per-position acceptance rates a_1, a_2, ... (or a preset, or a measured file) and their source",
    "workload": "the K* grid: context length, batch sizes, largest K, the fixed K compared against",
    "engine": "the serving engine and release whose host time and CUDA graphs the step times include",
    "calibration": "what the kernel times rest on: a calibration profile, a deployment fit",
    "routing": "MoE: how tokens pick experts (reuse across the K+1 verified tokens, skew)",
    "serving": "the serving engine's limits (running requests, batched tokens)",
    "traffic": "the load: arrivals, rate (requests/s) or concurrency, prompt and output lengths (tokens)",
    "slo": "latency targets in seconds (ttft_p99_s, tpot_p50_s, ...): sizing meets every one",
    "sizing": "what sizing searches: candidate GPUs, TP degrees, precisions, policies, prices, headroom",
    "validation": "measured end-to-end points the report compares against",
}
_MARKERS = ("_base_dir", "_path", "_acceptance_given")


def _plain(value):
    """numpy scalars and arrays as Python values."""
    if isinstance(value, np.ndarray):
        return [_plain(v) for v in value.tolist()]
    if isinstance(value, np.generic):
        return value.item()
    return value


def _absolute(value, base_dir: str | None):
    """A relative path naming an existing file beside the original scenario (or, for a flag, in the working
    directory), made absolute; anything else (catalog names, dtypes) unchanged."""
    if not isinstance(value, str) or not value or Path(value).is_absolute() or not ("/" in value or "." in value):
        return value
    for base in ([Path(base_dir)] if base_dir else []) + [Path.cwd()]:
        candidate = base / value
        if candidate.is_file():
            return str(candidate.resolve())
    return value


def toml_value(value, base_dir: str | None = None) -> str:
    """One TOML value: string, boolean, number, array or inline table."""
    value = _plain(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        return json.dumps(_absolute(value, base_dir), ensure_ascii=False)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(toml_value(v, base_dir) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_key(k)} = {toml_value(v, base_dir)}" for k, v in value.items()) + "}"
    raise PlannerError(f"cannot write {type(value).__name__} value {value!r} into a scenario TOML")


def _key(key: str) -> str:
    return key if key.replace("_", "").replace("-", "").isalnum() else json.dumps(key)


def scenario_toml(raw: dict, command: str) -> str:
    """The scenario's TOML text with a header (the command that ran it, how to load it) and one comment per
    section."""
    base_dir = raw.get("_base_dir")
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = [f"# Scenario saved by: {command}", f"# on {stamp}. Load it with --scenario FILE (a sweep: python -m simulator.sweep FILE);"
             " flags given with it override its values.", ""]
    top = {k: v for k, v in raw.items() if not isinstance(v, dict) and k not in _MARKERS}
    lines += [f"{_key(k)} = {toml_value(v, base_dir)}" for k, v in top.items()]
    for section, table in raw.items():
        if not isinstance(table, dict) or section in _MARKERS or not table:
            continue
        lines += [""] + ([f"# {SECTION_NOTES[section]}"] if section in SECTION_NOTES else []) + [f"[{section}]"]
        lines += [f"{_key(k)} = {toml_value(v, base_dir)}" for k, v in table.items() if v is not None]
    return "\n".join(lines) + "\n"
