"""Flat overrides (CLI flags, API keywords, sweep axes) applied to a scenario's TOML-layout dict."""
from __future__ import annotations

import copy

import numpy as np

from simulator.errors import PlannerError
from simulator.specs.acceptance import parse_acceptance
from simulator.specs.acceptance_files import is_acceptance_path
from simulator.specs.scenario_sections import ACCEPTANCE_GIVEN


def _draft_method_of(table: dict) -> str:
    return table.get("method", "eagle") + (f":{table['model']}" if table.get("model") else "")


# Flat override names (CLI flags, API keywords) -> (section, key)
OVERRIDE_KEYS = {
    "model": ("model", "name"), "hardware": ("hardware", "name"), "tp": ("hardware", "tp"), "ep": ("hardware", "ep"),
    "draft": ("draft", "method"), "acceptance": ("acceptance", None), "context_len": ("workload", "context_len"),
    "batch_sizes": ("workload", "batch_sizes"), "k_max": ("workload", "k_max"), "fixed_k": ("workload", "fixed_k"),
    "dtype": ("precision", "weights"), "weight_dtype": ("precision", "weights"),
    "act_dtype": ("precision", "activations"), "kv_dtype": ("precision", "kv_cache"),
    "calibration": ("calibration", "profile"), "memory_utilization": ("workload", "memory_utilization"),
    "routing_skew": ("routing", "skew"), "acceptance_source": ("acceptance", "source"),
    "layout": ("hardware", "layout"), "dp": ("hardware", "dp"), "routing_reuse": ("routing", "reuse"),
    "engine": ("engine", "name"), "engine_version": ("engine", "version"),
    "max_capture_size": ("engine", "max_capture_size"),
    "max_num_seqs": ("serving", "max_num_seqs"), "max_num_batched_tokens": ("serving", "max_num_batched_tokens"),
    "context_lens": ("workload", "context_lens"), "schedule_tolerance": ("workload", "schedule_tolerance"),
    "acceptance_preset": ("acceptance", "preset"), "acceptance_band": ("acceptance", "band"),
    "temperature": ("workload", "temperature"), "top_p": ("workload", "top_p"),
    "draft_checkpoint": ("draft", "checkpoint"),
    "peak_bf16_flops_per_s": ("hardware", "peak_bf16_flops_per_s"),
    "allow_long_context": ("workload", "allow_context_beyond_model"),
    "hbm_bandwidth_bytes_per_s": ("hardware", "hbm_bandwidth_bytes_per_s"),
    "allreduce_busbw": ("hardware", "interconnect_bandwidth_bytes_per_s"),  # your nccl-tests busbw, bytes/s
    "deployment": ("calibration", "deployment"),  # python -m calibration.fit_deployment's file
    "engine_terms": ("calibration", "engine_terms"),  # False: the profile's microbenchmarks alone (validation)
}


def apply_overrides(raw: dict, overrides: dict) -> dict:
    """Flat overrides (None = keep the scenario's value) applied to a TOML-layout dict."""
    raw = copy.deepcopy(raw)
    for name, value in overrides.items():
        if value is None:
            continue
        if name not in OVERRIDE_KEYS:
            raise PlannerError(f"unknown setting '{name}' (known: {', '.join(sorted(OVERRIDE_KEYS))})")
        section, key = OVERRIDE_KEYS[name]
        table = raw.setdefault(section, {})
        if name in ("acceptance", "acceptance_preset"):
            raw[ACCEPTANCE_GIVEN] = True
        if name == "acceptance":
            for old in ("rate", "rates", "preset", "file"):
                table.pop(old, None)
            if is_acceptance_path(value):
                table["file"] = str(value)
                table.pop("source", None)
                continue
            acc = parse_acceptance(value)
            table["rates"] = list(acc.rates)
            table["source"] = overrides.get("acceptance_source") or "given as an override"
        elif name == "draft":
            text = str(value)
            before = _draft_method_of(table)
            table.pop("model", None)
            if overrides.get("draft_checkpoint") is None:
                table.pop("checkpoint", None)  # a new draft method's checkpoint is not the old one's
            if text.startswith("model:"):
                table["method"], table["model"] = "model", text.split(":", 1)[1]
            else:
                table["method"] = text
            # a new draft method brings its own acceptance preset (and source) unless rates are given
            if _draft_method_of(table) != before and overrides.get("acceptance") is None \
                    and overrides.get("acceptance_preset") is None:
                acc = raw.setdefault("acceptance", {})
                for key in ("rate", "rates", "source", "preset", "file"):
                    acc.pop(key, None)
        elif name == "acceptance_preset":
            for key in ("rate", "rates", "file"):
                table.pop(key, None)
            table["preset"] = str(value)
            if overrides.get("acceptance_source") is None:
                table.pop("source", None)
        elif name == "acceptance_source":
            table["source"] = str(value)
        elif name == "routing_skew":
            table["kind"], table["skew"] = "zipf", float(value)
        elif name in ("batch_sizes", "context_lens") and isinstance(value, np.ndarray):
            table[key] = [int(x) for x in value]
        else:
            table[key] = value
    return raw
