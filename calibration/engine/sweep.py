"""Measured (batch size, K) sweeps of the reference engine -> CSV rows (one per point).

Rows are appended as each point finishes; points already in the output file are skipped.
"""

from __future__ import annotations

import datetime as _dt
import json
import platform
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pandas as pd
import torch

from .engine import SpecDecoder, make_draft
from .weights import load_target, load_tokenizer

COLUMNS = [
    "source", "target", "draft", "device", "dtype", "batch_size", "k", "context_len", "n_steps",
    "draft_ms", "verify_ms", "overhead_ms", "itl_ms", "itl_ms_p90", "acceptance_length",
    "per_position_acceptance", "goodput_per_seq", "throughput", "experts_touched",
    "torch_version", "date", "code_version", "router_reuse", "itl_ms_rounds",
]
SOURCE = "torch-reference-engine"
PROMPTS_FILE = Path(__file__).resolve().parent.parent / "prompts" / "prompts.jsonl"


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return f"cuda: {torch.cuda.get_device_name(device)}"
    name = platform.processor() or platform.machine()
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                name = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"cpu: {name} ({torch.get_num_threads()} threads)"


def code_version() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=Path(__file__).parent,
                             capture_output=True, text=True, timeout=5)
        return out.stdout.strip() or "unknown"
    except Exception:
        return "unknown"


def load_prompts(path: Path = PROMPTS_FILE) -> list[dict]:
    return [json.loads(l) for l in open(path) if l.strip()]


def chat(prompt: str) -> str:
    return f"<|im_start|>user\n{prompt}<|im_end|>\n<|im_start|>assistant\n"


def context_prompts(batch_size: int, context_len: int, vocab: int, seed: int = 0) -> list[list[int]]:
    """batch_size token lists of exactly context_len tokens: chat-formatted prompts from the
    prompt set concatenated (a different rotation per sequence), cut at the front so each ends
    with the assistant tag. Token ids beyond `vocab` (synthetic targets) are folded modulo vocab."""
    try:
        tok = load_tokenizer()
        items = load_prompts()
        enc = [tok.encode(chat(it["prompt"])) for it in items]
    except Exception:  # no weights/tokenizer: seeded random ids
        g = np.random.default_rng(seed)
        enc = [g.integers(3, vocab, size=40).tolist() for _ in range(100)]
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(enc))
    out = []
    for b in range(batch_size):
        ids: list[int] = []
        j = b
        while len(ids) < context_len:
            ids = enc[order[j % len(enc)]] + ids  # prepend earlier turns
            j += batch_size
        out.append([t % vocab for t in ids[-context_len:]])
    return out


def _existing_points(output: Path, target, draft, dtype, context_len, slack, router_reuse=None) -> set[tuple[int, int]]:
    if not output.exists() or output.stat().st_size == 0:
        return set()
    df = pd.read_csv(output)
    if df.empty:
        return set()
    m = (df["target"] == target) & (df["draft"] == draft) & (df["dtype"] == dtype) & \
        (df["context_len"] >= context_len - 1) & (df["context_len"] <= context_len + slack)
    if router_reuse is not None:
        m &= (df["router_reuse"].fillna(0.0) if "router_reuse" in df else 0.0) == router_reuse
    return {(int(r.batch_size), int(r.k)) for r in df[m].itertuples()}


def _append_row(output: Path, row: dict):
    output.parent.mkdir(parents=True, exist_ok=True)
    new = not output.exists() or output.stat().st_size == 0
    columns = COLUMNS if new else pd.read_csv(output, nrows=0).columns.tolist()  # an older file keeps its header
    pd.DataFrame([row], columns=columns).to_csv(output, mode="a", header=new, index=False)


def measure_window(eng: SpecDecoder, k: int, warmup_steps: int, gen_tokens: int, min_steps: int, max_steps: int,
                   trace: list | None = None, trace_steps: int = 3):
    """Steps of draft length k over one window of ``gen_tokens`` new tokens from the snapshot.

    Warm-up steps run first and are discarded; the state is then rewound to the snapshot, so every K
    is timed over the same committed tokens (greedy verification commits the same tokens whatever K
    is) and their acceptance is measured on the same text."""
    recs = []
    with torch.inference_mode():
        eng.reset(k)
        for _ in range(warmup_steps):
            eng.step()
        eng.reset(k)
        start = eng.lengths.clone()
        while len(recs) < max_steps:
            record = trace is not None and len(recs) < trace_steps
            if record:
                eng.target.routing_trace = []
            recs.append(eng.step(record_experts=eng.target.cfg.is_moe))
            if record:
                trace.extend(eng.target.routing_trace)  # one [B, K+1, top_k] array per MoE layer
                eng.target.routing_trace = None
            if len(recs) >= min_steps and int((eng.lengths - start).min()) >= gen_tokens:
                break
    return recs, eng.attempts[:k].clone(), eng.accepts[:k].clone()


class RowLabels(NamedTuple):
    """What a runs-CSV row says it measured (its first columns)."""

    source: str
    target: str
    draft: str
    device: str
    dtype: str


def step_row(labels: RowLabels, batch: int, k: int, recs: list, drafts: tuple[list, list], itl_s: float,
             router_reuse: float | None, rounds_s: list | None = None) -> dict:
    """One measured (B, K) point in the runs-CSV schema (COLUMNS) from its step records: phase medians,
    the step time ``itl_s`` as the caller aggregated it, acceptance length and conditional per-position
    acceptance (``drafts`` = (attempted, accepted) per position), goodput, experts touched, provenance;
    ``rounds_s``: the median step time of each round (interleaved repeats: their spread is the point's
    measurement interval)."""
    attempted, accepted = drafts
    step_s = np.array([r.draft_s + r.verify_s + r.overhead_s for r in recs])
    itl = itl_s * 1e3
    al = float(np.mean([np.mean(r.n_accepted) + 1 for r in recs]))
    experts = [np.mean(r.experts_touched) for r in recs if r.experts_touched]
    gp = al / itl_s
    return {
        "source": labels.source, "target": labels.target, "draft": labels.draft, "device": labels.device,
        "dtype": labels.dtype,
        "batch_size": batch, "k": k, "context_len": round(float(np.mean([r.context_len for r in recs])), 2),
        "n_steps": len(recs),
        "draft_ms": round(float(np.median([r.draft_s for r in recs])) * 1e3, 4),
        "verify_ms": round(float(np.median([r.verify_s for r in recs])) * 1e3, 4),
        "overhead_ms": round(float(np.median([r.overhead_s for r in recs])) * 1e3, 4),
        "itl_ms": round(itl, 4), "itl_ms_p90": round(float(np.percentile(step_s, 90)) * 1e3, 4),
        "acceptance_length": round(al, 4),
        "per_position_acceptance": json.dumps([round(a / t, 6) if t else None for a, t in zip(accepted, attempted)]),
        "goodput_per_seq": round(gp, 4), "throughput": round(gp * batch, 4),
        "experts_touched": round(float(np.mean(experts)), 3) if experts else None,
        "torch_version": torch.__version__,
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "code_version": code_version(), "router_reuse": router_reuse,
        "itl_ms_rounds": json.dumps([round(x * 1e3, 4) for x in rounds_s]) if rounds_s else None,
    }


@dataclass(frozen=True)
class SweepSettings:
    """What run_sweep measures and how: target and draft, the (B, K) grid, the window of each point
    (prompt length, new tokens, warm-up and step bounds), forced acceptance, dtype and device, rounds,
    the MoE router's reuse and mode, and the clock (see run_sweep)."""

    target: str = "smollm2-135m"
    draft: str = "ngram"
    batch_sizes: Sequence[int] = (1, 2, 4, 8)
    ks: Sequence[int] = range(0, 7)
    context_len: int = 128
    gen_tokens: int = 16
    temperature: float = 0.0
    seed: int = 0
    warmup_steps: int = 2
    min_steps: int = 4
    max_steps: int = 12
    forced_acceptance: float | None = None
    dtype: str = "float32"
    device: str | None = None
    threads: int | None = None
    warmup_tokens: int = 0
    rounds: int = 1
    min_sequences: int = 1
    router_reuse: float | list[float] | None = None
    clock: str = "wall"
    router_mode: str = "learned"
    router_skew: float = 0.0


def run_sweep(s: SweepSettings = SweepSettings(), output: str | None = None, progress=True,
              trace_output: str | None = None) -> pd.DataFrame:
    """Measure ITL split (draft/verify/overhead) and acceptance at every (batch size, K).

    Per batch size: prefill, then generate ``warmup_tokens`` tokens once (plain decoding, so all
    sequences stay aligned; greedy speculative decoding would commit the same tokens): the snapshot
    every K starts from. Then ``rounds`` rounds, each over every batch size and K, each timing a
    window of ``gen_tokens`` new tokens; medians over all rounds. Rows are written at the end (a
    killed run keeps the rows of earlier runs and remeasures only what is missing).
    ``router_reuse`` (MoE targets): adjacent-token routing correlation of the synthetic router, one
    value or a list (interleaved within each round like K, so drift of the machine hits all alike);
    ``trace_output``: an .npz of router traces (expert ids [sequences, K+1, top_k] of the first
    verify steps of each point and MoE layer, keyed ``B{B}_K{K}_r{rho}``) to fit the reuse from.
    ``router_mode="sampled"``: tokens draw experts from Zipf(``router_skew``) instead of the
    router's scores (the device column says so).
    ``clock="cpu"`` (CPU with threads=1) times each phase by the thread's CPU time: immune to other
    processes sharing the cores (the device column says which clock).
    Returns the rows measured in this call (and appends them to `output` if given)."""
    if s.threads:
        torch.set_num_threads(s.threads)
    ks = sorted(set(int(k) for k in s.ks))
    batch_sizes = sorted(set(int(b) for b in s.batch_sizes))
    if any(k < 0 for k in ks):
        raise ValueError("K must be >= 0")
    if any(b < 1 for b in batch_sizes):
        raise ValueError("batch size must be >= 1")
    reuses, tgt, drf = _load_models(s, ks)
    out_path = Path(output) if output else None
    slack = s.warmup_tokens + (s.warmup_steps + s.max_steps) * (max(ks) + 1) + 1
    done = {(b, k, rho) for rho in reuses for b, k in (
        _existing_points(out_path, s.target, s.draft, s.dtype, s.context_len, slack, rho) if out_path else set())}
    traces: dict[str, list] = {}
    dev_name = device_name(tgt.device) + (", thread CPU-time clock" if s.clock == "cpu" else "") \
        + (f", sampled router zipf {s.router_skew:g}" if s.router_mode != "learned" else "")
    todo = {B: [(rho, k) for rho in reuses for k in ks if (B, k, rho) not in done] for B in batch_sizes}
    engines = _prefill_engines(s, tgt, drf, todo, max(ks))
    results = _measure_rounds(s, tgt, engines, todo, traces if trace_output else None, progress)
    labels = RowLabels(SOURCE, s.target, s.draft, dev_name, s.dtype)
    rows = []
    for (B, rho, k), (windows, att_t, acc_t) in results.items():
        recs = [r for w in windows for r in w]
        # median of the windows' medians: a window caught in a slow spell is outvoted
        itl_s = float(np.median([np.median([r.draft_s + r.verify_s + r.overhead_s for r in w]) for w in windows]))
        rows.append(step_row(labels, B, k, recs, (att_t.tolist(), acc_t.tolist()), itl_s,
                             float(rho or 0.0) if tgt.cfg.is_moe else None, round_medians(windows, s.rounds)))
        if out_path:
            _append_row(out_path, rows[-1])
        if progress:
            _print_point(s, rows[-1])
    if trace_output and traces:
        _save_traces(Path(trace_output), traces)
    return pd.DataFrame(rows, columns=COLUMNS)


def round_medians(windows: list, rounds: int) -> list[float]:
    """The median step time of each round's windows (the windows are appended round by round, the same
    number per round): with R interleaved rounds, min..max of these holds the point's median with
    probability 1 - 2^(1-R) (94% at R = 5)."""
    per_round = len(windows) // rounds
    return [float(np.median([r.draft_s + r.verify_s + r.overhead_s
                             for w in windows[i * per_round:(i + 1) * per_round] for r in w])) for i in range(rounds)]


def _load_models(s: SweepSettings, ks: list[int]):
    """(the router reuse values, target, draft or None when every K is 0)."""
    tdtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[s.dtype]
    reuses = [None] if s.router_reuse is None else \
        sorted({float(x) for x in (s.router_reuse if isinstance(s.router_reuse, (list, tuple)) else [s.router_reuse])})
    extra = {"router_reuse": reuses[0]} if reuses[0] is not None else {}
    if s.router_mode != "learned":  # MoE: the sampled router (see ModelConfig.router_mode)
        extra |= {"router_mode": s.router_mode, "router_skew": float(s.router_skew)}
    tgt = load_target(s.target, device=s.device, dtype=tdtype, seed=s.seed, **extra)
    drf = make_draft(s.draft, tgt) if max(ks) > 0 else None
    if drf is None and s.draft not in ("none", ""):
        make_draft(s.draft, tgt)  # validate the name even for K = 0 only
    return reuses, tgt, drf


def _prefill_engines(s: SweepSettings, tgt, drf, todo: dict, kmax: int) -> dict[int, list[SpecDecoder]]:
    """Phase 1: prefill and warm up an engine per (batch size, prompt group); they stay alive."""
    engines: dict[int, list[SpecDecoder]] = {}
    for B, points in todo.items():
        if not points:
            continue
        engines[B] = []
        # acceptance of one or two sequences is mostly luck: small batches run several groups of
        # different prompts until min_sequences sequences were seen (timing pools over them too)
        for group in range(-(-s.min_sequences // B)):
            prompts = context_prompts(B, s.context_len, tgt.cfg.vocab, s.seed + 7919 * group)
            eng = SpecDecoder(tgt, drf, k=0, temperature=s.temperature, seed=s.seed,
                              forced_acceptance=s.forced_acceptance, clock=s.clock)
            eng.max_k = kmax
            cap = s.context_len + s.warmup_tokens + (s.warmup_steps + s.max_steps) * (kmax + 1) + 2
            eng.prefill(prompts, cap)
            if s.warmup_tokens:
                with torch.inference_mode():
                    eng.reset(0)  # plain steps: every sequence advances exactly one token per step
                    while int((eng.lengths - eng.prompt_lengths).min()) < s.warmup_tokens:
                        eng.step()
                eng.prompt_lengths = eng.lengths.clone()  # the snapshot: reset(k) rewinds to here
            engines[B].append(eng)
    return engines


def _measure_rounds(s: SweepSettings, tgt, engines: dict, todo: dict, traces: dict | None, progress) -> dict:
    """Phase 2: {(B, rho, K): (step records per window, attempts, accepts)}; ``traces`` (None: not
    recorded) collects the first round's router traces."""
    # each round visits every batch size and K, so a slow spell of the machine (memory
    # bandwidth here drifts for minutes at a time) hits one round of a point, not all of them.
    results = {(B, rho, k): ([], torch.zeros(k, dtype=torch.long), torch.zeros(k, dtype=torch.long))
               for B in engines for rho, k in todo[B]}
    for r in range(s.rounds):
        for B, group_engines in engines.items():
            order = todo[B] if r % 2 == 0 else todo[B][::-1]
            for eng in group_engines:
                for rho, k in order:
                    if rho is not None:
                        tgt.cfg.router_reuse = rho
                    tr = traces.setdefault(f"B{B}_K{k}_r{rho or 0:g}", []) \
                        if traces is not None and tgt.cfg.is_moe and r == 0 else None
                    recs, att, acc = measure_window(eng, k, s.warmup_steps, s.gen_tokens, s.min_steps, s.max_steps, tr)
                    results[(B, rho, k)][0].append(recs)
                    results[(B, rho, k)][1].add_(att.cpu())
                    results[(B, rho, k)][2].add_(acc.cpu())
        if progress:
            print(f"[sweep] round {r + 1}/{s.rounds} done", file=sys.stderr, flush=True)
    return results


def _print_point(s: SweepSettings, row: dict) -> None:
    itl, al, gp = row["itl_ms"], row["acceptance_length"], row["goodput_per_seq"]
    print(f"[sweep] {s.target} {s.draft} B={row['batch_size']} K={row['k']}: itl {itl:.1f} ms (draft {row['draft_ms']:.1f}, "
          f"verify {row['verify_ms']:.1f}), AL {al:.2f}, goodput/seq {gp:.1f} tok/s"
          + (f", experts {row['experts_touched']}" if row['experts_touched'] is not None else ""), file=sys.stderr, flush=True)


def _save_traces(path: Path, traces: dict[str, list]) -> None:
    """Add this run's router traces to the .npz at ``path`` (keys of earlier runs kept)."""
    old = dict(np.load(path)) if path.exists() else {}
    old.update({key: np.concatenate(v, axis=0) for key, v in traces.items() if v})
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(path, **old)
