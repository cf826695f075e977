"""What the corpus's sources leave unsaid (device variant, engine version, KV dtype, random weights),
read from ``calibration/data/published/sources.toml`` where each fact sits beside its citation."""
from __future__ import annotations

import tomllib
from pathlib import Path

SOURCES_FILE = Path(__file__).resolve().parent / "data" / "published" / "sources.toml"


def load_sources(path: Path = SOURCES_FILE) -> dict:
    """The tables of calibration.transfer: ``devices`` (corpus device -> (catalog hardware, why)),
    ``a100_by_source``, ``source_engines`` (source -> (engine or None, version or None)) and the
    source tuples ``fp8_kv_with_fp8_weights`` and ``random_weight_sources``."""
    raw = tomllib.loads(path.read_text())
    return {
        "devices": {name: (d["hardware"], d.get("why", "")) for name, d in raw["devices"].items()},
        "a100_by_source": dict(raw["a100_by_source"]),
        "source_engines": {src: (e.get("engine"), e.get("version")) for src, e in raw["source_engines"].items()},
        "fp8_kv_with_fp8_weights": tuple(raw["fp8_kv_with_fp8_weights"]),
        "random_weight_sources": tuple(raw["random_weight_sources"]),
    }
