"""The few-shot fit scored on the CPU engine's own measured B x K grid (five interleaved rounds per cell,
calibration/data/runs/smollm2-cpu-ngram-rounds.csv, with the microbenchmarks of the same session):
issue 20's goal for the cost model's decisions, worst noise-aware regret >= 0.98 with at most 4 fitted
cells, is checked against the measurement; the ITL goal (held-out MAPE <= 5%) is reported in the README,
not met (8.4%)."""
from __future__ import annotations

import json

import pandas as pd

from calibration import fewshot_heldout as fh
from calibration import fit_deployment as fd
from simulator.specs.scenario import load_scenario

RUNS = "calibration/data/runs/smollm2-cpu-ngram-rounds.csv"
PROFILE = "calibration/data/runs/cpu-epyc-2c.profile.json"


def test_every_cell_carries_five_interleaved_rounds():
    rows = pd.read_csv(RUNS)
    assert len(rows) == 49 and rows.groupby(["batch_size", "k"]).size().eq(1).all()
    for r in rows.itertuples():
        rounds = json.loads(r.itl_ms_rounds)
        assert len(rounds) == 5 and min(rounds) <= r.itl_ms * (1 + 1e-6) and r.itl_ms <= max(rounds) * (1 + 1e-6)


def test_four_cells_choose_k_within_the_measurement_interval():
    sc = load_scenario("scenarios/smollm2-cpu.toml", calibration=PROFILE)
    s = fh.score(sc, fd.read_rows([RUNS]))
    assert len(s["fit_cells"]) <= fh.MAX_CELLS
    given = s["regret_acceptance_given"]
    assert given.regret_noise_aware.min() >= 0.98  # the goal, against the measured goodput of every batch size
    assert set(given.batch_size) == {1, 2, 4, 8, 16, 32, 64} and (given.repeats == 5).all()
