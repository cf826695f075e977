"""What calibration.import_tables writes besides the surfaces: the profile JSON layout, its file name,
and the held-out summary (heldout.md, heldout_rows.csv)."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd

from calibration import gpu_tables as gt


def dump_profile(profile: dict) -> str:
    """JSON with one key per line down to the surface / collective entries, arrays kept on one line."""
    def enc(obj, depth):
        pad = " " * depth
        if isinstance(obj, dict) and depth < 4:
            if not obj:
                return "{}"
            items = [f"{pad} {json.dumps(k)}: {enc(v, depth + 1)}" for k, v in obj.items()]
            return "{\n" + ",\n".join(items) + "\n" + pad + "}"
        return json.dumps(obj, separators=(",", ":"))
    return enc(profile, 0) + "\n"


def profile_filename(hardware: str, engine: str, version: str) -> str:
    return f"{hardware}.{engine}-{version}.profile.json"


# ---------------------------------------------------------------- held-out summary
RAW_COLS = {
    "gemm": ["gemm_dtype", "m", "n", "k", "kernel_source"],
    "attention_decode": ["batch_size", "isl", "step", "num_heads", "num_key_value_heads", "head_dim",
                         "attn_dtype", "kv_cache_dtype", "kernel_source"],
    "attention_prefill": ["batch_size", "isl", "num_heads", "num_key_value_heads", "head_dim",
                          "attn_dtype", "kv_cache_dtype", "kernel_source"],
    "mla_decode": ["batch_size", "isl", "step", "num_heads", "kv_cache_dtype", "kernel_source"],
    "moe": ["moe_dtype", "num_tokens", "hidden_size", "inter_size", "topk", "num_experts", "moe_tp_size",
            "moe_ep_size", "distribution", "kernel_source"],
    "all_reduce": ["num_gpus", "message_size", "allreduce_dtype", "kernel_source"],
}


def sample_heldout(held: pd.DataFrame, per_group: int = 5) -> pd.DataFrame:
    """A few held-out rows per (hardware, engine, family), spread over the size range."""
    parts = []
    for (hw, eng, fam), sub in held.groupby(["hardware", "engine", "family"]):
        sub = sub.sort_values("t0")
        idx = np.unique(np.linspace(0, len(sub) - 1, min(per_group, len(sub))).round().astype(int))
        s = sub.iloc[idx]
        cols = [c for c in RAW_COLS[fam] if c in s]
        d = s[cols].copy()
        d.insert(0, "family", fam)
        d.insert(0, "version", s.version)
        d.insert(0, "engine", eng)
        d.insert(0, "gpu", hw)
        d["measured_ms"] = s.latency.to_numpy()
        d["fitted_ms"] = (s.pred_s * 1e3).round(6).to_numpy()
        parts.append(d)
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()


def heldout_markdown(rows: list[dict]) -> str:
    lines = ["# Held-out error of the imported GPU profiles", "",
             f"Source: aiconfigurator-core {gt.PACKAGE_VERSION} measured kernel tables (Apache-2.0). "
             "Held-out = shapes with sha1(shape) mod 5 == 0 (never fitted). MAPE of |pred/meas - 1| in %; "
             "roofline = catalog datasheet peaks, no efficiency; fitted = the profile's surfaces / collective tables "
             "(MoE: with the per-layer-shape correction, the held-out rows being other token counts of shapes the "
             "table measured); surface only = MoE without that correction, what a layer shape the table never "
             "measured can expect; monotone = the fitted time as the planner prices a step, the envelope max over "
             "less work (simulator/physics/monotone.py: a larger GEMM, attention or MoE step, or all-reduce "
             "message, is never priced faster).",
             "", "| GPU | engine | family | n | roofline MAPE | fitted MAPE | fitted median | fitted max | surface only MAPE "
             "| monotone MAPE | monotone max |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        mono = r.get("monotone", {})
        lines.append(f"| {r['hardware']} | {r['engine']}-{r['version']} | {r['family']} | {r['n']} | "
                     f"{r['roofline']['mape_pct']} | {r['fitted']['mape_pct']} | {r['fitted']['median_pct']} | "
                     f"{r['fitted']['max_pct']} | {r.get('surface_only', {}).get('mape_pct', '-')} | "
                     f"{mono.get('mape_pct', '-')} | {mono.get('max_pct', '-')} |")
    return "\n".join(lines) + "\n"
