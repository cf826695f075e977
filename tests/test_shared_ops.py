"""Ops built and priced once per scope (simulator/physics/ops.py share_op, operators.pass_time, the scope a view of
the step model's caches: simulator/physics/caches.py PhysicsCaches.shared_ops): a grid's
verify pass and a draft head's extend pass run the target's own layer over the same B, K + 1 and L, so the
extend pass reads the attention and routed experts the verify pass built and priced. Sharing is exact: every
array of a grid equals the one made with each op built and priced on its own."""
from __future__ import annotations

from contextlib import nullcontext

import numpy as np
import pytest

from simulator.physics import ops as ops_module
from simulator.physics.attention import attention_op
from simulator.physics.caches import PhysicsCaches
from simulator.physics.ops import share_op
from simulator.plan.grid import evaluate_grid
from simulator.plan.step_models import step_model
from simulator.specs.scenario import SCENARIO_DIR, load_scenario

# dense EAGLE-3 and EAGLE heads on measured tables, an MoE target with an MTP module under data-parallel
# attention (its attention deployment is made anew for each pass), the datasheet, and a fitted CPU
# profile (efficiency may be read by op name there: its shared ops are priced once per name)
CASES = [("llama-3.1-8b-h100", {}), ("command-a-h100", {}), ("deepseek-v3-dp-ep", {}),
         ("qwen3-235b-h200", {"draft": "mtp"}), ("llama-3.1-8b-h100", {"calibration": "none"}),
         ("smollm2-cpu", {"draft": "eagle"})]
FIELDS = ("itl_s", "verify_s", "draft_step_s", "overhead_s", "goodput_per_seq", "memory_per_gpu_bytes")


def _grid(sc, shared: bool, monkeypatch):
    b, ks, lens = np.arange(1, 130), np.arange(7), np.array([512, 4096, 40000])
    step_model(sc).caches.clear()  # each grid prices its passes afresh (no per-cell prices kept from the other)
    if shared:
        return evaluate_grid(sc, b, ks, lens)
    with monkeypatch.context() as m:
        m.setattr(PhysicsCaches, "shared_ops", lambda self: nullcontext(self))  # every op built and priced alone
        return evaluate_grid(sc, b, ks, lens)


@pytest.mark.parametrize("name,overrides", CASES)
def test_a_grid_with_shared_ops_equals_each_op_priced_on_its_own(name, overrides, monkeypatch):
    sc = load_scenario(SCENARIO_DIR / f"{name}.toml", allow_long_context=True, **overrides)
    alone, shared = _grid(sc, False, monkeypatch), _grid(sc, True, monkeypatch)
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

    def counting(build, count, name, inputs, caches=None):
        scope = None if caches is None else caches.shared
        if scope is not None and inputs()[0] not in scope:
            built.append(name)
        return real(build, count, name, inputs, caches)

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

    def make(count, name, queries=q, caches=None):
        return share_op(lambda: attention_op(sc.model, sc.deployment, b, queries, L, count, None, name), count, name,
                        lambda: (("t", ops_module.array_key(b), ops_module.array_key(queries)), ()), caches)
    caches = PhysicsCaches()
    outside = make(32, "attention", caches=caches), make(32, "attention", caches=caches)
    assert outside[0] is not outside[1] and outside[0].recipe is None
    with caches.shared_ops() as scoped:
        first, second = make(32, "attention", caches=scoped), make(1, "draft_extend.attention", caches=scoped)
        other = make(1, "x", q + 1.0, caches=scoped)
        assert first.recipe is not None and second.recipe == first.recipe and other.recipe != first.recipe
        assert (second.count, second.name, first.count, first.name) == (1, "draft_extend.attention", 32, "attention")
        assert second.shape is first.shape and second.flops is first.flops  # the same op, its arrays shared
        assert other.shape is not first.shape
        assert scoped.token_tables is caches.token_tables and caches.shared is None  # a view: the same stores
    assert scoped.shared is None  # the scope ends with the block
    assert make(1, "again", caches=scoped).recipe is None

