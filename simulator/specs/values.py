"""Checking and parsing the values of scenario files and flags: table schemas (unknown keys, wrong
types, NaN / infinity), batch-size lists and ranges, context-length lists and ranges. Every refusal is
one line naming the file or flag, the key and what it expects.
"""
from __future__ import annotations

import re

import numpy as np

from simulator.errors import PlannerError

NUM = (int, float)


STR_OR_LIST = (str, list)


TYPE_NAMES = {str: "a string", int: "an integer", list: "a list", NUM: "a number", STR_OR_LIST: "a string or a list",
              bool: "true or false", dict: "a table"}


def check_table(table: dict, schema: dict, origin: str, section: str) -> None:
    """Reject unknown keys and wrong types, naming file, key and expected type."""
    where = f"[{section}]" if section else "top level"
    for key, value in table.items():
        if key not in schema:
            raise PlannerError(f"{origin}: unknown key '{key}' in {where} (known: {', '.join(sorted(schema))})")
        expected = schema[key]
        ok = isinstance(value, expected) and not (isinstance(value, bool) and expected is not bool)
        if expected is NUM and isinstance(value, bool):
            ok = False
        label = f"{section}.{key}" if section else key
        if not ok:
            raise PlannerError(f"{origin}: key '{label}' must be {TYPE_NAMES.get(expected, expected)},"
                               f" got {type(value).__name__} {value!r}")
        check_finite(value, origin, label)


def check_finite(value, origin: str, label: str) -> None:
    """NaN and infinity (TOML spells them nan / inf) are never a sensible setting: refuse them, in lists too."""
    items = value if isinstance(value, list) else [value]
    for item in items:
        if isinstance(item, float) and not np.isfinite(item):
            raise PlannerError(f"{origin}: key '{label}' is {item!r}; give a finite number")


BATCH_SIZE_MAX = 65536


def parse_batch_sizes(value) -> np.ndarray:
    """'1-512' (every integer), '1,2,4,8', '1-8,16,32', '1-64:pow2' (the powers of two inside the range
    plus both ends: 1,2,4,...,64) or a list of ints -> sorted unique array (each >= 1)."""
    if isinstance(value, (list, tuple, np.ndarray)):
        items = list(value)
        if not all(isinstance(x, (int, np.integer)) and not isinstance(x, bool) for x in items):
            raise PlannerError(f"batch sizes {value!r}: expected integers")
        sizes = [int(x) for x in items]
    else:
        sizes = []
        for part in str(value).split(","):
            part = part.strip()
            if not part:
                continue
            match = re.fullmatch(r"(-?\d{1,12})\s*-\s*(-?\d{1,12})(\s*:\s*pow2)?", part)
            if match:
                lo, hi = int(match.group(1)), int(match.group(2))
                if hi < lo:
                    raise PlannerError(f"batch sizes '{part}': range end below its start")
                if lo < 1:  # both checked before the range is expanded
                    raise PlannerError(f"batch size {lo} < 1: batch sizes count sequences, the smallest is 1")
                if hi > BATCH_SIZE_MAX:
                    raise PlannerError(f"batch sizes '{part}': batch size {hi} > {BATCH_SIZE_MAX}: out of range")
                sizes += ([lo, hi] + [2 ** i for i in range(hi.bit_length()) if lo <= 2 ** i <= hi]
                          if match.group(3) else list(range(lo, hi + 1)))
            elif re.fullmatch(r"-?\d{1,12}", part):
                sizes.append(int(part))
            elif re.fullmatch(r"-?\d+(\s*-\s*-?\d+)?", part):
                raise PlannerError(f"batch sizes '{part}': a number with more than 12 digits; each batch size"
                                   f" must lie in 1-{BATCH_SIZE_MAX}")
            else:
                raise PlannerError(f"batch sizes '{value}': expected '1-256', '1,2,4,8' or '1-256:pow2'")
    if not sizes:
        raise PlannerError("batch sizes: none given")
    if min(sizes) < 1:
        raise PlannerError(f"batch size {min(sizes)} < 1: batch sizes count sequences, the smallest is 1")
    if max(sizes) > BATCH_SIZE_MAX:
        raise PlannerError(f"batch size {max(sizes)} > {BATCH_SIZE_MAX}: out of range")
    return np.unique(np.asarray(sizes, dtype=int))


def parse_context_lens(value, where: str = "--context-lens") -> np.ndarray:
    """'512,2048,8192' or a list -> those; 'A-B' -> powers of two from A to B (A and B included);
    'A-B:n' -> n points spaced evenly in log L, rounded. Sorted, unique, each >= 1."""
    if isinstance(value, (list, tuple, np.ndarray)):
        if not all(isinstance(x, (int, np.integer)) and not isinstance(x, bool) for x in value):
            raise PlannerError(f"{where} {list(value)!r}: expected integers (tokens)")
        lens = [int(x) for x in value]
    else:
        lens = []
        for part in str(value).replace(" ", "").split(","):
            if not part:
                continue
            m = re.fullmatch(r"(\d+)-(\d+)(?::(\d+))?", part)
            if m:
                lo, hi = int(m.group(1)), int(m.group(2))
                if hi < lo or lo < 1:
                    raise PlannerError(f"{where} '{part}': expected LO-HI with 1 <= LO <= HI")
                if m.group(3):
                    n = int(m.group(3))
                    if not 1 <= n <= 256:
                        raise PlannerError(f"{where} '{part}': the point count must be 1..256")
                    lens += [int(round(x)) for x in np.geomspace(lo, hi, n)]
                else:
                    p = 1 << int(np.ceil(np.log2(lo)))
                    lens += [lo] + [q for q in (p << i for i in range(64)) if q < hi] + [hi]
            elif part.isdigit():
                lens.append(int(part))
            else:
                raise PlannerError(f"{where} '{value}': expected '512,2048,8192', '512-131072' (powers of two)"
                                   " or '512-131072:16' (16 log-spaced points)")
    if not lens:
        raise PlannerError(f"{where}: none given")
    if min(lens) < 1:
        raise PlannerError(f"{where}: context length {min(lens)} < 1 (tokens already in the KV cache)")
    if len(set(lens)) > 256:
        raise PlannerError(f"{where}: {len(set(lens))} context lengths; at most 256")
    return np.unique(np.asarray(lens, dtype=int))

