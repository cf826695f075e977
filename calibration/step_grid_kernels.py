"""The kernels the step grid (calibration/step_grid.py) times, each checked against a reference before it is
used: decode attention of T queries over L + T cached keys through a causal kernel aligned to the cache's end
(query t sees keys 0 .. L + t), and routed experts dispatched grouped per expert (one grouped GEMM for gate/up,
one for down) or, where the grouped GEMM is missing or wrong, one expert at a time.

torch is passed in (imported only where the grid runs)."""
from __future__ import annotations

import math

# --- attention: causal, aligned to the cache's end --------------------------------------------------
def _reference_attention(torch, q, k, v):
    """float32 softmax(q k^T / sqrt(D)) v with query t of T seeing keys 0 .. S - T + t (bottom-right)."""
    T, S, group = q.shape[-2], k.shape[-2], q.shape[1] // k.shape[1]
    kk, vv = k.float().repeat_interleave(group, 1), v.float().repeat_interleave(group, 1)
    s = q.float() @ kk.transpose(-1, -2) / math.sqrt(q.shape[-1])
    visible = torch.arange(S, device=q.device)[None, :] <= torch.arange(T, device=q.device)[:, None] + (S - T)
    return s.masked_fill(~visible, float("-inf")).softmax(-1) @ vv


def _flash_lower_right(torch):
    """PyTorch's flash kernel called directly: on CUDA its is_causal means the bottom-right triangle (what
    torch.nn.attention.bias.causal_lower_right dispatches to); GQA is native (Hkv divides Hq)."""
    op = torch.ops.aten._scaled_dot_product_flash_attention

    def attend(q, k, v):
        return op(q, k, v, 0.0, True, False)[0]
    return attend


def _causal_bias_lower_right(torch):
    """scaled_dot_product_attention with a CausalBias (not a boolean mask): torch dispatches it to the
    flash or memory-efficient kernel with the bottom-right alignment, else to the math path."""
    import torch.nn.functional as F
    from torch.nn.attention.bias import causal_lower_right

    biases = {}  # one CausalBias per (T, S), made on first use (not under count_ops' dispatch mode)

    def attend(q, k, v):
        key = (q.shape[-2], k.shape[-2])
        if key not in biases:
            biases[key] = causal_lower_right(*key)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=biases[key], enable_gqa=True)
    return attend


ATTENTION_KERNELS = {"flash-lower-right": _flash_lower_right, "sdpa-causal-lower-right": _causal_bias_lower_right}


def check_attention(torch, attend, device, dtype, n_heads, n_kv_heads, head_dim) -> float:
    """Largest |difference| from the float32 reference over a few (T, S), with q, k and v strided as the
    pass hands them over (q a head slice, keys a slice of a longer cache); raises what the kernel raises."""
    g = torch.Generator(device=device).manual_seed(7)
    worst = 0.0
    for T, S in ((1, 37), (4, 37), (8, 130)):
        # q as the pass hands it over: the first Hq heads of the rotated [B, T, Hq + Hkv, D], transposed
        q = torch.randn(2, T, n_heads + n_kv_heads, head_dim, generator=g, device=device).to(dtype)
        q = q[:, :, :n_heads].transpose(1, 2)
        cache = torch.randn(2, 2, n_kv_heads, S + 8, head_dim, generator=g, device=device).to(dtype)
        k, v = cache[0, :, :, :S], cache[1, :, :, :S]
        out = attend(q, k, v)
        worst = max(worst, float((out.float() - _reference_attention(torch, q, k, v)).abs().max()))
    return worst


def pick_attention(torch, device, dtype, n_heads, n_kv_heads, head_dim, tolerance: float = 0.03):
    """(name, attend, max error, notes): the first kernel that runs and matches the reference; on a CPU
    only the CausalBias path (the CPU flash kernel's is_causal is top-left aligned)."""
    names = ["flash-lower-right", "sdpa-causal-lower-right"] if device.type == "cuda" else ["sdpa-causal-lower-right"]
    notes = []
    for name in names:
        try:
            attend = ATTENTION_KERNELS[name](torch)
            err = check_attention(torch, attend, device, dtype, n_heads, n_kv_heads, head_dim)
        except Exception as exc:  # noqa: BLE001 - the next kernel is tried; the reason is kept
            notes.append(f"{name}: {type(exc).__name__}: {str(exc).splitlines()[0][:160]}")
            continue
        if err <= tolerance:
            return name, attend, err, notes
        notes.append(f"{name}: max error {err:.3g} against the bottom-right reference")
    raise RuntimeError("no causal attention kernel aligned to the cache's end passed its check: " + "; ".join(notes))


# --- routed experts ---------------------------------------------------------------------------------
def route(torch, x, router_w, top_k):
    """Top-A of softmax(x W_r^T) (float32), renormalised (Qwen3-MoE's norm_topk_prob): (weights, ids) [N, A]."""
    probs = (x @ router_w.T).float().softmax(-1)
    w, ids = probs.topk(top_k, dim=-1)
    return (w / w.sum(-1, keepdim=True)).to(x.dtype), ids


def experts_grouped(torch, x, w13, w2, w, ids, n_experts):
    """Every routed (token, expert) pair through its expert, grouped per expert (no host sync).

    pairs sorted by expert id -> segment ends offs [E] -> grouped GEMM x_sorted [N A, H] by w13 [E, H, 2F]
    -> SiLU(gate) x up -> grouped GEMM by w2 [E, F, H] -> x weight -> index_add back to the N tokens."""
    import torch.nn.functional as F

    N, A = ids.shape
    flat = ids.reshape(-1)  # [N A]
    order = flat.argsort()
    counts = torch.zeros(n_experts, dtype=torch.int32, device=x.device).scatter_add_(
        0, flat, torch.ones_like(flat, dtype=torch.int32))
    offs = counts.cumsum(0, dtype=torch.int32)
    tok = order // A
    h = torch._grouped_mm(x[tok], w13.transpose(-2, -1), offs=offs)  # [N A, 2F]
    g, u = h.chunk(2, dim=-1)
    y = torch._grouped_mm(F.silu(g) * u, w2.transpose(-2, -1), offs=offs)  # [N A, H]
    y = y * w.reshape(-1)[order, None]
    return torch.zeros_like(x).index_add_(0, tok, y), counts


def experts_loop(torch, x, w13, w2, w, ids, n_experts):
    """The reference: each expert's tokens in a Python loop (host sync; the grouped path's check)."""
    import torch.nn.functional as F

    out = torch.zeros(x.shape, dtype=torch.float32, device=x.device)
    counts = torch.zeros(n_experts, dtype=torch.int32, device=x.device)
    for e in range(n_experts):
        tok, slot = (ids == e).nonzero(as_tuple=True)
        counts[e] = tok.numel()
        if tok.numel():
            g, u = (x[tok] @ w13[e].T).chunk(2, dim=-1)
            out.index_add_(0, tok, ((F.silu(g) * u) @ w2[e].T).float() * w[tok, slot, None].float())
    return out, counts


def check_experts(torch, device, dtype, hidden, expert_ffn, n_experts, top_k) -> float:
    """Largest |grouped - loop| / max|loop| at the model's expert width over at most 16 experts (the check
    is of the dispatch, not of memory): 5 tokens x top-2 (experts with no token: empty groups) and 64
    tokens x top-A (every expert busy); raises what the grouped GEMM raises."""
    g = torch.Generator(device=device).manual_seed(11)
    n_experts = min(n_experts, 16)

    def rnd(*shape, fan_in):
        return (torch.randn(*shape, generator=g, device=device) / fan_in ** 0.5).to(dtype)

    w13, w2 = rnd(n_experts, 2 * expert_ffn, hidden, fan_in=hidden), rnd(n_experts, hidden, expert_ffn, fan_in=expert_ffn)
    router = rnd(n_experts, hidden, fan_in=hidden)
    worst = 0.0
    for n_tokens, k in ((5, min(top_k, 2)), (64, min(top_k, n_experts))):
        x = rnd(n_tokens, hidden, fan_in=1)
        w, ids = route(torch, x, router, k)
        got, c1 = experts_grouped(torch, x, w13, w2, w, ids, n_experts)
        ref, c2 = experts_loop(torch, x, w13, w2, w, ids, n_experts)
        if not bool((c1 == c2).all()):
            raise RuntimeError("grouped dispatch counted different tokens per expert than the loop")
        worst = max(worst, float((got.float() - ref).abs().max() / ref.abs().max().clamp_min(1e-6)))
    return worst
