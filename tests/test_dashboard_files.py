"""Issue 50, the dashboard's part: it listens on this machine only, a typed path opens nothing outside the
results folder (and tells nothing about what exists there), uploads live in a private directory of the
process, and a hand-edited deployment fit cannot print a +-0% band or stop the page.

Every special file here is made in a temporary directory (a FIFO, symlinks); the machine's own /dev
nodes are only named, never opened for writing.
"""
from __future__ import annotations

import hashlib
import io
import json
import os
import stat
import sys
import tempfile
import time
import tomllib
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from dashboard import server_files as F  # noqa: E402
from dashboard import uploads as U  # noqa: E402
from simulator.errors import PlannerError  # noqa: E402

PAGE = str(ROOT / "pages" / "1_Fleet_sweep.py")
TABLE = pd.DataFrame({"model": ["m"], "hardware": ["h100-sxm"], "tp": [1], "policy": ["dsd"],
                      "usd_per_m_output_tokens": [0.5], "tpot_p50_s": [0.02], "meets_target": [True]})


# --- the server's own config ----------------------------------------------------------------------
def test_config_binds_to_localhost_headless_without_usage_stats():
    cfg = tomllib.loads((ROOT / ".streamlit" / "config.toml").read_text())
    assert cfg["server"]["address"] == "127.0.0.1"
    assert cfg["server"]["headless"] is True
    assert cfg["browser"]["gatherUsageStats"] is False


# --- the Fleet-sweep page's path box ---------------------------------------------------------------
@pytest.fixture
def results(tmp_path, monkeypatch):
    """A results folder holding one sweep output folder, beside a secret file outside it."""
    folder = tmp_path / "results"
    (folder / "sweep-out").mkdir(parents=True)
    TABLE.to_csv(folder / "sweep-out" / "results.csv", index=False)
    (tmp_path / "secret.csv").write_text(TABLE.to_csv(index=False))
    monkeypatch.setenv(F.RESULTS_ENV, str(folder))
    return folder


def test_a_table_under_the_results_folder_opens(results):
    for typed in ("sweep-out", "sweep-out/results.csv", str(results / "sweep-out"), " sweep-out/ "):
        name, data = F.read_results_table(typed)
        assert name == "results.csv" and data == (results / "sweep-out" / "results.csv").read_bytes()


def test_paths_outside_special_files_and_folders_get_one_message(results, tmp_path):
    os.mkfifo(results / "pipe.csv")
    (results / "empty-dir").mkdir()
    (results / "link.csv").symlink_to(tmp_path / "secret.csv")      # a link inside may not lead out
    (results / "zero.csv").symlink_to("/dev/zero")                  # named, never opened
    cases = ["/dev/zero", "/etc/passwd", "../secret.csv", str(tmp_path / "secret.csv"), "no-such.csv",
             "pipe.csv", "empty-dir", "link.csv", "zero.csv", "sweep-out/../../secret.csv", "~/x.csv", ""]
    messages = set()
    for typed in cases:
        start = time.monotonic()
        with pytest.raises(PlannerError) as err:
            F.read_results_table(typed)
        assert time.monotonic() - start < 2  # a FIFO does not hang the server thread
        messages.add(str(err.value).replace(f"'{typed}'", "'X'"))
    # missing, outside, special and folder read alike: nothing tells what exists on the server
    assert len(messages) == 1, messages
    (msg,) = messages
    assert f"under the results folder {results}" in msg and F.RESULTS_ENV in msg


def test_nothing_outside_the_folder_is_probed(results, monkeypatch):
    """A path whose text leaves the folder is refused before any file-system call."""
    touched = []
    for name in ("stat", "lstat", "open"):
        real = getattr(os, name)
        monkeypatch.setattr(os, name, lambda p, *a, _r=real, **k: (touched.append(str(p)), _r(p, *a, **k))[1])
    monkeypatch.setattr(os.path, "realpath", lambda p, *a, **k: touched.append(p) or p)
    for typed in ("/etc/shadow", "../../etc/shadow", "/dev/zero"):
        with pytest.raises(PlannerError):
            F.read_results_table(typed)
    assert not [t for t in touched if not str(t).startswith(str(results))], touched  # the folder itself only


def test_the_page_refuses_dev_zero_and_opens_the_folder(results):
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(PAGE, default_timeout=30)
    at.run()
    for typed in ("/dev/zero", str(results), "../secret.csv"):
        at.text_input(key="sweep_path").input(typed).run()
        assert not at.exception
        assert [e.value for e in at.error] and "under the results folder" in at.error[0].value
        assert len(at.error) == 1
    at.text_input(key="sweep_path").input("sweep-out").run()
    assert not at.exception and not at.error
    assert "**1** rows" in at.markdown[-1].value


def test_a_table_without_latency_columns_is_one_error(results):
    from streamlit.testing.v1 import AppTest

    TABLE.drop(columns=["tpot_p50_s"]).to_csv(results / "sweep-out" / "results.csv", index=False)
    at = AppTest.from_file(PAGE, default_timeout=30)
    at.run()
    at.text_input(key="sweep_path").input("sweep-out").run()
    assert not at.exception and len(at.error) == 1 and "latency columns" in at.error[0].value


# --- uploads ------------------------------------------------------------------------------------------
def _config(name_or_path: str) -> bytes:
    cfg = json.loads((ROOT / "simulator" / "data" / "models" / "qwen3-8b.json").read_text())
    cfg["_name_or_path"] = name_or_path
    return json.dumps(cfg).encode()


def test_uploads_live_in_a_private_directory_of_this_process():
    path = Path(U.uploaded_model(_config("me/my-qwen"), "config.json"))
    private = F.private_dir()
    assert path.is_relative_to(private) and path.parent.name == "my-qwen" and path.name == "config.json"
    st = os.lstat(private)
    assert stat.S_IMODE(st.st_mode) == 0o700 and st.st_uid == os.geteuid() and stat.S_ISDIR(st.st_mode)
    assert private.parent == Path(tempfile.gettempdir()) and private.name.startswith("dsd-dashboard-")
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600


@pytest.mark.parametrize("name_or_path,stem", [("..", "uploaded"), ("../../etc", "etc"), ("/", "uploaded"),
                                               ("a/b/../..", "uploaded"), ("..\\..\\x y", "x-y")])
def test_a_hostile_model_name_stays_inside_the_upload_folder(name_or_path, stem):
    path = Path(U.uploaded_model(_config(name_or_path), "config.json"))
    assert path.resolve().is_relative_to(F.private_dir().resolve())
    assert path.parent.name == stem and path.parent.parent.parent == F.private_dir()


def test_a_file_or_symlink_planted_at_the_old_shared_path_changes_nothing(tmp_path):
    """The old store was TMP/dsd-dashboard-uploads/<sha256[:12]>/<name>/config.json: a planted file there
    was used instead of the upload, and a planted symlink was written through."""
    data = _config("me/planted")
    digest = hashlib.sha256(data).hexdigest()[:12]
    shared = Path(tempfile.gettempdir()) / "dsd-dashboard-uploads"
    target = tmp_path / "victim.txt"
    target.write_text("keep me")
    made = []
    try:
        for folder_name, kind in (("planted", "file"), ("planted-link", "link")):
            folder = shared / digest / folder_name
            folder.mkdir(parents=True, exist_ok=True)
            made.append(folder)
            planted = folder / "config.json"
            if planted.exists() or planted.is_symlink():
                planted.unlink()
            if kind == "file":
                planted.write_text(json.dumps({"model_type": "llama", "hidden_size": 1}))
            else:
                planted.symlink_to(target)
        for name in ("me/planted", "me/planted-link"):
            d = _config(name)
            path = Path(U.uploaded_model(d, "config.json"))
            assert path.read_bytes() == d  # the upload itself, not the planted file
            assert not path.is_relative_to(shared)
        assert target.read_text() == "keep me"
        at_path = F.store_upload(b"x", "planted", "config.json")
        assert at_path.read_bytes() == b"x" and not at_path.is_symlink()
    finally:
        for folder in made:
            for f in folder.iterdir():
                f.unlink()
            folder.rmdir()
        for folder in (shared / digest, shared):  # what this test made, if nothing else is there
            try:
                folder.rmdir()
            except OSError:
                pass


def test_a_changed_private_directory_is_replaced():
    first = F.private_dir()
    os.chmod(first, 0o755)  # someone opened it up: not used any more
    try:
        second = F.private_dir()
        assert second != first and stat.S_IMODE(os.lstat(second).st_mode) == 0o700
    finally:
        os.chmod(first, 0o700)


# --- hand-edited deployment fits --------------------------------------------------------------------
def _fit(tmp_path) -> dict:
    from calibration.fit_deployment import main as fit_main

    (tmp_path / "runs.csv").write_text("batch_size,k,itl_ms\n8,0,25.0\n8,3,35.0\n")
    out = tmp_path / "fit.json"
    assert fit_main(["--scenario", "default", "--measured", str(tmp_path / "runs.csv"), "--output", str(out)]) == 0
    return json.loads(out.read_text())


@pytest.mark.parametrize("edit,reason", [
    (lambda d: d["uncertainty"].update(step_time_rel="abc"), "uncertainty.step_time_rel is 'abc'"),
    (lambda d: d.pop("uncertainty"), "uncertainty.step_time_rel is None"),
    (lambda d: d.update(uncertainty="abc"), "uncertainty.step_time_rel is None"),
    (lambda d: d["uncertainty"].update(goodput_rel=0), "uncertainty.goodput_rel is 0"),
    (lambda d: d["uncertainty"].update(step_time_rel=float("nan")), "uncertainty.step_time_rel is nan"),
    (lambda d: d["terms"]["kernel_scale"].update(interval=[1.9, 0.6]), "terms.kernel_scale.interval [1.9, 0.6]"),
    (lambda d: d.update(provenance="by hand"), "provenance must be a table, got str"),
    (lambda d: d.update(provenance=[1, 2]), "provenance must be a table, got list"),
])
def test_a_hand_edited_fit_is_refused_at_its_control(tmp_path, edit, reason):
    from streamlit.testing.v1 import AppTest

    doc = _fit(tmp_path)
    edit(doc)
    data = json.dumps(doc).encode()
    with pytest.raises(PlannerError, match=reason.replace("[", r"\[").replace("]", r"\]")):
        U.uploaded_deployment_fit(data, "edited.json")
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60)
    at.run()
    at.sidebar.file_uploader(key="deployment_fit").set_value(("edited.json", data, "application/json")).run()
    assert not at.exception
    errors = [e.value for e in at.sidebar.error]
    assert any(e.startswith("Deployment fit rejected: edited.json:") and reason in e for e in errors), errors
    assert not any("Internal error" in e.value for e in at.error)
    text = next(c.value for c in at.caption if "Prediction rests on" in c.value)
    assert "+-0%" not in text and "deployment fit" not in text


def test_a_real_fit_still_loads(tmp_path):
    path, fit = U.uploaded_deployment_fit(json.dumps(_fit(tmp_path)).encode(), "mine.json")
    assert Path(path).name == "mine.json" and fit.step_time_rel > 0 and Path(path).is_relative_to(F.private_dir())


def test_a_hostile_fit_name_stays_inside():
    with pytest.raises(PlannerError) as err:
        U.uploaded_deployment_fit(b"{}", "../../../etc/passwd")
    assert "passwd" in str(err.value) and "/etc" not in str(err.value)
    assert not any(F.private_dir().parent.glob("passwd"))


def test_sweep_upload_bytes_read_in_memory():
    from dashboard import sweep_view as V

    df = V.read_table(TABLE.to_csv(index=False).encode(), "results.csv")
    assert len(df) == 1
    assert len(V.read_table(io.BytesIO(TABLE.to_csv(index=False).encode()), "x.csv")) == 1


def _listening(port: int) -> set[str]:
    """Local addresses listening on ``port`` (IPv4 and IPv6, from /proc/net/tcp*)."""
    out = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            local, state = line.split()[1], line.split()[3]
            addr, hexport = local.split(":")
            if state == "0A" and int(hexport, 16) == port:
                out.add(addr)
    return out


@pytest.mark.slow
def test_streamlit_run_without_flags_listens_on_localhost_only(tmp_path):
    """`streamlit run app.py` with no --server.address: the project's .streamlit/config.toml binds it."""
    import subprocess

    sys.path.insert(0, str(ROOT / "tests"))
    from test_browser import _free_port, _wait_healthy

    if not Path("/proc/net/tcp").exists():
        pytest.skip("needs Linux /proc/net/tcp")
    port = _free_port()
    with open(tmp_path / "server.log", "w") as log:
        proc = subprocess.Popen([sys.executable, "-m", "streamlit", "run", "app.py", "--server.port", str(port),
                                 "--server.fileWatcherType", "none"], cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    try:
        _wait_healthy(f"http://127.0.0.1:{port}/_stcore/health", proc)
        assert _listening(port) == {"0100007F"}  # 127.0.0.1 only: no 0.0.0.0, no ::
    finally:
        proc.terminate()
        proc.wait(timeout=20)
    log_text = (tmp_path / "server.log").read_text()
    assert "Network URL" not in log_text and "External URL" not in log_text
