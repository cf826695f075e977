"""Altair charts of serving simulations: pure functions, results in, ``alt.Chart`` out."""
from __future__ import annotations

import altair as alt
import numpy as np
import pandas as pd

MAX_POINTS = 4500  # over all policies of a chart (Altair refuses more than 5000 rows inline)


def _as_list(results) -> list:
    return list(results) if isinstance(results, (list, tuple)) else [results]


def _timeline(results, column: str) -> pd.DataFrame:
    frames = []
    runs = _as_list(results)
    budget = MAX_POINTS // max(len(runs), 1)
    for r in runs:
        s = r.steps[["t_s", column]]
        if len(s) > budget:  # evenly spaced steps (keeps the shape, not every step)
            s = s.iloc[np.linspace(0, len(s) - 1, budget).astype(int)]
        frames.append(s.assign(policy=r.policy))
    return pd.concat(frames, ignore_index=True)


def _line(df: pd.DataFrame, y: str, title: str, y_title: str) -> alt.Chart:
    return alt.Chart(df, title=title).mark_line(interpolate="step-after").encode(
        x=alt.X("t_s:Q", title="time [s]"), y=alt.Y(f"{y}:Q", title=y_title),
        color=alt.Color("policy:N"), tooltip=["policy", "t_s", y])


def k_over_time(results) -> alt.Chart:
    """Mean K of each step over time (0 = plain decoding)."""
    return _line(_timeline(results, "k_mean"), "k_mean", "Draft length K over time", "K (batch mean)")


def kv_occupancy_over_time(results) -> alt.Chart:
    """Share of the KV block budget held, per step."""
    return _line(_timeline(results, "kv_occupancy"), "kv_occupancy", "KV cache occupancy", "occupied share")


def batch_size_over_time(results) -> alt.Chart:
    """Decoding sequences per step: shows the drain of a rollout's long tail."""
    return _line(_timeline(results, "batch_size"), "batch_size", "Running batch over time", "decoding sequences")


def latency_percentiles(summaries: pd.DataFrame, metric: str = "tpot") -> alt.Chart:
    """p50 / p90 / p99 of ttft or tpot per policy (rows of ServingResult.summary)."""
    cols = [c for c in (f"{metric}_p50_s", f"{metric}_p90_s", f"{metric}_p99_s") if c in summaries]
    df = summaries.melt(id_vars=["policy"], value_vars=cols, var_name="percentile", value_name="seconds")
    df["percentile"] = df.percentile.str.extract(r"_(p\d+)_")[0]
    return alt.Chart(df, title=f"{metric.upper()} percentiles").mark_bar().encode(
        x=alt.X("policy:N"), xOffset="percentile:N", y=alt.Y("seconds:Q"), color="percentile:N",
        tooltip=["policy", "percentile", "seconds"])


def wave_sweep_chart(df: pd.DataFrame, y: str = "tokens_per_s_per_user") -> alt.Chart:
    """Per batch size and policy (rows of :func:`simulator.serving.wave_sweep`)."""
    return alt.Chart(df, title=f"{y} by batch size").mark_line(point=True).encode(
        x=alt.X("batch_size:Q", scale=alt.Scale(type="log", base=2), title="batch size (concurrency)"),
        y=alt.Y(f"{y}:Q"), color="policy:N", tooltip=["policy", "batch_size", y])
