"""One candidate of a sizing (a device, a TP degree and a precision): the scenario moved to it, the
traffic's mean lengths, whether it fits memory, and the predict command that prints its K* table.

Configurations whose weights, draft and one sequence's KV cache (with K+1 verification slots) do not
fit the usable memory (``memory_bytes * memory_utilization``) are rejected with the reason
(:func:`memory_fit`, on the one memory model of :mod:`simulator.physics.memory`).
"""
from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from simulator import serving
from simulator.errors import PlannerError
from simulator.physics.memory import (activation_bytes_per_gpu, draft_weight_bytes, kv_bytes_per_sequence, max_batch,
                                     weight_bytes_per_gpu)
from simulator.specs.hardware import FP4_DTYPES, load_hardware
from simulator.specs.scenario import ACCEPTANCE_GIVEN, SCENARIO_DIR, Scenario, build_scenario

GB = 1e9
FP8 = "fp8"  # W8A8: fp8 weights and activations (fp8 tensor cores); the KV cache keeps the scenario's dtype
# W4A4 variants a [sizing] dtypes list may ask for: weights and activations in one FP4 format (FP4 tensor
# cores), made only for candidates whose hardware file lists that format
LOW_PRECISION = (FP8,) + FP4_DTYPES


@dataclass(frozen=True)
class Candidate:
    hardware: str
    tp: int
    dtype: str = ""  # "" = the scenario's precision; "fp8" = W8A8

    @property
    def label(self) -> str:
        return f"{self.hardware} tp={self.tp}" + (f" {self.dtype}" if self.dtype else "")


def candidate_scenario(sc: Scenario, cand: Candidate, acceptance_scale: float = 1.0,
                       bandwidth_scale: float = 1.0, flops_scale: float = 1.0, reuse: bool = False) -> Scenario:
    """The scenario moved to another device / TP degree (a calibration profile is kept only on its device): a
    new object (a sensitivity run scales its profile in place), or with ``reuse`` ``sc`` itself when its TOML
    stays the same (the tables a load search builds per scenario object are then those predicted for it)."""
    raw = copy.deepcopy(sc.raw)
    old = raw.get("hardware", {})
    hw = {"name": cand.hardware, "tp": cand.tp}
    if cand.dtype in LOW_PRECISION:
        raw["precision"] = dict(raw.get("precision", {}), weights=cand.dtype, activations=cand.dtype)
    ep = old.get("ep", 1)
    if ep > 1 and cand.tp % ep == 0:
        hw["ep"] = ep
    if cand.hardware == old.get("name"):  # user figures for this very device stay
        hw |= {k: v for k, v in old.items() if k not in ("name", "tp", "ep")}
    if bandwidth_scale != 1.0:
        base = hw.get("hbm_bandwidth_bytes_per_s", load_hardware(cand.hardware).hbm_bandwidth_bytes_per_s)
        hw["hbm_bandwidth_bytes_per_s"] = float(base) * bandwidth_scale
    if flops_scale != 1.0:
        dev = load_hardware(cand.hardware)
        hw["peak_bf16_flops_per_s"] = float(hw.get("peak_bf16_flops_per_s", dev.peak_bf16_flops_per_s)) * flops_scale
        for key in ("peak_fp8_flops_per_s", "peak_fp4_flops_per_s"):
            if getattr(dev, key):
                hw[key] = float(hw.get(key, getattr(dev, key))) * flops_scale
    raw["hardware"] = hw
    if sc.profile is not None and sc.profile.hardware != cand.hardware:
        learned = raw.pop("calibration", {}).get("learned")  # the profile stays on its device; --physics-only holds
        if learned is not None:
            raw["calibration"] = {"learned": learned}
    fit = sc.deployment_fit  # a deployment fit holds only for the deployment it was measured on
    if fit is not None and (fit.identity["hardware"], int(fit.identity["tp"])) != (cand.hardware, cand.tp) \
            or fit is not None and cand.dtype and sc.deployment.weight_dtype != cand.dtype:
        raw.get("calibration", {}).pop("deployment", None)
    if acceptance_scale != 1.0:
        rates = [min(0.99, r * acceptance_scale) for r in sc.acceptance.rates]
        raw["acceptance"] = {"rates": rates, "source": f"{sc.acceptance.source}, scaled x{acceptance_scale:g}"}
        raw[ACCEPTANCE_GIVEN] = True  # outranks a deployment fit's measured rates (they were scaled here)
    return sc if reuse and raw == sc.raw else build_scenario(raw, sc.origin, raw.get("_base_dir"))


def _spec_mean(value, default: float) -> float:
    """Mean of a length spec: a number, a table with 'mean' (or min/max), or a list of lengths."""
    if isinstance(value, bool):
        return default
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, dict):
        for key in ("mean", "value", "median"):
            if isinstance(value.get(key), (int, float)):
                return float(value[key])
        if isinstance(value.get("min"), (int, float)) and isinstance(value.get("max"), (int, float)):
            return (value["min"] + value["max"]) / 2
    if isinstance(value, (list, tuple)) and value and all(isinstance(v, (int, float)) for v in value):
        return float(np.mean(value))
    return default


def traffic_lengths(sc: Scenario) -> tuple[float, float]:
    """(mean prompt tokens, mean output tokens) of the scenario's traffic."""
    traffic = sc.extra.get("traffic") or {}
    out = []
    for key, default in (("prompt_len", float(sc.context_len)), ("output_len", 256.0)):
        spec = traffic.get(key)
        mean = _spec_mean(spec, default)
        if isinstance(spec, dict):
            try:  # the serving simulation's own length distribution
                dist = serving.parse_length(spec, key, sc.raw.get("_base_dir"))
                mean = float(dist.sample(np.random.default_rng(0), 4000).mean())
            except PlannerError:
                pass
        out.append(mean)
    return out[0], out[1]


def memory_fit(sc: Scenario, context_tokens: float) -> dict:
    """Weights (target + draft), then how many sequences of ``context_tokens`` (+ K_max+1 verify slots) fit
    with the activations of their verify step at K_max: the grid's rule (:func:`simulator.physics.memory.max_batch`).

    Returns fits, reason, and the GB figures per GPU.
    """
    dep, model = sc.deployment, sc.model
    label = f"{sc.hardware.name} tp={dep.tp}"
    usable = sc.hardware.memory_bytes * dep.memory_utilization
    weights = weight_bytes_per_gpu(model, dep)
    spec = sc.k_max > 0
    draft_w = draft_weight_bytes(sc.draft, model, dep, spec)
    tokens = context_tokens + sc.k_max + 1
    kv_seq = float(kv_bytes_per_sequence(sc.draft, model, dep, tokens, spec, k=sc.k_max))  # + a hybrid's states
    act_seq = float(activation_bytes_per_gpu(model, dep, sc.k_max + 1))
    info = {"usable_gb": usable / GB, "weights_gb": weights / GB, "draft_gb": draft_w / GB,
            "kv_gb_per_seq": kv_seq / GB, "activation_gb_per_seq": act_seq / GB, "context_tokens": int(context_tokens)}
    if weights + draft_w > usable:
        what = f"weights {weights / GB:.0f} GB/GPU" + (f" + draft {draft_w / GB:.1f} GB" if draft_w else "")
        return info | {"fits": False, "max_seqs": 0,
                       "reason": f"{label}: {what} exceed {usable / GB:.0f} GB usable"
                                 f" ({sc.hardware.memory_bytes / GB:.0f} GB x {dep.memory_utilization:g})"}
    max_seqs = max_batch(sc.draft, model, dep, sc.hardware.memory_bytes, sc.k_max, tokens)
    if max_seqs < 1:
        return info | {"fits": False, "max_seqs": 0,
                       "reason": f"{label}: KV cache of one {tokens:.0f}-token sequence ({kv_seq / GB:.1f} GB/GPU)"
                                 f" and its verify step's activations exceed the {(usable - weights - draft_w) / GB:.1f}"
                                 " GB left after weights"}
    return info | {"fits": True, "max_seqs": max_seqs, "reason": ""}


def k_table_context(sc: Scenario) -> int:
    """The context the K* tables are read at: the mean a running sequence holds, prompt + half its output."""
    prompt_len, out_len = traffic_lengths(sc)
    return max(1, int(round(prompt_len + out_len / 2)))


def _deployment_flags(raw: dict) -> str:
    """predict's flags for what a flags-built scenario's K* table rests on: model, draft, engine, acceptance."""
    parts = [f"--model {raw['model']['name']}"]
    draft, engine, acc = raw.get("draft", {}), raw.get("engine", {}), raw.get("acceptance", {})
    if draft.get("method"):
        parts.append(f"--draft {draft['method']}")
    if engine.get("name"):
        parts.append(f"--engine {engine['name']}")
    if engine.get("version"):
        parts.append(f"--engine-version {engine['version']}")
    if acc.get("rates"):
        parts.append("--acceptance " + ",".join(f"{r:g}" for r in acc["rates"]))
    elif acc.get("file"):
        parts.append(f"--acceptance {acc['file']}")
    return " ".join(parts)


def predict_command(sc: Scenario, cand, context_len: int) -> str:
    """The predict command line that prints the same K* table as sizing's for ``cand`` (same device, TP,
    dtypes and context): sizing's fp8 is W8A8, i.e. --dtype fp8 --act-dtype fp8."""
    dep = sc.deployment
    if sc.origin == "flags":  # sized from flags: no file to name, the flags that set the K* table instead
        where = _deployment_flags(sc.raw)
    else:
        origin = Path(sc.origin)
        where = "--scenario " + (origin.stem if origin.parent.resolve() == SCENARIO_DIR.resolve()  # a bundled name
                                 else sc.origin)
    return (f"python -m simulator.predict {where} --hardware {cand.hardware} --tp {cand.tp}"
            f" --dtype {dep.weight_dtype} --act-dtype {dep.act_dtype} --kv-dtype {dep.kv_dtype}"
            + (f" --attention-dtype {dep.attention_dtype}" if dep.attention_dtype else "")
            + f" --context-len {context_len}")
