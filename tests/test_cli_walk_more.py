"""More of what a QA walk of the commands met, one test per finding (see tests/test_cli_walk.py)."""
from __future__ import annotations

import json
from pathlib import Path

from cli_inprocess import refused_line, run_main

REPO = Path(__file__).resolve().parent.parent  # paths given to the commands: pytest may start anywhere


def test_serve_json_says_what_it_rests_on_and_csv_stays_rows():
    # was: the table printed '# step times: ...' and '# how far to trust them: ...' while --format json was a bare
    # list of summary rows (no basis, no band); csv stays the rows only, as predict's csv
    from simulator.plan.api import predict
    prov = predict("llama-3.1-8b-h100").provenance
    base = ("--scenario", "llama-3.1-8b-h100", "--policy", "plain,dsd", "--requests", "20")
    done = run_main("simulator.serve", *base, "--format", "json")
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert set(out) == {"provenance", "summary"} and [r["policy"] for r in out["summary"]] == ["plain", "dsd"]
    for key in ("step_time_source", "uncertainty", "speedup_uncertainty"):  # basis, step band, speedup band
        assert out["provenance"][key] == prov[key], key
    csv = run_main("simulator.serve", *base, "--format", "csv").stdout
    assert csv.startswith("policy,") and "#" not in csv


def test_an_empty_output_path_is_refused_not_stdout(tmp_path):
    # was: predict --output '' printed the answer to stdout (exit 0): '' read as the flag left out
    cases = [("simulator.predict", "--output", "--scenario", "llama-3.1-8b-h100"),
             ("simulator.predict", "--save-scenario", "--scenario", "llama-3.1-8b-h100"),
             ("simulator.size", "--output-dir", "--scenario", "llama-3.1-8b-h100"),
             ("simulator.sweep", "--output-dir", "x.toml"),
             ("calibration.fit_deployment", "--output", "--scenario", "llama-3.1-8b-h100", "--measured", "x.csv"),
             ("calibration.validate", "--output-dir", "--scenario", "x.toml", "--measured", "x.csv")]
    for module, flag, *rest in cases:
        line = refused_line(module, *rest, flag, "")
        assert line.startswith(f"error: argument {flag}: empty; give a path"), (module, line)


def test_a_fit_from_acceptance_lengths_says_which_positions_it_extrapolates(tmp_path):
    # was: rows with acceptance_length only (K = 3) gave rates for positions 1-8, positions 4-8 the scenario's
    # shape x the fitted scale, without a word
    rows = tmp_path / "runs.csv"
    rows.write_text("batch_size,k,itl_ms,acceptance_length\n1,0,7.0,\n1,3,8.6,2.9\n64,3,17.0,2.8\n")
    fit = tmp_path / "fit.json"
    base = ("calibration.fit_deployment", "--scenario", "llama-3.1-8b-h100", "--bootstrap", "20", "--output", fit)
    done = run_main(*base, "--measured", rows)
    assert done.returncode == 0, done.stderr
    warned = [ln for ln in done.stderr.splitlines() if "not measured" in ln]
    # llama-3.1-8b-h100: k_max 8, acceptance per-position 0.85,...,0.6 (scenarios/llama-3.1-8b-h100.toml)
    assert len(warned) == 1 and warned[0].startswith("warning: --measured: acceptance_length only"), done.stderr
    assert "positions 4-8 are not measured" in warned[0] and "per-position 0.85,0.8," in warned[0]
    # measured per position (a vllm bench file): no such warning
    done = run_main(*base, "--measured", REPO / "tests/fixtures/vllm/bench_k0_c8.json",
                    REPO / "tests/fixtures/vllm/bench_k3_c8.json")
    assert done.returncode == 0 and "not measured" not in done.stderr
