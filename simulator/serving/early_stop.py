"""Stop a serving run once a latency percentile is bound to exceed its limit (an exact early stop).

A load search only needs a run's verdict. When enough requests already have a TTFT (or TPOT) above the
limit -- counting, for the requests still waiting, the lower bound ``t_now - arrival`` (a token that has
not come yet comes after now), and for those still decoding ``(t_now - first token) / (output - 1)`` --
the percentile of the finished run must exceed the limit too, so the rest of the run cannot change the
verdict. Why it is exact: every request's final value is at least its bound (rounding is monotone), so
every order statistic of the final values is at least that of the bounds; np.percentile (linear method)
interpolates between the order statistics at floor(q (n - 1)) and the next one and never lands below the
first; and the rule fires only when that order statistic of the bounds is above the limit (it uses an
index at most numpy's, which only makes it stricter).

The stopped run's summary holds those bounded percentiles (marked ``stopped_early``; every figure that
no bound covers is NaN): :func:`bounded_summary`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

# summary keys the rule can bound: (metric, percentile)
BOUNDABLE = {f"{m}_p{q}_s": (m, q) for m in ("ttft", "tpot") for q in (50, 90, 99)}
CHECK_EVERY = 64  # engine steps before the first check and at least between two (simulate runs the cadence)


def order_index(q: float, n: int) -> int:
    """An index at most numpy's floor((n - 1) q / 100) for the linear method (a margin for its rounding)."""
    return max(0, math.floor((n - 1) * q / 100.0 - 1e-6))


@dataclass(frozen=True)
class PercentileStop:
    """Stop once one of ``limits`` (summary key -> upper bound, keys in BOUNDABLE) is provably exceeded."""

    limits: tuple  # ((key, limit), ...)
    every: int = CHECK_EVERY

    @classmethod
    def from_limits(cls, limits: dict, every: int = CHECK_EVERY) -> "PercentileStop | None":
        kept = tuple((k, float(v)) for k, v in limits.items() if k in BOUNDABLE and np.isfinite(v))
        return cls(kept, every) if kept else None

    def __call__(self, st, out_len: np.ndarray) -> str | None:
        """The key that is bound to miss its limit, or None (``st``: a serving LoopState)."""
        bounds = {}
        for key, limit in self.limits:
            metric, q = BOUNDABLE[key]
            if metric not in bounds:
                bounds[metric] = lower_bounds(st, out_len, metric)
            x = bounds[metric]
            n = len(x)
            if n and int(np.count_nonzero(x > limit)) >= n - order_index(q, n):
                return key
        return None


def lower_bounds(st, out_len: np.ndarray, metric: str) -> np.ndarray:
    """Per request, a lower bound of its final TTFT or TPOT at the clock ``st.t`` (exact once known), over
    the requests the summary's percentile covers (TPOT: output longer than one token)."""
    t = st.t
    arrival, first = np.array(st.arrival), np.array(st.first_tok)
    if metric == "ttft":
        waiting = np.isnan(first) & ~np.isnan(arrival)
        x = first - arrival
        x[waiting] = t - arrival[waiting]
        return np.nan_to_num(x, nan=0.0)  # not arrived yet: nothing known but >= 0
    finish = np.array(st.finish)
    decoding = np.isnan(finish) & ~np.isnan(first)
    finish[decoding] = t
    x = (finish - first) / np.maximum(out_len - 1, 1)
    return np.nan_to_num(x, nan=0.0)[out_len > 1]


def bounded_summary(policy: str, st, out_len: np.ndarray, key: str) -> dict:
    """The summary row of a run stopped by a PercentileStop: lower bounds of the TTFT and TPOT
    percentiles at the stop, NaN for every figure no bound covers."""
    nan = float("nan")
    out = {"policy": policy, "n_requests": len(out_len), "output_tokens": int(out_len.sum())}
    out |= {k: nan for k in ("throughput_tok_s", "tokens_per_s_per_user")}
    for metric in ("ttft", "tpot"):
        x = lower_bounds(st, out_len, metric)
        for q in (50, 90, 99):
            out[f"{metric}_p{q}_s"] = float(np.percentile(x, q)) if len(x) else nan
    out |= {k: nan for k in ("itl_p50_s", "itl_p99_s", "makespan_s", "mean_batch_size", "mean_k",
                             "kv_peak_occupancy")}
    out["stopped_early"] = f"{key} bound to miss its limit at t = {st.t:.3g} s of simulated time"
    out["stopped_at_s"] = float(st.t)
    return out
