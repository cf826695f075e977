"""Synthetic-acceptance sweeps of the reference engine at real model shapes (random weights).

    python -m calibration.engine.synthetic --model llama-3.1-8b --draft eagle --acceptance 0.8 \\
        --batch-sizes 1-64:pow2 --k 0-6 --device cuda --dtype bf16 --output runs.csv

What is real and what is synthetic:
* the target is the engine's own ``Transformer`` (model.py) at the shapes of a catalog model
  (simulator/data/models/<name>.json), with its KV cache, batched verify of K+1 positions and
  rollback, run by the engine's ``SpecDecoder``; weights are random (a step's time does not depend on
  weight values). ``--layers N`` keeps the first N layers (a CPU smoke run; the GPU run uses all).
* MoE routing comes from a random router: for near-isotropic hidden states each token's top-k set is
  close to uniform over experts (as load-balanced routers are); ``--router-reuse`` adds the engine's
  adjacent-token routing correlation (``ModelConfig.router_reuse``).
* the draft runs its real passes: ``eagle`` = an EAGLE-1-like head (Li et al. 2024, arXiv:2401.15077)
  with the target's sizes: a fusion GEMM [2D -> D], ONE dense decoder layer (the target's heads, head
  dim and dense MLP width ``intermediate_size``; for an MoE target too, as the planner prices it) and
  the target's embedding and LM head (shared tensors), K sequential passes over its own KV cache
  (the engine's ``ModelDraft``). The fusion's second input (the target's last hidden state in EAGLE) is
  stood in for by the token embedding: the same shape, the same cost. ``model:NAME`` = a whole catalog
  model of random weights as a separate draft (same vocabulary as the target).
* acceptance is imposed: draft position i is accepted with probability a_i (``--acceptance 0.8`` or
  per position ``0.85,0.8,0.76``, the last repeating) given all earlier ones were, decided by the
  engine's seeded generator (``SpecDecoder.forced_acceptance``); the token committed after the accepted
  prefix is the target's argmax, so K = 0 is plain greedy decoding through the same path.

Timing: on CUDA every phase (draft, verify, accept/commit) is timed with CUDA events recorded at the
engine's phase boundaries (the engine synchronises there, so an event interval is the phase's whole
span on the stream, launch gaps included); on a CPU by the wall clock. Rows have the columns of
``sweep.COLUMNS`` (so ``python -m calibration.validate`` reads them), are appended as each (B, K)
point finishes, and points already in the output are skipped (a killed run resumes).
"""

from __future__ import annotations

import json
import math
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from simulator.errors import PlannerError

from .engine import ModelDraft, SpecDecoder
from .model import Transformer
from .sweep import COLUMNS, RowLabels, device_name, measure_window, step_row
# shapes, weights and drafts (tests use them from here too)
from .synthetic_model import device_random_weights, engine_config, make_synthetic_draft

SOURCE = "torch-reference-engine:synthetic-acceptance"
DTYPES = {"bf16": torch.bfloat16, "bfloat16": torch.bfloat16, "fp16": torch.float16, "float16": torch.float16,
          "fp32": torch.float32, "float32": torch.float32}
DTYPE_LABEL = {torch.bfloat16: "bfloat16", torch.float16: "float16", torch.float32: "float32"}


# ---------------------------------------------------------------------------------------------
# acceptance and timing
# ---------------------------------------------------------------------------------------------


def parse_acceptance(text: str | float) -> list[float]:
    """'0.8' (every position) or '0.85,0.8,0.76' (per position; the last repeats). Each in [0, 1]."""
    try:
        rates = [float(x) for x in str(text).split(",") if x.strip()]
    except ValueError:
        rates = []
    if not rates or not all(math.isfinite(r) and 0.0 <= r <= 1.0 for r in rates):
        raise PlannerError(f"--acceptance {text!r}: give one rate or a comma list of rates, each in [0, 1]")
    return rates


def rates_for(rates: list[float], k: int) -> list[float]:
    """Per-position rates a_1..a_K (the last given rate repeats)."""
    return [rates[min(i, len(rates) - 1)] for i in range(k)]


def expected_acceptance_length(rates: list[float], k: int) -> float:
    """E[accepted + 1] = 1 + sum_{j=1..K} prod_{i<=j} a_i (Leviathan et al. 2023, chain drafts)."""
    return 1.0 + float(np.sum(np.cumprod(rates_for(rates, k)))) if k else 1.0


class CudaStamp:
    """A CUDA event recorded now; ``later - earlier`` = elapsed seconds between the two events. Used as
    the engine's clock (``SpecDecoder.clock``), whose phase boundaries already synchronise."""

    def __init__(self):
        self.event = torch.cuda.Event(enable_timing=True)
        self.event.record()

    def __sub__(self, earlier: "CudaStamp") -> float:
        self.event.synchronize()
        return earlier.event.elapsed_time(self.event) / 1e3


def synthetic_engine(target: Transformer, draft: ModelDraft | None, prompts: list[list[int]], rates: list[float],
                     max_k: int, capacity: int, seed: int = 0, clock: str = "wall") -> SpecDecoder:
    """The engine's SpecDecoder, prefilled with ``prompts``, acceptance imposed (``set_acceptance``
    picks the rates of each K), phases timed by ``clock`` ("events", "wall" or "cpu")."""
    eng = SpecDecoder(target, draft, k=0, seed=seed, forced_acceptance=float(rates[0]),
                      clock="cpu" if clock == "cpu" else "wall")
    if clock == "events":
        eng.clock = CudaStamp
    eng.max_k = max_k
    with torch.inference_mode():
        eng.prefill(prompts, capacity)
    return eng


def set_acceptance(eng: SpecDecoder, rates: list[float], k: int) -> None:
    """Per-position rates a_1..a_K as a [K] tensor: the engine's forced-acceptance test u [B, K] < a
    broadcasts over the batch, so position i is accepted with probability a_i (given i-1 was)."""
    eng.forced_acceptance = torch.tensor(rates_for(rates, k), dtype=torch.float32, device=eng.device)


def source_label(rates: list[float]) -> str:
    """The rows' source: the engine, synthetic acceptance and the imposed rates (resuming matches it)."""
    return f"{SOURCE} a={','.join(f'{r:g}' for r in rates)}"


def _done_points(output: Path, target: str, draft: str, dtype: str, rates: list[float]) -> set[tuple[int, int]]:
    if not output.exists() or output.stat().st_size == 0:
        return set()
    df = pd.read_csv(output)
    if df.empty or "source" not in df:
        return set()
    m = (df.source == source_label(rates)) & (df.target == target) & (df.draft == draft) & (df.dtype == dtype)
    out = set()
    for r in df[m].itertuples():
        ppa = json.loads(r.per_position_acceptance) if isinstance(r.per_position_acceptance, str) else []
        if int(r.k) == 0 or len(ppa) == int(r.k):
            out.add((int(r.batch_size), int(r.k)))
    return out


def _append(output: Path, row: dict):
    output.parent.mkdir(parents=True, exist_ok=True)
    new = not output.exists() or output.stat().st_size == 0
    pd.DataFrame([row], columns=COLUMNS).to_csv(output, mode="a", header=new, index=False)


@dataclass(frozen=True)
class SyntheticRun:
    """What a synthetic sweep measures and how: the draft, the (B, K) grid, the imposed acceptance,
    the prompt length, steps per point, seed, the EAGLE head's MLP width, a time budget and the clock."""

    draft: str = "eagle"
    batch_sizes: Sequence[int] = (1, 4)
    ks: Sequence[int] = range(0, 4)
    acceptance: list[float] | float | str = 0.8
    context_len: int = 256
    steps: int = 8
    warmup_steps: int = 2
    seed: int = 0
    dense_ffn: int | None = None
    time_limit_s: float | None = None
    clock: str | None = None


@dataclass
class _Sweep:
    """One run_synthetic call's fixed parts, shared by its batch sizes."""

    target: Transformer
    draft: ModelDraft | None
    run: SyntheticRun
    rates: list[float]
    ks: list[int]
    clock: str
    labels: tuple[str, str, str]  # (draft, device, dtype) of the rows
    out: Path | None
    progress: bool
    t_start: float

    def out_of_time(self) -> bool:
        limit = self.run.time_limit_s
        return limit is not None and time.monotonic() - self.t_start > limit


def run_synthetic(target: Transformer, run: SyntheticRun = SyntheticRun(), output: str | Path | None = None,
                  progress: bool = True, draft_model: ModelDraft | None = None) -> pd.DataFrame:
    """Time ``run.steps`` engine steps (after ``run.warmup_steps`` discarded ones) at every (B, K); one row each.

    Per batch size the prompts (``context_len`` seeded random token ids) are prefilled once; every K then
    starts from that snapshot (``SpecDecoder.reset``). ``clock``: "events" (CUDA; default there),
    "wall" or "cpu" (the thread's CPU time; CPU only). Batch sizes run every other one first (1, 4,
    16, 64, then 2, 8, 32), so a run cut short still spans the range; no new point starts once
    ``time_limit_s`` has passed. Returns this call's rows (also appended to ``output``)."""
    rates = parse_acceptance(run.acceptance) if not isinstance(run.acceptance, list) else run.acceptance
    ks = sorted({int(k) for k in run.ks})
    batch_sizes = sorted({int(b) for b in run.batch_sizes})
    if min(ks) < 0 or min(batch_sizes) < 1 or run.steps < 1 or run.warmup_steps < 0 or run.context_len < 2:
        raise PlannerError("need K >= 0, batch sizes >= 1, --steps >= 1, warm-up >= 0, --context-len >= 2")
    dev = target.device
    clock = run.clock or ("events" if dev.type == "cuda" else "wall")
    if clock == "events" and dev.type != "cuda":
        raise PlannerError("--clock events needs --device cuda")
    drf = None
    if max(ks) > 0:
        drf = draft_model or make_synthetic_draft(
            run.draft, target, run.dense_ffn or target.cfg.ffn or 4 * target.cfg.hidden, run.seed + 1)
    dtype = DTYPE_LABEL[target.dtype]
    out = Path(output) if output else None
    done = _done_points(out, target.cfg.name, run.draft, dtype, rates) if out else set()
    dev_name = device_name(dev) + {"events": ", CUDA-event clock", "cpu": ", thread CPU-time clock",
                                   "wall": ""}[clock]
    sw = _Sweep(target, drf, run, rates, ks, clock, (run.draft, dev_name, dtype), out, progress, time.monotonic())
    rows = []
    # every other batch size first (1, 4, 16, 64, then 2, 8, 32): a run cut short still spans the range
    for B in batch_sizes[::2] + batch_sizes[1::2]:
        todo = [k for k in ks if (B, k) not in done]
        if not todo:
            continue
        if sw.out_of_time():
            break
        _measure_batch(sw, B, todo, rows)
        if dev.type == "cuda":
            torch.cuda.empty_cache()
    return pd.DataFrame(rows, columns=COLUMNS)


def _measure_batch(sw: _Sweep, B: int, todo: list[int], rows: list[dict]) -> None:
    """The points of one batch size from one prefilled engine; each row appended to ``rows`` and the output."""
    run, target, kmax = sw.run, sw.target, max(sw.ks)
    # token ids do not matter to random weights: seeded uniform ids (routing stays near uniform)
    prompts = np.random.default_rng([run.seed, B]).integers(0, target.cfg.vocab, (B, run.context_len)).tolist()
    eng = synthetic_engine(target, sw.draft, prompts, sw.rates, kmax,
                           run.context_len + (run.warmup_steps + run.steps) * (kmax + 1) + 2, run.seed, sw.clock)
    for k in todo:
        if sw.out_of_time():
            break
        set_acceptance(eng, sw.rates, k)
        window = measure_window(eng, k, run.warmup_steps, 1, run.steps, run.steps)
        rows.append(_row(target, sw.labels, B, k, window) | {"source": source_label(sw.rates)})
        if sw.out:
            _append(sw.out, rows[-1])
        if sw.progress:
            r = rows[-1]
            print(f"[synthetic] {target.cfg.name} {run.draft} B={B} K={k}: step {r['itl_ms']:.2f} ms (draft"
                  f" {r['draft_ms']:.2f}, verify {r['verify_ms']:.2f}), AL {r['acceptance_length']:.2f}"
                  f" (expected {expected_acceptance_length(sw.rates, k):.2f})", file=sys.stderr, flush=True)
    del eng


def _row(target: Transformer, labels: tuple[str, str, str], B: int, k: int, window) -> dict:
    """A sweep row of one point: ``labels`` = (draft, device, dtype), ``window`` = measure_window's
    (step records, attempts, accepts)."""
    draft, dev_name, dtype = labels
    recs, att, acc = window
    itl_s = float(np.median([r.draft_s + r.verify_s + r.overhead_s for r in recs]))
    return step_row(RowLabels(SOURCE, target.cfg.name, draft, dev_name, dtype), B, k, recs, (att.tolist(),
                    acc.tolist()), itl_s, float(target.cfg.router_reuse) if target.cfg.is_moe else None)


# ---------------------------------------------------------------------------------------------
# scenario for calibration.validate
# ---------------------------------------------------------------------------------------------


def write_scenario(path: str | Path, model: str, layers: int | None, hardware: str, run: SyntheticRun,
                   batch_sizes: str, dtype: str, profile: str | None = None) -> Path:
    """A scenario TOML of this run for ``calibration.validate`` (engine "ideal": validation fits the
    eager engine's scale and host terms itself). With ``layers`` below the model's, a truncated
    config.json is written next to it and named by the scenario (the rows' target is that name).
    ``batch_sizes``: the run's batch sizes as the CLI gave them; ``run.acceptance``: the parsed rates."""
    from simulator.specs.models import MODELS_DIR, load_model

    draft, acceptance, context_len, k_max = run.draft, run.acceptance, run.context_len, max(run.ks)

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    spec = load_model(model)
    model_ref = spec.name
    if layers is not None and layers < spec.num_layers:
        src = MODELS_DIR / f"{spec.name}.json" if (MODELS_DIR / f"{spec.name}.json").exists() else Path(model)
        cfg = json.loads(src.read_text())
        cfg["num_hidden_layers"] = int(layers)
        cfg["_source"] = f"{cfg.get('_source', spec.name)}; truncated to {layers} layers for a smoke run"
        mpath = path.parent / f"{spec.name}-L{layers}.json"
        mpath.write_text(json.dumps(cfg, indent=2) + "\n")
        model_ref = str(mpath.resolve())
    prec = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}[DTYPE_LABEL[DTYPES[dtype]]]
    draft_tbl = f'method = "{draft}"' if draft == "eagle" else f'method = "model"\nmodel = "{draft.split(":", 1)[1]}"'
    lines = [f'name = "{path.stem}"',
             f'description = "torch reference engine, synthetic acceptance, random weights: {model} on {hardware}"',
             "", "[model]", f'name = "{model_ref}"', "", "[hardware]", f'name = "{hardware}"', "tp = 1", "",
             "[precision]", f'weights = "{prec}"', f'activations = "{prec}"', f'kv_cache = "{prec}"', "",
             "[draft]", draft_tbl, "", "[acceptance]", f"rates = {[float(r) for r in acceptance]}",
             'source = "imposed by the synthetic-acceptance engine run"', "",
             "[engine]", 'name = "ideal"', "",
             "[workload]", f"context_len = {int(context_len)}", f'batch_sizes = "{batch_sizes}"',
             f"k_max = {int(k_max)}", f"fixed_k = {min(3, int(k_max))}"]
    if profile:
        lines += ["", "[calibration]", f'profile = "{Path(profile).resolve()}"']
    path.write_text("\n".join(lines) + "\n")
    return path


# ---------------------------------------------------------------------------------------------
# CLI
# ---------------------------------------------------------------------------------------------


def main(argv=None) -> int:
    from simulator.cli.common import OneLineParser, run_cli

    p = OneLineParser(prog="python -m calibration.engine.synthetic", description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True, help="catalog model (llama-3.1-8b, qwen3-30b-a3b, ...) or config.json")
    p.add_argument("--layers", type=int, default=None, help="keep the first N layers (CPU smoke runs; default all)")
    p.add_argument("--draft", default="eagle", help="eagle | model:NAME")
    p.add_argument("--acceptance", default="0.8", help="per-position acceptance: 0.8 or 0.85,0.8,0.76 (last repeats)")
    p.add_argument("--batch-sizes", default="1-64:pow2",
                   help="1,2,4, a-b:pow2 (powers of two inside, plus both ends) or a-b (every integer)")
    p.add_argument("--k", default="0-6", help="0-6 or 0,2,4")
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    p.add_argument("--dtype", default="bf16", choices=sorted(DTYPES))
    p.add_argument("--steps", type=int, default=8, help="timed steps per (B, K) point (median reported)")
    p.add_argument("--warmup-steps", type=int, default=2)
    p.add_argument("--context-len", type=int, default=512, help="prompt tokens per sequence")
    p.add_argument("--router-reuse", type=float, default=0.0, help="MoE: adjacent-token routing reuse in [0, 1)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=None, help="CPU: torch threads")
    p.add_argument("--clock", default=None, choices=["events", "wall", "cpu"],
                   help="events (CUDA default), wall (CPU default) or cpu (thread CPU time, --threads 1)")
    p.add_argument("--output", required=True, help="CSV to append rows to (existing points are skipped)")
    p.add_argument("--time-limit", type=float, default=None, help="seconds; no new point starts after this")
    p.add_argument("--scenario-out", default=None,
                   help="also write a scenario TOML of this run for calibration.validate")
    p.add_argument("--hardware", default=None, help="catalog hardware of --scenario-out (default: discovered)")
    p.add_argument("--profile", default=None, help="calibration profile for --scenario-out")
    a = p.parse_args(argv)
    return run_cli(lambda: _run(a))


def _run(a) -> int:
    from simulator.specs.values import parse_batch_sizes

    from .__main__ import parse_int_list

    try:
        bs, ks = [int(b) for b in parse_batch_sizes(a.batch_sizes)], parse_int_list(a.k)
    except ValueError as e:
        raise PlannerError(f"--batch-sizes/--k: {e}") from None
    if min(bs) < 1 or min(ks) < 0 or max(ks) > 32:
        raise PlannerError("--batch-sizes must be >= 1 and --k in 0..32")
    if a.steps < 1 or a.warmup_steps < 0 or a.context_len < 2:
        raise PlannerError("--steps must be >= 1, --warmup-steps >= 0, --context-len >= 2")
    if not 0.0 <= a.router_reuse < 1.0:
        raise PlannerError(f"--router-reuse {a.router_reuse}: must be in [0, 1)")
    if a.time_limit is not None and not a.time_limit > 0:
        raise PlannerError("--time-limit must be a positive number of seconds")
    if a.device == "cuda" and not torch.cuda.is_available():
        raise PlannerError(f"--device cuda: no usable CUDA device (torch {torch.__version__}); use --device cpu")
    if a.threads:
        torch.set_num_threads(a.threads)
    rates = parse_acceptance(a.acceptance)
    from simulator.cli.common import check_output_file
    out = check_output_file(a.output)
    if out.exists() and out.stat().st_size:
        try:
            header = pd.read_csv(out, nrows=0).columns.tolist()
        except Exception as e:
            raise PlannerError(f"--output {out}: not a readable CSV ({e.__class__.__name__})") from None
        if header != COLUMNS:
            raise PlannerError(f"--output {out}: its columns differ from the engine sweep's; use a new file")
    cfg = engine_config(a.model, a.layers, a.router_reuse)
    if a.draft != "eagle" and not a.draft.startswith("model:"):
        raise PlannerError(f"--draft {a.draft!r}: use eagle or model:NAME (a catalog model)")
    from simulator.specs.models import load_model
    spec = load_model(a.model)
    dtype = DTYPES[a.dtype]
    run = SyntheticRun(a.draft, bs, ks, rates, a.context_len, a.steps, a.warmup_steps, a.seed,
                       dense_ffn=spec.intermediate_size, clock=a.clock)
    t0 = time.monotonic()
    target = Transformer(cfg, device_random_weights(cfg, seed=a.seed, dtype=dtype, device=a.device))
    print(f"[synthetic] built {cfg.name} ({cfg.n_layers} layers, {a.dtype}) on {a.device} in"
          f" {time.monotonic() - t0:.1f} s", file=sys.stderr, flush=True)
    if a.scenario_out:
        hw = a.hardware
        if hw is None:
            from calibration.device import catalog_name, discover
            hw = catalog_name(discover(a.device)) or "cpu-xeon-2c"
        write_scenario(a.scenario_out, a.model, a.layers, hw, run, a.batch_sizes, a.dtype, a.profile)
    limit = None if a.time_limit is None else max(a.time_limit - (time.monotonic() - t0), 0.0)
    try:
        df = run_synthetic(target, replace(run, time_limit_s=limit), out)
    except KeyboardInterrupt:
        print(f"interrupted: finished points are in {out}", file=sys.stderr)
        return 130
    print(f"[synthetic] {len(df)} rows appended to {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
