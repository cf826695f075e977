"""Batched speculative decoding: prefill, draft K tokens, verify K+1 positions in one target pass,
accept/reject (Leviathan et al. 2023), roll back by resetting per-sequence cache lengths.

Invariants (b = one sequence, L[b] = committed tokens incl. prompt):
  target cache holds KV for tokens[:L-1]; the last committed token is fed at the next verify.
  draft cache (model drafts) holds valid KV for tokens[:dvalid], dvalid <= L-1.
K = 0 is plain decoding through the same path (verify one position, sample from p).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import torch

from .model import Transformer

# ---------------------------------------------------------------------------------------------
# acceptance rule
# ---------------------------------------------------------------------------------------------


def accept_greedy(draft_tokens: torch.Tensor, target_logits: torch.Tensor):
    """draft_tokens [B, K], target_logits [B, K+1, V] -> (n_accepted [B], next_token [B]).

    Accept d_i iff d_i == argmax p_i and all earlier were accepted; the next token is argmax p_n
    (the correction at the first rejection, or the bonus token when all K are accepted).
    """
    best = target_logits.argmax(-1)  # [B, K+1]
    K = draft_tokens.shape[1]
    match = (draft_tokens == best[:, :K]).to(torch.long)
    n = match.cumprod(-1).sum(-1)  # [B]
    return n, best.gather(1, n[:, None]).squeeze(1)


def accept_sampling(draft_tokens: torch.Tensor, p: torch.Tensor, q: torch.Tensor | None, generator=None):
    """draft_tokens [B, K] with x_i ~ q_i; p [B, K+1, V] target probs; q [B, K, V] draft probs
    (None: deterministic draft, q_i = one-hot(x_i)). Returns (n_accepted [B], next_token [B]).

    Accept x_i with prob min(1, p_i(x_i) / q_i(x_i)); at the first rejection n sample from
    normalize(max(0, p_n - q_n)); if all K accepted sample the bonus token from p_K.
    """
    B, K = draft_tokens.shape
    rows = torch.arange(B, device=p.device)
    if K > 0:
        px = p[:, :K].gather(-1, draft_tokens[..., None]).squeeze(-1)  # [B, K]
        qx = q.gather(-1, draft_tokens[..., None]).squeeze(-1) if q is not None else torch.ones_like(px)
        u = torch.rand(B, K, generator=generator, device=p.device, dtype=p.dtype)
        acc = (u * qx < px).to(torch.long)  # u < p/q without dividing
        n = acc.cumprod(-1).sum(-1)
    else:
        n = torch.zeros(B, dtype=torch.long, device=p.device)
    dist = p[rows, n]  # [B, V]
    if K > 0:
        j = n.clamp(max=K - 1)
        qn = q[rows, j] if q is not None else torch.nn.functional.one_hot(draft_tokens[rows, j], p.shape[-1]).to(p.dtype)
        resid = (dist - qn).clamp_min(0)
        ok = (n < K) & (resid.sum(-1) > 0)  # residual is all-zero only if p == q (rejection impossible)
        dist = torch.where(ok[:, None], resid, dist)
    nxt = torch.multinomial(dist, 1, generator=generator).squeeze(1)  # multinomial normalizes
    return n, nxt


# ---------------------------------------------------------------------------------------------
# drafts
# ---------------------------------------------------------------------------------------------


class NgramDraft:
    """Prompt lookup: match the last n tokens (n = max_n..min_n) against the history, propose the
    K tokens that followed the most recent earlier match. Host-only, deterministic (q = one-hot)."""

    name = "ngram"
    uses_device = False

    def __init__(self, max_n: int = 3, min_n: int = 1):
        self.max_n, self.min_n = max_n, min_n

    def prefill(self, seqs, lengths):
        pass

    def _one(self, h: np.ndarray, K: int) -> list[int]:
        L = len(h)
        for n in range(min(self.max_n, L - 1), self.min_n - 1, -1):
            pat = h[L - n:]
            win = np.lib.stride_tricks.sliding_window_view(h[:L - 1], n)  # windows starting at i < L-n
            hits = np.nonzero((win == pat).all(-1))[0]
            hits = hits[hits + n < L]
            if len(hits):
                s = int(hits[-1]) + n
                cont = h[s:s + K].tolist()
                while len(cont) < K:  # continuation ran into the end: keep copying the history
                    cont.append(int(h[s + len(cont) % (L - s)]))  # periodic extension
                return cont
        return [int(h[-1])] * K

    def propose(self, seqs, lengths, K, temperature, generator):
        hs = seqs.cpu().numpy()
        ls = lengths.tolist()
        out = [self._one(hs[b, :ls[b]], K) for b in range(len(ls))]
        return torch.tensor(out, dtype=torch.long, device=seqs.device).view(len(ls), K), None

    def commit(self, n_accepted, K):
        pass


class ModelDraft:
    """A small autoregressive draft with its own KV cache: K sequential passes of B tokens.

    early-exit:N = first N target layers (shared weights) + final norm + LM head;
    model:N      = an independent truncated copy (cloned weights) run as its own model.
    """

    uses_device = True

    def __init__(self, model: Transformer, name: str):
        self.model, self.name = model, name
        self.cache = None
        self.dvalid = None

    def prefill(self, seqs, lengths, capacity):
        B = seqs.shape[0]
        self.cache = self.model.new_cache(B, capacity)
        T = int(lengths.max()) - 1
        self.model(seqs[:, :T], self.cache, logits_for="none")
        self.dvalid = lengths - 1

    def reset(self, lengths):
        self.dvalid = torch.minimum(self.dvalid, lengths - 1)

    def _pick(self, logits, temperature, generator):
        if temperature <= 0:
            return logits.argmax(-1), None
        q = torch.softmax(logits.float() / temperature, -1)
        return torch.multinomial(q, 1, generator=generator).squeeze(1), q

    def propose(self, seqs, lengths, K, temperature, generator):
        # catch up: feed the T newest committed tokens (T = most pending tokens in the batch);
        # sequences with fewer pending recompute a few already-cached positions (same values).
        T = int((lengths - self.dvalid).max())
        self.cache.lengths = lengths - T
        idx = self.cache.lengths[:, None] + torch.arange(T, device=seqs.device)
        logits = self.model(seqs.gather(1, idx), self.cache, logits_for="last")[:, -1]
        toks, qs = [], []
        for i in range(K):
            t, q = self._pick(logits, temperature, generator)
            toks.append(t)
            qs.append(q)
            if i < K - 1:
                logits = self.model(t[:, None], self.cache, logits_for="last")[:, -1]
        self._L = lengths
        d = torch.stack(toks, 1)
        return d, (torch.stack(qs, 1) if temperature > 0 else None)

    def commit(self, n_accepted, K):
        # fed: committed tokens + d_1..d_{K-1}; accepted drafts stay valid
        self.dvalid = self._L + torch.clamp(n_accepted, max=K - 1)


def make_draft(spec: str, target: Transformer):
    """'ngram' | 'ngram:N' | 'early-exit:N' | 'model:N' | 'none'."""
    spec = spec.strip()
    if spec in ("none", ""):
        return None
    if spec == "ngram" or spec.startswith("ngram:"):
        n = int(spec.split(":")[1]) if ":" in spec else 3
        return NgramDraft(max_n=n)
    kind, _, arg = spec.partition(":")
    if kind in ("early-exit", "model"):
        try:
            n = int(arg)
        except ValueError:
            raise ValueError(f"draft {spec!r}: expected {kind}:N with N an integer number of layers") from None
        if not 1 <= n <= target.n_layers:
            raise ValueError(f"draft {spec!r}: N must be in 1..{target.n_layers}")
        return ModelDraft(target.truncated(n, share_weights=(kind == "early-exit")), spec)
    raise ValueError(f"unknown draft {spec!r}; use ngram, early-exit:N or model:N")


# ---------------------------------------------------------------------------------------------
# engine
# ---------------------------------------------------------------------------------------------


@dataclass
class StepRecord:
    draft_s: float
    verify_s: float
    overhead_s: float
    n_accepted: list[int]
    experts_touched: list[int] | None = None  # distinct experts per MoE layer (verify pass)
    context_len: float = 0.0  # mean committed length at step start


@dataclass
class Generation:
    tokens: list[list[int]]  # new tokens per sequence (truncated to max_new_tokens)
    steps: list[StepRecord] = field(default_factory=list)
    attempts: list[int] = field(default_factory=list)  # per position 1..K
    accepts: list[int] = field(default_factory=list)


def _sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class SpecDecoder:
    def __init__(self, target: Transformer, draft=None, k: int = 0, temperature: float = 0.0, seed: int = 0,
                 forced_acceptance: float | None = None, clock: str = "wall"):
        if k < 0:
            raise ValueError("K must be >= 0")
        if k > 0 and draft is None:
            raise ValueError("K > 0 needs a draft")
        self.target, self.draft, self.k = target, draft, k
        self.temperature = temperature
        self.forced_acceptance = forced_acceptance
        # "wall": elapsed time; "cpu": CPU time of the calling thread (CPU runs with one torch thread:
        # the step's own compute, unaffected by other processes competing for the cores)
        if clock not in ("wall", "cpu"):
            raise ValueError(f"clock must be 'wall' or 'cpu', got {clock!r}")
        self.clock = time.perf_counter if clock == "wall" else time.thread_time
        self.device = target.device
        self.gen = torch.Generator(device=self.device).manual_seed(seed)
        self.attempts = torch.zeros(max(k, 1), dtype=torch.long, device=self.device)
        self.accepts = torch.zeros_like(self.attempts)

    # --- phases ------------------------------------------------------------------------------
    def prefill(self, prompts: list[list[int]], capacity: int):
        """Write prompts[:-1] into the target (and draft) caches; nothing is sampled here."""
        B = len(prompts)
        P = max(len(p) for p in prompts)
        assert min(len(p) for p in prompts) >= 2, "prompts need at least 2 tokens"
        self.capacity = capacity
        self.seqs = torch.zeros(B, capacity + self._max_k() + 2, dtype=torch.long, device=self.device)
        for b, p in enumerate(prompts):
            self.seqs[b, :len(p)] = torch.tensor(p, dtype=torch.long)
        self.prompt_lengths = torch.tensor([len(p) for p in prompts], dtype=torch.long, device=self.device)
        self.lengths = self.prompt_lengths.clone()
        self.cache = self.target.new_cache(B, capacity + self._max_k() + 2)
        with torch.inference_mode():
            self.target(self.seqs[:, :P - 1], self.cache, logits_for="none")  # pads after a prompt are masked/overwritten
            self.cache.lengths = self.lengths - 1
            if isinstance(self.draft, ModelDraft):
                self.draft.prefill(self.seqs, self.lengths, capacity + self._max_k() + 2)

    def _max_k(self):
        return getattr(self, "max_k", self.k)

    def reset(self, k: int | None = None):
        """Back to the state right after prefill (positions < prompt length are never overwritten)."""
        if k is not None:
            assert k <= self._max_k()
            self.k = k
        self.lengths = self.prompt_lengths.clone()
        self.cache.lengths = self.lengths - 1
        if isinstance(self.draft, ModelDraft):
            self.draft.reset(self.lengths)
        self.attempts = torch.zeros(max(self.k, 1), dtype=torch.long, device=self.device)
        self.accepts = torch.zeros_like(self.attempts)

    def _probs(self, logits):
        return torch.softmax(logits.float() / self.temperature, -1)

    def step(self, record_experts: bool = False) -> StepRecord:
        K, B, dev = self.k, self.seqs.shape[0], self.device
        L = self.lengths
        ctx = float(L.float().mean())
        _sync(dev)
        t0 = self.clock()
        # 1. draft: K proposals per sequence
        if K > 0:
            d, q = self.draft.propose(self.seqs, L, K, self.temperature, self.gen)
        else:
            d, q = torch.zeros(B, 0, dtype=torch.long, device=dev), None
        _sync(dev)
        t1 = self.clock()
        # 2. verify: [last committed token, d_1..d_K] at positions L-1 .. L+K-1, one target pass
        x = torch.cat([self.seqs.gather(1, (L - 1)[:, None]), d], 1)  # [B, K+1]
        self.target.expert_stats = [] if record_experts else None
        logits = self.target(x, self.cache)  # [B, K+1, V]
        _sync(dev)
        t2 = self.clock()
        # 3. accept / reject, commit, roll back
        if self.forced_acceptance is not None:  # timing-only mode: acceptance pattern imposed
            u = torch.rand(B, K, generator=self.gen, device=dev)
            n = (u < self.forced_acceptance).long().cumprod(-1).sum(-1)
            nxt = logits.argmax(-1).gather(1, n[:, None]).squeeze(1)
        elif self.temperature <= 0:
            n, nxt = accept_greedy(d, logits)
        else:
            n, nxt = accept_sampling(d, self._probs(logits), q, self.gen)
        new = torch.cat([d, torch.zeros(B, 1, dtype=torch.long, device=dev)], 1)
        new.scatter_(1, n[:, None], nxt[:, None])  # d_1..d_n, then correction/bonus
        idx = L[:, None] + torch.arange(K + 1, device=dev)
        self.seqs.scatter_(1, idx, new)  # tokens after L+n+1 are scratch, beyond the length
        self.lengths = L + n + 1
        self.cache.lengths = self.lengths - 1  # rollback of rejected positions
        if K > 0:
            self.draft.commit(n, K)
            pos = torch.arange(1, K + 1, device=dev)
            self.attempts += (n[:, None] >= pos - 1).sum(0)
            self.accepts += (n[:, None] >= pos).sum(0)
        n_list = n.tolist()
        _sync(dev)
        t3 = self.clock()
        stats = None
        if record_experts and self.target.expert_stats:
            stats = self.target.expert_stats[-1]
        self.target.expert_stats = None
        return StepRecord(t1 - t0, t2 - t1, t3 - t2, n_list, stats, ctx)

    def generate(self, prompts: list[list[int]], max_new_tokens: int) -> Generation:
        """Run steps until every sequence has max_new_tokens new tokens."""
        cap = max(len(p) for p in prompts) + (self.k + 1) * max_new_tokens + 2
        with torch.inference_mode():
            self.prefill(prompts, cap)
            steps = []
            while int((self.lengths - self.prompt_lengths).min()) < max_new_tokens:
                steps.append(self.step())
        seqs = self.seqs.tolist()
        pl = self.prompt_lengths.tolist()
        toks = [seqs[b][pl[b]:pl[b] + max_new_tokens] for b in range(len(prompts))]
        return Generation(toks, steps, self.attempts[:self.k].tolist(), self.accepts[:self.k].tolist())
