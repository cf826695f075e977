"""The passes of a step over the grid's cells and the step they compose as the engine runs it.

The verify pass is priced over (B, K, L) with its L-independent ops priced once over (B, K, 1)
(:func:`verify_over_context`; a tree whose K axis spans both attention surfaces priced side by side,
:func:`surface_sides`); :func:`engine_pass_times` composes the verify pass, the draft passes and the drafter's
extend pass into the step as the engine runs them (graph replay or eager launches, host time and terms:
:func:`simulator.physics.step_model.step_time`). The grid (simulator.plan.grid) reads both.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from simulator.physics.attention import MAX_DECODE_SURFACE_QUERIES
from simulator.physics.engine_time import draft_extend_in_graph, draft_in_graph, pad_key, pass_time_s
from simulator.physics.operators import PassCost, price_pass
from simulator.physics.pass_tables import price_plan, verify_plan
from simulator.physics.step_model import draft_time_s, profile_overhead_s, step_collective_calls, step_time
from simulator.plan.step_models import step_model

@dataclass(frozen=True)
class StepPasses:
    """The passes of a step over the cells, as :func:`engine_pass_times` composes them: the verify pass (on a context
    axis its L-independent ops, ``verify_context`` the L-dependent ones), one draft pass and the number of them,
    whether the verify pass replays a graph, and the drafter's extend pass (None without one)."""

    verify: PassCost
    draft_pass: PassCost
    draft_passes: np.ndarray
    in_graph: np.ndarray
    draft_extend: PassCost | None = None
    verify_context: PassCost | None = None

    def sliced(self, cells) -> "StepPasses":
        """Every pass and array read through ``cells`` (a function of an array)."""
        cost = lambda c: None if c is None else c.sliced(cells)  # noqa: E731
        return StepPasses(cost(self.verify), cost(self.draft_pass), cells(self.draft_passes), cells(self.in_graph),
                          cost(self.draft_extend), cost(self.verify_context))


def engine_pass_times(sc, B, K, p: StepPasses, extend_at_k0: bool = False):
    """The step of the scenario over the grid (:func:`simulator.physics.step_model.step_time`, terms applied):
    its passes as the engine runs them; with an extend pass, ``draft_passes`` - 1 one-token passes and the extend
    pass at K > 0 (and at K = 0 with ``extend_at_k0``). The verify pass is ``verify`` plus, on a context axis,
    its L-dependent ops ``verify_context``; ``in_graph`` whether it replays a graph (physics.engine_time.pad)."""
    eng = sc.engine
    total_s, kernels = p.verify.total_s, p.verify.n_kernels
    if p.verify_context is not None:
        total_s = total_s + p.verify_context.total_s
        kernels = kernels + p.verify_context.n_kernels
    host_draft = sc.draft.method == "ngram"  # prompt lookup runs on the host: no kernels, no draft loop
    draft_one = p.draft_pass.total_s if host_draft else pass_time_s(
        p.draft_pass.total_s, p.draft_pass.n_kernels, draft_in_graph(eng, B), eng.eager_launch_per_kernel_s)
    extend = p.draft_extend
    extend_s = None if extend is None else pass_time_s(
        extend.total_s, extend.n_kernels, draft_extend_in_graph(eng, B, K, p.in_graph), eng.eager_launch_per_kernel_s,
        copy=False)
    draft_s = draft_time_s(draft_one, p.draft_passes, K, extend_s, extend_at_k0)
    calls = step_collective_calls(step_model(sc).collective_counts, p.draft_passes, K, host_draft, extend is not None,
                                  extend_at_k0)
    # on a context axis the verify sum is this function's own array: no copy of it
    return step_time(eng, sc.deployment.tp, B, K, total_s, kernels, p.in_graph, eng.eager_launch_per_kernel_s,
                     draft_s, p.draft_passes, host_draft, profile_overhead_s(sc.profile, B, K),
                     getattr(sc, "step_terms", None), copy=p.verify_context is None, calls=calls)


def _has_ctx_axis(op, n_ctx: int) -> bool:
    """Whether an op's size depends on the context axis (the last of a 3-D grid)."""
    shape = op.cells_shape()
    return len(shape) == 3 and shape[2] == n_ctx


def surface_sides(K) -> np.ndarray | None:
    """Over the K axis (axis 1) of a verify pass's drafts: whether each column's K + 1 queries per sequence are
    priced as a decode attention (physics.attention.MAX_DECODE_SURFACE_QUERIES) rather than a prefill kernel; None
    where every column is on one side. An attention op is priced on one surface, chosen by its largest query
    count, so a grid whose K axis spans both (a tree of more than 31 draft tokens: K = 0 and 1 below, deeper
    trees above) prices each side as its own pass: plain decoding is not priced as a prefill kernel."""
    if np.ndim(K) < 2 or np.shape(K)[1] < 2:
        return None
    queries = np.asarray(K, dtype=float).max(axis=tuple(i for i in range(np.ndim(K)) if i != 1)) + 1.0
    decode = queries <= MAX_DECODE_SURFACE_QUERIES
    return decode if decode.any() and not decode.all() else None


def _k_columns(a, cols):
    """``a``'s columns ``cols`` of the K axis (axis 1) where it has one; else ``a``."""
    if a is None or np.ndim(a) < 2 or np.shape(a)[1] == 1:
        return a
    return np.asarray(a)[:, cols]


def verify_over_context(sc, B, K, C, expert_batch=None, padded_tokens=None,
                        caches=None) -> tuple[PassCost, PassCost | None]:
    """The verify pass over (B, K, L): (its ops priced over (B, K, 1), None) with L of length 1;
    else (the ops whose size does not depend on L, priced once over (B, K, 1); attention, priced over
    (B, K, L)). The per-op times are those of ``verify_cost`` (the token ops read from their table,
    :mod:`simulator.physics.pass_tables`, kept in ``caches``, default the scenario's step model's); the verify
    time is their sum:

        t(B, K, L) = sum_{o context-free} t_o(B, K) + sum_{o attention} t_o(B, K, L)
    """
    shape = np.broadcast_shapes(B.shape, K.shape)  # (nb, nk, 1); B and K keep their own axes
    n_ctx = C.shape[-1]
    caches = step_model(sc).caches if caches is None else caches
    decode = surface_sides(K)
    if decode is not None:  # a tree's verify runs K + 1 > 32 queries at some K: price each side on its own kernel
        sides = [verify_over_context(sc, B, K[:, cols], C, _k_columns(expert_batch, cols),
                                     _k_columns(padded_tokens, cols), caches) for cols in (decode, ~decode)]
        order = np.argsort(np.concatenate([np.flatnonzero(decode), np.flatnonzero(~decode)]), kind="stable")
        return tuple(None if parts[0] is None else PassCost.joined_on_k(list(parts), order)
                     for parts in zip(*sides))
    plan = verify_plan(sc.model, sc.deployment, sc.hardware, B, K, C, expert_batch, padded_tokens,
                       None if padded_tokens is None else pad_key(sc.engine), caches)
    if n_ctx == 1:
        return price_plan(plan, sc.hardware, sc.profile, shape, caches), None
    cell_ops = plan.cells()
    on_ctx = lambda ops, yes: [o for o in ops if _has_ctx_axis(o, n_ctx) == yes]  # noqa: E731
    free = replace(plan, cells=lambda: on_ctx(cell_ops, False), full=lambda: on_ctx(plan.full(), False),
                   cell_key=None if plan.cell_key is None else plan.cell_key + ("context-free",))
    ctx_ops = on_ctx(cell_ops, True)
    return (price_plan(free, sc.hardware, sc.profile, shape, caches),
            price_pass(ctx_ops, sc.hardware, sc.deployment, sc.profile, shape[:2] + (n_ctx,), caches)
            if ctx_ops else None)
