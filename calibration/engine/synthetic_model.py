"""The synthetic-acceptance run's target and draft (used by :mod:`calibration.engine.synthetic`): the
engine's ModelConfig at a catalog model's shapes, random weights drawn on the device, and the
EAGLE-like head or whole-model draft."""

from __future__ import annotations

import torch

from simulator.errors import PlannerError

from .engine import ModelDraft
from .model import ModelConfig, Transformer, weight_layout


def engine_config(model: str, layers: int | None = None, router_reuse: float = 0.0) -> ModelConfig:
    """The engine's ModelConfig at the shapes of a catalog model (or a config.json path).

    Only what the engine's Transformer implements is accepted: GQA attention, full attention in every
    layer, dense MLP or routed experts (no shared experts, no leading dense layers)."""
    from simulator.specs.models import load_model

    spec = load_model(model)
    problems = []
    if spec.attention != "gqa":
        problems.append(f"{spec.attention} attention")
    if spec.num_sliding_layers:
        problems.append("sliding-window layers")
    if not spec.uniform_attention:  # chunked, linear, sparse or differently shaped layers
        problems.append(spec.layer_kinds_label() + " layers")
    if spec.attention_output_gate or spec.final_logit_softcapping:
        problems.append("gated attention or logit softcapping")
    if spec.is_moe and (spec.shared_expert_intermediate_size or spec.num_dense_layers):
        problems.append("shared experts or dense leading layers")
    if problems:
        raise PlannerError(f"--model {model}: the reference engine has no {', '.join(problems)};"
                           f" pick a Llama/Qwen-style GQA model")
    n = spec.num_layers if layers is None else int(layers)
    if not 1 <= n <= spec.num_layers:
        raise PlannerError(f"--layers {layers}: must be in 1..{spec.num_layers} for {spec.name}")
    return ModelConfig(
        name=spec.name if n == spec.num_layers else f"{spec.name}-L{n}", n_layers=n, hidden=spec.hidden_size,
        n_heads=spec.num_heads, n_kv_heads=spec.num_kv_heads, head_dim=spec.head_dim,
        ffn=0 if spec.is_moe else spec.intermediate_size, vocab=spec.vocab_size,
        tied_embeddings=spec.tie_word_embeddings, n_experts=spec.num_experts, top_k=spec.experts_per_token,
        expert_ffn=spec.expert_intermediate_size, router_reuse=float(router_reuse), rope_interleaved=False)


def device_random_weights(cfg: ModelConfig, seed: int = 0, dtype=torch.bfloat16, device="cpu") -> dict:
    """Random weights in the layout of ``model.random_weights``, drawn directly on ``device`` in
    ``dtype`` (an 8B model in well under a second on a GPU, where the CPU generator of
    ``random_weights`` would take minutes at 30B). Same scaling: W ~ N(0, 1/fan_in), norms 1,
    embedding N(0, 1). The layout is checked against ``random_weights`` by the tests."""
    dev = torch.device(device)
    g = torch.Generator(device=dev).manual_seed(seed)

    def rnd(*shape, fan_in):
        return torch.empty(*shape, dtype=dtype, device=dev).normal_(0.0, fan_in ** -0.5, generator=g)

    return weight_layout(cfg, rnd, lambda n: torch.ones(n, dtype=dtype, device=dev), lambda v, h: rnd(v, h, fan_in=1))


class EagleHead(Transformer):
    """An EAGLE-like draft head: fusion GEMM [B, T, 2D] x [2D -> D], then the engine's decoder (one
    layer) and LM head. The fusion input is [embedding, embedding] (EAGLE: [embedding, target hidden
    state]); its output is not fed on, which leaves the cost intact (eager torch runs every op)."""

    def forward(self, tokens, cache, logits_for="all"):
        e = self.w["embed"][tokens]
        torch.cat([e, e], dim=-1) @ self.w["fc"].T  # noqa: B018 - the fusion GEMM's cost, result unused
        return super().forward(tokens, cache, logits_for)


def eagle_draft(target: Transformer, dense_ffn: int, seed: int = 1) -> ModelDraft:
    """One dense layer with the target's attention shapes and MLP width ``dense_ffn``, sharing the
    target's embedding, final norm and LM head; run by the engine's ModelDraft."""
    c = target.cfg
    cfg = ModelConfig(name=f"eagle[{c.name}]", n_layers=1, hidden=c.hidden, n_heads=c.n_heads,
                      n_kv_heads=c.n_kv_heads, head_dim=c.head_dim, ffn=dense_ffn, vocab=c.vocab,
                      rope_theta=c.rope_theta, norm_eps=c.norm_eps, tied_embeddings=c.tied_embeddings,
                      rope_interleaved=c.rope_interleaved)
    layer = device_random_weights(cfg, seed=seed, dtype=target.dtype, device=target.device)["layers"]
    g = torch.Generator(device=target.device).manual_seed(seed + 1)
    fc = torch.empty(c.hidden, 2 * c.hidden, dtype=target.dtype, device=target.device).normal_(
        0.0, (2 * c.hidden) ** -0.5, generator=g)
    w = {"embed": target.w["embed"], "norm": target.w["norm"], "lm_head": target.w["lm_head"], "layers": layer,
         "fc": fc}
    return ModelDraft(EagleHead(cfg, w), "eagle")


def make_synthetic_draft(spec: str, target: Transformer, dense_ffn: int, seed: int = 1) -> ModelDraft:
    """'eagle' | 'model:NAME' (a catalog model of random weights with the target's vocabulary)."""
    if spec == "eagle":
        return eagle_draft(target, dense_ffn, seed)
    if spec.startswith("model:"):
        cfg = engine_config(spec.split(":", 1)[1])
        if cfg.vocab != target.cfg.vocab:
            raise PlannerError(f"--draft {spec}: vocabulary {cfg.vocab} differs from the target's {target.cfg.vocab};"
                               f" pick a draft of the same family")
        w = device_random_weights(cfg, seed=seed, dtype=target.dtype, device=target.device)
        return ModelDraft(Transformer(cfg, w), spec)
    raise PlannerError(f"--draft {spec!r}: use eagle or model:NAME (a catalog model)")
