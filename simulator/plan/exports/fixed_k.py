"""One K for an engine that runs a fixed K at every batch size (SGLang's launch flags for an EAGLE tree or a
DFLASH / DSPARK block draft: its adaptive config drives EAGLE chains with topk 1 only).

At a planned batch size B the K is K*(B). Over a planned range of batch sizes (by default every evaluated
batch size that fits with speculation) it is the K >= 1 with the highest mean share of each batch size's best
goodput, each doubling of batch size weighted equally: a load the plan does not know is as likely to sit at
4-8 as at 64-128, the answer does not depend on how densely the range was evaluated (1-512 every integer or
powers of two), and the largest batch sizes, whose absolute goodput is highest, do not decide it alone.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from simulator.errors import PlannerError
from simulator.plan.exports.common import KTable


@dataclass(frozen=True)
class FixedK:
    """The fixed K and what it was chosen for: ``lo``-``hi`` the evaluated batch sizes (lo == hi: one)."""

    k: int
    lo: int
    hi: int
    given: bool  # the user planned the batch size(s); False: the default range
    mean_share: float  # log-B weighted mean over lo-hi of goodput at k / the best goodput at that B
    worst_share: float
    worst_at: int
    plain_share: float  # the same mean for plain decoding (K = 0)
    share: np.ndarray  # per evaluated batch size: goodput at k / the best there (NaN: k does not fit)
    no_fit_from: int | None  # the smallest batch size of lo-hi where k does not fit in memory (None: it fits at all)
    warnings: tuple[str, ...] = ()

    def chosen_for(self) -> str:
        """Which batch sizes the K was chosen for, in words (every fixed-K export says it)."""
        if self.lo == self.hi:
            return f"K = {self.k} chosen for batch size {self.lo}" + (" (the planned batch size)" if self.given else "")
        where = "the planned batch sizes" if self.given else \
            "every evaluated batch size that fits with speculation, the default"
        return (f"K = {self.k} chosen for batch sizes {self.lo}-{self.hi} ({where}; each doubling of batch size"
                f" weighted equally): it keeps {self.mean_share:.0%} of each batch size's best goodput on average"
                + (f" (0% from B = {self.no_fit_from}, where it does not fit)" if self.no_fit_from else "")
                + f", {self.worst_share:.0%} at worst where it fits (B = {self.worst_at})")


def log_weights(batch_sizes) -> np.ndarray:
    """The share of log B each sorted batch size stands for (cut at the midpoints in log B), summing to 1."""
    x = np.log(np.asarray(batch_sizes, dtype=float))
    if x.size < 2 or x[-1] == x[0]:
        return np.full(x.size, 1.0 / max(x.size, 1))
    w = np.diff(np.concatenate([[x[0]], (x[1:] + x[:-1]) / 2, [x[-1]]]))
    return w / w.sum()


def goodput_shares(table: KTable) -> np.ndarray:
    """(n_batch, n_k) goodput at each K / the best goodput at that batch size (0 where K does not fit,
    NaN where nothing fits), at the table's context length."""
    if table.goodput is None:
        raise PlannerError("a fixed K over batch sizes needs the goodput grid (a Prediction, not a K list)")
    j = table.context_index
    g = np.asarray(table.goodput[:, :, j], dtype=float)
    ok = np.isfinite(g) & (np.asarray(table.fits[:, :, j], dtype=bool) if table.fits is not None else True)
    g = np.where(ok, g, 0.0)
    best = g.max(axis=1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(best > 0, g / best, np.nan)


def choose_fixed_k(table: KTable, planned: int | tuple[int, int] | None = None) -> FixedK:
    """The fixed K for ``planned``: one batch size (the best K >= 1 there: K* unless K* = 0), a (lo, hi) range
    (the best log-B weighted mean share of each batch size's best goodput), or None (that range over every
    evaluated batch size that fits with speculation). Ties go to the smaller K."""
    j = table.context_index
    b = np.asarray(table.batch_sizes, dtype=int)
    ks = np.asarray(table.ks, dtype=int)
    k_spec = np.asarray(table.best_k(ks >= 1))[:, j]  # best K >= 1 (-1: none fits)
    feasible = np.flatnonzero(k_spec >= 1)
    if not feasible.size:
        raise PlannerError(f"no batch size fits in memory with speculation at context {table.context_len}:"
                           " nothing to export")
    share = goodput_shares(table)
    warns: list[str] = []
    if isinstance(planned, (int, np.integer)):
        rows = feasible[[int(np.argmin(np.abs(b[feasible] - int(planned))))]]
        if int(b[rows[0]]) != int(planned):
            warns.append(f"planned batch size {int(planned)} was not evaluated (or does not fit with speculation):"
                         f" the K is the best of the nearest evaluated one, {b[rows[0]]}; add {int(planned)} to the"
                         " batch sizes for its own")
    else:
        lo, hi = (int(b[feasible[0]]), int(b[feasible[-1]])) if planned is None else (int(planned[0]), int(planned[1]))
        rows = feasible[(b[feasible] >= lo) & (b[feasible] <= hi)]
        if not rows.size:
            raise PlannerError(f"planned batch sizes {lo}-{hi}: none of them was evaluated and fits with speculation"
                               f" (evaluated and fitting: {b[feasible[0]]}-{b[feasible[-1]]})")
        if planned is not None and (lo < b[rows[0]] or hi > b[rows[-1]]):
            warns.append(f"planned batch sizes {lo}-{hi}: only {b[rows[0]]}-{b[rows[-1]]} were evaluated and fit"
                         " with speculation; the K is chosen over those")
    w = log_weights(b[rows])
    score = w @ np.nan_to_num(share[rows])  # per K: the weighted mean share of the best goodput
    k_col = int(np.argmax(np.where(ks >= 1, score, -np.inf)))
    k = int(ks[k_col])
    at_k = np.nan_to_num(share[rows, k_col])
    fits_k = _fits(table, k_col)[rows]
    worst = int(np.argmin(np.where(fits_k, at_k, np.inf)))
    plain = float(score[int(np.flatnonzero(ks == 0)[0])]) if (ks == 0).any() else 0.0
    mean = float(score[k_col])
    no_fit_from = int(b[rows][~fits_k][0]) if not fits_k.all() else None
    if no_fit_from is not None:
        trade = "" if planned is not None else "; plan a batch size (or range) to trade K against that"
        warns.append(f"K = {k} does not fit in memory from batch size {no_fit_from} at context {table.context_len}:"
                     f" with these flags SGLang holds fewer running requests (at most {b[rows][fits_k][-1]}, the"
                     f" largest batch size evaluated where K = {k} fits){trade}")
    if plain > mean:
        where = f"batch size {b[rows[0]]}" if rows.size == 1 else f"batch sizes {b[rows[0]]}-{b[rows[-1]]}"
        warns.append(f"plain decoding keeps more of the best goodput at {where} ({plain:.0%}) than any fixed K >= 1"
                     f" (K = {k}: {mean:.0%}); serve without --speculative-algorithm unless the load sits where"
                     " speculation pays")
    return FixedK(k, int(b[rows[0]]), int(b[rows[-1]]), planned is not None, mean, float(at_k[worst]),
                  int(b[rows[worst]]), plain, np.where(_fits(table, k_col), share[:, k_col], np.nan), no_fit_from,
                  tuple(warns))


def _fits(table: KTable, k_col: int) -> np.ndarray:
    """Per evaluated batch size: whether K (column ``k_col``) fits in memory at the table's context."""
    if table.fits is None:
        return np.ones(len(table.batch_sizes), dtype=bool)
    return np.asarray(table.fits[:, k_col, table.context_index], dtype=bool)
