"""K* schedule ranges per bundled scenario: the per-batch argmax vs the fewest-range schedule within
the default tolerance (simulator/plan/schedule.py), with the goodput it gives up.

    python benchmarks/schedule_ranges.py
"""
from __future__ import annotations

from simulator.plan.api import predict
from simulator.specs.scenario import SCENARIO_DIR


def main() -> None:
    print(f"{'scenario':28s} {'argmax':>7s} {'schedule':>9s} {'max loss':>9s} {'at B':>6s}  K sequence")
    for path in sorted(SCENARIO_DIR.glob("*.toml")):
        p = predict(path)
        s = p.schedule_summary()
        _, k = p.kstar_by_batch()
        seq = [int(k[0])] + [int(b) for a, b in zip(k[:-1], k[1:]) if a != b]
        print(f"{path.stem:28s} {s['argmax_ranges']:7d} {s['ranges']:9d} {s['max_loss']:9.2%}"
              f" {s['max_loss_batch_size'] or '-':>6}  {','.join(map(str, seq))}")


if __name__ == "__main__":
    main()
