"""Time what one dashboard interaction recomputes (target: under 100 ms).

A rerun after a control change does: controls -> scenario dict -> build_scenario + predict (grid
and K* table) -> the open tab's chart specs (Altair -> Vega-Lite dict). Everything else is cached.
Each interaction below changes one control with a value not seen before (so no cache helps) and
is repeated; the median is printed. With --apptest the whole Streamlit rerun is timed too
(AppTest adds its own polling overhead of a few tens of ms).

    .venv/bin/python benchmarks/bench_dashboard.py [--repeats 7] [--apptest]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from dashboard import compute, state as S  # noqa: E402

TAB_CHARTS = {"K* vs batch size": ["k_star"], "Goodput heatmap": ["heatmap"],
              "Plain vs fixed K vs DSD": ["policy", "gain"], "Roofline": ["roofline"],
              "MoE experts": ["experts", "expert_share"], "Operator breakdown": ["breakdown"]}


def interactions(i: int) -> dict[str, dict]:
    """Control changes; ``i`` makes each repeat a new scenario (a cache miss)."""
    return {
        "hardware -> a100-80gb": {"hw_name": "a100-80gb", "context_len": 512 + i},
        "acceptance slider": {"acceptance": [0.50 + 0.01 * i]},
        "TP 2 -> 4": {"tp": 4, "context_len": 600 + i},
        "context length": {"context_len": 4096 + i},
        "K max 8 -> 12": {"k_max": 12, "context_len": 700 + i},
        "batch range 1-1024": {"bs_range": (1, 1024), "context_len": 800 + i},
        "draft -> eagle3": {"draft_method": "eagle3", "context_len": 900 + i},
        "scenario -> qwen3-235b (MoE)": {"scenario": "qwen3-235b-h200", "context_len": 2048 + i},
    }


def scenario_dict(change: dict) -> dict:
    base = S.read_scenario(change.get("scenario", "default"))
    c = S.controls_from_scenario(base)
    c.update({k: v for k, v in change.items() if k in c})
    rates = change.get("acceptance") or S.parse_rates_text(c["acc_list"])
    return S.scenario_raw(base, c, acceptance=rates, acceptance_source="bench", model=c["model_name"], profile=None)


def time_interaction(change: dict, charts: list[str]) -> tuple[float, float]:
    """(prediction ms, chart-spec ms) for one control change."""
    t0 = time.perf_counter()
    p = compute.prediction(S.scenario_key(scenario_dict(change)), "bench")
    t1 = time.perf_counter()
    k = compute.inspect_k(p, 8, None)
    for name in charts:
        compute.chart_spec(compute.build_chart(p, name, 8, k))
    t2 = time.perf_counter()
    return (t1 - t0) * 1e3, (t2 - t1) * 1e3


def bench_compute(repeats: int) -> None:
    # warm-up: imports, catalogs, Altair schema
    for name in interactions(0):
        time_interaction(interactions(0)[name], ["k_star"])
    print(f"compute path per interaction (median of {repeats}, ms; K* tab open)")
    print(f"{'interaction':34s} {'predict':>8s} {'charts':>8s} {'total':>8s}")
    totals = []
    for name in interactions(0):
        runs = [time_interaction(interactions(i + 1)[name], ["k_star"]) for i in range(repeats)]
        pred = statistics.median(r[0] for r in runs)
        chart = statistics.median(r[1] for r in runs)
        tot = statistics.median(r[0] + r[1] for r in runs)
        totals.append(tot)
        print(f"{name:34s} {pred:8.1f} {chart:8.1f} {tot:8.1f}")
    print(f"{'median over interactions':34s} {'':8s} {'':8s} {statistics.median(totals):8.1f}")
    print(f"\nper tab, hardware change (median of {repeats}, ms)")
    for tab, charts in TAB_CHARTS.items():
        scen = "qwen3-235b-h200" if tab == "MoE experts" else "default"
        runs = [time_interaction({"scenario": scen, "context_len": 3000 + 50 * tab.__len__() + i}, charts)
                for i in range(repeats)]
        print(f"{tab:34s} {statistics.median(r[0] for r in runs):8.1f} {statistics.median(r[1] for r in runs):8.1f}"
              f" {statistics.median(r[0] + r[1] for r in runs):8.1f}")


def bench_apptest(repeats: int) -> None:
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60)
    at.run()
    cached, fresh = [], []
    for i in range(repeats):
        t = time.perf_counter()
        at.run()
        cached.append((time.perf_counter() - t) * 1e3)
        at.sidebar.number_input(key="context_len").set_value(1000 + i)
        t = time.perf_counter()
        at.run()
        fresh.append((time.perf_counter() - t) * 1e3)
        assert not at.exception
    print(f"\nAppTest full rerun (median of {repeats}, ms): no change {statistics.median(cached):.1f},"
          f" new context length {statistics.median(fresh):.1f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--apptest", action="store_true", help="also time whole Streamlit reruns with AppTest")
    args = ap.parse_args()
    bench_compute(args.repeats)
    if args.apptest:
        bench_apptest(args.repeats)


if __name__ == "__main__":
    main()
