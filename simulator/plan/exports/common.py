"""Shared pieces of the engine exports: the 1-D helpers, engine versions and their checks, the
:class:`KTable` every exporter reads, the :class:`Export` it returns, and shared warning helpers.

See the package docstring (simulator/plan/exports/__init__.py) for the formats and lookup rules.
"""
from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field

import numpy as np

from simulator.errors import PlannerError
from simulator.specs import versions


# --- 1-D helper: K* runs as inclusive ranges (what every exporter starts from) ----------------------

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


# --- versions ----------------------------------------------------------------------------------------

FORMATS = ("vllm", "vllm-ctx", "trtllm", "sglang", "sglang-sps")
ENGINE_OF = {"vllm": "vLLM", "vllm-ctx": "vLLM", "trtllm": "TensorRT-LLM", "sglang": "SGLang", "sglang-sps": "SGLang"}
# the newest released version each format was checked against (the default target)
DEFAULT_VERSION = {"vllm": "0.33.0", "vllm-ctx": "pr48944", "trtllm": "1.2.1", "sglang": "0.5.23",
                   "sglang-sps": "0.5.23"}
NEWEST_CHECKED = {"vllm": "0.33.0", "trtllm": "1.4.0rc4", "sglang": "0.5.23", "sglang-sps": "0.5.23"}
PROPOSAL_VERSIONS = ("pr48944", "pr-48944", "proposal")

# the one version order (PEP 440), with errors naming the flag the version came from
parse_version = functools.partial(versions.parse_version, what="--export-version")


def trtllm_generation(version: str) -> str:
    """'lower' (1.2 line: keys are lower bounds) or 'upto' (1.3.0rc8 and later: "up to" keys)."""
    v = parse_version(version)
    if v.head(2) < (1, 2):
        raise PlannerError(f"--export-version {version}: TensorRT-LLM before 1.2 has no draft_len_schedule"
                           " (first in the 1.2 line); target 1.2.1 or later")
    if v.head(2) == (1, 2):
        return "lower"
    if v.head(3) == (1, 3, 0) and v.is_rc and v.pre[1] < 8:
        raise PlannerError(f"--export-version {version}: the draft_len_schedule meaning changed from lower-bound"
                           " to 'up to' keys around 1.3.0rc8 (PR #10860, merged 2026-03-13) and this rc was not"
                           " verified; target 1.2.1 or 1.3.0rc8 or later")
    if v.head(3) == (1, 3, 0) and v.is_dev:
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
    chosen_for: str = ""  # a file of one K for every batch size: which batch size(s) that K was chosen for

    @property
    def engine(self) -> str:
        return ENGINE_OF[self.fmt]

    def json(self) -> str:
        return json.dumps(self.payload, indent=2) + "\n"

    def markdown(self) -> str:
        """The schedule as a Markdown table with its notes; the warnings stay in ``.warnings`` (the CLI
        prints them on stderr, never into the table)."""
        lines = [f"**{self.engine} {self.version}** (`--format {self.fmt}`)", ""]
        if self.rows:
            cols = list(self.rows[0])
            lines += ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
            lines += ["| " + " | ".join(str(r[c]) for c in cols) + " |" for r in self.rows]
        for note in self.notes:
            lines += ["", f"Note: {note}"]
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


def _list(values, n: int = 8) -> str:
    values = [int(v) for v in values]
    return ", ".join(map(str, values[:n])) + (f" ... ({len(values)} in all)" if len(values) > n else "")
