"""Same sizing answer before and after a change: diff two `simulator.size --format json` outputs.

    python -m simulator.size --scenario sizing-dense-command-a --output-dir before/ --format json  # old code
    python -m simulator.size --scenario sizing-dense-command-a --output-dir after/ --format json   # new code
    python benchmarks/sizing_equivalence.py before/ after/      # exit 1 when a capacity or the pick differs

Compared exactly (floats equal, not close): every candidate's capacity per (hardware, tp, dtype, policy)
with the figures measured there, the recommendation, the ranking, the sensitivity table and the headline.
Other differences (texts of rejections, say) are listed but do not fail the check.

Last use: the load search's exact early stop and shared K* tables (serving/early_stop.py) against the code
before them: dense 69 and MoE 45 capacities identical, only two floor rejections' text differs (now
labelled as bounds); dense sizing 388,012 -> 268,038 engine steps, 23.1 -> 18.8 s wall (median of 3, paired).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

STRICT = ("capacity", "recommendation", "ranked", "sensitivity", "message")
LOOSE_FIELDS = ("reason",)  # why a candidate meets no load: its text may say more (a bound, say)


def _capacity(d: dict) -> dict:
    return {(r["hardware"], r["tp"], r["dtype"], r["policy"]): r for r in d.get("capacity", [])}


def compare(a: dict, b: dict) -> tuple[list[str], list[str]]:
    """(strict differences, other differences) between two sizing JSON documents."""
    strict, other = [], []
    ca, cb = _capacity(a), _capacity(b)
    for key in sorted(set(ca) | set(cb), key=str):
        ra, rb = ca.get(key), cb.get(key)
        if ra is not None and rb is not None and any(ra.get(f) != rb.get(f) for f in LOOSE_FIELDS):
            other.append(f"capacity {key} reason")
            ra, rb = ({k: v for k, v in r.items() if k not in LOOSE_FIELDS} for r in (ra, rb))
        if ra != rb:
            la = None if ra is None else ra["max_load_per_replica"]
            lb = None if rb is None else rb["max_load_per_replica"]
            strict.append(f"capacity {key}: {la} -> {lb}" + ("" if la != lb else " (other fields differ)"))
    for k in STRICT[1:]:
        if a.get(k) != b.get(k):
            strict.append(f"{k} differs")
    for k in sorted(set(a) | set(b)):
        if k not in STRICT and a.get(k) != b.get(k):
            other.append(f"{k} differs")
    return strict, other


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[0] + "\nusage: sizing_equivalence.py BEFORE_DIR AFTER_DIR", file=sys.stderr)
        return 2
    before, after = map(Path, argv)
    failed = False
    for path in sorted(before.glob("*.json")):
        if not (after / path.name).exists():
            print(f"{path.stem}: missing in {after}")
            failed = True
            continue
        a, b = json.loads(path.read_text()), json.loads((after / path.name).read_text())
        strict, other = compare(a, b)
        n = len(_capacity(a))
        print(f"{path.stem}: {n} capacities, {'identical' if not strict else f'{len(strict)} DIFFER'}"
              + (f"; also differ (not checked): {', '.join(other)}" if other else ""))
        for line in strict:
            print("   ", line)
        failed |= bool(strict)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
