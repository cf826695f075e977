"""Worker processes that die with the command that started them (ground floor: imports nothing of ours).

:func:`worker_pool` is a ProcessPoolExecutor whose workers ignore SIGINT (a Ctrl-C reaches the whole
process group: the command answers it, not each worker with a traceback), take SIGTERM's default
action, and get SIGKILL from the kernel when the thread that started them ends (prctl
PR_SET_PDEATHSIG: even a command killed with SIGKILL leaves no worker behind). When the block ends
with an exception (a signal turned into one by the CLI, an error) the workers are killed at once
rather than waited for.
"""
from __future__ import annotations

import ctypes
import os
import signal
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager

PR_SET_PDEATHSIG = 1


def worker_init(parent_pid: int) -> None:
    """Run in each worker as it starts (see the module docstring)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGHUP, signal.SIG_DFL)
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: the pool is still killed on the way out
        pass
    if os.getppid() != parent_pid:  # the parent died before the line above took effect
        os._exit(1)


def kill_workers(pool: ProcessPoolExecutor) -> None:
    """SIGKILL every worker of ``pool`` and drop its queued work (the executor has no public way)."""
    for proc in list((getattr(pool, "_processes", None) or {}).values()):
        try:
            proc.kill()
        except (OSError, ValueError, AttributeError):
            pass
    pool.shutdown(wait=False, cancel_futures=True)
    for proc in list((getattr(pool, "_processes", None) or {}).values()):
        try:
            proc.join(5)
        except (OSError, ValueError, AttributeError, AssertionError):
            pass


@contextmanager
def worker_pool(max_workers: int):
    """A process pool whose workers never outlive the block's failure or the command (module docstring)."""
    pool = ProcessPoolExecutor(max_workers=max_workers, initializer=worker_init, initargs=(os.getpid(),))
    try:
        yield pool
    except BaseException:
        kill_workers(pool)
        raise
    else:
        pool.shutdown(wait=True)
