"""Several plain decode steps of the serving loop at once (a span), with the loop's own numbers.

Between two events -- an arrival, a prompt to schedule, a sequence finishing, the KV cache filling, a
load search's early-stop check -- an engine whose policy sets K from the batch size alone and picks
K = 0 runs the same decode step again and again: the same sequences, one token each, the context one
longer each step (about 60% of the engine steps of the bench sweep's load searches). A span runs them in
one go of Python without the step's scheduling phases (each step priced by the loop's own
:meth:`~simulator.serving.pricer.StepPricer.step_s`, the clock summed in step order, the loop's records
written), so a run gives the same results with or without spans
(``benchmarks/serving_equivalence.py`` and tests/test_decode_span.py hold them equal).
"""
from __future__ import annotations

import math
from bisect import bisect_right

import numpy as np

from simulator.serving.phases import LoopState, Run

_sum = np.add.reduce

MIN_SPAN = 2  # shorter: the loop's own step is as cheap
MAX_SPAN = 1024  # steps per span (bounds the arrays of its KV check)


def span_length(ctx: Run, st: LoopState, max_steps: int) -> int:
    """How many of the next steps are plain decode steps of the current batch that no event interrupts
    (0: run the next step the usual way). Arrivals and the KV cache are checked by :func:`run_span`."""
    if st.joined or st.prefilling or not len(st.dec) or max_steps < MIN_SPAN:
        return 0
    if st.waiting and len(st.running) < ctx.max_seqs:  # a waiting request would be admitted
        return 0
    pol = ctx.policy
    if not pol.k_from_batch_size or pol.choose_k(st.dec) != (0, None):
        return 0
    dec = st.dec
    left = int((ctx.reqs.out_len[dec] - st.gen[dec]).min())  # the step that commits a last token retires it
    return min(max_steps, left - 1, MAX_SPAN)


def run_span(ctx: Run, st: LoopState, m: int) -> int:
    """Run up to ``m`` (>= 2) decode steps at K = 0 as :func:`simulator.serving.phases.run_step` would, stopping
    before the first step that would admit an arrival or preempt; returns the steps run (0: the next step
    preempts, the loop runs it). Each step is priced by the loop's own :meth:`StepPricer.step_s`."""
    dec, bs = st.dec, ctx.engine.block_size
    n = len(dec)
    cached0 = st.cached[dec]
    # blocks held at each step (every sequence reserves its next slot): a sequence takes a new block at the
    # step where its cache reaches a block boundary
    crossing = np.bincount(cached0 % bs, minlength=bs)[(-np.arange(1, m)) % bs]
    used = np.cumsum(np.concatenate([[int(_sum((cached0 + bs) // bs))], crossing])).tolist()
    if len(st.running) > 1 and used[-1] > ctx.cap:
        m = bisect_right(used, ctx.cap)  # the first step over the cap preempts: the loop runs it
        if not m:
            return 0
    release = st.pending[0][0] if st.pending else math.inf
    price, spec, rec, waiting = ctx.pricer.step_s, ctx.speculative, st.rec, len(st.waiting)
    total, t = int(_sum(cached0)), st.t
    for i in range(m):
        if i and t >= release:  # this step would admit the release first
            m = i
            break
        dt, padded, graph = price(n, 0, n, float(total + n * i) / n, spec, 0.0)
        rec.append((t, dt, n, 0, 0, n, padded, graph, 0, 0.0, n, used[i], waiting))
        t += dt
    if used[m - 1] > st.kv_peak:
        st.kv_peak = used[m - 1]
    st.gen[dec] += m
    st.cached[dec] = cached0 + m
    st.t = t
    return m
