"""How far to trust a predicted speedup: the published curves' error per batch-size range, quoted per row.

Anchors: a hand-made set of errors (bins, MAPE, median by hand), the committed transfer rows
(calibration/data/transfer/transfer_rows.csv: the bands file must say what those rows say), and hand
arithmetic of the gain-at-risk rule (predicted speedup / (1 + median optimism) < 1).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from calibration.transfer_report import speedup_by_batch
from simulator.plan.api import predict
from simulator.plan.speedup_trust import gain_at_risk_text, speedup_trust_columns
from simulator.specs.scenario import load_scenario
from simulator.specs.uncertainty import speedup_band_at, speedup_bands

ROWS = Path(__file__).resolve().parent.parent / "calibration" / "data" / "transfer" / "transfer_rows.csv"


def test_bins_by_hand():
    # errors +10%, -10% at B = 2, 8; +30%, +10%, +20% at B = 16, 24, 32; +50% at B = 64:
    # B 1-8: MAPE 10%, median 0; B 9-32: MAPE 20%, median +20%; B >= 33: one row, +50%
    rows = pd.DataFrame({"batch_size": [2, 8, 16, 24, 32, 64], "error": [0.1, -0.1, 0.3, 0.1, 0.2, 0.5],
                         "decision_right": [True, True, False, True, True, False]})
    bins = speedup_by_batch(rows)
    assert [(b["batch_min"], b["batch_max"], b["n"]) for b in bins] == [(1, 8, 2), (9, 32, 3), (33, None, 1)]
    assert [b["mape"] for b in bins] == pytest.approx([0.1, 0.2, 0.5])
    assert [b["median_error"] for b in bins] == pytest.approx([0.0, 0.2, 0.5])
    assert [b["worst"] for b in bins] == pytest.approx([0.1, 0.3, 0.5])
    assert [b["decision_right"] for b in bins] == pytest.approx([1.0, 2 / 3, 0.0])


@pytest.mark.transfer
def test_committed_bands_are_the_committed_rows():
    # the bands predict quotes (simulator/data/transfer_error.json) are the zero-shot speedup rows' own
    # statistics: recomputed here from the scored rows, anchor rows excluded
    rows = pd.read_csv(ROWS)
    spec = rows[(rows.kind == "speedup") & ~rows.anchor.astype(bool)]
    bands = speedup_bands()
    assert sum(b.n for b in bands) == len(spec) >= 60
    for b in bands:
        inside = spec[(spec.batch_size >= b.batch_min) & ((spec.batch_size <= b.batch_max) if b.batch_max else True)]
        assert b.n == len(inside)
        assert b.mape == pytest.approx(inside.error.abs().mean(), rel=1e-9)
        assert b.median_error == pytest.approx(inside.error.median(), rel=1e-9)
    mape, median = speedup_band_at([1, 8, 9, 32, 33, 512])
    assert mape[0] == mape[1] != mape[2] == mape[3] != mape[4] == mape[5]
    # the physics alone leaned optimistic at mid and large batch (+17.4%, +21.3% median, issue 20); with the learned
    # layer, held out by source, it still leans optimistic there but by less (issue 47; transfer.md)
    assert 0 < median[2] < 0.174 and median[4] < 0.213


def test_gain_at_risk_by_hand():
    # B = 24 in the 9-32 range: 1.05x with a median +9% optimism (the learned layer held out by source) reads
    # 1.05 / 1.09 = 0.96 < 1: at risk; 1.30x reads 1.19: not; K* = 0 (plain) is never at risk
    sc = load_scenario("llama-3.1-8b-h100")
    _, median = speedup_band_at([24])
    assert 0.05 < median[0] < 0.3
    table = pd.DataFrame({"batch_size": [24, 24, 24], "speedup_vs_plain": [1.05, 1.30, 1.0],
                          "k_opt": pd.array([2, 3, 0], dtype="Int64")})
    cols = speedup_trust_columns(table, sc)
    want = [1.05 / (1 + median[0]) < 1, 1.30 / (1 + median[0]) < 1, False]
    assert list(cols["gain_at_risk"]) == want == [True, False, False]
    text = gain_at_risk_text(table.assign(**cols))
    assert "B 24 (1 batch sizes, up to 1.05x)" in text and "calibration.fit_deployment" in text


def test_predict_quotes_the_band_and_flags_the_rows():
    # K* at the terms' centre: gains within the optimism (up to B 1024: with its host time hidden behind vLLM 0.33's
    # steps, command-a's speculation pays by less than that optimism only past B 256)
    p = predict("command-a-h100", decision_quantile=0, batch_sizes="1-1024")
    t = p.table
    assert "how far" not in p.provenance["speedup_uncertainty"]  # the band itself, not a header
    assert "median +" in p.provenance["speedup_uncertainty"]
    _, median = speedup_band_at(t.batch_size)
    np.testing.assert_array_equal(t.speedup_published_median_error.to_numpy(), median)
    flagged = t.batch_size[t.gain_at_risk].to_numpy()
    # K* chosen at the terms' pessimistic 10% may speculate where its centre is a hair below plain: no gain to flag
    by_hand = t.batch_size[(t.k_opt.fillna(0) > 0) & (t.speedup_vs_plain > 1)
                           & (t.speedup_vs_plain / (1 + median) < 1)].to_numpy()
    np.testing.assert_array_equal(flagged, by_hand)
    assert flagged.size and gain_at_risk_text(t).startswith(f"the predicted gain of speculation at B {flagged.min()}")


@pytest.mark.transfer
def test_physics_only_quotes_the_physics_own_band():
    # --physics-only: its speedups are the physics' alone, so it quotes what the physics alone did on the same
    # published rows (transfer.json physics_only_by_batch: median +17.4% at B 9-32), not the learned layer's band
    import json
    summary = json.loads((ROWS.parent / "transfer.json").read_text())
    phys = summary["physics_only_by_batch"][1]
    assert (phys["batch_min"], phys["batch_max"]) == (9, 32)
    p = predict("llama-3.1-8b-h100", learned=False, batch_sizes="1,16,64")
    t = p.table
    assert t.speedup_published_median_error.iloc[1] == pytest.approx(phys["median_error"], rel=1e-12)
    assert t.speedup_published_mape.iloc[1] == pytest.approx(phys["mape"], rel=1e-12)
    assert p.provenance["speedup_uncertainty"].startswith("the physics alone, zero-shot against 68 published speedups")
    learned = predict("llama-3.1-8b-h100", batch_sizes="1,16,64")
    assert learned.table.speedup_published_median_error.iloc[1] == pytest.approx(
        summary["speedup"]["by_batch"][1]["median_error"], rel=1e-12)
    assert learned.provenance["speedup_uncertainty"].startswith("zero-shot against 68")


def test_cpu_and_fitted_predictions_do_not_quote_the_gpu_curves(tmp_path):
    p = predict("smollm2-cpu")
    assert p.table.speedup_published_mape.isna().all() and not p.table.gain_at_risk.any()
    assert "no published speedup rows on CPUs" in p.provenance["speedup_uncertainty"]
    # a deployment fit of the user's own measurements replaces the zero-shot terms: its interval is quoted
    from deployment_fit_docs import cpu_fit_doc, write_fit
    path = write_fit(tmp_path, cpu_fit_doc())
    fitted = predict(load_scenario("smollm2-cpu", deployment=str(path)))
    assert fitted.provenance["speedup_uncertainty"].startswith("the interval of the deployment fit fit.json (2 points")


def test_sizing_caveat_when_the_speculative_edge_is_within_the_optimism():
    # dsd carries 10.0 req/s per replica where plain carries 9.5 on the same H100s (+5.3%), running 24
    # sequences on average: published speedups at B 9-32 came in a median ~17% below the planner, so the
    # recommendation says plain may carry as much; at 15.0 req/s (+58%) it says nothing, nor on a CPU
    from simulator.sizing.ranking import speculation_margin
    _, median = speedup_band_at([24])
    best = pd.Series({"policy": "dsd", "hardware": "h100-sxm", "max_load_per_replica": 10.0, "mean_batch_size": 24.0})
    same = pd.DataFrame({"policy": ["plain", "dsd"], "max_load_per_replica": [9.5, 10.0]})
    text = speculation_margin(best, same)
    assert "dsd's +5% capacity over plain decoding" in text and f"(+{median[0]:.0%})" in text
    assert "mean batch of 24 sequences" in text
    assert speculation_margin(best.copy().replace({10.0: 15.0}), same) == ""
    assert speculation_margin(best.copy().replace({"h100-sxm": "cpu-xeon-2c"}), same) == ""
    assert speculation_margin(best.copy().replace({"dsd": "plain"}), same) == ""


SWEEP_EDGE = """
name = "edge"
[sweep]
base = "sizing-dense-command-a"
hardware = ["h200"]
tp = [4]
dtype = ["fp8"]
policies = ["plain", "dsd"]
[traffic.chat]
rate_per_s = 8.0
prompt_len = 512
output_len = 100
[run]
n_requests = 20
search_steps = 0
duration_s = 2.0
workers = 1
[output]
formats = ["csv"]
"""


@pytest.mark.slow
def test_sweep_rows_carry_the_sizing_caveat(tmp_path):
    # one sweep task (Command A on 4 x H200 fp8, the bench sweep's cheap search), plain and dynamic K: the
    # dsd row's caveat is there exactly when its capacity over the plain row's is smaller than the published
    # median optimism at its mean batch size (the rule of the sizing headline), and names both figures
    from simulator.sweep import run_sweep
    spec = tmp_path / "edge.toml"
    spec.write_text(SWEEP_EDGE)
    t = run_sweep(spec, output_dir=tmp_path / "out", progress=False).table.set_index("policy")
    dsd, plain = t.loc["dsd"], t.loc["plain"]
    edge = dsd.max_load_per_replica / plain.max_load_per_replica - 1
    _, median = speedup_band_at([dsd.mean_batch_size])
    caveat = str(dsd.speculation_caveat) if dsd.speculation_caveat == dsd.speculation_caveat else ""
    assert bool(caveat) == (edge < median[0])
    if caveat:
        assert f"{edge:+.0%} capacity over plain" in caveat and f"(+{median[0]:.0%})" in caveat
    assert not (plain.speculation_caveat == plain.speculation_caveat and plain.speculation_caveat)


PARTS = Path(__file__).resolve().parent.parent / "calibration" / "data" / "transfer" / "transfer_part_rows.csv"


def test_step_parts_by_method_by_hand():
    # a self-speculation setting with draft -30%, verify -20%, plain -10%, step -25%; a draft model's parts;
    # a second self-speculation setting is not mixed in (the first listed is quoted)
    from calibration.transfer_components import parts_by_method
    summary = [{"draft": "self-spec:a", "part": p, "n": 4, "median": m}
               for p, m in (("plain", -0.1), ("draft", -0.3), ("verify", -0.2), ("step", -0.25))]
    summary += [{"draft": "self-spec:b", "part": "plain", "n": 2, "median": 0.5},
                {"draft": "draft-model:x", "part": "step", "n": 3, "median": -0.05}]
    got = parts_by_method(summary)
    assert got["self"] == {"label": "self-spec:a", "n": 4,
                           "median": {"plain": -0.1, "draft": -0.3, "verify": -0.2, "step": -0.25}}
    assert got["model"] == {"label": "draft-model:x", "n": 3, "median": {"step": -0.05}}


def test_self_speculation_quotes_its_published_parts():
    # the committed part rows (MagicDec Table 3 parts beside the planner's): the medians the band file holds
    # and a self-speculative prediction quotes; hand: speedup optimism = (1 + plain) / (1 + step) - 1
    rows = pd.read_csv(PARTS)
    self_rows = rows[rows.draft.str.startswith("self-spec")]
    med = self_rows.groupby("part").error.median()
    p = predict(model="llama-3.1-8b", hardware="a100-80gb", tp=8, draft="self:512", engine="magicdec", batch_sizes=[1, 32])
    text = p.provenance["speedup_uncertainty"]
    assert f"draft passes {med['draft']:+.0%}" in text and f"verify {med['verify']:+.0%}" in text
    assert f"{(1 + med['plain']) / (1 + med['step']) - 1:+.0%} optimistic" in text
    eagle = predict(model="llama-3.1-8b", hardware="a100-80gb", tp=8, draft="eagle", batch_sizes=[1, 32])
    assert "by part" not in eagle.provenance["speedup_uncertainty"]  # no published parts for EAGLE heads


def test_rows_sized_at_sglangs_own_speculative_cap_say_so():
    # SGLang resets --max-running-requests to 48 with speculation (sglang 0.5.13 speculative_hook.py:282-283,
    # tests/test_advice.py): a speculative row sized there says so; plain rows, vLLM rows and a scenario
    # that sets the cap itself do not
    from simulator.sizing.ranking import running_cap_note
    from simulator.specs.scenario import SCENARIO_DIR, load_scenario
    sgl = load_scenario(SCENARIO_DIR / "llama-3.1-8b-h100.toml", engine="sglang")
    note = running_cap_note({"policy": "dsd"}, sgl)
    assert "48 running requests" in note and "--max-running-requests" in note
    assert running_cap_note({"policy": "plain"}, sgl) == ""
    assert running_cap_note({"policy": "dsd"}, load_scenario(SCENARIO_DIR / "llama-3.1-8b-h100.toml")) == ""
    assert running_cap_note({"policy": "dsd"}, sgl.with_overrides(max_num_seqs=256)) == ""
