"""How far to trust a predicted speculative speedup, per batch size.

The published speedup curves (``calibration.transfer``, zero-shot, anchor rows excluded) put the planner's
speedups within a few percent at small batch and optimistic at mid and large batch
(:func:`simulator.specs.uncertainty.speedup_bands`). Each K* row quotes the band of its batch-size range,
and a row whose gain over plain decoding is smaller than the planner's median optimism there is flagged:
the published measurements say such a gain may not be there, so it is worth two measured points
(``calibration.fit_deployment``) before a deployment relies on it. Nothing is corrected: the K* and the
speedups stay the physics' own.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from simulator.specs.uncertainty import speedup_band_at, speedup_bands, speedup_bands_text, speedup_parts_text


def published_band_applies(sc) -> bool:
    """Whether the published GPU curves describe this prediction's speedups (not on a CPU, not when a
    deployment fit of the user's own measurements has replaced the zero-shot terms)."""
    return sc.hardware.kind != "cpu" and getattr(sc, "deployment_fit", None) is None


def physics_alone(sc) -> bool:
    """Whether the speedups are the physics' alone (--physics-only on a GPU): they get the physics' own band."""
    return getattr(sc, "step_basis", "learned layer") == "physics only"


def speedup_trust_columns(table: pd.DataFrame, sc) -> dict:
    """Per row: the published speedup MAPE and median signed error of its batch-size range (NaN where the
    band does not apply), and whether its K*'s gain is within that median optimism (``gain_at_risk``)."""
    n = len(table)
    if not published_band_applies(sc):
        nan = np.full(n, np.nan)
        return {"speedup_published_mape": nan, "speedup_published_median_error": nan,
                "gain_at_risk": np.zeros(n, dtype=bool)}
    mape, median = speedup_band_at(table["batch_size"].to_numpy(), physics_alone(sc))
    speedup = table["speedup_vs_plain"].to_numpy(dtype=float)
    k = table["k_opt"].fillna(0).to_numpy(dtype=float)
    with np.errstate(invalid="ignore"):
        # the measured speedup the published curves suggest: predicted / (1 + median error) below 1
        at_risk = (k > 0) & (speedup > 1.0) & (median > 0) & (speedup / (1.0 + median) < 1.0)
    return {"speedup_published_mape": mape, "speedup_published_median_error": median, "gain_at_risk": at_risk}


def speedup_trust_text(sc) -> str:
    """What the speedups' uncertainty rests on, in one line."""
    if getattr(sc, "deployment_fit", None) is not None:
        return f"the interval of the {sc.deployment_fit.label}"
    if sc.hardware.kind == "cpu":
        return "no published speedup rows on CPUs: the calibrated profile's own held-out error (step-time band)"
    parts = speedup_parts_text(sc.draft.method)
    return speedup_bands_text(physics_alone(sc)) + hidden_host_text(sc) + (f"; {parts}" if parts else "")


def hidden_host_text(sc) -> str:
    """On an engine that hides host time while speculating, the learned layer's host terms hide too (specs.step_terms:
    max(0, H - room)), so its speedups lie near the physics alone's, where the published curves' engines mostly paid
    theirs: say so, with the physics alone's median errors on those curves ("" elsewhere)."""
    engine = getattr(sc, "engine", None)
    if physics_alone(sc) or engine is None or engine.spec_overlap_window == "none":
        return ""
    medians = [f"{b.median_error:+.0%}" for b in speedup_bands(physics_only=True)]
    if not medians:
        return ""
    return ("; this engine hides host time while speculating, as few of those curves' engines did, so the learned"
            " layer's host time mostly hides too and these speedups lie near the physics alone's, whose median errors"
            f" on them were {', '.join(medians)}")


def gain_at_risk_text(table: pd.DataFrame) -> str | None:
    """The batch sizes whose predicted gain is within the published median optimism, in words; None if none."""
    if "gain_at_risk" not in table or not table["gain_at_risk"].any():
        return None
    hit = table[table["gain_at_risk"].to_numpy(bool)]
    b = hit["batch_size"].to_numpy()
    worst = float(hit["speedup_published_median_error"].max())
    span = f"B {b.min()}" if b.min() == b.max() else f"B {b.min()}-{b.max()}"
    return (f"the predicted gain of speculation at {span} ({len(b)} batch sizes, up to"
            f" {hit['speedup_vs_plain'].max():.2f}x) is within the planner's median optimism on published curves"
            f" there (+{worst:.0%}): measure two points (python -m calibration.fit_deployment) before relying on it")


def decision_risk_text(table: pd.DataFrame, quantile: float) -> str | None:
    """Where the K best at the engine terms' centre is not K* (K* is chosen at their pessimistic ``quantile``:
    the centre's gain lies inside their spread), or K* speculates but pays in fewer than 90% of the draws, in
    words; None where neither happens."""
    if "p_kopt_beats_plain" not in table:
        return None
    parts = []
    moved = table[table["k_centre"].notna() & table["k_opt"].notna()
                  & (table["k_centre"].fillna(0) != table["k_opt"].fillna(0))]
    if len(moved):
        pairs = moved.groupby(["k_opt", "k_centre"], sort=False)["batch_size"].agg(["min", "max"])
        spans = [f"K* = {int(chosen)} at B {lo}" + (f"-{hi}" if hi != lo else "") + f" (centre {int(centre)})"
                 for (chosen, centre), (lo, hi) in pairs.iterrows()]
        parts.append(f"{'; '.join(spans[:4])}{'; ...' if len(spans) > 4 else ''}: chosen at the engine terms'"
                     f" pessimistic {quantile:.0%}, the centre's K gains less than their spread")
    p = table["p_kopt_beats_plain"].to_numpy(dtype=float)
    unsure = np.isfinite(p) & (p < 0.9)
    if unsure.any():
        b = table["batch_size"].to_numpy()[unsure]
        span = f"B {b.min()}" if b.min() == b.max() else f"B {b.min()}-{b.max()}"
        lo, hi = f"{p[unsure].min():.0%}", f"{p[unsure].max():.0%}"
        parts.append(f"at {span} K* pays in {lo if lo == hi else f'{lo}-{hi}'} of the draws")
    if not parts:
        return None
    return "; ".join(parts) + " (p_kopt_beats_plain, k_centre in --format csv/json)"
