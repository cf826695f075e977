"""``speculation_profile.json`` (NVIDIA Model-Optimizer schema 1.0) from the reference engine's runs.

    python -m calibration.engine profile --runs calibration/data/runs/smollm2-cpu-ngram.csv \
        --output speculation_profile.json

The runs' per-position rates (conditional) become ``conditional_accept_rates`` (step-weighted mean per
position over the runs, as :mod:`simulator.specs.acceptance_files` reads a runs CSV);
``marginal_accept_rates`` is their cumulative product (marginal[i] = P(at least i+1 drafts
accepted), Model-Optimizer PR #2247) and ``mean_accept_length`` = 1 + sum(marginal). The engine
records no acceptance-length histogram, so none is written; ``max_supported_k`` is left out (the
reference drafters have no architectural ceiling; Model-Optimizer leaves it unset when it cannot
observe one).
"""
from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path

import numpy as np

from simulator.errors import PlannerError
from simulator.specs.acceptance_files import read_acceptance_file

PRODUCER = "dsd-planner calibration.engine (torch reference engine)"


def _conditions(text: str, name: str) -> dict:
    rows = [r for r in csv.DictReader(io.StringIO(text)) if (r.get("per_position_acceptance") or "[]").strip() != "[]"]
    steps = sum(float(r["n_steps"]) for r in rows if _finite(r.get("n_steps")))
    pick = lambda key: ", ".join(sorted({r.get(key) or "" for r in rows} - {""}))  # noqa: E731
    return {"target": pick("target"), "draft": pick("draft"), "device": pick("device"), "dtype": pick("dtype"),
            "runs": len(rows), "verify_steps": int(steps), "source_file": name,
            "rates": "step-weighted mean per draft position over the runs (positions given as conditional)"}


def _finite(x) -> bool:
    try:
        return math.isfinite(float(x))
    except (TypeError, ValueError):
        return False


def speculation_profile(runs: str | Path) -> dict:
    """The profile dict of a measured-runs CSV (one target/draft pair)."""
    got = read_acceptance_file(runs, flag="--runs")
    if got.kind != "measured-rows CSV":
        raise PlannerError(f"--runs {runs}: a {got.kind}, not a measured-runs CSV (python -m calibration.engine sweep)")
    cond = [round(float(a), 6) for a in got.conditional]
    marg = [round(float(m), 6) for m in np.cumprod(cond)]
    conditions = _conditions(Path(runs).read_text(), Path(runs).name)
    return {"schema_version": "1.0", "measured": True, "producer": PRODUCER,
            "method": conditions["draft"].split(":")[0] or None, "num_speculative_tokens": len(cond),
            "conditional_accept_rates": cond, "marginal_accept_rates": marg,
            "mean_accept_length": round(1 + sum(marg), 6), "accept_length_model": "chain_analytic",
            "measurement_conditions": conditions}


def write_profile(runs: str | Path, output: str | Path) -> Path:
    from simulator.files import write_atomically
    text = json.dumps(speculation_profile(runs), indent=2) + "\n"
    write_atomically(output, text)
    return Path(output)
