"""A hand-written deployment-fit file (calibration.fit_deployment's format) for tests: SmolLM2-135M with an
n-gram draft on this repository's CPU profile, fitted on B=1 K=0 and B=8 K=2."""
from __future__ import annotations

import copy
import json
from pathlib import Path

KERNEL_SCALE = {"kernel_scale": {"value": 1.1, "interval": [1.0, 1.2], "fitted": True}}


def cpu_fit_doc(model: str = "smollm2-135m", terms: dict | None = None) -> dict:
    return {"format": "dsd-planner-deployment-fit", "format_version": 1,
            "scenario": {"model": model, "hardware": "cpu-xeon-2c", "tp": 1, "engine": "ideal", "engine_version": "0",
                         "draft": "ngram"},
            "terms": copy.deepcopy(KERNEL_SCALE if terms is None else terms),  # tests edit their copy
            "acceptance": None, "uncertainty": {"step_time_rel": 0.05, "goodput_rel": 0.06},
            "points": [{"batch_size": 1, "k": 0}, {"batch_size": 8, "k": 2}]}


def write_fit(directory: Path, doc: dict) -> Path:
    path = Path(directory) / "fit.json"
    path.write_text(json.dumps(doc))
    return path
