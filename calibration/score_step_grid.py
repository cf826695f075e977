"""Score the planner's verify pass on a measured step grid (calibration/step_grid.py's output).

    python -m calibration.score_step_grid DIR [--hardware NAME] [--output FILE]

DIR holds step_grid.csv and step_grid.meta.json. For every measured cell (model, context L, batch B,
draft length K) the planner prices the same pass with the physics of simulator/plan/grid.py's
verify pass (verify_over_context, then pass_time_s as the engine runs it): the model from the
catalog (its layer count cut to the layers the run timed, when it timed fewer), the hardware of the
meta (h100-sxm, h200; --hardware overrides), TP 1, the run's dtype, the ideal engine (every pass a
CUDA graph, no host time: what the measurement is), the learned layer off (its terms are an
engine's host time, which a bare graph replay does not have), routing uniform with no reuse
between a sequence's tokens (what a random router gives). The planner's sampling op is left out:
the measured pass ends at the logits. What the kernel times rest on (measured tables, a prior,
the datasheet) is printed with the scores.

Printed: per model and context, measured beside predicted ms per (B, K); MAPE by batch band and by
K; and the speedup-shaped ratio r(B, K) = t(B, K) / t(B, 0) measured beside predicted (what a
speculative decision hangs on: the verify cost of K drafts relative to plain decoding), with its
MAPE by band.
"""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd

from calibration.step_grid import COLUMNS, CSV_NAME, META_NAME
from simulator.errors import PlannerError

B_BANDS = ((1, 8), (9, 32), (33, 10 ** 9))  # the bands of the transfer report's batch table
NEEDED = ("model", "context_len", "batch_size", "k", "layers_timed", "layers_model", "median_s")


def band_label(lo: int, hi: int) -> str:
    return f"B {lo}+" if hi >= 10 ** 9 else f"B {lo}-{hi}"


def read_grid(folder: str | Path) -> tuple[pd.DataFrame, dict]:
    """(rows, meta) of a step-grid folder; a missing or malformed file is one PlannerError line."""
    from simulator.files import read_json_file

    folder = Path(folder)
    csv_path, meta_path = folder / CSV_NAME, folder / META_NAME
    if not folder.is_dir():
        raise PlannerError(f"{folder}: not a folder; give the folder gpu_step_grid.py wrote (--output)")
    if not csv_path.is_file():
        raise PlannerError(f"{csv_path}: missing; run python calibration/scripts/gpu_step_grid.py --output {folder}")
    meta = read_json_file(meta_path, "step-grid meta") if meta_path.is_file() else {}
    try:
        df = pd.read_csv(csv_path)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as err:
        raise PlannerError(f"{csv_path}: not a step-grid CSV ({str(err).splitlines()[0]})") from None
    missing = [c for c in NEEDED if c not in df.columns]
    if missing:
        raise PlannerError(f"{csv_path}: columns {', '.join(missing)} missing (expected {', '.join(COLUMNS)})")
    if df.empty:
        raise PlannerError(f"{csv_path}: no measured rows (the run stopped before its first cell)")
    for c in NEEDED[1:]:
        df[c] = pd.to_numeric(df[c], errors="coerce")
    bad = df[list(NEEDED[1:])].isna().any(axis=1) | (df["median_s"] <= 0)
    if bad.any():
        raise PlannerError(f"{csv_path}: row {int(np.flatnonzero(bad.to_numpy())[0]) + 2} has a missing or"
                           f" non-positive number; fix or drop it")
    return df, meta


def scenario_for(model: str, hardware: str, dtype: str, context_len: int, layers: int | None = None):
    """The planner's scenario of one measured cell group (see the module docstring)."""
    from simulator.specs.scenario import build_scenario

    raw = {"model": {"name": model}, "hardware": {"name": hardware, "tp": 1}, "engine": {"name": "ideal"},
           "calibration": {"learned": False}, "workload": {"context_len": int(context_len)},
           "precision": {"weights": dtype, "activations": dtype, "kv_cache": dtype}, "routing": {"reuse": 0.0}}
    sc = build_scenario(raw, origin="step grid")
    if layers is not None and layers != sc.model.num_layers:
        sc = replace(sc, model=replace(sc.model, num_layers=int(layers)))
    return sc


def predict_verify_s(sc, batch_sizes, ks) -> tuple[np.ndarray, np.ndarray | None]:
    """(verify seconds without the sampler, experts touched per MoE layer or None), arrays (n_batch, n_k),
    at the scenario's context: step_passes.verify_over_context priced as the engine runs it (pass_time_s)."""
    from simulator.physics.engine_time import expert_batch, pass_time_s, verify_in_graph
    from simulator.physics.experts import experts_touched_correlated
    from simulator.plan.step_passes import verify_over_context
    from simulator.specs.routing import expert_probabilities

    B = np.asarray(batch_sizes, dtype=float)[:, None, None]
    K = np.asarray(ks, dtype=float)[None, :, None]
    C = np.asarray([sc.context_len], dtype=float)[None, None, :]
    verify, _ = verify_over_context(sc, B, K, C, expert_batch(sc.engine, sc.model, B, K))
    detail = verify.detail
    sampler = detail.time_s[detail.names.index("sampling")] if "sampling" in detail.names else 0.0
    kernels = verify.n_kernels - (1 if "sampling" in detail.names else 0)  # only read outside a graph
    t = pass_time_s(verify.total_s - sampler, kernels, verify_in_graph(sc.engine, B, K),
                    sc.engine.eager_launch_per_kernel_s)[..., 0]
    touched = None
    if sc.model.is_moe:
        p = expert_probabilities(sc.deployment.routing, sc.model.num_experts, sc.model.experts_per_token)
        touched = np.broadcast_to(experts_touched_correlated(B[..., 0], K[..., 0] + 1, p, sc.deployment.routing.reuse),
                                  t.shape)
    return np.broadcast_to(t, (B.shape[0], K.shape[1])), touched


def planner_kernels(sc) -> int:
    """Kernels the planner prices in one verify pass at B = 1, K = 0, its sampler left out."""
    from simulator.physics.engine_time import expert_batch
    from simulator.plan.step_passes import verify_over_context

    one = np.ones((1, 1, 1))
    verify, _ = verify_over_context(sc, one, 0 * one, sc.context_len * one, expert_batch(sc.engine, sc.model, one, 0 * one))
    return int(round(float(np.max(verify.n_kernels)))) - (1 if "sampling" in verify.detail.names else 0)


def score_cells(df: pd.DataFrame, meta: dict, hardware: str | None = None) -> tuple[pd.DataFrame, dict]:
    """Every measured row with the planner's prediction beside it (predicted_s, ratio columns); and what
    each model's prediction rests on."""
    hw = hardware or meta.get("hardware") or ""
    if not hw:
        raise PlannerError("the meta names no hardware catalog entry; give --hardware (h100-sxm, h200)")
    dtype = meta.get("dtype") or (str(df["dtype"].iloc[0]) if "dtype" in df.columns else "bf16")
    out, basis = [], {}
    for (model, L, layers), grp in df.groupby(["model", "context_len", "layers_timed"], sort=False):
        sc = scenario_for(model, hw, dtype, int(L), int(layers))
        bs, ks = np.unique(grp["batch_size"]), np.unique(grp["k"])
        t, touched = predict_verify_s(sc, bs, ks)
        g = grp.copy()
        bi, ki = np.searchsorted(bs, g["batch_size"]), np.searchsorted(ks, g["k"])
        g["predicted_s"] = t[bi, ki]
        if touched is not None:
            g["predicted_experts_touched"] = np.round(touched[bi, ki], 2)
        out.append(g)
        layers_note = "" if int(layers) == sc.model.num_layers and int(layers) == int(grp["layers_model"].iloc[0]) \
            else f"; {int(layers)} of {int(grp['layers_model'].iloc[0])} layers, as timed"
        basis[model] = (f"{sc.hardware.name}, TP 1, {dtype}, {sc.cost_source}; ideal engine{layers_note};"
                        f" {planner_kernels(sc)} kernels a pass")
    cells = pd.concat(out, ignore_index=True)
    cells["error"] = cells["predicted_s"] / cells["median_s"] - 1.0
    base = cells[cells["k"] == 0].set_index(["model", "context_len", "batch_size"])
    key = pd.MultiIndex.from_frame(cells[["model", "context_len", "batch_size"]])
    has0 = key.isin(base.index)
    cells["measured_ratio"] = np.where(has0, cells["median_s"].to_numpy() / base["median_s"].reindex(key).to_numpy(), np.nan)
    cells["predicted_ratio"] = np.where(has0, cells["predicted_s"].to_numpy()
                                        / base["predicted_s"].reindex(key).to_numpy(), np.nan)
    cells["ratio_error"] = cells["predicted_ratio"] / cells["measured_ratio"] - 1.0
    return cells, basis


def mape(errors) -> float:
    """Mean |predicted / measured - 1| (a share); NaN with no rows."""
    e = np.abs(np.asarray(errors, dtype=float))
    e = e[np.isfinite(e)]
    return float(e.mean()) if e.size else float("nan")


def summary(cells: pd.DataFrame) -> dict:
    """Per model: n, MAPE overall, by batch band and by K (step time), and the ratio's MAPE by band (K > 0)."""
    res = {}
    for model, g in cells.groupby("model", sort=False):
        spec = g[g["k"] > 0]
        res[model] = {
            "n": int(len(g)), "mape": mape(g["error"]), "worst": float(np.abs(g["error"]).max()),
            "median_error": float(np.median(g["error"])),
            "by_band": {band_label(lo, hi): {"n": int(m.sum()), "mape": mape(g.loc[m, "error"])}
                        for lo, hi in B_BANDS if (m := g["batch_size"].between(lo, hi)).any()},
            "by_k": {int(k): mape(gk["error"]) for k, gk in g.groupby("k")},
            "ratio_mape": mape(spec["ratio_error"]),
            # a sanity figure of the data: K + 1 query tokens measured faster than one by more than 2%
            "measured_ratio_below_098": int((spec["measured_ratio"] < 0.98).sum()),
            "ratio_by_band": {band_label(lo, hi): {"n": int(m.sum()), "mape": mape(spec.loc[m, "ratio_error"])}
                              for lo, hi in B_BANDS if (m := spec["batch_size"].between(lo, hi)).any()},
        }
    return res


def _pct(x: float) -> str:
    return "n/a" if not np.isfinite(x) else f"{100 * x:.1f}%"


def report(cells: pd.DataFrame, meta: dict, basis: dict) -> str:
    """The printed scores (markdown)."""
    lines = ["# The planner's verify pass on a measured step grid", "",
             f"Measured: {meta.get('device', '?')}, torch {meta.get('torch_version', '?')}, "
             f"{meta.get('dtype', '?')}, run {meta.get('status', '?')} ({meta.get('cells_measured', len(cells))} of "
             f"{meta.get('cells_planned', '?')} cells), {meta.get('timing', '')}.", ""]
    for model, info in meta.get("models", {}).items():
        if model in basis:
            ops = info.get("ops_per_pass") or {}
            top = ", ".join(f"{name} {n}" for name, n in list((ops.get("by_op") or {}).items())[:6])
            lines.append(f"- {model}: attention `{info.get('attention')}`, experts `{info.get('moe_dispatch') or '-'}`,"
                         f" {info.get('layers_timed')} of {info.get('layers_model')} layers,"
                         f" {info.get('weight_sets')} weight sets; {ops.get('total', '?')} ops a pass ({top})"
                         + (f"; error: {info['error']}" if info.get("error") else "")
                         + "".join(f"; note: {n}" for n in info.get("notes", [])[:5]))
    lines += [""] + [f"- predicted for {m}: {b}" for m, b in basis.items()]
    if "graphed" in cells.columns and str(meta.get("device", "")).startswith("cuda"):
        eager = cells[pd.to_numeric(cells["graphed"], errors="coerce") == 0]
        if len(eager):
            lines += ["", f"**{len(eager)} rows were not captured in a CUDA graph** (eager launches: host-bound,"
                          f" not comparable with the ideal engine): {', '.join(sorted(set(eager['model'])))}."]
    lines += ["", "Predicted = the grid's verify pass without its sampler (the measured pass ends at the logits)."
              " Error = predicted / measured - 1. r(B, K) = t(B, K) / t(B, 0).", ""]
    s = summary(cells)
    lines += ["## MAPE", "", "| model | n | step MAPE | worst | median error | "
              + " | ".join(band_label(lo, hi) for lo, hi in B_BANDS) + " | r(B, K) MAPE, K > 0 | "
              + " | ".join(f"r: {band_label(lo, hi)}" for lo, hi in B_BANDS) + " |",
              "|---" * (6 + 2 * len(B_BANDS)) + "|"]
    for model, r in s.items():
        bands = [_pct(r["by_band"].get(band_label(lo, hi), {}).get("mape", np.nan)) for lo, hi in B_BANDS]
        rbands = [_pct(r["ratio_by_band"].get(band_label(lo, hi), {}).get("mape", np.nan)) for lo, hi in B_BANDS]
        lines.append(f"| {model} | {r['n']} | {_pct(r['mape'])} | {_pct(r['worst'])} | {100 * r['median_error']:+.1f}% | "
                     + " | ".join(bands) + f" | {_pct(r['ratio_mape'])} | " + " | ".join(rbands) + " |")
    for model, r in s.items():
        if r["measured_ratio_below_098"]:
            lines.append(f"\n{model}: {r['measured_ratio_below_098']} cells measured r(B, K) < 0.98 (K + 1 tokens"
                         " faster than one: timing noise or a kernel switch; read those cells with care).")
    lines += ["", "Step MAPE by K:", "", "| model | " + " | ".join(f"K={k}" for k in sorted(cells["k"].unique())) + " |",
              "|---" * (1 + cells["k"].nunique()) + "|"]
    for model, r in s.items():
        lines.append(f"| {model} | " + " | ".join(_pct(r["by_k"].get(int(k), np.nan))
                                                   for k in sorted(cells["k"].unique())) + " |")
    for (model, L), g in cells.groupby(["model", "context_len"], sort=False):
        ks = sorted(g["k"].unique())
        lines += ["", f"## {model}, context {int(L)}: measured / predicted ms, and r(B, K) measured / predicted", "",
                  "| B | " + " | ".join(f"K={k}" for k in ks) + " |", "|---" * (1 + len(ks)) + "|"]
        for b, gb in g.groupby("batch_size"):
            row = gb.set_index("k")
            cells_txt = []
            for k in ks:
                if k not in row.index:
                    cells_txt.append("")
                    continue
                c = row.loc[k]
                txt = f"{1e3 * c['median_s']:.3g} / {1e3 * c['predicted_s']:.3g}"
                if k > 0 and np.isfinite(c["measured_ratio"]):
                    txt += f" (r {c['measured_ratio']:.2f} / {c['predicted_ratio']:.2f})"
                cells_txt.append(txt)
            lines.append(f"| {int(b)} | " + " | ".join(cells_txt) + " |")
        if "predicted_experts_touched" in g.columns and "experts_touched" in g.columns:
            t = g.dropna(subset=["experts_touched"])
            if len(t):
                rel = np.median(t["predicted_experts_touched"] / t["experts_touched"].astype(float))
                lines.append(f"\nExperts touched per layer: planner / measured, median {rel:.3f} over {len(t)} cells.")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m calibration.score_step_grid", description=__doc__.splitlines()[0])
    ap.add_argument("folder", help="folder with step_grid.csv and step_grid.meta.json")
    ap.add_argument("--hardware", help="hardware catalog entry to predict for (default: the meta's)")
    ap.add_argument("--output", help="write the report here as well (markdown)")
    ap.add_argument("--json", help="write the summary figures here (JSON)")
    args = ap.parse_args(argv)
    try:
        from simulator.files import check_output_file, write_atomically
        for path, flag in ((args.output, "--output"), (args.json, "--json")):
            if path:
                check_output_file(path, flag)
        df, meta = read_grid(args.folder)
        cells, basis = score_cells(df, meta, args.hardware)
        text = report(cells, meta, basis)
        if args.output:
            write_atomically(args.output, text, "--output")
        if args.json:
            write_atomically(args.json, json.dumps({"basis": basis, "summary": summary(cells)}, indent=2) + "\n", "--json")
    except PlannerError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
