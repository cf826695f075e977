"""The silicon check (calibration/silicon.py): rows of aiconfigurator-core's silicon sample made into scenarios.

Hand-built rows in the sample's own columns; no simulation here except one short closed loop (the full
run is `python -m calibration.silicon`, its figures in calibration/data/validation/silicon/silicon.md)."""
from __future__ import annotations

import pandas as pd
import pytest

from calibration import silicon

MAP = silicon.load_map()


def row(**over) -> pd.Series:
    base = {"mode": "agg", "model_path": "meta-llama/Llama-3.1-70B", "system": "h200_sxm", "backend": "trtllm",
            "backend_version": "1.0.0rc3", "gemm_quant_mode": "fp8", "moe_quant_mode": "fp8", "tp_size": 4.0,
            "attention_dp_size": 1.0, "moe_tp_size": 4.0, "moe_ep_size": 1.0, "isl": 1024, "osl": 1024,
            "batch_size": 64.0, "silicon_tpot_ms": 20.0}
    return pd.Series(base | over, name=0)


def test_layouts_the_planner_names_and_the_ones_it_does_not():
    assert silicon.layout_for(row()) == {"tp": 4}
    # experts in EP groups inside the TP group: tp-ep (experts sliced tp / ep = 2 ways in 2 groups)
    assert silicon.layout_for(row(moe_tp_size=2.0, moe_ep_size=2.0)) == {"tp": 4, "ep": 2}
    # DeepSeek-style: attention data-parallel on 8 GPUs, experts over all 8
    assert silicon.layout_for(row(tp_size=1.0, attention_dp_size=8.0, moe_tp_size=1.0, moe_ep_size=8.0)) == \
        {"tp": 8, "layout": "dp-ep", "dp": 8, "ep": 8}
    # 4 attention groups of TP 4, experts over all 16 GPUs: dp-ep with attention TP 16 / 4
    assert silicon.layout_for(row(tp_size=4.0, attention_dp_size=4.0, moe_tp_size=1.0, moe_ep_size=16.0)) == \
        {"tp": 16, "layout": "dp-ep", "dp": 4, "ep": 16}
    # experts sliced 4 ways inside EP groups under data-parallel attention: no planner layout
    assert "no name" in silicon.layout_for(row(tp_size=1.0, attention_dp_size=16.0, moe_tp_size=4.0, moe_ep_size=4.0))
    assert "missing" in silicon.layout_for(row(attention_dp_size=0.0))
    # a dense model: blank expert sizes mean nothing, a blank attention DP is none
    assert silicon.layout_for(row(attention_dp_size=float("nan"), moe_tp_size=0.0, moe_ep_size=0.0),
                              dense_model=True) == {"tp": 4}
    assert "expert" in silicon.layout_for(row(moe_ep_size=0.0))


def test_precisions_follow_the_rows_quantization_modes():
    from simulator.specs.hardware import load_hardware
    h200, b200 = load_hardware("h200"), load_hardware("b200")
    # per-tensor fp8 on TensorRT-LLM: fp8 GEMMs and, with quantized weights, its fp8 KV cache
    assert silicon.precision_for(row(), "llama-3.1-70b", h200, MAP["kv_cache"]) == \
        {"weights": "fp8", "activations": "fp8", "kv_cache": "fp8"}
    # block-scaled fp8 on vLLM: bf16 activations (per-token-group quantized inside the kernel), KV "auto" = bf16
    assert silicon.precision_for(row(backend="vllm", gemm_quant_mode="fp8", moe_quant_mode="fp8_block"),
                                 "deepseek-v3", h200, MAP["kv_cache"]) == \
        {"weights": "fp8", "activations": "bf16", "experts": "fp8", "kv_cache": "bf16"}
    # NVFP4 needs FP4 tensor cores: refused on Hopper, w4a4 with nvfp4 experts on Blackwell
    assert "no FP4" in silicon.precision_for(row(gemm_quant_mode="nvfp4", moe_quant_mode="nvfp4"), "deepseek-v3",
                                             h200, MAP["kv_cache"])
    assert silicon.precision_for(row(gemm_quant_mode="nvfp4", moe_quant_mode="nvfp4"), "deepseek-v3", b200,
                                 MAP["kv_cache"])["experts"] == "nvfp4"
    # gpt-oss's "fp4" is its release's own MXFP4 experts (on Hopper too)
    assert silicon.precision_for(row(gemm_quant_mode="nvfp4", moe_quant_mode="nvfp4"), "gpt-oss-120b", h200,
                                 MAP["kv_cache"])["experts"] == "mxfp4"
    # Kimi-K2.5's INT4 weight-only experts, the rest bf16
    assert silicon.precision_for(row(gemm_quant_mode="int4_wo", moe_quant_mode="int4_wo"), "kimi-k2", h200,
                                 MAP["kv_cache"])["experts"] == "int4"


def test_rows_the_planner_cannot_express_say_why():
    assert "disaggregated" in silicon.raw_for(row(mode="disagg"), MAP)
    assert "not in the catalog" in silicon.raw_for(row(model_path="XiaomiMiMo/MiMo-V2-Flash"), MAP)
    assert "not in the hardware catalog" in silicon.raw_for(row(system="a30"), MAP)


def test_a_row_becomes_the_corpus_layout_and_a_closed_loop_prices_it():
    raw = silicon.raw_for(row(batch_size=8.0, isl=512, osl=64), MAP)
    assert raw["model"] == {"name": "llama-3.1-70b"} and raw["hardware"] == {"name": "h200", "tp": 4}
    assert raw["engine"]["name"] == "trtllm" and raw["engine"]["version"]  # the version rule picked a profile
    tpot, physics, basis = silicon.predict_tpot_ms(raw, row(batch_size=8.0, isl=512, osl=64), {})
    # hand: 70B fp8 weights over 4 x H200 are 17.6 GB per GPU, read once per step at <= 4.8 TB/s: >= 3.7 ms;
    # a step of 8 sequences is memory-bound, well under 3x that
    assert 3.7 < physics < tpot < 11.0  # the learned layer only adds (host, collective and speculation terms)
    assert "measured kernel tables" in basis and "learned layer" in basis


def test_summary_bands_and_reasons():
    scored = pd.DataFrame({"not_expressible": ["", "", "disaggregated serving"], "batch_size": [4, 200, 8],
                           "error": [0.1, -0.3, None], "physics_error": [-0.1, -0.2, None],
                           "hardware": ["h200", "b200", None],
                           "engine_profile": ["vllm-0.19.1", "sglang-0.5.14", None], "model": ["a", "b", None],
                           "quant": ["fp8", "fp8", None]})
    s = silicon.summarize(scored)
    assert s["scored"] == 2 and s["all"]["mape"] == pytest.approx(0.2) and s["all"]["within_20pct"] == 0.5
    assert s["by_concurrency"]["1-8"]["n"] == 1 and s["by_concurrency"][">= 129"]["n"] == 1
    assert s["not_expressible"] == {"disaggregated serving": 1}
    alone = s["physics_only"]
    assert alone["all"]["mape"] == pytest.approx(0.15) and alone["all"]["median_error"] == pytest.approx(-0.15)
    assert alone["by_engine"]["sglang"]["median_error"] == pytest.approx(-0.2)


def test_readme_quotes_the_committed_silicon_figures():
    import json
    from pathlib import Path
    repo = Path(__file__).resolve().parents[1]
    s = json.loads((repo / "calibration" / "data" / "validation" / "silicon" / "silicon.json").read_text())
    text = " ".join((repo / "README.md").read_text().split())
    a = s["all"]
    assert (f"on {s['scored']} end-to-end runs" in text and f"within {100 * a['mape']:.1f}% MAPE (median"
            f" {100 * a['median_error']:+.1f}%, {100 * a['within_20pct']:.0f}% of runs within 20%)" in text)
