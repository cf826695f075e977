"""Chart builders for the dashboard: pure functions, DataFrames in, ``alt.Chart`` out.

No physics here: every number plotted comes from ``simulator.plan.api.Prediction`` tables
(``.table``, ``.grid_rows``, ``.breakdown``). The functions only reshape and draw, so they can be
tested without Streamlit and exported to PNG with :func:`to_png`.

Letters: B batch size (sequences), K draft tokens per step, K* the goodput-optimal K at B.
"""
from __future__ import annotations

import numpy as np
import pandas as pd
import altair as alt

BOUND_DOMAIN = ["memory", "compute", "comm", "launch", "overhead", "none fits", "-"]
BOUND_RANGE = ["#4c78a8", "#e45756", "#f58518", "#b279a2", "#9d755d", "#bab0ac", "#bab0ac"]
POLICY_COLORS = alt.Scale(domain=["plain (K = 0)", "fixed K", "dynamic K* (DSD)"],
                          range=["#9d9d9d", "#f58518", "#1f77b4"])
def _bound_scale(values) -> alt.Scale:
    """Colour scale of the bound regimes, listing only those present (a clean legend)."""
    present = [b for b in BOUND_DOMAIN if b in set(values)]
    return alt.Scale(domain=present or BOUND_DOMAIN[:1], range=[BOUND_RANGE[BOUND_DOMAIN.index(b)] for b in present]
                     or BOUND_RANGE[:1])


BATCH_AXIS = alt.Axis(title="Batch size B (concurrent sequences, log scale)", format="~s", grid=True)


def _log_batch(domain_df: pd.DataFrame, field: str = "batch_size") -> alt.X:
    lo, hi = float(domain_df[field].min()), float(domain_df[field].max())
    return alt.X(f"{field}:Q", scale=alt.Scale(type="log", domain=[lo, max(hi, lo * 1.01)], nice=False),
                 axis=BATCH_AXIS)


def k_star_chart(table: pd.DataFrame, title: str = "") -> alt.Chart:
    """K*(B): the goodput-optimal draft length per batch size, coloured by what bounds the step.

    ``table``: ``Prediction.table`` (batch_size, k_opt, bound, goodput_per_seq, speedup_vs_plain, ...).
    """
    df = table[["batch_size", "k_opt", "bound", "goodput_per_seq", "itl_ms", "speedup_vs_plain"]].copy()
    df["k_opt"] = df["k_opt"].astype("float")  # <NA> (nothing fits memory) -> NaN, not drawn
    df = df.dropna(subset=["k_opt"])
    x = _log_batch(table)
    y = alt.Y("k_opt:Q", title="K* (draft tokens per step)",
              scale=alt.Scale(domain=[0, max(1, float(df["k_opt"].max()) if len(df) else 1)]),
              axis=alt.Axis(tickMinStep=1, format="d"))
    tooltip = [alt.Tooltip("batch_size:Q", title="B"), alt.Tooltip("k_opt:Q", title="K*"),
               alt.Tooltip("goodput_per_seq:Q", title="tokens/s per seq", format=",.1f"),
               alt.Tooltip("itl_ms:Q", title="step time (ms)", format=".2f"),
               alt.Tooltip("speedup_vs_plain:Q", title="× vs plain", format=".2f"),
               alt.Tooltip("bound:N", title="step bound by")]
    line = alt.Chart().mark_line(interpolate="step-after", color="#1f77b4", strokeWidth=2).encode(x=x, y=y)
    points = alt.Chart().mark_circle(size=28, opacity=0.9).encode(
        x=x, y=y, color=alt.Color("bound:N", scale=_bound_scale(df["bound"]), title="Step bound by"), tooltip=tooltip)
    # data on the layer, not on each subchart: Altair would hash the DataFrame to hoist it
    return alt.layer(line, points, data=df,
        title=alt.TitleParams("Optimal draft length K* vs batch size", subtitle=title or alt.Undefined), height=340)


# Heatmap cells without seams. Neighbouring rects with anti-aliased edges let the background through along each
# shared edge; above B ~ 100 the cells are under a pixel wide and the seams wash the colours out towards the grey
# of "does not fit". Each cell reaches 1 px past its right and top edges, and the cells are drawn row by row,
# left to right (seamless_order), so every edge lies on an opaque neighbour drawn before it.
SEAMLESS = dict(x2Offset=1, y2Offset=-1)


def seamless_order(df: pd.DataFrame, row: str) -> pd.DataFrame:
    """Cells in the order SEAMLESS needs: rows (``row``) bottom to top, batch sizes left to right."""
    return df.sort_values([row, "batch_size"], kind="stable")


def heatmap_frame(grid: pd.DataFrame) -> pd.DataFrame:
    """Grid rows with log-spaced cell edges in B and goodput relative to the best K at each B."""
    df = grid[["batch_size", "k", "goodput_per_seq", "itl_ms", "throughput", "fits_memory", "bound"]].copy()
    bs = np.sort(df["batch_size"].unique()).astype(float)
    if len(bs) > 1:
        mids = np.sqrt(bs[1:] * bs[:-1])
        lo = np.concatenate([[bs[0] ** 2 / mids[0]], mids])
        hi = np.concatenate([mids, [bs[-1] ** 2 / mids[-1]]])
    else:
        lo, hi = bs / 1.2, bs * 1.2
    edges = pd.DataFrame({"batch_size": bs.astype(int), "b_lo": lo, "b_hi": hi})
    df = df.merge(edges, on="batch_size", how="left")
    fit = df["goodput_per_seq"].where(df["fits_memory"])
    best = fit.groupby(df["batch_size"]).transform("max")
    df["goodput_rel"] = fit / best
    return df


def goodput_heatmap(grid: pd.DataFrame, table: pd.DataFrame, relative: bool = False, title: str = "") -> alt.Chart:
    """Goodput over (B, K) with K*(B) traced on top; cells that do not fit memory are grey.

    ``grid``: ``Prediction.grid_rows``; ``table``: ``Prediction.table``. ``relative``: colour by goodput
    as a share of the best K at the same B (shows how flat the optimum is) instead of tokens/s.
    """
    df = heatmap_frame(grid)
    field, ctitle, fmt = (("goodput_rel", "Goodput / best at this B", ".0%") if relative else
                          ("goodput_per_seq", "tokens/s per seq", ",.0f"))
    df = df[["batch_size", "k", "b_lo", "b_hi", "goodput_per_seq", "goodput_rel", "itl_ms", "fits_memory"]]
    k_max = int(df["k"].max())
    yscale = alt.Scale(domain=[-0.5, k_max + 0.5], nice=False, zero=False)
    yaxis = alt.Axis(title="Draft length K (tokens per step)", values=list(range(k_max + 1)), format="d")
    xscale = alt.Scale(type="log", domain=[float(df["b_lo"].min()), float(df["b_hi"].max())], nice=False)
    df = df.assign(k_lo=df["k"] - 0.5, k_hi=df["k"] + 0.5)
    df = seamless_order(df, "k")
    fits, over = df[df["fits_memory"]], df[~df["fits_memory"]]
    pos = dict(x=alt.X("b_lo:Q", scale=xscale, axis=BATCH_AXIS), x2=alt.X2("b_hi:Q"),
               y=alt.Y("k_lo:Q", scale=yscale, axis=yaxis), y2=alt.Y2("k_hi:Q"))
    # cells that do not fit in memory: a separate grey layer (a conditional colour costs ~0.1 s to build)
    grey = alt.Chart(over).mark_rect(color="#d9d9d9", **SEAMLESS).encode(**pos, tooltip=[
        alt.Tooltip("batch_size:Q", title="B"), alt.Tooltip("k:Q", title="K"),
        alt.Tooltip("fits_memory:N", title="fits memory")])
    cells = alt.Chart(fits).mark_rect(**SEAMLESS).encode(
        **pos, color=alt.Color(f"{field}:Q", title=ctitle, scale=alt.Scale(scheme="viridis"),
                               legend=alt.Legend(format=fmt)),
        tooltip=[alt.Tooltip("batch_size:Q", title="B"), alt.Tooltip("k:Q", title="K"),
                 alt.Tooltip("goodput_per_seq:Q", title="tokens/s per seq", format=",.1f"),
                 alt.Tooltip("goodput_rel:Q", title="of best at B", format=".1%"),
                 alt.Tooltip("itl_ms:Q", title="step time (ms)", format=".2f"),
                 alt.Tooltip("fits_memory:N", title="fits memory")])
    ks = table[["batch_size", "k_opt"]].copy()
    ks["k_opt"] = ks["k_opt"].astype("float")
    ks = ks.dropna()
    star = alt.Chart(ks).mark_line(interpolate="step-after", color="#ff2b2b", strokeWidth=2.5).encode(
        x=alt.X("batch_size:Q", scale=xscale), y=alt.Y("k_opt:Q", scale=yscale),
        tooltip=[alt.Tooltip("batch_size:Q", title="B"), alt.Tooltip("k_opt:Q", title="K*")])
    note = "red line: K*(B), the best K at each batch size; grey: does not fit in memory"
    return alt.layer(grey, cells, star,
        title=alt.TitleParams("Goodput over batch size and draft length", subtitle=[title, note] if title else note), height=360)


def policy_frame(table: pd.DataFrame, fixed_k: int) -> pd.DataFrame:
    """Long format: tokens/s per user for plain, fixed-K and dynamic-K* decoding."""
    wide = table[["batch_size", "plain_goodput_per_seq", "fixed_goodput_per_seq", "goodput_per_seq"]]
    long = wide.melt("batch_size", var_name="col", value_name="tokens_per_s").dropna()
    names = {"plain_goodput_per_seq": "plain (K = 0)", "fixed_goodput_per_seq": "fixed K",
             "goodput_per_seq": "dynamic K* (DSD)"}
    long["policy"] = long["col"].map(names)
    long["detail"] = long["policy"].where(long["policy"] != "fixed K", f"fixed K = {fixed_k}")
    return long.drop(columns="col")


def policy_chart(table: pd.DataFrame, fixed_k: int, title: str = "") -> alt.Chart:
    """Tokens/s per user vs batch size for plain decoding, a fixed K and the dynamic K*."""
    df = policy_frame(table, fixed_k)
    return alt.Chart(df).mark_line(strokeWidth=2).encode(
        x=_log_batch(table),
        y=alt.Y("tokens_per_s:Q", title="Tokens/s per user", scale=alt.Scale(zero=False)),
        color=alt.Color("policy:N", scale=POLICY_COLORS, title="Decoding policy",
                        legend=alt.Legend(labelExpr=(
                            f"datum.label == 'fixed K' ? 'fixed K = {fixed_k}' : datum.label"))),
        tooltip=[alt.Tooltip("batch_size:Q", title="B"), alt.Tooltip("detail:N", title="policy"),
                 alt.Tooltip("tokens_per_s:Q", title="tokens/s per user", format=",.1f")],
    ).properties(title=alt.TitleParams("Tokens/s per user: plain vs fixed K vs dynamic K*",
                                       subtitle=title or alt.Undefined), height=320)


def gain_chart(table: pd.DataFrame, fixed_k: int, title: str = "") -> alt.Chart:
    """DSD's gain: goodput at K* over plain decoding and over the fixed K, per batch size."""
    df = table[["batch_size", "speedup_vs_plain", "speedup_vs_fixed"]].melt(
        "batch_size", var_name="col", value_name="gain").dropna()
    names = {"speedup_vs_plain": "vs plain (K = 0)", "speedup_vs_fixed": f"vs fixed K = {fixed_k}"}
    df["versus"] = df["col"].map(names)
    lines = alt.Chart(df).mark_line(strokeWidth=2).encode(
        x=_log_batch(table), y=alt.Y("gain:Q", title="Speedup (×)", scale=alt.Scale(zero=False)),
        color=alt.Color("versus:N", title="Dynamic K* speedup", scale=alt.Scale(domain=list(names.values()), range=["#9d9d9d", "#f58518"])),
        tooltip=[alt.Tooltip("batch_size:Q", title="B"), alt.Tooltip("versus:N"),
                 alt.Tooltip("gain:Q", title="speedup (×)", format=".3f")])
    one = alt.Chart(pd.DataFrame({"y": [1.0]})).mark_rule(strokeDash=[4, 4], color="#555").encode(y="y:Q")
    return alt.layer(lines, one, title=alt.TitleParams("Gain of dynamic K* over plain and fixed K",
                                                          subtitle=title or alt.Undefined), height=280)


def roofline_chart(ops: pd.DataFrame, peak_flops_per_s: float, bandwidth_bytes_per_s: float,
                   title: str = "") -> alt.Chart:
    """Operators of the verify step on the device roofline (log-log).

    ``ops``: ``Prediction.breakdown(B, K)``; only verify-step ops with FLOPs and bytes are placed.
    Roofs: attainable = min(peak, intensity * bandwidth); the ridge is at peak / bandwidth.
    """
    df = ops[(ops["step"] == "verify") & (ops["gflops"] > 0) & (ops["mbytes"] > 0) & (ops["attained_tflops"] > 0)]
    df = df[["op", "family", "time_ms", "gflops", "mbytes", "intensity_flops_per_byte", "attained_tflops",
             "bound", "share"]].copy()
    peak_t = peak_flops_per_s / 1e12
    bw_tb = bandwidth_bytes_per_s / 1e12
    ridge = peak_flops_per_s / bandwidth_bytes_per_s
    ints = df["intensity_flops_per_byte"]
    x_lo = min(float(ints.min()) if len(df) else ridge, ridge) / 4
    x_hi = max(float(ints.max()) if len(df) else ridge, ridge) * 4
    y_lo = min(float(df["attained_tflops"].min()) if len(df) else peak_t, x_lo * bw_tb) / 2
    xs = np.geomspace(x_lo, x_hi, 64)
    roof = pd.DataFrame({"intensity": xs, "tflops": np.minimum(peak_t, xs * bw_tb)})
    xscale = alt.Scale(type="log", domain=[x_lo, x_hi], nice=False)
    yscale = alt.Scale(type="log", domain=[y_lo, peak_t * 2], nice=False)
    roof_line = alt.Chart(roof).mark_line(color="#333", strokeWidth=2).encode(
        x=alt.X("intensity:Q", scale=xscale, axis=alt.Axis(title="Arithmetic intensity (FLOP/byte, log)", format="~s")),
        y=alt.Y("tflops:Q", scale=yscale, axis=alt.Axis(title="Attained throughput (TFLOP/s, log)", format="~s")))
    labels = pd.DataFrame({
        "intensity": [x_hi / 1.15, x_lo * 1.3, ridge * 1.1],
        "tflops": [peak_t * 1.25, x_lo * 1.3 * bw_tb * 1.35, peak_t * 0.55],
        "text": [f"compute roof {peak_t:,.0f} TFLOP/s", f"HBM {bw_tb:.2f} TB/s",
                 f"ridge {ridge:,.0f} FLOP/B"]})
    def label_layer(rows, align):
        return alt.Chart(labels.iloc[rows]).mark_text(fontSize=11, color="#333", align=align).encode(
            x=alt.X("intensity:Q", scale=xscale), y=alt.Y("tflops:Q", scale=yscale), text="text:N")
    text_r, text_l = label_layer([0], "right"), label_layer([1, 2], "left")
    ridge_rule = alt.Chart(pd.DataFrame({"intensity": [ridge]})).mark_rule(strokeDash=[3, 3], color="#888").encode(
        x=alt.X("intensity:Q", scale=xscale))
    points = alt.Chart(df).mark_point(filled=True, size=90, opacity=0.9).encode(
        x=alt.X("intensity_flops_per_byte:Q", scale=xscale),
        y=alt.Y("attained_tflops:Q", scale=yscale),
        color=alt.Color("family:N", title="Operator family"),
        shape=alt.Shape("bound:N", title="Bound by"),
        tooltip=[alt.Tooltip("op:N"), alt.Tooltip("family:N"), alt.Tooltip("bound:N"),
                 alt.Tooltip("time_ms:Q", title="time (ms)", format=".3f"),
                 alt.Tooltip("share:Q", title="share of step", format=".1%"),
                 alt.Tooltip("intensity_flops_per_byte:Q", title="FLOP/byte", format=",.2f"),
                 alt.Tooltip("attained_tflops:Q", title="TFLOP/s", format=",.2f"),
                 alt.Tooltip("gflops:Q", title="GFLOP", format=",.2f"),
                 alt.Tooltip("mbytes:Q", title="MB moved", format=",.1f")])
    # one flat alt.layer call: chained `+` deep-copies every sub-chart once per `+`
    return alt.layer(roof_line, ridge_rule, text_r, text_l, points,
        title=alt.TitleParams("Roofline of the verify step", subtitle=title or alt.Undefined), height=380)


def experts_touched_chart(grid: pd.DataFrame, num_experts: int, top_k: int, title: str = "",
                          drafts_per_seq=None) -> alt.Chart:
    """Experts a verify step loads (per MoE layer) vs tokens in the step, T = B * (K + 1): one line per K
    (with correlated routing the count depends on B and K, not on T alone, so one line would zigzag).
    ``drafts_per_seq``: the draft tokens each row's verify checks per sequence (a draft tree's nodes:
    ``specs.drafts.verify_drafts``); None: K (a chain)."""
    df = grid[["batch_size", "k", "experts_touched"]].copy()
    drafts = df["k"] if drafts_per_seq is None else np.asarray(drafts_per_seq, dtype=float)
    df["tokens"] = df["batch_size"] * (drafts + 1)
    per_seq = "K+1" if drafts_per_seq is None else "tree nodes at depth K + 1"
    line = alt.Chart(df).mark_line(strokeWidth=2).encode(
        x=alt.X("tokens:Q", scale=alt.Scale(type="log"),
                axis=alt.Axis(title=f"Tokens per verify step T = B·({per_seq}) (log scale)", format="~s")),
        y=alt.Y("experts_touched:Q", title="Experts loaded per MoE layer", scale=alt.Scale(domain=[0, num_experts * 1.05])),
        color=alt.Color("k:O", title="K", scale=alt.Scale(scheme="viridis")),
        tooltip=[alt.Tooltip("k:O", title="K"), alt.Tooltip("batch_size:Q", title="B"),
                 alt.Tooltip("tokens:Q", title="T"), alt.Tooltip("experts_touched:Q", title="experts", format=".1f")])
    refs = pd.DataFrame({"y": [float(num_experts), float(top_k)],
                         "label": [f"all {num_experts} experts", f"top-k = {top_k} (one token)"]})
    rules = alt.Chart(refs).mark_rule(strokeDash=[4, 4], color="#888").encode(y="y:Q")
    text = alt.Chart(refs).mark_text(align="left", dx=4, dy=-6, color="#555").encode(
        y="y:Q", x=alt.value(4), text="label:N")
    return alt.layer(line, rules, text,
        title=alt.TitleParams("MoE: experts touched vs tokens per step", subtitle=title or alt.Undefined), height=320)


def expert_share_chart(grid: pd.DataFrame, title: str = "") -> alt.Chart:
    """Share of verify time spent in routed-expert GEMMs (mostly loading expert weights at small T)."""
    df = grid[["batch_size", "k", "expert_ms", "verify_ms"]].copy()
    df["share"] = df["expert_ms"] / df["verify_ms"]
    return alt.Chart(df).mark_line(strokeWidth=1.8).encode(
        x=_log_batch(df),
        y=alt.Y("share:Q", title="Expert share of verify time", axis=alt.Axis(format=".0%"),
                scale=alt.Scale(domain=[0, 1])),
        color=alt.Color("k:O", title="K", scale=alt.Scale(scheme="viridis")),
        tooltip=[alt.Tooltip("batch_size:Q", title="B"), alt.Tooltip("k:O", title="K"),
                 alt.Tooltip("share:Q", title="expert share", format=".1%"),
                 alt.Tooltip("expert_ms:Q", title="expert time (ms)", format=".3f")],
    ).properties(title=alt.TitleParams("MoE: share of verify time in the expert layers",
                                       subtitle=title or alt.Undefined), height=320)


def breakdown_chart(ops: pd.DataFrame, title: str = "") -> alt.Chart:
    """Per-operator time of the draft and verify steps at one (B, K), coloured by bound."""
    df = ops[ops["time_ms"] > 0][["step", "op", "family", "time_ms", "compute_ms", "memory_ms", "gflops",
                                  "mbytes", "bound", "share"]].copy()
    df["label"] = df["step"] + " · " + df["op"].str.replace(r"^draft\.", "", regex=True)
    order = df.sort_values("time_ms", ascending=False)["label"].tolist()
    return alt.Chart(df).mark_bar().encode(
        y=alt.Y("label:N", sort=order, title=None, axis=alt.Axis(labelLimit=260, labelOverlap=False)),
        x=alt.X("time_ms:Q", title="Time per step (ms)"),
        color=alt.Color("bound:N", scale=_bound_scale(df["bound"]), title="Bound by"),
        tooltip=[alt.Tooltip("step:N"), alt.Tooltip("op:N"), alt.Tooltip("family:N"),
                 alt.Tooltip("time_ms:Q", title="time (ms)", format=".4f"),
                 alt.Tooltip("compute_ms:Q", title="compute term (ms)", format=".4f"),
                 alt.Tooltip("memory_ms:Q", title="memory term (ms)", format=".4f"),
                 alt.Tooltip("share:Q", title="share of step", format=".1%"),
                 alt.Tooltip("gflops:Q", title="GFLOP", format=",.2f"),
                 alt.Tooltip("mbytes:Q", title="MB moved", format=",.1f")],
    ).properties(title=alt.TitleParams("Per-operator time", subtitle=title or alt.Undefined),
                 height=max(240, 24 * len(df) + 90))


def parity_chart(matched: pd.DataFrame, quantity: str, label: str, title: str = "") -> alt.Chart:
    """Predicted vs measured ``quantity`` (columns ``<quantity>_pred``, ``<quantity>_meas``) with y = x."""
    df = matched[["batch_size", "k", f"{quantity}_pred", f"{quantity}_meas"]].dropna().copy()
    df.columns = ["batch_size", "k", "pred", "meas"]
    df["err"] = (df["pred"] - df["meas"]) / df["meas"]
    lo = float(min(df["pred"].min(), df["meas"].min())) if len(df) else 0.1
    hi = float(max(df["pred"].max(), df["meas"].max())) if len(df) else 1.0
    lo, hi = max(lo / 1.2, 1e-9), hi * 1.2
    scale = alt.Scale(type="log", domain=[lo, hi], nice=False)
    diag = alt.Chart(pd.DataFrame({"v": [lo, hi]})).mark_line(strokeDash=[4, 4], color="#555").encode(
        x=alt.X("v:Q", scale=scale), y=alt.Y("v:Q", scale=scale))
    pts = alt.Chart(df).mark_circle(size=70, opacity=0.85).encode(
        x=alt.X("meas:Q", scale=scale, title=f"Measured {label}"),
        y=alt.Y("pred:Q", scale=scale, title=f"Predicted {label}"),
        color=alt.Color("k:O", title="K", scale=alt.Scale(scheme="viridis")),
        tooltip=[alt.Tooltip("batch_size:Q", title="B"), alt.Tooltip("k:Q", title="K"),
                 alt.Tooltip("meas:Q", title="measured", format=",.3f"),
                 alt.Tooltip("pred:Q", title="predicted", format=",.3f"),
                 alt.Tooltip("err:Q", title="error", format="+.1%")])
    return alt.layer(diag, pts, title=alt.TitleParams(f"Predicted vs measured {label}",
                                                         subtitle=title or "dashed: prediction = measurement"),
                                   height=320)


def kstar_context_frame(k2d: pd.DataFrame) -> pd.DataFrame:
    """Long format of a K* map (rows batch size, columns context length; <NA> = nothing fits) with
    log-spaced cell edges in B and L (geometric midpoints), so cells tile a log-log plane."""
    def edges(values):
        v = np.sort(np.asarray(values, dtype=float))
        if len(v) < 2:
            lo, hi = v / 1.2, v * 1.2
        else:
            mids = np.sqrt(v[1:] * v[:-1])
            lo = np.concatenate([[v[0] ** 2 / mids[0]], mids])
            hi = np.concatenate([mids, [v[-1] ** 2 / mids[-1]]])
        idx = np.searchsorted(v, np.asarray(values, dtype=float))
        return lo[idx], hi[idx]
    b = k2d.index.to_numpy(dtype=float)
    c = k2d.columns.to_numpy(dtype=float)
    (b_lo, b_hi), (c_lo, c_hi) = edges(b), edges(c)
    nb, nc = len(b), len(c)
    k = k2d.astype("Float64").to_numpy(dtype=float, na_value=np.nan)
    return pd.DataFrame({
        "batch_size": np.repeat(b, nc).astype(int), "context_len": np.tile(c, nb).astype(int),
        "b_lo": np.repeat(b_lo, nc), "b_hi": np.repeat(b_hi, nc),
        "c_lo": np.tile(c_lo, nb), "c_hi": np.tile(c_hi, nb), "k_opt": k.ravel(),
    })


def kstar_context_heatmap(k2d: pd.DataFrame, title: str = "") -> alt.Chart:
    """K*(B, L): the goodput-optimal draft length over batch size and context length.

    ``k2d``: ``Prediction.kstar_frame()`` (index batch_size, columns context_len, <NA> where no K
    fits in memory; those cells are grey)."""
    df = seamless_order(kstar_context_frame(k2d), "context_len")
    fits, over = df[df["k_opt"].notna()], df[df["k_opt"].isna()]
    xscale = alt.Scale(type="log", domain=[float(df["b_lo"].min()), float(df["b_hi"].max())], nice=False)
    yscale = alt.Scale(type="log", domain=[float(df["c_lo"].min()), float(df["c_hi"].max())], nice=False)
    pos = dict(x=alt.X("b_lo:Q", scale=xscale, axis=BATCH_AXIS), x2=alt.X2("b_hi:Q"),
               y=alt.Y("c_lo:Q", scale=yscale, axis=alt.Axis(title="Context length L (tokens in the KV cache, log"
                                                                    " scale)", format="~s")),
               y2=alt.Y2("c_hi:Q"))
    tip = [alt.Tooltip("batch_size:Q", title="B"), alt.Tooltip("context_len:Q", title="L", format=","),
           alt.Tooltip("k_opt:Q", title="K*")]
    grey = alt.Chart(over).mark_rect(color="#d9d9d9", **SEAMLESS).encode(**pos, tooltip=tip[:2])
    # K* is a whole number: one colour per K from 0 to the largest shown (an ordinal scale), not a gradient
    # that suggests K = 2.5 exists
    fits = fits.assign(k_opt=fits["k_opt"].astype(int))
    k_max = int(fits["k_opt"].max()) if len(fits) else 1
    cells = alt.Chart(fits).mark_rect(**SEAMLESS).encode(
        **pos, color=alt.Color("k_opt:O", title="K*", scale=alt.Scale(scheme="viridis", domain=list(range(k_max + 1))),
                               legend=alt.Legend(orient="right")), tooltip=tip)
    note = "colour: K* at each (batch size, context length); grey: does not fit in memory"
    return alt.layer(grey, cells, title=alt.TitleParams(
        "Optimal draft length K* over batch size and context length",
        subtitle=[title, note] if title else note), height=360)


def to_png(chart: alt.TopLevelMixin, scale: float = 2.0) -> bytes:
    """Render a chart to PNG bytes (vl-convert; no browser needed)."""
    import vl_convert as vlc

    spec = chart.properties(width=720) if isinstance(chart, (alt.Chart, alt.LayerChart)) else chart
    return vlc.vegalite_to_png(spec.to_json(), scale=scale)
