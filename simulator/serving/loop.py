"""Step-level simulation of a continuous-batching engine with (dynamic) speculative decoding.

Each engine step schedules the running sequences (decode: K_i + 1 query tokens each, the K_i
drafts plus the bonus/correction position) and, in the token budget left, prompt chunks of waiting
requests; prices the step with the engine's tables (:mod:`simulator.serving.engine`); samples how
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
:mod:`simulator.plan.policies`.
"""
from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from simulator.errors import PlannerError
from simulator.plan.policies import Policy, make_policy, parse_policy
from simulator.serving.engine import EngineConfig, StepPricer, engine_from_scenario, kv_capacity_blocks
from simulator.serving.results import ServingResult, requests_frame, steps_frame, summarize
from simulator.serving.workload import Requests, Workload, draw_requests, workload_from_scenario
from simulator.specs.scenario import Scenario


@dataclass(slots=True)
class Run:
    """What stays fixed during a run."""

    engine: EngineConfig
    policy: Policy
    pricer: StepPricer
    reqs: Requests
    cap: int  # KV blocks per GPU
    max_seqs: int
    speculative: bool  # a draft is loaded (policy.speculative, read once)


@dataclass(slots=True)
class LoopState:
    """Per-request arrays, the queues and the clock."""

    pending: list  # heap of (release time, request)
    next_closed: int  # next request a closed-loop user sends (n when the arrivals are open-loop)
    think: float
    arrival: np.ndarray
    gen: np.ndarray  # output tokens generated
    cached: np.ndarray  # tokens in the KV cache
    target: np.ndarray  # tokens to compute before decoding (prompt + generated at admission)
    first_tok: np.ndarray
    finish: np.ndarray
    preempted: np.ndarray
    decoding: np.ndarray
    waiting: deque = field(default_factory=deque)
    running: list = field(default_factory=list)  # admission order
    n_done: int = 0
    t: float = 0.0
    kv_peak: int = 0
    rec: list = field(default_factory=list)  # one tuple per step, results.STEP_COLUMNS

    @classmethod
    def start(cls, workload: Workload, times: np.ndarray | None, n: int) -> "LoopState":
        if times is not None:
            pending = [(float(t), i) for i, t in enumerate(times)]  # sorted: already a heap
            next_closed = n
        else:
            next_closed = min(int(workload.concurrency), n)
            pending = [(0.0, i) for i in range(next_closed)]
        think = workload.think_time_s if workload.arrival == "closed" else 0.0
        nan, zero = np.full(n, np.nan), np.zeros(n, dtype=np.int64)
        return cls(pending, next_closed, think, nan, zero.copy(), zero.copy(), zero.copy(), nan.copy(), nan.copy(),
                   zero.copy(), np.zeros(n, dtype=bool))


@dataclass(slots=True)
class Step:
    """One engine step being scheduled."""

    run: np.ndarray  # running requests, admission order
    dec: np.ndarray  # the decoding ones
    k_step: int
    k_seq: np.ndarray | None  # per-sequence K (per-request policy), else None
    q_dec: np.ndarray  # query tokens per decoding sequence
    used: int = 0  # KV blocks held once the step is scheduled
    tokens: int = 0  # tokens the target pass computes
    pre_tokens: int = 0  # of which prompt tokens
    pre_idx: list = field(default_factory=list)
    pre_chunk: list = field(default_factory=list)


# --- phases -------------------------------------------------------------------------------------

def _admit_arrivals(st: LoopState) -> bool:
    """Queue the requests released by now; False (clock moved to the next release) when idle."""
    pending = st.pending
    while pending and pending[0][0] <= st.t:
        rt, i = heapq.heappop(pending)
        st.arrival[i] = rt
        st.waiting.append(i)
    if not st.running and not st.waiting:
        st.t = pending[0][0]
        return False
    return True


def _choose_k(ctx: Run, st: LoopState) -> Step:
    run = np.fromiter(st.running, dtype=np.int64, count=len(st.running))
    dec = run[st.decoding[run]]
    k_step, k_seq = ctx.policy.choose_k(dec) if len(dec) else (0, None)
    # remaining output caps what a sequence can use (no drafting past its last token is not
    # modelled: engines draft K regardless; the commit is capped in _accept)
    q_dec = (k_seq + 1) if k_seq is not None else np.full(len(dec), k_step + 1, dtype=np.int64)
    return Step(run, dec, k_step, k_seq, q_dec)


def _reserve_kv(ctx: Run, st: LoopState, step: Step) -> None:
    """Decode sequences reserve K + 1 slots; preempt the newest while over capacity."""
    bs, cached, decoding, running = ctx.engine.block_size, st.cached, st.decoding, st.running
    run, dec = step.run, step.dec
    need = -(-cached[run] // bs)
    if len(dec):
        need[decoding[run]] = -(-(cached[dec] + step.q_dec) // bs)
    used = int(need.sum())
    while used > ctx.cap and len(running) > 1:
        i = running.pop()
        used -= int(need[len(running)])
        cached[i] = 0
        decoding[i] = False
        st.preempted[i] += 1
        st.waiting.appendleft(i)
    if len(running) != len(run):  # recompute the batch after preemption
        step.run = run[:len(running)]
        keep = decoding[dec]
        step.dec, step.q_dec = dec[keep], step.q_dec[keep]
        if step.k_seq is not None:
            step.k_seq = step.k_seq[keep]
            step.k_step = int(step.k_seq.max()) if len(step.k_seq) else 0
        if len(step.dec) == 0:
            step.k_step, step.k_seq = 0, None
    step.used = used


def _schedule_prefill(ctx: Run, st: LoopState, step: Step) -> None:
    """Continue running prefills, then admit waiting requests (FIFO), in the token budget left."""
    decode_tokens = int(step.q_dec.sum())
    budget = ctx.engine.max_num_batched_tokens - decode_tokens
    budget = _continue_prefills(ctx, st, step, budget)
    _admit_waiting(ctx, st, step, budget)
    step.pre_tokens = sum(step.pre_chunk)
    step.tokens = decode_tokens + step.pre_tokens
    if step.tokens == 0:  # nothing fits (cannot happen with the up-front check); avoid spinning
        raise PlannerError("serving simulation stalled: no request fits the KV cache")
    st.kv_peak = max(st.kv_peak, step.used)


def _continue_prefills(ctx: Run, st: LoopState, step: Step, budget: int) -> int:
    eng, bs, cached = ctx.engine, ctx.engine.block_size, st.cached
    run, pre_idx, pre_chunk, used = step.run, step.pre_idx, step.pre_chunk, step.used
    for i in (run[~st.decoding[run]].tolist() if len(run) > len(step.dec) else ()):
        if budget > 0 or (eng.prefill == "whole" and not pre_idx):
            c = int(st.target[i] - cached[i])
            if eng.prefill == "chunked":
                c = min(c, budget)
            elif c > budget and pre_idx:
                break
            extra = -(-(cached[i] + c) // bs) - (-(-cached[i] // bs))
            if used + extra > ctx.cap:
                break
            used += extra
            pre_idx.append(i)
            pre_chunk.append(c)
            budget -= c
    step.used = used
    return budget


def _admit_waiting(ctx: Run, st: LoopState, step: Step, budget: int) -> None:
    eng, waiting, running = ctx.engine, st.waiting, st.running
    whole = eng.prefill == "whole"
    pre_idx, pre_chunk, used = step.pre_idx, step.pre_chunk, step.used
    while waiting and len(running) < ctx.max_seqs and (budget > 0 or (whole and not pre_idx)):
        i = waiting[0]
        tgt = int(ctx.reqs.prompt[i] + st.gen[i])
        c = tgt if whole else min(tgt, budget)
        if whole and c > budget and pre_idx:
            break
        extra = -(-c // eng.block_size)
        if used + extra > ctx.cap:
            break
        waiting.popleft()
        used += extra
        st.target[i] = tgt
        running.append(i)
        pre_idx.append(i)
        pre_chunk.append(c)
        budget -= c
    step.used = used


def _price(ctx: Run, st: LoopState, step: Step) -> tuple[float, int, bool]:
    if step.pre_idx:
        pi = np.asarray(step.pre_idx, dtype=np.int64)
        pc = np.asarray(step.pre_chunk, dtype=np.int64)
        pre_attn = ctx.pricer.prefill_attention_s(pc, st.cached[pi])
    else:
        pre_attn = 0.0
    n_dec = len(step.dec)
    mean_ctx = float(st.cached[step.dec].sum()) / n_dec if n_dec else 0.0
    return ctx.pricer.step_s(n_dec, step.k_step, step.tokens, mean_ctx, ctx.speculative, pre_attn)


def _accept(ctx: Run, st: LoopState, step: Step) -> tuple[int, list]:
    """Draft j of sequence s is accepted iff u < a_j and drafts before it were; commit the decodes.

    Returns (tokens committed, requests that finished)."""
    dec, k_step, k_seq, r = step.dec, step.k_step, step.k_seq, ctx.reqs
    if not len(dec):
        return 0, []
    gen = st.gen
    g, out_len = gen[dec], r.out_len[dec]  # read once: fancy indexing is most of a step's array work
    remaining = out_len - g
    if k_step:
        cols = np.arange(k_step)[None, :]
        pos = (r.offsets[dec] + g)[:, None] + cols
        ok = r.uniforms[pos] < r.rates[r.cat[dec], :k_step]
        if k_seq is not None:
            ok &= cols < k_seq[:, None]
        run_ok = np.logical_and.accumulate(ok, axis=1)
        n_acc = run_ok.sum(axis=1)
        ctx.policy.observe(dec, k_step, k_seq, run_ok, n_acc)
    else:
        n_acc = np.zeros(len(dec), dtype=np.int64)
    new = np.minimum(n_acc + 1, remaining)
    gen[dec] = g + new
    st.cached[dec] += new
    return int(new.sum()), dec[new >= remaining].tolist()


def _commit_prefill(ctx: Run, st: LoopState, step: Step, t_end: float, finished: list) -> int:
    """Add the prompt chunks to the cache; a finished prompt samples its next token."""
    committed = 0
    cached, gen, out_len = st.cached, st.gen, ctx.reqs.out_len
    for i, c in zip(step.pre_idx, step.pre_chunk):
        cached[i] += c
        if cached[i] >= st.target[i]:  # prompt (+ recomputed output) done: sample the next token
            gen[i] += 1
            committed += 1
            if np.isnan(st.first_tok[i]):
                st.first_tok[i] = t_end
            st.decoding[i] = True
            if gen[i] >= out_len[i]:
                finished.append(i)
    return committed


def _retire(st: LoopState, finished: list, t_end: float) -> None:
    """Free the finished requests; a closed-loop user sends its next request after its think time."""
    running = st.running
    if 4 * len(finished) < len(running):  # a few: remove in place (C speed), order kept
        for i in finished:
            running.remove(i)
    else:
        done = set(finished)
        st.running = [i for i in running if i not in done]
    n = len(st.gen)
    for i in finished:
        st.finish[i] = t_end
        st.decoding[i] = False
        st.cached[i] = 0
        if st.next_closed < n:
            heapq.heappush(st.pending, (t_end + st.think, st.next_closed))
            st.next_closed += 1
    st.n_done += len(finished)


def _step(ctx: Run, st: LoopState) -> None:
    step = _choose_k(ctx, st)
    _reserve_kv(ctx, st, step)
    _schedule_prefill(ctx, st, step)
    dt, padded, graph = _price(ctx, st, step)
    t_end = st.t + dt
    committed, finished = _accept(ctx, st, step)
    committed += _commit_prefill(ctx, st, step, t_end, finished)
    n_dec, k_seq = len(step.dec), step.k_seq
    k_mean = float(k_seq.mean()) if k_seq is not None and len(k_seq) else float(step.k_step if n_dec else 0)
    st.rec.append((st.t, dt, n_dec, len(step.pre_idx), step.pre_tokens, step.tokens, padded, graph,
                   step.k_step, k_mean, committed, step.used, len(st.waiting)))
    if finished:
        _retire(st, finished, t_end)
    st.t = t_end


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
    pricer = StepPricer(sc, engine, k_max, max_seqs, max_context, speculative)
    if len(_PRICERS) >= _PRICER_SLOTS:
        _PRICERS.pop(next(iter(_PRICERS)))
    _PRICERS[key] = (sc, pricer)
    return pricer


def simulate(scenario: Scenario, policy: str = "dsd", workload: Workload | None = None, seed: int = 0,
             engine: EngineConfig | None = None) -> ServingResult:
    """Run the workload through the engine under ``policy``; see the module docstring.

    ``workload``: default the scenario's [traffic] section; ``engine``: default its [serving] section.
    The same seed draws the same requests (lengths, categories, arrivals, acceptance uniforms) for
    every policy.
    """
    sc = scenario
    parse_policy(policy)  # a bad name fails before the scenario's sections are read
    engine = engine or engine_from_scenario(sc)
    workload = workload or workload_from_scenario(sc)
    max_seqs = int(workload.max_num_seqs or engine.max_num_seqs)
    if workload.arrival in ("closed", "waves"):
        max_seqs = min(max_seqs, int(workload.concurrency))
    pol = make_policy(sc, policy, max_seqs, engine)
    reqs = draw_requests(sc, workload, seed, pol.k_max)
    max_context = int((reqs.prompt + reqs.out_len).max())
    cap = _kv_blocks(sc, engine, pol.speculative, max_seqs, pol.k_max, max_context)
    pricer = pricer_for(sc, engine, pol.k_max, max_seqs, max_context, pol.speculative)
    n = int(workload.n_requests)
    pol.start(n)
    ctx = Run(engine, pol, pricer, reqs, cap, max_seqs, pol.speculative)
    st = LoopState.start(workload, reqs.arrival_times, n)
    while st.n_done < n:
        if _admit_arrivals(st):
            _step(ctx, st)

    steps = steps_frame(st.rec, cap)
    cats = workload.categories
    requests = requests_frame([cats[c].name for c in reqs.cat], st.arrival, reqs.prompt, reqs.out_len, st.gen,
                              st.first_tok, st.finish, st.preempted)
    summary = summarize(pol.label, requests, steps, cap, st.kv_peak)
    return ServingResult(pol.label, summary, requests, steps, cap, engine, workload)


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
