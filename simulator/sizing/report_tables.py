"""The sizing report's tables: numbers as a buyer reads them (plain decimals, seconds as ms), headers with
units, one table in Markdown or HTML, and the compact K* table (runs of batch sizes with the same K*)."""
from __future__ import annotations

import html

import numpy as np
import pandas as pd

# column headers with units (seconds shown as ms)
HEADERS = {"fleet_usd_per_hour": "fleet $/h", "usd_per_m_output_tokens": "$/M tok, 1 replica at full load",
           "hardware": "GPU", "gpus": "GPUs", "nodes": "nodes", "policy": "policy",
           "price_per_gpu_hour_usd": "$/GPU-h", "gpus_range": "GPUs (band)", "node_layout": "per node",
           "max_load_per_replica": "load/replica", "load_band_low": "load band low", "load_band_high": "load band high",
           "tok_s_per_gpu": "tok/s/GPU", "tpot_p50_s": "TPOT p50 ms", "ttft_p99_s": "TTFT p99 ms",
           "mean_batch_size": "mean B", "mean_k": "mean K", "usable_gb": "usable GB", "weights_gb": "weights GB",
           "draft_gb": "draft GB", "kv_gb_per_seq": "KV GB/seq", "context_tokens": "context tok",
           "max_seqs": "max seqs", "meets_target": "meets target", "usd_per_m_tokens_at_target": "fleet $/M output tok at target",
           "energy_j_per_token_est": "J/token (est.)", "speedup_vs_plain": "vs plain", "speedup_vs_fixed": "vs fixed",
           "batch_sizes": "B", "k_opt": "K*", "break_even_acceptance_length": "fixed K needs AL",
           "p_kopt_beats_plain": "P(K* beats plain)"}
MS_COLUMNS = ("tpot_p50_s", "ttft_p99_s")


def _cell(v) -> str:
    if v is None or v is pd.NA:
        return "-"
    if isinstance(v, (bool, np.bool_)):
        return "yes" if v else "no"
    if isinstance(v, (float, np.floating)):
        return number(float(v))
    return str(v)


def number(v: float) -> str:
    """Plain decimal, never scientific: thousands separators from 1000, 3 significant digits below."""
    if not np.isfinite(v):
        return "-"
    if abs(v - round(v)) <= 1e-9 * max(1.0, abs(v)) and abs(v) < 1e15:  # whole up to float noise (a mean K of 3)
        return f"{int(round(v)):,}"
    a = abs(v)
    if a >= 100:
        return f"{v:,.0f}"
    if a >= 10:
        return f"{v:.1f}"
    if a >= 1:
        return f"{v:.2f}"
    if a >= 0.01:
        return f"{v:.3f}"
    return f"{v:.5f}".rstrip("0").rstrip(".") if a >= 1e-5 else "0"


def readable(df: pd.DataFrame) -> pd.DataFrame:
    """Seconds columns to ms, headers with units."""
    if not len(df):
        return df
    out = df.copy()
    for col in MS_COLUMNS:
        if col in out:
            out[col] = out[col].astype(float) * 1e3
    return out.rename(columns=HEADERS)


def md_table(df: pd.DataFrame) -> str:
    if not len(df):
        return "_(none)_\n"
    df = readable(df)
    rows = ["| " + " | ".join(map(str, df.columns)) + " |", "|" + "---|" * len(df.columns)]
    rows += ["| " + " | ".join(_cell(v).replace("|", "/") for v in rec) + " |" for rec in df.itertuples(index=False)]
    return "\n".join(rows) + "\n"


def html_table(df: pd.DataFrame, wrap: bool = False, wrap_last: bool = False) -> str:
    if not len(df):
        return "<p><em>(none)</em></p>"
    df = readable(df)
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in df.columns)
    last = len(df.columns) - 1
    note = ' class="note"'
    body = "".join("<tr>" + "".join(f"<td{note if wrap_last and i == last else ''}>{html.escape(_cell(v))}</td>"
                                    for i, v in enumerate(rec)) + "</tr>" for rec in df.itertuples(index=False))
    cls = ' class="wrap"' if wrap else ""
    return f'<div class="tw"><table{cls}><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>'


def _share_span(p: pd.Series) -> str:
    """A run's probabilities as a range of percentages; '-' where none applies (K* = 0)."""
    p = p.astype(float).dropna()
    if p.empty:
        return "-"
    lo, hi = f"{p.min():.0%}", f"{p.max():.0%}"
    return lo if lo == hi else f"{lo}-{hi}"


def _from_to(first: str, last: str) -> str:
    """A run's value at its first and last batch size, once where they read the same."""
    return first if first == last else f"{first}-{last}"


def k_star_table(table: pd.DataFrame) -> pd.DataFrame:
    """Compact K* table: runs of batch sizes with the same K* (or where no K fits memory)."""
    t = table.reset_index(drop=True)
    key = t.k_opt.astype("float").fillna(-1).astype(int).to_numpy()
    rows, start = [], 0
    for i in range(len(t)):
        if i + 1 < len(t) and key[i + 1] == key[i]:
            continue
        a, b = t.iloc[start], t.iloc[i]
        span = lambda col: (_from_to(f"{a[col]:.2f}", f"{b[col]:.2f}")  # noqa: E731
                            if np.isfinite(a[col]) and np.isfinite(b[col]) else "-")
        rows.append({"batch_sizes": _from_to(f"{int(a.batch_size)}", f"{int(b.batch_size)}"),
                     "k_opt": "none fits memory" if key[i] < 0 else int(key[i]),
                     "speedup_vs_plain": span("speedup_vs_plain"), "speedup_vs_fixed": span("speedup_vs_fixed"),
                     "break_even_acceptance_length": (span("break_even_acceptance_length")
                                                      if "break_even_acceptance_length" in t else "-"),
                     # the share of the engine terms' draws where K* beats plain decoding (plan.decision_risk)
                     "p_kopt_beats_plain": (_share_span(t["p_kopt_beats_plain"].iloc[start:i + 1])
                                            if "p_kopt_beats_plain" in t else "-"),
                     "bound": b.bound})
        start = i + 1
    return pd.DataFrame(rows)
