"""The signal storm of tests/test_hostile.py, run as its own process: ``size`` on the bundled dense sizing
scenario (one candidate, its searches run once beforehand and kept in the process's search cache),
forked once per instant from this process (so each run is the command's own work: loading, sizing,
rendering, publishing; not interpreter start-up), SIGTERM at each instant, and the output directory read
after each kill. The publish step is slowed (``simulator.file_sets.exchange_paths`` and ``os.replace`` wait
DELAY_S before and after the real call) so that a good share of the instants land inside it.

    python tests/hostile_storm.py WORKDIR N_INSTANTS   -> one JSON line on stdout: the states seen
"""
from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

DELAY_S = 0.1
LANES = 2  # runs at once (two cores)
ARGS = ["--scenario", "sizing-dense-command-a", "--candidates", "h200", "--tp", "8", "--no-sensitivity",
        "--n-requests", "20", "--search-steps", "0", "--workers", "1", "--format", "markdown", "--format", "json"]
NAMES = ("sizing-dense-command-a.md", "sizing-dense-command-a.json")
OLD = {"sizing-dense-command-a.md": b"OLD markdown report\n", "sizing-dense-command-a.json": b'{"old": true}\n'}


_MARKS: list[Path] = []  # the publish-marks file of this (forked) run


def _slowed(fn):
    def slow(*a, **kw):
        with _MARKS[0].open("a") as f:
            f.write(f"{time.monotonic()}\n")
        time.sleep(DELAY_S)
        out = fn(*a, **kw)
        time.sleep(DELAY_S)
        return out
    return slow


def state(out: Path) -> str:
    """'old' or 'new' (each file whole and all of one set), else what is wrong."""
    got = {n: (out / n).read_bytes() if (out / n).exists() else None for n in NAMES}
    if got == OLD:
        return "old"
    if all(v is not None and v != OLD[n] for n, v in got.items()):
        try:
            json.loads(got[NAMES[1]])
        except ValueError:
            return "torn json"
        return "new" if got[NAMES[0]].rstrip().endswith(b"|") or got[NAMES[0]].strip() else "torn markdown"
    return "mixed: " + ", ".join(f"{n}={'old' if v == OLD[n] else 'missing' if v is None else 'new'}" for n, v in got.items())


def reset(out: Path) -> None:
    out.mkdir(exist_ok=True)
    for n, data in OLD.items():
        (out / n).write_bytes(data)


def run_child(out: Path, kill_at: float | None, in_publish: bool = False) -> tuple[int, float]:
    """Fork, run size's main in the child; SIGTERM it ``kill_at`` seconds in (``in_publish``: seconds after
    the child starts publishing, seen as a new line in its marks file). (exit status, seconds)."""
    marks = out.parent / "publish-marks.txt"
    seen = marks.read_text().count("\n") if marks.exists() else 0
    from simulator.cli import size as size_cli
    t0 = time.monotonic()
    pid = os.fork()
    if pid == 0:
        _MARKS[:] = [marks]
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 1)
            os.dup2(devnull, 2)
            rc = size_cli.main(ARGS + ["--output-dir", str(out)])
        except BaseException:
            rc = 99
        os._exit(rc)
    if kill_at is not None:
        if in_publish:  # wait for the publish step to begin (or the child to end)
            while not (marks.exists() and marks.read_text().count("\n") > seen):
                if os.waitpid(pid, os.WNOHANG) != (0, 0):
                    return -1, time.monotonic() - t0  # ended without publishing: not a valid instant
                time.sleep(0.001)
        time.sleep(kill_at)
        os.kill(pid, signal.SIGTERM)
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    return code, time.monotonic() - t0


def main(work: Path, n: int) -> dict:
    import simulator.file_sets as file_sets
    from simulator.cli import size as size_cli
    import simulator.sizing  # noqa: F401
    import simulator.sizing.report  # noqa: F401

    # the searches run once, here: each forked run finds them in the process's search cache
    # (simulator.sizing.pool) and spends its time loading, assembling, rendering and publishing
    devnull = open(os.devnull, "w")
    saved = os.dup(2)
    os.dup2(devnull.fileno(), 2)
    try:
        assert size_cli.main(ARGS + ["--output-dir", str(work / "warm-up")]) == 0
    finally:
        os.dup2(saved, 2)
    file_sets.exchange_paths = _slowed(file_sets.exchange_paths)
    file_sets.os.replace = _slowed(os.replace)  # the fallback path (file_sets.os is the os module: all renames)
    lanes = [work / f"lane{i}" for i in range(LANES)]
    for lane in lanes:
        lane.mkdir()
        reset(lane / "out")
    t_start = time.monotonic()
    code, total = run_child(lanes[0] / "out", None)  # a whole run: how long it takes and when it publishes
    marks = lanes[0] / "publish-marks.txt"
    first = [float(x) for x in marks.read_text().split()] if marks.exists() else []
    assert code == 0 and state(lanes[0] / "out") == "new" and first, (code, state(lanes[0] / "out"))
    publish_at = first[0] - t_start
    # half the instants spread over the whole run, half over the slowed publish step
    instants = [(0.9 * total * (i + 0.5) / (n - n // 2), False) for i in range(n - n // 2)]
    instants += [(2 * DELAY_S * (i + 0.5) / (n // 2), True) for i in range(n // 2)]
    seen: list = []

    def lane_runs(lane: Path, mine: list) -> None:
        out = lane / "out"
        for at, in_publish in mine:
            reset(out)
            code, _ = run_child(out, at, in_publish)
            seen.append({"at": round(at, 3), "publishing": in_publish, "exit": code, "state": state(out),
                         "debris": sorted(p.name for p in list(out.iterdir()) + list(lane.iterdir())
                                          if ".staging-" in p.name)})
    threads = [threading.Thread(target=lane_runs, args=(lane, instants[i::LANES])) for i, lane in enumerate(lanes)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    out = lanes[0] / "out"
    code, _ = run_child(out, None)  # the next run
    after = sorted(p.name for p in list(out.iterdir()) + list(lanes[0].iterdir()) if ".staging-" in p.name)
    return {"total_s": round(total, 3), "publish_at_s": round(publish_at, 3), "runs": seen, "next_exit": code,
            "next_state": state(out), "debris_after_next": after}


if __name__ == "__main__":
    print(json.dumps(main(Path(sys.argv[1]), int(sys.argv[2]))))
