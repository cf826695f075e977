"""Answers a user can act on (issue 24): CLI exit codes and the lines that say why."""
from __future__ import annotations

import json

import pytest

from simulator.cli.predict import main as predict_main
from simulator.specs.models import load_model

L70 = ["--model", "llama-3.1-70b", "--hardware", "h100-sxm"]


def _run(capsys, argv):
    rc = predict_main(argv)
    out, err = capsys.readouterr()
    return rc, out, err


def test_nothing_fits_exits_2_with_weights_against_usable(capsys):
    # hand: Llama-3.1-70B in bf16 = 2 bytes x its parameters (~70.6e9) = ~141 GB; usable = 80 GB x 0.9 = 72 GB
    params = load_model("llama-3.1-70b").total_params()
    rc, out, err = _run(capsys, L70 + ["--tp", "1"])
    assert rc == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("error: nothing fits memory at batch sizes 1-512")
    assert f"weights need {2 * params / 1e9:.1f} GB against 72.0 GB usable per GPU (80 GB x 90%)" in err
    assert "fit from tp=2" in err


def test_partial_fit_says_where_and_by_how_much(capsys):
    rc, out, _ = _run(capsys, L70 + ["--tp", "2", "--batch-sizes", "1-16"])
    assert rc == 0
    line = next(x for x in out.splitlines() if "do not fit in memory" in x)
    assert "weights" in line and "KV" in line and "against 72.0 GB usable" in line and "GB over" in line


def test_group_beyond_nvlink_domain_without_fabric_exits_2(capsys):
    rc, out, err = _run(capsys, ["--model", "llama-3.1-70b", "--hardware", "mi300x", "--tp", "16"])
    assert rc == 2 and out == "" and "no inter-node fabric" in err and "[scale_out]" in err


@pytest.mark.parametrize("bad", ["x", "-0.1", "0.6", "nan", "60%"])
def test_bad_schedule_tolerance_exits_2(capsys, bad):
    rc, out, err = _run(capsys, ["--schedule-tolerance", bad])
    assert rc == 2 and out == "" and err.startswith("error: --schedule-tolerance")


def test_schedule_tolerance_zero_is_the_argmax_and_json_reports_the_trade(capsys):
    base = ["--model", "qwen3-32b", "--hardware", "h100-sxm", "--tp", "4", "--batch-sizes", "1-128", "--format", "json"]
    rc, out, _ = _run(capsys, base)
    d = json.loads(out)
    rc0, out0, _ = _run(capsys, base + ["--schedule-tolerance", "0"])
    d0 = json.loads(out0)
    assert rc == rc0 == 0
    trade, trade0 = d["schedule_trade"], d0["schedule_trade"]
    assert trade0["ranges"] == trade0["argmax_ranges"] == trade["argmax_ranges"] and trade0["max_loss"] == 0
    assert trade["ranges"] < trade["argmax_ranges"] and 0 < trade["max_loss"] <= 0.01
    rc1, out1, _ = _run(capsys, base + ["--schedule-tolerance", "1%"])
    assert json.loads(out1)["schedule_trade"] == trade


# --- warnings: once, only where they apply, on stderr, never in an output (item 6) ----------------------

@pytest.mark.parametrize("fmt", [["--format", "table"], ["--format", "csv"], ["--format", "vllm"],
                                 ["--format", "vllm", "--markdown"], ["--format", "trtllm"]])
def test_warnings_go_to_stderr_once_never_into_the_output(capsys, fmt):
    rc, out, err = _run(capsys, fmt)  # the default scenario: its grid ends at B=256 with K* = 1
    assert rc == 0
    assert "warning" not in out.lower().replace("with a warning", "")  # vLLM's own note says "with a warning"
    lines = err.splitlines()
    assert lines and all(x.startswith("warning: ") for x in lines) and len(set(lines)) == len(lines)
    assert sum("extend" in x for x in lines) == 1  # one tail caveat, not the table's and the export's both


def test_tail_caveat_only_where_it_applies(capsys):
    _, _, one = _run(capsys, ["--batch-sizes", "8"])  # one batch size asked about: nothing above to plan
    assert "extend" not in one
    _, _, mem = _run(capsys, L70 + ["--tp", "2", "--batch-sizes", "1-16"])  # ends at the memory limit
    assert "extend the batch sizes" not in mem


def test_quiet_prints_no_warnings_but_errors_still(capsys):
    rc, out, err = _run(capsys, ["--quiet"])
    assert rc == 0 and out and err == ""
    rc, _, err = _run(capsys, L70 + ["--tp", "1", "--quiet"])
    assert rc == 2 and err.startswith("error: nothing fits")


# --- the catalog (item 8) -------------------------------------------------------------------------------

def test_help_lists_every_draft_method_and_dtype(capsys):
    from simulator.cli.predict import build_parser
    from simulator.specs.drafts import DRAFT_METHODS, DRAFT_SYNTAX
    from simulator.specs.hardware import KV_DTYPES, WEIGHT_DTYPES
    text = " ".join(build_parser().format_help().split())
    for method in DRAFT_METHODS:
        assert DRAFT_SYNTAX[method][0] in text
    assert f"weight dtype: {', '.join(WEIGHT_DTYPES)}" in text and f"KV-cache dtype: {', '.join(KV_DTYPES)}" in text


def test_catalog_says_what_each_entry_rests_on(capsys):
    from pathlib import Path

    from simulator.cli.catalog import main as catalog_main
    from simulator.specs.hardware import list_hardware
    from simulator.specs.models import list_models
    assert catalog_main([]) == 0
    out = capsys.readouterr().out
    rows = {line.split()[0]: line for line in out.splitlines() if line and not line.startswith("#")}
    assert set(list_models()) | set(list_hardware()) <= set(rows)
    assert "config.json of Qwen/Qwen3-32B" in rows["qwen3-32b"]
    # h100-sxm ships measured-table profiles (simulator/data/profiles/h100-sxm.*.profile.json); l4 ships none
    shipped = sorted(Path("simulator/data/profiles").glob("h100-sxm.*.profile.json"))
    assert shipped and "measured kernel tables" in rows["h100-sxm"]
    assert "datasheet only" in rows["l4"] and "ConnectX-7" in rows["h100-sxm"]
    assert "no published preset" in rows["early-exit:N"] and "Spec-Bench" in rows["eagle"]
    rc, out, _ = _run(capsys, ["--list", "engines"])
    assert rc == 0 and "vllm-0.29.0" in out and "models" not in out


def test_catalog_bad_kind_exits_2(capsys):
    from simulator.cli.catalog import main as catalog_main
    with pytest.raises(SystemExit) as exit_:
        catalog_main(["gpus"])
    assert exit_.value.code == 2 and capsys.readouterr().err.startswith("error: argument kind")
