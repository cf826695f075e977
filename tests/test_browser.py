"""The dashboard in a real headless Chromium: `streamlit run app.py` as a subprocess, driven by
playwright's sync API (PyPI package, system /usr/bin/chromium; never `playwright install`).

Behaviour checked: the charts render (vega-embed canvas/svg), changing the accelerator changes the
rendered K* chart and the provenance line. The screenshot goes to a temporary directory;
`make docs` sets DSD_DOCS_SCREENSHOT=docs/dashboard.png to refresh docs/guide.md's picture.
"""
from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = "/usr/bin/chromium"
CHART = '[data-testid="stVegaLiteChart"]'

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_healthy(url: str, proc: subprocess.Popen, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"streamlit exited with code {proc.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.3)
    raise TimeoutError(f"{url} not healthy after {timeout_s:.0f} s")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    if not Path(CHROMIUM).exists():
        msg = f"{CHROMIUM} not found (apt-get install -y chromium)"
        if os.environ.get("CI"):
            pytest.fail(msg)
        pytest.skip(msg)
    pytest.importorskip("playwright.sync_api")
    port = _free_port()
    log = tmp_path_factory.mktemp("streamlit") / "server.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "streamlit", "run", "app.py", "--server.address", "127.0.0.1",
             "--server.port", str(port), "--server.headless", "true", "--browser.gatherUsageStats", "false",
             "--server.fileWatcherType", "none"],
            cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
    try:
        _wait_healthy(f"http://127.0.0.1:{port}/_stcore/health", proc)
        yield f"http://127.0.0.1:{port}/"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="module")
def page(server):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=[
            "--no-sandbox", "--headless", "--disable-gpu", "--disable-background-networking",
            "--disable-component-update", "--disable-sync", "--no-first-run"])
        try:
            pg = browser.new_page(viewport={"width": 1500, "height": 1000}, device_scale_factor=1)
            pg.goto(server, wait_until="domcontentloaded")
            yield pg
        finally:
            browser.close()


def _settled_chart_png(page, timeout_s: float = 30.0) -> bytes:
    """Screenshot of the first chart once two consecutive shots agree (vega has finished drawing)."""
    from playwright.sync_api import Error as PlaywrightError
    page.wait_for_selector(f"{CHART} canvas, {CHART} svg", timeout=timeout_s * 1000)
    last, deadline = b"", time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            shot = page.locator(CHART).first.screenshot()
        except PlaywrightError:  # Streamlit replaced the chart's element while it was being shot: not settled
            shot = b""
        if shot and shot == last:
            return shot
        last = shot
        time.sleep(0.5)
    return last


def _provenance(page) -> str:
    return page.locator('[data-testid="stCaptionContainer"]').filter(has_text="Prediction rests on").first.inner_text()


def test_charts_render_and_change_with_hardware(page, tmp_path):
    screenshot = Path(os.environ.get("DSD_DOCS_SCREENSHOT") or tmp_path / "dashboard.png")
    page.wait_for_selector(f"{CHART} canvas, {CHART} svg", timeout=60_000)
    assert page.locator('[data-testid="stException"]').count() == 0
    before = _settled_chart_png(page)
    assert "h200" in _provenance(page)

    screenshot.parent.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(screenshot))

    box = page.locator('[data-testid="stSelectbox"]').filter(has_text="Accelerator")
    box.locator("input").click()
    page.keyboard.type("a100-80gb")
    page.keyboard.press("Enter")
    page.wait_for_function(
        "() => [...document.querySelectorAll('[data-testid=\"stCaptionContainer\"]')]"
        ".some(e => e.innerText.includes('a100-80gb'))", timeout=30_000)
    after = _settled_chart_png(page)
    assert after != before, "the K* chart looks the same after changing the accelerator"
    assert page.locator('[data-testid="stException"]').count() == 0
    assert screenshot.stat().st_size > 20_000


def test_headline_states_the_k_schedule_in_words(page):
    """A fresh session's headline reads "K schedule: K=.. for B 1-.., ..." (issue 14)."""
    ctx = page.context.browser.new_context(viewport={"width": 1500, "height": 1000})
    pg = ctx.new_page()
    try:
        pg.goto(page.url, wait_until="domcontentloaded")
        el = pg.locator('[data-testid="stMarkdownContainer"]').filter(has_text="K schedule:").first
        el.wait_for(timeout=60_000)
        text = el.inner_text()
    finally:
        ctx.close()
    assert re.match(r"K schedule: (K=\d+ for B 1\b|no speculation)", text), text
    assert re.search(r"K=\d+ for B 1(-\d+)?", text), text


# every selectbox input of the sidebar whose text is wider than its box (issue 49: dtypes read "bf1")
CUT_VALUES = """() => [...document.querySelectorAll('[data-testid="stSidebar"] [data-testid="stSelectbox"] input')]
    .filter(i => i.scrollWidth > i.clientWidth).map(i => i.getAttribute('aria-label') + ': ' + i.value)"""


def _pick(pg, label: str, value: str) -> None:
    box = pg.locator('[data-testid="stSelectbox"]').filter(has_text=label).first
    box.locator("input").click()
    pg.keyboard.type(value)
    pg.keyboard.press("Enter")


def test_sidebar_dropdowns_show_whole_values_and_the_engine_moves_the_provenance(page, tmp_path):
    ctx = page.context.browser.new_context(viewport={"width": 1500, "height": 1000})
    pg = ctx.new_page()
    try:
        pg.goto(page.url, wait_until="domcontentloaded")
        pg.wait_for_selector(f"{CHART} canvas, {CHART} svg", timeout=60_000)
        _pick(pg, "Engine", "TensorRT-LLM")
        pg.wait_for_function("() => [...document.querySelectorAll('[data-testid=\"stCaptionContainer\"]')]"
                             ".some(e => e.innerText.includes('TensorRT-LLM'))", timeout=30_000)
        _pick(pg, "Weights", "mxfp4")
        _pick(pg, "KV cache", "fp16")
        pg.wait_for_function("() => [...document.querySelectorAll('[data-testid=\"stCaptionContainer\"]')]"
                             ".some(e => e.innerText.includes('Prediction rests on'))", timeout=30_000)
        assert pg.evaluate(CUT_VALUES) == []
        assert "TensorRT-LLM" in _provenance(pg)
        assert pg.locator('[data-testid="stException"]').count() == 0
        pg.locator('[data-testid="stSidebar"]').screenshot(path=str(tmp_path / "sidebar.png"))
    finally:
        ctx.close()


def test_downloads_in_a_row_each_give_their_file(page, tmp_path):
    """Downloads tab: every download arrives when clicked one after another (before: a click reran the page, and a
    click during that rerun got nothing, "Deferred file ... not found": 3 of 12 in a row failed, 0 of 24 after),
    and the vLLM schedule is the JSON vLLM reads (issue 13)."""
    import json

    ctx = page.context.browser.new_context(accept_downloads=True, viewport={"width": 1500, "height": 1000})
    pg = ctx.new_page()
    got = []
    try:
        pg.goto(page.url, wait_until="domcontentloaded")
        pg.get_by_role("tab", name="Downloads").click()
        labels = ["Goodput grid (CSV)", "K* table (CSV)", "Prediction with provenance (JSON)",
                  "vLLM speculative config (JSON)"] * 2
        pg.locator('[data-testid="stDownloadButton"]').filter(has_text=labels[0]).wait_for(timeout=60_000)
        for label in labels:
            with pg.expect_download(timeout=15_000) as info:
                pg.locator('[data-testid="stDownloadButton"]').filter(has_text=label).locator("button").click()
            got.append(info.value.suggested_filename)
            if got[-1].endswith("-vllm.json"):
                info.value.save_as(tmp_path / got[-1])
            time.sleep(0.5)
    finally:
        ctx.close()
    assert got == [f"default-{s}" for s in ("grid.csv", "kstar.csv", "prediction.json", "vllm.json")] * 2
    cfg = json.loads((tmp_path / "default-vllm.json").read_text())
    ranges = cfg["num_speculative_tokens_per_batch_size"]
    assert ranges[0][0] == 1
    assert cfg["num_speculative_tokens"] == max(1, max(r[2] for r in ranges))
    assert all(r[1] + 1 == n[0] for r, n in zip(ranges, ranges[1:]))  # inclusive, contiguous, no overlap
