"""Sizing reports: one self-contained HTML file (charts as inline SVG) and the same content in Markdown.

Charts are drawn with Altair and rendered to SVG by vl-convert at build time
(:mod:`simulator.sizing.report_charts`), so the HTML file loads nothing when opened (no scripts, no
external links); tables are formatted by :mod:`simulator.sizing.report_tables`.
"""
from __future__ import annotations

import html
import json
import re
from datetime import datetime, timezone

import pandas as pd

from simulator.plan.advice import advice_lines
from simulator.plan.api import schedule_text
from simulator.plan.speedup_trust import decision_risk_text, gain_at_risk_text, speedup_trust_text
from simulator.specs.scenario_sections import repo_relative
from simulator.specs.uncertainty import serving_checks_text as checks_text, tp_leans_text
from simulator.sizing.answer import quality_caveat
from simulator.sizing.costing import target_output_tokens_per_hour
from simulator.sizing.fleet import SizingResult
from simulator.sizing.ranking import RANK_RULE
from simulator.sizing.search import STEADY_LIFETIMES
from simulator.sizing.candidate import traffic_lengths
from simulator.sizing.report_charts import charts
from simulator.sizing.report_tables import html_table, k_star_table, md_table

# cost first, then what to buy, then why; the rest is in the capacity table and the JSON output
RANKED_COLUMNS = ["rank", "fleet_usd_per_hour", "usd_per_m_tokens_at_target", "price_per_gpu_hour_usd", "hardware",
                  "tp", "dtype", "policy", "nodes", "gpus", "gpus_range", "basis", "node_layout",
                  "max_load_per_replica", "tpot_p50_s", "ttft_p99_s", "mean_k"]
REASON_COLUMNS = ["rank", "hardware", "tp", "dtype", "policy", "basis", "gpus_range", "rank_reason"]
CAPACITY_COLUMNS = ["hardware", "tp", "dtype", "policy", "max_load_per_replica", "load_band_low", "load_band_high",
                    "basis", "tok_s_per_gpu", "usd_per_m_output_tokens", "tpot_p50_s", "ttft_p99_s", "mean_batch_size", "mean_k", "replicas",
                    "gpus", "meets_target", "reason"]
PER_GPU_COLUMNS = ["hardware", "gpus", "nodes", "fleet_usd_per_hour", "usd_per_m_tokens_at_target", "gpus_range", "tp",
                   "dtype", "policy", "basis", "rank", "note"]


# --- small pieces of the sections --------------------------------------------------------------

def _cpu_note(capacity) -> str:
    """The ranked table's note for CPU candidates: bought one machine at a time, priced only when given."""
    if "device_kind" not in capacity or not (capacity.device_kind == "cpu").any():
        return ""
    return (" (a CPU device is a machine of its own, bought one at a time; the catalog holds no CPU price: give one"
            " with --price NAME=USD_PER_HOUR)")


def _cols(df: pd.DataFrame, cols) -> pd.DataFrame:
    return df[[c for c in cols if c in df.columns]] if len(df) else df


def _break_even_sentence(table: pd.DataFrame, fixed_k: int) -> str:
    """What acceptance fixed K needs to tie plain decoding, against what the given rates reach."""
    needs = table["break_even_acceptance_length"].dropna() if "break_even_acceptance_length" in table else None
    if needs is None or needs.empty:
        return f"Fixed K={fixed_k}: no batch size where both it and plain decoding fit memory."
    reach = float(table["fixed_acceptance_length"].iloc[0])
    short = table.batch_size[table["break_even_acceptance_length"] > reach]
    tail = (f"; above that from B={int(short.min())} the given rates fall short" if len(short)
            else "; the given rates reach it at every batch size")
    return (f"Fixed K={fixed_k} reaches acceptance length {reach:.2f}; it needs {needs.min():.2f}-{needs.max():.2f}"
            f" (step time at K={fixed_k} / plain step time) to tie plain decoding{tail}.")


def compact_json(obj) -> str:
    """json.dumps with indent 2, but innermost lists ([start, end, K] ranges) on one line."""
    text = json.dumps(obj, indent=2)
    return re.sub(r"\[\s*([-\d.]+(?:,\s*[-\d.]+)*)\s*\]",
                  lambda m: "[" + ", ".join(x.strip() for x in m.group(1).split(",")) + "]", text)


# --- sections (shared by HTML and Markdown) ----------------------------------------------------

def serving_checks_text(res: SizingResult) -> str:
    """The unseen serving runs' check for each GPU the capacity table sizes, under the scenario's engine."""
    gpus = sorted(set(res.capacity["hardware"])) if len(res.capacity) else [res.scenario.hardware.name]
    return checks_text(gpus, res.scenario.engine.name, physics_only=res.scenario.step_basis == "physics only")


def _provenance(res: SizingResult) -> pd.DataFrame:
    """Where each quantity of the report comes from."""
    sc, spec = res.scenario, res.spec
    return pd.DataFrame([
        {"quantity": "step times (ITL per batch size and K)", "source": sc.cost_source + (
            "; candidates off the calibrated device use datasheet figures (see step_time_source per row)"
            if sc.profile else "")},
        {"quantity": "hardware figures", "source": "; ".join(sorted({f"{c.hardware}: datasheet (catalog)"
                                                                     for c in spec.candidates}))},
        {"quantity": "acceptance rates", "source": f"{sc.acceptance.label} ({sc.acceptance.source})"},
        {"quantity": "model", "source": f"{sc.model.name}: {sc.model.source}"},
        {"quantity": "capacity, TTFT, TPOT", "source": "simulated: serving simulation (simulator.serving) over the"
         f" step times; {'Poisson arrivals' if spec.load_kind == 'rate' else 'closed loop'}, seed {spec.seed};"
         f" each run spans {'%g s' % spec.duration_s if spec.duration_s else f'{STEADY_LIFETIMES:g} request lifetimes (>= 30 s)'} of"
         f" arrivals, {spec.n_requests}-{spec.max_requests} requests; the search starts at the steady-state capacity"
         f" (Little's law on the engine's step-time tables) and simulates near it until a passing and a failing load"
         f" are within the search resolution x{2 ** (1 / 2 ** spec.search_steps):.3f} (the capacity is the passing"
         f" load); run-to-run noise: the seed rows of Sensitivity"},
        {"quantity": "prices", "source": "; ".join(sorted(set(res.capacity.get("price_source", pd.Series(dtype=str)))))
         or "-"},
        {"quantity": "energy per token", "source": "estimate: TDP x GPUs x time / tokens (GPUs at TDP)"},
        {"quantity": "measured", "source": "no end-to-end measurement enters this report unless the calibration"
         " profile or [validation] carries one (see Uncertainty)"},
    ])


def answer_items(res: SizingResult) -> list:
    """The first screen: the answer (what to buy, $/h, $/M output tokens of that fleet at the target, the
    band), the question it answers, and the best option per GPU type."""
    sc, spec = res.scenario, res.spec
    rec = res.recommendation
    prompt_len, out_len = traffic_lengths(sc)
    question = (f"For {spec.target_load:g} {spec.load_unit}"
                + (f" of ~{prompt_len:.0f}-token prompts and ~{out_len:.0f}-token answers" if spec.load_kind == "rate" else "")
                + f" within {spec.slo.describe()}"
                + (" (plus a stability guard ttft_p99_s <= 30 s: the SLOs set no TTFT bound)" if spec.ttft_guard else "")
                + f"; {sc.model.name}, draft {sc.draft.label}.")
    items = [("answer", ("**Answer:** " if rec else "**Result:** ") + res.message + "."), ("p", question)]
    if rec:
        items.append(("table", pd.DataFrame([{
            "hardware": rec["hardware"], "gpus": rec["gpus"], "nodes": rec["nodes"],
            "fleet_usd_per_hour": rec["fleet_usd_per_hour"], "usd_per_m_tokens_at_target": rec["usd_per_m_tokens_at_target"],
            "gpus_range": rec["gpus_range"], "tp": rec["tp"], "dtype": rec["dtype"], "policy": rec["policy"],
            "basis": rec["basis"]}])))
        caveat = quality_caveat(rec, sc)
        if caveat:
            items.append(("p", f"**Caveat, {caveat}.**"))
    items += [("h3", "Best option per GPU type"),
              ("per_gpu", _cols(res.per_gpu_type, PER_GPU_COLUMNS)),
              ("p", f"Ranking: {RANK_RULE}. $/M output tokens = fleet $/h / output tokens per hour at the target"
                    f" ({_tokens_text(res)}).")]
    return items


def _tokens_text(res: SizingResult) -> str:
    spec = res.spec
    if spec.load_kind == "rate":
        return (f"{spec.target_load:g} req/s x {traffic_lengths(res.scenario)[1]:.0f} output tokens x 3600 ="
                f" {target_output_tokens_per_hour(spec, res.scenario) / 1e6:.2f} M tokens/h")
    return "the target concurrency x tokens/s per sequence x 3600"


def _sections(res: SizingResult) -> list[tuple[str, list]]:
    """[(title, [("p", text) | ("ul", [text]) | ("table", df) | ("code", text) | ("chart", name)])]:
    the answer first, then why, then the evidence, the K schedule after."""
    sc, spec = res.scenario, res.spec
    rec = res.recommendation
    secs = [("Answer", answer_items(res))]
    why = [("ul", res.why())] if rec else []
    if rec:
        label = rec.get("candidate") or f"{rec['hardware']} tp={int(rec['tp'])}"
        why.append(("p", f"Speculation on {label}: {res.spec_stops.get(label, '')}."))
        if rec.get("basis") == "datasheet":
            why.append(("p", "**Flag:** this candidate rests on datasheet figures only; its GPU range is wide."
                             " Calibrate it (python -m calibration.run) or validate it before a purchase."))
    why += [("p", sc.description or sc.name),
             ("p", f"Traffic {json.dumps(sc.extra.get('traffic', {}))}; acceptance {sc.acceptance.label}"
                   f" ({sc.acceptance.source}); {sc.acceptance.rule}.")]
    secs.append(("Why", why))
    secs.append(("Ranked configurations (meet the target within max_replicas)",
                 [("p", f"{RANK_RULE[0].upper()}{RANK_RULE[1:]}. GPUs are whole nodes of {spec.gpus_per_node}"
                        f"{_cpu_note(res.capacity)},"
                        f" sized for the target x {1 + spec.headroom:g} (headroom) plus {spec.spare_replicas} spare"
                        " replica(s) (N+1); GPUs (band) repeats that with the capacity at the ends of its band. basis:"
                        " measured (kernel tables of the device), published prior (published measurements) or"
                        " datasheet (flagged, wide band)."),
                  ("table", _cols(res.ranked, RANKED_COLUMNS)), ("p", "Why each place:"),
                  ("wtable", _cols(res.ranked, REASON_COLUMNS))]))
    secs.append(("Capacity per replica, all candidates and policies",
                 [("chart", "capacity"), ("table", _cols(res.capacity, CAPACITY_COLUMNS)),
                  ("p", "Candidates that do not meet the target, and why:"), ("wtable", _misses(res.capacity))]))
    secs.append(("Throughput per GPU vs TPOT (Pareto)", [("chart", "pareto")]))
    mem = _cols(res.memory, ["hardware", "tp", "dtype", "usable_gb", "weights_gb", "draft_gb", "kv_gb_per_seq",
                             "context_tokens", "max_seqs", "fits"])
    secs.append(("Memory fit and rejected configurations",
                 [("p", "Usable = memory x memory_utilization; a sequence holds prompt + output tokens plus"
                        " K_max+1 verification slots in the target and draft KV caches."),
                  ("table", mem), ("wtable", res.rejected)]))
    k_parts = []
    if rec:
        label = rec.get("candidate") or f"{rec['hardware']} tp={int(rec['tp'])}"
        table = res.k_tables.get(label)
        if table is not None:
            k = table["k_opt"].fillna(-1).astype(int).to_numpy()
            runs = {"plain": "; the recommended policy is plain decoding (K=0 at every batch size)",
                    "fixed": f"; the recommended policy is fixed K={sc.fixed_k} at every batch size"}
            k_parts.append(("p", f"**K schedule ({label}):** {schedule_text(table['batch_size'].to_numpy(), k)}"
                                 f"{runs.get(rec['policy'], '')}."))
    secs.append(("K schedule and engine settings", k_parts + _k_sections(res, rec)))
    secs += _closing_sections(res)
    return secs


def _misses(cap: pd.DataFrame) -> pd.DataFrame:
    return _cols(cap[~cap.meets_target.astype(bool)] if len(cap) else cap, ["hardware", "tp", "dtype", "policy", "reason"])


def _k_sections(res: SizingResult, rec: dict | None) -> list:
    """The K* tables and engine settings of the recommended and two more candidates."""
    kparts = []
    order = [rec.get("candidate") or f"{rec['hardware']} tp={int(rec['tp'])}"] if rec else []
    order += [k for k in res.k_tables if k not in order]
    for n, label in enumerate(order[:3]):
        eng = res.engine[label]
        kt = res.k_tables[label]
        kparts += [("h3", label), ("p", "Schedule: " + schedule_text(kt["batch_size"].to_numpy(),
                                                                      kt["k_opt"].fillna(-1).astype(int).to_numpy()) + "."),
                   ("p", res.spec_stops[label] + "."), ("p", _break_even_sentence(kt, res.scenario.fixed_k)),
                   *([("p", "Note: " + risk + ".")] if (risk := gain_at_risk_text(kt)) else []),
                   *([("p", "Decision: " + unsure + ".")]
                     if (unsure := decision_risk_text(kt, res.scenario.decision_quantile)) else []),
                   ("table", k_star_table(kt)),
                   ("p", "The same table from predict:"), ("code", eng.get("predict", ""))]
        for fmt, exp in eng.get("exports", {}).items():  # the scenario's engine's files, as --format FMT writes them
            if "error" in exp:
                kparts.append(("p", f"{fmt}: {exp['error']}"))
            else:
                kparts += [("p", f"{exp['engine']} {exp['version']} (`predict --format {fmt}`):"),
                           ("code", compact_json(exp["file"]))]
        if rec and n == 0:  # the recommended candidate: the engine settings that cost it goodput, if any
            kparts += [("p", line.strip()) for line in advice_lines(eng.get("advice", []))]
    if len(order) > 3:
        kparts.append(("p", f"K* tables of the other {len(order) - 3} candidates: see the JSON output."))
    kparts.insert(0, ("p", "K* per batch size from the goodput model at the mean context of a running sequence"
                           " (prompt + half the output); the engine files below are what `python -m simulator.predict"
                           " --format FMT` writes for the scenario's engine (vLLM: `speculative_config`; SGLang:"
                           " `--speculative-adaptive-config`; TensorRT-LLM: `draft_len_schedule`)."))
    return kparts


def _closing_sections(res: SizingResult) -> list:
    """Sensitivity, uncertainty, provenance and how the report was made."""
    sc, spec = res.scenario, res.spec
    secs = []
    if len(res.sensitivity):
        secs.append(("Sensitivity (recommended configuration)",
                     [("p", "Capacity rerun at a finer search resolution (the baseline too) with every kernel's time"
                            " moved by 10% (the profile's kernel times, else the datasheet bandwidth and FLOP/s;"
                            " communication and host time not varied) and the acceptance rates by 10%; the seed rows"
                            " rerun the baseline with other random draws: their spread is the serving simulation's"
                            " run-to-run noise. The traffic rows move the target load by 20% at the baseline capacity."),
                      ("table", res.sensitivity)]))
    else:
        secs.append(("Sensitivity", [("p", "not run (no recommended configuration or sensitivity = false).")]))
    leans = tp_leans_text(res.capacity["tp"]) if len(res.capacity) and "tp" in res.capacity else ""
    secs.append(("Uncertainty", [("p", "Capacity band: " + res.band_note + "."),
                                 ("p", "Serving " + serving_checks_text(res) + "."),
                                 *([("p", "Tensor parallelism: " + leans + "; a replica at a TP whose rows ran"
                                         " slower may carry that much less than its capacity here.")] if leans else []),
                                 ("p", "Speculative speedups (the K* tables): " + speedup_trust_text(sc) + ".")]))
    prov = _provenance(res)
    secs.append(("Provenance", [("wtable", prov)]))
    origin = repo_relative(sc.origin)
    # the command as typed where the CLI ran it (flags included); else the scenario file's own command
    again = res.command or (f"python -m simulator.size --scenario {origin} --output-dir reports/" if origin != "flags"
                            else "")
    regenerate = (f" Regenerate: `{again}`." if again else
                  " Regenerate: the same flags again (--save-scenario FILE keeps them as a scenario).")
    secs.append(("Run", [("p", f"Generated {datetime.now(timezone.utc).strftime('%Y-%m-%d %H:%M UTC')} from"
                              f" {origin} in {res.elapsed_s:.0f} s ({spec.workers} workers);"
                              f" {len(res.points)} serving simulations{_stopped_note(res.points)}.{regenerate}")]))
    return secs


CSS = """body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}
table{border-collapse:collapse;font-size:12px;margin:.5em 0}td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}
th{background:#f2f2f2}.tw{overflow-x:auto}td{white-space:nowrap}table.wrap td{white-space:normal;text-align:left}pre{background:#f6f6f6;padding:.6em;font-size:12px;overflow-x:auto}
td.note{white-space:normal;text-align:left;min-width:16em}
.chart svg{max-width:100%;height:auto}.rec{background:#eef7ee;border-left:4px solid #3a3;padding:.5em 1em;font-size:1.25em}"""


def _md_inline(text: str) -> str:
    out = []
    for i, part in enumerate(html.escape(text).split("**")):
        out.append(part if i % 2 == 0 else f"<strong>{part}</strong>")
    s = "".join(out)
    parts = s.split("`")
    return "".join(p if i % 2 == 0 else f"<code>{p}</code>" for i, p in enumerate(parts))


def _html_head(name: str) -> str:
    return f"<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>Sizing: {html.escape(name)}</title>"


def _markdown_title(name: str) -> str:
    return f"# Sizing report: {name}"


def is_sizing_report(text: str, name: str) -> bool:
    """Whether ``text`` is a report this module rendered for scenario ``name`` (HTML, Markdown or JSON):
    what the sizing CLI may replace or remove in an output directory, never a file of the user's."""
    if text.startswith(_html_head(name)) or text.startswith(_markdown_title(name) + "\n"):
        return True
    try:
        doc = json.loads(text)
    except ValueError:
        return False
    return isinstance(doc, dict) and doc.get("scenario") == name and {"ranking_rule", "recommendation"} <= doc.keys()


def render_html(res: SizingResult) -> str:
    svgs = charts(res)
    body = [f"<h1>Sizing report: {html.escape(res.scenario.name)}</h1>"]
    for title, items in _sections(res):
        body.append(f"<h2>{html.escape(title)}</h2>")
        for kind, val in items:
            if kind == "p":
                body.append(f"<p>{_md_inline(val)}</p>")
            elif kind == "answer":
                body.append(f'<p class="rec" id="answer">{_md_inline(val)}</p>')
            elif kind == "ul":
                body.append("<ul>" + "".join(f"<li>{_md_inline(v)}.</li>" for v in val) + "</ul>")
            elif kind == "per_gpu":
                body.append(f'<div id="per-gpu-type">{html_table(val, wrap_last=True)}</div>')
            elif kind == "h3":
                body.append(f"<h3>{html.escape(val)}</h3>")
            elif kind in ("table", "wtable"):
                body.append(html_table(val, wrap=kind == "wtable"))
            elif kind == "code":
                body.append(f"<pre>{html.escape(val)}</pre>")
            elif kind == "chart":
                svg = svgs.get(val)
                body.append(f'<div class="chart" id="chart-{val}">{svg}</div>' if svg else "<p><em>(no data)</em></p>")
    return f"{_html_head(res.scenario.name)}<style>{CSS}</style></head><body>{''.join(body)}</body></html>"


def _stopped_note(points: pd.DataFrame) -> str:
    """How many of the search's runs stopped once an SLO could no longer be met (their figures are bounds)."""
    n = int(points["lower_bounds"].fillna(False).astype(bool).sum()) if "lower_bounds" in points else 0
    return (f" ({n} stopped early once an SLO could no longer be met: their latency figures are lower bounds,"
            f" their throughput is not known and the chart leaves them out)") if n else ""


def render_markdown(res: SizingResult) -> str:
    lines = [_markdown_title(res.scenario.name), ""]
    for title, items in _sections(res):
        lines += [f"## {title}", ""]
        for kind, val in items:
            if kind in ("p", "answer"):
                lines += [val, ""]
            elif kind == "ul":
                lines += [f"- {v}." for v in val] + [""]
            elif kind == "per_gpu":
                lines += [md_table(val)]
            elif kind == "h3":
                lines += [f"### {val}", ""]
            elif kind in ("table", "wtable"):
                lines += [md_table(val)]
            elif kind == "code":
                lines += ["```json", val, "```", ""]
            elif kind == "chart":
                lines += [f"_Chart '{val}': see the HTML report._", ""]
    return "\n".join(lines)


def render_json(res: SizingResult) -> str:
    d = res.to_dict()
    d["k_tables"] = {k: json.loads(v.to_json(orient="records")) for k, v in res.k_tables.items()}
    return json.dumps(d, indent=2, default=str)
