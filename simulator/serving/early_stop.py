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

With a step floor (:func:`step_floor_s`: no engine step of this run can take less, the step pricer being
non-decreasing in context and in prompt tokens, and the minimum taken over every batch size), the TPOT
bound also counts the output still to come: a request that has ``r`` tokens left needs at least
ceil(r / (K_max + 1)) more steps (a step commits at most K_max + 1 tokens per sequence), each at least the
floor. A run whose one-sequence step already misses a TPOT limit then stops at its first check.

The stopped run's summary holds those bounded percentiles (marked ``stopped_early``; every figure that
no bound covers is NaN): :func:`bounded_summary`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

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
    step_floor_s: float = 0.0  # no step of the run is shorter (0: unknown)
    tokens_per_step: int = 1  # at most this many tokens committed per sequence and step (K_max + 1)

    def with_floor(self, step_floor_s: float, tokens_per_step: int) -> "PercentileStop":
        return replace(self, step_floor_s=float(step_floor_s), tokens_per_step=max(int(tokens_per_step), 1))

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
                bounds[metric] = lower_bounds(st, out_len, metric, self.step_floor_s, self.tokens_per_step)
            x = bounds[metric]
            n = len(x)
            if n and int(np.count_nonzero(x > limit)) >= n - order_index(q, n):
                return key
        return None


def lower_bounds(st, out_len: np.ndarray, metric: str, step_floor_s: float = 0.0,
                 tokens_per_step: int = 1) -> np.ndarray:
    """Per request, a lower bound of its final TTFT or TPOT at the clock ``st.t`` (exact once known), over
    the requests the summary's percentile covers (TPOT: output longer than one token); ``step_floor_s``
    and ``tokens_per_step``: the module docstring's floor on the steps still to come."""
    t = st.t
    arrival, first = np.array(st.arrival), np.array(st.first_tok)
    if metric == "ttft":
        waiting = np.isnan(first) & ~np.isnan(arrival)
        x = first - arrival
        x[waiting] = t - arrival[waiting]
        return np.nan_to_num(x, nan=0.0)  # not arrived yet: nothing known but >= 0
    finish = np.array(st.finish)
    decoding = np.isnan(finish) & ~np.isnan(first)
    span = finish - first  # finished: exact
    left = np.asarray(out_len, dtype=float) - np.asarray(st.gen, dtype=float)  # tokens still to commit
    span[decoding] = t - first[decoding] + np.ceil(left[decoding] / tokens_per_step) * step_floor_s
    unstarted = np.isnan(first)  # waiting, prefilling or not arrived: every token after the first is to come
    span[unstarted] = np.ceil((out_len[unstarted] - 1) / tokens_per_step) * step_floor_s
    x = span / np.maximum(out_len - 1, 1)
    return np.nan_to_num(x, nan=0.0)[out_len > 1]


def step_floor_s(pricer, max_seqs: int, speculative: bool) -> float:
    """A lower bound on every step of a run priced by ``pricer`` (serving.pricer.StepPricer): the cheapest
    step over 1..max_seqs decoding sequences at K = 0, no context and no prompt tokens, and the cheapest
    prompt-only step (one token), less 1e-9 for the rounding of the clock's sums."""
    memo = pricer.__dict__.setdefault("_step_floors", {})  # a load search reuses the pricer across its runs
    key = (int(max_seqs), bool(speculative))
    if key not in memo:
        b = np.arange(1, max(int(max_seqs), 1) + 1)  # one vector call: the loop's step prices to the bit
        # K = 0 without the drafter's extend pass a dynamic-K server may still run there: lower still, and the
        # draft's tables stay unpriced
        decode = pricer.decode_steps_s(b, np.zeros_like(b), b, 0.0, speculative, 0.0, k0_extend=False)
        prompt = pricer.step_s(0, 0, 1, 0.0, speculative, 0.0)[0]
        memo[key] = max(min(float(decode.min()), prompt), 0.0) * (1.0 - 1e-9)
    return memo[key]


def bounded_summary(policy: str, st, out_len: np.ndarray, key: str, stop: PercentileStop | None = None) -> dict:
    """The summary row of a run stopped by ``stop``: lower bounds of the TTFT and TPOT percentiles at the
    stop, NaN for every figure no bound covers."""
    nan = float("nan")
    out = {"policy": policy, "n_requests": len(out_len), "output_tokens": int(out_len.sum())}
    out |= {k: nan for k in ("throughput_tok_s", "tokens_per_s_per_user")}
    for metric in ("ttft", "tpot"):
        x = lower_bounds(st, out_len, metric, *((stop.step_floor_s, stop.tokens_per_step) if stop else ()))
        for q in (50, 90, 99):
            out[f"{metric}_p{q}_s"] = float(np.percentile(x, q)) if len(x) else nan
    out |= {k: nan for k in ("itl_p50_s", "itl_p99_s", "makespan_s", "mean_batch_size", "mean_k",
                             "kv_peak_occupancy")}
    out["stopped_early"] = f"{key} bound to miss its limit at t = {st.t:.3g} s of simulated time"
    out["stopped_at_s"] = float(st.t)
    return out
