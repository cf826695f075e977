"""The decoder the step grid (calibration/step_grid.py) times: the torch reference engine's Transformer
(calibration/engine/model.py) with a static-shape forward for graph capture, random weights at a catalog model's
shapes for as many distinct layer sets as the GPU holds, and the KV pool; the aten ops one pass launches.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from calibration.step_grid_kernels import experts_grouped, experts_loop, route

RESERVE_BYTES = 6 << 30  # GPU memory kept free for activations, logits and the graphs' pools

# --- the decoder -----------------------------------------------------------------------------------
def _decoder_class():
    """The engine's Transformer with a static-shape forward (imported late: torch only where it runs)."""
    import torch

    from calibration.engine.model import Transformer, _rms_norm

    class StaticDecoder(Transformer):
        """The reference engine's decoder, forward with static shapes for graph capture.

        ``weights["layers"]`` may hold fewer weight sets than ``n_layers`` (layer i uses set i mod W, each
        set far larger than L2, so every layer still streams its weights from HBM); the KV cache is a
        view [P, 2, B, Hkv, L + T, D] of a pool, layer i using buffer i mod P."""

        def __init__(self, cfg, weights, n_layers: int, attend, dispatch: str):
            super().__init__(cfg, weights)
            self.n_pass_layers, self.attend, self.dispatch = n_layers, attend, dispatch
            self.touched = None  # [n_layers] distinct experts per layer, filled by a counting pass

        def rope_tables(self, pos):
            """cos, sin [B, T, 1, D] at absolute positions ``pos`` [B, T] (computed once per cell, outside the
            pass), each half-table repeated for the rotate-half layout (HF Llama / Qwen)."""
            ang = pos.to(torch.float32)[..., None] * self.inv_freq
            ang = torch.cat((ang, ang), dim=-1)[:, :, None, :]
            return ang.cos().to(self.dtype), ang.sin().to(self.dtype)

        def forward_static(self, tokens, kv, context_len: int, cos, sin, count: bool = False):
            """Logits [B T, V] of ``tokens`` [B, T] placed at positions L .. L + T - 1 (L = ``context_len``)."""
            import torch.nn.functional as F

            c = self.cfg
            B, T = tokens.shape
            N, S, D, half = B * T, context_len + T, c.head_dim, c.head_dim // 2
            n_qk = (c.n_heads + c.n_kv_heads) * D
            x = self.w["embed"][tokens].view(N, c.hidden)
            layers, n_sets, n_kv = self.w["layers"], len(self.w["layers"]), kv.shape[0]
            for li in range(self.n_pass_layers):
                lw = layers[li % n_sets]
                qkv = _rms_norm(x, lw["attn_norm"], c.norm_eps) @ lw["wqkv"].T  # [N, (Hq + 2 Hkv) D]
                # RoPE on q and k at once: x cos + rotate_half(x) sin, rotate_half(x) = [-x2, x1]
                qk = qkv[:, :n_qk].view(B, T, c.n_heads + c.n_kv_heads, D)
                qk = torch.addcmul(qk * cos, torch.cat((-qk[..., half:], qk[..., :half]), dim=-1), sin)
                cache = kv[li % n_kv]  # [2, B, Hkv, Lcap, D]
                cache[0, :, :, context_len:S] = qk[:, :, c.n_heads:].transpose(1, 2)
                cache[1, :, :, context_len:S] = qkv[:, n_qk:].view(B, T, c.n_kv_heads, D).transpose(1, 2)
                o = self.attend(qk[:, :, :c.n_heads].transpose(1, 2), cache[0, :, :, :S], cache[1, :, :, :S])
                # the residual rides in the GEMM's epilogue (beta = 1), as an engine's fused add would
                x = torch.addmm(x, o.transpose(1, 2).reshape(N, c.n_heads * D), lw["wo"].T)
                h = _rms_norm(x, lw["ffn_norm"], c.norm_eps)
                if c.is_moe:
                    x = x + self._experts(lw, h, li, count)
                else:
                    g, u = (h @ lw["w13"].T).chunk(2, dim=-1)
                    x = torch.addmm(x, F.silu(g) * u, lw["w2"].T)
            return _rms_norm(x, self.w["norm"], c.norm_eps) @ self.w["lm_head"].T

        def _experts(self, lw, h, li, count):
            c = self.cfg
            w, ids = route(torch, h, lw["router"], c.top_k)
            fn = experts_grouped if self.dispatch == "grouped" else experts_loop
            out, counts = fn(torch, h, lw["w13"], lw["w2"], w, ids, c.n_experts)
            if count:
                self.touched[li] = (counts > 0).sum()
            return out.to(h.dtype)

    return StaticDecoder


def count_ops(torch, fn) -> dict[str, int]:
    """aten ops that launch work in one eager call of ``fn()``, by name (views, reshapes and bare
    allocations left out): about the kernels the captured graph replays."""
    from torch.utils._python_dispatch import TorchDispatchMode

    free = {"empty", "empty_like", "empty_strided", "new_empty", "_unsafe_view", "lift_fresh", "detach", "alias",
            "_reshape_alias"}
    counts: dict[str, int] = {}

    class Count(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            name = func.overloadpacket.__name__
            if not func.is_view and name not in free:
                counts[name] = counts.get(name, 0) + 1
            return func(*args, **(kwargs or {}))

    with Count():
        fn()
    return dict(sorted(counts.items(), key=lambda kv: -kv[1]))


# --- one model's cells -----------------------------------------------------------------------------
def torch_dtype(torch, name: str):
    return {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[name]


def layer_bytes(cfg, itemsize: int) -> int:
    """Weight bytes of one decoder layer in the engine's layout."""
    H, D = cfg.hidden, cfg.head_dim
    attn = (cfg.n_heads + 2 * cfg.n_kv_heads) * D * H + H * cfg.n_heads * D + 2 * H
    mlp = cfg.n_experts * (3 * cfg.expert_ffn * H) + cfg.n_experts * H if cfg.is_moe else 3 * cfg.ffn * H
    return (attn + mlp) * itemsize


def kv_layer_bytes(cfg, batch: int, capacity: int, itemsize: int) -> int:
    """K and V of one layer: 2 B Hkv Lcap D elements."""
    return 2 * batch * cfg.n_kv_heads * capacity * cfg.head_dim * itemsize


@dataclass
class MemoryPlan:
    weight_sets: int  # distinct layer weights (layer i reads set i mod W)
    kv_pool_bytes: int  # one flat pool; a cell uses min(layers, pool / one layer's K and V) buffers
    notes: list[str] = field(default_factory=list)


def plan_memory(cfg, n_layers: int, free_bytes: int, itemsize: int, max_batch: int, capacity: int,
                reserve: int = RESERVE_BYTES) -> MemoryPlan:
    """Distinct weights for every layer when they fit beside the reserve and at least one layer's KV
    cache at the largest cell; else the fewest sets that leave that room (each set is hundreds of MB,
    far beyond L2). The KV pool takes what is left, up to every layer's own buffer at the largest cell."""
    per_layer = layer_bytes(cfg, itemsize)
    shared = (cfg.vocab * cfg.hidden * (1 if cfg.tied_embeddings else 2) + cfg.hidden) * itemsize
    kv_one = kv_layer_bytes(cfg, max_batch, capacity, itemsize)
    room = free_bytes - reserve - shared - kv_one
    sets = min(n_layers, max(1, room // per_layer)) if room > 0 else 1
    notes = [] if sets == n_layers else [f"{sets} weight sets for {n_layers} layers (layer i reads set i mod {sets})"]
    kv_pool = min(n_layers * kv_one, max(kv_one, free_bytes - reserve - shared - sets * per_layer))
    return MemoryPlan(int(sets), int(kv_pool), notes)


@dataclass
class ModelRun:
    """What one model's cells share: the decoder, the KV pool, the device and how cells are timed."""
    model: str
    decoder: object
    pool: object  # flat KV pool
    capacity_extra: int  # T max: each cell's cache holds L + T max positions
    device: object
    graphed: bool
    repeats: int
    cell_budget_s: float
    layers_model: int
    ops: dict | None = None  # aten ops of one pass, counted at the first cell (count_ops)


def build_model(torch, model: str, device, dtype_name: str, layers: int | None, attend, dispatch: str,
                max_batch: int, max_context: int, max_k: int, repeats: int, cell_budget_s: float, seed: int = 0):
    """The engine's config at the catalog model's shapes (calibration.engine.synthetic_model.engine_config),
    random weights drawn on the device (device_random_weights) for as many layer sets as fit, and the KV pool."""
    from calibration.engine.synthetic_model import device_random_weights, engine_config
    from simulator.specs.models import load_model

    dtype = torch_dtype(torch, dtype_name)
    itemsize = torch.tensor([], dtype=dtype).element_size()
    cfg = engine_config(model, layers=layers)
    n_layers = cfg.n_layers
    capacity = max_context + max_k + 1
    if device.type == "cuda":
        torch.cuda.empty_cache()
        free = torch.cuda.mem_get_info(device)[0]
    else:
        free = 8 << 30  # the smoke run: small models, never more than a few GB
    mem = plan_memory(cfg, n_layers, free, itemsize, max_batch, capacity,
                      reserve=RESERVE_BYTES if device.type == "cuda" else 0)
    weights = device_random_weights(replace(cfg, n_layers=mem.weight_sets), seed=seed, dtype=dtype, device=device)
    decoder = _decoder_class()(cfg, weights, n_layers, attend, dispatch)
    pool = torch.empty(mem.kv_pool_bytes // itemsize, dtype=dtype, device=device).normal_(0.0, 1.0)
    spec = load_model(model)
    run = ModelRun(model, decoder, pool, max_k + 1, device, device.type == "cuda", repeats, cell_budget_s,
                   spec.num_layers)
    return run, mem
