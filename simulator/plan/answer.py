"""The answer in words: the K* schedule as text, the one-line notes a reader of the K* table needs, and where
speculation stops paying."""
from __future__ import annotations

import numpy as np

from simulator.plan import exports
from simulator.specs.acceptance import preset_for


def _span(sizes: np.ndarray, dense: bool) -> str:
    lo, hi = int(sizes[0]), int(sizes[-1])
    if lo == hi:
        return f"{lo}"
    if dense:
        return f"{lo}-{hi}"
    return ", ".join(str(int(b)) for b in sizes[:-1]) + f" and {hi}"


def schedule_text(batch_sizes, k_opt) -> str:
    """Runs of equal K* in words: "K=4 for B 1-43, K=3 for 44-58, ..., no speculation from 207".

    ``k_opt`` < 0 marks batch sizes where no K fits memory. A run is written lo-hi when every batch
    size between lo and hi was evaluated, else as the list of sizes evaluated (sparse lists stay as
    given). A K=0 or no-fit run that reaches the end of the table reads "from B".
    """
    b = np.asarray(batch_sizes, dtype=int)
    k = np.asarray(k_opt, dtype=int)
    if not b.size:
        return "no batch sizes evaluated"
    order = np.argsort(b)
    b, k = b[order], k[order]
    cuts = np.flatnonzero(np.diff(k)) + 1
    parts, sparse = [], False
    for n, (sizes, ks) in enumerate(zip(np.split(b, cuts), np.split(k, cuts))):
        dense = sizes[-1] - sizes[0] + 1 == len(sizes)
        sparse |= not dense
        last = n == len(cuts)
        prefix = "B " if n == 0 else ""
        kk = int(ks[0])
        if kk > 0:
            parts.append(f"K={kk} for {prefix}{_span(sizes, dense)}")
        elif kk == 0:
            parts.append(f"no speculation from B {sizes[0]}" if last and len(sizes) > 1 and dense
                         else f"no speculation (K=0) for {prefix}{_span(sizes, dense)}")
        else:
            parts.append(f"nothing fits memory from B {sizes[0]}" if last
                         else f"nothing fits memory at {prefix}{_span(sizes, dense)}")
    return ("; " if sparse else ", ").join(parts)


def answer_notes(pred) -> list[str]:
    """One-line warnings for the K* table of ``pred``, a :class:`~simulator.plan.api.Prediction` (see
    :meth:`~simulator.plan.api.Prediction.notes`)."""
    sc, t = pred.scenario, pred.table
    out = []
    acc = sc.acceptance
    k = t["k_opt"].dropna().astype(int).to_numpy()
    b_all = t["batch_size"].to_numpy()
    n = acc.given_positions
    if n is not None and k.size and int(k.max()) > n:
        hit = t[t["k_opt"].fillna(-1).astype(int) > n]
        lo_k = int(hit["k_opt"].min())  # the K* of every batch size named, not only the largest
        said = f"K* = {int(k.max())}" if lo_k == int(k.max()) else f"K* = {lo_k}-{int(k.max())}"
        out.append(f"{said} uses acceptance positions beyond the {n} given (B {_span(hit.batch_size.to_numpy(), False) if len(hit) <= 6 else f'{hit.batch_size.min()}-{hit.batch_size.max()}'}):"
                   f" {acc.rule}; measure per-position rates up to K={int(k.max())} before relying on it")
    if sc.draft.is_tree and acc.rank_tail is None:  # e.g. a chain's measured rates given for a tree
        preset = preset_for(sc.draft.preset_key)
        tail = f" (the {sc.draft.preset_key} preset's: {preset.rank_tail:g})" if preset and preset.rank_tail else ""
        out.append(f"--draft {sc.draft.label}: the acceptance rates given carry no rank tail, so they are read as the"
                   " tree's own acceptance per depth, measured on this tree (rates measured on a chain under-count"
                   " a tree, whose lower-ranked candidates catch the top one's misses); to price the tree's shape"
                   f" from top-1 rates, give [acceptance] rank_tail in the scenario{tail}")
    if b_all.size > 1 and b_all[-1] - b_all[0] + 1 != b_all.size:
        out.append(f"batch sizes evaluated only at {_span(b_all, False) if b_all.size <= 12 else f'{b_all.size} sizes between {b_all[0]} and {b_all[-1]}'}"
                   " (given sparsely): the engine ranges hold each evaluated K* until the next evaluated batch size")
    ranges = exports.k_ranges(*pred.kstar_by_batch())
    # only where batch sizes above the table exist to plan: not for one batch size asked about, and
    # not where the table already ends at the memory limit (nothing larger fits)
    if ranges and ranges[-1][2] > 0 and b_all.size > 1 and bool(t["fits_memory"].iloc[-1]):
        last_b, last_k = ranges[-1][1], ranges[-1][2]
        does = above_last_text(pred, last_b, last_k)
        if does:
            out.append(f"above B={last_b} (the last batch size exported) {does}; extend the batch sizes to the"
                       " engine's max_num_seqs to plan that range")
    return out


def above_last_text(pred, last_b: int, last_k: int) -> str:
    """What the scenario's engine does above the last exported batch size, read from its own exported file by
    our reading of its lookup rule: 'vLLM 0.33.0 keeps K=3', 'TensorRT-LLM 1.4.0rc4 turns speculation off'."""
    parts = []
    for fmt, exp in pred.engine_exports().items():
        if isinstance(exp, str):
            continue
        k = exports.engine_k(exp, last_b + 1, cuda_graph_bs=pred.cuda_graph_bs())
        parts.append(f"{exp.engine} {exp.version} " + ("turns speculation off" if k == 0 else
                                                       f"keeps K={k}" if k == last_k else f"runs K={k}"))
    return " and ".join(parts)


def spec_stops_paying(table, grid=None) -> str:
    """The batch size from which K* = 0 (plain decoding) for every larger batch evaluated.

    ``table``: the prediction's table, or its :attr:`~simulator.plan.api.Prediction.columns` (the same
    columns as numpy arrays, K* -1 where none fits). With the (B, K) ``grid`` (the prediction's
    :class:`simulator.plan.grid.Grid`), says when the cause is memory (K = 1 no longer fits) rather than speed.
    """
    column = lambda name: np.asarray(table[name], dtype=float)  # noqa: E731 (<NA> of the table: NaN)
    k = np.nan_to_num(column("k_opt"))  # no K fits: not speculating
    b = np.asarray(table["batch_size"])
    speed = column("speedup_vs_plain")
    pays = (k > 0) & (np.nan_to_num(speed) > 1.0 + 1e-9)
    fixed = column("fixed_vs_plain")
    slower = np.flatnonzero(fixed < 1.0)
    no_fit = np.flatnonzero(np.isnan(fixed) & np.isfinite(column("plain_goodput_per_seq")))
    fixed_txt = ""
    if slower.size and (not no_fit.size or slower[0] < no_fit[0]):
        fixed_txt = f"; a fixed K is slower than plain from B={b[slower[0]]}"
    elif no_fit.size:
        fixed_txt = f"; a fixed K no longer fits memory from B={b[no_fit[0]]}"
    if not pays.any():
        return f"speculation does not pay at any batch size evaluated{fixed_txt}"
    last = np.flatnonzero(pays)[-1]
    if last == len(b) - 1:
        return f"dynamic K still pays at the largest batch evaluated (B={b[-1]}){fixed_txt}"
    stop = b[last + 1]
    why = "K*=0 from there"
    if grid is not None:
        row, col = np.flatnonzero(grid.batch_sizes == stop), np.flatnonzero(grid.ks == 1)
        if row.size and col.size and not bool(grid.fits_memory[row[0], col[0]]):
            why = "speculation no longer fits memory from there"
    return f"dynamic K stops paying at B={stop} ({why}){fixed_txt}"
