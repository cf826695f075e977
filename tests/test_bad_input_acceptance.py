"""Hostile acceptance files and the last hostile inputs of issue 23: one line, exit 2, nothing written.

Each case is a file a user could hand to `predict --acceptance FILE`; the CLI must print one
'error:' line naming the file, exit 2 and leave an existing --output untouched.
"""
from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FIX = ROOT / "tests" / "fixtures" / "vllm"

PROFILE = {"schema_version": "1.0", "measured": True, "method": "eagle3", "num_speculative_tokens": 4,
           "conditional_accept_rates": [0.8, 0.6, 0.4, 0.3], "marginal_accept_rates": [0.8, 0.48, 0.192, 0.0576],
           "acceptance_length_histogram": {"1": 2000, "2": 3200, "3": 2880, "4": 1344, "5": 576},
           "max_supported_k": 3}
BENCH = {"model_id": "m", "max_concurrency": 8, "completed": 10, "median_itl_ms": 20.0, "output_throughput": 100.0,
         "spec_decode_acceptance_length": 2.472, "spec_decode_per_position_acceptance_rates": [0.8, 0.48, 0.192]}
REQUEST = {"metrics": {"speculative_decoding": {"mean_acceptance_length": 1.2325581395348837,
                                                "acceptance_histogram": [39, 1, 0, 3], "num_spec_steps": 43,
                                                "num_accepted_draft_tokens": 10, "num_spec_tokens": 3}}}
METRICS = (FIX / "metrics_k3.txt").read_text()


def _with(base: dict, **changes) -> str:
    d = json.loads(json.dumps(base))
    for key, value in changes.items():
        if value is None:
            d.pop(key, None)
        else:
            d[key] = value
    return json.dumps(d)


def _request(**changes) -> str:
    sd = dict(REQUEST["metrics"]["speculative_decoding"], **changes)
    return json.dumps({"metrics": {"speculative_decoding": sd}})


CASES = [
    # name, file text (str) or bytes, what the message must name
    ("truncated-json", json.dumps(PROFILE)[:60], "truncated"),
    ("binary", b"\x89PNG\r\n\x1a\n\x00\x00garbage", "binary"),
    ("not-utf8", b"\xff\xfe\xfa rates", "UTF-8"),
    ("empty", "", "empty"),
    ("unknown-text", "hello world\n", "expected one of"),
    ("json-without-fields", json.dumps({"hello": 1}), "acceptance fields"),
    ("profile-schema-2", _with(PROFILE, schema_version="2.0"), "schema_version"),
    ("profile-schema-missing", _with(PROFILE, schema_version=None), "schema_version"),
    ("profile-rate-above-1", _with(PROFILE, conditional_accept_rates=[1.2, 0.6, 0.4, 0.3], marginal_accept_rates=None,
                                   acceptance_length_histogram=None), "outside [0, 1]"),
    ("profile-rate-negative", _with(PROFILE, marginal_accept_rates=[0.8, -0.1, 0.0, 0.0]), "outside [0, 1]"),
    ("profile-rate-nan-string", _with(PROFILE, conditional_accept_rates=["nan", 0.6]), "not a finite number"),
    ("profile-marginal-rising", _with(PROFILE, conditional_accept_rates=None, acceptance_length_histogram=None,
                                      marginal_accept_rates=[0.5, 0.6, 0.1, 0.0]), "rises"),
    ("profile-vectors-disagree", _with(PROFILE, marginal_accept_rates=[0.8, 0.5, 0.192, 0.0576]), "disagree"),
    ("profile-histogram-disagrees", _with(PROFILE, acceptance_length_histogram={"1": 5000, "2": 5000}), "histogram"),
    ("profile-histogram-fractions", _with(PROFILE, acceptance_length_histogram={"1": 0.2, "2": 0.3}), "sum to"),
    ("profile-histogram-too-long", _with(PROFILE, acceptance_length_histogram={"1": 10, "9": 10}), "outside 1..5"),
    ("profile-max-k-zero", _with(PROFILE, max_supported_k=0), "max_supported_k"),
    ("profile-max-k-negative", _with(PROFILE, max_supported_k=-2), "max_supported_k"),
    ("profile-max-k-float", _with(PROFILE, max_supported_k=2.5), "max_supported_k"),
    ("profile-k-missing", _with(PROFILE, num_speculative_tokens=None), "num_speculative_tokens"),
    ("profile-too-many-rates", _with(PROFILE, num_speculative_tokens=2), "num_speculative_tokens"),
    ("profile-stub", _with(PROFILE, measured=False), "stub"),
    ("profile-block-verified", _with(PROFILE, conditional_accept_rates=None, marginal_accept_rates=None,
                                     vectors_unavailable_reason="block verification: no longest-prefix"), "block"),
    ("bench-rate-above-1", _with(BENCH, spec_decode_per_position_acceptance_rates=[1.3, 0.5],
                                 spec_decode_acceptance_length=None), "outside [0, 1]"),
    ("bench-rising", _with(BENCH, spec_decode_per_position_acceptance_rates=[0.5, 0.7],
                           spec_decode_acceptance_length=None), "rises"),
    ("bench-length-disagrees", _with(BENCH, spec_decode_acceptance_length=3.5), "disagree"),
    ("bench-no-rates", (FIX / "bench_k0_c8.json").read_text(), "spec_decode_per_position_acceptance_rates"),
    ("bench-rates-not-list", _with(BENCH, spec_decode_per_position_acceptance_rates="high"), "list of numbers"),
    ("request-steps-do-not-sum", _request(num_spec_steps=50), "sum to 43"),
    ("request-accepted-disagree", _request(num_accepted_draft_tokens=12), "accepted drafts"),
    ("request-mean-disagrees", _request(mean_acceptance_length=2.0), "mean acceptance length"),
    ("request-negative-count", _request(acceptance_histogram=[39, -1, 0, 3], num_spec_steps=None,
                                        num_accepted_draft_tokens=None, mean_acceptance_length=None), "count"),
    ("request-buckets-vs-k", _request(num_spec_tokens=5), "buckets"),
    ("request-by-length-short", _request(acceptance_histogram_by_draft_length={"3": [1, 2]}), "buckets"),
    ("request-by-length-bad-key", _request(acceptance_histogram_by_draft_length={"0": [1]}), ">= 1"),
    ("request-no-steps", _request(acceptance_histogram=[0, 0, 0, 0], num_spec_steps=0, num_accepted_draft_tokens=0,
                                  mean_acceptance_length=None), "no speculative steps"),
    ("metrics-invalid-escape", METRICS.replace('engine="0",', 'engine="0\\q",', 1), "escape"),
    ("metrics-rising", METRICS.replace('position="2"} 3975.0', 'position="2"} 9975.0'), "rises"),
    ("metrics-no-per-position", "\n".join(ln for ln in METRICS.splitlines() if "per_pos" not in ln) + "\n",
     "per_pos"),
    ("metrics-nan-counter", METRICS.replace("} 9000.0", "} NaN"), "nan"),
    ("csv-rate-above-1", 'target,draft,k,per_position_acceptance\nt,ngram,2,"[1.5, 0.2]"\n', "[0, 1]"),
    ("csv-no-rates", "target,draft,k,per_position_acceptance\nt,ngram,0,[]\n", "no row"),
    ("csv-two-pairs", 'target,draft,k,per_position_acceptance\na,ngram,1,"[0.5]"\nb,ngram,1,"[0.6]"\n', "one pair"),
]


def _run(module: str, argv: list[str]) -> tuple[int, str]:
    import importlib
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            rc = importlib.import_module(module).main(argv)
        except SystemExit as exc:
            rc = exc.code if isinstance(exc.code, int) else 1
    return rc, err.getvalue()


def _one_line(text: str, where: str) -> str:
    assert "Traceback" not in text, f"{where}: traceback\n{text}"
    lines = [ln for ln in text.splitlines() if ln.strip() and not ln.startswith("warning:")]
    assert len(lines) == 1 and lines[0].startswith("error:"), f"{where}: {text!r}"
    return lines[0]


@pytest.mark.parametrize("name,content,expect", CASES, ids=[c[0] for c in CASES])
def test_hostile_acceptance_file_is_one_line(tmp_path, name, content, expect):
    path = tmp_path / f"{name}.data"
    (path.write_bytes if isinstance(content, bytes) else path.write_text)(content)
    out = tmp_path / "kept.json"
    out.write_text("old\n")
    rc, err = _run("simulator.cli.predict", ["--acceptance", str(path), "--batch-sizes", "1-4",
                                             "--format", "vllm", "--output", str(out)])
    line = _one_line(err, name)
    assert rc == 2, f"{name}: rc {rc}: {err}"
    assert path.name in line, f"{name}: {line!r} does not name the file"
    assert expect.lower() in line.lower(), f"{name}: {line!r} does not name {expect!r}"
    assert out.read_text() == "old\n"


def test_missing_acceptance_file_is_one_line(tmp_path):
    rc, err = _run("simulator.cli.predict", ["--acceptance", str(tmp_path / "nope.json"), "--batch-sizes", "1-4"])
    assert rc == 2 and "file not found" in _one_line(err, "missing")


def test_scenario_file_and_rates_conflict(tmp_path):
    from simulator.errors import PlannerError
    from simulator.specs.scenario import build_scenario
    raw = {"model": {"name": "llama-3.1-8b"}, "hardware": {"name": "h100-sxm"},
           "acceptance": {"file": str(tmp_path / "p.json"), "rates": [0.8]}}
    with pytest.raises(PlannerError, match="'file' or 'rates'"):
        build_scenario(raw)


@pytest.mark.parametrize("key,value", [("schedule_overhead_s", "nan"), ("schedule_overhead_per_seq_s", "inf"),
                                       ("eager_overhead_per_kernel_s", "-inf"), ("adapt_ewma", "nan")])
def test_non_finite_serving_values_are_refused(tmp_path, key, value):
    text = (ROOT / "scenarios" / "command-a-h100.toml").read_text().replace("[serving]\n", f"[serving]\n{key} = {value}\n", 1)
    sc = tmp_path / "sc.toml"
    sc.write_text(text)
    rc, err = _run("simulator.cli.serve", ["--scenario", str(sc), "--policy", "plain", "--requests", "10"])
    assert rc == 2 and f"serving.{key}" in _one_line(err, key)


@pytest.mark.parametrize("content,expect", [(b"\x89PNG\r\n\x1a\n\x00\xff\xfe binary", "UTF-8"),
                                            ("len\n1e999\n", "non-finite"), ("len\nnan\n", "non-finite")])
def test_bad_lengths_csv_is_one_line(tmp_path, content, expect):
    lengths = tmp_path / "lengths.csv"
    (lengths.write_bytes if isinstance(content, bytes) else lengths.write_text)(content)
    text = (ROOT / "scenarios" / "command-a-h100.toml").read_text().replace(
        "output_len = 400", f'output_len = {{dist = "data", path = "{lengths}"}}', 1)
    assert "lengths.csv" in text
    sc = tmp_path / "sc.toml"
    sc.write_text(text)
    rc, err = _run("simulator.cli.serve", ["--scenario", str(sc), "--policy", "plain", "--requests", "10"])
    assert rc == 2 and expect.lower() in _one_line(err, "lengths").lower()


def test_engine_sweep_refuses_another_tools_csv(tmp_path):
    pytest.importorskip("torch")
    other = tmp_path / "other.csv"
    other.write_text("key,bench,median_s\nlaunch,launch,3e-06\n")
    rc, err = _run("calibration.engine.__main__", ["sweep", "--output", str(other)])
    assert rc == 2 and "not a runs CSV" in _one_line(err, "sweep")
    assert other.read_text() == "key,bench,median_s\nlaunch,launch,3e-06\n"


def test_engine_profile_refuses_a_non_runs_file(tmp_path):
    bench = tmp_path / "bench.json"
    bench.write_text(json.dumps(BENCH))
    out = tmp_path / "speculation_profile.json"
    rc, err = _run("calibration.engine.__main__", ["profile", "--runs", str(bench), "--output", str(out)])
    assert rc == 2 and "not a measured-runs CSV" in _one_line(err, "profile") and not out.exists()
