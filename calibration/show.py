"""Print a calibration profile: per op family, achieved vs datasheet and the held-out errors.

    python -m calibration.show calibration/data/cpu-xeon-2c.profile.json [--hardware cpu-xeon-2c]
"""
from __future__ import annotations

import numpy as np

from calibration.fit import format_heldout
from simulator.cli.common import OneLineParser, run_cli
from simulator.errors import PlannerError
from simulator.specs.hardware import load_hardware
from simulator.specs.profile import check_profile_matches, load_profile


def render(path: str, hardware: str | None = None) -> str:
    prof = load_profile(path)
    if hardware:
        check_profile_matches(prof, hardware)
    hw = load_hardware(prof.hardware)
    raw, pv = prof.raw, prof.provenance
    dtype = pv.get("dtype", "bf16")
    P, BW = hw.peak_flops_per_s(dtype, dtype), hw.hbm_bandwidth_bytes_per_s
    out = [f"profile   {path}",
           f"device    {prof.device_name} -> catalog '{hw.name}' ({hw.display_name})",
           f"peaks     {P / 1e12:.4g} TFLOP/s ({dtype}), {BW / 1e9:.4g} GB/s",
           f"measured  {pv.get('measured', '?')}  fitted {pv.get('date', '?')}  torch {pv.get('torch', '?')}"
           f"  code {pv.get('code_version', '?')}  raw {pv.get('raw_samples', '?')}",
           f"launch    {prof.launch_overhead_s * 1e6:.2f} us per kernel"
           f" ({(pv.get('launch_overhead') or {}).get('used', '?')}; catalog assumes {hw.launch_overhead_s * 1e6:.2f} us)",
           "", "achieved (best measured point, launch overhead included) vs datasheet:",
           f"{'family':16s} {'GFLOP/s':>10s} {'% peak':>7s} {'GB/s':>9s} {'% BW':>7s}"]
    achieved = raw.get("achieved") if isinstance(raw.get("achieved"), dict) else {}
    keys = ("max_flops_per_s", "pct_peak_flops", "max_bytes_per_s", "pct_peak_bandwidth")
    for fam, a in achieved.items():
        if not isinstance(a, dict) or not all(isinstance(a.get(k), (int, float)) for k in keys):
            raise PlannerError(f"{path}: achieved.{fam}: expected numbers {', '.join(keys)}; refit the profile"
                               " with `python -m calibration.fit`")
        out.append(f"{fam:16s} {a['max_flops_per_s'] / 1e9:10.1f} {a['pct_peak_flops']:7.1f}"
                   f" {a['max_bytes_per_s'] / 1e9:9.1f} {a['pct_peak_bandwidth']:7.1f}")
    out += ["", "fitted curves (efficiency = fraction of peak, launch overhead taken out):"]
    for kind, curves, x in (("compute", prof.compute, "tokens"), ("memory", prof.memory, "bytes")):
        for name, c in sorted(curves.items()):
            xs = np.exp(c.log_x)
            out.append(f"  {kind:7s} {name:14s} {len(xs):3d} pts  {x} {xs[0]:.3g}..{xs[-1]:.3g}"
                       f"  eta {c.eta.min():.3g}..{c.eta.max():.3g} (at smallest {c.eta[0]:.3g}, largest {c.eta[-1]:.3g})")
    if raw.get("heldout_error"):
        try:
            # format 1 (calibration.fit) names the fitted column "calibrated", format 2 (import_tables) "fitted"
            table = format_heldout({fam: dict(e, calibrated=e.get("calibrated", e.get("fitted")))
                                    for fam, e in raw["heldout_error"].items()})
        except (KeyError, TypeError, ValueError, AttributeError):
            raise PlannerError(f"{path}: heldout_error is not in the format calibration.fit writes"
                               " (family -> n, roofline, calibrated); refit the profile") from None
        out += ["", "held-out error (leave-one-out), |predicted/measured - 1| in %:", table]
    return "\n".join(out)


def main(argv=None) -> int:
    ap = OneLineParser(prog="python -m calibration.show", description=__doc__.splitlines()[0])
    ap.add_argument("profile")
    ap.add_argument("--hardware", help="refuse a profile fitted for another catalog entry")
    args = ap.parse_args(argv)
    return run_cli(lambda: print(render(args.profile, args.hardware)))


if __name__ == "__main__":
    raise SystemExit(main())
