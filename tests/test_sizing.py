"""Sizing: memory fit, load search, monotonicity, CLI errors and the HTML report in a real browser.

Anchors: hand (memory arithmetic from the catalog figures), invariants (more traffic never needs
fewer GPUs), and behaviour (a rendered report shows its charts).
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from simulator.plan.api import predict_scenario
from simulator.errors import PlannerError
from simulator.specs.scenario import load_scenario
from simulator.sizing import (Candidate, SizingOverrides, candidate_scenario, memory_fit, parse_sizing,
                              search_capacity, size)
from cli_inprocess import run_main

ROOT = Path(__file__).resolve().parent.parent
DENSE = ROOT / "scenarios" / "sizing-dense-command-a.toml"
MOE = ROOT / "scenarios" / "sizing-moe-qwen3-235b.toml"
CHROMIUM = "/usr/bin/chromium"

try:
    from simulator import serving  # noqa: F401
    HAVE_SERVING = hasattr(serving, "simulate")
except ImportError:
    HAVE_SERVING = False


def standin_simulate(scenario, policy, workload, seed=0):
    """A stand-in for the serving simulation, for tests of the search logic only.

    Steady state by Little's law: B = rate * output_len / goodput(B); TPOT = 1 / goodput(B);
    TTFT = one prefill-like step plus a queueing term that explodes as B nears max_num_seqs.
    """
    table = predict_scenario(scenario).table
    col = {"plain": "plain_goodput_per_seq", "fixed": "fixed_goodput_per_seq"}.get(policy, "goodput_per_seq")
    b = table.batch_size.to_numpy(float)
    g = table[col].to_numpy(float)
    out = workload.output_len
    out = float(getattr(out, "value", out))
    cap = getattr(workload, "max_num_seqs", None) or b[-1]
    rate = workload.rate_per_s
    need = rate * out / g  # sequences in flight if the batch were b
    ok = np.isfinite(g) & (need <= b) & (b <= cap)
    if ok.any():
        i = np.flatnonzero(ok)[0]
        tpot, ttft = 1 / g[i], 0.2 + 0.5 * b[i] / cap
    else:
        tpot, ttft = 1 / np.nanmin(g), 1e3
    return {"policy": policy, "n_requests": workload.n_requests, "throughput_tok_s": rate * out,
            "tokens_per_s_per_user": 1 / tpot, "ttft_p50_s": ttft / 2, "ttft_p90_s": ttft * 0.8, "ttft_p99_s": ttft,
            "tpot_p50_s": tpot, "tpot_p90_s": tpot * 1.1, "tpot_p99_s": tpot * 1.2, "itl_p50_s": tpot,
            "itl_p99_s": tpot * 1.5, "makespan_s": workload.n_requests / rate, "mean_batch_size": 0.0,
            "mean_k": 0.0, "kv_peak_occupancy": 0.0}


# behaviour tests run the real serving simulation when it is there (small runs); the search tests
# use the stand-in so they check the search logic alone
SIM = None if HAVE_SERVING else standin_simulate
SMALL = dict(n_requests=40, duration_s=15.0, max_requests=400, search_steps=1)


def _spec(sc, **kw):
    return parse_sizing(sc, **kw)


# --- memory fit (hand anchor) --------------------------------------------------------------------

def test_memory_rejects_with_reason():
    # hand: Command A ~111e9 params in bf16 over tp=2 -> ~111 GB per GPU > 80 GB * 0.9 = 72 GB usable
    sc = load_scenario(DENSE)
    fit = memory_fit(candidate_scenario(sc, Candidate("h100-sxm", 2)), 1324)
    assert not fit["fits"]
    assert re.search(r"h100-sxm tp=2: weights 11\d GB/GPU .*exceed 72 GB usable", fit["reason"])
    assert memory_fit(candidate_scenario(sc, Candidate("h100-sxm", 8)), 1324)["fits"]


def test_rejected_candidate_listed_in_result():
    res = size(DENSE, SizingOverrides(candidates=["h100-sxm"], tp=[2, 8], policies=["dsd"], workers=1,
                                      sensitivity=False, dtypes=[""], **SMALL), simulate=SIM)
    assert list(res.rejected.tp) == [2]
    assert "exceed 72 GB usable" in res.rejected.reason.iloc[0]
    assert set(res.capacity.tp) == {8}


# --- load search -------------------------------------------------------------------------------

def test_search_brackets_and_meets_slo():
    sc = load_scenario(DENSE)
    spec = _spec(sc, n_requests=50, search_steps=4)
    s = search_capacity(sc, "dsd", spec, max_seqs=256, simulate=standin_simulate)
    assert s.capacity > 0 and s.bounded
    passed = [p["load"] for p in s.points if p["meets"]]
    failed = [p["load"] for p in s.points if not p["meets"]]
    assert max(passed) == s.capacity and min(failed) > s.capacity
    assert min(failed) / s.capacity < 2 ** (1 / 8) + 1e-9  # 4 bisection steps in a factor-2 bracket


def test_unservable_traffic_gives_clear_result():
    # TPOT of 1 ms: no GPU decodes a 111B model that fast
    sc = load_scenario(DENSE)
    raw_slo = {"tpot_p50_s": 0.001}
    sc.extra["slo"] = raw_slo
    res = size(sc, SizingOverrides(candidates=["h100-sxm"], tp=[8], workers=1, sensitivity=False, **SMALL),
               simulate=SIM)
    assert res.recommendation is None
    assert res.message.startswith("no configuration meets tpot_p50_s <= 0.001 s")
    assert len(res.ranked) == 0


def test_more_traffic_never_needs_fewer_gpus():
    sc = load_scenario(MOE)
    gpus, cost = [], []
    for rate in (2.0, 10.0, 40.0, 120.0):
        res = size(sc, SizingOverrides(candidates=["h200", "b200"], tp=[8], policies=["plain", "dsd"],
                                       target_load=rate, workers=2, sensitivity=False, max_replicas=1000, **SMALL),
                   simulate=SIM)
        cap = res.capacity.set_index(["hardware", "policy"]).gpus
        gpus.append(cap)
        cost.append(res.ranked.fleet_usd_per_hour.iloc[0])
    for a, b in zip(gpus, gpus[1:]):
        assert (b >= a).all()
    assert all(y >= x for x, y in zip(cost, cost[1:]))


def test_uncertainty_band_from_validation_error():
    # hand: a validation ITL MAPE of 60% (above every other error on record for h200: held-out kernel
    # fits <= 13.3%, published end-to-end step time 41%) widens the validated device's capacity by +-60%
    from simulator.sizing.uncertainty import candidate_band
    sc = load_scenario(MOE)
    assert candidate_band(sc)[0] < 0.6
    sc.extra["validation"] = {"itl_mape": 0.6}
    res = size(sc, SizingOverrides(candidates=["h200", "h100-pcie"], tp=[8], policies=["dsd"], workers=1,
                                   sensitivity=False, n_requests=40, search_steps=1, dtypes=[""]),
               simulate=standin_simulate)
    row = res.capacity.set_index("hardware")
    assert row.load_band_low["h200"] == pytest.approx(0.4 * row.max_load_per_replica["h200"])
    assert row.load_band_high["h200"] == pytest.approx(1.6 * row.max_load_per_replica["h200"])
    assert row.basis["h200"] == "measured"
    # h100-pcie rests on datasheet figures only: a wide band, flagged, never "unknown"; the validation of
    # h200 does not carry over to it
    wide, note, basis = candidate_band(candidate_scenario(sc, Candidate("h100-pcie", 8)), own_device=False)
    assert basis == "datasheet" and wide >= 0.3 and "datasheet" in note
    assert row.basis["h100-pcie"] == "datasheet"
    assert row.load_band_low["h100-pcie"] == pytest.approx((1 - wide) * row.max_load_per_replica["h100-pcie"])
    assert "60.0%" in res.band_note and "[validation] itl_mape" in res.band_note


def test_parallel_workers_match_serial():
    kw = dict(candidates=["h200"], tp=[8], policies=["plain", "dsd"], sensitivity=False, n_requests=50,
              search_steps=2)
    from simulator.sizing import pool
    serial = size(MOE, SizingOverrides(workers=1, **kw), simulate=standin_simulate).capacity
    pool._SEARCHES.clear()  # run them again, in the pool (not from this process' memo of searches)
    parallel = size(MOE, SizingOverrides(workers=2, **kw), simulate=standin_simulate).capacity
    assert serial.max_load_per_replica.tolist() == parallel.max_load_per_replica.tolist()


# --- input errors ------------------------------------------------------------------------------

@pytest.mark.parametrize("table, message", [
    ({"slo": {"tpot_p50_s": -0.05}}, "must be > 0 seconds"),
    ({"slo": {"tpot_p50_s": "fast"}}, "slo.tpot_p50_s' must be a number"),
    ({"sizing": {"candidates": ["h100-sxn"]}}, "did you mean 'h100-sxm'"),
    ({"sizing": {"replicas": 3}}, "unknown key 'replicas' in [sizing]"),
])
def test_parse_errors(table, message):
    sc = load_scenario(DENSE)
    for section, value in table.items():
        sc.extra[section] = dict(sc.extra.get(section, {})) | value
    with pytest.raises(PlannerError, match=re.escape(message)):
        parse_sizing(sc)


def _cli(*args):
    return run_main("simulator.size", *args, cwd=ROOT)


def _process(*args):
    return subprocess.run([sys.executable, "-m", "simulator.size", *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=60)


@pytest.mark.parametrize("body, expect", [
    ('[sizing]\ncandidates = ["h100-sxn"]\n', "did you mean 'h100-sxm'"),
    ('[slo]\ntpot_p50_s = -0.05\n', "must be > 0"),
    ('[slo]\ntpot_p50_s = 0.05\n[sizing]\ncandidates = "h200"\n', "sizing.candidates' must be a list"),
    ('[slo\n', "malformed TOML"),
])
def test_cli_bad_input_one_line_exit_2(tmp_path, body, expect):
    base = ('[model]\nname = "command-a"\n[hardware]\nname = "h100-sxm"\ntp = 8\n'
            '[traffic]\nrate_per_s = 2.0\nprompt_len = 512\noutput_len = 128\n')
    if "[slo" not in body:
        base += "[slo]\ntpot_p50_s = 0.05\n"
    path = tmp_path / "bad.toml"
    path.write_text(base + "\n" + body)
    r = _cli("--scenario", str(path))
    assert r.returncode == 2
    assert r.stderr.count("\n") == 1 and expect in r.stderr, r.stderr


def test_cli_unknown_flag_one_line():
    r = _process("--scenario", str(DENSE), "--bogus")
    assert r.returncode == 2 and r.stderr.count("\n") == 1


# --- the report in a real browser ---------------------------------------------------------------

def _report_html(tmp_path):
    from simulator.sizing.report import render_html
    res = size(MOE, SizingOverrides(candidates=["h200", "b200"], tp=[8], policies=["plain", "fixed", "dsd"],
                                    workers=2, **SMALL), simulate=SIM)
    path = tmp_path / "report.html"
    path.write_text(render_html(res))
    return path, res


@pytest.mark.browser
def test_report_renders_in_chromium(tmp_path):
    if not os.path.exists(CHROMIUM):
        if os.environ.get("CI"):
            pytest.fail(f"{CHROMIUM} missing on CI")
        pytest.skip(f"{CHROMIUM} missing")
    from playwright.sync_api import sync_playwright
    path, res = _report_html(tmp_path)
    text = path.read_text()
    assert not re.search(r"<(script|link|img)[^>]+(src|href)=[\"']?https?:", text, re.I)
    assert "http" not in text  # nothing to fetch, not even a namespace URL
    assert "<script" not in text
    # the scenario's engine's file only (vLLM here): no TensorRT-LLM schedule beside it
    assert "num_speculative_tokens_per_batch_size" in text and "max_draft_len" not in text
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=[
            "--no-sandbox", "--headless", "--disable-gpu", "--disable-background-networking",
            "--disable-component-update", "--disable-sync", "--no-first-run"])
        try:
            page = browser.new_page(viewport={"width": 1200, "height": 900})
            requests = []
            page.on("request", lambda r: requests.append(r.url))
            page.goto(path.as_uri())
            png = page.screenshot(path=str(tmp_path / "report.png"), full_page=True)
            sizes = page.eval_on_selector_all(
                ".chart svg", "els => els.map(e => [e.getBoundingClientRect().width, e.getBoundingClientRect().height])")
            marks = page.eval_on_selector_all("#chart-pareto svg path, #chart-pareto svg .mark-symbol path",
                                              "els => els.length")
            bars = page.eval_on_selector_all(
                "#chart-capacity svg .mark-rect path",
                "els => els.map(e => [e.getAttribute('aria-label') || '', e.getBoundingClientRect().width])")
        finally:
            browser.close()
    # one bar per candidate, dtype and policy, never stacked: as many bars as capacity rows, each bar's value
    # a row's capacity, and every length (horizontal bars) that value on one shared scale
    bars = [(label, h) for label, h in bars if "max load per replica" in label]  # not the error bars' ticks
    values = sorted(float(re.search(r"max load per replica[^:]*: ([\d.]+)", label).group(1)) for label, _ in bars)
    table = sorted(round(v, 2) for v in res.capacity.max_load_per_replica)
    assert len(values) == len(table) >= 4 and values == pytest.approx(table, abs=0.006)
    per_unit = [w / float(re.search(r"max load per replica[^:]*: ([\d.]+)", label).group(1)) for label, w in bars
                if float(re.search(r"max load per replica[^:]*: ([\d.]+)", label).group(1)) > 0.5]
    assert max(per_unit) <= 1.03 * min(per_unit), per_unit
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(sizes) == 2 and all(w > 100 and h > 100 for w, h in sizes)
    assert marks > 5
    assert all(u.startswith(("file:", "data:", "about:")) for u in requests)


def test_cli_dtype_flags_set_the_scenarios_precision():
    """size takes --dtype / --act-dtype / --kv-dtype with predict's meaning (the scenario's [precision]; the
    [sizing] fp8 candidates stay W8A8): the K* table's predict command carries them; a bad one is one line."""
    args = ("--scenario", str(DENSE), "--candidates", "h200", "--tp", "8", "--n-requests", "20", "--search-steps",
            "0", "--no-sensitivity", "--format", "json")
    r = _cli(*args, "--kv-dtype", "fp8", "--attention-dtype", "bf16")
    assert r.returncode == 0, r.stderr
    commands = [e["predict"] for e in json.loads(r.stdout)["engine"].values()]
    assert commands and all("--kv-dtype fp8 --attention-dtype bf16" in c for c in commands)
    bad = _cli(*args, "--act-dtype", "fp7")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "fp7" in bad.stderr


def test_spec_stops_paying_names_memory_when_k1_no_longer_fits():
    # Llama-3.1-8B with a Llama-3.2-1B draft on one 24 GB L4 at 8k context: from some batch size the
    # draft's weights and KV leave no room for K = 1 where plain decoding still fits; the text must name
    # that batch size (the first where the grid's K = 1 column stops fitting) and memory as the cause
    from simulator.plan.api import predict
    from simulator.sizing import spec_stops_paying
    p = predict(model="llama-3.1-8b", hardware="l4", tp=1, context_len=8192, draft="model:llama-3.2-1b")
    g = p.grid
    k1, k0 = list(g.ks).index(1), list(g.ks).index(0)
    first = int(np.flatnonzero(~g.fits_memory[:, k1])[0])
    assert first > 0 and g.fits_memory[first, k0] and g.fits_memory[first - 1, k1]
    text = spec_stops_paying(p.table, g)
    assert f"stops paying at B={int(g.batch_sizes[first])} (speculation no longer fits memory from there)" in text
    # without the grid the cause cannot be told: the same batch size, said as K* = 0
    assert f"stops paying at B={int(g.batch_sizes[first])} (K*=0 from there)" in spec_stops_paying(p.table)
