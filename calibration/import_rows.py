"""Measured kernel-table rows made into roofline rows (used by :mod:`calibration.import_tables`): per
row the planner's FLOP and byte terms (simulator/physics/terms.py) at the catalog peaks, the measured
seconds, the surface axes and the held-out bucket sha1(shape) mod 5."""
from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from simulator.physics.terms import attention_decode_terms, gemm_terms, mla_decode_terms, roofline_s
from simulator.specs.hardware import DTYPE_BYTES, FP4_DTYPES, Hardware
from simulator.specs.wire import collective_factor

HELDOUT_BUCKETS = 5
MLA_KV_LORA, MLA_ROPE = 512, 64  # DeepSeek-V3/R1 (the model the MLA tables were collected for)


# (surface suffix, planner weight dtype, planner activation dtype) per table dtype
DTYPES = {"bfloat16": ("bf16", "bf16", "bf16"), "fp8": ("fp8", "fp8", "fp8"), "fp8_block": ("fp8_block", "fp8", "fp8"),
          # weight-only quantization: int8 / int4 weights dequantized into bf16 math (A100 TensorRT-LLM tables)
          "int8_wo": ("int8_wo", "int8", "bf16"), "int4_wo": ("int4_wo", "int4", "bf16"),
          # FP4 tensor cores (NVFP4 weights and activations; Blackwell), and MXFP4 weights dequantized into bf16
          # math (gpt-oss's experts on Hopper and Blackwell: the tables' w4a16_mxfp4 MoE rows)
          "nvfp4": ("fp4", "nvfp4", "nvfp4"), "w4a16_mxfp4": ("mxfp4_wo", "mxfp4", "bf16")}
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
    """Table dtypes the device runs as the engines run them: fp8 ones only with an fp8 peak in the catalog, FP4
    ones only where its tensor cores run that format; FP4 weights dequantized into bf16 math only where they do
    not (on Blackwell the engines multiply MXFP4 / NVFP4 weights on FP4 or FP8 tensor cores: TensorRT-LLM
    1.3.0rc20's w4a16_mxfp4 MoE rows on B200 run 4.3x its w4a8_mxfp4_mxfp8 rows at 64 tokens, a path its
    gpt-oss and DeepSeek-FP4 deployments do not take)."""
    return [d for d, s in DTYPES.items() if (s[2] != "fp8" or hw.peak_fp8_flops_per_s)
            and (s[2] not in FP4_DTYPES or s[2] in hw.fp4_formats)
            and not (s[1] in FP4_DTYPES and s[2] not in FP4_DTYPES and s[1] in hw.fp4_formats)]


@dataclass(frozen=True)
class DevicePeaks:
    """The catalog device's datasheet peaks as the planner reads them (bf16 and fp8 math, HBM); ``matmul``:
    the peak of the math given weight and activation dtypes (the planner's own rule, Hardware.peak_flops_per_s)."""

    bf16: float
    fp8: float | None
    bw: float
    matmul: Callable[[str, str], float]


def device_peaks(hw) -> DevicePeaks:
    return DevicePeaks(hw.peak_bf16_flops_per_s, hw.peak_fp8_flops_per_s, hw.hbm_bandwidth_bytes_per_s,
                       hw.peak_flops_per_s)

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
# A dtype whose fastest small GEMM (m <= 16) is this many times the table's fastest bf16 one timed a fixed cost per
# call, not its kernel. aiconfigurator-core 0.12.0: vLLM 0.24.0's fp8_block rows floor at 57 us on H100 / H200 (the
# table's bf16 2.7 us, per-tensor fp8 5.1 us; SGLang's DeepGEMM rows of the same GPU 3.9 us) and 162 us on B200,
# 22-171 x bf16 on every GPU, whatever the shape; every other dtype of every table is within 7.3 x.
HOST_BOUND_FLOOR_RATIO = 10.0


def host_bound_dtypes(df: pd.DataFrame) -> list[str]:
    """GEMM dtypes whose small-GEMM floor is a per-call overhead (:data:`HOST_BOUND_FLOOR_RATIO`): left out, so the
    planner prices those GEMMs with the next surface of the same math (block fp8: per-tensor fp8's)."""
    small = df[df.m <= 16].groupby("gemm_dtype").latency.min()
    if "bfloat16" not in small:
        return []
    return sorted(d for d, t in small.items() if t > HOST_BOUND_FLOOR_RATIO * small["bfloat16"])


def scale_overhead_s(table: pd.DataFrame):
    """(m, k) -> seconds of a dynamic per-tensor fp8 activation scale (a ``computescale_perf`` table: the dynamic
    quantize kernel's time minus the static one's), bilinear in (log m, log k), clipped to the table's grid."""
    from scipy.interpolate import RegularGridInterpolator
    grid = table[table.quant_dtype == "fp8"].pivot_table(index="m", columns="k", values="latency")
    m_ax, k_ax = grid.index.to_numpy(float), grid.columns.to_numpy(float)
    f = RegularGridInterpolator((np.log(m_ax), np.log(k_ax)), grid.to_numpy() * 1e-3)

    def at(m, k) -> np.ndarray:
        m, k = np.clip(np.asarray(m, float), m_ax[0], m_ax[-1]), np.clip(np.asarray(k, float), k_ax[0], k_ax[-1])
        return f(np.column_stack([np.log(m), np.log(k)]))
    return at


def prepare_gemm(df: pd.DataFrame, hw: Hardware, scale_overhead=None) -> pd.DataFrame:
    """GEMM rows -> surface, axes (m, n, k, nk), roofline and measured seconds. ``scale_overhead``: where the table's
    fp8 rows timed a dynamic activation scale the engine's static-scale checkpoints skip (:func:`scale_overhead_s`),
    each fp8 row less that time, floored at its roofline (aiconfigurator's own fp8_static rule)."""
    df = df[df.gemm_dtype.isin(measurable_dtypes(hw)) & ~df.gemm_dtype.isin(host_bound_dtypes(df))]
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
    if scale_overhead is not None:
        fp8 = (df.gemm_dtype == "fp8").to_numpy()
        less = np.where(fp8, scale_overhead(df.m.to_numpy(float), df.k.to_numpy(float)), 0.0)
        out["meas_s"] = np.maximum(out["meas_s"].to_numpy() - less, np.where(fp8, out["t0"].to_numpy(), 0.0))
    out["bucket"] = shape_bucket(df[GEMM_KEYS])
    return out


ATTN_KEYS = ["kv_cache_dtype", "batch_size", "step", "num_heads", "num_key_value_heads", "head_dim"]


def prepare_attention_decode(df: pd.DataFrame, hw: Hardware) -> pd.DataFrame:
    """generation_attention rows (full attention only: window_size 0) -> roofline rows.

    The table's decode step reads ``step`` cached keys plus the new token: L = step, q = 1
    (isl is 1 in every row). Rows with more KV heads than query heads are dropped.
    """
    df = _full_attention_rows(df, df.isl == 1, ATTN_KEYS)
    kv = df.kv_cache_dtype.map(KV_BYTES).to_numpy()
    B, L = df.batch_size.to_numpy(float), df.step.to_numpy(float)
    hq, hkv, d = (df[c].to_numpy(float) for c in ("num_heads", "num_key_value_heads", "head_dim"))
    F, kv_read, q_io = attention_decode_terms(B, 1.0, L, hq, hkv, d, kv, ATTENTION_ACT_BYTES)
    return _decode_rows(df, "attention_decode", hw, ATTN_KEYS, F, kv_read + q_io, B * (L + 1) * 2 * hkv * d * kv,
                        {"ax_batch_heads": B * hkv, "ax_head_dim": d, "ax_group": hq / hkv})


def _full_attention_rows(df: pd.DataFrame, queries_ok: pd.Series, keys: list[str]) -> pd.DataFrame:
    """The attention rows both families read: full attention (window 0), bf16 math, a KV dtype the planner
    prices, no more KV heads than query heads, beam 1, the table's most-measured kernel, one row per shape;
    ``queries_ok``: the family's query counts (decode: isl 1; prefill: isl > 1)."""
    keep = queries_ok & (df.num_key_value_heads <= df.num_heads) & df.kv_cache_dtype.isin(KV_BYTES) \
        & (df.attn_dtype == "bfloat16")
    if "window_size" in df:
        keep &= df.window_size == 0
    if "beam_width" in df:
        keep &= df.beam_width == 1
    return _dedupe(primary_kernel(df[keep]), keys)


PREFILL_KEYS = ["kv_cache_dtype", "batch_size", "isl", "num_heads", "num_key_value_heads", "head_dim"]


def prepare_attention_prefill(df: pd.DataFrame, hw: Hardware) -> pd.DataFrame:
    """context_attention rows (fused causal prefill, full attention only: window_size 0, bf16 math) -> roofline rows.

    Each row runs ``isl`` new tokens per sequence with no cache: q = isl queries over L = 0 cached keys,
    causal among themselves, the planner's attention terms at L = 0: F = 2 B isl (isl + 1) hq d,
    M = B isl (2 hkv d kv + 2 hq d a) (Q, K, V read once, O written: a fused kernel never writes the
    score matrix). Axes as the decode family's: batch_heads = B hkv, context = isl (the equivalent
    prompt length, physics.terms.prefill_equivalent_prompts), head_dim, group = hq / hkv. Rows of one query
    (isl 1, a decode step) and with more KV heads than query heads are dropped.
    """
    df = _full_attention_rows(df, df.isl > 1, PREFILL_KEYS)
    kv = df.kv_cache_dtype.map(KV_BYTES).to_numpy()
    B, n = df.batch_size.to_numpy(float), df.isl.to_numpy(float)
    hq, hkv, d = (df[c].to_numpy(float) for c in ("num_heads", "num_key_value_heads", "head_dim"))
    F, kv_read, q_io = attention_decode_terms(B, n, 0.0, hq, hkv, d, kv, ATTENTION_ACT_BYTES)
    out = df.copy()
    out["family"] = "attention_prefill"
    out["surface"] = "attention_prefill." + df.kv_cache_dtype.map({"bfloat16": "bf16", "fp8": "fp8"})
    out["ax_batch_heads"] = B * hkv
    out["ax_context"] = n
    out["ax_head_dim"] = d
    out["ax_group"] = hq / hkv
    out["t0"] = roofline_s(F, kv_read + q_io, hw.peak_bf16_flops_per_s, hw.hbm_bandwidth_bytes_per_s)
    out["meas_s"] = df.latency.to_numpy() * 1e-3
    out["bucket"] = shape_bucket(df[PREFILL_KEYS])
    return out


def _decode_rows(df: pd.DataFrame, family: str, hw: Hardware, keys: list[str], flops, nbytes, kv_bytes,
                 extra: dict) -> pd.DataFrame:
    """Roofline rows of a q = 1 decode-attention table (GQA or MLA): the axes both surfaces share, then
    ``extra`` (the family's own axes), the roofline time, the measured time and the shape bucket."""
    B, L = df.batch_size.to_numpy(float), df.step.to_numpy(float)
    out = df.copy()
    out["family"] = family
    out["surface"] = family + "." + df.kv_cache_dtype.map({"bfloat16": "bf16", "fp8": "fp8"})
    out["ax_tokens"] = B * 1.0
    out["ax_batch"] = B
    out["ax_context"] = L + 1
    out["ax_kv_bytes"] = kv_bytes
    out["ax_bytes"] = nbytes
    for column, values in extra.items():
        out[column] = values
    out["t0"] = roofline_s(flops, nbytes, hw.peak_bf16_flops_per_s, hw.hbm_bandwidth_bytes_per_s)
    out["meas_s"] = df.latency.to_numpy() * 1e-3
    out["bucket"] = shape_bucket(df[keys])
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
    return _decode_rows(df, "mla_decode", hw, MLA_KEYS, F, kv_read + q_io, B * (L + 1) * (MLA_KV_LORA + MLA_ROPE) * kv,
                        {"ax_n": df.num_heads.astype(float)})


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
