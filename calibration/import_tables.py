"""Turn aiconfigurator-core's measured kernel tables into format-2 calibration profiles.

    python -m calibration.import_tables [--gpu h100-sxm ...] [--engine trtllm|vllm|sglang]
                                        [--output-dir simulator/data/profiles]

Per (GPU, engine, version) it writes ``<hardware>.<engine>-<version>.profile.json`` with
efficiency surfaces (efficiency = roofline time / measured time) for GEMM, decode attention
(GQA and MLA), fused causal prefill attention (GQA) and routed MoE, plus all-reduce / NCCL collective tables, and reports held-out
error. The roofline is the planner's own: the FLOP and byte terms of simulator/physics/terms.py
(GEMM, decode attention, absorbed MLA, routed experts), the busiest-GPU expert load of
simulator/physics/experts.py (rows labelled with uniform routing p = k/E; the tables' "balanced" rows
loaded min(E, T k) experts, which the planner accounts for when it reads the surface back:
simulator/physics/monotone.moe_lattice_s), and the
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
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from calibration import gpu_tables as gt
# the table preparation, fitting and report modules; their names are re-exported here (tests, calibration.fit)
from calibration.import_fit import (  # noqa: F401
    AXES, AXIS_NOTES, MAX_NODES, SMOOTH, axis_matrix, collective_entries, error_stats, fit_alpha_beta,
    nccl_collectives, predict_rows, shape_corrections)
from calibration.import_report import (  # noqa: F401
    RAW_COLS, dump_profile, heldout_markdown, profile_filename, sample_heldout)
from calibration.import_rows import (  # noqa: F401
    DTYPES, HELDOUT_BUCKETS, HOST_BOUND_FLOOR_RATIO, KV_BYTES, MLA_KV_LORA, MLA_ROPE, DevicePeaks, _dedupe,
    device_peaks, dtype_terms, host_bound_dtypes, measurable_dtypes, prepare_all_reduce, prepare_attention_decode,
    prepare_attention_prefill, prepare_gemm, prepare_mla_decode, scale_overhead_s,
    shape_bucket)
from calibration.planner_rows import monotone_rows_s
from calibration.surface_fit import fit_surface
from simulator.cli.common import (OneLineParser, check_output_dir, command, write_atomically,
                                  write_files_atomically)
from simulator.physics.experts import busiest_group_load, experts_touched
from simulator.physics.terms import expert_params_slice, moe_expert_terms, roofline_s
from simulator.specs.hardware import Hardware, load_hardware
from simulator.specs.surfaces import collective_time_s
from simulator.specs.wire import collective_factor

REPO = Path(__file__).resolve().parents[1]
DEFAULT_OUT = REPO / "simulator" / "data" / "profiles"  # the simulator picks them up by device
FAMILIES = ("gemm", "attention_decode", "attention_prefill", "mla_decode", "moe", "all_reduce")


# The busiest expert-parallel GPU's token-expert pairs. The planner prices E[max] over the ep groups
# (physics/experts.busiest_group_load); the shipped profiles were fitted with its asymptotic form
# mean + sqrt(2 ln ep) std, up to 4.3% more roofline time on ep > 1 rows. Set True when re-importing
# the profiles (held-out MoE predictions of the shipped surfaces then move by up to 2.4%).
BUSIEST_LOAD_FROM_PLANNER = False


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


MOE_KEYS = ["moe_dtype", "num_tokens", "hidden_size", "inter_size", "topk", "num_experts",
            "moe_tp_size", "moe_ep_size"]


def moe_distribution(df: pd.DataFrame) -> str:
    """'balanced' routing when the table has it (the planner's uniform routing on average; it loads
    min(E, T k) experts, physics.experts.table_experts_touched), else the table's mildest power law."""
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



PREPARE = {"gemm": prepare_gemm, "attention_decode": prepare_attention_decode,
           "attention_prefill": prepare_attention_prefill, "mla_decode": prepare_mla_decode, "moe": prepare_moe, "all_reduce": prepare_all_reduce}
# family -> (table family folder, table name)
TABLE_OF = {"gemm": ("gemm", "gemm_perf"), "attention_decode": ("attention", "generation_attention_perf"),
            "attention_prefill": ("attention", "context_attention_perf"),
            "mla_decode": ("mla", "generation_mla_perf"), "moe": ("moe", "moe_perf"),
            "all_reduce": ("comm", "custom_allreduce_perf")}


# ---------------------------------------------------------------- one profile
@dataclass
class Imported:
    profile: dict
    heldout_rows: pd.DataFrame  # prepared held-out rows with predictions
    monotone: dict = field(default_factory=dict)  # held-out error per family as the planner prices a step


@dataclass(frozen=True)
class _Combo:
    """One (system, engine, version) to import: where its tables are and the catalog device they price."""

    src: gt.TableSource
    tables: object  # gt.list_tables(src)
    system: str
    engine: str
    version: str
    hw: str  # catalog name
    device_hw: Hardware


@dataclass
class _Gathered:
    """What build_profile collects family by family."""

    surfaces: dict = field(default_factory=dict)
    corrections: dict = field(default_factory=dict)
    collectives: dict = field(default_factory=dict)
    heldout: dict = field(default_factory=dict)
    monotone: dict = field(default_factory=dict)
    used: dict = field(default_factory=dict)  # family -> table path
    statuses: dict = field(default_factory=dict)
    held_parts: list = field(default_factory=list)
    device: str | None = None
    left_out: dict = field(default_factory=dict)  # "gemm.<dtype>" -> why its rows were not fitted
    adjusted: dict = field(default_factory=dict)  # "gemm.<dtype>" -> how its rows were changed before the fit


def build_profile(src: gt.TableSource, system: str, engine: str, version: str,
                  families=FAMILIES, log=print) -> Imported | None:
    """Fit one (system, engine, version) profile on fit buckets and score it on held-out rows."""
    hw = gt.SYSTEM_TO_CATALOG[system]
    device_hw = load_hardware(hw)
    combo = _Combo(src, gt.list_tables(src), system, engine, version, hw, device_hw)
    acc = _Gathered()
    for fam in families:
        _import_family(combo, fam, acc, log)
    if not acc.surfaces and not acc.collectives:
        return None
    nccl_rel = gt.newest_table(combo.tables, system, "comm", "nccl", "nccl_perf")
    if nccl_rel is not None:
        acc.collectives.update(nccl_collectives(gt.read_table(src, nccl_rel)))
        acc.used["nccl"] = f"{gt.DATA_PREFIX}{nccl_rel}"
        acc.statuses["nccl"] = gt.table_status(gt.read_meta(src, nccl_rel), "nccl_perf")
    held = pd.concat(acc.held_parts, ignore_index=True) if acc.held_parts else pd.DataFrame()
    return Imported(_profile_json(combo, acc), held, acc.monotone)


def _import_family(combo: _Combo, fam: str, acc: _Gathered, log) -> None:
    """Fit one family's table (if the combo has one) on its fit buckets and score its held-out rows."""
    folder, tname = TABLE_OF[fam]
    rel = gt.resolve_table(combo.tables, combo.system, folder, combo.engine, combo.version, tname)
    if rel is None:
        return
    raw = gt.read_table(combo.src, rel)
    if fam == "gemm":
        small = raw[raw.m <= 16].groupby("gemm_dtype").latency.min()
        for dtype in host_bound_dtypes(raw):
            acc.left_out[f"gemm.{DTYPES[dtype][0]}"] = (
                f"host-bound timing: fastest GEMM with m <= 16 {small[dtype] * 1e3:.1f} us, the table's bf16 one"
                f" {small['bfloat16'] * 1e3:.1f} us (> {HOST_BOUND_FLOOR_RATIO:g} x); priced with the next surface")
    if fam == "gemm":
        rows = prepare_gemm(raw, combo.device_hw, _static_fp8_scale(combo, acc))
    else:
        rows = PREPARE[fam](raw, combo.device_hw)
    rows = rows[np.isfinite(rows.t0) & (rows.meas_s > 0)]
    if rows.empty:
        return
    acc.device = acc.device or str(raw.device.iloc[0])
    acc.used[fam] = f"{gt.DATA_PREFIX}{rel}"
    acc.statuses[fam] = gt.table_status(gt.read_meta(combo.src, rel), tname)
    fit, held = rows[rows.bucket != 0], rows[rows.bucket == 0].copy()
    if fam == "all_reduce":
        held = _fit_all_reduce(fit, held, acc)
    else:
        held = _fit_surfaces(fam, fit, held, acc, combo.device_hw)
    held = _score_heldout(fam, held, acc)
    held["system"], held["hardware"], held["engine"], held["version"] = combo.system, combo.hw, combo.engine, combo.version
    acc.held_parts.append(held)
    heldout = acc.heldout[fam]
    log(f"  {combo.hw} {combo.engine}-{combo.version} {fam:17s} n_fit={len(fit):6d} n_held={len(held):5d} "
        f"roofline MAPE {heldout['roofline']['mape_pct']}%  fitted MAPE {heldout['fitted']['mape_pct']}%"
        f"  monotone MAPE {acc.monotone.get(fam, {}).get('mape_pct', '-')}%")


# Engines whose gemm tables time fp8 GEMMs on the dynamic per-tensor path while their fp8 checkpoints carry static
# activation scales: TensorRT-LLM's collector loads fp8 weights without an input_scale, so FP8QDQLinearMethod
# computes the scale on every call (aiconfigurator collector/trtllm/collect_gemm.py, "includes the compute-scale
# overhead"); ModelOpt / NVIDIA FP8 checkpoints ship static input scales and take the static path
# (docs/notes/trtllm-small-batch.md). vLLM's and SGLang's collectors were not read: their rows stay as measured.
STATIC_FP8_ENGINES = ("trtllm",)


def _static_fp8_scale(combo: _Combo, acc: _Gathered):
    """The dynamic-scale time to take off the combo's fp8 GEMM rows (:func:`scale_overhead_s`), or None."""
    if combo.engine not in STATIC_FP8_ENGINES:
        return None
    rel = gt.resolve_table(combo.tables, combo.system, "quantize", combo.engine, combo.version, "computescale_perf")
    if rel is None:
        return None
    acc.used["gemm_fp8_scale"] = f"{gt.DATA_PREFIX}{rel}"
    acc.adjusted["gemm.fp8"] = (f"each row less the dynamic activation scale its collector timed ({rel}, floored at"
                                " the roofline): static-scale checkpoints skip it (docs/notes/trtllm-small-batch.md)")
    return scale_overhead_s(gt.read_table(combo.src, rel))


def _fit_all_reduce(fit: pd.DataFrame, held: pd.DataFrame, acc: _Gathered) -> pd.DataFrame:
    """The alpha-beta all-reduce table of the fit rows; the held-out rows of GPU counts it covers, predicted."""
    ent = collective_entries(fit, lambda g: collective_factor("all_reduce", g))
    acc.collectives["all_reduce"] = ent
    held = held[held.num_gpus.astype(str).isin(ent)]
    held["pred_s"] = [float(collective_time_s(ent, int(g), b)) for g, b in zip(held.num_gpus, held["bytes"])]
    held["monotone_s"] = [float(collective_time_s(ent, int(g), b, monotone=True))
                          for g, b in zip(held.num_gpus, held["bytes"])]
    return held


def _fit_surfaces(fam: str, fit: pd.DataFrame, held: pd.DataFrame, acc: _Gathered, device_hw: Hardware) -> pd.DataFrame:
    """The family's efficiency surfaces (and shape corrections) of the fit rows; the held-out rows predicted."""
    for name, sub in fit.groupby("surface"):
        if len(sub) < 8:
            continue
        X = axis_matrix(sub, AXES[fam])
        acc.surfaces[name] = fit_surface(X, (sub.t0 / sub.meas_s).to_numpy(), AXES[fam], MAX_NODES[fam],
                                         smooth=SMOOTH[fam])
    if fam in CORRECTED_FAMILIES:
        fam_surfaces = {k: v for k, v in acc.surfaces.items() if k.startswith(fam + ".")}
        acc.corrections.update(shape_corrections(fit, fam_surfaces, *CORRECTED_FAMILIES[fam]))
        held["surface_only_s"] = predict_rows(held, acc.surfaces)
    held["pred_s"] = predict_rows(held, acc.surfaces, acc.corrections)
    held["monotone_s"] = monotone_rows_s(held, acc.surfaces, acc.corrections, DTYPES, KV_BYTES, device_peaks(device_hw))
    return held


def _score_heldout(fam: str, held: pd.DataFrame, acc: _Gathered) -> pd.DataFrame:
    """The family's held-out error (roofline, fitted, monotone, surface only); the rows that have a prediction."""
    held = held[np.isfinite(held.pred_s)]
    acc.heldout[fam] = {"n": int(len(held)), "roofline": error_stats(held.t0, held.meas_s),
                        "fitted": error_stats(held.pred_s, held.meas_s)}
    mono = held[np.isfinite(held.monotone_s)]
    if len(mono):  # as the planner prices a step: the monotone fit (simulator/physics/monotone.py)
        acc.monotone[fam] = error_stats(mono.monotone_s, mono.meas_s) | {"n": int(len(mono))}
    if "surface_only_s" in held:  # what a shape the table never measured can expect
        acc.heldout[fam]["surface_only"] = error_stats(held.surface_only_s, held.meas_s)
    return held


def _profile_json(combo: _Combo, acc: _Gathered) -> dict:
    """The format-2 profile of one combo (simulator/specs/profile.py)."""
    return {
        "format": "dsd-planner-profile", "format_version": 2,
        "hardware": combo.hw, "device": {"name": acc.device, "kind": "cuda"},
        "basis": "measured kernel tables",
        "provenance": {
            "source": f"aiconfigurator-core {gt.PACKAGE_VERSION} (Apache-2.0) measured kernel tables",
            "package_version": gt.PACKAGE_VERSION, "engine": combo.engine, "engine_version": combo.version,
            "tables": acc.used, "date": _dt.date.today().isoformat(),
            "status": "; ".join(f"{k}: {v}" for k, v in acc.statuses.items()),
            "system": combo.system,
            **({"left_out": dict(sorted(acc.left_out.items()))} if acc.left_out else {}),
            **({"adjusted": dict(sorted(acc.adjusted.items()))} if acc.adjusted else {}),
            "axes": {f: AXIS_NOTES[f] for f in AXES if any(k.startswith(f + ".") for k in acc.surfaces)},
            "notes": ("efficiency = roofline time / measured time, roofline from the catalog datasheet "
                      "peaks of 'hardware'; surfaces fitted on 4/5 of the shapes (sha1(shape) mod 5 != 0); "
                      "decode attention: full attention (window 0), q = 1, L = step; MoE: gated experts, "
                      "routing distribution " + "'balanced' where measured; all-reduce bytes = 2 x "
                      "message_size (bf16 elements); NCCL all_gather/reduce_scatter/all_to_all bytes = whole "
                      "buffer; the tables time CUDA-graph replays, so an op priced from a surface carries its "
                      "tiny-kernel floor there and pays no launch; launch_overhead_s (the hardware file's per-kernel "
                      "graph replay) is paid by the ops priced off the tables (norms, activations, embedding, "
                      "sampling)"),
        },
        "surfaces": dict(sorted(acc.surfaces.items())),
        "collectives": acc.collectives,
        "shape_corrections": dict(sorted(acc.corrections.items())),
        # the ops priced off the tables pay the catalog's per-kernel graph replay, as on every other basis
        "launch_overhead_s": load_hardware(combo.hw).launch_overhead_s,
        "compute_efficiency": {}, "memory_efficiency": {},
        "heldout_error": acc.heldout,
    }


# ---------------------------------------------------------------- CLI
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
