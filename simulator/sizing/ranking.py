"""Ranking the candidates that meet the target, with the reason for every place.

Order: the fleet's cost at the target load ($ per hour of the GPUs bought for it, which at a fixed target is
also its $ per million output tokens there); ties broken by strength of evidence (EVIDENCE: measured kernel
tables > published prior > datasheet), then fewer GPUs, cheaper tokens at full load, more headroom, the
simpler policy. Cost alone decides between different costs: a cheaper candidate on weaker evidence stays
above a dearer one on stronger evidence, and :func:`evidence_margin` says so beside the answer (both bands).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from simulator.serving.engine import engine_from_scenario
from simulator.specs.hardware import load_hardware
from simulator.plan.speedup_trust import physics_alone
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


def rank(capacity: pd.DataFrame) -> pd.DataFrame:
    """Rows meeting the target in the order of the module docstring, numbered, with ``rank_reason``."""
    ranked = capacity[capacity["meets_target"]] if len(capacity) else capacity
    if not len(ranked):
        return ranked
    out = []
    for pick in _cost_order(_records(ranked)):
        pick["rank_reason"] = _reason(pick, out)
        out.append(pick)
    df = pd.DataFrame(out, columns=list(ranked.columns) + ["rank_reason"]).reset_index(drop=True)
    df.insert(0, "rank", np.arange(1, len(df) + 1))
    return df


RANK_RULE = ("sorted by the fleet's cost at the target load ($/h, the same order as $/M output tokens there);"
             " ties broken by evidence (measured kernel tables > published prior > datasheet), then fewer GPUs")


def _reason(r: dict, above: list) -> str:
    if not above:
        return "cheapest fleet at the target load"
    best = above[0]
    extra = r["fleet_usd_per_hour"] - best["fleet_usd_per_hour"]
    if extra > 1e-9:
        return f"${extra:,.2f}/h more than #1 {_label(best)} at the target load"
    ev, ev_best = EVIDENCE.get(r.get("basis"), 0), EVIDENCE.get(best.get("basis"), 0)
    if ev < ev_best:
        return f"same cost as #1 {_label(best)}, on weaker evidence ({r.get('basis')} vs {best.get('basis')})"
    return f"same cost as #1 {_label(best)}; tie broken by GPUs, $/M tokens at full load, headroom, simplicity"


def evidence_margin(ranked: pd.DataFrame) -> str:
    """When #1 rests on weaker evidence than another ranked row: the cheapest row on stronger evidence,
    both GPU bands and both costs (the buyer weighs the saving against the evidence); "" otherwise."""
    if not len(ranked) or "basis" not in ranked:
        return ""
    best = ranked.iloc[0].to_dict()
    ev = EVIDENCE.get(best.get("basis"), 0)
    stronger = ranked[ranked.basis.map(EVIDENCE).fillna(0) > ev]
    if not len(stronger):
        return ""
    m = stronger.iloc[0].to_dict()
    return (f"#1 rests on {best.get('basis')} evidence (GPUs {_band(best)} across its band); the cheapest on"
            f" {m.get('basis')} evidence is {_label(m)}: {int(m['gpus'])} GPUs (band {_band(m)}) at"
            f" ${m['fleet_usd_per_hour']:,.2f}/h vs ${best['fleet_usd_per_hour']:,.2f}/h")


def best_per_gpu_type(capacity: pd.DataFrame, ranked: pd.DataFrame, rejected: pd.DataFrame,
                      hardware_order) -> pd.DataFrame:
    """One row per GPU type (in ``hardware_order``): its best ranked option (its first place in the
    ranking), else why none of its options meets the target (the candidate closest to it, or the memory
    / layout rejection)."""
    rows = []
    for hw in dict.fromkeys(hardware_order):
        mine = ranked[ranked.hardware == hw] if len(ranked) else ranked
        if len(mine):
            r = mine.iloc[0]
            rows.append({"hardware": hw, "rank": int(r["rank"]), "tp": int(r.tp), "dtype": r["dtype"],
                         "policy": r.policy, "gpus": r.gpus, "nodes": r.nodes, "gpus_range": r.gpus_range,
                         "fleet_usd_per_hour": r.fleet_usd_per_hour,
                         "usd_per_m_tokens_at_target": r.usd_per_m_tokens_at_target, "basis": r.basis, "note": ""})
            continue
        cap = capacity[capacity.hardware == hw] if len(capacity) else capacity
        if len(cap):
            c = cap.sort_values("max_load_per_replica", ascending=False).iloc[0]
            note = f"does not meet the target: {c.reason}" if c.reason else "does not meet the target"
            basis = c.basis
        else:
            rej = rejected[rejected.hardware == hw] if len(rejected) else rejected
            note = f"cannot run: {rej.reason.iloc[0]}" if len(rej) else "not searched"
            basis = "-"
        rows.append({"hardware": hw, "rank": None, "tp": None, "dtype": "-", "policy": "-", "gpus": np.nan,
                     "nodes": np.nan, "gpus_range": "-", "fleet_usd_per_hour": np.nan,
                     "usd_per_m_tokens_at_target": np.nan, "basis": basis, "note": note})
    df = pd.DataFrame(rows)
    if len(df):  # the buyer's order: the cheapest fleet first, GPU types that cannot serve last
        df = df.sort_values(["fleet_usd_per_hour"], na_position="last", kind="stable").reset_index(drop=True)
    return df


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
    median = float(speedup_band_at([max(batch, 1.0)], sc is not None and physics_alone(sc))[1][0])
    if not median > 0 or edge >= median:
        return ""
    return (f"; {best['policy']}'s {edge:+.0%} capacity over plain decoding here is within the planner's median"
            f" optimism on published speedups near its mean batch of {batch:.0f} sequences (+{median:.0%}): plain"
            " decoding may carry as much; measure two points (python -m calibration.fit_deployment) before"
            " relying on the speculative capacity")
