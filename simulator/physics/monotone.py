"""A kernel given more work is not faster: monotone envelopes of surface-priced op times.

A measured efficiency surface prices an op as t = R / eta(shape), R = max(F / P, M / BW) the
roofline. Between its nodes, and where the kernel tables are noisy or a kernel choice changes,
eta can rise faster than R falls behind, so that a larger step would be priced cheaper than a
smaller one: verifying K + 1 tokens cheaper than K, or fewer distinct experts costlier than more.
No kernel does that on purpose (an engine given the larger work could always pad the smaller
launch), so the planner prices every op by the envelope

    t_env(w) = max_{w' <= w} t(w')

over the work coordinates w of the op: the token count m of a GEMM (at its weight shape n, k), and
for the routed experts of an MoE layer both the tokens T and the distinct experts E they touch
(more tokens at the same experts, or more experts at the same tokens, is more work). The envelope
is computed on a lattice of the op's own time (integer m; log-spaced T x linear E), accumulated
with a running maximum along every work axis and interpolated (multilinear interpolation of a
lattice that is non-decreasing along each axis is non-decreasing too), so it is exact at integer
token counts, independent of which other batch sizes a grid asks for, and equal to t wherever t
already grows with the work.
"""
from __future__ import annotations

import numpy as np

from simulator.physics.experts import busiest_group_load, experts_touched, table_experts_touched
from simulator.specs.surfaces import isotonic_increasing

# Bytes per kernel call below which data can stay in on-chip L2 (40-126 MB on A100-B200) between
# the timing repeats of a kernel table, so a measured kernel may beat the DRAM roofline.
CACHE_RESIDENT_BYTES = 64e6

# Largest whole token count priced through an integer lattice (GEMM m); beyond it the raw surface
MAX_LATTICE_TOKENS = 1 << 17
# MoE lattice: nodes per octave of tokens, nodes over the distinct-expert range
MOE_TOKEN_NODES_PER_OCTAVE = 16
MOE_EXPERT_NODES = 97  # geometric from k to all experts: 3.7% apart for 256 experts, top-8
# Every lattice spans at least these many octaves (tokens, sequences, cached keys) whatever a grid asks
# for, so that an op's price does not depend on which other sizes were evaluated with it
MIN_TOKEN_OCTAVES, MIN_BATCH_OCTAVES, MIN_KEY_OCTAVES = 17, 12, 20
# ... and the MoE lattice's expert range covers steps of up to this many positions per sequence (K <= 31)
MIN_QUERIES = 32


# How a lattice of op times is made non-decreasing along every axis: "max" the running maximum over
# less work, "min" the running minimum over more work (a smaller job padded to a larger one's kernel),
# "isotonic" the least-squares non-decreasing fit of log t (pool adjacent violators)
MONOTONE_MODE = "isotonic"


def monotone_lattice(t: np.ndarray, weights: np.ndarray | None = None, mode: str | None = None) -> np.ndarray:
    """``t`` [n, m] made non-decreasing along both axes (:data:`MONOTONE_MODE`)."""
    mode = mode or MONOTONE_MODE
    if mode == "max":
        return np.maximum.accumulate(np.maximum.accumulate(t, axis=0), axis=1)
    if mode == "min":
        t = np.minimum.accumulate(t[::-1], axis=0)[::-1]
        return np.minimum.accumulate(t[:, ::-1], axis=1)[:, ::-1]
    # the project's own pool-adjacent-violators (specs.surfaces): scipy.optimize's costs ~0.5 s to import,
    # a third of a cold predict, for lattices of a few dozen nodes
    w = np.ones(t.shape) if weights is None else np.broadcast_to(weights, t.shape)
    y = np.log(t)
    for _ in range(3):  # alternating projections on the two axes, then a guard
        y = _isotonic_columns(y, w)
        if y.shape[1] > 1:
            y = _isotonic_columns(y.T, w.T).T
    return np.maximum.accumulate(np.maximum.accumulate(np.exp(y), axis=0), axis=1)


def _isotonic_columns(y: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Every column of ``y`` made non-decreasing down axis 0 (its weighted isotonic fit); the columns
    that already are are found in one pass and left as they are (most lattice lines)."""
    falls = np.flatnonzero((y[1:] < y[:-1]).any(axis=0))
    if not falls.size:
        return y
    y = y.copy()
    for j in falls:
        y[:, j] = isotonic_increasing(y[:, j], w[:, j])
    return y


def surface_time_s(flops, nbytes, eta, peak: float, bw: float) -> np.ndarray:
    """t = max(F / (eta P), M / (eta BW)), eta capped at 1 unless the op's data fits in L2 and it is
    memory-bound (:data:`CACHE_RESIDENT_BYTES`): a fitted surface read beyond its rows must not
    outrun HBM or the peak."""
    flops, nbytes = np.asarray(flops, dtype=float), np.asarray(nbytes, dtype=float)
    in_cache = (nbytes < CACHE_RESIDENT_BYTES) & (flops / peak < nbytes / bw)
    eta = np.where(in_cache, eta, np.minimum(eta, 1.0))
    return np.maximum(flops / (eta * peak), nbytes / (eta * bw))


def surface_time_point_s(flops: float, nbytes: float, eta: float, peak: float, bw: float) -> float:
    """:func:`surface_time_s` at one point, in Python floats (the same operations in the same order)."""
    in_cache = nbytes < CACHE_RESIDENT_BYTES and flops / peak < nbytes / bw
    eta = eta if in_cache else min(eta, 1.0)
    return max(flops / (eta * peak), nbytes / (eta * bw))

def affine_envelope_s(x: np.ndarray, eta: np.ndarray, f1: float, f0: float, m1: float, m0: float,
                      peak: float, bw: float) -> np.ndarray:
    """Monotone time at the work nodes ``x`` (increasing; log-spaced in use, so that each octave of work
    weighs the same in the fit) of an op with F = f1 x + f0, M = m1 x + m0 (a GEMM at its weight shape:
    F = 2 n k m, M = n k w + (n + k) a m) and efficiency ``eta`` at those nodes: :func:`surface_time_s`
    made non-decreasing in x (:func:`monotone_lattice`)."""
    x = np.asarray(x, dtype=float)
    t = surface_time_s(f1 * x + f0, m1 * x + m0, np.maximum(np.asarray(eta, dtype=float), 1e-12), peak, bw)
    return monotone_lattice(t[:, None])[:, 0]


def gemm_lattice_s(sub, n: float, k: float, w: float, a: float, peak: float, bw: float):
    """(log2 m nodes, log monotone time) of a GEMM at weight shape (n, k) over m tokens, from the
    one-axis surface ``sub`` (the GEMM surface sliced at n, k): nodes 1/16 octave apart up to
    2^MIN_TOKEN_OCTAVES tokens; :func:`lattice_time_s` reads it."""
    log_m = np.arange(MIN_TOKEN_OCTAVES * MOE_TOKEN_NODES_PER_OCTAVE + 1) / MOE_TOKEN_NODES_PER_OCTAVE
    m = np.exp2(log_m)
    t = affine_envelope_s(m, sub(m=m), 2.0 * n * k, 0.0, (n + k) * a, n * k * w, peak, bw)
    return log_m, np.log(t)


def lattice_time_s(lattice, x) -> np.ndarray:
    """exp of the linear interpolation of a 1-D (log2 x nodes, log t) lattice at x (clamped): monotone
    where the lattice is, exact for power laws."""
    log_x, log_t = lattice
    return np.exp(np.interp(np.log2(np.maximum(np.asarray(x, dtype=float), 1e-300)), log_x, log_t))


def lattice_interp(t: np.ndarray, log_x: np.ndarray, y: np.ndarray, qx, qy) -> np.ndarray:
    """Bilinear interpolation of lattice ``t`` [len(log_x), len(y)] at (log2 qx, qy), clamped."""
    qx, qy = np.asarray(qx, dtype=float), np.asarray(qy, dtype=float)
    if qx.size == 1 and qy.size == 1:  # one point (a serving step's prompt chunk): Python floats
        return np.full(np.broadcast_shapes(qx.shape, qy.shape), _lattice_point(t, log_x, y, qx, qy))

    def locate(g, v):
        v = np.clip(v, g[0], g[-1])
        i = np.clip(np.searchsorted(g, v, side="right") - 1, 0, g.size - 2)
        return i, (v - g[i]) / (g[i + 1] - g[i])

    i, fx = locate(log_x, np.log2(np.maximum(np.asarray(qx, dtype=float), 1e-300)))
    j, fy = locate(y, np.asarray(qy, dtype=float))
    return ((1 - fx) * ((1 - fy) * t[i, j] + fy * t[i, j + 1])
            + fx * ((1 - fy) * t[i + 1, j] + fy * t[i + 1, j + 1]))


def _lattice_point(t: np.ndarray, log_x: np.ndarray, y: np.ndarray, qx: np.ndarray, qy: np.ndarray) -> float:
    """:func:`lattice_interp` at one point: the same IEEE operations in the same order on Python floats
    (numpy's own log2), where the array path's calls cost more than its arithmetic."""
    def locate(g, v):
        v = min(max(v, g.item(0)), g.item(-1))
        i = min(max(int(np.searchsorted(g, v, side="right")) - 1, 0), g.size - 2)
        return i, (v - g.item(i)) / (g.item(i + 1) - g.item(i))

    i, fx = locate(log_x, np.log2(np.maximum(qx, 1e-300)).item(0))
    j, fy = locate(y, qy.item(0))
    return ((1 - fx) * ((1 - fy) * t.item(i, j) + fy * t.item(i, j + 1))
            + fx * ((1 - fy) * t.item(i + 1, j) + fy * t.item(i + 1, j + 1)))


def rising_with_bytes(t: np.ndarray, nbytes: np.ndarray, bw: float) -> np.ndarray:
    """``t`` (non-decreasing, along work whose bytes ``nbytes`` never fall) raised where needed so that
    each step costs at least its extra bytes at ``bw``: t_i >= t_{i-1} + (M_i - M_{i-1}) / bw.

    Extra bytes read from HBM are never free: a pooled (flat) stretch of a monotone fit, or a table
    flat while its kernel loads more, rises at the peak rate, the least a larger read can add. Written
    as g = t - M / bw, the recursion is g_i = max(g_i, g_{i-1}): a running maximum."""
    lead = np.asarray(nbytes, dtype=float) / bw
    return lead + np.maximum.accumulate(np.asarray(t, dtype=float) - lead)


def moe_lattice_s(surface, correction, shape: dict, top_tokens: float, top_queries: float, peak: float, bw: float):
    """(log2 T nodes, log2 E nodes, envelope time [T, E], the monotone time along the relation [T], the
    table's own time at T tokens [T]: the work its rows did, :func:`moe_table_time_s`) of one MoE layer's
    routed experts per instance.

    At T tokens touching E distinct experts in all (E between what T / q_max tokens and what T
    independent tokens touch, ``experts_touched``: B = T / q sequences of q <= ``top_queries`` positions
    touch at least the experts of their B first tokens, whatever the reuse), the busiest of ``moe_ep``
    GPUs holds c_E(T) E of them and p_g(T) token-expert pairs (:func:`busiest_group_load` at
    independent tokens; c_E = 1/ep for uniform routing): F = 2 p_g s, M = c_E E s w + p_g b_pair.

    The measured tables' rows loaded more experts than independent tokens touch (their collectors
    route every pair to a new expert first: ``table_experts_touched`` = min(E_all, u k) at u tokens
    without expert parallelism),
    while the surface was fitted with each row labelled by the independent-token count e_0(u). Read
    on that relation the surface gives the table's own time t_tab(u) (made monotone in u), which is
    the time of min(E_all, u k) experts: flat from u = E_all / k on, where all experts are loaded,
    while e_0(u) still grows. Pricing the planner's fewer experts at that time made a step cost the
    same whatever its bytes (gpt-oss-120b / H100 / vLLM: 22.04 ms at K = 4, 6, 8 while 44 -> 55 GB).
    So the table's efficiency is taken in the work it really did, eta_tab(u) = R(u, min(E_all, u k)) /
    t_tab(u), and the planner's (T, E) reads it where the table measured the same work: the same
    experts on the timed GPU (u_1 = E / k without expert parallelism, one token per expert) and the same
    tokens per expert at all experts (u_2 = T E_all / E):

        eta(T, E) = eta_tab(u_1) eta_tab(u_2) / eta_tab(E_all / k),   t = R(T, E) / eta(T, E)

    exact on both edges the table measured (E = T k, and E = E_all: t = t_tab), between them the
    memory-bound step at the efficiency the table reached loading those experts' bytes. Along the
    independent-token relation E = e_0(T) the times are made monotone in T (:data:`MONOTONE_MODE`);
    fewer experts at the same T (a routing reuse) are capped at that and then take the running
    maximum over less work along T and E.
    """
    p = np.asarray(shape["probabilities"], dtype=float)
    k, ep = float(shape["topk"]), int(shape["moe_ep"])
    s, w, b_pair, n = (float(shape[a]) for a in ("params_slice", "w_bytes", "pair_bytes", "n"))
    e_all = float(len(p))
    octaves = max(int(np.ceil(np.log2(max(top_tokens, 2.0)))), 1)
    log_t = np.arange(octaves * MOE_TOKEN_NODES_PER_OCTAVE + 1) / MOE_TOKEN_NODES_PER_OCTAVE
    T = np.exp2(log_t)
    e_all0 = experts_touched(T, p)
    touched_g0, pairs_g = busiest_group_load(T, p, ep)
    c_e = touched_g0 / np.maximum(e_all0, 1e-12)
    e_lo = experts_touched(np.maximum(T / max(top_queries, 1.0), 1.0), p)
    E_nodes = np.geomspace(k, e_all, MOE_EXPERT_NODES)

    def work(E, share, pairs):  # [T, n] expert counts -> (FLOPs, bytes) on the busiest GPU
        pairs = pairs[:, None] * np.ones_like(E)
        return 2.0 * pairs * s, share[:, None] * E * s * w + pairs * b_pair

    # the table's own time at u = T tokens: the surface on the relation its rows were labelled with (the
    # importer's uniform routing p = k / E_all, calibration/import_tables.uniform_moe_load)
    p_table = np.full(p.size, k / e_all)
    e_label = experts_touched(T, p_table)
    touched_label, pairs_label = busiest_group_load(T, p_table, ep)
    share_label = touched_label / np.maximum(e_label, 1e-12)
    eta_label = surface(tokens_per_expert=T * k / e_label, expert_bytes=share_label * e_label * s * w, n=n)
    if correction is not None:
        factor = correction.factor({**{a: shape[a] for a in correction.key_axes}, correction.along: T})
        if factor is not None:
            eta_label = eta_label / factor
    t_label = surface_time_s(*(x[:, 0] for x in work(e_label[:, None], share_label, pairs_label)), eta_label, peak, bw)
    # ... and its efficiency in the work those rows did (all the experts they loaded), each step up in u
    # costing at least its extra bytes at the HBM peak (where the fit pooled a falling stretch)
    on_gpu = table_experts_touched(T, p.size, int(k), ep)  # the timed GPU's experts (all E / ep from E / k on)
    f_tab, m_tab = (x[:, 0] for x in work(on_gpu[:, None], np.ones(T.size), pairs_label))
    t_table = rising_with_bytes(monotone_lattice(t_label[:, None])[:, 0], m_tab, bw)
    log_eta = np.log(np.maximum(f_tab / peak, m_tab / bw) / t_table)
    # u_1: the tokens at which the table's GPU loaded the step's busiest GPU's experts (the table's count,
    # made strictly increasing where it is flat, read backwards; E / k without expert parallelism)
    rising = np.maximum.accumulate(on_gpu) + 1e-9 * log_t

    def time_s(E):  # [T, n] expert counts -> seconds per instance, at the table's efficiency for that work
        u_1 = np.interp(c_e[:, None] * E, rising, log_t)
        u_2 = np.log2(T[:, None] * e_all / E)
        eta = np.exp(np.interp(u_1, log_t, log_eta) + np.interp(u_2, log_t, log_eta)
                     - np.interp(np.log2(e_all / k), log_t, log_eta))
        return surface_time_s(*work(E, c_e, pairs_g), eta, peak, bw)

    # independent tokens (rho = 0): the monotone fit along T
    t_rel = monotone_lattice(time_s(e_all0[:, None]))
    # fewer experts than independent tokens touch (reuse): never costlier than the same tokens at rho = 0,
    # and not cheaper than less work (running maximum); e_all0(T) itself keeps t_rel
    t = np.minimum(time_s(np.clip(E_nodes[None, :], e_lo[:, None], e_all0[:, None])), t_rel)
    t = np.where(E_nodes[None, :] >= e_all0[:, None], t_rel, t)
    return log_t, np.log2(E_nodes), monotone_lattice(t, mode="max"), t_rel[:, 0], t_table


def moe_time_s(lattice, tokens, touched, probabilities) -> np.ndarray:
    """An MoE layer's time per instance at T ``tokens`` touching E = ``touched`` experts, from
    :func:`moe_lattice_s`: on the independent-token relation (E = e_0(T)) the 1-D monotone fit exactly,
    elsewhere the lattice (never above that fit at the same T: a convex combination of nodes that are not)."""
    log_t, log_e, t, t_rel = lattice[:4]
    tokens, touched = np.broadcast_arrays(np.asarray(tokens, dtype=float), np.asarray(touched, dtype=float))
    lx = np.log2(np.maximum(tokens, 1e-300))
    on = touched >= experts_touched(tokens, probabilities) * (1.0 - 1e-9)
    on_relation = np.interp(lx, log_t, t_rel)
    if on.all():  # independent tokens (no routing reuse): the lattice is not read
        return on_relation
    return np.where(on, on_relation, lattice_interp(t, log_t, log_e, tokens, np.log2(touched)))


def moe_table_time_s(lattice, tokens) -> np.ndarray:
    """The time :func:`moe_lattice_s` gives a measured table's own row of T ``tokens``: the work that row did
    (``table_experts_touched`` experts), which is what its measured time is to be compared with."""
    return np.exp(np.interp(np.log2(np.maximum(np.asarray(tokens, dtype=float), 1e-300)), lattice[0],
                            np.log(lattice[4])))


# Decode-attention lattice: nodes per octave of sequences and of cached keys
ATTENTION_NODES_PER_OCTAVE = 8


def log_lattice_interp(log_t: np.ndarray, log_x: np.ndarray, log_y: np.ndarray, qx, qy) -> np.ndarray:
    """exp of the bilinear interpolation of ``log_t`` at (log2 qx, log2 qy): exact for power laws
    (t proportional to B, or to the keys read), and monotone where log_t is."""
    return np.exp(lattice_interp(log_t, log_x, log_y, qx, np.log2(np.maximum(np.asarray(qy, dtype=float), 1e-300))))


def attention_lattice_s(surface, shape: dict, top_batch: float, top_keys: float, peak: float, bw: float):
    """(log2 B nodes, log2 L nodes, log envelope time [B, L]) of the q = 1 decode-attention kernel the
    tables measured: B sequences, one query each, over L cached keys (+ the new one: context L + 1).
    A grouped kernel (one KV read per KV head; surface axes B hkv, L + 1, d, g)::

        F_1 = 4 B (L + 1) hq d,   M_1 = B (L + 1) 2 hkv d kv + 2 B hq d a

    absorbed MLA (a latent of r + rope per key; surface axes B, L + 1, M_1)::

        F_1 = 2 B (L + 1) hq (2 r + rope),   M_1 = B (L + 1) latent kv + 2 B hq latent a

    the running maximum taken along B and along L. :func:`attention_time_s` adds the other queries."""
    step = 1.0 / ATTENTION_NODES_PER_OCTAVE
    log_b = np.arange(0.0, max(np.ceil(np.log2(max(top_batch, 2.0))), 1.0) + step / 2, step)
    log_l = np.arange(0.0, max(np.ceil(np.log2(max(top_keys, 2.0))), 1.0) + step / 2, step)
    B, L = np.exp2(log_b)[:, None], np.exp2(log_l)[None, :]
    per_score, key_bytes, query_bytes = _attention_unit_work(shape)
    m_1 = B * ((L + 1) * key_bytes + query_bytes)
    if "latent" in shape:
        eta = surface(batch=B * np.ones_like(L), context=L + 1.0, bytes=m_1)
    else:
        hkv, d, g = (float(shape[x]) for x in ("kv_heads", "head_dim", "group"))
        eta = surface(batch_heads=B * hkv, context=L + 1.0, head_dim=d, group=g)
    t = surface_time_s(B * (L + 1) * per_score, m_1, eta, peak, bw)
    return log_b, log_l, np.log(monotone_lattice(t))


def _attention_unit_work(shape: dict) -> tuple[float, float, float]:
    """(FLOPs per query-key score, KV bytes per key, query + output bytes per query) of one sequence."""
    hq, kv, a = (float(shape[x]) for x in ("q_heads", "kv_elem_bytes", "a_bytes"))
    if "latent" in shape:
        latent = float(shape["latent"])
        return 2.0 * hq * float(shape["score_width"]), latent * kv, 2.0 * hq * latent * a
    d = float(shape["head_dim"])
    return 4.0 * hq * d, 2.0 * float(shape["kv_heads"]) * d * kv, 2.0 * hq * d * a


def attention_time_s(t_1, shape: dict, flops, peak: float, bw: float) -> np.ndarray:
    """A verify pass's decode attention from the measured q = 1 kernel's time ``t_1`` at the same B and L.

    The tables measured q = 1 kernels. A q-query kernel pays that kernel's time once, latency floor
    included, and its extra work, the other q - 1 queries' keys, reads and writes
    dM = B (q - 1) (kv bytes per key + query bytes), at the roofline; its FLOPs F_q cap it below:

        t_q = max(t_1(B, L) + dM / BW,  F_q / P)

    (pricing the whole q-query kernel at the q = 1 kernel's efficiency instead charged the extra queries
    at the latency floor's efficiency of a short context: 9 queries over 1 key at 5x the time of one
    query, a time that fell as the context grew). Non-decreasing in B, L and q where t_1 is."""
    _, key_bytes, query_bytes = _attention_unit_work(shape)
    batch, queries = (np.asarray(shape[x], dtype=float) for x in ("sequences", "queries"))
    extra = batch * (queries - 1.0) * (key_bytes + query_bytes)
    return np.maximum(t_1 + extra / bw, np.asarray(flops, dtype=float) / peak)
