"""Roofline cost of one forward pass, per operator, vectorized over a (batch size, K) grid.

Every operator o has FLOPs F_o and bytes M_o per GPU; its time is

    t_o = count_o * (max(F_o / (P * eta_c), M_o / (BW * eta_m)) + kernels_o * tau_launch)

with eta = 1 and the catalog's assumed tau when no calibration profile is given (datasheet only).
Communication ops (tensor-parallel all-reduce, expert-parallel all-to-all) are priced as
latency + bytes / link bandwidth instead.

With a profile of measured GPU kernel tables (format 2) an op that has a surface is priced from
measurement, t = max(F / P, M / BW) / eta(shape), the efficiency read at the op's own shape (GEMM:
m tokens and the n*k weight size; decode attention: tokens and KV bytes; MoE: tokens per expert and
expert bytes); all-reduce comes from the measured latency-vs-bytes table of that GPU count. Their
measured latencies already hold the kernel's fixed cost, so no launch time is added to them.
Tile and wave quantization of GEMMs enter through those measured surfaces (read at the op's own m and
n*k), not through an analytic tile model: cuBLAS / CUTLASS pick among tile shapes, split-K and
stream-K per shape, so a fixed-tile wave count overstates the jumps that measurements show.

Letters: B sequences, q query tokens per sequence (K+1 when verifying K drafts), T = B*q tokens,
L context length (KV entries already cached), t tensor-parallel degree.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from simulator.specs.deployment import Deployment
from simulator.specs.hardware import Hardware
from simulator.specs.profile import Profile
from simulator.physics.monotone import (CACHE_RESIDENT_BYTES, MAX_LATTICE_TOKENS, MIN_BATCH_OCTAVES, MIN_KEY_OCTAVES,
                                        MIN_QUERIES, MIN_TOKEN_OCTAVES, gemm_lattice_s, lattice_time_s,
                                        attention_lattice_s, attention_time_s, log_lattice_interp, moe_lattice_s,
                                        moe_time_s)
from simulator.specs.surfaces import collective_time_s


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
    surface: str | None = None  # measured-efficiency family: gemm, attention_decode, mla_decode, moe
    shape: dict | None = None  # the op's size on that surface's axes (and m, n, k for GEMMs)
    dtype: str = "bf16"  # which dtype's surface prices it
    collective: tuple[str, int] | None = None  # (kind, GPUs) of a communication op; shape["bytes"] = message
    fabric_s: np.ndarray | float = 0.0  # inter-node stage added to the node's collective (physics/fabric.py)


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
    kernels: np.ndarray | None = None  # (n_ops,) kernels of each op per pass (for eager-launch pricing)

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
                        self.memory_s * f, self.launch_s * f, self.time_s * f, self.kernels)

    @property
    def n_kernels(self) -> float:
        return float(self.kernels.sum()) if self.kernels is not None else 0.0

    @staticmethod
    def concat(parts: list["StepCost"]) -> "StepCost":
        shape = np.broadcast_shapes(*(p.time_s.shape[1:] for p in parts))
        stack = lambda attr: np.concatenate([np.broadcast_to(getattr(p, attr), (len(p.names),) + shape)  # noqa: E731
                                             for p in parts])
        return StepCost(sum((p.names for p in parts), []), sum((p.families for p in parts), []),
                        stack("flops"), stack("nbytes"), stack("compute_s"), stack("memory_s"),
                        stack("launch_s"), stack("time_s"),
                        None if any(p.kernels is None for p in parts) else np.concatenate([p.kernels for p in parts]))


# Fused-MoE kernels differ by framework far more than GEMM or attention kernels do (routing, permute,
# grouped GEMM and combine fused or not), so a profile's MoE surface prices only its own engine's.
ENGINE_SPECIFIC_SURFACES = ("moe",)


def _surface_eta(op: Op, profile: Profile | None, engine: str = "", peak: float = 0.0, bw: float = 0.0):
    """(efficiency, whether it already is a monotone envelope's) of a surface-priced op, or None.

    With ``peak`` and ``bw`` given, GEMMs at one weight shape and routed experts are priced by the
    envelope of :mod:`simulator.physics.monotone` (returned as the efficiency that gives its time)."""
    if profile is None or op.surface is None or not profile.surfaces:
        return None
    table_engine = profile.provenance.get("engine")
    if op.surface in ENGINE_SPECIFIC_SURFACES and engine and table_engine and engine != table_engine:
        return None
    surf = profile.surface(op.surface, op.dtype)
    if surf is None:
        return None
    fix = profile.shape_correction(op.surface, op.dtype)
    t_env = _envelope_s(op, surf, fix, peak, bw) if peak and bw else None
    if t_env is not None:
        roof = np.maximum(np.asarray(op.flops, dtype=float) / peak, np.asarray(op.nbytes, dtype=float) / bw)
        eta_env = roof / np.maximum(t_env, 1e-300)
        if not np.isnan(t_env).any():
            return eta_env, True
        # cells the envelope does not cover: the surface's own efficiency, capped as evaluate caps it
        return np.where(np.isnan(t_env), _capped_eta(op, _raw_eta(op, surf, fix), peak, bw), eta_env), True
    return _raw_eta(op, surf, fix), False


def _capped_eta(op: Op, eta, peak: float, bw: float):
    """A measured table may beat the roofline (efficiency > 1) only where the op's data can live in L2
    and it is memory-bound there; elsewhere its efficiency is capped at 1."""
    in_cache = (np.asarray(op.nbytes) < CACHE_RESIDENT_BYTES) & (np.asarray(op.flops) / peak < np.asarray(op.nbytes) / bw)
    return np.where(in_cache, eta, np.minimum(eta, 1.0))


def _raw_eta(op: Op, surf, fix):
    eta = surf(**{axis: op.shape[axis] for axis in surf.axes})
    factor = fix.factor(op.shape) if fix is not None else None
    return eta if factor is None else eta / factor  # a shape the table measured: its own time


def _envelope_s(op: Op, surf, fix, peak: float, bw: float):
    """Per-instance time of ``op`` as the envelope max_{less work} t (simulator.physics.monotone), for
    a GEMM at one weight shape (whole token counts m) or the routed experts of an MoE layer; None
    for other ops (their surface time stands)."""
    shape = op.shape or {}
    if op.surface == "moe" and "probabilities" in shape:
        tokens = np.asarray(shape["tokens"], dtype=float)
        top = float(tokens.max()) if tokens.size else 1.0
        octaves = max(int(np.ceil(np.log2(max(top, 2.0)))), MIN_TOKEN_OCTAVES)
        queries = tokens / np.maximum(np.asarray(shape["sequences"], dtype=float), 1.0)
        q_top = float(max(2 ** int(np.ceil(np.log2(max(float(queries.max()) if queries.size else 1.0, 1.0)))),
                          MIN_QUERIES))
        entry = fix.key_of([shape[a] for a in fix.key_axes]) if fix is not None else ""
        if fix is not None and entry in fix.entries:  # the factors themselves: profiles may share a surface
            entry += "|" + b"".join(x.tobytes() for x in fix.entries[entry]).hex()
        p = np.asarray(shape["probabilities"], dtype=float)
        key = ("moe", entry, octaves, q_top, peak, bw, p.tobytes()) + tuple(
            float(shape[a]) for a in ("topk", "moe_ep", "params_slice", "w_bytes", "pair_bytes", "n"))
        hit = surf.envelopes.get(key)
        if hit is None:
            hit = moe_lattice_s(surf, fix, shape, float(2 ** octaves), q_top, peak, bw)
            if len(surf.envelopes) < 4096:
                surf.envelopes[key] = hit
        return moe_time_s(hit, tokens, shape["touched"], p)
    if op.surface in ("attention_decode", "mla_decode") and "q_heads" in shape:
        return _attention_envelope_s(op, surf, peak, bw)
    if op.surface != "gemm" or "w_bytes" not in shape or tuple(surf.axes) != ("m", "n", "k"):
        return None
    m = np.asarray(shape["m"], dtype=float)
    n, k = np.asarray(shape["n"], dtype=float), np.asarray(shape["k"], dtype=float)
    covered = (m >= 1) & (m <= MAX_LATTICE_TOKENS)
    if n.size != 1 or k.size != 1 or not m.size or not covered.any():
        return None
    n, k, w, a = float(n.ravel()[0]), float(k.ravel()[0]), float(shape["w_bytes"]), float(shape["a_bytes"])
    sub = surf.sliced((None, n, k))
    key = ("gemm", peak, bw, w, a)
    hit = sub.envelopes.get(key)
    if hit is None:
        hit = gemm_lattice_s(sub, n, k, w, a, peak, bw)
        sub.envelopes[key] = hit
    t = lattice_time_s(hit, np.clip(m, 1.0, MAX_LATTICE_TOKENS))
    return t if covered.all() else np.where(covered, t, np.nan)


def _attention_envelope_s(op: Op, surf, peak: float, bw: float):
    """Decode attention at q queries per sequence from the envelope of the measured q = 1 kernel over
    sequences and cached keys (:func:`simulator.physics.monotone.attention_time_s`)."""
    shape = op.shape
    if tuple(surf.axes) not in (("batch_heads", "context", "head_dim", "group"), ("batch", "context", "bytes")):
        return None
    batch, keys = np.broadcast_arrays(*(np.asarray(shape[a], dtype=float) for a in ("sequences", "keys")))
    # cells outside the lattice (no sequence or no key) keep the surface's own time (NaN here), so a
    # cell's price never depends on which other cells a grid evaluates
    covered = (batch >= 1) & (keys >= 1)
    if not batch.size or not covered.any():
        return None
    batch, keys = np.maximum(batch, 1.0), np.maximum(keys, 1.0)
    b_oct = max(int(np.ceil(np.log2(max(float(batch.max()), 2.0)))), MIN_BATCH_OCTAVES)
    l_oct = max(int(np.ceil(np.log2(max(float(keys.max()), 2.0)))), MIN_KEY_OCTAVES)
    static = tuple(float(shape.get(a, 0.0)) for a in ("q_heads", "kv_heads", "head_dim", "kv_elem_bytes", "a_bytes",
                                                       "group", "latent", "score_width"))
    key = ("attention", b_oct, l_oct, peak, bw) + static
    hit = surf.envelopes.get(key)
    if hit is None:
        hit = attention_lattice_s(surf, shape, float(2 ** b_oct), float(2 ** l_oct), peak, bw)
        if len(surf.envelopes) < 4096:
            surf.envelopes[key] = hit
    t_1 = log_lattice_interp(hit[2], hit[0], hit[1], batch, keys)
    t = attention_time_s(t_1, shape, op.flops, peak, bw)
    return t if covered.all() else np.where(np.broadcast_to(covered, np.shape(t)), t, np.nan)


def _collective_s(op: Op, profile: Profile | None):
    """Measured collective time: the requested implementation's table, else the other all-reduce's
    (a profile measured with NCCL still beats the datasheet link model for a custom all-reduce)."""
    if profile is None or op.collective is None or not profile.collectives:
        return None
    kind, gpus = op.collective
    if kind.startswith("all_reduce"):
        kind = next((k for k in (kind, "all_reduce", "all_reduce_nccl") if profile.collectives.get(k)), None)
    if kind is None or not profile.collectives.get(kind):
        return None
    return collective_time_s(profile.collectives, gpus, op.shape["bytes"], op=kind, monotone=True)


def evaluate(ops: list[Op], hw: Hardware, dep: Deployment, profile: Profile | None, shape) -> StepCost:
    """Price each op on the device: roofline max(compute, memory) plus launch overhead (see the
    module docstring for measured surfaces and collectives)."""
    peak = hw.peak_flops_per_s(dep.weight_dtype, dep.act_dtype)
    bw = hw.hbm_bandwidth_bytes_per_s
    tau = profile.launch_overhead_s if profile else hw.launch_overhead_s
    n = len(ops)
    flops = np.empty((n,) + shape)
    nbytes = np.empty((n,) + shape)
    compute_s = np.zeros((n,) + shape)
    memory_s = np.empty((n,) + shape)
    kernels = np.array([op.count * op.kernels for op in ops], dtype=float)
    measured = np.zeros(n, dtype=bool)  # priced from a measured table: its latency holds the launch
    is_comm = np.zeros(n, dtype=bool)
    for i, op in enumerate(ops):
        np.multiply(op.flops, op.count, out=flops[i, ...])
        np.multiply(op.nbytes, op.count, out=nbytes[i, ...])
        if op.comm_s is not None:
            is_comm[i] = True
            table_s = _collective_s(op, profile)
            measured[i] = table_s is not None
            np.multiply(np.add(op.comm_s if table_s is None else table_s, op.fabric_s), op.count, out=memory_s[i, ...])
            continue
        priced = _surface_eta(op, profile, dep.kernels.engine, peak, bw)
        if priced is not None:
            measured[i] = True
            eta, enveloped = priced
            if not enveloped:
                # a fitted surface read beyond its rows (larger KV reads, larger GEMMs) must not outrun HBM
                # or peak (an envelope's efficiency already follows this rule: monotone.surface_time_s)
                eta = _capped_eta(op, eta, peak, bw)
            np.divide(flops[i, ...], np.multiply(eta, peak), out=compute_s[i, ...])
            np.divide(nbytes[i, ...], np.multiply(eta, bw), out=memory_s[i, ...])
            continue
        op_flops = flops[i, ...]
        if profile is None:
            np.multiply(op_flops, 1.0 / peak, out=compute_s[i, ...])
            np.multiply(nbytes[i, ...], 1.0 / bw, out=memory_s[i, ...])
        elif profile.surfaces:  # measured tables, but none for this op: stream at the attained bandwidth
            np.multiply(op_flops, 1.0 / peak, out=compute_s[i, ...])
            np.multiply(nbytes[i, ...], 1.0 / (bw * profile.streaming_efficiency), out=memory_s[i, ...])
        else:
            eta_c = profile.compute_efficiency(op.name, op.family, op.eff_tokens)
            eta_m = profile.memory_efficiency(op.family, op.nbytes)
            np.divide(op_flops, np.multiply(eta_c, peak), out=compute_s[i, ...])
            np.divide(nbytes[i, ...], np.multiply(eta_m, bw), out=memory_s[i, ...])
    launch_s = np.where(measured, 0.0, kernels * tau).reshape((n,) + (1,) * len(shape))
    if profile is not None and profile.engine_scale != 1.0:
        # end-to-end engine runs measured its kernels slower than the microbenchmarks by this
        # factor; communication is priced on its own terms and not scaled
        scale = np.where(is_comm, 1.0, profile.engine_scale).reshape((n,) + (1,) * len(shape))
        compute_s *= scale
        memory_s *= scale
        launch_s = launch_s * scale
    time_s = np.maximum(compute_s, memory_s)
    time_s += launch_s
    return StepCost([o.name for o in ops], [o.family for o in ops], flops, nbytes, compute_s, memory_s,
                    np.broadcast_to(launch_s, time_s.shape), time_s, kernels)
