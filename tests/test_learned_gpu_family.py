"""The GPU-family level of the learned layer (calibration/learn_step.py): the family is each hardware file's
``architecture`` (simulator/specs/hardware.py); a form with the level gives the sources of one family a shared offset
from the population mean; a family the rows never saw gets the mean; the shipped file carries the offsets and a
scenario's prior is centred on its hardware's family."""
import json
from dataclasses import replace

import numpy as np
import pytest

from calibration import learn_step as L
from simulator.errors import PlannerError
from simulator.specs import step_terms
from simulator.specs.hardware import ARCHITECTURES, HARDWARE_DIR, list_hardware, load_hardware
from simulator.specs.step_terms import LEARNED_FILE, from_fit, load_learned_prior
from tests.test_learned_step import _synthetic_rows

SPEC = "speculation terms" + L.GPU_LEVEL


def test_every_catalog_device_names_its_family():
    fams = {n: load_hardware(n).architecture for n in list_hardware()}
    assert set(fams.values()) <= set(ARCHITECTURES) - {"other"}
    # datasheets: A100 / RTX 3090 Ampere, L40S Ada Lovelace, H100 / H20 / GH200 Hopper, B200 / GB300 Blackwell,
    # RTX PRO 6000 Blackwell sm_120 (no tcgen05: its own), MI300X / MI325X CDNA 3, MI355X CDNA 4
    assert {n: fams[n] for n in ("a100-80gb", "rtx3090", "l40s", "h100-sxm", "h20", "gh200", "b200", "gb300",
                                 "rtx-pro-6000", "mi300x", "mi325x", "mi355x", "cpu-xeon-2c")} == {
        "a100-80gb": "ampere", "rtx3090": "ampere", "l40s": "ada", "h100-sxm": "hopper", "h20": "hopper",
        "gh200": "hopper", "b200": "blackwell", "gb300": "blackwell", "rtx-pro-6000": "blackwell-rtx",
        "mi300x": "cdna3", "mi325x": "cdna3", "mi355x": "cdna4", "cpu-xeon-2c": "emerald-rapids"}
    for n in list_hardware():  # every catalog file names its family, and it agrees with the file's vendor and kind
        hw = load_hardware(n)
        assert 'architecture = "' in (HARDWARE_DIR / f"{n}.toml").read_text(), n
        assert ARCHITECTURES[hw.architecture] == (hw.vendor, hw.kind), n


def test_a_users_device_file_without_a_family_still_loads_as_other(tmp_path):
    # a hardware file written before the key existed: no family offset of the learned layer (its centre)
    old = tmp_path / "h100.toml"
    old.write_text((HARDWARE_DIR / "h100-sxm.toml").read_text().replace('architecture = "hopper"\n', ""))
    assert load_hardware(str(old)).architecture == "other"


@pytest.mark.parametrize("edit, expect", [
    (lambda t: t.replace('architecture = "hopper"', 'architecture = "Hopper"'), "'architecture' must be one of"),
    (lambda t: t.replace('architecture = "hopper"', 'architecture = 9'), "'architecture' must be one of"),
    (lambda t: t.replace('architecture = "hopper"', 'architecture = "cdna3"'), "family of amd devices"),
])
def test_a_missing_or_unknown_family_is_refused_in_one_line(tmp_path, edit, expect):
    bad = tmp_path / "h100.toml"
    bad.write_text(edit((HARDWARE_DIR / "h100-sxm.toml").read_text()))
    with pytest.raises(PlannerError, match=expect) as e:
        load_hardware(str(bad))
    assert "\n" not in str(e.value) and str(bad) in str(e.value)


def _two_gpu_families():
    # three sources on Hopper (H100, H200) run the speculating kernels 1.4x the physics, three on CDNA 3 (MI300X,
    # MI325X) 1.0x; one engine for all (synthetic)
    theta = {f"h{i}": np.array([1.0, 0, 0, 0, 1.4, 0, 0]) for i in range(3)}
    theta |= {f"m{i}": np.array([1.0, 0, 0, 0, 1.0, 0, 0]) for i in range(3)}
    rows = _synthetic_rows(theta)
    gpu = {"h0": "h100-sxm", "h1": "h200", "h2": "h100-sxm", "m0": "mi300x", "m1": "mi325x", "m2": "mi300x"}
    return replace(rows, gpu=np.array([gpu[s] for s in rows.source], dtype=object),
                   engine=np.full(len(rows), "vllm", dtype=object))


def test_gpu_family_level_recovers_a_planted_offset(monkeypatch):
    # one free term (the speculative kernel scale) so that the hand computation is exact: each source's log scale is
    # v_f = mu + off_f + d_i with d_i ~ N(0, sd) over 3 sources and off_f ~ N(0, sd) (one sd, A_PRIORI_SD); the rows
    # pin v_f, and minimising 3 (v_f - mu - off_f)^2 + off_f^2 gives off_f = 3/4 (v_f - mu), mu midway (the weak
    # hyperprior aside): the family centres are v_f -+ (v_h - v_c) / 8 = 0.294 and 0.042 for log 1.4 = 0.336 and 0
    monkeypatch.setitem(L.FORMS, "spec kernel scale" + L.GPU_LEVEL, ("spec_kernel_scale",))
    pop = L.fit_population(_two_gpu_families(), "spec kernel scale" + L.GPU_LEVEL)
    assert set(pop.gpu_family_fit) == {"hopper", "cdna3"} and pop.family_fit == {}
    hopper, cdna3 = (pop.mean_for(gpu=f)[4] for f in ("hopper", "cdna3"))
    gap = np.log(1.4)
    assert hopper - cdna3 == pytest.approx(0.75 * gap, abs=0.01)
    assert (hopper, cdna3) == pytest.approx((gap - gap / 8, gap / 8), abs=0.01)
    # a family the rows never saw (a B200 deployment): the population mean, midway
    assert pop.mean_for(gpu="blackwell") == pytest.approx(pop.mean_fit)
    assert pop.mean_fit[4] == pytest.approx(gap / 2, abs=0.01)
    # the held-out rows are predicted at their family's centre: B200 copies of the rows at the population's
    rows = _two_gpu_families()
    b200 = replace(rows, gpu=np.full(len(rows), "b200", dtype=object))
    assert L.predict_rows(b200, replace(pop, gpu_family_fit={}))[0] == pytest.approx(L.predict_rows(b200, pop)[0])
    assert not np.allclose(L.predict_rows(rows, pop)[0], L.predict_rows(b200, pop)[0])


def test_shipped_candidate_with_gpu_level_orders_the_families():
    # the candidate form (three speculation terms free, which trade off): each family's scale lands on its side
    pop = L.fit_population(_two_gpu_families(), SPEC)
    assert SPEC in L.FORMS and L.has_gpu_level(SPEC) and not L.has_family_level(SPEC)
    assert from_fit(pop.mean_for(gpu="hopper"))[4] == pytest.approx(1.4, rel=0.06)
    assert from_fit(pop.mean_for(gpu="cdna3"))[4] == pytest.approx(1.0, rel=0.06)


def test_layer_file_round_trips_gpu_family_offsets(tmp_path, monkeypatch):
    rows = _two_gpu_families()
    pop = L.fit_population(rows, SPEC)
    corpus = tmp_path / "corpus.csv"
    corpus.write_text("row_id\n1\n")
    doc = L.learned_document(pop, corpus, rows)
    assert set(doc["gpu_family_offsets_fit"]) == {"hopper", "cdna3"} and "family_offsets_fit" not in doc
    path = tmp_path / "layer.json"
    path.write_text(json.dumps(doc))
    monkeypatch.setattr(step_terms, "_LOADED", {})
    base = load_learned_prior(path)
    assert base.mean_fit == pytest.approx(pop.mean_fit, rel=1e-5, abs=1e-9)
    hopper = load_learned_prior(path, engine="vllm", architecture="hopper")
    assert hopper.mean_fit == pytest.approx(pop.mean_for(gpu="hopper"), rel=1e-5, abs=1e-9)
    assert hopper.sd_fit == base.sd_fit and hopper is load_learned_prior(path, architecture="hopper", engine="vllm")
    assert load_learned_prior(path, engine="vllm", architecture="blackwell") is base  # no offset: the population
    # a file from before the level (no such key) loads as before: every family at the population's centre
    del doc["gpu_family_offsets_fit"]
    path.write_text(json.dumps(doc))
    monkeypatch.setattr(step_terms, "_LOADED", {})
    assert load_learned_prior(path, architecture="hopper") is load_learned_prior(path)


@pytest.mark.parametrize("offsets, expect", [
    ({"hopper": [0.1]}, "7 finite numbers per GPU family"),
    ({"hopper": [0, 0, 0, 0, float("nan"), 0]}, "7 finite numbers per GPU family"),
    ({"hopper": [0, 0, 0, 0, True, 0]}, "7 finite numbers per GPU family"),
    ({"hoper": [0, 0, 0, 0, 0.1, 0]}, "names 'hoper', not a GPU family"),
    ([0, 0, 0, 0, 0.1, 0], "7 finite numbers per GPU family"),
])
def test_bad_gpu_family_offsets_are_refused_in_one_line(tmp_path, monkeypatch, offsets, expect):
    doc = json.loads(LEARNED_FILE.read_text())
    doc["gpu_family_offsets_fit"] = offsets
    path = tmp_path / "layer.json"
    path.write_text(json.dumps(doc))
    monkeypatch.setattr(step_terms, "_LOADED", {})
    with pytest.raises(PlannerError, match=expect) as e:
        load_learned_prior(path)
    assert "\n" not in str(e.value) and "regenerate it with python -m calibration.learn_step" in str(e.value)


def test_scenario_prior_is_centred_on_its_hardware_family(tmp_path, monkeypatch):
    # the shipped file with a Hopper offset of 0.1 on the speculative kernel scale's log: the default scenario (2 x
    # H200) has it, the same on MI300X not (no CDNA 3 offset: the population's centre)
    from simulator.specs.scenario import load_scenario
    doc = json.loads(LEARNED_FILE.read_text())
    doc["gpu_family_offsets_fit"] = {"hopper": [0.0, 0.0, 0.0, 0.0, 0.1, 0.0]}
    doc.pop("family_offsets_fit", None)
    path = tmp_path / "layer.json"
    path.write_text(json.dumps(doc))
    monkeypatch.setattr(step_terms, "_LOADED", {str(LEARNED_FILE): step_terms._read_learned(path)})
    base = load_learned_prior()
    h200 = load_scenario("default")
    assert h200.hardware.architecture == "hopper"
    assert h200.step_prior.mean_fit[4] == pytest.approx(base.mean_fit[4] + 0.1)
    assert h200.step_prior.values["spec_kernel_scale"] == pytest.approx(base.values["spec_kernel_scale"] * np.exp(0.1))
    assert load_scenario("default", hardware="mi300x").step_prior is base
