"""One decode step's time, composed in one place: the planner's grid (simulator.plan.grid), the serving
simulation's step pricer (simulator.serving.pricer, a scalar twin per step and the vector one) and, through
the grid's parts, the few-shot and learned fits (calibration.fewshot, calibration.learn_step) read it.

For B sequences and K drafts (K = 0: plain decoding), with the passes' GPU time priced by the physics::

    verify   = GPU time                                    in a CUDA graph (engine_time.pad: the one padding rule)
             = max(GPU time, kernels x eager launch)       outside one
    draft    = passes x one draft pass (as the engine runs it), or, with an extend pass over the verified
               tokens, (passes - 1) x one pass + the extend pass (K > 0; at K = 0 on a speculating server
               whose engine still runs it there, the extend pass alone: specs.engine_settings)
    overhead = profile step overhead(B, K)                 a measured profile's fitted scheduler terms
             + exposed host(B, K) + passes x per_draft_pass  the engine profile's host time (engine_time)
             + schedule + schedule_per_seq x B             a serving config's extra host time (0 in the grid)
    with engine terms (simulator/specs/step_terms.py: a deployment fit, else the learned layer):
    verify, draft x s s_spec^[K > 0];   overhead + the terms' added seconds (c_coll x the step's collective
    calls among them: :func:`step_collective_calls`, the verify pass's + the draft passes' as the engine runs them;
    their host time only beyond the room the engine's overlap window leaves: engine_time.host_exposed_and_room_s)
    step     = verify + draft + overhead
    a speculating server at K = 0 (DSD's machinery on, nothing drafted): step x (1 + frac) + s

:func:`step_time` is the formula over arrays; :func:`step_time_scalar` the same arithmetic in the same order
on Python floats, for the serving loop's one step at a time (tests hold the two equal to the bit).

:class:`StepModel` is what these are composed for: one per (model, deployment, device, engine profile, draft,
calibration profile), holding every cache the physics keeps while pricing its passes
(:class:`simulator.physics.caches.PhysicsCaches`); the plan layer builds it once and keeps the last few
(simulator.plan.step_models), and the grid and the serving pricer read their tables through it.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from simulator.physics.caches import PhysicsCaches
from simulator.physics.collectives import CollectiveCounts, collective_counts
from simulator.physics.engine_time import (host_exposed_and_room_s, host_exposed_and_room_scalar_s, pad,
                                          pass_time_s)
from simulator.physics.layers import rank_tokens


@dataclass(eq=False)
class StepModel:
    """One scenario's step: what its passes are priced with and the physics' caches (``caches``), which live as
    long as this object. Scenarios that differ only in what does not price a pass (acceptance, traffic, SLO,
    axes, the engine terms, applied on top by :func:`step_time`) share one (:meth:`key_of`)."""

    model: object
    deployment: object
    hardware: object
    engine: object
    draft: object
    profile: object = None
    caches: PhysicsCaches = field(default_factory=PhysicsCaches)
    # the collective calls of its verify, draft and extend passes (physics.collectives), counted when it is built
    collective_counts: CollectiveCounts | None = None

    @classmethod
    def of(cls, sc) -> "StepModel":
        """The step model of a scenario (anything with model, deployment, hardware, engine, draft, profile)."""
        draft = getattr(sc, "draft", None)
        return cls(sc.model, sc.deployment, sc.hardware, getattr(sc, "engine", None), draft,
                   getattr(sc, "profile", None),
                   collective_counts=collective_counts(sc.model, sc.deployment, sc.hardware, draft))

    @staticmethod
    def key_of(sc) -> tuple:
        """What a step model is kept by: its specs by value (frozen dataclasses), the profile by identity (a
        sensitivity run swaps in a scaled copy)."""
        return (sc.model, sc.deployment, sc.hardware, getattr(sc, "engine", None), getattr(sc, "draft", None),
                id(getattr(sc, "profile", None)))


@dataclass(frozen=True)
class ServingExtras:
    """What a serving configuration adds to a step beyond the engine profile ([serving] section; all 0 in
    the planner's grid): host time per step and per sequence, and the DSD-at-K=0 cost (a speculating
    server's step that drafts nothing still runs its bookkeeping and rejection sampler)."""

    schedule_s: float = 0.0
    schedule_per_seq_s: float = 0.0
    k0_frac: float = 0.0
    k0_s: float = 0.0


NO_EXTRAS = ServingExtras()


@dataclass(frozen=True)
class StepTime:
    """A step's parts [s] as the engine runs them, terms applied; ``total_s`` their sum (with the DSD-at-K=0
    cost where asked)."""

    verify_s: np.ndarray
    draft_s: np.ndarray
    overhead_s: np.ndarray
    total_s: np.ndarray
    calls: np.ndarray | float = 0.0  # the step's collective calls (step_collective_calls)
    room_s: np.ndarray | float = 0.0  # the host room its engine's overlap window leaves (engine_time)


def lin_index(engine, dep, batch, k, tokens=None, caches=None) -> tuple[np.ndarray, np.ndarray]:
    """(the entry T of a table of token ops priced at rank_tokens(dep, T, 1) that a step reads, whether it runs
    as a graph; serving.pricer's lin(T)): the step's padded tokens; under data-parallel attention a
    decode-only step's busiest replica runs ceil(B_pad / dp) (K + 1) of them, as the grid prices it
    (physics.pass_tables.verify_plan), so the entry dp x that. ``tokens`` None: decode only; ``caches``: the
    step model's (engine_time.pad)."""
    padded, graph = pad(engine, batch, k, tokens, caches)
    if not dep.dp_attention:
        return padded, graph
    batch, k = np.broadcast_arrays(np.asarray(batch, dtype=float), np.asarray(k, dtype=float))
    decode = padded if tokens is None else np.where(np.asarray(tokens) == batch * (k + 1), padded, np.nan)
    rank = np.rint(rank_tokens(dep, decode / (k + 1), k + 1)) * dep.attention_dp
    return np.where(np.isnan(decode) | (batch < 1), padded, rank), graph


def profile_overhead_s(profile, batch, k) -> np.ndarray:
    """Scheduler, sampling bookkeeping and host work per step: fitted terms of a profile, else 0."""
    if profile is None:
        return np.zeros(np.broadcast(batch, k).shape)
    return (profile.step_overhead_fixed_s + profile.step_overhead_per_seq_s * batch
            + profile.step_overhead_per_token_s * batch * (k + 1))


def draft_time_s(one_pass_s, passes, k, extend_s=None, extend_at_k0: bool = False):
    """All draft passes of a step: ``passes`` one-token passes, or, with an extend pass over the verified
    tokens, ``passes`` - 1 of them and the extend pass, at K > 0; at K = 0 nothing, or (``extend_at_k0``: a
    speculating server whose K = 0 entry still runs it, specs.engine_settings.k0_runs_draft_extend) the extend
    pass alone."""
    if extend_s is None:
        return one_pass_s * passes
    return np.where(k > 0, one_pass_s * (passes - 1) + extend_s, extend_s if extend_at_k0 else 0.0)


def step_collective_calls(counts: CollectiveCounts, passes, k, host_draft: bool = False, extend: bool = True,
                          extend_at_k0: bool = False):
    """Collective calls of a step: the verify pass's + its draft passes' as :func:`draft_time_s` composes the
    draft passes (it is linear in a pass's cost, so it composes counts as it composes times); ``extend`` False: the
    step runs no extend pass (a plain pricer); a host n-gram draft runs no draft ops."""
    if host_draft:
        return np.full(np.shape(k), counts.verify)
    ext = counts.draft_extend if extend else None
    return counts.verify + draft_time_s(counts.draft_pass, passes, k, ext, extend_at_k0)


def terms_tables(terms, b_top: int, k_max: int) -> tuple[list | None, list | None]:
    """(the terms' kernel factor per K = 0..k_max, their added seconds per (B, K), B = 0..b_top) as Python
    lists, for :func:`step_time_scalar`; (None, None) without terms."""
    if terms is None:
        return None, None
    B, K = np.arange(b_top + 1, dtype=float)[:, None], np.arange(k_max + 1, dtype=float)[None, :]
    return (np.broadcast_to(terms.kernel_factor(K[0]), (k_max + 1,)).tolist(),
            np.broadcast_to(terms.added_s(B, K), (b_top + 1, k_max + 1)).tolist())


def step_time(engine, tp: int, batch, k, verify_gpu_s, verify_kernels, in_graph, eager_s: float, draft_s, passes,
              host_draft: bool, profile_s, terms=None, extras: ServingExtras = NO_EXTRAS,
              spec_mode: bool = False, copy: bool = True, calls=0.0) -> StepTime:
    """The module's formula over arrays (numpy broadcasting). ``engine`` the EngineProfile; ``verify_gpu_s``
    and ``verify_kernels`` the target pass's GPU time and kernel count, ``in_graph`` whether it replays a
    graph, ``eager_s`` the launch time per kernel outside one; ``draft_s`` the draft passes of the step as
    the engine runs them (:func:`draft_time_s`), ``passes`` their number, ``host_draft`` True for a host-side
    n-gram lookup (no draft loop); ``profile_s`` :func:`profile_overhead_s` at the cells; ``terms`` a
    StepTerms or None (--physics-only); ``spec_mode``: a speculating server (the DSD-at-K=0 cost at K = 0).
    ``copy`` False: the verify time may be ``verify_gpu_s`` itself (engine_time.pass_time_s); ``calls`` the step's
    collective calls (:func:`step_collective_calls`), which the terms' ``collective_s`` is paid per."""
    verify = pass_time_s(verify_gpu_s, verify_kernels, in_graph, eager_s, copy=copy)
    # room: what the overlap window leaves, where the terms' host time hides
    host, room = host_exposed_and_room_s(engine, batch, k, verify + draft_s, draft_s, tp)
    if not host_draft:  # host work between chained draft passes (none at K = 0: no passes)
        host = host + passes * engine.per_draft_pass_s
    overhead = profile_s + host
    if extras.schedule_s or extras.schedule_per_seq_s:
        overhead = overhead + extras.schedule_s + extras.schedule_per_seq_s * batch
    draft = draft_s
    if terms is not None:
        f = terms.kernel_factor(k)
        verify, draft = verify * f, draft * f
        overhead = overhead + terms.added_s(batch, k, calls, room)
    total = verify + draft + overhead
    if spec_mode:
        total = np.where(np.asarray(k) > 0, total, total * (1.0 + extras.k0_frac) + extras.k0_s)
    return StepTime(verify, draft, overhead, total, calls, room)


def step_time_scalar(engine, tp: int, batch: int, k: int, verify_gpu_s: float, verify_kernels: float,
                     in_graph: bool, eager_s: float, draft_s: float, passes: float, host_draft: bool,
                     profile_s: float, factor: float | None, added_s: float, extras: ServingExtras,
                     spec_mode: bool, collective_s: float = 0.0, calls: float = 0.0) -> float:
    """:func:`step_time`'s total for one step in Python floats (the serving loop prices one step at a time),
    the same arithmetic in the same order; ``factor`` and ``added_s`` the terms' kernel factor and added
    seconds at (B, K) without the collective calls (None: no terms: :func:`terms_tables`), ``collective_s`` the
    terms' time per collective call and ``calls`` the step's."""
    verify = verify_gpu_s if in_graph else max(verify_gpu_s, verify_kernels * eager_s)
    host, room = host_exposed_and_room_scalar_s(engine, batch, k, verify + draft_s, draft_s, tp)
    if not host_draft:
        host += passes * engine.per_draft_pass_s
    overhead = profile_s + host
    if extras.schedule_s or extras.schedule_per_seq_s:
        overhead = overhead + extras.schedule_s + extras.schedule_per_seq_s * batch
    if factor is not None:
        verify, draft_s = verify * factor, draft_s * factor
        overhead = overhead + ((max(added_s - room, 0.0) if room else added_s) + collective_s * calls)
    total = verify + draft_s + overhead
    if spec_mode and k == 0:
        total = total * (1.0 + extras.k0_frac) + extras.k0_s
    return total
