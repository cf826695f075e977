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

One-pass block drafters (DFlash, DSpark, P-EAGLE, PARD; :data:`simulator.specs.drafts.BLOCK_METHODS`)
propose all K drafts in ONE forward pass over q(K) query tokens per sequence (K + 1, K or 2K:
``query_tokens`` in data/drafts.toml), so their step is that one pass, priced in the extend slot, with
no one-token passes (:func:`draft_passes` = 1 at K > 0):

    draft(B, K) = block(B, K)     layers at B q(K) tokens (attention: q(K) queries over the context),
                                  LM head at the B K predicted positions; DFlash / DSpark add their
                                  context step (fc + every layer's K/V over the B (K + 1) verified tokens)

A draft tree (``eagle3:tree:TxN``) runs its K - 1 passes after the first over T candidates per sequence.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from simulator.physics.forward_pass import FORWARD_PARTS, head_ops
from simulator.physics.gemm import GemmPrecision, gemm
from simulator.physics.layers import LAYER_PARTS, attention_deployment, rank_tokens
from simulator.physics.operators import PassCost, StepCost, evaluate
from simulator.physics.pass_tables import PassPlan, Segment, cell_inputs, price_plan
from simulator.specs.deployment import Deployment
from simulator.physics.ops import Op
from simulator.specs.drafts import (DraftSpec, block_queries, draft_defaults, draft_deployment, fusion_dtype,
                                    head_deployment)
from simulator.specs.hardware import DTYPE_BYTES, Hardware
from simulator.specs.models import ModelSpec
from simulator.specs.profile import Profile


@dataclass(frozen=True)
class DraftSetting:
    """What a draft pass is priced with: the draft, the target it proposes for, the target's deployment,
    the device and the calibration profile (None: the datasheet roofline); ``caches``: the step model's
    (simulator.physics.caches) its ops are built and priced with, None: nothing kept."""

    draft: DraftSpec
    target: ModelSpec
    dep: Deployment
    hw: Hardware
    profile: Profile | None = None
    caches: object = field(default=None, compare=False, repr=False)

    @classmethod
    def of(cls, sc, caches=None) -> "DraftSetting":
        """The setting of a scenario (anything with draft, model, deployment, hardware and profile)."""
        return cls(sc.draft, sc.model, sc.deployment, sc.hardware, sc.profile, caches)


# Methods whose first draft pass of a step is the extend pass over the verified positions (above).
EXTEND_METHODS = ("eagle", "eagle3", "mtp", "model")


def has_extend_pass(draft: DraftSpec, dep: Deployment | None = None) -> bool:
    """Whether the step's first draft pass differs from the others (priced by :func:`draft_extend_cost`)."""
    return draft.method in EXTEND_METHODS or draft.is_block or (draft.method == "self" and dep is not None
                                                                and dep.kernels.self_spec_catch_up)


def _rows(dep: Deployment, batch, queries, part: str):
    """A part's token count: the builder's own (part "tokens", simulator.physics.layers), else the replica's."""
    return np.asarray(batch, dtype=float) if part == "tokens" else rank_tokens(dep, batch, queries)


def _fusion_precision(draft: DraftSpec, target: ModelSpec, dep: Deployment) -> GemmPrecision:
    """A head's fusion projection: a bf16 one the target's quantization does not reach (an MTP eh_proj, an EAGLE
    fc) multiplies bf16 activations."""
    return GemmPrecision.held(dep, fusion_dtype(draft, target, dep))


def _plan(dep: Deployment, specs: tuple, key: tuple, segments: list, ops, batch, context_len,
          cell_key: tuple) -> PassPlan:
    """A pass whose ops ``ops(batch, context, part)`` builds; ``segments``: (key suffix, token count per
    cell, the part of ``ops`` at token counts t) of its token ops; ``cell_key``: what its per-cell ops
    are built from besides ``key`` and ``specs`` (PassPlan.cell_key)."""
    return PassPlan(dep, specs, tuple(Segment(key + (name,), tokens, build) for name, tokens, build in segments),
                    lambda: ops(batch, context_len, "cells"), lambda: ops(batch, context_len, "all"),
                    cell_key=key + cell_key)


def draft_extend_plan(setting: DraftSetting, batch, k, context_len, expert_batch=None) -> PassPlan | None:
    """The extend pass over the (B, K) grid (:func:`draft_extend_cost`) as a :class:`PassPlan`: the draft's
    layers' token ops at the replica's B (K + 1) tokens, its head's at B rows, attention per cell; a head's
    routed experts (an MTP layer of an MoE target) at ``expert_batch`` sequences where given (the padding
    rows of a padded graph the router sends to experts: simulator.physics.engine_time.expert_batch)."""
    draft, target, dep, hw = setting.draft, setting.target, setting.dep, setting.hw
    if not has_extend_pass(draft, dep):
        return None
    batch, k = np.asarray(batch, dtype=float), np.asarray(k, dtype=float)
    queries = k + 1.0  # batch and K keep their own axes: batch-only ops are priced over B alone
    cells = (draft,) + cell_inputs(batch, k, context_len, expert_batch)
    if draft.is_block:
        return block_plan(setting, batch, k, context_len, cells)
    if draft.method == "self":
        # after a step in which any sequence accepted all K drafts, the draft's cache lacks the last draft
        # token: the first pass runs it and the bonus token for every sequence (two queries each). The
        # engine's loop does so batch-wide whenever one sequence needs it, i.e. nearly every step from a
        # few sequences on; priced every step (at one sequence, where it is not, two memory-bound
        # tokens cost what one does)
        def self_ops(b, L, part):
            return FORWARD_PARTS[part](target, dep, hw, b, 2.0, np.minimum(L, draft.kv_budget), "draft_extend.",
                                       caches=setting.caches)
        return _plan(dep, (target, dep), ("extend-self",), [("all", rank_tokens(dep, batch, 2.0),
                                                             lambda t: self_ops(t, 0.0, "tokens"))],
                     self_ops, batch, context_len, cells)
    if draft.method == "model":
        m = draft.model
        ddep = draft_deployment(m, dep)
        adep = attention_deployment(ddep)

        model_ops = draft_model_ops(m, ddep, adep, hw, queries, 1.0, "draft_extend.", setting.caches)
        return _plan(ddep, (m, dep), ("extend-model",), [
            ("layers", rank_tokens(ddep, batch, queries), lambda t: model_ops(t, 0.0, "tokens")),
            ("head", rank_tokens(ddep, batch, 1.0), lambda t: head_ops(m, adep, hw, t, m.vocab_size, "draft_extend."))],
            model_ops, batch, context_len, cells)
    cfg = draft_defaults()[draft.method]
    vocab = min(cfg.get("draft_vocab") or target.vocab_size, target.vocab_size)
    fusion, D = _fusion_precision(draft, target, dep), target.hidden_size
    layers = (0, 1) if draft.method == "mtp" and target.is_moe else (1, 0)
    hdep = head_deployment(draft, target, dep)  # MTP: the target's checkpoint; EAGLE heads: their own (bf16)
    adep = attention_deployment(hdep)

    def layer_ops(b, L, part):
        ops = [] if part == "cells" else [gemm("draft_extend.fusion", _rows(dep, b, queries, part), D,
                                               cfg["fusion_inputs"] * D, fusion, 1)]
        eb = {} if part == "tokens" or expert_batch is None else {"expert_batch": expert_batch}
        return ops + LAYER_PARTS[part](target, hdep, hw, b, queries, L, "draft_extend.", layer_counts=layers,
                                       caches=setting.caches, **eb)

    def head_ops_at(t):
        return head_ops(target, adep, hw, t, vocab, "draft_extend.")

    def ops(b, L, part):
        return layer_ops(b, L, part) + (head_ops_at(rank_tokens(dep, b, 1.0)) if part == "all" else [])
    return _plan(dep, (target, dep), ("extend-head", draft.method, vocab, cfg["fusion_inputs"], layers), [
        ("layers", rank_tokens(dep, batch, queries), lambda t: layer_ops(t, 0.0, "tokens")),
        ("head", rank_tokens(dep, batch, 1.0), head_ops_at)], ops, batch, context_len, cells)


def draft_model_ops(m, ddep, adep, hw, queries, head_tokens, prefix: str, caches=None):
    """ops(b, L, part) of a draft model's pass: its layers over ``queries`` tokens per sequence and, for the
    whole pass, its LM head over ``head_tokens`` positions per sequence (built with ``caches``)."""
    def ops(b, L, part):
        out = LAYER_PARTS[part](m, ddep, hw, b, queries, L, prefix, caches=caches)
        if part == "all":
            out += head_ops(m, adep, hw, rank_tokens(ddep, b, head_tokens), m.vocab_size, prefix)
        return out
    return ops


def block_plan(setting: DraftSetting, batch, k, context_len, cells: tuple) -> PassPlan:
    """A block drafter's one pass over the (B, K) grid (module docstring): q(K) query tokens per sequence
    through its layers (a draft model's for PARD, target-sized layers for the heads), the LM head at the
    B K predicted positions; DFlash / DSpark also project the B (K + 1) verified tokens' target features
    (fc) to every draft layer's K/V (the context step), and DSpark runs K sequential Markov-head products
    [B, r] x [r, V]."""
    draft, target, dep, hw = setting.draft, setting.target, setting.dep, setting.hw
    cfg = draft_defaults()[draft.method]
    queries = np.maximum(block_queries(draft, k), 1.0)  # K = 0 drafts nothing (the step is not run there)
    heads = np.maximum(k, 1.0)
    if draft.method == "pard":  # a separate small LM over [accepted tokens, mask tokens]
        m = draft.model
        ddep = draft_deployment(m, dep)
        adep = attention_deployment(ddep)

        pard_ops = draft_model_ops(m, ddep, adep, hw, queries, heads, "draft_block.", setting.caches)
        return _plan(ddep, (m, dep), ("block-pard", cfg["query_tokens"]), [
            ("layers", rank_tokens(ddep, batch, queries), lambda t: pard_ops(t, 0.0, "tokens")),
            ("head", rank_tokens(ddep, batch, heads), lambda t: head_ops(m, adep, hw, t, m.vocab_size, "draft_block."))],
            pard_ops, batch, context_len, cells)
    vocab = min(cfg.get("draft_vocab") or target.vocab_size, target.vocab_size)
    D, n_layers = target.hidden_size, int(cfg["draft_layers"])
    hdep = head_deployment(draft, target, dep)  # a block head is its own (bf16) checkpoint
    head = GemmPrecision(DTYPE_BYTES[hdep.weight_dtype], DTYPE_BYTES[dep.act_dtype])
    w, a = head.w_bytes, head.a_bytes
    adep = attention_deployment(hdep)
    verified = k + 1.0  # the verified positions whose target features the context step projects
    kv_width = n_layers * 2 * target.num_kv_heads * target.head_dim / adep.tp

    def layer_ops(b, L, part):
        # P-EAGLE fuses [embedding, target features] of its query tokens (EAGLE-3's fc); DFlash / DSpark
        # queries are embeddings alone (their fc runs in the context step)
        fuse = part != "cells" and not cfg["context_kv"]
        ops = [gemm("draft_block.fusion", _rows(dep, b, queries, part), D, cfg["fusion_inputs"] * D, head, 1)] \
            if fuse else []
        return ops + LAYER_PARTS[part](target, hdep, hw, b, queries, L, "draft_block.", layer_counts=(n_layers, 0),
                                       caches=setting.caches)

    def context_ops(t):  # fc of the fused target features + one K/V GEMM for every draft layer
        return [gemm("draft_block.context_fc", t, D, cfg["fusion_inputs"] * D, head, 1),
                gemm("draft_block.context_kv", t, kv_width, D, head, 1)]

    def markov_ops(b):  # K sequential [B, r] x [r, V] products: the [r, V] weight read K times
        r = float(cfg["markov_rank"])
        rows = rank_tokens(dep, b, 1.0)
        flops = 2.0 * rows * heads * vocab * r
        nbytes = heads * (vocab * r * w + rows * (vocab + r) * a)
        return [Op("draft_block.markov_head", "gemm", flops, nbytes, kernels=2, count=1, eff_tokens=rows)]

    def head_ops_at(t):
        return head_ops(target, adep, hw, t, vocab, "draft_block.")

    def ops(b, L, part):
        out = layer_ops(b, L, part)
        if part == "all":
            out += head_ops_at(rank_tokens(dep, b, heads))
            if cfg["context_kv"]:
                out += context_ops(rank_tokens(dep, b, verified))
        if part in ("all", "cells") and "markov_rank" in cfg:
            out += markov_ops(b)
        return out
    segments = [("layers", rank_tokens(dep, batch, queries), lambda t: layer_ops(t, 0.0, "tokens")),
                ("head", rank_tokens(dep, batch, heads), head_ops_at)]
    if cfg["context_kv"]:
        segments.append(("context", rank_tokens(dep, batch, verified), context_ops))
    return _plan(dep, (target, dep), ("block-head", draft.method, vocab, cfg["fusion_inputs"], n_layers,
                                      cfg["query_tokens"]), segments, ops, batch, context_len, cells)


def draft_extend_cost(setting: DraftSetting, batch, k, context_len, price=evaluate,
                      expert_batch=None) -> StepCost | None:
    """The extend pass over the (B, K) grid: the draft's layers over B (K + 1) verified tokens (their
    attention: K + 1 queries per sequence over the context), its LM head and sampling at B rows;
    for self-speculation on an engine whose first draft pass catches up two tokens, that pass; None for
    methods without one (n-gram, early-exit, other self-speculation). ``price``: :func:`evaluate`
    (per op) or :func:`simulator.physics.operators.price_pass` (the sum first)."""
    plan = draft_extend_plan(setting, batch, k, context_len, expert_batch)
    if plan is None:
        return None
    shape = np.broadcast_shapes(np.shape(batch), np.shape(k), np.shape(context_len))
    return price(plan.full(), setting.hw, plan.dep, setting.profile, shape)


def draft_pass_plan(setting: DraftSetting, batch, context_len) -> PassPlan | None:
    """One draft pass (one token per sequence) as a :class:`PassPlan` (:func:`draft_pass_cost`); None for a
    host-side n-gram lookup (no ops)."""
    draft, target, dep, hw = setting.draft, setting.target, setting.dep, setting.hw
    batch = np.asarray(batch, dtype=float)
    if draft.method == "ngram":
        return None
    cells = (draft,) + cell_inputs(batch, context_len)
    if draft.method == "early-exit":
        dense = min(draft.layers, target.num_mlp_dense_layers)
        counts = (dense, draft.layers - dense)
        adep = attention_deployment(dep)

        def exit_ops(b, L, part):
            ops = LAYER_PARTS[part](target, dep, hw, b, 1.0, L, "draft.", layer_counts=counts, caches=setting.caches)
            if part == "cells":
                return ops
            return ops + head_ops(target, adep, hw, _rows(dep, b, 1.0, part), target.vocab_size, "draft.")
        return _plan(dep, (target, dep), ("draft-early-exit", counts), [
            ("all", rank_tokens(dep, batch, 1.0), lambda t: exit_ops(t, 0.0, "tokens"))], exit_ops, batch, context_len,
            cells)
    if draft.method in ("self", "model", "pard"):  # the whole target over its compressed KV, or a draft model
        m = target if draft.method == "self" else draft.model
        mdep = dep if draft.method == "self" else draft_deployment(m, dep)

        def lm_ops(b, L, part):
            L = np.minimum(L, draft.kv_budget) if draft.method == "self" else L
            return FORWARD_PARTS[part](m, mdep, hw, b, 1.0, L, "draft.", caches=setting.caches)
        return _plan(mdep, (m, dep), ("draft-" + draft.method,), [
            ("all", rank_tokens(mdep, batch, 1.0), lambda t: lm_ops(t, 0.0, "tokens"))], lm_ops, batch, context_len,
            cells)
    # EAGLE heads and MTP modules: one target-sized decoder layer per pass (an MTP module of an MoE target
    # is a full MoE block: its busiest-GPU expert load, dispatch and combine as in the target)
    cfg = draft_defaults()[draft.method]
    vocab = min(cfg.get("draft_vocab") or target.vocab_size, target.vocab_size)
    moe_layer = draft.method == "mtp" and target.is_moe
    fusion, D = _fusion_precision(draft, target, dep), target.hidden_size
    hdep = head_deployment(draft, target, dep)  # MTP: the target's checkpoint; EAGLE heads: their own (bf16)
    adep = attention_deployment(hdep)

    q = float(draft.topk)  # a tree's passes after the first run T candidates per sequence (a chain: 1)

    def head_layer(b, L, part):  # the fusion projection, one decoder layer, the LM head
        ops = LAYER_PARTS[part](target, hdep, hw, b, q, L, "draft.", layer_counts=(0, 1) if moe_layer else (1, 0),
                                caches=setting.caches)
        if part == "cells":
            return ops
        rows = _rows(dep, b, q, part)
        return [gemm("draft.fusion", rows, D, cfg["fusion_inputs"] * D, fusion, 1)] + ops + \
            head_ops(target, adep, hw, rows, vocab, "draft.", sampling=True)
    return _plan(dep, (target, dep), ("draft-head", draft.method, vocab, cfg["fusion_inputs"], moe_layer, q), [
        ("all", rank_tokens(dep, batch, q), lambda t: head_layer(t, 0.0, "tokens"))], head_layer, batch, context_len,
        cells)


def draft_passes(draft: DraftSpec, k) -> np.ndarray:
    """Draft passes per step at K drafts: K (heads, draft models, self-speculation; a tree's depth), one host
    lookup for n-gram, ONE pass for a block drafter (DFlash, DSpark, P-EAGLE, PARD)."""
    k = np.asarray(k, dtype=float)
    return np.minimum(k, 1.0) if draft.method == "ngram" or draft.is_block else k


def draft_pass_cost(setting: DraftSetting, batch, k, context_len, price=evaluate) -> tuple[StepCost, np.ndarray]:
    """(cost of one draft pass at the shape of ``batch``, number of passes = K); ``price`` as for
    :func:`draft_extend_cost` (a host-side n-gram lookup is a StepCost either way).

    Draft passes process one token per sequence whatever K is, so they are priced once per batch
    size and scaled by K: a 512 x 9 grid needs 512 evaluations, not 4608.
    """
    k = np.asarray(k, dtype=float)
    batch = np.asarray(batch, dtype=float)
    if setting.draft.method == "ngram":
        cfg = draft_defaults()["ngram"]
        host_s = cfg["host_fixed_s"] + cfg["host_per_sequence_s"] * batch
        zero = np.zeros((1,) + batch.shape)
        host = np.asarray(host_s, dtype=float).reshape((1,) + batch.shape)
        # host-side work: counted as launch-like time, neither compute- nor memory-bound on the device
        return StepCost(["draft.ngram_lookup"], ["elementwise"], zero, zero, zero, zero, host, host), \
            draft_passes(setting.draft, k)
    plan = draft_pass_plan(setting, batch, context_len)
    return price(plan.full(), setting.hw, plan.dep, setting.profile, batch.shape), draft_passes(setting.draft, k)


def draft_costs(setting: DraftSetting, B, K, C, extend_expert_batch=None) -> tuple[PassCost, np.ndarray,
                                                                                  PassCost | None]:
    """(one draft pass over (B, 1, L), passes per step over K, the extend pass over (B, K, L) or None), their
    token ops read from tables (:mod:`simulator.physics.pass_tables`, kept in ``setting.caches``: the step
    model's); ``extend_expert_batch``: as for :func:`draft_extend_plan`."""
    caches = setting.caches
    shape = (B.shape[0], 1, C.shape[-1])
    plan = draft_pass_plan(setting, B, C)  # ops over B alone (token ops, routed experts) stay (B, 1, 1)
    if plan is None:  # a host-side lookup: no ops to price
        draft_pass, passes = draft_pass_cost(setting, np.broadcast_to(B, shape), K, C)
        draft_pass = PassCost.of(draft_pass)
    else:
        draft_pass = price_plan(plan, setting.hw, setting.profile, shape, caches)
        passes = draft_passes(setting.draft, K)
    extend = draft_extend_plan(setting, B, K, C, extend_expert_batch)
    if extend is not None:
        extend = price_plan(extend, setting.hw, setting.profile, np.broadcast_shapes(B.shape, K.shape, C.shape),
                            caches)
    return draft_pass, passes, extend
