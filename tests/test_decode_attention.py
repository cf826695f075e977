"""Which decode-attention kernel an engine runs, and what it reads: TensorRT-LLM 0.9's XQA (one block per
KV head, built for 8 query heads per KV head only) vs its MMHA (one block per query head, each loading
its KV head). Anchors: the conditions quoted from the v0.9.0 source in
simulator/data/engines/trtllm-0.9.0.toml, and the KV bytes of a decode step by hand."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

from simulator.physics.attention import attention_op, per_query_head_kernel
from simulator.specs.engines import load_engine
from simulator.specs.hardware import load_hardware
from simulator.specs.models import load_model
from simulator.specs.scenario import build_scenario


def deployment(model: str, hardware: str, engine_version: str, tp: int = 1):
    raw = {"model": {"name": model}, "hardware": {"name": hardware, "tp": tp},
           "engine": {"name": "trtllm", "version": engine_version}, "workload": {"batch_sizes": [1]}}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return build_scenario(raw).deployment


def test_trtllm_09_profile_holds_the_xqa_gate():
    e = load_engine("trtllm", "0.9.0")
    assert e.grouped_decode_groups == (8,)  # decoderXQARunner.h: ratio 8 (or MHA, which has no cubin)
    assert e.grouped_decode_min_blocks_per_sm == pytest.approx(0.25)  # 4 x kv_heads x batch >= SMs
    assert load_engine("trtllm", "1.1.0").grouped_decode_groups == ()  # later engines: grouped for every g


def test_xqa_needs_ratio_8_and_enough_blocks():
    # Llama-2-70B on 8 x H100 (132 SMs): 1 KV head per GPU, 8 query heads per KV head -> XQA only from
    # 4 x 1 x B >= 132, i.e. B >= 33; Mistral-7B (32 / 8 = 4 per KV head) never gets XQA
    llama = deployment("llama-2-70b", "h100-sxm", "0.9.0", tp=8)
    b = np.array([1.0, 32.0, 33.0, 256.0])
    assert per_query_head_kernel(llama, 8.0, b * 1).tolist() == [True, True, False, False]
    mistral = deployment("mistral-7b-v0.1", "h100-sxm", "0.9.0")
    assert np.all(per_query_head_kernel(mistral, 4.0, b * 8))
    assert per_query_head_kernel(deployment("mistral-7b-v0.1", "h100-sxm", "1.1.0"), 4.0, b * 8) is False


def test_mmha_reads_each_kv_head_once_per_query_head_less_what_l2_serves():
    # Mistral-7B, B = 64, 1152 cached tokens, bf16 KV: one layer reads B (L + 1) 2 hkv d 2 bytes once;
    # MMHA's 4 sibling blocks read it 4 times, the repeats from L2: max(1, 4 x HBM / L2) x that
    model, hw = load_model("mistral-7b-v0.1"), load_hardware("h100-sxm")
    once = 64 * (1152 + 1) * 2 * 8 * 128 * 2
    old, new = (deployment("mistral-7b-v0.1", "h100-sxm", v) for v in ("1.1.0", "0.9.0"))
    q_io = 2 * 64 * 1 * 32 * 128 * 2
    grouped = attention_op(model, old, np.array([64.0]), 1, 1152, 1, None, "attn")
    mmha = attention_op(model, new, np.array([64.0]), 1, 1152, 1, None, "attn")
    assert float(grouped.nbytes[0]) == pytest.approx(once + q_io)
    assert float(mmha.nbytes[0]) == pytest.approx(once * max(1.0, 4 * hw.l2_reread_cost) + q_io)
    assert 1.0 < max(1.0, 4 * hw.l2_reread_cost) <= 4.0
    # the MMHA kernel is priced on the decode surface as the MHA kernel it is: 32 heads, group 1
    assert mmha.shape["group"][0] == 1.0 and mmha.shape["batch_heads"][0] == 64 * 32
    assert grouped.shape["group"] == 4.0
