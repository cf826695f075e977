"""How far to trust a step time: the residuals of the planner's own predictions against measurements
of the same kind of basis (``simulator/data/transfer_error.json``, written by ``calibration.transfer``
from the published GPU corpus; a CPU profile's held-out end-to-end validation error).

The band is the mean absolute relative error (MAPE) of step-time predictions on that basis and GPU,
with the worst case beside it: a prediction of 10 ms with a 15% band means measurements of the same
kind fell on average 15% away from what the planner said. Speculative speedups get their own band per
batch-size range, with the median signed error beside it (the published curves say where the planner
leans optimistic); a deployment fit replaces both with its own interval.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

BAND_FILE = Path(__file__).resolve().parent.parent / "data" / "transfer_error.json"
MIN_ROWS = 3  # fewer published rows on a GPU than this: quote the band over all GPUs
# serving TPOT of a GPU and engine scored on end-to-end runs the planner never saw (written by calibration.silicon)
SERVING_FILE = Path(__file__).resolve().parent.parent / "data" / "serving_error.json"
MIN_SERVING_RUNS = 20  # fewer runs of a GPU and engine than this: no figure (a handful of runs is an anecdote)
PHYSICS_ONLY_CHECKS = "_physics_only"  # SERVING_FILE's block of the physics alone ({gpu: {engine: stats}})


@dataclass(frozen=True)
class Band:
    mape: float | None  # fraction; None when nothing has been measured for this basis
    worst: float | None
    n: int
    where: str  # what the figure rests on
    measure: str = "MAPE over"  # what the figure is: residuals of that basis, or a fit's own interval

    def describe(self) -> str:
        if self.mape is None:
            return f"unknown ({self.where})"
        worst = f", worst {self.worst:.0%}" if self.worst is not None else ""
        count = f"{self.n} " if self.n else ""
        return f"+-{self.mape:.0%} step time ({self.measure} {count}{self.where}{worst})"


@lru_cache(maxsize=4)
def _figures(path: Path) -> dict:
    """A figures file the calibration wrote ({} before it has)."""
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return {}


def _bands() -> dict:
    return _figures(BAND_FILE)


def step_time_band(hardware: str, kind: str, basis: str, profile_raw: dict | None = None) -> Band:
    """The band for a device: CPU profiles quote their own held-out validation; GPUs the transfer
    residuals of the published corpus on that GPU (all GPUs when it has too few rows); a datasheet-only
    prediction the datasheet residuals."""
    if kind == "cpu":
        engine = (profile_raw or {}).get("engine") or {}
        mape = engine.get("heldout_itl_mape")
        return Band(mape, None, 0, f"held-out rows of {engine.get('fitted_from', 'no measured run')}") \
            if mape is not None else Band(None, None, 0, "no end-to-end run measured on this CPU")
    bands = _bands()
    src = bands.get("_source", "the published corpus")
    if basis.startswith("datasheet"):
        d = bands.get("_datasheet") or {}
        return Band(d.get("step_time_mape"), None, int(d.get("n") or 0),
                    f"published rows, datasheet-only basis; {src}")
    entry = bands.get(hardware) or {}
    if int(entry.get("n") or 0) >= MIN_ROWS:
        return Band(entry.get("step_time_mape"), entry.get("step_time_worst"), int(entry["n"]),
                    f"published rows on {hardware}; {src}")
    same = basis_band(bands, basis, exclude=hardware)
    if same is not None:
        mape, worst, n, gpus = same
        return Band(mape, worst, n, f"published rows on the GPUs priced from a {basis} ({', '.join(gpus)};"
                                    f" {hardware} has {int(entry.get('n') or 0)}); {src}")
    d = bands.get("_all") or {}
    return Band(d.get("step_time_mape"), d.get("step_time_worst"), int(d.get("n") or 0),
                f"published rows on all GPUs ({hardware} has {int(entry.get('n') or 0)}); {src}")


def posterior_interval_trust_text() -> str:
    """How often a deployment posterior's 90% interval held a point it never saw on the published corpus (two points
    fitted per speedup curve, the others held out; calibration.transfer): "" before that has been scored."""
    g = _bands().get("_two_shot") or {}
    if not g.get("n") or g.get("interval_coverage") is None:
        return ""
    cov = float(g["interval_coverage"])
    read = f": read them as about {cov:.0%} intervals" if cov < 0.85 else ""
    return (f"held out on {int(g['curves'])} published speedup curves fitted on two points each, such 90% intervals"
            f" held {cov:.0%} of {int(g['n'])} points ({_bands().get('_source', BAND_FILE.name)}){read}")


def _tp_figures(tp: int) -> dict | None:
    """The published decode step rows' figures at one tensor-parallel degree (all GPUs), or None with fewer than
    MIN_ROWS of them (or before calibration.transfer has written them)."""
    g = (_bands().get("_step_time_by_tp") or {}).get(str(int(tp))) or {}
    return g if int(g.get("n") or 0) >= MIN_ROWS and g.get("median_error") is not None else None


def _lean_words(median: float) -> str:
    """A median error (predicted / measured - 1) as what the measurements did."""
    return f"{abs(median):.0%} slower than predicted" if median < 0 else f"{median:.0%} faster than predicted"


def tp_lean_text(tp: int) -> str:
    """How the published decode step rows at this tensor-parallel degree (all GPUs) fell against the planner:
    "at TP 4, 105 published step rows (all GPUs) ran a median 16% slower than predicted"; "" without enough rows."""
    g = _tp_figures(tp)
    return "" if g is None else (f"at TP {int(tp)}, {int(g['n'])} published step rows (all GPUs) ran a median"
                                 f" {_lean_words(float(g['median_error']))}")


def tp_leans_text(tps) -> str:
    """The same for every tensor-parallel degree a sizing compares, in one line ("" when none has rows)."""
    parts = [f"TP {tp}: a median {_lean_words(float(g['median_error']))} ({int(g['n'])} rows)"
             for tp in sorted({int(t) for t in tps}) if (g := _tp_figures(tp)) is not None]
    return ("published decode step rows by tensor-parallel degree, all GPUs (" + _bands().get("_source", BAND_FILE.name)
            + "): " + "; ".join(parts)) if parts else ""


def basis_band(bands: dict, basis: str, exclude: str = "") -> tuple[float, float | None, int, list[str]] | None:
    """The step-time MAPE pooled over every GPU whose corpus rows rest on ``basis`` (a GPU with too few rows
    of its own borrows the residuals of its own kind of evidence, not those of GPUs with measured tables):
    (MAPE, worst, rows, GPUs), or None when fewer than MIN_ROWS such rows exist. A MAPE is a mean of absolute
    errors, so pooling weights each GPU's by its rows."""
    entries = {gpu: e for gpu, e in bands.items() if not gpu.startswith("_") and gpu != exclude
               and isinstance(e, dict) and str(e.get("basis", "")).startswith(basis)
               and e.get("step_time_mape") is not None and int(e.get("n") or 0) > 0}
    n = sum(int(e["n"]) for e in entries.values())
    if n < MIN_ROWS:
        return None
    mape = sum(int(e["n"]) * float(e["step_time_mape"]) for e in entries.values()) / n
    worsts = [float(e["step_time_worst"]) for e in entries.values() if e.get("step_time_worst") is not None]
    return mape, max(worsts) if worsts else None, n, sorted(entries)


@dataclass(frozen=True)
class ServingCheck:
    """How far the planner's serving TPOT fell from end-to-end runs on one GPU under one engine that it never
    saw (the median says which way it leans; the share within 20% and the MAPE how widely it scatters);
    ``physics_only``: the physics alone's (a prediction without the learned layer), else the planner as shipped."""
    hardware: str
    engine: str
    n: int
    median_error: float  # predicted / measured - 1, median
    within_20pct: float
    mape: float
    worst: float
    source: str
    physics_only: bool = False

    def figures(self) -> str:
        lean = "slow" if self.median_error > 0 else "fast"
        return (f"median {self.median_error:+.0%} ({lean}), {self.within_20pct:.0%} within 20%, MAPE {self.mape:.0%}"
                f" (worst {self.worst:.0%})")

    def describe(self) -> str:
        alone = " (the physics alone)" if self.physics_only else ""
        return (f"TPOT against {self.n} end-to-end runs on {self.hardware} under {self.engine} it never saw{alone}:"
                f" {self.figures()}; {self.source}")


def _serving_checks() -> dict:
    return _figures(SERVING_FILE)


def _serving_stats(hardware: str, engine: str, physics_only: bool = False) -> dict:
    """The check's figures of a GPU and engine: the planner as shipped, or (``physics_only``) the physics alone."""
    checks = _serving_checks()
    block = (checks.get(PHYSICS_ONLY_CHECKS) or {}) if physics_only else checks
    return (block.get(hardware) or {}).get(engine) or {}


def _serving_runs(hardware: str, engine: str, physics_only: bool = False) -> int:
    return int(_serving_stats(hardware, engine, physics_only).get("n") or 0)


def serving_check(hardware: str, engine: str, physics_only: bool = False) -> ServingCheck | None:
    """The unseen serving runs' errors for this GPU and engine, of the planner as shipped or (``physics_only``) of
    the physics alone; None with fewer than MIN_SERVING_RUNS of them."""
    s = _serving_stats(hardware, engine, physics_only)
    if _serving_runs(hardware, engine, physics_only) < MIN_SERVING_RUNS:
        return None
    return ServingCheck(hardware, engine, int(s["n"]), float(s["median_error"]), float(s["within_20pct"]),
                        float(s["mape"]), float(s["worst"]), str(_serving_checks().get("_source", SERVING_FILE.name)),
                        physics_only)


def serving_check_text(hardware: str, engine: str, physics_only: bool = False) -> str:
    """The serving check's line for a prediction (of its own basis: ``physics_only`` without the learned layer),
    or what it lacks."""
    check = serving_check(hardware, engine, physics_only)
    if check is not None:
        return check.describe()
    runs = _serving_runs(hardware, engine, physics_only)
    return (f"TPOT not checked: {runs or 'no'} end-to-end runs on {hardware} under {engine} among those it never saw"
            + (f" (fewer than {MIN_SERVING_RUNS})" if runs else ""))


def serving_checks_text(hardware: list[str], engine: str, physics_only: bool = False) -> str:
    """The serving check of several GPUs under one engine, the source named once (a sizing report's line)."""
    parts = []
    for gpu in hardware:
        check = serving_check(gpu, engine, physics_only)
        runs = _serving_runs(gpu, engine, physics_only)
        parts.append(f"{gpu}, {check.n} runs: {check.figures()}" if check is not None else
                     f"{gpu}: not checked ({runs or 'no'} runs{f', fewer than {MIN_SERVING_RUNS}' if runs else ''})")
    source = _serving_checks().get("_source", SERVING_FILE.name)
    alone = ", the physics alone" if physics_only else ""
    return f"TPOT against end-to-end runs under {engine} the planner never saw ({source}{alone}): " + "; ".join(parts)


@dataclass(frozen=True)
class SpeedupBand:
    """How far the zero-shot speculative speedups of one batch-size range fell from published ones."""
    batch_min: int
    batch_max: int | None  # None: and above
    n: int
    mape: float
    median_error: float  # predicted / measured - 1, median: > 0 where the planner was optimistic
    worst: float

    @property
    def span(self) -> str:
        return f"B {self.batch_min}-{self.batch_max}" if self.batch_max is not None else f"B >= {self.batch_min}"

    def describe(self) -> str:
        lean = "optimistic" if self.median_error > 0 else "pessimistic"
        return f"{self.span}: +-{self.mape:.0%} ({self.n} rows, median {self.median_error:+.0%}: {lean})"


def speedup_bands(physics_only: bool = False) -> list[SpeedupBand]:
    """The speedup bands per batch-size range that calibration.transfer wrote (empty before it has): the planner's
    (the physics and the learned layer), or with ``physics_only`` the physics alone's on the same rows."""
    key = "_speedup_by_batch_physics_only" if physics_only else "_speedup_by_batch"
    return [SpeedupBand(int(b["batch_min"]), None if b.get("batch_max") is None else int(b["batch_max"]), int(b["n"]),
                        float(b["mape"]), float(b["median_error"]), float(b["worst"]))
            for b in _bands().get(key) or [] if b.get("n")]


def speedup_band_at(batch_sizes, physics_only: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """(MAPE, median signed error) of the published speedup rows in each batch size's range (NaN outside)."""
    b = np.asarray(batch_sizes, dtype=float)
    mape, median = np.full(b.shape, np.nan), np.full(b.shape, np.nan)
    for band in speedup_bands(physics_only):
        inside = (b >= band.batch_min) & ((b <= band.batch_max) if band.batch_max is not None else True)
        mape[inside], median[inside] = band.mape, band.median_error
    return mape, median


def speedup_parts_text(method: str) -> str:
    """Where sources publish a speculative step's parts for this draft method: each part's median error
    and the speedup optimism they add up to ("" when none do; calibration/transfer_components.py)."""
    p = (_bands().get("_speedup_parts") or {}).get(method)
    m = (p or {}).get("median") or {}
    if not all(k in m for k in ("plain", "draft", "verify", "step")):
        return ""
    optimism = (1 + m["plain"]) / (1 + m["step"]) - 1
    return (f"published steps by part for {p['label']} ({p['n']} rows): the planner's draft passes {m['draft']:+.0%},"
            f" verify {m['verify']:+.0%}, plain step {m['plain']:+.0%} against the measurements (medians), its"
            f" speedups there {optimism:+.0%} optimistic")


def speedup_bands_text(physics_only: bool = False) -> str:
    """One line: the published speedup error by batch-size range, or why there is none."""
    bands = speedup_bands(physics_only)
    if not bands:
        return "no published speedup rows scored yet (python -m calibration.transfer)"
    n = sum(b.n for b in bands)
    who = "the physics alone, " if physics_only else ""
    return (f"{who}zero-shot against {n} published speedups over plain decoding: "
            + "; ".join(b.describe() for b in bands) + f" ({_bands().get('_source', 'the published corpus')})")
