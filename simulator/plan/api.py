"""Python API for notebooks: specs in, pandas DataFrames out.

    >>> from simulator import predict
    >>> p = predict(model="llama-3.1-8b", hardware="h100-sxm", draft="eagle", acceptance=0.8)
    >>> p.table.head()          # per batch size: k_opt, goodput, speedups, bound regime
    >>> p.breakdown(8, 3)       # per operator of the verify and draft steps
    >>> p.vllm()                # {"num_speculative_tokens": ..., "num_speculative_tokens_per_batch_size": ...}
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import pandas as pd

from simulator.plan import exports
from simulator.errors import PlannerError
from simulator.plan.grid import Grid, compute_grid
from simulator.specs.scenario import DEFAULT_SCENARIO, Scenario, apply_overrides, build_scenario, load_scenario

MS = 1e3


@dataclass
class Prediction:
    scenario: Scenario
    arrays: Grid

    # --- provenance ---------------------------------------------------------------------------
    @property
    def provenance(self) -> dict:
        sc = self.scenario
        return {
            "scenario": sc.name, "origin": sc.origin,
            "step_time_source": sc.cost_source,
            "acceptance": f"{sc.acceptance.label} ({sc.acceptance.source})",
            "model": f"{sc.model.name}: {sc.model.source}",
            "hardware": f"{sc.hardware.name}: {sc.hardware.source}",
            "deployment": f"tp={sc.deployment.tp} ep={sc.deployment.ep} weights={sc.deployment.weight_dtype}"
                          f" kv={sc.deployment.kv_dtype} routing={sc.deployment.routing.describe()}",
            "draft": sc.draft.label, "context_len": sc.context_len,
        }

    # --- tables -------------------------------------------------------------------------------
    @cached_property
    def grid(self) -> pd.DataFrame:
        """One row per (batch size, K)."""
        g = self.arrays
        nb, nk = g.itl_s.shape
        df = pd.DataFrame({
            "batch_size": np.repeat(g.batch_sizes.astype(int), nk),
            "k": np.tile(g.ks, nb),
            "acceptance_length": np.tile(g.acceptance_length, nb),
            "verify_ms": np.broadcast_to(g.verify_s, g.itl_s.shape).ravel() * MS,
            "in_graph": np.broadcast_to(g.in_graph, g.itl_s.shape).ravel(),
            "draft_ms": np.broadcast_to(g.draft_s, g.itl_s.shape).ravel() * MS,
            "overhead_ms": np.broadcast_to(g.overhead_s, g.itl_s.shape).ravel() * MS,
            "itl_ms": g.itl_s.ravel() * MS,
            "goodput_per_seq": g.goodput_per_seq.ravel(),
            "throughput": g.throughput.ravel(),
            "bound": g.regime().ravel(),
            "memory_gb_per_gpu": g.memory_per_gpu_bytes.ravel() / 1e9,
            "fits_memory": g.fits_memory.ravel(),
        })
        if g.experts_touched is not None:
            df["experts_touched"] = g.experts_touched.ravel()
            df["expert_ms"] = g.op_time_s("moe_experts").ravel() * MS
        return df

    @cached_property
    def table(self) -> pd.DataFrame:
        """One row per batch size: K*, its goodput, and plain / fixed-K / dynamic-K compared."""
        g = self.arrays
        sc = self.scenario
        idx = g.optimal_k_index()
        rows = np.arange(len(g.batch_sizes))
        safe = np.maximum(idx, 0)
        feasible = idx >= 0
        fits = g.fits_memory
        nan = np.nan

        def at(arr, col):
            return np.where(feasible, arr[rows, col], nan)

        good = at(g.goodput_per_seq, safe)
        i0, i_fix = g.k_index(0), g.k_index(sc.fixed_k)
        plain = np.where(fits[:, i0], g.goodput_per_seq[:, i0], nan)
        fixed = np.where(fits[:, i_fix], g.goodput_per_seq[:, i_fix], nan)
        with np.errstate(invalid="ignore", divide="ignore"):
            df = pd.DataFrame({
                "batch_size": g.batch_sizes.astype(int),
                "k_opt": pd.array(np.where(feasible, g.ks[safe], 0), dtype="Int64"),
                "goodput_per_seq": good,
                "throughput": good * g.batch_sizes,
                "itl_ms": at(g.itl_s, safe) * MS,
                "acceptance_length": np.where(feasible, g.acceptance_length[safe], nan),
                "plain_goodput_per_seq": plain,
                "fixed_goodput_per_seq": fixed,
                "speedup_vs_plain": good / plain,
                "speedup_vs_fixed": good / fixed,
                "fixed_vs_plain": fixed / plain,
                "bound": np.where(feasible, g.regime()[rows, safe], "none fits"),
                "fits_memory": feasible,
                "memory_gb_per_gpu": at(g.memory_per_gpu_bytes, safe) / 1e9,
            })
        df.loc[~feasible, "k_opt"] = pd.NA
        if g.experts_touched is not None:
            expert = g.op_time_s("moe_experts")
            df["experts_touched"] = at(g.experts_touched, safe)
            df["experts_touched_plain"] = g.experts_touched[:, i0]
            df["expert_load_share"] = at(expert / g.verify.total_s, safe)
        return df

    def breakdown(self, batch_size: int, k: int) -> pd.DataFrame:
        """Per-operator time, FLOPs, bytes and bound of the draft and verify steps at (B, K)."""
        if k < 0 or batch_size < 1:
            raise PlannerError(f"breakdown needs batch size >= 1 and K >= 0, got {batch_size},{k}")
        sub = predict_scenario(self.scenario, batch_sizes=[batch_size], ks=[k]).arrays
        frames = []
        for step, cost in (("draft", sub.draft), ("verify", sub.verify)):
            bound = cost.bound()[:, 0, 0]
            time = cost.time_s[:, 0, 0]
            flops = cost.flops[:, 0, 0]
            nbytes = cost.nbytes[:, 0, 0]
            with np.errstate(invalid="ignore", divide="ignore"):
                frames.append(pd.DataFrame({
                    "step": step, "op": cost.names, "family": cost.families,
                    "time_ms": time * MS, "compute_ms": cost.compute_s[:, 0, 0] * MS,
                    "memory_ms": cost.memory_s[:, 0, 0] * MS, "launch_ms": cost.launch_s[:, 0, 0] * MS,
                    "gflops": flops / 1e9, "mbytes": nbytes / 1e6,
                    "intensity_flops_per_byte": np.where(nbytes > 0, flops / nbytes, np.nan),
                    "attained_tflops": np.where(time > 0, flops / time / 1e12, 0.0),
                    "bound": np.where(time > 0, bound, "-"),
                }))
        df = pd.concat(frames, ignore_index=True)
        df = df[(df.time_ms > 0) | (df.step == "verify")]
        total = df.time_ms.sum() + sub.overhead_s[0, 0] * MS
        df["share"] = df.time_ms / total if total > 0 else 0.0
        return df.reset_index(drop=True)

    # --- exports ------------------------------------------------------------------------------
    def k_table(self) -> tuple[np.ndarray, np.ndarray]:
        t = self.table
        k = t["k_opt"].fillna(-1).astype(int).to_numpy()
        return t["batch_size"].to_numpy(), k

    def vllm(self) -> dict:
        return exports.vllm_config(*self.k_table())

    def trtllm(self) -> dict:
        return exports.trtllm_schedule(*self.k_table())

    def to_dict(self) -> dict:
        rows = json.loads(self.table.to_json(orient="records"))
        return {"provenance": self.provenance, "fixed_k": self.scenario.fixed_k,
                "vllm": self.vllm(), "trtllm": {"draft_len_schedule": self.trtllm()}, "rows": rows}


def predict_scenario(scenario: Scenario, batch_sizes=None, ks=None) -> Prediction:
    return Prediction(scenario, compute_grid(scenario, batch_sizes, ks))


def predict(scenario: str | Scenario | None = None, **overrides) -> Prediction:
    """Predict the goodput grid and K* table.

    ``scenario``: a Scenario, a TOML path or bundled name, or None for the default scenario when
    no model is given (else an empty base). Keyword overrides: model, hardware, tp, ep, draft,
    acceptance, context_len, batch_sizes, k_max, fixed_k, dtype, kv_dtype, calibration, ...
    """
    if isinstance(scenario, Scenario):
        sc = scenario.with_overrides(**overrides) if overrides else scenario
    elif scenario is not None:
        sc = load_scenario(scenario, **overrides)
    elif "model" in overrides or "hardware" in overrides:
        base = {"model": {}, "hardware": {}}
        if "model" not in overrides or "hardware" not in overrides:
            raise PlannerError("give both a model and a hardware name (or a scenario)")
        sc = build_scenario(apply_overrides(base, overrides))
    else:
        sc = load_scenario(DEFAULT_SCENARIO, **overrides)
    return predict_scenario(sc)
