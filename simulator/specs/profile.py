"""Calibration profiles: fitted efficiencies the cost model reads (JSON files).

The simulator never imports ``calibration``: it reads the files that ``calibration.fit`` writes.
Format 1 (microbenchmarks of this machine, ``calibration.run``)::

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

Format 2 (measured GPU kernel tables, ``calibration.import_tables``) adds, per operator family and
dtype, efficiency surfaces over log axes (``surfaces``, axes named in each surface: "gemm.<dtype>" over
(m, n, k), "attention_decode.<kv dtype>" over (batch_heads, context, head_dim, group), "mla_decode.<kv
dtype>" over (batch, context, bytes), "moe.<dtype>" over (tokens_per_expert, expert_bytes, n)), per-shape
corrections of a surface along one axis (``shape_corrections``: MoE per exact layer shape, along tokens)
and measured collectives (``collectives``: latency by bytes per GPU count for all_reduce,
all_reduce_nccl, all_gather, reduce_scatter, all_to_all), with ``basis`` = "measured kernel tables" and
``heldout_error`` per family. An op with a surface is priced t = roofline / surface(shape) (the roofline
of simulator/physics/terms.py, the one the importer divided by); one without it streams at
``streaming_efficiency`` of datasheet bandwidth.

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
from functools import lru_cache
from pathlib import Path

import numpy as np

from simulator.errors import PlannerError
from simulator.files import read_json_file
from simulator.specs.surfaces import ShapeCorrection, Surface
from simulator.specs.versions import version_key

PROFILE_FORMAT = "dsd-planner-profile"
# Profiles shipped with the planner: measured GPU kernel tables, <hardware>.<engine>-<version>.profile.json
SHIPPED_DIR = Path(__file__).resolve().parent.parent / "data" / "profiles"
PROFILE_VERSIONS = (1, 2)
# Op families whose curve falls back to the generic GEMM curve when the profile has none of its own.
_GEMM_LIKE = {"gemm", "lm_head", "moe", "draft"}
# the GEMM kernels that run at the fp8 peak (per-tensor fp8 x fp8, block-scaled fp8) and the compute curve of
# a published prior that prices them (the fraction of the fp8 peak others attained)
FP8_PEAK_KERNELS = ("fp8", "fp8_block")
FP8_MATMUL_CURVE = "gemm.fp8"


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
    surfaces: dict = field(default_factory=dict)  # "family.dtype" -> Surface (format 2)
    collectives: dict = field(default_factory=dict)  # "all_reduce" -> {"<gpus>": {...}} (format 2)
    shape_corrections: dict = field(default_factory=dict)  # "family.dtype" -> ShapeCorrection (format 2)
    streaming_efficiency: float = 1.0  # attained share of datasheet bandwidth for ops without a surface
    basis: str = "microbenchmarks"
    heldout_error: dict = field(default_factory=dict)
    transfer_error: dict = field(default_factory=dict)  # end-to-end residuals on the published corpus
    provenance: dict = field(default_factory=dict)
    raw: dict = field(default_factory=dict, repr=False)

    @property
    def label(self) -> str:
        engine = f", engine terms x{self.engine_scale:.2f}" if self.engine_scale != 1.0 else ""
        if self.surfaces:
            src = self.provenance.get("source", "measured kernel tables")
            note = self.provenance.get("collectives_note")
            return f"measured kernel tables: {Path(self.path).name} ({self.device_name}; {src})" + (
                f"; {note}" if note else "")
        if self.basis == "published prior":
            return f"published prior: {self.provenance.get('source', '')}"
        return f"calibrated: {Path(self.path).name} ({self.device_name}{engine})"

    def surface(self, family: str, dtype: str) -> Surface | None:
        """The efficiency surface of an op family at a dtype, falling back to bf16."""
        return self.surfaces.get(self.surface_name(family, dtype) or "")

    def surface_name(self, family: str, dtype: str) -> str | None:
        """Which surface prices the family at this dtype: its own, else (block-scaled fp8) per-tensor fp8's, the
        same tensor-core math, else bf16's, else none."""
        for name in (f"{family}.{dtype}",) + ((f"{family}.fp8",) if dtype == "fp8_block" else ()) + (f"{family}.bf16",):
            if name in self.surfaces:
                return name
        return None

    def shape_correction(self, family: str, dtype: str) -> ShapeCorrection | None:
        """The per-shape correction that goes with :meth:`surface` (same fallback)."""
        name = self.surface_name(family, dtype)
        return self.shape_corrections.get(name) if name else None

    def microbenchmarks_only(self) -> "Profile":
        """The same profile without the end-to-end engine terms (what validation refits)."""
        return replace(self, engine_scale=1.0, step_overhead_fixed_s=0.0, step_overhead_per_seq_s=0.0,
                       step_overhead_per_token_s=0.0)

    def compute_efficiency(self, op_name: str, family: str, tokens, dtype: str = "") -> np.ndarray | float:
        """The attained share of the peak an op runs at: its own curve, else (a GEMM at the fp8 peak,
        ``dtype`` in :data:`FP8_PEAK_KERNELS`) the fp8 matmul curve, else its family's, else the GEMMs'."""
        curve = self.compute.get(op_name)
        if curve is None and dtype in FP8_PEAK_KERNELS and family in _GEMM_LIKE:
            curve = self.compute.get(FP8_MATMUL_CURVE)
        if curve is None:
            curve = self.compute.get(family)
        if curve is None and family in _GEMM_LIKE:
            curve = self.compute.get("gemm")
        return 1.0 if curve is None else curve(tokens)

    def memory_efficiency(self, family: str, nbytes) -> np.ndarray | float:
        curve = self.memory.get(family) or self.memory.get("default")
        return 1.0 if curve is None else curve(nbytes)


def _curve(obj, key: str, where: str) -> Curve:
    if not isinstance(obj, dict) or key not in obj or "efficiency" not in obj:
        raise PlannerError(f"{where}: expected {{'{key}': [...], 'efficiency': [...]}}")
    try:
        x = np.asarray(obj[key], dtype=float)
        eta = np.asarray(obj["efficiency"], dtype=float)
    except (TypeError, ValueError):
        raise PlannerError(f"{where}: '{key}' and 'efficiency' must be lists of numbers") from None
    if x.ndim != 1 or x.shape != eta.shape or len(x) == 0:
        raise PlannerError(f"{where}: '{key}' and 'efficiency' must be lists of the same non-zero length")
    if not np.all(np.isfinite(x)) or np.any(x <= 0) or np.any(np.diff(x) <= 0):
        raise PlannerError(f"{where}: '{key}' must be finite, positive and strictly increasing")
    if np.any(~np.isfinite(eta)) or np.any(eta <= 0) or np.any(eta > 1.5):
        raise PlannerError(f"{where}: efficiencies must lie in (0, 1.5]")
    return Curve(np.log(x), eta)


def _table(data: dict, key: str, path: str, required: bool = False) -> dict:
    value = data.get(key)
    if value is None and not required:
        return {}
    if not isinstance(value, dict):
        raise PlannerError(f"{path}: '{key}' must be an object, got {type(value).__name__}")
    return value


def _seconds(value, key: str, path: str, upper: float = 1.0) -> float:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0 <= value < upper:
        raise PlannerError(f"{path}: {key} must be a number of seconds in [0, {upper:g}), got {value!r}")
    return float(value)


def profile_from_dict(data: dict, path: str) -> Profile:
    if not isinstance(data, dict) or data.get("format") != PROFILE_FORMAT:
        raise PlannerError(f"{path}: not a calibration profile (expected \"format\": \"{PROFILE_FORMAT}\");"
                           " write one with `python -m calibration.fit`")
    version = data.get("format_version")
    if version not in PROFILE_VERSIONS:
        raise PlannerError(f"{path}: profile format_version {version!r}, this planner reads"
                           f" {' or '.join(map(str, PROFILE_VERSIONS))}; refit it with `python -m calibration.fit`")
    for key in ("hardware", "compute_efficiency", "memory_efficiency", "launch_overhead_s"):
        if key not in data:
            raise PlannerError(f"{path}: missing key '{key}'")
    if not isinstance(data["hardware"], str) or not data["hardware"]:
        raise PlannerError(f"{path}: 'hardware' must be a hardware catalog name, got {data['hardware']!r}")
    compute = {name: _curve(c, "tokens", f"{path}: compute_efficiency.{name}")
               for name, c in _table(data, "compute_efficiency", path, True).items()}
    mem = _table(data, "memory_efficiency", path, True)
    if "bytes" in mem:  # a single curve
        mem = {"default": mem}
    memory = {name: _curve(c, "bytes", f"{path}: memory_efficiency.{name}") for name, c in mem.items()}
    tau = _seconds(data["launch_overhead_s"], "launch_overhead_s", path, 1e-2)
    step = _table(data, "step_overhead_s", path)
    step_s = {k: _seconds(step.get(k, 0.0), f"step_overhead_s.{k}", path) for k in ("fixed", "per_sequence", "per_token")}
    engine = _table(data, "engine", path)
    scale = engine.get("scale", 1.0)
    if not isinstance(scale, (int, float)) or isinstance(scale, bool) or not 0.1 <= scale <= 10:
        raise PlannerError(f"{path}: engine.scale must be a number in [0.1, 10], got {scale!r}")
    device = _table(data, "device", path)
    for key in ("heldout_error", "transfer_error", "provenance"):
        _table(data, key, path)
    return Profile(
        path=path, hardware=str(data["hardware"]),
        device_name=str(device.get("name", data["hardware"])),
        compute=compute, memory=memory, launch_overhead_s=tau,
        step_overhead_fixed_s=step_s["fixed"],
        step_overhead_per_seq_s=step_s["per_sequence"],
        step_overhead_per_token_s=step_s["per_token"],
        engine_scale=float(scale),
        surfaces=_surfaces(data.get("surfaces") or {}, path),
        collectives=_collectives(data.get("collectives") or {}, path),
        shape_corrections=_shape_corrections(data.get("shape_corrections") or {}, path),
        streaming_efficiency=_fraction(data.get("streaming_efficiency", 1.0), "streaming_efficiency", path),
        basis=str(data.get("basis", "microbenchmarks")),
        heldout_error=dict(data.get("heldout_error") or {}),
        transfer_error=dict(data.get("transfer_error") or {}),
        provenance=dict(data.get("provenance") or {}), raw=data,
    )


def _fraction(value, key: str, path: str) -> float:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0 < value <= 1.5:
        raise PlannerError(f"{path}: '{key}' must be a number in (0, 1.5], got {value!r}")
    return float(value)


def _surfaces(table, path: str) -> dict[str, Surface]:
    if not isinstance(table, dict):
        raise PlannerError(f"{path}: 'surfaces' must be an object of named surfaces")
    out = {}
    for name, d in table.items():
        try:
            surf = Surface.from_dict(d)
        except (KeyError, TypeError, ValueError, AttributeError, IndexError) as err:
            raise PlannerError(f"{path}: surfaces.{name}: {err}; expected axes, grid and efficiency") from None
        if not np.all(np.isfinite(surf.values)) or np.any(surf.values <= 0):
            raise PlannerError(f"{path}: surfaces.{name}: efficiencies must be finite and > 0")
        out[name] = surf
    return out


def _shape_corrections(table, path: str) -> dict[str, ShapeCorrection]:
    if not isinstance(table, dict):
        raise PlannerError(f"{path}: 'shape_corrections' must be an object of named corrections")
    out = {}
    for name, d in table.items():
        try:
            out[name] = ShapeCorrection.from_dict(d)
        except (KeyError, TypeError, ValueError, AttributeError) as err:
            raise PlannerError(f"{path}: shape_corrections.{name}: {err}; expected key_axes, along and entries") from None
    return out


def _collectives(table, path: str) -> dict:
    if not isinstance(table, dict):
        raise PlannerError(f"{path}: 'collectives' must be an object")
    def positive(v) -> bool:
        return isinstance(v, (int, float)) and not isinstance(v, bool) and bool(np.isfinite(v)) and v > 0

    for op, by_gpus in table.items():
        if by_gpus is not None and not isinstance(by_gpus, dict):
            raise PlannerError(f"{path}: collectives.{op}: expected an object keyed by GPU count")
        for g, ent in (by_gpus or {}).items():
            ok = (isinstance(ent, dict) and str(g).isdigit() and all(k in ent for k in ("alpha_s", "bus_bandwidth_bytes_per_s",
                                                                                     "bytes", "latency_s")))
            ok = ok and isinstance(ent["bytes"], list) and isinstance(ent["latency_s"], list) \
                and len(ent["bytes"]) == len(ent["latency_s"]) and len(ent["bytes"]) > 0 \
                and all(map(positive, ent["bytes"] + ent["latency_s"])) and positive(ent["bus_bandwidth_bytes_per_s"]) \
                and isinstance(ent["alpha_s"], (int, float)) and not isinstance(ent["alpha_s"], bool) \
                and bool(np.isfinite(ent["alpha_s"])) and ent["alpha_s"] >= 0
            if not ok:
                raise PlannerError(f"{path}: collectives.{op}.{g}: expected alpha_s, bus_bandwidth_bytes_per_s and"
                                   " matching positive bytes / latency_s lists")
    return table


def shipped_profile_path(hardware: str, engine: str | None = None) -> Path | None:
    """The shipped measured-table profile of a device: the given engine's newest version when there is
    one (kernels differ by engine); for an engine without tables of its own (gpt-fast, a research
    stack) vLLM's, the closest PyTorch kernel set (cuBLAS GEMMs, FlashAttention-family attention);
    else any engine's. The label says which engine's tables it holds."""
    paths = sorted(SHIPPED_DIR.glob(f"{hardware}.*.profile.json"))
    if not paths:
        return None
    def rank(p: Path):
        tag = p.name[len(hardware) + 1:-len(".profile.json")]
        name, _, version = tag.partition("-")
        return (name == engine, name == "vllm", version_key(version))
    return max(paths, key=rank)


# Kernel families that only some engines' tables measure; another engine's profile of the same device
# borrows them rather than price them as bf16 GEMMs (weight-only dequantizing kernels run far below
# the bf16 GEMM's efficiency at decode sizes: A100 TensorRT-LLM tables, m = 1: int4 ~0.4, bf16 ~0.75).
BORROWABLE_SURFACES = ("gemm.int8_wo", "gemm.int4_wo")


@lru_cache(maxsize=32)
def load_shipped_profile(path: Path) -> Profile:
    """A shipped profile, with the device's weight-only GEMM surfaces borrowed from a sibling profile
    when its own engine's tables lack them (provenance says from where). Cached: shipped profiles are
    package data, and every scenario build (each sweep point, each dashboard rerun) resolves one."""
    profile = load_profile(path)
    missing = [k for k in BORROWABLE_SURFACES if k not in profile.surfaces]
    borrowed = {}
    for sibling in sorted(path.parent.glob(f"{profile.hardware}.*.profile.json")):
        if sibling == path or not missing:
            continue
        data = json.loads(sibling.read_text())
        for key in [k for k in missing if k in (data.get("surfaces") or {})]:
            borrowed[key] = data["surfaces"][key]
            missing.remove(key)
            profile.provenance.setdefault("borrowed_surfaces", {})[key] = sibling.name
    if borrowed:
        profile = replace(profile, surfaces=profile.surfaces | _surfaces(borrowed, str(path)))
    return profile


def prior_profile(hw) -> Profile | None:
    """The "published prior" of a device: attained fractions others measured on it ([published] in its
    hardware file): GEMM-like ops at max-achievable-matmul / datasheet FLOP/s, every op streaming at
    measured / datasheet bandwidth.
    None when the device has no such figures (its predictions then rest on the datasheet only)."""
    pub = getattr(hw, "published", None) or {}
    if hw.kind != "gpu" or not pub:
        return None
    const = lambda value: Curve(np.zeros(1), np.array([value]))  # noqa: E731
    compute, memory, collectives, used = {}, {}, {}, []
    notes = []
    if "mamf_bf16_flops_per_s" in pub:
        compute["gemm"] = const(min(pub["mamf_bf16_flops_per_s"] / hw.peak_bf16_flops_per_s, 1.0))
        used.append("matmul")
        # GEMMs at the fp8 peak (FP8_PEAK_KERNELS) take the fp8 figure's own share of it where one is published
        if hw.peak_fp8_flops_per_s and "mamf_fp8_flops_per_s" in pub:
            compute[FP8_MATMUL_CURVE] = const(min(pub["mamf_fp8_flops_per_s"] / hw.peak_fp8_flops_per_s, 1.0))
            used.append("fp8 matmul")
        elif hw.peak_fp8_flops_per_s:
            notes.append("fp8 GEMMs assumed at bf16's share of their peak (no published fp8 matmul figure)")
    if "stream_bandwidth_bytes_per_s" in pub:
        memory["default"] = const(min(pub["stream_bandwidth_bytes_per_s"] / hw.hbm_bandwidth_bytes_per_s, 1.0))
        used.append("bandwidth")
    # The published all-reduce figures are nccl-tests rings over 8 GPUs; decode steps use the engines'
    # one-shot custom all-reduce kernels, whose small-message latency is several times lower, so the
    # prior leaves collectives to the datasheet link model rather than price them from the wrong kernel.
    if not used:  # e.g. only a cache figure: nothing the prior would price
        return None
    return Profile(path=f"{hw.name} [published]", hardware=hw.name, device_name=hw.display_name, compute=compute,
                   memory=memory, launch_overhead_s=hw.launch_overhead_s, collectives=collectives,
                   basis="published prior", provenance={"source": f"published measurements ({', '.join(used)})"
                                                                  f" in the [published] table of {hw.name}'s hardware file"
                                                                  + "".join(f"; {n}" for n in notes)})


def load_profile(path: str | Path) -> Profile:
    return profile_from_dict(read_json_file(path, "calibration profile"), str(Path(path)))


def check_profile_matches(profile: Profile, hardware_name: str) -> None:
    """A profile's efficiencies divide its own device's peaks: refuse it for another device."""
    if profile.hardware != hardware_name:
        raise PlannerError(f"{profile.path}: profile was measured on '{profile.hardware}' ({profile.device_name}),"
                           f" not '{hardware_name}'; use a profile of that device or drop --calibration")
