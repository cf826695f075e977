"""Outputs are checked before the work: `size` and `sweep` refuse an output that cannot be written in one
line (exit 2) before any search runs. The search functions are replaced by ones that fail the test if
called, so "before" is checked directly, not by timing."""
from __future__ import annotations

import contextlib
import io

import pytest

SWEEP = """
name = "outputs-first"
[sweep]
base = "sizing-dense-command-a"
hardware = ["h200"]
tp = [8]
policies = ["plain"]
[traffic.chat]
rate_per_s = 8.0
prompt_len = 512
output_len = 100
[run]
n_requests = 20
search_steps = 0
duration_s = 2.0
max_requests = 60
workers = 1
[output]
formats = ["csv", "markdown"]
"""


def _never(*a, **k):
    raise AssertionError("the computation ran before the output was checked")


def _cli(main, argv):
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        rc = main(argv)
    lines = [ln for ln in err.getvalue().splitlines() if ln.strip()]
    return rc, lines


@pytest.fixture
def blocked(tmp_path):
    """(a file, a folder holding a directory named like the size report and the sweep's results.csv)."""
    (tmp_path / "a-file.txt").write_text("x")
    taken = tmp_path / "taken"
    (taken / "sizing-dense-command-a.md").mkdir(parents=True)
    (taken / "results.csv").mkdir()
    return tmp_path / "a-file.txt", taken


@pytest.mark.parametrize("which", ["is-file", "under-file", "report-name-is-dir"])
def test_size_refuses_unwritable_output_before_the_search(blocked, monkeypatch, which):
    import simulator.sizing as sizing
    from simulator.cli.size import main

    monkeypatch.setattr(sizing, "size", _never)
    a_file, taken = blocked
    out = {"is-file": a_file, "under-file": a_file / "r", "report-name-is-dir": taken}[which]
    rc, lines = _cli(main, ["--scenario", "sizing-dense-command-a", "--output-dir", str(out)])
    assert rc == 2 and len(lines) == 1 and lines[0].startswith("error: --output-dir"), lines
    if which == "report-name-is-dir":
        assert "sizing-dense-command-a.md is a directory" in lines[0]


@pytest.mark.parametrize("which", ["is-file", "under-file", "results-name-is-dir"])
def test_sweep_refuses_unwritable_output_before_any_task(tmp_path, blocked, monkeypatch, which):
    import simulator.sweep.backends as backends
    from simulator.cli.sweep import main

    monkeypatch.setattr(backends, "run_task", _never)
    spec = tmp_path / "s.toml"
    spec.write_text(SWEEP)
    a_file, taken = blocked
    out = {"is-file": a_file, "under-file": a_file / "r", "results-name-is-dir": taken}[which]
    rc, lines = _cli(main, [str(spec), "--output-dir", str(out), "--quiet"])
    assert rc == 2 and len(lines) == 1 and lines[0].startswith("error: --output-dir"), lines
    if which == "results-name-is-dir":
        assert "results.csv is a directory" in lines[0]
    assert not (taken / "journal.jsonl").exists()  # nothing written


def test_sweep_api_refuses_before_any_task(tmp_path, blocked, monkeypatch):
    import simulator.sweep.backends as backends
    from simulator.errors import PlannerError
    from simulator.sweep import run_sweep

    monkeypatch.setattr(backends, "run_task", _never)
    spec = tmp_path / "s.toml"
    spec.write_text(SWEEP)
    with pytest.raises(PlannerError, match="results.csv is a directory"):
        run_sweep(spec, output_dir=blocked[1], progress=False)
