"""Fleet sweep throughput: >= 500 sizing candidates on 1 vs 2 local workers vs local Ray, and a cluster forecast.

    python benchmarks/bench_sweep.py [--repeats 3] [--cluster-cpus 16] [--no-ray]

A candidate is one (scenario, policy) SLO load search: the sweep below expands 4 models x 6 GPUs x
4 TP degrees x 2 dtypes x 2 traffic profiles, filters what does not divide or fit memory, and runs
plain and dynamic-K searches on every remaining scenario (one task = one scenario = 2 candidates).
Each search is kept cheap (20-request runs, no bisection steps) so the run measures the sweep
machinery and the pool, not a production-fidelity plan; scale the forecast by the per-task cost of
your own [run] settings.

Prints, per backend, the median over repeats of wall time and candidates/s (each repeat runs in a fresh
process with an empty journal: no cache of a previous run, in the driver or in forked workers), and the predicted wall time of the same sweep, and of a 100x larger one, on N
Ray nodes of C CPUs:  wall = max(work / (N x C x efficiency), tasks x driver cost, one task), where
work is the CPU time of the tasks measured inside the workers on this machine (cluster cores
assumed as fast), efficiency is task CPU time / (wall x 2) measured on local Ray with 2 CPUs
(cluster network and scheduling assumed no worse; competing processes on this machine lower it,
which makes the forecast conservative), and the driver cost is the measured journal append + fsync
per result (the ceiling on results/s). Tasks are independent (no data between them); the forecast
leaves out cluster start-up and the one-off import of the package on each worker.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import statistics
import tempfile
import time
import warnings
from pathlib import Path

from simulator.errors import PlannerWarning
from simulator.sweep import parse_sweep
from simulator.sweep.journal import Journal
from simulator.runtime import keep_freed_memory

SPEC = """
name = "bench-sweep"
[sweep]
base = "sizing-dense-command-a"
models = ["command-a", "llama-3.1-70b", "qwen3-32b", "llama-3.1-8b"]
hardware = ["h100-sxm", "h200", "b200", "mi300x", "a100-80gb", "l40s"]
tp = [1, 2, 4, 8]
dtype = ["bf16", "fp8"]
traffic = ["chat", "rag"]
policies = ["plain", "dsd"]
[traffic.chat]
rate_per_s = 8.0
prompt_len = 512
output_len = 100
[traffic.rag]
rate_per_s = 4.0
prompt_len = 2048
output_len = 80
[run]
n_requests = 20
search_steps = 0
duration_s = 2.0
max_requests = 60
[output]
formats = ["parquet", "csv", "markdown", "html"]
"""


def _driver_cost(n: int = 200) -> float:
    """Seconds the driver spends per result (journal line + fsync), the ceiling on results/s."""
    with tempfile.TemporaryDirectory() as d:
        j = Journal(Path(d) / "journal.jsonl")
        rec = {"key": "x" * 20, "index": 0, "rows": [{"a": 1.0, "b": "text" * 40}] * 2, "elapsed_s": 0.1}
        t0 = time.perf_counter()
        for _ in range(n):
            j.append(rec)
        j.close()
        return (time.perf_counter() - t0) / n


def _run(spec_path: Path, **kw) -> tuple[float, list, list]:
    """One sweep in a fresh Python process (its caches empty: kernel-table envelopes, step pricers and
    searches a process keeps would otherwise carry over from the run before, and into forked workers):
    (wall s of the sweep itself, per-task wall s, per-task CPU s)."""
    child = ("import json, sys, tempfile, time, warnings\n"
             "from simulator.errors import PlannerWarning\n"
             "from simulator.sweep import run_sweep\n"
             "warnings.simplefilter('ignore', PlannerWarning)\n"
             "kw = json.loads(sys.argv[2])\n"
             "with tempfile.TemporaryDirectory() as out:\n"
             "    t0 = time.perf_counter()\n"
             "    res = run_sweep(sys.argv[1], output_dir=out, progress=False, **kw)\n"
             "    wall = time.perf_counter() - t0\n"
             "assert res.complete\n"
             "print(json.dumps([wall, list(res.task_seconds), list(res.task_cpu_seconds)]))\n")
    proc = subprocess.run([sys.executable, "-c", child, str(spec_path), json.dumps(kw)], capture_output=True,
                          text=True, check=True)
    wall, secs, cpu = json.loads(proc.stdout.strip().splitlines()[-1])
    return wall, secs, cpu


def main() -> None:
    keep_freed_memory()  # measured as the planner's programs run (simulator/runtime.py)
    # the sweep's caveats (e.g. PCIe all-reduce on L40S) hold for its plans, not for a timing run; one
    # warning per task would bury the figures (forked pool workers inherit the filter)
    warnings.simplefilter("ignore", PlannerWarning)
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--cluster-cpus", type=int, default=16, help="CPUs per node of the forecast cluster")
    p.add_argument("--no-ray", action="store_true")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as d:
        spec_path = Path(d) / "bench.toml"
        spec_path.write_text(SPEC)
        spec = parse_sweep(spec_path)
        n_tasks = len(spec.tasks)
        n_cand = n_tasks * len(spec.policies)
        print(f"sweep: {spec.n_combinations} combinations, {len(spec.filtered)} filtered (layout/memory),"
              f" {n_tasks} tasks = {n_cand} sizing candidates (scenario x policy)")
        assert n_cand >= 500, n_cand
        backends = [("1 local worker (in-process)", {"workers": 1}), ("2 local workers (process pool)", {"workers": 2})]
        ray_ok = False
        if not args.no_ray:
            try:
                import ray  # noqa: F401
                ray_ok = True
            except ImportError:
                print("ray: not installed (pip install 'dsd-planner[cluster]'); skipping the Ray backend")
        if ray_ok:
            backends.append(("local Ray, 2 CPUs", {"workers": 2, "ray_address": "local"}))
        results = {}
        for label, kw in backends:
            walls, per_task, per_cpu = [], [], []
            for _ in range(args.repeats):
                wall, secs, cpu = _run(spec_path, **kw)
                walls.append(wall)
                per_task += secs
                per_cpu += cpu
            med = statistics.median(walls)
            results[label] = (med, statistics.median(per_task), sum(per_cpu) / args.repeats)
            print(f"{label:>32}: median {med:6.1f} s over {args.repeats} runs  ->  {n_cand / med:6.1f} candidates/s"
                  f"  ({n_tasks / med:5.1f} tasks/s; median task {statistics.median(per_task) * 1e3:.0f} ms wall,"
                  f" {statistics.median(per_cpu) * 1e3:.0f} ms CPU in the worker)")
        load = os.getloadavg()[0]
        print(f"machine: {os.cpu_count()} CPUs, load average {load:.1f} at the end"
              + ("  (other processes were competing: the wall times above are inflated)" if load > 2.5 else ""))
    drv = _driver_cost()
    one = results["1 local worker (in-process)"]
    work = one[2]  # CPU seconds of task work in one sweep, measured on one core of this machine
    ref = results.get("local Ray, 2 CPUs") or results["2 local workers (process pool)"]
    # parallel efficiency: task CPU work / (wall x CPUs); competing processes lower it (conservative)
    eff = min(1.0, ref[2] / (ref[0] * 2))
    print(f"driver: {drv * 1e3:.2f} ms per result (journal append + fsync): ceiling {1 / drv:,.0f} results/s")
    print(f"forecast basis: {work:.1f} CPU s of task work per sweep ({work / n_tasks * 1e3:.0f} ms/task on this core),"
          f" parallel efficiency {eff:.0%} measured on {'local Ray' if 'local Ray, 2 CPUs' in results else 'the pool'}"
          f" with 2 CPUs, {args.cluster_cpus} CPUs per node")
    for scale in (1, 100):
        tasks = n_tasks * scale
        row = []
        for nodes in (1, 4, 16, 64):
            cpus = nodes * args.cluster_cpus
            t = max(work * scale / (cpus * eff), tasks * drv, one[1])
            row.append(f"{nodes} node(s) {t:8.1f} s")
        print(f"predicted wall, {tasks:>6} tasks ({tasks * len(spec.policies):>6} candidates): " + " | ".join(row))


if __name__ == "__main__":
    main()
