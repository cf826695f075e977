"""How an engine runs the LM head under tensor parallelism, priced from its source (engine profile
[collectives] lm_head): vLLM-style vocab-parallel slices with a logits all-gather, gpt-fast's head
left whole on every rank (tp.py apply_tp shards only attention and feed_forward), MagicDec's slices
with a distributed greedy argmax (Engine/tp.py shards output; model.py all-reduces [tokens, tp] max
values and indices). Anchored to hand-computed bytes for Llama-3.1-8B at TP 8."""
from __future__ import annotations

import numpy as np
import pytest

from simulator.physics.forward_pass import head_ops
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
    from simulator.specs.engine_catalog import ENGINES_DIR
    with open(ENGINES_DIR / "gpt-fast-2024.toml", "rb") as f:
        data = tomllib.load(f)
    data["collectives"]["lm_head"] = "sharded"
    with pytest.raises(PlannerError, match=r"\[collectives\] lm_head must be one of"):
        engine_from_dict(data, "engines/gpt-fast-2024.toml")


def test_self_speculation_catch_up_pass_runs_two_tokens_per_sequence():
    """MagicDec's loop (selfspec_benchmark.py, next_double): after a step in which any sequence took every
    draft, the next step's first draft pass runs two tokens for the whole batch. That pass is priced
    as the target over its compressed KV at two queries per sequence; without the flag there is none."""
    from simulator.physics.draft_cost import DraftSetting, draft_extend_cost, draft_pass_cost
    from simulator.physics.operators import evaluate
    from simulator.specs.drafts import parse_draft
    model, hw, draft = load_model("llama-3.1-8b"), load_hardware("a100-80gb"), parse_draft("self:512")
    B, K, ctx = np.array([[256.0]]), np.array([[2.0]]), 4000.0
    plain = Deployment(tp=TP)
    assert draft_extend_cost(DraftSetting(draft, model, plain, hw), B, K, ctx) is None
    dep = Deployment(tp=TP, kernels=EngineKernels(self_spec_catch_up=True))
    first = float(draft_extend_cost(DraftSetting(draft, model, dep, hw), B, K, ctx).total_s.ravel()[0])
    # by hand: the same forward as a one-token draft pass, at 2 queries per sequence over 512 tokens
    from simulator.physics.forward_pass import forward_ops
    two = float(evaluate(forward_ops(model, dep, hw, B, 2.0, 512.0, "draft_extend."), hw, dep, None, B.shape).total_s.ravel()[0])
    one = float(draft_pass_cost(DraftSetting(draft, model, dep, hw), B, K, ctx)[0].total_s.ravel()[0])
    assert first == pytest.approx(two)
    assert first > 1.2 * one  # 512 tokens of GEMM instead of 256 on the datasheet roofline at B = 256
