"""K* schedules an engine can run: the fewest ranges of constant K within a goodput tolerance.

The raw per-batch argmax K*(b) = argmax_K goodput(b, K) jitters between near-equal K where the
alternatives are a fraction of a percent apart (measured kernel tables carry ~1% tile-size steps).
Every distinct K is another set of CUDA-graph captures in the engine, and a range that returns to an
earlier K costs the user trust, so the default schedule is the solution of

    minimise   #ranges = 1 + #{i : K_i != K_{i-1}}          over K_1..K_n (one K per batch size b_i)
    subject to goodput(b_i, K_i) >= (1 - tol) * max_K goodput(b_i, K)   at every b_i (K that fit memory)
    tie-break  the largest sum_i goodput(b_i, K_i) / max_K goodput(b_i, K)  (each batch size weighs alike)

solved exactly by a dynamic programme along the batch axis with state K (one column per context
length when there is a context axis): with C_i(K) the best (ranges, -relative goodput) ending at b_i
with K_i = K,

    C_i(K) = min( C_{i-1}(K),  min_J C_{i-1}(J) + (1 range) ) + (0, -g_i(K) / g*_i)   if K allowed at b_i

A schedule that returns to an earlier K (A, then B, then A) is therefore one where A falls outside
the tolerance somewhere in the B range: staying on A would save two ranges. ``tol = 0`` gives the
raw argmax (ties to the smaller K). Batch sizes where no K fits memory take the state "none" (-1).
"""
from __future__ import annotations

import numpy as np

from simulator.specs.scenario import SCHEDULE_TOLERANCE  # noqa: F401 (the default, re-exported)


def argmax_k_index(goodput: np.ndarray, fits: np.ndarray) -> np.ndarray:
    """Per-batch argmax of goodput over the K that fit (axis 1); -1 where none fits. Shape: axis 1 dropped."""
    masked = np.where(fits, goodput, -np.inf)
    idx = np.argmax(masked, axis=1)
    return np.where(np.isfinite(masked.max(axis=1)), idx, -1)


def schedule_k_index(goodput: np.ndarray, fits: np.ndarray, tolerance: float = SCHEDULE_TOLERANCE,
                     near_best: np.ndarray | None = None) -> np.ndarray:
    """K index per batch size of the fewest-range schedule within ``tolerance`` (module docstring).

    ``goodput``, ``fits``: (n_batch, n_k, *cells) with batch sizes ascending on axis 0; trailing axes
    (e.g. context length) are solved independently. ``near_best`` (same shape, optional): K allowed besides
    those within ``tolerance`` of the best score (the caller's own test of "near the best": under uncertain
    engine terms, plan.decision_risk). Returns (n_batch, *cells) indices into axis 1, -1 where no K fits."""
    goodput = np.asarray(goodput, dtype=float)
    if tolerance <= 0:
        return argmax_k_index(goodput, fits)
    nb, nk = goodput.shape[:2]
    cells = goodput.shape[2:]
    g = (goodput if np.all(fits) else np.where(fits, goodput, -np.inf)).reshape(nb, nk, -1)
    best = _max_over_states(g)  # (nb, nc)
    none = ~np.isfinite(best)
    with np.errstate(invalid="ignore", divide="ignore"):
        rel = g / best[:, None, :]  # NaN (-inf / -inf) where nothing fits: below every tolerance
    # states 0..nk-1 are the K; state nk is "nothing fits", the only state where no K fits. A state's
    # penalty is minus its relative goodput where it is allowed (0 for "nothing fits"), inf where not
    penalty = np.full((nb, nk + 1, rel.shape[2]), np.inf)
    with np.errstate(invalid="ignore"):
        allowed = rel >= 1.0 - tolerance
    if near_best is not None:
        allowed |= np.asarray(near_best, dtype=bool).reshape(nb, nk, -1) & np.isfinite(rel)
    np.negative(rel, out=penalty[:, :nk], where=allowed)
    penalty[:, nk] = np.where(none, -0.0, np.inf)
    idx = _solve_column(penalty)[:, None] if penalty.shape[2] == 1 else _backtrack(*_forward(penalty))
    return np.where(idx == nk, -1, idx).reshape((nb,) + cells)


# one sortable number per DP state: ranges * RANGE_WEIGHT - (sum of relative goodput); the score
# sum is at most n_batch (< RANGE_WEIGHT), so fewer ranges always win and goodput breaks ties
RANGE_WEIGHT = 1e6


def _forward(penalty: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Forward pass of the DP over (i, state, cell), C_i = min(C_{i-1}, min_J C_{i-1}(J) + W) + p_i with
    p_i = -g_i (inf where a state is not allowed): whether each state at i stayed on its K (else it
    switched from the best state at i-1), that best state, and the best state at the end."""
    keys = _forward_keys_cells(penalty)
    prev = keys[:-1]
    stayed = np.empty(keys.shape, dtype=bool)  # filled in place: no copies of the (rows, states, cells) arrays
    stayed[0] = False
    best, at = _min_argmin_over_states(prev)
    np.less_equal(prev, np.add(best, RANGE_WEIGHT, out=best)[:, None, :], out=stayed[1:])
    source = np.empty(keys.shape[::2], dtype=np.int64)
    source[0] = 0
    source[1:] = at
    return stayed, source, keys[-1].argmin(axis=0)


def _forward_keys_cells(penalty: np.ndarray) -> np.ndarray:
    """The DP's keys C_i(state, cell), one numpy row per batch size (many cells at a time). Where every
    cell's row allows one state, the same as the row before, each key only adds its penalty (an allowed
    key is its row's minimum, a barred one stays inf): the stretch is summed down the rows in one call."""
    keys = np.empty_like(penalty)
    keys[0] = penalty[0] + RANGE_WEIGHT
    run_end = _single_state_runs(np.isfinite(penalty))
    best = np.empty(penalty.shape[2:])  # min_J C_{i-1}(J) + W, one per cell
    reduce_min, minimum, add = np.minimum.reduce, np.minimum, np.add  # bound once: ufunc calls per row
    i, n = 1, len(keys)
    while i < n:
        j = run_end[i]
        if j >= i:
            keys[i:j + 1] = np.add.accumulate(np.concatenate([keys[i - 1:i], penalty[i:j + 1]]), axis=0)[1:]
            i = j + 1
            continue
        prev, cur = keys[i - 1], keys[i]
        reduce_min(prev, axis=0, out=best)
        add(best, RANGE_WEIGHT, out=best)
        minimum(prev, best, out=cur)
        add(cur, penalty[i], out=cur)
        i += 1
    return keys


def _single_state_runs(finite: np.ndarray) -> list[int]:
    """Per row i: the last row j >= i of a stretch in which every cell allows exactly one state, the
    state its row i - 1 allowed alone; -1 where row i does not continue such a stretch. ``finite``: the
    allowed states, (rows, states, cells)."""
    count, state = _count_and_first(finite)
    one = count == 1
    cont = np.zeros(len(finite), dtype=bool)
    cont[1:] = (one[1:] & one[:-1] & (state[1:] == state[:-1])).all(axis=1)
    return _run_ends(cont).tolist()


def _run_ends(cont: np.ndarray) -> np.ndarray:
    """Per row: the last row of the stretch of True in ``cont`` it belongs to, -1 where it is False."""
    breaks = np.flatnonzero(~cont)
    ends = np.append(breaks[1:] - 1, len(cont) - 1)[np.searchsorted(breaks, np.arange(len(cont)), side="right") - 1] \
        if breaks.size else np.full(len(cont), len(cont) - 1)
    return np.where(cont, ends, -1)


def _solve_column(penalty: np.ndarray) -> np.ndarray:
    """The schedule of one cell column, (nb,) states: :func:`_backtrack` of :func:`_forward`, both in
    Python over the allowed states of each row (:func:`_forward_column`)."""
    since, source, last = _forward_column(penalty)
    idx = np.empty(len(since), dtype=np.int64)
    i, k = len(since) - 1, last
    while True:
        r = since[i][k]
        idx[r:i + 1] = k
        if r == 0:
            return idx
        i, k = r - 1, source[r]


def _forward_column(penalty: np.ndarray) -> tuple[list, list, int]:
    """:func:`_forward` for one cell column over the allowed states of each row only (a state a row
    does not allow has key inf there, and a row allows one or two K at most batch sizes), in Python
    floats: the same IEEE minima and sums as the numpy rows, so the same keys, the same stays (a key at
    most the switch stays, as ``less_equal``) and the same sources (the first state of least key, as
    ``argmin``). Where consecutive rows allow one and the same state its key only accumulates the
    penalties, left to right. Returns, per row, each allowed state's range start (the row where it last
    switched), the state a switch at that row comes from, and the state of least key at the end."""
    pen = penalty[:, :, 0]
    finite = np.isfinite(pen)
    counts = finite.sum(axis=1)
    run_end = _single_state_runs(finite[:, :, None])  # >= 0 where row i continues a run of one allowed state
    states = np.nonzero(finite)[1].tolist()  # row-major: each row's allowed states in order
    values = pen[finite].tolist()
    offsets = np.concatenate([[0], np.cumsum(counts)]).tolist()
    pairs = list(zip(states, values))
    nb = len(offsets) - 1
    since: list = [None] * nb
    source = [0] * nb
    prev = {st: v + RANGE_WEIGHT for st, v in pairs[:offsets[1]]}  # the keys of the row before
    since[0] = dict.fromkeys(prev, 0)
    inf = float("inf")
    i = 1
    while i < nb:
        prev_since = since[i - 1]
        j = run_end[i]
        if j >= 0:  # rows i..j keep the one state of row i - 1: key_r = key_{r-1} + pen_r
            (st, key), = prev.items()
            for v in values[offsets[i]:offsets[j + 1]]:
                key += v
            # the rows inside the stretch are read back only through their range's first row
            prev, since[j], source[i:j + 1] = {st: key}, prev_since, [st] * (j + 1 - i)
            i = j + 1
            continue
        least = inf
        for st, k in prev.items():  # the first state of least key (dict order: ascending states)
            if k < least:
                src, least = st, k
        switch = least + RANGE_WEIGHT
        cur, cur_since = {}, {}
        for st, v in pairs[offsets[i]:offsets[i + 1]]:
            k = prev.get(st, inf)
            if k <= switch:  # stays (a tie stays: the same key either way)
                cur[st], cur_since[st] = k + v, prev_since[st]
            else:
                cur[st], cur_since[st] = switch + v, i
        prev, since[i], source[i] = cur, cur_since, src
        i += 1
    return since, source, min(prev, key=prev.get)


def _backtrack(stayed: np.ndarray, source: np.ndarray, last: np.ndarray) -> np.ndarray:
    """States along the batch axis, read back from the last one a range at a time: a state that
    stayed on its K since row r (its last switch) holds rows r..i, and row r - 1 is ``source[r]``."""
    nb, ns, nc = stayed.shape
    rows = np.arange(nb, dtype=np.int32)[:, None, None]  # int32: the running max over rows runs 3x faster than int64
    last_switch = np.maximum.accumulate(np.where(stayed, 0, rows), axis=0)  # row 0 never "stayed"
    idx = np.empty((nb, nc), dtype=np.int64)
    for c in range(nc):
        i, k = nb - 1, int(last[c])
        while True:
            r = int(last_switch[i, k, c])
            idx[r:i + 1, c] = k
            if r == 0:
                break
            i, k = r - 1, int(source[r, c])
    return idx


# numpy reduces over the middle axis of a (rows, states, cells) array several times slower than it
# combines its (rows, cells) slices, and a row allows few states: the helpers below go slice by slice

def _max_over_states(a: np.ndarray) -> np.ndarray:
    """``a.max(axis=1)``, the same values (a maximum rounds nothing; NaN propagates alike)."""
    if a.shape[2] == 1:  # one cell: the states are the last axis in memory, one reduction is faster
        return a.max(axis=1)
    out = a[:, 0].copy()
    for s in range(1, a.shape[1]):
        np.maximum(out, a[:, s], out=out)
    return out


def _min_argmin_over_states(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(``a.min(axis=1)``, ``a.argmin(axis=1)``) of an array without NaN: the first state on ties."""
    low = a[:, 0].copy()
    at = np.zeros(low.shape, dtype=np.int64)
    for s in range(1, a.shape[1]):
        col = a[:, s]
        below = col < low
        np.copyto(low, col, where=below)
        np.copyto(at, s, where=below)
    return low, at


def _count_and_first(mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(``mask.sum(axis=1)``, ``mask.argmax(axis=1)``) of a boolean array: True states per (row, cell)
    and the first of them (0 where none is)."""
    if mask.shape[2] == 1:
        return mask.sum(axis=1), mask.argmax(axis=1)
    count = np.zeros(mask[:, 0].shape, dtype=np.int64)
    first = np.zeros(mask[:, 0].shape, dtype=np.int64)
    for s in range(mask.shape[1] - 1, -1, -1):
        col = mask[:, s]
        count += col
        np.copyto(first, s, where=col)
    return count, first


def schedule_ranges(k_index: np.ndarray) -> int:
    """Number of ranges of constant K along axis 0 of a 1-D index array (the 'none fits' tail included)."""
    k = np.asarray(k_index)
    return int(k.size and 1 + np.count_nonzero(np.diff(k)))


def schedule_loss(goodput: np.ndarray, fits: np.ndarray, k_index: np.ndarray) -> np.ndarray:
    """Share of the per-batch optimum a schedule gives up at each batch size: 1 - g(b, K_b) / max_K g(b, K);
    0 where nothing fits."""
    masked = np.where(fits, goodput, -np.inf)
    best = masked.max(axis=1)
    chosen = np.take_along_axis(masked, np.maximum(k_index, 0)[:, None], axis=1)[:, 0]
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(k_index >= 0, 1.0 - chosen / best, 0.0)


def schedule_runs(k_col: np.ndarray) -> list[tuple[int, int, int]]:
    """(first row, last row, K index) of each range of constant K of a 1-D schedule."""
    k = np.asarray(k_col)
    starts = np.flatnonzero(np.diff(k, prepend=k[:1] - 1) != 0) if k.size else np.array([], dtype=int)
    ends = np.append(starts[1:] - 1, k.size - 1)
    return [(int(a), int(b), int(k[a])) for a, b in zip(starts, ends)]


def without_band_returns(k_index: np.ndarray, step_draws: np.ndarray, acceptance_length: np.ndarray, fits: np.ndarray,
                         outside: float) -> np.ndarray:
    """The schedule with every return to an earlier K that rests on a difference inside the band taken out.

    A range of K = b that follows a range of K = a, when a comes back later in the schedule, is a return: two
    more ranges, and another set of graphs, that the schedule should spend only on a difference the terms'
    spread cannot undo. Where b's goodput (acceptance length / step time) beats a's in fewer than ``outside`` of
    the draws at every batch size of the range, the range takes a (where a fits memory there); the first such
    range first, until none is left. ``k_index``: (n_batch, *cells), -1 where no K fits; ``step_draws``: the
    step time per draw, (n_batch, n_k, *cells, n); ``acceptance_length``: (n_k, *cells)."""
    idx = np.array(k_index, dtype=np.int64)
    cols = idx.reshape(idx.shape[0], -1)
    itl = step_draws.reshape(step_draws.shape[:2] + (-1, step_draws.shape[-1]))  # a view: (B, K, cells, draws)
    al = np.asarray(acceptance_length).reshape(len(acceptance_length), -1)
    fit = np.asarray(fits, dtype=bool).reshape(fits.shape[:2] + (-1,))
    for c in range(cols.shape[1]):
        while (merge := _band_return(cols[:, c], itl[:, :, c], al[:, c], fit[..., c], outside)) is not None:
            lo, hi, a = merge
            cols[lo:hi + 1, c] = a
    return cols.reshape(idx.shape)


def has_return(k_index: np.ndarray) -> bool:
    """Whether any column of a schedule (n_batch, *cells) leaves a K and comes back to it later."""
    cols = np.asarray(k_index).reshape(np.shape(k_index)[0], -1)
    for c in range(cols.shape[1]):
        ks = [r[2] for r in schedule_runs(cols[:, c])]
        if len(ks) != len(set(ks)):
            return True
    return False


def _band_return(k_col: np.ndarray, itl: np.ndarray, al: np.ndarray, fits: np.ndarray, outside: float):
    """(first row, last row, the K it left) of the first return inside the band of one column, else None;
    ``itl`` (n_batch, n_k, draws), ``al`` (n_k,)."""
    runs = schedule_runs(k_col)
    for j in range(1, len(runs) - 1):
        a, (lo, hi, b) = runs[j - 1][2], runs[j]
        if a < 0 or b < 0 or a not in {r[2] for r in runs[j + 1:]} or not fits[lo:hi + 1, a].all():
            continue
        if (al[b] / itl[lo:hi + 1, b] > al[a] / itl[lo:hi + 1, a]).mean(axis=-1).max() < outside:
            return lo, hi, a
    return None
