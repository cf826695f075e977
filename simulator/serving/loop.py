"""Step-level simulation of a continuous-batching engine with (dynamic) speculative decoding.

Each engine step schedules the running sequences (decode: K_i + 1 query tokens each, the K_i
drafts plus the bonus/correction position) and, in the token budget left, prompt chunks of waiting
requests; prices the step with the engine's tables (:mod:`simulator.serving.pricer`); samples how
many drafts each sequence accepts; and commits tokens. :func:`simulate` runs it as named phases
over a :class:`LoopState`: admit arrivals, choose K, reserve KV (preempt), schedule prefill,
price, accept, commit.

Prefill is chunked (vLLM V1 style): decode tokens are scheduled first, prompt chunks fill the rest
of ``max_num_batched_tokens``. ``prefill = "whole"`` schedules prompts unsplit (at least one per
step). The step that finishes a prompt samples the request's first token (TTFT).

KV cache: every scheduled sequence holds ceil((cached + q) / block_size) blocks: speculation
reserves its K + 1 slots. When a step would overflow, the most recently admitted sequences are
preempted (recompute: their blocks are freed, they requeue at the front and re-prefill prompt +
generated tokens).

Acceptance: draft i of a sequence is accepted iff u < a_i and drafts 1..i-1 were; the uniforms u
are drawn per request per output position up front, so every policy sees the same random numbers
for the same request (common random numbers make policy comparisons low-noise), and a step's
accept counts are one vectorized comparison over the batch. The K policies live in
:mod:`simulator.plan.policies`. Runs of identical plain decode steps between two events are run as one
span (:mod:`simulator.serving.decode_span`), with the same numbers as step by step.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from simulator.errors import PlannerError
from simulator.plan.policies import make_policy, parse_policy
from simulator.serving.decode_span import run_span, span_length
from simulator.serving.early_stop import PercentileStop, bounded_summary, step_floor_s
from simulator.serving.engine import EngineConfig, engine_from_scenario, kv_capacity_blocks, running_cap
from simulator.serving.pricer import StepPricer
from simulator.serving.phases import LoopState, Run, accept_runs, admit_arrivals, run_step  # noqa: F401 (accept_runs: re-export)
from simulator.serving.results import ServingResult, summarize
from simulator.serving.workload import Workload, draw_requests, workload_from_scenario
from simulator.specs.scenario import Scenario



# --- the simulation -----------------------------------------------------------------------------

def _kv_blocks(sc: Scenario, engine: EngineConfig, speculative: bool, max_seqs: int, k_max: int,
               max_context: int) -> int:
    """The KV block budget, checked to hold the longest request with its K + 1 reserved slots."""
    bs = engine.block_size
    tokens_cap = max(engine.max_num_batched_tokens, max_seqs * (k_max + 1))
    cap, _ = kv_capacity_blocks(sc, engine, speculative, tokens_cap)
    need_max = -(-(max_context + k_max + 1) // bs)
    if need_max > cap:
        raise PlannerError(f"{sc.name}: a request of {max_context} tokens needs {need_max} KV blocks, the cache"
                           f" holds {cap} ({cap * bs} tokens per GPU); lower the length cap or add GPUs")
    return cap


_PRICERS: dict = {}  # (id(scenario), settings) -> (scenario, StepPricer): the last few built
_PRICER_SLOTS = 16


def pricer_for(sc: Scenario, engine: EngineConfig, k_max: int, max_seqs: int, max_context: int,
               speculative: bool) -> StepPricer:
    """The step-time tables for these settings, built once per scenario object: a load search runs the
    same scenario at several loads, and the tables depend on none of them (only on the longest request)."""
    key = (id(sc), engine, k_max, max_seqs, max_context, speculative)
    hit = _PRICERS.get(key)
    if hit is not None and hit[0] is sc:
        return hit[1]
    twin = _PRICERS.get(key[:-1] + (not speculative,))  # the same target tables, speculation the other way
    pricer = StepPricer(sc, engine, k_max, max_seqs, max_context, speculative, twin and twin[1])
    if len(_PRICERS) >= _PRICER_SLOTS:
        _PRICERS.pop(next(iter(_PRICERS)))
    _PRICERS[key] = (sc, pricer)
    return pricer


def simulate(scenario: Scenario, policy: str = "dsd", workload: Workload | None = None, seed: int = 0,
             engine: EngineConfig | None = None, stop: PercentileStop | None = None) -> ServingResult:
    """Run the workload through the engine under ``policy``; see the module docstring.

    ``workload``: default the scenario's [traffic] section; ``engine``: default its [serving] section.
    The same seed draws the same requests (lengths, categories, arrivals, acceptance uniforms) for
    every policy. ``stop`` (a load search's): end the run as soon as a latency percentile is bound to
    miss its limit; the summary then holds lower bounds (:mod:`simulator.serving.early_stop`).
    """
    sc = scenario
    speculative = parse_policy(policy)[0] != "plain"  # a bad name fails before the scenario's sections are read
    engine = engine or engine_from_scenario(sc)
    workload = workload or workload_from_scenario(sc)
    max_seqs = running_cap(engine, workload, speculative)
    if workload.arrival in ("closed", "waves"):
        max_seqs = min(max_seqs, int(workload.concurrency))
    pol = make_policy(sc, policy, max_seqs, engine)
    reqs = draw_requests(sc, workload, seed, pol.k_max)
    max_context = int((reqs.prompt + reqs.out_len).max())
    cap = _kv_blocks(sc, engine, pol.speculative, max_seqs, pol.k_max, max_context)
    pricer = pricer_for(sc, engine, pol.k_max, max_seqs, max_context, pol.speculative)
    n = int(workload.n_requests)
    pol.start(n)
    ctx = Run(engine, pol, pricer, reqs, cap, max_seqs, pol.speculative, reqs.prompt.tolist(), reqs.out_len.tolist())
    st = LoopState.start(workload, reqs.arrival_times, n)
    if stop is not None:
        # a plain step commits one token per sequence; a speculative one at most K_max + 1. The floor is
        # priced only when a check needs it: a short run ends before its first check
        per_step = pol.k_max + 1 if pol.speculative else 1
        missed, stop = _run_checked(ctx, st, n, stop, lambda: step_floor_s(pricer, max_seqs, pol.speculative),
                                    per_step)
        if missed is not None:
            summary = bounded_summary(pol.label, st, reqs.out_len, missed, stop)
            return ServingResult(pol.label, summary, cap, engine, workload, st.rec)
    while st.n_done < n:
        if admit_arrivals(st):
            _advance(ctx, st, UNBOUNDED)

    cats = workload.categories
    arrival, first_tok, finish = np.array(st.arrival), np.array(st.first_tok), np.array(st.finish)
    requests = {"categories": [cats[c].name for c in reqs.cat], "arrival": arrival, "prompt": reqs.prompt,
                "out_len": reqs.out_len, "gen": st.gen, "first_tok": first_tok, "finish": finish,
                "preempted": np.array(st.preempted, dtype=np.int64)}
    summary = summarize(pol.label, arrival, reqs.out_len, first_tok, finish, st.rec, cap, st.kv_peak)
    return ServingResult(pol.label, summary, cap, engine, workload, st.rec, requests)


UNBOUNDED = 1 << 62  # a run without an early stop: spans end at events only


def _advance(ctx: Run, st: LoopState, max_steps: int) -> None:
    """One engine step, or a span of up to ``max_steps`` plain decode steps (:mod:`.decode_span`)."""
    m = span_length(ctx, st, max_steps)
    if not (m and run_span(ctx, st, m)):
        run_step(ctx, st)


def _run_checked(ctx: Run, st: LoopState, n: int, stop: PercentileStop, floor_s, tokens_per_step: int):
    """The step loop with ``stop`` checked after ``stop.every`` steps, then after every ``stop.every`` or
    1/32 of the steps so far (whichever is more: a long run checks about a hundred times, and runs at most
    3% longer than needed). ``floor_s()``: the step floor the checks count with (priced at the first check).
    Returns (the key bound to miss its limit, the run stopped there; else None) and the stop rule with its
    floor (without it when no check ran)."""
    out_len, next_check, floored = ctx.reqs.out_len, stop.every, False
    while st.n_done < n:
        if admit_arrivals(st):
            _advance(ctx, st, next_check - len(st.rec))
            done = len(st.rec)
            if done >= next_check:
                if not floored:
                    stop, floored = stop.with_floor(floor_s(), tokens_per_step), True
                missed = stop(st, out_len)
                if missed is not None:
                    return missed, stop
                next_check = done + max(stop.every, done // 32)
    return None, stop


def wave_sweep(scenario: Scenario, batch_sizes, multiplier: int = 20, policies=("plain", "fixed", "dsd"),
               prompt_len=1800, output_len=400, seed: int = 0, engine: EngineConfig | None = None) -> pd.DataFrame:
    """Closed-loop waves (multiplier x B prompts, concurrency B) per batch size and policy."""
    rows = []
    for b in batch_sizes:
        wl = Workload.waves(int(b), multiplier, prompt_len=prompt_len, output_len=output_len,
                            max_num_seqs=max(int(b), 1))
        for p in policies:
            rows.append({"batch_size": int(b)} | simulate(scenario, p, workload=wl, seed=seed, engine=engine).summary)
    return pd.DataFrame(rows)
