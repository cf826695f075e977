"""Calibration profiles: fitted efficiencies the cost model reads (JSON files).

The simulator never imports ``calibration``: it reads the files that ``calibration.fit`` writes.
Format (``format_version`` 1)::

    {
      "format": "dsd-planner-profile", "format_version": 1,
      "hardware": "cpu-xeon-2c",            # catalog entry whose peaks the efficiencies divide
      "device": {"name": "...", "kind": "cpu" | "cuda", ...},
      "provenance": {"date": ..., "torch": ..., "driver": ..., "code_version": ..., "raw_samples": ...},
      "compute_efficiency": {               # eta_c(tokens): curves keyed by op name or family
          "gemm": {"tokens": [1, 2, ...], "efficiency": [0.01, ...]},
          "attention": {...}, "moe": {...}, "mlp_down": {...}},
      "memory_efficiency": {"default": {"bytes": [...], "efficiency": [...]}, "attention": {...}},
      "launch_overhead_s": 4.1e-06,         # per kernel
      "step_overhead_s": {"fixed": 0.0, "per_sequence": 0.0, "per_token": 0.0},   # optional
      "engine": {"scale": 1.34, "fitted_from": "...csv"},   # optional, from calibration.validate
      "heldout_error": {...}                # optional, reported by `calibration.show`
    }

Curves are interpolated linearly in log(size) between measured points and held at their end
values outside them (a jump to the bare roofline just past the last sample would be unphysical).
Efficiencies are fractions of the catalog peak of ``hardware`` and are applied after the launch
overhead was taken out: t = max(F / (P * eta_c), M / (BW * eta_m)) + n_kernels * tau.
The optional engine terms come from end-to-end runs (``calibration.validate --update-profile``):
a serving engine's kernels run at 1/scale of the microbenchmarks' speed, and each step pays
``step_overhead_s`` of host work; every operator time is multiplied by ``scale``.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from simulator.errors import PlannerError

PROFILE_FORMAT = "dsd-planner-profile"
PROFILE_VERSION = 1
# Op families whose curve falls back to the generic GEMM curve when the profile has none of its own.
_GEMM_LIKE = {"gemm", "lm_head", "moe", "draft"}


@dataclass(frozen=True)
class Curve:
    """An efficiency curve over log(size)."""

    log_x: np.ndarray
    eta: np.ndarray

    def __call__(self, x) -> np.ndarray:
        return np.interp(np.log(np.maximum(x, 1e-30)), self.log_x, self.eta)


@dataclass(frozen=True)
class Profile:
    """A loaded calibration profile."""

    path: str
    hardware: str
    device_name: str
    compute: dict[str, Curve]
    memory: dict[str, Curve]
    launch_overhead_s: float
    step_overhead_fixed_s: float = 0.0
    step_overhead_per_seq_s: float = 0.0
    step_overhead_per_token_s: float = 0.0
    engine_scale: float = 1.0
    provenance: dict = field(default_factory=dict)
    raw: dict = field(default_factory=dict, repr=False)

    @property
    def label(self) -> str:
        engine = f", engine terms x{self.engine_scale:.2f}" if self.engine_scale != 1.0 else ""
        return f"calibrated: {Path(self.path).name} ({self.device_name}{engine})"

    def microbenchmarks_only(self) -> "Profile":
        """The same profile without the end-to-end engine terms (what validation refits)."""
        return replace(self, engine_scale=1.0, step_overhead_fixed_s=0.0, step_overhead_per_seq_s=0.0,
                       step_overhead_per_token_s=0.0)

    def compute_efficiency(self, op_name: str, family: str, tokens) -> np.ndarray | float:
        curve = self.compute.get(op_name) or self.compute.get(family)
        if curve is None and family in _GEMM_LIKE:
            curve = self.compute.get("gemm")
        return 1.0 if curve is None else curve(tokens)

    def memory_efficiency(self, family: str, nbytes) -> np.ndarray | float:
        curve = self.memory.get(family) or self.memory.get("default")
        return 1.0 if curve is None else curve(nbytes)


def _curve(obj, key: str, where: str) -> Curve:
    if not isinstance(obj, dict) or key not in obj or "efficiency" not in obj:
        raise PlannerError(f"{where}: expected {{'{key}': [...], 'efficiency': [...]}}")
    x = np.asarray(obj[key], dtype=float)
    eta = np.asarray(obj["efficiency"], dtype=float)
    if x.ndim != 1 or x.shape != eta.shape or len(x) == 0:
        raise PlannerError(f"{where}: '{key}' and 'efficiency' must be lists of the same non-zero length")
    if np.any(x <= 0) or np.any(np.diff(x) <= 0):
        raise PlannerError(f"{where}: '{key}' must be positive and strictly increasing")
    if np.any(~np.isfinite(eta)) or np.any(eta <= 0) or np.any(eta > 1.5):
        raise PlannerError(f"{where}: efficiencies must lie in (0, 1.5]")
    return Curve(np.log(x), eta)


def profile_from_dict(data: dict, path: str) -> Profile:
    if not isinstance(data, dict) or data.get("format") != PROFILE_FORMAT:
        raise PlannerError(f"{path}: not a calibration profile (expected \"format\": \"{PROFILE_FORMAT}\");"
                           " write one with `python -m calibration.fit`")
    version = data.get("format_version")
    if version != PROFILE_VERSION:
        raise PlannerError(f"{path}: profile format_version {version!r}, this planner reads {PROFILE_VERSION};"
                           " refit it with `python -m calibration.fit`")
    for key in ("hardware", "compute_efficiency", "memory_efficiency", "launch_overhead_s"):
        if key not in data:
            raise PlannerError(f"{path}: missing key '{key}'")
    compute = {name: _curve(c, "tokens", f"{path}: compute_efficiency.{name}")
               for name, c in data["compute_efficiency"].items()}
    mem = data["memory_efficiency"]
    if "bytes" in mem:  # a single curve
        mem = {"default": mem}
    memory = {name: _curve(c, "bytes", f"{path}: memory_efficiency.{name}") for name, c in mem.items()}
    tau = data["launch_overhead_s"]
    if not isinstance(tau, (int, float)) or not 0 <= tau < 1e-2:
        raise PlannerError(f"{path}: launch_overhead_s must be a number of seconds in [0, 0.01)")
    step = data.get("step_overhead_s") or {}
    engine = data.get("engine") or {}
    scale = engine.get("scale", 1.0)
    if not isinstance(scale, (int, float)) or not 0.1 <= scale <= 10:
        raise PlannerError(f"{path}: engine.scale must be a number in [0.1, 10], got {scale!r}")
    return Profile(
        path=path, hardware=str(data["hardware"]),
        device_name=str((data.get("device") or {}).get("name", data["hardware"])),
        compute=compute, memory=memory, launch_overhead_s=float(tau),
        step_overhead_fixed_s=float(step.get("fixed", 0.0)),
        step_overhead_per_seq_s=float(step.get("per_sequence", 0.0)),
        step_overhead_per_token_s=float(step.get("per_token", 0.0)),
        engine_scale=float(scale),
        provenance=dict(data.get("provenance") or {}), raw=data,
    )


def load_profile(path: str | Path) -> Profile:
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise PlannerError(f"{path}: calibration profile not found") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise PlannerError(f"{path}: corrupt calibration profile, not valid JSON ({err})") from None
    return profile_from_dict(data, str(path))


def check_profile_matches(profile: Profile, hardware_name: str) -> None:
    """A profile's efficiencies divide its own device's peaks: refuse it for another device."""
    if profile.hardware != hardware_name:
        raise PlannerError(f"{profile.path}: profile was measured on '{profile.hardware}' ({profile.device_name}),"
                           f" not '{hardware_name}'; use a profile of that device or drop --calibration")
