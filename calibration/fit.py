"""Fit a calibration profile from raw microbenchmark samples.

For a sample with FLOPs F, bytes M and n launches, measured time t, the simulator predicts
    t_hat = max(F / (P * eta_c(tokens)), M / (BW * eta_m(bytes))) + n * tau
with P, BW the catalog peaks of the profile's ``hardware``. The fit (per family):

1. tau: the per-call time of a tiny op (CUDA-graph replay on GPU, eager dispatch on CPU).
2. t' = t - n * tau; needed efficiencies eta_m = M / (BW t'), eta_c = F / (P t').
3. eta_m(bytes): the upper concave envelope (in log bytes) of the needed eta_m. Points on it are
   memory-bound and predicted exactly by the memory term; points below it are slower than their
   memory traffic allows, so the compute term must explain them.
4. eta_c(tokens) per curve key: at each token count the value that minimises the summed |log error|
   of the samples there given the memory curve (exact when one sample per knot, as for GEMMs).

Curves: compute per GEMM op of the calibrated model ("attn_qkv", ..., "lm_head"), pooled "gemm",
"attention" (over B*(K+1)), "moe" (over tokens per active expert); memory "default" (streaming read),
"elementwise" (copy), "gemm", "lm_head", "attention", "moe". Held-out check: leave one sample out of
its family, refit, predict it; reported against the uncalibrated roofline (eta = 1, catalog tau).

``python -m calibration.fit RAW --output PROFILE.json [--hardware NAME]``
"""
from __future__ import annotations

import datetime as dt
import json
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd

from calibration.rawio import CalibrationError, read_meta, read_raw
from simulator.specs.hardware import Hardware, load_hardware
from simulator.specs.profile import PROFILE_FORMAT, Profile, profile_from_dict
from simulator.specs.wire import collective_factor

REPO = Path(__file__).resolve().parent.parent
ETA_MIN, ETA_MAX = 1e-6, 1.5


# --- sample table ---------------------------------------------------------------------------

def sample_table(rows: list[dict]) -> pd.DataFrame:
    """One row per predicted quantity: op, family (compute lookup), mem_family (memory lookup),
    group (held-out family), tokens, flops, bytes, n_kernels, t (median s), lo/hi (quartiles)."""
    df = pd.DataFrame(rows)
    if df.empty:
        raise CalibrationError("no complete samples in the raw file")
    out = []
    for _, r in df[df.bench.isin(["gemm", "attention", "moe"])].iterrows():
        if r.bench == "moe":
            op = fam = mem = f"moe_{r.variant}"
            group = op
        else:
            op, fam, mem, group = r.op, r.family, r.family, r.family
        out.append(dict(op=op, family=fam, mem_family=mem, group=group, tokens=r.tokens, flops=r.flops,
                        bytes=r.bytes, n_kernels=r.n_kernels, t=r.median_s, lo=r.p25_s, hi=r.p75_s))
    bw = df[df.bench == "bandwidth"]
    for (variant, nbytes), g in bw.groupby(["variant", "bytes"]):
        fam = "default" if variant == "read" else "elementwise"
        # rounds were interleaved in time: median over rounds, their spread as the band
        out.append(dict(op=f"mem_{variant}", family=fam, mem_family=fam,
                        group="bandwidth" if variant == "read" else "bandwidth_copy", tokens=1, flops=0.0,
                        bytes=nbytes, n_kernels=1, t=float(g.median_s.median()),
                        lo=float(min(g.median_s.quantile(0.25), g.p25_s.median())),
                        hi=float(max(g.median_s.quantile(0.75), g.p75_s.median()))))
    return pd.DataFrame(out)


def launch_overhead(rows: list[dict], kind: str) -> tuple[float, dict]:
    """Per-kernel launch overhead: CUDA-graph replay on GPU (how decode runs), eager on CPU."""
    got = {r["variant"]: r["median_s"] for r in rows if r["bench"] == "launch"}
    if not got:
        raise CalibrationError("raw samples hold no launch-overhead point (bench 'launch')")
    use = "graph" if kind == "cuda" and "graph" in got else "eager"
    return float(got[use]), {f"{k}_s": v for k, v in got.items()} | {"used": use}


# --- fitting --------------------------------------------------------------------------------

def _upper_hull(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Vertices of the upper concave envelope of points (x, y), x ascending (duplicates: max y)."""
    order = np.lexsort((-y, x))
    pts = []
    last = None
    for i in order:
        if last is not None and x[i] == last:
            continue
        last = x[i]
        p = (x[i], y[i])
        while len(pts) >= 2:
            (x1, y1), (x2, y2) = pts[-2], pts[-1]
            if (x2 - x1) * (p[1] - y1) - (y2 - y1) * (p[0] - x1) >= 0:  # pts[-1] on or under the chord
                pts.pop()
            else:
                break
        pts.append(p)
    hx, hy = zip(*pts)
    return np.array(hx), np.array(hy)


def _interp(knots: tuple[np.ndarray, np.ndarray], x) -> np.ndarray:
    lx, eta = knots
    return np.interp(np.log(np.asarray(x, float)), lx, eta)


def fit_family(s: pd.DataFrame, P: float, BW: float, tau: float, pooled_key: str | None = None) -> tuple[dict, dict]:
    """Compute curves {key: (log tokens, eta)} and the memory curve {mem_family: (log bytes, eta)} of
    one family (all rows share ``mem_family``). ``pooled_key`` adds a curve over all ops."""
    tp = np.maximum(s.t.to_numpy() - s.n_kernels.to_numpy() * tau, 0.05 * s.t.to_numpy())
    nm = np.clip(s.bytes.to_numpy() / (BW * tp), ETA_MIN, ETA_MAX)
    if s.flops.max() <= 0:  # pure memory traffic (bandwidth benchmark): interpolate every size
        by = pd.Series(nm).groupby(s.bytes.to_numpy(float)).median()
        return {}, {s.mem_family.iloc[0]: (np.log(by.index.to_numpy(float)), by.to_numpy())}
    hx, hy = _upper_hull(np.log(s.bytes.to_numpy(float)), nm)
    mem_knots = (hx, hy)
    mem_t = s.bytes.to_numpy() / (BW * _interp(mem_knots, s.bytes))
    memory = {s.mem_family.iloc[0]: mem_knots}
    compute = {}
    ops, tokens, flops = s.op.to_numpy(), s.tokens.to_numpy(), s.flops.to_numpy()  # columns read once
    keys = [(k, ops == k) for k in s.op.unique()]
    if pooled_key:
        keys.append((pooled_key, np.ones(len(s), bool)))
    for key, sel in keys:
        xs, etas = [], []
        for x in np.unique(tokens[sel]):
            at = sel & (tokens == x)
            F, m, t = flops[at], mem_t[at], tp[at]
            cands = np.clip(F / (P * t), ETA_MIN, ETA_MAX)
            errs = [np.abs(np.log(np.maximum(F / (P * c), m) / t)).sum() for c in cands]
            xs.append(np.log(float(x)))
            etas.append(float(cands[int(np.argmin(errs))]))
        compute[key] = (np.array(xs), np.array(etas))
    return compute, memory


FAMILY_GROUPS = {  # held-out group -> (fit together, pooled compute key)
    "gemm": "gemm", "lm_head": None, "attention": None, "moe_loop": None, "moe_grouped": None,
    "bandwidth": None, "bandwidth_copy": None,
}


def fit_curves(samples: pd.DataFrame, P: float, BW: float, tau: float) -> tuple[dict, dict]:
    compute, memory = {}, {}
    for group, g in samples.groupby("group"):
        c, m = fit_family(g, P, BW, tau, pooled_key=FAMILY_GROUPS.get(group))
        compute.update(c)
        memory.update(m)
    return compute, memory


def _curves_json(curves: dict, xname: str) -> dict:
    return {k: {xname: [float(v) for v in np.round(np.exp(lx), 6)],
                "efficiency": [float(f"{e:.5g}") for e in eta]} for k, (lx, eta) in sorted(curves.items())}


def _profile_dict(compute, memory, tau, hardware: str, extra: dict | None = None) -> dict:
    d = {"format": PROFILE_FORMAT, "format_version": 1, "hardware": hardware,
         "compute_efficiency": _curves_json(compute, "tokens"), "memory_efficiency": _curves_json(memory, "bytes"),
         "launch_overhead_s": float(f"{tau:.4g}")}
    return d | (extra or {})


# --- prediction (the simulator's formula) ---------------------------------------------------

def predict(profile: Profile, hw: Hardware, s: pd.DataFrame, dtype: str) -> np.ndarray:
    """t = max(F / (P eta_c), M / (BW eta_m)) + n_kernels * tau, with the profile's lookups."""
    P, BW = hw.peak_flops_per_s(dtype, dtype), hw.hbm_bandwidth_bytes_per_s
    out = np.empty(len(s))
    for i, r in enumerate(s.itertuples()):
        ec = profile.compute_efficiency(r.op, r.family, r.tokens)
        em = profile.memory_efficiency(r.mem_family, r.bytes)
        out[i] = max(r.flops / (P * ec), r.bytes / (BW * em)) + r.n_kernels * profile.launch_overhead_s
    return out


def roofline(hw: Hardware, s: pd.DataFrame, dtype: str) -> np.ndarray:
    P, BW = hw.peak_flops_per_s(dtype, dtype), hw.hbm_bandwidth_bytes_per_s
    return np.maximum(s.flops / P, s.bytes / BW).to_numpy() + s.n_kernels.to_numpy() * hw.launch_overhead_s


def _err(pred, meas) -> dict:
    e = np.abs(np.asarray(pred) / np.asarray(meas) - 1) * 100
    return {"median_pct": round(float(np.median(e)), 2), "max_pct": round(float(np.max(e)), 2)}


def heldout(samples: pd.DataFrame, hw: Hardware, dtype: str, tau: float) -> dict:
    """Leave-one-out per family: refit the family without one sample, predict that sample."""
    P, BW = hw.peak_flops_per_s(dtype, dtype), hw.hbm_bandwidth_bytes_per_s
    report = {}
    for group, g in samples.groupby("group"):
        g = g.reset_index(drop=True)
        if len(g) < 3:
            continue
        preds = np.empty(len(g))
        for i in range(len(g)):
            rest = g.drop(index=i)
            c, m = fit_family(rest, P, BW, tau, pooled_key=FAMILY_GROUPS.get(group))
            prof = profile_from_dict(_profile_dict(c, m, tau, hw.name), f"<heldout {group}>")
            preds[i] = predict(prof, hw, g.iloc[[i]], dtype)[0]
        report[group] = {"n": len(g), "roofline": _err(roofline(hw, g, dtype), g.t),
                         "calibrated": _err(preds, g.t)}
    return report


def achieved(samples: pd.DataFrame, hw: Hardware, dtype: str) -> dict:
    """Best measured FLOP/s and bytes/s per family (launch overhead included), and % of datasheet."""
    P, BW = hw.peak_flops_per_s(dtype, dtype), hw.hbm_bandwidth_bytes_per_s
    out = {}
    for group, g in samples.groupby("group"):
        f, b = (g.flops / g.t).max(), (g.bytes / g.t).max()
        out[group] = {"max_flops_per_s": float(f"{f:.4g}"), "pct_peak_flops": round(100 * f / P, 2),
                      "max_bytes_per_s": float(f"{b:.4g}"), "pct_peak_bandwidth": round(100 * b / BW, 2)}
    return out


# --- driver ---------------------------------------------------------------------------------

def code_version() -> str:
    try:
        r = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True,
                           timeout=10)
        return r.stdout.strip() or "uncommitted"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def _relpath(p: Path) -> str:
    try:
        return str(p.resolve().relative_to(REPO))
    except ValueError:
        return str(p)


def check_device(meta: dict, hw: Hardware) -> None:
    """Refuse to divide samples of one kind of device by the peaks of another."""
    kind = meta.get("device_kind")
    if kind and (kind == "cpu") != (hw.kind == "cpu"):
        raise CalibrationError(f"raw samples were measured on a {kind} device ({meta.get('device_name')}),"
                               f" but hardware '{hw.name}' is a {hw.kind}; pass the matching --hardware")
    entry = meta.get("hardware")
    if kind == "cuda" and entry and entry != hw.name:
        raise CalibrationError(f"raw samples were measured on {meta.get('device_name')} (catalog '{entry}'),"
                               f" not on '{hw.name}'")


def fit_raw(raw: str | Path, hardware: str | None = None, mode: str | None = None) -> dict:
    """Fit a raw sample file; returns the profile dict (with held-out errors and provenance)."""
    raw = Path(raw)
    rows = read_raw(raw)
    meta = read_meta(raw)
    hw_name = hardware or meta.get("hardware")
    if not hw_name:
        raise CalibrationError(f"{raw}: no hardware recorded with the samples; pass --hardware NAME")
    hw = load_hardware(hw_name)
    check_device(meta, hw)
    dtypes = {r["dtype"] for r in rows}
    if len(dtypes) != 1:
        raise CalibrationError(f"{raw}: expected samples of one dtype, found {sorted(dtypes) or 'none'}")
    dtype = dtypes.pop()
    tau, launch = launch_overhead(rows, meta.get("device_kind", "cpu"))
    samples = sample_table(rows)
    P, BW = hw.peak_flops_per_s(dtype, dtype), hw.hbm_bandwidth_bytes_per_s
    compute, memory = fit_curves(samples, P, BW, tau)
    # the MoE curve the cost model reads ("moe"): grouped GEMM on GPU (fused-MoE kernels), the
    # expert loop on CPU (what the torch reference engine runs)
    moe_pick = "moe_grouped" if meta.get("device_kind") == "cuda" else "moe_loop"
    if moe_pick in compute:
        compute["moe"], memory["moe"] = compute[moe_pick], memory[moe_pick]
    prof = profile_from_dict(_profile_dict(compute, memory, tau, hw.name), str(raw))
    fit_err = {}
    pred = predict(prof, hw, samples, dtype)
    for group, idx in samples.groupby("group").groups.items():
        fit_err[group] = _err(pred[np.asarray(samples.index.get_indexer(idx))], samples.t.loc[idx])
    device = meta.get("device", {})
    extra = {
        "device": {"name": meta.get("device_name", device.get("name", "unknown")),
                   "kind": meta.get("device_kind", "cpu")} | {k: device[k] for k in
                   ("count", "memory_bytes", "compute_units", "clock_mhz", "driver", "cuda", "cache_bytes",
                    "cpu_capability") if k in device},
        "provenance": {
            "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "measured": meta.get("created", ""), "torch": meta.get("torch", ""), "driver": device.get("driver", ""),
            "cuda": device.get("cuda", ""), "code_version": code_version(), "raw_samples": _relpath(raw),
            "dtype": dtype, "mode": mode or meta.get("mode", ""), "gemm_model": meta.get("model", ""),
            "moe_model": meta.get("moe_model", ""), "moe_curve": moe_pick,
            "launch_overhead": launch, "peak_flops_per_s": P, "peak_bandwidth_bytes_per_s": BW,
            "cold_weights": meta.get("cold_weights", ""),
            # 1-min load average while measuring: above the core count, other processes were
            # running and the timings are inflated (fit from a quiet machine)
            "load_average_median": round(float(np.median([r["load"] for r in rows])), 2),
            "gemm_shapes": meta.get("gemm_shapes", {}),
            "note": "efficiencies are fractions of the catalog peaks of 'hardware', launch overhead taken out",
        },
        "achieved": achieved(samples, hw, dtype),
        "fit_error": fit_err,
        "heldout_error": heldout(samples, hw, dtype, tau),
    }
    collectives = collectives_from_rows(rows)
    if collectives:
        extra["collectives"] = collectives
    return _profile_dict(compute, memory, tau, hw.name, extra)


def collectives_from_rows(rows: list[dict]) -> dict:
    """Measured all-reduce (torch.distributed over NCCL, ``calibration.collective``) as a latency table
    per GPU count, with alpha and bus bandwidth fitted on their own terms (never scaled by compute
    efficiencies): t = alpha + 2 (g-1)/g S / busBW."""
    from calibration.import_tables import collective_entries

    ar = [r for r in rows if r["bench"] == "allreduce" and r["median_s"] > 0]
    if not ar:
        return {}
    df = pd.DataFrame({"num_gpus": [int(r["experts"]) for r in ar], "bytes": [float(r["bytes"]) for r in ar],
                       "meas_s": [float(r["median_s"]) for r in ar]})
    entries = collective_entries(df, lambda g: collective_factor("all_reduce", g))
    return {"all_reduce_nccl": entries} if entries else {}


def write_profile(profile: dict, path: str | Path, flag: str = "--output") -> Path:
    """Write a profile atomically (an old file stays intact on failure, its mode kept); it must load."""
    from simulator.cli.common import write_atomically

    path = Path(path)
    text = json.dumps(profile, indent=1) + "\n"
    profile_from_dict(json.loads(text), str(path))  # what we write must load
    if not path.parent.exists():
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise CalibrationError(f"{flag} {path}: cannot create {path.parent} ({err.strerror or err})") from None
    write_atomically(path, text, flag)
    return path


def format_heldout(h: dict) -> str:
    lines = [f"{'family':16s} {'n':>4s}  {'roofline med/max %':>20s}  {'calibrated med/max %':>22s}"]
    for fam, e in h.items():
        r, c = e["roofline"], e["calibrated"]
        lines.append(f"{fam:16s} {e['n']:4d}  {r['median_pct']:9.1f} / {r['max_pct']:8.1f}"
                     f"  {c['median_pct']:10.1f} / {c['max_pct']:9.1f}")
    return "\n".join(lines)


def main(argv=None) -> int:
    from simulator.cli.common import OneLineParser, check_output_file, check_output_spares_inputs, run_cli

    ap = OneLineParser(prog="python -m calibration.fit", description=__doc__.splitlines()[0])
    ap.add_argument("raw", help="raw sample CSV written by calibration.run / calibration.microbench")
    ap.add_argument("--output", "-o", required=True, help="profile JSON to write")
    ap.add_argument("--hardware", help="catalog entry whose peaks the efficiencies divide (default: from the raw file)")
    args = ap.parse_args(argv)

    def body() -> int:
        if Path(args.output).parent.exists():
            check_output_file(args.output)
            check_output_spares_inputs(args, "--output", args.output)  # the samples took a GPU session
        prof = fit_raw(args.raw, args.hardware)
        _report(prof, write_profile(prof, args.output))
        return 0
    return run_cli(body)


def _report(prof: dict, path: Path) -> None:
    print(f"wrote {path}")
    print("held-out error (leave-one-out), |predicted/measured - 1|:")
    print(format_heldout(prof["heldout_error"]))


if __name__ == "__main__":
    raise SystemExit(main())
