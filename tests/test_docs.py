"""The docs match the files they describe: docs/physics.md's datasheet table is the hardware catalog,
and no repository file points at the notes folder outside it (../shared)."""
from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def test_physics_doc_datasheet_table_matches_the_catalog():
    """docs/physics.md's datasheet table is what the hardware TOMLs hold (provenance lines cite it)."""
    from simulator.specs.hardware import list_hardware, load_hardware

    text = (REPO / "docs" / "physics.md").read_text()
    rows = {ln.split("|")[1].strip().strip("`"): [c.strip() for c in ln.split("|")[2:-1]]
            for ln in text.splitlines() if ln.startswith("| `")}
    gpus = [n for n in list_hardware() if load_hardware(n).kind == "gpu"]
    assert sorted(rows) == sorted(gpus)
    for name in gpus:
        hw = load_hardware(name)
        _, bf16, fp8, bw, mem = rows[name][:5]
        assert float(bf16) == pytest.approx(hw.peak_bf16_flops_per_s / 1e12, abs=0.05)
        assert fp8 == "-" if hw.peak_fp8_flops_per_s is None else \
            float(fp8) == pytest.approx(hw.peak_fp8_flops_per_s / 1e12, abs=0.05)
        assert float(bw) == pytest.approx(hw.hbm_bandwidth_bytes_per_s / 1e9, abs=0.5)
        assert float(mem) == pytest.approx(hw.memory_bytes / 1e9, abs=0.5)


def test_no_repo_file_points_at_shared():
    hits = []
    for folder in ("simulator", "calibration", "dashboard", "docs", "scenarios"):
        for p in (REPO / folder).rglob("*"):
            if p.suffix in (".py", ".md", ".toml", ".json") and "../shared" in p.read_text(errors="ignore"):
                hits.append(str(p.relative_to(REPO)))
    for p in (REPO / "README.md", REPO / "app.py"):
        if "../shared" in p.read_text() or "shared/reference" in p.read_text():
            hits.append(p.name)
    assert not hits
