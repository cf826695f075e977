"""Where a speculative step's time goes, against sources that publish its parts (MagicDec, Appendix A.2,
Table 3: plain step T_AR, all K draft passes gamma*T_D, the verify pass T_V and the time per committed
token T_SD of the same batch), so that an optimistic speedup can be traced to the part the planner prices
too cheaply. The parts are read from a corpus row's notes (the corpus keeps one published number per
row: the speedup); nothing is fitted to them.

    part        measured                  planner (calibration.transfer's scenario of the row)
    plain       T_AR                      ITL at K = 0
    draft       gamma x T_D               the step's draft passes at K (draft_step_s)
    verify      T_V                       the verify pass at K (verify_s)
    step        T_SD x acceptance length  ITL at K (draft + verify + host and the loop's bookkeeping)
"""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

PARTS_IN_NOTES = re.compile(r"T_AR=([\d.]+) ms, T_SD=([\d.]+) ms/token, gamma\*T_D=([\d.]+) ms, T_V=([\d.]+) ms")
PARTS = ("plain", "draft", "verify", "step")


def published_parts(row) -> dict | None:
    """{part: ms} of a speedup row whose notes give the step's parts (module docstring), else None."""
    found = PARTS_IN_NOTES.search(str(row.notes)) if isinstance(row.notes, str) else None
    if found is None or pd.isna(row.acceptance_length):
        return None
    t_ar, t_sd, t_d, t_v = (float(x) for x in found.groups())
    return {"plain": t_ar, "draft": t_d, "verify": t_v, "step": t_sd * float(row.acceptance_length)}


def planner_parts(grid) -> dict:
    """{part: ms} of a (B, K) grid over one batch size and ks = [0, K]."""
    ms = 1e3
    return {"plain": float(grid.itl_s[0, 0]) * ms, "draft": float(grid.draft_step_s[0, 1]) * ms,
            "verify": float(grid.verify_s[0, 1]) * ms, "step": float(grid.itl_s[0, 1]) * ms}


def part_rows(cases_and_grids) -> pd.DataFrame:
    """One row per (corpus row, part): measured, planner, error = planner / measured - 1."""
    out = []
    for case, grid in cases_and_grids:
        row, pub = case.row, published_parts(case.row)
        mine = planner_parts(grid)
        for part in PARTS:
            out.append({"row_id": int(row.row_id), "source_id": row.source_id, "draft": row.draft_method,
                        "tp": int(row.tp), "batch_size": int(row.batch_size), "k": int(row.k),
                        "context_len": int(row.context_len), "part": part, "measured_ms": pub[part],
                        "predicted_ms": mine[part], "error": mine[part] / pub[part] - 1.0})
    return pd.DataFrame(out, columns=["row_id", "source_id", "draft", "tp", "batch_size", "k", "context_len", "part",
                                      "measured_ms", "predicted_ms", "error"])


def summarize_parts(parts: pd.DataFrame) -> list[dict]:
    """Per draft method and part: rows, median error, MAPE, worst |error|."""
    out = []
    for (draft, part), g in parts.groupby(["draft", "part"], sort=False):
        e = g.error.to_numpy(dtype=float)
        out.append({"draft": draft, "part": part, "n": int(e.size), "median": float(np.median(e)),
                    "mape": float(np.mean(np.abs(e))), "worst": float(np.max(np.abs(e)))})
    return out


def markdown_parts(summary: list[dict]) -> list[str]:
    """The section of transfer.md (empty without rows)."""
    if not summary:
        return []
    pct = lambda x: f"{x * 100:+.1f}%"  # noqa: E731
    lines = ["## Speculative step by part (sources that publish the parts)", "",
             "Rows whose source times the step's parts (MagicDec, Appendix A.2 Table 3: plain step, the K draft"
             " passes, the verify pass, the time per committed token x the acceptance length). Error = planner /"
             " measured - 1 (`calibration/transfer_components.py`); a part priced too cheaply is where an"
             " optimistic speedup comes from.", "",
             "| draft | part | rows | median error | MAPE | worst |", "|---|---|---|---|---|---|"]
    lines += [f"| {s['draft']} | {s['part']} | {s['n']} | {pct(s['median'])} | {abs(s['mape']) * 100:.1f}% |"
              f" {s['worst'] * 100:.1f}% |" for s in summary]
    median = {(s["draft"], s["part"]): s["median"] for s in summary}
    for draft in dict.fromkeys(d for d, _ in median):
        m = {part: median[draft, part] for part in PARTS}
        lines += ["", f"{draft}: the speculative step is priced {pct(m['step'])} against {pct(m['plain'])} for the"
                  f" plain step, a speedup {pct((1 + m['plain']) / (1 + m['step']) - 1)} optimistic from the parts alone"
                  f" (medians); the draft passes {pct(m['draft'])}, the verify pass {pct(m['verify'])}."]
    return lines + [""]


# corpus draft labels -> the planner's draft method they describe
PLANNER_METHODS = {"self-spec": "self", "draft-model": "model"}


def parts_by_method(summary: list[dict]) -> dict:
    """{planner draft method: {"label": corpus draft label, "n": rows, "median": {part: median error}}} for
    the band file (simulator/data/transfer_error.json), which a prediction with that draft method quotes."""
    out: dict = {}
    for s in summary:
        method = PLANNER_METHODS.get(str(s["draft"]).split(":")[0])
        if method is None or (method in out and out[method]["label"] != s["draft"]):
            continue  # one published setting per method: the first listed
        out.setdefault(method, {"label": s["draft"], "n": s["n"], "median": {}})["median"][s["part"]] = s["median"]
    return out
