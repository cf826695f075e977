"""Why K* moves: the growth of the verify pass from K = 0 to K*, attributed to op families.

    growth(B) = verify(B, K*) - verify(B, 0) = sum over ops of [t_op(B, K*) - t_op(B, 0)]

Each op's difference goes to one group, named by what grows:

- ``experts_loaded``: more experts loaded: the routed-expert op's time for the weight bytes of the
  experts newly touched, dW = (E_gpu(B, K) - E_gpu(B, 0)) x expert-slice bytes x MoE layers, priced at
  the op's own time per byte at K (t_e / M_e), at most the op's whole growth
- ``expert_tokens``: more tokens through experts already loaded: the rest of the routed-expert op's
  growth (their FLOPs and activations; near all of it once every expert is touched anyway)
- ``attention``: attention itself and its projections (QKV / MLA / output GEMMs)
- ``communication``: all-reduce, dispatch / combine all-to-all, logits gather
- ``overhead``: everything else (router, shared experts, dense MLPs, norms and elementwise,
  LM head, sampling, kernel launches)

The groups sum to the growth exactly (each op's time, launch included, is in one group); a group
can shrink (a padded CUDA-graph size, a measured tile step), so :func:`growth_shares` gives each
growing group's share of what grew (non-negative, summing to 100%) and reports the shrinking ones
apart. A verify pass that grows mostly by expert loading at small B is what makes MoE K* rise with B: the
first draft tokens pay for new experts, later ones ride on experts already loaded.
"""
from __future__ import annotations

from types import MappingProxyType

import numpy as np

from simulator.physics.forward_pass import verify_cost
from simulator.specs.deployment import Deployment
from simulator.specs.hardware import Hardware
from simulator.specs.models import ModelSpec
from simulator.specs.profile import Profile

GROUPS = ("experts_loaded", "expert_tokens", "attention", "communication", "overhead")
LABELS = MappingProxyType({"experts_loaded": "more experts loaded",
                           "expert_tokens": "more tokens through loaded experts", "attention": "attention",
                           "communication": "communication", "overhead": "overhead"})


def op_group(name: str, family: str) -> str:
    """The attribution group of one op (by its name and family)."""
    base = name.rsplit(".", 1)[-1]
    if base == "moe_experts":
        return "expert_tokens"  # split further by :func:`_experts_loaded_s`
    if family == "attention" or base.startswith("attn_"):
        return "attention"
    if family == "comm":
        return "communication"
    return "overhead"


def verify_growth(model: ModelSpec, dep: Deployment, hw: Hardware, batch, k, context_len: float,
                  profile: Profile | None = None) -> dict[str, np.ndarray]:
    """Seconds the verify pass grows from K = 0 to ``k`` at each batch size, per group (module
    docstring), plus ``total`` (their sum) and ``verify_k0_s`` / ``verify_k_s``.

    ``batch`` and ``k`` broadcast (give k = K*(B) per batch size)."""
    batch, k = np.broadcast_arrays(np.asarray(batch, dtype=float), np.asarray(k, dtype=float))
    at_k = verify_cost(model, dep, hw, batch, k, context_len, profile)
    at_0 = verify_cost(model, dep, hw, batch, np.zeros_like(k), context_len, profile)
    out = {g: np.zeros(batch.shape) for g in GROUPS}
    for i, (name, family) in enumerate(zip(at_k.names, at_k.families)):
        out[op_group(name, family)] = out[op_group(name, family)] + at_k.time_s[i] - at_0.time_s[i]
        if name.rsplit(".", 1)[-1] == "moe_experts" and model.is_moe:
            grew = np.maximum(at_k.time_s[i] - at_0.time_s[i], 0.0)
            loaded = np.minimum(_experts_loaded_s(model, dep, batch, k, at_k.time_s[i], at_k.nbytes[i]), grew)
            out["experts_loaded"] = out["experts_loaded"] + loaded
            out["expert_tokens"] = out["expert_tokens"] - loaded
    out["total"] = sum(out[g] for g in GROUPS)
    out["verify_k0_s"] = at_0.total_s
    out["verify_k_s"] = at_k.total_s
    return out


def _experts_loaded_s(model: ModelSpec, dep: Deployment, batch, k, time_k, bytes_k):
    """Seconds of the routed-expert op at K spent on the weights of experts K adds (module docstring)."""
    from simulator.physics.experts import busiest_group_load
    from simulator.specs.hardware import DTYPE_BYTES
    from simulator.specs.routing import expert_probabilities

    p = expert_probabilities(dep.routing, model.num_experts, model.experts_per_token)
    q = k + 1.0
    at_k, _ = busiest_group_load(batch * q, p, dep.ep, batch, q, dep.routing.reuse)
    at_0, _ = busiest_group_load(batch, p, dep.ep, batch, np.ones_like(q), dep.routing.reuse)
    slice_bytes = model.expert_params() / (dep.tp // dep.ep) * DTYPE_BYTES[dep.expert_dtype_for(model)]
    new_bytes = np.maximum(at_k - at_0, 0.0) * slice_bytes * model.num_moe_layers
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(bytes_k > 0, new_bytes * time_k / bytes_k, 0.0)


def growth_shares(growth: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Each growing group's share of what grew: max(g, 0) / sum of max(g, 0) over groups, so the
    shares are non-negative and sum to 1 (NaN where nothing grew)."""
    pos = {g: np.maximum(np.asarray(growth[g], dtype=float), 0.0) for g in GROUPS}
    gross = sum(pos.values())
    safe = np.where(gross > 0, gross, np.nan)
    return {g: pos[g] / safe for g in GROUPS}


def describe_growth(growth: dict[str, np.ndarray], index: int = 0) -> str:
    """One line, e.g. 'verify grows 4.10 ms from K=0: more experts loaded 78%, more tokens through loaded
    experts 3%, communication 9%, overhead 10%' (growing groups only; shares of what grew, summing to
    100%; groups that shrank are named after it with their ms)."""
    total = float(np.ravel(growth["total"])[index])
    shares = growth_shares(growth)
    parts = [(g, float(np.ravel(shares[g])[index])) for g in GROUPS]
    grew = [f"{LABELS[g]} {v:.0%}" for g, v in parts if v == v and v > 0.005]
    if not grew:
        return "verify does not grow from K=0"
    shrank = [f"{LABELS[g]} {float(np.ravel(growth[g])[index]) * 1e3:.2f} ms" for g in GROUPS
              if float(np.ravel(growth[g])[index]) < -1e-9]
    text = f"verify grows {total * 1e3:.2f} ms from K=0: " + ", ".join(grew)
    return text + (f" (net of what shrank: {', '.join(shrank)})" if shrank else "")
