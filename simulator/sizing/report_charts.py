"""The sizing report's charts: Altair specifications rendered to inline SVG by vl-convert at build time
(imported on first use), so the HTML report loads nothing when opened."""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

from simulator.sizing.fleet import SizingResult


def pareto_front(df: pd.DataFrame, x: str, y: str) -> pd.DataFrame:
    """Points not dominated by any other (lower x and higher y are better)."""
    d = df.dropna(subset=[x, y]).sort_values([x, y], ascending=[True, False])
    keep, best = [], -np.inf
    for idx, row in d.iterrows():
        if row[y] > best:
            keep.append(idx)
            best = row[y]
    return d.loc[keep]


def charts(res: SizingResult) -> dict[str, str]:
    """name -> SVG text. Empty when there is nothing to draw."""
    import altair as alt
    import vl_convert as vlc

    out = {}
    pts = res.points
    if len(pts):
        d = pts.copy()
        d["config"] = d.hardware + " tp=" + d.tp.astype(str)
        gpus = d.tp.astype(float)
        d["tok_s_per_gpu"] = d.throughput_tok_s / gpus
        d["meets SLOs"] = np.where(d.meets, "yes", "no")
        front = pareto_front(d[d.meets], "tpot_p50_s", "tok_s_per_gpu")
        base = alt.Chart(d).mark_point(size=70, filled=True).encode(
            x=alt.X("tpot_p50_s:Q", title="TPOT p50 [s]", scale=alt.Scale(zero=False)),
            y=alt.Y("tok_s_per_gpu:Q", title="output tokens/s per GPU"),
            color=alt.Color("config:N", title="candidate"),
            shape=alt.Shape("policy:N", title="policy"),
            opacity=alt.Opacity("meets SLOs:N", scale=alt.Scale(domain=["yes", "no"], range=[1.0, 0.25])),
            tooltip=["config", "policy", "load", "tpot_p50_s", "ttft_p99_s", "tok_s_per_gpu"])
        layers = [base]
        if len(front) > 1:
            layers.append(alt.Chart(front).mark_line(color="black", strokeDash=[4, 3]).encode(
                x="tpot_p50_s:Q", y="tok_s_per_gpu:Q"))
        tpot = res.spec.slo.targets.get("tpot_p50_s")
        if tpot:
            layers.append(alt.Chart(pd.DataFrame({"x": [tpot]})).mark_rule(color="red").encode(x="x:Q"))
        chart = alt.layer(*layers).properties(
            width=560, height=340,
            title="Throughput per GPU vs TPOT at every load tried (faded: misses an SLO; dashed: Pareto front)")
        out["pareto"] = _inline_svg(vlc.vegalite_to_svg(chart.to_dict()))

    cap = res.capacity
    if len(cap):
        d = cap.copy()
        d["config"] = d.hardware + " tp=" + d.tp.astype(str) + " " + d["dtype"].astype(str)  # bars never stacked
        d["lo"] = d.load_band_low.fillna(d.max_load_per_replica)
        d["hi"] = d.load_band_high.fillna(d.max_load_per_replica)
        bars = alt.Chart(d).mark_bar().encode(x=alt.X("policy:N", title=None), color="policy:N", y=alt.Y(
            "max_load_per_replica:Q", title=f"max load per replica [{res.spec.load_unit}]", stack=None))
        err = alt.Chart(d).mark_errorbar(ticks=True, color="black").encode(
            x="policy:N", y=alt.Y("lo:Q", title=""), y2="hi:Q")
        chart = alt.layer(bars, err, data=d).properties(width=90, height=220).facet(
            column=alt.Column("config:N", title=None, header=alt.Header(labelAngle=-30, labelAlign="right")),
            columns=6).properties(
            title="Highest load one replica carries within the SLOs (error bar: calibration/validation band where known)")
        out["capacity"] = _inline_svg(vlc.vegalite_to_svg(chart.to_dict()))
    return out


def _inline_svg(svg: str) -> str:
    """Drop the XML namespace declarations: HTML5 parses inline <svg> without them, and the file then
    holds no URL at all (nothing for a strict offline check to flag)."""
    return re.sub(r'\s+xmlns(:xlink)?="http://www\.w3\.org/[^"]*"', "", svg, count=2)
