"""The sweep's outputs: one tidy table (a row per task x policy), its Pareto front, a summary.

The table is built from the journal records only (never from in-memory results), in expansion order,
so a fresh run, a resumed run and a run on any backend give the same table.
"""
from __future__ import annotations

import html
import io

import numpy as np
import pandas as pd

from simulator.sizing.spec import SizingSpec
from simulator.specs.scenario_sections import repo_relative

# the front's cost: what the buyer pays per output token, the whole fleet (headroom, spare, whole nodes) at the
# target load, as `size` ranks; one replica's cost at full load (PER_REPLICA_COST) would rank a configuration by a
# load its fleet never runs at (two 40-GPU fleets at the same $/h served the same RAG traffic at $15.1 and $13.3/M)
COST = "usd_per_m_tokens_at_target"
PER_REPLICA_COST = "usd_per_m_output_tokens"
LEAD = ["task", "model", "hardware", "tp", "ep", "dtype", "act_dtype", "kv_dtype", "draft", "engine", "context_len", "traffic",
        "acceptance", "policy", "status"]


def results_table(tasks: list, records: dict, latency: str = "tpot_p50_s") -> pd.DataFrame:
    """Rows of every task (in expansion order) from the journal records; adds the ``pareto`` flag."""
    rows = []
    for t in tasks:
        rows += records[t.key]["rows"]
    df = pd.DataFrame(rows)
    cols = [c for c in LEAD if c in df.columns] + [c for c in df.columns if c not in LEAD]
    df = df[cols]
    for c in ("tp", "ep", "context_len"):
        if c in df.columns:
            df[c] = df[c].astype("int64")
    df["pareto"] = pareto_flags(df, latency)
    return df.reset_index(drop=True)


def pareto_flags(df: pd.DataFrame, latency: str = "tpot_p50_s", cost: str = COST, by=("model", "traffic")) -> np.ndarray:
    """True where no other row of the same model and traffic mix meeting its target is at least as cheap and
    as fast (and strictly better in one): the fleet's $/Mtok at the target vs latency front per model and traffic mix (a chat row
    and a RAG row serve different demands, so neither dominates the other)."""
    flags = np.zeros(len(df), dtype=bool)
    if latency not in df.columns or cost not in df.columns:
        return flags
    ok = df.get("meets_target", pd.Series(False, index=df.index)).fillna(False).astype(bool)
    x = pd.to_numeric(df[latency], errors="coerce").to_numpy(dtype=float)
    y = pd.to_numeric(df[cost], errors="coerce").to_numpy(dtype=float)
    valid = ok.to_numpy() & np.isfinite(x) & np.isfinite(y)
    keys = [c for c in ([by] if isinstance(by, str) else list(by)) if c in df.columns]
    if not keys:
        return flags
    for _, idx in df.groupby(keys, sort=False).indices.items():
        idx = np.asarray([i for i in idx if valid[i]])
        if not len(idx):
            continue
        order = idx[np.lexsort((y[idx], x[idx]))]  # by latency, then cost
        best = np.inf
        for i in order:
            if y[i] < best:
                flags[i] = True
                best = y[i]
    return flags


def table_bytes(df: pd.DataFrame, fmt: str) -> bytes:
    if fmt == "parquet":
        buf = io.BytesIO()
        df.to_parquet(buf, index=False, engine="pyarrow")
        return buf.getvalue()
    return df.to_csv(index=False).encode()


PARETO_COLS = ["hardware", "tp", "ep", "dtype", "act_dtype", "kv_dtype", "draft", "engine", "context_len", "traffic", "acceptance", "policy",
               "gpus", "gpus_band", "max_load_per_replica", "search_resolution", "ttft_p99_s", "tpot_p50_s", COST,
               "fleet_usd_per_hour", "rel_error"]


def _md_table(df: pd.DataFrame) -> str:
    if not len(df):
        return "_none_\n"
    def fmt(v):
        if isinstance(v, float):
            return "" if v != v else f"{v:.4g}"
        return str(v).replace("|", "/")
    head = "| " + " | ".join(df.columns) + " |\n|" + "---|" * len(df.columns) + "\n"
    return head + "".join("| " + " | ".join(fmt(v) for v in r) + " |\n" for r in df.itertuples(index=False))


def _search_setting(spec, key: str) -> str:
    """A search setting each task ran under: the sweep's [run] value, else the base scenario's [sizing] one, else
    the sizing default, named as such (was 'max_replicas=of the base scenario' and 'seed=None', the value left out)."""
    if spec.run.get(key) is not None:
        return str(spec.run[key])
    base = (spec.base_raw.get("sizing") or {}).get(key)
    return f"{base} (the base scenario's)" if base is not None else f"{getattr(SizingSpec, key)} (the sizing default)"


def _sections(spec, df: pd.DataFrame, filtered: pd.DataFrame, stats: dict):
    """(title, text, table) blocks shared by the Markdown and HTML summaries."""
    lat = spec.output["latency"]
    axes = ", ".join(f"{a} = {list(v)}" for a, v in spec.axes.items() if v != (None,))
    ok = df[df.status == "ok"] if "status" in df.columns else df
    meets = int(ok.get("meets_target", pd.Series(dtype=bool)).fillna(False).astype(bool).sum())
    intro = (f"Base scenario `{repo_relative(spec.base)}`; axes: {axes or 'none'}; policies {list(spec.policies)}."
             f" {spec.n_combinations} combinations: {len(spec.tasks)} tasks ran ({stats.get('computed', 0)} computed"
             f" now, {stats.get('resumed', 0)} from the journal), {len(filtered)} filtered"
             f" (memory or layout). {len(df)} result rows, {meets} meet the target load within"
             f" max_replicas={_search_setting(spec, 'max_replicas')}.")
    run = spec.run
    if run["size"]:
        same = all(run.get(k) is None for k in ("n_requests", "search_steps", "duration_s", "max_requests"))
        intro += (" Sizing per task: the capacity search of `simulator.size` (one search, one end-to-end band),"
                  + (" with the base scenario's [sizing] settings, so a row agrees with `size` on the same"
                     " configuration within the printed search_resolution" if same else
                     f" with [run] n_requests={run['n_requests']}, search_steps={run['search_steps']},"
                     f" duration_s={run['duration_s']}, max_requests={run['max_requests']} (shorter runs than"
                     " `size`: coarser, and optimistic where the queue has no time to build)")
                  + f"; seed={_search_setting(spec, 'seed')}.")
    blocks = [("", intro, None)]
    cols = [c for c in PARETO_COLS if c in df.columns]
    front_keys = [c for c in ("model", "traffic") if c in df.columns]
    for key, sub in df[df.pareto].groupby(front_keys, sort=False):
        sub = sub.sort_values(lat)
        name = " / ".join(map(str, key if isinstance(key, tuple) else (key,)))
        blocks.append((f"Pareto front: {name} (fleet $/M output tokens at the target vs {lat})",
                       "Cheapest fleet at each latency among those meeting the target: its $/h over the target's"
                       " output tokens, as `size` ranks (one front per model and traffic mix).", sub[cols]))
    no_front = [m for m in df.model.unique() if not df[(df.model == m) & df.pareto].shape[0]]
    if no_front:
        blocks.append(("No configuration meets the target", ", ".join(map(str, no_front)), None))
    if len(filtered):
        counts = filtered.groupby("filter").size().to_dict()
        blocks.append(("Filtered combinations", ", ".join(f"{k}: {v}" for k, v in counts.items())
                       + " (all in filtered.csv)", filtered.head(20)[["model", "hardware", "tp", "filter", "reason"]]))
    unc = df["uncertainty"].dropna().unique() if "uncertainty" in df.columns else []
    blocks.append(("Uncertainty and provenance",
                   "Per row: `rel_error` / `load_band_low` / `load_band_high` / `gpus_band` and `uncertainty`"
                   " (simulator.sizing.uncertainty), and the `prov_*` columns (Prediction.provenance)."
                   " Distinct uncertainty notes: " + " | ".join(map(str, unc[:5])), None))
    return blocks


def summary_markdown(spec, df, filtered, stats) -> str:
    out = [f"# Sweep {spec.name}\n", f"{spec.description}\n" if spec.description else ""]
    for title, text, table in _sections(spec, df, filtered, stats):
        if title:
            out.append(f"\n## {title}\n")
        out.append(text + "\n")
        if table is not None:
            out.append("\n" + _md_table(table))
    return "".join(out)


def summary_html(spec, df, filtered, stats) -> str:
    body = [f"<h1>Sweep {html.escape(spec.name)}</h1>", f"<p>{html.escape(spec.description)}</p>"]
    for title, text, table in _sections(spec, df, filtered, stats):
        if title:
            body.append(f"<h2>{html.escape(title)}</h2>")
        body.append(f"<p>{html.escape(text)}</p>")
        if table is not None:
            body.append(table.to_html(index=False, na_rep="", float_format=lambda v: f"{v:.4g}", border=0))
    style = ("body{font-family:system-ui,sans-serif;margin:2em;max-width:1400px}"
             "table{border-collapse:collapse;font-size:13px}td,th{padding:3px 8px;border-bottom:1px solid #ddd}"
             "th{text-align:left;background:#f4f4f4}")
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>Sweep {html.escape(spec.name)}</title>"
            f"<style>{style}</style></head><body>{''.join(body)}</body></html>\n")
