"""Few-shot fit scored on a measured B x K grid: fit on at most 4 cells, score every other cell.

    python -m calibration.fewshot_heldout --scenario scenarios/smollm2-cpu.toml \\
        --measured calibration/data/runs/smollm2-cpu-ngram.csv [--start 1:0,16:3] [--active 2]

The fit starts from two cells (default: the smallest batch size at K = 0 and the middle batch size at
the middle K) and adds, ``--active`` times, the cell ``calibration.fit_deployment`` says to measure next
(the rival K whose goodput interval overlaps K*'s most); at most 4 cells in all. Held-out: ITL MAPE,
goodput MAPE (the fitted acceptance against each run's own), and regret per batch size = measured goodput
at the predicted K* / best measured goodput. With repeated rows per cell (``calibration.engine sweep
--rounds N`` writes one row per round), a K counts as a tie with the best when its measured goodput
is within the spread of the repeats (min-max of the best cell's rounds): the noise-aware regret.
"""
from __future__ import annotations

import json
import sys
from dataclasses import replace

import numpy as np
import pandas as pd

from calibration import fewshot
from calibration import fit_deployment as fd
from simulator.cli.common import OneLineParser, run_cli
from simulator.errors import PlannerError
from simulator.specs.scenario import load_scenario

MAX_CELLS = 4


def _cells_arg(text: str | None) -> list[tuple[int, int]] | None:
    if not text:
        return None
    try:
        return [tuple(int(x) for x in part.split(":")) for part in text.split(",")]
    except ValueError:
        raise PlannerError(f"--start '{text}': expected B:K pairs such as 1:0,16:3") from None


def default_start(cells: pd.DataFrame) -> list[tuple[int, int]]:
    """The smallest batch size at K = 0 and the middle batch size at the middle K."""
    b = np.sort(cells.batch_size.unique())
    k = np.sort(cells.k.unique())
    return [(int(b[0]), int(k[0])), (int(b[len(b) // 2]), int(k[len(k) // 2]))]


def measured_goodput(rows: pd.DataFrame) -> pd.DataFrame:
    """Per (B, K): median measured goodput per sequence and the spread (min, max) of the repeats: the
    rows of one cell, or, where a row carries its interleaved rounds (``itl_ms_rounds``, written by
    ``calibration.engine sweep --rounds N``), its acceptance length over each round's step time."""
    g = rows.goodput_per_seq if "goodput_per_seq" in rows else rows.acceptance_length / (rows.itl_ms / 1e3)
    df = rows.assign(goodput=g)
    if "itl_ms_rounds" in df and df.itl_ms_rounds.notna().any():
        per_round = [json.loads(x) if isinstance(x, str) else [] for x in df.itl_ms_rounds]
        df = df.assign(round_goodput=[[al / (t / 1e3) for t in ts] or [gp]
                                      for al, ts, gp in zip(df.acceptance_length, per_round, df.goodput)])
        repeats = df.groupby(["batch_size", "k"]).round_goodput.sum()  # lists concatenate
        out = df.groupby(["batch_size", "k"]).goodput.agg(["median"])
        out["min"], out["max"] = repeats.map(min), repeats.map(max)
        out["size"] = repeats.map(len)
        return out.reset_index()
    return df.groupby(["batch_size", "k"]).goodput.agg(["median", "min", "max", "size"]).reset_index()


def regret(pred_good: pd.DataFrame, meas: pd.DataFrame) -> pd.DataFrame:
    """Per batch size: K* predicted, best measured K, regret, and the noise-aware regret (1 when the
    predicted K* is within the best cell's spread of repeats)."""
    out = []
    both = pred_good.merge(meas, on=["batch_size", "k"])
    for b, g in both.groupby("batch_size"):
        k_pred = int(g.k.iloc[int(np.argmax(g.predicted_goodput.to_numpy()))])
        best = g.iloc[int(np.argmax(g["median"].to_numpy()))]
        at = g[g.k == k_pred].iloc[0]
        r = float(at["median"] / best["median"])
        tie = at["max"] >= best["min"] if best["size"] > 1 else False
        out.append({"batch_size": int(b), "k_pred": k_pred, "k_best": int(best.k), "regret": r,
                    "regret_noise_aware": 1.0 if tie else r, "repeats": int(best["size"])})
    return pd.DataFrame(out)


def score(sc, rows: pd.DataFrame, start=None, active: int = 2, n_boot: int = 100) -> dict:
    """Fit on the start cells plus ``active`` suggested ones; score the held-out cells."""
    all_cells = fd.cells(rows, sc)
    # the measured grid, validated and with raw in sync; no deployment fit (the one being scored is fitted here)
    k_max = int(all_cells.k.max())
    grid = replace(sc.with_overrides(batch_sizes=np.sort(all_cells.batch_size.unique()), k_max=k_max,
                                     fixed_k=min(sc.fixed_k, k_max)), deployment_fit=None)
    chosen = list(start or default_start(all_cells))
    have = set(zip(all_cells.batch_size, all_cells.k))
    missing = [c for c in chosen if c not in have]
    if missing:
        raise PlannerError(f"--start {missing[0][0]}:{missing[0][1]}: no measured row at that (B, K)")
    while True:
        pick = rows[[(b, k) in set(chosen) for b, k in zip(rows.batch_size, rows.k)]]
        result = fd.fit(grid, pick, n_boot)
        nxt = [(d["batch_size"], d["k"]) for d in result["next"] if (d["batch_size"], d["k"]) in have]
        if active <= 0 or len(chosen) >= MAX_CELLS or not nxt:
            break
        chosen.append(nxt[0])
        active -= 1
    held = all_cells[[(b, k) not in set(chosen) for b, k in zip(all_cells.batch_size, all_cells.k)]].reset_index(drop=True)
    pts = fd.points_for(grid, held)
    itl = np.exp(fewshot.predict_log("step", result["fit"]["theta"], pts)[0]) * 1e3
    acc = result["acceptance"]
    al = fd.fitted_acceptance_lengths(grid, acc, held.k, "rates")[0]
    held = held.assign(predicted_itl_ms=itl, predicted_goodput=al / (itl / 1e3))
    meas = measured_goodput(rows)
    held = held.merge(meas[["batch_size", "k", "median"]].rename(columns={"median": "measured_goodput"}),
                      on=["batch_size", "k"])
    # K* over every measured K: predicted at all cells (fit cells included: the planner predicts them too)
    every = all_cells.reset_index(drop=True)
    t_all = np.exp(fewshot.predict_log("step", result["fit"]["theta"], fd.points_for(grid, every))[0])
    al_all = fd.fitted_acceptance_lengths(grid, acc, every.k, "rates")[0]
    reg = regret(every.assign(predicted_goodput=al_all / t_all)[["batch_size", "k", "predicted_goodput"]], meas)
    # acceptance given (each cell's own measured acceptance length): the decisions of the cost model alone
    al_meas = rows.groupby(["batch_size", "k"]).acceptance_length.median()
    al_cell = al_meas.reindex(pd.MultiIndex.from_arrays([every.batch_size, every.k])).to_numpy()
    reg_given = regret(every.assign(predicted_goodput=al_cell / t_all)[["batch_size", "k", "predicted_goodput"]], meas)
    return {"fit_cells": chosen, "terms": result["fit"]["terms"], "theta": result["fit"]["theta"], "heldout": held,
            "itl_mape": float((held.predicted_itl_ms / held.itl_ms - 1).abs().mean()),
            "goodput_mape": float((held.predicted_goodput / held.measured_goodput - 1).abs().mean()),
            "regret": reg, "regret_acceptance_given": reg_given}


def main(argv: list[str] | None = None) -> int:
    p = OneLineParser(prog="python -m calibration.fewshot_heldout", description=__doc__.split("\n\n")[0])
    p.add_argument("--scenario", required=True)
    p.add_argument("--measured", nargs="+", required=True)
    p.add_argument("--start", help="fit cells B:K,... to start from (default: smallest B at K=0, middle B at middle K)")
    p.add_argument("--active", type=int, default=2, help="suggested cells to add (at most 4 cells in all)")
    p.add_argument("--calibration", help="calibration profile to score against instead of the scenario's (e.g. the"
                   " microbenchmarks measured in the same session as the runs)")
    args = p.parse_args(argv)

    def body() -> int:
        sc = load_scenario(args.scenario, calibration=args.calibration)
        rows = fd.read_rows(args.measured)
        s = score(sc, rows, _cells_arg(args.start), args.active)
        cells = ", ".join(f"B={b} K={k}" for b, k in s["fit_cells"])
        th = dict(zip(fewshot.PARAMS, s["theta"]))
        print(f"fit on {len(s['fit_cells'])} cells ({cells}): " + ", ".join(f"{n}={th[n]:.4g}" for n in s["terms"]))
        print(f"held-out cells: {len(s['heldout'])}; ITL MAPE {s['itl_mape']:.1%}; goodput MAPE {s['goodput_mape']:.1%}")
        r = s["regret"]
        print(f"regret (measured goodput at predicted K* / best): mean {r.regret.mean():.3f}, worst {r.regret.min():.3f};"
              f" noise-aware mean {r.regret_noise_aware.mean():.3f}, worst {r.regret_noise_aware.min():.3f}"
              f" (repeats per cell: {int(r.repeats.min())}-{int(r.repeats.max())})")
        print(r.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
        g = s["regret_acceptance_given"]
        print(f"with each cell's measured acceptance length (the cost model's decisions): regret mean {g.regret.mean():.3f},"
              f" worst {g.regret.min():.3f}; noise-aware mean {g.regret_noise_aware.mean():.3f},"
              f" worst {g.regret_noise_aware.min():.3f}")
        return 0

    return run_cli(body)


if __name__ == "__main__":
    sys.exit(main())
