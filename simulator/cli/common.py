"""What every command line shares: a one-line argparse, one error boundary, atomic writes.

Bad input is a :class:`PlannerError`: the boundary prints it as one line on stderr and exits 2;
outputs are written beside their target and renamed into place, so a failure never leaves a
half-written or half-replaced file (or set of files) behind.
"""
from __future__ import annotations

import argparse
import os
import shutil
import stat
import sys
import tempfile
from pathlib import Path
from typing import Callable

from simulator.errors import PlannerError


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a usage error is one line on stderr and exit code 2."""

    def error(self, message):
        self.exit(2, f"error: {message} (see --help)\n")


def run_cli(body: Callable[[], int | None]) -> int:
    """Run a command's body: PlannerError -> one line on stderr, exit 2; a closed pipe is not an error."""
    try:
        return body() or 0
    except PlannerError as err:
        print(f"error: {' '.join(str(err).split())}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 0


def _check_target(target: Path, flag: str) -> None:
    if target.is_dir():
        raise PlannerError(f"{flag} {target}: is a directory; give a file name")
    parent = target.parent if str(target.parent) else Path(".")
    if not parent.is_dir():
        raise PlannerError(f"{flag} {target}: directory {parent} does not exist")
    if not os.access(parent, os.W_OK):
        raise PlannerError(f"{flag} {target}: directory {parent} is not writable")


def write_atomically(path: str | Path, text: str, flag: str = "--output") -> None:
    """Write beside the target, then rename: a failure leaves the old file intact; its mode is kept."""
    target = Path(path)
    _check_target(target, flag)
    mode = stat.S_IMODE(target.stat().st_mode) if target.exists() else 0o644
    fd, tmp = tempfile.mkstemp(dir=target.parent if str(target.parent) else ".", prefix=f".{target.name}.")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_files_atomically(out_dir: str | Path, files: dict[str, str | bytes], flag: str = "--output-dir") -> list[Path]:
    """Write several files into ``out_dir`` all or nothing: every file is rendered into a temporary
    directory first, then each is renamed over its target (renames do not fail half-way on one filesystem)."""
    out = Path(out_dir)
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
    staging = Path(tempfile.mkdtemp(dir=out, prefix=".staging-"))
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
    finally:
        shutil.rmtree(staging, ignore_errors=True)
