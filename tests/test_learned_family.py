"""The engine-family level of the learned layer (calibration/learn_step.py): candidate forms, used only where the
nested leave-one-source-out choice on the training rows picks it; the shipped file's family offsets at run time."""
import json
from dataclasses import replace

import numpy as np
import pytest

from calibration import learn_step as L
from simulator.specs import step_terms
from simulator.specs.step_terms import from_fit, load_learned_prior
from tests.test_learned_step import _synthetic_rows


def _two_families():
    # vLLM sources run the speculating kernels 1.4x the physics, TensorRT-LLM sources 1.0x (synthetic)
    theta = {f"v{i}": np.array([1.0, 0, 0, 0, 1.4, 0, 0]) for i in range(3)}
    theta |= {f"t{i}": np.array([1.0, 0, 0, 0, 1.0, 0, 0]) for i in range(3)}
    rows = _synthetic_rows(theta)
    return replace(rows, engine=np.array(["vllm" if s.startswith("v") else "trtllm" for s in rows.source], dtype=object))


def test_family_level_learns_each_familys_centre():
    rows = _two_families()
    pop = L.fit_population(rows, "speculation terms" + L.FAMILY_LEVEL)
    assert set(pop.family_fit) == {"vllm", "trtllm"}
    # the MAP shrinks each family's centre toward the population mean mu (by hand, the per-source values pinned
    # by the rows, offset and source spreads both A_PRIORI_SD = 0.15, mu's hyperprior sd 0.7): with 3 sources a
    # family, its offset is 3/4 of (its sources' log value - mu), and mu = 0.75 log 1.4 / 0.15^2 / (1.5 / 0.15^2
    # + 1 / 0.7^2) = 0.163, so the centres are exp(0.163 + 0.75 (0.336 - 0.163)) = 1.341 and exp(0.25 x 0.163)
    # = 1.042 (the other speculation terms trade a little with the scale: 2%)
    assert from_fit(pop.mean_for("vllm"))[4] == pytest.approx(1.341, rel=0.02)
    assert from_fit(pop.mean_for("trtllm"))[4] == pytest.approx(1.042, rel=0.02)
    assert from_fit(pop.mean_for("sglang"))[4] == pytest.approx(from_fit(pop.mean_fit)[4])  # unseen: the mean
    plain = L.fit_population(rows, "speculation terms")
    assert plain.family_fit == {} and 1.05 < from_fit(plain.mean_fit)[4] < 1.35  # one centre between the two


@pytest.mark.slow  # 2 forms x 5 nested fits (~7 s)
def test_held_out_source_of_a_known_family_borrows_its_familys_terms_when_the_rows_support_it(monkeypatch):
    # the nested choice between one base form with and without the family level (the shipped candidate set has
    # three base forms: the same choice, three times the fits)
    base = "speculation terms"
    monkeypatch.setattr(L, "FORMS", {k: v for k, v in L.FORMS.items() if k in (base, base + L.FAMILY_LEVEL)})
    assert len(L.FORMS) == 2
    rows = _two_families()
    learner = L.Learner(rows)
    pop = learner.without("source", "v0")
    # chosen on the five training sources alone: the family level predicts a left-out source far better
    assert L.has_family_level(pop.form), pop.form_errors
    held = rows.take(rows.source == "v0")
    with_family = np.mean(L.held_out_errors(held, pop))
    without_family = np.mean(L.held_out_errors(held, learner.fit(rows.source != "v0", "speculation terms")))
    assert with_family < 0.5 * without_family


def test_shipped_file_with_family_offsets_centres_each_engine_on_its_family(tmp_path, monkeypatch):
    doc = json.loads(step_terms.LEARNED_FILE.read_text())
    off = [0.0, 0.0, 0.0, 0.0, 0.1, 0.0]
    doc["family_offsets_fit"] = {"vllm": off}
    path = tmp_path / "layer.json"
    path.write_text(json.dumps(doc))
    monkeypatch.setattr(step_terms, "_LOADED", {})
    base = load_learned_prior(path)
    vllm = load_learned_prior(path, engine="vllm")
    assert vllm.mean_fit[4] == pytest.approx(base.mean_fit[4] + 0.1)
    assert load_learned_prior(path, engine="sglang") is base  # a family without an offset: the population
    doc["family_offsets_fit"] = {"vllm": [0.1]}
    path.write_text(json.dumps(doc))
    monkeypatch.setattr(step_terms, "_LOADED", {})
    with pytest.raises(step_terms.PlannerError, match="family_offsets_fit"):
        load_learned_prior(path)
