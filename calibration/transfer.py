"""Transfer validation: score the planner on published GPU measurements it was never fitted to.

    python -m calibration.transfer [--corpus calibration/data/published/corpus.csv]
                                   [--output-dir calibration/data/transfer] [--peer]

Each corpus row (one published number, its source, device, engine, model, TP, dtype, batch size,
K, context) becomes a scenario and is predicted twice:

- ``datasheet``: the planner as it was, datasheet peaks and the ideal engine (no host time);
- ``planner``: the best evidence the planner has for that device (measured kernel tables shipped in
  ``simulator/data/profiles``, else the published prior, else the datasheet) and the engine profile of
  the row's engine (``simulator/data/engines``).

What is compared (never fitted to these rows):

- plain decode step time [ms]: published per-step latency or TPOT, or per-user tok/s at a known batch;
- run time / output tokens [ms]: published batch latency or total throughput of a static batch of B
  requests; predicted by the serving simulation (chunked prefill, decode, and the KV cache's limit on
  how many run at once), so both sides hold the same work;
- speculative speedup at batch B (goodput with K drafts / plain goodput): acceptance is an input, not
  a prediction; rows give it as acceptance length, or the smallest-batch row of a curve anchors it
  (that row is then not scored);
- the win/lose decision: measured speedup > 1 vs predicted > 1.

Rows the planner cannot express (a device or model outside the catalog, self-speculation with a
compressed KV cache, an nvfp4 target) are listed with the reason, not scored. With ``--peer`` and the
``aiconfigurator_core`` package importable, the peer's own TPOT estimate for the same plain rows is
set beside ours. The per-device residuals become the uncertainty band every prediction quotes
(``simulator/data/transfer_error.json``).
"""
from __future__ import annotations

import contextlib
import datetime as dt
import io
import json
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.optimize import brentq

from simulator.cli.common import OneLineParser, run_cli, write_atomically, write_files_atomically
from simulator.errors import PlannerError, PlannerWarning
from simulator import serving
from simulator.plan.grid import compute_grid
from simulator.specs.engines import engine_versions
from simulator.specs.models import list_models
from simulator.specs.scenario import Scenario, build_scenario
from simulator.specs.versions import version_key

REPO = Path(__file__).resolve().parent.parent
CORPUS = REPO / "calibration" / "data" / "published" / "corpus.csv"
OUT_DIR = REPO / "calibration" / "data" / "transfer"
BAND_FILE = REPO / "simulator" / "data" / "transfer_error.json"

# corpus device -> catalog hardware, with why when the source leaves the variant open
DEVICES = {"A100-80GB": ("a100-80gb", ""), "H100": ("h100-sxm", "form factor not stated: SXM assumed"),
           "H100-SXM": ("h100-sxm", ""), "H200": ("h200", ""), "B200": ("b200", ""), "MI300X": ("mi300x", ""),
           "L40S": ("l40s", ""), "RTX3090": ("rtx3090", ""), "A100-40GB": ("a100-40gb", "")}
# the plain "A100" rows: TensorRT-LLM's perf tables ran A100-SXM4-80GB; Argonne's Polaris nodes hold A100-40GB
A100_BY_SOURCE = {"trtllm-perf-v061": "a100-80gb", "argonne-llm-inference-bench": "a100-40gb"}
ENGINES = {"vllm": "vllm", "sglang": "sglang", "trtllm": "trtllm", "gpt-fast": "gpt-fast"}
# engine and version a source ran when the row does not say: its publication date's release line
SOURCE_ENGINES = {"magicdec-paper": ("gpt-fast", None),  # "authors' backend built on gpt-fast" (corpus notes)
                  # its vLLM rows (RTX 3090) state no version: the paper (Mar 2025) ran vLLM's V0 EAGLE line
                  "eagle3-paper": (None, "0.7"),
                  "argonne-llm-inference-bench": (None, "0.6.3"),  # arXiv 2411.00136, Nov 2024: vLLM 0.6 line
                  "lmsys-sglang-mtp-blog": (None, "0.4.4"), "trtllm-dsr1-b200-blog": (None, "1.0"),
                  "trtllm-mtp-blog": (None, "1.0"), "trtllm-ngram-blog": (None, "1.0"),
                  # nim.csv serves meta-llama3-8b/70b-instruct: the Llama 3 NIM images of NIM for LLMs
                  # 1.0.x (docs.nvidia.com/nim/large-language-models/1.0.0/release-notes.html: 1.0.0, the
                  # first general release, and 1.0.3 list Llama 3 8B / 70B Instruct; Llama 3.1 came with
                  # 1.1), i.e. May-June 2024, when TensorRT-LLM was at 0.9-0.10 (same XQA gate, both tags)
                  "nvidia-dli-nim-genaiperf": (None, "0.10"), "vllm-fp8-kv-blog": (None, "0.19.1")}
WEIGHTS = {"bf16": ("bf16", "bf16"), "fp16": ("bf16", "bf16"), "mixed (fp16)": ("bf16", "bf16"), "fp8": ("fp8", "fp8"),
           "int8-weight-only": ("int8", "bf16"), "int4-weight-only-g32": ("int4", "bf16"),
           "int4-weight-only-g64": ("int4", "bf16"), "int4-weight-only": ("int4", "bf16"),
           # NVFP4 (4-bit values, one fp8 scale per 16: 4.5 bits) priced as the catalog's mxfp4 (4.25 bits)
           "nvfp4": ("mxfp4", "bf16"), "nvfp4(moe)/bf16(attn)": ("bf16", "bf16", "mxfp4")}
DRAFTS = {"eagle": "eagle", "eagle2": "eagle", "eagle3": "eagle3", "mtp": "mtp", "ngram": "ngram"}
PLAIN_METRICS = ("plain_step_ms", "tpot_ms", "output_tok_s_per_user")
# a serving benchmark's mean inter-token latency at a concurrency: a plain step at batch = concurrency
# plus whatever the other requests' prefills and the scheduler add; scored as its own kind
ITL_METRICS = ("itl_ms",)
# Sources whose FP8 runs leave the KV dtype unstated but quantize it with the weights: TensorRT-LLM's
# FP8 performance tables (the v0.6.1 docs say 'FP8 weights and FP8 KV'; the v0.9 DLI FP8 steps run
# below a bf16-KV roofline, e.g. Llama-2-7B B=120 on H100: 17.2 ms measured, 24.5 ms bf16-KV minimum)
FP8_KV_WITH_FP8_WEIGHTS = ("nvidia-dli-trtllm-v090", "trtllm-perf-v061")
# Sources that benchmarked with random ("fake") weights: an MoE router then sends most tokens to the
# same experts, so the step is not the model's (DLI Mixtral runs measure 2x below the all-experts
# roofline); their MoE rows are not scored
RANDOM_WEIGHT_SOURCES = ("nvidia-dli-trtllm-v090",)
# Routing correlation of adjacent positions for MoE rows: verifying 4 tokens loads ~2.5x the experts
# of one (Cascade, Saxena et al., arXiv 2506.20675; docs/moe.md), rho ~ 0.5 on DeepSeek-V3
MOE_REUSE = 0.5
MOE_MODELS = ("mixtral-8x7b", "deepseek-v3", "qwen3-30b-a3b", "qwen3-235b-a22b", "gpt-oss-120b")
RUN_METRICS = ("output_tok_s_total", "output_tok_s_per_gpu", "batch_latency_s", "e2e_latency_ms")


@dataclass
class Case:
    """One corpus row made into something the planner can price."""

    row: pd.Series
    kind: str  # "plain", "itl", "run" or "speedup"
    raw: dict  # scenario dict (TOML layout) for the planner basis
    measured: float  # ms per step (plain, run) or the speedup
    note: str = ""
    end_to_end: bool = False  # a speedup of whole-request latency (prefill and queueing included)


def _num(v) -> float | None:
    return None if pd.isna(v) else float(v)


def _hardware(row) -> tuple[str | None, str]:
    if row.device == "A100":
        hw = A100_BY_SOURCE.get(row.source_id)
        return hw, "A100 variant per source (see DEVICES in calibration/transfer.py)" if hw else \
            "A100 without its memory variant (40 or 80 GB: 1.6 or 2.0 TB/s)"
    hw, why = DEVICES.get(row.device, (None, ""))
    return hw, why


def _draft(method: str) -> str | None:
    if method in ("none", "", None) or (isinstance(method, float) and np.isnan(method)):
        return "none"
    if method in DRAFTS:
        return DRAFTS[method]
    if method.startswith("self-spec:streamingllm-kv"):  # MagicDec: the target over a W-token StreamingLLM KV
        budget = method.rsplit("kv", 1)[1]
        return f"self:{budget}" if budget.isdigit() else None
    if method.startswith("draft-model:") and "(" not in method:
        name = method.split(":", 1)[1]
        return f"model:{name}" if name in list_models() else None
    return None  # self-speculation with a compressed KV cache, or a draft outside the catalog


def engine_for(row) -> dict:
    """The engine profile a row ran on: its engine, and the newest profile version not newer than the
    version it states (or its source's release line); the oldest profile when all are newer."""
    name, version = SOURCE_ENGINES.get(row.source_id, (None, None))
    name = name or ENGINES.get(row.engine, "ideal")
    if not pd.isna(row.engine_version) and str(row.engine_version)[:1].isdigit():
        version = str(row.engine_version).split()[0]
    versions = engine_versions(name)
    if not versions or not versions[0]:
        return {"name": name}
    if version is None:
        return {"name": name, "version": versions[-1]}
    older = [v for v in versions if version_key(v) <= version_key(version)]
    return {"name": name, "version": (older or versions)[-1] if older else versions[0]}


def iid_rate(al: float, k: int) -> float:
    """The i.i.d. acceptance rate a with 1 + a + ... + a^K = AL (AL in (1, K+1))."""
    if not 1.0 < al < k + 1:
        raise PlannerError(f"acceptance length {al} is outside (1, {k + 1}) for K={k}")
    return brentq(lambda a: sum(a ** i for i in range(k + 1)) - al, 1e-9, 1 - 1e-12)


def case_for(row: pd.Series) -> Case | str:
    """A Case, or the reason the planner cannot express the row."""
    hw, hw_note = _hardware(row)
    if hw is None:
        return hw_note or f"device {row.device} is not in the hardware catalog"
    if row.model not in list_models():
        return f"model {row.model} is not in the model catalog"
    notes = str(row.notes).lower()
    if row.engine == "other" and ("hf-transformers" in notes or "hugging face transformers" in notes):
        return "Hugging Face transformers eager decoding: a research stack with no engine profile"
    if row.source_id in RANDOM_WEIGHT_SOURCES and row.model in MOE_MODELS:
        return "random weights: the router's expert choice is not the model's (MoE step below its roofline)"
    dtype = WEIGHTS.get(str(row.weight_dtype) if not pd.isna(row.weight_dtype) else "bf16")
    if dtype is None:
        return f"weights {row.weight_dtype} have no planner dtype"
    draft = _draft(row.draft_method)
    if draft is None:
        return f"draft {row.draft_method} is not a planner draft method"
    tp = int(row.tp) if not pd.isna(row.tp) else int(row.num_gpus) if not pd.isna(row.num_gpus) else None
    if tp is None:
        return "TP not stated"
    B, K = int(row.batch_size), int(row.k) if not pd.isna(row.k) else 0
    inp, out = _num(row.input_len), _num(row.output_len)
    ctx = _num(row.context_len) or ((inp or 0) + (out or 0) / 2) or 512.0
    raw = {"model": {"name": row.model}, "hardware": {"name": hw, "tp": tp},
           "precision": {"weights": dtype[0], "activations": dtype[1],
                         "kv_cache": "fp8" if str(row.kv_dtype).startswith("fp8") or (
                             pd.isna(row.kv_dtype) and dtype[0] == "fp8" and row.source_id in FP8_KV_WITH_FP8_WEIGHTS)
                         else "bf16"} | (
                             {"experts": dtype[2]} if len(dtype) > 2 else {}),
           "workload": {"context_len": int(ctx), "batch_sizes": [B], "k_max": max(K, 1), "fixed_k": max(K, 1),
                        "memory_utilization": 0.95},
           "engine": engine_for(row),
           "draft": {"method": draft if draft != "none" else "ngram"}}
    if row.model in MOE_MODELS:  # adjacent tokens route alike: the published prior of docs/moe.md
        raw["routing"] = {"kind": "uniform", "reuse": MOE_REUSE}
    m = row.metric
    if m in PLAIN_METRICS and draft == "none":
        value = 1000.0 / row.value if m == "output_tok_s_per_user" else float(row.value)
        return Case(row, "plain", raw, value, hw_note)
    if m in ITL_METRICS and draft == "none":
        return Case(row, "itl", raw, float(row.value), hw_note)
    if m in RUN_METRICS and draft == "none":
        if out is None or inp is None:
            return "run metric without input and output lengths"
        total_tok_s = {"output_tok_s_total": row.value, "output_tok_s_per_gpu": row.value * tp}.get(m)
        run_s = B * out / total_tok_s if total_tok_s else row.value * (1e-3 if m == "e2e_latency_ms" else 1.0)
        return Case(row, "run", raw, run_s / out * 1e3, hw_note)
    if m == "spec_speedup" and draft != "none":
        if K < 1:
            return "speedup without K"
        e2e = "end-to-end" in str(row.notes).lower() and inp is not None and out is not None
        return Case(row, "speedup", raw, float(row.value), hw_note, end_to_end=e2e)
    return f"metric {m} with draft {row.draft_method} is not scored"


SHOWN_COLUMNS = {"source_id": "source", "locator": "where", "engine": "engine", "model": "model", "tp": "TP",
                 "batch_size": "B", "k": "K", "context_len": "context", "kind": "kind", "measured": "measured",
                 "predicted": "planner", "error": "error"}


def published_rows_for(hardware: str, rows_csv: Path = OUT_DIR / "transfer_rows.csv") -> pd.DataFrame:
    """The committed transfer rows of one GPU (what its uncertainty band rests on), for display:
    measured and predicted in the row's unit (ms per step, or x for speedups), error as a fraction."""
    if not rows_csv.is_file():
        return pd.DataFrame(columns=list(SHOWN_COLUMNS.values()))
    rows = pd.read_csv(rows_csv)
    rows = rows[(rows.hardware == hardware) & ~rows.anchor.astype(bool)]
    return rows[list(SHOWN_COLUMNS)].rename(columns=SHOWN_COLUMNS).reset_index(drop=True)


def _scenario(raw: dict, basis: str) -> Scenario:
    raw = json.loads(json.dumps(raw))
    if basis == "datasheet":
        raw["calibration"] = {"profile": "none"}
        raw["engine"] = {"name": "ideal"}
    return build_scenario(raw, origin="corpus")


def run_time_s(sc: Scenario, batch: int, prompt: int, output: int) -> float:
    """A static batch of B requests (prompt + output tokens each) through the serving simulation:
    chunked prefill, then decode; the KV cache may hold fewer than B at once (then they queue)."""
    wl = serving.Workload(arrival="waves", concurrency=batch, n_requests=batch, prompt_len=prompt,
                          output_len=output, max_num_seqs=batch)
    eng = serving.engine_from_scenario(sc, max_num_seqs=batch)
    return float(serving.simulate(sc, "plain", workload=wl, engine=eng).summary["makespan_s"])


def closed_loop(sc: Scenario, policy: str, concurrency: int, prompt: int, output: int):
    """A closed-loop serving benchmark under ``policy``: ``concurrency`` users, each sending its next
    ``prompt`` + ``output`` token request when the last finishes (GenAI-Perf's concurrency mode)."""
    wl = serving.Workload(arrival="closed", concurrency=concurrency, n_requests=max(4 * concurrency, 16),
                          prompt_len=prompt, output_len=output, max_num_seqs=concurrency)
    eng = serving.engine_from_scenario(sc, max_num_seqs=concurrency)
    return serving.simulate(sc, policy, workload=wl, engine=eng)


def serving_tpot_s(sc: Scenario, concurrency: int, prompt: int, output: int) -> float:
    """Median per-request time per output token after the first of a closed-loop run, so other
    requests' prefills interleaved with decode steps are counted."""
    return float(closed_loop(sc, "plain", concurrency, prompt, output).summary["tpot_p50_s"])


def serving_e2e_speedup(sc: Scenario, concurrency: int, prompt: int, output: int, k: int) -> float:
    """Mean request latency of plain decoding over fixed-K speculation in the same closed loop
    (the prefills are in both)."""
    def mean_latency(policy: str) -> float:
        req = closed_loop(sc, policy, concurrency, prompt, output).requests
        return float((req.finish_s - req.arrival_s).mean())

    return mean_latency("plain") / mean_latency(f"fixed:{k}")


def predict_case(case: Case, basis: str, acceptance_length: float | None) -> tuple[float, str]:
    """(predicted value in the measured unit, what the prediction rests on)."""
    sc = _scenario(case.raw, basis)
    B, K = int(case.row.batch_size), int(case.row.k) if not pd.isna(case.row.k) else 0
    if case.kind == "speedup":
        sc = sc.with_overrides(acceptance=iid_rate(acceptance_length, K))
        if case.end_to_end:
            return serving_e2e_speedup(sc, B, int(case.row.input_len), int(case.row.output_len), K), sc.cost_source
        g = compute_grid(sc, batch_sizes=[B], ks=[0, K])
        return float(g.goodput_per_seq[0, 1] / g.goodput_per_seq[0, 0]), sc.cost_source
    if case.kind == "run":
        out, inp = int(case.row.output_len), int(case.row.input_len)
        return run_time_s(sc, B, inp, out) * 1e3 / out, sc.cost_source
    if case.kind == "itl" and not (pd.isna(case.row.input_len) or pd.isna(case.row.output_len)):
        return serving_tpot_s(sc, B, int(case.row.input_len), int(case.row.output_len)) * 1e3, sc.cost_source
    g = compute_grid(sc, batch_sizes=[B], ks=[0])
    return float(g.itl_s[0, 0]) * 1e3, sc.cost_source


def _curve_key(row) -> tuple:
    return (row.source_id, row.device, row.model, row.draft_method, int(row.k), row.context_len if not pd.isna(
        row.context_len) else -1, row.locator)


def anchor_acceptance(cases: list[Case]) -> dict[int, tuple[float | None, bool]]:
    """Acceptance length per speedup case: the row's own, else solved so that the smallest-batch row of
    its curve is reproduced by the datasheet-free planner basis (that anchor row is not scored)."""
    out: dict[int, tuple[float | None, bool]] = {}
    curves: dict[tuple, list[Case]] = {}
    for c in cases:
        if c.kind != "speedup":
            continue
        if not pd.isna(c.row.acceptance_length):
            out[c.row.row_id] = (float(c.row.acceptance_length), False)
        else:
            curves.setdefault(_curve_key(c.row), []).append(c)
    for members in curves.values():
        members.sort(key=lambda c: c.row.batch_size)
        first, K = members[0], int(members[0].row.k)
        try:
            al = brentq(lambda a: predict_case(first, "planner", a)[0] - first.measured, 1.0 + 1e-6, K + 1 - 1e-6)
        except (ValueError, PlannerError):
            al = None
        out[first.row.row_id] = (al, True)
        for c in members[1:]:
            out[c.row.row_id] = (al, False)
    return out


def peer_tpot_ms(case: Case) -> float | None:
    """aiconfigurator's own decode-step estimate for a plain row (None where it cannot say)."""
    try:
        from aiconfigurator_core.sdk.engine import EngineHandle  # optional: pip install aiconfigurator-core
    except ImportError:
        return None
    systems = {"h100-sxm": "h100_sxm", "h200": "h200_sxm", "a100-80gb": "a100_sxm", "b200": "b200_sxm", "l40s": "l40s"}
    hf = {"llama-3.1-8b": "meta-llama/Meta-Llama-3.1-8B", "llama-3.1-70b": "meta-llama/Meta-Llama-3.1-70B",
          "qwen3-32b": "Qwen/Qwen3-32B", "deepseek-v3": "deepseek-ai/DeepSeek-V3"}
    hw, model = case.raw["hardware"]["name"], case.raw["model"]["name"]
    if hw not in systems or model not in hf or case.kind == "speedup":
        return None
    engine = case.raw["engine"]["name"] if case.raw["engine"]["name"] in ("vllm", "sglang", "trtllm") else "trtllm"
    quant = {"gemm_quant_mode": "fp8"} if case.raw["precision"]["weights"] == "fp8" else {}
    inp = int(case.row.input_len) if not pd.isna(case.row.input_len) else case.raw["workload"]["context_len"]
    out = int(case.row.output_len) if not pd.isna(case.row.output_len) else 128
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            h = EngineHandle.compile(hf[model], systems[hw], engine, backend_version=None,
                                     tp_size=case.raw["hardware"]["tp"], **quant)
            return float(h.decode_step_latency(int(case.row.batch_size), inp, out))
    except Exception:  # noqa: BLE001 - the peer refuses configurations it has no data for
        return None


def score(corpus: pd.DataFrame, peer: bool = False) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(scored rows, skipped rows with reasons). Scenario caveats (PlannerWarning) are not printed:
    the report is about the error, not the inputs."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PlannerWarning)
        return _score(corpus, peer)


def _score(corpus: pd.DataFrame, peer: bool) -> tuple[pd.DataFrame, pd.DataFrame]:
    cases, skipped = [], []
    for _, row in corpus.iterrows():
        c = case_for(row)
        if isinstance(c, str):
            skipped.append({"row_id": row.row_id, "source_id": row.source_id, "device": row.device,
                            "model": row.model, "metric": row.metric, "reason": c})
        else:
            cases.append(c)
    acc = anchor_acceptance(cases)
    rows = []
    for c in cases:
        al, anchor = acc.get(c.row.row_id, (None, False))
        if c.kind == "speedup" and al is None:
            skipped.append({"row_id": c.row.row_id, "source_id": c.row.source_id, "device": c.row.device,
                            "model": c.row.model, "metric": c.row.metric,
                            "reason": "acceptance could not be anchored: no acceptance length in (1, K+1) gives the"
                                      " planner the curve's first measured speedup"})
            continue
        try:
            pred, basis = predict_case(c, "planner", al)
            pred_ds, _ = predict_case(c, "datasheet", al)
        except PlannerError as err:
            skipped.append({"row_id": c.row.row_id, "source_id": c.row.source_id, "device": c.row.device,
                            "model": c.row.model, "metric": c.row.metric, "reason": f"planner refused: {err}"})
            continue
        r = c.row
        rec = {"row_id": r.row_id, "source_id": r.source_id, "locator": r.locator, "device": r.device,
               "hardware": c.raw["hardware"]["name"], "engine": r.engine, "model": r.model, "tp": c.raw["hardware"]["tp"],
               "weights": c.raw["precision"]["weights"], "batch_size": int(r.batch_size),
               "k": int(r.k) if not pd.isna(r.k) else 0, "context_len": c.raw["workload"]["context_len"],
               "draft": r.draft_method,
               "kind": c.kind, "anchor": anchor, "acceptance_length": al, "measured": c.measured,
               "predicted": pred, "predicted_datasheet": pred_ds, "basis": basis, "note": c.note}
        rec["error"] = pred / c.measured - 1
        rec["error_datasheet"] = pred_ds / c.measured - 1
        if c.kind == "speedup":
            rec["decision_right"] = (pred > 1) == (c.measured > 1)
            rec["decision_right_datasheet"] = (pred_ds > 1) == (c.measured > 1)
        if peer and c.kind in ("plain", "itl"):
            p = peer_tpot_ms(c)
            rec["peer_predicted"] = p
            rec["peer_error"] = None if p is None else p / c.measured - 1
        rows.append(rec)
    return pd.DataFrame(rows), pd.DataFrame(skipped)


def _stats(err: pd.Series) -> dict:
    e = err.dropna().abs()
    return {"n": int(len(e)), "mape": float(e.mean()) if len(e) else float("nan"),
            "worst": float(e.max()) if len(e) else float("nan")}


STEP_KINDS = ["plain", "itl", "run"]


def _coverage(rows: pd.DataFrame) -> dict:
    return {"sources": sorted(rows.source_id.unique()), "gpus": sorted(rows.hardware.unique()),
            "tp": sorted(int(t) for t in rows.tp.unique()),
            "batch_sizes": [int(rows.batch_size.min()), int(rows.batch_size.max())] if len(rows) else []}


def summarize(rows: pd.DataFrame) -> dict:
    step = rows[rows.kind.isin(STEP_KINDS)]
    plain = step[step.kind == "plain"]
    spec = rows[(rows.kind == "speedup") & ~rows.anchor]
    out = {
        "step_time": {"planner": _stats(step.error), "datasheet": _stats(step.error_datasheet), **_coverage(step)},
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
                    if len(spec) else 0},
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
        out["peer"] = {"n": int(len(both)), "peer": _stats(both.peer_error), "planner": _stats(both.error)}
    return out


def _pct(x: float) -> str:
    return "-" if x != x else f"{x:.1%}"


def markdown(summary: dict, rows: pd.DataFrame, skipped: pd.DataFrame, corpus_path: str) -> str:
    from calibration.transfer_twoshot import markdown_note, markdown_rows  # it imports this module
    s = summary
    two = s.get("two_shot") or {}
    st, sp, dc = s["step_time"], s["speedup"], s["decision"]
    lines = [
        "# Transfer validation: predictions against published GPU measurements", "",
        f"Corpus: `{corpus_path}` ({len(rows) + len(skipped)} rows; {len(rows)} scored, {len(skipped)} not"
        " expressible). Nothing here was fitted to these rows. `python -m calibration.transfer` regenerates it.", "",
        "| what | rows | datasheet (before) MAPE | planner MAPE | planner worst |", "|---|---|---|---|---|",
        f"| decode step time (plain + serving ITL + run time / output token) | {st['planner']['n']} |"
        f" {_pct(st['datasheet']['mape'])} | {_pct(st['planner']['mape'])} | {_pct(st['planner']['worst'])} |",
        f"| of which plain step time only | {s['plain_only']['planner']['n']} | {_pct(s['plain_only']['datasheet']['mape'])} |"
        f" {_pct(s['plain_only']['planner']['mape'])} | {_pct(s['plain_only']['planner']['worst'])} |",
        f"| of which serving inter-token latency at a concurrency | {s['itl_only']['planner']['n']} |"
        f" {_pct(s['itl_only']['datasheet']['mape'])} | {_pct(s['itl_only']['planner']['mape'])} |"
        f" {_pct(s['itl_only']['planner']['worst'])} |",
        f"| of which run time per output token of static batches (prefill included) | {s['run_only']['planner']['n']} |"
        f" {_pct(s['run_only']['datasheet']['mape'])} | {_pct(s['run_only']['planner']['mape'])} |"
        f" {_pct(s['run_only']['planner']['worst'])} |",
        f"| speculative speedup ({sp['curves']} curves, {sp['moe_curves']} MoE; anchor rows excluded) | {sp['planner']['n']} |"
        f" {_pct(sp['datasheet']['mape'])} | {_pct(sp['planner']['mape'])} | {_pct(sp['planner']['worst'])} |",
        f"| speculate-or-not decision right | {dc['n']} | {_pct(dc['datasheet'])} | {_pct(dc['planner'])} | |",
        *markdown_rows(two), "",
        f"Step-time rows come from {len(st['sources'])} sources ({', '.join(st['sources'])}) on {len(st['gpus'])} GPU"
        f" types ({', '.join(st['gpus'])}), TP {st['tp']}, batch sizes {st['batch_sizes']}.", "",
        f"Plain step-time rows: {len(s['plain_only']['sources'])} sources ({', '.join(s['plain_only']['sources'])}) on"
        f" {len(s['plain_only']['gpus'])} GPU types ({', '.join(s['plain_only']['gpus'])}), TP {s['plain_only']['tp']},"
        f" batch sizes {s['plain_only']['batch_sizes']}.", "",
        "Targets (issue 11): step-time MAPE <= 12%, worst <= 25%; speedup MAPE <= 12%; decision right >= 95%.", "",
        *markdown_note(two)]
    if "peer" in s:
        p = s["peer"]
        lines += [f"Peer (aiconfigurator-core 0.12.0, its own TPOT estimate) on the {p['n']} plain and ITL rows it can"
                  f" express: MAPE {_pct(p['peer']['mape'])} (worst {_pct(p['peer']['worst'])}); the planner on the"
                  f" same rows: {_pct(p['planner']['mape'])} (worst {_pct(p['planner']['worst'])}).", ""]
    else:
        lines += ["Peer estimate: not run (`--peer` with the aiconfigurator-core package importable).", ""]
    lines += ["## By GPU", "", "| GPU | basis | step rows | datasheet MAPE | planner MAPE | worst | speedup rows | speedup MAPE |",
              "|---|---|---|---|---|---|---|---|"]
    for hw, g in s["by_gpu"].items():
        lines.append(f"| {hw} | {g['basis'].split(';')[0]} | {g['step_time']['n']} | {_pct(g['datasheet_step_time']['mape'])} |"
                     f" {_pct(g['step_time']['mape'])} | {_pct(g['step_time']['worst'])} | {g['speedup']['n']} |"
                     f" {_pct(g['speedup']['mape'])} |")
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
                     f" {'-' if peer is None or peer != peer else f'{peer:.3g} ms'} |")
    lines += ["", "## Not expressible", "", "| reason | rows |", "|---|---|"]
    for reason, n in skipped.groupby("reason").size().sort_values(ascending=False).items():
        lines.append(f"| {reason} | {n} |")
    return "\n".join(lines) + "\n"


def bands(summary: dict) -> dict:
    """Per GPU: the step-time and speedup MAPE on the corpus (the uncertainty every prediction quotes)."""
    out = {"_source": "calibration/data/transfer/transfer.md (python -m calibration.transfer)",
           "_date": dt.date.today().isoformat(),
           "_all": {"step_time_mape": summary["step_time"]["planner"]["mape"],
                    "step_time_worst": summary["step_time"]["planner"]["worst"],
                    "n": summary["step_time"]["planner"]["n"],
                    "speedup_mape": summary["speedup"]["planner"]["mape"]},
           "_datasheet": {"step_time_mape": summary["step_time"]["datasheet"]["mape"],
                          "n": summary["step_time"]["datasheet"]["n"]}}
    two = summary.get("two_shot") or {}
    if two.get("n"):
        out["_two_shot"] = {"model_error_log_p90": two["model_error_log_p90"], "n": two["n"], "curves": two["curves"],
                            "what": "90th percentile of |log(predicted / measured)| of two-point fits on held-out"
                                    " points of published speedup curves (calibration/transfer_twoshot.py)"}
    for hw, g in summary["by_gpu"].items():
        out[hw] = {"step_time_mape": g["step_time"]["mape"], "step_time_worst": g["step_time"]["worst"],
                   "n": g["step_time"]["n"], "speedup_mape": g["speedup"]["mape"], "basis": g["basis"].split(";")[0]}
    return json.loads(json.dumps(out, default=float).replace("NaN", "null"))


def two_shot(corpus: pd.DataFrame, rows: pd.DataFrame, summary: dict) -> pd.DataFrame:
    """Two-shot rows of the speedup curves (calibration/transfer_twoshot.py); their summary goes into
    ``summary["two_shot"]`` beside the zero-shot planner on the same rows."""
    from calibration.transfer_twoshot import score_two_shot, summarize_two_shot
    cases = [c for c in (case_for(r) for _, r in corpus.iterrows()) if isinstance(c, Case)]
    two = score_two_shot(cases)
    summary["two_shot"] = summarize_two_shot(two, rows)
    return two


def main(argv: list[str] | None = None) -> int:
    p = OneLineParser(prog="python -m calibration.transfer", description=__doc__.split("\n\n")[0])
    p.add_argument("--corpus", default=str(CORPUS), help="published corpus CSV")
    p.add_argument("--output-dir", default=str(OUT_DIR), help="where transfer.md / .json / rows CSV go")
    p.add_argument("--peer", action="store_true", help="also ask aiconfigurator-core for its own estimate")
    p.add_argument("--no-bands", action="store_true", help="do not rewrite simulator/data/transfer_error.json")
    args = p.parse_args(argv)

    def body() -> int:
        path = Path(args.corpus)
        if not path.is_file():
            raise PlannerError(f"--corpus {path}: not a file (the shipped corpus is {CORPUS.relative_to(REPO)})")
        corpus = pd.read_csv(path)
        rows, skipped = score(corpus, peer=args.peer)
        summary = summarize(rows)
        two = two_shot(corpus, rows, summary)
        text = markdown(summary, rows, skipped, str(path.relative_to(REPO) if path.is_relative_to(REPO) else path))
        write_files_atomically(args.output_dir, {
            "transfer.md": text, "transfer.json": json.dumps(summary, indent=1, default=float) + "\n",
            "transfer_rows.csv": rows.to_csv(index=False), "not_expressible.csv": skipped.to_csv(index=False),
            "transfer_twoshot_rows.csv": two.to_csv(index=False)})
        if not args.no_bands:
            write_atomically(BAND_FILE, json.dumps(bands(summary), indent=1) + "\n", flag="bands")
        print(text.split("\n## By GPU")[0])
        return 0

    return run_cli(body)


if __name__ == "__main__":
    sys.exit(main())
