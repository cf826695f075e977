"""The corpus's serving rows priced through the serving simulation: a static batch's run time, and a closed-loop
benchmark's TPOT and end-to-end speedup (what ``calibration.transfer`` and ``calibration.silicon`` compare with
the published runs)."""
from __future__ import annotations

import pandas as pd

from simulator import serving
from simulator.specs.scenario import Scenario


def run_time_s(sc: Scenario, batch: int, prompt: int, output: int) -> float:
    """A static batch of B requests (prompt + output tokens each) through the serving simulation:
    chunked prefill, then decode; the KV cache may hold fewer than B at once (then they queue)."""
    wl = serving.Workload(arrival="waves", concurrency=batch, n_requests=batch, prompt_len=prompt,
                          output_len=output, max_num_seqs=batch)
    eng = serving.engine_from_scenario(sc, max_num_seqs=batch)
    return float(serving.simulate(sc, "plain", workload=wl, engine=eng).summary["makespan_s"])


def closed_loop(sc: Scenario, policy: str, concurrency: int, prompt: int, output: int):
    """A closed-loop serving benchmark under ``policy``: ``concurrency`` users, each sending its next
    ``prompt`` + ``output`` token request when the last finishes (GenAI-Perf's concurrency mode). The server
    runs with its defaults: every user's request at once, except where the engine caps the running requests
    itself once it speculates (SGLang: 48; the benchmarks published set no --max-running-requests)."""
    wl = serving.Workload(arrival="closed", concurrency=concurrency, n_requests=max(4 * concurrency, 16),
                          prompt_len=prompt, output_len=output, max_num_seqs=concurrency)
    return serving.simulate(sc, policy, workload=wl, engine=serving.engine_from_scenario(sc))


def serving_tpot_s(sc: Scenario, concurrency: int, prompt: int, output: int) -> float:
    """Median per-request time per output token after the first of a closed-loop run, so other
    requests' prefills interleaved with decode steps are counted."""
    return float(closed_loop(sc, "plain", concurrency, prompt, output).summary["tpot_p50_s"])


def serving_e2e_speedup(sc: Scenario, concurrency: int, prompt: int, output: int, k: int) -> float:
    """Mean request latency of plain decoding over fixed-K speculation in the same closed loop
    (the prefills are in both)."""
    def mean_latency(policy: str) -> float:
        req = closed_loop(sc, policy, concurrency, prompt, output).requests
        return float((req.finish_s - req.arrival_s).mean())

    return mean_latency("plain") / mean_latency(f"fixed:{k}")


def serving_row_ms(sc: Scenario, kind: str, row: pd.Series) -> float | None:
    """A plain serving row's value as the serving simulation prices it, in ms per output token: a static batch's
    run time (``kind`` "run") or a closed loop's TPOT ("itl"); None where the row is neither or gives no lengths (an
    ITL row without them is priced as a plain step)."""
    B = int(row.batch_size)
    if kind == "run":
        out, inp = int(row.output_len), int(row.input_len)
        return run_time_s(sc, B, inp, out) * 1e3 / out
    if kind == "itl" and not (pd.isna(row.input_len) or pd.isna(row.output_len)):
        return serving_tpot_s(sc, B, int(row.input_len), int(row.output_len)) * 1e3
    return None
