"""Table rows priced the way the planner prices a step: the monotone envelope of the fitted surface.

:func:`calibration.import_tables.predict_rows` scores a profile's surfaces as fitted (t = t0 / surface,
times the per-shape correction). The planner prices every surface-priced op by the envelope
max over less work of that time (:mod:`simulator.physics.monotone`): a GEMM over its token count at
its weight shape, decode attention over sequences and cached keys, an MoE layer over tokens and the
distinct experts they touch; prefill attention at the surface's own time (capped at the peaks, no envelope). :func:`monotone_rows_s` prices prepared held-out rows with exactly those
functions, so the held-out report can say what the envelope costs in accuracy against the tables.
Rows of other families, or without a surface, come back NaN.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from simulator.physics.monotone import (MIN_BATCH_OCTAVES, MIN_KEY_OCTAVES, MIN_TOKEN_OCTAVES, attention_lattice_s,
                                        attention_time_s, gemm_lattice_s, lattice_time_s, log_lattice_interp,
                                        moe_lattice_s, moe_table_time_s, surface_time_s)
from simulator.physics.terms import attention_decode_terms
from simulator.specs.surfaces import ShapeCorrection, Surface
from simulator.specs.hardware import DTYPE_BYTES

MLA_LATENT, MLA_SCORE_WIDTH = 512 + 64, 2 * 512 + 64  # DeepSeek-V3/R1 kv_lora + rope; 2 kv_lora + rope


def _surface(surfaces: dict, name: str):
    s = surfaces.get(name)
    return s if s is None or isinstance(s, Surface) else Surface.from_dict(s)


def _gemm_s(sub: pd.DataFrame, surf: Surface, w: float, a: float, peak: float, bw: float) -> np.ndarray:
    out = np.full(len(sub), np.nan)
    m = sub.ax_m.to_numpy(float)
    for (n, k), pos in sub.groupby(["ax_n", "ax_k"]).indices.items():
        lattice = gemm_lattice_s(surf.sliced((None, float(n), float(k))), float(n), float(k), w, a, peak, bw)
        out[pos] = lattice_time_s(lattice, m[pos])
    return out


def _attention_s(sub: pd.DataFrame, surf: Surface, family: str, kv: np.ndarray, peak: float, bw: float) -> np.ndarray:
    out = np.full(len(sub), np.nan)
    B, L = sub.batch_size.to_numpy(float), sub.step.to_numpy(float)
    cols = ["num_heads", "num_key_value_heads", "head_dim"] if family == "attention_decode" else ["num_heads"]
    for key, pos in sub.groupby(cols + ["kv_cache_dtype"]).indices.items():
        hq = float(key[0])
        shape = {"q_heads": hq, "kv_elem_bytes": float(kv[pos[0]]), "a_bytes": 2.0, "sequences": B[pos],
                 "queries": np.ones(len(pos))}
        if family == "attention_decode":
            hkv, d = float(key[1]), float(key[2])
            shape |= {"kv_heads": hkv, "head_dim": d, "group": hq / hkv}
            flops = 4.0 * B[pos] * (L[pos] + 1) * hq * d
        else:
            shape |= {"latent": float(MLA_LATENT), "score_width": float(MLA_SCORE_WIDTH)}
            flops = 2.0 * B[pos] * (L[pos] + 1) * hq * MLA_SCORE_WIDTH
        if L[pos].min() < 1:
            continue
        log_b, log_l, log_t = attention_lattice_s(surf, shape, max(float(B[pos].max()), 2.0 ** MIN_BATCH_OCTAVES),
                                                  max(float(L[pos].max()), 2.0 ** MIN_KEY_OCTAVES), peak, bw)
        out[pos] = attention_time_s(log_lattice_interp(log_t, log_b, log_l, B[pos], L[pos]), shape, flops, peak, bw)
    return out


def _moe_s(sub: pd.DataFrame, surf: Surface, fix, w: float, a: float, peak: float, bw: float) -> np.ndarray:
    out = np.full(len(sub), np.nan)
    T = sub.num_tokens.to_numpy(float)
    cols = ["num_experts", "topk", "hidden_size", "inter_size", "moe_tp_size", "moe_ep_size"]
    for key, pos in sub.groupby(cols).indices.items():
        E, k, D, inter, tp, ep = (float(v) for v in key)
        shape = {"probabilities": np.full(int(E), k / E), "topk": k, "moe_ep": int(ep), "params_slice": 3 * D * inter / tp,
                 "w_bytes": w, "pair_bytes": (2 * D + 3 * inter / tp) * a, "n": inter / tp, "num_experts": E,
                 "hidden": D, "inter": inter, "moe_tp": tp}
        lattice = moe_lattice_s(surf, fix, shape, max(float(T[pos].max()), 2.0 ** MIN_TOKEN_OCTAVES), 1.0, peak, bw)
        # the row's own work (its collector loaded min(E, T k) experts), not a step of T independent tokens
        out[pos] = moe_table_time_s(lattice, T[pos])
    return out


def monotone_rows_s(rows: pd.DataFrame, surfaces: dict, corrections: dict | None, dtypes: dict, kv_bytes: dict,
                    pk) -> np.ndarray:
    """Seconds the planner prices each prepared row at (NaN where it has no envelope).

    ``dtypes``: table dtype -> (surface dtype, weight dtype, activation dtype) (import_rows.DTYPES);
    ``kv_bytes``: KV cache dtype -> bytes; ``pk``: the device's datasheet peaks (import_tables.DevicePeaks)."""
    out = np.full(len(rows), np.nan)
    for name, idx in rows.groupby("surface").indices.items():
        surf = _surface(surfaces, name)
        if surf is None:
            continue
        sub = rows.iloc[idx]
        family = name.split(".", 1)[0]
        if family in ("gemm", "moe"):
            _, weights, acts = dtypes[sub[f"{family}_dtype"].iloc[0]]
            w_bytes, a_bytes = DTYPE_BYTES[weights], DTYPE_BYTES[acts]
            # fp8 / FP4 tensor cores only with fp8 / FP4 activations; weight-only int8 / int4 / MXFP4 run bf16 math
            peak = pk.matmul(weights, acts)
            if family == "gemm":
                out[idx] = _gemm_s(sub, surf, w_bytes, a_bytes, peak, pk.bw)
            else:
                fix = (corrections or {}).get(name)
                fix = fix if fix is None or isinstance(fix, ShapeCorrection) else ShapeCorrection.from_dict(fix)
                out[idx] = _moe_s(sub, surf, fix, w_bytes, a_bytes, peak, pk.bw)
        elif family in ("attention_decode", "mla_decode"):
            kv = sub.kv_cache_dtype.map(kv_bytes).to_numpy(float)
            out[idx] = _attention_s(sub, surf, family, kv, pk.bf16, pk.bw)
        elif family == "attention_prefill":  # no envelope: the surface's time, capped (physics.measured)
            kv = sub.kv_cache_dtype.map(kv_bytes).to_numpy(float)
            hq, hkv, d = (sub[c].to_numpy(float) for c in ("num_heads", "num_key_value_heads", "head_dim"))
            flops, kv_read, q_io = attention_decode_terms(sub.batch_size.to_numpy(float), sub.isl.to_numpy(float),
                                                          0.0, hq, hkv, d, kv, DTYPE_BYTES["bf16"])
            eta = surf(**{a: sub[f"ax_{a}"].to_numpy(float) for a in surf.axes})
            out[idx] = surface_time_s(flops, kv_read + q_io, eta, pk.bf16, pk.bw)
    return out
