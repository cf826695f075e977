"""Llama-style decoder (dense or MoE) with a preallocated, per-sequence-length KV cache.

Letters: B sequences, T new tokens per sequence in this pass, L cache capacity, H hidden,
Hq / Hkv query / key-value heads, D head dim, V vocab, E experts, A = top_k active experts.
Each operator the cost model counts is a separate torch op: QKV GEMM, RoPE, SDPA attention,
O GEMM, gate/up GEMM + SiLU, down GEMM, (router + per-expert GEMMs), LM head.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch
import torch.nn.functional as F


@dataclass
class ModelConfig:
    name: str = "tiny"
    n_layers: int = 2
    hidden: int = 64
    n_heads: int = 4
    n_kv_heads: int = 2
    head_dim: int = 16
    ffn: int = 128
    vocab: int = 64
    rope_theta: float = 10000.0
    norm_eps: float = 1e-5
    tied_embeddings: bool = True
    # MoE (n_experts == 0: dense MLP)
    n_experts: int = 0
    top_k: int = 0
    expert_ffn: int = 0
    # adjacent-token routing correlation (synthetic router): position t of a sequence in a pass
    # re-uses position t-1's expert set (ids and weights) with this probability, else routes itself
    router_reuse: float = 0.0
    # "learned": top-k of the router's scores; "sampled": each token draws k distinct experts from a
    # fixed Zipf(router_skew) distribution (Gumbel top-k), independent of its hidden state and of the
    # other tokens: the routing the planner's formula assumes, with the same expert kernels timed
    router_mode: str = "learned"
    router_skew: float = 0.0
    rope_interleaved: bool = True  # GGUF (llama.cpp) layout: rotate adjacent pairs

    @property
    def is_moe(self) -> bool:
        return self.n_experts > 0


transformer_configs = {
    "smollm2-135m": dict(n_layers=30, hidden=576, n_heads=9, n_kv_heads=3, head_dim=64, ffn=1536,
                         vocab=49152, rope_theta=100000.0),  # HuggingFaceTB/SmolLM2-135M-Instruct (GGUF Q4_1)
    "moe-synthetic": dict(n_layers=8, hidden=512, n_heads=8, n_kv_heads=2, head_dim=64, ffn=0, vocab=8192,
                          n_experts=32, top_k=4, expert_ffn=512),
}


class KVCache:
    """k, v: [layers, B, Hkv, L, D]; lengths[b] = number of valid positions of sequence b."""

    def __init__(self, n_layers, batch, n_kv_heads, max_len, head_dim, dtype, device):
        shape = (n_layers, batch, n_kv_heads, max_len, head_dim)
        self.k = torch.zeros(shape, dtype=dtype, device=device)
        self.v = torch.zeros(shape, dtype=dtype, device=device)
        self.lengths = torch.zeros(batch, dtype=torch.long, device=device)
        self.max_len = max_len


def _rms_norm(x, w, eps):
    return F.rms_norm(x, (x.shape[-1],), w, eps)


class Transformer(torch.nn.Module):
    """Weights live in plain tensors (a dict) so a truncated copy can share or clone them."""

    def __init__(self, cfg: ModelConfig, weights: dict[str, torch.Tensor]):
        super().__init__()
        self.cfg = cfg
        self.w = weights
        self.dtype = weights["embed"].dtype
        self.device = weights["embed"].device
        half = cfg.head_dim // 2
        self.inv_freq = 1.0 / (cfg.rope_theta ** (torch.arange(0, half, dtype=torch.float32, device=self.device) / half))
        self.expert_stats: list[list[int]] | None = None  # per forward: distinct experts per MoE layer
        self.routing_trace: list | None = None  # per forward and MoE layer: expert ids [B, T, top_k]
        self._reuse_gen = torch.Generator().manual_seed(12345)

    @property
    def n_layers(self) -> int:
        return self.cfg.n_layers

    def new_cache(self, batch: int, max_len: int, n_layers: int | None = None) -> KVCache:
        c = self.cfg
        return KVCache(n_layers or c.n_layers, batch, c.n_kv_heads, max_len, c.head_dim, self.dtype, self.device)

    def truncated(self, n_layers: int, share_weights: bool = True) -> "Transformer":
        """First n_layers + final norm + LM head. share_weights=False gives an independent copy."""
        cfg = dataclasses.replace(self.cfg, n_layers=n_layers, name=f"{self.cfg.name}[:{n_layers}]")
        w = {"embed": self.w["embed"], "norm": self.w["norm"], "lm_head": self.w["lm_head"], "layers": self.w["layers"][:n_layers]}
        if not share_weights:
            w = {"embed": w["embed"].clone(), "norm": w["norm"].clone(), "layers": [{k: v.clone() for k, v in l.items()} for l in w["layers"]]}
            w["lm_head"] = w["embed"] if self.w["lm_head"] is self.w["embed"] else self.w["lm_head"].clone()
        return Transformer(cfg, w)

    # --- operators -------------------------------------------------------------------------
    def _rope(self, x, pos):
        """x: [B, T, h, D], pos: [B, T] absolute positions."""
        ang = pos.to(torch.float32)[..., None] * self.inv_freq  # [B, T, D/2]
        cos, sin = ang.cos()[:, :, None, :].to(x.dtype), ang.sin()[:, :, None, :].to(x.dtype)
        if self.cfg.rope_interleaved:
            x1, x2 = x[..., 0::2], x[..., 1::2]
            return torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1).flatten(-2)
        x1, x2 = x.chunk(2, dim=-1)
        return torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)

    def _attention(self, lw, x, li, cache, pos, mask, bidx, Lk):
        c = self.cfg
        B, T, _ = x.shape
        qkv = x @ lw["wqkv"].T  # [B, T, (Hq + 2 Hkv) D]
        q, k, v = qkv.split([c.n_heads * c.head_dim, c.n_kv_heads * c.head_dim, c.n_kv_heads * c.head_dim], dim=-1)
        q = self._rope(q.view(B, T, c.n_heads, c.head_dim), pos)
        k = self._rope(k.view(B, T, c.n_kv_heads, c.head_dim), pos)
        v = v.view(B, T, c.n_kv_heads, c.head_dim)
        # write new K/V at per-sequence positions: index [b, :, pos[b, t]] <- [B, T, Hkv, D]
        cache.k[li][bidx, :, pos] = k
        cache.v[li][bidx, :, pos] = v
        kk, vv = cache.k[li, :, :, :Lk], cache.v[li, :, :, :Lk]  # [B, Hkv, Lk, D]
        o = F.scaled_dot_product_attention(q.transpose(1, 2), kk, vv, attn_mask=mask, enable_gqa=True)  # [B, Hq, T, D]
        return o.transpose(1, 2).reshape(B, T, c.n_heads * c.head_dim) @ lw["wo"].T

    def _mlp(self, lw, x):
        g, u = (x @ lw["w13"].T).chunk(2, dim=-1)
        return (F.silu(g) * u) @ lw["w2"].T

    def _moe(self, lw, x, stats):
        """Top-k routed experts, evaluated only for experts that received tokens."""
        c = self.cfg
        shp = x.shape
        xt = x.reshape(-1, shp[-1])  # [N, H]
        scores = (xt @ lw["router"].T).softmax(-1)  # [N, E]
        if c.router_mode == "sampled":
            logp = -c.router_skew * torch.log(torch.arange(1, c.n_experts + 1, dtype=torch.float32))
            u = torch.rand(xt.shape[0], c.n_experts, generator=self._reuse_gen).clamp_min(1e-12)
            keys = (logp - torch.log(-torch.log(u))).to(scores.device)  # Gumbel top-k: k distinct, p ~ 1/i^s
            ids = keys.topk(c.top_k, dim=-1).indices
            wts = scores.gather(1, ids)
        else:
            wts, ids = scores.topk(c.top_k, dim=-1)  # [N, A]
        wts = wts / wts.sum(-1, keepdim=True)
        B, T = shp[0], shp[1] if len(shp) == 3 else 1
        if c.router_reuse > 0 and T > 1:
            # Markov reuse along each sequence: copy position t-1's (possibly copied) set with prob rho
            ids, wts = ids.view(B, T, -1).clone(), wts.view(B, T, -1).clone()
            copy = torch.rand(B, T, generator=self._reuse_gen) < c.router_reuse
            for t in range(1, T):
                m = copy[:, t].to(ids.device)
                ids[m, t] = ids[m, t - 1]
                wts[m, t] = wts[m, t - 1]
            ids, wts = ids.view(-1, c.top_k), wts.view(-1, c.top_k)
        if self.routing_trace is not None:
            self.routing_trace.append(ids.view(B, T, -1).to("cpu", torch.int16).numpy())
        out = torch.zeros_like(xt)
        flat_ids = ids.flatten()
        order = flat_ids.argsort()
        counts = torch.bincount(flat_ids, minlength=c.n_experts).tolist()  # host sync (the loop needs it)
        tok = (order // c.top_k)
        wflat = wts.flatten()[order]
        start = 0
        touched = 0
        for e, n in enumerate(counts):
            if n == 0:
                continue
            touched += 1
            t_idx = tok[start:start + n]
            xe = xt[t_idx]  # gather [n, H]
            g, u = (xe @ lw["w13"][e].T).chunk(2, dim=-1)
            ye = (F.silu(g) * u) @ lw["w2"][e].T
            out.index_add_(0, t_idx, ye * wflat[start:start + n, None])  # scatter
            start += n
        stats.append(touched)
        return out.view(shp)

    # --- forward -----------------------------------------------------------------------------
    def forward(self, tokens: torch.Tensor, cache: KVCache, logits_for: str = "all") -> torch.Tensor:
        """tokens [B, T] placed at positions cache.lengths[b] + t; advances cache.lengths by T.

        logits_for: "all" -> [B, T, V]; "last" -> [B, 1, V]; "none" -> None.
        """
        c = self.cfg
        B, T = tokens.shape
        start = cache.lengths
        pos = start[:, None] + torch.arange(T, device=tokens.device)  # [B, T]
        Lk = int(start.max()) + T
        assert Lk <= cache.max_len, f"KV cache overflow: {Lk} > {cache.max_len}"
        # key j visible to query (b, t) iff j <= pos[b, t]
        mask = (torch.arange(Lk, device=tokens.device)[None, None, :] <= pos[:, :, None])[:, None]  # [B, 1, T, Lk]
        bidx = torch.arange(B, device=tokens.device)[:, None]
        x = self.w["embed"][tokens]
        stats: list[int] = []
        for li, lw in enumerate(self.w["layers"]):
            x = x + self._attention(lw, _rms_norm(x, lw["attn_norm"], c.norm_eps), li, cache, pos, mask, bidx, Lk)
            h = _rms_norm(x, lw["ffn_norm"], c.norm_eps)
            x = x + (self._moe(lw, h, stats) if c.is_moe else self._mlp(lw, h))
        cache.lengths = start + T
        if c.is_moe and self.expert_stats is not None:
            self.expert_stats.append(stats)
        if logits_for == "none":
            return None
        if logits_for == "last":
            x = x[:, -1:]
        return _rms_norm(x, self.w["norm"], c.norm_eps) @ self.w["lm_head"].T


def weight_layout(cfg: ModelConfig, rnd, ones, embed, logit_scale: float = 1.0) -> dict:
    """The engine's weight dict for ``cfg``, drawn in a fixed order (layers, embedding, LM head):
    ``rnd(*shape, fan_in=)`` a matrix ~ N(0, 1/fan_in), ``ones(n)`` a norm, ``embed(vocab, hidden)``
    the embedding (so activations stay O(1))."""
    H, D = cfg.hidden, cfg.head_dim
    layers = []
    for _ in range(cfg.n_layers):
        lw = {"attn_norm": ones(H), "ffn_norm": ones(H),
              "wqkv": rnd((cfg.n_heads + 2 * cfg.n_kv_heads) * D, H, fan_in=H),
              "wo": rnd(H, cfg.n_heads * D, fan_in=cfg.n_heads * D)}
        if cfg.is_moe:
            lw["router"] = rnd(cfg.n_experts, H, fan_in=H)
            lw["w13"] = rnd(cfg.n_experts, 2 * cfg.expert_ffn, H, fan_in=H)
            lw["w2"] = rnd(cfg.n_experts, H, cfg.expert_ffn, fan_in=cfg.expert_ffn)
        else:
            lw["w13"] = rnd(2 * cfg.ffn, H, fan_in=H)
            lw["w2"] = rnd(H, cfg.ffn, fan_in=cfg.ffn)
        layers.append(lw)
    emb = embed(cfg.vocab, H)
    w = {"embed": emb, "norm": ones(H) * logit_scale, "layers": layers}
    w["lm_head"] = emb if cfg.tied_embeddings else rnd(cfg.vocab, H, fan_in=H)
    return w


def random_weights(cfg: ModelConfig, seed: int = 0, dtype=torch.float32, device="cpu", logit_scale: float = 1.0):
    """Seeded random weights (scaled so activations stay O(1)), drawn on the CPU generator."""
    g = torch.Generator().manual_seed(seed)

    def rnd(*shape, fan_in):
        return (torch.randn(*shape, generator=g) / fan_in ** 0.5).to(dtype=dtype, device=device)

    return weight_layout(cfg, rnd, lambda n: torch.ones(n, dtype=dtype, device=device),
                         lambda v, h: torch.randn(v, h, generator=g).to(dtype=dtype, device=device), logit_scale)
