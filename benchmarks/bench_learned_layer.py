"""What the learned layer costs a grid: the default (512 x 9) grid with the layer's engine terms and with the
physics alone (--physics-only), interleaved, medians (issue 47: grid speed not lower).

    python benchmarks/bench_learned_layer.py
"""
from __future__ import annotations

import statistics
import time
from dataclasses import replace

import numpy as np

from simulator.plan.grid import evaluate_grid  # the grid computed afresh each call
from simulator.specs.scenario import load_scenario
from simulator.runtime import keep_freed_memory

REPEATS = 40


def main() -> None:
    keep_freed_memory()  # measured as the planner's programs run (simulator/runtime.py)
    b, k = np.arange(1, 513, dtype=float), np.arange(9, dtype=float)
    for name in ("default", "qwen3-235b-h200"):
        learned = load_scenario(name)
        physics = replace(learned, step_prior=None)
        fns = (lambda: evaluate_grid(learned, b, k), lambda: evaluate_grid(physics, b, k))
        for f in fns:
            f()  # warm: the passes' token tables are kept
        times = ([], [])
        for _ in range(REPEATS):  # A B A B: a drift of the machine's speed hits both
            for i, f in enumerate(fns):
                start = time.perf_counter()
                f()
                times[i].append(time.perf_counter() - start)
        a, p = (statistics.median(t) * 1e3 for t in times)
        print(f"{name}: with the learned layer {a:.3f} ms, physics only {p:.3f} ms (ratio {a / p:.2f})")


if __name__ == "__main__":
    main()
