"""A validation's result and its report files (used by :mod:`calibration.validate`): the chart, validation.md / .png /
.json / _rows.csv, and the fitted engine terms written into a calibration profile."""
from __future__ import annotations

import json
from pathlib import Path
from dataclasses import dataclass

import pandas as pd


@dataclass
class ValidationResult:
    """What :func:`calibration.validate.validate` finds, as these report files show it."""

    rows: pd.DataFrame  # measured + predicted per (B, K), with split
    per_batch: pd.DataFrame  # K* measured vs predicted, regret
    overhead: dict
    summary: dict

    def markdown(self, chart: str | None = None) -> str:
        return markdown(self, chart)


def markdown(result: ValidationResult, chart: str | None = None) -> str:
    """validation.md: the held-out figures, K* per batch size and, for MoE runs, expert loading; ``chart``: the
    chart's file name beside it, linked (None where no chart is written: printed without --output-dir)."""
    s = result.summary
    lines = [f"# Validation: {s['scenario']} against {s['measured']}", "",
             f"- step times rest on: {s['step_time_source']}",
             f"- measured rows: {s['n_rows']} ({s['n_heldout']} held out), batch sizes {s['batch_sizes']},"
             f" K {s['ks']}",
             f"- fitted engine terms (training rows, NNLS): ITL = {result.overhead['scale']:.3f} x roofline"
             f" + {result.overhead['fixed_ms']:.3f} ms + {result.overhead['per_seq_ms']:.4f} ms x B",
             f"- acceptance: {s['acceptance']}", "",
             "| metric (held-out rows) | value |", "|---|---|",
             f"| ITL MAPE, physics only (no fitted overhead) | {s['itl_mape_physics']:.1%} |",
             f"| ITL MAPE | {s['itl_mape']:.1%} |",
             f"| goodput MAPE | {s['goodput_mape']:.1%} |",
             f"| K* agreement (argmax among each batch size's held-out K) | {s['k_agreement']:.0%} |",
             f"| regret, worst batch size | {s['worst_regret']:.3f} |",
             f"| regret, mean | {s['mean_regret']:.3f} |", "",
             f"Goal: worst regret >= {s['regret_goal']:.2f} (measured goodput at the predicted K* within"
             f" {1 - s['regret_goal']:.0%} of the best): **{'met' if s['worst_regret'] >= s['regret_goal'] else 'not met'}**"
             f" on held-out rows. Over all rows (the training rows set the two engine terms, so not a"
             f" held-out figure): K* agreement {s['k_agreement_all_rows']:.0%}, worst regret"
             f" {s['worst_regret_all_rows']:.3f}, mean {s['mean_regret_all_rows']:.3f}.", "",
             "## Per batch size", "",
             "| rows | B | K compared | K* measured | K* predicted | best measured tok/s/seq |"
             " measured at predicted K* | regret |",
             "|---|---|---|---|---|---|---|---|"]
    for r in result.per_batch.itertuples():
        b_label = f"{r.batch_size} (reuse {r.router_reuse:g})" if "router_reuse" in result.per_batch else r.batch_size
        lines.append(f"| {r.rows} | {b_label} | {r.ks} | {r.k_measured} | {r.k_predicted} |"
                     f" {r.best_goodput:.1f} | {r.goodput_at_predicted:.1f} | {r.regret:.3f} |")
    if "experts_touched_predicted" in result.rows:
        lines += ["", "## Expert loading (MoE): predicted vs measured, side by side", "",
                  f"Distinct experts per MoE layer per verify step; routing: {s['routing']};"
                  f" held-out MAPE {s['experts_touched_mape']:.1%}." + (
                      " Reuse fitted from the router traces (per layer, averaged) vs the count fit: "
                      + ", ".join(f"r = {r}: {v['trace']:.2f} vs {v['count_fit']:.2f}"
                                  for r, v in s["trace_reuse"].items() if v["count_fit"] is not None) + "."
                      if s.get("trace_reuse") else "") + " Uniform routing would predict"
                  f" E(1 - (1 - k/E)^T).", "",
                  "| B | K | reuse rho | held out | tokens B(K+1) | experts measured | experts predicted |"
                  " verify ms measured | expert op ms predicted | ITL ms measured | ITL ms predicted |",
                  "|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in result.rows.sort_values(["routing_reuse", "batch_size", "k"]).itertuples():
            lines.append(f"| {r.batch_size} | {r.k} | {r.routing_reuse:.3f} | {'yes' if r.heldout else ''} |"
                         f" {r.batch_size * (r.k + 1)} | {r.experts_touched:.1f} |"
                         f" {r.experts_touched_predicted:.1f} | {r.verify_ms:.2f} | {r.expert_ms_predicted:.2f} |"
                         f" {r.itl_ms:.2f} | {r.itl_ms_predicted:.2f} |")
    if chart:
        lines += ["", f"![predicted vs measured]({chart})"]
    lines.append("")
    return "\n".join(lines)


def validation_chart(result: ValidationResult):
    """Predicted vs measured ITL per batch size (one line per K) and goodput, side by side."""
    import altair as alt

    rows = result.rows
    long = pd.concat([
        rows.assign(kind="measured", itl=rows.itl_ms, goodput=rows.goodput_per_seq),
        rows.assign(kind="predicted", itl=rows.itl_ms_predicted, goodput=rows.goodput_predicted),
    ])[["batch_size", "k", "kind", "itl", "goodput", "heldout"]]
    base = alt.Chart(long).encode(
        x=alt.X("batch_size:Q", scale=alt.Scale(type="log", base=2), title="batch size"),
        color=alt.Color("k:O", title="K"),
        strokeDash=alt.StrokeDash("kind:N", title=""),
    )
    itl = base.mark_line(point=True).encode(y=alt.Y("itl:Q", scale=alt.Scale(type="log"), title="ITL per step [ms]"))
    good = base.mark_line(point=True).encode(y=alt.Y("goodput:Q", title="goodput [tokens/s per sequence]"))
    title = (f"{result.summary['scenario']}: held-out ITL MAPE {result.summary['itl_mape']:.1%},"
             f" worst regret {result.summary['worst_regret']:.3f}")
    return alt.hconcat(itl.properties(width=330, height=260), good.properties(width=330, height=260),
                       title=title)


REPORT_NAMES = {"markdown": "validation.md", "png": "validation.png", "json": "validation.json",
                "rows": "validation_rows.csv"}


def write_report(result: ValidationResult, out_dir: str | Path) -> dict[str, Path]:
    """validation.md / .png / .json / _rows.csv, rendered first and swapped in together (all or none)."""
    import vl_convert as vlc

    from simulator.cli.common import check_output_dir, write_files_atomically

    out = check_output_dir(out_dir)
    names = REPORT_NAMES
    chart = validation_chart(result)
    content = {"png": vlc.vegalite_to_png(chart.to_json(), scale=1.5), "markdown": result.markdown(names["png"]),
               "json": json.dumps(result.summary, indent=2) + "\n", "rows": result.rows.to_csv(index=False)}
    write_files_atomically(out, {names[k]: content[k] for k in names})
    return {k: out / v for k, v in names.items()}


def update_profile(result: ValidationResult, profile_path: str | Path, measured: str) -> Path:
    """Write the fitted engine terms into the profile (atomically), so predictions carry them."""
    from simulator.cli.common import write_atomically

    path = Path(profile_path)
    data = json.loads(path.read_text())
    o = result.overhead
    data["engine"] = {"scale": round(o["scale"], 4), "fitted_from": measured,
                      "heldout_itl_mape": round(result.summary["itl_mape"], 4),
                      "date": pd.Timestamp.now(tz="UTC").isoformat(timespec="seconds")}
    data["step_overhead_s"] = {"fixed": round(o["fixed_ms"] / 1e3, 7), "per_sequence": round(o["per_seq_ms"] / 1e3, 8),
                               "per_token": 0.0}
    write_atomically(str(path), json.dumps(data, indent=1) + "\n")
    return path
