"""Prices from measured tables: an operator's time read from a profile's kernel surfaces (through the
monotone envelopes of :mod:`simulator.physics.monotone`) or its collective's latency table.

A measured efficiency surface prices an op at its own shape (GEMM: m tokens at the n x k weight shape;
decode attention: sequences and cached keys; MoE: tokens per expert and expert bytes). Where a grid asks
at whole token counts (or whole batch sizes at one context length) the envelope is tabulated once per
shape and read one entry per cell, so a grid's price is a table read; the tables give the same values
as evaluating the envelope at those counts.
"""
from __future__ import annotations

import numpy as np

from simulator.physics.caches import PhysicsCaches, make_room
from simulator.physics.monotone import (MAX_LATTICE_TOKENS, MIN_BATCH_OCTAVES, MIN_KEY_OCTAVES, MIN_QUERIES,
                                        MIN_TOKEN_OCTAVES, attention_lattice_s, attention_time_s, gemm_lattice_s,
                                        lattice_time_s, log_lattice_interp, moe_lattice_s, moe_time_s,
                                        surface_time_s)
from simulator.physics.ops import Op
from simulator.specs.profile import Profile
from simulator.specs.surfaces import collective_time_s


# Fused-MoE kernels differ by framework far more than GEMM or attention kernels do (routing, permute,
# grouped GEMM and combine fused or not), so a profile's MoE surface prices only its own engine's.
ENGINE_SPECIFIC_SURFACES = ("moe",)


def _surface_of(op: Op, profile: Profile | None, engine: str = ""):
    """(the measured surface that prices ``op``, its per-shape correction), or None: no profile, no
    surface for the op's family and dtype, or an engine-specific surface measured on another engine."""
    if profile is None or op.surface is None or not profile.surfaces:
        return None
    table_engine = profile.provenance.get("engine")
    if op.surface in ENGINE_SPECIFIC_SURFACES and engine and table_engine and engine != table_engine:
        return None
    surf = profile.surface(op.surface, op.dtype)
    if surf is None:
        return None
    return surf, profile.shape_correction(op.surface, op.dtype)


def surface_efficiency(op: Op, profile: Profile | None, engine: str = ""):
    """The measured surface's own efficiency at the op's shape (no envelope), or None."""
    found = _surface_of(op, profile, engine)
    return None if found is None else _raw_eta(op, *found)


def surface_op_time_s(op: Op, profile: Profile | None, engine: str, peak: float, bw: float,
                      caches: PhysicsCaches | None = None):
    """Per-instance time of a surface-priced op at its own shape, or None (no surface prices it); ``caches``: the
    step model's (:func:`whole_tokens`).

    GEMMs at one weight shape, routed experts and decode attention are priced by the envelope of
    :mod:`simulator.physics.monotone`; other ops (and cells an envelope does not cover) by the
    surface's efficiency, capped as :func:`simulator.physics.monotone.surface_time_s` caps it."""
    found = _surface_of(op, profile, engine)
    if found is None:
        return None
    surf, fix = found
    t_env = _envelope_s(op, surf, fix, peak, bw, caches)
    if t_env is not None and not np.isnan(t_env).any():
        return t_env
    prompt_bytes = (op.shape or {}).get("prompt_bytes")
    if prompt_bytes is not None:  # fused prefill attention (physics.attention.attention_op): the table's time
        # for the prompts of the same work, never faster than streaming the op's own bytes
        return np.maximum(surface_time_s(op.flops, prompt_bytes, _raw_eta(op, surf, fix), peak, bw),
                          np.multiply(op.nbytes, 1.0 / (bw * profile.streaming_efficiency)))
    t_raw = surface_time_s(op.flops, op.nbytes, _raw_eta(op, surf, fix), peak, bw)
    return t_raw if t_env is None else np.where(np.isnan(t_env), t_raw, t_env)


def _raw_eta(op: Op, surf, fix):
    eta = surf(**{axis: op.shape[axis] for axis in surf.axes})
    factor = fix.factor(op.shape) if fix is not None else None
    return eta if factor is None else eta / factor  # a shape the table measured: its own time


def _envelope_s(op: Op, surf, fix, peak: float, bw: float, caches: PhysicsCaches | None = None):
    """Per-instance time of ``op`` as the envelope max_{less work} t (simulator.physics.monotone), for
    a GEMM at one weight shape (whole token counts m) or the routed experts of an MoE layer; None
    for other ops (their surface time stands)."""
    shape = op.shape or {}
    if op.surface == "moe" and "probabilities" in shape:
        tokens = np.asarray(shape["tokens"], dtype=float)
        top = float(tokens.max()) if tokens.size else 1.0
        octaves = _octaves(top, MIN_TOKEN_OCTAVES)
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
        return _attention_envelope_s(op, surf, peak, bw, caches)
    if op.surface != "gemm" or "w_bytes" not in shape or tuple(surf.axes) != ("m", "n", "k"):
        return None
    m = np.asarray(shape["m"], dtype=float)
    n, k = np.asarray(shape["n"], dtype=float), np.asarray(shape["k"], dtype=float)
    if n.size != 1 or k.size != 1 or not m.size:
        return None
    n, k, w, a = float(n.ravel()[0]), float(k.ravel()[0]), float(shape["w_bytes"]), float(shape["a_bytes"])
    whole, top = whole_tokens(m, caches)
    if whole is not None and top <= MAX_LATTICE_TOKENS:  # the common case: a table read per cell
        return _gemm_whole_token_table(surf, n, k, w, a, peak, bw, top)[whole]
    covered = (m >= 1) & (m <= MAX_LATTICE_TOKENS)
    if not covered.any():
        return None
    t = lattice_time_s(_gemm_lattice(surf, n, k, w, a, peak, bw), np.clip(m, 1.0, MAX_LATTICE_TOKENS))
    return t if covered.all() else np.where(covered, t, np.nan)


def _gemm_lattice(surf, n: float, k: float, w: float, a: float, peak: float, bw: float):
    """The envelope lattice of a GEMM at weight shape (n, k) (cached on the sliced surface)."""
    sub = surf.sliced((None, n, k))
    key = ("gemm", peak, bw, w, a)
    hit = sub.envelopes.get(key)
    if hit is None:
        hit = gemm_lattice_s(sub, n, k, w, a, peak, bw)
        sub.envelopes[key] = hit
    return hit


# Whole-token tables start this long and double as larger token counts are asked for
MIN_WHOLE_TOKEN_TABLE = 1 << 13


def _octaves(top: float, minimum: int) -> int:
    """Octaves a lattice spans to reach ``top`` (from 1, at least ``minimum``): every lattice over the
    same range has the same nodes, so a cell's price does not depend on the grid it was asked in."""
    return max(int(np.ceil(np.log2(max(top, 2.0)))), minimum)


def _table_size(top: int, minimum: int) -> int:
    """Entries 0..N of a whole-number table that reaches ``top``: N a power of two, at least ``minimum``."""
    return max(minimum, 1 << int(np.ceil(np.log2(top + 1))))


def _gemm_whole_token_table(surf, n: float, k: float, w: float, a: float, peak: float, bw: float, top: int):
    """The envelope's time at every whole token count 0..N (N >= ``top``, a power of two; entry 0
    unused): :func:`lattice_time_s` evaluated once, so that a grid reads one entry per cell."""
    sub = surf.sliced((None, n, k))
    key = ("gemm-whole", peak, bw, w, a)
    table = sub.envelopes.get(key)
    if table is None or table.size <= top:
        size = _table_size(top, MIN_WHOLE_TOKEN_TABLE)
        table = lattice_time_s(_gemm_lattice(surf, n, k, w, a, peak, bw), np.arange(size + 1, dtype=float))
        sub.envelopes[key] = table
    return table


def whole_tokens(m: np.ndarray, caches: PhysicsCaches | None = None):
    """(m as an index array, max m) when every m is a whole number >= 1, else (None, 0). The ops of a
    pass share a few size arrays (tokens, sequences), asked in turn, so the last few answers are kept in
    ``caches.recent_whole`` (the entries hold their arrays, so an id is never reused while kept; a tuple
    replaced whole: safe across threads); None: worked out every time."""
    recent = caches.recent_whole if caches is not None else ()
    for entry in recent:
        if entry[0] is m:
            return entry[1], entry[2]
    index = m.astype(np.intp)
    ok = m.size and bool((index == m).all()) and int(index.min()) >= 1
    answer = (index, int(index.max())) if ok else (None, 0)
    if caches is not None:
        caches.recent_whole = ((m,) + answer,) + recent[:PhysicsCaches.RECENT_WHOLE - 1]
    return answer


def _attention_envelope_s(op: Op, surf, peak: float, bw: float, caches: PhysicsCaches | None = None):
    """Decode attention at q queries per sequence from the envelope of the measured q = 1 kernel over
    sequences and cached keys (:func:`simulator.physics.monotone.attention_time_s`)."""
    shape = op.shape
    if tuple(surf.axes) not in (("batch_heads", "context", "head_dim", "group"), ("batch", "context", "bytes")):
        return None
    seqs, keys = (np.asarray(shape[a], dtype=float) for a in ("sequences", "keys"))
    if seqs.ndim and 1 <= keys.size <= MAX_WHOLE_BATCH_CONTEXTS and float(keys.min()) >= 1:
        whole, top = whole_tokens(seqs, caches)
        if whole is not None:  # whole sequences at a few context lengths: a table read per cell
            if keys.size == 1:
                t_1 = _attention_whole_batch_table(surf, shape, float(keys.ravel()[0]), peak, bw, top)[whole]
            else:
                t_1 = _attention_whole_batch_tables(surf, shape, keys, peak, bw, top)[whole, _key_index(keys)]
            return attention_time_s(np.broadcast_to(t_1, np.broadcast_shapes(seqs.shape, keys.shape)), shape,
                                    op.flops, peak, bw)
    batch, keys = np.broadcast_arrays(seqs, keys)
    # cells outside the lattice (no sequence or no key) keep the surface's own time (NaN here), so a
    # cell's price never depends on which other cells a grid evaluates
    covered = (batch >= 1) & (keys >= 1)
    if not batch.size or not covered.any():
        return None
    batch, keys = np.maximum(batch, 1.0), np.maximum(keys, 1.0)
    key, hit = _attention_lattice(surf, shape, float(batch.max()), float(keys.max()), peak, bw)
    t_1 = log_lattice_interp(hit[2], hit[0], hit[1], batch, keys)
    t = attention_time_s(t_1, shape, op.flops, peak, bw)
    return t if covered.all() else np.where(np.broadcast_to(covered, np.shape(t)), t, np.nan)


def _attention_static(shape: dict) -> tuple:
    """The attention shape's fixed sizes (heads, head size, element bytes): part of every cache key."""
    return tuple(float(shape.get(a, 0.0)) for a in ("q_heads", "kv_heads", "head_dim", "kv_elem_bytes", "a_bytes",
                                                     "group", "latent", "score_width"))


def _attention_lattice(surf, shape: dict, top_batch: float, top_keys: float, peak: float, bw: float):
    """(cache key, lattice) of the q = 1 decode kernel's envelope over sequences x cached keys, spanning
    at least the octaves every lattice spans (so that a cell's price does not depend on the grid)."""
    b_oct, l_oct = _octaves(top_batch, MIN_BATCH_OCTAVES), _octaves(top_keys, MIN_KEY_OCTAVES)
    key = ("attention", b_oct, l_oct, peak, bw) + _attention_static(shape)
    hit = surf.envelopes.get(key)
    if hit is None:
        hit = attention_lattice_s(surf, shape, float(2 ** b_oct), float(2 ** l_oct), peak, bw)
        if len(surf.envelopes) < 4096:
            surf.envelopes[key] = hit
    return key, hit


# Whole-batch attention tables start this long (one per context length asked for); a context axis of
# up to this many lengths reads them (a (B, K, L) grid's L axis), more are interpolated per cell
MIN_WHOLE_BATCH_TABLE = 1 << 10
MAX_WHOLE_BATCH_CONTEXTS = 64


def _attention_whole_batch_table(surf, shape: dict, keys: float, peak: float, bw: float, top: int):
    """The q = 1 kernel's envelope time at every whole batch size 0..N (N >= ``top``; entry 0 unused)
    at ``keys`` cached keys: :func:`log_lattice_interp` evaluated once per context length."""
    key, hit = _attention_lattice(surf, shape, float(top), keys, peak, bw)  # the lattice the cells would use
    table_key = key + ("whole-batch", keys)
    table = surf.envelopes.get(table_key)
    size = _table_size(top, MIN_WHOLE_BATCH_TABLE)
    # at least 0..size, not just 0..top: _attention_whole_batch_tables stacks these tables cut at size + 1,
    # and a kept shorter table (an earlier, smaller top in the same octave) would not line up with a new one
    if table is None or table.size <= size:
        table = log_lattice_interp(hit[2], hit[0], hit[1], np.maximum(np.arange(size + 1, dtype=float), 1.0), keys)
        if len(surf.envelopes) < 4096:
            surf.envelopes[table_key] = table
    return table


def _key_index(keys: np.ndarray) -> np.ndarray:
    """Each context length's column in :func:`_attention_whole_batch_tables` (the shape of ``keys``)."""
    return np.arange(keys.size).reshape(keys.shape)


def _attention_whole_batch_tables(surf, shape: dict, keys: np.ndarray, peak: float, bw: float, top: int):
    """(N + 1, n_keys): :func:`_attention_whole_batch_table` at each context length of ``keys`` (in
    ``keys.ravel()`` order), side by side, rows 0..N with N >= ``top`` (cached per set of lengths)."""
    size = _table_size(top, MIN_WHOLE_BATCH_TABLE)
    b_oct = _octaves(top, MIN_BATCH_OCTAVES)  # the lattice each table reads
    key = ("attention-whole-batch-stack", size, b_oct, peak, bw, keys.tobytes()) + _attention_static(shape)
    stack = surf.envelopes.get(key)
    if stack is None:
        tables = [_attention_whole_batch_table(surf, shape, float(k), peak, bw, top) for k in keys.ravel().tolist()]
        stack = np.stack([t[:size + 1] for t in tables], axis=1)
        if len(surf.envelopes) < 4096:
            surf.envelopes[key] = stack
    return stack


def collective_op_time_s(op: Op, profile: Profile | None, caches: PhysicsCaches | None = None):
    """Measured collective time: the requested implementation's table, else the other all-reduce's
    (a profile measured with NCCL still beats the datasheet link model for a custom all-reduce); whole-token
    tables kept in ``caches`` (the step model's)."""
    if profile is None or op.collective is None or not profile.collectives:
        return None
    kind, gpus = op.collective
    if kind.startswith("all_reduce"):
        kind = next((k for k in (kind, "all_reduce", "all_reduce_nccl") if profile.collectives.get(k)), None)
    if kind is None or not profile.collectives.get(kind):
        return None
    tokens = op.shape.get("tokens")
    if tokens is not None and np.ndim(tokens):
        whole, top = whole_tokens(np.asarray(tokens), caches)
        if whole is not None:  # a message of whole tokens: one table read per cell
            return _collective_whole_token_table(profile.collectives, kind, gpus, op.shape["bytes_per_token"], top,
                                                 caches)[whole]
    return collective_time_s(profile.collectives, gpus, op.shape["bytes"], op=kind, monotone=True)


def _collective_whole_token_table(collectives, kind: str, gpus: int, bytes_per_token: float, top: int,
                                  caches: PhysicsCaches | None = None):
    """The measured collective's time at every whole token count 0..N (N >= ``top``) of messages of
    ``bytes_per_token`` each (kept in ``caches.collective_tables``; the collectives are kept so that their id
    stays theirs)."""
    key = (id(collectives), kind, int(gpus), float(bytes_per_token))
    kept = caches.collective_tables if caches is not None else {}
    hit = kept.get(key)
    if hit is None or hit[0] is not collectives or hit[1].size <= top:
        size = _table_size(top, MIN_WHOLE_TOKEN_TABLE)
        table = collective_time_s(collectives, gpus, np.arange(size + 1, dtype=float) * bytes_per_token, op=kind,
                                  monotone=True)
        make_room(kept, PhysicsCaches.COLLECTIVE_SLOTS)
        hit = kept[key] = (collectives, table)
    return hit[1]
