"""The sizing report's charts: Vega-Lite specifications rendered to inline SVG by vl-convert at build time
(imported on first use), so the HTML report loads nothing when opened."""
from __future__ import annotations

import re
import threading

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


VEGA_LITE_SCHEMA = "https://vega.github.io/schema/vega-lite/v6.4.1.json"
_VIEW = {"view": {"continuousWidth": 300, "continuousHeight": 300}}


_warmup: threading.Thread | None = None


def start_renderer_warmup() -> None:
    """Start vl-convert's JavaScript engine in a background thread. Its first conversion spends about
    0.4 s starting that engine with the GIL released, so a caller that will render charts after a long
    computation (``size``) hides it behind the computation."""
    global _warmup
    if _warmup is None:
        _warmup = threading.Thread(target=_render_tiny_chart, name="vl-convert warm-up", daemon=True)
        _warmup.start()


def _render_tiny_chart() -> None:
    import vl_convert as vlc
    vlc.vegalite_to_svg({"$schema": VEGA_LITE_SCHEMA, "data": {"values": [{"x": 0}]}, "mark": "point",
                         "encoding": {"x": _q("x")}})


def charts(res: SizingResult) -> dict[str, str]:
    """name -> SVG text. Empty when there is nothing to draw."""
    import vl_convert as vlc

    if _warmup is not None:
        _warmup.join()  # one conversion at a time

    specs = chart_specs(res)
    return {name: _inline_svg(vlc.vegalite_to_svg(spec)) for name, spec in specs.items()}


def chart_specs(res: SizingResult) -> dict[str, dict]:
    """name -> Vega-Lite specification, written out as plain dicts (the two charts are small; building
    them through Altair cost more than rendering them)."""
    out = {}
    pts = res.points
    if len(pts):
        out["pareto"] = _pareto_spec(res, pts)
    if len(res.capacity):
        out["capacity"] = _capacity_spec(res, res.capacity)
    return out


def _pareto_spec(res: SizingResult, pts: pd.DataFrame) -> dict:
    d = pts.copy()
    d["config"] = d.hardware + " tp=" + d.tp.astype(str)
    d["tok_s_per_gpu"] = d.throughput_tok_s / d.tp.astype(float)
    d["meets SLOs"] = np.where(d.meets, "yes", "no")
    front = pareto_front(d[d.meets], "tpot_p50_s", "tok_s_per_gpu")
    tips = ["config", "policy", "load", "tpot_p50_s", "ttft_p99_s", "tok_s_per_gpu"]
    layers = [{"data": {"values": _records(d, tips + ["meets SLOs"])},
               "mark": {"type": "point", "filled": True, "size": 70},
               "encoding": {
                   "color": {"field": "config", "title": "candidate", "type": "nominal"},
                   "opacity": {"field": "meets SLOs", "scale": {"domain": ["yes", "no"], "range": [1.0, 0.25]},
                               "type": "nominal"},
                   "shape": {"field": "policy", "title": "policy", "type": "nominal"},
                   "tooltip": [{"field": f, "type": "nominal" if f in ("config", "policy") else "quantitative"}
                               for f in tips],
                   "x": _q("tpot_p50_s", title="TPOT p50 [s]", scale={"zero": False}),
                   "y": _q("tok_s_per_gpu", title="output tokens/s per GPU")}}]
    if len(front) > 1:
        layers.append({"data": {"values": _records(front, ["tpot_p50_s", "tok_s_per_gpu"])},
                       "mark": {"type": "line", "color": "black", "strokeDash": [4, 3]},
                       "encoding": {"x": _q("tpot_p50_s"), "y": _q("tok_s_per_gpu")}})
    tpot = res.spec.slo.targets.get("tpot_p50_s")
    if tpot:
        layers.append({"data": {"values": [{"x": float(tpot)}]}, "mark": {"type": "rule", "color": "red"},
                       "encoding": {"x": _q("x")}})
    return {"$schema": VEGA_LITE_SCHEMA, "config": _VIEW, "layer": layers, "height": 380, "width": CHART_WIDTH,
            "title": "Throughput per GPU vs TPOT at every load tried (faded: misses an SLO; dashed: Pareto front)"}


CHART_WIDTH = 720  # px: the report's column (1100 px) less the axis labels; SVGs scale down, never up


def _capacity_spec(res: SizingResult, cap: pd.DataFrame) -> dict:
    """One horizontal bar per candidate and policy (grouped per candidate, never stacked), on one shared
    axis at the page's width, 12 px per bar: readable however many candidates were searched."""
    d = cap.copy()
    d["config"] = d.hardware + " tp=" + d.tp.astype(str) + " " + d["dtype"].astype(str)
    d["lo"] = d.load_band_low.fillna(d.max_load_per_replica)
    d["hi"] = d.load_band_high.fillna(d.max_load_per_replica)
    title = f"max load per replica [{res.spec.load_unit}]"
    y = {"field": "config", "title": None, "type": "nominal", "sort": None, "axis": {"labelLimit": 220}}
    bars = {"mark": {"type": "bar"},
            "encoding": {"y": y, "yOffset": {"field": "policy", "type": "nominal"},
                         "color": {"field": "policy", "type": "nominal", "legend": {"orient": "top"}},
                         "x": _q("max_load_per_replica", stack=None, title=title),
                         "tooltip": [{"field": "config", "type": "nominal"}, {"field": "policy", "type": "nominal"},
                                     _q("max_load_per_replica", title=title)]}}
    err = {"mark": {"type": "rule", "color": "black"},
           "encoding": {"y": y, "yOffset": {"field": "policy", "type": "nominal"}, "x": _q("lo", title=title),
                        "x2": {"field": "hi"}}}
    return {"$schema": VEGA_LITE_SCHEMA, "config": _VIEW | {"axis": {"labelFontSize": 12, "titleFontSize": 12}},
            "data": {"values": _records(d, ["config", "policy", "max_load_per_replica", "lo", "hi"])},
            "layer": [bars, err], "width": CHART_WIDTH, "height": {"step": 12},  # per bar (yOffset band)
            "title": "Highest load one replica carries within the SLOs (line: calibration/validation band where known)"}


def _q(field: str, **kw) -> dict:
    return {"field": field, **kw, "type": "quantitative"}


def _records(df: pd.DataFrame, cols: list[str]) -> list[dict]:
    """Rows as JSON-ready dicts: numpy scalars made Python, NaN made null (as Vega-Lite reads a gap)."""
    def plain(v):
        if isinstance(v, (np.floating, float)):
            return None if np.isnan(v) else float(v)
        return v.item() if isinstance(v, np.generic) else v
    return [{c: plain(v) for c, v in zip(cols, row)} for row in df[cols].itertuples(index=False, name=None)]


def _inline_svg(svg: str) -> str:
    """Drop the XML namespace declarations: HTML5 parses inline <svg> without them, and the file then
    holds no URL at all (nothing for a strict offline check to flag)."""
    return re.sub(r'\s+xmlns(:xlink)?="http://www\.w3\.org/[^"]*"', "", svg, count=2)
