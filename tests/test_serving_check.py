"""The serving check a prediction quotes: the planner's TPOT against end-to-end runs it never saw
(aiconfigurator-core 0.12.0's silicon sample, scored by calibration.silicon), by GPU and engine."""
from __future__ import annotations

import json
from types import SimpleNamespace

import pandas as pd
import pytest

from calibration import silicon
from simulator.sizing.report import serving_checks_text
from simulator.specs import uncertainty as unc


def scored_rows() -> pd.DataFrame:
    rows = pd.read_csv(silicon.OUT_DIR / "silicon_rows.csv", keep_default_na=False, na_values=[""])
    return rows.assign(not_expressible=rows.not_expressible.fillna(""))


def test_the_shipped_checks_are_the_scored_rows_by_gpu_and_engine():
    shipped = json.loads(unc.SERVING_FILE.read_text())
    again = silicon.serving_checks(scored_rows())
    assert {k for k in shipped if not k.startswith("_")} == {k for k in again if not k.startswith("_")}
    for gpu, engines in again.items():
        if gpu.startswith("_"):
            continue
        assert set(shipped[gpu]) == set(engines)
        for engine, s in engines.items():
            assert shipped[gpu][engine]["n"] == s["n"]
            for key in ("mape", "median_error", "within_20pct", "worst"):  # the rows file keeps 6 digits
                assert shipped[gpu][engine][key] == pytest.approx(s[key], rel=1e-4, abs=1e-6)
    # the physics alone's block (what a --physics-only prediction quotes): the same rows' physics errors
    alone = shipped[unc.PHYSICS_ONLY_CHECKS]
    for gpu, engines in again[unc.PHYSICS_ONLY_CHECKS].items():
        for engine, s in engines.items():
            assert alone[gpu][engine]["n"] == s["n"] == shipped[gpu][engine]["n"]
            assert alone[gpu][engine]["median_error"] == pytest.approx(s["median_error"], rel=1e-4, abs=1e-6)
    # every priced run counted once: the totals by GPU are the silicon summary's
    summary = json.loads((silicon.OUT_DIR / "silicon.json").read_text())
    for gpu, s in summary["by_hardware"].items():
        assert sum(e["n"] for e in shipped[gpu].values()) == s["n"]


def test_a_gpu_and_engine_with_enough_runs_quotes_them():
    s = json.loads(unc.SERVING_FILE.read_text())["h200"]["vllm"]
    check = unc.serving_check("h200", "vllm")
    assert check.n == s["n"] >= unc.MIN_SERVING_RUNS
    text = check.describe()
    assert f"{s['n']} end-to-end runs on h200 under vllm it never saw" in text
    assert f"median {s['median_error']:+.0%}" in text and f"MAPE {s['mape']:.0%}" in text
    assert "silicon.md" in text


def test_too_few_runs_or_none_say_not_checked():
    few = json.loads(unc.SERVING_FILE.read_text())["gb200"]["trtllm"]["n"]
    assert 0 < few < unc.MIN_SERVING_RUNS and unc.serving_check("gb200", "trtllm") is None
    assert unc.serving_check_text("gb200", "trtllm") == (
        f"TPOT not checked: {few} end-to-end runs on gb200 under trtllm among those it never saw"
        f" (fewer than {unc.MIN_SERVING_RUNS})")
    assert unc.serving_check_text("a100-80gb", "vllm").startswith("TPOT not checked: no end-to-end runs")


def test_predict_quotes_the_check_in_its_table_and_json(capsys):
    from simulator.cli.predict import main
    assert main(["--model", "llama-3.1-8b", "--hardware", "h200", "--engine", "vllm", "--batch-sizes", "1,8",
                 "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "# serving " + unc.serving_check_text("h200", "vllm") in out.splitlines()
    assert main(["--model", "llama-3.1-8b", "--hardware", "h200", "--engine", "sglang", "--batch-sizes", "1,8",
                 "--format", "json", "--quiet"]) == 0
    provenance = json.loads(capsys.readouterr().out)["provenance"]
    assert provenance["serving_check"] == unc.serving_check_text("h200", "sglang")


def test_the_sizing_report_quotes_each_sized_gpu():
    res = SimpleNamespace(capacity=pd.DataFrame({"hardware": ["h200", "a100-80gb", "h200"]}),
                          scenario=SimpleNamespace(engine=SimpleNamespace(name="vllm"), step_basis="learned layer",
                                                   hardware=SimpleNamespace(name="h200")))
    text = serving_checks_text(res)
    h200 = unc.serving_check("h200", "vllm")
    assert text.startswith("TPOT against end-to-end runs under vllm the planner never saw (aiconfigurator-core")
    assert text.endswith(f"a100-80gb: not checked (no runs); h200, {h200.n} runs: {h200.figures()}")


def test_only_a_full_silicon_run_rewrites_the_checks(tmp_path, monkeypatch):
    check_file = tmp_path / "serving_error.json"
    fake = pd.DataFrame({"hardware": ["h200", "h200"], "engine_profile": ["vllm-0.11.0", "vllm-0.11.0"],
                         "model": ["llama-3.1-8b"] * 2, "quant": ["fp8"] * 2, "batch_size": [4, 8],
                         "error": [0.1, -0.3], "physics_error": [-0.1, -0.2], "not_expressible": ["", ""]})
    monkeypatch.setattr(silicon, "CHECK_FILE", check_file)
    monkeypatch.setattr(silicon.gt, "locate_tables", lambda: SimpleNamespace(describe=lambda: "package /x"))
    monkeypatch.setattr(silicon, "read_silicon", lambda src: pd.DataFrame({"system": ["h200_sxm"] * 2}))
    monkeypatch.setattr(silicon, "distinct_runs", lambda rows: rows)
    monkeypatch.setattr(silicon, "load_map", lambda: {})
    monkeypatch.setattr(silicon, "score", lambda rows, mapping, progress=None: fake.head(len(rows)))
    assert silicon.main(["--limit", "1", "--output-dir", str(tmp_path / "a")]) == 0
    assert not check_file.exists()  # a partial run says nothing of the GPUs and engines it skipped
    assert silicon.main(["--output-dir", str(tmp_path / "b")]) == 0
    checks = json.loads(check_file.read_text())
    s, alone = checks["h200"]["vllm"], checks[unc.PHYSICS_ONLY_CHECKS]["h200"]["vllm"]
    assert s["n"] == 2 and s["mape"] == pytest.approx(0.2) and s["median_error"] == pytest.approx(-0.1)
    assert alone["n"] == 2 and alone["mape"] == pytest.approx(0.15) and alone["median_error"] == pytest.approx(-0.15)


def test_a_physics_only_prediction_quotes_the_physics_alones_check(capsys):
    s = json.loads(unc.SERVING_FILE.read_text())[unc.PHYSICS_ONLY_CHECKS]["h200"]["vllm"]
    check = unc.serving_check("h200", "vllm", physics_only=True)
    assert check.n == s["n"] and check.median_error == pytest.approx(s["median_error"])
    assert "it never saw (the physics alone):" in check.describe()
    from simulator.cli.predict import main
    args = ["--model", "llama-3.1-8b", "--hardware", "h200", "--engine", "vllm", "--batch-sizes", "1,8", "--k-max", "2"]
    assert main(args + ["--physics-only", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["provenance"]["serving_check"] == check.describe()
    assert main(args + ["--format", "json"]) == 0  # with the learned layer: the planner's check
    assert json.loads(capsys.readouterr().out)["provenance"]["serving_check"] == unc.serving_check_text("h200", "vllm")

