"""Grid speed: the default (512 x 9) goodput grid for one model and device, and a catalog sweep.

Targets: issue #2, one default grid in under 5 ms on the 2-core dev machine and every catalog model
x every catalog device in a few seconds; issue #20, >= 2 M cells/s with the speculative-step terms;
issue #22, >= 10 M cells/s, printed beside a naive broadcast numpy roofline of the same grid run in the
same process (the ratio says what the measured-table pricing costs per cell). The grid's arrays alone
(its passes' token tables and per-cell prices kept from the grids before, as a dashboard's acceptance
slider or a sweep's traffic mixes and policies find them), with the K* schedule read from them (the
fewest-range dynamic programme over the batch axis), and with those tables new (what a scenario's
first grid costs). Prints medians over interleaved repeats (the machine is shared).

    python benchmarks/bench_grid.py
"""
from __future__ import annotations

import statistics
import time

import numpy as np

from simulator.physics.memory import kv_bytes_per_gpu, weight_bytes_per_gpu
from simulator.plan.grid import evaluate_grid  # the grid computed afresh each call (compute_grid keeps the last few)
from simulator.plan.step_models import step_model
from simulator.specs.hardware import list_hardware, load_hardware
from simulator.specs.models import list_models, load_model
from simulator.specs.scenario import SCENARIO_DIR, load_scenario
from simulator.runtime import keep_freed_memory


def median_seconds(fn, repeats: int = 30) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def interleaved_medians(fns, repeats: int = 30) -> tuple[list[float], list[float]]:
    """(median wall-clock seconds, median process CPU seconds) of each function, run in turn (A B C A B C ...)
    so that a drift in the machine's speed moves them alike and their ratios stay meaningful. On a shared
    machine the CPU time is what the call itself costs: a call of a few ms is often preempted for another
    process's time slice, which its wall time then counts."""
    for fn in fns:
        fn()  # warm-up
    wall, cpu = [[] for _ in fns], [[] for _ in fns]
    for _ in range(repeats):
        for fn, w, c in zip(fns, wall, cpu):
            w0, c0 = time.perf_counter(), time.process_time()
            fn()
            w.append(time.perf_counter() - w0)
            c.append(time.process_time() - c0)
    return [statistics.median(ts) for ts in wall], [statistics.median(ts) for ts in cpu]


def naive_roofline(sc, b, ks):
    """The reference the issue names: one broadcast numpy roofline of the same (B, K) grid, no tables,
    no engine, no draft: t = max(2 T N_active / (tp peak), (weights + KV) / bw) with T = B (K + 1),
    goodput = AL(K) / t, K* = argmax. What a planner without measured kernels costs per cell."""
    m, dep, hw = sc.model, sc.deployment, sc.hardware
    B, K = b[:, None].astype(float), ks[None, :].astype(float)
    peak = hw.peak_flops_per_s(dep.weight_dtype, dep.act_dtype)
    flops = 2.0 * B * (K + 1.0) * m.active_params() / dep.tp
    nbytes = weight_bytes_per_gpu(m, dep) + kv_bytes_per_gpu(m, dep, B, sc.context_len + K + 1.0)
    t = np.maximum(flops / peak, nbytes / hw.hbm_bandwidth_bytes_per_s)
    goodput = sc.acceptance.acceptance_length(ks)[None, :] / t
    return ks[np.argmax(goodput, axis=1)]


def new_tables_grid(sc, b, ks):
    """The grid with its passes' token tables and per-cell prices dropped first: what a scenario's first grid
    costs (a new model, device or deployment; simulator/physics/pass_tables.py), the lattices of the measured
    tables kept."""
    caches = step_model(sc).caches
    caches.token_tables.clear()
    caches.cells.clear()
    return evaluate_grid(sc, b, ks)


def memory_limits(cells: int) -> tuple[float, float, float]:
    """(this machine's DRAM bandwidth in bytes/s from a 256 MB copy, seconds of one pass over a float64
    array of ``cells`` at that bandwidth (read two, write one), seconds of one numpy add on such arrays)."""
    big_a, big_b = np.ones(1 << 25), np.empty(1 << 25)
    copy_s = median_seconds(lambda: np.copyto(big_b, big_a), repeats=5)
    bw = 2 * big_a.nbytes / copy_s  # read + write
    x, y, out = np.ones(cells), np.ones(cells), np.empty(cells)
    add_s = median_seconds(lambda: np.add(x, y, out=out), repeats=2000)
    return bw, 3 * 8 * cells / bw, add_s


def main() -> None:
    keep_freed_memory()  # measured as the planner's programs run (simulator/runtime.py)
    b = np.arange(1, 513)
    ks = np.arange(9)
    cells = len(b) * len(ks)
    print(f"default grid: {len(b)} batch sizes x {len(ks)} K = {cells} cells")
    bw, pass_s, add_s = memory_limits(cells)
    print(f"memory-bandwidth limit: {bw / 1e9:.1f} GB/s on this machine (256 MB copy): one pass over a {cells}-cell"
          f" float64 array (read two, write one) {pass_s * 1e6:.2f} us at that rate; the grid's arrays fit in L2, where"
          f" a numpy add on them takes {add_s * 1e6:.2f} us, call included: a grid costs what its numpy calls cost,"
          f" tens of times more than streaming its few output arrays once at the bandwidth limit")
    for name in ("llama-3.1-8b-h100", "command-a-h100", "qwen3-235b-h200"):
        sc = load_scenario(SCENARIO_DIR / f"{name}.toml")
        (t, t_k, t_new, t_ref), (c, c_k, _, _) = interleaved_medians([lambda: evaluate_grid(sc, b, ks),
                                                                      lambda: evaluate_grid(sc, b, ks).k_star,
                                                                      lambda: new_tables_grid(sc, b, ks),
                                                                      lambda: naive_roofline(sc, b, ks)])
        print(f"  {name:32s} median {t * 1e3:6.2f} ms  ({cells / t / 1e6:.2f} M cells/s; targets 2 M / 10 M);"
              f" with its K* schedule {t_k * 1e3:.2f} ms ({cells / t_k / 1e6:.2f} M cells/s;"
              f" CPU {c_k * 1e3:.2f} ms against {c * 1e3:.2f} ms for the arrays alone);"
              f" its tables new {t_new * 1e3:.2f} ms ({cells / t_new / 1e6:.2f} M cells/s);"
              f" naive numpy roofline {t_ref * 1e3:.2f} ms ({cells / t_ref / 1e6:.1f} M cells/s): {t / t_ref:.0f}x;"
              f" = {t / add_s:.0f} numpy adds' time, {t / pass_s:.0f} passes at the bandwidth limit")
    # the same grid with a calibration profile applied (efficiencies interpolated per op, vectorized)
    for name in ("smollm2-cpu", "moe-synthetic-cpu"):
        sc = load_scenario(SCENARIO_DIR / f"{name}.toml")
        t = median_seconds(lambda: evaluate_grid(sc, b, ks))
        print(f"  {name + ' (calibrated)':32s} median {t * 1e3:6.2f} ms  ({cells / t / 1e6:.2f} M cells/s)  target < 5 ms")

    scenarios = []
    for model in list_models():
        m = load_model(model)
        for hw in list_hardware():
            # TP 8 where the heads split 8 ways and one scale-up domain holds 8 (GH200: one GPU a node), else 1
            # (a CPU device is one machine: TP 1)
            spec = load_hardware(hw)
            domain = spec.scale_up_domain_gpus or (8 if spec.kind == "gpu" else 1)
            tp = 8 if m.num_heads % 8 == 0 and domain >= 8 else 1
            scenarios.append(load_scenario(SCENARIO_DIR / "default.toml", model=model, hardware=hw, tp=tp,
                                           draft="eagle"))
    start = time.perf_counter()
    for sc in scenarios:
        evaluate_grid(sc, b, ks)
    sweep = time.perf_counter() - start
    print(f"catalog sweep: {len(scenarios)} model x device grids ({len(scenarios) * cells / 1e6:.1f} M cells)"
          f" in {sweep:.2f} s ({sweep / len(scenarios) * 1e3:.2f} ms per grid)  target: a few seconds")


if __name__ == "__main__":
    main()
