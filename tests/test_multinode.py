"""TP / EP groups larger than one NVLink domain: priced with the inter-node fabric, or refused (issue 24 item 3)."""
from __future__ import annotations

import pytest

from simulator.errors import PlannerError
from simulator.physics.fabric import allgather_s, allreduce_fabric_s, alltoall_s, node_split
from simulator.physics.layers import allreduce_s
from simulator.plan.api import predict
from simulator.specs.hardware import check_group_fits, load_hardware

H100 = load_hardware("h100-sxm")


def test_h100_file_cites_its_fabric():
    # DGX H100 datasheet: 8x ConnectX-7 400 Gb/s per node -> 50 GB/s per GPU one direction
    assert H100.scale_up_domain_gpus == 8
    assert H100.scale_out["bandwidth_bytes_per_s"] == 400e9 / 8
    assert "ConnectX-7" in H100.scale_out["source"] and "tuning.cc" in H100.scale_out["source"]
    assert node_split(H100, 16) == (2, 8) and node_split(H100, 8) == (1, 8)


def test_allreduce_fabric_hand():
    # hand: S = 16384 B (one token of Llama-70B, 8192 x bf16) over 16 GPUs = 2 nodes x 8:
    # 2 log2(2) x 5 us + max(0, 2*15/16 * S / (8 * 50e9) - 2*7/8 * S / 450e9)
    S = 16384.0
    bw = 2 * 15 / 16 * S / (8 * 50e9) - 2 * 7 / 8 * S / 450e9
    assert bw == pytest.approx(1.308e-8, rel=1e-3)
    assert allreduce_fabric_s(S, 16, H100) == pytest.approx(10e-6 + bw)
    assert allreduce_fabric_s(S, 8, H100) == 0.0


def test_two_node_bus_bandwidth_matches_published_figure():
    # published: 2-node nccl-tests all_reduce busbw, H100 SXM + NDR: 400-450 GB/s (Saturn Cloud guide),
    # p5.48xlarge ~400+ GB/s (aws-samples). busbw = 2 (N-1)/N S / t at a large message (8 GB)
    S, N = 8e9, 16
    t = allreduce_s(S, 8, H100) + allreduce_fabric_s(S, N, H100)
    busbw = 2 * (N - 1) / N * S / t
    assert 380e9 < busbw < 450e9


def test_alltoall_and_allgather_hand():
    # hand: all-to-all of 1 MB per rank over 16 = 2 x 8: node (3 us + 7/16 MB / 450 GB/s), net (5 us + 8/16 MB / 50 GB/s)
    node, net = alltoall_s(1e6, 16, H100)
    assert node == pytest.approx(3e-6 + 7 / 16 * 1e6 / 450e9)
    assert net == pytest.approx(5e-6 + 8 / 16 * 1e6 / 50e9)
    assert alltoall_s(1e6, 8, H100) == pytest.approx((3e-6 + 7 / 8 * 1e6 / 450e9, 0.0))
    # all-gather of 10 kB shards: 7 from the node over NVLink, 8 from the other node over the NIC
    assert allgather_s(1e4, 16, H100) == pytest.approx(3e-6 + 7e4 / 450e9 + 5e-6 + 8e4 / 50e9)


def test_tp16_step_pays_the_fabric_per_allreduce():
    # hand: Llama-3.1-70B, 80 layers -> 160 all-reduces of 16384 B at B=1, K=0; the node part is the
    # same 8-GPU table at TP 8 and TP 16, so the difference is 160 x the fabric stage
    t8 = predict(model="llama-3.1-70b", hardware="h100-sxm", tp=8, batch_sizes=[1]).breakdown(1, 0)
    t16 = predict(model="llama-3.1-70b", hardware="h100-sxm", tp=16, batch_sizes=[1]).breakdown(1, 0)
    ar = lambda df: float(df[(df.step == "verify") & (df.op == "allreduce")].time_ms.iloc[0])  # noqa: E731
    assert ar(t16) - ar(t8) == pytest.approx(160 * allreduce_fabric_s(16384.0, 16, H100) * 1e3, rel=1e-6)


def test_group_beyond_a_domain_without_fabric_is_refused():
    with pytest.raises(PlannerError, match=r"spans 2 nodes of 8 GPUs.*\[scale_out\]"):
        predict(model="llama-3.1-70b", hardware="mi300x", tp=16)


def test_sizing_rejects_the_same_candidate_with_the_reason():
    from simulator.sizing.candidate import Candidate, candidate_scenario
    from simulator.specs.scenario import load_scenario
    sc = load_scenario("sizing-dense-command-a")
    with pytest.raises(PlannerError, match="no inter-node fabric"):
        candidate_scenario(sc, Candidate("mi300x", 16))
    priced = candidate_scenario(sc, Candidate("h100-sxm", 16))
    assert any("spans 2 NVLink4 domains" in w for w in priced.warnings)


def test_a_hardware_file_without_a_domain_says_a_large_group_is_priced_as_one_server(tmp_path):
    # before: a user's NVLink GPU file without scale_up_domain_gpus priced tp = 16 as one NVLink domain, silently
    from simulator.specs.hardware import SERVER_GPUS, check_group_fits, load_hardware
    f = tmp_path / "my-gpu.toml"
    f.write_text('name = "my-gpu"\nvendor = "nvidia"\nkind = "gpu"\npeak_bf16_flops_per_s = 2250.0e12\n'
                 'peak_fp8_flops_per_s = 4500.0e12\nhbm_bandwidth_bytes_per_s = 7700.0e9\nmemory_bytes = 180.0e9\n'
                 'interconnect = "NVLink5"\ninterconnect_bandwidth_bytes_per_s = 900.0e9\n')
    hw = load_hardware(str(f))
    assert hw.scale_up_domain_gpus is None and SERVER_GPUS == 8
    assert check_group_fits(hw, 8, "tp") is None
    caveat = check_group_fits(hw, 16, "tp")
    assert caveat.startswith("tp = 16 on my-gpu: its hardware file names no scale_up_domain_gpus")
    # a file with a domain keeps its own caveat (an 8-GPU HGX board, 2 nodes)
    assert "spans 2 NVLink4 domains of 8 GPUs" in check_group_fits(load_hardware("h100-sxm"), 16, "tp")


@pytest.mark.parametrize("name", ["h100-nvl", "h100-pcie"])
def test_bridged_pcie_cards_cross_pcie_beyond_the_pair(name):
    # before: both files priced tp = 8 at the bridge's 300 GB/s as one 8-GPU NVLink domain. H100 datasheet (NVL and
    # PCIe columns): 'NVLink: 600GB/s, PCIe Gen5: 128GB/s'; the bridge joins two cards -> a 2-GPU domain at
    # 300 GB/s one direction, PCIe 64 GB/s one direction beyond it (NCCL hwLat PCI Tree/LL 1.0 us per step)
    hw = load_hardware(name)
    assert hw.scale_up_domain_gpus == 2 and hw.interconnect_bandwidth_bytes_per_s == 600e9 / 2
    assert hw.scale_out["bandwidth_bytes_per_s"] == 128e9 / 2 and hw.scale_out["latency_s"] == 1.0e-6
    assert "PCIe Gen5" in hw.scale_out["fabric"] and "128GB/s" in hw.scale_out["source"]
    assert node_split(hw, 2) == (1, 2) and node_split(hw, 8) == (4, 2)
    # hand: S = 16384 B over 8 GPUs = 4 pairs: 2 log2(4) x 1 us + 2*7/8 * S / (2 x 64e9) - 2*1/2 * S / 300e9
    S = 16384.0
    assert allreduce_fabric_s(S, 8, hw) == pytest.approx(4e-6 + 2 * 7 / 8 * S / 128e9 - S / 300e9)
    assert allreduce_fabric_s(S, 2, hw) == 0.0
    caveat = check_group_fits(hw, 8, "tp")
    assert caveat.startswith(f"tp = 8 on {name} spans 4 NVLink bridge domains of 2 GPUs") and "PCIe Gen5" in caveat
    assert check_group_fits(hw, 2, "tp") is None
