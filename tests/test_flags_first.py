"""Flags before files (issue 49, item 2): size and fit_deployment run from flags alone; every command's
--save-scenario writes what it ran as a commented TOML that loads back and gives the same answer; the
documented template holds every section and loads.

Anchors: identity (the saved file's answer equals the flags' answer, byte for byte where the output holds no
clock), the schema (every section the loader knows is in the template), hand ($/M at the target).
"""
from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

from cli_inprocess import run_main

ROOT = Path(__file__).resolve().parent.parent
VLLM = ROOT / "tests" / "fixtures" / "vllm"
SIZE_FLAGS = ["--model", "llama-3.1-8b", "--hardware", "h100-sxm", "--tp", "1", "--draft", "eagle3", "--engine", "vllm",
              "--rate", "12", "--prompt-len", "1024", "--output-len", "300", "--ttft-p99", "2", "--tpot-p50", "0.03",
              "--candidates", "h100-sxm", "--n-requests", "40", "--search-steps", "1", "--no-sensitivity",
              "--workers", "1"]


def _answer(text: str) -> dict:
    d = json.loads(text)
    return {k: d[k] for k in ("recommendation", "ranked", "per_gpu_type", "why", "slo", "target_load")}


def test_size_from_flags_alone_and_its_saved_scenario_give_the_same_answer(tmp_path):
    saved = tmp_path / "mine.toml"
    first = run_main("simulator.size", *SIZE_FLAGS, "--format", "json", "--save-scenario", saved, "--quiet")
    assert first.returncode == 0, first.stderr
    text = saved.read_text()
    assert text.startswith("# Scenario saved by: python -m simulator.size --model llama-3.1-8b")
    raw = tomllib.loads(text)
    assert raw["traffic"] == {"arrival": "poisson", "prompt_len": 1024, "output_len": 300, "rate_per_s": 12.0}
    assert raw["slo"] == {"ttft_p99_s": 2.0, "tpot_p50_s": 0.03}
    assert raw["sizing"]["candidates"] == ["h100-sxm"] and raw["sizing"]["tp"] == [1]
    assert "# latency targets in seconds" in text  # commented, section by section
    again = run_main("simulator.size", "--scenario", saved, "--format", "json", "--quiet")
    assert again.returncode == 0, again.stderr
    assert _answer(again.stdout) == _answer(first.stdout)
    rec = json.loads(first.stdout)["recommendation"]
    # hand: $/M output tokens of the fleet = fleet $/h / (12 req/s x 300 tokens x 3600 / 1e6 = 12.96 M tokens/h)
    assert rec["usd_per_m_tokens_at_target"] == pytest.approx(rec["fleet_usd_per_hour"] / 12.96)


def test_a_report_sized_from_flags_says_the_command_that_made_it():
    # its "Regenerate" line named `--scenario flags`, a file that does not exist; it repeats the command as typed
    out = run_main("simulator.size", *SIZE_FLAGS, "--format", "markdown", "--quiet")
    assert out.returncode == 0, out.stderr
    assert "--scenario flags" not in out.stdout
    assert "Regenerate: `python -m simulator.size --model llama-3.1-8b --hardware h100-sxm --tp 1" in out.stdout
    # and the predict command beside its K* table names the deployment's flags, not a file
    assert "python -m simulator.predict --model llama-3.1-8b --draft eagle3 --engine vllm --hardware h100-sxm" \
        in out.stdout


def test_size_flags_override_a_scenario_and_the_saved_file_keeps_them(tmp_path):
    saved = tmp_path / "s.toml"
    args = ["--scenario", "sizing-dense-command-a", "--candidates", "h200", "--tp", "8", "--rate", "10",
            "--tpot-p50", "0.05", "--n-requests", "40", "--search-steps", "1", "--no-sensitivity", "--workers", "1"]
    first = run_main("simulator.size", *args, "--format", "json", "--save-scenario", saved, "--quiet")
    assert first.returncode == 0, first.stderr
    raw = tomllib.loads(saved.read_text())
    assert raw["sizing"]["target_rate_per_s"] == 10.0 and raw["slo"]["tpot_p50_s"] == 0.05
    assert raw["slo"]["ttft_p99_s"] == 2.0  # the file's own SLO kept beside the flag's
    again = run_main("simulator.size", "--scenario", saved, "--format", "json", "--quiet")
    assert _answer(again.stdout) == _answer(first.stdout)


@pytest.mark.parametrize("argv, line", [
    ([], "give --scenario FILE, or --model and --hardware"),
    (["--model", "llama-3.1-8b", "--hardware", "h100-sxm", "--rate", "5"], "give at least one SLO flag"),
    (["--model", "llama-3.1-8b", "--hardware", "h100-sxm", "--tpot-p50", "0.05"], "--rate"),
    (["--model", "llama-3.1-8b", "--hardware", "h100-sxm", "--rate", "5", "--tpot-p50", "-1"], "--tpot-p50 -1"),
    (["--model", "llama-3.1-8b", "--hardware", "h100-sxm", "--rate", "5", "--tpot-p50", "0.05", "--dtypes", "int3"],
     "--dtypes entries"),
    (["--all-bundled", "--model", "llama-3.1-8b"], "--model applies to one scenario"),
])
def test_size_flag_errors_are_one_line(argv, line):
    r = run_main("simulator.size", *argv)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and line in r.stderr, r.stderr


def test_predict_saved_scenario_gives_the_same_table(tmp_path):
    saved = tmp_path / "p.toml"
    args = ["--model", "qwen3-235b-a22b", "--hardware", "h200", "--tp", "8", "--draft", "eagle3",
            "--acceptance", "0.8,0.7,0.6", "--batch-sizes", "1-64", "--format", "csv"]
    first = run_main("simulator.predict", *args, "--save-scenario", saved)
    assert first.returncode == 0, first.stderr
    again = run_main("simulator.predict", "--scenario", saved, "--format", "csv")
    assert again.returncode == 0 and again.stdout == first.stdout


def test_serve_saved_scenario_simulates_the_same_run(tmp_path):
    saved = tmp_path / "s.toml"
    args = ["--scenario", "command-a-h100", "--policy", "plain,dsd", "--format", "csv"]
    first = run_main("simulator.serve", *args, "--rate", "3", "--requests", "60", "--save-scenario", saved)
    assert first.returncode == 0, first.stderr
    raw = tomllib.loads(saved.read_text())
    assert raw["traffic"]["rate_per_s"] == 3.0 and raw["traffic"]["n_requests"] == 60
    again = run_main("simulator.serve", "--scenario", saved, "--policy", "plain,dsd", "--format", "csv")
    assert again.returncode == 0 and again.stdout == first.stdout


def test_sweep_saved_file_expands_the_same(tmp_path):
    saved = tmp_path / "w.toml"
    first = run_main("simulator.sweep", "sweep-small", "--dry-run", "--workers", "1", "--save-scenario", saved)
    assert first.returncode == 0, first.stderr
    assert tomllib.loads(saved.read_text())["run"]["workers"] == 1
    again = run_main("simulator.sweep", saved, "--dry-run")
    assert again.returncode == 0 and again.stdout == first.stdout


def test_fit_deployment_from_flags_and_its_saved_scenario_fit_the_same(tmp_path):
    from calibration import fit_deployment as fd
    measured = [str(VLLM / "bench_k0_c8.json"), str(VLLM / "bench_k3_c8.json")]
    saved, a, b = tmp_path / "f.toml", tmp_path / "a.json", tmp_path / "b.json"
    assert fd.main(["--model", "llama-3.1-8b", "--hardware", "h100-sxm", "--tp", "1", "--engine", "vllm",
                    "--draft", "eagle3", "--measured", *measured, "--output", str(a), "--bootstrap", "20",
                    "--save-scenario", str(saved)]) == 0
    assert fd.main(["--scenario", str(saved), "--measured", *measured, "--output", str(b), "--bootstrap", "20"]) == 0
    da, db = json.loads(a.read_text()), json.loads(b.read_text())
    for doc in (da, db):
        doc["provenance"].pop("scenario_origin"), doc["provenance"].pop("date", None)
    assert da == db


def test_fit_deployment_without_scenario_or_model_is_one_line(capsys, tmp_path):
    from calibration import fit_deployment as fd
    assert fd.main(["--measured", str(VLLM / "bench_k0_c8.json"), "--output", str(tmp_path / "x.json")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--model and --hardware" in err and not (tmp_path / "x.json").exists()


def test_save_scenario_unwritable_is_refused_before_any_work(tmp_path):
    r = run_main("simulator.predict", "--save-scenario", tmp_path / "missing" / "x.toml")
    assert r.returncode == 2 and "--save-scenario" in r.stderr and r.stdout == ""


def test_template_has_every_section_and_loads():
    from simulator.sizing.spec import parse_sizing
    from simulator.specs.scenario import load_scenario
    from simulator.specs.settings import OPEN_SECTIONS, SCHEMA
    path = ROOT / "scenarios" / "template.toml"
    raw = tomllib.loads(path.read_text())
    assert set(SCHEMA) - {""} | set(OPEN_SECTIONS) <= set(raw), set(SCHEMA) - set(raw)
    sc = load_scenario(path)
    spec = parse_sizing(sc)
    assert spec.target_load == 20.0 and spec.slo.targets == {"ttft_p99_s": 2.0, "tpot_p50_s": 0.03}
    assert {c.hardware for c in spec.candidates} == {"h100-sxm", "h200"} and {c.dtype for c in spec.candidates} == {""}
    text = path.read_text()
    for section in (s for s, v in raw.items() if isinstance(v, dict)):
        assert f"[{section}]" in text
