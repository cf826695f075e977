"""The flags of `python -m simulator.predict` (:func:`build_parser`), grouped as the help lists them."""
from __future__ import annotations

import argparse

from simulator.plan import exports
from simulator.cli.common import OneLineParser, add_dtype_args
from simulator.cli.catalog import KINDS as CATALOG_KINDS
from simulator.specs.drafts import draft_syntax_list

EXPORT_FORMATS = exports.FORMATS  # vllm, vllm-ctx, trtllm, sglang, sglang-sps: engine files
FORMATS = ("table", "csv", "json", "markdown", "kmap") + EXPORT_FORMATS


def _scenario_args(p) -> None:
    """The scenario and what it runs: model, hardware, draft, acceptance, sampling."""
    p.add_argument("--scenario", help="scenario TOML file (or the name of a bundled one); flags override it")
    p.add_argument("--model", help="catalog model name or path to a Hugging Face config.json")
    p.add_argument("--hardware", help="catalog hardware name (e.g. h100-sxm, h200, mi300x)")
    p.add_argument("--tp", type=int, help="tensor-parallel degree")
    p.add_argument("--ep", type=int, help="expert-parallel groups (MoE; must divide tp)")
    p.add_argument("--draft", help=f"draft method: {draft_syntax_list()} (--list drafts: what each prices)")
    p.add_argument("--draft-model", metavar="PATH", help="the draft checkpoint (path or Hugging Face id) the engine"
                   " loads for eagle / eagle3 / model drafts; written into the vLLM file as \"model\"")
    p.add_argument("--acceptance", help="i.i.d. rate (0.8), per-position rates (0.7,0.5,0.3), or a measured file:"
                   " speculation_profile.json, vllm bench serve JSON, vLLM per-request metrics JSON, /metrics dump,"
                   " runs CSV (recognised by content; max_supported_k caps K)")
    p.add_argument("--temperature", type=float, help="sampling temperature (0 = greedy, the default): prices the"
                   " engine's sampling and rejection passes over the logits")
    p.add_argument("--top-p", type=float, help="top-p of sampled requests (1 = off, the default)")
    p.add_argument("--acceptance-band", type=float, metavar="D",
                   help="uncertainty +-D on every per-position rate (e.g. 0.1): K* is the K nearest the best across"
                        " the band, and the schedule says where K* depends on acceptance")


def _workload_args(p) -> None:
    """The grid (context, batch sizes, K) and the precisions."""
    p.add_argument("--context-len", type=int, help="tokens already in each sequence's KV cache")
    p.add_argument("--batch-sizes", help="e.g. 1-256 or 1,2,4,8")
    p.add_argument("--k-max", type=int, help="largest K considered")
    p.add_argument("--schedule-tolerance", metavar="SHARE",
                   help="goodput share of the per-batch best the K* schedule may give up at any batch size to use"
                   " fewer ranges of K (default 0.01 = 1%%; 0 = the raw per-batch argmax); also 1%%")
    p.add_argument("--fixed-k", type=int, help="the fixed-K policy compared against (default 3)")
    add_dtype_args(p)


def _deployment_args(p) -> None:
    """Calibration, parallel layout, engine and server."""
    p.add_argument("--calibration", help="calibration profile JSON (python -m calibration.fit, or a measured-table"
                   " profile under simulator/data/profiles/; 'none': datasheet only)")
    p.add_argument("--deployment", metavar="FIT.json", help="deployment calibration (python -m calibration.fit_deployment):"
                   " engine terms and acceptance fitted on a few measurements of this deployment")
    p.add_argument("--layout", choices=("tp", "tp-ep", "dp-ep"),
                   help="MoE parallel layout: TP attention + TP experts, TP attention + EP, or DP attention + EP")
    p.add_argument("--dp", type=int, help="attention data-parallel groups (layout dp-ep; default = tp)")
    p.add_argument("--routing-reuse", type=float,
                   help="MoE: probability that a position re-uses the previous position's experts (0 <= rho < 1)")
    p.add_argument("--engine", help="serving engine whose host time and CUDA-graph capture to model: vllm, sglang,"
                   " trtllm or ideal (kernels only); default vllm on GPUs")
    p.add_argument("--engine-version", help="engine version of the profile (default the newest profile)")
    p.add_argument("--max-capture-size", type=int, metavar="N", help="the engine's CUDA-graph capture limit for the"
                   " verify pass, in the unit its setting counts (vLLM --cuda-graph-sizes / --max-cudagraph-capture-size:"
                   " tokens; SGLang --cuda-graph-max-bs: sequences); default the engine profile's")
    p.add_argument("--max-num-seqs", type=int, metavar="N", help="the engine's running-batch cap (vLLM --max-num-seqs,"
                   " SGLang --max-running-requests); default [serving] max_num_seqs, else the engine's default")
    p.add_argument("--max-num-batched-tokens", type=int, metavar="N", help="vLLM's token budget per step"
                   " (--max-num-batched-tokens); default [serving] max_num_batched_tokens, else vLLM's default")
    p.add_argument("--allreduce-busbw", type=float, metavar="GB/s",
                   help="your server's all-reduce bus bandwidth (nccl-tests all_reduce_perf busbw at large messages);"
                   " prices every all-reduce's bandwidth term (PCIe servers differ by up to 10x)")


def _output_args(p) -> None:
    """What to print and where."""
    p.add_argument("--context-lens", help="context axis of the K* map: 512,2048,8192, 512-131072 (powers of two)"
                   " or 512-131072:16 (16 log-spaced points); used by --format kmap and vllm-ctx")
    p.add_argument("--format", choices=FORMATS, default="table",
                   help="table/csv/json/markdown: the K* table; kmap: K* by batch size x context length; vllm,"
                   " vllm-ctx (proposal PR #48944), trtllm, sglang (adaptive config), sglang-sps (DSpark step-cost"
                   " table): the engine file")
    p.add_argument("--export-version", help="engine version the export targets (default: the newest release"
                   " checked: vllm 0.33.0, trtllm 1.2.1, sglang 0.5.23; vllm-ctx: pr48944). Not --engine-version,"
                   " which picks the engine profile the step times are modelled with")
    p.add_argument("--markdown", action="store_true", help="print an export as a Markdown table of what the engine"
                   " will do per range, instead of the engine file")
    p.add_argument("--cuda-graph-bs", help="SGLang: captured CUDA-graph batch sizes the engine pads to before"
                   " routing (e.g. 1,2,4,8,16,24,32; 'none': no padding); default from an SGLang engine profile")
    p.add_argument("--sglang-candidates", choices=("kstar", "neighbors"), default="kstar",
                   help="SGLang slots: kstar = one candidate (fixed K*), neighbors = K*-1, K*, K*+1 where both"
                   " neighbours are within 2%% of the best goodput (room for SGLang's own adaptation)")
    p.add_argument("--output", help="write to this file instead of stdout")
    p.add_argument("--list", choices=CATALOG_KINDS, help="list the catalog's models, hardware, engines, drafts or"
                   " dtypes with what each rests on, and exit (also: python -m simulator.catalog)")
    p.add_argument("--breakdown", metavar="B,K", help="print the per-operator breakdown at batch size B and draft length K")


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="python -m simulator.predict",
                      description="Predict the goodput-optimal speculative draft length K per batch size.")
    _scenario_args(p)
    _workload_args(p)
    _deployment_args(p)
    _output_args(p)
    return p
