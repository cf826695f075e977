"""How the published decode step rows at a scenario's tensor-parallel degree fell against the planner (transfer.md,
"By tensor-parallel degree"), quoted beside every GPU prediction's step-time band."""
import json
from pathlib import Path

from simulator.plan.api import load_scenario
from simulator.plan.provenance import scenario_provenance, step_trust_text
from simulator.specs import uncertainty as U

REPO = Path(__file__).resolve().parents[1]


def test_tp_lean_by_hand(monkeypatch):
    bands = {"_step_time_by_tp": {"4": {"n": 105, "mape": 0.2, "median_error": -0.16, "worst": 1.0},
                                  "8": {"n": 10, "mape": 0.1, "median_error": 0.05, "worst": 0.2},
                                  "16": {"n": 2, "mape": 0.6, "median_error": -0.6, "worst": 0.64}}}
    monkeypatch.setattr(U, "_bands", lambda: bands)
    assert U.tp_lean_text(4) == "at TP 4, 105 published step rows (all GPUs) ran a median 16% slower than predicted"
    assert U.tp_lean_text(8) == "at TP 8, 10 published step rows (all GPUs) ran a median 5% faster than predicted"
    assert U.tp_lean_text(16) == ""  # 2 rows: fewer than MIN_ROWS
    assert U.tp_lean_text(32) == ""  # no row at all


def test_predictions_quote_their_tp_from_the_committed_report():
    summary = json.loads((REPO / "calibration" / "data" / "transfer" / "transfer.json").read_text())
    tp2 = summary["step_time"]["by_tp"]["2"]
    sc = load_scenario("default")  # Llama-3.1-70B on 2 x H200
    assert sc.deployment.tp == 2
    text = step_trust_text(sc)
    assert text.startswith(U.step_time_band(sc.hardware.name, sc.hardware.kind, "measured kernel tables").describe())
    assert f"at TP 2, {tp2['n']} published step rows (all GPUs) ran a median {abs(tp2['median_error']):.0%}" in text
    assert scenario_provenance(sc)["uncertainty"] == text


def test_cpu_and_fitted_deployments_quote_no_tp_lean(tmp_path):
    assert "published step rows" not in step_trust_text(load_scenario("smollm2-cpu"))
    from calibration import fit_deployment as fd
    (tmp_path / "rows.csv").write_text("batch_size,k,itl_ms\n1,0,16.83\n1,3,19.05\n64,3,32.34\n")
    (tmp_path / "s.toml").write_text('name = "fit-70b"\n[model]\nname = "llama-3.1-70b"\n[hardware]\nname = "h100-sxm"\n'
                                     'tp = 4\n[draft]\nmethod = "eagle3"\n[workload]\ncontext_len = 2048\n')
    assert fd.main(["--scenario", str(tmp_path / "s.toml"), "--measured", str(tmp_path / "rows.csv"),
                    "--output", str(tmp_path / "fit.json")]) == 0
    with (tmp_path / "s.toml").open("a") as f:
        f.write('[calibration]\ndeployment = "fit.json"\n')
    fitted = load_scenario(tmp_path / "s.toml")
    assert fitted.deployment_fit is not None and fitted.deployment.tp == 4
    assert "published step rows" not in step_trust_text(fitted)


def test_tp_leans_by_hand_and_in_the_bundled_sizing_report(monkeypatch):
    bands = {"_source": "transfer.md", "_step_time_by_tp": {"2": {"n": 83, "median_error": -0.177},
                                                            "4": {"n": 2, "median_error": -0.5}}}
    with monkeypatch.context() as m:
        m.setattr(U, "_bands", lambda: bands)
        assert U.tp_leans_text([2, 2, 4]) == ("published decode step rows by tensor-parallel degree, all GPUs"
                                              " (transfer.md): TP 2: a median 18% slower than predicted (83 rows)")
        assert U.tp_leans_text([4, 16]) == ""  # too few rows or none
    by_tp = json.loads((REPO / "calibration" / "data" / "transfer" / "transfer.json").read_text())["step_time"]["by_tp"]
    report = (REPO / "reports" / "sizing-moe-qwen3-235b.md").read_text()
    line = next(ln for ln in report.splitlines() if ln.startswith("Tensor parallelism: "))
    for tp in ("4", "8"):  # the TPs its capacity table compares
        g = by_tp[tp]
        assert f"TP {tp}: a median {abs(g['median_error']):.0%} slower than predicted ({g['n']} rows)" in line
