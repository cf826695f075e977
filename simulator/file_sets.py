"""Publishing a set of output files all or nothing (a sizing run's reports, a sweep's tables).

:func:`write_files_atomically` publishes the set by one exchange of the output directory with a
complete copy of it (``renameat2(RENAME_EXCHANGE)``): a reader, and a signal at any instant, finds the
old set or the new set, never a mix. Where a directory cannot be exchanged (it holds sub-directories,
it is the working directory, a mount point, its parent is read-only) the files are renamed one by one
with SIGINT / SIGTERM / SIGHUP held off until the last rename. Stale members of the set (``drop``:
a report of a format not written this time) leave in the same step. Staging left by a killed run is
removed by the next run that writes there. One file is written by :func:`simulator.files.write_atomically`.
"""
from __future__ import annotations

import ctypes
import errno
import os
import shutil
import signal
import stat
import tempfile
import threading
from contextlib import contextmanager
from pathlib import Path

from simulator.errors import PlannerError
from simulator.files import write_atomically

STAGING = ".staging-"  # in the names of staging directories: '.<dir>.staging-<pid>-*' beside, '.staging-<pid>-*' inside
_HELD_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
AT_FDCWD, RENAME_EXCHANGE = -100, 2


@contextmanager
def signals_held():
    """SIGINT, SIGTERM and SIGHUP wait until the block is over, then act as they would have (main thread
    only). Deferred by a Python handler that notes them, not by the signal mask: the kernel hands a
    process's signal to any thread that does not block it (numpy's, a renderer's)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    pending: list[int] = []
    old = {}
    for signum in _HELD_SIGNALS:
        handler = signal.getsignal(signum)
        if handler in (signal.SIG_IGN, None):
            continue
        old[signum] = signal.signal(signum, lambda n, frame: pending.append(n))
    try:
        yield
    finally:
        for signum, handler in old.items():
            signal.signal(signum, handler)
        for signum in dict.fromkeys(pending):
            signal.raise_signal(signum)


def exchange_paths(a: Path, b: Path) -> None:
    """Swap two directory entries in one step (Linux renameat2 RENAME_EXCHANGE); OSError where the
    system or the filesystem cannot."""
    fn = getattr(ctypes.CDLL(None, use_errno=True), "renameat2", None)
    if fn is None:
        raise OSError(errno.ENOSYS, "renameat2 is not available")
    if fn(AT_FDCWD, os.fsencode(a), AT_FDCWD, os.fsencode(b), RENAME_EXCHANGE) != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_staging_debris(out: Path) -> None:
    """Remove the staging directories a killed run left beside and inside ``out`` (those of a process
    still running are left alone: it may be publishing now)."""
    for folder, prefix in ((out.parent, f".{out.name}{STAGING}"), (out, STAGING)):
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        for e in entries:
            if not e.name.startswith(prefix) or not e.is_dir(follow_symlinks=False):
                continue
            pid = e.name[len(prefix):].split("-")[0]
            if pid.isdigit() and int(pid) != os.getpid() and _pid_alive(int(pid)):
                continue
            shutil.rmtree(e.path, ignore_errors=True)


class _NotExchangeable(Exception):
    pass


def _staged_mode(target: Path) -> int:
    try:
        return stat.S_IMODE(os.stat(target).st_mode)
    except FileNotFoundError:
        return 0o644


def _fill(folder: Path, out: Path, files: dict) -> None:
    for name, content in files.items():
        tmp = folder / name
        tmp.write_bytes(content if isinstance(content, bytes) else content.encode())
        os.chmod(tmp, _staged_mode(out / name))


def _publish_by_exchange(out: Path, files: dict, drop: frozenset = frozenset()) -> None:
    """A complete copy of ``out`` (the new files, hard links to everything else but ``drop``) swapped
    with it in one step; _NotExchangeable (nothing changed) where that cannot be done."""
    if out == Path.cwd().resolve() or os.path.ismount(out) or not os.access(out.parent, os.W_OK):
        raise _NotExchangeable
    try:
        staging = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}{STAGING}{os.getpid()}-"))
    except OSError:
        raise _NotExchangeable from None
    swapped = False
    try:
        st = os.stat(out)
        os.chmod(staging, stat.S_IMODE(st.st_mode))
        if os.geteuid() == 0:
            os.chown(staging, st.st_uid, st.st_gid)
        _fill(staging, out, files)
        for e in os.scandir(out):
            if e.name in files or e.name in drop or e.name.startswith(STAGING):
                continue
            if e.is_dir(follow_symlinks=False):
                raise _NotExchangeable  # a folder cannot be hard-linked into the copy
            os.link(e.path, staging / e.name, follow_symlinks=False)
        exchange_paths(staging, out)
        swapped = True
    except OSError as err:
        if err.errno in (errno.ENOSPC, errno.EDQUOT, errno.EROFS):
            raise
        raise _NotExchangeable from None
    finally:
        if swapped:  # staging now holds the old set: keep what appeared in out meanwhile, drop the rest
            for e in os.scandir(staging):
                if e.name not in drop and not os.path.lexists(out / e.name) and not e.is_dir(follow_symlinks=False):
                    try:
                        os.link(e.path, out / e.name, follow_symlinks=False)
                    except OSError:
                        pass
        shutil.rmtree(staging, ignore_errors=True)


def _publish_by_renames(out: Path, files: dict, drop: frozenset = frozenset()) -> None:
    """Every file staged inside ``out``, then renamed over its target, and ``drop`` removed, with
    signals held off."""
    staging = Path(tempfile.mkdtemp(dir=out, prefix=f"{STAGING}{os.getpid()}-"))
    try:
        _fill(staging, out, files)
        with signals_held():
            for name in files:
                os.replace(staging / name, out / name)
            for name in drop:
                try:
                    os.unlink(out / name)
                except FileNotFoundError:
                    pass
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def write_files_atomically(out_dir: str | Path, files: dict[str, str | bytes], flag: str = "--output-dir",
                           drop=()) -> list[Path]:
    """Publish several files into ``out_dir`` all or nothing (module docstring): a reader, a failure or a
    signal at any instant leaves the old set or the new set. Replaced files keep their mode; new ones
    get 0644. A name that is a symlink or a device in ``out_dir`` is written through after the set.

    ``drop``: names of the old set that the new one no longer holds (the caller's own stale outputs),
    gone when the new set appears; only regular files are removed, a link or a device is left."""
    out = Path(out_dir)
    for name in [*files, *drop]:
        if not name or Path(name).name != name or name.startswith(STAGING):
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
    real = Path(os.path.realpath(out))
    remove_staging_debris(real)
    linked = {n: c for n, c in files.items() if os.path.lexists(real / n) and not stat.S_ISREG(os.lstat(real / n).st_mode)}
    staged = {n: c for n, c in files.items() if n not in linked}
    stale = frozenset(n for n in drop if n not in files and os.path.lexists(real / n)
                      and stat.S_ISREG(os.lstat(real / n).st_mode))
    try:
        try:
            _publish_by_exchange(real, staged, stale)
        except _NotExchangeable:
            _publish_by_renames(real, staged, stale)
    except OSError as err:
        raise PlannerError(f"{flag} {out}: cannot write the outputs ({err.strerror or err}); nothing was replaced") from None
    for name, content in linked.items():
        write_atomically(out / name, content, flag)
    return [out / name for name in files]
