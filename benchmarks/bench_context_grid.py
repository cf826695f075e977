"""Speed of the (batch size x K x context length) grid: 512 B x 9 K x 16 L = 73,728 cells.

Target (issues #13, #22): >= 1e7 cells/s (the whole grid and its K*(B, L) in <= 7.4 ms) on the 2-core
dev machine for every bundled scenario (two also without their calibration profile), printed beside a
naive broadcast numpy roofline of the same (B, K, L) grid run in the same process, and the 1-D default
grid (benchmarks/bench_grid.py) no slower than before. Prints the median of repeats (the machine is
shared).

    python benchmarks/bench_context_grid.py
"""
from __future__ import annotations

import os
import statistics
import time

import numpy as np

from bench_grid import memory_limits  # same folder: run as python benchmarks/bench_context_grid.py
from simulator.physics.memory import kv_bytes_per_gpu, weight_bytes_per_gpu
from simulator.plan.grid import evaluate_grid  # the grid computed afresh each call (compute_grid keeps the last few)
from simulator.runtime import TOP_PAD_BYTES, keep_freed_memory
from simulator.specs.scenario import SCENARIO_DIR, load_scenario

TARGET = 1e7


def median_seconds(fn, repeats: int = 30) -> tuple[float, float]:
    """(median wall-clock s, median process CPU s) over repeats. On a shared machine the CPU time is
    what the grid itself costs; the wall time adds waiting for a core."""
    fn()  # warm-up
    wall, cpu = [], []
    for _ in range(repeats):
        w0, c0 = time.perf_counter(), time.process_time()
        fn()
        wall.append(time.perf_counter() - w0)
        cpu.append(time.process_time() - c0)
    return statistics.median(wall), statistics.median(cpu)


def naive_roofline(sc, b, ks, lens):
    """The reference: t = max(2 T N_active / (tp peak), (weights + KV over L + K + 1) / bw) with
    T = B (K + 1) over (B, K, L) arrays, goodput = AL(K) / t, K* = argmax over K (no tables, no engine)."""
    m, dep, hw = sc.model, sc.deployment, sc.hardware
    B, K, L = b[:, None, None].astype(float), ks[None, :, None].astype(float), lens[None, None, :].astype(float)
    flops = 2.0 * B * (K + 1.0) * m.active_params() / dep.tp
    nbytes = weight_bytes_per_gpu(m, dep) + kv_bytes_per_gpu(m, dep, B, L + K + 1.0)
    t = np.maximum(flops / hw.peak_flops_per_s(dep.weight_dtype, dep.act_dtype), nbytes / hw.hbm_bandwidth_bytes_per_s)
    return ks[np.argmax(sc.acceptance.acceptance_length(ks)[None, :, None] / t, axis=1)]


def bundled() -> list[tuple[str, str | None]]:
    """Every bundled scenario as shipped, and the two measured-table ones also on the datasheet alone."""
    names = sorted(p.stem for p in SCENARIO_DIR.glob("*.toml"))
    return [(n, None) for n in names] + [("llama-3.1-8b-h100", "none"), ("qwen3-235b-h200", "none")]


def grid_and_kstar(sc, b, ks, lens):
    g = evaluate_grid(sc, b, ks, lens)
    return g.optimal_k_index()  # K* per (B, L) cell is part of the answer


def main() -> None:
    b = np.arange(1, 513)
    ks = np.arange(9)
    lens = np.unique(np.round(np.geomspace(512, 131072, 16)).astype(int))
    cells = len(b) * len(ks) * len(lens)
    print(f"context grid: {len(b)} batch sizes x {len(ks)} K x {len(lens)} context lengths = {cells} cells"
          f" (L {lens[0]}..{lens[-1]})")
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs; medians of 30 repeats (wall / CPU)")
    bw, pass_s, add_s = memory_limits(cells)
    print(f"memory-bandwidth limit: {bw / 1e9:.1f} GB/s on this machine (256 MB copy): one pass over a {cells}-cell float64"
          f" array (read two, write one) {pass_s * 1e6:.0f} us at that rate, a numpy add on such arrays {add_s * 1e6:.0f} us")
    print("allocator: " + (f"glibc malloc keeps {TOP_PAD_BYTES >> 20} MB of freed heap between grids (simulator/runtime.py;"
                           " DSD_PLANNER_MALLOC=default measures without it)" if keep_freed_memory() else
                           "as the platform ships it (simulator/runtime.py not applied)"))
    worst_wall = worst_cpu = np.inf
    for name, cal in bundled():
        sc = load_scenario(SCENARIO_DIR / f"{name}.toml", allow_long_context=True, calibration=cal)
        w3, c3 = median_seconds(lambda: grid_and_kstar(sc, b, ks, lens))
        w1, c1 = median_seconds(lambda: evaluate_grid(sc, b, ks))
        w_ref, _ = median_seconds(lambda: naive_roofline(sc, b, ks, lens))
        worst_wall, worst_cpu = min(worst_wall, cells / w3), min(worst_cpu, cells / c3)
        label = name + (" (datasheet)" if cal == "none" else "")
        print(f"  {label:36s} 3-D {w3 * 1e3:6.2f} / {c3 * 1e3:6.2f} ms = {cells / w3 / 1e6:5.1f} / {cells / c3 / 1e6:5.1f}"
              f" M cells/s {'ok  ' if cells / w3 >= TARGET else 'MISS'} | naive numpy roofline {w_ref * 1e3:5.2f} ms"
              f" ({cells / w_ref / 1e6:5.1f} M cells/s): {w3 / w_ref:4.1f}x | {w3 / pass_s:3.0f} passes at the bandwidth limit | 1-D 512 x 9: {w1 * 1e3:5.2f} / {c1 * 1e3:5.2f} ms")
        print(f"  {'':36s} step times: {sc.cost_source[:90]}")
    print(f"slowest: {worst_wall / 1e6:.1f} M cells/s wall, {worst_cpu / 1e6:.1f} M cells/s CPU"
          f" (target {TARGET / 1e6:.0f} M cells/s)")


if __name__ == "__main__":
    main()
