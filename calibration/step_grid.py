"""A verify pass measured alone: one CUDA-graphed decoder forward at a catalog model's real shapes.

For each cell (model, context L, batch B, draft length K) the pass runs B sequences of T = K + 1 new
tokens over a KV cache that already holds L tokens per sequence, as a speculative verify step does
(K = 0: plain decoding, one token). What runs, in order, per layer (the operator order of the
torch reference engine, calibration/engine/model.py, on its weight layout and random weights):

    RMSNorm, QKV GEMM, RoPE on q and k, write K/V at positions L .. L + K, attention of the T queries
    over the L + T cached keys through a causal kernel aligned to the cache's end (query t sees keys
    0 .. L + t: the bottom-right triangle), O GEMM with the residual in its epilogue (addmm); RMSNorm,
    MLP (gate/up GEMM, SiLU x up, down GEMM with the residual) or routed experts + residual
    then the final RMSNorm and the LM head over all B T tokens (a verify pass needs every position's
    logits); no sampler.

Letters: B sequences, T = K + 1 query tokens per sequence, L context (tokens already cached),
S = L + T keys, H hidden, Hq / Hkv heads, D head dim, E experts, A experts per token, N = B T tokens.

Routed experts (MoE) are dispatched grouped per expert: the N A (token, expert) pairs are sorted by
expert id, each expert's rows are a contiguous segment, and one grouped GEMM (torch._grouped_mm,
CUTLASS on Hopper) runs every expert's segment for gate/up and one for down; outputs are weighted
by the renormalised top-A router probabilities and summed back per token (index_add). The router is
the model's own shape (softmax over E, top-A, renormalised) on random weights: its choices are close
to uniform and independent across tokens, which is what the planner is told when scored
(routing uniform, reuse 0); the distinct experts each layer touched are counted per cell.

Everything is graph-capturable (no host synchronisation inside the pass), so each cell is captured
once in a CUDA graph and replayed (calibration.timing.time_graph_calls). On a CPU (the smoke mode)
the same pass runs eagerly (calibration.timing.time_calls).
"""
from __future__ import annotations

import csv
import json
import math
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

COLUMNS = ["model", "hardware", "device", "dtype", "context_len", "batch_size", "k", "q_tokens",
           "layers_timed", "layers_model", "weight_sets", "kv_buffers", "attention", "moe_dispatch",
           "experts_touched", "graphed", "median_s", "p25_s", "p75_s", "min_s", "cv", "repeats", "cell_s",
           "unix_time"]
CSV_NAME = "step_grid.csv"
META_NAME = "step_grid.meta.json"

# The full grid a GPU session runs (issue 47 item 5): B 1..128, K 0..7, contexts 512 and 4096
FULL = dict(models=("llama-3.1-8b", "qwen3-30b-a3b"), batch_sizes=(1, 2, 4, 8, 16, 32, 64, 128),
            ks=tuple(range(8)), contexts=(512, 4096), dtype="bf16")
# The CPU smoke run: catalog models small enough for a 2-core CPU, 2 layers, fp32
SMOKE = dict(models=("smollm2-135m", "moe-synthetic"), batch_sizes=(1, 8), ks=(0, 7), contexts=(32,),
             dtype="fp32", layers=2)
RESERVE_BYTES = 6 << 30  # GPU memory kept free for activations, logits and the graphs' pools


@dataclass
class Cell:
    model: str
    context_len: int
    batch_size: int
    k: int

    @property
    def q_tokens(self) -> int:
        return self.k + 1


def cells_for(model: str, batch_sizes, ks, contexts) -> list[Cell]:
    """Contexts, then batch sizes, then K: a cut-off run keeps whole (B, K) rows of the first context."""
    return [Cell(model, int(L), int(b), int(k)) for L in contexts for b in batch_sizes for k in ks]


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
def _dtype(torch, name: str):
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

    dtype = _dtype(torch, dtype_name)
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


def _sig(seconds: float) -> float:
    return float(f"{seconds:.6g}")


def measure_cell(torch, run: ModelRun, cell: Cell) -> dict:
    """Time one cell's pass (graph replay on CUDA, eager calls on a CPU): a row of :data:`COLUMNS`."""
    from calibration.timing import time_calls, time_graph_calls

    dec, cfg = run.decoder, run.decoder.cfg
    B, T, L = cell.batch_size, cell.q_tokens, cell.context_len
    capacity = L + run.capacity_extra
    one = kv_layer_bytes(cfg, B, capacity, 1)  # elements of one layer's K and V
    n_buf = int(min(cfg.n_layers, run.pool.numel() // one))
    if n_buf < 1:
        raise MemoryError(f"the KV pool holds no layer at B = {B}, L = {L}")
    kv = run.pool[: n_buf * one].view(n_buf, 2, B, cfg.n_kv_heads, capacity, cfg.head_dim)
    g = torch.Generator(device=run.device).manual_seed(B * 1000 + T)
    tokens = torch.randint(0, cfg.vocab, (B, T), generator=g, device=run.device)
    pos = L + torch.arange(T, device=run.device)[None, :].expand(B, T)
    cos, sin = dec.rope_tables(pos)
    touched = ""
    if cfg.is_moe:  # one eager pass counts the experts each layer touched (outside the timing)
        dec.touched = torch.zeros(cfg.n_layers, dtype=torch.int64, device=run.device)
        dec.forward_static(tokens, kv, L, cos, sin, count=True)
        touched = round(float(dec.touched.float().mean()), 3)
    call = lambda i: dec.forward_static(tokens, kv, L, cos, sin)  # noqa: E731
    if run.ops is None:
        call(0)  # first call outside the counting mode (a kernel's own lazy set-up)
        try:
            run.ops = count_ops(torch, lambda: call(0))
        except Exception as exc:  # noqa: BLE001 - a tensor subclass (CausalBias) under the counting mode
            run.ops = {"not counted": 0, f"{type(exc).__name__}: {str(exc).splitlines()[0][:120]}": 0}
    t0 = time.perf_counter()
    if run.graphed:
        timing = time_graph_calls(call, 1, repeats=run.repeats, budget_s=run.cell_budget_s, min_repeats=3)
    else:
        # one torch thread on the thread's CPU-time clock: other processes on a shared CPU do not count
        timing = time_calls(call, "cpu", warmup=1, repeats=run.repeats, budget_s=run.cell_budget_s, min_repeats=3,
                            clock=time.thread_time)
    spent = time.perf_counter() - t0
    n_sets = len(dec.w["layers"])
    return {"model": run.model, "context_len": L, "batch_size": B, "k": cell.k, "q_tokens": T,
            "layers_timed": cfg.n_layers, "layers_model": run.layers_model, "weight_sets": n_sets, "kv_buffers": n_buf,
            "experts_touched": touched, "graphed": int(run.graphed), "median_s": _sig(timing.median_s),
            "p25_s": _sig(timing.p25_s), "p75_s": _sig(timing.p75_s), "min_s": _sig(timing.min_s), "cv": round(timing.cv, 5),
            "repeats": timing.repeats, "cell_s": round(spent, 3), "unix_time": round(time.time(), 1)}


# --- the run ---------------------------------------------------------------------------------------
@dataclass
class Settings:
    models: tuple
    batch_sizes: tuple
    ks: tuple
    contexts: tuple
    dtype: str
    layers: int | None = None  # None: every layer of the model
    device: str = "auto"
    budget_s: float = 300.0  # the whole run, setup included
    repeats: int = 10
    cell_budget_s: float = 0.25  # timed replays per cell stop after this much GPU time (3 at least)


def _hardware_name(torch, device) -> str:
    """The hardware catalog entry of the device (calibration.device.catalog_name), from torch's own
    device name on a GPU (no NVML needed)."""
    from calibration.device import DeviceInfo, catalog_name, discover

    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        return catalog_name(DeviceInfo(kind="cuda", name=props.name, memory_bytes=props.total_memory)) or ""
    return catalog_name(discover("cpu")) or ""


def _device_text(torch, device) -> str:
    if device.type == "cuda":
        return f"cuda: {torch.cuda.get_device_name(device)}"
    from calibration.device import discover
    return f"cpu: {discover('cpu').name} ({torch.get_num_threads()} threads)"


class Writer:
    """Rows appended and flushed one by one (a run stopped at any point keeps every measured row); the
    meta JSON rewritten after each model (and at the end) through a temporary file."""

    def __init__(self, out_dir: Path):
        out_dir.mkdir(parents=True, exist_ok=True)
        self.csv_path, self.meta_path = out_dir / CSV_NAME, out_dir / META_NAME
        self._f = open(self.csv_path, "w", newline="")
        self._w = csv.DictWriter(self._f, fieldnames=COLUMNS)
        self._w.writeheader()
        self._f.flush()
        self.rows = 0

    def row(self, r: dict):
        self._w.writerow(r)
        self._f.flush()
        self.rows += 1

    def meta(self, meta: dict):
        from simulator.files import write_atomically
        write_atomically(self.meta_path, json.dumps(meta, indent=2, default=str) + "\n")

    def close(self):
        self._f.close()


MAX_FAILED_CELLS = 3  # consecutive failed cells (a broken capture, memory) end a model's run


def _run_model(torch, settings: Settings, model: str, cells: list, device, dtype, deadline: float, meta: dict,
               writer: Writer, log) -> int:
    """One model: pick and check the kernels, build it, measure its cells until ``deadline``; rows measured."""
    from calibration.engine.synthetic_model import engine_config

    if time.perf_counter() > deadline:
        log(f"{model}: time budget spent before it started")
        return 0
    cfg = engine_config(model, layers=settings.layers)
    attn_name, attend, attn_err, notes = pick_attention(torch, device, dtype, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim)
    dispatch, moe_err = "", None
    if cfg.is_moe:
        dispatch = "grouped"
        try:
            moe_err = check_experts(torch, device, dtype, cfg.hidden, cfg.expert_ffn, cfg.n_experts, cfg.top_k)
            if moe_err > 0.05:  # same shapes, same cost: timed, but said
                notes.append(f"grouped experts differ from the per-expert loop by {moe_err:.3g} (relative): timed anyway")
        except Exception as exc:  # noqa: BLE001 - no grouped GEMM here: the per-expert loop, eager only
            notes.append(f"grouped experts: {type(exc).__name__}: {str(exc).splitlines()[0][:160]}")
            dispatch = "loop"
    info = meta["models"].setdefault(model, {})
    info.update({"layers_timed": cfg.n_layers, "hidden": cfg.hidden, "heads": cfg.n_heads, "kv_heads": cfg.n_kv_heads,
                 "head_dim": cfg.head_dim, "ffn": cfg.ffn, "vocab": cfg.vocab, "experts": cfg.n_experts,
                 "top_k": cfg.top_k, "expert_ffn": cfg.expert_ffn, "tied_embeddings": cfg.tied_embeddings,
                 "attention": attn_name, "attention_max_abs_error": attn_err, "moe_dispatch": dispatch,
                 "moe_relative_error": moe_err, "notes": notes, "cells_planned": len(cells), "cells_measured": 0})
    t_build = time.perf_counter()
    built, mem = build_model(torch, model, device, settings.dtype, settings.layers, attend, dispatch,
                             max(settings.batch_sizes), max(settings.contexts), max(settings.ks),
                             settings.repeats, settings.cell_budget_s)
    if dispatch == "loop":
        built.graphed = False  # the loop syncs with the host: it cannot be captured
    info.update({"layers_model": built.layers_model, "weight_sets": mem.weight_sets, "kv_pool_bytes": mem.kv_pool_bytes,
                 "graphed": built.graphed, "setup_s": round(time.perf_counter() - t_build, 2)})
    notes.extend(mem.notes)
    writer.meta(meta)
    log(f"{model}: {cfg.n_layers} layers ({mem.weight_sets} weight sets), attention {attn_name} (max err"
        f" {attn_err:.2g}), experts {dispatch or '-'}; {len(cells)} cells")
    failed = 0
    for cell in cells:
        if time.perf_counter() > deadline:
            log(f"time budget reached: {info['cells_measured']} of {len(cells)} cells of {model}")
            break
        try:
            r = measure_cell(torch, built, cell)
        except (MemoryError, RuntimeError) as exc:  # out of memory at a big cell, a failed capture: noted
            notes.append(f"B={cell.batch_size} K={cell.k} L={cell.context_len}: "
                         f"{type(exc).__name__}: {str(exc).splitlines()[0][:160]}")
            if device.type == "cuda":
                torch.cuda.empty_cache()
            failed += 1
            if failed >= MAX_FAILED_CELLS:
                raise RuntimeError(f"{failed} cells in a row failed; the last: {notes[-1]}") from None
            continue
        failed = 0
        if device.type == "cuda":  # the cell's graph pool back to the device before the next (bigger) cell
            torch.cuda.empty_cache()
        if "ops_per_pass" not in info:
            info["ops_per_pass"] = {"batch_size": cell.batch_size, "k": cell.k, "context_len": cell.context_len,
                                    "total": sum(built.ops.values()), "by_op": built.ops}
        r.update({"hardware": meta["hardware"], "device": meta["device"], "dtype": settings.dtype,
                  "attention": attn_name, "moe_dispatch": dispatch})
        writer.row(r)
        info["cells_measured"] += 1
        log(f"  L={cell.context_len:5d} B={cell.batch_size:4d} K={cell.k}: {r['median_s'] * 1e3:9.3f} ms"
            f" (cv {r['cv']:.3f}, {r['repeats']} reps, cell {r['cell_s']:.2f} s)")
    return info["cells_measured"]


def run(settings: Settings, out_dir: Path, log=print) -> dict:
    """Every model's cells under one hard time budget; returns the meta it wrote."""
    import torch

    t_start = time.perf_counter()
    dev_name = settings.device
    if dev_name == "auto":
        dev_name = "cuda" if torch.cuda.is_available() else "cpu"
    device = torch.device(dev_name)
    if device.type == "cpu":
        torch.set_num_threads(1)  # timed on the thread's CPU-time clock (measure_cell)
    dtype = _dtype(torch, settings.dtype)
    hardware = _hardware_name(torch, device)
    writer = Writer(out_dir)
    meta = {"what": "one verify pass (decoder forward) per cell: B sequences x (K + 1) query tokens over a KV cache"
                    " of L tokens; random weights at the catalog model's shapes; see calibration/step_grid.py",
            "status": "running", "device": _device_text(torch, device), "hardware": hardware,
            "torch_version": torch.__version__, "cuda_version": torch.version.cuda or "",
            "dtype": settings.dtype, "batch_sizes": list(settings.batch_sizes), "ks": list(settings.ks),
            "contexts": list(settings.contexts), "budget_s": settings.budget_s, "repeats": settings.repeats,
            "cell_budget_s": settings.cell_budget_s,
            "timing": ("CUDA graph of the whole pass captured once per cell and replayed (calibration.timing."
                       "time_graph_calls), CUDA events around each replay; median over the replays"
                       if device.type == "cuda" else "eager calls, one torch thread, thread CPU-time clock"
                       " (calibration.timing.time_calls)"),
            "sampler": "none: the pass ends at the LM head's logits for all B (K + 1) tokens",
            "models": {}, "code_version": _code_version(), "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        meta["gpu"] = {"name": props.name, "memory_bytes": props.total_memory, "sms": props.multi_processor_count,
                       "l2_bytes": getattr(props, "L2_cache_size", 0)}
    writer.meta(meta)
    planned = measured = 0
    try:
        for mi, model in enumerate(settings.models):
            cells = cells_for(model, settings.batch_sizes, settings.ks, settings.contexts)
            planned += len(cells)
            left_s = settings.budget_s - (time.perf_counter() - t_start)
            deadline = time.perf_counter() + left_s / (len(settings.models) - mi)  # unspent time rolls on
            try:
                measured += _run_model(torch, settings, model, cells, device, dtype, deadline, meta, writer,
                                       lambda text: log(f"[{time.perf_counter() - t_start:6.1f} s] {text}"))
            except (RuntimeError, MemoryError) as exc:  # no kernel passed its check, or the weights did not fit
                meta["models"].setdefault(model, {})["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}"
                log(f"{model}: stopped: {meta['models'][model]['error']}")
            writer.meta(meta)
            if device.type == "cuda":
                torch.cuda.synchronize()
                torch.cuda.empty_cache()
    finally:
        meta["status"] = "complete" if planned and measured == planned else "partial"
        meta["cells_planned"], meta["cells_measured"] = planned, measured
        meta["elapsed_s"] = round(time.perf_counter() - t_start, 2)
        writer.meta(meta)
        writer.close()
    return meta


def _code_version() -> str:
    from calibration.engine.sweep import code_version
    return code_version()


def main(argv=None) -> int:
    import argparse

    from simulator.errors import PlannerError
    from simulator.files import check_output_dir

    ap = argparse.ArgumentParser(
        prog="python calibration/scripts/gpu_step_grid.py",
        description="Time one CUDA-graphed verify pass (decoder forward, random weights, real shapes) over"
                    " B x K x context cells; write step_grid.csv and step_grid.meta.json into --output.")
    ap.add_argument("--output", required=True, help="folder for step_grid.csv and step_grid.meta.json")
    ap.add_argument("--smoke", action="store_true",
                    help="tiny CPU run: smollm2-135m and moe-synthetic, 2 layers, fp32, B 1 and 8, K 0 and 7, L 32")
    ap.add_argument("--models", help="comma-separated catalog models (default: llama-3.1-8b,qwen3-30b-a3b)")
    ap.add_argument("--batch-sizes", help="comma-separated (default 1,2,4,8,16,32,64,128)")
    ap.add_argument("--ks", help="comma-separated draft lengths (default 0..7)")
    ap.add_argument("--contexts", help="comma-separated context lengths (default 512,4096)")
    ap.add_argument("--layers", type=int, help="time only the first N layers (default: all; the data says so)")
    ap.add_argument("--budget-s", type=float, default=300.0,
                    help="hard limit for the whole run [s], model setup included; rows measured by then are kept (default 300)")
    ap.add_argument("--device", default="auto", choices=("auto", "cuda", "cpu"))
    args = ap.parse_args(argv)
    base = dict(SMOKE if args.smoke else FULL)

    def ints(text, flag):
        try:
            vals = tuple(int(v) for v in text.split(",") if v.strip())
        except ValueError:
            vals = ()
        if not vals or min(vals) < 0:
            raise PlannerError(f"{flag} {text!r}: give comma-separated whole numbers, e.g. 1,2,4")
        return vals

    try:
        st = Settings(models=tuple(args.models.split(",")) if args.models else base["models"],
                      batch_sizes=ints(args.batch_sizes, "--batch-sizes") if args.batch_sizes else base["batch_sizes"],
                      ks=ints(args.ks, "--ks") if args.ks else base["ks"],
                      contexts=ints(args.contexts, "--contexts") if args.contexts else base["contexts"],
                      dtype=base["dtype"], layers=args.layers if args.layers else base.get("layers"),
                      device="cpu" if args.smoke else args.device, budget_s=args.budget_s,
                      repeats=5 if args.smoke else 10, cell_budget_s=0.1 if args.smoke else 0.25)
        if min(st.batch_sizes) < 1:
            raise PlannerError("--batch-sizes: every batch size must be >= 1")
        check_output_dir(args.output, "--output", (CSV_NAME, META_NAME))
        from calibration.engine.synthetic_model import engine_config
        for m in st.models:
            engine_config(m, layers=st.layers)  # an unknown model or a bad --layers: one line, before any work
        if st.device == "cuda":
            import torch
            if not torch.cuda.is_available():
                raise PlannerError("--device cuda: no CUDA device visible to torch; use --smoke (CPU) or --device cpu")
        meta = run(st, Path(args.output))
    except PlannerError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(f"{meta['cells_measured']} of {meta['cells_planned']} cells in {meta['elapsed_s']} s ({meta['status']}):"
          f" {Path(args.output) / CSV_NAME}")
    return 0
