"""TensorRT-LLM's fp8 GEMM tables time the dynamic activation scale that static-scale fp8 checkpoints skip: the
import takes it off each fp8 row (calibration.import_rows.scale_overhead_s; docs/notes/trtllm-small-batch.md)."""
from __future__ import annotations

import pandas as pd
import pytest

from calibration.import_rows import prepare_gemm, scale_overhead_s
from calibration.import_tables import STATIC_FP8_ENGINES
from simulator.specs.hardware import load_hardware

H200 = load_hardware("h200")


def compute_scale_table(us_at: dict) -> pd.DataFrame:
    """A computescale_perf table: {(m, k): microseconds}, latency in milliseconds as the tables store it."""
    return pd.DataFrame([{"m": m, "k": k, "quant_dtype": "fp8", "latency": us * 1e-3} for (m, k), us in us_at.items()])


def test_the_scale_time_is_read_bilinearly_in_log_m_and_log_k_and_clipped_to_the_grid():
    at = scale_overhead_s(compute_scale_table({(1, 1024): 7.0, (1, 4096): 8.0, (16, 1024): 9.0, (16, 4096): 10.0}))
    # hand: m = 4 is halfway between 1 and 16 in log m, k = 2048 halfway between 1024 and 4096 in log k -> 8.5 us
    assert at([4.0], [2048.0])[0] == pytest.approx(8.5e-6)
    assert at([1000.0], [1.0e6])[0] == pytest.approx(10.0e-6)  # beyond the grid: its corner


def test_fp8_rows_lose_the_dynamic_scale_and_other_rows_stay():
    rows = pd.DataFrame({"gemm_dtype": ["fp8", "bfloat16", "fp8"], "m": [4, 4, 4], "n": [8192, 8192, 32],
                         "k": [8192, 8192, 32], "latency": [0.0170, 0.0300, 0.0120],
                         "kernel_source": ["cublas"] * 3})
    at = scale_overhead_s(compute_scale_table({(1, 32): 7.4, (1, 8192): 7.4, (8, 32): 7.4, (8, 8192): 7.4}))
    before, after = prepare_gemm(rows, H200), prepare_gemm(rows, H200, at)
    # 8192 x 8192 fp8 at m = 4: 17.0 us - 7.4 us = 9.6 us, below the roofline of its 67,108,864 weight bytes at
    # 4.8 TB/s (13.98 us, activations included): floored there
    t0 = after.t0.to_numpy()
    assert t0[0] == pytest.approx((8192 * 8192 + 4 * (8192 + 8192)) / 4.8e12, rel=1e-3)
    assert after.meas_s.iloc[0] == pytest.approx(t0[0])
    assert after.meas_s.iloc[1] == before.meas_s.iloc[1] == pytest.approx(30.0e-6)  # bf16: unchanged
    assert after.meas_s.iloc[2] == pytest.approx(12.0e-6 - 7.4e-6)  # a tiny GEMM: the scale was most of its time


def test_only_tensorrt_llm_tables_are_adjusted():
    # its collector loads fp8 weights without an input_scale (the dynamic path); vLLM's and SGLang's were not read
    assert STATIC_FP8_ENGINES == ("trtllm",)


# before_ms: the step before the correction (23.04 / 8.37 ms) plus what the fifteenth pass (2026-12-08) added to every
# such step since, the launch of the kernels priced off the tables: 80 layers x 5 kernels x 2 us + the embedding's 1
# and the sampler's 3 kernels (+ the logits gather's 1 at TP 8) = 0.808 / 0.810 ms (--breakdown 4,0, launch_ms)
@pytest.mark.parametrize("tp, measured_ms, before_ms", [(1, 20.1136, 23.04 + 0.808), (8, 6.25851, 8.37 + 0.810)])
def test_tensorrt_llm_fp8_small_batch_steps_meet_the_measured_runs(tp, measured_ms, before_ms):
    # aiconfigurator-core 0.12.0 systems/silicon_sample.csv: Llama-3.1-70B fp8, TensorRT-LLM, H200, concurrency 4,
    # ISL / OSL 1024 / 1024, TPOT 20.1136 ms at TP 1 and 6.25851 ms at TP 8 (rows ..._1024x1024_c4_tp1 / _tp8). The
    # plain step at B = 4, physics alone (mid-run context ~1536): before the correction 23.04 / 8.37 ms (+15% /
    # +34%: 2.1-2.9 ms a step of dynamic scaling the engine's static-scale checkpoint never runs)
    from simulator.plan.api import predict
    p = predict(model="llama-3.1-70b", hardware="h200", tp=tp, dtype="fp8", act_dtype="fp8", kv_dtype="fp8",
                engine="trtllm", engine_version="1.2.1", context_len=1536, batch_sizes=[4], learned=False)
    step_ms = float(p.table.plain_token_latency_ms.iloc[0])
    assert step_ms == pytest.approx(measured_ms, rel=0.10)
    assert step_ms < before_ms - 1.5
