"""Roofline cost of one forward pass, per operator, vectorized over a (batch size, K) grid.

Every operator o has FLOPs F_o and bytes M_o per GPU; its time is

    t_o = count_o * (max(F_o / (P * eta_c), M_o / (BW * eta_m)) + kernels_o * tau_launch)

with eta = 1 and the catalog's assumed tau when no calibration profile is given (datasheet only).
Communication ops (tensor-parallel all-reduce, expert-parallel all-to-all) are priced as
latency + bytes / link bandwidth instead.

Letters: B sequences, q query tokens per sequence (K+1 when verifying K drafts), T = B*q tokens,
L context length (KV entries already cached), t tensor-parallel degree.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from simulator.specs.deployment import Deployment
from simulator.specs.hardware import Hardware
from simulator.specs.profile import Profile


@dataclass
class Op:
    """One operator, per GPU, per instance; ``count`` identical instances (layers) per pass."""

    name: str
    family: str
    flops: np.ndarray | float
    nbytes: np.ndarray | float
    kernels: float
    count: float
    eff_tokens: np.ndarray | float = 1.0  # size at which the compute efficiency is read
    comm_s: np.ndarray | float | None = None  # communication time (comm family only)


@dataclass
class StepCost:
    """Per-operator costs of a step, stacked: arrays have shape (n_ops, *grid)."""

    names: list[str]
    families: list[str]
    flops: np.ndarray
    nbytes: np.ndarray
    compute_s: np.ndarray
    memory_s: np.ndarray
    launch_s: np.ndarray
    time_s: np.ndarray

    @property
    def total_s(self) -> np.ndarray:
        return self.time_s.sum(axis=0)

    def bound(self) -> np.ndarray:
        """Per op: 'compute', 'memory' or 'comm' (which roofline term sets its time)."""
        kind = np.where(self.compute_s > self.memory_s, "compute", "memory")
        is_comm = np.array([f == "comm" for f in self.families])
        return np.where(is_comm.reshape((-1,) + (1,) * (kind.ndim - 1)), "comm", kind)

    def time_by_regime(self) -> dict[str, np.ndarray]:
        """Step time split into compute-bound, memory-bound, comm and launch seconds."""
        roof = self.time_s - self.launch_s
        bound = self.bound()
        return {regime: np.where(bound == regime, roof, 0.0).sum(axis=0) for regime in ("compute", "memory", "comm")} \
            | {"launch": self.launch_s.sum(axis=0)}

    def scaled(self, factor) -> "StepCost":
        """The same ops repeated ``factor`` times (e.g. K sequential draft passes)."""
        f = np.asarray(factor, dtype=float)
        return StepCost(self.names, self.families, self.flops * f, self.nbytes * f, self.compute_s * f,
                        self.memory_s * f, self.launch_s * f, self.time_s * f)

    @staticmethod
    def concat(parts: list["StepCost"]) -> "StepCost":
        shape = np.broadcast_shapes(*(p.time_s.shape[1:] for p in parts))
        stack = lambda attr: np.concatenate([np.broadcast_to(getattr(p, attr), (len(p.names),) + shape)  # noqa: E731
                                             for p in parts])
        return StepCost(sum((p.names for p in parts), []), sum((p.families for p in parts), []),
                        stack("flops"), stack("nbytes"), stack("compute_s"), stack("memory_s"),
                        stack("launch_s"), stack("time_s"))


def evaluate(ops: list[Op], hw: Hardware, dep: Deployment, profile: Profile | None, shape) -> StepCost:
    """Price each op on the device: roofline max(compute, memory) plus launch overhead."""
    peak = hw.peak_flops_per_s(dep.weight_dtype, dep.act_dtype)
    bw = hw.hbm_bandwidth_bytes_per_s
    tau = profile.launch_overhead_s if profile else hw.launch_overhead_s
    n = len(ops)
    flops = np.empty((n,) + shape)
    nbytes = np.empty((n,) + shape)
    compute_s = np.zeros((n,) + shape)
    memory_s = np.empty((n,) + shape)
    launch_s = np.array([op.count * op.kernels * tau for op in ops]).reshape((n,) + (1,) * len(shape))
    for i, op in enumerate(ops):
        np.multiply(op.flops, op.count, out=flops[i, ...])
        np.multiply(op.nbytes, op.count, out=nbytes[i, ...])
        if op.comm_s is not None:
            np.multiply(op.comm_s, op.count, out=memory_s[i, ...])
            continue
        if profile is None:
            np.multiply(flops[i, ...], 1.0 / peak, out=compute_s[i, ...])
            np.multiply(nbytes[i, ...], 1.0 / bw, out=memory_s[i, ...])
        else:
            eta_c = profile.compute_efficiency(op.name, op.family, op.eff_tokens)
            eta_m = profile.memory_efficiency(op.family, op.nbytes)
            np.divide(flops[i, ...], np.multiply(eta_c, peak), out=compute_s[i, ...])
            np.divide(nbytes[i, ...], np.multiply(eta_m, bw), out=memory_s[i, ...])
    if profile is not None and profile.engine_scale != 1.0:
        # end-to-end engine runs measured its kernels slower than the microbenchmarks by this factor
        compute_s *= profile.engine_scale
        memory_s *= profile.engine_scale
        launch_s = launch_s * profile.engine_scale
    time_s = np.maximum(compute_s, memory_s)
    time_s += launch_s
    return StepCost([o.name for o in ops], [o.family for o in ops], flops, nbytes, compute_s, memory_s,
                    np.broadcast_to(launch_s, time_s.shape), time_s)
