"""The learned layer's training rows (calibration.learn_step): each expressible plain step and step speedup of the
published corpus, with the physics' own parts at the row (kernel time, host time, collective calls, the engine's
host room; --physics-only, the row's measured kernel tables and engine profile) and what was measured."""
from __future__ import annotations

import hashlib
import warnings
from dataclasses import dataclass

import numpy as np
import pandas as pd

from calibration.transfer_cases import Case, anchor_curve_key, case_for, iid_rate, scenario_for, speculative_running
from simulator.errors import PlannerError, PlannerWarning
from simulator.plan.grid import compute_grid


@dataclass(frozen=True)
class Rows:
    """The training rows as arrays (n,): the physics' parts at each row and what was measured."""

    source: np.ndarray  # source id per row
    gpu: np.ndarray  # hardware name per row
    engine: np.ndarray  # engine per row
    kind: np.ndarray  # "step" or "speedup"
    curve: np.ndarray  # speedup curve id (-1: acceptance given, or a plain row)
    y_log: np.ndarray  # log measured step [s] or speedup
    batch: np.ndarray
    k: np.ndarray
    kernel_s: np.ndarray
    overhead_s: np.ndarray
    batch0: np.ndarray  # plain decoding's batch (a capped closed loop runs fewer speculating)
    kernel0_s: np.ndarray
    overhead0_s: np.ndarray
    log_share: np.ndarray  # log(R / B) of a capped closed loop, else 0
    log_al: np.ndarray  # log acceptance length when the row gives it, else NaN
    row_id: np.ndarray
    calls: np.ndarray  # collective calls of the row's step (physics.step_model.step_collective_calls)
    calls0: np.ndarray  # and of the plain step a speedup divides by
    room: np.ndarray  # the host room of the row's step (physics.engine_time.host_exposed_and_room_s): the terms' host time hides in it
    room0: np.ndarray  # and of the plain step

    def __len__(self) -> int:
        return int(self.y_log.size)

    def take(self, mask) -> "Rows":
        return Rows(*(np.asarray(getattr(self, f))[mask] for f in self.__dataclass_fields__))


def _parts(case: Case) -> tuple | None:
    """(batch, K, kernel, overhead, batch0, kernel0, overhead0, share, calls, calls0, room, room0) of a row, physics
    only."""
    B = int(case.row.batch_size)
    K = int(case.row.k) if case.kind == "speedup" else 0
    al = float(case.row.acceptance_length) if case.kind == "speedup" and not pd.isna(case.row.acceptance_length) else 2.0
    sc = scenario_for(case.raw, "physics")
    if case.kind == "speedup":
        sc = sc.with_overrides(acceptance=iid_rate(al, K))
    R = speculative_running(sc, case) if case.kind == "speedup" else B
    g = compute_grid(sc, batch_sizes=sorted({R, B}), ks=sorted({0, K}))
    kern, over, calls, room = g.step_parts()
    r, b = (0, 1) if R < B else (0, 0)
    j = g.itl_s.shape[1] - 1
    return (R, K, kern[r, j], over[r, j], B, kern[b, 0], over[b, 0], R / B, calls[r, j], calls[b, 0], room[r, j],
            room[b, 0])


def training_rows(cases: list[Case]) -> Rows:
    """Plain step rows (priced on the grid) and step-speedup rows of every expressible case."""
    recs, curves = [], {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PlannerWarning)
        for c in cases:
            plain = c.kind == "plain"
            step_speedup = c.kind == "speedup" and not c.end_to_end
            if not (plain or step_speedup):
                continue
            try:
                parts = _parts(c)
            except PlannerError:
                continue
            given = step_speedup and not pd.isna(c.row.acceptance_length)
            curve = -1
            if step_speedup and not given:
                curve = curves.setdefault(anchor_curve_key(c.row), len(curves))
            y = np.log(c.measured * (1e-3 if plain else 1.0))
            recs.append((c.row.source_id, c.raw["hardware"]["name"], str(c.row.engine),
                         "step" if plain else "speedup", curve, y, *parts[:8],
                         np.log(float(c.row.acceptance_length)) if given else np.nan, int(c.row.row_id), *parts[8:]))
    cols = list(zip(*recs))
    B, K, kern, over, B0, kern0, over0, share = (np.array(cols[i], dtype=float) for i in range(6, 14))
    obj = lambda i: np.array(cols[i], dtype=object)  # noqa: E731
    return Rows(obj(0), obj(1), obj(2), obj(3), np.array(cols[4], dtype=int), np.array(cols[5], dtype=float),
                B, K, kern, over, B0, kern0, over0, np.log(share), np.array(cols[14], dtype=float),
                np.array(cols[15], dtype=int), *(np.array(cols[i], dtype=float) for i in range(16, 20)))


def corpus_cases(corpus: pd.DataFrame) -> list[Case]:
    return [c for c in (case_for(r) for _, r in corpus.iterrows()) if isinstance(c, Case)]


def rows_digest(rows: Rows) -> str:
    """A fingerprint of the training rows as today's physics prices them (6 significant digits): the shipped file
    records it, so a physics change that moves a row shows the layer is stale (tests/test_learned_step.py)."""
    parts = zip(rows.row_id, rows.y_log, rows.batch, rows.k, rows.kernel_s, rows.overhead_s, rows.kernel0_s,
                rows.overhead0_s, rows.log_share, rows.calls, rows.calls0, rows.room, rows.room0)
    text = "\n".join(f"{int(r)}:" + ",".join(f"{float(v):.6g}" for v in rest) for r, *rest in parts)
    return hashlib.sha256(text.encode()).hexdigest()
