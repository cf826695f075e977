"""Ranking the candidates that meet the target, with the reason for every place.

Order: cost at the target load (the fleet's $ per hour, which at a fixed target is also its $ per
million tokens served there), then strength of evidence (EVIDENCE: measured kernel tables > published
prior > datasheet), then fewer GPUs, cheaper tokens at full load, more headroom, the simpler policy.

One rule overrides cost: a candidate on weaker evidence is never placed above one on stronger evidence
that meets the target with no more GPUs than the weaker one's band allows (``gpus <= gpus_high``: the
weaker estimate could need that many). When the weaker one still leads (every stronger candidate needs
more GPUs than the top of its band), :func:`evidence_margin` says so, with both bands.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from simulator.serving.engine import engine_from_scenario
from simulator.specs.hardware import load_hardware
from simulator.specs.uncertainty import speedup_band_at

SIMPLICITY = ("plain", "fixed", "dsd")  # tie-break: the simpler engine setting first
# How much a candidate's step times rest on: its own device's measured kernel tables beat figures
# others published for it (matmul and bandwidth maxima: the transfer corpus finds them 2-3x less
# faithful, calibration/data/transfer/transfer.md), which beat the datasheet.
EVIDENCE = {"datasheet": 0, "published prior": 1, "measured": 2}


def _label(r) -> str:
    dtype = r.get("dtype", "")
    return f"{r['hardware']} tp={int(r['tp'])}" + (f" {dtype}" if dtype else "") + f" {r['policy']}"


def _band(r) -> str:
    lo, hi = r.get("gpus_low", np.nan), r.get("gpus_high", np.nan)
    if not (lo == lo and hi == hi):  # noqa: PLR0124 (NaN)
        return f"{int(r['gpus'])}"
    return f"{int(lo)}" if lo == hi else f"{int(lo)}-{int(hi)}"


def _high(r) -> float:
    hi = r.get("gpus_high", np.nan)
    return float(hi) if hi == hi else float(r["gpus"])  # noqa: PLR0124


def _records(df: pd.DataFrame) -> list[dict]:
    """The rows as dicts of Python values (what ``to_dict("records")`` gives, built column-wise: a
    handful of rows costs microseconds instead of milliseconds)."""
    cols = {c: df[c].tolist() for c in df.columns}
    return [dict(zip(cols, vals)) for vals in zip(*cols.values())]


def _nan_last(v) -> tuple:
    """A sort key putting NaN (and None) after every number, as pandas' na_position="last" does."""
    missing = v is None or v != v  # noqa: PLR0124 (NaN)
    return (1, 0.0) if missing else (0, v)


def _cost_order(rows: list[dict]) -> list[dict]:
    """Rows by cost at the target, evidence, GPUs, $/M tokens at full load, headroom, simplicity."""
    order = {p: i for i, p in enumerate(SIMPLICITY)}

    def key(r):
        return tuple(_nan_last(v) for v in (
            r["fleet_usd_per_hour"], -EVIDENCE.get(r.get("basis"), 0), r["gpus"], r["usd_per_m_output_tokens"],
            -r["max_load_per_replica"], order.get(r["policy"], 9)))
    return sorted(rows, key=key)


def _stronger_within(pool: list, r: dict) -> dict | None:
    """The cheapest row of ``pool`` on stronger evidence than ``r`` that needs no more GPUs than r's band allows."""
    ev = EVIDENCE.get(r.get("basis"), 0)
    for m in pool:
        if EVIDENCE.get(m.get("basis"), 0) > ev and m["gpus"] <= _high(r):
            return m
    return None


def rank(capacity: pd.DataFrame) -> pd.DataFrame:
    """Rows meeting the target in the order of the module docstring, numbered, with ``rank_reason``."""
    ranked = capacity[capacity["meets_target"]] if len(capacity) else capacity
    if not len(ranked):
        return ranked
    pool = _cost_order(_records(ranked))
    out = []
    while pool:
        pick = pool[0]
        passed = []  # cheaper rows this pick was placed above, and why
        while (better := _stronger_within(pool, pick)) is not None:
            passed.append(pick)
            pick = better
        pool.remove(pick)
        pick["rank_reason"] = _reason(pick, out, passed)
        out.append(pick)
    df = pd.DataFrame(out, columns=list(ranked.columns) + ["rank_reason"]).reset_index(drop=True)
    df.insert(0, "rank", np.arange(1, len(df) + 1))
    return df


def _reason(r: dict, above: list, passed: list) -> str:
    text = ""
    if passed:
        w = passed[0]
        text = (f"placed above cheaper {_label(w)} (${w['fleet_usd_per_hour']:,.2f}/h, {w.get('basis')}): on"
                f" {r.get('basis')} evidence it meets the target with {int(r['gpus'])} GPUs, within that one's"
                f" band of {_band(w)} GPUs")
    if not above:
        return text or "cheapest at the target load"
    best = above[0]
    extra = r["fleet_usd_per_hour"] - best["fleet_usd_per_hour"]
    if text:
        return text
    ev = EVIDENCE.get(r.get("basis"), 0)
    for m in above:  # placed below a dearer row: one on stronger evidence needs no more GPUs than r's band
        if m["fleet_usd_per_hour"] > r["fleet_usd_per_hour"] and EVIDENCE.get(m.get("basis"), 0) > ev \
                and m["gpus"] <= _high(r):
            return (f"cheaper, but rests on {r.get('basis')} evidence: {_label(m)} ({m.get('basis')}) meets the"
                    f" target with {int(m['gpus'])} GPUs, within this one's band of {_band(r)} GPUs")
    if extra > 1e-9:
        return f"${extra:,.2f}/h more than #1 {_label(best)} at the target load"
    if EVIDENCE.get(r.get("basis"), 0) < EVIDENCE.get(best.get("basis"), 0):
        return f"same cost as #1 {_label(best)}, on weaker evidence ({r.get('basis')} vs {best.get('basis')})"
    return f"same cost as #1 {_label(best)}; tie broken by GPUs, $/M tokens at full load, headroom, simplicity"


def evidence_margin(ranked: pd.DataFrame) -> str:
    """When #1 rests on weaker evidence than another ranked row: why it still leads (both bands, the margin)."""
    if not len(ranked) or "basis" not in ranked:
        return ""
    best = ranked.iloc[0].to_dict()
    ev = EVIDENCE.get(best.get("basis"), 0)
    stronger = ranked[ranked.basis.map(EVIDENCE).fillna(0) > ev]
    if not len(stronger):
        return ""
    m = stronger.iloc[0].to_dict()
    return (f"it rests on a {best.get('basis')} while {_label(m)} rests on {m.get('basis')} evidence, but that one needs"
            f" {int(m['gpus'])} GPUs (band {_band(m)}), {int(m['gpus'] - _high(best))} more than the top of this"
            f" one's band ({_band(best)} GPUs), at ${m['fleet_usd_per_hour']:,.2f}/h vs"
            f" ${best['fleet_usd_per_hour']:,.2f}/h")


def speculation_margin(best, same: pd.DataFrame, sc=None) -> str:
    """"; ..." when the recommended policy speculates and its capacity over plain decoding on the same
    hardware is smaller than the planner's median optimism on published speedups at the batch size it
    runs at (:mod:`simulator.plan.speedup_trust`): plain decoding may carry as much. "" otherwise, and where
    the published GPU curves do not describe the candidate (a CPU, or the device a deployment fit measured)."""
    plain = same[same.policy == "plain"]
    return speculation_caveat(best, plain.max_load_per_replica.iloc[0] if len(plain) else None, sc)


def speculation_caveat(best, plain_load: float | None, sc=None) -> str:
    """:func:`speculation_margin` of a row (a mapping) given plain decoding's capacity on the same
    hardware (None: no plain row), and :func:`running_cap_note`."""
    return _optimism_caveat(best, plain_load, sc) + running_cap_note(best, sc)


def running_cap_note(best, sc=None) -> str:
    """"; ..." when a speculative row ran under the engine's own running-request cap with speculation on
    (SGLang's --max-running-requests default, 48 from 0.4.5: engine profile [speculative]
    max_running_default), which the serving simulation applies where the scenario sets no cap."""
    if sc is None or best["policy"] == "plain" or sc.engine is None:
        return ""
    cap = engine_from_scenario(sc).spec_max_num_seqs
    if not cap:
        return ""
    return (f"; sized at {sc.engine.display_name}'s own cap of {cap} running requests with speculative decoding"
            " (no --max-running-requests given; [serving] max_num_seqs sets it)")


def _optimism_caveat(best, plain_load: float | None, sc=None) -> str:
    if best["policy"] == "plain" or load_hardware(best["hardware"]).kind == "cpu":
        return ""
    if sc is not None and getattr(sc, "deployment_fit", None) is not None and best["hardware"] == sc.hardware.name:
        return ""
    batch = best.get("mean_batch_size", np.nan)
    if plain_load is None or not plain_load > 0 or not batch == batch:  # noqa: PLR0124
        return ""
    edge = best["max_load_per_replica"] / plain_load - 1.0
    median = float(speedup_band_at([max(batch, 1.0)])[1][0])
    if not median > 0 or edge >= median:
        return ""
    return (f"; {best['policy']}'s {edge:+.0%} capacity over plain decoding here is within the planner's median"
            f" optimism on published speedups near its mean batch of {batch:.0f} sequences (+{median:.0%}): plain"
            " decoding may carry as much; measure two points (python -m calibration.fit_deployment) before"
            " relying on the speculative capacity")
