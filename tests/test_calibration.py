"""Calibration: device discovery, microbenchmarks (resume), fitting, held-out check, CLI errors.

Anchors: hand (the envelope), measured (the shipped raw samples of this CPU, calibration/data),
behavioural (resume, error messages).
"""
from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from calibration import device as devmod
from calibration.fit import _upper_hull, fit_raw, predict, sample_table
from calibration.microbench import MODES, build_plan, run_plan
from calibration.rawio import read_raw
from simulator.specs.hardware import load_hardware
from simulator.specs.models import load_model
from simulator.specs.profile import load_profile, profile_from_dict
from cli_inprocess import run_main

REPO = Path(__file__).resolve().parent.parent
DATA = REPO / "calibration" / "data"
RAW = DATA / "cpu-xeon-2c.raw.csv"
PROFILE = DATA / "cpu-xeon-2c.profile.json"
PY = sys.executable


def _cli(module, *args, cwd=REPO):
    return run_main(module, *args, cwd=cwd)


# --- device discovery ------------------------------------------------------------------------

def test_device_discovery_falls_back_to_cpu(monkeypatch):
    pynvml = pytest.importorskip("pynvml")

    def no_library():
        raise pynvml.NVMLError_LibraryNotFound()
    monkeypatch.setattr(pynvml, "nvmlInit", no_library)
    info = devmod.discover("cuda")  # asks for a GPU, none here: no exception, the CPU instead
    assert info.kind in ("cpu", "cuda")
    if info.kind == "cpu":
        assert info.compute_units >= 1 and info.memory_bytes > 0 and info.name
        assert devmod.catalog_name(info) == "cpu-xeon-2c"
        assert "fell back" in " ".join(info.notes)


def test_catalog_name_for_gpus():
    gpu = devmod.DeviceInfo(kind="cuda", name="NVIDIA H200", memory_bytes=141e9)
    assert devmod.catalog_name(gpu) == "h200"
    assert devmod.catalog_name(replace(gpu, name="NVIDIA A100-SXM4-40GB", memory_bytes=40e9)) == "a100-40gb"
    assert devmod.catalog_name(replace(gpu, name="Some Future GPU")) is None


# --- microbenchmarks: raw samples and resume -------------------------------------------------

TINY = replace(MODES["tiny"], m_values=(1, 8), bw_sizes=(64 * 1024,), bw_rounds=1, attn_q=(1,),
               moe_experts=(2,), moe_tokens=(1,), quiet_wait_s=0.0)


def _tiny_plan():
    return build_plan(TINY, load_model("smollm2-135m"), load_model("qwen3-30b-a3b"), "fp32", extra_m=(3,),
                      peak_flops=268.8e9)


def test_microbench_resume_after_kill(tmp_path):
    plan = _tiny_plan()
    keys = [p.key for p in plan]
    assert len(keys) == len(set(keys)) and any("M=3|" in k for k in keys)  # the extra M is planned
    raw = tmp_path / "t.raw.csv"
    meta = {"device_name": "test-cpu", "device_kind": "cpu", "dtype": "fp32", "hardware": "cpu-xeon-2c"}
    n1 = run_plan(plan, raw, meta, TINY, "cpu", cache_bytes=4 << 20, progress=False, stop_after=4)
    first = read_raw(raw)
    assert n1 == 4 and [r["key"] for r in first] == keys[:4]
    with raw.open("a") as f:  # the kill hit mid-row: a half-written line
        f.write("gemm|attn_o|fp32|M=8|N=576,gemm,attn_o,ge")
    n2 = run_plan(plan, raw, meta, TINY, "cpu", cache_bytes=4 << 20, progress=False)
    rows = read_raw(raw)
    assert n2 == len(plan) - 4
    assert sorted(r["key"] for r in rows) == sorted(keys)  # nothing lost, nothing twice
    assert rows[:4] == first  # earlier samples kept as they were
    assert all(r["median_s"] > 0 and r["repeats"] >= 1 for r in rows)
    # a third run measures nothing
    assert run_plan(plan, raw, meta, TINY, "cpu", cache_bytes=4 << 20, progress=False) == 0
    # samples of another device never go into the same file
    with pytest.raises(Exception, match="device_name"):
        run_plan(plan, raw, meta | {"device_name": "other"}, TINY, "cpu", cache_bytes=4 << 20, progress=False)


def test_gemm_point_formulas():  # hand: F = 2*M*N*K, bytes = N*K*w + M*(N+K)*a
    p = next(p for p in _tiny_plan() if p.key.startswith("gemm|mlp_down") and p.M == 8)
    assert (p.N, p.K) == (576, 1536)
    assert p.flops == 2 * 8 * 576 * 1536
    assert p.bytes == 576 * 1536 * 4 + 8 * (576 + 1536) * 4


# --- fitting ----------------------------------------------------------------------------------

def test_upper_hull_hand():
    x = np.array([0.0, 1.0, 2.0, 3.0, 3.0])
    y = np.array([1.0, 0.5, 2.2, 1.0, 2.5])  # (1, 0.5) lies under the chord; x=3 keeps its max
    hx, hy = _upper_hull(x, y)
    assert list(hx) == [0.0, 2.0, 3.0] and list(hy) == [1.0, 2.2, 2.5]


@pytest.fixture(scope="module")
def shipped_fit():
    if not RAW.exists():
        pytest.skip("no shipped raw samples")
    return fit_raw(RAW)


def test_shipped_profile_loads():
    prof = load_profile(PROFILE)
    assert prof.hardware == "cpu-xeon-2c"
    load_hardware(prof.hardware)
    for key in ("gemm", "lm_head", "attention", "moe"):
        assert key in prof.compute
    for key in ("default", "elementwise", "attention", "gemm"):
        assert key in prof.memory
    assert 0 < prof.launch_overhead_s < 1e-4
    pv = prof.provenance
    assert pv["raw_samples"] == "calibration/data/cpu-xeon-2c.raw.csv" and (REPO / pv["raw_samples"]).exists()
    assert pv["torch"] and pv["date"] and pv["code_version"] and pv["dtype"] == "fp32"
    assert PROFILE.stat().st_size < 2e6 and RAW.stat().st_size < 2e6


def test_fit_reproduces_its_samples_within_spread(shipped_fit):
    # measured anchor: the shipped raw samples. GEMM and bandwidth curves pass through their points;
    # attention and MoE put several samples on one knot, so they get a looser bound.
    prof = profile_from_dict(shipped_fit, "<fit>")
    hw = load_hardware("cpu-xeon-2c")
    s = sample_table(read_raw(RAW))
    pred = predict(prof, hw, s, "fp32")
    band = np.maximum(s.hi - s.lo, 0.01 * s.t)
    exact = s.group.isin(["gemm", "lm_head", "bandwidth", "bandwidth_copy"]).to_numpy()
    # a sample faster than its launch overhead cannot be reached by any efficiency (t >= n * tau)
    exact = exact & (s.t > 1.5 * s.n_kernels * prof.launch_overhead_s).to_numpy()
    assert np.all(np.abs(pred - s.t)[exact] <= band[exact])
    rel = np.abs(pred / s.t - 1)[~exact]
    assert np.median(rel) < 0.25


def test_heldout_calibrated_beats_roofline(shipped_fit):
    h = shipped_fit["heldout_error"]
    for fam in ("gemm", "lm_head", "bandwidth", "bandwidth_copy", "attention"):
        assert h[fam]["calibrated"]["median_pct"] < h[fam]["roofline"]["median_pct"], fam
    pv = load_profile(PROFILE).provenance
    if pv.get("load_average_median", 0) <= 2:  # target on this CPU, when it was measured idle
        for fam in ("gemm", "bandwidth"):
            assert h[fam]["calibrated"]["median_pct"] <= 10.0, (fam, h[fam])
    stored = load_profile(PROFILE).raw["heldout_error"]
    assert set(stored) == set(h)


def test_gemm_efficiency_lower_at_small_m():
    # measured: at M=1 a GEMM streams its weights and does 2 FLOP per weight; large M reuses them
    prof = load_profile(PROFILE)
    for op in ("gemm", "attn_qkv", "attn_o", "mlp_gate_up", "mlp_down", "lm_head"):
        assert prof.compute_efficiency(op, "gemm", 1) < 0.5 * prof.compute_efficiency(op, "gemm", 256), op


# --- CLI boundary: one line on stderr, exit 2 ------------------------------------------------

def _assert_clean_error(r, needle):
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and needle in r.stderr, r.stderr


def test_cli_bad_profiles(tmp_path):
    corrupt = tmp_path / "corrupt.json"
    corrupt.write_text('{"format": "dsd-planner-profile", "format_ver')
    _assert_clean_error(_cli("calibration.show", str(corrupt)), "not valid JSON")
    old = tmp_path / "old.json"
    old.write_text(json.dumps(json.loads(PROFILE.read_text()) | {"format_version": 0}))
    _assert_clean_error(_cli("calibration.show", str(old)), "format_version")
    _assert_clean_error(_cli("calibration.show", str(PROFILE), "--hardware", "h200"), "not 'h200'")
    ok = _cli("calibration.show", str(PROFILE), "--hardware", "cpu-xeon-2c")
    assert ok.returncode == 0 and "held-out" in ok.stdout and "% peak" in ok.stdout


def test_cli_bad_inputs(tmp_path):
    _assert_clean_error(_cli("calibration.fit", str(tmp_path / "missing.csv"), "-o", str(tmp_path / "p.json")),
                        "not found")
    junk = tmp_path / "junk.csv"
    junk.write_text("a,b,c\n1,2,3\n")
    _assert_clean_error(_cli("calibration.fit", str(junk), "-o", str(tmp_path / "p.json"), "--hardware",
                             "cpu-xeon-2c"), "not a calibration raw sample file")
    _assert_clean_error(_cli("calibration.fit", str(RAW), "-o", str(tmp_path / "p.json"), "--hardware", "h200"),
                        "h200")
    _assert_clean_error(_cli("calibration.run", "--mode", "tiny", "--model", "no-such-model", "--output-dir",
                             str(tmp_path)), "unknown model")


def test_allreduce_samples_fit_a_collective_table_of_their_own():
    # hand: t = alpha + 2 (g-1)/g S / busBW with alpha = 20 us, busBW = 100 GB/s, g = 8 GPUs
    from calibration.fit import collectives_from_rows
    from simulator.specs.surfaces import collective_time_s
    sizes = [2.0 ** k for k in range(12, 31, 2)]
    rows = [{"bench": "allreduce", "experts": 8, "bytes": s, "median_s": 20e-6 + 1.75 * s / 100e9} for s in sizes]
    table = collectives_from_rows(rows)
    ent = table["all_reduce_nccl"]["8"]
    assert ent["alpha_s"] == pytest.approx(20e-6, rel=1e-3)
    assert ent["bus_bandwidth_bytes_per_s"] == pytest.approx(100e9, rel=1e-3)
    assert collective_time_s(table, 8, 2.0 ** 20, op="all_reduce_nccl") == pytest.approx(20e-6 + 1.75 * 2 ** 20 / 100e9,
                                                                             rel=1e-4)  # stored to 5 digits
