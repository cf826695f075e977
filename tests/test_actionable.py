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
