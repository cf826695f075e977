"""Passes priced from whole-token tables (simulator/physics/pass_tables.py) against the same ops priced per
cell: every op sized by its token count alone costs, at t tokens, what the table's entry t says, so each
pass's time equals the per-op sum up to the order of the sum (relative 1e-12), for every draft method,
dense, MoE and data-parallel-attention deployments, measured-table and datasheet profiles."""
from __future__ import annotations

import copy

import numpy as np
import pytest

from simulator.physics import pass_tables
from simulator.physics.caches import PhysicsCaches
from simulator.physics.draft_cost import DraftSetting, draft_extend_plan, draft_pass_plan
from simulator.physics.operators import pass_time, price_pass
from simulator.physics.pass_tables import MAX_TABLE_TOKENS, price_plan, verify_plan, verify_token_ops
from simulator.plan.step_models import step_model
from simulator.specs.scenario import SCENARIO_DIR, load_scenario

CASES = [("llama-3.1-8b-h100", {}), ("qwen3-235b-h200", {}), ("deepseek-v3-dp-ep", {}), ("command-a-h100", {}),
         ("default", {"draft": "model:llama-3.2-1b"}), ("default", {"draft": "self:512", "engine": "magicdec"}),
         ("default", {"draft": "early-exit:8", "engine": "gpt-fast"}), ("qwen3-235b-h200", {"draft": "mtp"}),
         ("llama-3.1-8b-h100", {"calibration": "none"}), ("smollm2-cpu", {"draft": "eagle"})]

B = np.arange(1, 97, dtype=float)[:, None, None]
K = np.arange(6, dtype=float)[None, :, None]
C = np.array([[[512.0]]])


def _scenario(name, overrides):
    return load_scenario(SCENARIO_DIR / f"{name}.toml", **overrides)


def _close(tabled, per_op):
    np.testing.assert_allclose(tabled.total_s, per_op.total_s, rtol=1e-12, atol=0)
    assert tabled.n_kernels == per_op.n_kernels
    np.testing.assert_allclose(tabled.launch_s, per_op.launch_s, rtol=1e-12, atol=1e-18)


@pytest.mark.parametrize("name,overrides", CASES)
def test_each_pass_from_tables_equals_its_ops_priced_per_cell(name, overrides):
    sc = _scenario(name, overrides)
    hw, prof = sc.hardware, sc.profile
    plans = [(verify_plan(sc.model, sc.deployment, hw, B, K, C), (96, 6, 1))]
    setting = DraftSetting.of(sc)
    draft = draft_pass_plan(setting, B, C)
    if draft is not None:
        plans.append((draft, (96, 1, 1)))
    extend = draft_extend_plan(setting, B, K, C)
    if extend is not None:
        plans.append((extend, (96, 6, 1)))
    for plan, shape in plans:
        tabled = price_plan(plan, hw, prof, shape, PhysicsCaches())
        per_op = price_pass(plan.full(), hw, plan.dep, prof, shape)
        _close(tabled, per_op)
        # the per-op detail is the whole op list's, summing to the same time
        np.testing.assert_allclose(tabled.detail.total_s, per_op.total_s, rtol=1e-12)
        assert tabled.detail.names == [o.name for o in plan.full()]


def test_a_table_entry_is_its_ops_priced_at_that_token_count():
    """Entry t of the verify table: the token ops built at a single count t and priced alone."""
    sc = _scenario("llama-3.1-8b-h100", {})
    plan = verify_plan(sc.model, sc.deployment, sc.hardware, B, K, C)
    (seg,) = plan.segments
    counts = np.array([1, 7, 64, 333, 576])
    values, launch, kernels = pass_tables.token_table(seg, plan, sc.hardware, sc.profile, counts, PhysicsCaches())
    for t, value in zip(counts, values):
        ops = verify_token_ops(sc.model, sc.deployment, sc.hardware, np.array([float(t)]))
        assert value == pytest.approx(float(pass_time(ops, sc.hardware, sc.deployment, sc.profile, (1,)).total_s[0]),
                                      rel=1e-12)
    # the sampling op is priced per cell (its bytes per logit depend on K), not in the table
    assert not any(o.name.endswith("sampling") for o in seg.build(np.array([1.0])))


def test_tables_price_each_count_once_and_the_same_whatever_is_asked_beside_it():
    """A count priced alone, among others or after the table grew past it: one value (the table's entry)."""
    sc = _scenario("command-a-h100", {})
    plan = verify_plan(sc.model, sc.deployment, sc.hardware, B, K, C)
    (seg,) = plan.segments
    key = seg.key + (plan.dep, sc.hardware, id(sc.profile)) + tuple(plan.specs)
    caches = PhysicsCaches()
    alone = pass_tables.token_table(seg, plan, sc.hardware, sc.profile, np.array([100]), caches)[0][0]
    table = caches.token_tables[key][1]
    assert np.isnan(table[99]) and table[100] == alone  # only the count asked for is priced
    among = pass_tables.token_table(seg, plan, sc.hardware, sc.profile, np.arange(1, 401), caches)[0]
    assert among[99] == alone and not np.isnan(caches.token_tables[key][1][1:401]).any()
    grown = pass_tables.token_table(seg, plan, sc.hardware, sc.profile, np.array([100, 5000]), caches)[0]
    assert caches.token_tables[key][1].size > 5000 and grown[0] == alone
    fresh = np.array([float(pass_time(verify_token_ops(sc.model, sc.deployment, sc.hardware, np.array([100.0, 5000.0])),
                                      sc.hardware, sc.deployment, sc.profile, (2,)).total_s[i]) for i in (0, 1)])
    np.testing.assert_array_equal(grown, fresh)


def test_fractional_or_huge_token_counts_are_priced_per_cell():
    sc = _scenario("llama-3.1-8b-h100", {})
    hw, prof = sc.hardware, sc.profile
    for batch in (np.array([[[1.5]], [[3.25]]]), np.array([[[float(MAX_TABLE_TOKENS)]]])):
        plan = verify_plan(sc.model, sc.deployment, hw, batch, K, C)
        shape = (batch.shape[0], 6, 1)
        _close(price_plan(plan, hw, prof, shape, PhysicsCaches()), price_pass(plan.full(), hw, plan.dep, prof, shape))


def test_a_swapped_profile_gets_its_own_table():
    """Tables are kept per profile object: a sensitivity run's scaled profile is not read from the other's."""
    a = _scenario("llama-3.1-8b-h100", {})
    b = _scenario("llama-3.1-8b-h100", {"calibration": "none"})  # the datasheet roofline
    caches = PhysicsCaches()  # one store for both: the profile object keys the tables apart
    pa = verify_plan(a.model, a.deployment, a.hardware, B, K, C)
    ta = price_plan(pa, a.hardware, a.profile, (96, 6, 1), caches).total_s
    tb = price_plan(verify_plan(b.model, b.deployment, b.hardware, B, K, C), b.hardware, b.profile, (96, 6, 1),
                    caches).total_s
    assert not np.allclose(ta, tb, rtol=0.01)
    np.testing.assert_allclose(tb, price_pass(verify_plan(b.model, b.deployment, b.hardware, B, K, C).full(),
                                              b.hardware, b.deployment, b.profile, (96, 6, 1)).total_s, rtol=1e-12)


def test_scenarios_with_equal_specs_share_a_table_and_others_do_not():
    """Tables are kept in the step model, which is kept by the specs' values: two scenarios loaded apart (each
    with its own deployment object) share one step model and so read one table; another TP degree or weight
    dtype has its own step model and prices its own table (FP8 weights: half the bytes)."""
    a = _scenario("command-a-h100", {})
    b = _scenario("command-a-h100", {})
    assert a.deployment is not b.deployment and a.deployment == b.deployment
    assert step_model(a) is step_model(b)
    plan_a = verify_plan(a.model, a.deployment, a.hardware, B, K, C)
    plan_b = verify_plan(b.model, b.deployment, b.hardware, B, K, C)
    counts = np.arange(1, 600)
    pass_tables.token_table(plan_a.segments[0], plan_a, a.hardware, a.profile, counts, step_model(a).caches)
    key = lambda p, sc: p.segments[0].key + (p.dep, sc.hardware, id(sc.profile)) + tuple(p.specs)  # noqa: E731
    tables = step_model(b).caches.token_tables
    assert tables[key(plan_a, a)] is tables[key(plan_b, b)]
    ta = pass_tables.token_table(plan_b.segments[0], plan_b, b.hardware, b.profile, counts, step_model(b).caches)[0]
    for overrides in ({"tp": 4}, {"weight_dtype": "fp8"}):
        c = _scenario("command-a-h100", overrides)
        assert step_model(c) is not step_model(a)
        plan_c = verify_plan(c.model, c.deployment, c.hardware, B, K, C)
        tc = pass_tables.token_table(plan_c.segments[0], plan_c, c.hardware, c.profile, counts, step_model(c).caches)[0]
        assert key(plan_c, c) not in step_model(a).caches.token_tables and not np.allclose(tc, ta, rtol=0.01)
        _close(price_plan(plan_c, c.hardware, c.profile, (96, 6, 1), step_model(c).caches),
               price_pass(plan_c.full(), c.hardware, plan_c.dep, c.profile, (96, 6, 1)))


@pytest.mark.parametrize("name,overrides", CASES)
def test_kept_per_cell_prices_are_the_prices_themselves(name, overrides):
    """A pass's per-cell ops priced once and read again (pass_tables.cells_time): the same arrays, bit for bit,
    as pricing them (the plan without a key), cold and warm, read-only; a plan over other arrays (another
    draft, context, expert batch) or priced with another profile object is priced anew."""
    sc = _scenario(name, overrides)
    hw, prof = sc.hardware, sc.profile
    setting = DraftSetting.of(sc)
    plans = [(verify_plan(sc.model, sc.deployment, hw, B, K, C), (96, 6, 1)),
             (draft_pass_plan(setting, B, C), (96, 1, 1)), (draft_extend_plan(setting, B, K, C), (96, 6, 1))]
    for plan, shape in [(p, s) for p, s in plans if p is not None]:
        fresh = pass_time(plan.cells(), hw, plan.dep, prof, shape)
        caches = PhysicsCaches()
        cold = pass_tables.cells_time(plan, hw, prof, shape, caches)
        warm = pass_tables.cells_time(plan, hw, prof, shape, caches)
        assert warm is cold and not warm.total_s.flags.writeable
        assert np.array_equal(cold.total_s, np.broadcast_to(fresh.total_s, shape))
        assert (cold.launch_s, cold.n_kernels) == (fresh.launch_s, fresh.n_kernels)
        if prof is not None:  # a sensitivity run's scaled copy is another object: priced, not read
            other = pass_tables.cells_time(plan, hw, copy.copy(prof), shape, caches)
            assert other is not cold and np.array_equal(other.total_s, cold.total_s)
    # a longer context is another key: its attention is priced, not read
    longer = verify_plan(sc.model, sc.deployment, hw, B, K, C * 4)
    short = pass_tables.cells_time(plans[0][0], hw, prof, (96, 6, 1), caches)
    assert pass_tables.cells_time(longer, hw, prof, (96, 6, 1), caches) is not short
