"""Goodput grid over (batch size B, draft length K), optimal K per batch size, policy comparison.

    ITL(B, K)     = draft(B, K) + verify(B, K) + overhead(B, K)
                    (verify and draft as the engine runs them: in a CUDA graph or launched eagerly;
                    overhead = the engine's exposed host time + a profile's fitted step terms)
    goodput(B, K) = AL(K) / ITL(B, K)        tokens/s per sequence (x B for the whole batch)
    K*(B)         = argmax_K goodput(B, K) over the K whose memory fits;  K = 0 is plain decoding
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from simulator.physics.layers import verify_cost
from simulator.physics.memory import step_memory_bytes
from simulator.physics.operators import StepCost
from simulator.physics.draft_cost import draft_pass_cost
from simulator.physics.engine_time import draft_in_graph, host_exposed_s, pass_time_s, verify_in_graph
from simulator.physics.experts import experts_touched
from simulator.specs.routing import expert_probabilities


@dataclass
class Grid:
    """Arrays of shape (n_batch, n_k) unless noted."""

    batch_sizes: np.ndarray  # (n_batch,)
    ks: np.ndarray  # (n_k,)
    verify: StepCost
    draft_pass: StepCost  # one draft pass, shape (n_ops, n_batch, 1)
    draft_passes: np.ndarray  # passes per step, shape (1, n_k): K (or 1 for host-side n-gram at K > 0)
    verify_s: np.ndarray  # the verify pass as the engine runs it (graph replay or eager launches)
    draft_step_s: np.ndarray  # all draft passes of the step as the engine runs them
    in_graph: np.ndarray  # whether the verify pass replays a captured CUDA graph
    overhead_s: np.ndarray
    itl_s: np.ndarray
    acceptance_length: np.ndarray  # (n_k,)
    goodput_per_seq: np.ndarray
    memory_per_gpu_bytes: np.ndarray
    memory_capacity_bytes: float
    experts_touched: np.ndarray | None  # per MoE layer, verify step

    @property
    def fits_memory(self) -> np.ndarray:
        return self.memory_per_gpu_bytes <= self.memory_capacity_bytes

    @property
    def throughput(self) -> np.ndarray:
        return self.goodput_per_seq * self.batch_sizes[:, None]

    @cached_property
    def draft(self) -> StepCost:
        """Draft cost of the whole step over the grid (materialized on first use)."""
        return self.draft_pass.scaled(self.draft_passes)

    @property
    def draft_s(self) -> np.ndarray:
        return self.draft_step_s

    def k_index(self, k: int) -> int:
        hits = np.flatnonzero(self.ks == k)
        return int(hits[0]) if hits.size else -1

    def optimal_k_index(self) -> np.ndarray:
        """Index into ks of K* per batch size; -1 where no K fits in memory."""
        masked = np.where(self.fits_memory, self.goodput_per_seq, -np.inf)
        idx = np.argmax(masked, axis=1)
        return np.where(np.isfinite(masked.max(axis=1)), idx, -1)

    def regime(self) -> np.ndarray:
        """Which term dominates the step: compute, memory, comm, launch (incl. eager launches) or
        overhead (host time), per cell."""
        parts = [self.verify.time_by_regime(), self.draft_pass.time_by_regime()]
        names = ("compute", "memory", "comm", "launch")
        kernel_s = self.verify.total_s + self.draft_pass.total_s * self.draft_passes
        eager = np.maximum(self.verify_s + self.draft_step_s - kernel_s, 0.0)
        stacked = np.stack([np.broadcast_to(parts[0][n] + parts[1][n] * self.draft_passes
                                            + (eager if n == "launch" else 0.0), self.itl_s.shape)
                            for n in names] + [np.broadcast_to(self.overhead_s, self.itl_s.shape)])
        return np.array(names + ("overhead",))[np.argmax(stacked, axis=0)]

    def op_time_s(self, name: str) -> np.ndarray | None:
        if name not in self.verify.names:
            return None
        return self.verify.time_s[self.verify.names.index(name)]


def step_overhead_s(profile, batch, k) -> np.ndarray:
    """Scheduler, sampling bookkeeping and host work per step: fitted terms of a profile, else 0."""
    if profile is None:
        return np.zeros(np.broadcast(batch, k).shape)
    return (profile.step_overhead_fixed_s + profile.step_overhead_per_seq_s * batch
            + profile.step_overhead_per_token_s * batch * (k + 1))


def engine_pass_times(sc, B, K, verify: StepCost, draft_pass: StepCost, passes):
    """(verify s, draft s of the step, verify in a graph, exposed host s) as the scenario's engine runs them."""
    eng = sc.engine
    in_graph = verify_in_graph(eng, B, K)
    verify_s = pass_time_s(verify.total_s, verify.launch_s.sum(axis=0), verify.n_kernels, in_graph,
                           eng.eager_launch_per_kernel_s)
    host_draft = sc.draft.method == "ngram"  # prompt lookup runs on the host: no kernels, no draft loop
    draft_one = draft_pass.total_s if host_draft else pass_time_s(
        draft_pass.total_s, draft_pass.launch_s.sum(axis=0), draft_pass.n_kernels, draft_in_graph(eng, B),
        eng.eager_launch_per_kernel_s)
    draft_step_s = draft_one * passes
    host_s = host_exposed_s(eng, B, K, verify_s + draft_step_s, draft_step_s)
    if not host_draft:
        host_s = host_s + passes * eng.per_draft_pass_s
    return verify_s, draft_step_s, np.broadcast_to(in_graph, np.broadcast(verify_s, draft_step_s).shape), host_s


def compute_grid(scenario, batch_sizes=None, ks=None) -> Grid:
    """Evaluate the whole (B, K) grid in one vectorized pass."""
    sc = scenario
    b = np.asarray(sc.batch_sizes if batch_sizes is None else batch_sizes, dtype=float)
    k = np.asarray(np.arange(sc.k_max + 1) if ks is None else ks, dtype=float)
    B, K = b[:, None], k[None, :]
    verify = verify_cost(sc.model, sc.deployment, sc.hardware, B, K, sc.context_len, sc.profile)
    draft_pass, passes = draft_pass_cost(sc.draft, sc.model, sc.deployment, sc.hardware, B, K, sc.context_len,
                                         sc.profile)
    verify_s, draft_step_s, in_graph, host_s = engine_pass_times(sc, B, K, verify, draft_pass, passes)
    overhead = step_overhead_s(sc.profile, B, K) + host_s
    itl = verify_s + draft_step_s + overhead
    al = sc.acceptance.acceptance_length(k.astype(int))
    tokens_per_seq = sc.context_len + K + 1
    memory = step_memory_bytes(sc.draft, sc.model, sc.deployment, B, K, tokens_per_seq)
    touched = None
    if sc.model.is_moe:
        p = expert_probabilities(sc.deployment.routing, sc.model.num_experts, sc.model.experts_per_token)
        touched = experts_touched(B * (K + 1), p)
    return Grid(b, k.astype(int), verify, draft_pass, np.asarray(passes, dtype=float), verify_s, draft_step_s,
                in_graph, overhead, itl, al, al[None, :] / itl,
                np.broadcast_to(memory, itl.shape), sc.hardware.memory_bytes * sc.deployment.memory_utilization,
                touched)
