"""Optimal-K tables in the exact formats serving engines read, for the engine version they target.

Every exporter takes a :class:`KTable` (K* per batch size B and context length L, plus the goodput
grid for runner-up choices) and returns an :class:`Export`: the engine file (``payload``), the
version it targets, warnings, and a Markdown table of what the engine will do per range.

Formats and lookup rules (checked against each engine's released code; see docs/engine-schedules.md):

vllm      ``num_speculative_tokens_per_batch_size = [[bs_lo, bs_hi, K], ...]`` (vLLM >= 0.24.0):
          inclusive ranges, the first starting at 1, no overlaps; K(B) = K of the range holding B;
          above the last range the LAST K carries on; every K is capped at num_speculative_tokens.
vllm-ctx  ``[[bs_lo, bs_hi, ctx_lo, ctx_hi, K], ...]``: the context-aware form of open vLLM PR
          #48944 (a proposal; no release reads it). Rows form a rectangular grid.
trtllm    ``draft_len_schedule = {bs: K}`` with ``max_draft_len``. 1.2.x: key = lower bound,
          K(B) = value of the largest key <= B, key 1 required and = max_draft_len. 1.3.0rc8 and
          later: key = "up to", K(B) = value of the smallest key >= B, K = 0 above the last key,
          the smallest key's K = max_draft_len.
sglang    ``--speculative-adaptive-config FILE``: ``{"<bs>": {"candidate_steps": [...]}}``, key =
          lower bound of the (CUDA-graph padded) batch size (SGLang >= 0.5.13; K = 0 from 0.5.14).
sglang-sps ``--speculative-dspark-sps-table-path FILE``: ``{"sample_batch_tokens": [...],
          "sample_steps_per_sec": [...], "max_batch_tokens": N}``, floor lookup on batch tokens
          (SGLang >= 0.5.16).
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

import numpy as np

from simulator.errors import PlannerError


# --- 1-D helpers (kept for callers that hold a plain K* list) ---------------------------------------

def k_ranges(batch_sizes, k_opt) -> list[list[int]]:
    """Merge a K* table into inclusive [start_bs, end_bs, K] ranges.

    A listed batch size's K holds up to the next listed batch size minus one; the first range
    starts at 1 (K of the smallest listed batch size). Batch sizes with no feasible K (k < 0) end
    the table: engines cannot run them anyway.
    """
    b = np.asarray(batch_sizes, dtype=int)
    k = np.asarray(k_opt, dtype=int)
    order = np.argsort(b)
    b, k = b[order], k[order]
    keep = np.flatnonzero(k < 0)
    if keep.size:
        b, k = b[: keep[0]], k[: keep[0]]
    ranges: list[list[int]] = []
    for i, (size, kk) in enumerate(zip(b, k)):
        start = 1 if i == 0 else int(size)
        end = int(b[i + 1] - 1) if i + 1 < len(b) else int(size)
        if ranges and ranges[-1][2] == kk:
            ranges[-1][1] = end
        else:
            ranges.append([start, end, int(kk)])
    return ranges


def vllm_config(batch_sizes, k_opt) -> dict:
    ranges = k_ranges(batch_sizes, k_opt)
    return {"num_speculative_tokens": max((r[2] for r in ranges), default=0),
            "num_speculative_tokens_per_batch_size": ranges}


def trtllm_schedule(batch_sizes, k_opt) -> dict[int, int]:
    """{upper bound: K}; the last range's upper bound is the largest batch size evaluated.
    (Version-free legacy form; :func:`export` writes the validated form for a named version.)"""
    return {r[1]: r[2] for r in k_ranges(batch_sizes, k_opt)}


# --- versions ----------------------------------------------------------------------------------------

FORMATS = ("vllm", "vllm-ctx", "trtllm", "sglang", "sglang-sps")
ENGINE_OF = {"vllm": "vLLM", "vllm-ctx": "vLLM", "trtllm": "TensorRT-LLM", "sglang": "SGLang", "sglang-sps": "SGLang"}
# the newest released version each format was checked against (the default target)
DEFAULT_VERSION = {"vllm": "0.33.0", "vllm-ctx": "pr48944", "trtllm": "1.2.1", "sglang": "0.5.23",
                   "sglang-sps": "0.5.23"}
NEWEST_CHECKED = {"vllm": "0.33.0", "trtllm": "1.4.0rc4", "sglang": "0.5.23", "sglang-sps": "0.5.23"}
PROPOSAL_VERSIONS = ("pr48944", "pr-48944", "proposal")

_VERSION = re.compile(r"v?(\d+)\.(\d+)(?:\.(\d+))?(?:\.?(rc|post|dev)(\d+))?")
_PRE = {"dev": -2, "rc": -1, "": 0, "post": 1}


def parse_version(text: str) -> tuple[int, int, int, int, int]:
    """'1.3.0rc8' -> (1, 3, 0, -1, 8); '0.5.13.post1' -> (0, 5, 13, 1, 1); '0.33.0' -> (0, 33, 0, 0, 0).
    Ordered so that dev < rc < release < post."""
    m = _VERSION.fullmatch(str(text).strip())
    if not m:
        raise PlannerError(f"--export-version '{text}': expected a version such as 0.33.0, 1.2.1 or 1.3.0rc8")
    major, minor, patch, tag, num = m.groups()
    return int(major), int(minor), int(patch or 0), _PRE[tag or ""], int(num or 0)


def trtllm_generation(version: str) -> str:
    """'lower' (1.2 line: keys are lower bounds) or 'upto' (1.3.0rc8 and later: "up to" keys)."""
    v = parse_version(version)
    if v[:2] < (1, 2):
        raise PlannerError(f"--export-version {version}: TensorRT-LLM before 1.2 has no draft_len_schedule"
                           " (first in the 1.2 line); target 1.2.1 or later")
    if v[:2] == (1, 2):
        return "lower"
    if v[:3] == (1, 3, 0) and v[3] == _PRE["rc"] and v[4] < 8:
        raise PlannerError(f"--export-version {version}: the draft_len_schedule meaning changed from lower-bound"
                           " to 'up to' keys around 1.3.0rc8 (PR #10860, merged 2026-03-13) and this rc was not"
                           " verified; target 1.2.1 or 1.3.0rc8 or later")
    if v[:3] == (1, 3, 0) and v[3] == _PRE["dev"]:
        raise PlannerError(f"--export-version {version}: dev builds are not targets; use 1.2.1 or 1.3.0rc8+")
    return "upto"


def check_version(fmt: str, version: str | None) -> tuple[str, list[str]]:
    """(resolved version, warnings) for a format; a version the format does not exist in is a
    PlannerError naming the first version that has it."""
    if fmt not in FORMATS:
        raise PlannerError(f"unknown export format '{fmt}' (known: {', '.join(FORMATS)})")
    version = str(version).strip() if version else DEFAULT_VERSION[fmt]
    notes: list[str] = []
    if fmt == "vllm-ctx":
        if version.lower() not in PROPOSAL_VERSIONS:
            raise PlannerError(f"--format vllm-ctx --export-version {version}: no released vLLM reads 5-item"
                               " [bs_lo, bs_hi, ctx_lo, ctx_hi, K] rows (checked through 0.33.0; released code"
                               " rejects them); they are the open proposal PR #48944 (--export-version pr48944),"
                               " use --format vllm for a released vLLM")
        return "pr48944", ["vllm-ctx is the format of open vLLM PR #48944, a proposal: no released vLLM reads it"]
    if version.lower() in PROPOSAL_VERSIONS:
        raise PlannerError(f"--format {fmt} --export-version {version}: proposal versions apply to --format vllm-ctx only")
    v = parse_version(version)
    if fmt == "vllm" and v < parse_version("0.24.0"):
        raise PlannerError(f"--format vllm --export-version {version}: num_speculative_tokens_per_batch_size first"
                           " appears in vLLM 0.24.0; older releases use one static num_speculative_tokens")
    if fmt == "trtllm":
        trtllm_generation(version)
    if fmt == "sglang":
        if v < parse_version("0.5.11"):
            raise PlannerError(f"--format sglang --export-version {version}: SGLang has no adaptive speculation"
                               " before 0.5.11 and per-batch-size slots before 0.5.13; target 0.5.13 or later")
        if v < parse_version("0.5.13"):
            raise PlannerError(f"--format sglang --export-version {version}: SGLang 0.5.11-0.5.12 read one flat"
                               " adaptive config without batch-size slots; target 0.5.13 or later")
    if fmt == "sglang-sps" and v < parse_version("0.5.16"):
        raise PlannerError(f"--format sglang-sps --export-version {version}: the DSpark step-cost table"
                           " (--speculative-dspark-sps-table-path) first appears in SGLang 0.5.16")
    newest = NEWEST_CHECKED[fmt]
    if v > parse_version(newest):
        notes.append(f"{ENGINE_OF[fmt]} {version} is newer than the newest version checked ({newest}):"
                     " the format is assumed unchanged")
    return version, notes


# --- the K table the exporters read -----------------------------------------------------------------

@dataclass
class KTable:
    """K* per (batch size, context length) and the grid it was read from.

    ``k_opt[i, j]`` is K* at batch_sizes[i], context_lens[j] (-1: nothing fits in memory).
    ``goodput`` (n_batch, n_k, n_ctx) and ``fits`` let an exporter pick the best K under an engine
    constraint (the runner-up); ``itl_s`` is the predicted step time (for step-cost tables).
    ``context_index`` is the column that formats without a context axis use.
    """

    batch_sizes: np.ndarray
    context_lens: np.ndarray
    k_opt: np.ndarray
    ks: np.ndarray
    goodput: np.ndarray | None = None
    fits: np.ndarray | None = None
    itl_s: np.ndarray | None = None
    context_index: int = 0

    @classmethod
    def from_1d(cls, batch_sizes, k_opt, context_len: int = 2048) -> "KTable":
        k = np.asarray(k_opt, dtype=int)
        return cls(np.asarray(batch_sizes, dtype=int), np.array([int(context_len)]), k[:, None],
                   np.arange(max(int(k.max()), 0) + 1))

    @property
    def context_len(self) -> int:
        return int(self.context_lens[self.context_index])

    def best_k(self, allowed) -> np.ndarray:
        """(n_batch, n_ctx) best K among ``allowed`` (bool over ks, or (n_batch, n_k, n_ctx)); where
        no goodput grid is held, K* clipped into the allowed set (nearest allowed K)."""
        allowed = np.asarray(allowed, dtype=bool)
        if self.goodput is not None:
            ok = allowed.reshape((1, -1, 1)) if allowed.ndim == 1 else allowed
            if self.fits is not None:
                ok = ok & self.fits
            masked = np.where(ok, self.goodput, -np.inf)
            idx = np.argmax(masked, axis=1)
            return np.where(np.isfinite(masked.max(axis=1)), self.ks[idx], -1)
        ks_ok = self.ks[allowed] if allowed.ndim == 1 else self.ks
        k = self.k_opt
        near = ks_ok[np.argmin(np.abs(k[..., None] - ks_ok[None, None, :]), axis=-1)]
        return np.where(k < 0, -1, near)


@dataclass
class Export:
    """One engine file: ``payload`` is what to write (JSON), ``rows`` what the engine will do."""

    fmt: str
    version: str
    payload: dict
    rows: list[dict]
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    how_to_use: str = ""

    @property
    def engine(self) -> str:
        return ENGINE_OF[self.fmt]

    def json(self) -> str:
        return json.dumps(self.payload, indent=2) + "\n"

    def markdown(self) -> str:
        lines = [f"**{self.engine} {self.version}** (`--format {self.fmt}`)", ""]
        if self.rows:
            cols = list(self.rows[0])
            lines += ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
            lines += ["| " + " | ".join(str(r[c]) for c in cols) + " |" for r in self.rows]
        for note in self.notes:
            lines += ["", f"Note: {note}"]
        for warn in self.warnings:
            lines += ["", f"Warning: {warn}"]
        if self.how_to_use:
            lines += ["", f"Use: {self.how_to_use}"]
        return "\n".join(lines) + "\n"


def _ranges_text(ranges) -> str:
    return f"{ranges[0]}-{ranges[1]}" if ranges[0] != ranges[1] else f"{ranges[0]}"


def _column(table: KTable, k2d: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(batch sizes, K) of the column 1-D formats use, cut at the first batch size nothing fits."""
    b = np.asarray(table.batch_sizes, dtype=int)
    k = np.asarray(k2d[:, table.context_index], dtype=int)
    return b, k


def _context_warning(table: KTable, k2d: np.ndarray) -> list[str]:
    if len(table.context_lens) < 2:
        return []
    col = k2d[:, table.context_index:table.context_index + 1]
    differ = [int(c) for j, c in enumerate(table.context_lens) if (k2d[:, j] != col[:, 0]).any()]
    if not differ:
        return []
    return [f"K* differs at context lengths {differ} from context {table.context_len} that this file encodes"
            " (the format has no context axis)"]


def _tail_warnings(table: KTable, k1: np.ndarray, above: str) -> list[str]:
    """Warnings about batch sizes beyond the grid / beyond memory."""
    b = np.asarray(table.batch_sizes, dtype=int)
    out = []
    none = np.flatnonzero(k1 < 0)
    if none.size:
        out.append(f"batch sizes >= {b[none[0]]} do not fit in memory at context {table.context_len}: the table"
                   f" ends at {b[none[0]] - 1 if none[0] > 0 else 0}; {above}")
    else:
        out.append(f"the grid ends at batch size {b.max()}: {above}")
    return out


# --- vLLM --------------------------------------------------------------------------------------------

def vllm_lookup(payload: dict, batch_size: int) -> int:
    """K vLLM (>= 0.24.0) schedules for ``batch_size`` requests: the range holding it, a gap takes
    the previous range's K, above the last range the last K; capped at num_speculative_tokens."""
    sched = sorted(payload["num_speculative_tokens_per_batch_size"])
    k = sched[0][2]
    for lo, hi, kk in sched:
        if batch_size >= lo:
            k = kk
    return min(k, payload["num_speculative_tokens"])


def _vllm(table: KTable, version: str, method_cfg: dict | None) -> Export:
    k2d = table.k_opt
    b, k1 = _column(table, k2d)
    ranges = k_ranges(b, k1)
    if not ranges:
        raise PlannerError(f"no batch size fits in memory at context {table.context_len}: nothing to export")
    k_top = max(r[2] for r in ranges)
    warns = _context_warning(table, k2d)
    if k_top == 0:
        warns.append("K* = 0 at every batch size: speculation never pays here; serving without a"
                     " speculative_config is faster (vLLM needs num_speculative_tokens >= 1, so the file sets 1"
                     " with K = 0 everywhere)")
    payload = dict(method_cfg or {})
    payload |= {"num_speculative_tokens": max(k_top, 1), "num_speculative_tokens_per_batch_size": ranges}
    last = ranges[-1]
    warns += _tail_warnings(table, k1, f"vLLM keeps K={last[2]} for every batch size above {last[1]} (up to"
                                       " max_num_seqs); extend --batch-sizes to max_num_seqs to plan them")
    rows = [{"batch sizes": _ranges_text(r), "K": r[2]} for r in ranges]
    rows.append({"batch sizes": f"> {last[1]}", "K": f"{last[2]} (last K carries on)"})
    notes = [f"num_speculative_tokens = {payload['num_speculative_tokens']} (the largest K in the table, so no"
             " K is capped); vLLM's V2 model runner captures CUDA graphs for each distinct K"
             f" ({len({r[2] for r in ranges})} here)",
             "vLLM >= 0.29 drops the schedule (static K, with a warning) when data_parallel_size > 1, and on"
             " model runner V1 keeps it only for ngram, eagle, eagle3, mtp, draft_model and dflash"]
    use = ("vllm serve MODEL --speculative-config '" + json.dumps(payload) + "'")
    return Export("vllm", version, payload, rows, warns, notes, use)


def vllm_ctx_lookup(payload: dict, batch_size: int, context_len: int) -> int:
    """K of the 5-item proposal form (our reading of PR #48944): the row whose batch range holds
    the batch size (above the last: the last) and whose context range holds the context (below the
    first: the first; above the last: the last); capped at num_speculative_tokens."""
    rows = payload["num_speculative_tokens_per_batch_size"]
    b_starts = sorted({r[0] for r in rows})
    c_starts = sorted({r[2] for r in rows})
    b0 = max([s for s in b_starts if s <= batch_size] or [b_starts[0]])
    c0 = max([s for s in c_starts if s <= context_len] or [c_starts[0]])
    hit = [r[4] for r in rows if r[0] == b0 and r[2] == c0]
    return min(hit[0], payload["num_speculative_tokens"])


def fill_infeasible(k: np.ndarray) -> tuple[np.ndarray, int]:
    """(K table with every -1 cell (nothing fits) replaced by the K of the largest feasible batch size
    in its context column, or, where a column has none, the column to its left; cells filled)."""
    k = np.array(k, dtype=int)
    bad = k < 0
    for j in range(k.shape[1]):
        col = k[:, j]
        ok = np.flatnonzero(col >= 0)
        if ok.size:
            last = np.maximum.accumulate(np.where(col >= 0, np.arange(len(col)), -1))
            col[:] = np.where(last >= 0, col[np.maximum(last, 0)], col[ok[0]])
        elif j > 0:
            col[:] = k[:, j - 1]
    if (k < 0).any():  # leading columns with nothing feasible: take the first feasible column
        first = np.flatnonzero((k >= 0).all(axis=0))[0]
        k[:, : first] = k[:, first: first + 1]
    return k, int(bad.sum())


def _vllm_ctx(table: KTable, version: str, method_cfg: dict | None) -> Export:
    """Rectangular grid: batch breakpoints = the union over contexts, context breakpoints = the
    union over batch sizes (every batch range splits context at the same boundaries)."""
    b = np.asarray(table.batch_sizes, dtype=int)
    c = np.asarray(table.context_lens, dtype=int)
    k = np.asarray(table.k_opt, dtype=int)
    order_b, order_c = np.argsort(b), np.argsort(c)
    b, c, k = b[order_b], c[order_c], k[order_b][:, order_c]
    warns = []
    if (k < 0).all():
        raise PlannerError("no batch size fits in memory at any context length: nothing to export")
    k, filled = fill_infeasible(k)
    if filled:
        warns.append(f"{filled} (batch size, context) cells do not fit in memory: the engine cannot run them, so"
                     " they repeat the K of the largest batch size that fits at that context (fewer rows)")
    row_change = np.concatenate([[True], (k[1:] != k[:-1]).any(axis=1)])
    col_change = np.concatenate([[True], (k[:, 1:] != k[:, :-1]).any(axis=0)])
    bi, ci = np.flatnonzero(row_change), np.flatnonzero(col_change)
    b_lo = [1] + [int(b[i]) for i in bi[1:]]
    b_hi = [int(b[i]) - 1 for i in bi[1:]] + [int(b[-1])]
    c_lo = [1] + [int(c[j]) for j in ci[1:]]
    c_hi = [int(c[j]) - 1 for j in ci[1:]] + [int(c[-1])]
    rows = [[b_lo[x], b_hi[x], c_lo[y], c_hi[y], int(k[bi[x], ci[y]])]
            for x in range(len(bi)) for y in range(len(ci))]
    k_top = max(r[4] for r in rows)
    payload = dict(method_cfg or {})
    payload |= {"num_speculative_tokens": max(k_top, 1), "num_speculative_tokens_per_batch_size": rows}
    notes = ["PROPOSAL: 5-item rows are the format of open vLLM PR #48944 (RFC #48627); no released vLLM reads"
             " them (0.24.0-0.33.0 reject them: 'Tuple should have at most 3 items'). Rows form a rectangular"
             " grid as the RFC requires",
             f"context ranges: a listed context's K holds up to the next listed context; contexts above {c[-1]}"
             " are assumed to keep the last range's K (the proposal's rule above the last range was not seen)"]
    md = [{"batch sizes": _ranges_text((r[0], r[1])), "context": _ranges_text((r[2], r[3])), "K": r[4]}
          for r in rows]
    warns.append(f"the grid ends at batch size {b[-1]}: above it the last batch range's K is assumed to carry on"
                 " (as the released 3-item form does)")
    use = ("vllm serve MODEL --speculative-config '" + json.dumps(payload) + "'  (a build of PR #48944 only)")
    return Export("vllm-ctx", version, payload, md, warns, notes, use)


# --- TensorRT-LLM ----------------------------------------------------------------------------------

def trtllm_lookup(payload: dict, batch_size: int, version: str) -> int:
    """K TensorRT-LLM uses for ``batch_size`` active requests (see the module docstring)."""
    sched = {int(a): int(v) for a, v in payload["draft_len_schedule"].items()}
    keys = sorted(sched)
    if trtllm_generation(version) == "lower":
        below = [x for x in keys if x <= batch_size]
        return sched[below[-1]] if below else 0
    above = [x for x in keys if x >= batch_size]
    return sched[above[0]] if above else 0


def _trtllm(table: KTable, version: str) -> Export:
    gen = trtllm_generation(version)
    k2d = np.array(table.k_opt)
    b, k1 = _column(table, k2d)
    warns = _context_warning(table, k2d)
    feasible = k1 >= 0
    if not feasible.any():
        raise PlannerError(f"no batch size fits in memory at context {table.context_len}: nothing to export")
    j = table.context_index
    # 1. every K must be <= max_draft_len = the K of the smallest key (B = 1)
    cap = int(k1[0])
    if cap <= 0:
        raise PlannerError(f"--format trtllm: K* = 0 at batch size 1 (context {table.context_len}), and TensorRT-LLM"
                           " needs the smallest key's K = max_draft_len >= 1: speculation does not pay here, serve"
                           " without it (or use --format vllm, which can hold K = 0 everywhere)")
    if (k1 > cap).any():
        over = b[k1 > cap]
        k1 = np.where(k1 > cap, table.best_k(table.ks <= cap)[:, j], k1)
        warns.append(f"K* exceeds the K at batch size 1 ({cap}) at batch sizes {_list(over)}: TensorRT-LLM"
                     " requires every K <= max_draft_len = the smallest key's K, so those get the best K <= "
                     f"{cap} (runner-up)")
    # 2. the 'up to' generation: no return from K = 0 to K > 0
    if gen == "upto":
        pos = np.flatnonzero(k1 > 0)
        interior = (k1 == 0) & (np.arange(len(k1)) < (pos.max() if pos.size else -1))
        if interior.any():
            zeros = b[interior]
            allowed = (table.ks >= 1) & (table.ks <= cap)
            k1 = np.where(interior, table.best_k(allowed)[:, j], k1)
            warns.append(f"K* = 0 at batch sizes {_list(zeros)} followed by K > 0 at larger ones: in TensorRT-LLM"
                         f" {version} ('up to' keys) K = 0 is the tier above the largest key (speculation off),"
                         " and a schedule that returns from 0 is not a documented use, so those get the best"
                         " K >= 1 (runner-up)")
    ranges = k_ranges(b, k1)
    max_draft_len = cap
    if gen == "lower":
        sched = {r[0]: r[2] for r in ranges}
        last = ranges[-1]
        above = f"TensorRT-LLM {version} keeps K={last[2]} above batch size {last[1]} (the largest key's K)"
        rows = [{"batch sizes": _ranges_text(r), "K": r[2]} for r in ranges]
        rows.append({"batch sizes": f"> {last[1]}", "K": f"{last[2]} (largest key's K carries on)"})
    else:
        # a key at both ends of every range: the same K under 'up to' AND lower-bound lookups within
        # the grid (some 1.3 builds' two-model drafter still looks keys up as lower bounds)
        sched = {}
        for lo, hi, kk in ranges:
            sched[lo] = kk
            sched[hi] = kk
        if ranges[-1][2] == 0 and len(ranges) > 1:
            lo, hi, _ = ranges[-1]
            sched.pop(hi, None)  # the implicit tier above the last key is already 0
        last = ranges[-1]
        above = (f"TensorRT-LLM {version} turns speculation off (K=0) above the largest key {max(sched)}"
                 if last[2] > 0 else f"K=0 above batch size {last[0] - 1}")
        rows = [{"batch sizes": _ranges_text(r), "K": r[2]} for r in ranges]
        rows.append({"batch sizes": f"> {last[1]}", "K": f"0 (above the largest key {max(sched)}: speculation off)"})
    warns += _tail_warnings(table, k1, above + "; extend --batch-sizes to max_batch_size to plan them")
    payload = {"max_draft_len": max_draft_len, "draft_len_schedule": {str(key): int(v) for key, v in sorted(sched.items())}}
    meaning = "lower bounds (K of the largest key <= batch size)" if gen == "lower" else \
        "'up to' (K of the smallest key >= batch size; K = 0 above the largest key)"
    notes = [f"keys are {meaning} in TensorRT-LLM {version}; the same file means different K in the other"
             " generation (1.2.x vs 1.3.0rc8+)",
             "TensorRT-LLM wheels are not on PyPI: this format was checked against the engine's source"
             " (tensorrt_llm/llmapi/llm_args.py validate_draft_len_schedule_and_sort and the runtime lookup),"
             " not a released wheel"]
    if gen == "upto":
        notes.append("draft_len_schedule and max_concurrency are mutually exclusive in this generation")
    use = "speculative_config: {max_draft_len: %d, draft_len_schedule: %s}  (trtllm-serve --extra_llm_api_options FILE.yaml)" % (
        max_draft_len, json.dumps(payload["draft_len_schedule"]))
    return Export("trtllm", version, payload, rows, warns, notes, use)


def _list(values, n: int = 8) -> str:
    values = [int(v) for v in values]
    return ", ".join(map(str, values[:n])) + (f" ... ({len(values)} in all)" if len(values) > n else "")


# --- SGLang ----------------------------------------------------------------------------------------

def pad_to_capture(batch_size: int, cuda_graph_bs) -> int:
    """SGLang's padding before routing: the next captured batch size >= B (B itself above the largest)."""
    if not cuda_graph_bs:
        return int(batch_size)
    sizes = sorted(int(x) for x in cuda_graph_bs)
    for s in sizes:
        if s >= batch_size:
            return s
    return int(batch_size)


def sglang_lookup(payload: dict, batch_size: int, cuda_graph_bs=None) -> list[int]:
    """Candidate steps of the slot SGLang routes to: pad B to the next captured size, then the slot
    of the largest key <= padded B (below the smallest key: the smallest key's slot)."""
    keys = sorted(int(x) for x in payload if str(x).isdigit())
    p = pad_to_capture(batch_size, cuda_graph_bs)
    below = [x for x in keys if x <= p]
    key = below[-1] if below else keys[0]
    return sorted(set(payload[str(key)]["candidate_steps"]))


def _sglang(table: KTable, version: str, cuda_graph_bs=None, candidates: str = "kstar",
            tolerance: float = 0.02) -> Export:
    v = parse_version(version)
    k2d = np.array(table.k_opt)
    b, k1 = _column(table, k2d)
    warns = _context_warning(table, k2d)
    j = table.context_index
    if not (k1 >= 0).any():
        raise PlannerError(f"no batch size fits in memory at context {table.context_len}: nothing to export")
    if v < parse_version("0.5.14") and (k1 == 0).any():
        zeros = b[k1 == 0]
        k1 = np.where(k1 == 0, table.best_k(table.ks >= 1)[:, j], k1)
        warns.append(f"K* = 0 at batch sizes {_list(zeros)}, but SGLang {version} requires positive"
                     " candidate_steps (K = 0 is accepted from 0.5.14): those get the best K >= 1; target"
                     " 0.5.14+ to switch speculation off there")
    # the engine pads B up to the next captured CUDA-graph size before routing, and the step then runs
    # at the padded size: K*(padded B) is the best K for every B that pads to it
    if cuda_graph_bs:
        listed = list(b)
        padded = np.array([pad_to_capture(x, cuda_graph_bs) for x in b])
        eff = k1.copy()
        for i, p in enumerate(padded):
            if k1[i] < 0:
                continue
            # K* at the padded size; where the grid lacks it (or it does not fit), the K* of the largest
            # feasible batch size that pads to the same size: one K per padded size either way
            same = np.flatnonzero((padded == p) & (b <= p) & (k1 >= 0))
            eff[i] = k1[same[-1]]
        k1 = eff
        changed = [int(x) for x, p in zip(listed, padded) if p != x]
        if changed:
            warns.append(f"SGLang pads a batch up to the next captured CUDA-graph size ({len(cuda_graph_bs)}"
                         f" sizes up to {max(cuda_graph_bs)}) before choosing a slot, so each batch size gets the"
                         " K* of its padded size (the step runs at that size)")
    ranges = k_ranges(b, k1)
    payload: dict = {}
    rows = []
    for lo, hi, kk in ranges:
        cand = [kk]
        if candidates == "neighbors" and table.goodput is not None:
            # goodput at the range's first batch size, relative to the K the slot starts at
            i = int(np.searchsorted(b, max(lo, b[0])))
            at = {int(x): float(gv) for x, gv in zip(table.ks, table.goodput[i, :, j])}
            best = at.get(kk, np.nan)
            lo_k, hi_k = kk - 1, kk + 1
            min_k = 0 if v >= parse_version("0.5.14") else 1
            if lo_k >= min_k and lo_k in at and hi_k in at and np.isfinite(best) \
                    and at[lo_k] >= (1 - tolerance) * best and at[hi_k] >= (1 - tolerance) * best:
                cand = [lo_k, kk, hi_k]
        payload[str(lo)] = {"candidate_steps": cand}
        rows.append({"batch sizes": _ranges_text((lo, hi)), "candidate_steps": cand, "K at start": kk})
    last = ranges[-1]
    rows.append({"batch sizes": f"> {last[1]}", "candidate_steps": payload[str(last[0])]["candidate_steps"],
                 "K at start": f"{last[2]} (last slot carries on)"})
    warns += _tail_warnings(table, k1, f"SGLang keeps the last slot (K={last[2]}) above batch size {last[1]}"
                                       + ("" if last[2] == 0 else "; add a slot with candidate_steps [0] to"
                                          " switch speculation off there (0.5.14+)"))
    union = sorted({s for e in payload.values() for s in e["candidate_steps"]})
    notes = ["a slot with one candidate is a fixed K; with several, SGLang starts at --speculative-num-steps"
             " when it is a candidate of the slot (else the slot's middle candidate) and then moves by the EMA"
             " of accepted lengths",
             f"without --speculative-num-steps SGLang starts from the middle of all candidates ({union[len(union) // 2]})"
             " and requires the flag, if given, to be one of them",
             "adaptive speculation needs EAGLE/EAGLE3 with topk 1 and no attention-DP, two-batch-overlap or"
             " multi-layer EAGLE; otherwise SGLang switches it off with a warning"]
    if not cuda_graph_bs:
        notes.append("no CUDA-graph capture sizes given: routing assumed on the real batch size; with graphs"
                     " on, SGLang pads first (pass the capture sizes for an exact file)")
    use = ("python -m sglang.launch_server --model MODEL --speculative-algorithm EAGLE3 --speculative-adaptive"
           " --speculative-adaptive-config adaptive.json")
    return Export("sglang", version, payload, rows, warns, notes, use)


def sps_lookup(payload: dict, batch_tokens: int) -> float:
    """Steps/s DSpark reads: the value at the largest probe <= tokens, clamped at both ends."""
    probes = payload["sample_batch_tokens"]
    i = max(int(np.searchsorted(probes, batch_tokens, side="right")) - 1, 0)
    return float(payload["sample_steps_per_sec"][i])


def _sglang_sps(table: KTable, version: str) -> Export:
    """Probe table along the plan: at batch size B the engine runs K*(B), a step of B (K*+1) batch
    tokens (running requests + verify budget) taking ITL(B, K*): one probe per distinct token count,
    steps/s = 1 / ITL (the faster step where two batch sizes give the same count)."""
    if table.itl_s is None:
        raise PlannerError("the step-cost table needs predicted step times (a Prediction, not a K list)")
    j = table.context_index
    b = np.asarray(table.batch_sizes, dtype=int)
    k = np.asarray(table.k_opt[:, j], dtype=int)
    ok = k >= 0
    idx = np.searchsorted(table.ks, np.maximum(k, 0))
    itl = table.itl_s[np.arange(len(b)), idx, j]
    tokens = b * (k + 1)
    probes: dict[int, float] = {}
    for t, s, good in zip(tokens, itl, ok):
        if good:
            probes[int(t)] = min(probes.get(int(t), np.inf), float(s))
    if not probes:
        raise PlannerError(f"no batch size fits in memory at context {table.context_len}: nothing to export")
    keys = sorted(probes)
    payload = {"sample_batch_tokens": keys, "sample_steps_per_sec": [round(1.0 / probes[t], 4) for t in keys],
               "max_batch_tokens": int(keys[-1])}
    rows = [{"batch tokens": t, "step ms": round(probes[t] * 1e3, 4), "steps/s": round(1.0 / probes[t], 2)}
            for t in keys]
    warns = _context_warning(table, np.array(table.k_opt))
    notes = [f"predicted step times along the planned K*(B) at context {table.context_len}, not measured: seed"
             " the engine's cost table before any hardware run, then replace it with"
             " sglang.benchmark.dspark_sps_profiler output",
             "SGLang reads the value of the largest probe <= batch tokens (clamped at both ends);"
             " SGLANG_RAGGED_VERIFY_MODE=static ignores the table"]
    use = "--speculative-dspark-sps-table-path sps.json"
    return Export("sglang-sps", version, payload, rows, warns, notes, use)


# --- dispatcher ----------------------------------------------------------------------------------

def export(fmt: str, table: KTable, version: str | None = None, *, method_cfg: dict | None = None,
           cuda_graph_bs=None, sglang_candidates: str = "kstar") -> Export:
    """The engine file for ``fmt`` targeting ``version`` (default: the newest release checked)."""
    version, notes = check_version(fmt, version)
    if fmt == "vllm":
        out = _vllm(table, version, method_cfg)
    elif fmt == "vllm-ctx":
        out = _vllm_ctx(table, version, method_cfg)
        notes = []
    elif fmt == "trtllm":
        out = _trtllm(table, version)
    elif fmt == "sglang":
        out = _sglang(table, version, cuda_graph_bs, sglang_candidates)
    else:
        out = _sglang_sps(table, version)
    out.notes = notes + out.notes
    return out


def engine_k(exp: Export, batch_size: int, context_len: int | None = None, cuda_graph_bs=None) -> int:
    """The K our reading of the engine's rule gives for an export at (B, L) (for checks and tables)."""
    if exp.fmt == "vllm":
        return vllm_lookup(exp.payload, batch_size)
    if exp.fmt == "vllm-ctx":
        return vllm_ctx_lookup(exp.payload, batch_size, context_len if context_len is not None else 1)
    if exp.fmt == "trtllm":
        return trtllm_lookup(exp.payload, batch_size, exp.version)
    if exp.fmt == "sglang":
        cand = sglang_lookup(exp.payload, batch_size, cuda_graph_bs)
        return cand[len(cand) // 2]
    raise PlannerError(f"{exp.fmt} is a step-cost table, not a K schedule")
