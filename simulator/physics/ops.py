"""What an operator is: its FLOPs, bytes, kernels and count per pass, and the shape a measured kernel table
reads it at (:class:`Op`); a GEMM's FLOPs and bytes and decode attention's bytes are made on first read
(:class:`GemmOp`, :class:`AttentionOp`). :mod:`simulator.physics.operators` prices them,
:mod:`simulator.physics.measured` reads their shapes."""
from __future__ import annotations

import copy
from dataclasses import dataclass

import numpy as np


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
    recipe: tuple | None = None  # what built it, inside a scope of shared ops (:func:`share_op`)

    def cells_shape(self) -> tuple:
        """The grid shape the op's size varies over."""
        return np.broadcast_shapes(np.shape(self.flops), np.shape(self.nbytes),
                                   np.shape(self.comm_s) if self.comm_s is not None else ())


class _MadeOnRead:
    """An op's attribute made on its first read by the op's ``_fill()`` (None until then), set like any other."""

    def __set_name__(self, owner, name: str) -> None:
        self.slot = "_" + name

    def __get__(self, op, owner=None):
        if op is None:
            return self
        if getattr(op, self.slot) is None:
            op._fill()
        return getattr(op, self.slot)

    def __set__(self, op, value) -> None:
        setattr(op, self.slot, value)


class GemmOp(Op):
    """A GEMM whose FLOPs and bytes (``terms(m, n, k, w_bytes, a_bytes)`` of its shape) are computed on
    first read: its price comes from the envelope at its token count, so a grid reads them only for
    the per-op detail."""

    def __init__(self, name: str, family: str, terms, shape: dict, **kw):
        self._terms = terms
        super().__init__(name, family, None, None, shape=shape, **kw)

    flops = _MadeOnRead()
    nbytes = _MadeOnRead()

    def _fill(self) -> None:
        sh = self.shape
        self._flops, self._nbytes = self._terms(sh["m"], sh["n"], sh["k"], sh["w_bytes"], sh["a_bytes"])

    def cells_shape(self) -> tuple:
        return np.shape(self.shape["m"])


class _LazyShape(dict):
    """An op's shape whose costly entries (``lazy()`` returns them) are made on the first read of a key
    it lacks; ``in`` and ``get`` see only the entries made so far."""

    def __init__(self, entries: dict, lazy):
        super().__init__(entries)
        self._lazy = lazy

    def __missing__(self, key):
        if self._lazy is not None:
            lazy, self._lazy = self._lazy, None
            self.update(lazy())
            if key in self:
                return dict.__getitem__(self, key)
        raise KeyError(key)


class AttentionOp(Op):
    """Decode attention whose bytes (the KV read and the queries' reads and writes, ``io()``) are made on
    first read: a measured kernel table prices it from its FLOPs and work coordinates, so a grid reads
    them only for the per-op detail, a roofline or a surface on bytes (shape entries "bytes", "kv_bytes")."""

    def __init__(self, name: str, family: str, flops, io, shape: dict, **kw):
        self._io = io
        super().__init__(name, family, flops, None, shape=_LazyShape(shape, self._byte_entries), **kw)

    nbytes = _MadeOnRead()

    def _byte_entries(self) -> dict:
        kv_read, q_io = self._io()
        return {"kv_bytes": kv_read, "bytes": kv_read + q_io}

    def _fill(self) -> None:
        self._nbytes = self.shape["bytes"]

    def cells_shape(self) -> tuple:
        return np.shape(self.flops)  # the bytes vary over the same B, q and L


# --- ops built and priced once per scope -------------------------------------------------------------
# A grid's verify pass and a draft head's extend pass run the target's own layer over the same B, K + 1
# and L: given caches inside their shared_ops() scope (simulator.physics.caches.PhysicsCaches.shared_ops), the
# second asks for the attention and routed experts the first built (a copy with its own count and name) and
# reads the price the first paid (operators.pass_time).


def array_key(x) -> tuple:
    """An array's value as part of a key: dtype, shape and bytes."""
    a = np.asarray(x)
    return a.dtype.str, a.shape, a.tobytes()


def share_op(build, count: float, name: str, inputs, caches=None) -> Op:
    """``build()``, an op of ``count`` instances named ``name``; with ``caches`` in a scope of shared ops
    (simulator.physics.caches.PhysicsCaches.shared_ops), an op an earlier call built from the same ``inputs()``
    (objects by identity, kept alive for the scope; arrays by :func:`array_key`) is copied with this count and
    name instead: the same op, its arrays shared."""
    scope = None if caches is None else caches.shared
    if scope is None:
        return build()
    key, keep = inputs()
    proto = scope.get(key)
    if proto is None:
        proto = scope[key] = build()
        proto.recipe = key
        scope["keep"].append(keep)
        return proto
    op = copy.copy(proto)
    op.count, op.name = count, name
    return op
