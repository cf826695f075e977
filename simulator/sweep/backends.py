"""Where tasks run: in this process, a local process pool, or a Ray cluster; results stream back.

Every backend calls ``on_result(record)`` in the main process as each task finishes (in completion
order), so the journal and the progress line advance while the sweep runs. Ray is imported only
when asked for.
"""
from __future__ import annotations

import sys
import time
from concurrent.futures import FIRST_COMPLETED, wait
from typing import Callable

from simulator.errors import PlannerError
from simulator.sweep.task import run_task
from simulator.workers import worker_pool

RAY_MISSING = "--ray-address needs Ray, which is not installed: pip install 'dsd-planner[cluster]'"


def run_inline(tasks: list, on_result: Callable[[dict], None]) -> None:
    for t in tasks:
        on_result(run_task(t))


def run_local(tasks: list, workers: int, on_result: Callable[[dict], None]) -> None:
    """A process pool of ``workers``; at most 2 x workers tasks in flight (memory stays flat on big sweeps)."""
    if workers <= 1 or len(tasks) <= 1:
        return run_inline(tasks, on_result)
    todo = iter(tasks)
    with worker_pool(min(workers, len(tasks))) as pool:
        pending = set()
        try:
            for t in todo:
                pending.add(pool.submit(run_task, t))
                if len(pending) >= 2 * workers:
                    break
            while pending:
                done, pending = wait(pending, return_when=FIRST_COMPLETED)
                for fut in done:
                    on_result(fut.result())
                    nxt = next(todo, None)
                    if nxt is not None:
                        pending.add(pool.submit(run_task, nxt))
        except BaseException:
            for fut in pending:
                fut.cancel()
            raise


def import_ray():
    try:
        import ray  # noqa: PLC0415  (optional extra: imported only for --ray-address)
    except ImportError:
        raise PlannerError(RAY_MISSING) from None
    return ray


def _address(address: str) -> str:
    """'auto', 'ray://HOST:PORT', 'HOST:PORT', or a bare HOST (the GCS port 6379 added)."""
    if address in ("auto", "local") or "://" in address or ":" in address:
        return address
    return f"{address}:6379"


def run_ray(tasks: list, address: str, workers: int, on_result: Callable[[dict], None]) -> int:
    """Tasks as Ray tasks (1 CPU each), collected with ``ray.wait`` as they finish. Returns the cluster's CPUs.

    ``address``: 'auto' (the cluster this machine belongs to), 'HOST[:PORT]' or 'ray://HOST:10001'
    (a remote cluster; dsd-planner must be installed on its nodes), or 'local' (start a private
    instance of ``workers`` CPUs here). A Ray already initialised in this process is used as is.
    """
    ray = import_ray()
    started = False
    if not ray.is_initialized():
        kw = {"include_dashboard": False, "log_to_driver": False, "configure_logging": False}
        try:
            if address == "local":
                ray.init(num_cpus=workers, **kw)
            else:
                ray.init(address=_address(address), **kw)
        except (ConnectionError, RuntimeError, ValueError) as err:
            raise PlannerError(f"--ray-address {address}: cannot connect to a Ray cluster"
                               f" ({' '.join(str(err).split())[:200]})") from None
        started = True
    try:
        cpus = int(ray.cluster_resources().get("CPU", 1))
        remote = ray.remote(num_cpus=1, max_retries=2)(run_task)
        window = max(2 * cpus, 4)
        todo = iter(tasks)
        pending = []
        for t in todo:
            pending.append(remote.remote(t))
            if len(pending) >= window:
                break
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            for ref in done:
                on_result(ray.get(ref))
                nxt = next(todo, None)
                if nxt is not None:
                    pending.append(remote.remote(nxt))
        return cpus
    finally:
        if started:
            ray.shutdown()


class Progress:
    """'sweep: 12/40 tasks (3 from journal)  2.1 tasks/s  ETA 0:00:13' on stderr: redrawn on a terminal,
    a line at most every ``every_s`` seconds otherwise (and always the last)."""

    def __init__(self, total: int, resumed: int, stream=None, every_s: float = 2.0, enabled: bool = True):
        self.total, self.resumed, self.done = total, resumed, resumed
        self.stream = stream or sys.stderr
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.every_s, self.enabled = every_s, enabled
        self.t0 = time.perf_counter()
        self.last = 0.0

    def line(self) -> str:
        new = self.done - self.resumed
        dt = time.perf_counter() - self.t0
        rate = new / dt if dt > 0 and new else 0.0
        left = self.total - self.done
        eta = _clock(left / rate) if rate > 0 else ("0:00:00" if not left else "?")
        return (f"sweep: {self.done}/{self.total} tasks ({self.resumed} from journal)  {rate:.2f} tasks/s"
                f"  ETA {eta}")

    def update(self, n: int = 1) -> None:
        self.done += n
        if not self.enabled:
            return
        now = time.perf_counter()
        final = self.done >= self.total
        if self.tty:
            self.stream.write("\r" + self.line() + ("\n" if final else ""))
            self.stream.flush()
        elif final or now - self.last >= self.every_s:
            self.stream.write(self.line() + "\n")
            self.stream.flush()
            self.last = now

    def start(self) -> None:
        if self.enabled:
            self.stream.write(self.line() + ("" if self.tty else "\n"))
            self.stream.flush()


def _clock(seconds: float) -> str:
    s = int(round(seconds))
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"

