"""Run the microbenchmarks on this machine and fit a profile.

    python -m calibration.run --quick            # ~1 min on a 2-core CPU
    python -m calibration.run --full             # minutes
    python -m calibration.run --mode medium --model smollm2-135m --extra-m 3,5,9 --output-dir calibration/data

Writes <output-dir>/<name>.raw.csv (+ .meta.json) and <output-dir>/<name>.profile.json, where name
defaults to this device: the CPU's name and cores (``amd-epyc-2c``), so a run on another machine never
collides with the shipped CPU profile's raw file, or a GPU's hardware catalog entry (``h100-sxm``). Rerunning
with the same output resumes the raw file.
"""
from __future__ import annotations

import datetime as dt
import re
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from calibration.device import catalog_name, discover
from calibration.fit import fit_raw, format_heldout, write_profile
from calibration.microbench import MODES, build_plan, gemm_shapes, run_plan
from calibration.rawio import CalibrationError
from simulator.cli.common import OneLineParser, run_cli
from simulator.specs.hardware import load_hardware
from simulator.specs.models import load_model

DEFAULT_DIR = Path(__file__).resolve().parent / "data"


def parse_ints(text: str) -> list[int]:
    try:
        vals = [int(x) for x in text.replace(" ", "").split(",") if x]
    except ValueError:
        raise CalibrationError(f"--extra-m: expected comma-separated positive integers, got {text!r}") from None
    if any(v < 1 for v in vals):
        raise CalibrationError(f"--extra-m: values must be >= 1, got {text!r}")
    return vals


def device_stem(info) -> str:
    """A file stem naming this device: lower-case name, non-alphanumerics as '-', CPUs with their cores."""
    slug = re.sub(r"[^a-z0-9]+", "-", re.sub(r"\((r|tm)\)", "", info.name.lower())).strip("-") or info.kind
    if info.kind == "cpu":
        slug += f"-{max(int(info.compute_units or 1), 1)}c"
    return slug


@dataclass(frozen=True)
class CalibrationRun:
    """What to measure: the microbenchmark mode, the models whose shapes are measured (and extra GEMM M
    values), where the files go and their stem, the catalog hardware, device, dtype, CPU threads, and
    at most how many new points (None: all)."""

    mode: str = "quick"
    model: str = "smollm2-135m"
    moe_model: str | None = "qwen3-30b-a3b"
    extra_m: Sequence[int] = ()
    output_dir: str | Path = DEFAULT_DIR
    name: str | None = None
    hardware: str | None = None
    device: str = "auto"
    dtype: str | None = None
    threads: int | None = None
    stop_after: int | None = None
    gpu_timing: str = "graph"  # graph: rotating cold copies replayed in a CUDA graph; flush: L2 flush per call


def _cold_weights(kind: str, gpu_timing: str) -> str:
    if kind != "cuda":
        return "rotating weight copies over >= 2x L3"
    if gpu_timing == "flush":
        return "L2 flush before each call"
    return "rotating weight copies over >= 2x L2, replayed back to back in one CUDA graph"


def calibrate(run: CalibrationRun = CalibrationRun(), progress: bool = True, fit: bool = True) -> dict:
    """Measure (resuming) and fit; returns paths and the fitted profile dict (None if not fitted)."""
    spec, moe_spec = _checked_models(run)
    info, hw, dtype, threads = _device(run)
    out = Path(run.output_dir)
    if out.exists() and not out.is_dir():
        raise CalibrationError(f"--output-dir {out}: exists and is not a directory")
    # GPUs: the catalog entry is the device; CPUs all divide by one catalog entry's peaks, so the file
    # is named after this CPU (another machine never resumes, or collides with, the shipped CPU's samples)
    stem = run.name or (device_stem(info) if info.kind == "cpu" else hw.name)
    raw = out / f"{stem}.raw.csv"
    meta = {"device_name": info.name, "device_kind": info.kind, "dtype": dtype, "hardware": hw.name,
            "torch": info.torch, "created": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "mode": run.mode, "threads": threads if info.kind == "cpu" else None, "model": spec.name,
            "moe_model": moe_spec.name if moe_spec else "",
            "cold_weights": _cold_weights(info.kind, run.gpu_timing),
            "gemm_shapes": {k: list(v) for k, v in gemm_shapes(spec).items()}, "device": info.to_dict()}
    m = MODES[run.mode]
    plan = build_plan(m, spec, moe_spec, dtype, run.extra_m, device_count=info.count if info.kind == "cuda" else 1,
                      peak_flops=hw.peak_flops_per_s(dtype, dtype))
    t0 = time.perf_counter()
    n = run_plan(plan, raw, meta, m, info.kind, info.cache_bytes, progress=progress, stop_after=run.stop_after,
                 gpu_timing=run.gpu_timing)
    result = {"raw": raw, "measured_points": n, "planned_points": len(plan), "bench_s": time.perf_counter() - t0,
              "profile": None, "profile_path": None}
    if fit:
        prof = fit_raw(raw, hw.name, run.mode)
        result["profile_path"] = write_profile(prof, out / f"{stem}.profile.json")
        result["profile"] = prof
    return result


def _checked_models(run: CalibrationRun):
    """(model spec, MoE model spec or None) after the checks of the run's options."""
    if run.mode not in MODES:
        raise CalibrationError(f"unknown mode '{run.mode}' (known: {', '.join(MODES)})")
    spec = load_model(run.model)
    moe_spec = load_model(run.moe_model) if run.moe_model else None
    if moe_spec is not None and not moe_spec.is_moe:
        raise CalibrationError(f"--moe-model '{run.moe_model}' is not a mixture-of-experts model")
    if run.device not in ("auto", "cuda", "cpu"):
        raise CalibrationError(f"--device {run.device!r}: use auto, cuda or cpu")
    if run.threads is not None and not 1 <= run.threads <= 4096:
        raise CalibrationError(f"--threads must be a positive number of CPU threads, got {run.threads}")
    if run.stop_after is not None and run.stop_after < 0:
        raise CalibrationError(f"--stop-after must be >= 0, got {run.stop_after}")
    if run.name is not None and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", run.name):
        raise CalibrationError(f"--name {run.name!r}: use letters, digits, '.', '_' or '-' (a file stem, no directories)")
    return spec, moe_spec


def _device(run: CalibrationRun):
    """(device info, catalog hardware, dtype, CPU threads) of this machine; on a CPU torch's thread count is set."""
    info = discover(run.device)
    if run.device == "cpu" and info.kind != "cpu":
        info = discover("cpu")
    if run.device == "cuda" and info.kind != "cuda":
        raise CalibrationError(f"--device cuda: no usable CUDA device here (torch {info.torch});"
                               " use --device cpu or auto")
    hw_name = run.hardware or catalog_name(info)
    if hw_name is None:
        raise CalibrationError(f"no hardware catalog entry matches '{info.name}'; pass --hardware NAME")
    hw = load_hardware(hw_name)
    dtype = run.dtype or ("fp32" if info.kind == "cpu" else "bf16")
    if dtype not in ("fp32", "bf16", "fp16"):
        raise CalibrationError(f"--dtype must be fp32, bf16 or fp16, got {dtype!r}")
    threads = run.threads
    if info.kind == "cpu":
        import torch
        # the engine runs measured against this profile must use the same thread count
        threads = threads or max(info.compute_units, 1)
        torch.set_num_threads(threads)
    return info, hw, dtype, threads


def main(argv=None) -> int:
    ap = OneLineParser(prog="python -m calibration.run", description=__doc__.splitlines()[0])
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--quick", action="store_const", const="quick", dest="mode", help="about a minute on a 2-core CPU")
    g.add_argument("--full", action="store_const", const="full", dest="mode", help="dense grids, minutes")
    g.add_argument("--mode", choices=sorted(MODES), help="tiny | quick | medium | full")
    ap.add_argument("--model", default="smollm2-135m", help="model whose GEMM and attention shapes to measure")
    ap.add_argument("--moe-model", default="qwen3-30b-a3b", help="MoE model for the expert GEMMs ('' to skip)")
    ap.add_argument("--extra-m", default="", help="extra GEMM M values, e.g. B*(K+1) of a scenario: 3,5,9")
    ap.add_argument("--output-dir", default=str(DEFAULT_DIR))
    ap.add_argument("--name", help="file stem (default: this device, e.g. amd-epyc-2c)")
    ap.add_argument("--hardware", help="catalog entry whose peaks the efficiencies divide (default: detected)")
    ap.add_argument("--device", choices=["auto", "cuda", "cpu"], default="auto")
    ap.add_argument("--dtype", help="fp32 (CPU default) | bf16 (GPU default) | fp16")
    ap.add_argument("--threads", type=int, help="CPU threads for torch (default: all cores)")
    ap.add_argument("--no-fit", action="store_true", help="only measure")
    ap.add_argument("--no-progress", action="store_true")
    ap.add_argument("--stop-after", type=int, help="measure at most this many new points (testing resume)")
    ap.add_argument("--gpu-timing", choices=["graph", "flush"], default="graph",
                    help="GPU kernels: rotating cold copies replayed in a CUDA graph (default) or an L2 flush"
                         " before each event-timed call (the method before; its dirty write-back and the host's"
                         " launch fall inside the timed call)")
    args = ap.parse_args(argv)
    return run_cli(lambda: _run(args))


def _run(args) -> int:
    t0 = time.perf_counter()
    try:
        run = CalibrationRun(args.mode or "quick", args.model, args.moe_model or None, parse_ints(args.extra_m),
                             args.output_dir, args.name, args.hardware, args.device, args.dtype,
                             threads=args.threads, stop_after=args.stop_after, gpu_timing=args.gpu_timing)
        res = calibrate(run, progress=not args.no_progress, fit=not args.no_fit)
    except KeyboardInterrupt:
        print("interrupted: the samples taken so far are kept; rerun the same command to resume", file=sys.stderr)
        return 130
    print(f"raw samples: {res['raw']} ({res['measured_points']} new of {res['planned_points']} planned points,"
          f" {res['bench_s']:.1f} s)")
    if res["profile"]:
        print(f"profile: {res['profile_path']}")
        print("held-out error (leave-one-out), |predicted/measured - 1|:")
        print(format_heldout(res["profile"]["heldout_error"]))
        load = res["profile"]["provenance"]["load_average_median"]
        cores = res["profile"]["device"].get("compute_units") or 1
        if res["profile"]["device"]["kind"] == "cpu" and load > cores:
            print(f"warning: the machine was busy while measuring (load average {load:.1f} on {cores} cores):"
                  " timings are inflated; rerun when it is idle", file=sys.stderr)
    print(f"total {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
