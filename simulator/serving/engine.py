"""The engine being simulated: its settings ([serving]), the KV block budget, the CUDA graphs a K table needs.

Step times come from :mod:`simulator.serving.pricer` (its tables, priced from these settings).

KV cache: blocks of ``block_size`` tokens per GPU; capacity = memory_utilization x device memory
minus target weights, draft weights and the activation buffer of the largest step, divided by the
bytes of one block (target KV + draft KV when there is a draft).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from simulator.errors import PlannerError
from simulator.physics.engine_time import pad
from simulator.physics.memory import kv_budget_bytes, kv_bytes_per_sequence
from simulator.physics.step_model import ServingExtras
from simulator.plan.policies import PolicySettings
from simulator.specs.engine_files import SERVING_KEYS
from simulator.specs.engines import EngineProfile, serving_default
from simulator.specs.scenario import NUM, Scenario, check_table

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
    # captured sizes, in the engine profile's unit (tokens for vLLM, sequences for SGLang), padded to; None: the
    # engine profile's own (simulator/data/engines [cuda_graphs]); the rule: simulator.physics.engine_time.pad
    cuda_graph_sizes: tuple | None = None
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
        sizes = None if self.cuda_graph_sizes is None else tuple(sorted(int(s) for s in self.cuda_graph_sizes))
        object.__setattr__(self, "cuda_graph_sizes", sizes)
        checks = [
            (self.max_num_seqs >= 1, "max_num_seqs must be >= 1"),
            (self.spec_max_num_seqs >= 0, "spec_max_num_seqs must be >= 0"),
            (self.max_num_batched_tokens >= 1, "max_num_batched_tokens must be >= 1"),
            (self.block_size >= 1, "block_size must be >= 1"),
            (self.prefill in ("chunked", "whole"), f"prefill must be 'chunked' or 'whole', got '{self.prefill}'"),
            (not sizes or sizes[0] >= 1, "cuda_graph_sizes must be >= 1"),
            *[(getattr(self, key) is None or getattr(self, key) >= 0, f"{key} = {getattr(self, key)} must be >= 0")
              for key in ("eager_overhead_per_kernel_s", "schedule_overhead_s", "schedule_overhead_per_seq_s",
                          "spec_k0_overhead_frac", "spec_k0_overhead_s")],
            (self.fixed_k is None or self.fixed_k >= 0, "fixed_k must be >= 0"),
            (self.cutoff_batch_size is None or self.cutoff_batch_size >= 0, "cutoff_batch_size must be >= 0"),
            (0 < self.adapt_ewma <= 1 and 0 < self.per_request_ewma <= 1, "EWMA weights must be in (0, 1]"),
            (0 <= self.per_request_min_prob <= 1, "per_request_min_prob must be in [0, 1]"),
        ]
        for ok, msg in checks:
            if not ok:
                raise PlannerError(f"[serving] {msg}")

    @property
    def extras(self) -> ServingExtras:
        """What these settings add to a step beyond the engine profile (physics.step_model)."""
        return ServingExtras(self.schedule_overhead_s, self.schedule_overhead_per_seq_s, self.spec_k0_overhead_frac,
                             self.spec_k0_overhead_s)


def graph_profile(profile: EngineProfile, engine: EngineConfig) -> EngineProfile:
    """The engine profile whose CUDA-graph rule (physics.engine_time.pad) the serving steps follow: the
    scenario's, with [serving] cuda_graphs = false (every pass eager) or cuda_graph_sizes (the sizes captured
    and padded to, in the profile's unit) applied; unchanged by default, so the serving steps pad as the grid."""
    if not engine.cuda_graphs or engine.cuda_graph_sizes == ():
        return replace(profile, graphs_enabled=False)
    if engine.cuda_graph_sizes is None:
        return profile
    sizes = engine.cuda_graph_sizes
    return replace(profile, graphs_enabled=True, capture_sizes=sizes, max_capture_size=sizes[-1], unlimited=False,
                   padding=True, spec_capture_sizes=())


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
    for key, value in table.items():
        if SERVING_SCHEMA.get(key) is NUM and not math.isfinite(value):
            raise PlannerError(f"{sc.origin}: key 'serving.{key}' must be a finite number, got {value}")
    table.update({k: v for k, v in overrides.items() if v is not None})
    eng = sc.engine
    traffic_cap = "max_num_seqs" in (sc.extra.get("traffic") or {})
    if eng is not None and eng.spec_max_running and "max_num_seqs" not in table and not traffic_cap:
        table.setdefault("spec_max_num_seqs", eng.spec_max_running)
    for key in SERVING_KEYS:  # the engine's own default on this GPU where the scenario sets none
        default = serving_default(eng, key, sc.hardware.memory_bytes, sc.hardware.name)
        if key not in table and default is not None:
            table[key] = default
    try:
        return EngineConfig(**table)
    except PlannerError as err:
        raise PlannerError(f"{sc.origin}: {err}") from None



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


def required_graphs(k_by_batch, graphs: EngineProfile) -> pd.DataFrame:
    """CUDA graphs a K table needs: one row per (captured tokens, K) with its batch-size range.

    ``k_by_batch``: K for B = 1..n (index 0 is B = 1); ``graphs`` the engine profile whose rule pads them
    (:func:`graph_profile`). Steps outside its capture range run eager (``captured`` False).
    """
    rows: dict[tuple[int, int], list[int]] = {}
    kb = np.asarray(k_by_batch, dtype=int)
    padded, in_graph = pad(graphs, np.arange(1, kb.size + 1), kb)
    for b, (k, tokens, graph) in enumerate(zip(kb.tolist(), padded.tolist(), in_graph.tolist()), start=1):
        key = (int(tokens) if graph else -1, int(k))
        rows.setdefault(key, []).append(b)
    out = [{"tokens": t if t >= 0 else None, "k": k, "batch_min": min(bs), "batch_max": max(bs),
            "captured": t >= 0} for (t, k), bs in rows.items()]
    df = pd.DataFrame(out).astype({"tokens": "Int64"})  # whole tokens; <NA> where the pass runs eager
    return df.sort_values(["captured", "k", "batch_min"], ascending=[False, True, True]).reset_index(drop=True)
