"""The seventh learned term, ``collective_s``: time per collective call of a step beyond its measured table
(simulator/specs/step_terms.py; docs/learned_layer_choices.md, "a cost per collective").

Anchors: "hand" (a count or a sum worked by hand from the model's config and the formula), "model" (two paths of
this tool that claim one formula must agree).
"""
from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from simulator import serving as sv
from simulator.physics.collectives import collective_counts
from simulator.physics.step_model import step_collective_calls
from simulator.plan.grid import compute_grid
from simulator.plan.step_models import step_model
from simulator.specs.scenario import SCENARIO_DIR, load_scenario
from simulator.specs.step_terms import (A_PRIORI_SD, LEARNED_FILE, NEUTRAL, TERM_NAMES, TERMS, LearnedPrior,
                                        StepTerms, compose_step_s, load_learned_prior)


def _terms(**values) -> dict:
    return dict(zip(TERM_NAMES, map(float, NEUTRAL))) | values


def test_pre_registered_values():
    # the values docs/learned_layer_choices.md fixed before the term was added: neutral 0, bounds [0, 100 us],
    # microseconds, a priori spread 10 us; appended last, the six terms before it in their places
    assert TERM_NAMES[-1] == "collective_s" and TERMS["collective_s"] == (0.0, 0.0, 1e-4, "us")
    assert TERM_NAMES[:6] == ("kernel_scale", "host_per_step_s", "host_per_seq_s", "spec_per_token_s",
                              "spec_kernel_scale", "spec_host_per_seq_s")
    assert A_PRIORI_SD[-1] == 10.0


def test_a_cost_per_call_by_hand():
    # hand: 15 us a call over the 160 all-reduces of a step adds 160 x 15 us = 2.4 ms, and nothing without calls
    terms = StepTerms(_terms(collective_s=15e-6))
    assert float(terms.added_s(8, 3, 160)) == pytest.approx(2.4e-3, rel=1e-12)
    assert float(terms.added_s(8, 3)) == 0.0
    theta = [_terms(collective_s=15e-6)[n] for n in TERM_NAMES]
    step = compose_step_s(theta, 1.0, 0.0, 10e-3, 0.5e-3, 160.0)
    assert float(step) == pytest.approx(10e-3 + 0.5e-3 + 2.4e-3, rel=1e-12)


def test_tp1_dense_has_no_collective_calls():
    # hand: Llama-3.1-8B on one H100 with EAGLE-3: no all-reduce, no logits gather, no all-to-all
    sc = load_scenario(SCENARIO_DIR / "llama-3.1-8b-h100.toml")
    assert sc.deployment.tp == 1 and not sc.model.is_moe
    counts = collective_counts(sc.model, sc.deployment, sc.hardware, sc.draft)
    assert (counts.verify, counts.draft_pass, counts.draft_extend) == (0.0, 0.0, 0.0)
    g = compute_grid(sc, batch_sizes=[1, 64], ks=[0, 3])
    assert np.all(np.asarray(g.collective_calls) == 0.0)


def test_tp4_llama_70b_calls_by_hand():
    # hand: Llama-3.1-70B (80 layers) at TP 4: one all-reduce after attention and one after the MLP in every layer,
    # 2 x 80 = 160, and the vocab-parallel LM head's logits all-gather: 161 per verify pass. Its Llama-3.2-1B draft
    # model (16 layers, the same TP): 2 x 16 + 1 = 33 per pass, its extend pass the same ops over K + 1 tokens
    sc = load_scenario(SCENARIO_DIR / "default.toml").with_overrides(tp=4)
    assert sc.model.name == "llama-3.1-70b" and sc.draft.method == "model" and sc.deployment.tp == 4
    counts = step_model(sc).collective_counts
    assert (counts.verify, counts.draft_pass, counts.draft_extend) == (161.0, 33.0, 33.0)
    # a step: the verify pass's, and K - 1 one-token passes and the extend pass at K > 0 (grid and formula)
    g = compute_grid(sc, batch_sizes=[1, 16], ks=[0, 1, 3])
    want = np.array([161.0, 161.0 + 33.0, 161.0 + 2 * 33.0 + 33.0])
    assert np.array_equal(np.broadcast_to(g.collective_calls, g.itl_s.shape)[1], want)
    assert np.array_equal(step_collective_calls(counts, np.array([0.0, 1.0, 3.0]), np.array([0.0, 1.0, 3.0])), want)
    # a speculating server's K = 0 entry that still runs the extend pass, and an n-gram draft (no draft ops)
    assert float(step_collective_calls(counts, 0.0, 0.0, extend_at_k0=True)) == 161.0 + 33.0
    assert float(step_collective_calls(counts, 3.0, 3.0, host_draft=True)) == 161.0


def test_grid_and_serving_pay_the_same_calls():
    # model: with 15 us a call the grid's step and the serving pricer's (scalar and vector) move by the same
    # 15 us x calls, at TP 2 (the default scenario: 161 calls a verify pass, 33 a draft pass)
    base = load_scenario(SCENARIO_DIR / "default.toml")
    values = dict(base.step_terms.values) if base.step_terms is not None else _terms()
    ks, batches = [0, 2, 4], [1, 8, 33]
    steps = {}
    for c in (0.0, 15e-6):
        sc = replace(base, step_prior=LearnedPrior(values | {"collective_s": c}), deployment_fit=None)
        grid = compute_grid(sc, batch_sizes=batches, ks=ks)
        pricer = sv.StepPricer(sc, sv.engine_from_scenario(sc), max(ks), max(batches), 4000, True)
        ctx = float(pricer.ctx[np.argmin(abs(pricer.ctx - sc.context_len))])
        scalar = np.array([[pricer.step_s(b, k, b * (k + 1), ctx, k > 0, 0.0)[0] for k in ks] for b in batches])
        # a speculating server's steps, K = 0 included: the vector pricer to the bit
        spec = np.array([[pricer.step_s(b, k, b * (k + 1), ctx, True, 0.0)[0] for k in ks] for b in batches])
        B, K = np.meshgrid(batches, ks, indexing="ij")
        vector = pricer.decode_steps_s(B.ravel(), K.ravel(), (B * (K + 1)).ravel(), ctx, True, 0.0).reshape(B.shape)
        assert np.array_equal(spec, vector)
        steps[c] = (grid.itl_s, scalar)
    calls = np.array([161.0, 161.0 + 2 * 33.0, 161.0 + 4 * 33.0])  # K - 1 passes + the extend pass
    for before, after in zip(steps[0.0], steps[15e-6]):
        np.testing.assert_allclose(after - before, np.broadcast_to(15e-6 * calls, after.shape), rtol=1e-9)


def test_an_older_learned_file_holds_the_new_term_neutral(tmp_path):
    # a layer written before the term existed (six terms in its population and offsets) still loads: the new term
    # at its neutral value, with no spread
    doc = json.loads(LEARNED_FILE.read_text())
    doc["population"].pop("collective_s")
    for key in ("family_offsets_fit", "gpu_family_offsets_fit"):
        if key in doc:
            doc[key] = {f: v[:6] for f, v in doc[key].items()}
    old = tmp_path / "learned_step.json"
    old.write_text(json.dumps(doc))
    prior = load_learned_prior(old)
    assert prior.values["collective_s"] == 0.0 and prior.sd_fit[-1] == 0.0 and prior.mean_fit[-1] == 0.0
    assert len(prior.mean_fit) == len(TERM_NAMES)
    assert np.all(prior.samples(16)[:, -1] == 0.0)
