"""The process's memory allocator, tuned for the planner's arrays (ground floor: imports nothing of ours).

A (B, K, L) grid builds a few hundred temporaries of 0.1-1 MB each and frees them all when it returns.
glibc's malloc gives the top of the heap back to the kernel as soon as more than its trim threshold is
free there, and serves blocks above its mmap threshold with fresh mappings, so every grid faults its
whole working set (tens of MB, thousands of 4 KB pages) back in: on the 2-core dev box that was half of
a 512 x 9 x 16 grid's time (11.1 -> 6.2 ms, benchmarks/bench_context_grid.py). Keeping up to
``TOP_PAD_BYTES`` of freed heap for the next grid, and serving blocks up to ``MMAP_THRESHOLD_BYTES``
from the heap, removes those faults; the cost is that much resident memory kept after a grid.

Applied by the planner's own programs when they start (the CLI commands, the dashboard, a sweep's workers), on
glibc only (elsewhere nothing is changed); importing ``simulator`` as a library leaves the importing process's
allocator alone (call :func:`keep_freed_memory` to opt in). Set ``DSD_PLANNER_MALLOC=default`` in the environment
to leave the allocator as it is.
"""
from __future__ import annotations

import os

# mallopt parameters (glibc malloc.h)
M_TOP_PAD = -2
M_MMAP_THRESHOLD = -3

TOP_PAD_BYTES = 64 << 20  # freed heap kept for reuse (resident memory the process holds on to)
MMAP_THRESHOLD_BYTES = 32 << 20  # glibc's own ceiling for its dynamic threshold on 64-bit systems

_applied: bool | None = None


def _glibc() -> bool:
    """Whether this process runs on glibc (os.confstr: no scan of the executable, as platform.libc_ver does)."""
    try:
        return (os.confstr("CS_GNU_LIBC_VERSION") or "").startswith("glibc")
    except (AttributeError, ValueError, OSError):
        return False


def keep_freed_memory() -> bool:
    """Tune glibc's malloc as the module docstring says; True when applied (now or before)."""
    global _applied
    if _applied is not None:
        return _applied
    _applied = False
    if os.environ.get("DSD_PLANNER_MALLOC", "").lower() == "default" or not _glibc():
        return False
    import ctypes  # noqa: PLC0415 (only where it is used: glibc)
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    # both set explicitly: setting one freezes glibc's dynamic thresholds at whatever they are now
    _applied = bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)) and bool(mallopt(M_TOP_PAD, TOP_PAD_BYTES))
    return _applied
