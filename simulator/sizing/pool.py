"""The worker pool of the sizing searches: many (candidate, policy) load searches
(:func:`simulator.sizing.search.search_capacity`) in a process pool, each answered once per process."""
from __future__ import annotations

import dataclasses
import json
import pickle
from dataclasses import dataclass

from simulator import serving
from simulator.sizing.search import Search, search_capacity
from simulator.workers import worker_pool
from simulator.sizing.candidate import Candidate
from simulator.sizing.spec import SizingSpec
from simulator.specs.scenario import Scenario


@dataclass
class Task:
    scenario: Scenario
    candidate: Candidate
    policy: str
    spec: SizingSpec
    max_seqs: int
    simulate: object = None
    variant: str = ""


def _run_task(task: Task) -> tuple[str, Search]:
    s = search_capacity(task.scenario, task.policy, task.spec, task.max_seqs, task.simulate, task.candidate)
    return task.variant, s


def _run_batch(tasks: list[Task]) -> list[Search]:
    return [_run_task(t)[1] for t in tasks]


_SEARCHES: dict = {}  # search key -> Search: a search depends on none of the fleet settings (target, prices)
_SEARCH_SLOTS = 512
SEARCH_FIELDS = ("slo", "load_kind", "n_requests", "duration_s", "max_requests", "search_steps", "seed", "ttft_guard")


def search_key(task: Task) -> str:
    """What a search's answer depends on: the candidate's scenario (its TOML and the kernel-time scale a
    sensitivity run sets on its profile), the policy, the memory limit, the search settings, the simulation."""
    sc = task.scenario
    sim = task.simulate or serving.simulate
    body = {"raw": {k: v for k, v in sc.raw.items() if not k.startswith("_")},
            "scale": sc.profile.engine_scale if sc.profile is not None else None, "policy": task.policy,
            "max_seqs": task.max_seqs, "spec": {f: getattr(task.spec, f) for f in SEARCH_FIELDS},
            "sim": f"{getattr(sim, '__module__', '')}.{getattr(sim, '__qualname__', repr(sim))}"}
    return json.dumps(body, sort_keys=True, default=str)


def _run_pickled(payload: bytes) -> list:
    return _run_batch(pickle.loads(payload))


def run_all(tasks: list[Task], workers: int, meanwhile=None) -> list[tuple[str, Search]]:
    """Run the searches, in a process pool of ``workers`` when there is more than one task. A search this
    process already ran (same :func:`search_key`: sizing the same candidates for another target load,
    say) is not run again. ``meanwhile``: a function this process runs while the pool works (else first)."""
    keys = [search_key(t) for t in tasks]
    todo = [(k, t) for k, t in zip(keys, tasks) if k not in _SEARCHES]
    todo = list({k: t for k, t in todo}.items())
    # the searches of one scenario object (its policies, its seeds) go to one worker together: pickled as
    # one list they share one unpickled scenario there, so its step-time tables are built once, not per task
    groups: dict[int, list] = {}
    for k, t in todo:
        groups.setdefault(id(t.scenario), []).append((k, t))
    batches = list(groups.values())
    if workers <= 1 or len(batches) <= 1:
        if meanwhile is not None:
            meanwhile()
        found = [_run_batch([t for _, t in b]) for b in batches]
    else:
        # pickled here, before ``meanwhile`` runs: the pool's feeder thread would otherwise pickle the scenarios
        # while ``meanwhile`` fills the caches they share (a profile's tables), a race pickle refuses
        payloads = [pickle.dumps([t for _, t in b]) for b in batches]
        with worker_pool(min(workers, len(batches))) as pool:
            pending = pool.map(_run_pickled, payloads)  # submitted at once
            if meanwhile is not None:
                meanwhile()
            found = list(pending)
    todo = [kt for b in batches for kt in b]
    found = [s for b in found for s in b]
    for (k, _), s in zip(todo, found):
        if len(_SEARCHES) >= _SEARCH_SLOTS:
            _SEARCHES.pop(next(iter(_SEARCHES)))
        _SEARCHES[k] = s
    return [(t.variant, dataclasses.replace(_SEARCHES[k], candidate=t.candidate)) for k, t in zip(keys, tasks)]
