"""The K* table `python -m simulator.predict` prints: its rows (every power of two and every change of K*), its
header (what the step times rest on and how far to trust them), the facts under it and the engine file's line."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd

from simulator.plan import exports
from simulator.plan.advice import advice_lines
from simulator.plan.api import Prediction
from simulator.plan.fit import shortfall_text
from simulator.plan.notes import falling_token_time
from simulator.plan.speedup_trust import decision_risk_text, gain_at_risk_text
from simulator.cli.common import dtypes_text


def condensed(table: pd.DataFrame) -> pd.DataFrame:
    """Powers of two, the ends, and every batch size where K* changes."""
    b = table.batch_size.to_numpy()
    k = table.k_opt.fillna(-1).to_numpy()
    keep = (b & (b - 1)) == 0
    keep[[0, -1]] = True
    keep[1:] |= k[1:] != k[:-1]
    if "k_schedule" in table:  # and where the engine schedule's K changes or differs from K*
        ks = table.k_schedule.fillna(-1).to_numpy()
        differs = ks != k
        keep[1:] |= (ks[1:] != ks[:-1]) | (differs[1:] != differs[:-1])
        keep[0] |= differs[0]
    return table[keep]


def render_table(pred: Prediction) -> str:
    """Schedule in words first, then the condensed K* table (all rows when the batch sizes were given
    sparsely), then one-line facts (the caveats go to stderr: :func:`warn_notes`). "step ms" is one verification step; "ms/token" is what a
    sequence waits per committed token (step time / acceptance length)."""
    b = pred.table.batch_size.to_numpy()
    sparse = b.size > 1 and b[-1] - b[0] + 1 != b.size
    t = pred.table if sparse else condensed(pred.table)
    lines = _table_head(pred) + [_table_body(t, pred.scenario.fixed_k)] + _table_facts(pred, len(t))
    return "\n".join(lines) + "\n"


def _table_head(pred: Prediction) -> list[str]:
    """The schedule and what the table rests on, as comment lines."""
    sc = pred.scenario
    return [f"K* schedule: {pred.schedule_text()}",
            f"# schedule: {pred.schedule_note()}",
            f"# {sc.name}: {sc.model.name} on {sc.deployment.tp} x {sc.hardware.name}{_layout(sc)}, draft"
            f" {sc.draft.label}, context {sc.context_len}; {dtypes_text(sc)}",
            f"# step times: {pred.provenance['step_time_source']}",
            f"# how far to trust them: {pred.provenance['uncertainty']}",
            f"# serving {pred.provenance['serving_check']}",
            f"# how far to trust the speedups: {pred.provenance['speedup_uncertainty']}",
            f"# acceptance: {pred.provenance['acceptance']}; {sc.acceptance.rule}",
            f"# fixed K={sc.fixed_k} reaches acceptance length {pred.table.fixed_acceptance_length.iloc[0]:.2f};"
            f" 'K={sc.fixed_k} needs AL' is the length at which it ties plain decoding (step time K / step time plain)",
            ""]


BOUND_SHOWN = {"memory": "HBM bw", "none fits": "out of memory", "overhead": "host"}


def _table_body(t: pd.DataFrame, fixed_k: int) -> str:
    """The K* table's rows, formatted, with short headers."""
    cols = ["batch_size", "k_opt", "goodput_per_seq", "throughput", "itl_ms", "token_latency_ms",
            "plain_token_latency_ms", "speedup_vs_plain", "speedup_vs_fixed", "fixed_vs_plain",
            "break_even_acceptance_length", "bound", "memory_gb_per_gpu"]
    if "experts_touched" in t:
        cols += ["experts_touched", "experts_touched_plain", "expert_load_share"]
    differs = _schedule_differs(t)
    if differs.any():  # the engine schedule's K where it is not K* (blank elsewhere)
        cols.insert(cols.index("k_opt") + 1, "k_schedule")
    view = t[cols].copy()
    if "k_schedule" in view:
        view["k_schedule"] = [str(v) if d else "" for v, d in zip(view.k_schedule.fillna(-1), differs)]
    view["k_opt"] = view.k_opt.astype(object).where(view.k_opt.notna(), "-")
    view["bound"] = view.bound.map(BOUND_SHOWN).fillna(view.bound)  # "memory": bandwidth, never "out of memory"
    headers = {"batch_size": "B", "k_opt": "K*", "goodput_per_seq": "tok/s/seq", "throughput": "tok/s",
               "itl_ms": "step ms", "token_latency_ms": "ms/token", "plain_token_latency_ms": "plain ms/token",
               "speedup_vs_plain": "vs plain", "speedup_vs_fixed": f"vs K={fixed_k}",
               "fixed_vs_plain": f"K={fixed_k}/plain", "break_even_acceptance_length": f"K={fixed_k} needs AL",
               "k_schedule": "sched K",
               "bound": "bound", "memory_gb_per_gpu": "GB/GPU",
               "experts_touched": "experts@K*", "experts_touched_plain": "experts@K=0",
               "expert_load_share": "expert share"}
    formats = {"goodput_per_seq": "{:.1f}", "throughput": "{:,.0f}", "itl_ms": "{:.2f}", "token_latency_ms": "{:.2f}",
               "plain_token_latency_ms": "{:.2f}", "speedup_vs_plain": "{:.2f}x",
               "speedup_vs_fixed": "{:.2f}x", "fixed_vs_plain": "{:.2f}x", "memory_gb_per_gpu": "{:.1f}",
               "break_even_acceptance_length": "{:.2f}",
               "experts_touched": "{:.1f}", "experts_touched_plain": "{:.1f}", "expert_load_share": "{:.0%}"}
    for col, fmt in formats.items():
        if col in view:
            view[col] = [("-" if pd.isna(v) else fmt.format(v)) for v in view[col]]
    view = view.rename(columns=headers)
    return view.to_string(index=False)


def _schedule_differs(t: pd.DataFrame) -> np.ndarray:
    """Per row: whether the engine schedule's K is not K* there."""
    if "k_schedule" not in t:
        return np.zeros(len(t), dtype=bool)
    return (t.k_schedule.fillna(-1).to_numpy() != t.k_opt.fillna(-1).to_numpy())


def schedule_differs_line(pred: Prediction) -> str | None:
    """Where the compressed schedule (the engine files) runs another K than K* at that batch size alone."""
    t = pred.table
    differs = _schedule_differs(t)
    if not differs.any():
        return None
    runs, start = [], None
    b, ks, k = t.batch_size.to_numpy(), t.k_schedule.fillna(-1).to_numpy(int), t.k_opt.fillna(-1).to_numpy(int)
    for i in range(len(t)):
        if differs[i] and start is None:
            start = i
        end_run = start is not None and (i + 1 == len(t) or not differs[i + 1] or (ks[i + 1], k[i + 1]) != (ks[i], k[i]))
        if end_run:
            span = f"{b[start]}" if start == i else f"{b[start]}-{b[i]}"
            runs.append(f"B {span}: K={ks[i]} (K*={k[i]})")
            start = None
    more = f", ... {len(runs) - 6} more" if len(runs) > 6 else ""
    return (f"the engine schedule runs another K than K* ('sched K') at {', '.join(runs[:6])}{more}: it gives up at most"
            f" {pred.schedule_summary()['tolerance']:.1%} of the goodput there for fewer ranges over the batch range asked"
            " (K* at each batch size does not depend on that range)")


def _table_facts(pred: Prediction, shown: int) -> list[str]:
    """One-line facts under the table (``shown``: the rows printed)."""
    sc = pred.scenario
    losing = pred.table[pred.table.fixed_vs_plain < 1]
    lines = [""]
    if len(losing):
        lines.append(f"fixed K={sc.fixed_k} is slower than plain decoding from batch size {losing.batch_size.min()}"
                     f" ({len(losing)} of {len(pred.table)} batch sizes)")
    none_fit = pred.table[~pred.table.fits_memory]
    if len(none_fit):
        first = int(none_fit.batch_size.min())
        lines.append(f"batch sizes >= {first} do not fit in memory: {shortfall_text(sc, first)}")
    lines += engine_file_lines(pred)
    differs = schedule_differs_line(pred)
    if differs:
        lines.append(differs)
    if shown < len(pred.table):
        lines.append(f"({shown} of {len(pred.table)} batch sizes shown: powers of two and every change of K*;"
                     " --format csv prints all)")
    lines += advice_lines(pred.engine_advice())
    risk = gain_at_risk_text(pred.table)
    if risk:
        lines.append(f"note: {risk}")
    unsure = decision_risk_text(pred.table, pred.scenario.decision_quantile)
    if unsure:
        lines.append(f"decision: {unsure}")
    why = pred.k_rise_attribution()
    if why:
        lines.append(f"why K* moves (MoE): {why}")
    lines += k_change_lines(pred.k_changes())
    falls = falling_token_time(pred)
    if falls:
        lines.append(f"note: {falls}")
    return lines


ENGINE_FILE_KEYS = {"vllm": "num_speculative_tokens_per_batch_size", "trtllm": "draft_len_schedule"}


def engine_file_lines(pred: Prediction) -> list[str]:
    """One line per format of the scenario's engine (only that engine's): the schedule its file holds, as
    --format FMT writes it, or why the engine cannot take it."""
    lines = []
    for fmt, exp in pred.engine_exports().items():
        if isinstance(exp, str):
            lines.append(f"{exports.ENGINE_OF[fmt]}: {exp}")
            continue
        key = ENGINE_FILE_KEYS.get(fmt)
        body = exp.payload.get(key) if key else exp.payload
        what = f"{key or 'adaptive config'} (--format {fmt})"
        if exp.chosen_for:  # SGLang with a tree or block draft: launch flags of one K, not a per-batch config
            what = (f"launch flags, one fixed K at every batch size (--format {fmt}; --planned-batch picks it for"
                    " your load)")
        lines.append(f"{exp.engine} {exp.version} {what}: " + json.dumps(body))
    return lines


K_CHANGES_SHOWN = 6  # lines of "where K* changes" under the table; --format json lists every one


def k_change_lines(changes: list[dict]) -> list[str]:
    """'where K* changes:' and one indented line per change (the first K_CHANGES_SHOWN)."""
    if not changes:
        return []
    lines = ["where the schedule's K changes (what the old and new K give over plain decoding there):"]
    lines += [f"  {c['text']}" for c in changes[:K_CHANGES_SHOWN]]
    if len(changes) > K_CHANGES_SHOWN:
        lines.append(f"  ... {len(changes) - K_CHANGES_SHOWN} more (--format json lists them under k_changes)")
    return lines


def _layout(sc) -> str:
    """MoE: the parallel layout and expert parallelism (', layout tp-ep, ep=8'); '' for dense models."""
    dep = sc.deployment
    if not sc.model.is_moe:
        return ""
    return (f", layout {dep.layout}, ep={dep.ep}" + (f", dp={dep.dp}" if dep.dp_attention else "")
            + f", routing {dep.routing.describe()}")
