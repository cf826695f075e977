"""Timing helpers: median and spread of repeated calls, on CPU (perf_counter) or CUDA (events).

Each call is timed on its own so that a ``before`` hook (an L2 flush on GPU) can run outside the
timed region, and so that ``call(i)`` can rotate through cold weight copies (the CPU "flush").
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Timing:
    """Seconds per call: median, quartiles, coefficient of variation, number of timed calls."""

    median_s: float
    p25_s: float
    p75_s: float
    cv: float
    repeats: int  # calls kept
    min_s: float = 0.0
    rejected: int = 0  # calls dropped as preempted


# A call slower than PREEMPT_FACTOR x the 10th percentile of its point was descheduled (another
# process took the core: on a shared 2-core VM one lost timeslice is 4-16 ms, 100x a small GEMM);
# it is dropped, and the median and spread are taken over the rest.
PREEMPT_FACTOR = 2.0


def clean(samples_s) -> tuple[np.ndarray, int]:
    x = np.sort(np.asarray(samples_s, dtype=float))
    keep = x <= PREEMPT_FACTOR * np.percentile(x, 10)
    return x[keep], int((~keep).sum())


def summarize(samples_s, filter_preempted: bool = True) -> Timing:
    x, rejected = clean(samples_s) if filter_preempted else (np.asarray(samples_s, float), 0)
    mean = float(x.mean())
    return Timing(float(np.median(x)), float(np.percentile(x, 25)), float(np.percentile(x, 75)),
                  float(x.std() / mean) if mean > 0 else 0.0, int(len(x)), float(x.min()), rejected)


def time_calls(call, device: str = "cpu", warmup: int = 2, repeats: int = 10, budget_s: float = 0.5,
               min_repeats: int = 3, before=None, clock=time.perf_counter) -> Timing:
    """Time ``call(i)`` one call at a time; stop after ``repeats`` calls or ``budget_s`` seconds
    (but never before ``min_repeats``). ``before()`` runs untimed before every call. On a CPU ``clock``
    may be ``time.thread_time`` (one torch thread: the time another process holds the core is not counted)."""
    if device == "cuda":
        return _time_cuda(call, warmup, repeats, budget_s, min_repeats, before)
    for i in range(warmup):
        if before:
            before()
        call(i)
    out, spent, i = [], 0.0, warmup
    # stop at `repeats` calls or `budget_s`; when preempted calls leave fewer than `min_repeats`
    # clean ones, go on (up to 4x the calls and the budget)
    while (len(out) < repeats and (len(out) < min_repeats or spent < budget_s)) or (
            len(out) >= min_repeats and len(clean(out)[0]) < min_repeats and len(out) < 4 * repeats
            and spent < 4 * budget_s):
        if before:
            before()
        t0 = clock()
        call(i)
        dt = clock() - t0
        out.append(dt)
        spent += dt
        i += 1
    return summarize(out)


def _time_cuda(call, warmup, repeats, budget_s, min_repeats, before) -> Timing:
    import torch

    for i in range(warmup):
        if before:
            before()
        call(i)
    torch.cuda.synchronize()
    out, spent, i = [], 0.0, warmup
    while len(out) < repeats and (len(out) < min_repeats or spent < budget_s):
        if before:
            before()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        call(i)
        end.record()
        end.synchronize()
        dt = start.elapsed_time(end) / 1e3
        out.append(dt)
        spent += dt
        i += 1
    return summarize(out)


def time_graph_calls(call, copies: int, repeats: int = 10, budget_s: float = 0.5, min_repeats: int = 3) -> Timing:
    """Seconds per call of ``call(0) .. call(copies - 1)`` captured in one CUDA graph and replayed:
    consecutive kernels on rotating cold copies, as a decode pass replays its layers. Nothing but the
    kernels (and their graph launches) lies between the two events: a flush before each timed call
    leaves its dirty lines' write-back, and the host's launch of the call, inside the timed region."""
    import torch

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # lazy initialisation (library handles, workspaces) outside the capture
        for i in range(copies):
            call(i)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for i in range(copies):
            call(i)
    graph.replay()
    torch.cuda.synchronize()
    out, spent = [], 0.0
    while len(out) < repeats and (len(out) < min_repeats or spent < budget_s):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        dt = start.elapsed_time(end) / 1e3
        out.append(dt / copies)
        spent += dt
    del graph
    return summarize(out)


def time_loop(fn, n: int, device: str = "cpu", rounds: int = 7) -> Timing:
    """Per-call seconds of ``fn()`` run ``n`` times back to back (tiny ops: launch overhead)."""
    import torch

    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    for _ in range(max(n // 10, 3)):
        fn()
    sync()
    out = []
    for _ in range(rounds):
        if device == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(n):
                fn()
            end.record()
            end.synchronize()
            out.append(start.elapsed_time(end) / 1e3 / n)
        else:
            t0 = time.perf_counter()
            for _ in range(n):
                fn()
            out.append((time.perf_counter() - t0) / n)
    return summarize(out)


def load_average() -> float:
    """1-minute load average (contention from other processes shows here); 0 where unknown."""
    try:
        import os
        return float(os.getloadavg()[0])
    except (OSError, AttributeError):
        return 0.0


def runnable_others() -> int:
    """Other runnable tasks right now (``procs_running`` of /proc/stat, less this reader); -1 unknown."""
    try:
        with open("/proc/stat") as f:
            for line in f:
                if line.startswith("procs_running"):
                    return int(line.split()[1]) - 1
    except (OSError, ValueError):
        pass
    return -1


class QuietWaiter:
    """Before a CPU measurement, wait (within an overall budget) until no other task is runnable.

    Other processes on a 2-core VM deschedule one of torch's two threads and a parallel region
    then waits a whole timeslice; measuring in quiet moments avoids most of it.
    """

    def __init__(self, budget_s: float, per_point_s: float = 2.0):
        self.budget_s, self.per_point_s, self.waited_s = budget_s, per_point_s, 0.0

    def __call__(self) -> bool:
        """True when quiet (3 reads 5 ms apart); False when the wait gave up."""
        t0 = time.perf_counter()
        quiet = 0
        while quiet < 3:
            n = runnable_others()
            if n < 0:
                return True
            quiet = quiet + 1 if n <= 0 else 0
            spent = time.perf_counter() - t0
            if quiet < 3 and (spent > self.per_point_s or self.waited_s + spent > self.budget_s):
                self.waited_s += spent
                return False
            time.sleep(0.005)
        self.waited_s += time.perf_counter() - t0
        return True
