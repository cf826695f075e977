"""Bit-identical check of the serving simulation: a fingerprint of simulate() over fixed cases.

    python benchmarks/serving_equivalence.py --write fp.json     # record (e.g. on the code before a change)
    python benchmarks/serving_equivalence.py --check fp.json     # compare: exit 1 on any difference

A fingerprint per case: the summary dict (floats as exact repr), a hash of the steps and requests
tables (pd.util.hash_pandas_object) and a sha256 of every column's raw bytes (dtype included). Floats must be equal,
not approximately equal: a speed-up of the loop must not change any result.
Cases cover every policy, open and closed loops, waves, chunked and whole prefill, KV-pressure
preemption, a category mix, a dense, a small and an MoE scenario.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

from simulator import serving as sv
from simulator.specs.scenario import load_scenario

REPO = Path(__file__).resolve().parents[1]
CMD_A, LLAMA, QWEN = "command-a-h100", "llama-3.1-8b-h100", "qwen3-235b-h200"
POLICIES = ("plain", "fixed", "fixed:5", "dsd", "dsd-adaptive", "per-request", "cutoff")
MIX = ({"name": "math", "weight": 2, "rate_scale": 1.1}, {"name": "code", "weight": 1, "rates": [0.3, 0.2]},
       {"name": "chat", "weight": 1, "rate_scale": 0.7})


def _cases():
    """(name, scenario, overrides, policy, workload, engine, seed)."""
    poisson = dict(arrival="poisson", rate_per_s=120.0, n_requests=500, max_num_seqs=64,
                   prompt_len={"dist": "lognormal", "median": 400, "sigma": 0.8, "max": 3000},
                   output_len={"dist": "lognormal", "median": 80, "sigma": 0.7, "max": 600})
    closed = dict(arrival="closed", concurrency=24, think_time_s=0.05, n_requests=200, max_num_seqs=32,
                  prompt_len={"dist": "uniform", "low": 20, "high": 1200},
                  output_len={"dist": "pareto", "scale": 20, "alpha": 1.3, "max": 500})
    bursty = dict(arrival="bursty", rate_per_s=40.0, n_requests=200, max_num_seqs=32,
                  prompt_len={"dist": "uniform", "low": 20, "high": 800},
                  output_len={"dist": "pareto", "scale": 20, "alpha": 1.2, "max": 400}, categories=MIX)
    for p in POLICIES:
        yield f"cmda-poisson-{p}", CMD_A, {}, p, sv.Workload(**poisson), None, 0
        yield f"llama-closed-{p}", LLAMA, {}, p, sv.Workload(**closed), None, 1
        yield f"llama-bursty-mix-{p}", LLAMA, {}, p, sv.Workload(**bursty), None, 3
        yield f"qwen-waves-{p}", QWEN, {}, p, sv.Workload.waves(16, 4, prompt_len=900, output_len=150), None, 2
        yield (f"llama-whole-{p}", LLAMA, {}, p, sv.Workload(**poisson),
               sv.EngineConfig(max_num_batched_tokens=2048, prefill="whole"), 4)
    for p in POLICIES:  # KV pressure: a small cache preempts
        yield (f"llama-kv-pressure-{p}", LLAMA, {"memory_utilization": 0.3}, p,
               sv.Workload(arrival="waves", concurrency=64, n_requests=128, max_num_seqs=64, prompt_len=1500,
                           output_len=600), None, 0)
    yield (f"cmda-eager-small-graphs-dsd", CMD_A, {}, "dsd", sv.Workload(**closed),
           sv.EngineConfig(cuda_graph_sizes=(1, 2, 4, 8, 16), max_num_batched_tokens=1024), 5)
    yield (f"llama-nographs-chunk-dsd-adaptive", LLAMA, {}, "dsd-adaptive", sv.Workload(**bursty),
           sv.EngineConfig(cuda_graphs=False, max_num_batched_tokens=256, block_size=32), 6)
    bench = dict(arrival="poisson", rate_per_s=200.0, n_requests=1500, max_num_seqs=256,  # bench_serving's, shorter
                 prompt_len={"dist": "lognormal", "median": 500, "sigma": 0.8, "max": 4000},
                 output_len={"dist": "lognormal", "median": 90, "sigma": 0.7, "max": 2000})
    for p in ("plain", "dsd", "per-request", "dsd-adaptive"):
        yield f"cmda-bench-{p}", CMD_A, {}, p, sv.Workload(**bench), None, 0
    yield f"cmda-waves-default-dsd", CMD_A, {}, "dsd", sv.Workload.waves(64, 3, prompt_len=1800, output_len=400), None, 0


def _exact(v) -> str:
    """The exact value: numpy scalars as the Python scalar they equal (np.float64(x) and x are the same
    number; which of the two a summary entry is depends on incidental int64 arithmetic)."""
    return repr(v.item() if isinstance(v, np.generic) else v)


def _col_digest(s: pd.Series) -> str:
    v = s.to_numpy()
    data = v.tobytes() if v.dtype != object else "\x00".join(map(repr, v.tolist())).encode()
    return hashlib.sha256(str(v.dtype).encode() + data).hexdigest()[:16]


def _frame(df: pd.DataFrame) -> dict:
    return {"rows": len(df), "hash": int(pd.util.hash_pandas_object(df).sum()),
            "columns": {c: _col_digest(df[c]) for c in df.columns}}


def fingerprint(only: str | None = None) -> dict:
    scenarios, out = {}, {}
    for name, scn, over, policy, wl, eng, seed in _cases():
        if only and only not in name:
            continue
        key = (scn, tuple(sorted(over.items())))
        if key not in scenarios:
            sc = load_scenario(REPO / "scenarios" / f"{scn}.toml")
            scenarios[key] = sc.with_overrides(**over) if over else sc
        t0 = time.perf_counter()
        res = sv.simulate(scenarios[key], policy, workload=wl, seed=seed, engine=eng)
        dt = time.perf_counter() - t0
        out[name] = {"summary": {k: _exact(v) for k, v in res.summary.items()},
                     "kv_capacity_blocks": res.kv_capacity_blocks,
                     "preempted": int(res.requests.preemptions.sum()),
                     "steps": _frame(res.steps), "requests": _frame(res.requests)}
        print(f"{name:>40}: {len(res.steps):6d} steps, {out[name]['preempted']:4d} preempted, {dt:6.2f} s",
              file=sys.stderr)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--write", help="write the fingerprint to this JSON file")
    g.add_argument("--check", help="compare with the fingerprint in this JSON file")
    p.add_argument("--only", help="run the cases whose name contains this")
    args = p.parse_args()
    fp = fingerprint(args.only)
    if args.write:
        Path(args.write).write_text(json.dumps(fp, indent=1, sort_keys=True))
        print(f"wrote {len(fp)} cases to {args.write}")
        return
    ref = json.loads(Path(args.check).read_text())
    bad = [k for k in fp if fp[k] != ref.get(k)]
    missing = [k for k in ref if k not in fp] if not args.only else []
    for k in bad:
        diff = [part for part in fp[k] if fp[k][part] != ref.get(k, {}).get(part)]
        print(f"DIFFERENT {k}: {', '.join(diff)}")
    print(f"{len(fp) - len(bad)}/{len(fp)} cases identical" + (f"; {len(missing)} missing" if missing else ""))
    sys.exit(1 if bad or missing else 0)


if __name__ == "__main__":
    main()
