"""Step-level simulation of a continuous-batching engine with (dynamic) speculative decoding.

Each engine step schedules the running sequences (decode: K_i + 1 query tokens each, the K_i drafts
plus the bonus/correction position) and, in the token budget left, prompt chunks of waiting
requests; prices the step with the cost model; samples how many drafts each sequence accepts; and
commits tokens. The step time is a table lookup, never a cost-model call:

    step(B, K, L, T) = lin(pad(T)) + attn(B, K+1, L) + K * draft_pass(pad(B), L)
                       + attn_prefill(chunks) + overhead(B) [+ eager launches] [+ DSD-at-K=0 cost]

- lin(T): every operator of the target pass except attention (GEMMs, norms, all-reduce, LM head,
  sampling) at T tokens, precomputed for T = 1..T_max (they depend on the token count only).
- attn(B, q, L): decode attention of B sequences with q queries over L cached keys, precomputed on
  a grid of context buckets and interpolated linearly in L (its FLOPs and bytes are linear in L,
  so the mean context of the batch prices the whole batch).
- draft_pass(B, L): one draft pass (EAGLE/MTP head, draft model, n-gram host cost), same table.
- pad(T): the smallest captured CUDA-graph size >= T (vLLM default capture sizes 1, 2, 4, 8, ...,
  512); above the largest size the pass runs eager and pays ``eager_overhead_per_kernel_s`` per
  kernel of the target pass.
- Prefill is chunked (vLLM V1 style): decode tokens are scheduled first, prompt chunks fill the
  rest of ``max_num_batched_tokens``; the chunk's GEMM tokens join T and its attention (q = chunk
  over the p tokens already cached, causal) is priced with the cost model's attention operator.
  ``prefill = "whole"`` schedules prompts unsplit (at least one per step). The step that finishes a
  prompt samples the request's first token (TTFT).

KV cache: blocks of ``block_size`` tokens per GPU; capacity = memory_utilization x device memory
minus target weights, draft weights and the activation buffer of the largest step, divided by the
bytes of one block (target KV + draft KV when there is a draft). Every scheduled sequence holds
ceil((cached + q) / block_size) blocks: speculation reserves its K + 1 slots. When a step would
overflow, the most recently admitted sequences are preempted (recompute: their blocks are freed,
they requeue at the front and re-prefill prompt + generated tokens).

Acceptance: each request belongs to a category whose per-position rates are the scenario's rates
times a scale (or given explicitly). Draft i of a sequence is accepted iff u < a_i and drafts
1..i-1 were; the uniforms u are drawn per request per output position up front, so every policy
sees the same random numbers for the same request (common random numbers make policy comparisons
low-noise), and a step's accept counts are one vectorized comparison over the batch.

Policies: plain (K = 0, no draft loaded); fixed (K = fixed_k); dsd (K*(B) of the predicted table);
dsd-adaptive (EWMA of per-position rates from observed accepts, K* re-solved over the ITL grid);
per-request (K*(B) capped per sequence by its own EWMA acceptance: K_i = largest k with
a_i^k >= per_request_min_prob, at least 1); cutoff (fixed_k while B <= cutoff_batch_size, else 0).
"""
from __future__ import annotations

import csv
import heapq
import math
from bisect import bisect_left
from collections import deque
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np
import pandas as pd

from simulator.physics.layers import attention_op, forward_ops
from simulator.physics.memory import kv_budget_bytes, kv_bytes_per_sequence
from simulator.physics.operators import evaluate
from simulator.physics.draft_cost import draft_pass_cost
from simulator.errors import PlannerError, did_you_mean
from simulator.plan.grid import compute_grid, step_overhead_s
from simulator.specs.scenario import NUM, Scenario, check_table

POLICIES = ("plain", "fixed", "dsd", "dsd-adaptive", "per-request", "cutoff")
ARRIVALS = ("poisson", "bursty", "closed", "waves")
DISTS = ("fixed", "uniform", "lognormal", "pareto", "data")
# vLLM's default cudagraph capture sizes (V1): 1, 2, 4, then every 8 up to 512.
VLLM_CAPTURE_SIZES = (1, 2, 4) + tuple(range(8, 513, 8))

SUMMARY_KEYS = ("policy", "n_requests", "output_tokens", "throughput_tok_s", "tokens_per_s_per_user",
                "ttft_p50_s", "ttft_p90_s", "ttft_p99_s", "tpot_p50_s", "tpot_p90_s", "tpot_p99_s",
                "itl_p50_s", "itl_p99_s", "makespan_s", "mean_batch_size", "mean_k", "kv_peak_occupancy")


# --- workload specs -----------------------------------------------------------------------------

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
    max: int = 1 << 30
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
        return LengthDist("fixed", value=int(spec))
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
    return LengthDist(kind, **spec)


def _read_column(path: str, column: str | None, where: str, base_dir: str | None) -> list[int]:
    p = Path(path)
    if not p.is_absolute() and base_dir and (Path(base_dir) / p).exists():
        p = Path(base_dir) / p
    try:
        with open(p, newline="") as fh:
            rows = list(csv.DictReader(fh))
    except OSError:
        raise PlannerError(f"{where}: cannot read CSV file '{path}'") from None
    if not rows:
        raise PlannerError(f"{where}: CSV file '{path}' has no rows")
    column = column or next(iter(rows[0]))
    if column not in rows[0]:
        raise PlannerError(f"{where}: CSV file '{path}' has no column '{column}' (has: {', '.join(rows[0])})")
    try:
        return [int(float(r[column])) for r in rows if r[column] not in ("", None)]
    except ValueError:
        raise PlannerError(f"{where}: column '{column}' of '{path}' holds non-numeric values") from None


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
    :meth:`waves`). max_num_seqs: engine limit on running sequences (None: [serving], else 256).
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


@dataclass(frozen=True)
class EngineConfig:
    """Engine settings ([serving] section). Defaults: vLLM-V1-like; overheads are assumptions."""

    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    block_size: int = 16
    prefill: str = "chunked"  # or "whole"
    cuda_graphs: bool = True
    cuda_graph_sizes: tuple = VLLM_CAPTURE_SIZES
    eager_overhead_per_kernel_s: float = 1.5e-6  # assumed: host launch not hidden behind the GPU
    schedule_overhead_s: float = 1e-4  # assumed: scheduler + input preparation per step
    schedule_overhead_per_seq_s: float = 0.0
    spec_k0_overhead_frac: float = 0.02  # assumed: DSD machinery on at K = 0 (bookkeeping, rejection sampler)
    spec_k0_overhead_s: float = 0.0
    fixed_k: int | None = None  # None: the scenario's fixed_k
    cutoff_batch_size: int | None = None  # None: largest B where fixed K beats plain in the predicted table
    adapt_ewma: float = 0.05
    per_request_ewma: float = 0.3
    per_request_min_prob: float = 0.3

    def __post_init__(self):
        sizes = tuple(sorted(int(s) for s in self.cuda_graph_sizes))
        object.__setattr__(self, "cuda_graph_sizes", sizes)
        checks = [
            (self.max_num_seqs >= 1, "max_num_seqs must be >= 1"),
            (self.max_num_batched_tokens >= 1, "max_num_batched_tokens must be >= 1"),
            (self.block_size >= 1, "block_size must be >= 1"),
            (self.prefill in ("chunked", "whole"), f"prefill must be 'chunked' or 'whole', got '{self.prefill}'"),
            (not sizes or sizes[0] >= 1, "cuda_graph_sizes must be >= 1"),
            (min(self.eager_overhead_per_kernel_s, self.schedule_overhead_s, self.schedule_overhead_per_seq_s,
                 self.spec_k0_overhead_frac, self.spec_k0_overhead_s) >= 0, "overheads must be >= 0"),
            (self.fixed_k is None or self.fixed_k >= 0, "fixed_k must be >= 0"),
            (self.cutoff_batch_size is None or self.cutoff_batch_size >= 0, "cutoff_batch_size must be >= 0"),
            (0 < self.adapt_ewma <= 1 and 0 < self.per_request_ewma <= 1, "EWMA weights must be in (0, 1]"),
            (0 <= self.per_request_min_prob <= 1, "per_request_min_prob must be in [0, 1]"),
        ]
        for ok, msg in checks:
            if not ok:
                raise PlannerError(f"[serving] {msg}")

    def pad_tokens(self, tokens: int) -> tuple[int, bool]:
        """(tokens the pass runs at, whether it runs as a captured graph)."""
        sizes = self.cuda_graph_sizes
        if not self.cuda_graphs or not sizes or tokens > sizes[-1]:
            return tokens, False
        return sizes[bisect_left(sizes, tokens)], True


SERVING_SCHEMA = {"max_num_seqs": int, "max_num_batched_tokens": int, "block_size": int, "prefill": str,
                  "cuda_graphs": bool, "cuda_graph_sizes": list, "eager_overhead_per_kernel_s": NUM,
                  "schedule_overhead_s": NUM, "schedule_overhead_per_seq_s": NUM, "spec_k0_overhead_frac": NUM,
                  "spec_k0_overhead_s": NUM, "fixed_k": int, "cutoff_batch_size": int, "adapt_ewma": NUM,
                  "per_request_ewma": NUM, "per_request_min_prob": NUM}
TRAFFIC_SCHEMA = {"arrival": str, "rate_per_s": NUM, "burstiness": NUM, "concurrency": int, "n_requests": int,
                  "think_time_s": NUM, "max_num_seqs": int, "categories": list, "waves": list,
                  "prompt_len": (int, dict), "output_len": (int, dict)}


def engine_from_scenario(sc: Scenario, **overrides) -> EngineConfig:
    table = dict(sc.extra.get("serving") or {})
    check_table(table, SERVING_SCHEMA, sc.origin, "serving")
    if "cuda_graph_sizes" in table:
        sizes = table["cuda_graph_sizes"]
        if not all(isinstance(s, int) and not isinstance(s, bool) and s >= 1 for s in sizes):
            raise PlannerError(f"{sc.origin}: key 'serving.cuda_graph_sizes' must be a list of integers >= 1")
    table.update({k: v for k, v in overrides.items() if v is not None})
    return EngineConfig(**table)


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


# --- step pricing tables ------------------------------------------------------------------------

class StepPricer:
    """Precomputed step-time tables for one scenario and engine (see the module docstring)."""

    def __init__(self, sc: Scenario, engine: EngineConfig, k_max: int, max_seqs: int, max_context: int,
                 speculative: bool):
        self.sc, self.engine, self.k_max, self.speculative = sc, engine, k_max, speculative
        m, dep, hw, prof = sc.model, sc.deployment, sc.hardware, sc.profile
        b_top = max(max_seqs, engine.pad_tokens(max_seqs)[0])
        self.b_top = b_top
        t_top = max(engine.max_num_batched_tokens, max_seqs * (k_max + 1))
        self.t_top = engine.pad_tokens(t_top)[0]
        # lin(T): all target ops but attention, at T = 0..t_top tokens (T = 0 costs nothing)
        t = np.arange(1, self.t_top + 1, dtype=float)
        ops = [o for o in forward_ops(m, dep, hw, t, 1.0, 0.0) if o.family != "attention"]
        cost = evaluate(ops, hw, dep, prof, t.shape)
        self.lin = np.concatenate([[0.0], cost.total_s])
        full_ops = forward_ops(m, dep, hw, 1.0, 1.0, 1.0)
        self.n_kernels = float(sum(o.kernels * o.count for o in full_ops))
        # decode attention over context buckets (linear in L between buckets)
        top_l = max(int(max_context) + k_max + 2, 64)
        self.ctx = np.unique(np.concatenate([[0.0], np.geomspace(32, top_l, 28)]))
        self._ctx_list = self.ctx.tolist()
        B = np.arange(1, b_top + 1, dtype=float)[:, None, None]
        q = np.arange(1, k_max + 2, dtype=float)[None, :, None]
        L = self.ctx[None, None, :]
        shape = np.broadcast_shapes(B.shape, q.shape, L.shape)
        attn = [o for o in forward_ops(m, dep, hw, B, q, L) if o.family == "attention"]
        self.attn = evaluate(attn, hw, dep, prof, shape).total_s  # [B-1, q-1, iL]
        self._attn_ops_layers = [(o.name, o.count) for o in attn]
        if speculative:
            bb, ll = np.meshgrid(np.arange(1, b_top + 1, dtype=float), self.ctx, indexing="ij")
            per_pass, _ = draft_pass_cost(sc.draft, m, dep, hw, bb, 1.0, ll, prof)
            self.draft = per_pass.total_s  # [B-1, iL], one pass
            # passes per step by K (K for heads and draft models; one host lookup for n-gram)
            _, passes = draft_pass_cost(sc.draft, m, dep, hw, np.ones(1), np.arange(k_max + 1.0), 0.0, prof)
            self.passes = np.broadcast_to(passes, (k_max + 1,)).astype(float).tolist()
        else:
            self.draft = np.zeros((b_top, len(self.ctx)))
            self.passes = [0.0] * (k_max + 1)
        self.overhead_prof = step_overhead_s(prof, np.arange(b_top + 1, dtype=float)[:, None],
                                             np.arange(k_max + 1, dtype=float)[None, :])
        self.overhead_prof = np.broadcast_to(self.overhead_prof, (b_top + 1, k_max + 1))
        self._lin_extra: dict[int, float] = {}

    def _lin(self, tokens: int) -> float:
        if tokens <= self.t_top:
            return self.lin[tokens]
        if tokens not in self._lin_extra:
            sc = self.sc
            ops = [o for o in forward_ops(sc.model, sc.deployment, sc.hardware, float(tokens), 1.0, 0.0)
                   if o.family != "attention"]
            self._lin_extra[tokens] = float(evaluate(ops, sc.hardware, sc.deployment, sc.profile, ()).total_s)
        return self._lin_extra[tokens]

    def _ctx_weight(self, L: float) -> tuple[int, float]:
        j = bisect_left(self._ctx_list, L)
        if j <= 0:
            return 0, 0.0
        if j >= len(self._ctx_list):
            return len(self._ctx_list) - 2, 1.0 + (L - self._ctx_list[-1]) / (self._ctx_list[-1] - self._ctx_list[-2])
        lo, hi = self._ctx_list[j - 1], self._ctx_list[j]
        return j - 1, (L - lo) / (hi - lo)

    def prefill_attention_s(self, chunks: np.ndarray, cached: np.ndarray) -> float:
        """Attention of prompt chunks (q = chunk tokens over the cached ones), launch folded into decode's."""
        sc = self.sc
        m = sc.model
        ops = []
        for name, count in self._attn_ops_layers:
            window = m.sliding_window if name.endswith("sliding") else None
            ops.append(attention_op(m, sc.deployment, 1.0, chunks.astype(float), cached.astype(float), count,
                                    window, name))
        cost = evaluate(ops, sc.hardware, sc.deployment, sc.profile, chunks.shape)
        return float((cost.time_s - cost.launch_s).sum())

    def step_s(self, n_dec: int, k_step: int, tokens: int, mean_ctx: float, spec_mode: bool,
               prefill_attn_s: float) -> tuple[float, int, bool]:
        """Seconds of one step, the tokens the target pass runs at, and whether it ran as a graph."""
        eng = self.engine
        padded, graph = eng.pad_tokens(tokens)
        time = self._lin(padded) + prefill_attn_s
        if not graph:
            time += self.n_kernels * eng.eager_overhead_per_kernel_s
        if n_dec:
            j, w = self._ctx_weight(mean_ctx)
            row = self.attn[n_dec - 1, k_step]
            time += row[j] + w * (row[j + 1] - row[j])
            if k_step:
                b_pad = min(eng.pad_tokens(n_dec)[0], self.b_top)
                d = self.draft[b_pad - 1]
                time += self.passes[k_step] * (d[j] + w * (d[j + 1] - d[j]))
        time += eng.schedule_overhead_s + eng.schedule_overhead_per_seq_s * n_dec \
            + self.overhead_prof[min(n_dec, self.b_top), k_step]
        if spec_mode and k_step == 0:
            time = time * (1.0 + eng.spec_k0_overhead_frac) + eng.spec_k0_overhead_s
        return time, padded, graph


def kv_capacity_blocks(sc: Scenario, engine: EngineConfig, speculative: bool, max_tokens_per_step: int) -> tuple[int, float]:
    """(blocks per GPU, bytes per block) left after weights, draft weights and activations."""
    m, dep = sc.model, sc.deployment
    block = float(kv_bytes_per_sequence(sc.draft, m, dep, engine.block_size, speculative))
    usable = float(kv_budget_bytes(sc.draft, m, dep, sc.hardware.memory_bytes, speculative, max_tokens_per_step))
    if usable < block:
        raise PlannerError(f"{sc.name}: no memory left for the KV cache on {sc.hardware.name} x{dep.tp}"
                           f" ({usable / 1e9:.1f} GB per GPU after weights and activations)")
    return int(usable // block), block


# --- policies -----------------------------------------------------------------------------------

def parse_policy(policy: str) -> tuple[str, int | None]:
    """'dsd' -> ('dsd', None); 'fixed:4' -> ('fixed', 4); 'cutoff:64' -> ('cutoff', 64)."""
    text = str(policy).strip()
    name, _, arg = text.partition(":")
    if name not in POLICIES:
        raise PlannerError(f"unknown policy '{text}'{did_you_mean(name, POLICIES)}")
    if arg:
        if name not in ("fixed", "cutoff") or not arg.isdigit():
            raise PlannerError(f"policy '{text}': only fixed:K and cutoff:B take a number")
        return name, int(arg)
    return name, None


@dataclass
class PolicyTables:
    """K*(B) of the predicted table and the ITL grid the adaptive policies re-solve over."""

    kstar: np.ndarray  # index B = 0..max_seqs
    itl: np.ndarray  # [B, K] (row 0 unused)
    fits: np.ndarray  # [B, K]
    fixed_beats_plain_upto: int


def policy_tables(sc: Scenario, max_seqs: int, k_max: int) -> PolicyTables:
    b = np.arange(1, max_seqs + 1)
    g = compute_grid(sc, batch_sizes=b, ks=np.arange(k_max + 1))
    # The grid's memory check assumes every sequence at the scenario's context_len; in serving the
    # KV block budget is the memory limit, so K* is the goodput argmax over all K.
    kstar = np.concatenate([[0], g.ks[np.argmax(g.goodput_per_seq, axis=1)]])
    itl = np.vstack([np.full(k_max + 1, np.inf), g.itl_s])
    fits = np.ones_like(itl, dtype=bool)
    fk = min(sc.fixed_k, k_max)
    wins = g.goodput_per_seq[:, fk] >= g.goodput_per_seq[:, 0]
    upto = int(b[wins].max()) if wins.any() and wins[0] else 0
    if wins.any() and not wins.all():
        upto = int(b[np.argmin(wins)] - 1)  # first B where fixed K stops winning
    elif wins.all():
        upto = int(max_seqs)
    return PolicyTables(kstar, itl, fits, upto)


def policy_k_table(sc: Scenario, policy: str, max_seqs: int, engine: EngineConfig | None = None) -> np.ndarray:
    """K for B = 1..max_seqs of a table policy (plain, fixed, dsd, cutoff); adaptive ones start from dsd's."""
    engine = engine or EngineConfig()
    name, arg = parse_policy(policy)
    fixed_k = arg if name == "fixed" and arg is not None else (engine.fixed_k if engine.fixed_k is not None
                                                              else sc.fixed_k)
    b = np.arange(1, max_seqs + 1)
    if name == "plain":
        return np.zeros(max_seqs, dtype=int)
    if name == "fixed":
        return np.full(max_seqs, fixed_k, dtype=int)
    tables = policy_tables(sc, max_seqs, max(sc.k_max, fixed_k))
    if name == "cutoff":
        cut = arg if arg is not None else (engine.cutoff_batch_size if engine.cutoff_batch_size is not None
                                           else tables.fixed_beats_plain_upto)
        return np.where(b <= cut, fixed_k, 0)
    return tables.kstar[1:].astype(int)


def required_graphs(k_by_batch, engine: EngineConfig | None = None) -> pd.DataFrame:
    """CUDA graphs a K table needs: one row per (captured tokens, K) with its batch-size range.

    ``k_by_batch``: K for B = 1..n (index 0 is B = 1). Tokens B * (K + 1) above the largest capture
    size run eager (``captured`` False).
    """
    engine = engine or EngineConfig()
    rows: dict[tuple[int, int], list[int]] = {}
    for b, k in enumerate(np.asarray(k_by_batch, dtype=int), start=1):
        tokens, graph = engine.pad_tokens(int(b * (k + 1)))
        key = (tokens if graph else -1, int(k))
        rows.setdefault(key, []).append(b)
    out = [{"tokens": t if t >= 0 else None, "k": k, "batch_min": min(bs), "batch_max": max(bs),
            "captured": t >= 0} for (t, k), bs in rows.items()]
    return pd.DataFrame(out).sort_values(["captured", "k", "batch_min"], ascending=[False, True, True]) \
        .reset_index(drop=True)


# --- the simulation -----------------------------------------------------------------------------

@dataclass
class ServingResult:
    policy: str
    summary: dict
    requests: pd.DataFrame
    steps: pd.DataFrame
    kv_capacity_blocks: int
    engine: EngineConfig
    workload: Workload

    @cached_property
    def graphs(self) -> pd.DataFrame:
        """(tokens, K) CUDA graphs the run used, with step counts; eager steps have tokens = None."""
        s = self.steps[self.steps.batch_size > 0]
        df = s.assign(tokens_run=np.where(s.graph, s.padded_tokens, -1)).groupby(["tokens_run", "k"]).size()
        df = df.reset_index(name="steps").rename(columns={"tokens_run": "tokens"})
        df["captured"] = df.tokens >= 0
        df["tokens"] = df.tokens.where(df.captured, None)
        return df


def _percentile(x: np.ndarray, q) -> np.ndarray:
    return np.percentile(x, q) if len(x) else np.full(len(q), np.nan)


def _weighted_percentile(x: np.ndarray, w: np.ndarray, q) -> np.ndarray:
    if not len(x) or w.sum() <= 0:
        return np.full(len(q), np.nan)
    order = np.argsort(x, kind="stable")
    cw = np.cumsum(w[order])
    pos = np.searchsorted(cw, np.asarray(q) / 100.0 * cw[-1], side="left")
    return x[order][np.minimum(pos, len(x) - 1)]


def simulate(scenario: Scenario, policy: str = "dsd", workload: Workload | None = None, seed: int = 0,
             engine: EngineConfig | None = None) -> ServingResult:
    """Run the workload through the engine under ``policy``; see the module docstring.

    ``workload``: default the scenario's [traffic] section; ``engine``: default its [serving] section.
    The same seed draws the same requests (lengths, categories, arrivals, acceptance uniforms) for
    every policy.
    """
    sc = scenario
    name, arg = parse_policy(policy)
    engine = engine or engine_from_scenario(sc)
    workload = workload or workload_from_scenario(sc)
    max_seqs = int(workload.max_num_seqs or engine.max_num_seqs)
    if workload.arrival in ("closed", "waves"):
        max_seqs = min(max_seqs, int(workload.concurrency))
    fixed_k = arg if name == "fixed" and arg is not None else (engine.fixed_k if engine.fixed_k is not None
                                                              else sc.fixed_k)
    k_max = max(sc.k_max, fixed_k)
    speculative = name != "plain"
    bs = engine.block_size

    # --- requests (one RNG stream per purpose: the same seed gives the same requests for every policy)
    n = int(workload.n_requests)
    rng_len, rng_arr, rng_acc, rng_cat = (np.random.default_rng([seed, i]) for i in range(4))
    prompt = workload.prompt_len.sample(rng_len, n)
    out_len = workload.output_len.sample(rng_len, n)
    cats = workload.categories
    w = np.array([c.weight for c in cats], dtype=float)
    cat = rng_cat.choice(len(cats), n, p=w / w.sum()) if len(cats) > 1 else np.zeros(n, dtype=np.int64)
    rates = np.stack([c.rates_upto(sc.acceptance, max(k_max, 1)) for c in cats])  # [n_cat, k_max]
    offsets = np.concatenate([[0], np.cumsum(out_len + k_max + 1)])
    uniforms = rng_acc.random(int(offsets[-1]), dtype=np.float32)

    max_context = int((prompt + out_len).max())
    tokens_cap = max(engine.max_num_batched_tokens, max_seqs * (k_max + 1))
    cap, block_bytes = kv_capacity_blocks(sc, engine, speculative, tokens_cap)
    need_max = -(-(max_context + k_max + 1) // bs)
    if need_max > cap:
        raise PlannerError(f"{sc.name}: a request of {max_context} tokens needs {need_max} KV blocks, the cache"
                           f" holds {cap} ({cap * bs} tokens per GPU); lower the length cap or add GPUs")

    pricer = StepPricer(sc, engine, k_max, max_seqs, max_context, speculative)
    tables = policy_tables(sc, max_seqs, k_max) if name in ("dsd", "dsd-adaptive", "per-request", "cutoff") else None
    cutoff = (arg if arg is not None else engine.cutoff_batch_size if engine.cutoff_batch_size is not None
              else tables.fixed_beats_plain_upto) if name == "cutoff" else 0
    rate_hat = sc.acceptance.rates_upto(max(k_max, 1)).copy()
    ks_axis = np.arange(k_max + 1)

    # --- arrivals
    pending: list[tuple[float, int]] = []  # heap of (release time, request)
    if workload.arrival == "poisson":
        times = np.cumsum(rng_arr.exponential(1.0 / workload.rate_per_s, n))
    elif workload.arrival == "bursty":
        shape = 1.0 / workload.burstiness ** 2
        times = np.cumsum(rng_arr.gamma(shape, 1.0 / (workload.rate_per_s * shape), n))
    else:
        times = None
    if times is not None:
        times -= times[0]
        pending = [(float(t), i) for i, t in enumerate(times)]  # sorted: already a heap
        next_closed = n
    else:
        first = min(int(workload.concurrency), n)
        pending = [(0.0, i) for i in range(first)]
        next_closed = first
    closed = times is None
    think = workload.think_time_s if workload.arrival == "closed" else 0.0

    # --- per-request state
    arrival = np.full(n, np.nan)
    gen = np.zeros(n, dtype=np.int64)  # output tokens generated
    cached = np.zeros(n, dtype=np.int64)  # tokens in the KV cache
    target = np.zeros(n, dtype=np.int64)  # tokens to compute before decoding (prompt + generated at admission)
    first_tok = np.full(n, np.nan)
    finish = np.full(n, np.nan)
    preempted = np.zeros(n, dtype=np.int64)
    acc_ewma = np.full(n, float(np.mean(sc.acceptance.rates_upto(max(fixed_k, 1)))))
    waiting: deque[int] = deque()
    running: list[int] = []  # admission order
    decoding = np.zeros(n, dtype=bool)
    n_done = 0
    t = 0.0
    rec: list[tuple] = []
    kv_peak = 0

    while n_done < n:
        while pending and pending[0][0] <= t:
            rt, i = heapq.heappop(pending)
            arrival[i] = rt
            waiting.append(i)
        if not running and not waiting:
            t = pending[0][0]
            continue

        # decode batch and its K
        run = np.fromiter(running, dtype=np.int64, count=len(running))
        dec = run[decoding[run]]
        n_dec = len(dec)
        if n_dec == 0 or name == "plain":
            k_seq = None
            k_step = 0
        elif name == "fixed":
            k_step = fixed_k
            k_seq = None
        elif name == "dsd":
            k_step = int(tables.kstar[n_dec])
            k_seq = None
        elif name == "cutoff":
            k_step = fixed_k if n_dec <= cutoff else 0
            k_seq = None
        elif name == "dsd-adaptive":
            al = np.concatenate([[1.0], 1.0 + np.cumsum(np.cumprod(rate_hat[:k_max]))])
            good = np.where(tables.fits[n_dec], al / tables.itl[n_dec], -np.inf)
            k_step = int(ks_axis[np.argmax(good)])
            k_seq = None
        else:  # per-request
            kb = int(tables.kstar[n_dec])
            if kb == 0:
                k_seq, k_step = None, 0
            else:
                a = np.clip(acc_ewma[dec], 1e-6, 0.999)
                kk = np.floor(np.log(engine.per_request_min_prob) / np.log(a) + 1e-9).astype(np.int64)
                k_seq = np.clip(kk, 1, kb)
                k_step = int(k_seq.max())
        # remaining output caps what a sequence can use (no drafting past its last token is not
        # modelled: engines draft K regardless; the commit is capped below)
        q_dec = (k_seq + 1) if k_seq is not None else np.full(n_dec, k_step + 1, dtype=np.int64)

        # KV: decode sequences reserve K + 1 slots; preempt the newest while over capacity
        held = -(-cached[run] // bs)
        need = held.copy()
        if n_dec:
            need[decoding[run]] = -(-(cached[dec] + q_dec) // bs)
        used = int(need.sum())
        while used > cap and len(running) > 1:
            i = running.pop()
            used -= int(need[len(running)])
            cached[i] = 0
            decoding[i] = False
            preempted[i] += 1
            waiting.appendleft(i)
        if len(running) != len(run):  # recompute the batch after preemption
            run = run[:len(running)]
            keep = decoding[dec]
            dec, q_dec = dec[keep], q_dec[keep]
            if k_seq is not None:
                k_seq = k_seq[keep]
                k_step = int(k_seq.max()) if len(k_seq) else 0
            n_dec = len(dec)
            if n_dec == 0:
                k_step, k_seq = 0, None
            need = need[:len(run)]
        tokens = int(q_dec.sum())
        budget = engine.max_num_batched_tokens - tokens

        # prefill: continue running prefills, then admit waiting requests (FIFO)
        pre_idx: list[int] = []
        pre_chunk: list[int] = []
        for i in (run[~decoding[run]].tolist() if len(run) > n_dec else ()):
            if budget > 0 or (engine.prefill == "whole" and not pre_idx):
                c = int(target[i] - cached[i])
                if engine.prefill == "chunked":
                    c = min(c, budget)
                elif c > budget and pre_idx:
                    break
                extra = -(-(cached[i] + c) // bs) - (-(-cached[i] // bs))
                if used + extra > cap:
                    break
                used += extra
                pre_idx.append(i)
                pre_chunk.append(c)
                budget -= c
        while waiting and len(running) < max_seqs and (budget > 0 or (engine.prefill == "whole" and not pre_idx)):
            i = waiting[0]
            tgt = int(prompt[i] + gen[i])
            c = tgt if engine.prefill == "whole" else min(tgt, budget)
            if engine.prefill == "whole" and c > budget and pre_idx:
                break
            extra = -(-c // bs)
            if used + extra > cap:
                break
            waiting.popleft()
            used += extra
            target[i] = tgt
            running.append(i)
            pre_idx.append(i)
            pre_chunk.append(c)
            budget -= c
        n_pre = len(pre_idx)
        pre_tokens = sum(pre_chunk)
        tokens += pre_tokens
        if tokens == 0:  # nothing fits (cannot happen with the up-front check); avoid spinning
            raise PlannerError("serving simulation stalled: no request fits the KV cache")
        kv_peak = max(kv_peak, used)

        # price the step
        if n_pre:
            pi = np.asarray(pre_idx, dtype=np.int64)
            pc = np.asarray(pre_chunk, dtype=np.int64)
            pre_attn = pricer.prefill_attention_s(pc, cached[pi])
        else:
            pre_attn = 0.0
        mean_ctx = float(cached[dec].sum()) / n_dec if n_dec else 0.0
        dt, padded, graph = pricer.step_s(n_dec, k_step, tokens, mean_ctx, speculative, pre_attn)
        t_end = t + dt

        # accept drafts: draft j of sequence s is accepted iff u < a_j and drafts before it were
        committed = 0
        if n_dec:
            remaining = out_len[dec] - gen[dec]
            if k_step:
                pos = offsets[dec][:, None] + gen[dec][:, None] + np.arange(k_step)[None, :]
                ok = uniforms[pos] < rates[cat[dec], :k_step]
                if k_seq is not None:
                    ok &= np.arange(k_step)[None, :] < k_seq[:, None]
                run_ok = np.logical_and.accumulate(ok, axis=1)
                n_acc = run_ok.sum(axis=1)
                if name == "dsd-adaptive":
                    k_i = np.full(n_dec, k_step) if k_seq is None else k_seq
                    reached = (n_acc[:, None] >= np.arange(k_step)[None, :]) & (np.arange(k_step)[None, :] < k_i[:, None])
                    r_cnt = reached.sum(axis=0)
                    seen = r_cnt > 0
                    obs = run_ok.sum(axis=0)[seen] / r_cnt[seen]
                    rate_hat[:k_step][seen] += engine.adapt_ewma * (obs - rate_hat[:k_step][seen])
                elif name == "per-request":
                    trials = np.minimum(n_acc + 1, k_seq)
                    acc_ewma[dec] += engine.per_request_ewma * (n_acc / trials - acc_ewma[dec])
            else:
                n_acc = np.zeros(n_dec, dtype=np.int64)
            new = np.minimum(n_acc + 1, remaining)
            gen[dec] += new
            cached[dec] += new
            committed += int(new.sum())
        finished = [int(i) for i in dec[gen[dec] >= out_len[dec]]] if n_dec else []
        for i, c in zip(pre_idx, pre_chunk):
            cached[i] += c
            if cached[i] >= target[i]:  # prompt (+ recomputed output) done: sample the next token
                gen[i] += 1
                committed += 1
                if np.isnan(first_tok[i]):
                    first_tok[i] = t_end
                decoding[i] = True
                if gen[i] >= out_len[i]:
                    finished.append(i)
        k_mean = float(k_seq.mean()) if k_seq is not None and len(k_seq) else float(k_step if n_dec else 0)
        rec.append((t, dt, n_dec, n_pre, pre_tokens, tokens, padded, graph, k_step, k_mean, committed, used,
                    len(waiting)))
        if finished:
            done = set(finished)
            running = [i for i in running if i not in done]
            for i in finished:
                finish[i] = t_end
                decoding[i] = False
                cached[i] = 0
                if closed and next_closed < n:
                    heapq.heappush(pending, (t_end + think, next_closed))
                    next_closed += 1
            n_done += len(finished)
        t = t_end

    steps = pd.DataFrame(rec, columns=["t_s", "step_s", "batch_size", "n_prefill", "prefill_tokens", "tokens",
                                       "padded_tokens", "graph", "k", "k_mean", "committed", "kv_blocks",
                                       "waiting"])
    steps["kv_occupancy"] = steps.kv_blocks / cap
    requests = pd.DataFrame({
        "request": np.arange(n), "category": [cats[c].name for c in cat], "arrival_s": arrival,
        "prompt_len": prompt, "output_len": out_len, "generated": gen, "first_token_s": first_tok,
        "finish_s": finish, "preemptions": preempted})
    requests["ttft_s"] = requests.first_token_s - requests.arrival_s
    with np.errstate(invalid="ignore", divide="ignore"):
        decode_s = requests.finish_s - requests.first_token_s
        requests["tpot_s"] = np.where(out_len > 1, decode_s / np.maximum(out_len - 1, 1), np.nan)
        requests["tokens_per_s"] = np.where((out_len > 1) & (decode_s > 0), (out_len - 1) / decode_s, np.nan)
    return ServingResult(name if arg is None else f"{name}:{arg}", _summary(name if arg is None else f"{name}:{arg}",
                         requests, steps, cap, kv_peak), requests, steps, cap, engine, workload)


def _summary(policy: str, req: pd.DataFrame, steps: pd.DataFrame, cap: int, kv_peak: int) -> dict:
    ttft = _percentile(req.ttft_s.to_numpy(), [50, 90, 99])
    tp = req.tpot_s.dropna().to_numpy()
    tpot = _percentile(tp, [50, 90, 99])
    dec = steps[steps.batch_size > 0]
    itl = _weighted_percentile(dec.step_s.to_numpy(), dec.batch_size.to_numpy().astype(float), [50, 99])
    makespan = float(req.finish_s.max() - req.arrival_s.min())
    out = int(req.output_len.sum())
    w = dec.step_s.to_numpy()
    total_w = w.sum()
    rate = req.tokens_per_s.dropna()
    return {
        "policy": policy, "n_requests": int(len(req)), "output_tokens": out,
        "throughput_tok_s": out / makespan if makespan > 0 else float("nan"),
        "tokens_per_s_per_user": float(rate.mean()) if len(rate) else float("nan"),
        "ttft_p50_s": float(ttft[0]), "ttft_p90_s": float(ttft[1]), "ttft_p99_s": float(ttft[2]),
        "tpot_p50_s": float(tpot[0]), "tpot_p90_s": float(tpot[1]), "tpot_p99_s": float(tpot[2]),
        "itl_p50_s": float(itl[0]), "itl_p99_s": float(itl[1]), "makespan_s": makespan,
        # time-weighted over steps that decode
        "mean_batch_size": float((dec.batch_size * w).sum() / total_w) if total_w > 0 else 0.0,
        "mean_k": float((dec.k_mean * w).sum() / total_w) if total_w > 0 else 0.0,
        "kv_peak_occupancy": kv_peak / cap,
    }


# --- convenience ------------------------------------------------------------------------------

def compare(scenario: Scenario, policies=POLICIES, workload: Workload | None = None, seed: int = 0,
            engine: EngineConfig | None = None) -> pd.DataFrame:
    """One summary row per policy, same requests for all."""
    return pd.DataFrame([simulate(scenario, p, workload=workload, seed=seed, engine=engine).summary
                         for p in policies])


def wave_sweep(scenario: Scenario, batch_sizes, multiplier: int = 20, policies=("plain", "fixed", "dsd"),
               prompt_len=1800, output_len=400, seed: int = 0, engine: EngineConfig | None = None) -> pd.DataFrame:
    """Closed-loop waves (multiplier x B prompts, concurrency B) per batch size and policy."""
    rows = []
    for b in batch_sizes:
        wl = Workload.waves(int(b), multiplier, prompt_len=prompt_len, output_len=output_len,
                            max_num_seqs=max(int(b), 1))
        for p in policies:
            rows.append({"batch_size": int(b)} | simulate(scenario, p, workload=wl, seed=seed, engine=engine).summary)
    return pd.DataFrame(rows)


def tail_phases(results, batch_threshold: int = 8) -> pd.DataFrame:
    """Split each run at the start of its drain: the last stretch where no request waits and at most
    ``batch_threshold`` sequences decode. Shows where a long-tail rollout spends its makespan."""
    rows = []
    for r in (results if isinstance(results, (list, tuple)) else [results]):
        s = r.steps
        busy = (s.batch_size > batch_threshold) | (s.waiting > 0) | (s.n_prefill > 0)
        start = int(np.flatnonzero(busy.to_numpy())[-1]) + 1 if busy.any() else 0
        tail = s.iloc[start:]
        t0 = float(s.t_s.iloc[0])
        t_tail = float(tail.t_s.iloc[0]) if len(tail) else float(s.t_s.iloc[-1] + s.step_s.iloc[-1])
        w = tail.step_s
        rows.append({"policy": r.policy, "makespan_s": r.summary["makespan_s"], "bulk_s": t_tail - t0,
                     "tail_s": float(w.sum()), "tail_steps": len(tail), "tail_tokens": int(tail.committed.sum()),
                     "tail_mean_k": float((tail.k_mean * w).sum() / w.sum()) if len(tail) else 0.0})
    return pd.DataFrame(rows)
