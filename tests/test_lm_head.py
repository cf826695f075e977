"""How an engine runs the LM head under tensor parallelism, priced from its source (engine profile
[collectives] lm_head): vLLM-style vocab-parallel slices with a logits all-gather, gpt-fast's head
left whole on every rank (tp.py apply_tp shards only attention and feed_forward), MagicDec's slices
with a distributed greedy argmax (Engine/tp.py shards output; model.py all-reduces [tokens, tp] max
values and indices). Anchored to hand-computed bytes for Llama-3.1-8B at TP 8."""
from __future__ import annotations

import numpy as np
import pytest

from simulator.physics.layers import head_ops
from simulator.physics.memory import weight_bytes_per_gpu
from simulator.specs.deployment import Deployment, EngineKernels
from simulator.specs.engines import engine_from_dict, load_engine
from simulator.specs.hardware import load_hardware
from simulator.specs.models import load_model
from simulator.errors import PlannerError

VOCAB, HIDDEN, TP, TOKENS = 128_256, 4_096, 8, 32  # Llama-3.1-8B config.json; bf16 weights


def _ops(lm_head: str) -> dict:
    model, hw = load_model("llama-3.1-8b"), load_hardware("a100-80gb")
    dep = Deployment(tp=TP, kernels=EngineKernels(lm_head=lm_head, logit_bytes_plain=2.0))
    return {op.name: op for op in head_ops(model, dep, hw, np.array([float(TOKENS)]), VOCAB)}


def test_vocab_parallel_reads_a_slice_and_gathers_the_logits():
    ops = _ops("vocab-parallel")
    assert float(ops["lm_head"].nbytes[0]) == pytest.approx(VOCAB / TP * HIDDEN * 2 + TOKENS * (VOCAB / TP + HIDDEN) * 2)
    assert "logits_gather" in ops and "argmax_allreduce" not in ops
    assert float(ops["sampling"].nbytes[0]) == pytest.approx(TOKENS * VOCAB * 2.0)  # the gathered logits


def test_replicated_head_reads_the_whole_matrix_on_every_rank():
    ops = _ops("replicated")
    # 128,256 x 4,096 x 2 bytes = 1,050,673,152 bytes of weights, plus activations in and logits out
    assert float(ops["lm_head"].nbytes[0]) == pytest.approx(1_050_673_152 + TOKENS * (VOCAB + HIDDEN) * 2)
    assert "logits_gather" not in ops


def test_argmax_head_keeps_the_logits_on_their_rank():
    ops = _ops("vocab-parallel-argmax")
    assert "logits_gather" not in ops
    assert float(ops["sampling"].nbytes[0]) == pytest.approx(TOKENS * VOCAB / TP * 2.0)  # its own slice only
    # two all-reduces of [tokens, tp] 8-byte entries (bf16 values padded as the int64 indices are)
    assert ops["argmax_allreduce"].count == 2
    assert float(ops["argmax_allreduce"].shape["bytes"][0]) == TOKENS * TP * 8


def test_replicated_embedding_and_head_stay_whole_in_memory():
    model = load_model("llama-3.1-8b")
    split = Deployment(tp=TP, kernels=EngineKernels(lm_head="vocab-parallel"))
    whole = Deployment(tp=TP, kernels=EngineKernels(lm_head="replicated"))
    # untied embedding + head: 2 x 128,256 x 4,096 params x 2 bytes, of which 7/8 more per GPU when whole
    extra = 2 * VOCAB * HIDDEN * 2 * (1 - 1 / TP)
    assert weight_bytes_per_gpu(model, whole) - weight_bytes_per_gpu(model, split) == pytest.approx(extra)


def test_bundled_profiles_say_how_their_engines_run_the_head():
    assert load_engine("gpt-fast-2024").lm_head == "replicated"
    assert load_engine("magicdec-2024").lm_head == "vocab-parallel-argmax"
    assert load_engine("vllm-0.14.0").lm_head == "vocab-parallel"


def test_an_unknown_head_layout_is_refused_naming_the_key():
    import tomllib
    from simulator.specs.engines import ENGINES_DIR
    with open(ENGINES_DIR / "gpt-fast-2024.toml", "rb") as f:
        data = tomllib.load(f)
    data["collectives"]["lm_head"] = "sharded"
    with pytest.raises(PlannerError, match=r"\[collectives\] lm_head must be one of"):
        engine_from_dict(data, "engines/gpt-fast-2024.toml")
