"""Ops built and priced once per scope (simulator/physics/ops.py share_op, operators.pass_time): a grid's
verify pass and a draft head's extend pass run the target's own layer over the same B, K + 1 and L, so the
extend pass reads the attention and routed experts the verify pass built and priced. Sharing is exact: every
array of a grid equals the one made with each op built and priced on its own."""
from __future__ import annotations

from contextlib import nullcontext

import numpy as np
import pytest

import simulator.plan.grid as grid_module
from simulator.physics import ops as ops_module
from simulator.physics.attention import attention_op
from simulator.physics.ops import share_op, shared_ops, shared_scope
from simulator.plan.grid import evaluate_grid
from simulator.specs.scenario import SCENARIO_DIR, load_scenario

# dense EAGLE-3 and EAGLE heads on measured tables, an MoE target with an MTP module under data-parallel
# attention (its attention deployment is made anew for each pass), the datasheet, and a fitted CPU
# profile (efficiency may be read by op name there: its shared ops are priced once per name)
CASES = [("llama-3.1-8b-h100", {}), ("command-a-h100", {}), ("deepseek-v3-dp-ep", {}),
         ("qwen3-235b-h200", {"draft": "mtp"}), ("llama-3.1-8b-h100", {"calibration": "none"}),
         ("smollm2-cpu", {"draft": "eagle"})]
FIELDS = ("itl_s", "verify_s", "draft_step_s", "overhead_s", "goodput_per_seq", "memory_per_gpu_bytes")


def _grid(sc, shared: bool):
    b, ks, lens = np.arange(1, 130), np.arange(7), np.array([512, 4096, 40000])
    if shared:
        return evaluate_grid(sc, b, ks, lens)
    saved = grid_module.shared_ops
    grid_module.shared_ops = nullcontext  # every op built and priced on its own
    try:
        return evaluate_grid(sc, b, ks, lens)
    finally:
        grid_module.shared_ops = saved


@pytest.mark.parametrize("name,overrides", CASES)
def test_a_grid_with_shared_ops_equals_each_op_priced_on_its_own(name, overrides):
    sc = load_scenario(SCENARIO_DIR / f"{name}.toml", allow_long_context=True, **overrides)
    alone, shared = _grid(sc, False), _grid(sc, True)
    for field in FIELDS:
        assert np.array_equal(getattr(alone, field), getattr(shared, field)), field
    assert np.array_equal(alone.optimal_k_index(), shared.optimal_k_index())
    if alone.draft_extend is not None:
        assert np.array_equal(alone.draft_extend.total_s, shared.draft_extend.total_s)


def test_the_extend_pass_reads_the_verify_pass_ops():
    # counted: inside one grid the draft head's extend pass builds no attention or experts of its own
    sc = load_scenario(SCENARIO_DIR / "deepseek-v3-dp-ep.toml")
    built = []
    real = ops_module.share_op

    def counting(build, count, name, inputs):
        scope = shared_scope()
        if scope is not None and inputs()[0] not in scope:
            built.append(name)
        return real(build, count, name, inputs)

    import simulator.physics.layers as layers
    layers.share_op = counting
    try:
        evaluate_grid(sc, np.arange(1, 65), np.arange(5))
    finally:
        layers.share_op = real
    assert sorted(built) == ["attention", "draft.attention", "draft.moe_experts", "moe_experts"]


def test_share_op_copies_with_its_own_count_and_name_and_builds_outside_a_scope():
    sc = load_scenario(SCENARIO_DIR / "llama-3.1-8b-h100.toml")
    b, q, L = np.arange(1.0, 9.0)[:, None], np.array([[1.0, 2.0]]), 512.0

    def make(count, name, queries=q):
        return share_op(lambda: attention_op(sc.model, sc.deployment, b, queries, L, count, None, name), count, name,
                        lambda: (("t", ops_module.array_key(b), ops_module.array_key(queries)), ()))
    outside = make(32, "attention"), make(32, "attention")
    assert outside[0] is not outside[1] and outside[0].recipe is None
    with shared_ops():
        first, second, other = make(32, "attention"), make(1, "draft_extend.attention"), make(1, "x", q + 1.0)
        assert first.recipe is not None and second.recipe == first.recipe and other.recipe != first.recipe
        assert (second.count, second.name, first.count, first.name) == (1, "draft_extend.attention", 32, "attention")
        assert second.shape is first.shape and second.flops is first.flops  # the same op, its arrays shared
        assert other.shape is not first.shape
    assert shared_scope() is None

