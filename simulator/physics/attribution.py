"""Why K* moves: the growth of the verify pass from K = 0 to K*, attributed to op families.

    growth(B) = verify(B, K*) - verify(B, 0) = sum over ops of [t_op(B, K*) - t_op(B, 0)]

Each op's difference goes to one group:

- ``expert_loading``: the routed-expert op (weights of the newly touched experts, their FLOPs)
- ``attention``: attention itself and its projections (QKV / MLA / output GEMMs)
- ``communication``: all-reduce, dispatch / combine all-to-all, logits gather
- ``overhead``: everything else (router, shared experts, dense MLPs, norms and elementwise,
  LM head, sampling, kernel launches)

The groups sum to the growth exactly (each op's time, launch included, is in one group). A
verify pass that grows mostly by expert loading at small B is what makes MoE K* rise with B: the
first draft tokens pay for new experts, later ones ride on experts already loaded.
"""
from __future__ import annotations

import numpy as np

from simulator.physics.layers import verify_cost
from simulator.specs.deployment import Deployment
from simulator.specs.hardware import Hardware
from simulator.specs.models import ModelSpec
from simulator.specs.profile import Profile

GROUPS = ("expert_loading", "attention", "communication", "overhead")


def op_group(name: str, family: str) -> str:
    """The attribution group of one op (by its name and family)."""
    base = name.rsplit(".", 1)[-1]
    if base == "moe_experts":
        return "expert_loading"
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
    out["total"] = sum(out[g] for g in GROUPS)
    out["verify_k0_s"] = at_0.total_s
    out["verify_k_s"] = at_k.total_s
    return out


def describe_growth(growth: dict[str, np.ndarray], index: int = 0) -> str:
    """One line, e.g. 'verify grows 4.1 ms from K=0: expert loading 78%, attention 3%, comms 9%, overhead 10%'."""
    total = float(np.ravel(growth["total"])[index])
    if total <= 0:
        return "verify does not grow from K=0"
    parts = [f"{g.replace('_', ' ')} {float(np.ravel(growth[g])[index]) / total:.0%}" for g in GROUPS]
    return f"verify grows {total * 1e3:.2f} ms from K=0: " + ", ".join(parts)
