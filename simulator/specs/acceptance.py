"""Acceptance: per-position rates, acceptance length AL(K), and the reference acceptance rule.

a_i is the probability that draft token i is accepted given drafts 1..i-1 were. With one bonus (or
correction) token per step,

    AL(K) = 1 + a_1 + a_1 a_2 + ... + a_1...a_K          i.i.d. a:  (1 - a^(K+1)) / (1 - a)

Leviathan et al. 2023 (arXiv:2211.17192); Chen et al. 2023 (arXiv:2302.01318).

Extrapolation rule: a list of n rates covers positions 1..n; every position i > n uses a_n (the last
rate repeats). A single rate is the i.i.d. model (every position), not an extrapolation. Outputs
state the rule and warn when K* reaches past the given positions (:meth:`Acceptance.extrapolated`).

Per-method presets with their sources live in ``simulator/data/acceptance.toml``
(:func:`load_presets`, :func:`preset_for`).
"""
from __future__ import annotations

import tomllib
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path

import numpy as np

from simulator.errors import PlannerError


@dataclass(frozen=True)
class Acceptance:
    """Per-position acceptance rates a_1..a_n; positions past n repeat a_n."""

    rates: tuple[float, ...]
    source: str = "assumed"
    # a draft tree's rank tail (specs.tree_acceptance): the rates are then the draft's top-1 rates per depth and
    # the tree's acceptance follows from its shape; None: the rates are the draft's own (a chain's, or a tree's
    # measured per depth)
    rank_tail: float | None = None

    def __post_init__(self):
        if not self.rates:
            raise PlannerError("acceptance needs at least one rate")
        for r in self.rates:
            if not (isinstance(r, (int, float)) and 0.0 <= r < 1.0):
                raise PlannerError(f"acceptance rate {r!r} outside [0, 1): a rate of 1 would accept every draft forever")
        if self.rank_tail is not None and not 0.0 < self.rank_tail < 1.0:
            raise PlannerError(f"acceptance rank_tail {self.rank_tail!r} outside (0, 1)")

    @property
    def label(self) -> str:
        rates = f"i.i.d. {self.rates[0]:g}" if len(self.rates) == 1 else \
            "per-position " + ",".join(f"{r:g}" for r in self.rates)
        if self.rank_tail is not None:
            return f"{rates.replace('per-position', 'per-depth')} top-1, tree rank tail {self.rank_tail:g}"
        return rates

    @property
    def given_positions(self) -> int | None:
        """Positions the rates were given for; None for the i.i.d. model (one rate for every position)."""
        return None if len(self.rates) == 1 else len(self.rates)

    def extrapolated(self, k: int) -> bool:
        """True when draft length ``k`` uses positions past the given list (a_i = a_n for i > n)."""
        n = self.given_positions
        return n is not None and int(k) > n

    @property
    def rule(self) -> str:
        """The extrapolation rule in words, for outputs."""
        n = self.given_positions
        tree = "" if self.rank_tail is None else \
            (" (a draft tree's top-1 rate per depth: the tree's acceptance follows from its topk and tokens,"
             " specs.tree_acceptance)")
        if n is None:
            return f"i.i.d.: every position accepted with probability {self.rates[0]:g}{tree}"
        return f"rates given for positions 1-{n}; positions beyond {n} repeat a_{n} = {self.rates[-1]:g}{tree}"

    def rates_upto(self, k_max: int) -> np.ndarray:
        r = np.asarray(self.rates, dtype=float)
        if k_max <= len(r):
            return r[:k_max]
        return np.concatenate([r, np.full(k_max - len(r), r[-1])])

    def acceptance_length(self, k) -> np.ndarray:
        """AL(K), vectorized over integer K >= 0."""
        k = np.asarray(k)
        if np.any(k < 0):
            raise PlannerError("K must be >= 0")
        k_max = int(k.max()) if k.size else 0
        return acceptance_length_prefix(self.rates_upto(k_max))[k.astype(int)]


# a rate scaled up (a context factor, an acceptance band, a fitted scale) never reaches 1
RATE_CEILING = 0.999


def acceptance_length_prefix(rates, axis: int = -1) -> np.ndarray:
    """AL(0), AL(1), ..., AL(n) from per-position rates a_1..a_n along ``axis``:
    1, 1 + a_1, 1 + a_1 + a_1 a_2, ... (other axes: independent rate sets)."""
    r = np.asarray(rates, dtype=float)
    ones = list(r.shape)
    ones[axis] = 1
    return np.concatenate([np.ones(ones), 1.0 + np.cumsum(np.cumprod(r, axis=axis), axis=axis)], axis=axis)


def parse_band(value, origin: str) -> float:
    """[acceptance] band: how far each per-position rate may be off, absolute, in [0, 0.5]."""
    band = float(value)
    if not (0.0 <= band <= 0.5):
        raise PlannerError(f"{origin}: [acceptance] band = {band:g} must be in [0, 0.5] (an absolute +- on each"
                           " per-position rate, e.g. 0.1)")
    return band


PRESET_FILE = Path(__file__).resolve().parent.parent / "data" / "acceptance.toml"


@lru_cache(maxsize=1)
def load_presets() -> dict[str, dict]:
    """Per-method presets from ``simulator/data/acceptance.toml``: name -> {rates, source, derivation, ...}."""
    try:
        raw = tomllib.loads(PRESET_FILE.read_text())
    except (OSError, tomllib.TOMLDecodeError) as err:
        raise PlannerError(f"{PRESET_FILE}: unreadable acceptance presets ({err}); restore the file from the repository") from None
    for name, entry in raw.items():
        if not (isinstance(entry, dict) and isinstance(entry.get("rates"), list) and isinstance(entry.get("source"), str)):
            raise PlannerError(f"{PRESET_FILE}: preset [{name}] needs rates = [...] and source = '...'")
        _preset(entry)  # validates the rates and rank tail
    return raw


def _preset(entry: dict) -> Acceptance:
    tail = entry.get("rank_tail")
    return Acceptance(tuple(float(r) for r in entry["rates"]), entry["source"],
                      None if tail is None else float(tail))


def preset_for(method: str) -> Acceptance | None:
    """The preset of a draft method (eagle, eagle3, mtp, ngram, model, eagle3-tree, ...), or None when none is
    published. A tree preset carries its rank tail (its rates are the draft's top-1 rates per depth)."""
    entry = load_presets().get(method)
    if entry is None:
        return None
    return _preset(entry)


def preset_for_model(preset_name: str, acceptance: Acceptance, model_name: str) -> Acceptance:
    """The preset ``acceptance`` as a prediction for ``model_name``: where the preset lists the models it was
    published for (``published_for``) and this one is not among them, its source says that the prediction rests
    on another model's rates. Anything but the unchanged preset is returned as it is."""
    entry = load_presets().get(preset_name)
    if entry is None or "published_for" not in entry or acceptance.source != entry["source"] \
            or model_name in entry["published_for"]:
        return acceptance
    return replace(acceptance, source=f"{acceptance.source}; no published {preset_name} acceptance for {model_name}:"
                                      f" rests on the rates of {', '.join(entry['published_for'])}")


def parse_acceptance(value, source: str = "assumed") -> Acceptance:
    """0.8 -> i.i.d.;  '0.7,0.5,0.3' or [0.7, 0.5, 0.3] -> per position."""
    if isinstance(value, Acceptance):
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return Acceptance((float(value),), source)
    if isinstance(value, str):
        try:
            rates = tuple(float(x) for x in value.split(",") if x.strip())
        except ValueError:
            raise PlannerError(f"acceptance '{value}': expected a rate like 0.8 or a list like 0.7,0.5,0.3") from None
        return Acceptance(rates, source)
    if isinstance(value, (list, tuple)):
        if not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in value):
            raise PlannerError(f"acceptance {value!r}: expected numbers")
        return Acceptance(tuple(float(x) for x in value), source)
    raise PlannerError(f"acceptance {value!r}: expected a rate like 0.8 or a list like 0.7,0.5,0.3")


@dataclass(frozen=True)
class ContextAcceptance:
    """Acceptance by context length: every per-position rate is multiplied by f(L), read off a table
    [acceptance] context_points / context_factors (linear in log2 L between points, the end values
    beyond them), with the table's source in context_source."""

    points: tuple[int, ...]
    factors: tuple[float, ...]
    source: str

    def factor(self, context_lens) -> np.ndarray:
        x = np.log2(np.asarray(context_lens, dtype=float))
        return np.interp(x, np.log2(np.asarray(self.points, dtype=float)), np.asarray(self.factors, dtype=float))

    @property
    def label(self) -> str:
        pairs = ", ".join(f"{p}: x{f:g}" for p, f in zip(self.points, self.factors))
        return f"by context ({pairs}; {self.source})"


def context_acceptance(acc_tbl: dict, acceptance: Acceptance, origin: str) -> ContextAcceptance | None:
    keys = ("context_points", "context_factors", "context_source")
    given = [k for k in keys if k in acc_tbl]
    if not given:
        return None
    if len(given) < 3:
        missing = ", ".join(k for k in keys if k not in acc_tbl)
        raise PlannerError(f"{origin}: [acceptance] acceptance by context needs context_points, context_factors"
                           f" and context_source (where the factors come from); missing {missing}")
    points, factors = acc_tbl["context_points"], acc_tbl["context_factors"]
    if not points or len(points) != len(factors):
        raise PlannerError(f"{origin}: [acceptance] context_points and context_factors must be non-empty lists of"
                           f" equal length (got {len(points)} and {len(factors)})")
    if not all(isinstance(p, int) and not isinstance(p, bool) and p >= 1 for p in points) \
            or list(points) != sorted(set(points)):
        raise PlannerError(f"{origin}: [acceptance] context_points must be increasing integers >= 1, got {points}")
    top = max(acceptance.rates)
    for f in factors:
        if not (isinstance(f, (int, float)) and not isinstance(f, bool) and 0 < f and f * top < 1):
            raise PlannerError(f"{origin}: [acceptance] context factor {f!r} must be > 0 and keep every rate below 1"
                               f" (largest rate {top:g})")
    if not str(acc_tbl["context_source"]).strip():
        raise PlannerError(f"{origin}: [acceptance] context_source is empty: name where the factors come from")
    return ContextAcceptance(tuple(int(p) for p in points), tuple(float(f) for f in factors),
                             str(acc_tbl["context_source"]))

