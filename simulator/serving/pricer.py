"""Step-time tables of one scenario and engine (:class:`StepPricer`).

The step time is a table lookup, never a cost-model call:

    kernels(B, K, L, T) = lin(pad(T)) + attn(B, K+1, L) + (K - 1) * draft_pass(B, L) + extend(B, K, L)
                          + attn_prefill(chunks)
    step = physics.step_model over those kernels: [eager launches] + host + overhead [+ DSD-at-K=0 cost]

- lin(T): every operator of the target pass except attention (GEMMs, norms, all-reduce, LM head,
  sampling) at T tokens, precomputed for T = 1..T_max (they depend on the token count only); for an
  MoE model the routed experts corrected to the grid's (correlated positions, routed padding rows:
  simulator/serving/step_experts.py).
- attn(B, q, L): decode attention of B sequences with q queries over L cached keys, on a grid of
  context buckets and interpolated linearly in L (its FLOPs and bytes are linear in L, so the mean
  context of the batch prices the whole batch). A bucket's column (every B and q, and the draft's
  tables below) is priced the first time a step's context falls next to it: a load search's runs
  see a few buckets of the traffic's lengths, the steady state two.
- draft_pass(B, L): one draft pass (EAGLE/MTP head, draft model, n-gram host cost), same table;
  extend(B, K, L): the draft's first pass of the step over the B (K + 1) verified tokens (EAGLE / MTP
  heads, draft models; simulator/physics/draft_cost.py), whose place it takes (n-gram: K x pass).
- pad(T): the tokens the pass runs at in the CUDA graph it replays, by the engine profile's rule
  (simulator.physics.engine_time.pad, the grid's: tokens padded for vLLM, sequences for SGLang; [serving]
  cuda_graph_sizes overrides the sizes); outside a graph the pass pays ``eager_overhead_per_kernel_s``
  per kernel of the target pass where launches are the slower.
- overhead, eager launches, host time, engine terms, the DSD-at-K=0 cost: composed by
  simulator.physics.step_model (the grid's formula; :meth:`StepPricer.step_s` its scalar twin).
- attn_prefill: a prompt chunk's attention (q = chunk over the p tokens already cached, causal),
  priced with the cost model's attention operator (simulator/serving/prefill_attention.py); the chunk's
  GEMM tokens are part of T.
"""
from __future__ import annotations

from bisect import bisect_left

import numpy as np

from simulator.errors import PlannerError
from simulator.specs.engine_settings import k0_runs_draft_extend
from simulator.physics.draft_cost import (DraftSetting, draft_extend_cost, draft_pass_cost, draft_passes,
                                         has_extend_pass)
from simulator.physics.engine_time import (draft_extend_in_graph, draft_in_graph, expert_batch, extend_expert_batch,
                                           pad, pass_time_s)
from simulator.physics.forward_pass import forward_ops, sampling_op
from simulator.physics.layers import decoder_cell_ops
from simulator.physics.operators import pass_time
from simulator.physics.pass_tables import lin_table
from simulator.plan.step_models import step_model
from simulator.physics.step_model import (lin_index, profile_overhead_s, step_collective_calls, step_time,
                                          step_time_scalar, terms_tables)
from simulator.serving.engine import EngineConfig, graph_profile
from simulator.serving.prefill_attention import PrefillAttention
from simulator.serving.step_experts import step_expert_tables
from simulator.specs.scenario import Scenario


class StepPricer:
    """Precomputed step-time tables for one scenario and engine (see the module docstring)."""

    # the tables of the target pass alone (plain and speculative pricers of one setting share them)
    TARGET_TABLES = ("lin", "n_kernels", "ctx", "_ctx_list", "attn", "_attn_have", "_attn_ops_layers",
                     "verify_sampling_s_per_token", "overhead_prof", "_lin_list", "_overhead0", "_pad_experts",
                     "_pad_experts_list", "_dec_experts", "_dec_experts_list", "_terms_factor", "_terms_added")

    def __init__(self, sc: Scenario, engine: EngineConfig, k_max: int, max_seqs: int, max_context: int,
                 speculative: bool, twin: "StepPricer | None" = None):
        """``twin``: a pricer of the same scenario and settings with speculation the other way round, whose
        target tables (they do not depend on speculation) this one reuses instead of pricing them again."""
        if speculative and sc.draft.is_tree:  # the serving steps verify K + 1 tokens per sequence, a tree N + 1
            raise PlannerError(f"draft {sc.draft.label}: the serving simulation and sizing price chains only (a tree"
                               " verifies its N + 1 tokens, not K + 1); plan it with python -m simulator.predict")
        self.sc, self.engine, self.k_max, self.speculative = sc, engine, k_max, speculative
        self.caches = step_model(sc).caches  # the physics' kept tables: the scenario's step model's
        self.max_context = max_context
        self.eager_s = engine.eager_overhead_per_kernel_s if engine.eager_overhead_per_kernel_s is not None \
            else sc.engine.eager_launch_per_kernel_s
        # the CUDA-graph rule the steps follow (the grid's engine profile, [serving] overrides applied)
        self.graphs = graph_profile(sc.engine, engine)
        self.extras = engine.extras
        b_top = max_seqs
        self.b_top = b_top
        t_top = max(engine.max_num_batched_tokens, max_seqs * (k_max + 1))
        B, K = np.arange(1, max_seqs + 1.0)[:, None], np.arange(k_max + 1.0)[None, :]
        self.t_top = int(max(lin_index(self.graphs, sc.deployment, B, K, caches=self.caches)[0].max(),
                             lin_index(self.graphs, sc.deployment, 0.0, 0.0, float(t_top), self.caches)[0]))
        if twin is not None and twin.sc is sc and (twin.engine, twin.k_max, twin.max_context, twin.b_top,
                                                   twin.t_top) == (engine, k_max, max_context, b_top, self.t_top):
            for name in self.TARGET_TABLES:
                setattr(self, name, getattr(twin, name))
        else:
            self._target_tables(max_context)
        n_ctx = len(self.ctx)
        if speculative:
            self._setting = DraftSetting.of(sc, self.caches)
            self.draft = np.full((b_top, n_ctx), np.nan)  # [B-1, iL], one pass; columns priced on first use
            # passes per step by K (K for heads and draft models; one host lookup for n-gram)
            self.passes = draft_passes(sc.draft, np.arange(k_max + 1.0)).tolist()
            self.extend = np.full((b_top, k_max + 1, n_ctx), np.nan) \
                if has_extend_pass(sc.draft, sc.deployment) else None
        else:
            self.draft = np.zeros((b_top, n_ctx))
            self.passes = [0.0] * (k_max + 1)
            self.extend = None
        # a speculating step at K = 0 still runs the drafter's extend pass on this engine release (as the grid's
        # Grid.dsd_k0 prices the K = 0 entry of a dynamic-K table)
        self.extend_at_k0 = self.extend is not None and k0_runs_draft_extend(sc.engine)
        # collective calls of a step by K as the grid counts them (physics.step_model.step_collective_calls): a
        # drafting step (K > 0) and, with ``_calls_k0_extend``, a speculating server's K = 0 entry running the extend
        # pass; a step that drafts nothing runs the verify pass's alone (``_calls_plain``)
        counts = step_model(sc).collective_counts
        ngram = sc.draft.method == "ngram"
        ks = np.arange(k_max + 1.0)
        self._calls = np.asarray(step_collective_calls(counts, np.asarray(self.passes), ks, ngram,
                                                       self.extend is not None), dtype=float)
        self._calls_list = self._calls.tolist()
        self._calls_plain = float(counts.verify)
        self._calls_k0_extend = float(np.asarray(step_collective_calls(counts, 0.0, 0.0, ngram, True, True)))
        terms = getattr(sc, "step_terms", None)
        self._terms_collective_s = 0.0 if terms is None else float(terms.collective_s)
        # the buckets this pricer has read priced (its tables, and its twin's shared attention); its own,
        # so that rows it memoized before a twin priced a bucket are read again
        self._have = [False] * n_ctx
        self._lin_extra: dict[int, float] = {}
        self.prefill = PrefillAttention(sc, self._attn_ops_layers, self.caches)
        self._pad_memo: dict[tuple[int, int, int], tuple[int, int, bool]] = {}
        self._rows_memo: dict[tuple[int, int], tuple] = {}

    def _target_tables(self, max_context: int) -> None:
        """lin(T), attn(B, q, L), the sampling difference of a verify pass and the profile's step terms."""
        sc, k_max, b_top = self.sc, self.k_max, self.b_top
        m, dep, hw, prof = sc.model, sc.deployment, sc.hardware, sc.profile
        # lin(T): all target ops but attention, at T = 0..t_top tokens (T = 0 costs nothing)
        self.lin, self._lin_list = lin_table(m, dep, hw, prof, self.t_top, self.caches)
        # an MoE step's routed experts as the grid prices them (serving.step_experts)
        self._pad_experts, self._dec_experts = step_expert_tables(sc, self.graphs, b_top, k_max, self.t_top,
                                                                  self.caches)
        self._pad_experts_list = None if self._pad_experts is None else self._pad_experts.tolist()
        self._dec_experts_list = None if self._dec_experts is None else self._dec_experts.tolist()
        full_ops = forward_ops(m, dep, hw, 1.0, 1.0, 1.0, caches=self.caches)
        self.n_kernels = float(sum(o.kernels * o.count for o in full_ops))
        # decode attention over context buckets (linear in L between buckets), [B-1, q-1, iL]: each
        # column priced when first needed (_fill_columns)
        top_l = max(int(max_context) + k_max + 2, 64)
        self.ctx = np.unique(np.concatenate([[0.0], np.geomspace(32, top_l, 28)]))
        self._ctx_list = self.ctx.tolist()
        self.attn = np.full((b_top, k_max + 1, len(self.ctx)), np.nan)
        self._attn_have = [False] * len(self.ctx)  # shared with a twin, as the array is
        self._attn_ops_layers = [(o.name, o.count) for o in full_ops if o.family == "attention"]
        # lin(T) samples every token as plain decoding does; a verify pass's rejection path reads its
        # B (K + 1) rows differently (engine profile [sampling]): the difference per verified token
        delta = dep.kernels.logit_bytes_verify - dep.kernels.logit_bytes_plain
        self.verify_sampling_s_per_token = 0.0 if delta == 0 else float(pass_time(
            [sampling_op("verify_sampling_delta", 1.0, m.vocab_size / 1.0, abs(delta))], hw, dep, prof, (),
            caches=self.caches).total_s
            - pass_time([sampling_op("none", 1.0, m.vocab_size, 0.0)], hw, dep, prof, (), caches=self.caches).total_s
        ) * np.sign(delta)
        B, K = np.arange(b_top + 1, dtype=float)[:, None], np.arange(k_max + 1, dtype=float)[None, :]
        self.overhead_prof = np.broadcast_to(profile_overhead_s(prof, B, K), (b_top + 1, k_max + 1))
        # step_s reads these as Python scalars (see _rows)
        self._overhead0 = self.overhead_prof[0].tolist()
        # engine terms on top of the physics (physics.step_model), read by step_s as Python scalars
        self._terms_factor, self._terms_added = terms_tables(getattr(sc, "step_terms", None), b_top, k_max)

    def price_context_buckets(self, js=None) -> None:
        """Price context buckets ``js`` (default: all) now rather than on first use, a few at a time as
        steps price them (a bucket's numbers do not depend on when or beside which others it was priced)."""
        js = range(len(self.ctx)) if js is None else list(js)
        for i in range(0, len(js), 2):
            self._fill_columns(tuple(js[i:i + 2]))

    def _fill_columns(self, js: tuple) -> None:
        """Price the context buckets ``js`` not priced yet: the target's attention (every B and q; a twin
        that shares the array sees them too) and, speculating, one draft pass and the extend pass. Each
        cell's price is its own (no cell depends on which others are priced with it)."""
        js = self._at_least_two([j for j in js if not self._have[j]])
        if not js:
            return
        L = self.ctx[js]
        B = np.arange(1, self.b_top + 1, dtype=float)[:, None, None]
        self._fill_attention(js)
        if self.speculative:
            bb, ll = np.broadcast_arrays(B[:, 0, :], L[None, :])
            self.draft[:, js] = self._draft_columns(bb, ll)
            if self.extend is not None:
                self.extend[:, :, js] = self._extend_columns(B, L)
        for j in js:
            self._have[j] = True
        self._rows_memo.clear()  # rows read before held no value at these buckets

    def _fill_attention(self, js) -> None:
        """Price the target's decode attention (every B and q) at the context buckets ``js`` not priced yet
        (shared with a twin); the draft's tables there wait for :meth:`_fill_columns`."""
        new_attn = self._at_least_two([j for j in js if not self._attn_have[j]])
        if not new_attn:
            return
        sc, b_top, k_max = self.sc, self.b_top, self.k_max
        B = np.arange(1, b_top + 1, dtype=float)[:, None, None]
        q = np.arange(1, k_max + 2, dtype=float)[None, :, None]
        # the attention of the pass's per-cell ops (the same ops forward_ops builds, without its token ops)
        L = self.ctx[new_attn][None, None, :]
        ops = [o for o in decoder_cell_ops(sc.model, sc.deployment, sc.hardware, B, q, L, caches=self.caches)
               if o.family == "attention"]
        self.attn[:, :, new_attn] = pass_time(ops, sc.hardware, sc.deployment, sc.profile,
                                              (b_top, k_max + 1, len(new_attn)), caches=self.caches).total_s
        for j in new_attn:
            self._attn_have[j] = True
        self._rows_memo.clear()  # rows read before held no value at these buckets

    def _at_least_two(self, js: list) -> list:
        """Buckets to price together: ``js``, with a neighbour beside a lone one. A pass sums its ops grouped
        by the shape of their arrays, and a single column's attention shares the context-free ops' shape:
        priced alone it would be summed in another order than beside others (a last-digit difference)."""
        js = sorted(set(js))
        if len(js) == 1:
            js = sorted(js + [js[0] + 1 if js[0] + 1 < len(self.ctx) else js[0] - 1])
        return js

    def _pass_time(self, ops, hw, dep, profile, shape):
        """:func:`simulator.physics.operators.pass_time` with the step model's caches (a draft cost's pricer)."""
        return pass_time(ops, hw, dep, profile, shape, caches=self.caches)

    def _draft_columns(self, B: np.ndarray, L: np.ndarray) -> np.ndarray:
        """One draft pass at batch sizes B and context buckets L, [B-1, len(L)], as the engine runs it: in a
        graph by the planner's grid rule (the engine profile's capture limits), else the slower of GPU time
        and kernel launches; a host-side n-gram lookup as it is."""
        cost = draft_pass_cost(self._setting, B, 1.0, L, self._pass_time)[0]
        if self.sc.draft.method == "ngram":
            return cost.total_s
        return pass_time_s(cost.total_s, cost.n_kernels, draft_in_graph(self.sc.engine, B), self.eager_s)

    def _extend_columns(self, B: np.ndarray, L: np.ndarray) -> np.ndarray:
        """The draft's extend pass over B (K + 1) verified tokens at context buckets L, [B-1, K, len(L)];
        as the engine runs it (eager: the slower of GPU time and kernel launches)."""
        K = np.arange(self.k_max + 1, dtype=float)[None, :, None]
        # in a graph by the same rule as the planner's grid (the engine profile's capture limits), with its
        # padding rows' experts where the engine routes them (plan.grid.extend_expert_batch)
        in_graph = draft_extend_in_graph(self.sc.engine, *np.broadcast_arrays(B, K))
        experts = extend_expert_batch(self.sc.engine, B, K, expert_batch(self.sc.engine, self.sc.model, B, K))
        cost = draft_extend_cost(self._setting, B, K, L[None, None, :], self._pass_time, experts)
        return pass_time_s(cost.total_s, cost.n_kernels, in_graph, self.eager_s)

    def _lin(self, tokens: int) -> float:
        if tokens <= self.t_top:
            return self.lin[tokens]
        if tokens not in self._lin_extra:
            sc = self.sc
            ops = [o for o in forward_ops(sc.model, sc.deployment, sc.hardware, float(tokens), 1.0, 0.0,
                                          caches=self.caches) if o.family != "attention"]
            self._lin_extra[tokens] = float(pass_time(ops, sc.hardware, sc.deployment, sc.profile, (),
                                                      caches=self.caches).total_s)
        return self._lin_extra[tokens]

    def _ctx_weight(self, L: float) -> tuple[int, float]:
        j = bisect_left(self._ctx_list, L)
        if j <= 0:
            return 0, 0.0
        if j >= len(self._ctx_list):
            return len(self._ctx_list) - 2, 1.0 + (L - self._ctx_list[-1]) / (self._ctx_list[-1] - self._ctx_list[-2])
        lo, hi = self._ctx_list[j - 1], self._ctx_list[j]
        return j - 1, (L - lo) / (hi - lo)

    def prefill_attention_s(self, chunks: np.ndarray, cached: np.ndarray) -> float:
        """Attention of prompt chunks (q = chunk tokens over the cached ones): :class:`PrefillAttention`."""
        return self.prefill.pairs_total_s(chunks.tolist(), cached.tolist())

    def prefill_attention_pairs_s(self, chunks: list, cached: list) -> float:
        """:meth:`prefill_attention_s` of Python int lists (what the serving loop holds)."""
        return self.prefill.pairs_total_s(chunks, cached)

    def _pad(self, n_dec: int, k_step: int, tokens: int) -> tuple[int, int, bool]:
        """(the lin(T) entry the step reads, the tokens it runs at, whether in a graph): physics.step_model.lin_index."""
        key = (n_dec, k_step, tokens)
        hit = self._pad_memo.get(key)
        if hit is None:
            index, graph = lin_index(self.graphs, self.sc.deployment, float(n_dec), float(k_step), float(tokens),
                                     self.caches)
            hit = self._pad_memo[key] = (int(index), int(_padded_tokens(self.graphs, n_dec, k_step, tokens,
                                                                        self.caches)),
                                         bool(graph))
        return hit

    def _rows(self, n_dec: int, k_step: int) -> tuple:
        """Per (B, K): the table rows over the context buckets as Python lists, and the B-only terms
        (numpy scalar indexing costs more than the arithmetic of a step)."""
        key = (n_dec, k_step)
        hit = self._rows_memo.get(key)
        if hit is None:
            attn = self.attn[n_dec - 1, k_step].tolist()
            d = e = None
            if k_step:
                d = self.draft[n_dec - 1].tolist()  # real sequences, as the grid: padding rows read no KV
                if self.extend is not None:
                    e = self.extend[min(n_dec, self.b_top) - 1, k_step].tolist()
            hit = self._rows_memo[key] = (attn, d, e, float(self.overhead_prof[min(n_dec, self.b_top), k_step]))
        return hit

    def _extend_k0_row(self, n_dec: int) -> list:
        """The extend pass at K = 0 over the context buckets, for B = ``n_dec`` (memoized as the rows are)."""
        key = (n_dec, -1)
        hit = self._rows_memo.get(key)
        if hit is None:
            hit = self._rows_memo[key] = self.extend[min(n_dec, self.b_top) - 1, 0].tolist()
        return hit

    def step_s(self, n_dec: int, k_step: int, tokens: int, mean_ctx: float, spec_mode: bool,
               prefill_attn_s: float) -> tuple[float, int, bool]:
        """Seconds of one step, the tokens the target pass runs at, and whether it ran as a graph."""
        index, padded, graph = self._pad(n_dec, k_step, tokens)
        kernels = self._lin_list[index] if index <= self.t_top else self._lin(index)
        if self._dec_experts_list is not None:  # MoE: experts as the grid prices them (serving.step_experts)
            if n_dec and tokens == n_dec * (k_step + 1):
                kernels += self._dec_experts_list[n_dec][k_step]
            elif self._pad_experts_list is not None and tokens <= self.t_top:
                kernels += self._pad_experts_list[tokens]
        kernels += prefill_attn_s
        draft = 0.0
        if n_dec:
            j, w = self._ctx_weight(mean_ctx)
            if not (self._have[j] and self._have[j + 1]):
                self._fill_columns((j, j + 1))
            row, d, e, overhead = self._rows(n_dec, k_step)
            kernels += row[j] + w * (row[j + 1] - row[j])
            if k_step:
                kernels += self.verify_sampling_s_per_token * n_dec * (k_step + 1)
                if e is None:
                    draft = self.passes[k_step] * (d[j] + w * (d[j + 1] - d[j]))
                else:  # K - 1 one-token passes and the extend pass over the verified tokens
                    draft = (self.passes[k_step] - 1) * (d[j] + w * (d[j + 1] - d[j])) + e[j] + w * (e[j + 1] - e[j])
            elif spec_mode and self.extend_at_k0:  # a K = 0 entry of a speculating server: the extend pass alone
                e = self._extend_k0_row(n_dec)
                draft = e[j] + w * (e[j + 1] - e[j])
        else:
            overhead = self._overhead0[k_step]
        factor = None if self._terms_factor is None else self._terms_factor[k_step]
        added = 0.0 if factor is None else self._terms_added[min(n_dec, self.b_top)][k_step]
        # the collective calls of the passes this step runs (as its draft time above composes them)
        if not n_dec:
            calls = self._calls_plain
        elif k_step:
            calls = self._calls_list[k_step]
        else:
            calls = self._calls_k0_extend if spec_mode and self.extend_at_k0 else self._calls_plain
        sc = self.sc
        time = step_time_scalar(sc.engine, sc.deployment.tp, n_dec, k_step, kernels, self.n_kernels, graph, self.eager_s,
                                draft, self.passes[k_step], sc.draft.method == "ngram", overhead, factor, added,
                                self.extras, spec_mode, self._terms_collective_s, calls)
        return time, padded, graph

    def decode_steps_s(self, n_dec: np.ndarray, k_step: np.ndarray, tokens: np.ndarray, mean_ctx: float,
                       spec_mode: bool, prefill_attn_s, k0_extend: bool = True) -> np.ndarray:
        """:meth:`step_s`'s seconds for many steps at one mean context (the steady state's B = 1..n), the same
        arithmetic in the same order elementwise (n_dec >= 1); tests hold the two equal to the bit.
        ``prefill_attn_s``: one prompt chunk's attention for every step, or one per step. ``k0_extend`` False:
        a speculating step at K = 0 without the drafter's extend pass (a lower bound: the early stop's floor)."""
        sc = self.sc
        n_dec, k_step, tokens = (np.asarray(a, dtype=np.intp) for a in (n_dec, k_step, tokens))
        index, graph = lin_index(self.graphs, sc.deployment, n_dec, k_step, tokens, self.caches)
        index = index.astype(np.intp)
        inside = index <= self.t_top
        kernels = self.lin[np.where(inside, index, 0)]
        if not inside.all():  # beyond the table: priced on their own (_lin)
            kernels[~inside] = [self._lin(int(p)) for p in index[~inside].tolist()]
        if self._dec_experts is not None:  # MoE: experts as the grid prices them (as step_s)
            mixed = 0.0 if self._pad_experts is None else np.where(
                tokens <= self.t_top, self._pad_experts[np.minimum(tokens, self.t_top)], 0.0)
            decode = (n_dec >= 1) & (tokens == n_dec * (k_step + 1))
            kernels = kernels + np.where(decode, self._dec_experts[n_dec, k_step], mixed)
        kernels = kernels + prefill_attn_s
        j, w = self._ctx_weight(mean_ctx)
        k0_extend = spec_mode and self.extend_at_k0 and k0_extend
        if k_step.any() or k0_extend:
            self._fill_columns((j, j + 1))
        else:  # no step drafts (the early stop's floor at no context): the draft's columns stay unpriced
            self._fill_attention((j, j + 1))
        row = self.attn[n_dec - 1, k_step]
        kernels = kernels + (row[:, j] + w * (row[:, j + 1] - row[:, j]))
        spec = k_step > 0
        kernels = kernels + np.where(spec, self.verify_sampling_s_per_token * n_dec * (k_step + 1), 0.0)
        passes = np.asarray(self.passes)[k_step]
        d = self.draft[n_dec - 1]
        d_ctx = d[:, j] + w * (d[:, j + 1] - d[:, j])
        at_k0 = 0.0  # (NaN where K = 0 read an unpriced draft column: not kept)
        if self.extend is None:
            draft = passes * d_ctx
        else:
            e = self.extend[np.minimum(n_dec, self.b_top) - 1, k_step]
            draft = (passes - 1) * d_ctx + e[:, j] + w * (e[:, j + 1] - e[:, j])  # step_s's order of operations
            if k0_extend:  # a K = 0 entry of a speculating server: the extend pass alone
                at_k0 = e[:, j] + w * (e[:, j + 1] - e[:, j])
        draft = np.where(spec, draft, at_k0)
        overhead = self.overhead_prof[np.minimum(n_dec, self.b_top), k_step]
        calls = np.where(spec, self._calls[k_step], self._calls_k0_extend if k0_extend else self._calls_plain)
        return step_time(sc.engine, sc.deployment.tp, n_dec, k_step, kernels, self.n_kernels, graph, self.eager_s, draft,
                         passes, sc.draft.method == "ngram", overhead, getattr(sc, "step_terms", None), self.extras,
                         spec_mode, calls=calls).total_s


def _padded_tokens(graphs, n_dec: int, k_step: int, tokens: int, caches=None) -> float:
    """The tokens a step's target pass runs at (physics.engine_time.pad)."""
    return float(pad(graphs, float(n_dec), float(k_step), float(tokens), caches)[0])
