"""Break-even acceptance and K* under an acceptance band (simulator/plan/acceptance_risk.py).

Anchors: the acceptance-length formula AL(K) = 1 + a + ... + a^K worked by hand, and the definition
of a tie with plain decoding, AL(K) / ITL(B, K) = 1 / ITL(B, 0).
"""
import json
import subprocess
import sys

import numpy as np
import pytest

from simulator import predict
from simulator.plan.acceptance_risk import (banded_acceptance_lengths, break_even_acceptance_length,
                                            break_even_rate, robust_score)
from cli_inprocess import run_main


def test_break_even_rate_inverts_the_acceptance_length_by_hand():
    # K = 1: AL = 1 + a = 1.8 -> a = 0.8; K = 2: 1 + 0.6 + 0.36 = 1.96 -> a = 0.6; K = 3 at a = 0.5: 1.875
    rates = break_even_rate(np.array([1.8, 1.96, 1.875]), np.array([1, 2, 3]))
    assert rates == pytest.approx([0.8, 0.6, 0.5], abs=1e-9)
    # AL <= 1 needs no acceptance; AL >= K + 1 cannot be reached with a rate below 1
    edge = break_even_rate(np.array([0.9, 2.0, 4.5]), np.array([2, 1, 3]))
    assert edge[0] == 0.0 and np.isnan(edge[1]) and np.isnan(edge[2])


def test_break_even_length_is_the_step_time_ratio():
    # a step with K drafts taking 1.5x the plain step must commit 1.5 tokens to tie
    assert break_even_acceptance_length(15.0, 10.0) == pytest.approx(1.5)


def test_banded_lengths_by_hand():
    al = banded_acceptance_lengths(np.array([0.5, 0.5]), [0, 1, 2], 0.2)
    # low 0.3: 1, 1.3, 1.39; given 0.5: 1, 1.5, 1.75; high 0.7: 1, 1.7, 2.19
    assert al == pytest.approx(np.array([[1, 1.3, 1.39], [1, 1.5, 1.75], [1, 1.7, 2.19]]))


def test_robust_k_avoids_the_k_that_is_best_only_if_acceptance_is_high():
    itl = np.array([[1.0, 1.2, 1.45]])  # one batch size; K = 0, 1, 2
    al = banded_acceptance_lengths(np.array([0.55]), [0, 1, 2], 0.25)
    # given rate 0.55: goodput 1, 1.55/1.2 = 1.2917, 1.8525/1.45 = 1.2776 -> K = 1 by a hair; the high
    # rate 0.8 favours K = 2 (2.44/1.45 = 1.683 vs 1.5), the low rate 0.3 favours K = 1 (1.0833 vs 0.9586)
    score = robust_score(itl, al, np.ones_like(itl, dtype=bool))
    shares_low = np.array([1.0, 1.3 / 1.2, 1.39 / 1.45]) / (1.3 / 1.2)
    shares_high = np.array([1.0, 1.8 / 1.2, 2.44 / 1.45]) / (2.44 / 1.45)
    given = np.array([1.0, 1.55 / 1.2, 1.8525 / 1.45])
    shares_given = given / given.max()
    assert score[0] == pytest.approx(np.minimum(np.minimum(shares_low, shares_high), shares_given))
    assert int(np.argmax(score[0])) == 1


def test_prediction_rows_carry_break_even_and_it_decides_fixed_k_against_plain():
    p = predict("command-a-h100", batch_sizes=[1, 64, 128, 256])
    t = p.table
    g = p.grid_rows.set_index(["batch_size", "k"])
    k = p.scenario.fixed_k
    for row in t.itertuples():
        hand = g.loc[(row.batch_size, k), "itl_ms"] / g.loc[(row.batch_size, 0), "itl_ms"]
        assert row.break_even_acceptance_length == pytest.approx(hand)
        # fixed K loses to plain exactly where the rates reach less than the break-even length
        assert (row.fixed_vs_plain < 1) == (row.fixed_acceptance_length < row.break_even_acceptance_length)


def test_cli_json_and_table_show_break_even_and_the_band():
    cmd = [sys.executable, "-m", "simulator.predict", "--scenario", "command-a-h100", "--batch-sizes", "1-64",
           "--acceptance-band", "0.15"]
    out = run_main(*cmd[2:], "--format", "json").stdout
    rows = json.loads(out)["rows"]
    assert {"break_even_acceptance_length", "fixed_acceptance_length", "k_opt_depends_on_acceptance"} <= set(rows[0])
    table = run_main(*cmd[2:]).stdout
    assert "K=3 needs AL" in table and "acceptance band +-0.15" in table.splitlines()[0]


def test_band_out_of_range_is_refused_in_one_line():
    r = subprocess.run([sys.executable, "-m", "simulator.predict", "--acceptance-band", "0.7"],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "band = 0.7 must be in [0, 0.5]" in r.stderr and "Traceback" not in r.stderr
