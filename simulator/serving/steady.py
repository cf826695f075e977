"""Steady state of the serving engine under Poisson load, from its own step-time tables (no simulation).

For batch size B (the sequences decoding at once) with the policy's K(B), the engine's step pricer
(:class:`simulator.serving.pricer.StepPricer`, the same tables :func:`simulate` prices steps with) gives

    s(B)    = seconds of a decode-only step: B sequences x (K + 1) tokens at the mean decoding context
              P + O / 2 (P, O: mean prompt and output tokens of the traffic)
    tau(B)  = tokens a sequence commits per step = 1 + sum_j prod_{i <= j} a_i   (j = 1..K; a_i the
              per-position acceptance rates, averaged over the traffic's categories)
    D(B)    = what one prompt adds to a step it joins: the step at B (K + 1) + P tokens with the prompt's
              attention, minus s(B) (chunked prefill: prompts ride along in decode steps)

At arrival rate lambda the engine spends lambda x D of every second on prompts, so a step takes on
average  s_bar = s / (1 - lambda D),  a request decodes for  O x s_bar / tau  seconds, and Little's law
(sequences in flight = rate x time in the system) closes the loop,  B = lambda x O x s_bar / tau,  so

    lambda(B) = B tau / (O s + B tau D)            (the load that keeps B sequences decoding)
    TPOT(B)   = s_bar / tau = s / (tau (1 - lambda(B) D))

Above B_max = min(max_num_seqs, sequences whose KV cache fits) requests queue without bound: the
largest sustainable load is lambda(B_max). The mean TPOT stands in for its percentiles (the
simulation's TPOT spread comes from prefill interference and acceptance noise, which this leaves out):
an estimate to start a load search from, not an answer.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from simulator.plan.policies import make_policy, parse_policy
from simulator.serving.engine import EngineConfig, engine_from_scenario, kv_capacity_blocks, running_cap
from simulator.serving.loop import pricer_for
from simulator.serving.workload import Workload, draw_requests
from simulator.specs.scenario import Scenario


@dataclass(frozen=True)
class SteadyState:
    batch: np.ndarray  # B = 1..b_max
    k: np.ndarray  # K(B) of the policy
    step_s: np.ndarray  # s(B)
    tokens_per_step: np.ndarray  # tau(B)
    prefill_s: np.ndarray  # D(B)
    rate: np.ndarray  # lambda(B), requests/s
    tpot_s: np.ndarray  # TPOT(B)
    b_max: int
    output_len: float

    def max_rate(self, tpot_limit_s: float | None = None) -> float:
        """The largest sustainable rate whose steady-state TPOT is within ``tpot_limit_s`` (0 when none is)."""
        ok = np.isfinite(self.rate) & (self.rate > 0)
        if tpot_limit_s is not None:
            ok &= self.tpot_s <= tpot_limit_s
        return float(self.rate[ok].max()) if ok.any() else 0.0

    def max_concurrency(self, tpot_limit_s: float | None = None) -> int:
        """The largest batch (closed loop: concurrent sequences) whose step TPOT s / tau is within the limit."""
        tpot = self.step_s / self.tokens_per_step
        ok = tpot <= tpot_limit_s if tpot_limit_s is not None else np.ones(len(tpot), dtype=bool)
        return int(self.batch[ok].max()) if ok.any() else 0

    def batch_at_rate(self, rate: float) -> float:
        """Sequences decoding at once in the steady state at ``rate``: the smallest B whose lambda(B) reaches
        it (B_max when none does)."""
        ok = np.isfinite(self.rate) & (self.rate >= rate)
        return float(self.batch[ok][0]) if ok.any() else float(self.b_max)

    def burst_latency(self, n_requests: int) -> tuple[float, float]:
        """(TTFT of the 99th-percentile request, mean TPOT) when ``n_requests`` arrive at once: a run at a
        load far above the sustainable one, whose arrivals span less than a request's lifetime.

        The engine admits b = min(n, B_max) sequences; their prompts ride along the decode steps, each adding
        D(b); a sequence then decodes for  life = O s(b) / tau(b).  The others queue and enter in waves of b
        as sequences finish, a wave every life + b D(b) seconds. The request of rank n99 = ceil(0.99 n)
        enters in wave w = (n99 - 1) // b, as the r = n99 - w b-th prompt of it:

            TTFT_99 = w (life + b D) + r D + s        TPOT = (life + b D) / O

        (the whole wave's prompts interleave with a sequence's decoding). The same requests spread over
        time queue less, so a burst is the worst case of a run of ``n_requests``."""
        b = int(min(max(n_requests, 1), self.b_max))
        s, tau, d = (float(a[b - 1]) for a in (self.step_s, self.tokens_per_step, self.prefill_s))
        life = self.output_len * s / tau
        n99 = int(np.ceil(0.99 * max(n_requests, 1)))
        wave = (n99 - 1) // b
        ttft = wave * (life + b * d) + (n99 - wave * b) * d + s
        return ttft, (life + b * d) / max(self.output_len, 1.0)


def steady_state(sc: Scenario, policy: str, workload: Workload, seed: int = 0,
                 engine: EngineConfig | None = None) -> SteadyState:
    """The steady state of ``workload``'s traffic under ``policy`` for every batch size (module docstring)."""
    engine = engine or engine_from_scenario(sc)
    max_seqs = running_cap(engine, workload, parse_policy(policy)[0] != "plain")
    pol = make_policy(sc, policy, max_seqs, engine)
    reqs = draw_requests(sc, workload, seed, pol.k_max)
    prompt, out = float(reqs.prompt.mean()), float(reqs.out_len.mean())
    max_context = int((reqs.prompt + reqs.out_len).max())
    pricer = pricer_for(sc, engine, pol.k_max, max_seqs, max_context, pol.speculative)
    ctx = prompt + out / 2
    bs = engine.block_size
    cap, _ = kv_capacity_blocks(sc, engine, pol.speculative, max(engine.max_num_batched_tokens,
                                                                   max_seqs * (pol.k_max + 1)))
    ks = np.asarray(pol.k_table(), dtype=int)
    b_kv = int(cap // -(-(ctx + ks.max() + 1) // bs))
    b_max = max(1, min(max_seqs, b_kv))
    rates = reqs.rates[reqs.cat].mean(axis=0) if reqs.rates.size else np.zeros(0)
    chain = np.concatenate([[1.0], np.cumprod(rates)])
    tau_k = np.cumsum(chain)  # tau for K = 0, 1, ...
    chunk = int(min(round(prompt), engine.max_num_batched_tokens))
    p_attn = pricer.prefill_attention_s(np.array([chunk]), np.array([0]))
    n = b_max
    b = np.arange(1, n + 1)
    k_b = ks[np.minimum(b, len(ks)) - 1]
    # the steps without and with a prompt chunk riding along, in one call (each step priced on its own)
    tokens = b * (k_b + 1)
    both = pricer.decode_steps_s(np.concatenate([b, b]), np.concatenate([k_b, k_b]),
                                 np.concatenate([tokens, tokens + chunk]), ctx, pol.speculative,
                                 np.concatenate([np.zeros(n), np.full(n, p_attn)]))
    step, with_prompt = both[:n], both[n:]
    pre = (with_prompt - step) * prompt / max(chunk, 1)
    tau = tau_k[np.minimum(k_b, len(tau_k) - 1)]
    batch = b.astype(float)
    rate, tpot = littles_law(batch, tau, step, pre, out)
    return SteadyState(batch, k_b, step, tau, pre, rate, tpot, b_max, out)


def littles_law(batch, tokens_per_step, step_s, prefill_s, output_len: float):
    """(rate lambda(B) that keeps B sequences decoding, TPOT(B)): the closed forms of the module docstring."""
    batch, tau = np.asarray(batch, dtype=float), np.asarray(tokens_per_step, dtype=float)
    rate = batch * tau / (output_len * np.asarray(step_s) + batch * tau * np.asarray(prefill_s))
    busy = np.clip(1.0 - rate * prefill_s, 1e-9, None)
    return rate, np.asarray(step_s) / (tau * busy)
