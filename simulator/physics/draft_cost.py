"""Draft cost per speculative step, by method (sizes and host costs from ``data/drafts.toml``).

See :mod:`simulator.specs.drafts` for the methods. Draft passes process one token per sequence
whatever K is, so one pass is priced per batch size and multiplied by the number of passes.

A step of an EAGLE / EAGLE-3 / MTP head or of a separate draft model runs K draft passes, and the
first of them is an *extend* pass: the draft re-runs over every position the target just verified
(B (K + 1) tokens) to write its own KV and hidden states for them, and takes logits only at the
last position of each sequence (B rows). Released code: vLLM 0.11 ``v1/spec_decode/eagle.py::
EagleProposer.propose`` (pass 1 over all scheduled tokens, LM head at ``last_token_indices``, then
K - 1 passes over B tokens); vLLM 0.33's two-stage speculator (a draft "prefill" over B (K + 1)
tokens, then K - 1 decode passes); SGLang 0.4.4 ``speculative/eagle_worker.py`` (S - 1 draft
decode passes before verify, ``forward_draft_extend_after_decode`` over the accepted tokens after
it, run eagerly). So a step prices K - 1 one-token passes and one extend pass:

    draft(B, K) = (K - 1) x pass(B) + extend(B, K)      extend: layers at B (K + 1) tokens, head at B
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from simulator.physics.layers import (attention_deployment, decoder_layers_ops, forward_ops, gemm, head_ops,
                                      rank_tokens)
from simulator.physics.operators import StepCost, evaluate
from simulator.physics.ops import Op
from simulator.specs.deployment import Deployment
from simulator.specs.drafts import DraftSpec, draft_defaults, draft_deployment
from simulator.specs.hardware import DTYPE_BYTES, Hardware
from simulator.specs.models import ModelSpec
from simulator.specs.profile import Profile


def _head_layer_ops(target: ModelSpec, dep: Deployment, hw: Hardware, batch, context_len, fusion: int,
                    vocab: int, moe_layer: bool) -> list[Op]:
    """One pass of an EAGLE/MTP head: fusion projection, one decoder layer, LM head."""
    w = DTYPE_BYTES[dep.weight_dtype]
    a = DTYPE_BYTES[dep.act_dtype]
    D = target.hidden_size
    layers = (0, 1) if moe_layer else (1, 0)
    local = rank_tokens(dep, batch, 1.0)
    adep = attention_deployment(dep)
    ops = [gemm("draft.fusion", local, D, fusion * D, w, a, 1)]
    ops += decoder_layers_ops(target, dep, hw, batch, 1.0, context_len, "draft.", layer_counts=layers)
    ops += head_ops(target, adep, hw, local, vocab, "draft.", sampling=True)
    return ops


@dataclass(frozen=True)
class DraftSetting:
    """What a draft pass is priced with: the draft, the target it proposes for, the target's deployment,
    the device and the calibration profile (None: the datasheet roofline)."""

    draft: DraftSpec
    target: ModelSpec
    dep: Deployment
    hw: Hardware
    profile: Profile | None = None

    @classmethod
    def of(cls, sc) -> "DraftSetting":
        """The setting of a scenario (anything with draft, model, deployment, hardware and profile)."""
        return cls(sc.draft, sc.model, sc.deployment, sc.hardware, sc.profile)


# Methods whose first draft pass of a step is the extend pass over the verified positions (above).
EXTEND_METHODS = ("eagle", "eagle3", "mtp", "model")


def has_extend_pass(draft: DraftSpec, dep: Deployment | None = None) -> bool:
    """Whether the step's first draft pass differs from the others (priced by :func:`draft_extend_cost`)."""
    return draft.method in EXTEND_METHODS or (draft.method == "self" and dep is not None
                                              and dep.kernels.self_spec_catch_up)


def draft_extend_cost(setting: DraftSetting, batch, k, context_len, price=evaluate) -> StepCost | None:
    """The extend pass over the (B, K) grid: the draft's layers over B (K + 1) verified tokens (their
    attention: K + 1 queries per sequence over the context), its LM head and sampling at B rows;
    for self-speculation on an engine whose first draft pass catches up two tokens, that pass; None for
    methods without one (n-gram, early-exit, other self-speculation). ``price``: :func:`evaluate`
    (per op) or :func:`simulator.physics.operators.price_pass` (the sum first)."""
    draft, target, dep, hw, profile = setting.draft, setting.target, setting.dep, setting.hw, setting.profile
    if not has_extend_pass(draft, dep):
        return None
    batch, k = np.asarray(batch, dtype=float), np.asarray(k, dtype=float)
    queries = k + 1.0  # batch and K keep their own axes: batch-only ops are priced over B alone
    shape = np.broadcast_shapes(batch.shape, k.shape, np.shape(context_len))
    if draft.method == "self":
        # after a step in which any sequence accepted all K drafts, the draft's cache lacks the last draft
        # token: the first pass runs it and the bonus token for every sequence (two queries each). The
        # engine's loop does so batch-wide whenever one sequence needs it, i.e. nearly every step from a
        # few sequences on; priced every step (at one sequence, where it is not, two memory-bound
        # tokens cost what one does)
        ops = forward_ops(target, dep, hw, batch, 2.0, np.minimum(context_len, draft.kv_budget), "draft_extend.")
        return price(ops, hw, dep, profile, shape)
    if draft.method == "model":
        m = draft.model
        ddep = draft_deployment(m, dep)
        ops = decoder_layers_ops(m, ddep, hw, batch, queries, context_len, "draft_extend.")
        ops += head_ops(m, attention_deployment(ddep), hw, rank_tokens(ddep, batch, 1.0), m.vocab_size,
                        "draft_extend.")
        return price(ops, hw, ddep, profile, shape)
    cfg = draft_defaults()[draft.method]
    vocab = min(cfg.get("draft_vocab") or target.vocab_size, target.vocab_size)
    w, a = DTYPE_BYTES[dep.weight_dtype], DTYPE_BYTES[dep.act_dtype]
    D = target.hidden_size
    moe_layer = draft.method == "mtp" and target.is_moe
    ops = [gemm("draft_extend.fusion", rank_tokens(dep, batch, queries), D, cfg["fusion_inputs"] * D, w, a, 1)]
    ops += decoder_layers_ops(target, dep, hw, batch, queries, context_len, "draft_extend.",
                              layer_counts=(0, 1) if moe_layer else (1, 0))
    ops += head_ops(target, attention_deployment(dep), hw, rank_tokens(dep, batch, 1.0), vocab, "draft_extend.")
    return price(ops, hw, dep, profile, shape)


def draft_pass_cost(setting: DraftSetting, batch, k, context_len, price=evaluate) -> tuple[StepCost, np.ndarray]:
    """(cost of one draft pass at the shape of ``batch``, number of passes = K); ``price`` as for
    :func:`draft_extend_cost` (a host-side n-gram lookup is a StepCost either way).

    Draft passes process one token per sequence whatever K is, so they are priced once per batch
    size and scaled by K: a 512 x 9 grid needs 512 evaluations, not 4608.
    """
    draft, target, dep, hw, profile = setting.draft, setting.target, setting.dep, setting.hw, setting.profile
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
        ops += head_ops(target, attention_deployment(dep), hw, rank_tokens(dep, batch, 1.0), target.vocab_size, "draft.")
        return price(ops, hw, dep, profile, shape), k
    if draft.method == "self":  # the whole target over its compressed KV cache
        ops = forward_ops(target, dep, hw, batch, 1.0, np.minimum(context_len, draft.kv_budget), "draft.")
        return price(ops, hw, dep, profile, shape), k
    if draft.method == "model":
        m = draft.model
        ddep = draft_deployment(m, dep)
        ops = forward_ops(m, ddep, hw, batch, 1.0, context_len, "draft.")
        per_pass = price(ops, hw, ddep, profile, shape)
    else:
        # EAGLE heads and MTP modules: one target-sized decoder layer per pass (an MTP module of an MoE
        # target is a full MoE block: its busiest-GPU expert load, dispatch and combine as in the target)
        cfg = defaults[draft.method]
        vocab = min(cfg.get("draft_vocab") or target.vocab_size, target.vocab_size)
        ops = _head_layer_ops(target, dep, hw, batch, context_len, cfg["fusion_inputs"], vocab,
                              moe_layer=draft.method == "mtp" and target.is_moe)
        per_pass = price(ops, hw, dep, profile, shape)
    return per_pass, k
