"""Hostile files, signals and processes (issue 50): each case as a hostile user would try it, asserting the
exit code, exactly one stderr line, no traceback, and the state of every guarded file (bytes, modes,
symlinks, devices: tests/bad_input_corpus.snapshot) before and after.

Never touches the machine's own /dev: character devices are ``mknod`` copies (1,3 = null, 1,5 = zero) in a
temporary folder, made only as root (skipped otherwise); FIFOs and symlinks are our own.
"""
from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

from bad_input_corpus import assert_one_line, run_cli, snapshot
from deployment_fit_docs import cpu_fit_doc, write_fit
from simulator.errors import PlannerError

REPO = Path(__file__).resolve().parent.parent
ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0, reason="mknod needs root")
CPU = str(REPO / "scenarios" / "smollm2-cpu.toml")
PREDICT = ["--scenario", CPU, "--batch-sizes", "1,2"]  # a fast prediction to write somewhere


def env() -> dict:
    return dict(os.environ, PYTHONPATH=str(REPO))


@contextmanager
def within(seconds: float):
    """Fail (instead of hanging the suite) when the block takes longer than ``seconds``."""
    def late(signum, frame):
        raise AssertionError(f"still running after {seconds} s (blocked on a FIFO or a device?)")
    old = signal.signal(signal.SIGALRM, late)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    t0 = time.monotonic()
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    assert time.monotonic() - t0 < seconds


def refused(module: str, argv: list, guard: Path, seconds: float = 30.0, expect: str = "") -> str:
    """Exit 2, one 'error:' line (containing ``expect``), nothing under ``guard`` changed; the line."""
    before = snapshot(guard)
    with within(seconds):
        rc, err = run_cli(module, [str(a) for a in argv])
    assert rc == 2, err
    assert_one_line(err, " ".join(map(str, argv)))
    assert snapshot(guard) == before, "guarded files changed"
    assert expect.lower() in err.lower(), err
    return err.strip()


def device(path: Path, minor: int) -> Path:
    os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, minor))
    return path


# --- writing: special files and symlinks are written through, never replaced ---------------------

def test_output_through_a_fifo_keeps_the_fifo(tmp_path):
    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    reader.start()
    time.sleep(0.05)
    with within(60):
        rc, err = run_cli("simulator.predict", PREDICT + ["--output", str(fifo)])
    reader.join(10)
    assert rc == 0, err
    assert stat.S_ISFIFO(fifo.lstat().st_mode) and b"K*" in got[0]


def test_output_to_a_fifo_nobody_reads_is_one_line_at_once(tmp_path):
    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo)
    refused("simulator.predict", PREDICT + ["--output", fifo], tmp_path, seconds=10, expect="no process is reading")


def test_output_symlink_is_followed_not_replaced(tmp_path):
    real = tmp_path / "real" / "table.txt"
    real.parent.mkdir()
    real.write_text("old\n")
    os.chmod(real, 0o640)
    link = tmp_path / "link.txt"
    link.symlink_to(real)
    rc, err = run_cli("simulator.predict", PREDICT + ["--output", str(link)])
    assert rc == 0, err
    assert link.is_symlink() and os.readlink(link) == str(real)
    assert "K*" in real.read_text() and stat.S_IMODE(real.stat().st_mode) == 0o640
    assert sorted(p.name for p in real.parent.iterdir()) == ["table.txt"]  # no temporary left


@pytest.mark.slow
def test_output_through_a_stdout_link(tmp_path):
    """--output /dev/stdout as root once replaced the system's link; here a link of our own to /proc/self/fd/1."""
    link = tmp_path / "stdout"
    link.symlink_to("/proc/self/fd/1")
    done = subprocess.run([sys.executable, "-m", "simulator.predict", *PREDICT, "--output", str(link)],
                          capture_output=True, text=True, env=env(), timeout=120)
    assert done.returncode == 0, done.stderr
    assert "K*" in done.stdout and link.is_symlink() and os.readlink(link) == "/proc/self/fd/1"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["stdout"]


@ROOT_ONLY
def test_output_to_a_character_device_stays_a_device(tmp_path):
    null = device(tmp_path / "null", 3)
    before = null.lstat()
    rc, err = run_cli("simulator.predict", PREDICT + ["--output", str(null)])
    assert rc == 0, err
    after = null.lstat()
    assert stat.S_ISCHR(after.st_mode) and after.st_rdev == before.st_rdev and after.st_ino == before.st_ino
    assert sorted(p.name for p in tmp_path.iterdir()) == ["null"]


@ROOT_ONLY
def test_output_dev_null_works_for_a_normal_user(tmp_path, monkeypatch):
    """The 'discard the output' idiom: a null device in a folder the user cannot write (as /dev). Root can
    write anywhere, so the folder is made unwritable the way a normal user sees it: os.access says no and
    the write probe fails there (the interpreter under /root cannot be run as another user here)."""
    import simulator.files as files

    folder = tmp_path / "dev"
    folder.mkdir(mode=0o755)
    null = device(folder / "null", 3)
    real_access = os.access

    def access(path, mode, *a, **kw):
        return False if Path(path) == folder and mode & os.W_OK else real_access(path, mode, *a, **kw)

    def probe(where, target, flag):
        if Path(where) == folder:
            raise PlannerError(f"{flag} {target}: cannot write in {where} (Permission denied)")
    monkeypatch.setattr(files.os, "access", access)
    monkeypatch.setattr(files, "_probe_write", probe)
    rc, err = run_cli("simulator.predict", PREDICT + ["--output", str(null)])
    assert rc == 0, err
    assert stat.S_ISCHR(null.lstat().st_mode) and sorted(p.name for p in folder.iterdir()) == ["null"]
    rc, err = run_cli("simulator.predict", PREDICT + ["--output", str(folder / "table.txt")])  # a regular file there:
    assert rc == 2 and "not writable" in err  # still refused, as for that user


def test_output_directory_refused(tmp_path):
    (tmp_path / "d").mkdir()
    refused("simulator.predict", PREDICT + ["--output", tmp_path / "d"], tmp_path, expect="is a directory")


# --- report sets: one exchange, a reader sees old or new -----------------------------------------

def test_report_set_is_swapped_in_one_step(tmp_path, monkeypatch):
    import simulator.file_sets as file_sets

    out = tmp_path / "reports"
    out.mkdir()
    (out / "a.md").write_text("old a\n")
    (out / "b.html").write_text("old b\n")
    os.chmod(out / "a.md", 0o600)
    (out / "other.txt").write_text("not ours\n")
    inode = (out / "other.txt").stat().st_ino
    reader = os.open(out, os.O_RDONLY | os.O_DIRECTORY)  # a reader that opened the folder before the swap
    seen = {}

    def read(dir_fd=None):
        return {n: open(os.open(n if dir_fd is not None else out / n, os.O_RDONLY, dir_fd=dir_fd)).read()
                for n in ("a.md", "b.html")}

    def swap(a, b):  # what readers see the instant after the one step
        real_exchange(a, b)
        seen["held"], seen["fresh"] = read(reader), read()
    real_exchange = file_sets.exchange_paths
    monkeypatch.setattr(file_sets, "exchange_paths", swap)
    try:
        file_sets.write_files_atomically(out, {"a.md": "new a\n", "b.html": "new b\n"})
    finally:
        os.close(reader)
    assert seen["held"] == {"a.md": "old a\n", "b.html": "old b\n"}  # the whole old set, not a mix
    assert seen["fresh"] == {"a.md": "new a\n", "b.html": "new b\n"}  # the whole new set
    assert (out / "a.md").read_text() == "new a\n" and stat.S_IMODE((out / "a.md").stat().st_mode) == 0o600
    assert (out / "other.txt").stat().st_ino == inode  # carried over, not copied
    assert sorted(p.name for p in tmp_path.iterdir()) == ["reports"]  # no staging left


def test_report_set_in_a_folder_with_subfolders_still_whole(tmp_path):
    from simulator.file_sets import write_files_atomically

    out = tmp_path / "out"
    (out / "sub").mkdir(parents=True)
    (out / "a.md").write_text("old\n")
    write_files_atomically(out, {"a.md": "new\n", "b.md": "new b\n"})
    assert (out / "a.md").read_text() == "new\n" and (out / "sub").is_dir()
    assert sorted(p.name for p in out.iterdir()) == ["a.md", "b.md", "sub"]


def test_renames_hold_a_signal_until_the_set_is_whole(tmp_path, monkeypatch):
    """Where the folder cannot be swapped (it holds a subfolder), the renames run with SIGTERM held: one
    arriving after the first rename acts only once the last is done."""
    import simulator.file_sets as file_sets
    from simulator.cli.common import Terminated, signals_as_exceptions

    out = tmp_path / "out"
    (out / "sub").mkdir(parents=True)
    for name in ("a.md", "b.md"):
        (out / name).write_text("old\n")
    real, done = os.replace, []

    def replace(a, b):
        real(a, b)
        done.append(b)
        if len(done) == 1:
            os.kill(os.getpid(), signal.SIGTERM)
    monkeypatch.setattr(file_sets.os, "replace", replace)
    with pytest.raises(Terminated), signals_as_exceptions():
        file_sets.write_files_atomically(out, {"a.md": "new\n", "b.md": "new\n"})
    assert [(out / n).read_text() for n in ("a.md", "b.md")] == ["new\n", "new\n"]
    assert sorted(p.name for p in out.iterdir()) == ["a.md", "b.md", "sub"]


def test_staging_left_by_a_killed_run_is_removed_by_the_next(tmp_path):
    from simulator.file_sets import write_files_atomically

    out = tmp_path / "out"
    out.mkdir()
    dead = subprocess.Popen(["true"])
    dead.wait()  # its pid is free: the run that made these staging folders is gone
    (tmp_path / f".out.staging-{dead.pid}-abc").mkdir()
    (out / f".staging-{dead.pid}-abc").mkdir()
    (out / ".staging-oldstyle").mkdir()
    live = tmp_path / f".out.staging-{os.getppid()}-live"  # a running process's: it may be publishing
    live.mkdir()
    write_files_atomically(out, {"a.md": "x\n"})
    assert sorted(p.name for p in out.iterdir()) == ["a.md"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [live.name, "out"]


@pytest.mark.slow
def test_signal_storm_leaves_old_or_new_set(tmp_path):
    """`size` on the bundled dense sizing scenario, SIGTERM at 50 instants (25 over the run, 25 inside the
    slowed publish step; tests/hostile_storm.py): every time the old set or the new set, whole."""
    done = subprocess.run([sys.executable, str(REPO / "tests" / "hostile_storm.py"), str(tmp_path), "50"],
                          capture_output=True, text=True, env=env(), timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    res = json.loads(done.stdout)
    runs = res["runs"]
    assert len(runs) == 50
    assert all(r["state"] in ("old", "new") for r in runs), [r for r in runs if r["state"] not in ("old", "new")]
    killed = [r for r in runs if r["exit"] == 128 + signal.SIGTERM]
    assert len(killed) >= 40, runs  # the instants fell inside the runs
    publishing = [r for r in runs if r["publishing"] and r["exit"] == 143]
    assert {r["state"] for r in publishing} == {"old", "new"}, publishing  # both sides of the swap were hit
    assert res["next_exit"] == 0 and res["next_state"] == "new" and res["debris_after_next"] == []


# --- reading: regular files only, capped, UTF-8, shallow ----------------------------------------

@pytest.mark.parametrize("flag", ["--scenario", "--model", "--acceptance", "--calibration", "--deployment"])
def test_a_fifo_input_returns_at_once(tmp_path, flag):
    fifo = tmp_path / "input.json"
    os.mkfifo(fifo)
    argv = [flag, fifo] + ([] if flag == "--scenario" else ["--scenario", CPU] if flag != "--model" else
                           ["--hardware", "h100-sxm"])
    refused("simulator.predict", argv, tmp_path, seconds=2, expect="FIFO")


@ROOT_ONLY
@pytest.mark.parametrize("flag", ["--scenario", "--model", "--acceptance", "--deployment"])
def test_a_zero_device_input_reads_nothing(tmp_path, flag):
    zero = device(tmp_path / "zero.json", 5)
    argv = [flag, zero] + ([] if flag == "--scenario" else ["--scenario", CPU] if flag != "--model" else
                           ["--hardware", "h100-sxm"])
    refused("simulator.predict", argv, tmp_path, seconds=2, expect="character device")


def test_input_over_its_cap_names_the_cap(tmp_path):
    big = tmp_path / "big.toml"
    with big.open("wb") as f:
        f.truncate(3 * 2**20)  # sparse: 3 MB of zeros, over the 1 MB a scenario may hold
    refused("simulator.predict", ["--scenario", big], tmp_path, seconds=5, expect="1 MB")


def test_deep_nesting_is_one_line(tmp_path):
    toml = tmp_path / "deep.toml"
    toml.write_text('name = "x"\nx = ' + "[" * 5000 + "]" * 5000 + "\n")
    refused("simulator.predict", ["--scenario", toml], tmp_path, expect="nested")
    cfg = tmp_path / "config.json"
    cfg.write_text('{"a": ' + "[" * 100000 + "]" * 100000 + "}")
    refused("simulator.predict", ["--model", cfg, "--hardware", "h100-sxm"], tmp_path, expect="nested")
    cfg.write_text('{"a": ' + "[" * 100 + "]" * 100 + "}")  # parses, but deeper than any config
    refused("simulator.predict", ["--model", cfg, "--hardware", "h100-sxm"], tmp_path, expect="nested")


def test_non_utf8_scenario_names_the_byte_not_the_bytes(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_bytes(b'name = "x"\n# \xff\xfe secret\n')
    line = refused("simulator.predict", ["--scenario", bad], tmp_path, expect="not UTF-8")
    assert "secret" not in line


# --- values: finite, in range, named by flag or by file and key ---------------------------------

@pytest.mark.parametrize("flag,value", [("--k-max", "-1"), ("--top-p", "1.5"), ("--acceptance-band", "5"),
                                        ("--fixed-k", "-1"), ("--routing-reuse", "1.5"), ("--dp", "0"),
                                        ("--ep", "0"), ("--tp", "0")])
def test_a_bad_flag_is_named(tmp_path, flag, value):
    line = refused("simulator.predict", ["--scenario", "default", flag, value], tmp_path)
    assert line.startswith(f"error: {flag} ") and "default.toml" not in line, line


@pytest.mark.parametrize("module,argv", [
    ("simulator.serve", ["--scenario", "command-a-h100", "--policy", "plain", "--acceptance", "1.5"]),
    ("simulator.size", ["--scenario", "sizing-dense-command-a", "--acceptance", "1.5"]),
    ("simulator.size", ["--scenario", "sizing-dense-command-a", "--dtype", "fp3"])])
def test_serve_and_size_name_the_flag(tmp_path, module, argv):
    line = refused(module, argv, tmp_path)
    assert line.startswith(f"error: {argv[-2]} {argv[-1]}: "), line


@pytest.mark.parametrize("flag,value,expect", [("--rate", "inf", "--rate"), ("--rate", "nan", "--rate"),
                                               ("--n-requests", "1000000000", "1000000"),
                                               ("--search-steps", "100000", "--search-steps")])
def test_size_refuses_extreme_flags_before_any_work(tmp_path, flag, value, expect):
    refused("simulator.size", ["--scenario", "sizing-dense-command-a", flag, value], tmp_path, seconds=10,
            expect=expect)


SMALL = 'name = "x"\n[model]\nname = "llama-3.1-8b"\n[hardware]\nname = "h100-sxm"\n'
TRAFFIC = "[traffic]\nrate_per_s = 1.0\nprompt_len = 100\noutput_len = 100\n"


@pytest.mark.parametrize("section,line,expect", [("acceptance", "rates = []", "[acceptance] rates"),
                                                 ("workload", "batch_sizes = []", "[workload] batch_sizes"),
                                                 ("serving", "schedule_overhead_s = -1", "schedule_overhead_s")])
def test_a_bad_key_is_named_with_its_file(tmp_path, section, line, expect):
    sc = tmp_path / "sc.toml"
    sc.write_text(SMALL + f"[{section}]\n{line}\n" + TRAFFIC)
    module, argv = ("simulator.serve", ["--scenario", sc, "--policy", "plain", "--requests", "10"]) \
        if section == "serving" else ("simulator.predict", ["--scenario", sc])
    msg = refused(module, argv, tmp_path, expect=expect)
    assert "sc.toml" in msg


# --- paths named inside an input ------------------------------------------------------------------

def _traffic_scenario(tmp_path: Path, path: str) -> Path:
    sc = tmp_path / "scen" / "sc.toml"
    sc.parent.mkdir(exist_ok=True)
    sc.write_text(Path(CPU).read_text().split("[traffic]")[0] if "[traffic]" in Path(CPU).read_text() else
                  Path(CPU).read_text())
    with sc.open("a") as f:
        f.write(f'\n[traffic]\nrate_per_s = 1.0\nprompt_len = {{dist = "data", path = "{path}"}}\noutput_len = 20\n')
    return sc


@pytest.mark.parametrize("secret", ["planted", "/etc/shadow"])
def test_a_named_path_is_never_echoed(tmp_path, secret):
    if secret == "planted":
        target = tmp_path / "secret.txt"
        target.write_text("root:SECRET-HASH-1234:19000:0:99999:7:::\nline two\n")
    else:
        target = Path(secret)
        if not os.access(target, os.R_OK):
            pytest.skip("/etc/shadow not readable here")
    sc = _traffic_scenario(tmp_path, str(target))
    line = refused("simulator.serve", ["--scenario", sc, "--policy", "plain", "--requests", "10"], tmp_path)
    for text in target.read_text().splitlines():
        for field in filter(None, text.split(":")):
            if len(field) > 4:
                assert field not in line.replace(str(target), ""), f"{field!r} echoed: {line}"


def test_a_named_path_is_read_beside_its_scenario(tmp_path, monkeypatch):
    sc = _traffic_scenario(tmp_path, "lengths.csv")
    (sc.parent / "lengths.csv").write_text("n\n0\n")  # beside the scenario: refused (0 tokens)
    elsewhere = tmp_path / "cwd"
    elsewhere.mkdir()
    (elsewhere / "lengths.csv").write_text("n\n100\n")  # in the working directory: must not be read
    monkeypatch.chdir(elsewhere)
    refused("simulator.serve", ["--scenario", sc, "--policy", "plain", "--requests", "10"], tmp_path,
            expect="token counts")


@pytest.mark.parametrize("kind", ["fifo", "dir"])
def test_a_named_path_must_be_a_regular_file(tmp_path, kind):
    target = tmp_path / "lengths.csv"
    os.mkfifo(target) if kind == "fifo" else target.mkdir()
    sc = _traffic_scenario(tmp_path, str(target))
    refused("simulator.serve", ["--scenario", sc, "--policy", "plain", "--requests", "10"], tmp_path, seconds=5,
            expect="FIFO" if kind == "fifo" else "directory")


# --- hand-edited deployment fits and measured rows ----------------------------------------------

def _edit(doc: dict, key: str, value) -> dict:
    if value is KeyError:
        doc.pop(key)
    elif key == "interval":
        doc["terms"]["kernel_scale"]["interval"] = value
    else:
        doc[key] = value
    return doc


@pytest.mark.parametrize("key,value,expect", [
    ("provenance", "by hand", "provenance"), ("provenance", ["a", "b"], "provenance"),
    ("uncertainty", "abc", "uncertainty"), ("uncertainty", KeyError, "uncertainty"),
    ("uncertainty", {"step_time_rel": 0.0, "goodput_rel": 0.0}, "uncertainty"),
    ("interval", [1.9, 0.6], "kernel_scale.interval")])
def test_a_hand_edited_fit_is_one_line(tmp_path, key, value, expect):
    fit = write_fit(tmp_path, _edit(cpu_fit_doc(), key, value))
    line = refused("simulator.predict", ["--scenario", CPU, "--deployment", fit], tmp_path, expect=expect)
    assert "fit.json" in line and "+-0%" not in line


@pytest.mark.parametrize("column,value", [("context_len", "-2048"), ("itl_ms", "1e308")])
def test_fit_deployment_refuses_impossible_rows(tmp_path, column, value):
    rows = tmp_path / "runs.csv"
    rows.write_text("batch_size,k,itl_ms,context_len\n1,0,10,2048\n8,2,20,2048\n")
    text = rows.read_text().splitlines()
    header = text[0].split(",")
    cells = text[2].split(",")
    cells[header.index(column)] = value
    rows.write_text("\n".join([text[0], text[1], ",".join(cells)]) + "\n")
    refused("calibration.fit_deployment", ["--scenario", CPU, "--measured", rows, "--output", tmp_path / "fit.json"],
            tmp_path, expect=column)


# --- processes: signals are one line and no worker outlives the command --------------------------

def _children(pid: int) -> set[int]:
    out = set()
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            out |= {int(x) for x in (task / "children").read_text().split()}
        except OSError:
            pass
    return out


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[1].split()[0] != "Z"
    except OSError:
        return False


def _still_alive_after(workers: list, seconds: float = 5.0) -> list:
    """The workers alive ``seconds`` after now, checked every 0.05 s (those all dead sooner end the wait sooner:
    a dead pid stays dead, so this is the same check as sleeping the whole time)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not any(_alive(w) for w in workers):
            return []
        time.sleep(0.05)
    return [w for w in workers if _alive(w)]


def _signal_when_workers_run(argv: list, signum: int, cwd: Path, n_workers: int = 2, timeout: float = 120,
                             times: dict | None = None):
    """Start the command, wait until it has ``n_workers`` children, send ``signum``; (exit code, stderr,
    the workers' pids). ``times`` receives when the workers were seen and when the command ended [s]."""
    # started as a shell starts it: SIGINT at its default, whatever this pytest worker inherited or a library
    # set in it (a command started with SIGINT ignored keeps it ignored, by design: cli.common)
    proc = subprocess.Popen([sys.executable, "-m", *argv], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True, env=env(), cwd=cwd,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    t0, workers = time.monotonic(), set()
    while time.monotonic() - t0 < timeout and proc.poll() is None:
        workers = _children(proc.pid)
        if len(workers) >= n_workers:
            break
        time.sleep(0.05)
    assert len(workers) >= n_workers, f"never saw {n_workers} workers: {proc.poll()}"
    seen = time.monotonic() - t0
    time.sleep(0.3)  # the workers are at work
    proc.send_signal(signum)
    err = proc.communicate(timeout=60)[1]
    if times is not None:
        times.update(seen=seen, ended=time.monotonic() - t0)
    return proc.returncode, err, workers


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_size_with_workers_stops_in_one_line_and_leaves_no_worker(tmp_path, signum):
    # A run whose workers were first seen within a second of its end finished before the signal could land (exit
    # 0): it tests nothing and runs again (at most three times). One whose workers were seen earlier must stop.
    for attempt in range(3):
        cwd = tmp_path / f"run{attempt}"
        (cwd / "out").mkdir(parents=True)
        (cwd / "out" / "keep.md").write_text("old\n")
        times: dict = {}
        rc, err, workers = _signal_when_workers_run(
            ["simulator.size", "--scenario", "sizing-dense-command-a", "--workers", "2", "--output-dir", "out"],
            signum, cwd, times=times)
        if not (rc == 0 and times["ended"] - times["seen"] < 1.0):
            break
    assert rc == 128 + signum, (times, err)
    assert_one_line(err.replace("interrupted", "error: interrupted"), "size")
    assert not _still_alive_after(workers), "workers outlived the command"
    assert sorted(p.name for p in (cwd / "out").iterdir()) == ["keep.md"]


SWEEP = """
name = "hostile-sweep"
[sweep]
base = "sizing-dense-command-a"
models = ["command-a"]
hardware = ["h200"]
tp = [4, 8]
policies = ["plain"]
[traffic.chat]
rate_per_s = 8.0
prompt_len = 512
output_len = 100
[run]
n_requests = 20
search_steps = 0
duration_s = 2.0
max_requests = 60
workers = 1
[output]
formats = ["csv"]
"""


@pytest.mark.slow
def test_sweep_stops_in_one_line_and_leaves_no_worker(tmp_path):
    spec = tmp_path / "sweep.toml"
    # enough work that the signal lands while the workers run (six tasks finish in 0.2 s on a quiet machine)
    spec.write_text(SWEEP.replace('hardware = ["h200"]', 'hardware = ["h200", "b200", "mi300x", "h100-sxm", "a100-80gb", "l40s"]')
                    .replace('policies = ["plain"]', 'policies = ["plain", "dsd", "fixed"]')
                    .replace("n_requests = 20", "n_requests = 400").replace("max_requests = 60", "max_requests = 2000"))
    rc, err, workers = _signal_when_workers_run(
        ["simulator.sweep", str(spec), "--workers", "2", "--output-dir", "out", "--quiet"], signal.SIGTERM, tmp_path)
    assert rc == 143 and "journal.jsonl" in err, err
    assert len([ln for ln in err.splitlines() if ln.strip()]) == 1 and "Traceback" not in err, err
    assert not _still_alive_after(workers), "workers outlived the command"


# --- the sweep journal: checked line by line, never written through a link ------------------------

@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    """A finished two-task sweep: (spec, output folder)."""
    base = tmp_path_factory.mktemp("swept")
    spec = base / "sweep.toml"
    spec.write_text(SWEEP)
    rc, err = run_cli("simulator.sweep", [str(spec), "--output-dir", str(base / "out"), "--quiet"])
    assert rc == 0, err
    return spec, base / "out"


def _bad_line(line: str, case: str) -> bytes:
    rec = json.loads(line)
    if case == "empty-rows":
        rec["rows"] = []
    elif case == "tp-text":
        rec["rows"][0]["tp"] = "abc"
    elif case == "unknown-gpu":
        rec["rows"][0]["hardware"] = "h999"
    elif case == "negative-cost":
        rec["rows"][0]["usd_per_m_output_tokens"] = -5
    elif case == "not-utf8":
        return b'{"key": "\xff\xfe"}\n'
    return (json.dumps(rec) + "\n").encode()


@pytest.mark.parametrize("case", ["empty-rows", "tp-text", "unknown-gpu", "negative-cost", "not-utf8"])
def test_a_bad_journal_line_is_named_and_skipped(swept, tmp_path, case):
    spec, done = swept
    out = tmp_path / "out"
    shutil.copytree(done, out)
    (out / "results.csv").unlink()
    lines = (out / "journal.jsonl").read_text().splitlines(keepends=True)
    (out / "journal.jsonl").write_bytes(_bad_line(lines[0], case) + "".join(lines[1:]).encode())
    rc, err = run_cli("simulator.sweep", [str(spec), "--output-dir", str(out), "--max-tasks", "0"])
    assert rc == 0, err
    assert "Traceback" not in err and "line 1" in err and "skipped 1 bad line" in err, err
    assert "1/2 tasks" in err and not (out / "results.csv").exists()  # the bad task is not in any table


def test_a_planted_journal_symlink_is_refused(swept, tmp_path):
    spec, _ = swept
    out = tmp_path / "out"
    out.mkdir()
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    (out / "journal.jsonl").symlink_to(victim)
    refused("simulator.sweep", [spec, "--output-dir", out], tmp_path, expect="symlink")
    assert victim.read_text() == "precious\n"


def test_a_journal_link_planted_during_the_run_is_not_followed(tmp_path):
    from simulator.sweep.journal import Journal

    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    (tmp_path / "journal.jsonl").symlink_to(victim)
    with pytest.raises(PlannerError, match="symlink"):
        Journal(tmp_path / "journal.jsonl").append({"key": "k", "rows": [{}]})
    assert victim.read_text() == "precious\n"


def test_a_full_disk_during_a_sweep_is_one_line(tmp_path, monkeypatch):
    import simulator.sweep.journal as journal

    def full(fd, data):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    monkeypatch.setattr(journal, "write_all", full)
    spec = tmp_path / "sweep.toml"
    spec.write_text(SWEEP.replace("tp = [4, 8]", "tp = [8]"))
    rc, err = run_cli("simulator.sweep", [str(spec), "--output-dir", str(tmp_path / "out"), "--quiet"])
    assert rc == 2, err
    assert_one_line(err, "full disk")
    assert "No space left" in err and "journal" in err
