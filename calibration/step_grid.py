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
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from calibration.step_grid_kernels import check_experts, pick_attention
from calibration.step_grid_model import ModelRun, build_model, count_ops, kv_layer_bytes, torch_dtype

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
    dtype = torch_dtype(torch, settings.dtype)
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
