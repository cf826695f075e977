"""Efficiency surfaces and measured collective tables of a format-2 calibration profile.

Pure numpy (no scipy, no pandas) so the simulator can adopt this file as is.

A surface stores efficiency = roofline time / measured time on a grid of its axes::

    {"axes": ["m", "nk"], "grid": [[m0, m1, ...], [nk0, ...]], "efficiency": [[...per nk...] per m]}

and is evaluated by multilinear interpolation in log2 of every axis, clamped at the grid ends
(a query outside the grid takes the value at the nearest edge). Predicted time is then
``t = roofline_time / surface(**axes)``.

A shape correction (``profile["shape_corrections"]["moe.bf16"]``) holds, for each exact shape the
table measured (e.g. one MoE layer: experts, top-k, hidden, intermediate, TP, EP), the measured time
over the surface's along one axis (tokens); see :class:`ShapeCorrection`.

A collective table (``profile["collectives"]["all_reduce"]["8"]``) holds ``alpha_s``,
``bus_bandwidth_bytes_per_s`` and the measured ``bytes`` / ``latency_s`` points; see
:func:`collective_time_s`.
"""
from __future__ import annotations

from bisect import bisect_right
from typing import Mapping, Sequence

import numpy as np

from simulator.specs.wire import collective_factor

__all__ = ["Surface", "ShapeCorrection", "collective_time_s"]


class Surface:
    """An N-D efficiency grid, interpolated linearly in log2(axis), clamped at the ends."""

    __slots__ = ("axes", "log_grid", "values", "_strides", "_slices", "_by_integer", "envelopes", "_point")

    def __init__(self, axes: Sequence[str], grid: Sequence[Sequence[float]], efficiency) -> None:
        self.axes = tuple(axes)
        self.log_grid = tuple(np.log2(np.asarray(g, dtype=float)) for g in grid)
        self.values = np.asarray(efficiency, dtype=float)
        if len(self.axes) != len(self.log_grid) or self.values.ndim != len(self.axes):
            raise ValueError(f"surface: {len(self.axes)} axes, {len(self.log_grid)} grids, "
                             f"efficiency of rank {self.values.ndim}")
        for name, g, n in zip(self.axes, self.log_grid, self.values.shape):
            if g.size != n or g.size < 1 or np.any(np.diff(g) <= 0):
                raise ValueError(f"surface axis {name!r}: grid must be increasing and match "
                                 f"efficiency shape {self.values.shape}")
        self._strides = np.array([int(np.prod(self.values.shape[i + 1:])) for i in range(len(self.axes))])
        self._slices: dict = {}
        self._by_integer = np.empty(0)  # one-axis surfaces: value at x = 0, 1, 2, ... (token counts)
        self.envelopes: dict = {}  # the planner's monotone time envelopes over this surface (cache)
        self._point = None  # (grids, values) as Python lists, for one-point queries (_at_one_point)

    @classmethod
    def from_dict(cls, d: Mapping) -> "Surface":
        return cls(d["axes"], d["grid"], d["efficiency"])

    def to_dict(self) -> dict:
        return {"axes": list(self.axes), "grid": [np.exp2(g).tolist() for g in self.log_grid],
                "efficiency": self.values.tolist()}

    @staticmethod
    def _locate(log_g: np.ndarray, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Lower cell index and fraction in [0, 1] of log2(x) in log_g, clamped."""
        x = np.asarray(x, dtype=float)
        if log_g.size == 1:
            return np.zeros(x.shape, dtype=np.intp), np.zeros(x.shape)
        # np.minimum(np.maximum(...)) is np.clip without its Python-level dispatch (the same values)
        lx = np.minimum(np.maximum(np.log2(np.maximum(x, 1e-300)), log_g[0]), log_g[-1])
        i = np.minimum(np.maximum(np.searchsorted(log_g, lx, side="right") - 1, 0), log_g.size - 2)
        lo = log_g[i]
        frac = (lx - lo) / (log_g[i + 1] - lo)
        return i, frac

    def _integer_table(self, top: int) -> np.ndarray:
        if self._by_integer.size <= top:
            n = max(top + 1, 2 * self._by_integer.size, 1024)
            lx = np.log2(np.maximum(np.arange(n, dtype=float), 1.0))
            g = self.log_grid[0]
            self._by_integer = np.interp(lx, g, self.values) if g.size > 1 else np.full(n, float(self.values[0]))
        return self._by_integer

    def sliced(self, values: tuple) -> "Surface":
        """The surface with the axes whose value is given (not None) interpolated away; cached, since an
        operator asks at the same weight shape (n, k) for every batch size."""
        hit = self._slices.get(values)
        if hit is not None:
            return hit
        vals, axes, grids = self.values, [], []
        for d in reversed(range(len(self.axes))):
            if values[d] is None:
                axes.insert(0, self.axes[d])
                grids.insert(0, np.exp2(self.log_grid[d]))
                continue
            i, f = self._locate(self.log_grid[d], np.asarray([float(values[d])]))
            lo = np.take(vals, i[0], axis=d)
            hi = np.take(vals, min(i[0] + 1, vals.shape[d] - 1), axis=d)
            vals = lo * (1.0 - f[0]) + hi * f[0]
        out = Surface(axes, grids, vals)
        if len(self._slices) < 4096:
            self._slices[values] = out
        return out

    def __call__(self, **axes) -> np.ndarray:
        """Efficiency at the given axis values (arrays broadcast together; scalars allowed)."""
        missing = set(self.axes) - set(axes)
        extra = set(axes) - set(self.axes)
        if missing or extra:
            raise KeyError(f"surface axes are {list(self.axes)}; missing {sorted(missing)}, "
                           f"unexpected {sorted(extra)}")
        arrays = [np.asarray(axes[a], dtype=float) for a in self.axes]
        constant = [a.size == 1 for a in arrays]
        if any(constant) and not all(constant):  # fold fixed axes once, evaluate the rest
            sub = self.sliced(tuple(float(a.ravel()[0]) if c else None for a, c in zip(arrays, constant)))
            shape = np.broadcast_shapes(*(a.shape for a in arrays))
            return np.broadcast_to(sub(**{n: a for n, a, c in zip(self.axes, arrays, constant) if not c}), shape)
        if len(self.axes) == 1:  # one axis: linear in log2(x), clamped
            x = arrays[0]
            top = float(x.max()) if x.size else 0.0
            if 1.0 <= top <= 1 << 16 and x.min() >= 1.0:
                ix = x.astype(np.intp)
                if np.array_equal(ix, x):  # whole token counts: a lookup in a table built once
                    return self._integer_table(int(top))[ix]
            lx = np.log2(np.maximum(x, 1e-300))
            return np.interp(lx, self.log_grid[0], self.values) if self.log_grid[0].size > 1 \
                else np.full(arrays[0].shape, float(self.values[0]))
        shape = np.broadcast_shapes(*(x.shape for x in arrays))
        if all(x.size == 1 for x in arrays):  # one point (a serving step's prompt chunk): Python floats
            return np.full(shape, self._at_one_point(arrays))
        # locate each axis on its own (un-broadcast) values, then combine the 2^n cell corners: corner c
        # (bit d set: the upper node on axis d) weighs prod_d (f_d or 1 - f_d), multiplied in axis order,
        # and the corners are summed in the order of c; the weights and flat offsets of the corners are
        # built a level (an axis) at a time, so a corner shares the products of the axes before it
        flat = self.values.ravel()
        corners = [(None, 0)]  # (weight so far, None for 1.0; flat offset so far), in corner order
        for g, x, stride in zip(self.log_grid, arrays, self._strides.tolist()):
            i, f = self._locate(g, x)
            base = i * stride
            if g.size == 1:  # one node: the upper corner is the same node, left out
                corners = [(w, lin + base) for w, lin in corners]
                continue
            lower, upper = 1.0 - f, base + stride
            corners = [(lower if w is None else w * lower, lin + base) for w, lin in corners] + \
                      [(f if w is None else w * f, lin + upper) for w, lin in corners]
        out = np.zeros(shape)
        for w, lin in corners:
            out += (1.0 if w is None else w) * flat[lin]
        return out

    def _at_one_point(self, arrays: list) -> float:
        """:meth:`__call__` at one point (every axis one value), the same IEEE operations in the same
        order on Python floats (numpy's own log2, per axis): a call's array work costs more than its
        arithmetic there."""
        if self._point is None:
            self._point = ([g.tolist() for g in self.log_grid], self.values.ravel().tolist())
        grids, flat = self._point
        logs = np.log2(np.maximum(np.concatenate([x.ravel() for x in arrays]), 1e-300)).tolist()
        corners = [(None, 0)]
        for g, lx, stride in zip(grids, logs, self._strides.tolist()):
            if len(g) == 1:
                continue  # one node: offset 0, no upper corner (as _locate and the array path)
            lx = min(max(lx, g[0]), g[-1])
            i = min(max(bisect_right(g, lx) - 1, 0), len(g) - 2)
            lo = g[i]
            f = (lx - lo) / (g[i + 1] - lo)
            base, lower = i * stride, 1.0 - f
            corners = [(lower if w is None else w * lower, lin + base) for w, lin in corners] + \
                      [(f if w is None else w * f, lin + base + stride) for w, lin in corners]
        out = 0.0
        for w, lin in corners:
            out += (1.0 if w is None else w) * flat[lin]
        return out


class ShapeCorrection:
    """Measured time / surface time for the exact shapes a kernel table measured, along one axis.

    A smooth surface over a few derived axes cannot hold every kernel-selection quirk of a fused
    kernel (the MoE tables' per-model biases reach -20%); for a shape the table measured, the
    planner multiplies the surface's time by this factor, interpolated in log2 of ``along`` and
    clamped at the measured ends. Other shapes keep the surface alone.

    ``entries``: ``{"128/8/4096/1536/1/1": [[along values...], [factors...]]}``, keys joining the
    integer values of ``key_axes`` with "/".
    """

    __slots__ = ("key_axes", "along", "entries")

    def __init__(self, key_axes: Sequence[str], along: str, entries: Mapping) -> None:
        self.key_axes = tuple(key_axes)
        self.along = str(along)
        self.entries = {}
        for key, (xs, fs) in entries.items():
            xs, fs = np.asarray(xs, dtype=float), np.asarray(fs, dtype=float)
            if xs.ndim != 1 or xs.shape != fs.shape or xs.size < 1 or np.any(xs <= 0) or np.any(np.diff(xs) <= 0) \
                    or not np.all(np.isfinite(fs)) or np.any(fs <= 0):
                raise ValueError(f"entry {key!r}: needs increasing positive {self.along} values and positive factors")
            if len(str(key).split("/")) != len(self.key_axes):
                raise ValueError(f"entry {key!r}: key must join {len(self.key_axes)} values with '/'")
            self.entries[str(key)] = (np.log2(xs), fs)

    @classmethod
    def from_dict(cls, d: Mapping) -> "ShapeCorrection":
        return cls(d["key_axes"], d["along"], d["entries"])

    @staticmethod
    def key_of(values) -> str:
        return "/".join(str(int(round(float(v)))) for v in values)

    def factor(self, shape: Mapping):
        """The time factor at ``shape`` (a mapping with the key axes as scalars and ``along``), or
        None when the table did not measure this shape."""
        try:
            key = self.key_of(np.asarray(shape[a], dtype=float).reshape(-1)[0] for a in self.key_axes)
        except (KeyError, IndexError):
            return None
        hit = self.entries.get(key)
        if hit is None:
            return None
        lx, fs = hit
        x = np.log2(np.maximum(np.asarray(shape[self.along], dtype=float), 1e-300))
        return np.interp(x, lx, fs) if lx.size > 1 else np.full(x.shape, float(fs[0]))


def isotonic_increasing(y, weights=None) -> np.ndarray:
    """The weighted least-squares non-decreasing fit of ``y`` (pool adjacent violators; equal weights
    by default): a block that falls below the one before it is pooled with it at their weighted mean.

    Only the stretch from the first fall to the first block after the last fall that pools nothing is
    walked in Python: before it nothing pools, after it the values rise from a block of their own."""
    y = np.asarray(y, dtype=float)
    falls = np.flatnonzero(y[1:] < y[:-1]) + 1 if y.size > 1 else np.zeros(0, dtype=np.intp)
    if not falls.size:
        return y.copy()  # already non-decreasing: nothing to pool (most lattice rows)
    first, last, n = int(falls[0]), int(falls[-1]), y.size
    vals = y.tolist()
    w = [1.0] * n if weights is None else np.asarray(weights, dtype=float).tolist()
    means, wts, counts = vals[:first], w[:first], [1] * first  # per pooled block
    for i in range(first, n):
        v, wi, c = vals[i], w[i], 1
        pooled = False
        while means and means[-1] > v:
            pm, pw = means.pop(), wts.pop()
            c += counts.pop()
            v = (pm * pw + v * wi) / (pw + wi)
            wi = pw + wi
            pooled = True
        means.append(v)
        wts.append(wi)
        counts.append(c)
        if i >= last and not pooled:  # y rises from here on, from this block's own value: nothing pools
            means += vals[i + 1:]
            counts += [1] * (n - i - 1)
            break
    return np.repeat(means, counts)


def collective_time_s(table: Mapping, g: int, nbytes, *, op: str = "all_reduce", monotone: bool = False) -> np.ndarray:
    """Time of one collective of ``nbytes`` (per GPU message) over ``g`` GPUs, from a profile.

    ``table`` is ``profile["collectives"]`` (or its ``[op]`` sub-dict). Inside the measured
    byte range: log-log linear interpolation of latency vs bytes (``monotone``: of the least-squares
    non-decreasing fit of the measured log latencies, so that a larger message is never priced faster,
    as the planner prices a step; the table's own points otherwise). Outside it: the fitted
    alpha-beta model ``alpha_g + f(g) S / busBW_g`` with f = 2 (g-1)/g for all-reduce
    (the planner's formula) and (g-1)/g for all-gather / reduce-scatter / all-to-all,
    joined continuously to the nearest measured point (the model is scaled to match it).
    g = 1 costs 0. An unmeasured g uses the nearest measured g.
    """
    sub = table[op] if op in table else table
    nbytes = np.asarray(nbytes, dtype=float)
    if int(g) <= 1:
        return np.zeros(nbytes.shape)
    keys = sorted(int(k) for k in sub)
    if not keys:
        raise KeyError(f"no {op} table")
    gk = min(keys, key=lambda k: (abs(np.log2(k) - np.log2(int(g))), k))
    ent = sub[str(gk)]
    factor = collective_factor(op, g)
    alpha, bw = float(ent["alpha_s"]), float(ent["bus_bandwidth_bytes_per_s"])
    if not len(ent["bytes"]):  # alpha-beta only (a published prior, no measured points)
        return alpha + factor * nbytes / bw
    b = np.asarray(ent["bytes"], dtype=float)
    t = np.asarray(ent["latency_s"], dtype=float)
    order = np.argsort(b)
    # monotone: a larger message is not faster; a table's point-to-point noise at small messages
    # (2-4% at 8-64 kB) and kernel switches would otherwise make a larger step's all-reduce cheaper
    b, t = b[order], t[order]
    if monotone:
        t = np.exp(isotonic_increasing(np.log(t)))

    def model(s):
        return alpha + factor * s / bw

    lb = np.log(np.maximum(nbytes, 1.0))
    inside = np.exp(np.interp(lb, np.log(b), np.log(t)))
    lo_scale = t[0] / model(b[0])
    hi_scale = t[-1] / model(b[-1])
    below = model(nbytes) * lo_scale
    above = model(nbytes) * hi_scale
    return np.where(nbytes < b[0], below, np.where(nbytes > b[-1], above, inside))
