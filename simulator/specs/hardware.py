"""Hardware catalog: one TOML file per device under ``simulator/data/hardware``.

Datasheet figures and assumed figures are kept apart: keys under ``[assumed]`` are typical values
that no datasheet gives (kernel launch overhead, link latency, price) and a calibration profile
replaces them.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path

import numpy as np

from simulator.errors import PlannerError, did_you_mean
from simulator.files import read_toml_file
from simulator.specs.hardware_file import (check_figures, check_plausible, check_required, is_number, positive_int,
                                            published_table, scale_out_table)

HARDWARE_DIR = Path(__file__).resolve().parent.parent / "data" / "hardware"

# Bytes per element. The two FP4 formats store 4-bit E2M1 values (half an fp8 byte) plus block scales:
# mxfp4 (OCP MX) one 8-bit E8M0 scale per 32 values (4.25 bits), nvfp4 one 8-bit E4M3 scale per 16
# values (4.5 bits; its one fp32 scale per tensor is negligible).
DTYPE_BYTES = {"fp32": 4.0, "bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "int8": 1.0, "int4": 0.5, "mxfp4": 4.25 / 8,
               "nvfp4": 4.5 / 8}
FP4_DTYPES = ("nvfp4", "mxfp4")
# the GEMM kernel of fp8 weights with block scales (the measured tables' "fp8_block" mode)
BLOCK_FP8 = "fp8_block"
WEIGHT_DTYPES = ("bf16", "fp16", "fp8", "int8", "int4", "mxfp4", "nvfp4", "fp32")  # fp32: the CPU scenarios
ACT_DTYPES = ("bf16", "fp16", "fp8", "fp32", "nvfp4", "mxfp4")
KV_DTYPES = ("bf16", "fp16", "fp8", "fp32")

# A device's family: its architecture generation (the ``architecture`` key of every hardware file) -> (vendor,
# kind). Devices of one family run the same tensor-core instructions, so engines run the same kernels on them; the
# learned layer (simulator/specs/step_terms.py) may share an offset across a family's sources. "other": a device of
# none of these (the learned layer uses its population's centre for it).
ARCHITECTURES = {
    "ampere": ("nvidia", "gpu"),  # sm_80 / sm_86: mma.sync tensor cores
    "ada": ("nvidia", "gpu"),  # sm_89: mma.sync with fp8
    "hopper": ("nvidia", "gpu"),  # sm_90: wgmma, TMA
    "blackwell": ("nvidia", "gpu"),  # sm_100 / sm_103 (datacenter): tcgen05 tensor cores with tensor memory
    "blackwell-rtx": ("nvidia", "gpu"),  # sm_120 (workstation): mma.sync with block-scaled FP4, no tcgen05 or wgmma
    "cdna3": ("amd", "gpu"),  # gfx942
    "cdna4": ("amd", "gpu"),  # gfx950
    "emerald-rapids": ("intel", "cpu"),  # 5th-gen Xeon Scalable: AVX-512 and AMX
    "other": (None, None),
}


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
    # [published]: figures others measured on this device (attained matmul FLOP/s, streaming bandwidth,
    # all-reduce bus bandwidth and latency), each with its source; the "published prior" basis reads them
    published: dict = field(default_factory=dict, compare=False, hash=False)
    # GPUs one NVLink / xGMI domain joins (one HGX / OAM board); a TP or EP group beyond it crosses nodes
    scale_up_domain_gpus: int | None = None
    # [scale_out]: the fabric between nodes (fabric, bandwidth_bytes_per_s per GPU one direction,
    # latency_s per network step, source); empty: a group beyond one domain is refused
    scale_out: dict = field(default_factory=dict, compare=False, hash=False)
    # FP4 tensor cores: the dense peak and the block formats the datasheet names (nvfp4, mxfp4)
    peak_fp4_flops_per_s: float | None = None
    fp4_formats: tuple[str, ...] = ()
    architecture: str = "other"  # the device's family (ARCHITECTURES); every catalog file gives it

    @property
    def ridge_point(self) -> float:
        """FLOPs per byte where the bf16 roofline turns from memory- to compute-bound."""
        return self.peak_bf16_flops_per_s / self.hbm_bandwidth_bytes_per_s

    @property
    def l2_reread_cost(self) -> float:
        """Cost of re-reading a byte that is still in L2, relative to reading it from HBM: attained HBM
        over attained L2 bandwidth ([published] figures). 1.0 (every re-read costs an HBM read) when
        no L2 figure is published: the upper bound."""
        l2 = self.published.get("l2_bandwidth_bytes_per_s")
        if not l2:
            return 1.0
        hbm = self.published.get("stream_bandwidth_bytes_per_s") or self.hbm_bandwidth_bytes_per_s
        return min(1.0, hbm / l2)

    def peak_flops_per_s(self, weight_dtype: str, act_dtype: str, kernel: str = "") -> float:
        """Peak of the math the GEMMs run in.

        fp8 tensor cores are used only when both operands are fp8, FP4 ones only when both are in one
        FP4 format the device runs (:func:`check_precision`); int4 / mxfp4 / nvfp4 / fp8 weights with
        bf16 activations are dequantized and computed in bf16 (weight-only quantization).
        ``kernel`` "fp8_block" (fp8 weights with block scales, :meth:`ModelSpec.fp8_blocks`): the engines'
        block-scaled kernels (DeepGEMM, CUTLASS blockwise) quantize each token's bf16 activations to fp8 per
        128 channels and multiply fp8 x fp8, so they run at the fp8 peak where the device has fp8 tensor cores.
        """
        if kernel == BLOCK_FP8 and weight_dtype == "fp8" and act_dtype in ("bf16", "fp16"):
            act_dtype = "fp8"
        if act_dtype == "fp32":
            return self.peak_fp32_flops_per_s or self.peak_bf16_flops_per_s
        if act_dtype == "fp8" and weight_dtype in ("fp8", "int8") and self.peak_fp8_flops_per_s:
            return self.peak_fp8_flops_per_s
        if act_dtype in self.fp4_formats and weight_dtype == act_dtype and self.peak_fp4_flops_per_s:
            return self.peak_fp4_flops_per_s
        return self.peak_bf16_flops_per_s


def hardware_from_dict(data: dict, origin: str) -> Hardware:
    """Build a Hardware from a catalog-format dict; errors name the file and key.

    Every figure must be a finite number: peaks, bandwidths and memory > 0, latency and launch
    overhead >= 0 (a NaN bandwidth would otherwise read as "does not fit in memory").
    """
    check_required(data, origin)
    assumed = data.get("assumed", {})
    if not isinstance(assumed, dict):
        raise PlannerError(f"{origin}: [assumed] must be a table of figures")
    check_figures(data, assumed, origin)

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
        compute_units=positive_int(data, "compute_units", origin),
        published=published_table(data.get("published", {}), origin),
        scale_up_domain_gpus=positive_int(data, "scale_up_domain_gpus", origin),
        scale_out=scale_out_table(data.get("scale_out", {}), origin),
        peak_fp4_flops_per_s=_opt_float(data.get("peak_fp4_flops_per_s")),
        fp4_formats=_fp4_formats(data, origin),
        architecture=_architecture(data, origin),
    )


def _architecture(data: dict, origin: str) -> str:
    """'architecture': one of ARCHITECTURES, agreeing with the file's vendor and kind where they are given."""
    names = ", ".join(ARCHITECTURES)
    # a user's own device file from before the key existed still loads: a family the learned layer has no offset
    # for (its population's centre); every catalog file gives its family (tests/test_learned_gpu_family.py)
    arch = data.get("architecture", "other")
    if arch not in ARCHITECTURES:
        raise PlannerError(f"{origin}: 'architecture' must be one of {names}, got {arch!r}")
    vendor, kind = ARCHITECTURES[arch]
    for key, want in (("vendor", vendor), ("kind", kind)):
        if want is not None and key in data and data[key] != want:
            raise PlannerError(f"{origin}: architecture '{arch}' is a family of {want} devices,"
                               f" but {key} = {data[key]!r}")
    return arch


def _fp4_formats(data: dict, origin: str) -> tuple[str, ...]:
    """fp4_formats: a list of FP4_DTYPES, given together with peak_fp4_flops_per_s (both or neither)."""
    formats = data.get("fp4_formats", [])
    if not isinstance(formats, list) or any(f not in FP4_DTYPES for f in formats):
        raise PlannerError(f"{origin}: 'fp4_formats' must be a list of {', '.join(FP4_DTYPES)}, got {formats!r}")
    if bool(formats) != ("peak_fp4_flops_per_s" in data):
        raise PlannerError(f"{origin}: give 'fp4_formats' and 'peak_fp4_flops_per_s' together (or neither)")
    return tuple(formats)


def fp4_hardware() -> dict[str, tuple[str, ...]]:
    """Catalog devices whose tensor cores run FP4, with the formats each runs."""
    return {n: hw.fp4_formats for n in list_hardware() if (hw := load_hardware(n)).fp4_formats}


def gemm_kernel_dtype(w_bytes: float, a_bytes: float) -> str:
    """Which measured kernel family runs these operand sizes (GEMMs and MoE experts): fp8 x fp8 or FP4 x FP4
    tensor cores (a table without an fp4 surface prices them with its bf16 one), weight-only int8 / int4 /
    MXFP4 (dequantized into bf16 math), or bf16."""
    if w_bytes == a_bytes == 1:
        return "fp8"
    if w_bytes == a_bytes < 1:
        return "fp4"
    if a_bytes == 2 and w_bytes in (1, 0.5):
        return "int8_wo" if w_bytes == 1 else "int4_wo"
    if a_bytes == 2 and w_bytes == DTYPE_BYTES["mxfp4"]:
        return "mxfp4_wo"
    return "bf16"


def check_precision(hw: Hardware, weight_dtype: str, act_dtype: str) -> None:
    """FP4 activations run FP4 tensor cores: refused (PlannerError, one line naming the device) unless
    the weights are in the same format and the device's datasheet lists that format. FP4 weights with
    bf16 activations are weight-only quantization (dequantized into bf16 math) and run anywhere."""
    if act_dtype not in FP4_DTYPES:
        return
    if weight_dtype != act_dtype:
        raise PlannerError(f"activations {act_dtype} need {act_dtype} weights (--dtype {act_dtype}),"
                           f" got {weight_dtype}; for weight-only FP4 keep --act-dtype bf16")
    if act_dtype not in hw.fp4_formats:
        runs = ", ".join(n for n, f in fp4_hardware().items() if act_dtype in f)
        has = f"runs only {', '.join(hw.fp4_formats)}" if hw.fp4_formats else "has no FP4 tensor cores"
        raise PlannerError(f"{act_dtype} weights and activations (FP4 tensor cores) are not supported on {hw.name}"
                           f" ({hw.display_name}: {has}); {act_dtype} runs on {runs}."
                           f" Use --act-dtype bf16 for weight-only {act_dtype}")


SERVER_GPUS = 8  # GPUs of one server (an HGX board, most PCIe servers) where a file names no NVLink domain


def check_group_fits(hw: Hardware, gpus: int, what: str) -> str | None:
    """A group of ``gpus`` beyond one scale-up domain: refused (PlannerError) where the hardware file
    gives no inter-node fabric or the group does not split evenly over nodes; else a one-line caveat
    saying what it is priced with (None when it fits one domain; a caveat too when the file names no domain and
    the group is larger than one server)."""
    if gpus > 1 and hw.interconnect.strip().lower() == "none":  # one device: its interconnect figures are placeholders
        raise PlannerError(f"{what} = {gpus} on {hw.name}: the hardware file gives no interconnect between devices"
                           f" (interconnect = \"none\"); use {what} = 1")
    dom = hw.scale_up_domain_gpus
    if not dom and hw.kind == "gpu" and gpus > SERVER_GPUS:
        return (f"{what} = {gpus} on {hw.name}: its hardware file names no scale_up_domain_gpus, so the group is priced"
                f" as one {hw.interconnect} domain with no inter-node hop, where servers commonly hold {SERVER_GPUS}"
                " GPUs (an HGX board); give scale_up_domain_gpus and a [scale_out] table for a group across nodes")
    if not dom or gpus <= dom:
        return None
    nodes = -(-gpus // dom)
    if gpus % dom:
        raise PlannerError(f"{what} = {gpus} on {hw.name} does not split evenly over {dom}-GPU NVLink domains;"
                           f" use a multiple of {dom} or at most {dom}")
    if not hw.scale_out:
        raise PlannerError(f"{what} = {gpus} on {hw.name} spans {nodes} nodes of {dom} GPUs (one {hw.interconnect}"
                           f" domain each) and the hardware file gives no inter-node fabric: add a [scale_out] table"
                           f" (fabric, bandwidth_bytes_per_s, latency_s, source) or use {what} <= {dom}")
    so = hw.scale_out
    # "domains", not "nodes": a domain is an HGX board, an NVL72 rack or an NVLink-bridged pair of PCIe cards
    return (f"{what} = {gpus} on {hw.name} spans {nodes} {hw.interconnect} domains of {dom} GPUs: collectives between"
            f" them pay the {so['fabric']} ({so['bandwidth_bytes_per_s'] / 1e9:.0f} GB/s per GPU,"
            f" {so['latency_s'] * 1e6:.0f} us per step; hardware file [scale_out])")


def _opt_float(value) -> float | None:
    return None if value is None else float(value)


@lru_cache(maxsize=None)
def list_hardware() -> tuple[str, ...]:
    return tuple(sorted(p.stem for p in HARDWARE_DIR.glob("*.toml")))


@lru_cache(maxsize=None)
def load_hardware(name: str) -> Hardware:
    """A catalog name (``h100-sxm``) or a path to a TOML file in the catalog format."""
    path = Path(name)
    if path.suffix == ".toml" and path.is_dir():
        raise PlannerError(f"{path}: is a directory; give a hardware TOML file")
    if path.suffix == ".toml" and path.exists():
        origin = str(path)
    elif name in list_hardware():
        path = HARDWARE_DIR / f"{name}.toml"
        origin = f"hardware catalog entry '{name}'"
    else:
        raise PlannerError(f"unknown hardware '{name}'{did_you_mean(name, list_hardware())}")
    return hardware_from_dict(read_toml_file(path, "hardware"), origin)


def custom_hardware(base: Hardware | None = None, **overrides) -> Hardware:
    """A what-if device: a catalog entry with some figures replaced (or a bare one)."""
    if base is None:
        base = load_hardware("h100-sxm")
        overrides.setdefault("name", "custom")
        overrides.setdefault("display_name", "custom device")
    for key, value in overrides.items():
        if key.endswith(("_per_s", "_bytes", "_usd")) and value is not None \
                and (not is_number(value) or not np.isfinite(value) or value <= 0):
            raise PlannerError(f"custom hardware: '{key}' must be a finite number > 0, got {value!r}")
        if value is not None and is_number(value):
            check_plausible(key, value, "custom hardware")
    overrides.setdefault("source", f"custom figures over {base.name}")
    return replace(base, **overrides)
