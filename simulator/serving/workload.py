"""Traffic offered to the serving simulation: request length distributions, acceptance categories,
arrival processes, and the [traffic] section of a scenario.

Acceptance: each request belongs to a category whose per-position rates are the scenario's rates
times a scale (or given explicitly). :func:`draw_requests` draws a run's lengths, categories,
arrival times and accept/reject uniforms up front, one RNG stream per purpose, so the same seed
gives every policy the same requests (see :mod:`simulator.serving.loop`).
"""
from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass

import numpy as np

from simulator.errors import PlannerError, did_you_mean
from simulator.files import read_input_text, resolve_named_path
from simulator.serving.engine import engine_from_scenario
from simulator.specs.scenario import NUM, Scenario, check_table

ARRIVALS = ("poisson", "bursty", "closed", "waves")
DISTS = ("fixed", "uniform", "lognormal", "pareto", "data")
MAX_LENGTH = 1 << 30  # tokens: the cap LengthDist.max defaults to


@dataclass(frozen=True)
class LengthDist:
    """A token-length distribution; every sample is an integer in [min, max].

    kind: fixed (value) | uniform (low..high, inclusive) | lognormal (median, sigma; heavy right
    tail, e.g. RL rollouts) | pareto (scale = smallest value, alpha; P(X > x) = (scale/x)^alpha)
    | data (values, sampled with replacement; or path + column of a CSV file).
    """

    kind: str = "fixed"
    value: int = 0
    low: int = 1
    high: int = 1
    median: float = 0.0
    sigma: float = 0.0
    scale: float = 0.0
    alpha: float = 0.0
    min: int = 1
    max: int = MAX_LENGTH
    values: tuple = ()

    def __post_init__(self):
        if self.kind not in DISTS:
            raise PlannerError(f"length distribution '{self.kind}' unknown{did_you_mean(self.kind, DISTS)}")
        bad = {"fixed": self.value < 1, "uniform": not 1 <= self.low <= self.high,
               "lognormal": self.median <= 0 or self.sigma < 0, "pareto": self.scale <= 0 or self.alpha <= 0,
               "data": not self.values or min(self.values) < 1}[self.kind]
        if bad or self.min < 1 or self.max < self.min:
            raise PlannerError(f"length distribution {self.describe()}: parameters out of range"
                               " (lengths are >= 1 token, min <= max)")

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        if self.kind == "fixed":
            x = np.full(n, float(self.value))
        elif self.kind == "uniform":
            x = rng.integers(self.low, self.high + 1, n).astype(float)
        elif self.kind == "lognormal":
            x = np.round(self.median * np.exp(self.sigma * rng.standard_normal(n)))
        elif self.kind == "pareto":
            x = np.round(self.scale * (1.0 - rng.random(n)) ** (-1.0 / self.alpha))
        else:
            x = rng.choice(np.asarray(self.values, dtype=float), n)
        return np.clip(x, self.min, self.max).astype(np.int64)

    @property
    def upper(self) -> int:
        """The largest length this distribution can produce."""
        top = {"fixed": self.value, "uniform": self.high, "data": max(self.values or (1,))}.get(self.kind, self.max)
        return int(min(max(top, self.min), self.max))

    def describe(self) -> str:
        cap = f", cap {self.max}" if self.max < (1 << 30) else ""
        return {"fixed": f"fixed {self.value}", "uniform": f"uniform {self.low}-{self.high}",
                "lognormal": f"lognormal median {self.median:g} sigma {self.sigma:g}{cap}",
                "pareto": f"pareto scale {self.scale:g} alpha {self.alpha:g}{cap}",
                "data": f"data ({len(self.values)} values)"}.get(self.kind, self.kind)


LENGTH_SCHEMA = {"dist": str, "value": int, "low": int, "high": int, "median": NUM, "sigma": NUM, "scale": NUM,
                 "alpha": NUM, "min": int, "max": int, "values": list, "path": str, "column": str}


def parse_length(spec, where: str = "length", base_dir: str | None = None) -> LengthDist:
    """An int (fixed), a LengthDist, or a table {dist = "lognormal", median = 2000, sigma = 1.0, max = 32768}."""
    if isinstance(spec, LengthDist):
        return spec
    if isinstance(spec, (int, np.integer)) and not isinstance(spec, bool):
        return _length_dist(where, "fixed", value=int(spec))
    if not isinstance(spec, dict):
        raise PlannerError(f"{where}: expected a token count or a table like"
                           f" {{dist = \"lognormal\", median = 1000, sigma = 1.0}}, got {spec!r}")
    check_table(spec, LENGTH_SCHEMA, where, "dist")
    spec = dict(spec)
    kind = spec.pop("dist", "fixed")
    if "path" in spec:
        path, column = spec.pop("path"), spec.pop("column", None)
        spec["values"] = _read_column(path, column, where, base_dir)
    spec.pop("column", None)
    if "values" in spec:
        vals = spec["values"]
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in vals):
            raise PlannerError(f"{where}: 'values' must be a list of token counts")
        spec["values"] = tuple(int(round(v)) for v in vals)
    for key in ("median", "sigma", "scale", "alpha"):
        if key in spec:
            spec[key] = float(spec[key])
    return _length_dist(where, kind, **spec)


def _length_dist(where: str, kind: str, **fields) -> LengthDist:
    """A LengthDist whose refusal names where it was given (the scenario file and key)."""
    try:
        return LengthDist(kind, **fields)
    except PlannerError as err:
        raise PlannerError(f"{where}: {err}") from None


def _read_column(path: str, column: str | None, where: str, base_dir: str | None) -> list[int]:
    """A column of token counts from a CSV named in a scenario: resolved relative to the scenario's folder,
    a regular UTF-8 file under its cap; messages name the file and the column, never its content."""
    p = resolve_named_path(path, base_dir)
    text = read_input_text(p, "prompt lengths", flag=f"{where}: path")
    try:
        rows = list(csv.DictReader(io.StringIO(text, newline="")))
    except csv.Error:
        raise PlannerError(f"{where}: '{path}' is not a CSV file; give a CSV with a column of token counts") from None
    if not rows:
        raise PlannerError(f"{where}: CSV file '{path}' has no rows")
    named = f"column '{column}'" if column else "the first column"  # a header line is content: never echoed
    column = column or next(iter(rows[0]))
    if column not in rows[0]:
        raise PlannerError(f"{where}: CSV file '{path}' has no column named '{column}'; set column to one in its"
                           " header line")
    try:
        values = [float(r[column]) for r in rows if r[column] not in ("", None)]
    except (ValueError, TypeError):
        raise PlannerError(f"{where}: {named} of '{path}' holds non-numeric values") from None
    if not values or not all(math.isfinite(v) and 0 < v <= MAX_LENGTH for v in values):
        raise PlannerError(f"{where}: {named} of '{path}' must hold finite token counts in [1, {MAX_LENGTH}]"
                           " (found a non-finite, zero or negative one)")
    return [int(v) for v in values]


@dataclass(frozen=True)
class Category:
    """A class of requests with its own acceptance: rates = scenario rates x rate_scale, or given rates."""

    name: str = "default"
    weight: float = 1.0
    rate_scale: float = 1.0
    rates: tuple = ()

    def __post_init__(self):
        if self.weight <= 0 or self.rate_scale < 0:
            raise PlannerError(f"category '{self.name}': weight must be > 0 and rate_scale >= 0")
        if any(not 0 <= r < 1 for r in self.rates):
            raise PlannerError(f"category '{self.name}': rates must lie in [0, 1)")

    def rates_upto(self, base, k_max: int) -> np.ndarray:
        if self.rates:
            r = np.asarray(self.rates, dtype=float)
            r = np.concatenate([r, np.full(max(0, k_max - len(r)), r[-1])])[:k_max]
        else:
            r = base.rates_upto(k_max) * self.rate_scale
        return np.clip(r, 0.0, 0.99)


CATEGORY_SCHEMA = {"name": str, "weight": NUM, "rate_scale": NUM, "rates": list}


@dataclass(frozen=True)
class Workload:
    """Traffic offered to the engine.

    arrival: poisson (rate_per_s) | bursty (gamma inter-arrivals with coefficient of variation
    ``burstiness`` > 1 at mean rate rate_per_s) | closed (``concurrency`` users, each sends its next
    request ``think_time_s`` after the previous one finished) | waves (n_requests prompts submitted
    at once, the client keeps at most ``concurrency`` in flight: RL rollout batches; see
    :meth:`waves`). max_num_seqs: engine limit on running sequences (None: [serving], else the engine
    profile's default for the GPU).
    """

    arrival: str = "poisson"
    rate_per_s: float = 10.0
    burstiness: float = 3.0
    concurrency: int | None = None
    n_requests: int = 1000
    prompt_len: LengthDist | int | dict = 1024
    output_len: LengthDist | int | dict = 256
    max_num_seqs: int | None = None
    categories: tuple = ()
    think_time_s: float = 0.0

    def __post_init__(self):
        set_ = lambda k, v: object.__setattr__(self, k, v)  # noqa: E731  (frozen: normalize once)
        if self.arrival not in ARRIVALS:
            raise PlannerError(f"unknown arrival '{self.arrival}'{did_you_mean(str(self.arrival), ARRIVALS)}")
        if not (isinstance(self.n_requests, (int, np.integer)) and self.n_requests >= 1):
            raise PlannerError(f"n_requests must be an integer >= 1, got {self.n_requests!r}")
        if self.arrival in ("poisson", "bursty") and not (self.rate_per_s > 0 and math.isfinite(self.rate_per_s)):
            raise PlannerError(f"rate_per_s must be > 0 for {self.arrival} arrivals, got {self.rate_per_s}")
        if self.arrival == "bursty" and not self.burstiness > 0:
            raise PlannerError(f"burstiness (coefficient of variation) must be > 0, got {self.burstiness}")
        if self.arrival in ("closed", "waves") and not (self.concurrency and self.concurrency >= 1):
            raise PlannerError(f"{self.arrival} arrivals need concurrency >= 1, got {self.concurrency}")
        if self.max_num_seqs is not None and self.max_num_seqs < 1:
            raise PlannerError(f"max_num_seqs must be >= 1, got {self.max_num_seqs}")
        if self.think_time_s < 0:
            raise PlannerError(f"think_time_s must be >= 0, got {self.think_time_s}")
        set_("prompt_len", parse_length(self.prompt_len, "prompt_len"))
        set_("output_len", parse_length(self.output_len, "output_len"))
        cats = tuple(c if isinstance(c, Category) else _parse_category(c) for c in (self.categories or ()))
        set_("categories", cats or (Category(),))

    @classmethod
    def waves(cls, batch: int, multiplier: int = 20, **kw) -> "Workload":
        """``multiplier x batch`` prompts submitted at once, at most ``batch`` in flight."""
        if batch < 1 or multiplier < 1:
            raise PlannerError(f"waves need batch >= 1 and multiplier >= 1, got {batch},{multiplier}")
        return cls(arrival="waves", concurrency=int(batch), n_requests=int(batch * multiplier), **kw)


def _parse_category(c) -> Category:
    if not isinstance(c, dict):
        raise PlannerError(f"category {c!r}: expected a table with name, weight, rate_scale or rates")
    check_table(c, CATEGORY_SCHEMA, "categories", "traffic.categories")
    c = dict(c)
    if "rates" in c:
        c["rates"] = tuple(float(r) for r in c["rates"])
    return Category(**c)


# --- the [traffic] section ----------------------------------------------------------------------

TRAFFIC_SCHEMA = {"arrival": str, "rate_per_s": NUM, "burstiness": NUM, "concurrency": int, "n_requests": int,
                  "think_time_s": NUM, "max_num_seqs": int, "categories": list, "waves": list,
                  "prompt_len": (int, dict), "output_len": (int, dict)}


def workload_from_scenario(sc: Scenario, **overrides) -> Workload:
    """The [traffic] section as a Workload (max_num_seqs from [serving] unless [traffic] sets it)."""
    table = dict(sc.extra.get("traffic") or {})
    for key, value in table.items():  # check_table cannot name the type "a number or a table"
        if key in ("prompt_len", "output_len") and not (isinstance(value, (int, dict)) and not isinstance(value, bool)):
            raise PlannerError(f"{sc.origin}: key 'traffic.{key}' must be a token count or a table"
                               f" like {{dist = \"lognormal\", median = 1000, sigma = 1.0}}, got {value!r}")
    check_table({k: v for k, v in table.items() if k not in ("prompt_len", "output_len")},
                TRAFFIC_SCHEMA, sc.origin, "traffic")
    base_dir = sc.raw.get("_base_dir")
    for key in ("prompt_len", "output_len"):
        if key in table:
            table[key] = parse_length(table[key], f"{sc.origin}: traffic.{key}", base_dir)
    if "waves" in table:
        waves = table.pop("waves")
        if len(waves) != 2 or not all(isinstance(x, int) and x >= 1 for x in waves):
            raise PlannerError(f"{sc.origin}: key 'traffic.waves' must be [batch, multiplier], got {waves!r}")
        table.setdefault("arrival", "waves")
        table["concurrency"], table["n_requests"] = waves[0], waves[0] * waves[1]
    if "max_num_seqs" not in table:
        table["max_num_seqs"] = engine_from_scenario(sc).max_num_seqs
    table.update({k: v for k, v in overrides.items() if v is not None})
    try:
        return Workload(**table)
    except PlannerError as err:
        raise PlannerError(f"{sc.origin}: [traffic] {err}") from None


# --- the requests of a run ----------------------------------------------------------------------

@dataclass(slots=True)
class Requests:
    """What the seed draws up front (one RNG stream per purpose): the same for every policy."""

    prompt: np.ndarray
    out_len: np.ndarray
    cat: np.ndarray  # category index per request
    rates: np.ndarray  # [n_cat, k_max] per-position acceptance rates
    offsets: np.ndarray  # request i's uniforms start at offsets[i], one per output position (+ K + 1)
    uniforms: np.ndarray
    arrival_times: np.ndarray | None  # open-loop release times; None for closed loops and waves


def draw_requests(sc: Scenario, workload: Workload, seed: int, k_max: int) -> Requests:
    n = int(workload.n_requests)
    rng_len, rng_arr, rng_acc, rng_cat = (np.random.default_rng([seed, i]) for i in range(4))
    prompt = workload.prompt_len.sample(rng_len, n)
    out_len = workload.output_len.sample(rng_len, n)
    cats = workload.categories
    w = np.array([c.weight for c in cats], dtype=float)
    cat = rng_cat.choice(len(cats), n, p=w / w.sum()) if len(cats) > 1 else np.zeros(n, dtype=np.int64)
    rates = np.stack([c.rates_upto(sc.acceptance, max(k_max, 1)) for c in cats])
    offsets = np.concatenate([[0], np.cumsum(out_len + k_max + 1)])
    uniforms = rng_acc.random(int(offsets[-1]), dtype=np.float32)
    if workload.arrival == "poisson":
        times = np.cumsum(rng_arr.exponential(1.0 / workload.rate_per_s, n))
    elif workload.arrival == "bursty":
        shape = 1.0 / workload.burstiness ** 2
        times = np.cumsum(rng_arr.gamma(shape, 1.0 / (workload.rate_per_s * shape), n))
    else:
        times = None
    if times is not None:
        times -= times[0]
    return Requests(prompt, out_len, cat, rates, offsets, uniforms, times)
