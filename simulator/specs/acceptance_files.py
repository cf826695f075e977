"""Measured acceptance from the files other tools write, recognised by their content.

=============================  ===================================  ==========================================
file                           rates it holds                       to the planner's conditional a_i
=============================  ===================================  ==========================================
Model-Optimizer                ``conditional_accept_rates`` a_i     as given (cross-checked against
``speculation_profile.json``   ``marginal_accept_rates`` m_i =      cumprod(a) = m and the length histogram);
(schema 1.x)                   P(at least i drafts accepted)        ``max_supported_k`` caps K
``vllm bench serve             ``spec_decode_per_position_          a_i = r_i / r_{i-1}: vLLM's r_i = accepted
--save-result`` JSON           acceptance_rates`` r_i               at position i / drafts is unconditional
vLLM per-request metrics       ``acceptance_histogram`` h_j (steps  a_i = N(accepted >= i) / N(accepted >= i-1)
(``--per-request-spec-decode-  accepting exactly j drafts), or      over the steps that drafted >= i tokens
metrics``)                     ``..._by_draft_length`` {k: h}
Prometheus /metrics scrape     per-position counters / drafts       a_i = r_i / r_{i-1} (unconditional, as bench)
measured-rows CSV              ``per_position_acceptance`` (already  step-weighted mean per position over rows
(``calibration.engine sweep``) conditional)
=============================  ===================================  ==========================================

Acceptance length AL(K) = 1 + a_1 + a_1 a_2 + ... = 1 + m_1 + ... + m_K (the 1 is the bonus token).
Sources: Model-Optimizer PRs #2247 / #2313 (schema, ``marginal[i] = P(len >= i+2)``,
``conditional[i] = P(len >= i+2) / P(len >= i+1)``, length = accepted + 1); vLLM
``vllm/benchmarks/serve.py`` and ``vllm/v1/spec_decode/metrics.py`` (per-position rates / drafts);
vLLM PRs #48915 / #56278 (``acceptance_histogram``: index j = steps accepting exactly j drafts).

Every reader refuses, in one line naming the file: truncated JSON, rates outside [0, 1], rising
unconditional rates, histograms that disagree with their totals or rates, ``max_supported_k`` <= 0,
unknown schema versions.
"""
from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from simulator.errors import PlannerError
from simulator.files import read_input_bytes
from simulator.specs.acceptance import Acceptance
from simulator.specs.acceptance_readers import (read_csv_rows, read_modelopt, read_vllm_bench, read_vllm_requests)
from simulator.specs.prometheus_text import acceptance_from_counters, spec_decode_counters

MAX_BYTES = 64 * 2**20
RATE_CAP = 0.999  # a conditional rate of exactly 1 (every draft at that position accepted) is held here
KINDS = ("speculation_profile.json (NVIDIA Model-Optimizer)", "vllm bench serve --save-result JSON",
         "vLLM per-request spec-decode metrics JSON", "Prometheus /metrics scrape of a vLLM server",
         "measured-rows CSV (calibration.engine sweep, calibration.vllm_io)")


@dataclass(frozen=True)
class AcceptanceFile:
    """Per-position acceptance read from a file, with where it came from and what caps K."""

    path: str
    kind: str
    conditional: tuple[float, ...]           # a_1..a_n, conditional, as the planner uses them
    conversion: str                          # how the file's rates became a_i, in words
    conditions: str = ""                     # what the measurement was run on
    max_supported_k: int | None = None       # no K above this in the grid or any export
    cap_reason: str = ""
    warnings: tuple[str, ...] = field(default_factory=tuple)

    @property
    def source(self) -> str:
        cond = f" ({self.conditions})" if self.conditions else ""
        cap = f"; K capped at {self.max_supported_k} ({self.cap_reason})" if self.max_supported_k else ""
        return f"measured: {self.kind} {self.path}{cond}; {self.conversion}{cap}"

    def acceptance(self) -> Acceptance:
        return Acceptance(self.conditional, self.source)

    def acceptance_length(self, k) -> np.ndarray:
        return self.acceptance().acceptance_length(k)

    def measured_cap(self) -> tuple[int | None, str]:
        """The largest K the file supports and why: its own max_supported_k, else the positions it measured
        (rates measured up to K = n say nothing of position n + 1: a flat extrapolation would plan K > n on
        no evidence; a per-position model beyond n, given as [acceptance] rates, lifts the cap)."""
        cap, reason = self.max_supported_k, self.cap_reason
        n = len(self.conditional)
        if n > 1 and (cap is None or n < cap):
            cap, reason = n, (f"acceptance measured up to K={n}; give per-position rates beyond it"
                              " ([acceptance] rates or --acceptance a1,a2,...) to plan a larger K")
        return cap, reason

    def cap(self, k_max: int, fixed_k: int) -> tuple[int, int, list[str]]:
        """(k_max, fixed_k) under max_supported_k (the grid, K* and every export), and the file's
        caveats plus one line per value lowered."""
        notes = list(self.warnings)
        cap, reason = self.measured_cap()
        if cap is not None and k_max > cap:
            notes.append(f"K capped at {cap} by {self.path} ({reason}); k_max was {k_max}")
            k_max = cap
        if cap is not None and fixed_k > cap:
            notes.append(f"fixed K lowered from {fixed_k} to {cap}: {self.path} supports K <= {cap}")
            fixed_k = cap
        return k_max, fixed_k, notes


def _decode(data: bytes, where: str) -> str:
    if len(data) > MAX_BYTES:
        raise PlannerError(f"{where}: {len(data) / 2**20:.0f} MB is too large for an acceptance file"
                           f" (at most {MAX_BYTES // 2**20} MB)")
    if b"\x00" in data[:65536]:
        raise PlannerError(f"{where}: a binary file, not an acceptance file ({_expected()})")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise PlannerError(f"{where}: not UTF-8 text (byte {err.start}); not an acceptance file"
                           f" ({_expected()})") from None


def _expected() -> str:
    return "expected one of: " + "; ".join(KINDS)


def _json_docs(text: str, where: str) -> list:
    """One JSON document, or JSON lines (one object per line)."""
    try:
        return [json.loads(text)]
    except RecursionError:
        raise PlannerError(f"{where}: JSON nested too deeply") from None
    except ValueError as err:  # a JSONDecodeError, or an integer of over 4300 digits
        first = err
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if len(lines) > 1:
        try:
            return [json.loads(ln) for ln in lines]
        except (ValueError, RecursionError):
            pass
    why = (f"{first.msg} at line {first.lineno} column {first.colno}" if isinstance(first, json.JSONDecodeError)
           else "a number too long to read")
    raise PlannerError(f"{where}: truncated or malformed JSON ({why}); re-export the file") from None


def parse_acceptance_bytes(data: bytes, name: str) -> AcceptanceFile:
    """An acceptance file's bytes (a path's contents or a dashboard upload) -> AcceptanceFile."""
    text = _decode(bytes(data), name)
    head = text.lstrip()[:1]
    if head in ("{", "["):
        return _from_json(_json_docs(text, name), name)
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if not lines:
        raise PlannerError(f"{name}: empty file ({_expected()})")
    if any(ln.startswith(("vllm:", "# TYPE", "# HELP")) for ln in lines[:2000]):
        return _from_metrics(text, name)
    if "per_position_acceptance" in [c.strip().strip('"') for c in lines[0].split(",")]:  # 'a, "b"' too
        return _finish(name, RatesRead(**read_csv_rows(text, name)))
    raise PlannerError(f"{name}: not an acceptance file this planner reads ({_expected()})")


def is_acceptance_path(value) -> bool:
    """True when an --acceptance value names a file rather than rates: a Path, or text that is not a
    comma list of numbers (0.8, 0.7,0.5,0.3)."""
    if isinstance(value, Path):
        return True
    if not isinstance(value, str):
        return False
    try:
        [float(x) for x in value.split(",") if x.strip()]
    except ValueError:
        return True
    return False


def read_acceptance_file(path: str | Path, flag: str = "--acceptance") -> AcceptanceFile:
    p = Path(path)
    if not os.path.lexists(p):
        raise PlannerError(f"{flag} {p}: no such file; expected a rate like 0.8, per-position rates like"
                           f" 0.7,0.5,0.3, or an acceptance file ({_expected()})")
    data = read_input_bytes(p, "acceptance", MAX_BYTES, flag=flag)  # a regular file, at most MAX_BYTES
    return parse_acceptance_bytes(data, str(p))


def _from_json(docs: list, where: str) -> AcceptanceFile:
    if len(docs) == 1 and isinstance(docs[0], list):
        docs = docs[0]
    if not docs or not all(isinstance(d, dict) for d in docs):
        raise PlannerError(f"{where}: expected a JSON object (or a list of response objects); {_expected()}")
    first = docs[0]
    if len(docs) == 1 and any(k in first for k in ("conditional_accept_rates", "marginal_accept_rates",
                                                    "max_supported_k", "schema_version")):
        return _finish(where, RatesRead(**read_modelopt(first, where)))
    if len(docs) == 1 and ("spec_decode_per_position_acceptance_rates" in first or "median_itl_ms" in first):
        return _finish(where, RatesRead(**read_vllm_bench(first, where)))
    if any(_request_metrics(d) is not None for d in docs):
        found = [_request_metrics(d) for d in docs]
        if any(m is None for m in found):
            raise PlannerError(f"{where}: response {found.index(None) + 1} of {len(found)} has no speculative_decoding"
                               " metrics (was the server started with --per-request-spec-decode-metrics?)")
        return _finish(where, RatesRead(**read_vllm_requests(found, where)))
    raise PlannerError(f"{where}: a JSON file without acceptance fields this planner knows ({_expected()})")


def _request_metrics(doc: dict) -> dict | None:
    """The ``speculative_decoding`` object of a vLLM response (or the object itself)."""
    for cand in (doc.get("metrics", {}).get("speculative_decoding") if isinstance(doc.get("metrics"), dict) else None,
                 doc.get("speculative_decoding"), doc):
        if isinstance(cand, dict) and ("acceptance_histogram" in cand or "acceptance_histogram_by_draft_length" in cand):
            return cand
    return None


def _from_metrics(text: str, where: str) -> AcceptanceFile:
    c = spec_decode_counters(text, where)
    acc = acceptance_from_counters(c, where)
    r = acc["per_position_unconditional"]
    if not r:
        raise PlannerError(f"{where}: no vllm:spec_decode_num_accepted_tokens_per_pos_total samples: per-position"
                           " acceptance cannot be read (vLLM >= 0.8.5 writes them)")
    models = ", ".join(sorted(m for m in c["models"] if m)) or "model not labelled"
    conditions = (f"{models}; {c['num_drafts']:.0f} drafts of K={acc['k']} over {len(c['engines'])} engine(s);"
                  f" acceptance length {acc['acceptance_length']:.4g}; counters since server start")
    return _finish(where, RatesRead(kind="Prometheus /metrics scrape", conditional=acc["per_position_acceptance"],
                                    conversion="vLLM per-position rates r_i = accepted at i / drafts are"
                                    " unconditional: a_i = r_i / r_{i-1}", conditions=conditions, measured_k=acc["k"]))


@dataclass(frozen=True)
class RatesRead:
    """What a reader found in a file (:mod:`simulator.specs.acceptance_readers` returns these fields)."""

    kind: str
    conditional: list  # a_1, a_2, ...; None from the first position no step reached
    conversion: str
    conditions: str = ""
    max_supported_k: int | None = None
    cap_reason: str = ""
    measured_k: int | None = None  # the K the measurement ran (positions beyond the rates: never reached)
    warnings: list[str] | None = None


def _finish(where: str, read: RatesRead) -> AcceptanceFile:
    """Conditional rates up to the first position nobody reached; a rate of 1 held at RATE_CAP."""
    rates: list[float] = []
    held = False
    for i, a in enumerate(read.conditional):
        if a is None:
            break
        if not (isinstance(a, (int, float)) and not isinstance(a, bool) and math.isfinite(a) and -1e-9 <= a <= 1 + 1e-6):
            raise PlannerError(f"{where}: conditional acceptance rate {a!r} at position {i + 1} is outside [0, 1]")
        held |= a > RATE_CAP
        rates.append(min(max(float(a), 0.0), RATE_CAP))
    if not rates:
        raise PlannerError(f"{where}: no per-position acceptance rates (no draft position was reached)")
    notes = list(read.warnings or [])
    conversion = read.conversion
    if held:
        conversion += f"; rates of 1 held at {RATE_CAP}"
    if read.measured_k and len(rates) < read.measured_k:
        conversion += f"; positions {len(rates) + 1}-{read.measured_k} never reached"
    return AcceptanceFile(path=where, kind=read.kind, conditional=tuple(rates), conversion=conversion,
                          conditions=read.conditions, max_supported_k=read.max_supported_k, cap_reason=read.cap_reason,
                          warnings=tuple(notes))
