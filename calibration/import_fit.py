"""Fitting the prepared kernel-table rows (used by :mod:`calibration.import_tables`): efficiency
surfaces and their per-shape corrections, alpha-beta collective tables, and the held-out error."""
from __future__ import annotations

import numpy as np
import pandas as pd

from calibration.surface_fit import smooth_knots
from simulator.specs.surfaces import ShapeCorrection, Surface
from simulator.specs.wire import collective_factor


# Surface axes per family. Chosen on the fit rows only (fit on buckets 2-4, compared on bucket 1;
# bucket 0 never looked at), names from the planner's axis vocabulary:
#   gemm:   m, n, k of the GEMM (per GPU, after TP slicing)
#   attention_decode: the decode kernel's work items and their size: batch_heads = B hkv (one
#           (sequence, KV head) pair per thread block before split-KV), context = L + q, head_dim = d,
#           group = hq / hkv (query heads sharing one KV head; q = 1 in the tables). The older
#           (batch, context, bytes) axes could not tell an MQA-like kernel (group >= 48, ~3x slower at
#           equal bytes) from a GQA one: held-out MAPE 24% -> 7% on H200 trtllm
#   attention_prefill: the fused causal prefill kernel (context_attention tables: q = L = isl), the
#           decode family's axes with context = the prompt length isl; the planner reads a chunk of q
#           queries over L cached keys at the prompts that run the same kernel, n = 2 L + q and
#           B' = B q / n (physics.terms.prefill_equivalent_prompts)
#   mla_decode: batch = B (sequences), context = L + q (keys incl. the new tokens), bytes = M of the
#           roofline (KV read + Q/O traffic; carries the head count)
#   moe:    tokens_per_expert = T k / (E (1 - (1 - k/E)^T)), expert_bytes = touched params_slice w
#           on the GPU, n = I / tp_e (expert intermediate slice)
AXES = {"gemm": ("m", "n", "k"), "attention_decode": ("batch_heads", "context", "head_dim", "group"),
        "attention_prefill": ("batch_heads", "context", "head_dim", "group"),
        "mla_decode": ("batch", "context", "bytes"), "moe": ("tokens_per_expert", "expert_bytes", "n")}
MAX_NODES = {"gemm": (16, 16, 16), "attention_decode": (16, 17, 4, 8), "attention_prefill": (16, 17, 4, 8), "mla_decode": (11, 17, 16),
             "moe": (16, 16, 12)}
SMOOTH = {"gemm": 1e-2, "attention_decode": 0.1, "attention_prefill": 0.1, "mla_decode": 0.1, "moe": 0.1}
AXIS_NOTES = {
    "gemm": "m, n, k: GEMM dims per GPU (Y[m,n] = X[m,k] W[k,n])",
    "attention_decode": ("batch_heads = B hkv (KV heads per GPU), context = L + q, head_dim = d, "
                         "group = hq / hkv (query heads per KV head)"),
    "attention_prefill": ("fused causal prefill (window 0, bf16 math, q = L = isl): batch_heads = B hkv, context = isl, "
                          "head_dim = d, group = hq / hkv; a chunk of q queries over L cached keys is read at the "
                          "prompts of the same tokens and FLOPs: isl = 2 L + q, B' = B q / isl"),
    "mla_decode": "batch = B, context = L + q, bytes = roofline M = B (L+q) latent kv + 2 B q hq latent a",
    "moe": "tokens_per_expert = T k / (E (1-(1-k/E)^T)), expert_bytes = touched params_slice w, n = I / tp_e",
}


def axis_matrix(rows: pd.DataFrame, axes: tuple[str, ...]) -> np.ndarray:
    return np.column_stack([rows[f"ax_{a}"].to_numpy(float) for a in axes])


def predict_rows(rows: pd.DataFrame, surfaces: dict, corrections: dict | None = None) -> np.ndarray:
    """Predicted seconds t0 / surface(axes) for prepared rows (NaN where no surface), times the
    shape correction where one covers the row's exact shape."""
    out = np.full(len(rows), np.nan)
    for name, idx in rows.groupby("surface").indices.items():
        if name not in surfaces:
            continue
        s = surfaces[name] if isinstance(surfaces[name], Surface) else Surface.from_dict(surfaces[name])
        sub = rows.iloc[idx]
        eff = s(**{a: sub[f"ax_{a}"].to_numpy(float) for a in s.axes})
        out[idx] = sub.t0.to_numpy() / eff
        fix = (corrections or {}).get(name)
        if fix is not None:
            fix = fix if isinstance(fix, ShapeCorrection) else ShapeCorrection.from_dict(fix)
            cols = [f"ax_{a}" for a in fix.key_axes]
            for _key, pos in sub.groupby(cols).indices.items():
                shape = {c[3:]: sub[c].iloc[pos[0]] for c in cols} | {fix.along: sub[f"ax_{fix.along}"].to_numpy(float)[pos]}
                factor = fix.factor(shape)
                if factor is not None:
                    out[idx[pos]] *= factor
    return out


def shape_corrections(fit: pd.DataFrame, surfaces: dict, key_axes: tuple[str, ...], along: str) -> dict:
    """Per surface and exact shape of the fit rows: measured / surface time along ``along`` (a smoothed
    curve on a few knots, 3 significant digits), the table's own word where the smooth surface misses."""
    pred = predict_rows(fit, surfaces)
    fit = fit.assign(_log_ratio=np.log(fit.meas_s.to_numpy() / pred))
    fit = fit[np.isfinite(fit._log_ratio)]
    out = {}
    for name, sub in fit.groupby("surface"):
        entries = {}
        for key, g in sub.groupby([f"ax_{a}" for a in key_axes]):
            lx, lf = smooth_knots(np.log2(g[f"ax_{along}"].to_numpy(float)), g._log_ratio.to_numpy())
            entries[ShapeCorrection.key_of(key)] = [[float(f"{v:.4g}") for v in np.exp2(lx)],
                                                     [float(f"{v:.3g}") for v in np.exp(lf)]]
        out[name] = {"key_axes": list(key_axes), "along": along, "entries": dict(sorted(entries.items()))}
    return out


# ---------------------------------------------------------------- collectives
def fit_alpha_beta(nbytes: np.ndarray, t: np.ndarray, factor: float) -> tuple[float, float]:
    """alpha >= 0 and busBW > 0 minimising sum(((alpha + factor S / BW) / t - 1)^2)."""
    from scipy.optimize import nnls

    A = np.column_stack([np.ones_like(nbytes), factor * nbytes]) / t[:, None]
    (alpha, inv_bw), _ = nnls(A, np.ones_like(t))
    inv_bw = max(inv_bw, 1e-18)
    return float(alpha), float(1.0 / inv_bw)


def collective_entries(rows: pd.DataFrame, factor_of) -> dict:
    """{str(g): {alpha_s, bus_bandwidth_bytes_per_s, bytes, latency_s}} from (num_gpus, bytes, meas_s) rows."""
    out = {}
    for g, sub in rows.groupby("num_gpus"):
        sub = sub.sort_values("bytes")
        if len(sub) < 2:
            continue
        b, t = sub["bytes"].to_numpy(float), sub.meas_s.to_numpy(float)
        alpha, bw = fit_alpha_beta(b, t, factor_of(int(g)))
        out[str(int(g))] = {"alpha_s": float(f"{alpha:.5g}"), "bus_bandwidth_bytes_per_s": float(f"{bw:.5g}"),
                            "bytes": [int(x) for x in b], "latency_s": [float(f"{x:.5g}") for x in t]}
    return out


NCCL_OPS = {"all_gather": "all_gather", "alltoall": "all_to_all", "reduce_scatter": "reduce_scatter",
            "all_reduce": "all_reduce_nccl"}


def nccl_collectives(df: pd.DataFrame) -> dict:
    """NCCL tables (message_size counts fp16 elements of the whole buffer) -> collective entries.

    Each op is fitted with its collective_factor: (g-1)/g, or 2 (g-1)/g for all_reduce."""
    df = df[df.nccl_dtype == "half"].copy()
    df["bytes"] = df.message_size.astype(float) * 2
    df["meas_s"] = df.latency * 1e-3
    out = {}
    for op, name in NCCL_OPS.items():
        sub = df[df.op_name == op]
        if sub.empty:
            continue
        out[name] = collective_entries(sub, lambda g, name=name: collective_factor(name, g))
    return out


# ---------------------------------------------------------------- error metrics
def error_stats(pred: np.ndarray, meas: np.ndarray) -> dict:
    """MAPE, median and max of |pred/meas - 1| in percent."""
    r = np.abs(np.asarray(pred) / np.asarray(meas) - 1) * 100
    r = r[np.isfinite(r)]
    if r.size == 0:
        return {"mape_pct": None, "median_pct": None, "max_pct": None}
    return {"mape_pct": round(float(r.mean()), 2), "median_pct": round(float(np.median(r)), 2),
            "max_pct": round(float(r.max()), 2)}
