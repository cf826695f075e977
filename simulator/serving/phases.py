"""The phases of one engine step of the serving simulation (:mod:`simulator.serving.loop` runs them):
what stays fixed in a run (:class:`Run`), the per-request state and queues (:class:`LoopState`), the step
being scheduled (:class:`Step`), and admit arrivals -> choose K -> reserve KV (preempt) -> schedule
prefill -> price -> accept -> commit -> retire. The loop module's docstring describes the model."""
from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from simulator.errors import PlannerError
from simulator.plan.policies import Policy
from simulator.serving.engine import EngineConfig
from simulator.serving.pricer import StepPricer
from simulator.serving.workload import Requests, Workload

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
    prompt: list = field(default_factory=list)  # reqs.prompt, reqs.out_len as Python ints: the scalar
    out_len: list = field(default_factory=list)  # paths (admit, commit) read them one request at a time
    acc_run: np.ndarray | None = None  # accept_runs(reqs), built at the first step that drafts


@dataclass(slots=True)
class LoopState:
    """Per-request state, the queues and the clock.

    gen and cached are arrays (the decode batch reads and writes them vectorized); the rest is only
    touched one request at a time, so it lives in Python lists (numpy scalar access costs more)."""

    pending: list  # heap of (release time, request)
    next_closed: int  # next request a closed-loop user sends (n when the arrivals are open-loop)
    think: float
    arrival: list
    gen: np.ndarray  # output tokens generated
    cached: np.ndarray  # tokens in the KV cache
    target: list  # tokens to compute before decoding (prompt + generated at admission)
    first_tok: list
    finish: list
    preempted: list
    decoding: list
    waiting: deque = field(default_factory=deque)
    running: list = field(default_factory=list)  # admission order
    prefilling: list = field(default_factory=list)  # the running ones not decoding yet, admission order
    dec: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))  # the decoding ones
    joined: list = field(default_factory=list)  # prompts finished last step: decode from the next one
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
        nan = [float("nan")] * n
        return cls(pending, next_closed, think, nan.copy(), np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64),
                   [0] * n, nan.copy(), nan.copy(), [0] * n, [False] * n)


@dataclass(slots=True)
class Step:
    """One engine step being scheduled."""

    dec: np.ndarray  # the decoding requests (order of joining the decode batch)
    k_step: int
    k_seq: np.ndarray | None  # per-sequence K (per-request policy), else None
    cached_dec: np.ndarray | None = None  # cached[dec], read once
    decode_tokens: int = 0  # query tokens of the decodes (K_i + 1 each)
    used: int = 0  # KV blocks held once the step is scheduled
    tokens: int = 0  # tokens the target pass computes
    pre_tokens: int = 0  # of which prompt tokens
    pre_idx: list = field(default_factory=list)
    pre_chunk: list = field(default_factory=list)


def accept_runs(reqs: Requests) -> np.ndarray:
    """Drafts accepted in a row from each uniform position on (at most k_max): a sequence at position p
    drafting K accepts min(runs[p], K) -- the u < a_j comparisons of every step, done once up front."""
    u, rates = reqs.uniforms, reqs.rates
    m, k_max = len(u), rates.shape[1]
    u = np.concatenate([u, np.ones(k_max, dtype=u.dtype)])  # past the end: rejected (never reached)
    cat_pos = None if rates.shape[0] == 1 else np.repeat(reqs.cat, np.diff(reqs.offsets))
    run, runs = np.ones(m, dtype=bool), np.zeros(m, dtype=np.int16)
    for j in range(k_max):
        # a float64 array (not a scalar): float32 u compares in float64, exactly as the batch compare did
        thr = rates[0, j:j + 1] if cat_pos is None else rates[cat_pos, j]
        run &= u[j:j + m] < thr
        runs += run
    return runs.astype(np.int64)


_sum = np.add.reduce  # ndarray.sum without the method's Python-level dispatch (same reduction)


# --- phases -------------------------------------------------------------------------------------

def admit_arrivals(st: LoopState) -> bool:
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
    if st.joined:
        st.dec = np.concatenate([st.dec, np.array(st.joined, dtype=np.int64)])
        st.joined = []
    dec = st.dec
    k_step, k_seq = ctx.policy.choose_k(dec) if len(dec) else (0, None)
    # remaining output caps what a sequence can use (no drafting past its last token is not
    # modelled: engines draft K regardless; the commit is capped in _accept)
    return Step(dec, k_step, k_seq)


def _decode_blocks(step: Step, bs: int) -> int:
    """KV blocks of the decodes with their K + 1 slots reserved: sum of ceil((cached + q) / bs)."""
    if step.k_seq is None and len(step.dec) == 1:  # one sequence (a third of a sizing run's steps): ints
        step.decode_tokens = step.k_step + 1
        return (step.cached_dec.item(0) + step.k_step + bs) // bs
    if step.k_seq is None:
        step.decode_tokens = len(step.dec) * (step.k_step + 1)
        return int(_sum((step.cached_dec + (step.k_step + bs)) // bs))
    step.decode_tokens = int(_sum(step.k_seq)) + len(step.dec)
    return int(_sum((step.cached_dec + step.k_seq + bs) // bs))


def _reserve_kv(ctx: Run, st: LoopState, step: Step) -> None:
    """Decode sequences reserve K + 1 slots; preempt the newest while over capacity."""
    bs, cached = ctx.engine.block_size, st.cached
    step.cached_dec = cached[step.dec]
    used = _decode_blocks(step, bs)
    for i in st.prefilling:
        used += -(-cached.item(i) // bs)
    if used > ctx.cap and len(st.running) > 1:
        used = _preempt(ctx, st, step, used)
    step.used = used


def _preempt(ctx: Run, st: LoopState, step: Step, used: int) -> int:
    """Preempt the newest sequences (recompute) until the step fits; returns the blocks then held."""
    bs, cached, running = ctx.engine.block_size, st.cached, st.running
    dec, k_seq = step.dec, step.k_seq
    gone = []
    while used > ctx.cap and len(running) > 1:
        i = running.pop()
        c = cached.item(i)
        if st.decoding[i]:
            at = int(np.flatnonzero(dec == i)[0])
            q = (int(k_seq[at]) if k_seq is not None else step.k_step) + 1
            used -= -(-(c + q) // bs)
            gone.append(i)
        else:
            used -= -(-c // bs)
            st.prefilling.pop()  # the newest running one, so the newest prefilling one
        cached[i] = 0
        st.decoding[i] = False
        st.preempted[i] += 1
        st.waiting.appendleft(i)
    if gone:
        keep = ~np.isin(dec, gone)
        step.dec, step.cached_dec = dec[keep], step.cached_dec[keep]
        st.dec = step.dec
    if k_seq is not None:
        step.k_seq = k_seq[keep] if gone else k_seq
        step.k_step = int(step.k_seq.max()) if len(step.k_seq) else 0
    if len(step.dec) == 0:
        step.k_step, step.k_seq = 0, None
    step.decode_tokens = int(step.k_seq.sum()) + len(step.dec) if step.k_seq is not None \
        else len(step.dec) * (step.k_step + 1)
    return used


def _schedule_prefill(ctx: Run, st: LoopState, step: Step) -> None:
    """Continue running prefills, then admit waiting requests (FIFO), in the token budget left."""
    decode_tokens = step.decode_tokens
    budget = ctx.engine.max_num_batched_tokens - decode_tokens
    if st.prefilling:
        budget = _continue_prefills(ctx, st, step, budget)
    _admit_waiting(ctx, st, step, budget)
    step.pre_tokens = sum(step.pre_chunk)
    step.tokens = decode_tokens + step.pre_tokens
    if step.tokens == 0:  # nothing fits (cannot happen with the up-front check); avoid spinning
        raise PlannerError("serving simulation stalled: no request fits the KV cache")
    if step.used > st.kv_peak:
        st.kv_peak = step.used


def _continue_prefills(ctx: Run, st: LoopState, step: Step, budget: int) -> int:
    eng, bs, cached, target = ctx.engine, ctx.engine.block_size, st.cached, st.target
    whole = eng.prefill == "whole"
    pre_idx, pre_chunk, used = step.pre_idx, step.pre_chunk, step.used
    for i in st.prefilling:
        if budget > 0 or (whole and not pre_idx):
            ci = cached.item(i)
            c = target[i] - ci
            if not whole:
                c = min(c, budget)
            elif c > budget and pre_idx:
                break
            extra = -(-(ci + c) // bs) - (-(-ci // bs))
            if used + extra > ctx.cap:
                break
            used += extra
            pre_idx.append(i)
            pre_chunk.append(c)
            budget -= c
    step.used = used
    return budget


def _admit_waiting(ctx: Run, st: LoopState, step: Step, budget: int) -> None:
    eng, waiting, running, prompt, gen, target = ctx.engine, st.waiting, st.running, ctx.prompt, st.gen, st.target
    whole, bs, cap, max_seqs = eng.prefill == "whole", eng.block_size, ctx.cap, ctx.max_seqs
    pre_idx, pre_chunk, used, prefilling = step.pre_idx, step.pre_chunk, step.used, st.prefilling
    while waiting and len(running) < max_seqs and (budget > 0 or (whole and not pre_idx)):
        i = waiting[0]
        tgt = prompt[i] + gen.item(i)
        c = tgt if whole else min(tgt, budget)
        if whole and c > budget and pre_idx:
            break
        extra = -(-c // bs)
        if used + extra > cap:
            break
        waiting.popleft()
        used += extra
        target[i] = tgt
        running.append(i)
        prefilling.append(i)
        pre_idx.append(i)
        pre_chunk.append(c)
        budget -= c
    step.used = used


def _price(ctx: Run, st: LoopState, step: Step) -> tuple[float, int, bool]:
    if step.pre_idx:
        cached = st.cached
        pre_attn = ctx.pricer.prefill_attention_pairs_s(step.pre_chunk, [cached.item(i) for i in step.pre_idx])
    else:
        pre_attn = 0.0
    n_dec = len(step.dec)
    mean_ctx = float(_sum(step.cached_dec)) / n_dec if n_dec else 0.0
    return ctx.pricer.step_s(n_dec, step.k_step, step.tokens, mean_ctx, ctx.speculative, pre_attn)


def _accept(ctx: Run, st: LoopState, step: Step) -> tuple[int, list]:
    """Draft j of sequence s is accepted iff u < a_j and drafts before it were; commit the decodes.

    Returns (tokens committed, requests that finished); the finished leave the decode batch."""
    dec, k_step, k_seq, r = step.dec, step.k_step, step.k_seq, ctx.reqs
    if not len(dec):
        return 0, []
    if len(dec) == 1:
        return _accept_one(ctx, st, step)
    gen = st.gen
    g, out_len = gen[dec], r.out_len[dec]  # read once: fancy indexing is most of a step's array work
    if k_step:
        if ctx.acc_run is None:
            ctx.acc_run = accept_runs(r)
        n_acc = np.minimum(ctx.acc_run[r.offsets[dec] + g], k_step if k_seq is None else k_seq)
        pol = ctx.policy
        run_ok = (np.arange(k_step)[None, :] < n_acc[:, None]) if pol.needs_run_ok else None
        pol.observe(dec, k_step, k_seq, run_ok, n_acc)
        new = np.minimum(n_acc + 1, out_len - g)
        committed = int(_sum(new))
    else:  # a decoding sequence has >= 1 token left (it would have retired), so each commits one
        new, committed = 1, len(dec)
    g = g + new
    gen[dec] = g
    st.cached[dec] = step.cached_dec + new
    done = g >= out_len  # new >= out_len - g before the commit
    finished = dec[done].tolist()
    if finished:
        st.dec = dec[~done]
    return committed, finished


def _accept_one(ctx: Run, st: LoopState, step: Step) -> tuple[int, list]:
    """:func:`_accept` for a decode batch of one sequence, in Python ints (the same integers; the policy
    sees the same one-element arrays)."""
    dec, k_step, k_seq, r = step.dec, step.k_step, step.k_seq, ctx.reqs
    i = dec.item(0)
    g, out_len = st.gen.item(i), r.out_len.item(i)
    if k_step:
        if ctx.acc_run is None:
            ctx.acc_run = accept_runs(r)
        n = min(ctx.acc_run.item(r.offsets.item(i) + g), k_step if k_seq is None else k_seq.item(0))
        n_acc = np.array([n], dtype=np.int64)
        pol = ctx.policy
        run_ok = (np.arange(k_step)[None, :] < n_acc[:, None]) if pol.needs_run_ok else None
        pol.observe(dec, k_step, k_seq, run_ok, n_acc)
        new = min(n + 1, out_len - g)
    else:
        new = 1
    g += new
    st.gen[i] = g
    st.cached[i] = step.cached_dec.item(0) + new
    if g >= out_len:
        st.dec = dec[:0]
        return new, [i]
    return new, []


def _commit_prefill(ctx: Run, st: LoopState, step: Step, t_end: float, finished: list) -> int:
    """Add the prompt chunks to the cache; a finished prompt samples its next token."""
    committed = 0
    cached, gen, out_len, target, first_tok = st.cached, st.gen, ctx.out_len, st.target, st.first_tok
    decoding, prefilling, joined = st.decoding, st.prefilling, st.joined
    for i, c in zip(step.pre_idx, step.pre_chunk):
        ci = cached.item(i) + c
        cached[i] = ci
        if ci >= target[i]:  # prompt (+ recomputed output) done: sample the next token
            g = gen.item(i) + 1
            gen[i] = g
            committed += 1
            if first_tok[i] != first_tok[i]:  # NaN: the first time
                first_tok[i] = t_end
            decoding[i] = True
            prefilling.remove(i)
            if g >= out_len[i]:
                finished.append(i)
            else:
                joined.append(i)
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
    finish, decoding, cached = st.finish, st.decoding, st.cached
    for i in finished:
        finish[i] = t_end
        decoding[i] = False
        cached[i] = 0
        if st.next_closed < n:
            heapq.heappush(st.pending, (t_end + st.think, st.next_closed))
            st.next_closed += 1
    st.n_done += len(finished)


def run_step(ctx: Run, st: LoopState) -> None:
    step = _choose_k(ctx, st)
    _reserve_kv(ctx, st, step)
    _schedule_prefill(ctx, st, step)
    dt, padded, graph = _price(ctx, st, step)
    t_end = st.t + dt
    committed, finished = _accept(ctx, st, step)
    if step.pre_idx:
        committed += _commit_prefill(ctx, st, step, t_end, finished)
    n_dec, k_seq = len(step.dec), step.k_seq
    k_mean = float(k_seq.mean()) if k_seq is not None and len(k_seq) else float(step.k_step if n_dec else 0)
    st.rec.append((st.t, dt, n_dec, len(step.pre_idx), step.pre_tokens, step.tokens, padded, graph,
                   step.k_step, k_mean, committed, step.used, len(st.waiting)))
    if finished:
        _retire(st, finished, t_end)
    st.t = t_end
