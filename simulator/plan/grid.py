"""Goodput grid over (batch size B, draft length K, context length L), optimal K per batch size.

    ITL(B, K)     = draft(B, K) + verify(B, K) + overhead(B, K)
                    (verify and draft as the engine runs them: in a CUDA graph or launched eagerly;
                    overhead = the engine's exposed host time + a profile's fitted step terms)
    goodput(B, K) = AL(K) / ITL(B, K)        tokens/s per sequence (x B for the whole batch)
    K*(B)         = the fewest-range schedule within 1% of the best score at every B, over the K whose memory
                    fits (simulator/plan/schedule.py; tolerance 0: the argmax), never returning to an earlier K
                    on a difference inside the engine terms' band; the score: each K's share of the
                    best goodput at the pessimistic 10% of the engine terms' draws (plan/decision_risk.py;
                    decision_quantile 0: goodput at their centre); K = 0 is plain decoding, except in the
                    choice of a dynamic-K table on an engine whose K = 0 entry still runs the drafter's extend pass
                    (vLLM from 0.24, SGLang from 0.5.14: Grid.dsd_k0), where that entry is priced as it runs

One function (:func:`compute_grid`) evaluates every term over (B, K, L) arrays, L = tokens already in
each sequence's KV cache. The plain table is its slice with L of length 1 (the scenario's context_len),
the L axis dropped: arrays (n_batch, n_k). Given context lengths it keeps the axis: arrays
(n_batch, n_k, n_ctx) and K*(B, L) read per context column. Only attention (and the KV memory) depends
on L, so a slice at one L equals the plain grid of a scenario with that context_len.

K* has one source, :attr:`Grid.k_star`: the K per batch size (and context length), -1 where no K fits
memory (the sentinel every reader shares: the table shows it as <NA>, the schedule text as "nothing
fits memory", the exports end their ranges there).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property

import numpy as np

from simulator.plan.decision_risk import OUTSIDE_BAND, decision_shares, step_draws_and_box
from simulator.plan.acceptance_risk import k_at_each_rate_set, robust_score
from simulator.plan.draft_acceptance import banded_draft_acceptance_lengths, draft_acceptance_lengths
from simulator.physics.memory import step_memory_bytes
from simulator.physics.operators import PassCost, StepCost
from simulator.physics.draft_cost import DraftSetting, draft_costs
from simulator.specs.drafts import verify_drafts
from simulator.specs.engine_settings import k0_runs_draft_extend
from simulator.physics.engine_time import expert_batch, extend_expert_batch, pad, pads
from simulator.physics.experts import experts_touched_correlated
from simulator.plan.step_models import step_model
from simulator.plan.step_passes import StepPasses, engine_pass_times, verify_over_context
from simulator.plan.schedule import (SCHEDULE_TOLERANCE, argmax_k_index, has_return, schedule_k_index,
                                     without_band_returns)
from simulator.specs.routing import expert_probabilities
from simulator.specs.scenario import per_scenario
from simulator.specs.step_terms import no_room


@dataclass
class Grid:
    """Arrays of shape (n_batch, n_k) for the plain grid, (n_batch, n_k, n_ctx) with a context axis,
    unless noted."""

    batch_sizes: np.ndarray  # (n_batch,)
    ks: np.ndarray  # (n_k,)
    context_lens: np.ndarray  # (n_ctx,); the plain grid: the scenario's context_len alone
    # each pass's summed time, and its per-op detail (PassCost.detail) when something reads it
    verify: PassCost  # with a context axis the ops whose cost does not depend on L, over (B, K, 1)
    draft_pass: PassCost  # one draft pass, shape (n_batch, 1[, n_ctx]); detail (n_ops, ...)
    draft_passes: np.ndarray  # passes per step, shape (1, n_k[, 1]): K (or 1 for host-side n-gram at K > 0)
    verify_s: np.ndarray  # the verify pass as the engine runs it (graph replay or eager launches)
    draft_step_s: np.ndarray  # all draft passes of the step as the engine runs them
    in_graph: np.ndarray  # whether the verify pass replays a captured CUDA graph
    overhead_s: np.ndarray
    itl_s: np.ndarray
    acceptance_length: np.ndarray  # (n_k,) plain, (n_k, n_ctx) with a context axis
    goodput_per_seq: np.ndarray
    memory_per_gpu_bytes: np.ndarray
    memory_capacity_bytes: float
    experts_touched: np.ndarray | None  # per MoE layer, verify step, (n_batch, n_k)
    schedule_tolerance: float = SCHEDULE_TOLERANCE  # goodput share K* may give up for fewer ranges
    # (3, n_k) AL(K) at the acceptance band's low, given and high rates; None without a band (and on
    # a context axis, whose K*(B, L) map is scheduled without the band)
    banded_acceptance_length: np.ndarray | None = None
    # the draft's extend pass over the verified tokens, (n_batch, n_k[, n_ctx]); replaces one of the passes
    draft_extend: PassCost | None = None
    # with a context axis: the verify ops whose cost depends on L (attention), over (B, K, L)
    verify_context: PassCost | None = None
    # K* is chosen at this quantile of the engine terms' draws (plan.decision_risk; 0: at their centre), the terms
    # (a learned population, a deployment fit, None: the physics with the a priori spread) they are drawn from
    decision_quantile: float = 0.0
    step_terms: object = None
    # the scenario, where its engine still runs the drafter's extend pass at a dynamic-K table's K = 0 entry
    # (specs.engine_settings): :attr:`dsd_k0` prices that entry from this grid's passes when a decision first needs
    # it; None where K = 0 there is plain decoding
    k0_extend_scenario: object = None
    # collective calls of each cell's step (physics.step_model.step_collective_calls), broadcasting to the cells:
    # what the terms' collective_s is paid per
    collective_calls: np.ndarray | float = 0.0
    # the room each cell's engine overlap window leaves for more host time, where the terms' host time hides
    # (physics.engine_time.host_exposed_and_room_s); the scalar 0 on an engine that hides none
    host_room_s: np.ndarray | float = 0.0

    @property
    def fits_memory(self) -> np.ndarray:
        return self.memory_per_gpu_bytes <= self.memory_capacity_bytes

    @property
    def throughput(self) -> np.ndarray:
        return self.goodput_per_seq * self.batch_sizes.reshape((-1,) + (1,) * (self.itl_s.ndim - 1))

    @property
    def one_token_passes(self) -> np.ndarray:
        """Draft passes of one token per sequence: all of them, or all but the extend pass at K > 0."""
        if self.draft_extend is None:
            return self.draft_passes
        return np.maximum(self.draft_passes - 1.0, 0.0)

    def _extend_at_k(self) -> StepCost:
        at_k = (self.ks > 0).astype(float).reshape((1, -1) + (1,) * (self.itl_s.ndim - 2))
        return self.draft_extend.detail.scaled(at_k)

    @cached_property
    def draft(self) -> StepCost:
        """Draft cost of the whole step over the grid (materialized on first use)."""
        passes = self.draft_pass.detail.scaled(self.one_token_passes)
        return passes if self.draft_extend is None else StepCost.concat([passes, self._extend_at_k()])

    @property
    def draft_s(self) -> np.ndarray:
        return self.draft_step_s

    def k_index(self, k: int) -> int:
        hits = np.flatnonzero(self.ks == k)
        return int(hits[0]) if hits.size else -1

    def optimal_k_index(self) -> np.ndarray:
        """Index into ks of K* per batch size (per context column with a context axis): the
        fewest-range schedule within ``schedule_tolerance`` of the per-batch optimum
        (:mod:`simulator.plan.schedule`); -1 where no K fits in memory. With an acceptance band the
        schedule runs on the robust score (the K's worst share of the best goodput across the band)
        instead of the goodput itself."""
        return self._schedule.copy()

    @property
    def k_star(self) -> np.ndarray:
        """K* per batch size, (n_batch,), or (n_batch, n_ctx) with a context axis; -1 where no K fits
        memory. The one source of K* that the table, the schedule text and every export read."""
        idx = self._schedule
        return np.where(idx >= 0, self.ks[np.maximum(idx, 0)], -1)

    @cached_property
    def _schedule(self) -> np.ndarray:
        score, near = self._decision_in_memory
        return self._without_band_returns(schedule_k_index(score, self.fits_memory, self.schedule_tolerance, near),
                                          self.fits_memory)

    def schedule_within(self, fits: np.ndarray) -> np.ndarray:
        """K index per batch size of the fewest-range schedule over the K ``fits`` allows (plan.schedule): on
        the score K* is chosen on, keeping besides the K within the tolerance of the best score those that
        come within it in at least half of the engine terms' draws (:meth:`near_best_within`)."""
        score, near = self._decision(fits)
        return self._without_band_returns(schedule_k_index(score, fits, self.schedule_tolerance, near), fits)

    def _without_band_returns(self, idx: np.ndarray, fits: np.ndarray) -> np.ndarray:
        """The schedule ``idx`` without its returns to an earlier K on a difference inside the engine terms' band
        (plan.schedule.without_band_returns, on the goodput draws K* is chosen on); as it is at the centre."""
        if self.decision_quantile <= 0 or self.schedule_tolerance <= 0 or not has_return(idx):
            return idx
        d = self.as_engine_runs
        return without_band_returns(idx, d.term_step_draws, d.acceptance_length, fits, OUTSIDE_BAND)

    @property
    def term_step_draws(self) -> np.ndarray:
        """The step time of every cell under each draw of the engine terms, draws on the last axis
        (plan.decision_risk.step_draws): what K* is chosen on, read by every schedule of this grid."""
        return self._term_draws[0]

    @cached_property
    def _term_draws(self) -> tuple:  # (the step draws, the box of cells outside which every draw gives the same step)
        return step_draws_and_box(self, self.step_terms)[:2]

    @cached_property
    def _decision_in_memory(self) -> tuple[np.ndarray, np.ndarray | None]:
        return self._decision(self.fits_memory)

    @property
    def selection_score(self) -> np.ndarray:
        """What K* is chosen on, over the K that fit memory: each K's share of the best goodput at the decision
        quantile of the engine terms' draws (plan.decision_risk.decision_shares) on a grid with speculation in
        it, else :attr:`centre_score`."""
        return self._decision_in_memory[0]

    def near_best_within(self, fits: np.ndarray) -> np.ndarray | None:
        """Per cell, whether the K comes within the schedule's tolerance of the best K in at least half of the
        terms' draws (as likely as not as good as the best inside their spread); None at the centre."""
        return self._decision(fits)[1]

    def _decision(self, fits: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        """(score K* is chosen on, the near-best mask or None) over the K ``fits`` allows."""
        if self.decision_quantile <= 0 or not (self.ks > 0).any():
            return self.centre_score, None
        d = self.as_engine_runs
        itl, vary_box = d._term_draws
        score, near = decision_shares(d, d.step_terms, d.decision_quantile, d.banded_acceptance_length, fits,
                                      itl=itl, vary_box=vary_box)
        return score, near >= 1.0 - self.schedule_tolerance

    @cached_property
    def dsd_k0(self):
        """The K = 0 entry of a dynamic-K table as the engine runs it (StepTime, each part (n_batch, 1[, n_ctx])):
        the plain step and the drafter's extend pass; None where K = 0 there is plain decoding."""
        sc = self.k0_extend_scenario
        if sc is None:
            return None
        i0 = self.k_index(0)
        col = lambda a: a if np.ndim(a) < 2 or np.shape(a)[1] == 1 else a[:, i0:i0 + 1]  # noqa: E731
        B, K = self.cell_axes()
        return engine_pass_times(sc, B, col(K), self.passes.sliced(col), extend_at_k0=True)

    @property
    def passes(self) -> StepPasses:
        """The grid's passes as the step composes them."""
        return StepPasses(self.verify, self.draft_pass, self.draft_passes, self.in_graph, self.draft_extend,
                          self.verify_context)

    def cell_axes(self) -> tuple[np.ndarray, np.ndarray]:
        """B and K shaped to broadcast over the cells ((B, K) or (B, K, L))."""
        tail = (1,) * (self.itl_s.ndim - 2)
        return (self.batch_sizes.reshape((-1, 1) + tail).astype(float),
                self.ks.reshape((1, -1) + tail).astype(float))

    def step_parts(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(kernel s, host s, collective calls, host room s) of every cell, each over the cells' shape: what the engine
        terms compose a step from (specs.step_terms; with the scenario's terms applied where it has them)."""
        cells = lambda a: np.broadcast_to(a, self.itl_s.shape)  # noqa: E731
        return (cells(self.verify_s + self.draft_step_s), cells(self.overhead_s), cells(self.collective_calls),
                cells(self.host_room_s))

    @cached_property
    def as_engine_runs(self) -> "Grid":
        """The grid whose K = 0 column is the step a dynamic-K server runs at a K = 0 entry (:attr:`dsd_k0`: its
        engine still runs the drafter's extend pass there), which K* is chosen on and the K* columns report;
        this grid itself where that entry is plain decoding. The plain-decoding baseline stays this grid's."""
        k0 = self.dsd_k0
        if k0 is None:
            return self
        i0 = self.k_index(0)
        shape = self.itl_s.shape

        def at_k0(arr, col):
            out = np.array(np.broadcast_to(arr, shape), dtype=float)
            out[:, i0] = np.broadcast_to(col, out[:, i0:i0 + 1].shape)[:, 0]
            return out

        itl = at_k0(self.itl_s, k0.total_s)
        al0 = np.asarray(self.acceptance_length)[i0]  # 1 token per step at K = 0
        return replace(self, verify_s=at_k0(self.verify_s, k0.verify_s), draft_step_s=at_k0(self.draft_step_s, k0.draft_s),
                       overhead_s=at_k0(self.overhead_s, k0.overhead_s), itl_s=itl,
                       goodput_per_seq=at_k0(self.goodput_per_seq, al0 / np.asarray(k0.total_s)),
                       k0_extend_scenario=None, collective_calls=at_k0(self.collective_calls, k0.calls),
                       host_room_s=self.host_room_s if no_room(self.host_room_s) and no_room(k0.room_s)
                       else at_k0(self.host_room_s, k0.room_s))

    @property
    def centre_score(self) -> np.ndarray:
        """Goodput at the terms' centre (the robust score over the acceptance band when there is one), with K = 0
        as the engine runs it in a dynamic-K table (:attr:`as_engine_runs`)."""
        d = self.as_engine_runs
        if d.banded_acceptance_length is None:
            return d.goodput_per_seq
        return robust_score(d.itl_s, d.banded_acceptance_length, d.fits_memory)

    def centre_k(self) -> np.ndarray:
        """K per batch size at the terms' centre (the raw argmax of :attr:`centre_score`); -1 where none fits."""
        idx = argmax_k_index(self.centre_score, self.fits_memory)
        return np.where(idx >= 0, self.ks[np.maximum(idx, 0)], -1)

    def argmax_k_index(self) -> np.ndarray:
        """Index into ks of the raw per-batch argmax (of goodput, or of the robust score with a band);
        -1 where no K fits in memory."""
        return argmax_k_index(self.selection_score, self.fits_memory)

    def acceptance_sensitive(self) -> np.ndarray | None:
        """Per batch size: whether K* at the band's low rates differs from K* at its high rates."""
        if self.banded_acceptance_length is None:
            return None
        low, _, high = k_at_each_rate_set(self.itl_s, self.banded_acceptance_length, self.fits_memory)
        return low != high

    def regime(self) -> np.ndarray:
        """Which term dominates the step: compute, memory, comm, launch (incl. eager launches) or
        overhead (host time), per cell (read from each pass's per-op detail, once)."""
        return self._regime

    @cached_property
    def _regime(self) -> np.ndarray:
        passes = self.one_token_passes
        parts = [self.verify.detail.time_by_regime(), self.draft_pass.detail.time_by_regime()]
        names = ("compute", "memory", "comm", "launch")
        kernel_s = self.verify.total_s + self.draft_pass.total_s * passes
        if self.verify_context is not None:  # attention over L: its regimes count with the verify pass
            by_ctx = self.verify_context.detail.time_by_regime()
            parts[0] = {n: parts[0][n] + by_ctx[n] for n in names}
            kernel_s = kernel_s + self.verify_context.total_s
        extend = self.draft_extend.detail if self.draft_extend is not None else None
        if extend is not None:  # at K > 0 only: x 1 or x 0, exact either way (no scaled copy of the detail)
            at_k = (self.ks > 0).astype(float).reshape((1, -1) + (1,) * (self.itl_s.ndim - 2))
            kernel_s = kernel_s + extend.total_s * at_k
            parts.append({n: v * at_k for n, v in extend.time_by_regime().items()})
        eager = np.maximum(self.verify_s + self.draft_step_s - kernel_s, 0.0)
        stacked = np.stack([np.broadcast_to(parts[0][n] + parts[1][n] * passes
                                            + (parts[2][n] if extend is not None else 0.0)
                                            + (eager if n == "launch" else 0.0), self.itl_s.shape)
                            for n in names] + [np.broadcast_to(self.overhead_s, self.itl_s.shape)])
        return np.array(names + ("overhead",))[np.argmax(stacked, axis=0)]

    def op_time_s(self, name: str) -> np.ndarray | None:
        detail = self.verify.detail
        if name not in detail.names:
            return None
        return detail.time_s[detail.names.index(name)]


_GRIDS: dict = {}  # the last few plain grids (specs.scenario.per_scenario)
_GRID_SLOTS = 8


def compute_grid(scenario, batch_sizes=None, ks=None, context_lens=None) -> Grid:
    """:func:`evaluate_grid`; the plain (B, K) grid is kept for the last few scenario objects (and profiles: a
    sensitivity run swaps one) and given again for the same axes, since callers only read a grid: a sizing
    search's dynamic-K policy asks for the grid its scenario's prediction computed."""
    if context_lens is not None:
        return evaluate_grid(scenario, batch_sizes, ks, context_lens)
    sc = scenario
    b = np.asarray(sc.batch_sizes if batch_sizes is None else batch_sizes, dtype=float)
    k = np.asarray(np.arange(sc.k_max + 1) if ks is None else ks, dtype=float)
    return per_scenario(_GRIDS, _GRID_SLOTS, sc, (b.tobytes(), k.tobytes()), lambda: evaluate_grid(sc, b, k))


def evaluate_grid(scenario, batch_sizes=None, ks=None, context_lens=None) -> Grid:
    """Evaluate the whole grid in one vectorized pass over (B, K, L).

    ``context_lens`` None: the plain (B, K) grid, the slice at the scenario's context_len (L of
    length 1, the axis dropped), with the acceptance band when the scenario has one. Given: the
    (B, K, L) grid over those context lengths, scheduled per context column on goodput."""
    sc = scenario
    b = np.asarray(sc.batch_sizes if batch_sizes is None else batch_sizes, dtype=float)
    k = np.asarray(np.arange(sc.k_max + 1) if ks is None else ks, dtype=float)
    c = np.asarray([sc.context_len] if context_lens is None else context_lens, dtype=float)
    # K* chosen under the engine terms' uncertainty (plan.decision_risk)
    grid = replace(_evaluate(sc, b, k, c), decision_quantile=getattr(sc, "decision_quantile", 0.0),
                   step_terms=getattr(sc, "step_terms", None))
    if context_lens is not None:
        return grid
    band = getattr(sc, "acceptance_band", 0.0)
    if band:
        grid.banded_acceptance_length = banded_draft_acceptance_lengths(sc.draft, sc.acceptance, k.astype(int), band)
    return _drop_context_axis(grid)


def _evaluate(sc, b, k, c) -> Grid:
    """Every term of the grid over (B, K, L) arrays: shapes (n_batch, n_k, n_ctx)."""
    B, K, C = b[:, None, None], k[None, :, None], c[None, None, :]
    Kv = verify_drafts(sc.draft, K)  # drafts the verify pass checks: K, or a tree's N (specs.drafts)
    # a padded graph runs its token ops at the padded size (physics.engine_time.pad), and its padding rows load
    # experts where the engine routes them (physics.engine_time.expert_batch)
    kept = step_model(sc).caches  # the physics' kept tables: the scenario's step model's
    tokens, in_graph = pad(sc.engine, B, Kv, caches=kept)
    tokens = tokens if pads(sc.engine) else None
    padded = expert_batch(sc.engine, sc.model, B, Kv, kept)
    # in this evaluation's scope a draft head's extend pass reads the verify pass's attention and experts
    # (PhysicsCaches.shared_ops)
    with kept.shared_ops() as caches:
        verify, verify_context = verify_over_context(sc, B, Kv, C, padded, tokens, caches)
        draft_pass, passes, extend = draft_costs(DraftSetting.of(sc, caches), B, K, C,
                                                 extend_expert_batch(sc.engine, B, K, padded))
    step = engine_pass_times(sc, B, K, StepPasses(verify, draft_pass, passes, in_graph, extend, verify_context))
    verify_s, draft_step_s, overhead, itl = step.verify_s, step.draft_s, step.overhead_s, step.total_s
    k0_extend = extend is not None and (k == 0).any() and (k > 0).any() and k0_runs_draft_extend(sc.engine)
    scale = sc.acceptance_context.factor(c) if getattr(sc, "acceptance_context", None) is not None else None
    # acceptance may fall with context; a tree's grows with its shape (draft_acceptance_lengths)
    al = draft_acceptance_lengths(sc.draft, sc.acceptance, k.astype(int), scale, c.size)
    memory = step_memory_bytes(sc.draft, sc.model, sc.deployment, B, Kv, C + Kv + 1)
    touched = None
    if sc.model.is_moe:
        p = expert_probabilities(sc.deployment.routing, sc.model.num_experts, sc.model.experts_per_token)
        # the count the cost model prices: B sequences x (K + 1) positions that route alike (reuse)
        touched = experts_touched_correlated(B[..., 0], Kv[..., 0] + 1, p, sc.deployment.routing.reuse)
    return Grid(b, k.astype(int), c.astype(int), verify, draft_pass, np.asarray(passes, dtype=float), verify_s,
                draft_step_s, np.broadcast_to(in_graph, itl.shape), overhead, itl, al, al[None, :, :] / itl, np.broadcast_to(memory, itl.shape),
                sc.hardware.memory_bytes * sc.deployment.memory_utilization, touched, sc.schedule_tolerance,
                None, extend, verify_context, k0_extend_scenario=sc if k0_extend else None,
                collective_calls=np.broadcast_to(np.asarray(step.calls, dtype=float), itl.shape),
                host_room_s=step.room_s if no_room(step.room_s) else np.broadcast_to(step.room_s, itl.shape))


def _drop_context_axis(grid: Grid) -> Grid:
    """The plain (B, K) grid from a grid with L of length 1: every cell array without its last axis."""
    cell = lambda a: None if a is None else a[..., 0]  # noqa: E731
    cost = lambda c: None if c is None else c.sliced(cell)  # noqa: E731
    g = grid
    return Grid(g.batch_sizes, g.ks, g.context_lens, cost(g.verify), cost(g.draft_pass), cell(g.draft_passes),
                cell(g.verify_s), cell(g.draft_step_s), cell(g.in_graph), cell(g.overhead_s), cell(g.itl_s),
                g.acceptance_length[:, 0], cell(g.goodput_per_seq), cell(g.memory_per_gpu_bytes),
                g.memory_capacity_bytes, g.experts_touched, g.schedule_tolerance, g.banded_acceptance_length,
                cost(g.draft_extend), None, g.decision_quantile, g.step_terms, g.k0_extend_scenario,
                cell(g.collective_calls), g.host_room_s if no_room(g.host_room_s) else cell(g.host_room_s))
