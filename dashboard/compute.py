"""The compute path of one rerun: scenario dict -> Prediction -> the open tab's chart specs.

Streamlit-free so ``benchmarks/bench_dashboard.py`` times exactly what a rerun does; ``app.py``
wraps these functions in ``st.cache_resource``. Charts are built only for the tab that is open and
turned into Vega-Lite dicts once per scenario (Altair's object model costs tens of ms per chart on
a small CPU; a cached dict costs nothing to send again).
"""
from __future__ import annotations

import json
import threading
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from dashboard.state import ALLOW_BEYOND_REMEDY
from simulator.plan.api import Prediction, predict_scenario
from simulator.specs.drafts import verify_drafts
from simulator.specs.scenario import build_scenario

if TYPE_CHECKING:
    import altair as alt

_ALTAIR_LOCK = threading.Lock()  # data transformers and themes are process-global in Altair


def prediction(key: str, origin: str) -> Prediction:
    """Build and evaluate the scenario that ``key`` (JSON of the scenario dict) describes."""
    raw = json.loads(key)
    sc = build_scenario(raw, origin, raw.get("_base_dir"), allow_beyond=ALLOW_BEYOND_REMEDY)
    p = predict_scenario(sc)
    p.table, p.grid_rows  # noqa: B018 -- fill the cached properties once, inside the cache
    return p


def inspect_k(p: Prediction, b: int, k: int | None) -> int:
    """K to inspect at batch size b: the given one, else K* there (0 when nothing fits)."""
    if k is not None:
        return int(k)
    t = p.table
    row = t[t["batch_size"] == b]
    if row.empty or pd.isna(row["k_opt"].iloc[0]):
        return 0
    return int(row["k_opt"].iloc[0])


def subtitle(p: Prediction) -> str:
    sc = p.scenario
    return (f"{sc.model.name} on {sc.deployment.tp}× {sc.hardware.name}, draft {sc.draft.label},"
            f" L = {sc.context_len} tokens, {sc.acceptance.label}")


def is_moe(p: Prediction) -> bool:
    return "experts_touched" in p.grid_rows.columns


def build_chart(p: Prediction, name: str, b: int = 1, k: int = 0) -> alt.TopLevelMixin:
    """One named chart of a prediction (b, k: the operating point of the roofline and breakdown)."""
    from dashboard import charts as C  # Altair (~0.5 s to import) loads after the headline is on screen

    sub = subtitle(p)
    t, g, sc = p.table, p.grid_rows, p.scenario
    if name == "k_star":
        return C.k_star_chart(t, sub)
    if name in ("heatmap", "heatmap_rel"):
        return C.goodput_heatmap(g, t, relative=name == "heatmap_rel", title=sub)
    if name == "policy":
        return C.policy_chart(t, sc.fixed_k, sub)
    if name == "gain":
        return C.gain_chart(t, sc.fixed_k, sub)
    if name == "experts":
        return C.experts_touched_chart(g, sc.model.num_experts, sc.model.experts_per_token, sub,
                                       verify_drafts(sc.draft, g["k"].to_numpy()) if sc.draft.is_tree else None)
    if name == "expert_share":
        return C.expert_share_chart(g, sub)
    if name == "roofline":
        peak = sc.hardware.peak_flops_per_s(sc.deployment.weight_dtype, sc.deployment.act_dtype)
        return C.roofline_chart(p.breakdown(b, k), peak, sc.hardware.hbm_bandwidth_bytes_per_s,
                                f"{sub}; B = {b}, K = {k}")
    if name == "breakdown":
        return C.breakdown_chart(p.breakdown(b, k), f"{sub}; B = {b}, K = {k}")
    raise KeyError(name)


def chart_spec(chart: alt.TopLevelMixin) -> dict:
    """Vega-Lite dict with its data as named DataFrames under ``datasets`` (what st.vega_lite_chart reads)."""
    import altair as alt

    datasets: dict[str, pd.DataFrame] = {}

    def named(data):
        name = f"d{len(datasets)}"
        datasets[name] = data
        return {"name": name}

    with _ALTAIR_LOCK:
        alt.data_transformers.register("dsd_named", named)
        with alt.data_transformers.enable("dsd_named"), alt.theme.enable("none"):
            spec = chart.to_dict(validate=False)
    spec["datasets"] = datasets
    return spec


def predicted_points(p: Prediction, measured: pd.DataFrame) -> pd.DataFrame:
    """Prediction at exactly the measured (B, K) points."""
    bs = np.unique(measured["batch_size"].to_numpy())
    ks = np.unique(measured["k"].to_numpy())
    return predict_scenario(p.scenario, batch_sizes=bs, ks=ks).grid_rows


def layout_table(p: Prediction, b: int) -> pd.DataFrame:
    """MoE: the same scenario under each parallel layout at batch size ``b``: K*, step and per-token
    time, expert-load share of the verify pass, memory per GPU (layouts that cannot split the model
    are left out)."""
    from simulator.errors import PlannerError
    rows = []
    for layout in ("tp", "tp-ep", "dp-ep"):
        try:
            sc = p.scenario.with_overrides(layout=layout, ep=p.scenario.deployment.tp if layout != "tp" else 1)
            t = predict_scenario(sc, batch_sizes=[b]).table
        except PlannerError:
            continue
        r = t.iloc[0]
        rows.append({"layout": layout, "K*": r.k_opt, "step ms": r.itl_ms,
                     "expert share of verify": r.get("expert_load_share", np.nan),
                     "experts touched at K*": r.get("experts_touched", np.nan), "GB per GPU": r.memory_gb_per_gpu})
    return pd.DataFrame(rows)


# the K* table as a reader sees it: column -> (name with unit, decimals); the CSV download keeps the raw columns
KSTAR_COLUMNS = {
    "batch_size": ("B (sequences)", 0), "k_opt": ("K*", 0),
    # the K the engine files run (the headline's schedule): K* where a range of constant K would otherwise split
    "k_schedule": ("schedule K", None), "token_latency_ms": ("ms per token", 2),
    "plain_token_latency_ms": ("plain ms per token", 2), "itl_ms": ("step ms", 2),
    "speedup_vs_plain": ("× vs plain", 2), "speedup_vs_fixed": ("× vs fixed K", 2),
    "goodput_per_seq": ("tokens/s per sequence", 1), "throughput": ("tokens/s (batch)", 0),
    "acceptance_length": ("tokens per step", 2), "bound": ("bound by", None),
    "memory_gb_per_gpu": ("GB per GPU", 1), "experts_touched": ("experts loaded at K*", 1),
    "break_even_acceptance_length": ("fixed K needs AL", 2), "fixed_acceptance_length": ("fixed K reaches AL", 2),
    "k_opt_depends_on_acceptance": ("K* depends on acceptance", None),
    # how sure the decision is (simulator.plan.decision_risk): the share of the engine terms' draws where K* beats
    # plain decoding, and the K best at their centre (K* is chosen at their pessimistic quantile)
    "p_kopt_beats_plain": ("P(K* beats plain)", 2), "k_centre": ("K at the terms' centre", None),
}


def kstar_view(table: pd.DataFrame) -> pd.DataFrame:
    """The K* table with human column names and units, rounded (NaN where nothing fits)."""
    cols = [c for c in KSTAR_COLUMNS if c in table.columns]
    view = table[cols].copy()
    for col in cols:
        digits = KSTAR_COLUMNS[col][1]
        if digits is not None and col != "k_opt":
            view[col] = view[col].astype(float).round(digits)
    return view.rename(columns={c: KSTAR_COLUMNS[c][0] for c in cols})



def k_changes_view(p: Prediction) -> pd.DataFrame:
    """One row per change of K* and per K of the change (> 0): what it gives over plain decoding there
    (:meth:`Prediction.k_changes`)."""
    rows = []
    eng = p.scenario.engine
    unit = eng.size_unit if eng is not None else "sequences"
    for rec in p.k_changes():
        pads = rec.get("padded", {})
        for c in rec["cells"]:
            rows.append({"from B": rec["batch_size"], "K* change": f"{rec['k_from']} -> {rec['k_to']}", "K": c["k"],
                         "vs plain": f"{c['vs_plain']:.2f}x", "step / plain": f"{c['step_vs_plain']:.2f}x",
                         "acceptance length": round(c["acceptance_length"], 2), "bound": c.get("bound", ""),
                         **({"experts at K / at 0": f"{c['experts_touched']:.0f} / {rec['experts_touched_plain']:.0f}"}
                            if "experts_touched" in c else {}),
                         "graph padding": (", ".join(f"{'plain' if k == 0 else f'K={k}'} to {v}" for k, v in pads.items())
                                           + f" {unit}") if pads else ""})
    return pd.DataFrame(rows)
