"""What a serving run produces: per-request and per-step tables, the summary row, tail analysis.

Latency percentiles: TTFT and TPOT over requests; ITL over decode steps weighted by the sequences
each step serves (every decoding sequence waits the whole step). Batch size and K are
time-weighted over decode steps.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
import pandas as pd

from simulator.serving.engine import EngineConfig
from simulator.serving.workload import Workload

SUMMARY_KEYS = ("policy", "n_requests", "output_tokens", "throughput_tok_s", "tokens_per_s_per_user",
                "ttft_p50_s", "ttft_p90_s", "ttft_p99_s", "tpot_p50_s", "tpot_p90_s", "tpot_p99_s",
                "itl_p50_s", "itl_p99_s", "makespan_s", "mean_batch_size", "mean_k", "kv_peak_occupancy")
STEP_COLUMNS = ["t_s", "step_s", "batch_size", "n_prefill", "prefill_tokens", "tokens", "padded_tokens", "graph",
                "k", "k_mean", "committed", "kv_blocks", "waiting"]


@dataclass
class ServingResult:
    """One run of :func:`simulator.serving.simulate`: the summary row and the tables it comes from
    (built on first use: a load search reads the summary of many runs and the tables of few)."""

    policy: str
    summary: dict
    kv_capacity_blocks: int
    engine: EngineConfig
    workload: Workload
    step_records: list = field(repr=False, default_factory=list)  # tuples in STEP_COLUMNS order
    request_arrays: dict | None = field(repr=False, default=None)  # requests_frame's arguments; None: no table

    @cached_property
    def steps(self) -> pd.DataFrame:
        return steps_frame(self.step_records, self.kv_capacity_blocks)

    @cached_property
    def requests(self) -> pd.DataFrame:
        return pd.DataFrame() if self.request_arrays is None else requests_frame(**self.request_arrays)

    @cached_property
    def graphs(self) -> pd.DataFrame:
        """(tokens, K) CUDA graphs the run used, with step counts; eager steps have tokens = None."""
        s = self.steps[self.steps.batch_size > 0]
        df = s.assign(tokens_run=np.where(s.graph, s.padded_tokens, -1)).groupby(["tokens_run", "k"]).size()
        df = df.reset_index(name="steps").rename(columns={"tokens_run": "tokens"})
        df["captured"] = df.tokens >= 0
        df["tokens"] = df.tokens.where(df.captured, None)
        return df


def _percentile(x: np.ndarray, q) -> np.ndarray:
    return np.percentile(x, q) if len(x) else np.full(len(q), np.nan)


def _weighted_percentile(x: np.ndarray, w: np.ndarray, q) -> np.ndarray:
    if not len(x) or w.sum() <= 0:
        return np.full(len(q), np.nan)
    order = np.argsort(x, kind="stable")
    cw = np.cumsum(w[order])
    pos = np.searchsorted(cw, np.asarray(q) / 100.0 * cw[-1], side="left")
    return x[order][np.minimum(pos, len(x) - 1)]


def steps_frame(rec: list[tuple], cap: int) -> pd.DataFrame:
    """One row per engine step (``rec`` holds tuples in STEP_COLUMNS order)."""
    steps = pd.DataFrame(rec, columns=STEP_COLUMNS)
    steps["kv_occupancy"] = steps.kv_blocks / cap
    return steps


def requests_frame(categories: list[str], arrival, prompt, out_len, gen, first_tok, finish,
                   preempted) -> pd.DataFrame:
    """One row per request with its TTFT, TPOT and decode rate (NaN where undefined)."""
    requests = pd.DataFrame({
        "request": np.arange(len(prompt)), "category": categories, "arrival_s": arrival,
        "prompt_len": prompt, "output_len": out_len, "generated": gen, "first_token_s": first_tok,
        "finish_s": finish, "preemptions": preempted})
    requests["ttft_s"], requests["tpot_s"], requests["tokens_per_s"] = request_latencies(
        requests.arrival_s.to_numpy(), np.asarray(out_len), requests.first_token_s.to_numpy(), requests.finish_s.to_numpy())
    return requests


def request_latencies(arrival, out_len, first_tok, finish) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(TTFT, TPOT, decode tokens/s) per request; NaN where undefined (one output token, no decode time)."""
    with np.errstate(invalid="ignore", divide="ignore"):
        decode_s = finish - first_tok
        tpot = np.where(out_len > 1, decode_s / np.maximum(out_len - 1, 1), np.nan)
        rate = np.where((out_len > 1) & (decode_s > 0), (out_len - 1) / decode_s, np.nan)
    return first_tok - arrival, tpot, rate


def summarize(policy: str, arrival, out_len, first_tok, finish, step_records: list, cap: int, kv_peak: int) -> dict:
    """The summary row of a finished run, from its request arrays and step records."""
    ttft_s, tpot_s, rate_s = request_latencies(arrival, out_len, first_tok, finish)
    ttft = _percentile(ttft_s, [50, 90, 99])
    tpot = _percentile(tpot_s[~np.isnan(tpot_s)], [50, 90, 99])
    cols = np.array(step_records, dtype=float).reshape(-1, len(STEP_COLUMNS))
    dec = cols[cols[:, STEP_COLUMNS.index("batch_size")] > 0]
    w = dec[:, STEP_COLUMNS.index("step_s")]
    batch = dec[:, STEP_COLUMNS.index("batch_size")]
    itl = _weighted_percentile(w, batch, [50, 99])
    makespan = float(finish.max() - arrival.min())
    out = int(out_len.sum())
    total_w = w.sum()
    rate = rate_s[~np.isnan(rate_s)]
    return {
        "policy": policy, "n_requests": int(len(arrival)), "output_tokens": out,
        "throughput_tok_s": out / makespan if makespan > 0 else float("nan"),
        "tokens_per_s_per_user": float(rate.mean()) if len(rate) else float("nan"),
        "ttft_p50_s": float(ttft[0]), "ttft_p90_s": float(ttft[1]), "ttft_p99_s": float(ttft[2]),
        "tpot_p50_s": float(tpot[0]), "tpot_p90_s": float(tpot[1]), "tpot_p99_s": float(tpot[2]),
        "itl_p50_s": float(itl[0]), "itl_p99_s": float(itl[1]), "makespan_s": makespan,
        # time-weighted over steps that decode
        "mean_batch_size": float((batch * w).sum() / total_w) if total_w > 0 else 0.0,
        "mean_k": float((dec[:, STEP_COLUMNS.index("k_mean")] * w).sum() / total_w) if total_w > 0 else 0.0,
        "kv_peak_occupancy": kv_peak / cap,
    }


def tail_phases(results, batch_threshold: int = 8) -> pd.DataFrame:
    """Split each run at the start of its drain: the last stretch where no request waits and at most
    ``batch_threshold`` sequences decode. Shows where a long-tail rollout spends its makespan."""
    rows = []
    for r in (results if isinstance(results, (list, tuple)) else [results]):
        s = r.steps
        busy = (s.batch_size > batch_threshold) | (s.waiting > 0) | (s.n_prefill > 0)
        start = int(np.flatnonzero(busy.to_numpy())[-1]) + 1 if busy.any() else 0
        tail = s.iloc[start:]
        t0 = float(s.t_s.iloc[0])
        t_tail = float(tail.t_s.iloc[0]) if len(tail) else float(s.t_s.iloc[-1] + s.step_s.iloc[-1])
        w = tail.step_s
        rows.append({"policy": r.policy, "makespan_s": r.summary["makespan_s"], "bulk_s": t_tail - t0,
                     "tail_s": float(w.sum()), "tail_steps": len(tail), "tail_tokens": int(tail.committed.sum()),
                     "tail_mean_k": float((tail.k_mean * w).sum() / w.sum()) if len(tail) else 0.0})
    return pd.DataFrame(rows)
