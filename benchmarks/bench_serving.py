"""Speed of the serving simulation: 10,000 requests (over a million generated tokens).

    python benchmarks/bench_serving.py [--repeats 3] [--policy dsd]

Prints the median wall time of a few repeats and the generated tokens simulated per second.
Target: under 5 s per run on a 2-core machine.
"""
from __future__ import annotations

import argparse
import statistics
import time

from simulator import serving
from simulator.specs.scenario import load_scenario
from simulator.runtime import keep_freed_memory

WORKLOAD = dict(arrival="poisson", rate_per_s=200.0, n_requests=10_000, max_num_seqs=256,
                prompt_len={"dist": "lognormal", "median": 500, "sigma": 0.8, "max": 4000},
                output_len={"dist": "lognormal", "median": 90, "sigma": 0.7, "max": 2000})


def main() -> None:
    keep_freed_memory()  # measured as the planner's programs run (simulator/runtime.py)
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--policy", default="dsd,plain")
    p.add_argument("--scenario", default="scenarios/command-a-h100.toml")
    args = p.parse_args()
    sc = load_scenario(args.scenario)
    wl = serving.Workload(**WORKLOAD)
    for policy in args.policy.split(","):
        times, res = [], None
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            res = serving.simulate(sc, policy, workload=wl, seed=0)
            times.append(time.perf_counter() - t0)
        med = statistics.median(times)
        tokens = res.summary["output_tokens"]
        print(f"{policy:>12}: {wl.n_requests} requests, {tokens} tokens, {len(res.steps)} steps:"
              f" median {med:.2f} s over {args.repeats} runs ({tokens / med / 1e6:.2f} M tokens/s simulated,"
              f" {len(res.steps) / med:.0f} steps/s)")


if __name__ == "__main__":
    main()
