"""Few-shot deployment calibration (calibration.fit_deployment, calibration/fewshot.py) and its use by
the planner (--deployment). Anchors: hand formulas written out in the tests, the committed CPU engine
runs (calibration/data/runs/smollm2-cpu-ngram.csv), the vLLM bench fixtures (tests/fixtures/vllm)."""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from calibration import fewshot
from calibration import fit_deployment as fd
from simulator.cli import predict as predict_cli
from simulator.errors import PlannerError
from simulator.specs.deployment_fit import added_step_s, load_deployment_fit
from simulator.specs.step_terms import A_PRIORI_SD, NEUTRAL, to_fit
from deployment_fit_docs import cpu_fit_doc, write_fit

REPO = Path(__file__).resolve().parent.parent
RUNS = REPO / "calibration" / "data" / "runs" / "smollm2-cpu-ngram.csv"
CPU_SCENARIO = str(REPO / "scenarios" / "smollm2-cpu.toml")
VLLM = REPO / "tests" / "fixtures" / "vllm"


# --- the formulas, by hand ------------------------------------------------------------------------

def test_step_time_hand():  # hand: 1.2 * 10 + 0.5 + 1 + 8 * 0.02 + 8 * 4 * 0.003 ms = 13.756 ms
    theta = np.array([1.2, 1e-3, 2e-5, 3e-6, 1.0, 0.0, 0.0, 1.0])
    t = fewshot.step_time_s(theta, [8], [3], np.array([10e-3]), np.array([0.5e-3]))
    assert t[0, 0] == pytest.approx(13.756e-3, rel=1e-12)
    # plain decoding pays no per-speculative-token cost: 12 + 0.5 + 1 + 0.16 ms
    t0 = fewshot.step_time_s(theta, [8], [0], np.array([10e-3]), np.array([0.5e-3]))
    assert t0[0, 0] == pytest.approx(13.66e-3, rel=1e-12)
    assert added_step_s(1e-3, 2e-5, 3e-6, 8, 3) == pytest.approx(1e-3 + 16e-5 + 96e-6)


def test_acceptance_length_hand():  # hand: 1 + 0.8 + 0.8 * 0.5 = 2.2; scaled 1.25: 1 + 0.999 + 0.999 * 0.625
    rates = np.array([[0.8, 0.5]])
    assert fewshot.acceptance_length(1.0, rates, np.array([2]))[0, 0] == pytest.approx(2.2)
    assert fewshot.acceptance_length(1.25, rates, np.array([2]))[0, 0] == pytest.approx(1 + 0.999 + 0.999 * 0.625)
    assert fewshot.acceptance_length(1.0, rates, np.array([1]))[0, 0] == pytest.approx(1.8)


def _points(batch, k, kernel_ms, overhead_ms, rates=0.6):
    batch, k = np.asarray(batch, float), np.asarray(k, float)
    kern, over = np.asarray(kernel_ms) * 1e-3, np.asarray(overhead_ms) * 1e-3
    # the plain step of each B: the kernel of K = 0 grows with B here as 5 ms + 0.05 ms per sequence
    kern0 = (5.0 + 0.05 * batch) * 1e-3
    return fewshot.Points(batch, k, kern, over, kern0, np.full(batch.size, 0.2e-3),
                          np.full((batch.size, int(max(k.max(), 1))), rates))


def test_capped_speedup_point_by_hand():
    # a closed loop of 64 users whose speculating server runs 48: speedup = AL x (48 / 64) x T0(64) / T(48)
    # with T = s kernel + overhead + c_seq B (+ c_spec B (K + 1) at K > 0); here s = 1.1, c_seq = 20 us
    pts = fewshot.Points(np.array([48.0]), np.array([2.0]), np.array([20e-3]), np.array([1e-3]), np.array([15e-3]),
                         np.array([0.5e-3]), np.array([[0.8, 0.5]]), batch0=np.array([64.0]), share=np.array([0.75]))
    theta = np.array([1.1, 0.0, 20e-6, 0.0, 1.0, 0.0, 0.0, 1.0])
    t_spec = 1.1 * 20e-3 + 1e-3 + 20e-6 * 48
    t_plain = 1.1 * 15e-3 + 0.5e-3 + 20e-6 * 64
    hand = 2.2 * 0.75 * t_plain / t_spec
    assert np.exp(fewshot.predict_log("speedup", theta, pts)[0, 0]) == pytest.approx(hand, rel=1e-12)
    assert fewshot.subset(pts, [0]).batch0[0] == 64.0 and fewshot.subset(pts, [0]).share[0] == 0.75


def test_posterior_recovers_known_terms_from_synthetic_steps():
    # measured = 1.3 * kernel + overhead + 4 us * B * (K + 1) [K > 0], written out by hand per point; the
    # prior (the physics, each term within its a priori spread) holds the terms the points do not need
    batch, k = [1, 8, 32, 64], [0, 3, 3, 1]
    kernel_ms, overhead_ms = [5.05, 6.0, 9.0, 12.0], [0.2, 0.3, 0.4, 0.6]
    measured_ms = [1.3 * 5.05 + 0.2, 1.3 * 6.0 + 0.3 + 0.004 * 8 * 4, 1.3 * 9.0 + 0.4 + 0.004 * 32 * 4,
                   1.3 * 12.0 + 0.6 + 0.004 * 64 * 2]
    pts = _points(batch, k, kernel_ms, overhead_ms)
    y = np.log(np.array(measured_ms) * 1e-3)
    res = fewshot.posterior("step", pts, y, to_fit(NEUTRAL), A_PRIORI_SD, n_samples=40)
    th = res["theta"]
    assert th[0] == pytest.approx(1.3, rel=0.03)
    assert np.exp(fewshot.predict_log("step", th, pts)[0]) == pytest.approx(np.exp(y), rel=0.01)
    lo, hi = fewshot.interval(res["samples"])
    assert lo[0] <= 1.3 <= hi[0]


def test_two_shot_posterior_recovers_acceptance_and_cost():
    # speedup = AL(K) T(B, 0) / T(B, K), AL of an i.i.d. rate 0.7 at K = 3: 1 + .7 + .49 + .343 = 2.533,
    # T(B, K) = kernel + overhead + 10 us * B * 4, T(B, 0) = (5 + 0.05 B) + 0.2 ms; three points, acceptance free
    al = 1 + 0.7 + 0.49 + 0.343
    batch = np.array([2.0, 32.0, 64.0])
    kern_k = np.array([7.0, 9.0, 11.0])
    t_k = kern_k + 0.3 + 0.010 * batch * 4
    t_0 = 5 + 0.05 * batch + 0.2
    pts = _points(batch, [3, 3, 3], kern_k, [0.3, 0.3, 0.3], rates=0.5)
    res = fewshot.posterior("speedup", pts, np.log(al * t_0 / t_k), to_fit(NEUTRAL), A_PRIORI_SD, n_samples=40,
                            free_acceptance=True)
    assert np.exp(fewshot.predict_log("speedup", res["theta"], pts)[0]) == pytest.approx(al * t_0 / t_k, rel=0.01)
    assert res["theta"][fewshot.ACCEPTANCE] * 0.5 == pytest.approx(0.7, rel=0.05)


def test_posterior_stays_within_bounds():  # the measured step is faster than the planner's kernels alone: s >= 0.5
    pts = _points([1, 2], [0, 0], [10.0, 10.5], [0.0, 0.0])
    res = fewshot.posterior("step", pts, np.log([2e-3, 2.1e-3]), to_fit(NEUTRAL), A_PRIORI_SD, n_samples=20)
    assert res["theta"][0] >= 0.5 - 1e-9 and res["samples"][:, 0].min() >= 0.5 - 1e-9 and res["theta"][1] >= 0


def test_next_measurement_is_the_most_overlapping_rival():
    # B = 1: K = 1 at 10 +- 1, K = 2 at 10.5 +- 1 (overlap); B = 2: K = 1 at 10, K = 2 at 20 (apart)
    rng = np.random.default_rng(0)
    m = 400
    g = np.empty((m, 2, 2))
    g[:, 0, 0], g[:, 0, 1] = 10 + rng.normal(0, 0.6, m), 10.5 + rng.normal(0, 0.6, m)
    g[:, 1, 0], g[:, 1, 1] = 10 + rng.normal(0, 0.1, m), 20 + rng.normal(0, 0.1, m)
    out = fewshot.next_measurements(g, np.array([1, 2]), np.array([1, 2]), measured=set())
    assert [(d["batch_size"], d["k"], d["k_star"]) for d in out] == [(1, 1, 2)]
    assert fewshot.next_measurements(g, np.array([1, 2]), np.array([1, 2]), measured={(1, 1)}) == []


# --- the command line, round trip -----------------------------------------------------------------

def _two_cells(tmp_path: Path) -> Path:
    runs = pd.read_csv(RUNS)
    rows = runs[((runs.batch_size == 1) & (runs.k == 0)) | ((runs.batch_size == 16) & (runs.k == 3))]
    path = tmp_path / "two.csv"
    rows.to_csv(path, index=False)
    return path


@pytest.mark.slow
def test_cli_round_trip_applies_the_terms_in_the_grid(tmp_path, capsys):
    out = tmp_path / "fit.json"
    assert fd.main(["--scenario", CPU_SCENARIO, "--measured", str(_two_cells(tmp_path)), "--output", str(out),
                    "--bootstrap", "40"]) == 0
    text = capsys.readouterr().out
    assert "next: measure B=" in text
    doc = json.loads(out.read_text())
    assert doc["format"] == "dsd-planner-deployment-fit" and doc["scenario"]["model"] == "smollm2-135m"
    assert [(p["batch_size"], p["k"]) for p in doc["points"]] == [(1, 0), (16, 3)]
    # acceptance: the one K = 3 row's measured per-position rates (calibration/data/runs, B = 16, K = 3)
    runs = pd.read_csv(RUNS)
    measured = json.loads(runs[(runs.batch_size == 16) & (runs.k == 3)].per_position_acceptance.iloc[0])
    assert doc["acceptance"]["rates"][:3] == pytest.approx(measured, abs=1e-6)
    fit = load_deployment_fit(out)

    # the planner with the file: ITL = s (verify + draft) + overhead + added, from the grid without it
    from simulator.plan.api import predict
    plain = predict(CPU_SCENARIO, batch_sizes="8")
    fitted = predict(CPU_SCENARIO, batch_sizes="8", deployment=str(out))
    g0, g1 = plain.grid, fitted.grid
    s, t = doc["terms"]["kernel_scale"]["value"], doc["terms"]
    spec = g0.ks > 0
    by_hand = (s * np.where(spec, t["spec_kernel_scale"]["value"], 1.0) * (g0.verify_s + g0.draft_step_s) + g0.overhead_s
               + t["host_per_step_s"]["value"] + t["host_per_seq_s"]["value"] * 8
               + (t["spec_host_per_seq_s"]["value"] * 8 + t["spec_per_token_s"]["value"] * 8 * (g0.ks + 1)) * spec)
    np.testing.assert_allclose(g1.itl_s, by_hand, rtol=1e-12)
    assert fit.acceptance_rates[:3] == pytest.approx(measured, abs=1e-6)
    prov = fitted.provenance
    assert "fit.json" in prov["deployment_fit"] and "B=1 K=0, B=16 K=3" in prov["deployment_fit"]
    assert "deployment fit fit.json" in prov["uncertainty"] and "fit.json" in prov["step_time_source"]

    assert predict_cli.main(["--scenario", CPU_SCENARIO, "--deployment", str(out), "--batch-sizes", "1,8",
                             "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert "fit.json" in data["provenance"]["deployment_fit"]


@pytest.mark.slow
def test_vllm_bench_json_points(tmp_path, capsys):
    out = tmp_path / "fit.json"
    assert fd.main(["--scenario", "llama-3.1-8b-h100", "--measured", str(VLLM / "bench_k0_c8.json"),
                    str(VLLM / "bench_k3_c8.json"), "--output", str(out), "--bootstrap", "30"]) == 0
    doc = json.loads(out.read_text())
    # fixtures: max_concurrency 8, median ITL 26.74 ms at K = 3 (54120 drafts / 18040 steps)
    assert {(p["batch_size"], p["k"]) for p in doc["points"]} == {(8, 0), (8, 3)}
    assert any(p["itl_ms"] == pytest.approx(26.74) for p in doc["points"])
    # vLLM's unconditional rates 0.7866, 0.6105, 0.4410 -> conditional a_2 = 0.6105 / 0.7866
    assert doc["acceptance"]["rates"][1] == pytest.approx(0.6105 / 0.7866, rel=1e-3)


# --- bad input: one line, exit 2, nothing written -------------------------------------------------

def _refused(capsys, argv, out: Path, runner=fd.main):
    before = out.read_bytes() if out.exists() else None
    assert runner(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:"), err
    assert (out.read_bytes() if out.exists() else None) == before
    return err[0]


def test_bad_inputs_refused(tmp_path, capsys):
    out = tmp_path / "fit.json"
    out.write_text("previous\n")
    bad = tmp_path / "bad.csv"
    bad.write_text("batch_size,k\n1,0\n")
    assert "missing column" in _refused(capsys, ["--scenario", CPU_SCENARIO, "--measured", str(bad), "--output", str(out)], out)
    bad.write_text("batch_size,k,itl_ms\n1,0,abc\n2,0,5\n")
    assert "itl_ms" in _refused(capsys, ["--scenario", CPU_SCENARIO, "--measured", str(bad), "--output", str(out)], out)
    one = tmp_path / "one.csv"
    one.write_text("batch_size,k,itl_ms\n4,0,80\n4,0,81\n")
    assert "at least 2" in _refused(capsys, ["--scenario", CPU_SCENARIO, "--measured", str(one), "--output", str(out)], out)
    assert "not found" in _refused(capsys, ["--scenario", CPU_SCENARIO, "--measured", str(tmp_path / "no.csv"),
                                            "--output", str(out)], out)
    nowhere = tmp_path / "missing-dir" / "fit.json"
    assert "does not exist" in _refused(capsys, ["--scenario", CPU_SCENARIO, "--measured", str(one),
                                                 "--output", str(nowhere)], nowhere)
    assert not nowhere.parent.exists()


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only directories")
def test_unwritable_output_refused(tmp_path, capsys):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        _refused(capsys, ["--scenario", CPU_SCENARIO, "--measured", str(RUNS), "--output", str(ro / "f.json")],
                 ro / "f.json")
    finally:
        ro.chmod(0o700)


def _fit_doc(model="smollm2-135m") -> dict:
    return cpu_fit_doc(model)


def test_predict_refuses_a_fit_of_another_deployment(tmp_path, capsys):
    path = tmp_path / "fit.json"
    path.write_text(json.dumps(_fit_doc()))
    out = tmp_path / "table.txt"
    line = _refused(capsys, ["--scenario", "llama-3.1-8b-h100", "--deployment", str(path), "--output", str(out)],
                    out, predict_cli.main)
    assert "fitted for another deployment" in line and "smollm2-135m" in line
    path.write_text(json.dumps(_fit_doc() | {"format": "other"}))
    assert "not a deployment calibration" in _refused(
        capsys, ["--scenario", CPU_SCENARIO, "--deployment", str(path)], out, predict_cli.main)
    doc = _fit_doc()
    doc["terms"]["kernel_scale"]["value"] = 7.0  # outside [0.5, 2]
    path.write_text(json.dumps(doc))
    assert "kernel_scale" in _refused(capsys, ["--scenario", CPU_SCENARIO, "--deployment", str(path)], out,
                                      predict_cli.main)


def test_loader_reads_a_hand_written_file(tmp_path):
    path = tmp_path / "fit.json"
    path.write_text(json.dumps(_fit_doc()))
    fit = load_deployment_fit(path)
    assert fit.kernel_scale == 1.1 and fit.fitted == ("kernel_scale",)
    assert fit.added_s(8, 3) == 0.0 and "fit.json (2 points: B=1 K=0, B=8 K=2" in fit.label
    with pytest.raises(PlannerError, match="fitted for another deployment"):
        load_deployment_fit(path, "x", dict(fit.identity, hardware="h100-sxm"))


def test_serving_steps_pay_the_fitted_host_terms(tmp_path):
    # hand: kernel_scale 1, 1 ms per step, 10 us per speculative token: a step of 4 sequences at K = 2
    # costs 1 ms + 4 * 3 * 10 us = 1.12 ms more than without the file, a plain step 1 ms more
    from simulator import serving
    from simulator.specs.scenario import load_scenario
    doc = _fit_doc()
    doc["terms"] = {"host_per_step_s": {"value": 1e-3, "interval": [1e-3, 1e-3], "fitted": True},
                    "spec_per_token_s": {"value": 1e-5, "interval": [1e-5, 1e-5], "fitted": True}}
    path = tmp_path / "fit.json"
    path.write_text(json.dumps(doc))
    base, fitted = load_scenario(CPU_SCENARIO), load_scenario(CPU_SCENARIO, deployment=str(path))
    steps = []
    for sc in (base, fitted):
        eng = serving.engine_from_scenario(sc)
        pricer = serving.StepPricer(sc, eng, 3, 8, 512, True)
        steps.append([pricer.step_s(4, k, 4 * (k + 1), 200.0, k > 0, 0.0)[0] for k in (0, 2)])
    assert steps[1][0] - steps[0][0] == pytest.approx(1e-3, rel=1e-9)
    assert steps[1][1] - steps[0][1] == pytest.approx(1.12e-3, rel=1e-9)


@pytest.mark.transfer
def test_two_shot_on_the_eagle_chain_h100_curve():
    # corpus rows 35-43 (EAGLE-3 paper Table 3, chain EAGLE, Llama-3.1-8B, H100, SGLang): fitted on B = 2
    # and B = 24 (the smallest and the middle of 9), the held-out B = 4, 8, 16 speedups 1.38, 1.23, 1.02
    # come within 5%; the zero-shot planner (anchored on B = 2) says 1.42, 1.41, 1.37 (transfer.md)
    from calibration import transfer_twoshot as tt
    from calibration.transfer import CORPUS, Case, case_for
    corpus = pd.read_csv(CORPUS)
    rows = corpus[(corpus.source_id == "eagle3-paper") & (corpus.device == "H100") & (corpus.draft_method == "eagle")
                  & (corpus.metric == "spec_speedup")]
    cases = [c for c in (case_for(r) for _, r in rows.iterrows()) if isinstance(c, Case)]
    (curve,) = tt.speedup_curves(cases)
    out = pd.DataFrame(tt.two_shot_curve(curve))
    assert set(out.fit_points) == {"B=2 K=3; B=24 K=3"} and 2 not in set(out.batch_size) and 24 not in set(out.batch_size)
    small = out[out.batch_size <= 16]
    assert list(small.measured) == [1.38, 1.23, 1.02]
    assert ((small.predicted / small.measured - 1).abs() < 0.05).all()
    s = tt.summarize_two_shot(out.assign(error=out.predicted / out.measured - 1, error_datasheet=0.0,
                                         decision_right=True, decision_right_datasheet=True, inside_interval=True))
    names = [line.split("|")[1].strip() for line in tt.markdown_rows(s)]
    assert names[0].startswith("two-shot speculative speedup") and names[1] == "two-shot decision right"


def test_acceptance_given_as_a_flag_outranks_the_fit(tmp_path):
    from simulator.specs.scenario import load_scenario
    doc = _fit_doc()
    doc["acceptance"] = {"rates": [0.3, 0.2]}
    path = tmp_path / "fit.json"
    path.write_text(json.dumps(doc))
    assert load_scenario(CPU_SCENARIO, deployment=str(path)).acceptance.rates == (0.3, 0.2)
    given = load_scenario(CPU_SCENARIO, deployment=str(path), acceptance="0.6")
    assert given.acceptance.rates == (0.6,)
    assert given.with_overrides(context_len=300).acceptance.rates == (0.6,)  # kept through later overrides


def test_sizing_keeps_the_fit_only_on_its_deployment(tmp_path):
    from simulator.sizing.candidate import Candidate, candidate_scenario as moved
    from simulator.specs.scenario import load_scenario
    path = tmp_path / "fit.json"
    path.write_text(json.dumps(_fit_doc()))
    sc = load_scenario(CPU_SCENARIO, deployment=str(path))
    assert moved(sc, Candidate("cpu-xeon-2c", 1)).deployment_fit is not None
    assert moved(sc, Candidate("h100-sxm", 1)).deployment_fit is None  # another GPU: not measured there
    scaled = moved(sc, Candidate("cpu-xeon-2c", 1), acceptance_scale=0.5)
    assert scaled.acceptance.rates[0] == pytest.approx(sc.acceptance.rates[0] * 0.5)


def test_size_refuses_a_fit_of_another_deployment(tmp_path, capsys):
    from simulator.cli import size as size_cli
    path = tmp_path / "fit.json"
    path.write_text(json.dumps(_fit_doc()))
    out = tmp_path / "reports"
    line = _refused(capsys, ["--scenario", "sizing-dense-command-a", "--deployment", str(path), "--output-dir",
                             str(out)], out / "x", size_cli.main)
    assert "fitted for another deployment" in line and not out.exists()


def test_size_with_a_fit_of_its_deployment_writes_reports_that_name_it(tmp_path):
    # a fit of the bundled sizing scenario's own deployment (Command A, 8 x H100, vLLM, EAGLE): the reports
    # are written (the output-file check once read the loaded scenario as a path and crashed) and say so
    from simulator.cli import size as size_cli
    (tmp_path / "runs.csv").write_text("batch_size,k,itl_ms\n16,0,30.0\n16,3,42.0\n")
    fit = tmp_path / "fit.json"
    assert fd.main(["--scenario", "sizing-dense-command-a", "--measured", str(tmp_path / "runs.csv"),
                    "--output", str(fit)]) == 0
    out = tmp_path / "reports"
    assert size_cli.main(["--scenario", "sizing-dense-command-a", "--deployment", str(fit), "--output-dir", str(out),
                          "--format", "markdown", "--candidates", "h100-sxm", "--tp", "8", "--no-sensitivity",
                          "--quiet"]) == 0
    text = (out / "sizing-dense-command-a.md").read_text()
    assert "deployment fit fit.json (2 points: B=16 K=0, B=16 K=3" in text


def test_a_fit_records_its_precision_and_another_precision_refuses_it(tmp_path, capsys):
    # steps measured in bf16 say nothing of an fp8 deployment: the file names the precision and predict
    # refuses it there in one line (exit 2); a file without the precision keys (older fits) still loads
    (tmp_path / "runs.csv").write_text("batch_size,k,itl_ms\n16,0,16.0\n16,3,23.1\n")
    fit = tmp_path / "fit.json"
    assert fd.main(["--scenario", "sizing-dense-command-a", "--measured", str(tmp_path / "runs.csv"),
                    "--output", str(fit)]) == 0
    ident = json.loads(fit.read_text())["scenario"]
    assert (ident["weights"], ident["activations"], ident["kv_cache"]) == ("bf16", "bf16", "bf16")
    capsys.readouterr()
    assert predict_cli.main(["--scenario", "sizing-dense-command-a", "--deployment", str(fit), "--dtype", "fp8"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "fitted for another deployment" in err and "weights 'bf16' (scenario: 'fp8')" in err
    doc = json.loads(fit.read_text())
    for key in ("weights", "activations", "kv_cache"):
        doc["scenario"].pop(key)
    fit.write_text(json.dumps(doc))
    assert predict_cli.main(["--scenario", "sizing-dense-command-a", "--deployment", str(fit), "--dtype", "fp8",
                             "--batch-sizes", "1,16"]) == 0




def test_a_fit_records_its_kernel_basis_and_another_profile_refuses_it(tmp_path, capsys):
    # the terms correct one set of kernel times: steps measured on the AMD EPYC box (fitted over the EPYC session's
    # microbenchmarks, calibration/data/runs/cpu-epyc-2c.profile.json) say nothing about the Xeon profile the
    # bundled scenario prices with. Found as a new user would: the README's example paired the EPYC runs with the
    # Xeon scenario, and its fit sat kernel_scale on its bound (2.0) with a +-31% band
    epyc = "calibration/data/runs/cpu-epyc-2c.profile.json"
    (tmp_path / "runs.csv").write_text("batch_size,k,itl_ms\n1,0,92.9\n1,3,187.3\n8,3,481.3\n")
    fit = tmp_path / "fit.json"
    assert fd.main(["--scenario", CPU_SCENARIO, "--calibration", str(REPO / epyc), "--measured",
                    str(tmp_path / "runs.csv"), "--output", str(fit)]) == 0
    assert json.loads(fit.read_text())["scenario"]["kernel_basis"] == "cpu-epyc-2c.profile.json"
    capsys.readouterr()
    assert predict_cli.main(["--scenario", CPU_SCENARIO, "--deployment", str(fit), "--batch-sizes", "1,8"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "kernel_basis 'cpu-epyc-2c.profile.json' (scenario: 'cpu-xeon-2c.profile.json')" \
        in err and "--calibration cpu-epyc-2c.profile.json" in err
    # with the kernel times it was fitted on it applies; an older file without the key loads anywhere
    assert predict_cli.main(["--scenario", CPU_SCENARIO, "--calibration", str(REPO / epyc), "--deployment", str(fit),
                             "--batch-sizes", "1,8"]) == 0
    doc = json.loads(fit.read_text())
    doc["scenario"].pop("kernel_basis")
    fit.write_text(json.dumps(doc))
    assert predict_cli.main(["--scenario", CPU_SCENARIO, "--deployment", str(fit), "--batch-sizes", "1,8"]) == 0


def test_a_fit_of_many_points_names_their_span_not_each(tmp_path):
    doc = cpu_fit_doc()
    doc["points"] = [{"batch_size": b, "k": k} for b in (1, 2, 4) for k in range(4)]
    fit = load_deployment_fit(write_fit(tmp_path, doc))
    assert "(12 points: B 1, 2, 4 x K 0-3;" in fit.label
    doc["points"] = doc["points"][:-1]  # not a full grid: the span
    assert "(11 points: B 1-4, K 0-3;" in load_deployment_fit(write_fit(tmp_path, doc)).label


def test_posterior_moves_from_a_start_at_zero_host_time():
    # hand: 1.15 x kernels of 60 and 400 ms + 21.6 ms a step = 90.6 and 481.6 ms; a prior centred on the physics
    # (kernel scale 1, no host time) with only these two terms free. Every free term then starts at ~0, where the
    # solver's first trust region (the start's scaled norm) was ~1e-14 and it stopped where it started
    pts = fewshot.Points(np.array([1.0, 8.0]), np.zeros(2), np.array([60e-3, 400e-3]), np.zeros(2),
                         np.array([60e-3, 400e-3]), np.zeros(2), np.full((2, 1), 0.5))
    y = np.log([90.6e-3, 481.6e-3])
    sd = np.array([np.log(4.0), 1e5, 0.0, 0.0, 0.0, 0.0, 0.0])  # the no-layer spreads of these two terms
    res = fewshot.posterior("step", pts, y, to_fit(NEUTRAL), sd, n_samples=20)
    assert res["theta"][0] == pytest.approx(1.15, rel=0.01)
    assert res["theta"][1] == pytest.approx(21.6e-3, rel=0.02)


def test_a_fit_records_its_attention_precision_and_another_refuses_it(tmp_path, capsys):
    # steps measured with bf16 attention projections beside fp8 MLPs (a checkpoint that left attention out) are not
    # steps of an all-fp8 deployment: the file names the attention precision, predict refuses the other one in one
    # line, and a file without the key (fits before 2026-12-07) is not checked on it
    (tmp_path / "runs.csv").write_text("batch_size,k,itl_ms\n16,0,16.0\n16,3,23.1\n")
    fit = tmp_path / "fit.json"
    assert fd.main(["--scenario", "sizing-dense-command-a", "--measured", str(tmp_path / "runs.csv"), "--dtype",
                    "fp8", "--attention-dtype", "bf16", "--output", str(fit)]) == 0
    ident = json.loads(fit.read_text())["scenario"]
    assert (ident["weights"], ident["attention"], ident["experts"]) == ("fp8", "bf16", "none")
    capsys.readouterr()
    assert predict_cli.main(["--scenario", "sizing-dense-command-a", "--deployment", str(fit), "--dtype", "fp8"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "attention 'bf16' (scenario: 'as weights')" in err
    doc = json.loads(fit.read_text())
    doc["scenario"].pop("attention")
    fit.write_text(json.dumps(doc))
    assert predict_cli.main(["--scenario", "sizing-dense-command-a", "--deployment", str(fit), "--dtype", "fp8",
                             "--quiet"]) == 0
