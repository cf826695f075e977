"""The transfer report: error statistics of the scored corpus rows (summary), transfer.md, and the
per-GPU uncertainty bands (simulator/data/transfer_error.json)."""
from __future__ import annotations

import datetime as dt
import json

import pandas as pd

from calibration.transfer_cases import MOE_MODELS
from calibration.transfer_components import markdown_parts, parts_by_method
from simulator.specs.step_terms import TERM_NAMES


def _stats(err: pd.Series) -> dict:
    e = err.dropna().abs()
    return {"n": int(len(e)), "mape": float(e.mean()) if len(e) else float("nan"),
            "worst": float(e.max()) if len(e) else float("nan")}


STEP_KINDS = ["plain", "itl", "run"]
# batch-size ranges the speculative-speedup error is quoted over (where the corpus has rows in each)
SPEEDUP_BATCH_BINS = ((1, 8), (9, 32), (33, None))


def speedup_by_batch(spec: pd.DataFrame) -> list[dict]:
    """The zero-shot speedup error per batch-size range: rows, MAPE, the median signed error (predicted /
    measured - 1: > 0 where the planner was optimistic), the worst, and the share of decisions right."""
    out = []
    for lo, hi in SPEEDUP_BATCH_BINS:
        g = spec[(spec.batch_size >= lo) & ((spec.batch_size <= hi) if hi is not None else True)]
        e = g.error.dropna()
        out.append({"batch_min": lo, "batch_max": hi, "n": int(len(e)),
                    "mape": float(e.abs().mean()) if len(e) else None,
                    "median_error": float(e.median()) if len(e) else None,
                    "worst": float(e.abs().max()) if len(e) else None,
                    "decision_right": float(g.decision_right.mean()) if len(g) else None})
    return out


def step_time_by_tp(step: pd.DataFrame) -> dict:
    """The decode step-time error per tensor-parallel degree (rows, MAPE, median signed error, worst): where the
    planner is fast or slow as a step spans more GPUs."""
    return {str(int(tp)): {"n": int(len(g)), "mape": float(g.error.abs().mean()),
                           "median_error": float(g.error.median()), "worst": float(g.error.abs().max())}
            for tp, g in step.dropna(subset=["error"]).groupby("tp")}


def _coverage(rows: pd.DataFrame) -> dict:
    return {"sources": sorted(rows.source_id.unique()), "gpus": sorted(rows.hardware.unique()),
            "tp": sorted(int(t) for t in rows.tp.unique()),
            "batch_sizes": [int(rows.batch_size.min()), int(rows.batch_size.max())] if len(rows) else []}


def summarize(rows: pd.DataFrame) -> dict:
    step = rows[rows.kind.isin(STEP_KINDS)]
    plain = step[step.kind == "plain"]
    spec = rows[(rows.kind == "speedup") & ~rows.anchor]
    out = {
        "step_time": {"planner": _stats(step.error), "datasheet": _stats(step.error_datasheet), **_coverage(step),
                      "by_tp": step_time_by_tp(step)},
        "plain_only": {"planner": _stats(plain.error), "datasheet": _stats(plain.error_datasheet), **_coverage(plain)},
        "itl_only": {"planner": _stats(step[step.kind == "itl"].error),
                     "datasheet": _stats(step[step.kind == "itl"].error_datasheet)},
        "run_only": {"planner": _stats(step[step.kind == "run"].error),
                     "datasheet": _stats(step[step.kind == "run"].error_datasheet)},
        "speedup": {"planner": _stats(spec.error), "datasheet": _stats(spec.error_datasheet),
                    # a curve: one source's speedups of one model, draft and device over batch size or K
                    "curves": int(spec.groupby(["source_id", "hardware", "model", "draft", "context_len"]).ngroups),
                    "moe_curves": int(spec[spec.model.isin(MOE_MODELS)].groupby(
                        ["source_id", "hardware", "model", "draft", "context_len"]).ngroups)
                    if len(spec) else 0,
                    "by_batch": speedup_by_batch(spec)},
        "decision": {"planner": float(spec.decision_right.mean()) if len(spec) else float("nan"),
                     "datasheet": float(spec.decision_right_datasheet.mean()) if len(spec) else float("nan"),
                     "n": int(len(spec))},
        "by_gpu": {hw: {"step_time": _stats(g[g.kind.isin(STEP_KINDS)].error),
                        "speedup": _stats(g[(g.kind == "speedup") & ~g.anchor].error),
                        "datasheet_step_time": _stats(g[g.kind.isin(STEP_KINDS)].error_datasheet),
                        "basis": g.basis.iloc[0]}
                   for hw, g in rows.groupby("hardware")},
        "by_source": {s: {"planner": _stats(g[~g.anchor].error), "datasheet": _stats(g[~g.anchor].error_datasheet)}
                      for s, g in rows.groupby("source_id")},
    }
    if "peer_error" in rows and rows.peer_error.notna().any():
        both = rows[rows.peer_error.notna()]
        step, spd = both[both.kind != "speedup"], both[(both.kind == "speedup") & ~both.anchor]
        out["peer"] = {"n": int(len(step)), "peer": _stats(step.peer_error), "planner": _stats(step.error)}
        if len(spd):
            out["peer_speedup"] = {"n": int(len(spd)), "peer": _stats(spd.peer_error), "planner": _stats(spd.error),
                                   "peer_decision": float(((spd.peer_predicted > 1) == (spd.measured > 1)).mean()),
                                   "planner_decision": float(spd.decision_right.mean())}
    return out


def _pct(x: float) -> str:
    return "-" if x != x else f"{x:.1%}"


def markdown(summary: dict, rows: pd.DataFrame, skipped: pd.DataFrame, corpus_path: str) -> str:
    from calibration.transfer_twoshot import markdown_note, markdown_rows  # it imports this module
    s = summary
    two = s.get("two_shot") or {}
    st, sp, dc = s["step_time"], s["speedup"], s["decision"]
    phys = lambda block, key="mape": _pct((s[block].get("physics_only") or {}).get(key, float("nan")))  # noqa: E731
    dphys = _pct((dc.get("physics_only") or {}).get("share", float("nan")))
    layer = s.get("learned_layer") or {}
    lines = [
        "# Transfer validation: predictions against published GPU measurements", "",
        f"Corpus: `{corpus_path}` ({len(rows) + len(skipped)} rows; {len(rows)} scored, {len(skipped)} not"
        " expressible). `python -m calibration.transfer` regenerates it.", "",
        "The planner is the physics plus the learned layer (`calibration/learn_step.py`: a population of"
        f" {len(TERM_NAMES)} engine terms learned from {layer.get('rows', '?')} plain-step and speedup rows of {len(layer.get('sources', []))}"
        f" sources; form \"{layer.get('form', '?')}\"). Every planner figure of a row comes from a layer learned"
        " **without that row's source** (leave-one-source-out; its form chosen on the other sources alone); the"
        " physics alone (`--physics-only`) and the datasheet are beside it.", "",
        "| what | rows | datasheet (before) MAPE | physics only MAPE | planner MAPE (held out) | planner worst |",
        "|---|---|---|---|---|---|",
        f"| decode step time (plain + serving ITL + run time / output token) | {st['planner']['n']} |"
        f" {_pct(st['datasheet']['mape'])} | {phys('step_time')} | {_pct(st['planner']['mape'])} | {_pct(st['planner']['worst'])} |",
        f"| of which plain step time only | {s['plain_only']['planner']['n']} | {_pct(s['plain_only']['datasheet']['mape'])} |"
        f" {phys('plain_only')} | {_pct(s['plain_only']['planner']['mape'])} | {_pct(s['plain_only']['planner']['worst'])} |",
        f"| of which serving inter-token latency at a concurrency | {s['itl_only']['planner']['n']} |"
        f" {_pct(s['itl_only']['datasheet']['mape'])} | - | {_pct(s['itl_only']['planner']['mape'])} |"
        f" {_pct(s['itl_only']['planner']['worst'])} |",
        f"| of which run time per output token of static batches (prefill included) | {s['run_only']['planner']['n']} |"
        f" {_pct(s['run_only']['datasheet']['mape'])} | - | {_pct(s['run_only']['planner']['mape'])} |"
        f" {_pct(s['run_only']['planner']['worst'])} |",
        f"| speculative speedup ({sp['curves']} curves, {sp['moe_curves']} MoE; anchor rows excluded) | {sp['planner']['n']} |"
        f" {_pct(sp['datasheet']['mape'])} | {phys('speedup')} | {_pct(sp['planner']['mape'])} | {_pct(sp['planner']['worst'])} |",
        f"| speculate-or-not decision right | {dc['n']} | {_pct(dc['datasheet'])} | {dphys} | {_pct(dc['planner'])} | |",
        *markdown_rows(two), "",
        "Targets (issue 47), leave-one-source-out: speculative speedup MAPE <= 6% (worst <= 20%), decisions right"
        " >= 95%, plain step MAPE <= 9%; two-shot MAPE <= 5%, decisions >= 98%.", "",
        f"Step-time rows come from {len(st['sources'])} sources ({', '.join(st['sources'])}) on {len(st['gpus'])} GPU"
        f" types ({', '.join(st['gpus'])}), TP {st['tp']}, batch sizes {st['batch_sizes']}.", "",
        f"Plain step-time rows: {len(s['plain_only']['sources'])} sources ({', '.join(s['plain_only']['sources'])}) on"
        f" {len(s['plain_only']['gpus'])} GPU types ({', '.join(s['plain_only']['gpus'])}), TP {s['plain_only']['tp']},"
        f" batch sizes {s['plain_only']['batch_sizes']}.", "",
        *_by_batch_table(sp["by_batch"], s.get("physics_only_by_batch")),
        *_held_out_tables(s),
        *markdown_note(two)]
    if "peer" in s:
        p = s["peer"]
        lines += [f"Peer (aiconfigurator-core 0.12.0, its own TPOT estimate) on the {p['n']} plain and ITL rows it can"
                  f" express: MAPE {_pct(p['peer']['mape'])} (worst {_pct(p['peer']['worst'])}); the planner on the"
                  f" same rows: {_pct(p['planner']['mape'])} (worst {_pct(p['planner']['worst'])}).", ""]
        if "peer_speedup" in s:
            q = s["peer_speedup"]
            lines += [f"Peer on the {q['n']} speculative speedups it can express (multi-token prediction with a"
                      " published acceptance length: that length x its plain step / its step verifying K + 1 tokens;"
                      " it has no step model for draft heads or draft models): MAPE"
                      f" {_pct(q['peer']['mape'])} (worst {_pct(q['peer']['worst'])}), decisions right"
                      f" {_pct(q['peer_decision'])}; the planner on the same rows: {_pct(q['planner']['mape'])}"
                      f" (worst {_pct(q['planner']['worst'])}), decisions right {_pct(q['planner_decision'])}.", ""]
    else:
        lines += ["Peer estimate: not run (`--peer` with the aiconfigurator-core package importable).", ""]
    return "\n".join(lines + markdown_parts(s.get("parts", [])) + _breakdown_tables(s, rows, skipped)) + "\n"


def _by_batch_table(bins: list[dict], physics: list[dict] | None = None) -> list[str]:
    """The zero-shot speedup error per batch-size range (median error > 0: the planner was optimistic), the
    physics alone's beside it."""
    lines = ["Speculative speedup by batch size (zero-shot, held out by source, anchor rows excluded; error = predicted"
             " / measured - 1; `predict` quotes the range of each row):", "",
             "| batch sizes | rows | MAPE | median error | worst | decision right | physics only MAPE | physics only median |",
             "|---|---|---|---|---|---|---|---|"]
    for i, b in enumerate(bins):
        span = f"{b['batch_min']}-{b['batch_max']}" if b["batch_max"] is not None else f">= {b['batch_min']}"
        med = "-" if b["median_error"] is None else f"{b['median_error']:+.1%}"
        p = (physics or [{}] * len(bins))[i]
        pmed = "-" if p.get("median_error") is None else f"{p['median_error']:+.1%}"
        lines.append(f"| {span} | {b['n']} | {_pct(_num(b['mape']))} | {med} | {_pct(_num(b['worst']))} |"
                     f" {_pct(_num(b['decision_right']))} | {_pct(_num(p.get('mape')))} | {pmed} |")
    return lines + [""]


def _held_out_tables(s: dict) -> list[str]:
    """The learned layer held out by GPU and by engine (each group's rows from a layer learned without that
    group), the physics alone beside it."""
    out = []
    for key, phys_key, title in (("leave_one_gpu_out", "physics_only_by_gpu", "GPU"),
                                 ("leave_one_engine_out", "physics_only_by_engine", "engine")):
        groups, phys = s.get(key) or {}, s.get(phys_key) or {}
        if not groups:
            continue
        out += [f"Held out by {title} (each {title}'s rows predicted by a layer learned without that {title}):", "",
                f"| {title} | plain rows | plain MAPE | physics only | speedup rows | speedup MAPE | physics only |"
                " decisions right | physics only |", "|---|---|---|---|---|---|---|---|---|"]
        for g, f in groups.items():
            p = phys.get(g, {})
            out.append(f"| {g} | {f['plain_only']['n']} | {_pct(f['plain_only']['mape'])} |"
                       f" {_pct(p.get('plain_only', {}).get('mape', float('nan')))} | {f['speedup']['n']} |"
                       f" {_pct(f['speedup']['mape'])} | {_pct(p.get('speedup', {}).get('mape', float('nan')))} |"
                       f" {_pct(f['decision']['share'])} | {_pct(p.get('decision', {}).get('share', float('nan')))} |")
        out.append("")
    return out


def _num(x) -> float:
    return float("nan") if x is None else float(x)


def _breakdown_tables(s: dict, rows: pd.DataFrame, skipped: pd.DataFrame) -> list[str]:
    """transfer.md below the headline: by GPU, by source, every scored row, and the reasons rows were not."""
    lines = ["## By GPU", "", "| GPU | basis | step rows | datasheet MAPE | planner MAPE | worst | speedup rows | speedup MAPE |",
              "|---|---|---|---|---|---|---|---|"]
    for hw, g in s["by_gpu"].items():
        lines.append(f"| {hw} | {g['basis'].split(';')[0]} | {g['step_time']['n']} | {_pct(g['datasheet_step_time']['mape'])} |"
                     f" {_pct(g['step_time']['mape'])} | {_pct(g['step_time']['worst'])} | {g['speedup']['n']} |"
                     f" {_pct(g['speedup']['mape'])} |")
    lines += ["", "## By tensor-parallel degree", "",
              "Decode step-time rows (plain, serving ITL, run time per output token) by TP (error = planner / measured"
              " - 1; a median below 0: the planner is fast):", "",
              "| TP | rows | planner MAPE | median error | worst |", "|---|---|---|---|---|"]
    for tp, g in (s["step_time"].get("by_tp") or {}).items():
        lines.append(f"| {tp} | {g['n']} | {_pct(g['mape'])} | {g['median_error']:+.1%} | {_pct(g['worst'])} |")
    lines += ["", "## By source", "", "| source | rows | datasheet MAPE | planner MAPE | worst |", "|---|---|---|---|---|"]
    for src, g in s["by_source"].items():
        lines.append(f"| {src} | {g['planner']['n']} | {_pct(g['datasheet']['mape'])} | {_pct(g['planner']['mape'])} |"
                     f" {_pct(g['planner']['worst'])} |")
    lines += ["", "## Rows", "", "| row | source | GPU | engine | model | TP | B | K | ctx | kind | measured | datasheet |"
              " planner | error | peer |", "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows.itertuples():
        unit = "x" if r.kind == "speedup" else " ms"
        peer = getattr(r, "peer_predicted", None)
        lines.append(f"| {r.row_id} | {r.source_id} | {r.hardware} | {r.engine} | {r.model} | {r.tp} | {r.batch_size} |"
                     f" {r.k} | {r.context_len} | {r.kind}{' (anchor)' if r.anchor else ''} | {r.measured:.3g}{unit} |"
                     f" {r.predicted_datasheet:.3g}{unit} | {r.predicted:.3g}{unit} | {r.error:+.1%} |"
                     f" {'-' if peer is None or peer != peer else f'{peer:.3g}{unit}'} |")
    lines += ["", "## Not expressible", "", "| reason | rows |", "|---|---|"]
    for reason, n in skipped.groupby("reason").size().sort_values(ascending=False).items():
        lines.append(f"| {reason} | {n} |")
    return lines


def bands(summary: dict) -> dict:
    """Per GPU: the step-time and speedup MAPE on the corpus (the uncertainty every prediction quotes)."""
    out = {"_source": "calibration/data/transfer/transfer.md (python -m calibration.transfer)",
           "_date": dt.date.today().isoformat(),
           "_all": {"step_time_mape": summary["step_time"]["planner"]["mape"],
                    "step_time_worst": summary["step_time"]["planner"]["worst"],
                    "n": summary["step_time"]["planner"]["n"],
                    "speedup_mape": summary["speedup"]["planner"]["mape"]},
           "_datasheet": {"step_time_mape": summary["step_time"]["datasheet"]["mape"],
                          "n": summary["step_time"]["datasheet"]["n"]},
           # zero-shot speculative speedups by batch-size range (predict quotes the range of each row)
           "_speedup_by_batch": summary["speedup"]["by_batch"],
           # decode step-time rows by tensor-parallel degree, all GPUs (predict quotes its TP's lean)
           "_step_time_by_tp": summary["step_time"].get("by_tp") or {}}
    if summary.get("physics_only_by_batch"):  # the same rows predicted by the physics alone (--physics-only)
        out["_speedup_by_batch_physics_only"] = summary["physics_only_by_batch"]
    if summary.get("parts"):  # the speculative step by part, where sources publish the parts
        out["_speedup_parts"] = parts_by_method(summary["parts"])
    two = summary.get("two_shot") or {}
    if two.get("n"):  # how often a posterior's 90% interval held a held-out point (a deployment fit quotes it)
        out["_two_shot"] = {"n": two["n"], "curves": two["curves"], "interval_coverage": two["interval_coverage"],
                            "speedup_mape": two["planner"]["mape"]}
    for hw, g in summary["by_gpu"].items():
        out[hw] = {"step_time_mape": g["step_time"]["mape"], "step_time_worst": g["step_time"]["worst"],
                   "n": g["step_time"]["n"], "speedup_mape": g["speedup"]["mape"], "basis": g["basis"].split(";")[0]}
    return json.loads(json.dumps(out, default=float).replace("NaN", "null"))

