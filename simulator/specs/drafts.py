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
- ``dflash`` / ``dspark`` / ``p-eagle`` / ``pard`` / ``pard:NAME``: one-pass block drafters: the whole
  draft step is ONE forward pass over a block of K + 1 (DFlash), K (DSpark) or 2K (P-EAGLE, PARD)
  query tokens per sequence (:data:`BLOCK_METHODS`, ``query_tokens`` in ``data/drafts.toml``).
- ``eagle:tree:TxN`` / ``eagle3:tree:TxN``: an EAGLE draft tree (SGLang --speculative-eagle-topk T,
  --speculative-num-draft-tokens N + 1): K is the tree depth (--speculative-num-steps); the draft runs
  K passes, each after the first over T candidates per sequence, and the verify pass runs the N draft
  tokens plus the root, N + 1 tokens per sequence, through a tree mask (:func:`verify_drafts`).

Method defaults (fusion width, draft vocabulary, host costs) live in ``data/drafts.toml``.
"""
from __future__ import annotations

import tomllib
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path

import numpy as np

from simulator.errors import PlannerError
from simulator.specs.deployment import Deployment
from simulator.specs.hardware import DTYPE_BYTES
from simulator.specs.models import ModelSpec, load_model

DRAFTS_FILE = Path(__file__).resolve().parent.parent / "data" / "drafts.toml"
DRAFT_METHODS = ("eagle", "eagle3", "mtp", "ngram", "model", "early-exit", "self", "dflash", "dspark", "p-eagle",
                 "pard")
# one forward pass per draft step, whatever K is (data/drafts.toml query_tokens)
BLOCK_METHODS = ("dflash", "dspark", "p-eagle", "pard")
TREE_METHODS = ("eagle", "eagle3")  # methods that run as a tree (METHOD:tree:TOPKxTOKENS)
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
    "dflash": ("dflash", "DFlash block diffusion: ONE pass of K+1 queries/seq, 5 target-sized layers (arXiv:2602.06036)"),
    "dspark": ("dspark", "DSpark: ONE block pass of K queries/seq + K-step low-rank Markov head (arXiv:2607.05147)"),
    "p-eagle": ("p-eagle", "P-EAGLE parallel EAGLE-3: ONE pass of 2K tokens/seq, 4 layers (vLLM 0.33 parallel_drafting)"),
    "pard": ("pard or pard:NAME", "PARD parallel draft model: ONE pass of 2K tokens/seq (TensorRT-LLM pard.py; arXiv:2504.18583)"),
}
TREE_SYNTAX = ("eagle3:tree:TxN", "EAGLE tree, topk T, N draft tokens: K = depth passes of T candidates, verify N+1 tokens/seq")



@lru_cache(maxsize=None)
def draft_defaults() -> dict:
    return tomllib.loads(DRAFTS_FILE.read_text())


@dataclass(frozen=True)
class DraftSpec:
    method: str  # one of DRAFT_METHODS
    model: ModelSpec | None = None  # for method "model"
    layers: int = 0  # for method "early-exit"; MTP depth D for "mtp" (0: the model's own)
    kv_budget: int = 0  # for method "self": cached tokens the draft pass reads (its compressed KV)
    topk: int = 1  # a draft tree's branching (SGLang --speculative-eagle-topk); 1: a chain
    tree_tokens: int = 0  # a draft tree's draft tokens N (verify runs N + 1 per sequence); 0: a chain

    @property
    def is_tree(self) -> bool:
        return self.tree_tokens > 0

    @property
    def is_block(self) -> bool:
        return self.method in BLOCK_METHODS

    @property
    def preset_key(self) -> str:
        """The acceptance preset of this draft (data/acceptance.toml): per depth for a tree."""
        return f"{self.method}-tree" if self.is_tree else self.method

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
        if self.is_tree:
            return f"{self.method}:tree:{self.topk}x{self.tree_tokens}"
        if self.method == "pard" and self.model is not None and self.model.name != draft_defaults()["pard"]["default_model"]:
            return f"pard:{self.model.name}"
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


def block_queries(draft: DraftSpec, k):
    """Query tokens per sequence of a block drafter's one pass at K drafts (data/drafts.toml query_tokens)."""
    k = np.asarray(k, dtype=float)
    rule = draft_defaults()[draft.method]["query_tokens"]
    return {"k": k, "k+1": k + 1.0, "2k": 2.0 * k}[rule]


def tree_pool_size(topk, depth):
    """Candidates a tree of topk T scores over depth K (SGLang's EAGLE tree: T children of the root, then T of
    each of the T kept nodes per level): T + (K - 1) T^2; 0 at K = 0. The verify pass checks the N best of them
    (:func:`verify_drafts`), and the tree's acceptance sums over the same N (specs.tree_acceptance)."""
    k = np.asarray(depth, dtype=float)
    t = float(topk)
    return np.where(k > 0, t + np.maximum(k - 1.0, 0.0) * t * t, 0.0)


def verify_drafts(draft: DraftSpec, k):
    """Draft tokens the verify pass checks per sequence at K (its queries: this + 1). A chain: K. A tree of
    topk T and N draft tokens at depth K: min(N, :func:`tree_pool_size`) = min(N, T + (K - 1) T^2); 0 at K = 0."""
    k = np.asarray(k, dtype=float)
    if not draft.is_tree:
        return k
    return np.minimum(float(draft.tree_tokens), tree_pool_size(draft.topk, k))


def _parse_tree(text: str) -> DraftSpec:
    """'eagle3:tree:4x8' -> an EAGLE-3 tree of topk 4 and 8 draft tokens."""
    method, _, shape = text.split(":", 2)
    try:
        topk, tokens = (int(x) for x in shape.lower().split("x"))
    except ValueError:
        topk = tokens = 0
    if not (1 <= topk <= 10 and 1 <= tokens <= 63 and tokens >= topk):
        raise PlannerError(f"draft '{text}': a tree is {method}:tree:TOPKxTOKENS with 1 <= TOPK <= 10 and TOPK <="
                           " TOKENS <= 63, e.g. eagle3:tree:4x8 (SGLang verifies TOKENS + 1 <= 64 tokens per sequence)")
    return DraftSpec(method, topk=topk, tree_tokens=tokens)


def parse_draft(text: str) -> DraftSpec:
    """'eagle', 'eagle3', 'mtp', 'mtp:D', 'ngram', 'early-exit:N', 'self:W', 'model:NAME|config.json',
    'dflash', 'dspark', 'p-eagle', 'pard', 'pard:NAME' or 'eagle3:tree:TOPKxTOKENS'."""
    text = text.strip()
    if any(text.startswith(f"{m}:tree:") for m in TREE_METHODS):
        return _parse_tree(text)
    if text == "pard" or text.startswith("pard:"):
        name = text.split(":", 1)[1] if ":" in text else draft_defaults()["pard"]["default_model"]
        if not name:
            raise PlannerError("draft 'pard:' needs the PARD draft model, e.g. pard:llama-3.2-1b")
        return DraftSpec("pard", load_model(name))
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


def named_drafts() -> tuple[str, ...]:
    """Every draft offered by name, in order (the dashboard's choices and --list drafts read this one list):
    the methods that need no argument, 'model' (model:NAME, its model picked beside it), then the draft trees:
    each tree acceptance preset's own (data/acceptance.toml tree_topk x tree_tokens) and data/drafts.toml
    [trees] extra."""
    from simulator.specs.acceptance import load_presets
    plain = [m for m in DRAFT_METHODS if m not in ("early-exit", "self")]
    trees = [f"{name.removesuffix('-tree')}:tree:{p['tree_topk']}x{p['tree_tokens']}" for name, p in load_presets().items()
             if name.removesuffix("-tree") in TREE_METHODS and name.endswith("-tree") and "tree_topk" in p]
    return tuple(dict.fromkeys(plain + trees + list(draft_defaults()["trees"]["extra"])))


def draft_syntax_list() -> str:
    """'eagle, eagle3, mtp or mtp:D, ngram, model:NAME, early-exit:N, self:W, dflash, ..., eagle3:tree:TxN'."""
    return ", ".join([DRAFT_SYNTAX[m][0] for m in DRAFT_METHODS] + [TREE_SYNTAX[0]])


def check_draft(draft: DraftSpec, target: ModelSpec, dep: Deployment) -> None:
    if draft.method == "early-exit" and draft.layers >= target.num_layers:
        raise PlannerError(f"draft early-exit:{draft.layers} must use fewer than the {target.num_layers} layers"
                           f" of {target.name}")
    if draft.method == "pard" and draft.model.vocab_size != target.vocab_size:
        raise PlannerError(f"draft {draft.label}: PARD draft model {draft.model.name} has vocabulary"
                           f" {draft.model.vocab_size}, target {target.name} has {target.vocab_size}; name a PARD"
                           " model of the target's family: pard:NAME (a catalog model or config.json)")
    if draft.method == "model":
        if draft.model.vocab_size != target.vocab_size:
            raise PlannerError(f"draft model {draft.model.name} has vocabulary {draft.model.vocab_size},"
                               f" target {target.name} has {target.vocab_size}: speculative decoding needs the same")


def draft_deployment(model: ModelSpec, dep: Deployment) -> Deployment:
    """Where a draft model runs: the target's precisions and engine kernels on :func:`draft_tp` GPUs."""
    return Deployment(tp=draft_tp(model, dep.tp), weight_dtype=dep.weight_dtype, act_dtype=dep.act_dtype,
                      kv_dtype=dep.kv_dtype, memory_utilization=dep.memory_utilization, kernels=dep.kernels)


def head_deployment(draft: DraftSpec, target: ModelSpec, dep: Deployment) -> Deployment:
    """The precisions a draft head's weights (its decoder layers and fusion projection) are held in. An MTP
    module ships in the target's own checkpoint (DeepSeek-V3's layer 61, README_WEIGHTS.md; its fusion
    projection at :meth:`fusion_dtype`), so it runs the target's precisions, block-scaled fp8 included. A head
    trained separately (EAGLE, EAGLE-3, the block heads) is its own bf16 checkpoint, which the target's
    quantization_config does not quantize (vLLM builds the draft's quantization from the draft's own config): bf16
    where the target runs its checkpoint's precision; a target quantized by the deployment quantizes both, as before."""
    if draft.method == "mtp" or dep.weight_dtype != target.checkpoint_weight_dtype:
        return dep
    return _bf16_weights(dep)


@lru_cache(maxsize=64)
def _bf16_weights(dep: Deployment) -> Deployment:
    """``dep`` with bf16 weights, which multiply bf16 activations (an unquantized layer is not fed fp8 ones), one
    object per deployment (the step model's shared ops key deployments by identity)."""
    return replace(dep, weight_dtype="bf16", act_dtype="bf16" if DTYPE_BYTES[dep.act_dtype] < 2 else dep.act_dtype)


def fusion_dtype(draft: DraftSpec, target: ModelSpec, dep: Deployment) -> str:
    """The precision of a head's fusion projection ([embedding, target features] -> D): an MTP module's eh_proj is
    a module its checkpoint keeps in bf16 (:meth:`ModelSpec.module_dtype`), an EAGLE head's fc its own precision."""
    held = head_deployment(draft, target, dep).weight_dtype
    return target.module_dtype("mtp_fusion", held) if draft.method == "mtp" else held


def draft_tp(model: ModelSpec, tp: int) -> int:
    """A draft model runs on the largest TP degree that divides both the target's TP and its own
    attention heads (28 heads under TP 8 run on TP 4): the target's TP when its heads split evenly."""
    t = tp
    while t > 1 and (tp % t or model.num_heads % t):
        t -= 1
    return t
