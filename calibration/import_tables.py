"""Turn aiconfigurator-core's measured kernel tables into format-2 calibration profiles.

    python -m calibration.import_tables [--gpu h100-sxm ...] [--engine trtllm|vllm|sglang]
                                        [--output-dir simulator/data/profiles]

Per (GPU, engine, version) it writes ``<hardware>.<engine>-<version>.profile.json`` with
efficiency surfaces (efficiency = roofline time / measured time) for GEMM, decode attention
(GQA and MLA) and routed MoE, plus all-reduce / NCCL collective tables, and reports held-out
error. The roofline is the planner's own: the FLOP and byte terms of simulator/physics/terms.py
(GEMM, decode attention, absorbed MLA, routed experts), the busiest-GPU expert load of
simulator/physics/experts.py (uniform routing p = k/E, the tables' "balanced" distribution), and the
peaks of the hardware catalog entry (simulator.specs.hardware.load_hardware: the dtype peak the
planner uses, fp8 only when weights AND activations are fp8; HBM bandwidth; link bandwidth and
latency). All-reduce of S bytes over g GPUs: t = alpha_g + collective_factor * S / busBW_g
(simulator/specs/wire.py: 2 (g-1)/g).

Held-out protocol: every distinct shape gets a bucket sha1(shape) mod 5; bucket 0 is held out,
buckets 1..4 are fitted. The split never looks at latencies.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import hashlib
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from calibration import gpu_tables as gt
from calibration.planner_rows import monotone_rows_s
from calibration.surface_fit import fit_surface, smooth_knots
from simulator.cli.common import (OneLineParser, check_output_dir, command, write_atomically,
                                  write_files_atomically)
from simulator.physics.experts import busiest_group_load, experts_touched
from simulator.physics.terms import (attention_decode_terms, expert_params_slice, gemm_terms, mla_decode_terms,
                                     moe_expert_terms, roofline_s)
from simulator.specs.hardware import DTYPE_BYTES, Hardware, load_hardware
from simulator.specs.surfaces import ShapeCorrection, Surface, collective_time_s
from simulator.specs.wire import collective_factor

REPO = Path(__file__).resolve().parents[1]
DEFAULT_OUT = REPO / "simulator" / "data" / "profiles"  # the simulator picks them up by device
HELDOUT_BUCKETS = 5
FAMILIES = ("gemm", "attention_decode", "mla_decode", "moe", "all_reduce")
MLA_KV_LORA, MLA_ROPE = 512, 64  # DeepSeek-V3/R1 (the model the MLA tables were collected for)


# (surface suffix, planner weight dtype, planner activation dtype) per table dtype
DTYPES = {"bfloat16": ("bf16", "bf16", "bf16"), "fp8": ("fp8", "fp8", "fp8"), "fp8_block": ("fp8_block", "fp8", "fp8"),
          # weight-only quantization: int8 / int4 weights dequantized into bf16 math (A100 TensorRT-LLM tables)
          "int8_wo": ("int8_wo", "int8", "bf16"), "int4_wo": ("int4_wo", "int4", "bf16")}
KV_BYTES = {"bfloat16": 2.0, "fp8": 1.0}
ATTENTION_ACT_BYTES = DTYPE_BYTES["bf16"]  # the attention tables run bf16 queries and outputs


def dtype_terms(table_dtypes: pd.Series, hw: Hardware):
    """Surface suffixes, weight bytes, activation bytes and the planner's peak FLOP/s per row."""
    spec = table_dtypes.map(DTYPES)
    w = spec.map(lambda s: DTYPE_BYTES[s[1]]).to_numpy()
    a = spec.map(lambda s: DTYPE_BYTES[s[2]]).to_numpy()
    peak = spec.map(lambda s: hw.peak_flops_per_s(s[1], s[2])).to_numpy(float)
    return spec.map(lambda s: s[0]), w, a, peak


def measurable_dtypes(hw: Hardware) -> list[str]:
    """Table dtypes the device can run: fp8 ones only with an fp8 peak in the catalog."""
    return [d for d, s in DTYPES.items() if s[2] != "fp8" or hw.peak_fp8_flops_per_s]


# The busiest expert-parallel GPU's token-expert pairs. The planner prices E[max] over the ep groups
# (physics/experts.busiest_group_load); the shipped profiles were fitted with its asymptotic form
# mean + sqrt(2 ln ep) std, up to 4.3% more roofline time on ep > 1 rows. Set True when re-importing
# the profiles (held-out MoE predictions of the shipped surfaces then move by up to 2.4%).
BUSIEST_LOAD_FROM_PLANNER = False


@dataclass(frozen=True)
class DevicePeaks:
    """The catalog device's datasheet peaks as the planner reads them (bf16 and fp8 math, HBM)."""

    bf16: float
    fp8: float | None
    bw: float


def device_peaks(hw) -> DevicePeaks:
    return DevicePeaks(hw.peak_bf16_flops_per_s, hw.peak_fp8_flops_per_s, hw.hbm_bandwidth_bytes_per_s)


def uniform_moe_load(tokens, experts, topk, ep):
    """(experts touched on the busiest GPU, its token-expert pairs, experts touched in all) for table
    rows under uniform routing p = k/E: the planner's busiest_group_load, per distinct layer."""
    tokens, experts, topk, ep = (np.asarray(x, dtype=float) for x in (tokens, experts, topk, ep))
    touched, pairs, total = (np.empty(tokens.shape) for _ in range(3))
    layers = np.unique(np.column_stack([experts, topk, ep]), axis=0)
    for e, k, g in layers:
        rows = (experts == e) & (topk == k) & (ep == g)
        p = np.full(int(e), k / e)
        touched[rows], pairs[rows] = busiest_group_load(tokens[rows], p, int(g))
        total[rows] = experts_touched(tokens[rows], p)
        if g > 1 and not BUSIEST_LOAD_FROM_PLANNER:
            n = tokens[rows] * k
            pairs[rows] = n / g + np.sqrt(2 * np.log(g)) * np.sqrt(n * (1 / g) * (1 - 1 / g))
    return touched, pairs, total


# ---------------------------------------------------------------- table rows -> roofline rows
def _canon(v) -> str:
    """Canonical text of one shape value: integral numbers without a decimal point (256.0 -> '256'),
    so a shape hashes the same from parquet (int64) and from a CSV round trip (float)."""
    if isinstance(v, (int, np.integer)):
        return str(int(v))
    if isinstance(v, (float, np.floating)) and float(v).is_integer():
        return str(int(v))
    return str(v)


def shape_bucket(keys: pd.DataFrame) -> np.ndarray:
    """Deterministic bucket sha1('col=val|...') mod 5 of each row's shape (no latency involved)."""
    cols = list(keys.columns)
    out = np.empty(len(keys), dtype=int)
    for i, row in enumerate(keys.itertuples(index=False, name=None)):
        txt = "|".join(f"{c}={_canon(v)}" for c, v in zip(cols, row))
        out[i] = int(hashlib.sha1(txt.encode()).hexdigest()[:8], 16) % HELDOUT_BUCKETS
    return out


def _dedupe(df: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """One row per shape: the fastest kernel measured (tables may list several kernel sources)."""
    return df.sort_values("latency").drop_duplicates(keys, keep="first").sort_index()


def primary_kernel(df: pd.DataFrame) -> pd.DataFrame:
    """The rows of the table's most-measured kernel source. An engine runs one attention backend at
    every shape, chosen at startup (SGLang 0.5.13 server_args.py _get_default_attn_backend: FA3 on
    Hopper, trtllm_mha on SM100, FlashInfer otherwise), and in every table that backend is the kernel
    with the most rows; the fastest kernel per shape would mix backends no engine mixes."""
    if "kernel_source" not in df or df.kernel_source.nunique() <= 1:
        return df
    return df[df.kernel_source == df.kernel_source.value_counts().idxmax()]


GEMM_KEYS = ["gemm_dtype", "m", "n", "k"]


def prepare_gemm(df: pd.DataFrame, hw: Hardware) -> pd.DataFrame:
    """GEMM rows -> surface, axes (m, n, k, nk), roofline and measured seconds."""
    df = df[df.gemm_dtype.isin(measurable_dtypes(hw))]
    df = _dedupe(df, GEMM_KEYS)
    suffix, w, a, P = dtype_terms(df.gemm_dtype, hw)
    F, M = gemm_terms(*(df[c].to_numpy(float) for c in ("m", "n", "k")), w, a)
    out = df.copy()
    out["family"] = "gemm"
    out["surface"] = "gemm." + suffix
    out["ax_m"] = df.m.astype(float)
    out["ax_n"] = df.n.astype(float)
    out["ax_k"] = df.k.astype(float)
    out["ax_nk"] = df.n.astype(float) * df.k.astype(float)
    out["t0"] = roofline_s(F, M, P, hw.hbm_bandwidth_bytes_per_s)
    out["meas_s"] = df.latency.to_numpy() * 1e-3
    out["bucket"] = shape_bucket(df[GEMM_KEYS])
    return out


ATTN_KEYS = ["kv_cache_dtype", "batch_size", "step", "num_heads", "num_key_value_heads", "head_dim"]


def prepare_attention_decode(df: pd.DataFrame, hw: Hardware) -> pd.DataFrame:
    """generation_attention rows (full attention only: window_size 0) -> roofline rows.

    The table's decode step reads ``step`` cached keys plus the new token: L = step, q = 1
    (isl is 1 in every row). Rows with more KV heads than query heads are dropped.
    """
    if "window_size" in df:
        df = df[df.window_size == 0]
    df = df[(df.isl == 1) & (df.num_key_value_heads <= df.num_heads) & df.kv_cache_dtype.isin(KV_BYTES)
            & (df.attn_dtype == "bfloat16")]
    if "beam_width" in df:
        df = df[df.beam_width == 1]
    df = _dedupe(primary_kernel(df), ATTN_KEYS)
    kv = df.kv_cache_dtype.map(KV_BYTES).to_numpy()
    B, L = df.batch_size.to_numpy(float), df.step.to_numpy(float)
    hq, hkv, d = (df[c].to_numpy(float) for c in ("num_heads", "num_key_value_heads", "head_dim"))
    F, kv_read, q_io = attention_decode_terms(B, 1.0, L, hq, hkv, d, kv, ATTENTION_ACT_BYTES)
    M = kv_read + q_io
    out = df.copy()
    out["family"] = "attention_decode"
    out["surface"] = "attention_decode." + df.kv_cache_dtype.map({"bfloat16": "bf16", "fp8": "fp8"})
    out["ax_tokens"] = B * 1.0
    out["ax_batch"] = B
    out["ax_context"] = L + 1
    out["ax_kv_bytes"] = B * (L + 1) * 2 * df.num_key_value_heads.to_numpy(float) * df.head_dim.to_numpy(float) * kv
    out["ax_bytes"] = M
    out["ax_batch_heads"] = B * df.num_key_value_heads.to_numpy(float)
    out["ax_head_dim"] = df.head_dim.to_numpy(float)
    out["ax_group"] = df.num_heads.to_numpy(float) / df.num_key_value_heads.to_numpy(float)
    out["t0"] = roofline_s(F, M, hw.peak_bf16_flops_per_s, hw.hbm_bandwidth_bytes_per_s)
    out["meas_s"] = df.latency.to_numpy() * 1e-3
    out["bucket"] = shape_bucket(df[ATTN_KEYS])
    return out


MLA_KEYS = ["kv_cache_dtype", "batch_size", "step", "num_heads"]


def prepare_mla_decode(df: pd.DataFrame, hw: Hardware) -> pd.DataFrame:
    """generation_mla rows (DeepSeek absorbed MLA; num_heads is per GPU) -> roofline rows."""
    df = df[(df.isl == 1) & df.kv_cache_dtype.isin(KV_BYTES)]
    if "mla_dtype" in df:
        df = df[df.mla_dtype == "bfloat16"]
    df = _dedupe(df, MLA_KEYS)
    kv = df.kv_cache_dtype.map(KV_BYTES).to_numpy()
    B, L = df.batch_size.to_numpy(float), df.step.to_numpy(float)
    F, kv_read, q_io = mla_decode_terms(B, 1.0, L, df.num_heads.to_numpy(float), MLA_KV_LORA, MLA_ROPE, kv,
                                        ATTENTION_ACT_BYTES)
    M = kv_read + q_io
    out = df.copy()
    out["family"] = "mla_decode"
    out["surface"] = "mla_decode." + df.kv_cache_dtype.map({"bfloat16": "bf16", "fp8": "fp8"})
    out["ax_tokens"] = B * 1.0
    out["ax_batch"] = B
    out["ax_context"] = L + 1
    out["ax_kv_bytes"] = B * (L + 1) * (MLA_KV_LORA + MLA_ROPE) * kv
    out["ax_bytes"] = M
    out["ax_n"] = df.num_heads.astype(float)
    out["t0"] = roofline_s(F, M, hw.peak_bf16_flops_per_s, hw.hbm_bandwidth_bytes_per_s)
    out["meas_s"] = df.latency.to_numpy() * 1e-3
    out["bucket"] = shape_bucket(df[MLA_KEYS])
    return out


MOE_KEYS = ["moe_dtype", "num_tokens", "hidden_size", "inter_size", "topk", "num_experts",
            "moe_tp_size", "moe_ep_size"]


def moe_distribution(df: pd.DataFrame) -> str:
    """'balanced' routing when the table has it (matches the planner's uniform routing),
    else the table's mildest power law."""
    ds = set(df.distribution.unique())
    for d in ("balanced", "power_law_1.01", "power_law_1.2"):
        if d in ds:
            return d
    return sorted(ds)[0]


# The exact MoE layer shape (the planner's moe op carries the same names): experts, top-k, hidden,
# expert intermediate (before TP), expert TP, EP. Per such shape the profile stores the table's
# residual along tokens (simulator.specs.surfaces.ShapeCorrection).
MOE_SHAPE_KEY = ("num_experts", "topk", "hidden", "inter", "moe_tp", "moe_ep")
CORRECTED_FAMILIES = {"moe": (MOE_SHAPE_KEY, "tokens")}


def prepare_moe(df: pd.DataFrame, hw: Hardware) -> pd.DataFrame:
    """moe rows (gated experts; one routing distribution) -> roofline rows, on the planner's busiest
    GPU (expert-parallel rows: the expected maximum load over the ep groups, as the planner prices it)."""
    df = df[df.moe_dtype.isin(measurable_dtypes(hw))]
    df = df[~df.kernel_source.str.contains("nongated|min_latency")]
    df = df[df.distribution == moe_distribution(df)]
    df = df[(df.num_experts % df.moe_ep_size == 0) & (df.inter_size % df.moe_tp_size == 0)]
    df = _dedupe(df, MOE_KEYS)
    suffix, w, a, P = dtype_terms(df.moe_dtype, hw)
    T, E, k, D, I, tp_e, ep = (df[c].to_numpy(float) for c in ("num_tokens", "num_experts", "topk", "hidden_size",
                                                               "inter_size", "moe_tp_size", "moe_ep_size"))
    touched, pairs, touched_all = uniform_moe_load(T, E, k, ep)
    F, M = moe_expert_terms(pairs, touched, D, I, tp_e, w, a)
    params = expert_params_slice(D, I, tp_e)
    tpe = T * k / np.maximum(touched_all, 1.0)  # the planner's efficiency axis (layers.moe_ops)
    out = df.copy()
    out["family"] = "moe"
    out["surface"] = "moe." + suffix
    out["ax_tokens_per_expert"] = tpe
    out["ax_expert_bytes"] = touched * params * w
    out["ax_tokens"] = df.num_tokens.astype(float)
    out["ax_bytes"] = M
    out["ax_n"] = df.inter_size.to_numpy(float) / df.moe_tp_size.to_numpy(float)
    out["ax_k"] = df.hidden_size.astype(float)
    for ax, col in zip(MOE_SHAPE_KEY, ("num_experts", "topk", "hidden_size", "inter_size", "moe_tp_size", "moe_ep_size")):
        out[f"ax_{ax}"] = df[col].astype(float)
    out["t0"] = roofline_s(F, M, P, hw.hbm_bandwidth_bytes_per_s)
    out["meas_s"] = df.latency.to_numpy() * 1e-3
    out["bucket"] = shape_bucket(df[MOE_KEYS])
    return out


AR_KEYS = ["num_gpus", "message_size"]


def prepare_all_reduce(df: pd.DataFrame, hw: Hardware) -> pd.DataFrame:
    """custom_allreduce rows -> bytes (message_size counts bf16 elements) and seconds.

    Prefers the CUDA-graph variant when the table has graph and eager rows; for tables with
    several implementations (MNNVL one/two-shot) the fastest per size is kept.
    """
    df = df[df.allreduce_dtype == "bfloat16"]
    if df.kernel_source.str.contains("graph").any():
        df = df[df.kernel_source.str.contains("graph")]
    df = _dedupe(df, AR_KEYS)
    out = df.copy()
    out["family"] = "all_reduce"
    out["surface"] = "all_reduce"
    out["bytes"] = df.message_size.astype(float) * 2
    g = df.num_gpus.to_numpy(float)
    out["t0"] = hw.interconnect_latency_s + collective_factor("all_reduce", g) * out["bytes"].to_numpy() \
        / hw.interconnect_bandwidth_bytes_per_s
    out["meas_s"] = df.latency.to_numpy() * 1e-3
    out["bucket"] = shape_bucket(df[AR_KEYS])
    return out


PREPARE = {"gemm": prepare_gemm, "attention_decode": prepare_attention_decode,
           "mla_decode": prepare_mla_decode, "moe": prepare_moe, "all_reduce": prepare_all_reduce}
# family -> (table family folder, table name)
TABLE_OF = {"gemm": ("gemm", "gemm_perf"), "attention_decode": ("attention", "generation_attention_perf"),
            "mla_decode": ("mla", "generation_mla_perf"), "moe": ("moe", "moe_perf"),
            "all_reduce": ("comm", "custom_allreduce_perf")}
# Surface axes per family. Chosen on the fit rows only (fit on buckets 2-4, compared on bucket 1;
# bucket 0 never looked at), names from the planner's axis vocabulary:
#   gemm:   m, n, k of the GEMM (per GPU, after TP slicing)
#   attention_decode: the decode kernel's work items and their size: batch_heads = B hkv (one
#           (sequence, KV head) pair per thread block before split-KV), context = L + q, head_dim = d,
#           group = hq / hkv (query heads sharing one KV head; q = 1 in the tables). The older
#           (batch, context, bytes) axes could not tell an MQA-like kernel (group >= 48, ~3x slower at
#           equal bytes) from a GQA one: held-out MAPE 24% -> 7% on H200 trtllm
#   mla_decode: batch = B (sequences), context = L + q (keys incl. the new tokens), bytes = M of the
#           roofline (KV read + Q/O traffic; carries the head count)
#   moe:    tokens_per_expert = T k / (E (1 - (1 - k/E)^T)), expert_bytes = touched params_slice w
#           on the GPU, n = I / tp_e (expert intermediate slice)
AXES = {"gemm": ("m", "n", "k"), "attention_decode": ("batch_heads", "context", "head_dim", "group"),
        "mla_decode": ("batch", "context", "bytes"), "moe": ("tokens_per_expert", "expert_bytes", "n")}
MAX_NODES = {"gemm": (16, 16, 16), "attention_decode": (16, 17, 4, 8), "mla_decode": (11, 17, 16),
             "moe": (16, 16, 12)}
SMOOTH = {"gemm": 1e-2, "attention_decode": 0.1, "mla_decode": 0.1, "moe": 0.1}
AXIS_NOTES = {
    "gemm": "m, n, k: GEMM dims per GPU (Y[m,n] = X[m,k] W[k,n])",
    "attention_decode": ("batch_heads = B hkv (KV heads per GPU), context = L + q, head_dim = d, "
                         "group = hq / hkv (query heads per KV head)"),
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


# ---------------------------------------------------------------- one profile
@dataclass
class Imported:
    profile: dict
    heldout_rows: pd.DataFrame  # prepared held-out rows with predictions
    monotone: dict = field(default_factory=dict)  # held-out error per family as the planner prices a step


def build_profile(src: gt.TableSource, system: str, engine: str, version: str,
                  families=FAMILIES, log=print) -> Imported | None:
    """Fit one (system, engine, version) profile on fit buckets and score it on held-out rows."""
    hw = gt.SYSTEM_TO_CATALOG[system]
    device_hw = load_hardware(hw)
    tables = gt.list_tables(src)
    surfaces, heldout, used, statuses, held_parts, corrections, monotone = {}, {}, {}, {}, [], {}, {}
    device = None
    collectives = {}
    for fam in families:
        folder, tname = TABLE_OF[fam]
        rel = gt.resolve_table(tables, system, folder, engine, version, tname)
        if rel is None:
            continue
        raw = gt.read_table(src, rel)
        rows = PREPARE[fam](raw, device_hw)
        rows = rows[np.isfinite(rows.t0) & (rows.meas_s > 0)]
        if rows.empty:
            continue
        device = device or str(raw.device.iloc[0])
        used[fam] = f"{gt.DATA_PREFIX}{rel}"
        statuses[fam] = gt.table_status(gt.read_meta(src, rel), tname)
        fit, held = rows[rows.bucket != 0], rows[rows.bucket == 0].copy()
        if fam == "all_reduce":
            ent = collective_entries(fit, lambda g: collective_factor("all_reduce", g))
            collectives["all_reduce"] = ent
            held = held[held.num_gpus.astype(str).isin(ent)]
            held["pred_s"] = [float(collective_time_s(ent, int(g), b)) for g, b in zip(held.num_gpus, held["bytes"])]
            held["monotone_s"] = [float(collective_time_s(ent, int(g), b, monotone=True))
                                  for g, b in zip(held.num_gpus, held["bytes"])]
        else:
            for name, sub in fit.groupby("surface"):
                if len(sub) < 8:
                    continue
                X = axis_matrix(sub, AXES[fam])
                surfaces[name] = fit_surface(X, (sub.t0 / sub.meas_s).to_numpy(), AXES[fam], MAX_NODES[fam],
                                             smooth=SMOOTH[fam])
            if fam in CORRECTED_FAMILIES:
                fam_surfaces = {k: v for k, v in surfaces.items() if k.startswith(fam + ".")}
                corrections.update(shape_corrections(fit, fam_surfaces, *CORRECTED_FAMILIES[fam]))
                held["surface_only_s"] = predict_rows(held, surfaces)
            held["pred_s"] = predict_rows(held, surfaces, corrections)
            held["monotone_s"] = monotone_rows_s(held, surfaces, corrections, DTYPES, KV_BYTES, device_peaks(device_hw))
        held = held[np.isfinite(held.pred_s)]
        heldout[fam] = {"n": int(len(held)), "roofline": error_stats(held.t0, held.meas_s),
                        "fitted": error_stats(held.pred_s, held.meas_s)}
        mono = held[np.isfinite(held.monotone_s)]
        if len(mono):  # as the planner prices a step: the monotone fit (simulator/physics/monotone.py)
            monotone[fam] = error_stats(mono.monotone_s, mono.meas_s) | {"n": int(len(mono))}
        if "surface_only_s" in held:  # what a shape the table never measured can expect
            heldout[fam]["surface_only"] = error_stats(held.surface_only_s, held.meas_s)
        held["system"], held["hardware"], held["engine"], held["version"] = system, hw, engine, version
        held_parts.append(held)
        log(f"  {hw} {engine}-{version} {fam:17s} n_fit={len(fit):6d} n_held={len(held):5d} "
            f"roofline MAPE {heldout[fam]['roofline']['mape_pct']}%  fitted MAPE {heldout[fam]['fitted']['mape_pct']}%"
            f"  monotone MAPE {monotone.get(fam, {}).get('mape_pct', '-')}%")
    if not surfaces and not collectives:
        return None
    nccl_rel = gt.newest_table(tables, system, "comm", "nccl", "nccl_perf")
    if nccl_rel is not None:
        collectives.update(nccl_collectives(gt.read_table(src, nccl_rel)))
        used["nccl"] = f"{gt.DATA_PREFIX}{nccl_rel}"
        statuses["nccl"] = gt.table_status(gt.read_meta(src, nccl_rel), "nccl_perf")
    profile = {
        "format": "dsd-planner-profile", "format_version": 2,
        "hardware": hw, "device": {"name": device, "kind": "cuda"},
        "basis": "measured kernel tables",
        "provenance": {
            "source": f"aiconfigurator-core {gt.PACKAGE_VERSION} (Apache-2.0) measured kernel tables",
            "package_version": gt.PACKAGE_VERSION, "engine": engine, "engine_version": version,
            "tables": used, "date": _dt.date.today().isoformat(),
            "status": "; ".join(f"{k}: {v}" for k, v in statuses.items()),
            "system": system,
            "axes": {f: AXIS_NOTES[f] for f in AXES if any(k.startswith(f + ".") for k in surfaces)},
            "notes": ("efficiency = roofline time / measured time, roofline from the catalog datasheet "
                      "peaks of 'hardware'; surfaces fitted on 4/5 of the shapes (sha1(shape) mod 5 != 0); "
                      "decode attention: full attention (window 0), q = 1, L = step; MoE: gated experts, "
                      "routing distribution " + "'balanced' where measured; all-reduce bytes = 2 x "
                      "message_size (bf16 elements); NCCL all_gather/reduce_scatter/all_to_all bytes = whole "
                      "buffer; the tables time CUDA-graph replays, so launch_overhead_s = 0 and the "
                      "tiny-kernel floor lives in the surfaces"),
        },
        "surfaces": dict(sorted(surfaces.items())),
        "collectives": collectives,
        "shape_corrections": dict(sorted(corrections.items())),
        "launch_overhead_s": 0.0,
        "compute_efficiency": {}, "memory_efficiency": {},
        "heldout_error": heldout,
    }
    return Imported(profile, pd.concat(held_parts, ignore_index=True) if held_parts else pd.DataFrame(), monotone)


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


# ---------------------------------------------------------------- CLI
RAW_COLS = {
    "gemm": ["gemm_dtype", "m", "n", "k", "kernel_source"],
    "attention_decode": ["batch_size", "isl", "step", "num_heads", "num_key_value_heads", "head_dim",
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


def _parser() -> argparse.ArgumentParser:
    ap = OneLineParser(prog="python -m calibration.import_tables", description=__doc__.split("\n")[0])
    ap.add_argument("--gpu", nargs="*", help="catalog names (default: every catalog GPU the tables have)")
    ap.add_argument("--engine", nargs="*", choices=gt.ENGINES, help="default: all engines")
    ap.add_argument("--version", help="engine version (default: the wheel's 'current' slot per system/engine)")
    ap.add_argument("--family", nargs="*", choices=FAMILIES, default=list(FAMILIES))
    ap.add_argument("--output-dir", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--list", action="store_true", help="list (system, engine, version) combos and exit")
    ap.add_argument("--no-summary", action="store_true", help="skip heldout.md / heldout_rows.csv")
    return ap


def _run(args: argparse.Namespace) -> int:
    src = gt.locate_tables()
    combos = gt.list_combos(src)
    if args.list:
        print(combos.to_string(index=False))
        return 0
    current = gt.current_versions(src)
    systems = [s for s in sorted(combos.system.unique()) if s in gt.SYSTEM_TO_CATALOG]
    if args.gpu:
        bad = [g for g in args.gpu if g not in gt.CATALOG_TO_SYSTEM or gt.CATALOG_TO_SYSTEM[g] not in systems]
        if bad:
            have = sorted(gt.SYSTEM_TO_CATALOG[s] for s in systems)
            raise gt.PlannerError(f"no measured tables for {', '.join(bad)} (have: {', '.join(have)})")
        systems = [gt.CATALOG_TO_SYSTEM[g] for g in args.gpu]
    engines = args.engine or list(gt.ENGINES)
    check_output_dir(args.output_dir, "--output-dir").mkdir(parents=True, exist_ok=True)
    print(f"tables: {src.describe()}")
    summary, held_all = [], []
    for system in systems:
        for engine in engines:
            version = args.version or current.get((system, engine))
            if version is None:
                continue
            imp = build_profile(src, system, engine, version, tuple(args.family))
            if imp is None:
                continue
            hw = gt.SYSTEM_TO_CATALOG[system]
            path = args.output_dir / profile_filename(hw, engine, version)
            write_atomically(path, dump_profile(imp.profile), "--output-dir")
            print(f"wrote {path} ({path.stat().st_size // 1024} KiB)")
            for fam, e in imp.profile["heldout_error"].items():
                summary.append({"hardware": hw, "engine": engine, "version": version, "family": fam, **e}
                               | ({"monotone": imp.monotone[fam]} if fam in imp.monotone else {}))
            held_all.append(imp.heldout_rows)
    if summary and not args.no_summary:
        sample = sample_heldout(pd.concat(held_all, ignore_index=True))
        write_files_atomically(args.output_dir, {"heldout.md": heldout_markdown(summary),
                                                 "heldout_rows.csv": sample.to_csv(index=False)})
        print(f"wrote {args.output_dir / 'heldout.md'} and heldout_rows.csv ({len(sample)} rows)")
    return 0


# usage errors and bad input: one line, exit 2 (simulator.cli.common, the planner's CLI boundary)
main = command(_parser, _run)


if __name__ == "__main__":
    sys.exit(main())
