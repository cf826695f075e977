"""All-reduce tables fitted to the scenario's server: PCIe topology (published nccl-tests runs) and a
user's measured bus bandwidth. Anchors: the published numbers in simulator/data/pcie_allreduce.toml
and the shipped L40S / H100 tables, by hand."""
from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest

from simulator.specs.collectives import median_server, pcie_generation, published_pcie_servers
from simulator.specs.scenario import build_scenario
from simulator.specs.surfaces import collective_time_s
from cli_inprocess import run_main

ROOT = Path(__file__).resolve().parents[1]
L40S_TABLE = json.loads((ROOT / "simulator/data/profiles/l40s.trtllm-1.3.0rc20.profile.json").read_text())
pytestmark = pytest.mark.tables


def scenario(hardware: str, tp: int, **hw):
    raw = {"model": {"name": "llama-2-70b"}, "hardware": {"name": hardware, "tp": tp, **hw},
           "precision": {"weights": "fp8"}, "engine": {"name": "trtllm"}, "workload": {"batch_sizes": [1]}}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return build_scenario(raw)


def all_reduce_s(sc, gpus: int, nbytes: float) -> float:
    return float(collective_time_s(sc.profile.collectives, gpus, nbytes, op="all_reduce"))


def test_published_runs_match_their_bus_bandwidth():
    # busbw = 2 (g-1)/g * bytes / time, as nccl-tests prints it: 14.45 GB/s (chlc blog, P2P off, 128 MB)
    runs = {s["name"]: s for s in published_pcie_servers()}
    assert runs["8x RTX 4090, dual EPYC 7542, P2P off"]["bus_bandwidth"] == pytest.approx(14.45e9, rel=2e-3)
    assert runs["4x RTX 4090, P2P on"]["bus_bandwidth"] == pytest.approx(25.27e9, rel=2e-3)
    assert pcie_generation("PCIe Gen4 x16") == 4 and pcie_generation("NVLink4") is None


def test_median_server_by_gpu_count():
    # 8 GPUs: {table 1.8, 14.45, 20.64} -> the P2P-off server; 4 GPUs: {2.57, table 5.0, 25.27} -> the table
    eight = median_server(1.8e9, 8, 4)
    assert eight is not None and eight["name"].endswith("P2P off")
    assert median_server(5.0e9, 4, 4) is None
    assert median_server(30e9, 8, 4)["name"].endswith("P2P on")  # a fast table is the top: median is below it
    assert median_server(1.8e9, 8, 5) is None  # no published Gen5 run: the table stands


def test_l40s_tp8_all_reduce_is_priced_as_the_median_published_server():
    sc = scenario("l40s", 8)
    # 4 MiB over 8 GPUs: the published P2P-off run took 580.8 us; the table's own server about 6.2 ms
    table = float(collective_time_s(L40S_TABLE["collectives"], 8, 4194304, op="all_reduce"))
    assert table > 5e-3
    assert all_reduce_s(sc, 8, 4194304) == pytest.approx(580.8e-6, rel=1e-3)
    # below the published run's smallest message (1 MiB) the table stands, capped at that message's
    # time (a smaller message can pad to a larger one): 16 KiB stays the table's; 512 KiB <= 222.8 us
    assert all_reduce_s(sc, 8, 16384) == pytest.approx(
        float(collective_time_s(L40S_TABLE["collectives"], 8, 16384, op="all_reduce")), rel=1e-6)
    assert all_reduce_s(sc, 8, 524288) <= 222.8e-6 * (1 + 1e-6)
    assert "median published PCIe Gen4 server" in sc.cost_source
    assert any("over PCIe" in w and "median published" in w for w in sc.warnings)


def test_l40s_tp4_keeps_its_table_and_nvlink_is_untouched():
    sc4 = scenario("l40s", 4)
    assert all_reduce_s(sc4, 4, 4194304) == pytest.approx(
        float(collective_time_s(L40S_TABLE["collectives"], 4, 4194304, op="all_reduce")), rel=1e-9)
    # its label says nothing of the 8-GPU table it does not use (it once named the 8-GPU change at TP 4)
    assert "all-reduce" not in sc4.cost_source.split("measured kernel tables")[1].split("; engine")[0]
    h100 = scenario("h100-sxm", 8)
    shipped = json.loads((ROOT / "simulator/data/profiles/h100-sxm.trtllm-1.3.0rc20.profile.json").read_text())
    assert all_reduce_s(h100, 8, 4194304) == pytest.approx(
        float(collective_time_s(shipped["collectives"], 8, 4194304, op="all_reduce")), rel=1e-9)
    assert "all-reduce" not in h100.cost_source.split("measured kernel tables")[1].split("; engine")[0]


def test_given_bus_bandwidth_prices_every_all_reduce():
    # alpha (the table's fitted latency at 8 GPUs) + 2 * 7/8 * 4 MiB / 10 GB/s
    sc = scenario("l40s", 8, interconnect_bandwidth_bytes_per_s=10e9)
    alpha = L40S_TABLE["collectives"]["all_reduce"]["8"]["alpha_s"]
    assert all_reduce_s(sc, 8, 4194304) == pytest.approx(alpha + 1.75 * 4194304 / 10e9, rel=1e-9)
    assert "given 10.0 GB/s" in sc.cost_source
    assert not any("over PCIe" in w for w in sc.warnings)  # the user measured their server


def test_allreduce_busbw_flag():
    run = lambda *a: run_main("simulator.predict", "--model", "llama-2-70b",  # noqa: E731
                              "--hardware", "l40s", "--tp", "8", "--batch-sizes", "1", *a, cwd=ROOT)
    ok = run("--allreduce-busbw", "10")
    assert ok.returncode == 0 and "given 10.0 GB/s bus bandwidth" in ok.stdout
    bad = run("--allreduce-busbw", "0")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "--allreduce-busbw" in bad.stderr
    assert "Traceback" not in bad.stderr


def test_collective_factor_is_the_ring_factor_by_hand():
    """nccl-tests' bus-bandwidth factors (NVIDIA/nccl-tests docs/PERFORMANCE.md): all-reduce 2 (n-1)/n,
    all-gather / reduce-scatter (n-1)/n; an all-to-all keeps the 1/n addressed to itself."""
    from simulator.specs.wire import collective_factor
    assert collective_factor("all_reduce", 8) == 1.75 and collective_factor("all_reduce_nccl", 2) == 1.0
    assert collective_factor("all_gather", 8) == 0.875 and collective_factor("reduce_scatter", 4) == 0.75
    assert collective_factor("all_to_all", 4) == 0.75 and collective_factor("all_reduce", 1) == 0.0
    assert list(collective_factor("all_reduce", np.array([2, 4]))) == [1.0, 1.5]
    with pytest.raises(ValueError, match="unknown collective 'broadcast'"):
        collective_factor("broadcast", 8)


def test_tp_allreduce_sums_the_bf16_residual_stream_whatever_the_gemm_inputs():
    """W8A8 fp8 (and FP4) quantize the GEMMs' inputs, but the GEMMs return bf16 and the TP all-reduce sums that
    bf16 residual stream. Hand: Llama-3.1-70B on 4 x H100, B = 8, K = 0: 2 all-reduces x 80 layers of
    8 tokens x 8192 x 2 bytes, each read and written: 160 x 262,144 B = 41.94 MB (fp8 bytes gave half)."""
    from simulator.physics.layers import decoder_layers_ops, residual_bytes
    from simulator.specs.deployment import Deployment
    from simulator.specs.hardware import load_hardware
    from simulator.specs.models import load_model

    m, hw = load_model("llama-3.1-70b"), load_hardware("h100-sxm")
    for act in ("bf16", "fp8"):
        dep = Deployment(tp=4, weight_dtype="fp8", act_dtype=act)
        ar = next(o for o in decoder_layers_ops(m, dep, hw, np.array([8.0]), np.array([1.0]), 1024.0)
                  if o.name == "allreduce")
        assert float(np.asarray(ar.nbytes).ravel()[0]) * ar.count == pytest.approx(160 * 8 * 8192 * 2 * 2)
    assert residual_bytes("nvfp4") == residual_bytes("fp8") == 2.0 and residual_bytes("fp32") == 4.0
