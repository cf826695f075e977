"""TensorRT-LLM's draft_len_schedule rule and acceptance gate, written as this project's own table.

Test-support module (no tests). TensorRT-LLM publishes no wheel on PyPI (only ~10 kB stub sdists;
``pip download --no-deps --only-binary=:all: tensorrt-llm==1.2.1`` finds no wheel), so a clean
machine cannot run the engine's code. tests/engine_code.py runs the real functions when their source
is cached and falls back to these, which restate the documented rule (our code, not the engine's),
each step citing the source it comes from (NVIDIA/TensorRT-LLM, read 2026-12):

1.2.x  tensorrt_llm/llmapi/llm_args.py  DecodingBaseConfig.validate_draft_len_schedule_and_sort:
         every key >= 1 ("batch size threshold must be >= 1"); every value >= 0 ("draft length must
         be >= 0"); key 1 present ("must include batch_size=1"); schedule[1] == max_draft_len
         ("draft_len_schedule[1] must equal max_draft_len"); every value <= max_draft_len ("all draft
         lengths must be <= max_draft_len"); returns the dict sorted by key.
       tensorrt_llm/_torch/speculative/drafter.py  Drafter.get_draft_len_for_batch_size:
         ``idx = bisect_right(thresholds, batch_size)`` -> the value of the largest key <= batch size.
1.3+   llm_args.py (same validator after PR #10860): key 1 no longer required; the SMALLEST key's
         value must equal max_draft_len ("draft_len_schedule[{smallest}] must equal max_draft_len").
       tensorrt_llm/_torch/speculative/utils.py  get_draft_len_for_batch_size(schedule, batch_size,
         max_draft_len): no schedule -> max_draft_len; ``idx = bisect_left(keys, batch_size)`` -> the
         value of the smallest key >= batch size; above the largest key 0 ("speculation disabled,
         implicit"); its docstring's example {4: 4, 8: 2, 32: 1}: 1-4 -> 4, 5-8 -> 2, 9-32 -> 1, 33+ -> 0.
Gate   tensorrt_llm/_torch/speculative/speculation_gate.py  SpeculationGate: a rolling mean over the
         last ``window`` samples, checked once ``window`` samples were recorded; below ``threshold``
         speculation is disabled for good. 1.2.x ``record_avg_decoded``: sample = max(0,
         avg_decoded_tokens_per_iter - 1) per completed request; 1.3+ ``record_acceptance_rate``:
         sample = accepted / drafted tokens of one iteration, refused outside [0, 1].
       llm_args.py field types: 1.2.x acceptance_window NonNegativeInt, acceptance_length_threshold
         NonNegativeFloat; 1.3+ acceptance_rate_window_size int >= 0, acceptance_rate_threshold float.
         py_executor.py builds the gate only when the window is truthy and the threshold is not None.
"""
from __future__ import annotations

from bisect import bisect_left, bisect_right


def generation(version: str) -> str:
    """'1.2' or '1.3' (the 'up to' generation: 1.3.0rc8 and later)."""
    parts = [int(p) for p in str(version).split("rc")[0].split(".")[:2]]
    return "1.2" if parts[:2] == [1, 2] else "1.3"


def validate(schedule: dict, max_draft_len: int | None, version: str) -> dict[int, int]:
    v = {int(k): int(x) for k, x in schedule.items()}
    for batch_size, draft_len in v.items():
        if batch_size < 1:
            raise ValueError(f"draft_len_schedule: batch size threshold must be >= 1, got {batch_size}")
        if draft_len < 0:
            raise ValueError(f"draft_len_schedule: draft length must be >= 0, got {draft_len}")
    if generation(version) == "1.2":
        if 1 not in v:
            raise ValueError("draft_len_schedule must include batch_size=1")
        first = 1
    else:
        first = min(v)
    if max_draft_len is not None and v[first] != max_draft_len:
        raise ValueError(f"draft_len_schedule[{first}] must equal max_draft_len (got {v[first]} vs {max_draft_len})")
    if max_draft_len is not None and any(x > max_draft_len for x in v.values()):
        raise ValueError("draft_len_schedule: all draft lengths must be <= max_draft_len")
    return dict(sorted(v.items()))


def k_for(schedule: dict | None, batch_size: int, version: str, max_draft_len: int | None = None) -> int:
    if schedule is None:
        return int(max_draft_len or 0)
    sched = {int(k): int(x) for k, x in schedule.items()}
    if max_draft_len is None:
        max_draft_len = sched[min(sched)]
    sched = validate(sched, max_draft_len, version)
    keys = list(sched)
    if generation(version) == "1.2":
        idx = bisect_right(keys, batch_size)
        return sched[keys[idx - 1]] if idx else 0
    idx = bisect_left(keys, batch_size)
    return sched[keys[idx]] if idx < len(keys) else 0


def gate_trips(samples: list[float], window: int, threshold: float) -> int | None:
    """Index of the sample after which the gate turns speculation off (None: never)."""
    if not window or threshold is None:
        return None
    recent: list[float] = []
    for i, x in enumerate(samples):
        recent = (recent + [x])[-window:]
        if i + 1 >= window and sum(recent) / len(recent) < threshold:
            return i
    return None


# documented examples: (schedule, batch size, version, K) from the docstrings cited above
DOCUMENTED = [
    ({4: 4, 8: 2, 32: 1}, 1, "1.3", 4), ({4: 4, 8: 2, 32: 1}, 4, "1.3", 4), ({4: 4, 8: 2, 32: 1}, 5, "1.3", 2),
    ({4: 4, 8: 2, 32: 1}, 8, "1.3", 2), ({4: 4, 8: 2, 32: 1}, 9, "1.3", 1), ({4: 4, 8: 2, 32: 1}, 32, "1.3", 1),
    ({4: 4, 8: 2, 32: 1}, 33, "1.3", 0),
    ({1: 4, 4: 2, 8: 0}, 3, "1.2.1", 4), ({1: 4, 4: 2, 8: 0}, 4, "1.2.1", 2), ({1: 4, 4: 2, 8: 0}, 8, "1.2.1", 0),
]
