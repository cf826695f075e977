"""Readers for vLLM measurements into the engine-run row schema (calibration.engine.sweep.COLUMNS).

(a) the JSON written by `vllm bench serve --save-result` (vllm/benchmarks/serve.py): ITL stats in
    ms (`median_itl_ms`, `mean_itl_ms`, `p99_itl_ms`, ...), `max_concurrency`, `output_throughput`,
    `model_id`, and, when the server runs speculative decoding, `spec_decode_acceptance_rate` (percent),
    `spec_decode_acceptance_length` (1 + accepted / drafts), `spec_decode_num_drafts`,
    `spec_decode_draft_tokens`, `spec_decode_accepted_tokens`,
    `spec_decode_per_position_acceptance_rates` (accepted at position i / drafts: unconditional).
(b) Prometheus text from the server's /metrics: counters
    vllm:spec_decode_num_drafts_total, vllm:spec_decode_num_draft_tokens_total,
    vllm:spec_decode_num_accepted_tokens_total, vllm:spec_decode_num_accepted_tokens_per_pos_total{position="i"}
    summed over label sets (engines, models).

Conventions: per_position_acceptance in our rows is conditional (a_i = P(accept i | accepted 1..i-1)),
so AL = 1 + a_1 + a_1 a_2 + ...; vLLM's per-position rates r_i are unconditional, a_i = r_i / r_{i-1}.
vLLM ITL is the time between streamed chunks, i.e. per engine step (a step commits AL tokens).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from simulator.errors import PlannerError
from simulator.files import json_failure_reason, read_input_text
from simulator.specs import prometheus_text

SOURCE_BENCH = "vllm-bench-serve"
SOURCE_METRICS = "vllm-metrics"


class VllmFormatError(PlannerError):
    """A vLLM output file is missing something we need or is not in the expected format."""


# ------------------------------------------------------------------------------------------------
# Prometheus text format: prometheus_client's parser (simulator/specs/prometheus_text.py)
# ------------------------------------------------------------------------------------------------

def parse_prometheus(text: str, where: str = "<metrics>") -> list[tuple[str, dict[str, str], float]]:
    """Samples (name, labels, value) of a Prometheus text exposition; comments and blank lines skipped.
    A label value with an escape other than \\\\, \\" or \\n is refused."""
    return prometheus_text.parse_prometheus(text, where, error=VllmFormatError)


def spec_decode_counters(text: str, where: str = "metrics.txt", model_name: str | None = None) -> dict:
    """Sum the spec-decode counters over label sets (engines). Returns
    {num_drafts, num_draft_tokens, num_accepted_tokens, accepted_per_pos: {pos: n}, models, engines}."""
    return prometheus_text.spec_decode_counters(text, where, model_name, error=VllmFormatError)


def diff_counters(after: dict, before: dict | None) -> dict:
    """Counters accumulated between two scrapes (vLLM's counters are cumulative since server start)."""
    if before is None:
        return after
    out = {k: after[k] - before[k] for k in ("num_drafts", "num_draft_tokens", "num_accepted_tokens")}
    out["accepted_per_pos"] = {p: v - before["accepted_per_pos"].get(p, 0.0) for p, v in after["accepted_per_pos"].items()}
    return out


def acceptance_from_counters(c: dict, where: str = "metrics.txt") -> dict:
    """-> acceptance_length, acceptance_rate (accepted / draft tokens, fraction), k (draft tokens per
    draft), per_position_unconditional [r_i], per_position_acceptance [a_i conditional]."""
    return prometheus_text.acceptance_from_counters(c, where, error=VllmFormatError)


def _check_unconditional(r: list[float], where: str) -> None:
    prometheus_text.check_unconditional(r, where, error=VllmFormatError)


conditional_rates = prometheus_text.conditional_rates


def read_metrics(path, before=None, model_name: str | None = None) -> dict:
    """Acceptance summary from a /metrics scrape file (optionally minus an earlier scrape `before`)."""
    path = Path(path)
    text = _read_text(path)
    after = spec_decode_counters(text, path.name, model_name)
    if before is not None:
        bpath = Path(before)
        after = diff_counters(after, spec_decode_counters(_read_text(bpath), bpath.name, model_name))
    return acceptance_from_counters(after, path.name)


# ------------------------------------------------------------------------------------------------
# vllm bench serve --save-result JSON
# ------------------------------------------------------------------------------------------------
_HINT = "was it written by `vllm bench serve --save-result`?"


def _read_text(path: Path) -> str:
    """A regular text file under its cap (simulator.files.read_input_text: a FIFO or a device is refused)."""
    try:
        return read_input_text(path, "vLLM output", not_found="cannot read: no such file")
    except PlannerError as err:
        text = str(err).removeprefix(f"{path}: ")
        raise VllmFormatError(f"{path.name}: {'not a text file' if 'not UTF-8' in text else text}") from None


def bench_acceptance(data: dict, where: str = "bench.json") -> list[float | None]:
    """Conditional per-position rates from a `vllm bench serve --save-result` object."""
    r = data.get("spec_decode_per_position_acceptance_rates") if isinstance(data, dict) else None
    if r is None:
        raise VllmFormatError(f"{where}: no 'spec_decode_per_position_acceptance_rates' field; was the server"
                              " running speculative decoding (and vLLM new enough to record it)?")
    if not isinstance(r, list) or not r or not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in r):
        raise VllmFormatError(f"{where}: 'spec_decode_per_position_acceptance_rates' must be a non-empty list of numbers")
    _check_unconditional([float(x) for x in r], where)
    return conditional_rates(r)


def read_bench_json(path) -> dict:
    path = Path(path)
    text = _read_text(path)  # its own one-line errors (a VllmFormatError is a ValueError too)
    try:
        data = json.loads(text)
    except RecursionError:
        raise VllmFormatError(f"{path.name}: JSON nested too deeply — {_HINT}") from None
    except ValueError as e:  # a JSONDecodeError, or an integer of over 4300 digits
        raise VllmFormatError(f"{path.name}: not JSON ({json_failure_reason(e)}) — {_HINT}") from None
    if not isinstance(data, dict):
        raise VllmFormatError(f"{path.name}: top level is not an object — {_HINT}")
    for f in ("median_itl_ms", "output_throughput", "completed"):
        if f not in data:
            raise VllmFormatError(f"{path.name}: missing '{f}' — {_HINT}")
    for f in _BENCH_NUMBERS:
        v = data.get(f)
        if v is not None and (not isinstance(v, (int, float)) or isinstance(v, bool) or not v >= 0
                              or v == float("inf")):
            raise VllmFormatError(f"{path.name}: '{f}' must be a finite number >= 0, got {v!r} — {_HINT}")
    return data


# numeric fields of a bench JSON this reader uses
_BENCH_NUMBERS = ("median_itl_ms", "p90_itl_ms", "output_throughput", "completed", "max_concurrency",
                  "total_input_tokens", "total_output_tokens", "spec_decode_acceptance_length",
                  "spec_decode_num_drafts", "spec_decode_draft_tokens", "spec_decode_accepted_tokens")


@dataclass(frozen=True)
class BenchRun:
    """What the caller knows of a bench run that its JSON may not say: draft tokens per step (from
    the counters if None; 0 when spec decoding is off), the draft's name, the batch size
    (``max_concurrency`` from the JSON if None), device and dtype labels, the context length (from the
    JSON's token counts if None) and the code version."""

    k: int | None = None
    draft: str = ""
    batch_size: int | None = None
    device: str = ""
    dtype: str = ""
    context_len: float | None = None
    code_version: str = "unknown"


def bench_to_row(path, run: BenchRun = BenchRun(), metrics_after=None, metrics_before=None) -> dict:
    """One row in the engine-run schema from a bench JSON (and optionally /metrics scrapes, used when
    the JSON lacks spec_decode_* fields, e.g. older vLLM)."""
    path = Path(path)
    d = read_bench_json(path)
    B = run.batch_size if run.batch_size is not None else d.get("max_concurrency")
    if B is None:
        raise VllmFormatError(f"{path.name}: missing 'max_concurrency' (run with --max-concurrency B, or pass batch_size)")
    spec = _bench_spec(d, path, run.k, metrics_after, metrics_before)
    kk = run.k if run.k is not None else (spec["k"] if spec else 0)
    al = spec["acceptance_length"] if spec and kk > 0 else 1.0
    ppa = spec["per_position_acceptance"][:kk] if spec and kk > 0 else []
    itl = float(d["median_itl_ms"])
    if not itl > 0:
        raise VllmFormatError(f"{path.name}: 'median_itl_ms' is {itl!r} (no streamed tokens?)")
    p90 = d.get("p90_itl_ms")  # present with --metric-percentiles including 90
    gp = al / (itl / 1e3)
    ctx = run.context_len
    if ctx is None and d.get("total_input_tokens") and d.get("completed"):
        ctx = d["total_input_tokens"] / d["completed"] + 0.5 * d.get("total_output_tokens", 0) / d["completed"]
    return {
        "source": SOURCE_BENCH, "target": d.get("model_id", ""), "draft": run.draft, "device": run.device,
        "dtype": run.dtype,
        "batch_size": int(B), "k": int(kk), "context_len": round(ctx, 2) if ctx is not None else None,
        "n_steps": int(d["spec_decode_num_drafts"]) if "spec_decode_num_drafts" in d else None,
        "draft_ms": None, "verify_ms": None, "overhead_ms": None,
        "itl_ms": itl, "itl_ms_p90": float(p90) if p90 is not None else None,
        "acceptance_length": round(al, 6), "per_position_acceptance": json.dumps(ppa),
        "goodput_per_seq": round(gp, 4), "throughput": round(float(d["output_throughput"]), 4),
        "experts_touched": None, "torch_version": "", "date": _iso_date(d.get("date")),
        "code_version": run.code_version,
        "router_reuse": None,  # a synthetic-router setting of the reference engine; not a vLLM quantity
        "itl_ms_rounds": None,  # one benchmark run: no interleaved rounds
    }


def _bench_spec(d: dict, path: Path, k: int | None, metrics_after, metrics_before) -> dict | None:
    """Acceptance length, K and conditional per-position acceptance of a bench run: from its
    spec_decode_* fields, else from the /metrics scrapes; None for plain decoding."""
    spec = None
    if "spec_decode_acceptance_length" in d:
        for f in ("spec_decode_num_drafts", "spec_decode_draft_tokens", "spec_decode_accepted_tokens"):
            if f not in d:
                raise VllmFormatError(f"{path.name}: has spec_decode_acceptance_length but is missing '{f}' — {_HINT}")
        nd = d["spec_decode_num_drafts"]
        r = list(bench_acceptance(d, path.name) and d["spec_decode_per_position_acceptance_rates"]) \
            if d.get("spec_decode_per_position_acceptance_rates") else []
        spec = {
            "acceptance_length": float(d["spec_decode_acceptance_length"]),
            "k": int(round(d["spec_decode_draft_tokens"] / nd)) if nd else (k or 0),
            "per_position_acceptance": conditional_rates(r),
        }
    elif metrics_after is not None:
        spec = read_metrics(metrics_after, before=metrics_before)
    if spec is None and k:
        raise VllmFormatError(f"{path.name}: no spec_decode_* fields for K={k} and no /metrics scrape given — "
                              "was speculative decoding enabled (and is vLLM new enough to record it)?")
    return spec


def _iso_date(s) -> str:
    """vLLM writes date as %Y%m%d-%H%M%S."""
    if not s:
        return ""
    m = re.fullmatch(r"(\d{4})(\d{2})(\d{2})-(\d{2})(\d{2})(\d{2})", str(s))
    return f"{m[1]}-{m[2]}-{m[3]}T{m[4]}:{m[5]}:{m[6]}" if m else str(s)


def metrics_to_row(path, *, before=None, target: str = "", draft: str = "", batch_size: int = 1,
                   itl_ms: float | None = None, model_name: str | None = None, **extra) -> dict:
    """A row with acceptance only (ITL empty unless given) from a /metrics scrape."""
    a = read_metrics(path, before=before, model_name=model_name)
    k = a["k"]
    row = {c: None for c in _columns()}
    row.update(source=SOURCE_METRICS, target=target, draft=draft, batch_size=batch_size, k=k,
               acceptance_length=round(a["acceptance_length"], 6),
               per_position_acceptance=json.dumps(a["per_position_acceptance"][:k]), itl_ms=itl_ms)
    if itl_ms:
        row["goodput_per_seq"] = round(a["acceptance_length"] / (itl_ms / 1e3), 4)
        row["throughput"] = round(row["goodput_per_seq"] * batch_size, 4)
    row.update(extra)
    return row


def _columns():
    return list(ROW_COLUMNS)


# the engine-run row schema (same list as calibration.engine.sweep.COLUMNS; a test keeps them equal)
ROW_COLUMNS = (
    "source", "target", "draft", "device", "dtype", "batch_size", "k", "context_len", "n_steps",
    "draft_ms", "verify_ms", "overhead_ms", "itl_ms", "itl_ms_p90", "acceptance_length",
    "per_position_acceptance", "goodput_per_seq", "throughput", "experts_touched",
    "torch_version", "date", "code_version", "router_reuse", "itl_ms_rounds",
)
