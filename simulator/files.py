"""Writing outputs so that a failure never leaves a half-written or half-replaced file: each file is
written beside its target (a set of files into a staging directory) and renamed into place; a
replaced file keeps its mode. The ground floor of the package: CLIs, sweeps and calibration share it.
"""
from __future__ import annotations

import json
import os
import shutil
import stat
import tempfile
import tomllib
from pathlib import Path

from simulator.errors import PlannerError


def read_json_file(path: str | Path, what: str):
    """A JSON file's content; PlannerError naming the file and ``what`` it should be when it is a
    directory, missing, unreadable or not JSON."""
    path = Path(path)
    if path.is_dir():
        raise PlannerError(f"{path}: is a directory; give the {what} file")
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise PlannerError(f"{path}: {what} not found") from None
    except (ValueError, UnicodeDecodeError, RecursionError) as err:
        raise PlannerError(f"{path}: {what} is not valid JSON ({str(err)[:120]})") from None
    except OSError as err:
        raise PlannerError(f"{path}: cannot read the {what} ({err.strerror or err})") from None


def read_toml_file(path: str | Path, what: str, missing_hint: str = "") -> dict:
    """A TOML file's tables; PlannerError naming the file and ``what`` it should be when it is a
    directory, missing (``missing_hint`` appended), unreadable, not text or not TOML."""
    path = Path(path)
    if path.is_dir():
        raise PlannerError(f"{path}: is a directory; give the {what} TOML file")
    try:
        return tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise PlannerError(f"{path}: {what} file not found{missing_hint}") from None
    except tomllib.TOMLDecodeError as err:
        raise PlannerError(f"{path}: malformed TOML: {err}") from None
    except UnicodeDecodeError:
        raise PlannerError(f"{path}: not a text file; give the {what} TOML file") from None
    except OSError as err:
        raise PlannerError(f"{path}: cannot read the {what} file ({err.strerror or err})") from None


def _check_target(target: Path, flag: str) -> None:
    if not target.name:
        raise PlannerError(f"{flag} '{target}': give a file name")
    if target.is_dir():
        raise PlannerError(f"{flag} {target}: is a directory; give a file name")
    parent = target.parent if str(target.parent) else Path(".")
    if not parent.is_dir():
        raise PlannerError(f"{flag} {target}: directory {parent} does not exist")
    if not os.access(parent, os.W_OK):
        raise PlannerError(f"{flag} {target}: directory {parent} is not writable")
    _probe_write(parent, target, flag)


def write_atomically(path: str | Path, text: str, flag: str = "--output") -> None:
    """Write beside the target, then rename: a failure leaves the old file intact; its mode is kept."""
    target = Path(path)
    _check_target(target, flag)
    mode = stat.S_IMODE(target.stat().st_mode) if target.exists() else 0o644
    try:
        fd, tmp = tempfile.mkstemp(dir=target.parent if str(target.parent) else ".", prefix=f".{target.name}.")
    except OSError as err:
        raise PlannerError(f"{flag} {target}: cannot write there ({err.strerror or err})") from None
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except OSError as err:
        Path(tmp).unlink(missing_ok=True)
        raise PlannerError(f"{flag} {target}: cannot write it ({err.strerror or err}); nothing was changed") from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def check_output_dir(out_dir: str | Path, flag: str = "--output-dir", names=()) -> Path:
    """Refuse an output directory that cannot be written before any work is done (creates nothing).

    ``names``: the files that will be written into it; one that exists there as a directory is refused too."""
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise PlannerError(f"{flag} {out}: exists and is not a directory")
    for name in names:
        if (out / name).is_dir():
            raise PlannerError(f"{flag} {out}: {name} is a directory; remove it or choose another directory")
    probe = out
    while not probe.exists():
        if probe.parent == probe:
            break
        probe = probe.parent
    if probe.exists() and (not probe.is_dir() or not os.access(probe, os.W_OK)):
        raise PlannerError(f"{flag} {out}: {probe} is not a writable directory")
    _probe_write(probe, out, flag)
    return out


def _probe_write(folder: Path, target: Path, flag: str) -> None:
    """Create and drop a temporary file in ``folder``: permission bits do not tell for root, /proc or
    a read-only mount, trying does (nothing is left behind)."""
    try:
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as err:
        raise PlannerError(f"{flag} {target}: cannot write in {folder} ({err.strerror or err})") from None


def check_output_file(path: str | Path, flag: str = "--output") -> Path:
    """Refuse an output file that cannot be written before any work is done."""
    target = Path(path)
    _check_target(target, flag)
    return target


def write_files_atomically(out_dir: str | Path, files: dict[str, str | bytes], flag: str = "--output-dir") -> list[Path]:
    """Write several files into ``out_dir`` all or nothing: every file is rendered into a temporary
    directory first, then each is renamed over its target (renames do not fail half-way on one filesystem).
    Replaced files keep their mode; new ones get 0644."""
    out = Path(out_dir)
    for name in files:
        if not name or Path(name).name != name:
            raise PlannerError(f"{flag} {out}: bad output file name {name!r}")
    if out.exists() and not out.is_dir():
        raise PlannerError(f"{flag} {out}: exists and is not a directory")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise PlannerError(f"{flag} {out}: cannot create it ({err.strerror})") from None
    if not os.access(out, os.W_OK):
        raise PlannerError(f"{flag} {out}: directory is not writable")
    for name in files:
        if (out / name).is_dir():
            raise PlannerError(f"{flag} {out}: {name} is a directory; remove it or choose another directory")
    try:
        staging = Path(tempfile.mkdtemp(dir=out, prefix=".staging-"))
    except OSError as err:
        raise PlannerError(f"{flag} {out}: cannot write there ({err.strerror or err})") from None
    try:
        for name, content in files.items():
            target = out / name
            mode = stat.S_IMODE(target.stat().st_mode) if target.exists() else 0o644
            tmp = staging / name
            tmp.write_bytes(content if isinstance(content, bytes) else content.encode())
            os.chmod(tmp, mode)
        written = []
        for name in files:
            os.replace(staging / name, out / name)
            written.append(out / name)
        return written
    except OSError as err:
        raise PlannerError(f"{flag} {out}: cannot write the outputs ({err.strerror or err}); nothing was replaced") from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)
