"""Why a configuration does not fit memory, and by how much (the same terms the grid's fit test adds).

    need(B, K) = weights + draft weights (K > 0) + B x KV per sequence + activations of B (V + 1) tokens
    usable     = device memory x memory_utilization                                     (per GPU)

with V the drafts the verify pass checks per sequence: K for a chain, a tree's node count
(:func:`simulator.specs.drafts.verify_drafts`, as the grid prices it), and each sequence's KV holding
context + V + 1 tokens (:func:`simulator.physics.memory.step_memory_bytes`). The cheapest step at a batch size is K = 0 (no
draft weights, no draft KV, fewest activation tokens): where even that exceeds usable memory, no K fits.
"""
from __future__ import annotations

from dataclasses import replace

from simulator.errors import PlannerError
from simulator.physics.memory import (activation_bytes_per_gpu, draft_weight_bytes, kv_bytes_per_sequence,
                                      weight_bytes_per_gpu)
from simulator.specs.deployment import check_deployment
from simulator.specs.drafts import verify_drafts
from simulator.specs.hardware import DTYPE_BYTES

GB = 1e9


def memory_terms(sc, batch_size: float, k: int) -> dict:
    """Per GPU at (B, K): weights, draft weights, KV of B sequences, activations, their sum and usable [bytes];
    ``tokens_per_seq``, the tokens each sequence's KV holds in the verify step."""
    dep, model = sc.deployment, sc.model
    spec = k > 0
    verified = int(verify_drafts(sc.draft, k))  # the grid's verify width: a tree verifies its nodes, not K
    tokens = sc.context_len + verified + 1
    terms = {"weights": weight_bytes_per_gpu(model, dep),
             "draft": draft_weight_bytes(sc.draft, model, dep, spec),
             "kv": batch_size * float(kv_bytes_per_sequence(sc.draft, model, dep, tokens, spec, k=verified)),
             "activations": float(activation_bytes_per_gpu(model, dep, batch_size * (verified + 1)))}
    terms["need"] = sum(terms.values())
    terms["usable"] = sc.hardware.memory_bytes * dep.memory_utilization
    terms["tokens_per_seq"] = tokens
    return terms


def smallest_tp_for_weights(sc) -> int | None:
    """The smallest TP (powers of two up to 64, valid for the model) whose weights alone fit a GPU."""
    for tp in (2, 4, 8, 16, 32, 64):
        if tp <= sc.deployment.tp:
            continue
        dep = replace(sc.deployment, tp=tp)
        try:
            check_deployment(sc.model, dep)
        except PlannerError:
            continue
        if weight_bytes_per_gpu(sc.model, dep) <= sc.hardware.memory_bytes * dep.memory_utilization:
            return tp
    return None


def shortfall_text(sc, batch_size: int, k: int = 0) -> str:
    """One line: what does not fit at (B, K) and by how much, e.g. 'weights need 141 GB against 72 GB
    usable per GPU (80 GB x 90%) on 1 x h100-sxm; weights alone fit from tp=2'."""
    t = memory_terms(sc, batch_size, k)
    where = (f"{t['usable'] / GB:.1f} GB usable per GPU ({sc.hardware.memory_bytes / GB:.0f} GB x"
             f" {sc.deployment.memory_utilization:.0%}) on {sc.deployment.tp} x {sc.hardware.name}")
    if t["weights"] + t["draft"] > t["usable"]:
        text = f"weights need {t['weights'] / GB:.1f} GB" + (f" + draft {t['draft'] / GB:.1f} GB" if t["draft"] else "")
        text += f" against {where}"
        tp = smallest_tp_for_weights(sc)
        smaller = [d for d in ("fp8", "int4") if DTYPE_BYTES[d] < DTYPE_BYTES[sc.deployment.weight_dtype]]
        return (text + (f"; weights alone fit from tp={tp}" if tp else "")
                + (f" or with smaller weights (--dtype {', '.join(smaller)})" if smaller else ""))
    return (f"at B={batch_size}, K={k}: weights {t['weights'] / GB:.1f} GB"
            + (f" + draft {t['draft'] / GB:.1f} GB" if t["draft"] else "")
            + f" + KV {t['kv'] / GB:.1f} GB ({batch_size} x {t['tokens_per_seq']} tokens)"
            f" + activations {t['activations'] / GB:.2f} GB = {t['need'] / GB:.1f} GB against {where}"
            f" ({(t['need'] - t['usable']) / GB:.1f} GB over)")
