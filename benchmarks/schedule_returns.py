"""Where the K* schedule returns to an earlier K over B 1-256, and whether the terms' uncertainty supports it.

Issue 47 item 4 asks that the schedule never flip back on a difference inside the engine terms' band. For every
bundled scenario this prints each range whose K the schedule later leaves for the K it had before, with the share
of the terms' draws (plan.decision_risk.goodput_draws) in which the range's K beats the K it left, at the range's
batch size where that share is highest: a share near 1 is a difference outside the band (padded CUDA graphs, MoE
expert loading), a share near 1/2 one inside it.

    python benchmarks/schedule_returns.py
"""
from __future__ import annotations

import warnings

import numpy as np

from simulator.plan import decision_risk
from simulator.plan.decision_risk import OUTSIDE_BAND
from simulator.plan.grid import compute_grid
from simulator.runtime import keep_freed_memory
from simulator.specs.scenario import SCENARIO_DIR, load_scenario


def returns(sc) -> tuple[list[tuple], int]:
    """((K left, range K, first B, last B, best share of draws, best centre gain) per return to an earlier K,
    the schedule's number of ranges)."""
    g = compute_grid(sc, batch_sizes=np.arange(1, 257), ks=np.arange(0, min(sc.k_max, 8) + 1))
    k = g.k_star
    d = g.as_engine_runs  # the K = 0 entry as the engine runs it, which K* is chosen on
    good, _ = decision_risk.goodput_draws(d, d.step_terms)  # (draws, B, K)
    starts = [0] + [i for i in range(1, len(k)) if k[i] != k[i - 1]]
    ranges = [(s, (starts[j + 1] if j + 1 < len(starts) else len(k)) - 1, int(k[s])) for j, s in enumerate(starts)]
    out = []
    for j in range(1, len(ranges) - 1):
        left, (lo, hi, mid) = ranges[j - 1][2], ranges[j]
        if left < 0 or mid < 0 or left not in [r[2] for r in ranges[j + 1:]]:
            continue
        ia, ib = g.k_index(left), g.k_index(mid)
        share = (good[:, lo:hi + 1, ib] > good[:, lo:hi + 1, ia]).mean(axis=0)
        gain = d.goodput_per_seq[lo:hi + 1, ib] / g.goodput_per_seq[lo:hi + 1, ia] - 1
        out.append((left, mid, int(g.batch_sizes[lo]), int(g.batch_sizes[hi]), float(share.max()), float(gain.max())))
    return out, len(ranges)


def main() -> None:
    keep_freed_memory()
    warnings.simplefilter("ignore")
    total = inside = n_ranges = 0
    for path in sorted(SCENARIO_DIR.glob("*.toml")):
        found, n = returns(load_scenario(path))
        n_ranges += n
        for left, mid, lo, hi, share, gain in found:
            total += 1
            inside += share < OUTSIDE_BAND
            print(f"{path.stem:26s} K {left} -> {mid} at B {lo}-{hi}, then back to {left}: the range's K beats it in"
                  f" {share:.0%} of the draws at best (centre gain up to {gain:+.1%})")
    print(f"{total} returns to an earlier K in {n_ranges} ranges; {inside} inside the terms' band (the range's K ahead in fewer than"
          f" {OUTSIDE_BAND:.0%} of the draws at every batch size of the range)")


if __name__ == "__main__":
    main()
