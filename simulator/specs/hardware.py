"""Hardware catalog: one TOML file per device under ``simulator/data/hardware``.

Datasheet figures and assumed figures are kept apart: keys under ``[assumed]`` are typical values
that no datasheet gives (kernel launch overhead, link latency, price) and a calibration profile
replaces them.
"""
from __future__ import annotations

import tomllib
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path

from simulator.errors import PlannerError, did_you_mean

HARDWARE_DIR = Path(__file__).resolve().parent.parent / "data" / "hardware"

# Bytes per element; mxfp4 carries one 8-bit scale per 32 values (4.25 bits).
DTYPE_BYTES = {"fp32": 4.0, "bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "int8": 1.0, "int4": 0.5, "mxfp4": 4.25 / 8}
WEIGHT_DTYPES = ("bf16", "fp16", "fp8", "int8", "int4", "mxfp4")
ACT_DTYPES = ("bf16", "fp16", "fp8", "fp32")
KV_DTYPES = ("bf16", "fp16", "fp8", "fp32")


@dataclass(frozen=True)
class Hardware:
    """One accelerator (per-GPU figures, SI units)."""

    name: str
    display_name: str
    vendor: str
    kind: str  # "gpu" | "cpu"
    peak_bf16_flops_per_s: float
    peak_fp8_flops_per_s: float | None
    peak_fp32_flops_per_s: float | None
    hbm_bandwidth_bytes_per_s: float
    memory_bytes: float
    interconnect: str
    interconnect_bandwidth_bytes_per_s: float  # one direction, per GPU
    interconnect_latency_s: float
    launch_overhead_s: float  # per kernel
    tdp_w: float | None
    price_per_gpu_hour_usd: float | None
    source: str
    compute_units: int | None = None  # SMs (NVIDIA) or CUs (AMD), as the datasheet gives them

    @property
    def ridge_point(self) -> float:
        """FLOPs per byte where the bf16 roofline turns from memory- to compute-bound."""
        return self.peak_bf16_flops_per_s / self.hbm_bandwidth_bytes_per_s

    def peak_flops_per_s(self, weight_dtype: str, act_dtype: str) -> float:
        """Peak of the math the GEMMs run in.

        fp8 tensor cores are used only when both operands are fp8; int4 / mxfp4 / fp8 weights with
        bf16 activations are dequantized and computed in bf16 (weight-only quantization).
        """
        if act_dtype == "fp32":
            return self.peak_fp32_flops_per_s or self.peak_bf16_flops_per_s
        if act_dtype == "fp8" and weight_dtype in ("fp8", "int8") and self.peak_fp8_flops_per_s:
            return self.peak_fp8_flops_per_s
        return self.peak_bf16_flops_per_s


_REQUIRED = {
    "name": str, "peak_bf16_flops_per_s": (int, float), "hbm_bandwidth_bytes_per_s": (int, float),
    "memory_bytes": (int, float),
}


def hardware_from_dict(data: dict, origin: str) -> Hardware:
    """Build a Hardware from a catalog-format dict; errors name the file and key."""
    for key, kind in _REQUIRED.items():
        if key not in data:
            raise PlannerError(f"{origin}: missing key '{key}'")
        if not isinstance(data[key], kind) or isinstance(data[key], bool):
            raise PlannerError(f"{origin}: key '{key}' must be {getattr(kind, '__name__', 'a number')}")
    assumed = data.get("assumed", {})
    for key in ("peak_bf16_flops_per_s", "hbm_bandwidth_bytes_per_s", "memory_bytes"):
        if data[key] <= 0:
            raise PlannerError(f"{origin}: '{key}' must be > 0, got {data[key]}")

    def pick(key, default=None):
        return data.get(key, assumed.get(key, default))

    return Hardware(
        name=data["name"],
        display_name=data.get("display_name", data["name"]),
        vendor=data.get("vendor", "unknown"),
        kind=data.get("kind", "gpu"),
        peak_bf16_flops_per_s=float(data["peak_bf16_flops_per_s"]),
        peak_fp8_flops_per_s=_opt_float(data.get("peak_fp8_flops_per_s")),
        peak_fp32_flops_per_s=_opt_float(data.get("peak_fp32_flops_per_s")),
        hbm_bandwidth_bytes_per_s=float(data["hbm_bandwidth_bytes_per_s"]),
        memory_bytes=float(data["memory_bytes"]),
        interconnect=data.get("interconnect", "none"),
        interconnect_bandwidth_bytes_per_s=float(pick("interconnect_bandwidth_bytes_per_s", 32e9)),
        interconnect_latency_s=float(pick("interconnect_latency_s", 10e-6)),
        launch_overhead_s=float(pick("launch_overhead_s", 0.0)),
        tdp_w=_opt_float(pick("tdp_w")),
        price_per_gpu_hour_usd=_opt_float(pick("price_per_gpu_hour_usd")),
        source=data.get("source", origin),
        compute_units=int(data["compute_units"]) if isinstance(data.get("compute_units"), int) else None,
    )


def _opt_float(value) -> float | None:
    return None if value is None else float(value)


@lru_cache(maxsize=None)
def list_hardware() -> tuple[str, ...]:
    return tuple(sorted(p.stem for p in HARDWARE_DIR.glob("*.toml")))


@lru_cache(maxsize=None)
def load_hardware(name: str) -> Hardware:
    """A catalog name (``h100-sxm``) or a path to a TOML file in the catalog format."""
    path = Path(name)
    if path.suffix == ".toml" and path.exists():
        origin = str(path)
    elif name in list_hardware():
        path = HARDWARE_DIR / f"{name}.toml"
        origin = f"hardware catalog entry '{name}'"
    else:
        raise PlannerError(f"unknown hardware '{name}'{did_you_mean(name, list_hardware())}")
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as err:
        raise PlannerError(f"{path}: malformed TOML: {err}") from None
    return hardware_from_dict(data, origin)


def custom_hardware(base: Hardware | None = None, **overrides) -> Hardware:
    """A what-if device: a catalog entry with some figures replaced (or a bare one)."""
    if base is None:
        base = load_hardware("h100-sxm")
        overrides.setdefault("name", "custom")
        overrides.setdefault("display_name", "custom device")
    for key, value in overrides.items():
        if key.endswith(("_per_s", "_bytes")) and value is not None and value <= 0:
            raise PlannerError(f"custom hardware: '{key}' must be > 0, got {value}")
    overrides.setdefault("source", f"custom figures over {base.name}")
    return replace(base, **overrides)
