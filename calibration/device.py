"""Device discovery: what the microbenchmarks run on (GPU through NVML + torch, else the CPU).

``python -m calibration.device`` prints the result as JSON.
"""
from __future__ import annotations

import json
import os
import platform
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path


@dataclass
class DeviceInfo:
    """The device the benchmarks run on. ``kind`` is "cuda" or "cpu"; figures per device."""

    kind: str
    name: str
    count: int = 1
    memory_bytes: int = 0
    compute_units: int = 0  # SMs on a GPU, cores on a CPU
    clock_mhz: float = 0.0  # max SM clock on a GPU; nominal (TSC) clock on a CPU
    mem_clock_mhz: float = 0.0
    driver: str = ""
    cuda: str = ""
    torch: str = ""
    threads: int = 0
    cache_bytes: int = 0  # L2 (GPU) or L3 (CPU)
    isa: list[str] = field(default_factory=list)  # CPU: avx512*, amx*; torch's capability
    cpu_capability: str = ""
    nvlink: dict = field(default_factory=dict)  # GPU index -> active NVLink links
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)


def _torch():
    try:
        import torch
        return torch
    except ImportError:
        return None


def discover(prefer: str = "auto") -> DeviceInfo:
    """The GPU when one is usable (``prefer`` "auto" or "cuda"), else the CPU. Never raises."""
    if prefer in ("auto", "cuda"):
        info = _discover_cuda()
        if info is not None:
            return info
    info = _discover_cpu()
    if prefer == "cuda":
        info.notes.append("no usable CUDA device: fell back to the CPU")
    return info


def _discover_cuda() -> DeviceInfo | None:
    torch = _torch()
    notes = []
    nv = {}
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            n = pynvml.nvmlDeviceGetCount()
            h = pynvml.nvmlDeviceGetHandleByIndex(0)
            name = pynvml.nvmlDeviceGetName(h)
            nv = dict(
                name=name.decode() if isinstance(name, bytes) else name, count=n,
                memory_bytes=int(pynvml.nvmlDeviceGetMemoryInfo(h).total),
                clock_mhz=float(_nvml_try(lambda: pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_SM), 0)),
                mem_clock_mhz=float(_nvml_try(lambda: pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_MEM), 0)),
                driver=_s(_nvml_try(pynvml.nvmlSystemGetDriverVersion, "")),
            )
            cv = _nvml_try(pynvml.nvmlSystemGetCudaDriverVersion, 0)
            nv["cuda_driver"] = f"{cv // 1000}.{cv % 1000 // 10}" if cv else ""
            links = {}
            for i in range(n):
                hi = pynvml.nvmlDeviceGetHandleByIndex(i)
                active = 0
                for link in range(18):
                    try:
                        active += int(pynvml.nvmlDeviceGetNvLinkState(hi, link) == pynvml.NVML_FEATURE_ENABLED)
                    except pynvml.NVMLError:
                        break
                if active:
                    links[str(i)] = active
            nv["nvlink"] = links
        finally:
            pynvml.nvmlShutdown()
    except ImportError:
        notes.append("nvidia-ml-py not installed")
    except Exception as err:  # pynvml.NVMLError and subclasses (no driver / no GPU)
        notes.append(f"NVML unavailable: {type(err).__name__}")
    if torch is None or not torch.cuda.is_available():
        return None
    props = torch.cuda.get_device_properties(0)
    return DeviceInfo(
        kind="cuda", name=nv.get("name", props.name), count=nv.get("count", torch.cuda.device_count()),
        memory_bytes=nv.get("memory_bytes", int(props.total_memory)), compute_units=int(props.multi_processor_count),
        clock_mhz=nv.get("clock_mhz", 0.0), mem_clock_mhz=nv.get("mem_clock_mhz", 0.0),
        driver=nv.get("driver", ""), cuda=torch.version.cuda or nv.get("cuda_driver", ""), torch=torch.__version__,
        threads=torch.get_num_threads(), cache_bytes=int(getattr(props, "L2_cache_size", 0) or 0),
        nvlink=nv.get("nvlink", {}), notes=notes,
    )


def _nvml_try(fn, default):
    try:
        return fn()
    except Exception:
        return default


def _s(v) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def _discover_cpu() -> DeviceInfo:
    torch = _torch()
    text = _read("/proc/cpuinfo")
    model = _first(r"^model name\s*:\s*(.+)$", text) or platform.processor() or "unknown CPU"
    flags = (_first(r"^flags\s*:\s*(.+)$", text) or "").split()
    mhz = float(_first(r"^cpu MHz\s*:\s*([\d.]+)", text) or 0.0)
    family, cpu_model = _first(r"^cpu family\s*:\s*(\d+)", text), _first(r"^model\s*:\s*(\d+)", text)
    mem = _first(r"^MemTotal:\s*(\d+) kB", _read("/proc/meminfo"))
    l3 = _read("/sys/devices/system/cpu/cpu0/cache/index3/size").strip()
    notes = []
    if family and cpu_model:
        notes.append(f"cpu family {family} model {cpu_model}")
    if "hypervisor" in flags:
        notes.append("virtual machine (hypervisor flag)")
    cores = os.cpu_count() or 1
    return DeviceInfo(
        kind="cpu", name=model.strip(), count=1, memory_bytes=int(mem) * 1024 if mem else 0,
        compute_units=cores, clock_mhz=mhz, torch=getattr(torch, "__version__", ""),
        threads=torch.get_num_threads() if torch else cores, cache_bytes=_size(l3),
        isa=sorted(f for f in flags if f.startswith(("avx512", "amx")) or f in ("avx2", "fma", "avx_vnni")),
        cpu_capability=_cpu_capability(torch), notes=notes,
    )


def _cpu_capability(torch) -> str:
    try:
        return str(torch.backends.cpu.get_cpu_capability())
    except Exception:
        return ""


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""


def _first(pattern: str, text: str) -> str | None:
    m = re.search(pattern, text, re.M)
    return m.group(1) if m else None


def _size(text: str) -> int:
    m = re.match(r"(\d+)\s*([KMG]?)", text)
    if not m:
        return 0
    return int(m.group(1)) * {"": 1, "K": 2**10, "M": 2**20, "G": 2**30}[m.group(2)]


# Catalog entries (simulator/data/hardware) by substrings of the device name; first match wins.
_CATALOG_BY_NAME = [("h200", "h200"), ("b200", "b200"), ("h100 pcie", "h100-pcie"), ("h100", "h100-sxm"),
                    ("l40s", "l40s"), ("l4", "l4"), ("mi325", "mi325x"), ("mi300", "mi300x")]


def catalog_name(info: DeviceInfo) -> str | None:
    """The hardware catalog entry whose peaks the efficiencies of this device divide (None: unknown)."""
    if info.kind == "cpu":
        return "cpu-xeon-2c"
    name = info.name.lower().replace("-", " ")
    if "a100" in name:
        return "a100-80gb" if info.memory_bytes > 50e9 else "a100-40gb"
    for needle, entry in _CATALOG_BY_NAME:
        if needle in name:
            return entry
    return None


def main() -> int:
    info = discover()
    d = info.to_dict()
    d["catalog_entry"] = catalog_name(info)
    print(json.dumps(d, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
