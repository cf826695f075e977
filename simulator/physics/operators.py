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
stream-K per shape, so a fixed-tile wave count overstates the jumps that measurements show
(:mod:`simulator.physics.measured` reads them).

Two ways to price a pass, one price per op (:func:`_instance_s`): :func:`pass_time` sums the ops at
their own shapes into the pass's time (what a grid and the serving simulation's step tables need);
:func:`evaluate` keeps every op's FLOPs, bytes, compute and memory time (the breakdown and the bound of
each cell). :class:`PassCost` holds the first and makes the second on first use.

Letters: B sequences, q query tokens per sequence (K+1 when verifying K drafts), T = B*q tokens,
L context length (KV entries already cached), t tensor-parallel degree.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from simulator.specs.deployment import Deployment, kv_heads_per_gpu
from simulator.specs.hardware import BLOCK_FP8, DTYPE_BYTES, Hardware
from simulator.specs.models import ModelSpec
from simulator.specs.profile import Profile
from simulator.physics.attention import MAX_DECODE_SURFACE_QUERIES, PREFILL_SURFACE, per_query_head_kernel
from simulator.physics.measured import collective_op_time_s, surface_op_time_s
from simulator.physics.monotone import surface_time_point_s
from simulator.physics.terms import attention_decode_bytes, attention_decode_flops, prefill_table_coordinates
# the operators it prices (re-exported)
from simulator.physics.ops import AttentionOp, GemmOp, Op  # noqa: F401


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
        """Step time split into compute-bound, memory-bound, comm and launch seconds (the split of
        :meth:`bound`, summed with boolean masks rather than compared as strings)."""
        roof = self.time_s - self.launch_s
        is_comm = np.array([f == "comm" for f in self.families], dtype=bool).reshape((-1,) + (1,) * (roof.ndim - 1))
        compute = (self.compute_s > self.memory_s) & ~is_comm
        return {"compute": np.where(compute, roof, 0.0).sum(axis=0),
                "memory": np.where(~compute & ~is_comm, roof, 0.0).sum(axis=0),
                "comm": np.where(np.broadcast_to(is_comm, roof.shape), roof, 0.0).sum(axis=0),
                "launch": self.launch_s.sum(axis=0)}

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


def _roofline_parts_s(op: Op, profile: Profile | None, peak: float, bw: float):
    """(compute s, memory s) per instance of an op no measured table prices: the datasheet roofline,
    the attained streaming bandwidth of a profile of kernel tables, or a fitted profile's efficiencies."""
    if profile is None:
        return np.multiply(op.flops, 1.0 / peak), np.multiply(op.nbytes, 1.0 / bw)
    if profile.surfaces:  # measured tables, but none for this op: stream at the attained bandwidth
        return np.multiply(op.flops, 1.0 / peak), np.multiply(op.nbytes, 1.0 / (bw * profile.streaming_efficiency))
    eta_c = profile.compute_efficiency(op.name, op.family, op.eff_tokens, op.dtype)
    eta_m = profile.memory_efficiency(op.family, op.nbytes)
    return np.divide(op.flops, np.multiply(eta_c, peak)), np.divide(op.nbytes, np.multiply(eta_m, bw))


def _roofline_point_s(flops: float, nbytes: float, name: str, tokens: float, profile, peak: float,
                      bw: float) -> float:
    """:func:`_roofline_parts_s`'s max for an attention op at one point."""
    if profile is None:
        return max(flops * (1.0 / peak), nbytes * (1.0 / bw))
    if profile.surfaces:
        return max(flops * (1.0 / peak), nbytes * (1.0 / (bw * profile.streaming_efficiency)))
    eta_c = np.asarray(profile.compute_efficiency(name, "attention", np.array([tokens])), dtype=float).item(0)
    eta_m = np.asarray(profile.memory_efficiency("attention", np.array([nbytes])), dtype=float).item(0)
    return max(flops / (eta_c * peak), nbytes / (eta_m * bw))


def _instance_s(op: Op, profile: Profile | None, engine: str, peak: float, bw: float, caches=None):
    """(seconds per instance at the op's own shape, priced from a measured table, roofline parts or
    None): a collective's time, a surface's, or the roofline max(compute, memory) without launches;
    ``caches``: the step model's (simulator.physics.caches), None: nothing kept."""
    if op.comm_s is not None:
        table_s = collective_op_time_s(op, profile, caches)
        return np.add(op.comm_s if table_s is None else table_s, op.fabric_s), table_s is not None, None
    t = surface_op_time_s(op, profile, engine, peak, bw, caches)
    if t is not None:
        return t, True, None
    parts = _roofline_parts_s(op, profile, peak, bw)
    return np.maximum(*parts), False, parts


def _shared_instance_s(scope: dict, op: Op, hw: Hardware, dep: Deployment, profile: Profile | None, peak: float,
                       bw: float, caches=None):
    """:func:`_instance_s` of an op shared in a scope (simulator.physics.ops.share_op), priced once per device,
    deployment and profile there; the name is part of the key only where a fitted profile reads
    efficiency by op name."""
    key = ("priced", op.recipe, id(hw), id(dep), id(profile),
           op.name if profile is not None and not profile.surfaces else "")
    hit = scope.get(key)
    if hit is None:
        hit = scope[key] = _instance_s(op, profile, dep.kernels.engine, _op_peak(op, hw, dep, peak), bw, caches)
        scope["keep"].append((hw, dep, profile))
    return hit


def _op_peak(op: Op, hw: Hardware, dep: Deployment, peak: float) -> float:
    """The peak of the math ``op`` runs in: a block-scaled fp8 GEMM's own (fp8 whatever the activations between
    layers are, :meth:`Hardware.peak_flops_per_s`), a bf16 x bf16 GEMM's (a module the checkpoint keeps in bf16,
    :func:`simulator.physics.gemm.module_precision`, in a pass of fp8 activations), prefill attention's
    (:func:`prefill_attention_peak`), every other op the pass's."""
    if op.surface == PREFILL_SURFACE:
        return prefill_attention_peak(hw, dep)
    if op.dtype == BLOCK_FP8:
        return hw.peak_flops_per_s("fp8", dep.act_dtype, op.dtype)
    shape = op.shape or {}
    if op.dtype == "bf16" and shape.get("w_bytes") == shape.get("a_bytes") == DTYPE_BYTES["bf16"]:
        return hw.peak_flops_per_s("bf16", "bf16")
    return peak


def prefill_attention_peak(hw: Hardware, dep: Deployment) -> float:
    """The peak prefill attention runs at: bf16's, fp32's in an fp32 pass. The prefill tables' fused
    kernels run bf16 queries whatever the KV dtype (their efficiency is relative to the bf16 peak), and
    the engines keep prefill attention in bf16 when the GEMMs run fp8."""
    return hw.peak_flops_per_s(*(("fp32",) * 2 if dep.act_dtype == "fp32" else ("bf16",) * 2))


def _device_terms(hw: Hardware, dep: Deployment, profile: Profile | None) -> tuple[float, float, float, float]:
    """(peak FLOP/s, HBM bytes/s, launch s per kernel, engine scale) the ops of a pass are priced with."""
    tau = profile.launch_overhead_s if profile else hw.launch_overhead_s
    scale = profile.engine_scale if profile is not None else 1.0
    return hw.peak_flops_per_s(dep.weight_dtype, dep.act_dtype), hw.hbm_bandwidth_bytes_per_s, tau, scale


@dataclass
class PassTime:
    """A pass's summed time over the grid (what the engine model needs), without the per-op arrays."""

    total_s: np.ndarray  # kernels + launches, engine scale applied
    launch_s: np.ndarray | float  # the launches within it (0 for ops priced from measured tables)
    n_kernels: float


def pass_time(ops: list[Op], hw: Hardware, dep: Deployment, profile: Profile | None, shape,
              instances: list | None = None, caches=None) -> PassTime:
    """The summed time of ``ops``: sum_o count_o s_o (t_o + kernels_o tau [not measured]), each op
    priced at its own shape (a batch-only op over the batch axis alone) and broadcast once per shape;
    equal to ``evaluate(...).total_s`` up to the order of the sum. ``instances``: a list that receives
    each op's :func:`_instance_s` answer, for :func:`evaluate` to reuse. ``caches``: the step model's
    (simulator.physics.caches.PhysicsCaches: measured tables at whole token counts), None: nothing kept."""
    peak, bw, tau, scale = _device_terms(hw, dep, profile)
    by_shape: dict[tuple, np.ndarray] = {}
    launch, kernels = 0.0, 0.0
    scope = None if caches is None else caches.shared  # ops shared in this evaluation (PhysicsCaches.shared_ops)
    for op in ops:
        t, measured, parts = _instance_s(op, profile, dep.kernels.engine, _op_peak(op, hw, dep, peak), bw, caches) \
            if scope is None or op.recipe is None else _shared_instance_s(scope, op, hw, dep, profile, peak, bw, caches)
        if instances is not None:
            instances.append((t, measured, parts))
        s = 1.0 if op.comm_s is not None else scale
        kernels += op.count * op.kernels
        if not measured:
            launch += op.count * op.kernels * tau * s
        t = np.multiply(t, op.count * s)
        key = np.shape(t)
        by_shape[key] = t if key not in by_shape else by_shape[key] + t
    if len(by_shape) == 1 and next(iter(by_shape)) == tuple(shape):  # one shape, the pass's own: no fill
        (t,) = by_shape.values()
        return PassTime(t + launch if launch else t, launch, kernels)
    total = np.full(shape, launch)
    for t in by_shape.values():
        total += t
    return PassTime(total, launch, kernels)


def prompt_chunk_point_s(model: ModelSpec, dep: Deployment, hw: Hardware, profile, layers, chunk: float,
                         cached: float) -> float | None:
    """Seconds of one prompt chunk's attention (``chunk`` queries over ``cached`` keys, one sequence) over
    ``layers`` ((op name, count) per attention kind), launches left out, as :func:`pass_time` prices
    :func:`simulator.physics.attention.attention_op` there: with measured tables the prefill surface's
    efficiency at the chunk's equivalent prompts (B' hkv, n, d, g: physics.terms.prefill_table_coordinates)
    and the surface time's cap, never faster than streaming the chunk's bytes (tables without that surface:
    the roofline at the attained streaming bandwidth); with a fitted profile, a published prior or the datasheet the roofline at its efficiencies;
    at bf16's peak (:func:`prefill_attention_peak`). Python floats with the same IEEE operations in the same
    order as on a one-pair array (a serving step prices one chunk, where array calls cost more than their
    arithmetic). None where another path prices it: a chunk the decode surfaces take, MLA, a model whose
    layers are not all one softmax-attention shape (chunked, linear, sparse, Gemma 4), a per-query-head
    kernel or a per-shape correction."""
    if chunk <= MAX_DECODE_SURFACE_QUERIES or model.attention == "mla" or not model.uniform_attention:
        return None
    measured = profile is not None and bool(profile.surfaces)
    surf = profile.surface(PREFILL_SURFACE, dep.kv_dtype) if measured else None
    if surf is not None and profile.shape_correction(PREFILL_SURFACE, dep.kv_dtype):
        return None
    hq, d, hkv = model.num_heads / dep.tp, model.head_dim, kv_heads_per_gpu(model, dep.tp)
    group = hq / hkv
    if per_query_head_kernel(dep, group, 1.0 * hkv) is not False:
        return None
    a, kv = DTYPE_BYTES[dep.act_dtype], DTYPE_BYTES[dep.kv_dtype]
    _, bw, tau, scale = _device_terms(hw, dep, profile)
    peak = prefill_attention_peak(hw, dep)
    total, launch = None, 0.0
    for name, count in layers:
        window = model.sliding_window if name.endswith("sliding") else None
        keys = float(min(cached, window)) if window else cached  # np.minimum's value
        flops = attention_decode_flops(1.0, chunk, keys, hq, d)
        kv_read, q_io = attention_decode_bytes(1.0, chunk, keys, hq, hkv, d, kv, a)
        nbytes = kv_read * 1.0 + q_io
        if surf is not None:
            launches, length = prefill_table_coordinates(1.0, chunk, keys, hkv)
            at = {"batch_heads": launches, "context": length, "head_dim": float(d), "group": group}
            eta = surf._at_one_point([np.array([at[axis]]) for axis in surf.axes])
            new_kv, new_q_io = attention_decode_bytes(1.0, chunk, 0.0, hq, hkv, d, kv, a)
            t = max(surface_time_point_s(flops, new_kv + new_q_io, eta, peak, bw),
                    nbytes * (1.0 / (bw * profile.streaming_efficiency)))
        else:
            t = _roofline_point_s(flops, nbytes, name, 1.0 * chunk, profile, peak, bw)
            launch += count * 2 * tau * scale  # an attention op's two kernels, not in a measured time
        t = t * (count * scale)
        total = t if total is None else total + t
    return (total + launch) - launch if launch else total


def evaluate(ops: list[Op], hw: Hardware, dep: Deployment, profile: Profile | None, shape,
             instances: list | None = None, caches=None) -> StepCost:
    """Price each op on the device: roofline max(compute, memory) plus launch overhead (see the
    module docstring for measured surfaces and collectives). An op priced from a measured table keeps
    the table's time and splits it in the ratio of its roofline terms (which one bounds it).
    ``instances``: each op's :func:`_instance_s` answer, as :func:`pass_time` collected it."""
    peak, bw, tau, engine_scale = _device_terms(hw, dep, profile)
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
        op_peak = _op_peak(op, hw, dep, peak)
        t, measured[i], parts = instances[i] if instances is not None else _instance_s(
            op, profile, dep.kernels.engine, op_peak, bw, caches)
        if op.comm_s is not None:
            is_comm[i] = True
            np.multiply(t, op.count, out=memory_s[i, ...])
        elif parts is None:
            # t / roofline: both roofline terms scaled alike, so the larger one is the measured time
            roof = np.maximum(flops[i, ...] / op_peak, nbytes[i, ...] / bw)
            ratio = np.divide(np.multiply(t, op.count), roof, out=np.zeros(shape), where=roof > 0)
            np.multiply(flops[i, ...] / op_peak, ratio, out=compute_s[i, ...])
            np.multiply(nbytes[i, ...] / bw, ratio, out=memory_s[i, ...])
        else:
            np.multiply(parts[0], op.count, out=compute_s[i, ...])
            np.multiply(parts[1], op.count, out=memory_s[i, ...])
    launch_s = np.where(measured, 0.0, kernels * tau).reshape((n,) + (1,) * len(shape))
    if engine_scale != 1.0:
        # end-to-end engine runs measured its kernels slower than the microbenchmarks by this
        # factor; communication is priced on its own terms and not scaled
        scale = np.where(is_comm, 1.0, engine_scale).reshape((n,) + (1,) * len(shape))
        compute_s *= scale
        memory_s *= scale
        launch_s = launch_s * scale
    time_s = np.maximum(compute_s, memory_s)
    time_s += launch_s
    return StepCost([o.name for o in ops], [o.family for o in ops], flops, nbytes, compute_s, memory_s,
                    np.broadcast_to(launch_s, time_s.shape), time_s, kernels)


class PassCost:
    """One pass over a grid: its summed time at once (:func:`pass_time`), its per-op detail
    (:func:`evaluate`: FLOPs, bytes, bound, time of every op) only when something reads it."""

    def __init__(self, time: PassTime, detail):
        self.total_s, self.launch_s, self.n_kernels = time.total_s, time.launch_s, time.n_kernels
        self._detail = detail  # a StepCost, or a function that returns it

    @classmethod
    def of(cls, cost: StepCost) -> "PassCost":
        return cls(PassTime(cost.total_s, cost.launch_s.sum(axis=0), cost.n_kernels), cost)

    @property
    def detail(self) -> StepCost:
        if not isinstance(self._detail, StepCost):
            self._detail = self._detail()
        return self._detail

    def sliced(self, cell) -> "PassCost":
        """The same pass at ``cell(array)`` of every grid array (e.g. one context column)."""
        at = lambda a: a if np.ndim(a) == 0 else cell(a)  # noqa: E731
        detail = lambda: StepCost(  # noqa: E731
            self.detail.names, self.detail.families, *(cell(getattr(self.detail, f)) for f in (
                "flops", "nbytes", "compute_s", "memory_s", "launch_s", "time_s")), self.detail.kernels)
        return PassCost(PassTime(at(self.total_s), at(self.launch_s), self.n_kernels), detail)

    @staticmethod
    def joined_on_k(parts: list["PassCost"], order) -> "PassCost":
        """One pass from the same ops priced on column subsets of a grid's K axis (axis 1 of a cell array):
        joined in ``order`` (the grid's K order)."""
        cells = [np.shape(p.total_s) for p in parts]
        time = PassTime(_joined_on_k([p.total_s for p in parts], cells, order, 1),
                        _joined_on_k([p.launch_s for p in parts], cells, order, 1), parts[0].n_kernels)

        def detail() -> StepCost:
            ds = [p.detail for p in parts]
            shapes = [(len(d.names),) + c for d, c in zip(ds, cells)]
            return StepCost(ds[0].names, ds[0].families, *(_joined_on_k([getattr(d, f) for d in ds], shapes, order, 2)
                                                          for f in ("flops", "nbytes", "compute_s", "memory_s",
                                                                    "launch_s", "time_s")), ds[0].kernels)
        return PassCost(time, detail)


def _joined_on_k(arrays, shapes, order, axis: int):
    """Arrays priced on column subsets of the K axis (``axis``), each broadcast to its subset's ``shapes``, joined
    and put back in the grid's K order."""
    full = [np.broadcast_to(a, shape) for a, shape in zip(arrays, shapes)]
    return np.take(np.concatenate(full, axis=axis), order, axis=axis)


def price_pass(ops: list[Op], hw: Hardware, dep: Deployment, profile: Profile | None, shape,
               caches=None) -> PassCost:
    """:func:`pass_time` now, :func:`evaluate` of the same ops on first use of the detail (reusing the
    ops' prices the sum was made of); ``caches`` as for :func:`pass_time`."""
    instances: list = []
    return PassCost(pass_time(ops, hw, dep, profile, shape, instances, caches),
                    lambda: evaluate(ops, hw, dep, profile, shape, instances))
