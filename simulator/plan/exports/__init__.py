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

Modules: vllm, vllm-ctx in ``vllm.py``; trtllm in ``trtllm.py``; sglang, sglang-sps in ``sglang.py``;
versions, :class:`KTable`, :class:`Export` and shared helpers in ``common.py``; the dispatcher here.
"""
from __future__ import annotations

from simulator.errors import PlannerError
from simulator.plan.exports.common import (DEFAULT_VERSION, ENGINE_OF, FORMATS, NEWEST_CHECKED,
                                           PROPOSAL_VERSIONS, Export, KTable, check_version, k_ranges,
                                           parse_version, trtllm_generation)
from simulator.plan.exports.sglang import (_sglang, _sglang_sps, is_launch_flags, pad_to_capture, sglang_lookup,
                                          sps_lookup)
from simulator.plan.exports.trtllm import _trtllm, trtllm_lookup
from simulator.plan.exports.vllm import _vllm, _vllm_ctx, fill_infeasible, vllm_ctx_lookup, vllm_lookup

__all__ = ["DEFAULT_VERSION", "ENGINE_OF", "FORMATS", "NEWEST_CHECKED", "PROPOSAL_VERSIONS", "Export", "KTable",
           "check_version", "engine_k", "export", "fill_infeasible", "is_launch_flags", "k_ranges", "pad_to_capture",
           "parse_version", "sglang_lookup", "sps_lookup", "trtllm_generation", "trtllm_lookup",
           "vllm_ctx_lookup", "vllm_lookup"]


# --- dispatcher ----------------------------------------------------------------------------------

def export(fmt: str, table: KTable, version: str | None = None, *, method_cfg: dict | None = None,
           cuda_graph_bs=None, sglang_candidates: str = "kstar", planned_batch_size: int | None = None,
           draft_method: str | None = None) -> Export:
    """The engine file for ``fmt`` targeting ``version`` (default: the newest release checked)."""
    version, notes = check_version(fmt, version)
    if fmt == "vllm":
        out = _vllm(table, version, method_cfg)
    elif fmt == "vllm-ctx":
        out = _vllm_ctx(table, version, method_cfg)
        notes = []
    elif fmt == "trtllm":
        out = _trtllm(table, version, planned_batch_size, draft_method)
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
        if is_launch_flags(exp.payload):  # one fixed K at every batch size
            return int(exp.rows[0]["SGLang runs"])
        cand = sglang_lookup(exp.payload, batch_size, cuda_graph_bs)
        return cand[len(cand) // 2]
    raise PlannerError(f"{exp.fmt} is a step-cost table, not a K schedule")
