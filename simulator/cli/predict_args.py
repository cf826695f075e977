"""The flags of `python -m simulator.predict` (:func:`build_parser`), grouped as the help lists them."""
from __future__ import annotations

import argparse

from simulator.plan import exports
from simulator.cli.common import DTYPE_SETTINGS, OneLineParser, add_save_scenario_arg, add_setting_args, path_given
from simulator.cli.catalog import KINDS as CATALOG_KINDS

EXPORT_FORMATS = exports.FORMATS  # vllm, vllm-ctx, trtllm, sglang, sglang-sps: engine files
FORMATS = ("table", "csv", "json", "markdown", "kmap") + EXPORT_FORMATS


# The scenario settings each group of flags sets (simulator.specs.settings: flag, type, help), in help order
SCENARIO_SETTINGS = ("model", "hardware", "tp", "ep", "draft", "draft_checkpoint", "acceptance", "temperature", "top_p",
                     "acceptance_band")
WORKLOAD_SETTINGS = ("context_len", "batch_sizes", "k_max", "schedule_tolerance", "decision_quantile", "fixed_k", *DTYPE_SETTINGS)
DEPLOYMENT_SETTINGS = ("calibration", "deployment", "learned", "layout", "dp", "routing_reuse", "engine", "engine_version",
                       "max_capture_size", "max_num_seqs", "max_num_batched_tokens", "allreduce_busbw")
OUTPUT_SETTINGS = ("context_lens",)
SETTING_FLAGS = SCENARIO_SETTINGS + WORKLOAD_SETTINGS + DEPLOYMENT_SETTINGS + OUTPUT_SETTINGS


def _scenario_args(p) -> None:
    """The scenario and what it runs: model, hardware, draft, acceptance, sampling."""
    p.add_argument("--scenario", help="scenario TOML file (or the name of a bundled one); flags override it")
    add_setting_args(p, *SCENARIO_SETTINGS)


def _workload_args(p) -> None:
    """The grid (context, batch sizes, K) and the precisions."""
    add_setting_args(p, *WORKLOAD_SETTINGS)


def _deployment_args(p) -> None:
    """Calibration, parallel layout, engine and server."""
    add_setting_args(p, *DEPLOYMENT_SETTINGS)


def _output_args(p) -> None:
    """What to print and where."""
    add_setting_args(p, *OUTPUT_SETTINGS)
    p.add_argument("--format", choices=FORMATS, default="table",
                   help="table/csv/json/markdown: the K* table; kmap: K* by batch size x context length; vllm,"
                   " vllm-ctx (proposal PR #48944), trtllm, sglang (adaptive config), sglang-sps (DSpark step-cost"
                   " table): the engine file")
    p.add_argument("--export-version", help="engine version the export targets (default: the newest release"
                   " checked: vllm 0.33.0, trtllm 1.2.1, sglang 0.5.23; vllm-ctx: pr48944); with --format json, of the engine files"
                   " it embeds. Not --engine-version,"
                   " which picks the engine profile the step times are modelled with")
    p.add_argument("--markdown", action="store_true", help="print an export as a Markdown table of what the engine"
                   " will do per range, instead of the engine file")
    p.add_argument("--cuda-graph-bs", help="SGLang: captured CUDA-graph batch sizes the engine pads to before"
                   " routing (e.g. 1,2,4,8,16,24,32; 'none': no padding); default from an SGLang engine profile")
    p.add_argument("--sglang-candidates", choices=("kstar", "neighbors"), default="kstar",
                   help="SGLang slots: kstar = one candidate (fixed K*), neighbors = K*-1, K*, K*+1 where both"
                   " neighbours are within 2%% of the best goodput (room for SGLang's own adaptation)")
    p.add_argument("--planned-batch", metavar="B or LO-HI",
                   help="the batch size (or range) you will serve at: sglang with a tree or block draft (one fixed"
                   " K: K* at B, or the K keeping most of the best goodput over LO-HI, each doubling weighted"
                   " equally; default: every batch size that fits) and trtllm's acceptance gate (one B)")
    p.add_argument("--output", type=path_given, help="write to this file instead of stdout")
    p.add_argument("--list", choices=CATALOG_KINDS, help="list the catalog's models, hardware, engines, drafts or"
                   " dtypes with what each rests on, and exit (also: python -m simulator.catalog)")
    p.add_argument("--breakdown", metavar="B,K", help="print the per-operator breakdown at batch size B and draft length K")
    add_save_scenario_arg(p)


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="python -m simulator.predict",
                      description="Predict the goodput-optimal speculative draft length K per batch size.")
    # one argparse group per function above: --help lists the flags under these headings
    _scenario_args(p.add_argument_group("scenario", "what runs: the scenario file, and flags that override its values"))
    _workload_args(p.add_argument_group("grid", "batch sizes, context, K and precisions"))
    _deployment_args(p.add_argument_group("deployment", "calibration, parallel layout, engine and server"))
    _output_args(p.add_argument_group("output", "what to print and where"))
    return p
