"""A hardware file's fields, checked: required keys and types, datasheet figures finite and of a plausible
size, the optional [scale_out] and [published] tables (ground floor: what :func:`simulator.specs.hardware.
hardware_from_dict` reads, kept apart from the device model it builds)."""
from __future__ import annotations

import numpy as np

from simulator.errors import PlannerError

REQUIRED = {
    "name": str, "peak_bf16_flops_per_s": (int, float), "hbm_bandwidth_bytes_per_s": (int, float),
    "memory_bytes": (int, float),
}
# Optional figures: each, when given, must be a finite number > 0 (latency and launch overhead may be 0).
POSITIVE = ("peak_fp8_flops_per_s", "peak_fp32_flops_per_s", "peak_fp4_flops_per_s",
            "interconnect_bandwidth_bytes_per_s", "tdp_w", "price_per_gpu_hour_usd")
NON_NEGATIVE = ("interconnect_latency_s", "launch_overhead_s")
STRINGS = ("name", "display_name", "vendor", "kind", "interconnect", "source")


def is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


# where a rate or a size of a device can lie: 1e-300 B/s or 1e308 FLOP/s is a typo or a wrong unit (and
# overflows every step time); the catalog spans 1e10-2e16 per second and 2e10-3e11 bytes
PLAUSIBLE = {"_per_s": (1e6, 1e18), "_bytes": (1e6, 1e15)}


def check_plausible(key: str, value: float, origin: str) -> None:
    for suffix, (low, high) in PLAUSIBLE.items():
        if key.endswith(suffix) and not low <= value <= high:
            unit = "bytes" if suffix == "_bytes" else "per second"
            raise PlannerError(f"{origin}: '{key}' = {value:g} is outside [{low:g}, {high:g}]; check its unit"
                               f" ({unit}) and its power of ten")


def check_required(data, origin: str) -> None:
    """A table with the required keys (:data:`REQUIRED`), each of its type."""
    if not isinstance(data, dict):
        raise PlannerError(f"{origin}: expected a table of hardware figures")
    for key, kind in REQUIRED.items():
        if key not in data:
            raise PlannerError(f"{origin}: missing key '{key}'")
        if not isinstance(data[key], kind) or isinstance(data[key], bool):
            raise PlannerError(f"{origin}: key '{key}' must be {getattr(kind, '__name__', 'a number')}")


def check_figures(data: dict, assumed: dict, origin: str) -> None:
    """Labels are strings; the datasheet figures (here or under [assumed]) finite, > 0 (latency and launch
    overhead >= 0) and of a plausible size (:data:`PLAUSIBLE`)."""
    for key in STRINGS:
        if key in data and not isinstance(data[key], str):
            raise PlannerError(f"{origin}: key '{key}' must be a string, got {data[key]!r}")
    if not data["name"].strip():  # else every output reads "on 1 x ," and "'s hardware file"
        raise PlannerError(f"{origin}: key 'name' is empty; give the device a name, e.g. name = \"my-gpu\"")
    for key in ("peak_bf16_flops_per_s", "hbm_bandwidth_bytes_per_s", "memory_bytes"):
        if not np.isfinite(data[key]) or data[key] <= 0:
            raise PlannerError(f"{origin}: '{key}' must be a finite number > 0, got {data[key]}")
        check_plausible(key, data[key], origin)
    for table in (data, assumed):
        for key in POSITIVE + NON_NEGATIVE:
            if key not in table or table[key] is None:
                continue
            value, low = table[key], (0 if key in NON_NEGATIVE else None)
            if not is_number(value) or not np.isfinite(value) or (value < 0 if low == 0 else value <= 0):
                bound = ">= 0" if low == 0 else "> 0"
                raise PlannerError(f"{origin}: '{key}' must be a finite number {bound}, got {value!r}")
            check_plausible(key, value, origin)


def positive_int(data: dict, key: str, origin: str) -> int | None:
    value = data.get(key)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise PlannerError(f"{origin}: '{key}' must be a positive integer, got {value!r}")
    return value


SCALE_OUT_KEYS = {"fabric": str, "bandwidth_bytes_per_s": float, "latency_s": float, "source": str}


def scale_out_table(table, origin: str) -> dict:
    """[scale_out]: all four keys (numbers finite, bandwidth > 0, latency >= 0), or none."""
    if not isinstance(table, dict):
        raise PlannerError(f"{origin}: [scale_out] must be a table")
    if not table:
        return {}
    unknown = set(table) - set(SCALE_OUT_KEYS)
    missing = set(SCALE_OUT_KEYS) - set(table)
    if unknown or missing:
        raise PlannerError(f"{origin}: [scale_out] needs exactly {', '.join(SCALE_OUT_KEYS)}"
                           + (f"; unknown: {', '.join(sorted(unknown))}" if unknown else "")
                           + (f"; missing: {', '.join(sorted(missing))}" if missing else ""))
    out = {}
    for key, kind in SCALE_OUT_KEYS.items():
        value = table[key]
        if kind is str:
            if not isinstance(value, str):
                raise PlannerError(f"{origin}: [scale_out] {key} must be a string, got {value!r}")
            out[key] = value
            continue
        if not is_number(value) or not np.isfinite(value) or value < 0 or (key.startswith("band") and value == 0):
            raise PlannerError(f"{origin}: [scale_out] {key} must be a finite number"
                               f" {'> 0' if key.startswith('band') else '>= 0'}, got {value!r}")
        out[key] = float(value)
    return out


def published_table(table, origin: str) -> dict:
    """[published] figures: positive numbers, each key with a *_source string beside it."""
    if not isinstance(table, dict):
        raise PlannerError(f"{origin}: [published] must be a table")
    out = {}
    for key, value in table.items():
        if key.endswith("_source"):
            out[key] = str(value)
        elif not isinstance(value, (int, float)) or isinstance(value, bool) or not value > 0 or value == float("inf"):
            raise PlannerError(f"{origin}: [published] {key} must be a positive finite number, got {value!r}")
        else:
            out[key] = float(value)
    return out
