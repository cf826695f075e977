"""Command start-up: a whole `predict` process, and the import of its module alone (what every command pays before it
computes anything). Prints medians over interleaved runs (the machine is shared).

    python benchmarks/bench_cli_start.py
"""
from __future__ import annotations

import statistics
import subprocess
import sys
import time

RUNS = 9
COMMANDS = {
    "predict --scenario command-a-h100": [sys.executable, "-m", "simulator.predict", "--scenario", "command-a-h100"],
    "import simulator.cli.predict": [sys.executable, "-c", "import simulator.cli.predict"],
    "import scipy.stats (what the draws no longer import)": [sys.executable, "-c", "import scipy.stats"],
}


def main() -> None:
    times: dict[str, list[float]] = {name: [] for name in COMMANDS}
    for _ in range(RUNS):  # interleaved: a drift of the machine's speed touches every command alike
        for name, argv in COMMANDS.items():
            start = time.perf_counter()
            subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
            times[name].append(time.perf_counter() - start)
    for name, t in times.items():
        print(f"{name:55s} median {statistics.median(t):.2f} s (min {min(t):.2f}, max {max(t):.2f}, {RUNS} runs)")


if __name__ == "__main__":
    main()
