"""The engine being simulated: its settings ([serving]), the KV block budget, the CUDA graphs a K table needs.

Step times come from :mod:`simulator.serving.pricer` (its tables, priced from these settings).

KV cache: blocks of ``block_size`` tokens per GPU; capacity = memory_utilization x device memory
minus target weights, draft weights and the activation buffer of the largest step, divided by the
bytes of one block (target KV + draft KV when there is a draft).
"""
from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass

import numpy as np
import pandas as pd

from simulator.errors import PlannerError
from simulator.physics.memory import kv_budget_bytes, kv_bytes_per_sequence
from simulator.plan.policies import PolicySettings
from simulator.specs.engines import SERVING_KEYS, serving_default
from simulator.specs.scenario import NUM, Scenario, check_table

# vLLM's default cudagraph capture sizes (V1): 1, 2, 4, then every 8 up to 512.
VLLM_CAPTURE_SIZES = (1, 2, 4) + tuple(range(8, 513, 8))


@dataclass(frozen=True)
class EngineConfig:
    """Engine settings ([serving] section). Host time per step, eager launch cost, CUDA-graph sizes and,
    where the scenario sets none, the running-request cap and step token budget come from the scenario's
    engine profile (``simulator/data/engines``, [serving] by GPU memory; :func:`engine_from_scenario`);
    the overheads here are extra terms on top of it (0 by default). The two defaults below apply only to
    a profile without [serving] (vLLM V0's 256 sequences; a budget of 8192 tokens)."""

    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    block_size: int = 16
    prefill: str = "chunked"  # or "whole"
    cuda_graphs: bool = True
    cuda_graph_sizes: tuple = VLLM_CAPTURE_SIZES
    eager_overhead_per_kernel_s: float | None = None  # None: the engine profile's eager launch time
    schedule_overhead_s: float = 0.0  # extra host time per step beyond the engine profile
    schedule_overhead_per_seq_s: float = 0.0
    spec_k0_overhead_frac: float = 0.02  # assumed: DSD machinery on at K = 0 (bookkeeping, rejection sampler)
    spec_k0_overhead_s: float = 0.0
    # the engine's own cap on running requests once it speculates, where the scenario sets none ([serving] or
    # [traffic] max_num_seqs): SGLang's --max-running-requests default with speculation (engine profile
    # [speculative] max_running_default); 0: none
    spec_max_num_seqs: int = 0
    # policy knobs (the policies read them off this object; defaults live with the policies)
    fixed_k: int | None = PolicySettings.fixed_k  # None: the scenario's fixed_k
    cutoff_batch_size: int | None = PolicySettings.cutoff_batch_size  # None: where fixed K stops beating plain
    adapt_ewma: float = PolicySettings.adapt_ewma
    per_request_ewma: float = PolicySettings.per_request_ewma
    per_request_min_prob: float = PolicySettings.per_request_min_prob

    def __post_init__(self):
        sizes = tuple(sorted(int(s) for s in self.cuda_graph_sizes))
        object.__setattr__(self, "cuda_graph_sizes", sizes)
        checks = [
            (self.max_num_seqs >= 1, "max_num_seqs must be >= 1"),
            (self.spec_max_num_seqs >= 0, "spec_max_num_seqs must be >= 0"),
            (self.max_num_batched_tokens >= 1, "max_num_batched_tokens must be >= 1"),
            (self.block_size >= 1, "block_size must be >= 1"),
            (self.prefill in ("chunked", "whole"), f"prefill must be 'chunked' or 'whole', got '{self.prefill}'"),
            (not sizes or sizes[0] >= 1, "cuda_graph_sizes must be >= 1"),
            (min(self.eager_overhead_per_kernel_s or 0.0, self.schedule_overhead_s, self.schedule_overhead_per_seq_s,
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

    def pad_tokens_array(self, tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`pad_tokens` of an integer array, elementwise: (padded, captured)."""
        tokens = np.asarray(tokens, dtype=np.intp)
        sizes = np.asarray(self.cuda_graph_sizes, dtype=np.intp)
        if not self.cuda_graphs or not sizes.size:
            return tokens, np.zeros(tokens.shape, dtype=bool)
        graph = tokens <= sizes[-1]
        return np.where(graph, sizes[np.minimum(np.searchsorted(sizes, tokens), sizes.size - 1)], tokens), graph


SERVING_SCHEMA = {"max_num_seqs": int, "max_num_batched_tokens": int, "block_size": int, "prefill": str,
                  "cuda_graphs": bool, "cuda_graph_sizes": list, "eager_overhead_per_kernel_s": NUM,
                  "schedule_overhead_s": NUM, "schedule_overhead_per_seq_s": NUM, "spec_k0_overhead_frac": NUM,
                  "spec_k0_overhead_s": NUM, "fixed_k": int, "cutoff_batch_size": int, "adapt_ewma": NUM,
                  "per_request_ewma": NUM, "per_request_min_prob": NUM}


def engine_from_scenario(sc: Scenario, **overrides) -> EngineConfig:
    table = dict(sc.extra.get("serving") or {})
    check_table(table, SERVING_SCHEMA, sc.origin, "serving")
    if "cuda_graph_sizes" in table:
        sizes = table["cuda_graph_sizes"]
        if not all(isinstance(s, int) and not isinstance(s, bool) and s >= 1 for s in sizes):
            raise PlannerError(f"{sc.origin}: key 'serving.cuda_graph_sizes' must be a list of integers >= 1")
    table.update({k: v for k, v in overrides.items() if v is not None})
    eng = sc.engine
    traffic_cap = "max_num_seqs" in (sc.extra.get("traffic") or {})
    if eng is not None and eng.spec_max_running and "max_num_seqs" not in table and not traffic_cap:
        table.setdefault("spec_max_num_seqs", eng.spec_max_running)
    for key in SERVING_KEYS:  # the engine's own default on this GPU where the scenario sets none
        default = serving_default(eng, key, sc.hardware.memory_bytes, sc.hardware.name)
        if key not in table and default is not None:
            table[key] = default
    if "cuda_graph_sizes" not in table and eng is not None and eng.size_unit == "tokens" and eng.capture_sizes:
        table["cuda_graph_sizes"] = list(eng.capture_sizes)
    return EngineConfig(**table)



def running_cap(engine: EngineConfig, workload, speculative: bool) -> int:
    """Most sequences the engine runs at once: the workload's cap ([traffic] or [serving] max_num_seqs, else
    the engine's default), and with a draft loaded at most the engine's own default with speculation when
    the scenario sets no cap (SGLang resets --max-running-requests to 48 then)."""
    cap = int(workload.max_num_seqs or engine.max_num_seqs)
    if speculative and engine.spec_max_num_seqs:
        cap = min(cap, int(engine.spec_max_num_seqs))
    return cap


def kv_capacity_blocks(sc: Scenario, engine: EngineConfig, speculative: bool, max_tokens_per_step: int) -> tuple[int, float]:
    """(blocks per GPU, bytes per block) left after weights, draft weights and activations."""
    m, dep = sc.model, sc.deployment
    block = float(kv_bytes_per_sequence(sc.draft, m, dep, engine.block_size, speculative))
    usable = float(kv_budget_bytes(sc.draft, m, dep, sc.hardware.memory_bytes, speculative, max_tokens_per_step))
    if usable < block:
        raise PlannerError(f"{sc.name}: no memory left for the KV cache on {sc.hardware.name} x{dep.tp}"
                           f" ({usable / 1e9:.1f} GB per GPU after weights and activations)")
    return int(usable // block), block


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
