"""vLLM's speculative-decoding counters from a Prometheus text exposition (a /metrics scrape).

Parsing is ``prometheus_client.parser.text_string_to_metric_families`` (the Prometheus project's own
reader of the text format). It keeps an invalid label escape such as ``\\z`` as written; the text
format allows only ``\\\\``, ``\\"`` and ``\\n`` inside a label value ("label_value can be any
sequence of UTF-8 characters, but the backslash, double-quote and line feed characters have to be
escaped as \\\\, \\" and \\n": prometheus.io/docs/instrumenting/exposition_formats, "Text format
details"), so such a line is refused here rather than read as something else.

Counters (vllm/v1/spec_decode/metrics.py): ``vllm:spec_decode_num_drafts_total``,
``..._num_draft_tokens_total``, ``..._num_accepted_tokens_total`` and
``..._num_accepted_tokens_per_pos_total{position="i"}``, summed over label sets (engines, models).
vLLM's per-position rate r_i = accepted at position i / drafts is UNCONDITIONAL (the probability
that positions 1..i were all accepted); the planner's a_i is conditional, a_i = r_i / r_{i-1}.
"""
from __future__ import annotations

import math
import re

from simulator.errors import PlannerError

# a quoted label value and the escapes inside it (only \\, \" and \n are escapes in the text format)
_QUOTED = re.compile(r'"((?:[^"\\]|\\.)*)"')
_ESCAPE = re.compile(r"\\(.)")
_COUNTERS = ("num_drafts", "num_draft_tokens", "num_accepted_tokens")


def _families(text: str):
    from prometheus_client.parser import text_string_to_metric_families
    return list(text_string_to_metric_families(text))


def _check_escapes(line: str, where: str, lineno: int, error) -> None:
    body = line[line.find("{"): line.rfind("}") + 1] if "{" in line else ""
    for value in _QUOTED.findall(body):
        for esc in _ESCAPE.findall(value):
            if esc not in ('\\', '"', "n"):
                raise error(f"{where}:{lineno}: label value {value[:40]!r} has the escape '\\{esc}'; the Prometheus"
                            " text format allows only \\\\, \\\" and \\n (is this a genuine /metrics scrape?)")


def parse_prometheus(text: str, where: str = "<metrics>", error=PlannerError) -> list[tuple[str, dict, float]]:
    """Samples (name, labels, value) of a Prometheus text exposition, in file order."""
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if line and not line.startswith("#"):
            _check_escapes(line, where, lineno, error)
    try:
        families = _families(text)
    except (ValueError, TypeError, IndexError, KeyError):
        lineno, line = _first_bad_line(text)
        raise error(f"{where}:{lineno}: not a Prometheus sample line (a bad metric name, label set or value):"
                    f" {line[:80]!r}") from None
    return [(s.name, dict(s.labels), float(s.value)) for fam in families for s in fam.samples]


def _first_bad_line(text: str) -> tuple[int, str]:
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        try:
            _families(line + "\n")
        except (ValueError, TypeError, IndexError, KeyError):
            return lineno, line
    return 1, text.strip().splitlines()[0] if text.strip() else ""


def spec_decode_counters(text: str, where: str = "metrics.txt", model_name: str | None = None,
                         error=PlannerError) -> dict:
    """The spec-decode counters summed over label sets (engines):
    {num_drafts, num_draft_tokens, num_accepted_tokens, accepted_per_pos: {pos: n}, label_sets: {...}}."""
    c = {"num_drafts": 0.0, "num_draft_tokens": 0.0, "num_accepted_tokens": 0.0, "accepted_per_pos": {},
         "models": set(), "engines": set()}
    seen = set()
    for name, labels, value in parse_prometheus(text, where, error):
        if not name.startswith("vllm:spec_decode_") or not name.endswith("_total"):
            continue  # _created samples, gauges, other metrics
        if model_name is not None and labels.get("model_name", model_name) != model_name:
            continue
        key = name[len("vllm:spec_decode_"):-len("_total")]
        if key not in _COUNTERS + ("num_accepted_tokens_per_pos",):
            continue
        if not (value >= 0 and value != math.inf):
            raise error(f"{where}: counter {name} is {value!r}; counters are finite and >= 0"
                        " (is this a complete /metrics scrape?)")
        if key == "num_accepted_tokens_per_pos":
            pos = labels.get("position")
            if pos is None:
                raise error(f"{where}: {name} sample without a position label")
            if not re.fullmatch(r"\d{1,4}", pos.strip()):
                raise error(f"{where}: {name} has position label {pos!r}; expected a draft position 0, 1, 2, ...")
            p = int(pos)
            c["accepted_per_pos"][p] = c["accepted_per_pos"].get(p, 0.0) + value
        else:
            c[key] += value
        c["models"].add(labels.get("model_name", ""))
        c["engines"].add(labels.get("engine", ""))
        seen.add(key)
    if not seen:
        raise error(f"{where}: no spec-decode counters (vllm:spec_decode_*) — was speculative decoding enabled?")
    for key in _COUNTERS:
        if key not in seen:
            raise error(f"{where}: missing counter 'vllm:spec_decode_{key}_total'")
    return c


def check_unconditional(r: list[float], where: str, error=PlannerError, tol: float = 1e-6,
                        what: str = "acceptance rate") -> None:
    """Unconditional rates r_i = P(positions 1..i accepted) (positions counted from 1 in messages):
    finite, in [0, 1] and non-increasing.
    A rate above 1 (or a rising one) is a broken record: refused, never clipped."""
    for i, x in enumerate(r):
        if not (isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)):
            raise error(f"{where}: {what} at position {i + 1} is {x!r}, not a finite number")
        if not 0 <= x <= 1 + tol:
            raise error(f"{where}: {what} at position {i + 1} is {x:.6g}, outside [0, 1]; the file is not a"
                        " consistent record")
        if i and x > r[i - 1] + tol:
            raise error(f"{where}: {what} rises from {r[i - 1]:.6g} at position {i} to {x:.6g} at {i + 1};"
                        " the probability that positions 1..i were all accepted cannot rise with i")


def conditional_rates(r: list[float]) -> list[float | None]:
    """Unconditional r_i = P(positions 1..i accepted) -> conditional a_i = r_i / r_{i-1} (r_0 = 1);
    None where r_{i-1} = 0 (nobody reached position i)."""
    out, prev = [], 1.0
    for x in r:
        out.append(round(x / prev, 6) if prev > 0 else None)
        prev = x
    return out


def acceptance_from_counters(c: dict, where: str = "metrics.txt", error=PlannerError) -> dict:
    """-> acceptance_length, acceptance_rate (accepted / draft tokens), k (draft tokens per draft),
    per_position_unconditional [r_i], per_position_acceptance [a_i conditional]."""
    nd = c["num_drafts"]
    if nd <= 0:
        raise error(f"{where}: vllm:spec_decode_num_drafts_total is 0 — no speculative steps were run")
    if c["num_accepted_tokens"] > c["num_draft_tokens"] or c["num_draft_tokens"] < nd:
        raise error(f"{where}: counters disagree (accepted {c['num_accepted_tokens']:g} > draft tokens"
                    f" {c['num_draft_tokens']:g}, or fewer draft tokens than drafts {nd:g}); are both"
                    " scrapes from the same server, the later one given as 'after'?")
    r = [c["accepted_per_pos"][p] / nd for p in sorted(c["accepted_per_pos"])]
    check_unconditional(r, where, error)
    return {
        "acceptance_length": 1.0 + c["num_accepted_tokens"] / nd,
        "acceptance_rate": c["num_accepted_tokens"] / c["num_draft_tokens"] if c["num_draft_tokens"] else float("nan"),
        "k": int(round(c["num_draft_tokens"] / nd)),
        "per_position_unconditional": r,
        "per_position_acceptance": conditional_rates(r),
    }
