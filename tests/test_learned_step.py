"""The learned layer (simulator/specs/step_terms.py, calibration/learn_step.py) and the deployment posterior
(calibration/fewshot.posterior, calibration.fit_deployment). Anchors: the step formula written out by hand,
synthetic rows drawn from known terms, and the new-user case of issue 47 (Llama-3.1-70B on 4 x H100, vLLM,
EAGLE-3, three steps measured about 15% slower than the physics)."""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from calibration import fewshot
from calibration import learn_step as L
from simulator.plan.grid import compute_grid
from simulator.specs.scenario import load_scenario
from simulator.specs.step_terms import (A_PRIORI_SD, LEARNED_FILE, NEUTRAL, TERM_NAMES, from_fit, load_learned_prior,
                                        step_time_s, to_fit)

REPO = Path(__file__).resolve().parent.parent
NEW_USER_ROWS = "batch_size,k,itl_ms\n1,0,16.83\n1,3,19.05\n64,3,32.34\n"
NEW_USER_SCENARIO = """name = "new-user-70b"
[model]
name = "llama-3.1-70b"
[hardware]
name = "h100-sxm"
tp = 4
[draft]
method = "eagle3"
[workload]
context_len = 2048
"""


def test_step_formula_hand():
    # s = 1.1, c_step = 1 ms, c_seq = 20 us, c_spec = 3 us, s_spec = 1.2, c_seq_spec = 40 us; B = 8, K = 3:
    # 13.2 + 0.5 + 1 + 8 * 0.02 + 8 * 0.04 + 8 * 4 * 0.003 = 15.276 ms; at K = 0: 1.1 * 10 + 0.5 + 1 + 0.16 = 12.66
    theta = np.array([1.1, 1e-3, 2e-5, 3e-6, 1.2, 4e-5, 0.0])
    t = step_time_s(theta, np.array([8, 8]), np.array([3, 0]), np.array([10e-3, 10e-3]), np.array([0.5e-3, 0.5e-3]))
    assert t[0] == pytest.approx([15.276e-3, 12.66e-3], rel=1e-12)
    # c_coll = 15 us over 160 collective calls (a TP verify pass of 80 layers) adds 2.4 ms to each
    theta[6] = 15e-6
    t = step_time_s(theta, np.array([8, 8]), np.array([3, 0]), np.array([10e-3, 10e-3]), np.array([0.5e-3, 0.5e-3]),
                    np.array([160.0, 160.0]))
    assert t[0] == pytest.approx([17.676e-3, 15.06e-3], rel=1e-12)


def test_fit_coordinates_round_trip():
    theta = np.array([1.3, 2e-4, 7e-6, 1e-6, 0.9, 3e-5, 1.2e-5])
    assert from_fit(to_fit(theta)) == pytest.approx(theta, rel=1e-12)
    assert to_fit(NEUTRAL) == pytest.approx([0, 0, 0, 0, 0, 0, 0])


def test_shipped_layer_is_what_gpu_predictions_rest_on():
    prior = load_learned_prior()
    assert prior is not None and LEARNED_FILE.is_file()
    doc = json.loads(LEARNED_FILE.read_text())
    assert doc["learned_from"]["rows"] >= 300 and doc["learned_from"]["sources"] >= 6
    sc = load_scenario("default")
    # the population, centred on the scenario's engine and GPU family where the shipped form has those levels
    assert sc.step_prior == load_learned_prior(engine=sc.engine.name, architecture=sc.hardware.architecture)
    assert sc.step_basis == "learned layer" and "learned layer" in sc.cost_source
    prior = sc.step_prior
    physics = load_scenario("default", learned=False)
    assert physics.step_prior is None and physics.step_basis == "physics only"
    # the layer adds what the physics misses: a step is never faster with it
    g, p = compute_grid(sc, batch_sizes=[64], ks=[0, 3]), compute_grid(physics, batch_sizes=[64], ks=[0, 3])
    assert g.itl_s[0, 1] >= p.itl_s[0, 1] and g.itl_s[0, 0] >= p.itl_s[0, 0]
    hand = step_time_s(np.array([prior.values[n] for n in TERM_NAMES]), np.array([64.0]), np.array([3.0]),
                       p.verify_s[0, 1:2] + p.draft_step_s[0, 1:2], p.overhead_s[0, 1:2],
                       np.broadcast_to(p.collective_calls, p.itl_s.shape)[0, 1:2],
                       np.broadcast_to(p.host_room_s, p.itl_s.shape)[0, 1:2])
    assert g.itl_s[0, 1] == pytest.approx(hand[0, 0], rel=1e-9)


def test_shipped_layer_was_learned_from_the_rows_todays_physics_prices():
    # a physics change that moves a training row leaves the shipped layer stale (it was, once, for a whole stop)
    doc = json.loads(LEARNED_FILE.read_text())
    rows = L.training_rows(L.corpus_cases(L.read_corpus(L.CORPUS)))
    assert L.rows_digest(rows) == doc["learned_from"]["training_rows_sha256"], (
        "simulator/data/learned_step.json is stale: run python -m calibration.learn_step, then make transfer")


def test_cpu_scenarios_have_no_learned_layer():
    sc = load_scenario(str(REPO / "scenarios" / "smollm2-cpu.toml"))
    assert sc.step_prior is None  # the published corpus has no CPU rows


def test_serving_prices_the_learned_terms_as_the_grid_does():
    from simulator.serving import StepPricer, engine_from_scenario
    # on vLLM 0.11, which hides no host time behind the GPU (engine_time.host_room_s: no room), so the layer's host
    # terms are paid in full (on an engine that overlaps they hide: tests/test_host_room.py)
    sc = load_scenario("llama-3.1-8b-h100", engine="vllm", engine_version="0.11.0")
    physics = replace(sc, step_prior=None)
    assert sc.step_prior is not None
    g, p = compute_grid(sc, batch_sizes=[16], ks=[0, 3]), compute_grid(physics, batch_sizes=[16], ks=[0, 3])
    served = {}
    for name, s in (("learned", sc), ("physics", physics)):
        pricer = StepPricer(s, engine_from_scenario(s), 4, 64, 4096, True)
        served[name] = [pricer.step_s(16, k, 16 * (k + 1), float(s.context_len), True, 0.0)[0] for k in (1, 3)]
    # what the layer adds to a speculating step is the same in the serving simulation as on the grid (to 1%)
    added_grid = g.itl_s[0, 1] - p.itl_s[0, 1]
    assert added_grid > 0
    assert served["learned"][1] - served["physics"][1] == pytest.approx(added_grid, rel=0.01)


def _synthetic_rows(theta_by_source: dict, seed: int = 0) -> L.Rows:
    """Plain and speculating step rows of several sources priced from known terms (1% scatter)."""
    rng = np.random.default_rng(seed)
    recs = []
    for src, theta in theta_by_source.items():
        for b in (1, 4, 16, 64, 128):
            for k in (0, 1, 3):  # a kernel time curved in B: its scale is not a host cost per sequence
                kern, over = 5e-3 * (1 + 0.05 * k) + 3e-8 * b * b * (k + 1), 2e-4
                t = step_time_s(theta, np.array([b]), np.array([k]), np.array([kern]), np.array([over]))[0, 0]
                recs.append((src, b, k, kern, over, np.log(t) + rng.normal(0, 0.01)))
    n = len(recs)
    col = lambda i, dt=float: np.array([r[i] for r in recs], dtype=dt)  # noqa: E731
    return L.Rows(col(0, object), np.full(n, "h100-sxm", dtype=object), np.full(n, "e", dtype=object),
                  np.full(n, "step", dtype=object), np.full(n, -1), col(5), col(1), col(2), col(3), col(4),
                  col(1), col(3), col(4), np.zeros(n), np.full(n, np.nan), np.arange(n), *(np.zeros(n) for _ in range(4)))


def test_population_recovers_terms_drawn_around_a_known_centre():
    centre = np.array([1.0, 0.0, 0.0, 1e-6, 1.05, 3e-5, 0.0])
    spread = np.array([1.0, 1, 1, 1, 1.02, 1, 1])  # sources differ a little in their speculative kernel scale
    sources = {f"s{i}": centre * spread ** (i - 1) for i in range(3)}
    rows = _synthetic_rows(sources)
    pop = L.fit_population(rows, "speculation terms")
    learned = from_fit(pop.mean_fit)
    assert learned[4] == pytest.approx(1.05, rel=0.02)
    assert learned[5] == pytest.approx(3e-5, abs=5e-6)
    assert learned[:3] == pytest.approx([1.0, 0.0, 0.0])  # outside the form: the physics
    assert pop.row_sigma < 0.03
    # every term free: the terms trade off at small B, the steps they give do not
    full = L.fit_population(rows, "all terms")
    pred, scored = L.predict_rows(rows, full)
    assert scored.all() and pred == pytest.approx(np.exp(rows.y_log), rel=0.05)
    assert pop.row_sigma < 0.03


def test_held_out_layer_never_sees_its_group():
    rows = _synthetic_rows({"a": np.array([1.2, 0, 0, 0, 1.0, 0, 0]), "b": np.array([1.0, 0, 0, 0, 1.0, 0, 0]),
                            "c": np.array([1.0, 0, 0, 0, 1.0, 0, 0])})
    learner = L.Learner(rows)
    pop = learner.without("source", "a")
    assert pop.sources == ("b", "c") and pop.n_rows == int((rows.source != "a").sum())
    assert set(pop.form_errors) == set(L.FORMS)  # the form was chosen on b and c alone


# --- the posterior ----------------------------------------------------------------------------------

def _points(batch, k, kernel_ms):
    n = len(batch)
    b, kk = np.asarray(batch, dtype=float), np.asarray(k, dtype=float)
    kern = np.asarray(kernel_ms, dtype=float) * 1e-3
    return fewshot.Points(b, kk, kern, np.full(n, 0.2e-3), kern, np.full(n, 0.2e-3), np.full((n, 4), 0.7))


def test_posterior_without_points_is_the_prior():
    mean = to_fit(np.array([1.1, 0, 0, 1e-6, 1.05, 3e-5, 1e-5]))
    res = fewshot.posterior("step", _points([], [], []), np.zeros(0), mean, A_PRIORI_SD)
    assert res["theta"][:7] == pytest.approx(from_fit(mean), rel=1e-6, abs=1e-12)
    assert res["posterior_sd_fit"] == pytest.approx(A_PRIORI_SD, rel=1e-3)


def test_consistent_points_narrow_every_term_and_reproduce_the_steps():
    truth = np.array([1.2, 0, 0, 0, 1.0, 0, 0])
    pts = _points([1, 8, 32, 64], [0, 0, 0, 0], [10, 11, 14, 18])
    y = np.log(step_time_s(truth, pts.batch, pts.k, pts.kernel_s, pts.overhead_s)[0])
    res = fewshot.posterior("step", pts, y, to_fit(NEUTRAL), A_PRIORI_SD)
    assert np.all(res["posterior_sd_fit"] <= A_PRIORI_SD + 1e-12)
    assert np.exp(fewshot.predict_log("step", res["theta"], pts)[0]) == pytest.approx(np.exp(y), rel=0.02)
    assert not res["disagree"]


def test_points_that_disagree_say_so():
    pts = _points([8, 8, 8, 8], [0, 0, 0, 0], [10, 10, 10, 10])
    y = np.log(np.array([10.2, 13.0, 10.2, 13.0]) * 1e-3)  # the same cell measured 27% apart
    res = fewshot.posterior("step", pts, y, to_fit(NEUTRAL), A_PRIORI_SD)
    assert res["disagree"] and res["sigma"] > 2 * fewshot.NOISE_FLOOR


@pytest.fixture(scope="module")
def new_user_fit(tmp_path_factory):
    from calibration import fit_deployment as fd
    d = tmp_path_factory.mktemp("new_user")
    (d / "s.toml").write_text(NEW_USER_SCENARIO)
    (d / "rows.csv").write_text(NEW_USER_ROWS)
    assert fd.main(["--scenario", str(d / "s.toml"), "--measured", str(d / "rows.csv"), "--output", str(d / "fit.json")]) == 0
    return json.loads((d / "fit.json").read_text())


def test_new_user_three_points_narrow_the_band(new_user_fit):
    u = new_user_fit["uncertainty"]
    assert u["step_time_rel"] < u["zero_shot_step_time_rel"] and u["goodput_rel"] < u["zero_shot_goodput_rel"]
    assert not u["points_disagree"] and "learned layer" in u["prior"]
    assert u["step_time_rel"] < 0.10  # issue 47: the three points had left +-31%


def test_new_user_refit_steps_within_two_percent(new_user_fit):  # issue 47's target
    # met since the collective term (a TP-4 step's 161 calls a verify pass); before it B=64 K=3 refit +2.03%
    for p in new_user_fit["points"]:
        assert p["fitted_itl_ms"] == pytest.approx(p["itl_ms"], rel=0.02)


# --- decisions that carry their uncertainty -----------------------------------------------------------

def test_no_spread_gives_certain_decisions_equal_to_the_centre():
    from simulator.plan import decision_risk as D
    from simulator.specs.step_terms import prior_from
    sc = load_scenario("command-a-h100")
    still = replace(sc, step_prior=prior_from(sc.step_prior.mean_fit, np.zeros(len(TERM_NAMES))))  # the population without spread
    g = compute_grid(still, batch_sizes=[1, 64, 128, 256], ks=[0, 1, 2, 3])
    p, basis = D.beats_plain(g, still.step_terms)
    beats = g.goodput_per_seq > g.goodput_per_seq[:, :1]
    assert np.array_equal(p[:, 1:] == 1.0, beats[:, 1:]) and set(np.unique(p)) <= {0.0, 1.0}
    # every draw is the centre: the score K* is chosen on is each K's share of the best goodput, 1 at the argmax
    # (to float32's rounding: the draws are priced in D.DRAW_DTYPE)
    # (K = 0 as vLLM 0.33 runs a dynamic-K table's K = 0 entry: plain + the drafter's pass, Grid.as_engine_runs)
    run = g.as_engine_runs.goodput_per_seq
    share = run / run.max(axis=1, keepdims=True)
    np.testing.assert_allclose(g.selection_score, share, rtol=4 * np.finfo(D.DRAW_DTYPE).eps)
    assert np.array_equal(g.k_star, g.centre_k()) and "learned layer" in basis


def test_k_star_is_the_k_nearest_the_best_at_the_pessimistic_tenth_of_the_draws():
    # issue 47 item 4: K* is chosen on the draws of the engine terms, not at their centre. By hand from the
    # goodput draws (decision_risk.goodput_draws, the path p_speculation_pays reads): each K's share of the
    # best K of the same draw, its 10% quantile over the 128 draws, argmax over K
    from simulator.plan import decision_risk as D
    # on vLLM 0.11 (no host overlap: the terms' host time and its spread are paid in full)
    sc = load_scenario("command-a-h100", engine_version="0.11.0")
    g = compute_grid(sc, batch_sizes=np.arange(1, 257), ks=np.arange(0, 6))
    good, _ = D.goodput_draws(g.as_engine_runs, sc.step_terms)  # K = 0 as the engine's dynamic-K table runs it
    by_hand = np.quantile(good / good.max(axis=2, keepdims=True), 0.10, axis=0)
    assert np.array_equal(g.ks[np.argmax(by_hand, axis=1)], g.ks[g.argmax_k_index()])
    # somewhere the centre's best K gains less than the terms' spread and K* is another one
    moved = g.centre_k() != g.ks[g.argmax_k_index()]
    assert moved.any()
    # --decision-quantile 0: the per-batch choice is the centre's argmax again
    centre = compute_grid(replace(sc, decision_quantile=0.0), batch_sizes=np.arange(1, 257), ks=np.arange(0, 6))
    assert np.array_equal(centre.ks[centre.argmax_k_index()], g.centre_k())


@pytest.mark.xfail(strict=True, reason="since the layer's host time hides where the engine hides its own (vLLM 0.33 "
                   "overlaps: docs/learned_layer_choices.md, ninth pass) the planner is the physics plus 11 us a "
                   "collective here: K* = 1 at B 128 pays in all the draws (p 1.0), where Cohere measured K = 3 at 0.87x")
def test_the_seed_case_speculation_is_a_coin_flip_at_b128():
    # Cohere measured fixed K = 3 at about 0.87x plain at B = 128 (issue 47): the planner's K* there is a
    # small gain that the terms' spread does not support; the probability says so
    from simulator.plan.api import predict
    t = predict("command-a-h100", batch_sizes="1,128").table.set_index("batch_size")
    assert t.loc[1, "p_kopt_beats_plain"] == 1.0
    assert 0.2 < t.loc[128, "p_speculation_pays"] < 0.9


def test_goodput_band_carries_the_layers_speedup_misfit(new_user_fit):
    # the goodput band after the points: the posterior's spread with the points' scatter and the learned layer's
    # speedup misfit in quadrature, so it is at least 1.645 x that misfit (a 90% band of a normal log error)
    misfit = json.loads(LEARNED_FILE.read_text())["misfit_log_by_kind"]["speedup"]
    u = new_user_fit["uncertainty"]
    assert u["model_misfit_log"] == pytest.approx(misfit, rel=1e-4)
    assert u["goodput_rel"] >= 1.645 * misfit * (1 - 1e-6)
    assert u["goodput_rel"] < u["zero_shot_goodput_rel"]


def test_physics_only_holds_on_every_sizing_candidate():
    # a candidate on another GPU drops the scenario's calibration profile (it belongs to its device) but keeps
    # --physics-only; the learned layer stays on where it was not asked away
    from simulator.sizing.candidate import Candidate, candidate_scenario
    physics = load_scenario("sizing-dense-command-a", learned=False)
    assert physics.profile is not None and physics.profile.hardware == "h100-sxm"
    other = candidate_scenario(physics, Candidate("mi300x", 8))
    assert other.step_prior is None and other.step_basis == "physics only"
    assert candidate_scenario(load_scenario("sizing-dense-command-a"), Candidate("mi300x", 8)).step_basis == "learned layer"


@pytest.mark.parametrize("value", ["0.5", "-0.1", "abc", "70%"])
def test_decision_quantile_out_of_range_is_one_line(value):
    from cli_inprocess import run_main
    r = run_main("simulator.predict", "--decision-quantile", value)
    assert r.returncode == 2 and r.stdout == ""
    (line,) = r.stderr.strip().splitlines()
    assert "--decision-quantile" in line and "[0, 0.5)" in line and "centre" in line


def test_decision_quantile_zero_and_default_print_what_k_star_is_chosen_on():
    from cli_inprocess import run_main
    default = run_main("simulator.predict", "--scenario", "command-a-h100")
    centre = run_main("simulator.predict", "--scenario", "command-a-h100", "--decision-quantile", "0")
    assert "at the engine terms' pessimistic 10%" in default.stdout
    assert "pessimistic" not in centre.stdout.split("\n")[1]  # the schedule line: at the centre, no draws
