"""Flat overrides (CLI flags, API keywords, sweep axes) applied to a scenario's TOML-layout dict."""
from __future__ import annotations

import copy

import numpy as np

from simulator.errors import PlannerError
from simulator.specs.acceptance import parse_acceptance
from simulator.specs.acceptance_files import is_acceptance_path
from simulator.specs.scenario_sections import ACCEPTANCE_GIVEN
from simulator.specs.settings import OVERRIDE_KEYS


def _draft_method_of(table: dict) -> str:
    return table.get("method", "eagle") + (f":{table['model']}" if table.get("model") else "")


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
            for old in ("rate", "rates", "preset", "file", "rank_tail"):
                table.pop(old, None)
            if is_acceptance_path(value):
                table["file"] = str(value)
                table.pop("source", None)
                continue
            acc = parse_acceptance(value)
            table["rates"] = list(acc.rates)
            if acc.rank_tail is not None:  # a tree's top-1 rates keep their rank tail (specs.tree_acceptance)
                table["rank_tail"] = acc.rank_tail
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
                for key in ("rate", "rates", "source", "preset", "file", "rank_tail"):
                    acc.pop(key, None)
        elif name == "acceptance_preset":
            for key in ("rate", "rates", "file", "rank_tail"):
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
