"""Microbenchmarks with torch on the detected device: GEMM, memory bandwidth, decode attention,
MoE expert GEMMs, launch overhead (and CUDA-graph replay, all-reduce with >= 2 GPUs).

Every point has a key; ``run_plan`` appends one raw row per point (``calibration.rawio``) and skips
keys already in the file, so an interrupted run resumes where it stopped.

Cold weights: a decode step streams all weights once, so a GEMM timed over and over on the same
weights would read them from cache. Each call uses another copy of the weights, rotating through a
pool of at least twice the last-level cache (L2 on GPU, L3 of hundreds of MiB on CPU). On GPU the
copies' calls are captured in one CUDA graph and replayed back to back (``timing.time_graph_calls``),
as a decode pass replays its layers: an L2 flush before each event-timed call (``gpu_timing="flush"``,
the method before) charged every call the flush's dirty write-back and the host's launch, about
20 us per call on an H200 (``calibration/data/runs/gpu-h200/README.md``). The bandwidth benchmark is
deliberately hot: its curve over bytes shows the cache levels.

Letters: M tokens (rows of the activation), N output features, K input features; B batch, S keys
per sequence (context + new tokens), q query tokens per sequence (K+1 when verifying K drafts),
E active experts, t tokens per active expert.
"""
from __future__ import annotations

import sys
import time
from dataclasses import asdict, dataclass, replace

import numpy as np

from calibration.rawio import RawWriter
from calibration.timing import QuietWaiter, Timing, load_average, time_calls, time_graph_calls, time_loop

DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}


@dataclass(frozen=True)
class Point:
    """One measurement to take. ``flops`` and ``bytes`` follow the cost model's formulas."""

    key: str
    bench: str  # launch | bandwidth | gemm | attention | moe | allreduce
    op: str
    family: str
    dtype: str
    variant: str = ""
    round: int = 0
    M: int = 0
    N: int = 0
    K: int = 0
    batch: int = 0
    ctx: int = 0
    q_len: int = 0
    heads_q: int = 0
    heads_kv: int = 0
    head_dim: int = 0
    experts: int = 0
    tokens: int = 0
    flops: float = 0.0
    bytes: float = 0.0
    n_kernels: int = 1


@dataclass(frozen=True)
class Mode:
    """How hard to measure (per point: warm-up calls, at most ``repeats`` timed calls or ``budget_s``)."""

    name: str
    warmup: int
    repeats: int
    budget_s: float
    min_repeats: int
    max_call_s: float  # skip GEMM points whose ideal time per call is longer
    quiet_wait_s: float  # CPU: total seconds one run may wait for other processes to go idle
    m_values: tuple[int, ...]
    bw_sizes: tuple[int, ...]
    bw_rounds: int
    attn_batch: tuple[int, ...]
    attn_ctx: tuple[int, ...]
    attn_q: tuple[int, ...]
    attn_heads_mult: tuple[int, ...]
    moe_experts: tuple[int, ...]
    moe_tokens: tuple[int, ...]


def _geom(lo: float, hi: float, per_octave: int) -> tuple[int, ...]:
    n = int(round(np.log2(hi / lo) * per_octave)) + 1
    return tuple(sorted({int(round(x)) for x in np.geomspace(lo, hi, n)}))


KiB, MiB, GiB = 2**10, 2**20, 2**30
MAX_COPIES = 256  # calls per captured graph: small ops' copies still cover twice a GPU's L2 (256 x 0.5 MB)
MODES = {
    "tiny": Mode("tiny", 1, 3, 0.02, 2, 0.01, 1.0, (1, 16, 128), (64 * KiB, 1 * MiB), 2,
                 (1,), (256,), (1, 4), (1,), (2,), (1, 8)),
    "quick": Mode("quick", 1, 25, 0.06, 3, 0.08, 5.0, tuple(2**i for i in range(14)),
                  tuple(x // 4 * 4 for x in _geom(64 * KiB, 512 * MiB, 2)), 3,
                  (1, 4, 16), (256, 1024, 4096), (1, 4), (1,), (1, 2, 8), (1, 8, 64)),
    "medium": Mode("medium", 2, 15, 0.3, 5, 0.4, 120.0, _geom(1, 8192, 2),
                   tuple(x // 4 * 4 for x in _geom(64 * KiB, 1 * GiB, 3)), 5,
                   (1, 4, 16, 64), (256, 1024, 4096), (1, 2, 4, 8), (1,), (1, 2, 4, 8), (1, 4, 16, 64, 256)),
    "full": Mode("full", 3, 25, 1.0, 5, 3.0, 300.0, _geom(1, 8192, 4),
                 tuple(x // 4 * 4 for x in _geom(64 * KiB, 2 * GiB, 4)), 7,
                 (1, 2, 4, 8, 16, 32, 64, 128), (256, 1024, 4096, 16384), (1, 2, 4, 6, 8), (1, 2),
                 (1, 2, 4, 8, 16, 32), (1, 2, 4, 8, 16, 64, 256, 1024)),
}


# --- plan ---------------------------------------------------------------------------------------

def gemm_shapes(model) -> dict[str, tuple[int, int]]:
    """(N, K) of the dense GEMMs of one decoder layer (TP 1) and the LM head."""
    D, d = model.hidden_size, model.head_dim
    shapes = {"attn_qkv": ((model.num_heads + 2 * model.num_kv_heads) * d, D),
              "attn_o": (D, model.num_heads * d)}
    if model.intermediate_size:
        shapes["mlp_gate_up"] = (2 * model.intermediate_size, D)
        shapes["mlp_down"] = (D, model.intermediate_size)
    shapes["lm_head"] = (model.vocab_size, D)
    return shapes


def gemm_point(op: str, M: int, N: int, K: int, dtype: str) -> Point:
    a = w = DTYPE_BYTES[dtype]
    fam = "lm_head" if op == "lm_head" else "gemm"
    return Point(f"gemm|{op}|{dtype}|M={M}|N={N}|K={K}", "gemm", op, fam, dtype, M=M, N=N, K=K, tokens=M,
                 flops=2.0 * M * N * K, bytes=float(N * K * w + M * (N + K) * a))


def build_plan(mode: Mode, model, moe_model, dtype: str, extra_m=(), device_count: int = 1,
               peak_flops: float = 1e12) -> list[Point]:
    """All points of a run, bandwidth rounds interleaved between the other benchmarks."""
    e = DTYPE_BYTES[dtype]
    launch = [Point(f"launch|eager|{dtype}", "launch", "launch", "launch", dtype, variant="eager")]
    gemm = []
    ms = sorted(set(mode.m_values) | {int(m) for m in extra_m if int(m) >= 1})
    for op, (N, K) in gemm_shapes(model).items():
        for M in ms:
            p = gemm_point(op, M, N, K, dtype)
            if p.flops / (0.9 * peak_flops) <= mode.max_call_s or M == ms[0]:
                gemm.append(p)
    attn = []
    Hq, Hkv, d = model.num_heads, model.num_kv_heads, model.head_dim
    for hm in mode.attn_heads_mult:
        for B in mode.attn_batch:
            for L in mode.attn_ctx:
                for q in mode.attn_q:
                    S = L + q
                    attn.append(Point(
                        f"attention|{dtype}|B={B}|L={L}|q={q}|H={Hq * hm}/{Hkv * hm}|d={d}", "attention", "attention",
                        "attention", dtype, batch=B, ctx=L, q_len=q, heads_q=Hq * hm, heads_kv=Hkv * hm, head_dim=d,
                        tokens=B * q, flops=4.0 * B * q * S * Hq * hm * d, bytes=float(B * S * 2 * Hkv * hm * d * e)))
    moe = []
    if moe_model is not None and moe_model.is_moe:
        N, K = 2 * moe_model.expert_intermediate_size, moe_model.hidden_size  # gate+up of one expert
        for variant in ("loop", "grouped"):
            for E in mode.moe_experts:
                for t in mode.moe_tokens:
                    moe.append(Point(
                        f"moe|{variant}|{dtype}|E={E}|t={t}|N={N}|K={K}", "moe", "moe_experts", "moe", dtype,
                        variant=variant, M=t, N=N, K=K, experts=E, tokens=t, flops=2.0 * E * t * N * K,
                        bytes=float(E * (N * K * e + t * (N + K) * e)), n_kernels=E if variant == "loop" else 1))
    bw = [[Point(f"bandwidth|{v}|{dtype}|bytes={s}|r{r}", "bandwidth", f"mem_{v}", "bandwidth", dtype, variant=v,
                 round=r, bytes=float(s * (2 if v == "copy" else 1)), M=s // e)
           for s in mode.bw_sizes for v in ("read", "copy")] for r in range(mode.bw_rounds)]
    ar = []
    if device_count >= 2:
        for s in (2**k for k in range(12, 31, 2)):
            ar.append(Point(f"allreduce|{dtype}|ranks={device_count}|bytes={s}", "allreduce", "allreduce", "comm",
                            dtype, bytes=float(s), experts=device_count))
    # interleave: bandwidth rounds between the compute benchmarks (the memory figures drift in time)
    blocks = [gemm, attn, moe, ar]
    plan = list(launch)
    for r in range(max(mode.bw_rounds, len(blocks))):
        if r < len(bw):
            plan += bw[r]
        if r < len(blocks):
            plan += blocks[r]
    return plan


# --- execution ----------------------------------------------------------------------------------

class Bench:
    """Buffers shared by the benchmarks of one run (torch imported lazily)."""

    def __init__(self, device: str, dtype: str, cache_bytes: int, max_bw_bytes: int = 0, gpu_timing: str = "graph"):
        import torch

        self.torch = torch
        self.device = device
        self.dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[dtype]
        self.elt = DTYPE_BYTES[dtype]
        self.dev = torch.device("cuda" if device == "cuda" else "cpu")
        self.cache_bytes = max(cache_bytes, 8 * MiB)
        self._pool = None
        self._flush = None
        self._bw = None
        self.max_bw_bytes = max_bw_bytes
        self.rotate = device != "cuda" or gpu_timing == "graph"  # rotating cold copies (else one copy + flush)
        self.copies = 1  # copies the last built call rotates through

    def pool(self, need_elems: int):
        """Flat tensor of at least 2x cache (and 2x ``need_elems``) elements for cold copies (CPU)."""
        want = max(2 * self.cache_bytes // self.elt + 1, 2 * need_elems)
        if self._pool is None or self._pool.numel() < want:
            self._pool = None
            self._pool = self.torch.empty(want, dtype=self.dtype, device=self.dev).uniform_(-0.05, 0.05)
        return self._pool

    def cold(self, n: int):
        """``get(i)``: the i-th of rotating copies of n elements (at least 2, at most MAX_COPIES); one
        fixed tensor on a GPU timed with a flush."""
        if not self.rotate:
            t = self.torch.empty(n, dtype=self.dtype, device=self.dev).uniform_(-0.05, 0.05)
            self.copies = 1
            return lambda i: t
        stride = (n + 255) // 256 * 256
        pool = self.pool(n)
        slots = min(max(pool.numel() // stride, 1), MAX_COPIES)
        self.copies = slots
        return lambda i: pool[(i % slots) * stride:(i % slots) * stride + n]

    def before(self):
        """L2 flush before each call timed on its own on a GPU (None on CPU: rotation does it)."""
        if self.device != "cuda":
            return None
        if self._flush is None:
            self._flush = self.torch.empty(max(2 * self.cache_bytes, 64 * MiB) // 4, dtype=self.torch.int32,
                                           device=self.dev)
        return self._flush.zero_

    def bw_buffers(self):
        if self._bw is None:
            n = self.max_bw_bytes // self.elt + 1
            self._bw = (self.torch.empty(n, dtype=self.dtype, device=self.dev).uniform_(),
                        self.torch.empty(n, dtype=self.dtype, device=self.dev))
        return self._bw

    # each returns call(i)
    def gemm(self, p: Point):
        F = self.torch.nn.functional
        w = self.cold(p.N * p.K)
        x = self.torch.randn(p.M, p.K, dtype=self.dtype, device=self.dev)
        N, K = p.N, p.K
        return lambda i: F.linear(x, w(i).view(N, K))

    def bandwidth(self, p: Point):
        src, dst = self.bw_buffers()
        n = p.M
        s, d = src[:n], dst[:n]
        return (lambda i: s.sum()) if p.variant == "read" else (lambda i: d.copy_(s))

    def attention(self, p: Point):
        torch = self.torch
        B, Hq, Hkv, q, S, d = p.batch, p.heads_q, p.heads_kv, p.q_len, p.ctx + p.q_len, p.head_dim
        n = B * Hkv * S * d
        kv = self.cold(2 * n)
        x = torch.randn(B, Hq, q, d, dtype=self.dtype, device=self.dev)
        # verify step: query i sees the context and new tokens up to itself
        mask = None
        if q > 1:
            mask = torch.ones(q, S, dtype=torch.bool, device=self.dev).tril(diagonal=S - q)
        sdpa = torch.nn.functional.scaled_dot_product_attention
        gqa = Hq != Hkv

        def call(i):
            buf = kv(i)
            k, v = buf[:n].view(B, Hkv, S, d), buf[n:].view(B, Hkv, S, d)
            return sdpa(x, k, v, attn_mask=mask, enable_gqa=gqa)
        return call

    def moe(self, p: Point):
        torch = self.torch
        E, t, N, K = p.experts, p.tokens, p.N, p.K
        w = self.cold(E * N * K)
        x = torch.randn(E, t, K, dtype=self.dtype, device=self.dev)
        if p.variant == "grouped":
            return lambda i: torch.bmm(x, w(i).view(E, N, K).transpose(1, 2))
        lin = torch.nn.functional.linear

        def loop(i):
            W = w(i).view(E, N, K)
            return [lin(x[e], W[e]) for e in range(E)]
        return loop

    def launch(self, p: Point, mode: Mode) -> list[tuple[Point, Timing]]:
        torch = self.torch
        a = torch.zeros(1, device=self.dev)
        o = torch.zeros(1, device=self.dev)
        out = [(p, time_loop(lambda: torch.add(a, 1.0, out=o), 2000 if self.device == "cpu" else 500,
                             self.device))]
        if self.device == "cuda":
            n = 100
            g = torch.cuda.CUDAGraph()
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                for _ in range(3):
                    torch.add(a, 1.0, out=o)
            torch.cuda.current_stream().wait_stream(s)
            with torch.cuda.graph(g):
                for _ in range(n):
                    torch.add(a, 1.0, out=o)
            tg = time_loop(g.replay, 50, "cuda")
            per = Timing(tg.median_s / n, tg.p25_s / n, tg.p75_s / n, tg.cv, tg.repeats, tg.min_s / n, tg.rejected)
            out.append((replace(p, key=p.key.replace("eager", "graph"), variant="graph"), per))
        return out


def run_plan(points: list[Point], raw_path, meta: dict, mode: Mode, device: str, cache_bytes: int,
             progress: bool = True, stop_after: int | None = None, gpu_timing: str = "graph") -> int:
    """Measure the points not yet in ``raw_path``; returns the number measured now. ``gpu_timing``:
    "graph" (rotating cold copies replayed in a CUDA graph) or "flush" (an L2 flush before each call)."""
    writer = RawWriter(raw_path, meta)
    todo = [p for p in points if p.key not in writer.done]
    max_bw = max((p.M * DTYPE_BYTES[p.dtype] for p in points if p.bench == "bandwidth"), default=0)
    bench = Bench(device, meta["dtype"], cache_bytes, max_bw, gpu_timing)
    bench.torch.manual_seed(0)
    bar = _progress(len(todo), progress)
    quiet = QuietWaiter(mode.quiet_wait_s) if device == "cpu" else (lambda: True)
    done = 0
    try:
        for p in todo:
            if stop_after is not None and done >= stop_after:
                break
            bar(p.key)
            quiet()
            if p.bench == "launch":
                results = bench.launch(p, mode)
            elif p.bench == "allreduce":
                results = []  # measured all at once below
            else:
                call = getattr(bench, p.bench)(p)
                results = [(p, _time_point(call, p, bench, device, mode))]
                del call
            for q, tm in results:
                writer.write({**asdict(q), **asdict(tm), "device": meta["device_name"], "load": load_average(),
                              "unix_time": time.time()})
            done += 1
        ar = [p for p in todo if p.bench == "allreduce"]
        if ar and (stop_after is None or done < stop_after):
            from calibration.collective import run_allreduce
            for q, tm in run_allreduce(ar, meta["dtype"], mode):
                writer.write({**asdict(q), **asdict(tm), "device": meta["device_name"], "unix_time": time.time()})
    finally:
        writer.close()
        bar(None)
    return done


def _time_point(call, p: Point, bench: Bench, device: str, mode: Mode) -> Timing:
    """A kernel point's timing: on a GPU with rotating copies, its copies' calls replayed in one graph;
    otherwise (and for the bandwidth benchmark, which rotates nothing) call by call."""
    if device == "cuda" and bench.rotate and p.bench != "bandwidth":
        return time_graph_calls(call, max(bench.copies, 2), mode.repeats, mode.budget_s, mode.min_repeats)
    return time_calls(call, device, mode.warmup, mode.repeats, mode.budget_s, mode.min_repeats, bench.before())


def _progress(total: int, enabled: bool):
    """A one-line stderr progress report (tqdm when installed)."""
    if not enabled or total == 0:
        return lambda key: None
    if not sys.stderr.isatty():  # logs and CI: a line every 10% instead of a redrawn bar
        count = [0]

        def step(key):
            if key is None:
                return
            count[0] += 1
            if count[0] % max(1, total // 10) == 0 or count[0] == total:
                print(f"[calibration] {count[0]}/{total} points ({key.split('|')[0]})", file=sys.stderr)
        return step
    try:
        from tqdm import tqdm
        bar = tqdm(total=total, file=sys.stderr, unit="pt", dynamic_ncols=True, leave=False)

        def step(key):
            if key is None:
                bar.close()
                return
            bar.set_description(key.split("|")[0])
            if step.started:
                bar.update(1)
            step.started = True
        step.started = False
        return step
    except ImportError:
        count = [0]

        def step(key):
            if key is None:
                sys.stderr.write("\n")
                return
            count[0] += 1
            sys.stderr.write(f"\r[{count[0]}/{total}] {key[:60]:60s}")
            sys.stderr.flush()
        return step
