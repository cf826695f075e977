"""What the dashboard's server reads and writes on its own disk (issue 50): uploads go to a private
directory of this process, and a path typed in a browser opens only a sweep table under the results folder.

No Streamlit here. A browser user is not the server's owner: nothing they type or upload may read a
server file outside the results folder, tell which files exist there, or make the server use a file it
did not write itself.
"""
from __future__ import annotations

import atexit
import os
import re
import shutil
import stat
import tempfile
import threading
from pathlib import Path

from simulator.errors import PlannerError
from simulator.specs.scenario import REPO_ROOT

RESULTS_ENV = "DSD_RESULTS_DIR"
MAX_TABLE_BYTES = 200_000_000  # a sweep table of a few thousand rows is well under 10 MB
TABLE_SUFFIXES = (".parquet", ".csv")

_LOCK = threading.Lock()
_PRIVATE: list[Path] = []  # this process's upload directory, made on first use


# --- uploads ------------------------------------------------------------------------------------

def safe_name(text: str, fallback: str) -> str:
    """The last path component of ``text`` in [A-Za-z0-9._-], without leading dots ('..', '.', '/x/..'
    and '' become ``fallback``): a name that stays inside the folder it is joined to."""
    last = str(text).replace("\\", "/").rstrip("/").split("/")[-1]
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", last).lstrip(".-")[:100]
    return name or fallback


def _usable(folder: Path) -> bool:
    """Still the directory this process made: a real directory (not a link), ours, mode 0700."""
    try:
        st = os.lstat(folder)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid() and stat.S_IMODE(st.st_mode) == 0o700


def private_dir() -> Path:
    """This process's upload directory: made fresh by ``mkdtemp`` (a random name created with O_EXCL,
    mode 0700), removed at exit; made again if it disappeared or changed."""
    with _LOCK:
        if _PRIVATE and _usable(_PRIVATE[0]):
            return _PRIVATE[0]
        folder = Path(tempfile.mkdtemp(prefix="dsd-dashboard-"))
        _PRIVATE[:] = [folder]
        atexit.register(shutil.rmtree, folder, True)
        return folder


def store_upload(data: bytes, *parts: str) -> Path:
    """Write ``data`` to a fresh folder of the private directory as ``parts`` (each reduced to a safe
    name): no file is reused and no link followed, so only what this call wrote is read back."""
    folder = Path(tempfile.mkdtemp(dir=private_dir()))
    names = [safe_name(p, "upload") for p in parts]
    for name in names[:-1]:
        folder = folder / name
        os.mkdir(folder, 0o700)
    path = folder / names[-1]
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    return path


# --- the Fleet-sweep page's path box -------------------------------------------------------------

def results_dir() -> Path:
    """The folder a typed path may open: $DSD_RESULTS_DIR, else the project folder, where
    ``python -m simulator.sweep`` writes NAME-out/ when run from it."""
    return Path(os.environ.get(RESULTS_ENV) or REPO_ROOT).resolve()


def _refused(typed: str, root: Path) -> PlannerError:
    # one message for missing, outside, a special file and a folder without a table: it tells nothing
    # about what exists on the server
    return PlannerError(f"'{typed}': no sweep table (.parquet or .csv, or a folder holding results.parquet /"
                        f" results.csv) under the results folder {root}. Upload the file instead, or start the"
                        f" dashboard with {RESULTS_ENV} set to the folder that holds it")


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def read_results_table(typed: str) -> tuple[str, bytes]:
    """(file name, bytes) of the sweep table a browser named by a path under :func:`results_dir`.

    The path is checked by its text before the disk is touched (nothing outside the folder is probed),
    then resolved (a link inside may not lead out); a folder stands for its results.parquet / .csv;
    only a regular file is read (opened without blocking, so a FIFO cannot hang the server), at most
    MAX_TABLE_BYTES."""
    root = results_dir()
    text = typed.strip()
    if not text or "\x00" in text:
        raise _refused(typed, root)
    lexical = os.path.normpath(os.path.join(root, text))  # "~" is not expanded: a name like any other
    if not _inside(lexical, str(root)):
        raise _refused(typed, root)
    real = os.path.realpath(lexical)
    if not _inside(real, str(root)):
        raise _refused(typed, root)
    if os.path.isdir(real):
        real = next((os.path.join(real, f"results{s}") for s in TABLE_SUFFIXES
                     if os.path.isfile(os.path.join(real, f"results{s}"))), "")
    if not real.endswith(TABLE_SUFFIXES):
        raise _refused(typed, root)
    try:
        fd = os.open(real, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
    except OSError:
        raise _refused(typed, root) from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise _refused(typed, root)
        if st.st_size > MAX_TABLE_BYTES:
            raise PlannerError(f"'{typed}': {st.st_size / 1e6:.0f} MB is larger than a sweep table may be here"
                               f" (at most {MAX_TABLE_BYTES / 1e6:.0f} MB)")
        data = f.read(MAX_TABLE_BYTES + 1)
    if len(data) > MAX_TABLE_BYTES:
        raise PlannerError(f"'{typed}': larger than a sweep table may be here (at most {MAX_TABLE_BYTES / 1e6:.0f} MB)")
    return os.path.basename(real), data
