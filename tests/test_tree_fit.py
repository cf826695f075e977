"""The deployment fit of a draft tree uses the grid's acceptance model (specs.tree_acceptance): one formula for
AL(K) of a draft. Anchors: the eagle3-tree preset's published SGLang lengths on its 8x63 tree (4.68 at depth 5,
5.39 at depth 8: sgl-project/sglang PR #4247, tests/test_tree_acceptance.py), a kernel-time scale put in by hand,
and points the planner's own grid prices."""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from calibration import fewshot
from calibration import fit_deployment as fd
from calibration import fit_deployment_file as fit_file
from simulator.plan.grid import compute_grid
from simulator.specs.acceptance import preset_for
from simulator.specs.scenario import load_scenario
from simulator.specs.tree_acceptance import tree_acceptance_length, tree_acceptance_lengths

SCENARIO = str(Path(__file__).resolve().parent.parent / "scenarios" / "llama-3.1-8b-h100.toml")
TREE = dict(engine="sglang", draft="eagle3:tree:8x63")
B, K = (1, 16, 64), (0, 3, 5)
# kernels 4% slower than the planner prices them, put in by hand (not host time: SGLang hides host time behind the
# GPU, so a host offset would not show in the steps: engine_time.host_room_s)
KERNEL_SCALE = 1.04
PRESET = preset_for("eagle3-tree")  # top-1 0.775 x 5, 0.889; rank tail 0.751
# rows at K up to 5 of a k_max 8 scenario: the fit says depths 6-8 are extrapolated (tested elsewhere)
pytestmark = pytest.mark.filterwarnings("ignore:--measured. acceptance_length only")


@pytest.fixture(scope="module")
def tree_sc():
    return load_scenario(SCENARIO, **TREE).with_overrides(batch_sizes=list(B), k_max=8)


def _rows(batch, k, itl_ms, al=None, per_depth=None):
    cols = {"batch_size": np.asarray(batch, float), "k": np.asarray(k, float), "itl_ms": np.asarray(itl_ms),
            "file": "runs.csv"}
    if al is not None:
        cols["acceptance_length"] = al
    if per_depth is not None:
        cols["per_position_acceptance"] = per_depth
    return pd.DataFrame(cols)


def _mesh():
    return np.repeat(B, len(K)), np.tile(K, len(B))


def test_the_scenario_is_the_published_tree(tree_sc):
    acc = tree_sc.acceptance
    assert acc.rank_tail == PRESET.rank_tail and (tree_sc.draft.topk, tree_sc.draft.tree_tokens) == (8, 63)
    al = compute_grid(tree_sc, batch_sizes=np.array([1.0]), ks=np.array([5.0, 8.0])).acceptance_length
    assert al == pytest.approx([4.68, 5.39], abs=0.01)  # SGLang PR #4247's lengths on the 8x63 tree


@pytest.mark.parametrize("top1_scale", [1.0, 0.9])
def test_hand_built_tree_fit_recovers_kernel_scale_and_tree_lengths(tree_sc, top1_scale):
    # measured: the planner's physics (kernel x 1.04 + host, no learned layer); acceptance lengths of
    # the 8x63 tree from the preset's top-1 rates x top1_scale through tree_acceptance (the rank tail kept)
    sc = replace(tree_sc, step_prior=None)  # a vague prior: the points alone place the terms
    b, k = _mesh()
    kernel, overhead = fd.planner_parts(sc, B, K)
    itl_ms = (KERNEL_SCALE * kernel + overhead).ravel() * 1e3
    top1 = PRESET.rates_upto(8) * top1_scale
    al = [tree_acceptance_length(top1[:kk], PRESET.rank_tail, 8, 63) for kk in k]
    result = fd.fit(sc, _rows(b, k, itl_ms, al), n_boot=40)
    theta = dict(zip(fewshot.PARAMS, result["fit"]["theta"]))
    assert theta["kernel_scale"] == pytest.approx(KERNEL_SCALE, abs=0.01)
    fitted = np.exp(fewshot.predict_log("step", result["fit"]["theta"], result["points"])[0]) * 1e3
    np.testing.assert_allclose(fitted, result["cells"].itl_ms, rtol=0.005)
    acc = result["acceptance"]
    assert acc["rank_tail"] == PRESET.rank_tail  # a tree's scale moves its top-1 rates, not its rank tail
    assert acc["rates"][0] == pytest.approx(0.775 * top1_scale, rel=1e-3)
    ks = np.arange(9)
    expected = tree_acceptance_lengths(top1, PRESET.rank_tail, 8, 63, ks)
    np.testing.assert_allclose(fd.fitted_acceptance_lengths(sc, acc, ks, "rates")[0], expected, rtol=1e-3)
    if top1_scale == 1.0:  # the published figures themselves: 4.68 at depth 5, 5.39 at depth 8
        assert fd.fitted_acceptance_lengths(sc, acc, [5, 8], "rates")[0] == pytest.approx([4.68, 5.39], abs=0.01)
    # the fit file carries the rank tail back to the planner: the grid of the fitted scenario has the same lengths
    doc = fit_file.document(sc, result, ["runs.csv"])
    assert doc["acceptance"]["rank_tail"] == PRESET.rank_tail


def test_refit_of_grid_points_reproduces_them(tree_sc, tmp_path):
    # the planner's grid (learned layer on) prices 9 (B, K) cells of the tree scenario; a fit of those cells,
    # with the grid's own acceptance lengths, gives back the grid's step times and goodput within 0.5%
    g = compute_grid(tree_sc, batch_sizes=np.array(B, float), ks=np.array(K, float))
    b, k = _mesh()
    itl_ms = g.itl_s.ravel() * 1e3
    al = np.tile(g.acceptance_length, len(B))
    result = fd.fit(tree_sc, _rows(b, k, itl_ms, al), n_boot=40)
    fitted = np.exp(fewshot.predict_log("step", result["fit"]["theta"], result["points"])[0]) * 1e3
    np.testing.assert_allclose(fitted, result["cells"].itl_ms, rtol=0.005)
    # and the fitted goodput (the MAP terms' step, the fit's acceptance) at every K the grid plans over
    ks = np.arange(9)
    full = compute_grid(tree_sc, batch_sizes=np.array(B, float), ks=ks.astype(float))
    kernel, overhead, calls, room = fd.planner_step_parts(tree_sc, B, ks)
    al_fit = fd.fitted_acceptance_lengths(tree_sc, result["acceptance"], ks, "rates")
    good = fewshot.goodput_samples(result["fit"]["theta"][None], kernel, overhead, np.array(B), ks, al_fit, calls,
                                   room)[0]
    np.testing.assert_allclose(al_fit[0], full.acceptance_length, rtol=1e-3)
    np.testing.assert_allclose(good, full.goodput_per_seq, rtol=0.005)
    # written and read back: the planner's grid with the fit has the tree's lengths at every K
    path = tmp_path / "fit.json"
    path.write_text(json.dumps(fit_file.document(tree_sc, result, ["runs.csv"])))
    fitted_sc = load_scenario(SCENARIO, **TREE, deployment=str(path))
    assert fitted_sc.acceptance.rank_tail == PRESET.rank_tail
    refit = compute_grid(fitted_sc, batch_sizes=np.array([1.0]), ks=np.arange(9.0)).acceptance_length
    np.testing.assert_allclose(refit, full.acceptance_length, rtol=1e-3)


def test_rates_measured_on_a_tree_stay_its_own_per_depth(tree_sc, tmp_path):
    # per_position_acceptance measured on the tree: the tree's own rates per depth (no rank tail), AL by the
    # chain formula over them, in the fit and in the planner reading the fit file back.
    # hand: 1 + 0.9 + 0.9 x 0.8 + 0.9 x 0.8 x 0.7 = 3.124 at depth 3
    sc = replace(tree_sc, step_prior=None)
    b, k = _mesh()
    kernel, overhead = fd.planner_parts(sc, B, K)
    rates = json.dumps([0.9, 0.8, 0.7])
    rows = _rows(b, k, (kernel + overhead).ravel() * 1e3, per_depth=[rates if kk else "" for kk in k])
    result = fd.fit(sc, rows, n_boot=40)
    assert result["acceptance"].get("rank_tail") is None
    assert fd.fitted_acceptance_lengths(sc, result["acceptance"], [3], "rates")[0, 0] == pytest.approx(3.124)
    doc = fit_file.document(sc, result, ["runs.csv"])
    assert "rank_tail" not in doc["acceptance"]
    path = tmp_path / "fit.json"
    path.write_text(json.dumps(doc))
    fitted_sc = load_scenario(SCENARIO, **TREE, deployment=str(path))
    assert fitted_sc.acceptance.rank_tail is None
    al = compute_grid(fitted_sc, batch_sizes=np.array([1.0]), ks=np.array([3.0])).acceptance_length
    assert al[0] == pytest.approx(3.124)


def test_the_dashboards_scenario_keeps_a_tree_fits_rank_tail():
    """The dashboard copies a deployment fit's acceptance into the scenario it builds (dashboard/sidebar.py). A
    tree's fit writes top-1 rates per depth with a rank tail; without the tail the planner reads the rates as the
    tree's own per-depth rates, and the 4x8 tree at depth 3 gets the chain's length 1 + 0.8 + 0.64 + 0.512 =
    2.952 instead of the tree's. Before: scenario_raw wrote the rates alone."""
    from dashboard import state as S
    from simulator.specs.scenario import build_scenario

    raw = S.read_scenario("llama-3.1-8b-h100")
    raw.setdefault("engine", {})["name"] = "sglang"
    raw["draft"] = {"method": "eagle3:tree:4x8"}
    controls = S.controls_from_scenario(raw)
    kwargs = dict(acceptance=[0.8] * 8, acceptance_source="measured on this deployment (fit.json)",
                  model=raw["model"]["name"], profile=None)
    with_tail = build_scenario(S.scenario_raw(raw, controls, rank_tail=0.751, **kwargs), "dashboard")
    without = build_scenario(S.scenario_raw(raw, controls, **kwargs), "dashboard")
    assert with_tail.acceptance.rank_tail == 0.751
    al = lambda sc: float(compute_grid(sc, batch_sizes=[1], ks=[3]).acceptance_length[0])  # noqa: E731
    assert al(without) == pytest.approx(2.952, abs=1e-3)
    # by hand, the 8 best of the tree's 36 candidates by path probability (each further candidate at a depth
    # catches 1 - 0.751 of the misses left): 0.8, 0.64, 0.512; 0.2 x 0.249 = 0.0498 (depth 1, second); 0.8 x 0.0498
    # twice (depth 2); 0.1502 x 0.249 = 0.0374 (depth 1, third); 0.64 x 0.0498 = 0.0319 (depth 3): 1 + 2.1508
    assert al(with_tail) == pytest.approx(3.1508, abs=2e-4)
