"""The sizing report a buyer reads: the answer first (GPU type, count, nodes, $/h, $/M output tokens of the
recommended fleet at the target load, the band), the best option per GPU type, ranked by the fleet's cost at
the target with ties broken by evidence, precisions searched only as asked.

Anchors: hand arithmetic ($/M = fleet $/h / (rate x output tokens x 3600 / 1e6); fleet $/h = GPUs x price),
and a real Chromium showing the first screen (viewport 1200 x 900).
"""
from __future__ import annotations

import os
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from simulator.sizing import SizingOverrides, size

ROOT = Path(__file__).resolve().parent.parent
DENSE = ROOT / "scenarios" / "sizing-dense-command-a.toml"
CHROMIUM = "/usr/bin/chromium"
SMALL = dict(n_requests=40, duration_s=15.0, max_requests=400, search_steps=1, sensitivity=False)
RATE, OUT_TOKENS = 40.0, 300  # the scenario's [traffic] rate_per_s and output_len


@pytest.fixture(scope="module")
def dense_result():
    return size(DENSE, SizingOverrides(candidates=["h100-sxm", "b200", "mi300x"], tp=[2, 4], workers=2, **SMALL))


def test_fleet_cost_per_million_tokens_by_hand(dense_result):
    res = dense_result
    rec = res.recommendation
    tokens_per_hour_m = RATE * OUT_TOKENS * 3600 / 1e6  # 43.2 M output tokens per hour at the target
    assert tokens_per_hour_m == pytest.approx(43.2)
    assert rec["fleet_usd_per_hour"] == pytest.approx(rec["gpus"] * rec["price_per_gpu_hour_usd"])
    assert rec["usd_per_m_tokens_at_target"] == pytest.approx(rec["fleet_usd_per_hour"] / tokens_per_hour_m)
    assert rec["gpus"] == rec["nodes"] * 8 and rec["gpus"] % rec["tp"] == 0
    # every ranked row the same way, and the fleet never beats one replica at full load (headroom, N+1, nodes)
    r = res.ranked
    np.testing.assert_allclose(r.usd_per_m_tokens_at_target, r.fleet_usd_per_hour / tokens_per_hour_m, rtol=1e-12)
    assert (r.usd_per_m_tokens_at_target >= r.usd_per_m_output_tokens - 1e-12).all()
    # the headline says the fleet's figures
    assert f"${rec['fleet_usd_per_hour']:,.2f}/h" in res.message
    assert f"${rec['usd_per_m_tokens_at_target']:.2f} per M output tokens at 40 req/s" in res.message
    assert f"buy {int(rec['gpus'])} x {rec['hardware']}" in res.message


def test_ranking_is_fleet_cost_then_evidence_and_says_so(dense_result):
    r = dense_result.ranked
    cost = r.fleet_usd_per_hour.to_numpy()
    assert (np.diff(cost) >= -1e-9).all(), cost  # never a dearer fleet above a cheaper one
    from simulator.sizing.ranking import EVIDENCE
    ev = r.basis.map(EVIDENCE).to_numpy()
    same = np.isclose(cost[1:], cost[:-1])
    assert (ev[1:][same] <= ev[:-1][same]).all()  # ties: stronger evidence first
    assert r.rank_reason.iloc[0] == "cheapest fleet at the target load"
    from simulator.sizing.report import render_markdown
    md = render_markdown(dense_result)
    assert "sorted by the fleet's cost at the target load" in md and "ties broken by evidence" in md


def test_best_option_per_gpu_type_is_each_types_first_ranked_row(dense_result):
    res = dense_result
    per = res.per_gpu_type
    assert set(per.hardware) == {"h100-sxm", "b200", "mi300x"}
    for _, row in per.iterrows():
        mine = res.ranked[res.ranked.hardware == row.hardware]
        if len(mine):
            assert row["rank"] == mine["rank"].min()
            assert row.fleet_usd_per_hour == mine.fleet_usd_per_hour.min()
        else:
            assert row.note.startswith(("does not meet the target", "cannot run"))
    assert per.hardware.iloc[0] == res.recommendation["hardware"]


def test_precisions_searched_only_as_asked():
    """Default: the scenario's own precision alone (bf16 here); --dtypes own,fp8 adds W8A8, and an fp8 pick
    names its quality caveat."""
    from simulator.sizing.answer import quality_caveat
    from simulator.sizing.spec import parse_sizing
    from simulator.specs.scenario import load_scenario
    sc = load_scenario(DENSE)
    assert {c.dtype for c in parse_sizing(sc).candidates} == {""}
    both = parse_sizing(sc, dtypes=["own", "fp8"]).candidates
    assert {c.dtype for c in both} == {"", "fp8"}
    assert parse_sizing(sc, dtypes=["bf16"]).candidates == parse_sizing(sc).candidates
    caveat = quality_caveat({"dtype": "fp8"}, sc)
    assert "not output quality" in caveat and "bf16" in caveat
    assert quality_caveat({"dtype": "bf16"}, sc) == ""


@pytest.mark.browser
def test_first_screen_in_chromium_shows_the_answer_and_per_gpu_table(dense_result, tmp_path):
    if not os.path.exists(CHROMIUM):
        if os.environ.get("CI"):
            pytest.fail(f"{CHROMIUM} missing on CI")
        pytest.skip(f"{CHROMIUM} missing (make chromium)")
    from playwright.sync_api import sync_playwright

    from simulator.sizing.report import render_html
    res = dense_result
    rec = res.recommendation
    path = tmp_path / "report.html"
    path.write_text(render_html(res))
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--headless", "--disable-gpu"])
        try:
            page = browser.new_page(viewport={"width": 1200, "height": 900})
            page.goto(path.as_uri())
            png = page.screenshot(path=str(tmp_path / "first_screen.png"))  # the first screen only
            answer = page.locator("#answer")
            box_answer = answer.bounding_box()
            box_table = page.locator("#per-gpu-type").bounding_box()
            answer_text = answer.inner_text()
            headers = page.eval_on_selector_all("#per-gpu-type th", "els => els.map(e => e.innerText)")
            cells = page.eval_on_selector_all("#per-gpu-type tbody tr",
                                              "rows => rows.map(r => [...r.cells].map(c => c.innerText))")
            chart = page.locator("#chart-capacity svg").bounding_box()
        finally:
            browser.close()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    # both on the first screen
    assert box_answer["y"] + box_answer["height"] <= 900 and box_table["y"] + box_table["height"] <= 900
    # the answer: GPU type, count, nodes, $/h, fleet $/M at the target (by hand), the band
    fleet_usd_m = rec["gpus"] * rec["price_per_gpu_hour_usd"] / (RATE * OUT_TOKENS * 3600 / 1e6)
    assert f"buy {int(rec['gpus'])} x {rec['hardware']} ({int(rec['nodes'])} node(s) of 8" in answer_text
    assert f"${rec['gpus'] * rec['price_per_gpu_hour_usd']:,.2f}/h" in answer_text
    assert f"${fleet_usd_m:.2f} per M output tokens at 40 req/s" in answer_text
    assert f"{rec['gpus_range']} GPUs across the capacity band" in answer_text
    # the per-GPU-type table: one row per GPU type searched, its $/M by hand from its own fleet $/h
    table = pd.DataFrame(cells, columns=headers)
    assert list(table.GPU) == list(res.per_gpu_type.hardware) and set(table.GPU) == {"h100-sxm", "b200", "mi300x"}
    for _, row in table.iterrows():
        if row["fleet $/h"] == "-":
            continue
        usd_h = float(row["fleet $/h"].replace(",", ""))
        assert usd_h == pytest.approx(float(row["GPUs"]) * res.ranked[res.ranked.hardware == row.GPU]
                                      .price_per_gpu_hour_usd.iloc[0], rel=1e-3)
        assert float(row["fleet $/M output tok at target"]) == pytest.approx(usd_h / 43.2, abs=0.006)
    # the capacity chart at the page's width, each bar at least 10 px tall
    assert chart["width"] >= 700
    assert chart["height"] >= 10 * len(res.capacity)


def test_k_star_runs_carry_the_probability_that_k_star_beats_plain():
    # issue 47 item 4 in the sizing report: each run of equal K* quotes the range of P(K* beats plain) over its
    # batch sizes (plan.decision_risk), '-' for plain decoding
    import pandas as pd
    from simulator.sizing.report_tables import k_star_table
    t = pd.DataFrame({"batch_size": [1, 2, 3, 4], "k_opt": pd.array([3, 3, 0, 0], dtype="Int64"),
                      "speedup_vs_plain": [1.5, 1.4, 1.0, 1.0], "speedup_vs_fixed": [1.0, 1.0, 1.2, 1.3],
                      "bound": ["memory"] * 4, "p_kopt_beats_plain": [1.0, 0.875, float("nan"), float("nan")]})
    rows = k_star_table(t)
    assert list(rows.p_kopt_beats_plain) == ["88%-100%", "-"]
    assert list(rows.batch_sizes) == ["1-2", "3-4"]
