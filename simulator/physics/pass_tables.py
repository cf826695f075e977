"""A pass priced from whole-token tables: the ops sized by a token count alone summed once per count,
the others priced per cell.

Most ops of a pass (every GEMM, norm, all-reduce, the LM head) are sized by the busiest attention
replica's token count and nothing else, so their summed time is a function of that count: tabulated
over whole counts (each the first time a cell asks for it), a grid reads one entry per cell. Attention (sequences, positions, context),
the routed experts (distinct experts from sequences x positions) and a verify pass's sampling (its bytes
per logit depend on K) are priced per cell as before::

    t_pass(B, q, L) = sum_s table_s[r_s(B, q)] + sum_{o per cell} t_o(B, q, L)

r_s: a segment's token count per cell (the replica's B q; B for a head that reads one row per sequence).
Entry t of a table is its ops priced at t tokens, each at its own shape (the price a cell with t tokens
gives them: every such op's price is a function of its token count alone), so the pass's time is the
per-op sum's up to the order of the sum. A table prices a count the first time a cell asks for it, grows
(doubling) when a larger count is asked for, and is kept per segment and per what it is priced with (specs,
deployment and device by value, the profile object) in the step model's caches (``caches``, a
:class:`simulator.physics.caches.PhysicsCaches`; None: priced afresh, nothing kept): the scenarios of a sweep
that share a step model share it.
The per-op detail (:attr:`PassCost.detail`) is the whole op list's, priced per cell when first read.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from simulator.physics.caches import PhysicsCaches, make_room
from simulator.physics.forward_pass import forward_cell_ops, forward_ops, head_ops, head_sampling_op, verify_logit_bytes
from simulator.physics.layers import attention_deployment, decoder_token_ops, rank_tokens
from simulator.physics.measured import whole_tokens
from simulator.physics.operators import PassCost, PassTime, evaluate, pass_time, price_pass
from simulator.physics.ops import Op, array_key
from simulator.specs.deployment import Deployment
from simulator.specs.hardware import Hardware
from simulator.specs.models import ModelSpec
from simulator.specs.profile import Profile

# Largest token count a table holds (64 K entries, 0.5 MB); a pass asked at more is priced per cell
MAX_TABLE_TOKENS = 1 << 16
MIN_TABLE_TOKENS = 1 << 10


@dataclass(frozen=True)
class Segment:
    """Ops of a pass sized by one token count: ``build(t)`` gives them at token counts ``t``, ``tokens``
    is that count per cell and ``key`` what the ops depend on besides it and the plan's objects."""

    key: tuple
    tokens: np.ndarray
    build: Callable[[np.ndarray], list[Op]]


@dataclass(frozen=True)
class PassPlan:
    """One pass: its token segments, the ops priced per cell (``cells()``), all its ops in order
    (``full()``, for the per-op detail and for cells no table holds), the deployment its ops are priced
    under and the spec objects its tables depend on beside the device and profile (models, the
    deployment a derived one comes from)."""

    dep: Deployment
    specs: tuple  # hashable (frozen dataclasses): the tables are kept per their values
    segments: tuple[Segment, ...]
    cells: Callable[[], list[Op]]
    full: Callable[[], list[Op]]
    # what ``cells()`` is built from besides ``specs`` and ``dep`` (arrays by value: ops.array_key); the
    # per-cell ops' summed time is kept per it (:func:`cells_time`); None: priced every time
    cell_key: tuple | None = None


def token_table(seg: Segment, plan: PassPlan, hw: Hardware, profile: Profile | None, index: np.ndarray,
                caches: PhysicsCaches | None = None):
    """(the segment's time at whole token counts 0..N, N >= every count in ``index``, launches, kernels):
    entry t = :func:`pass_time` of ``seg.build`` at t tokens, priced the first time a cell asks for t (at
    the asking cells themselves: a new table costs what pricing its cells costs), NaN where no cell has
    asked yet; entry 0 unused. Kept per segment and what it is priced with in ``caches.token_tables``."""
    # specs and device by value (frozen dataclasses: every scenario of a sweep builds its own deployment),
    # the profile by identity (a sensitivity run swaps in a scaled copy)
    key = seg.key + (plan.dep, hw, id(profile)) + tuple(plan.specs)
    kept = caches.token_tables if caches is not None else {}
    hit = kept.get(key)
    if hit is None or hit[0] is not profile:
        hit = None
        make_room(kept, PhysicsCaches.TOKEN_TABLE_SLOTS)
    top = int(index.max())
    if hit is None or hit[1].size <= top:  # a new table, or a larger one holding the entries priced so far
        table = np.full(max(MIN_TABLE_TOKENS, 1 << int(np.ceil(np.log2(top + 1)))) + 1, np.nan)
        if hit is not None:
            table[:hit[1].size] = hit[1]
        hit = kept[key] = [profile, table] + (hit[2:] if hit is not None else [None, None])
    table = hit[1]
    if hit[2] is None:  # a new table: the cells priced at their own counts, as without one, and kept
        priced = pass_time(seg.build(index.astype(float)), hw, plan.dep, profile, index.shape, caches=caches)
        table[index] = values = priced.total_s
        hit[2], hit[3] = float(priced.launch_s), float(priced.n_kernels)
        return values, hit[2], hit[3]
    values = table[index]
    missing = np.isnan(values)
    if missing.any():  # counts no cell asked before: priced now, at those cells alone
        asked = index[missing]
        values[missing] = table[asked] = pass_time(seg.build(asked.astype(float)), hw, plan.dep, profile,
                                                   asked.shape, caches=caches).total_s
    return values, hit[2], hit[3]


def cells_time(plan: PassPlan, hw: Hardware, profile: Profile | None, shape,
               caches: PhysicsCaches | None = None) -> PassTime:
    """:func:`pass_time` of the plan's per-cell ops over ``shape``, kept per what they are built from
    (``plan.cell_key``, specs and deployment by value, the device, the profile object) in ``caches.cells``
    (None: priced every time): a grid asked again
    over the same axes for the same model, device, deployment and profile (another acceptance, engine
    host terms, SLO or traffic mix) reads the same arrays instead of pricing them again."""
    if plan.cell_key is None or caches is None:
        return pass_time(plan.cells(), hw, plan.dep, profile, shape, caches=caches)
    key = plan.cell_key + (plan.dep, hw, id(profile), tuple(shape)) + tuple(plan.specs)
    hit = caches.cells.get(key)
    if hit is not None and hit[0] is profile:
        return hit[1]
    priced = pass_time(plan.cells(), hw, plan.dep, profile, shape, caches=caches)
    total = np.array(priced.total_s, dtype=float)  # its own array (a caller may hold the priced one)
    total.flags.writeable = False
    priced = PassTime(total, priced.launch_s, priced.n_kernels)
    make_room(caches.cells, PhysicsCaches.CELL_SLOTS)
    caches.cells[key] = (profile, priced)
    return priced


def price_plan(plan: PassPlan, hw: Hardware, profile: Profile | None, shape,
               caches: PhysicsCaches | None = None) -> PassCost:
    """The pass's summed time over ``shape``: its segments read from their tables, its per-cell ops priced
    (:func:`pass_time`), tables and per-cell prices kept in ``caches``; the whole op list priced per cell
    where a segment's counts are not whole or exceed :data:`MAX_TABLE_TOKENS`. The per-op detail is made from
    ``plan.full()`` on first read."""
    indices = [whole_tokens(seg.tokens, caches) for seg in plan.segments]  # (index, largest count) or (None, 0)
    if any(i is None or top > MAX_TABLE_TOKENS for i, top in indices):
        return price_pass(plan.full(), hw, plan.dep, profile, shape, caches)
    cells = cells_time(plan, hw, profile, shape, caches)
    tokens_s, launch, kernels = 0.0, cells.launch_s, cells.n_kernels
    for seg, (index, _) in zip(plan.segments, indices):
        seg_s, seg_launch, seg_kernels = token_table(seg, plan, hw, profile, index, caches)
        tokens_s = tokens_s + seg_s  # at the segments' own (smaller) shape, then once onto the cells
        launch, kernels = launch + seg_launch, kernels + seg_kernels
    return PassCost(PassTime(cells.total_s + tokens_s, launch, kernels),
                    lambda: evaluate(plan.full(), hw, plan.dep, profile, shape, caches=caches))


def verify_plan(model: ModelSpec, dep: Deployment, hw: Hardware, batch, k, context_len, expert_batch=None,
                padded_tokens=None, pad_key=None, caches: PhysicsCaches | None = None) -> PassPlan:
    """The target pass scoring K drafts (+ the bonus position) for each of B sequences over L cached keys
    (the ops of :func:`simulator.physics.forward_pass.forward_ops`): its token ops at the replica's B (K + 1)
    tokens, attention, routed experts and sampling (bytes per logit by K: plain or verifying) per cell;
    the routed experts at ``expert_batch`` sequences where given (a padded graph's routed padding rows), the
    token-sized ops and sampling at ``padded_tokens`` where given (a padded graph's size, all replicas':
    physics.engine_time.pad; ``pad_key``: what fixes them with B and K, keyed instead of the array); its ops
    built with ``caches`` (the step model's: simulator.physics.layers)."""
    queries = np.asarray(k, dtype=float) + 1.0
    logit_bytes = verify_logit_bytes(dep, k)
    if padded_tokens is None:
        tokens = rank_tokens(dep, batch, queries)
    else:  # a replica's share of a padded graph: whole again under data-parallel attention
        tokens = np.rint(rank_tokens(dep, padded_tokens / queries, queries)) if dep.dp_attention else padded_tokens
    token_batch = None if padded_tokens is None else (lambda: padded_tokens / queries)

    def cells() -> list[Op]:
        return forward_cell_ops(model, dep, hw, batch, queries, context_len, expert_batch=expert_batch,
                                caches=caches) + [
            head_sampling_op(attention_deployment(dep), tokens, model.vocab_size, "", logit_bytes)]

    return PassPlan(dep, (model,), (Segment(("verify",), tokens, lambda t: verify_token_ops(model, dep, hw, t)),),
                    cells, lambda: forward_ops(model, dep, hw, batch, queries, context_len, logit_bytes=logit_bytes,
                                               expert_batch=expert_batch,
                                               token_batch=None if token_batch is None else token_batch(),
                                               caches=caches),
                    cell_key=("verify",) + cell_inputs(batch, k, context_len, expert_batch) + (
                        pad_key if pad_key is not None else cell_inputs(padded_tokens),))


def cell_inputs(*arrays) -> tuple:
    """Arrays (or None) by value, as part of a :attr:`PassPlan.cell_key`."""
    return tuple(None if a is None else array_key(a) for a in arrays)


def verify_token_ops(model: ModelSpec, dep: Deployment, hw: Hardware, tokens) -> list[Op]:
    """The verify pass's token-sized ops at ``tokens`` tokens: every op of the forward pass but attention,
    routed experts and sampling (:func:`verify_plan` prices those per cell)."""
    tokens = np.asarray(tokens, dtype=float)
    return decoder_token_ops(model, dep, hw, tokens) + head_ops(model, attention_deployment(dep), hw, tokens,
                                                                model.vocab_size, sampling=False)


def lin_table(m, dep, hw, prof, t_top: int, caches: PhysicsCaches | None = None) -> tuple[np.ndarray, list]:
    """lin(T), a forward pass's ops but attention at T independent tokens (the serving step pricer's table),
    for T = 0..t_top (read-only) and as a list: the same ops priced over the same token counts for every
    pricer of equal specs and profile (a sweep's traffic mixes of one scenario), so priced once per step model
    (``caches.lins``; None: priced afresh)."""
    key = (m, dep, hw, id(prof), int(t_top))
    kept = caches.lins if caches is not None else {}
    hit = kept.get(key)
    if hit is None or hit[0] is not prof:
        t = np.arange(1, t_top + 1, dtype=float)
        ops = [o for o in forward_ops(m, dep, hw, t, 1.0, 0.0, caches=caches) if o.family != "attention"]
        lin = np.concatenate([[0.0], pass_time(ops, hw, dep, prof, t.shape, caches=caches).total_s])
        lin.flags.writeable = False
        make_room(kept, PhysicsCaches.LIN_SLOTS)
        hit = kept[key] = (prof, lin, lin.tolist())
    return hit[1], hit[2]
