"""Draft cost per speculative step, by method.

- ``model``: a separate small model; K sequential passes of B tokens each over its own KV cache.
- ``eagle`` / ``eagle3``: K passes of one decoder layer with the target's sizes, a feature fusion
  projection (2D -> D, or 3D -> D for EAGLE-3) and an LM head (the target's, or EAGLE-3's smaller
  draft vocabulary).
- ``mtp``: the model's multi-token-prediction module (one target layer, MoE if the target is MoE, a
  2D -> D projection and the shared LM head) applied K times.
- ``ngram``: prompt lookup on the host; no accelerator work, a small host cost per step.
- ``early-exit:N``: self-speculation through the target's first N layers and its LM head
  (LayerSkip-style; also the cost of a draft that is a truncated copy of the target).

Method defaults (fusion width, draft vocabulary, host costs) live in ``data/drafts.toml``.
"""
from __future__ import annotations

import tomllib
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from simulator.cost import (Deployment, Op, StepCost, decoder_layers_ops, evaluate, gemm, head_ops,
                            forward_ops, kv_bytes_per_gpu, weight_bytes_per_gpu)
from simulator.errors import PlannerError
from simulator.hardware import DTYPE_BYTES, Hardware
from simulator.models import ModelSpec, load_model
from simulator.profile import Profile

DRAFTS_FILE = Path(__file__).parent / "data" / "drafts.toml"
DRAFT_METHODS = ("eagle", "eagle3", "mtp", "ngram", "model", "early-exit")


@lru_cache(maxsize=None)
def draft_defaults() -> dict:
    return tomllib.loads(DRAFTS_FILE.read_text())


@dataclass(frozen=True)
class DraftSpec:
    method: str  # one of DRAFT_METHODS
    model: ModelSpec | None = None  # for method "model"
    layers: int = 0  # for method "early-exit"

    @property
    def label(self) -> str:
        if self.method == "model":
            return f"model:{self.model.name}"
        if self.method == "early-exit":
            return f"early-exit:{self.layers}"
        return self.method


def parse_draft(text: str) -> DraftSpec:
    """'eagle', 'eagle3', 'mtp', 'ngram' or 'model:NAME|config.json'."""
    text = text.strip()
    if text.startswith("early-exit:"):
        try:
            layers = int(text.split(":", 1)[1])
        except ValueError:
            layers = 0
        if layers < 1:
            raise PlannerError(f"draft '{text}': early-exit needs a positive layer count, e.g. early-exit:4")
        return DraftSpec("early-exit", layers=layers)
    if text.startswith("model:"):
        name = text.split(":", 1)[1]
        if not name:
            raise PlannerError("draft 'model:' needs a model name, e.g. model:llama-3.2-1b")
        return DraftSpec("model", load_model(name))
    if text not in DRAFT_METHODS or text == "model":
        raise PlannerError(f"unknown draft method '{text}' (use eagle, eagle3, mtp, ngram, early-exit:N or model:NAME)")
    return DraftSpec(text)


def check_draft(draft: DraftSpec, target: ModelSpec, dep: Deployment) -> None:
    if draft.method == "early-exit" and draft.layers >= target.num_layers:
        raise PlannerError(f"draft early-exit:{draft.layers} must use fewer than the {target.num_layers} layers"
                           f" of {target.name}")
    if draft.method == "model":
        if draft.model.vocab_size != target.vocab_size:
            raise PlannerError(f"draft model {draft.model.name} has vocabulary {draft.model.vocab_size},"
                               f" target {target.name} has {target.vocab_size}: speculative decoding needs the same")
        if draft.model.num_heads % draft_tp(draft.model, dep.tp):
            raise PlannerError(f"draft model {draft.model.name}: tp does not divide its heads")


def draft_tp(model: ModelSpec, tp: int) -> int:
    """Draft models run with the target's TP when their heads split evenly, else on one GPU."""
    return tp if model.num_heads % tp == 0 and model.num_kv_heads >= 1 else 1


def _head_layer_ops(target: ModelSpec, dep: Deployment, hw: Hardware, batch, context_len, fusion: int,
                    vocab: int, moe_layer: bool) -> list[Op]:
    """One pass of an EAGLE/MTP head: fusion projection, one decoder layer, LM head."""
    w = DTYPE_BYTES[dep.weight_dtype]
    a = DTYPE_BYTES[dep.act_dtype]
    D = target.hidden_size
    layers = (0, 1) if moe_layer else (1, 0)
    ops = [gemm("draft.fusion", batch, D, fusion * D, w, a, 1)]
    ops += decoder_layers_ops(target, dep, hw, batch, 1.0, context_len, "draft.", layer_counts=layers)
    ops += head_ops(target, dep, hw, batch, vocab, "draft.", sampling=True)
    return ops


def draft_pass_cost(draft: DraftSpec, target: ModelSpec, dep: Deployment, hw: Hardware, batch, k,
                    context_len: float, profile: Profile | None) -> tuple[StepCost, np.ndarray]:
    """(cost of one draft pass at the shape of ``batch``, number of passes = K).

    Draft passes process one token per sequence whatever K is, so they are priced once per batch
    size and scaled by K: a 512 x 9 grid needs 512 evaluations, not 4608.
    """
    k = np.asarray(k, dtype=float)
    batch = np.asarray(batch, dtype=float)
    shape = batch.shape
    defaults = draft_defaults()
    if draft.method == "ngram":
        cfg = defaults["ngram"]
        host_s = cfg["host_fixed_s"] + cfg["host_per_sequence_s"] * batch
        zero = np.zeros((1,) + shape)
        host = np.asarray(host_s, dtype=float).reshape((1,) + shape)
        # host-side work: counted as launch-like time, neither compute- nor memory-bound on the device
        return StepCost(["draft.ngram_lookup"], ["elementwise"], zero, zero, zero, zero, host, host), \
            np.minimum(k, 1.0)
    if draft.method == "early-exit":
        dense = min(draft.layers, target.num_mlp_dense_layers)
        ops = decoder_layers_ops(target, dep, hw, batch, 1.0, context_len, "draft.",
                                 layer_counts=(dense, draft.layers - dense))
        ops += head_ops(target, dep, hw, batch, target.vocab_size, "draft.")
        return evaluate(ops, hw, dep, profile, shape), k
    if draft.method == "model":
        m = draft.model
        ddep = Deployment(tp=draft_tp(m, dep.tp), weight_dtype=dep.weight_dtype, act_dtype=dep.act_dtype,
                          kv_dtype=dep.kv_dtype, memory_utilization=dep.memory_utilization)
        ops = forward_ops(m, ddep, hw, batch, 1.0, context_len, "draft.")
        per_pass = evaluate(ops, hw, ddep, profile, shape)
    else:
        cfg = defaults[draft.method]
        vocab = min(cfg.get("draft_vocab") or target.vocab_size, target.vocab_size)
        ops = _head_layer_ops(target, dep, hw, batch, context_len, cfg["fusion_inputs"], vocab,
                              moe_layer=draft.method == "mtp" and target.is_moe)
        per_pass = evaluate(ops, hw, dep, profile, shape)
    return per_pass, k


def draft_memory_bytes(draft: DraftSpec, target: ModelSpec, dep: Deployment, batch, tokens_per_seq) -> np.ndarray:
    """Draft weights + draft KV cache per GPU."""
    w = DTYPE_BYTES[dep.weight_dtype]
    if draft.method == "ngram":
        return np.zeros(np.broadcast(np.asarray(batch), np.asarray(tokens_per_seq)).shape)
    if draft.method == "model":
        ddep = Deployment(tp=draft_tp(draft.model, dep.tp), weight_dtype=dep.weight_dtype, kv_dtype=dep.kv_dtype)
        return weight_bytes_per_gpu(draft.model, ddep) + kv_bytes_per_gpu(draft.model, ddep, batch, tokens_per_seq)
    if draft.method == "early-exit":  # shares the target's weights; own KV for its layers
        return kv_bytes_per_gpu(target, dep, batch, tokens_per_seq, layers=draft.layers)
    cfg = draft_defaults()[draft.method]
    D = target.hidden_size
    layer = target.attention_params() + (target.dense_mlp_params() if not (draft.method == "mtp" and target.is_moe)
                                         else target.num_experts * target.expert_params() + target.shared_expert_params())
    vocab = cfg.get("draft_vocab") or 0
    params = layer + cfg["fusion_inputs"] * D * D + (vocab * D if vocab and vocab < target.vocab_size else 0)
    return params * w / dep.tp + kv_bytes_per_gpu(target, dep, batch, tokens_per_seq, layers=1)
