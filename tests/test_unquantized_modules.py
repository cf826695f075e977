"""Which modules stay bf16 beside quantized weights (simulator.specs.deployment.UNQUANTIZED_MODULES), and the routed
experts' precision when a checkpoint is served in another one (Deployment.expert_dtype_for)."""
from __future__ import annotations

from dataclasses import replace

import pytest

from simulator.errors import PlannerError
from simulator.physics.forward_pass import head_ops
from simulator.physics.memory import weight_bytes_per_gpu
from simulator.specs.deployment import Deployment, EngineKernels
from simulator.specs.engine_files import engine_fields
from simulator.specs.engines import load_engine
from simulator.specs.hardware import DTYPE_BYTES, load_hardware
from simulator.specs.models import load_model

H100 = load_hardware("h100-sxm")
LLAMA8 = load_model("llama-3.1-8b")  # vocab 128256, hidden 4096, untied head
VLLM = EngineKernels(engine="vllm")
GPT_FAST = EngineKernels(engine="gpt-fast", lm_head="replicated",
                         quantized_modules=load_engine("gpt-fast", "2024").quantized_modules)


def lm_head_weight_bytes(dep: Deployment) -> float:
    op = next(o for o in head_ops(LLAMA8, dep, H100, 1.0, LLAMA8.vocab_size) if o.name == "lm_head")
    return op.shape["nk"] * op.shape["w_bytes"]


def test_serving_engines_keep_the_lm_head_bf16_beside_fp8_weights():
    dep = Deployment(weight_dtype="fp8", act_dtype="fp8", kernels=VLLM)
    # 128256 x 4096 bf16 weights: 1.05 GB per step at TP 1, not the 0.53 GB of an fp8 head
    assert lm_head_weight_bytes(dep) == pytest.approx(128256 * 4096 * 2)
    assert dep.module_dtype_for(LLAMA8, "embedding") == dep.module_dtype_for(LLAMA8, "router") == "bf16"
    # the memory model holds the embedding and the head at bf16 too: bf16 minus fp8 = 2 x 128256 x 4096 x 1 byte
    as_fp8 = replace(dep, kernels=replace(VLLM, quantized_modules=("embedding", "lm_head")))
    assert weight_bytes_per_gpu(LLAMA8, dep) - weight_bytes_per_gpu(LLAMA8, as_fp8) == pytest.approx(2 * 128256 * 4096)


def test_gpt_fast_quantizes_its_output_head_with_the_weights():
    dep = Deployment(weight_dtype="int8", act_dtype="bf16", kernels=GPT_FAST)
    assert lm_head_weight_bytes(dep) == pytest.approx(128256 * 4096 * DTYPE_BYTES["int8"])
    assert dep.module_dtype_for(LLAMA8, "embedding") == "bf16"  # nn.Embedding is not an nn.Linear


def test_bf16_weights_leave_every_module_as_it_was():
    dep = Deployment(weight_dtype="bf16", act_dtype="bf16", kernels=VLLM)
    assert lm_head_weight_bytes(dep) == pytest.approx(128256 * 4096 * 2)


@pytest.mark.parametrize("weights, experts", [("nvfp4", "nvfp4"), ("fp8", "fp8"), ("bf16", "bf16")])
def test_a_deepseek_fp8_checkpoint_served_otherwise_has_experts_of_the_served_precision(weights, experts):
    # before: the fp8 checkpoint's experts stayed fp8 under --dtype nvfp4 (and bf16)
    assert Deployment(weight_dtype=weights).expert_dtype_for(load_model("deepseek-v3")) == experts


def test_experts_quantized_alone_stay_in_their_own_precision():
    gpt_oss = load_model("gpt-oss-120b")  # MXFP4 experts beside bf16 attention
    assert gpt_oss.checkpoint_weight_dtype is None
    assert Deployment(weight_dtype="bf16").expert_dtype_for(gpt_oss) == "mxfp4"
    assert Deployment(weight_dtype="bf16", expert_dtype="fp8").expert_dtype_for(gpt_oss) == "fp8"


def test_an_engine_file_naming_another_module_is_refused_in_one_line():
    data = {"name": "x", "cuda_graphs": {"eager_launch_per_kernel_s": 0.0},
            "host": {"step_fixed_s": 0.0, "step_per_sequence_s": 0.0}, "speculative": {"step_fixed_s": 0.0},
            "quantization": {"also_quantizes": ["attention"]}}
    with pytest.raises(PlannerError, match=r"x.toml: \[quantization\] also_quantizes lists 'attention'; known:"):
        engine_fields(data, "x.toml")
