"""Dashboard cold start: a new `streamlit run app.py` process until a real browser shows the first
headline ("K schedule: ..."). Target (issue 24 item 7): under 5 s on the 2-core dev machine.

Each repeat starts a fresh server (new Python process: imports, first grid) and a fresh browser page;
the browser itself is launched once, before the clock starts (it is not part of the app). Prints
per repeat: server healthy (s after launch), headline visible (s after launch), and the median.

    .venv/bin/python benchmarks/bench_dashboard_cold.py [--repeats 3]
"""
from __future__ import annotations

import argparse
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = "/usr/bin/chromium"
HEADLINE = "K schedule:"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _healthy(url: str, proc, timeout_s: float = 60.0) -> None:
    end = time.perf_counter() + timeout_s
    while time.perf_counter() < end:
        if proc.poll() is not None:
            raise RuntimeError("streamlit exited before it was healthy")
        try:
            with urllib.request.urlopen(url, timeout=1) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(url)


def one_cold_start(browser) -> tuple[float, float]:
    port = _free_port()
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", "app.py", "--server.address", "127.0.0.1", "--server.port",
         str(port), "--server.headless", "true", "--browser.gatherUsageStats", "false",
         "--server.fileWatcherType", "none"], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _healthy(f"http://127.0.0.1:{port}/_stcore/health", proc)
        healthy = time.perf_counter() - t0
        page = browser.new_page(viewport={"width": 1500, "height": 1000})
        page.goto(f"http://127.0.0.1:{port}/", wait_until="domcontentloaded")
        page.locator('[data-testid="stMarkdownContainer"]').filter(has_text=HEADLINE).first.wait_for(timeout=120_000)
        headline = time.perf_counter() - t0
        page.close()
        return healthy, headline
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--headless", "--disable-gpu"])
        heads = []
        for i in range(args.repeats):
            healthy, headline = one_cold_start(browser)
            heads.append(headline)
            print(f"  run {i + 1}: server healthy {healthy:.2f} s, first headline {headline:.2f} s after launch")
        browser.close()
    print(f"dashboard cold start: first headline median {statistics.median(heads):.2f} s over {len(heads)} runs"
          " (target < 5 s)")


if __name__ == "__main__":
    main()
