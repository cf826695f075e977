"""One engine-setting advice and how it reads: the record (:class:`Advice`), its one line, and the small
arithmetic every rule shares (``simulator.plan.advice`` and ``simulator.plan.runner_advice`` build on it)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from simulator.specs.engines import EngineProfile

MIN_GAIN = 0.001  # below 0.1% of goodput a setting is not worth a line
ENGINE_NAMES = {"vllm": "vLLM", "sglang": "SGLang", "trtllm": "TensorRT-LLM"}


@dataclass(frozen=True)
class Advice:
    setting: str
    current: object
    suggested: object
    goodput_gain_share: float  # the largest gain over at_batch_sizes (0.05 = +5% tokens/s)
    at_batch_sizes: tuple[int, ...]  # planned batch sizes where the setting binds and the change gains
    engine_version: str
    rule_source: str
    why: str  # one clause: what the engine does at the current value

    def line(self) -> str:
        return advice_text(self.to_dict())

    def to_dict(self) -> dict:
        return {"setting": self.setting, "current": self.current, "suggested": self.suggested,
                "goodput_gain_share": round(float(self.goodput_gain_share), 6),
                "at_batch_sizes": [int(b) for b in self.at_batch_sizes], "engine_version": self.engine_version,
                "rule_source": self.rule_source, "why": self.why}


def advice_text(a: dict) -> str:
    """One advice (as :meth:`Advice.to_dict` writes it) in one line."""
    return (f"{a['setting']} {a['current']} -> {a['suggested']}: up to +{a['goodput_gain_share']:.1%} goodput at B"
            f" {batch_span(a['at_batch_sizes'])} ({a['why']}; engine profile {a['engine_version']}; code:"
            f" {a['rule_source']})")


def engine_label(engine: EngineProfile) -> str:
    return f"{ENGINE_NAMES.get(engine.name, engine.name)} {engine.version}"


def gain_share(new, old) -> np.ndarray:
    """new / old - 1 where both are positive numbers, else 0 (nothing to compare)."""
    new, old = np.asarray(new, dtype=float), np.asarray(old, dtype=float)
    ok = np.isfinite(new) & np.isfinite(old) & (old > 0)
    return np.where(ok, new / np.where(ok, old, 1.0) - 1.0, 0.0)


def batch_span(sizes) -> str:
    """'1-40' for a run, '1-40, 60-64' for runs, a list otherwise."""
    b = np.asarray(sorted(int(x) for x in sizes))
    if not b.size:
        return "-"
    runs = np.split(b, np.flatnonzero(np.diff(b) > 1) + 1)
    return ", ".join(f"{r[0]}" if r[0] == r[-1] else f"{r[0]}-{r[-1]}" for r in runs)
