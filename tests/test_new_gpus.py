"""This year's GPUs (issue 48 item 3): B300, GB200 / GB300 NVL72, MI350X / MI355X, RTX PRO 6000 Blackwell,
H20, H100 NVL, GH200; 72-GPU NVLink domains for TP and EP; FP4 (nvfp4 / mxfp4) weights and activations."""
from __future__ import annotations

import pytest

from simulator.cli.predict import main as predict_main
from simulator.errors import PlannerError
from simulator.physics.fabric import alltoall_s, node_split
from simulator.physics.layers import allreduce_s
from simulator.physics.memory import weight_bytes_per_gpu
from simulator.plan.api import predict
from simulator.specs.deployment import make_deployment
from simulator.specs.hardware import DTYPE_BYTES, HARDWARE_DIR, load_hardware
from simulator.specs.models import load_model

NEW = ("b300", "gb200", "gb300", "mi350x", "mi355x", "rtx-pro-6000", "h20", "h100-nvl", "gh200")


@pytest.mark.parametrize("name", NEW)
def test_each_new_gpu_answers_predict(name, capsys):
    # the command the issue asks for: `predict --hardware NAME` answers (exit 0, a K* table)
    rc = predict_main(["--model", "llama-3.1-8b", "--hardware", name, "--draft", "eagle3", "--batch-sizes", "1,8"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert f"llama-3.1-8b on 1 x {name}" in out and "K*" in out


@pytest.mark.parametrize("name", NEW)
def test_every_datasheet_figure_is_sourced(name):
    hw = load_hardware(name)
    assert "datasheet" in hw.source or "specification" in hw.source
    assert hw.peak_fp8_flops_per_s == pytest.approx(2 * hw.peak_bf16_flops_per_s, rel=0.01)  # dense, both
    sources = [k for k in hw.published if k.endswith("_source")]
    for key in hw.published:  # each published figure has a source beside it (mamf_bf16 -> mamf_bf16_source)
        assert key in sources or any(k.split("_")[0] == key.split("_")[0] for k in sources)


def test_datasheet_figures_by_hand():
    # GB200 NVL72 rack figures over 72 GPUs, sparse halved: 1,440 PF FP4 -> 10 PF; 360 PF BF16 -> 2.5 PF;
    # 576 TB/s -> 8 TB/s; NVLink 5 1.8 TB/s per GPU both ways (72 x 1.8 = 129.6, the rack's "130 TB/s")
    # -> 900 GB/s one way; 13.4 TB -> 186 GB
    gb = load_hardware("gb200")
    assert gb.peak_fp4_flops_per_s == 1440e15 / 72 / 2 and gb.peak_bf16_flops_per_s == 360e15 / 72 / 2
    assert gb.hbm_bandwidth_bytes_per_s == pytest.approx(576e12 / 72)
    assert gb.interconnect_bandwidth_bytes_per_s == 1.8e12 / 2 == pytest.approx(130e12 / 72 / 2, rel=0.005)
    assert gb.memory_bytes == pytest.approx(13.4e12 / 72, rel=0.001)
    assert load_hardware("gb300").peak_fp4_flops_per_s == 1080e15 / 72  # GB300: 1,080 PF dense FP4
    assert load_hardware("b300").peak_fp4_flops_per_s == 105e15 / 8  # HGX B300: 105 PF dense FP4 over 8
    # MI355X: 7 Infinity Fabric links x 153.6 GB/s, both directions summed -> 537.6 GB/s one way
    assert load_hardware("mi355x").interconnect_bandwidth_bytes_per_s == pytest.approx(7 * 153.6e9 / 2)
    # H100 NVL: the datasheet's 3,341 TF FP8 is with sparsity
    assert load_hardware("h100-nvl").peak_fp8_flops_per_s == 3341e12 / 2
    # RTX PRO 6000: GDDR7 over PCIe Gen5 x16 (128 GB/s both ways), no NVLink
    rtx = load_hardware("rtx-pro-6000")
    assert rtx.interconnect.startswith("PCIe Gen5") and rtx.interconnect_bandwidth_bytes_per_s == 64e9
    assert rtx.scale_up_domain_gpus is None


def test_h20_plain_decode_at_b1_reads_the_weights_at_hbm_bandwidth():
    # hand: a plain decode step of Llama-3.1-8B at B=1 on H20 (datasheet, efficiency 1) is memory-bound:
    # its GEMMs read every bf16 weight but the embedding table (gathered one row a token) once,
    # (W - V D 2) / 4.0 TB/s = (16.06 GB - 1.05 GB) / 4e12 = 3.75 ms
    p = predict(model="llama-3.1-8b", hardware="h20", calibration="none", batch_sizes=[1])
    sc = p.scenario
    m = sc.model
    weights = weight_bytes_per_gpu(m, sc.deployment)
    assert weights == pytest.approx(16.06e9, rel=0.001)
    hand_s = (weights - m.vocab_size * m.hidden_size * 2) / 4.0e12
    assert hand_s == pytest.approx(3.75e-3, rel=0.002)
    v = p.breakdown(1, 0)
    v = v[v.step == "verify"]
    gemms = v[v.family.isin(["gemm", "lm_head"])]
    assert (gemms.bound == "memory").all()
    assert gemms.memory_ms.sum() / 1e3 == pytest.approx(hand_s, rel=0.002)  # + the 1-token activations
    # the whole kernel time adds attention, norms and launches: within 25% above the weight read
    assert hand_s < v.time_ms.sum() / 1e3 < 1.25 * hand_s


def test_speculation_stops_paying_earlier_on_h20_than_on_h100():
    # H20 has 148 TF bf16 over 4.0 TB/s: a bf16 GEMM of T tokens does ~T FLOPs per weight byte, so the
    # verify pass turns compute-bound at B (K+1) ~ 148e12 / 4e12 = 37 tokens, against 989.4 / 3.35 = 295
    # on H100 SXM. Where it is compute-bound, K drafts cost ~K+1 times plain decoding and K* falls to 0.
    # (The issue expected the opposite, "the GPU where speculation pays longest"; the roofline says
    # speculation pays at least as much on H20 at small B and stops ~8x earlier in B.)
    h20, h100 = load_hardware("h20"), load_hardware("h100-sxm")
    assert h20.ridge_point == pytest.approx(37.0) and h100.ridge_point == pytest.approx(295.3, rel=0.001)
    bs = [1, 8, 16, 32, 64, 128, 192]
    gain = {}
    for hw in ("h20", "h100-sxm"):
        t = predict(model="llama-3.1-8b", hardware=hw, draft="eagle3", calibration="none", learned=False,
                    batch_sizes=bs).table  # the roofline alone
        gain[hw] = dict(zip(t.batch_size.astype(int), t.speedup_vs_plain.astype(float)))
    # at B=1 both are memory-bound: speculation pays alike (EAGLE-3 preset, K*=4: ~1.95x)
    assert gain["h20"][1] == pytest.approx(gain["h100-sxm"][1], rel=0.03) and gain["h20"][1] > 1.9
    # the last batch size where speculation gains more than 5%: 32 on H20, beyond 192 on H100
    last = {hw: max(b for b, g in gain[hw].items() if g > 1.05) for hw in gain}
    assert last["h20"] == 32 and last["h100-sxm"] == 192
    # at B=64 with K=3, 256 tokens: past H20's ridge (compute-bound), below H100's (memory-bound)
    for hw, bound in (("h20", "compute"), ("h100-sxm", "memory")):
        d = predict(model="llama-3.1-8b", hardware=hw, draft="eagle3", calibration="none", learned=False,
                    batch_sizes=[64]).breakdown(64, 3)
        assert d[(d.step == "verify") & (d.op == "mlp_gate_up")].bound.iloc[0] == bound


# --- 72-GPU NVLink domains ------------------------------------------------------------------------

def test_nvl72_tp16_stays_on_nvlink_at_nvlink5_bandwidth():
    gb = load_hardware("gb200")
    assert gb.scale_up_domain_gpus == 72 and node_split(gb, 16) == (1, 16) and node_split(gb, 72) == (1, 72)
    # hand: an all-reduce of S = 16384 B (one Llama-70B token, bf16) over 16 GPUs of one NVL72 domain:
    # 3 us + 2 (15/16) S / 900 GB/s; no inter-node stage
    S = 16384.0
    assert allreduce_s(S, 16, gb) == pytest.approx(3e-6 + 2 * 15 / 16 * S / 900e9)
    t16 = predict(model="llama-3.1-70b", hardware="gb200", tp=16, calibration="none", batch_sizes=[1])
    assert not t16.scenario.warnings
    d = t16.breakdown(1, 0)
    ar = d[(d.step == "verify") & (d.op == "allreduce")].time_ms.iloc[0]
    # 80 layers x 2 all-reduces, each one kernel launch (2 us, assumed) beside it; no fabric stage
    assert ar == pytest.approx(160 * (allreduce_s(S, 16, gb) + gb.launch_overhead_s) * 1e3, rel=1e-6)


def test_nvl72_ep32_accepted_on_gb200_beyond_a_domain_elsewhere():
    # DeepSeek-V3 (128 heads, 256 experts) at TP = EP = 32: one NVLink domain on GB200 / GB300
    for hw in ("gb200", "gb300"):
        p = predict(model="deepseek-v3", hardware=hw, tp=32, ep=32, calibration="none", batch_sizes=[1])
        assert p.scenario.deployment.ep == 32 and not p.scenario.warnings
    # the dispatch all-to-all of 1 MB per rank over 32 GPUs of one domain: 3 us + 31/32 MB / 900 GB/s, net 0
    assert alltoall_s(1e6, 32, load_hardware("gb200")) == pytest.approx((3e-6 + 31 / 32 * 1e6 / 900e9, 0.0))
    # an 8-GPU NVLink domain: H100 SXM prices the same group across 4 nodes over InfiniBand, with a caveat;
    # H20 and MI355X (no inter-node fabric in their files) refuse it with the domain size
    with pytest.warns(UserWarning):
        h100 = predict(model="deepseek-v3", hardware="h100-sxm", tp=32, ep=32, calibration="none", batch_sizes=[1])
    assert any("spans 4 NVLink4 domains of 8 GPUs" in w for w in h100.scenario.warnings)
    for hw in ("h20", "mi355x"):
        with pytest.raises(PlannerError, match=r"tp = 16 on .* spans 2 nodes of 8 GPUs.*tp <= 8"):
            predict(model="llama-3.1-70b", hardware=hw, tp=16)


def test_gh200_is_one_superchip_per_node():
    with pytest.raises(PlannerError, match=r"tp = 2 on gh200 spans 2 nodes of 1 GPUs"):
        predict(model="llama-3.1-8b", hardware="gh200", tp=2)


# --- FP4 ------------------------------------------------------------------------------------------

def test_fp4_weight_bytes_halve_fp8_plus_block_scales():
    # hand: E2M1 values are 4 bits, half an fp8 byte; nvfp4 adds one 8-bit scale per 16 values
    # (4.5 bits), mxfp4 one per 32 (4.25 bits)
    assert DTYPE_BYTES["nvfp4"] == 0.5 * DTYPE_BYTES["fp8"] + 1 / 16
    assert DTYPE_BYTES["mxfp4"] == 0.5 * DTYPE_BYTES["fp8"] + 1 / 32
    # the embedding and LM head stay bf16 beside either (2 x 128256 x 8192 x 2 bytes over TP 8): the rest scales
    m = load_model("llama-3.1-70b")
    head = 2 * 128256 * 8192 * 2 / 8
    fp8 = weight_bytes_per_gpu(m, make_deployment(8, weight_dtype="fp8"))
    for fmt, bits in (("nvfp4", 4.5), ("mxfp4", 4.25)):
        assert weight_bytes_per_gpu(m, make_deployment(8, weight_dtype=fmt)) == pytest.approx(
            (fp8 - head) * bits / 8 + head, rel=1e-12)


def test_fp4_tensor_cores_peak_where_the_datasheet_lists_the_format():
    b200, mi355x, h100 = load_hardware("b200"), load_hardware("mi355x"), load_hardware("h100-sxm")
    assert b200.peak_flops_per_s("nvfp4", "nvfp4") == 9000e12  # HGX B200: 72 PF dense FP4 / 8
    assert b200.peak_flops_per_s("nvfp4", "bf16") == b200.peak_bf16_flops_per_s  # weight-only: bf16 math
    assert mi355x.peak_flops_per_s("mxfp4", "mxfp4") == 10066.3e12
    assert h100.peak_flops_per_s("nvfp4", "bf16") == h100.peak_bf16_flops_per_s


def test_fp4_compute_bound_verify_runs_at_the_fp4_peak():
    # hand: Llama-3.1-8B mlp_gate_up at B=256, K=3 on B300 (datasheet): T = 1024 tokens,
    # F = 2 T n k = 2 x 1024 x 28672 x 4096 per layer; at the nvfp4 peak 13.125 PF, 4x the bf16 one
    for act, peak in (("bf16", 2250e12), ("nvfp4", 13125e12)):
        p = predict(model="llama-3.1-8b", hardware="b300", dtype="nvfp4", act_dtype=act, calibration="none",
                    batch_sizes=[256])
        d = p.breakdown(256, 3)
        row = d[(d.step == "verify") & (d.op == "mlp_gate_up")].iloc[0]
        assert row.compute_ms / 1e3 == pytest.approx(32 * 2 * 1024 * 28672 * 4096 / peak, rel=1e-6)


def test_fp4_refused_with_one_line_naming_the_gpu(capsys):
    base = ["--model", "llama-3.1-8b", "--batch-sizes", "1"]
    rc = predict_main(base + ["--hardware", "h100-sxm", "--dtype", "nvfp4", "--act-dtype", "nvfp4"])
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert rc == 2 and len(lines) == 1 and lines[0].startswith("error:")
    assert "not supported on h100-sxm (H100-SXM5-80GB: has no FP4 tensor cores)" in lines[0]
    assert "b200" in lines[0] and "gb200" in lines[0] and "--act-dtype bf16" in lines[0]
    # MI355X runs MXFP4 but not NVFP4; mxfp4 there answers
    assert predict_main(base + ["--hardware", "mi355x", "--dtype", "nvfp4", "--act-dtype", "nvfp4"]) == 2
    assert "mi355x (MI355X-288GB: runs only mxfp4)" in capsys.readouterr().err
    assert predict_main(base + ["--hardware", "mi355x", "--dtype", "mxfp4", "--act-dtype", "mxfp4"]) == 0
    capsys.readouterr()
    # FP4 activations need weights of the same format
    assert predict_main(base + ["--hardware", "b200", "--act-dtype", "nvfp4"]) == 2
    assert "need nvfp4 weights" in capsys.readouterr().err
    # weight-only FP4 (bf16 activations) is dequantized into bf16 math: it runs on H100 as mxfp4 always has
    assert predict_main(base + ["--hardware", "h100-sxm", "--dtype", "nvfp4"]) == 0


def test_hardware_file_fp4_keys_go_together(tmp_path):
    text = (HARDWARE_DIR / "h20.toml").read_text()
    bad = tmp_path / "h20-fp4.toml"
    bad.write_text(text.replace('kind = "gpu"', 'kind = "gpu"\nfp4_formats = ["nvfp4"]'))
    with pytest.raises(PlannerError, match="together"):
        load_hardware(str(bad))
    bad.write_text(text.replace('kind = "gpu"', 'kind = "gpu"\nfp4_formats = ["fp4"]\npeak_fp4_flops_per_s = 1e15'))
    with pytest.raises(PlannerError, match="fp4_formats"):
        load_hardware(str(bad))


def test_catalog_says_what_each_new_gpu_rests_on(capsys):
    from simulator.cli.catalog import main as catalog_main
    assert catalog_main(["hardware"]) == 0
    rows = {ln.split()[0]: ln for ln in capsys.readouterr().out.splitlines() if ln and not ln.startswith("#")}
    assert set(NEW) <= set(rows)
    # measured kernel tables where aiconfigurator-core 0.12.0 measured the part (calibration.import_tables);
    # else a [published] MAMF row: the published prior; none: the datasheet alone
    for name in ("b300", "gb200", "gb300", "rtx-pro-6000"):
        assert "measured kernel tables (sglang-0.5.14, trtllm-1.3.0rc20, vllm-0.24.0)" in rows[name]
    for name in ("mi355x", "gh200"):
        assert "published prior" in rows[name]
    for name in ("mi350x", "h20", "h100-nvl"):
        assert "datasheet only" in rows[name]
    assert "72/domain" in rows["gb200"] and "fp4: nvfp4/mxfp4" in rows["gb200"] and "fp4: mxfp4" in rows["mi355x"]
    assert "no fp4" in rows["h20"] and "PCIe Gen5" in rows["rtx-pro-6000"]


def test_reference_csv_and_docs_table_hold_the_same_figures():
    # docs/gpu_datasheets.csv collects each datasheet row with its source; docs/physics.md's table shows
    # the fp4 peak and the NVLink domain of each file
    import csv
    from pathlib import Path
    repo = Path(__file__).resolve().parent.parent
    names = {"B300-SXM-288GB": "b300", "GB200-NVL72-186GB": "gb200", "GB300-NVL72-279GB": "gb300",
             "GH200-144GB": "gh200", "H100-NVL-94GB": "h100-nvl", "H20-96GB": "h20",
             "RTX-PRO-6000-Blackwell-Server-96GB": "rtx-pro-6000", "MI350X-288GB": "mi350x", "MI355X-288GB": "mi355x"}
    rows = {r["name"]: r for r in csv.DictReader(ln for ln in (repo / "docs" / "gpu_datasheets.csv").open()
                                                 if not ln.startswith("#"))}
    assert set(names) <= set(rows)
    for label, name in names.items():
        r, hw = rows[label], load_hardware(name)
        assert r["source"]
        assert hw.peak_bf16_flops_per_s == pytest.approx(float(r["bf16_tflops"]) * 1e12)
        assert hw.peak_fp8_flops_per_s == pytest.approx(float(r["fp8_tflops"]) * 1e12)
        assert hw.hbm_bandwidth_bytes_per_s == pytest.approx(float(r["hbm_gb_s"]) * 1e9)
        assert hw.memory_bytes == pytest.approx(float(r["memory_gb"]) * 1e9)
        assert hw.interconnect_bandwidth_bytes_per_s == pytest.approx(float(r["link_gb_s_bidir"]) * 1e9 / 2)
        assert (hw.peak_fp4_flops_per_s or 0) == pytest.approx(float(r["fp4_tflops"] or 0) * 1e12)
    table = {ln.split("|")[1].strip().strip("`"): [c.strip() for c in ln.split("|")[2:-1]]
             for ln in (repo / "docs" / "physics.md").read_text().splitlines() if ln.startswith("| `")}
    for name in names.values():
        hw = load_hardware(name)
        fp4, domain = table[name][8], table[name][9]
        peak = float(fp4.split()[0]) * 1e12 if fp4 != "-" else None
        assert peak == (pytest.approx(hw.peak_fp4_flops_per_s) if hw.fp4_formats else None)
        assert domain == str(hw.scale_up_domain_gpus or "-")


def test_rtx_pro_6000_tp_goes_over_pcie():
    # no NVLink: a TP 2 all-reduce of S = 8192 B (one Llama-8B token, bf16) over PCIe Gen5 x16,
    # NCCL's small-message time (24 us measured on 8 of these cards) + 2 (1/2) S / 64 GB/s
    rtx = load_hardware("rtx-pro-6000")
    assert rtx.interconnect_latency_s == rtx.published["allreduce_small_latency_s"] == pytest.approx(24e-6, rel=0.01)
    assert allreduce_s(8192.0, 2, rtx) == pytest.approx(rtx.interconnect_latency_s + 8192.0 / 64e9)
    # the published 8-GPU NCCL busbw (41.1 GB/s) is below the datasheet link (64 GB/s one way)
    assert rtx.published["allreduce_busbw_8gpu_bytes_per_s"] < rtx.interconnect_bandwidth_bytes_per_s
    p = predict(model="llama-3.1-70b", hardware="rtx-pro-6000", tp=2, calibration="none", batch_sizes=[1])
    d = p.breakdown(1, 0)
    assert d[(d.step == "verify") & (d.op == "allreduce")].time_ms.iloc[0] == pytest.approx(
        160 * (allreduce_s(16384.0, 2, rtx) + rtx.launch_overhead_s) * 1e3, rel=1e-6)


def test_sizing_makes_fp4_variants_only_where_the_tensor_cores_run_them():
    from simulator.sizing.candidate import candidate_scenario
    from simulator.sizing.spec import _parse_candidates
    from simulator.specs.scenario import load_scenario
    sc = load_scenario("sizing-dense-command-a")
    cands = _parse_candidates(sc, {}, ["h100-sxm", "b200", "mi355x"], [8], ["", "nvfp4", "mxfp4"])
    assert {(c.hardware, c.dtype) for c in cands} == {
        ("h100-sxm", ""), ("b200", ""), ("b200", "nvfp4"), ("b200", "mxfp4"), ("mi355x", ""), ("mi355x", "mxfp4")}
    dep = candidate_scenario(sc, next(c for c in cands if c.dtype == "nvfp4")).deployment
    assert (dep.weight_dtype, dep.act_dtype) == ("nvfp4", "nvfp4")
    with pytest.raises(PlannerError, match="dtypes entries must be"):
        _parse_candidates(sc, {}, ["b200"], [8], ["fp4"])
