"""A second hostile walk over every command that reads or writes files (issue 47's session): the cases the
first walk (tests/test_hostile.py) left open. Each runs in-process (tests/cli_inprocess.py) and asserts one
'error:' line, exit 2, no traceback, and that every file already there is byte for byte what it was."""
from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from cli_inprocess import refused_line, run_main
from simulator.errors import PlannerError

REPO = Path(__file__).resolve().parent.parent
LLAMA = (REPO / "scenarios" / "llama-3.1-8b-h100.toml").read_text()
ROWS = "batch_size,k,itl_ms\n1,0,9.5\n1,3,11.0\n8,3,14.0\n"
FIT = ("calibration.fit_deployment", "--scenario", "llama-3.1-8b-h100", "--bootstrap", "20")
SIZE = ("simulator.size", "--scenario", "sizing-dense-command-a", "--candidates", "h200", "--tp", "8",
        "--no-sensitivity", "--n-requests", "20", "--search-steps", "0", "--workers", "1", "--format", "markdown")
LONG_INT = "9" * 5000  # over Python's 4300-digit limit on reading an integer: json / tomllib raise ValueError


# --- an output never replaces what the command reads --------------------------------------------

def test_predict_output_over_its_own_scenario_is_refused(tmp_path):
    scenario = tmp_path / "mine.toml"
    scenario.write_text(LLAMA)
    line = refused_line("simulator.predict", "--scenario", scenario, "--batch-sizes", "1", "--output", scenario)
    assert "--output" in line and "the same file as --scenario" in line and "another name" in line
    assert scenario.read_text() == LLAMA  # before: the K* table replaced the scenario


def test_output_over_a_scenario_named_by_its_bundled_name_is_refused(tmp_path, monkeypatch):
    import simulator.specs.scenario as scenario_module
    monkeypatch.setattr(scenario_module, "SCENARIO_DIR", tmp_path)  # a bundled folder of our own
    (tmp_path / "mine.toml").write_text(LLAMA)
    line = refused_line("simulator.predict", "--scenario", "mine", "--batch-sizes", "1",
                        "--output", tmp_path / "mine.toml")
    assert "the same file as --scenario mine" in line
    assert (tmp_path / "mine.toml").read_text() == LLAMA  # before: the K* table replaced the bundled scenario


def test_fit_output_over_its_measured_rows_is_refused(tmp_path):
    rows = tmp_path / "rows.csv"
    rows.write_text(ROWS)
    link = tmp_path / "fit.json"
    link.symlink_to(rows)  # the same file by another name
    for output in (rows, link):
        line = refused_line(*FIT, "--measured", rows, "--output", output)
        assert "the same file as --measured" in line
    assert rows.read_text() == ROWS  # before: the fit's JSON replaced the measurements


def test_validate_report_over_its_measured_rows_is_refused(tmp_path):
    rows = tmp_path / "validation_rows.csv"  # the rows of an earlier report, validated again from its folder
    rows.write_bytes((REPO / "calibration" / "data" / "runs" / "smollm2-cpu-ngram.csv").read_bytes())
    before = rows.read_bytes()
    line = refused_line("calibration.validate", "--scenario", "smollm2-cpu", "--measured", rows,
                        "--output-dir", tmp_path)
    assert "the same file as --measured" in line and "another directory" in line
    assert rows.read_bytes() == before  # before: the report set replaced the rows it was computed from


@pytest.mark.parametrize("given, expect", [("-", "'-' is not stdout here"), ("out/", "names a directory")])
def test_an_output_that_is_not_a_file_name_is_refused(tmp_path, monkeypatch, given, expect):
    monkeypatch.chdir(tmp_path)
    line = refused_line("simulator.predict", "--scenario", "smollm2-cpu", "--batch-sizes", "1", "--output", given)
    assert expect in line and "--output" in line  # before: a file named '-', and a file 'out' for 'out/'
    assert list(tmp_path.iterdir()) == []


def test_save_scenario_over_a_report_of_the_set_is_refused_before_the_search(tmp_path):
    out = tmp_path / "reports"
    out.mkdir()
    report = out / "sizing-dense-command-a.md"
    report.write_text("old report\n")
    line = refused_line(*SIZE, "--output-dir", out, "--save-scenario", report)
    assert line.startswith("error: --save-scenario") and "the same file as --output-dir" in line
    assert report.read_text() == "old report\n"  # before: the report was written, then the scenario over it


def test_output_dir_through_a_dangling_symlink_is_refused_before_the_search(tmp_path):
    (tmp_path / "reports").symlink_to(tmp_path / "gone")
    line = refused_line(*SIZE, "--output-dir", tmp_path / "reports")
    assert "--output-dir" in line and "does not exist" in line  # before: the whole search, then 'File exists'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["reports"]


def test_a_sweep_files_own_output_dir_is_named_as_such(tmp_path):
    (tmp_path / "taken").write_text("not a folder\n")
    sweep = tmp_path / "sweep.toml"
    sweep.write_text((REPO / "scenarios" / "sweeps" / "sweep-small.toml").read_text()
                     .replace('base = "sizing-dense-command-a"', f'base = "{REPO}/scenarios/sizing-dense-command-a.toml"')
                     .replace("[output]", f'[output]\ndir = "{tmp_path / "taken"}"'))
    line = refused_line("simulator.sweep", sweep, "--max-tasks", "0")
    assert line.startswith(f"error: {sweep}: [output] dir ") and "not a directory" in line  # before: '--output-dir'


# --- inputs ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("text, flags", [
    (LLAMA.replace("[workload]", "[[workload]]"), ["--batch-sizes", "1,8"]),  # before: TypeError traceback
    (LLAMA.replace("[workload]", "[[workload]]"), []),
    ("workload = 5\n" + LLAMA.split("[workload]")[0], ["--k-max", "4"])])  # before: TypeError traceback
def test_a_section_must_be_one_table(tmp_path, text, flags):
    scenario = tmp_path / "s.toml"
    scenario.write_text(text)
    line = refused_line("simulator.predict", "--scenario", scenario, *flags)
    assert str(scenario) in line and "[workload]" in line and "one table" in line


def test_a_step_of_a_femtosecond_is_refused_and_nothing_is_written(tmp_path):
    rows = tmp_path / "rows.csv"
    rows.write_text("batch_size,k,itl_ms\n1,0,1e-300\n1,3,11\n8,3,14\n")
    line = refused_line(*FIT, "--measured", rows, "--output", tmp_path / "fit.json")
    assert "rows.csv" in line and "'itl_ms' line 2" in line  # before: ZeroDivisionError after writing fit.json
    assert not (tmp_path / "fit.json").exists()


@pytest.mark.parametrize("old, new", [("hbm_bandwidth_bytes_per_s = 3350.0e9", "hbm_bandwidth_bytes_per_s = 1e-300"),
                                      ("peak_bf16_flops_per_s = 989.4e12", "peak_bf16_flops_per_s = 1e308")])
def test_a_device_figure_off_by_powers_of_ten_is_named(tmp_path, old, new):
    device = tmp_path / "gpu.toml"
    device.write_text((REPO / "simulator" / "data" / "hardware" / "h100-sxm.toml").read_text().replace(old, new))
    line = refused_line("simulator.predict", "--model", "llama-3.1-8b", "--hardware", device, "--batch-sizes", "1")
    key = new.split(" = ")[0]
    assert str(device) in line and f"'{key}'" in line and "power of ten" in line
    # before: 1e-300 B/s printed numpy overflow warnings, then 'nothing fits memory'; 1e308 FLOP/s ran


def test_a_number_too_long_to_read_is_one_line(tmp_path):
    big = tmp_path / "bench.json"
    big.write_text(f'{{"spec_decode_acceptance_length": {LONG_INT}}}')
    scenario = tmp_path / "s.toml"
    scenario.write_text(LLAMA.replace("tp = 1", f"tp = {LONG_INT}"))
    for args in (["--scenario", "llama-3.1-8b-h100", "--acceptance", big], ["--scenario", scenario]):
        assert "too long to read" in refused_line("simulator.predict", *args, "--batch-sizes", "1")
    assert "too long to read" in refused_line(*FIT, "--measured", big, "--output", tmp_path / "fit.json")
    # the dashboard's uploads read the same bytes (before: ValueError out of json.loads)
    import dashboard.uploads as U
    for upload in (U.uploaded_model, U.acceptance_file, U.uploaded_deployment_fit):
        with pytest.raises(PlannerError, match="too long to read"):
            upload(big.read_bytes(), "bench.json")


ACC_ROWS = ('batch_size,k,itl_ms,per_position_acceptance,n_steps\n'
            '1,3,11,"[0.8, 0.6, 0.5]",100\n8,3,14,"[0.8, 0.6, 0.5]",300\n')


@pytest.mark.parametrize("n_steps", ["-100", "nan", "1e400", "many"])
def test_a_rows_weight_that_is_no_count_is_refused(n_steps):
    from simulator.specs.acceptance_files import parse_acceptance_bytes
    with pytest.raises(PlannerError, match=f"runs.csv: line 2: n_steps '{n_steps}' is not a positive count"):
        parse_acceptance_bytes(ACC_ROWS.replace(",100\n", f",{n_steps}\n").encode(), "runs.csv")
    # before: read as 1, silently reweighing the rows


def test_a_hand_written_header_reads_like_the_written_one():
    from calibration.measured import read_measured
    from simulator.specs.acceptance_files import parse_acceptance_bytes
    written = parse_acceptance_bytes(ACC_ROWS.encode(), "runs.csv").conditional
    for header in ("batch_size, k, itl_ms, per_position_acceptance, n_steps",
                   'batch_size,k,itl_ms,"per_position_acceptance",n_steps'):
        text = header + "\n" + ACC_ROWS.split("\n", 1)[1].replace(",", ", ").replace(",  ", ", ")
        # before: 'not an acceptance file' and 'missing column(s) k, itl_ms'
        assert parse_acceptance_bytes(text.encode(), "runs.csv").conditional == written
        assert list(read_measured(text.encode(), "runs.csv").k) == [3, 3]


def test_missing_columns_message_asks_for_what_is_missing():
    from calibration.measured import read_measured
    from calibration.validate import REQUIRED
    with pytest.raises(PlannerError) as err:
        read_measured(ROWS.encode(), "runs.csv", required=REQUIRED)
    missing = [c for c in REQUIRED if c not in ROWS.splitlines()[0]]
    # before: 'missing column(s) acceptance_length, ... need at least batch_size, k, itl_ms' (which it had)
    assert f"need at least {', '.join(REQUIRED)}" in str(err.value) and missing


@pytest.mark.parametrize("edit, expect", [
    (lambda text: b"\xff\xfe" + text, "not a readable corpus CSV"),  # before: UnicodeDecodeError traceback
    (lambda text: b"a,b\n1,2\n", "missing column(s) source_id"),  # before: AttributeError traceback
    (lambda text: _row_edit(text, "tp", "x"), "line 2: tp 'x'"),  # before: ValueError traceback
    (lambda text: _row_edit(text, "batch_size", "inf"), "line 2: batch_size 'inf'")])  # before: OverflowError
def test_a_hostile_corpus_copy_is_one_line(tmp_path, edit, expect):
    corpus = tmp_path / "corpus.csv"
    corpus.write_bytes(edit((REPO / "calibration" / "data" / "published" / "corpus.csv").read_bytes()))
    line = refused_line("calibration.learn_step", "--corpus", corpus, "--output", tmp_path / "layer.json")
    assert line.startswith(f"error: --corpus {corpus}: ") and expect in line
    assert not (tmp_path / "layer.json").exists()


def _row_edit(text: bytes, column: str, value: str) -> bytes:
    """The corpus with ``column`` of its first row set to ``value``."""
    import csv
    import io
    rows = list(csv.reader(io.StringIO(text.decode())))
    rows[1][rows[0].index(column)] = value
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows(rows)
    return out.getvalue().encode()


def test_a_learned_layer_or_profile_never_replaces_what_it_was_learned_from(tmp_path):
    corpus = tmp_path / "corpus.csv"
    corpus.write_bytes((REPO / "calibration" / "data" / "published" / "corpus.csv").read_bytes())
    raw = tmp_path / "samples.raw.csv"
    raw.write_bytes((REPO / "calibration" / "data" / "cpu-xeon-2c.raw.csv").read_bytes())
    before = corpus.read_bytes(), raw.read_bytes()
    assert "the same file as --corpus" in refused_line("calibration.learn_step", "--corpus", corpus, "--output", corpus)
    assert "the same file as the raw samples" in refused_line("calibration.fit", raw, "--output", raw)
    assert (corpus.read_bytes(), raw.read_bytes()) == before  # before: the JSON replaced the corpus / the samples


# --- signals --------------------------------------------------------------------------------------

def test_ctrl_c_while_a_command_loads_is_one_line(monkeypatch, capsys):
    import importlib

    from simulator.cli.launch import launch

    def interrupted(name):
        raise KeyboardInterrupt
    monkeypatch.setattr(importlib, "import_module", interrupted)
    assert launch("simulator.cli.size") == 128 + signal.SIGINT  # before: a KeyboardInterrupt traceback
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("interrupted by SIGINT")
    for shim in ("predict", "serve", "size", "catalog", "sweep/__main__", "__main__"):
        assert "launch(" in (REPO / "simulator" / f"{shim}.py").read_text(), shim  # every python -m entry uses it
