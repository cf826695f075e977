"""The table importer divides measured kernel times by the planner's own roofline: for each table
family, the roofline t0 that calibration/import_tables.py gives a table row equals the roofline
(max of compute and memory time, launch excluded) that physics.operators.evaluate gives the op the
planner builds for the same shape, on the same catalog device. A mismatch would make an efficiency
surface mean something else on the two sides."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from calibration import import_tables as it
from simulator.physics import attention, layers
from simulator.physics import gemm as gemm_op
from simulator.physics.operators import Op, evaluate
from simulator.specs.deployment import Deployment
from simulator.specs.hardware import DTYPE_BYTES, load_hardware
from simulator.specs.models import load_model

HW = load_hardware("h200")
TOKENS = np.array([1.0, 3.0, 16.0, 128.0, 1024.0, 8192.0])  # memory- to compute-bound


def planner_roofline(ops: list[Op], dep: Deployment) -> np.ndarray:
    cost = evaluate(ops, HW, dep, None, (len(TOKENS),))
    return np.maximum(cost.compute_s, cost.memory_s)[0]


def importer_t0(family: str, rows: dict) -> np.ndarray:
    df = pd.DataFrame(rows | {"latency": 1.0})
    out = it.PREPARE[family](df, HW)
    assert len(out) == len(df)  # no row filtered out
    return out.t0.to_numpy()


@pytest.mark.parametrize("table_dtype,weight,act", [("bfloat16", "bf16", "bf16"), ("fp8", "fp8", "fp8"),
                                                    ("int8_wo", "int8", "bf16"), ("int4_wo", "int4", "bf16")])
def test_gemm(table_dtype, weight, act):
    n, k = 4096.0, 14336.0
    t0 = importer_t0("gemm", {"gemm_dtype": table_dtype, "m": TOKENS, "n": n, "k": k})
    dep = Deployment(weight_dtype=weight, act_dtype=act)
    op = gemm_op.gemm("g", TOKENS, n, k, gemm_op.GemmPrecision(DTYPE_BYTES[weight], DTYPE_BYTES[act]), 1)
    np.testing.assert_allclose(t0, planner_roofline([op], dep), rtol=1e-12)


@pytest.mark.parametrize("tp,kv_table,kv", [(1, "bfloat16", "bf16"), (4, "fp8", "fp8")])
def test_attention_decode(tp, kv_table, kv):
    model = load_model("llama-3.1-8b")  # 32 query heads, 8 KV heads, head dim 128
    dep = Deployment(tp=tp, kv_dtype=kv)
    context = 4096.0
    t0 = importer_t0("attention_decode", {
        "kv_cache_dtype": kv_table, "attn_dtype": "bfloat16", "isl": 1, "batch_size": TOKENS, "step": context,
        "num_heads": model.num_heads // tp, "num_key_value_heads": model.num_kv_heads // tp,
        "head_dim": model.head_dim, "kernel_source": "k", "window_size": 0, "beam_width": 1})
    op = attention.attention_op(model, dep, TOKENS, 1.0, context, 1, None, "attn")
    np.testing.assert_allclose(t0, planner_roofline([op], dep), rtol=1e-12)


def test_mla_decode():
    model = load_model("deepseek-v3")  # 128 heads, kv_lora 512 + rope 64 (the tables' MLA_KV_LORA / ROPE)
    assert (model.kv_lora_rank, model.qk_rope_head_dim) == (it.MLA_KV_LORA, it.MLA_ROPE)
    dep = Deployment(tp=8)
    context = 2048.0
    t0 = importer_t0("mla_decode", {"kv_cache_dtype": "bfloat16", "mla_dtype": "bfloat16", "isl": 1,
                                    "batch_size": TOKENS, "step": context, "num_heads": model.num_heads // 8})
    op = attention.attention_op(model, dep, TOKENS, 1.0, context, 1, None, "mla")
    np.testing.assert_allclose(t0, planner_roofline([op], dep), rtol=1e-12)


@pytest.mark.parametrize("tp,ep", [(1, 1), (4, 2), (8, 8)])
def test_moe(tp, ep, monkeypatch):
    monkeypatch.setattr(it, "BUSIEST_LOAD_FROM_PLANNER", True)  # (ep = 1 does not depend on it)
    model = load_model("qwen3-30b-a3b")  # 128 experts, top-8, hidden 2048, expert intermediate 768
    dep = Deployment(tp=tp, ep=ep, layout="tp-ep" if ep > 1 else "tp")
    t0 = importer_t0("moe", {
        "moe_dtype": "bfloat16", "kernel_source": "moe_torch_flow", "distribution": "balanced",
        "num_tokens": TOKENS, "hidden_size": model.hidden_size, "inter_size": model.expert_intermediate_size,
        "topk": model.experts_per_token, "num_experts": model.num_experts, "moe_tp_size": tp // ep, "moe_ep_size": ep})
    op = [o for o in layers.moe_ops(model, dep, HW, TOKENS, 1) if o.surface == "moe"]
    np.testing.assert_allclose(t0, planner_roofline(op, dep), rtol=1e-12)


@pytest.mark.parametrize("gpus", [2, 8])
def test_all_reduce(gpus):
    message = np.array([1024.0, 65536.0, 8e6, 128e6])  # bf16 elements
    t0 = pd.DataFrame({"allreduce_dtype": "bfloat16", "kernel_source": "graph", "num_gpus": gpus,
                       "message_size": message, "latency": 1.0})
    t0 = it.prepare_all_reduce(t0, HW).t0.to_numpy()
    nbytes = 2 * message
    op = Op("ar", "comm", 0.0, nbytes, kernels=1, count=1, comm_s=layers.allreduce_s(nbytes, gpus, HW),
            collective=("all_reduce", gpus), shape={"bytes": nbytes})
    cost = evaluate([op], HW, Deployment(tp=gpus), None, (len(message),))
    np.testing.assert_allclose(t0, np.maximum(cost.compute_s, cost.memory_s)[0], rtol=1e-12)


def test_block_fp8_gemm_and_moe(monkeypatch):
    # DeepSeek-V3's checkpoint (fp8 weights in 128 x 128 blocks) with bf16 activations between layers: its
    # GEMMs and experts are the tables' fp8_block rows, read on the fp8 peak with the engine's fp8-quantized
    # activations (a = 1), so each side's roofline is the other's
    model = load_model("deepseek-v3")
    n, k = 7168.0, 2048.0
    t0 = importer_t0("gemm", {"gemm_dtype": "fp8_block", "m": TOKENS, "n": n, "k": k})
    dep = Deployment(weight_dtype="fp8", act_dtype="bf16")
    block_fp8 = gemm_op.GemmPrecision(DTYPE_BYTES["fp8"], DTYPE_BYTES["bf16"], fp8_blocks=True)
    op = gemm_op.gemm("g", TOKENS, n, k, block_fp8, 1)
    assert op.dtype == "fp8_block"
    np.testing.assert_allclose(t0, planner_roofline([op], dep), rtol=1e-12)
    monkeypatch.setattr(it, "BUSIEST_LOAD_FROM_PLANNER", True)
    dep = Deployment(tp=8, ep=8, layout="tp-ep", weight_dtype="fp8", act_dtype="bf16")
    t0 = importer_t0("moe", {
        "moe_dtype": "fp8_block", "kernel_source": "k", "distribution": "balanced", "num_tokens": TOKENS,
        "hidden_size": model.hidden_size, "inter_size": model.expert_intermediate_size,
        "topk": model.experts_per_token, "num_experts": model.num_experts, "moe_tp_size": 1, "moe_ep_size": 8})
    op = [o for o in layers.moe_ops(model, dep, HW, TOKENS, 1) if o.surface == "moe"]
    assert op[0].dtype == "fp8_block"
    np.testing.assert_allclose(t0, planner_roofline(op, dep), rtol=1e-12)
