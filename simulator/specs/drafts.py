"""Draft cost per speculative step, by method.

- ``model``: a separate small model; K sequential passes of B tokens each over its own KV cache.
- ``eagle`` / ``eagle3``: K passes of one decoder layer with the target's sizes, a feature fusion
  projection (2D -> D, or 3D -> D for EAGLE-3) and an LM head (the target's, or EAGLE-3's smaller
  draft vocabulary).
- ``mtp`` / ``mtp:D``: the model's multi-token-prediction modules (DeepSeek-V3 / GLM / Qwen3-Next
  style): D modules (default: the config's ``num_nextn_predict_layers``, else 1), each one target
  decoder layer (MoE if the target is MoE: priced and stored as the MoE block it is), a 2D -> D
  projection and the shared LM head. Draft position j runs module min(j, D) (engines re-use the
  last module beyond its depth), so a step costs K module passes whatever D is; acceptance is per
  depth (the scenario's per-position rates: position j is predicted by module min(j, D)).
- ``ngram``: prompt lookup on the host; no accelerator work, a small host cost per step.
- ``early-exit:N``: self-speculation through the target's first N layers and its LM head
  (LayerSkip-style; also the cost of a draft that is a truncated copy of the target).
- ``self:W``: the target drafts for itself over a compressed KV cache of W tokens (StreamingLLM /
  SnapKV-style self-speculation, MagicDec): each pass is a full target pass whose attention reads
  min(L, W) keys; no extra weights, W tokens of extra KV per sequence. It pays at long contexts,
  where the target's own KV read dominates a step.

Method defaults (fusion width, draft vocabulary, host costs) live in ``data/drafts.toml``.
"""
from __future__ import annotations

import tomllib
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from simulator.errors import PlannerError
from simulator.specs.deployment import Deployment
from simulator.specs.models import ModelSpec, load_model

DRAFTS_FILE = Path(__file__).resolve().parent.parent / "data" / "drafts.toml"
DRAFT_METHODS = ("eagle", "eagle3", "mtp", "ngram", "model", "early-exit", "self")
# How each method is written on a command line and what it prices (one source: --help, the catalog,
# the parse error)
DRAFT_SYNTAX = {
    "eagle": ("eagle", "EAGLE-1/2 head: one decoder layer + the target's LM head (arXiv:2401.15077)"),
    "eagle3": ("eagle3", "EAGLE-3 head: 3-feature fusion, 32k draft vocabulary (arXiv:2503.01840)"),
    "mtp": ("mtp or mtp:D", "multi-token prediction modules of the target (DeepSeek-V3), D of them"),
    "ngram": ("ngram", "prompt lookup on the host, no GPU work"),
    "model": ("model:NAME", "a separate draft model (catalog name or config.json), K sequential passes"),
    "early-exit": ("early-exit:N", "the target's first N layers as the draft (own KV for them)"),
    "self": ("self:W", "self-speculation over a compressed KV of W tokens"),
}



@lru_cache(maxsize=None)
def draft_defaults() -> dict:
    return tomllib.loads(DRAFTS_FILE.read_text())


@dataclass(frozen=True)
class DraftSpec:
    method: str  # one of DRAFT_METHODS
    model: ModelSpec | None = None  # for method "model"
    layers: int = 0  # for method "early-exit"; MTP depth D for "mtp" (0: the model's own)
    kv_budget: int = 0  # for method "self": cached tokens the draft pass reads (its compressed KV)

    @property
    def label(self) -> str:
        if self.method == "model":
            return f"model:{self.model.name}"
        if self.method == "early-exit":
            return f"early-exit:{self.layers}"
        if self.method == "mtp" and self.layers:
            return f"mtp:{self.layers}"
        if self.method == "self":
            return f"self:{self.kv_budget}"
        return self.method


def mtp_depth(draft: DraftSpec, target: ModelSpec) -> int:
    """MTP modules D: the draft's explicit depth, else the model's num_nextn_predict_layers, else 1."""
    return draft.layers or target.num_mtp_layers or 1


def _suffix_int(text: str) -> int:
    """The integer after 'method:' (0 when it is not one)."""
    try:
        return int(text.split(":", 1)[1])
    except ValueError:
        return 0


def parse_draft(text: str) -> DraftSpec:
    """'eagle', 'eagle3', 'mtp', 'mtp:D', 'ngram', 'early-exit:N', 'self:W' or 'model:NAME|config.json'."""
    text = text.strip()
    if text.startswith("early-exit:"):
        layers = _suffix_int(text)
        if layers < 1:
            raise PlannerError(f"draft '{text}': early-exit needs a positive layer count, e.g. early-exit:4")
        return DraftSpec("early-exit", layers=layers)
    if text.startswith("mtp:"):
        depth = _suffix_int(text)
        if not 1 <= depth <= 16:
            raise PlannerError(f"draft '{text}': mtp needs a depth from 1 to 16, e.g. mtp:1 (DeepSeek-V3 ships 1)")
        return DraftSpec("mtp", layers=depth)
    if text.startswith("self:"):
        budget = _suffix_int(text)
        if budget < 1:
            raise PlannerError(f"draft '{text}': self needs the draft's KV budget in tokens, e.g. self:512")
        return DraftSpec("self", kv_budget=budget)
    if text.startswith("model:"):
        name = text.split(":", 1)[1]
        if not name:
            raise PlannerError("draft 'model:' needs a model name, e.g. model:llama-3.2-1b")
        return DraftSpec("model", load_model(name))
    if text not in DRAFT_METHODS or text in ("model", "self"):
        raise PlannerError(f"unknown draft method '{text}' (use {draft_syntax_list()})")
    return DraftSpec(text)


def draft_syntax_list() -> str:
    """'eagle, eagle3, mtp or mtp:D, ngram, model:NAME, early-exit:N, self:W'."""
    return ", ".join(DRAFT_SYNTAX[m][0] for m in DRAFT_METHODS)


def check_draft(draft: DraftSpec, target: ModelSpec, dep: Deployment) -> None:
    if draft.method == "early-exit" and draft.layers >= target.num_layers:
        raise PlannerError(f"draft early-exit:{draft.layers} must use fewer than the {target.num_layers} layers"
                           f" of {target.name}")
    if draft.method == "model":
        if draft.model.vocab_size != target.vocab_size:
            raise PlannerError(f"draft model {draft.model.name} has vocabulary {draft.model.vocab_size},"
                               f" target {target.name} has {target.vocab_size}: speculative decoding needs the same")


def draft_deployment(model: ModelSpec, dep: Deployment) -> Deployment:
    """Where a draft model runs: the target's precisions and engine kernels on :func:`draft_tp` GPUs."""
    return Deployment(tp=draft_tp(model, dep.tp), weight_dtype=dep.weight_dtype, act_dtype=dep.act_dtype,
                      kv_dtype=dep.kv_dtype, memory_utilization=dep.memory_utilization, kernels=dep.kernels)


def draft_tp(model: ModelSpec, tp: int) -> int:
    """A draft model runs on the largest TP degree that divides both the target's TP and its own
    attention heads (28 heads under TP 8 run on TP 4): the target's TP when its heads split evenly."""
    t = tp
    while t > 1 and (tp % t or model.num_heads % t):
        t -= 1
    return t
