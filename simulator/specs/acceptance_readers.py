"""One reader per acceptance-file format (see :mod:`simulator.specs.acceptance_files` for the table).

Each returns the fields of ``acceptance_files.RatesRead`` as a dict: kind, conditional rates (None
where no step reached a position), the conversion in words, measurement conditions, and the K cap.
Nothing is clipped: a rate outside [0, 1], a rising unconditional rate or a histogram that
disagrees with the file's own totals is refused with the file's name and the fix.
"""
from __future__ import annotations

import csv
import io
import json
import math

import numpy as np

from simulator.errors import PlannerError
from simulator.specs.prometheus_text import check_unconditional, conditional_rates

MODELOPT_SCHEMA_MAJOR = "1"   # Model-Optimizer PR #2247 writes schema_version "1.0"
RATE_TOL = 2e-3               # the files round rates to 4-6 digits; their own identities hold to that
MEAN_TOL = 0.02               # mean acceptance length vs 1 + sum of marginals (Model-Optimizer's check)


def _num(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _rates(value, where: str, field: str) -> list[float]:
    if not isinstance(value, list) or not value:
        raise PlannerError(f"{where}: '{field}' must be a non-empty list of rates in [0, 1], got {str(value)[:40]!r}")
    for i, x in enumerate(value):
        if not _num(x):
            raise PlannerError(f"{where}: '{field}' position {i + 1} is {x!r}, not a finite number")
        if not -1e-9 <= x <= 1 + 1e-6:
            raise PlannerError(f"{where}: '{field}' position {i + 1} is {x:g}, outside [0, 1]")
    return [float(x) for x in value]


def _count_int(x, where: str, what: str) -> int:
    if not (_num(x) and x >= 0 and float(x).is_integer()):
        raise PlannerError(f"{where}: {what} is {x!r}; expected a count (an integer >= 0)")
    return int(x)


# --- Model-Optimizer speculation_profile.json -----------------------------------------------------

def _schema(d: dict, where: str) -> str:
    ver = d.get("schema_version")
    if ver is None:
        raise PlannerError(f"{where}: no schema_version: not a Model-Optimizer speculation_profile.json")
    if isinstance(ver, bool) or not isinstance(ver, (str, int, float)) or \
            str(ver).strip().split(".")[0] != MODELOPT_SCHEMA_MAJOR:
        raise PlannerError(f"{where}: speculation_profile schema_version {ver!r} is unknown (this planner reads"
                           f" {MODELOPT_SCHEMA_MAJOR}.x); convert it or give the rates with --acceptance 0.8,0.6")
    return str(ver)


def _positive_int(d: dict, key: str, where: str, required: bool) -> int | None:
    v = d.get(key)
    if v is None and not required:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise PlannerError(f"{where}: {key} must be an integer >= 1, got {v!r}")
    return v


def _length_histogram(hist, k: int, where: str) -> np.ndarray:
    """{length: steps} (length = accepted drafts + 1) -> fractions of steps by accepted 0..k."""
    if not isinstance(hist, dict) or not hist:
        raise PlannerError(f"{where}: acceptance_length_histogram must be an object {{length: steps}}, got"
                           f" {str(hist)[:40]!r}")
    out = np.zeros(k + 1)
    for key, v in hist.items():
        try:
            length = int(str(key))
        except ValueError:
            raise PlannerError(f"{where}: acceptance_length_histogram key {key!r} is not a length 1, 2, ...") from None
        if not 1 <= length <= k + 1:
            raise PlannerError(f"{where}: acceptance_length_histogram has length {length}, outside 1..{k + 1}"
                               f" (num_speculative_tokens {k} + the bonus token); the profile's K is understated")
        if not (_num(v) and v >= 0):
            raise PlannerError(f"{where}: acceptance_length_histogram[{key}] is {v!r}; expected steps >= 0")
        out[length - 1] += float(v)
    total = out.sum()
    if total <= 0:
        raise PlannerError(f"{where}: acceptance_length_histogram is empty (no steps)")
    fractions = all(float(v) <= 1 for v in hist.values()) and not all(float(v).is_integer() for v in hist.values())
    if fractions and abs(total - 1) > 1e-3:
        raise PlannerError(f"{where}: acceptance_length_histogram fractions sum to {total:.4g}, not 1")
    return out / total


def read_modelopt(d: dict, where: str) -> dict:
    ver = _schema(d, where)
    if d.get("measured") is False:
        raise PlannerError(f"{where}: a stub profile (measured: false) holds no measurement; measure the draft"
                           " (Model-Optimizer specdec_bench) or give rates with --acceptance")
    k = _positive_int(d, "num_speculative_tokens", where, required=True)
    cond, marg = d.get("conditional_accept_rates"), d.get("marginal_accept_rates")
    if cond is None and marg is None:
        why = d.get("vectors_unavailable_reason") or "both vectors are null"
        raise PlannerError(f"{where}: no conditional_accept_rates or marginal_accept_rates ({str(why)[:80]}): a"
                           " block-verified draft has no per-position rates; give its acceptance with --acceptance")
    cond = _rates(cond, where, "conditional_accept_rates") if cond is not None else None
    if marg is not None:
        marg = _rates(marg, where, "marginal_accept_rates")
        check_unconditional(marg, where, what="marginal_accept_rates (P(at least i drafts accepted))")
    for name, vec in (("conditional_accept_rates", cond), ("marginal_accept_rates", marg)):
        if vec is not None and len(vec) > k:
            raise PlannerError(f"{where}: {name} holds {len(vec)} rates but num_speculative_tokens is {k}")
    implied = list(np.cumprod(cond)) if cond is not None else None
    if cond is not None and marg is not None:
        bad = [i for i in range(min(len(cond), len(marg))) if abs(implied[i] - marg[i]) > RATE_TOL]
        if bad or len(cond) != len(marg):
            i = bad[0] if bad else min(len(cond), len(marg))
            raise PlannerError(f"{where}: conditional_accept_rates and marginal_accept_rates disagree at position"
                               f" {i + 1} (cumulative product of the conditional rates"
                               f" {implied[i] if i < len(implied) else 'missing'} vs marginal"
                               f" {marg[i] if i < len(marg) else 'missing'}); marginal[i] = a_1 ... a_(i+1)")
    marg = marg if marg is not None else implied
    notes = []
    if d.get("acceptance_length_histogram") is not None:
        frac = _length_histogram(d["acceptance_length_histogram"], k, where)
        survival = [float(frac[i + 1:].sum()) for i in range(k)]  # P(at least i+1 drafts accepted)
        for i, m in enumerate(marg):
            if abs(survival[i] - m) > RATE_TOL:
                raise PlannerError(f"{where}: acceptance_length_histogram gives P(at least {i + 1} accepted) ="
                                   f" {survival[i]:.4g} but marginal_accept_rates[{i}] = {m:.4g}; the histogram and"
                                   " the rates do not describe the same run")
    mean = d.get("mean_accept_length")
    if _num(mean) and mean > 0 and abs(mean - (1 + sum(marg))) > MEAN_TOL * mean:
        notes.append(f"{where}: mean_accept_length {mean:g} but 1 + sum(marginal_accept_rates) ="
                     f" {1 + sum(marg):.4g}: the vectors may be cut short of the run's draft length (Model-Optimizer's"
                     " mean_consistency check); the rates are used as given")
    cap = _positive_int(d, "max_supported_k", where, required=False)
    reason = "max_supported_k of the profile"
    if cap is None and d.get("accept_length_model") == "measured_per_k":
        cap, reason = k, "accept_length_model measured_per_k: the rates hold at the measured K only"
    return {"kind": f"speculation_profile.json (Model-Optimizer schema {ver})",
            "conditional": cond if cond is not None else conditional_rates(marg),
            "conversion": ("conditional_accept_rates used as given (checked against marginal_accept_rates)"
                           if cond is not None else "conditional a_i = marginal_i / marginal_(i-1)"),
            "conditions": _modelopt_conditions(d, k), "max_supported_k": cap, "cap_reason": reason,
            "measured_k": k, "warnings": notes}


def _modelopt_conditions(d: dict, k: int) -> str:
    parts = [f"method {d['method']}" if d.get("method") else "method not stated", f"measured at K={k}"]
    for key in ("producer", "draft_checkpoint", "target_checkpoint", "checkpoint"):
        if isinstance(d.get(key), str) and d[key]:
            parts.append(f"{key} {d[key]}")
    mc = d.get("measurement_conditions")
    if isinstance(mc, dict):
        parts += [f"{a} {b}" for a, b in mc.items() if isinstance(b, (str, int, float)) and not isinstance(b, bool)]
    if _num(d.get("mean_accept_length")):
        parts.append(f"mean accept length {d['mean_accept_length']:g}")
    return ", ".join(parts)


# --- vllm bench serve --save-result ---------------------------------------------------------------

def read_vllm_bench(d: dict, where: str) -> dict:
    r = d.get("spec_decode_per_position_acceptance_rates")
    if r is None:
        raise PlannerError(f"{where}: no 'spec_decode_per_position_acceptance_rates' field; was the server running"
                           " speculative decoding (and vLLM new enough to record it)?")
    if not isinstance(r, list) or not r or not all(_num(x) for x in r):
        raise PlannerError(f"{where}: 'spec_decode_per_position_acceptance_rates' must be a non-empty list of numbers")
    r = [float(x) for x in r]
    check_unconditional(r, where)
    al = d.get("spec_decode_acceptance_length")
    if _num(al) and abs(1 + sum(r) - al) > 0.01 * al + 1e-3:
        raise PlannerError(f"{where}: the per-position rates give acceptance length {1 + sum(r):.4g} but"
                           f" spec_decode_acceptance_length is {al:g}; the file is not one consistent run")
    parts = [str(d.get("model_id") or "model not stated")]
    for key, label in (("max_concurrency", "max concurrency"), ("num_prompts", "prompts"),
                       ("dataset_name", "dataset"), ("date", "date")):
        if d.get(key) not in (None, ""):
            parts.append(f"{label} {d[key]}")
    parts.append(f"K={len(r)}")
    return {"kind": "vllm bench serve JSON", "conditional": conditional_rates(r),
            "conversion": "vLLM per-position rates r_i = accepted at i / drafts are unconditional: a_i = r_i / r_(i-1)",
            "conditions": ", ".join(parts), "measured_k": len(r)}


# --- vLLM per-request spec-decode metrics ---------------------------------------------------------

def _histograms(sd: dict, where: str, n: int) -> dict[int, np.ndarray]:
    """{draft length k: steps accepting exactly j = 0..k drafts} of one response."""
    tag = f"{where}: response {n}"
    by_k = sd.get("acceptance_histogram_by_draft_length")
    if by_k is None:
        h = sd.get("acceptance_histogram")
        if not isinstance(h, list) or len(h) < 2:
            raise PlannerError(f"{tag}: acceptance_histogram must list steps accepting 0..K drafts, got {str(h)[:40]!r}")
        nst = sd.get("num_spec_tokens")
        if nst is not None and nst != len(h) - 1:
            raise PlannerError(f"{tag}: acceptance_histogram has {len(h)} buckets but num_spec_tokens is {nst!r}"
                               " (expected num_spec_tokens + 1)")
        by_k = {str(len(h) - 1): h}
    if not isinstance(by_k, dict) or not by_k:
        raise PlannerError(f"{tag}: acceptance_histogram_by_draft_length must be an object {{k: [steps, ...]}}")
    out = {}
    for key, h in by_k.items():
        try:
            k = int(str(key))
        except ValueError:
            k = 0
        if k < 1:
            raise PlannerError(f"{tag}: draft length {key!r} in acceptance_histogram_by_draft_length is not >= 1")
        if not isinstance(h, list) or len(h) != k + 1:
            raise PlannerError(f"{tag}: draft length {k} needs {k + 1} buckets (0..{k} accepted), got {str(h)[:40]!r}")
        out[k] = np.array([_count_int(x, tag, f"bucket {j} of draft length {k}") for j, x in enumerate(h)], float)
    return out


def _check_totals(sd: dict, hist: dict[int, np.ndarray], tag: str) -> None:
    steps = sum(h.sum() for h in hist.values())
    accepted = sum((np.arange(len(h)) * h).sum() for h in hist.values())
    if sd.get("num_spec_steps") is not None and _count_int(sd["num_spec_steps"], tag, "num_spec_steps") != steps:
        raise PlannerError(f"{tag}: the histogram counts sum to {steps:.0f} steps but num_spec_steps is"
                           f" {sd['num_spec_steps']}")
    if sd.get("num_accepted_draft_tokens") is not None and \
            _count_int(sd["num_accepted_draft_tokens"], tag, "num_accepted_draft_tokens") != accepted:
        raise PlannerError(f"{tag}: the histogram holds {accepted:.0f} accepted drafts but num_accepted_draft_tokens"
                           f" is {sd['num_accepted_draft_tokens']}")
    mal = sd.get("mean_acceptance_length")
    if mal is not None and steps > 0 and not (_num(mal) and abs(1 + accepted / steps - mal) <= 1e-3 * max(mal, 1)):
        raise PlannerError(f"{tag}: the histogram gives mean acceptance length {1 + accepted / steps:.6g} but"
                           f" mean_acceptance_length is {mal!r}")


def read_vllm_requests(sds: list[dict], where: str) -> dict:
    pooled: dict[int, np.ndarray] = {}
    by_length = False
    for n, sd in enumerate(sds, 1):
        hist = _histograms(sd, where, n)
        _check_totals(sd, hist, f"{where}: response {n}")
        by_length |= "acceptance_histogram_by_draft_length" in sd
        for k, h in hist.items():
            pooled[k] = pooled.get(k, np.zeros(k + 1)) + h
    steps = sum(h.sum() for h in pooled.values())
    if steps <= 0:
        raise PlannerError(f"{where}: no speculative steps in the histograms")
    k_top = max(pooled)
    rates: list[float | None] = []
    for i in range(1, k_top + 1):
        # steps that drafted >= i tokens: accepted >= i over accepted >= i - 1
        num = sum(h[i:].sum() for k, h in pooled.items() if k >= i)
        den = sum(h[i - 1:].sum() for k, h in pooled.items() if k >= i)
        rates.append(num / den if den > 0 else None)
    lengths = ", ".join(str(k) for k in sorted(pooled))
    return {"kind": "vLLM per-request spec-decode metrics", "conditional": rates,
            "conversion": ("conditional a_i = steps accepting >= i drafts / steps accepting >= i-1, over the steps"
                           " that drafted >= i tokens" + ("" if by_length or len(pooled) == 1 else
                                                          " (no by-draft-length histogram: each response's K assumed)")),
            "conditions": f"{len(sds)} response(s), {steps:.0f} verify steps, draft length(s) {lengths}",
            "measured_k": k_top}


# --- the project's measured-rows CSV --------------------------------------------------------------

def read_csv_rows(text: str, where: str) -> dict:
    try:
        rows = list(csv.DictReader(io.StringIO(text), skipinitialspace=True))  # 'a, b' as written by hand
    except csv.Error as err:
        raise PlannerError(f"{where}: not a readable CSV ({err})") from None
    sums: list[float] = []
    weights: list[float] = []
    seen = {"target": set(), "draft": set(), "device": set()}
    ks, used, pairs = [], 0, set()
    for line, row in enumerate(rows, 2):
        cell = (row.get("per_position_acceptance") or "").strip()
        if not cell or cell == "[]":
            continue
        try:
            rates = json.loads(cell)
        except (ValueError, RecursionError):  # ValueError: malformed, or an integer of over 4300 digits
            rates = None
        if not isinstance(rates, list) or not all(r is None or (_num(r) and 0 <= r <= 1) for r in rates):
            raise PlannerError(f"{where}: line {line}: per_position_acceptance {cell[:40]!r} is not a JSON list of"
                               " conditional rates in [0, 1] such as [0.8, 0.6]; fix or drop that row")
        w = _weight(row.get("n_steps"), where, line)
        for i, r in enumerate(rates):
            if r is None:
                break
            if i == len(sums):
                sums.append(0.0)
                weights.append(0.0)
            sums[i] += w * r
            weights[i] += w
        used += 1
        pairs.add((row.get("target") or "?", row.get("draft") or "?"))
        for key in seen:
            if row.get(key):
                seen[key].add(row[key])
        ks.append(len(rates))
    if not used:
        raise PlannerError(f"{where}: no row with per_position_acceptance rates (runs with K >= 1)")
    pairs = sorted(pairs)
    if len(pairs) > 1:
        raise PlannerError(f"{where}: runs of {len(pairs)} target/draft pairs ({', '.join('/'.join(p) for p in pairs[:4])});"
                           " acceptance belongs to one pair: keep one pair's rows")
    conditions = [f"{used} run(s), K up to {max(ks)}"] + [f"{key} {', '.join(sorted(v))}" for key, v in seen.items() if v]
    return {"kind": "measured-rows CSV", "conditional": [s / w for s, w in zip(sums, weights)],
            "conversion": ("per_position_acceptance is conditional already; step-weighted mean per position over the"
                           " runs (n_steps; weight 1 where not recorded)"),
            "conditions": "; ".join(conditions), "measured_k": max(ks)}


def _weight(cell, where: str, line: int) -> float:
    """A row's weight: its n_steps (verify steps measured), 1 where the column is absent or empty; a count
    that is not a positive number is refused, not read as 1 (it would weigh a row other than measured)."""
    if cell is None or not str(cell).strip():
        return 1.0
    try:
        w = float(cell)
    except ValueError:
        w = math.nan
    if not (math.isfinite(w) and w > 0):
        raise PlannerError(f"{where}: line {line}: n_steps {str(cell)[:40]!r} is not a positive count of verify"
                           " steps; fix it, or leave the cell empty to weigh the row as one")
    return w
