"""The fleet-sweep view: open a sweep result table (``python -m simulator.sweep``) and draw its Pareto front.

Pure functions, DataFrames in, ``alt.Chart`` out (no Streamlit here; the page is
``pages/1_Fleet_sweep.py``). The front is recomputed with :func:`simulator.sweep.tables.pareto_flags`
so that a filtered table (one traffic profile, one dtype) gets its own front.
"""
from __future__ import annotations

import io
from pathlib import Path

import altair as alt
import pandas as pd

from simulator.errors import PlannerError
from simulator.sweep.tables import COST, PER_REPLICA_COST, pareto_flags

LATENCIES = {"tpot_p50_s": "TPOT p50 at capacity (s)", "tpot_p99_s": "TPOT p99 at capacity (s)",
             "ttft_p99_s": "TTFT p99 at capacity (s)"}
NEEDED = ("model", "hardware", "tp", "policy")


def read_table(source, name: str | None = None) -> pd.DataFrame:
    """A sweep table from a path (the caller's own: the page reads a typed path with
    :func:`dashboard.server_files.read_results_table`), or from bytes / a file-like object with its ``name``."""
    if isinstance(source, (str, Path)):
        path = Path(source)
        if not path.exists():
            raise PlannerError(f"{path}: no such file")
        if path.is_dir():
            path = path / "results.parquet" if (path / "results.parquet").exists() else path / "results.csv"
        name, data = path.name, path.read_bytes()
    elif isinstance(source, (bytes, bytearray)):
        data, name = bytes(source), name or "upload.csv"
    else:
        data = source.getvalue() if hasattr(source, "getvalue") else source.read()
        name = name or getattr(source, "name", "upload.csv")
    try:
        if name.endswith(".parquet"):
            df = pd.read_parquet(io.BytesIO(data))
        else:
            df = pd.read_csv(io.BytesIO(data))
    except Exception as err:  # noqa: BLE001 -- any reader error is a bad file to the user
        raise PlannerError(f"{name}: not a readable sweep table ({type(err).__name__}: {err})") from None
    missing = [c for c in NEEDED if c not in df.columns]
    if COST not in df.columns and PER_REPLICA_COST not in df.columns:
        missing.append(COST)
    if missing:
        raise PlannerError(f"{name}: not a sweep result table (missing {', '.join(missing)})")
    if COST not in df.columns:  # a table written before the fleet's $/M at the target: its front says so
        df = df.assign(**{COST: df[PER_REPLICA_COST]})
        df.attrs["cost_title"] = "$/M output tokens, one replica at full load"
    return df


def cost_title(df: pd.DataFrame) -> str:
    """What the cost column holds: the fleet's $/M at the target, or one replica's in a table from before it."""
    return df.attrs.get("cost_title", "fleet $ per M output tokens at the target")


def config_label(df: pd.DataFrame) -> pd.Series:
    parts = [df.hardware.astype(str) + " tp=" + df.tp.astype(str)]
    for col in ("dtype", "act_dtype", "kv_dtype", "traffic", "engine"):
        if col in df.columns and df[col].nunique() > 1:
            parts.append(" " + df[col].astype(str))
    parts.append(" " + df.policy.astype(str))
    out = parts[0]
    for p in parts[1:]:
        out = out + p
    return out


def pareto_frame(df: pd.DataFrame, latency: str = "tpot_p50_s") -> pd.DataFrame:
    """Rows meeting the target with a finite cost and latency, a fresh ``pareto`` flag and a label."""
    ok = df.get("meets_target", pd.Series(True, index=df.index)).fillna(False).astype(bool)
    sub = df[ok & pd.to_numeric(df[COST], errors="coerce").notna() & pd.to_numeric(df[latency], errors="coerce").notna()]
    sub = sub.reset_index(drop=True).copy()
    sub["pareto"] = pareto_flags(sub, latency)
    sub["config"] = config_label(sub) if len(sub) else pd.Series(dtype=str)
    return sub


def pareto_chart(df: pd.DataFrame, latency: str = "tpot_p50_s") -> alt.Chart:
    """$/M output tokens vs latency: every configuration meeting the target, the front per model as a line."""
    data = pareto_frame(df, latency)
    data = data.assign(front=data["model"].astype(str) + (" / " + data["traffic"].astype(str) if "traffic" in data
                                                         else ""))
    cols = ["model", "traffic", "front", "config", latency, COST, "pareto", "gpus", "max_load_per_replica"]
    data = data[[c for c in cols if c in data.columns]]
    x = alt.X(f"{latency}:Q", title=LATENCIES.get(latency, latency), scale=alt.Scale(zero=False))
    y = alt.Y(f"{COST}:Q", title=cost_title(df),
              scale=alt.Scale(type="log"))
    color = alt.Color("model:N", title="Model")
    tooltip = [alt.Tooltip("model:N"), alt.Tooltip("config:N"), alt.Tooltip(f"{latency}:Q", format=".4f"),
               alt.Tooltip(f"{COST}:Q", title="$/M tok", format=".3f")]
    if "gpus" in data.columns:
        tooltip.append(alt.Tooltip("gpus:Q", title="GPUs"))
    points = alt.Chart().mark_circle(size=50).encode(
        x=x, y=y, color=color, tooltip=tooltip,
        opacity=alt.condition("datum.pareto", alt.value(1.0), alt.value(0.25)))
    # one front per model and traffic mix: a chat row and a RAG row serve different demands
    front = alt.Chart().transform_filter("datum.pareto").mark_line(point=False, strokeWidth=2).encode(
        x=x, y=y, color=color, detail="front:N", order=alt.Order(f"{latency}:Q"),
        **({"strokeDash": alt.StrokeDash("traffic:N", title="Traffic")} if "traffic" in data else {}))
    return alt.layer(points, front, data=data, height=420, title=alt.TitleParams(
        f"Pareto front: {cost_title(df)} vs latency, per model and traffic mix",
        subtitle="configurations meeting the target load; faded: dominated"))
