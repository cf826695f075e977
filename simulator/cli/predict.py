"""`python -m simulator.predict`: the optimal-K table for a scenario or flags.

Examples::

    python -m simulator.predict                                   # the default scenario
    python -m simulator.predict --scenario scenarios/qwen3-235b-h200.toml
    python -m simulator.predict --model llama-3.1-8b --hardware h100-sxm --draft eagle3 \\
        --acceptance 0.8,0.7,0.6 --batch-sizes 1-256 --format vllm
    python -m simulator.predict --scenario command-a-h100 --breakdown 64,3
"""
from __future__ import annotations

import json
import sys
import warnings

import numpy as np
import pandas as pd

from simulator.plan import exports
from simulator.plan.api import Prediction, predict, resolve_scenario
from simulator.plan.fit import shortfall_text
from simulator.cli.common import (blame_flag, check_save_scenario, command, save_scenario, setting_overrides,
                                 write_atomically)
from simulator.cli.predict_args import EXPORT_FORMATS, FORMATS, SETTING_FLAGS, build_parser  # noqa: F401 (FORMATS: API)
from simulator.files import check_output_file
from simulator.errors import PlannerError, PlannerWarning
from simulator.cli.catalog import catalog_text
from simulator.cli.predict_table import condensed, render_table
from simulator.specs.scenario import DEFAULT_SCENARIO, MAX_K
from simulator.specs.values import BATCH_SIZE_MAX


def _int_pair(text: str) -> tuple[int, int]:
    try:
        b, k = (int(x) for x in text.split(","))
    except ValueError:
        raise PlannerError(f"--breakdown '{text}': expected B,K such as 64,3") from None
    if b < 1 or not 0 <= k <= MAX_K:
        raise PlannerError(f"--breakdown {text}: batch size must be >= 1 and K from 0 to {MAX_K}")
    return b, k


def warn_notes(pred: Prediction) -> None:
    """The K* table's caveats (:meth:`Prediction.notes`) as PlannerWarning: one 'warning:' line each on
    stderr, once, never in the output (--quiet: none)."""
    for note in pred.notes():
        warnings.warn(note, PlannerWarning, stacklevel=2)


def render(pred: Prediction, fmt: str, versions: dict | None = None) -> str:
    if fmt == "table":
        return render_table(pred)
    if fmt == "csv":
        return pred.table.to_csv(index=False)
    if fmt == "markdown":
        head = (f"**{pred.scenario.name}**: step times from {pred.provenance['step_time_source']}; how far to trust"
                f" them: {pred.provenance['uncertainty']}\n\n")
        return head + markdown_table(condensed(pred.table))
    if fmt == "json":
        return json.dumps(pred.to_dict(versions), indent=2, default=_json_default) + "\n"
    if fmt == "kmap":
        return render_kmap(pred)
    if fmt in EXPORT_FORMATS:
        return render_export(pred, fmt)
    raise PlannerError(f"unknown format '{fmt}'")


def render_kmap(pred: Prediction, context_lens=None) -> str:
    """K* by batch size (rows: powers of two, the ends and every change) x context length (columns)."""
    t = pred.kstar_frame(context_lens)
    k = t.fillna(-1).to_numpy()
    b = t.index.to_numpy()
    keep = (b & (b - 1)) == 0
    keep[[0, -1]] = True
    keep[1:] |= (k[1:] != k[:-1]).any(axis=1)
    view = t[keep].astype(object).where(t[keep].notna(), "-")
    sc = pred.scenario
    head = (f"# {sc.name}: K* by batch size (rows) x context length (columns); '-' = does not fit in memory\n"
            f"# step times: {pred.provenance['step_time_source']}\n"
            f"# how far to trust them: {pred.provenance['uncertainty']}\n"
            f"# acceptance: {pred.provenance['acceptance']}"
            + (f"; {sc.acceptance_context.label}" if sc.acceptance_context is not None else "") + "\n")
    return head + view.to_string() + "\n"


def render_export(pred: Prediction, fmt: str, version: str | None = None, markdown: bool = False,
                  cuda_graph_bs=None, sglang_candidates: str = "kstar", planned_batch=None) -> str:
    """An engine file (or its Markdown table); its warnings go to stderr as 'warning:' lines, and for a file of
    one fixed K which batch sizes it was chosen for."""
    draft = pred.scenario.draft
    if planned_batch is not None and fmt == "sglang" and not (draft.is_tree or draft.is_block):
        raise PlannerError(f"--planned-batch: SGLang's adaptive config switches K per batch size itself (draft"
                           f" {draft.label}); the flag sets the one K of a tree or block draft's launch flags")
    try:
        exp = pred.export(fmt, version, cuda_graph_bs=cuda_graph_bs, sglang_candidates=sglang_candidates,
                          planned_batch_size=planned_batch)
    except PlannerError as err:  # the flag's own refusal names it
        if planned_batch is not None and str(err).startswith("planned batch sizes"):
            raise PlannerError(f"--planned-batch: {err}") from None
        raise
    for w in exp.warnings:
        warnings.warn(w, PlannerWarning, stacklevel=2)
    if exp.how_to_use and not markdown:
        print(f"use: {exp.how_to_use}", file=sys.stderr)
    if exp.chosen_for and not markdown:  # the Markdown carries it as a note
        print(f"note: {exp.chosen_for}" + ("" if planned_batch is not None else
                                          "; --planned-batch B (or LO-HI) chooses it for the load you will serve"),
              file=sys.stderr)
    return exp.markdown() if markdown else exp.json()


def planned_batch(text: str | None, fmt: str):
    """--planned-batch B (an int) or LO-HI (a (lo, hi) pair), checked against the format that reads it."""
    if text is None:
        return None
    if fmt not in ("sglang", "trtllm"):
        raise PlannerError(f"--planned-batch applies to --format sglang (the one fixed K of a tree or block draft)"
                           f" and --format trtllm (its acceptance gate), not --format {fmt}")
    lo, sep, hi = text.strip().partition("-")
    try:
        pair = (int(lo), int(hi) if sep else int(lo))
    except ValueError:
        pair = (0, 0)
    if min(pair) < 1 or pair[0] > pair[1] or pair[1] > BATCH_SIZE_MAX:  # a 22-digit one overflowed numpy
        raise PlannerError(f"--planned-batch '{text}': expected a batch size (e.g. 64) or a range LO-HI (e.g. 8-64)"
                           f" of batch sizes in 1-{BATCH_SIZE_MAX}, LO <= HI")
    if sep and fmt == "trtllm":
        raise PlannerError(f"--planned-batch {text}: TensorRT-LLM's acceptance gate sits at one batch size; give one"
                           f" (e.g. --planned-batch {pair[1]})")
    return pair if sep else pair[0]


def _cuda_graph_bs(text: str | None):
    if text is None:
        return None
    if text.strip().lower() == "none":
        return []
    try:
        sizes = sorted({int(x) for x in text.split(",") if x.strip()})
    except ValueError:
        raise PlannerError(f"--cuda-graph-bs '{text}': expected batch sizes such as 1,2,4,8,16 or 'none'") from None
    if not sizes or sizes[0] < 1:
        raise PlannerError(f"--cuda-graph-bs '{text}': batch sizes must be >= 1")
    return sizes


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


def _run(args) -> int:
    if args.list:
        sys.stdout.write(catalog_text(args.list))
        return 0
    overrides = setting_overrides(args, *SETTING_FLAGS)
    export_only = [flag for flag, given in (("--export-version", args.export_version and args.format != "json"),
                                            ("--markdown", args.markdown), ("--cuda-graph-bs", args.cuda_graph_bs)) if given]
    if export_only and args.format not in EXPORT_FORMATS:
        raise PlannerError(f"{export_only[0]} applies to an engine export (--format {', '.join(EXPORT_FORMATS)}),"
                           f" not --format {args.format}")
    planned_batch(args.planned_batch, args.format)  # refuse a malformed or misplaced one before any work
    if args.format in EXPORT_FORMATS:
        exports.check_version(args.format, args.export_version)  # refuse a wrong version before any work
    if args.output:
        check_output_file(args.output)  # and an output that cannot be written
    check_save_scenario(args)
    scenario = args.scenario
    if scenario is None and not (args.model and args.hardware):
        scenario = str(DEFAULT_SCENARIO)
    try:
        pred = predict(scenario, **overrides)
    except PlannerError as err:
        raise blame_flag(err, lambda **o: resolve_scenario(scenario, **o), overrides) from None
    if not args.breakdown and not pred.table.fits_memory.any():
        b = pred.table.batch_size.to_numpy()
        raise PlannerError(f"nothing fits memory at batch sizes {b.min()}-{b.max()}: {shortfall_text(pred.scenario, int(b.min()))}")
    with warnings.catch_warnings(record=True) as caught:  # caveats print after the output is written
        warnings.simplefilter("always", PlannerWarning)
        text = _render_answer(pred, args)
    if args.output:
        write_atomically(args.output, text)
    else:
        sys.stdout.write(text)
    if args.save_scenario:
        save_scenario(args, pred.scenario.raw, pred.scenario.name)
    for w in caught:
        warnings.warn(w.message, w.category, stacklevel=1)
    return 0


def _render_answer(pred: Prediction, args) -> str:
    """The text the command prints: a breakdown, an engine file or a K* format (its caveats as warnings)."""
    if args.breakdown:
        b, k = _int_pair(args.breakdown)
        df = pred.breakdown(b, k)
        if not df.attrs["fits_memory"]:  # priced all the same: the operators' times do not depend on the fit
            warnings.warn(f"--breakdown {b},{k} does not fit in memory: {shortfall_text(pred.scenario, b, k)}",
                          PlannerWarning, stacklevel=2)
        step = df.attrs["step_ms"]  # what the K* table prices: the operators with the engine terms, plus host time
        return (f"# per-operator breakdown at B={b}, K={k} ({pred.provenance['step_time_source']})\n"
                + df.to_string(index=False, float_format=lambda v: f"{v:.4g}") + "\n"
                + f"total {df.time_ms.sum():.3f} ms over the operators (the physics); the step the K* table prices:"
                f" verify {step['verify']:.3f} + draft {step['draft']:.3f} ms (the operators with the engine terms'"
                f" kernel scales) + host {step['host']:.3f} ms = {step['step']:.3f} ms\n")
    if args.format in EXPORT_FORMATS:
        return render_export(pred, args.format, args.export_version, args.markdown, _cuda_graph_bs(args.cuda_graph_bs),
                             args.sglang_candidates, planned_batch(args.planned_batch, args.format))
    if args.format == "table":  # the table's reader gets its caveats (json carries them as "notes")
        warn_notes(pred)
    versions = None
    if args.format == "json" and args.export_version:  # the JSON's engine files for that release
        versions = {fmt: args.export_version for fmt in pred.engine_formats()}
        for fmt in versions:
            exports.check_version(fmt, args.export_version)
    return render(pred, args.format, versions)


main = command(build_parser, _run)

if __name__ == "__main__":
    sys.exit(main())
