"""`python -m simulator.predict`: the optimal-K table for a scenario or flags.

Examples::

    python -m simulator.predict                                   # the default scenario
    python -m simulator.predict --scenario scenarios/qwen3-235b-h200.toml
    python -m simulator.predict --model llama-3.1-8b --hardware h100-sxm --draft eagle3 \\
        --acceptance 0.8,0.7,0.6 --batch-sizes 1-256 --format vllm
    python -m simulator.predict --scenario command-a-h100 --breakdown 64,3
"""
from __future__ import annotations

import argparse
import json
import sys

import numpy as np
import pandas as pd

from simulator.plan.api import Prediction, predict
from simulator.cli.common import OneLineParser, run_cli, write_atomically
from simulator.errors import PlannerError
from simulator.specs.scenario import DEFAULT_SCENARIO

FORMATS = ("table", "csv", "json", "markdown", "vllm", "trtllm")


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="python -m simulator.predict",
                                description="Predict the goodput-optimal speculative draft length K per batch size.")
    p.add_argument("--scenario", help="scenario TOML file (or the name of a bundled one); flags override it")
    p.add_argument("--model", help="catalog model name or path to a Hugging Face config.json")
    p.add_argument("--hardware", help="catalog hardware name (e.g. h100-sxm, h200, mi300x)")
    p.add_argument("--tp", type=int, help="tensor-parallel degree")
    p.add_argument("--ep", type=int, help="expert-parallel groups (MoE; must divide tp)")
    p.add_argument("--draft", help="eagle | eagle3 | mtp | ngram | model:NAME")
    p.add_argument("--acceptance", help="i.i.d. rate (0.8) or per-position rates (0.7,0.5,0.3)")
    p.add_argument("--context-len", type=int, help="tokens already in each sequence's KV cache")
    p.add_argument("--batch-sizes", help="e.g. 1-256 or 1,2,4,8")
    p.add_argument("--k-max", type=int, help="largest K considered")
    p.add_argument("--fixed-k", type=int, help="the fixed-K policy compared against (default 3)")
    p.add_argument("--dtype", help="weight dtype: bf16, fp8, int4, mxfp4")
    p.add_argument("--kv-dtype", help="KV-cache dtype: bf16, fp8")
    p.add_argument("--calibration", help="calibration profile JSON (python -m calibration.fit, or a measured-table"
                   " profile under calibration/data/profiles/)")
    p.add_argument("--engine", help="serving engine whose host time and CUDA-graph capture to model: vllm, sglang,"
                   " trtllm or ideal (kernels only); default vllm on GPUs")
    p.add_argument("--engine-version", help="engine version of the profile (default the newest profile)")
    p.add_argument("--format", choices=FORMATS, default="table")
    p.add_argument("--output", help="write to this file instead of stdout")
    p.add_argument("--breakdown", metavar="B,K", help="print the per-operator breakdown at batch size B and draft length K")
    return p


def _int_pair(text: str) -> tuple[int, int]:
    try:
        b, k = (int(x) for x in text.split(","))
    except ValueError:
        raise PlannerError(f"--breakdown '{text}': expected B,K such as 64,3") from None
    if b < 1 or k < 0:
        raise PlannerError(f"--breakdown {text}: batch size must be >= 1 and K >= 0")
    return b, k


def condensed(table: pd.DataFrame) -> pd.DataFrame:
    """Powers of two, the ends, and every batch size where K* changes."""
    b = table.batch_size.to_numpy()
    k = table.k_opt.fillna(-1).to_numpy()
    keep = (b & (b - 1)) == 0
    keep[[0, -1]] = True
    keep[1:] |= k[1:] != k[:-1]
    return table[keep]


def render_table(pred: Prediction) -> str:
    t = condensed(pred.table)
    sc = pred.scenario
    lines = [f"# {sc.name}: {sc.model.name} on {sc.deployment.tp} x {sc.hardware.name}, draft {sc.draft.label},"
             f" context {sc.context_len}",
             f"# step times: {pred.provenance['step_time_source']}",
             f"# acceptance: {pred.provenance['acceptance']}", ""]
    cols = ["batch_size", "k_opt", "goodput_per_seq", "throughput", "itl_ms", "speedup_vs_plain",
            "speedup_vs_fixed", "fixed_vs_plain", "bound", "memory_gb_per_gpu"]
    if "experts_touched" in t:
        cols += ["experts_touched", "experts_touched_plain", "expert_load_share"]
    view = t[cols].copy()
    view["k_opt"] = view.k_opt.astype(object).where(view.k_opt.notna(), "-")
    headers = {"batch_size": "B", "k_opt": "K*", "goodput_per_seq": "tok/s/seq", "throughput": "tok/s",
               "itl_ms": "ITL ms", "speedup_vs_plain": "vs plain", "speedup_vs_fixed": f"vs K={sc.fixed_k}",
               "fixed_vs_plain": f"K={sc.fixed_k}/plain", "bound": "bound", "memory_gb_per_gpu": "GB/GPU",
               "experts_touched": "experts@K*", "experts_touched_plain": "experts@K=0",
               "expert_load_share": "expert share"}
    formats = {"goodput_per_seq": "{:.1f}", "throughput": "{:.0f}", "itl_ms": "{:.2f}", "speedup_vs_plain": "{:.2f}x",
               "speedup_vs_fixed": "{:.2f}x", "fixed_vs_plain": "{:.2f}x", "memory_gb_per_gpu": "{:.1f}",
               "experts_touched": "{:.1f}", "experts_touched_plain": "{:.1f}", "expert_load_share": "{:.0%}"}
    for col, fmt in formats.items():
        if col in view:
            view[col] = [("-" if pd.isna(v) else fmt.format(v)) for v in view[col]]
    view = view.rename(columns=headers)
    lines.append(view.to_string(index=False))
    losing = pred.table[pred.table.fixed_vs_plain < 1]
    lines.append("")
    if len(losing):
        lines.append(f"fixed K={sc.fixed_k} is slower than plain decoding from batch size {losing.batch_size.min()}"
                     f" ({len(losing)} of {len(pred.table)} batch sizes)")
    none_fit = pred.table[~pred.table.fits_memory]
    if len(none_fit):
        lines.append(f"batch sizes >= {none_fit.batch_size.min()} do not fit in memory"
                     f" ({sc.hardware.memory_bytes / 1e9:.0f} GB x {sc.deployment.memory_utilization:.0%} per GPU)")
    lines.append("vLLM num_speculative_tokens_per_batch_size: "
                 + json.dumps(pred.vllm()["num_speculative_tokens_per_batch_size"]))
    if len(t) < len(pred.table):
        lines.append(f"({len(t)} of {len(pred.table)} batch sizes shown: powers of two and every change of K*;"
                     " --format csv prints all)")
    return "\n".join(lines) + "\n"


def render(pred: Prediction, fmt: str) -> str:
    if fmt == "table":
        return render_table(pred)
    if fmt == "csv":
        return pred.table.to_csv(index=False)
    if fmt == "markdown":
        head = f"**{pred.scenario.name}**: step times from {pred.provenance['step_time_source']}\n\n"
        return head + markdown_table(condensed(pred.table))
    if fmt == "json":
        return json.dumps(pred.to_dict(), indent=2, default=_json_default) + "\n"
    if fmt == "vllm":
        cfg = {"method": pred.scenario.draft.method if pred.scenario.draft.method != "model" else "draft_model"}
        if pred.scenario.draft.method == "model":
            cfg["model"] = pred.scenario.draft.model.name
        return json.dumps(cfg | pred.vllm(), indent=2) + "\n"
    if fmt == "trtllm":
        return json.dumps({"draft_len_schedule": {str(k): v for k, v in pred.trtllm().items()}}, indent=2) + "\n"
    raise PlannerError(f"unknown format '{fmt}'")


def markdown_table(df: pd.DataFrame) -> str:
    def cell(v):
        if isinstance(v, (float, np.floating)):
            return "-" if np.isnan(v) else f"{v:.4g}"
        return "-" if v is pd.NA else str(v)
    rows = ["| " + " | ".join(df.columns) + " |", "|" + "---|" * len(df.columns)]
    rows += ["| " + " | ".join(cell(v) for v in rec) + " |" for rec in df.itertuples(index=False)]
    return "\n".join(rows) + "\n"


def _json_default(value):
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (np.floating,)):
        return float(value)
    raise TypeError(type(value).__name__)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return run_cli(lambda: _run(args))


def _run(args) -> int:
    overrides = dict(model=args.model, hardware=args.hardware, tp=args.tp, ep=args.ep, draft=args.draft,
                     acceptance=args.acceptance, context_len=args.context_len, batch_sizes=args.batch_sizes,
                     k_max=args.k_max, fixed_k=args.fixed_k, dtype=args.dtype, kv_dtype=args.kv_dtype,
                     calibration=args.calibration, engine=args.engine, engine_version=args.engine_version)
    scenario = args.scenario
    if scenario is None and not (args.model and args.hardware):
        scenario = str(DEFAULT_SCENARIO)
    pred = predict(scenario, **overrides)
    if args.breakdown:
        b, k = _int_pair(args.breakdown)
        df = pred.breakdown(b, k)
        text = (f"# per-operator breakdown at B={b}, K={k} ({pred.provenance['step_time_source']})\n"
                + df.to_string(index=False, float_format=lambda v: f"{v:.4g}") + "\n"
                + f"total {df.time_ms.sum():.3f} ms\n")
    else:
        text = render(pred, args.format)
    if args.output:
        write_atomically(args.output, text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
