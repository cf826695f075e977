"""Attention projections held in their own precision ([precision] attention, --attention-dtype; docs/precision.md):
weight bytes anchored to hand-computed projection shapes, memory differing by exactly those bytes, the default read
from a checkpoint's quantization_config exclude list, and the refusals."""
from __future__ import annotations

import json
from dataclasses import replace
from types import SimpleNamespace

import pytest

from simulator.errors import PlannerError
from simulator.physics.layers import attention_projection_ops, decoder_token_ops
from simulator.physics.memory import weight_bytes_per_gpu
from simulator.specs.deployment import Deployment, check_deployment
from simulator.specs.hardware import DTYPE_BYTES, load_hardware
from simulator.specs.models import MODELS_DIR, load_model, model_from_hf_config
from tests.cli_inprocess import refused_line

NVFP4 = DTYPE_BYTES["nvfp4"]  # 4.5 bits an element: 4-bit values + an fp8 scale per 16

# DeepSeek-V3's config.json: hidden 7168, q_lora_rank 1536, 128 heads, qk_nope 128 + qk_rope 64, kv_lora_rank 512,
# v_head_dim 128, 61 layers. One MLA layer on one GPU of TP 8 (16 heads): q_a [7168 x 1536] and
# kv_a [7168 x (512 + 64)] whole (no head axis), q_b [1536 x 16 x 192], kv_b [512 x 16 x (128 + 128)],
# o [16 x 128 x 7168].
DSV3_MLA_PARAMS_TP8 = (7168 * 1536 + 1536 * 16 * 192 + 7168 * (512 + 64) + 512 * 16 * (128 + 128)
                       + 16 * 128 * 7168)
# Llama-3.1-70B: hidden 8192, 64 query heads, 8 KV heads of 128, 80 layers. TP 8: qkv [8192 x (8 + 2 x 1) x 128],
# o [8 x 128 x 8192].
LLAMA70_ATTN_PARAMS_TP8 = 8192 * (8 + 2) * 128 + 8 * 128 * 8192


def _attention_weight_bytes(model, dep, tokens=1.0):
    ops = [o for o in decoder_token_ops(model, dep, load_hardware("b200"), tokens) if o.name.startswith("attn_")]
    return sum(o.shape["nk"] * o.shape["w_bytes"] * o.count for o in ops), ops


@pytest.mark.parametrize("name, per_layer, layers", [("deepseek-v3", DSV3_MLA_PARAMS_TP8, 61),
                                                     ("llama-3.1-70b", LLAMA70_ATTN_PARAMS_TP8, 80)])
def test_attention_bf16_weight_bytes_are_the_hand_computed_projections(name, per_layer, layers):
    """nvfp4 weights with bf16 attention: the attention GEMMs read the projections x 2 bytes (x 0.5625 without), and
    the memory per GPU differs by exactly the difference."""
    assert DSV3_MLA_PARAMS_TP8 == 36_634_624 and LLAMA70_ATTN_PARAMS_TP8 == 18_874_368
    m = load_model(name)
    quantized = Deployment(tp=8, weight_dtype="nvfp4")
    kept = replace(quantized, attention_dtype="bf16")
    q_bytes, _ = _attention_weight_bytes(m, quantized)
    b_bytes, ops = _attention_weight_bytes(m, kept)
    assert q_bytes == pytest.approx(layers * per_layer * NVFP4, rel=1e-12)
    assert b_bytes == pytest.approx(layers * per_layer * 2.0, rel=1e-12)
    assert {o.dtype for o in ops} == {"bf16"} and {o.shape["a_bytes"] for o in ops} == {2.0}
    assert weight_bytes_per_gpu(m, kept) - weight_bytes_per_gpu(m, quantized) == \
        pytest.approx(layers * per_layer * (2.0 - NVFP4), rel=1e-9)
    # everything else is as it was: the MLP / expert GEMMs keep the weights' dtype
    rest = lambda dep: [(o.name, o.shape["w_bytes"]) for o in decoder_token_ops(m, dep, load_hardware("b200"), 1.0)
                        if not o.name.startswith("attn_") and "w_bytes" in (o.shape or {})]  # noqa: E731
    assert rest(kept) == rest(quantized)


def test_attention_bf16_beside_fp4_activations_runs_bf16_gemms():
    """W4A4 (nvfp4 x nvfp4) MLPs beside unquantized attention: the attention GEMMs take bf16 inputs on the bf16
    kernel, the MLPs stay on the FP4 one."""
    m = load_model("llama-3.1-70b")
    dep = Deployment(tp=8, weight_dtype="nvfp4", act_dtype="nvfp4", attention_dtype="bf16")
    ops = decoder_token_ops(m, dep, load_hardware("b200"), 4.0)
    kinds = {o.name: (o.dtype, o.shape.get("a_bytes")) for o in ops if o.family == "gemm"}
    assert kinds["attn_qkv"] == kinds["attn_o"] == ("bf16", 2.0)
    assert kinds["mlp_gate_up"] == ("fp4", NVFP4)


def _nvfp4_deepseek_config(exclude: list[str]) -> dict:
    """DeepSeek-V3's catalog config.json with a ModelOpt NVFP4 quantization_config (quant_method "modelopt", as
    vLLM's ModelOptNvFp4Config reads it from config.json)."""
    cfg = json.loads((MODELS_DIR / "deepseek-v3.json").read_text())
    cfg["quantization_config"] = {"quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 16,
                                  "kv_cache_quant_algo": "FP8", "exclude_modules": exclude}
    return cfg


# What ModelOpt's DeepSeek example writes (examples/deepseek/ptq.py disables "*attn*" and "*head*" quantizers, lists
# the modules left out, and adds the MTP layer "layers.61*"; quantize_to_nvfp4.py renames them to HF names):
MLA_MODULES = ("q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "kv_b_proj", "o_proj")
R1_FP4_EXCLUDE = ["lm_head", *(f"model.layers.{i}.self_attn.{p}" for i in range(61) for p in MLA_MODULES),
                  "model.layers.61*"]


def test_checkpoint_exclude_list_makes_attention_bf16_by_default():
    """A config whose exclude_modules names every layer's self_attn projections prices them bf16 without any key,
    exactly as [precision] attention = "bf16" does."""
    m = model_from_hf_config(_nvfp4_deepseek_config(R1_FP4_EXCLUDE), "ds-r1-fp4", "test config")
    assert set(m.unquantized_attention) == {"q_a", "q_b", "kv_a", "kv_b", "o"}
    by_default = Deployment(tp=8, weight_dtype="nvfp4")
    assert by_default.attention_dtype_for(m, "q_a") == "bf16" and by_default.attention_label(m) == "bf16"
    assert weight_bytes_per_gpu(m, by_default) == weight_bytes_per_gpu(m, replace(by_default, attention_dtype="bf16"))
    assert _attention_weight_bytes(m, by_default)[0] == pytest.approx(61 * DSV3_MLA_PARAMS_TP8 * 2.0, rel=1e-12)
    # the key outranks the checkpoint; unquantized weights leave attention with the weights
    assert replace(by_default, attention_dtype="nvfp4").attention_label(m) == ""
    assert Deployment(tp=8, weight_dtype="bf16").attention_label(m) == ""


def test_partial_exclusions_follow_the_layers_they_name():
    """DeepSeek-R1-FP4 v2 also quantizes o_proj ("wo"): the other four stay bf16. A list leaving out one layer's
    attention (of 61) is priced quantized; a glob over every layer (gpt-oss's modules_to_not_convert spelling)
    counts for all of them."""
    v2 = [e for e in R1_FP4_EXCLUDE if not e.endswith("o_proj")]
    m = model_from_hf_config(_nvfp4_deepseek_config(v2), "ds-r1-fp4-v2", "test config")
    assert set(m.unquantized_attention) == {"q_a", "q_b", "kv_a", "kv_b"}
    assert Deployment(tp=8, weight_dtype="nvfp4").attention_label(m) == "bf16 (q_a, q_b, kv_a, kv_b)"
    one_layer = _nvfp4_deepseek_config(["lm_head", "model.layers.0*", "model.layers.1.self_attn*"])
    assert model_from_hf_config(one_layer, "x", "test config").unquantized_attention == ()
    glob = _nvfp4_deepseek_config(["model.layers.*.self_attn"])
    assert {"q_a", "q_b", "kv_a", "kv_b", "o"} <= set(model_from_hf_config(glob, "x", "test").unquantized_attention)
    regex = _nvfp4_deepseek_config(["re:.*self_attn.*"])  # compressed-tensors' ignore spelling
    assert "kv_b" in model_from_hf_config(regex, "x", "test").unquantized_attention


def test_hf_quant_config_beside_config_json_is_read(tmp_path):
    """A ModelOpt export keeps its quantization in hf_quant_config.json beside config.json (vLLM reads it there)."""
    from simulator.specs.models import load_model_config
    cfg = json.loads((MODELS_DIR / "deepseek-v3.json").read_text())
    del cfg["quantization_config"]
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    (tmp_path / "hf_quant_config.json").write_text(json.dumps(
        {"producer": {"name": "modelopt", "version": "0.23.0"},
         "quantization": {"quant_algo": "NVFP4", "kv_cache_quant_algo": None, "group_size": 16,
                          "exclude_modules": R1_FP4_EXCLUDE}}))
    assert "kv_b" in load_model_config(tmp_path / "config.json").unquantized_attention


def test_dtypes_text_says_attention_bf16():
    from simulator.cli.common import dtypes_text
    m = load_model("deepseek-v3")
    sc = SimpleNamespace(model=m, deployment=Deployment(tp=8, weight_dtype="nvfp4", attention_dtype="bf16"))
    # DeepSeek-V3's experts stay in its checkpoint's fp8 unless [precision] experts says otherwise
    # the fp8 checkpoint served as NVFP4 has NVFP4 experts (before: its fp8 ones, "experts fp8")
    assert dtypes_text(sc) == "weights nvfp4 (attention bf16), activations bf16, KV bf16"
    assert dtypes_text(SimpleNamespace(model=m, deployment=Deployment(tp=8, weight_dtype="nvfp4"))) == \
        "weights nvfp4, activations bf16, KV bf16"


def test_unknown_attention_dtype_is_refused_naming_the_key_and_the_flag():
    with pytest.raises(PlannerError, match=r"unknown attention dtype 'fp5' \(\[precision\] attention"):
        check_deployment(load_model("llama-3.1-8b"), Deployment(attention_dtype="fp5"))
    line = refused_line("simulator.predict", "--model", "llama-3.1-8b", "--hardware", "h100-sxm",
                        "--attention-dtype", "fp5")
    assert line.startswith("error: --attention-dtype fp5: unknown attention dtype 'fp5'"), line


def test_bad_exclude_list_is_one_line():
    cfg = _nvfp4_deepseek_config("self_attn")  # a string, not a list
    with pytest.raises(PlannerError, match=r"test config: 'quantization_config.exclude_modules' must be a list"):
        model_from_hf_config(cfg, "x", "test config")
