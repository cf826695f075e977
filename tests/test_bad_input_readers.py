"""Bad input to the file readers and the dashboard's upload helpers: every hostile file of the corpus
(tests/bad_input_corpus.py) raises a PlannerError whose one short message names what is wrong, and
nothing changes on disk. `test_corpus_size` counts the whole corpus, command lines included.
"""
from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from bad_input_corpus import (BENCHES, CONFIGS, HARDWARE, MEASURED, METRICS, METRICS_TEXT, PROFILES, RAWS, SCENARIOS,
                              as_bytes, snapshot)
from simulator.errors import PlannerError

# the test files holding the command-line cases of the corpus (each its CLI_CASES)
CLI_CASE_FILES = ("test_bad_input_predict", "test_bad_input_serve", "test_bad_input_size", "test_bad_input_calibration")


def _reader_cases():
    """(id, callable(fx) that must raise PlannerError, substring the message must name)."""
    from calibration import measured, vllm_io
    from calibration.fit import fit_raw
    from calibration.rawio import read_raw
    from dashboard import state, uploads as U
    from simulator.specs.hardware import load_hardware
    from simulator.specs.models import load_model_config
    from simulator.specs.profile import load_profile
    from simulator.specs.scenario import load_scenario

    cases = []
    for name, cfg, expect in CONFIGS:
        cases.append((f"config-{name}", lambda fx, n=name: load_model_config(fx / "configs" / n / "config.json"), expect))
        cases.append((f"upload-config-{name}", lambda fx, c=cfg: U.uploaded_model(as_bytes(c), "up.json"), expect))
    for name, _, expect in SCENARIOS:
        cases.append((f"scenario-{name}", lambda fx, n=name: load_scenario(fx / "scenarios" / f"{n}.toml"), expect))
    for name, _, expect in PROFILES:
        cases.append((f"profile-{name}", lambda fx, n=name: load_profile(fx / "profiles" / f"{n}.json"), expect))
    for name, _, expect in HARDWARE:
        cases.append((f"hardware-{name}", lambda fx, n=name: load_hardware(str(fx / "hardware" / f"{n}.toml")), expect))
    for name, _, expect in RAWS:
        cases.append((f"{name}", lambda fx, n=name: fit_raw(fx / "raw" / f"{n}.raw.csv"), expect))
    for name, text, expect in MEASURED:
        cases.append((f"read-{name}", lambda fx, n=name: measured.read_measured(fx / "measured" / f"{n}.csv"), expect))
        cases.append((f"upload-{name}", lambda fx, t=text: U.read_measured_csv(t.encode(), "runs.csv"), expect))
    def read_bench(path: Path):  # what calibration.validate and the vLLM import read of a bench file
        vllm_io.bench_acceptance(vllm_io.read_bench_json(path), path.name)
        return vllm_io.bench_to_row(path)

    # the dashboard reads only the acceptance rates of an uploaded bench JSON
    upload_irrelevant = {"bench-itl-string", "bench-concurrency-string", "bench-itl-negative"}
    for name, data, expect in BENCHES:
        cases.append((f"read-{name}", lambda fx, n=name: read_bench(fx / "bench" / f"{n}.json"), expect))
        if name not in upload_irrelevant:
            cases.append((f"upload-{name}", lambda fx, d=data: U.acceptance_from_bench_json(d, "bench.json"), expect))
    for name, text, expect in METRICS:
        cases.append((f"read-{name}", lambda fx, n=name: vllm_io.read_metrics(fx / "metrics" / f"{n}.txt"), expect))
        cases.append((f"upload-{name}", lambda fx, t=text: U.acceptance_from_metrics(t.encode(), "metrics.txt"), expect))
    cases += [
        ("raw-directory", lambda fx: read_raw(fx / "empty-dir"), "empty-dir"),
        ("rates-nan", lambda fx: state.parse_rates_text("0.8, nan"), "nan"),
        ("rates-above-one", lambda fx: state.parse_rates_text("1.5"), "1.5"),
        ("rates-empty", lambda fx: state.parse_rates_text("  "), "rate"),
        ("rates-text", lambda fx: state.parse_rates_text("high"), "high"),
        ("upload-empty", lambda fx: U.uploaded_model(b"", "config.json"), "empty"),
        ("upload-too-large", lambda fx: U.acceptance_from_metrics(b" " * (U.MAX_UPLOAD_BYTES + 1), "m.txt"),
         "too large"),
        ("upload-deep-json", lambda fx: U.uploaded_model(b"[" * 100000 + b"]" * 100000, "deep.json"), "deep"),
        ("write-files-name-with-slash", lambda fx: _write_files(fx / "out", {"../x.md": "x"}), "file name"),
        ("write-files-target-is-dir", lambda fx: _write_files(fx, {"out": "x", "new.md": "y"}), "out"),
        ("write-atomically-dir", lambda fx: _write_one(fx / "out", "x"), "directory"),
        ("write-atomically-proc", lambda fx: _write_one(Path("/proc/dsd-test.txt"), "x"), "/proc"),
    ]
    return cases


def _write_files(out, files):
    from simulator.cli.common import write_files_atomically
    return write_files_atomically(out, files)


def _write_one(path, text):
    from simulator.cli.common import write_atomically
    return write_atomically(path, text)


READER_CASES = _reader_cases()


@pytest.mark.parametrize("case_id,call,expect", READER_CASES, ids=[c[0] for c in READER_CASES])
def test_reader_refuses_with_one_line(fx, case_id, call, expect):
    before = snapshot(fx)
    with pytest.raises(PlannerError) as info:
        call(fx)
    message = " ".join(str(info.value).split())
    assert message and len(message) < 600, f"{case_id}: {message!r}"
    assert expect.lower() in message.lower(), f"{case_id}: {message!r} does not name {expect!r}"
    assert snapshot(fx) == before, f"{case_id}: files changed on disk"


def test_corpus_size():
    cli_cases = [case for name in CLI_CASE_FILES for case in importlib.import_module(name).CLI_CASES]
    n = len(cli_cases) + len(READER_CASES)
    print(f"\nbad-input corpus: {len(cli_cases)} command-line cases + {len(READER_CASES)} reader/upload cases = {n}")
    assert n >= 150


def test_odd_prometheus_labels_parse_to_the_same_counters():
    """Labels vLLM or a proxy may add (unicode, escapes, extra labels, spaces) change nothing."""
    from calibration import vllm_io

    plain = vllm_io.acceptance_from_counters(vllm_io.spec_decode_counters(METRICS_TEXT))
    odd = METRICS_TEXT.replace('engine="0",', 'engine="0", zone="é\\\\x \\"q\\"", note="a\\nb", ')
    assert odd != METRICS_TEXT
    got = vllm_io.acceptance_from_counters(vllm_io.spec_decode_counters(odd))
    assert got == plain
    labels = vllm_io.parse_prometheus('m{a="x\\\\y",b="q\\"r",c="é\\\\z"} 1\n')[0][1]
    assert labels == {"a": "x\\y", "b": 'q"r', "c": "é\\z"}  # only backslash, quote and n are escapes
    # an escape the text format does not have (\z) is refused, not kept as written
    with pytest.raises(vllm_io.VllmFormatError, match=r"m.txt:1: .*escape '\\z'"):
        vllm_io.parse_prometheus('m{c="é\\z"} 1\n', "m.txt")

