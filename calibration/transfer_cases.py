"""Corpus rows made into scenarios the planner can price (calibration.transfer), or the reason it
cannot: the device, engine version, precision, draft and metric of each published number."""
from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.optimize import brentq

from calibration.transfer_sources import load_sources
from simulator.errors import PlannerError
from simulator.specs.engine_catalog import engine_versions, nearest_profile, release_running
from simulator.specs.models import list_models
from simulator.specs.scenario import build_scenario
from simulator.specs.scenario_sections import PLAIN_ONLY

# per-source facts (calibration/data/published/sources.toml, with their citations)
REPO = Path(__file__).resolve().parent.parent
CORPUS = REPO / "calibration" / "data" / "published" / "corpus.csv"
OUT_DIR = REPO / "calibration" / "data" / "transfer"
_SOURCES = load_sources()
# corpus device -> catalog hardware, with why when the source leaves the variant open
DEVICES = _SOURCES["devices"]
# the plain "A100" rows: the A100 variant each source ran
A100_BY_SOURCE = _SOURCES["a100_by_source"]
ENGINES = {"vllm": "vllm", "sglang": "sglang", "trtllm": "trtllm", "gpt-fast": "gpt-fast"}
# engine and version a source ran when the row does not say: its publication date's release line
SOURCE_ENGINES = _SOURCES["source_engines"]
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
# Sources whose FP8 runs leave the KV dtype unstated but quantize it with the weights
FP8_KV_WITH_FP8_WEIGHTS = _SOURCES["fp8_kv_with_fp8_weights"]
# Sources that benchmarked with random ("fake") weights: their MoE rows are not scored
RANDOM_WEIGHT_SOURCES = _SOURCES["random_weight_sources"]
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
    # a closed-loop benchmark at a concurrency ("batch_size = max concurrency"): the server runs at most its
    # own running-request cap of them at once (SGLang with speculation: 48), the others queue
    closed_loop: bool = False


# the columns a corpus row is read through (case_for); a copy given with --corpus needs them all
CORPUS_COLUMNS = ("source_id", "device", "num_gpus", "engine", "model", "tp", "ep", "weight_dtype", "kv_dtype",
                  "batch_size", "input_len", "output_len", "context_len", "draft_method", "k", "metric", "value",
                  "notes")

# numeric columns and their least value (value: the published figure, > 0 in every metric's unit)
CORPUS_NUMBERS = {"num_gpus": 1, "tp": 1, "ep": 1, "batch_size": 1, "input_len": 0, "output_len": 0,
                  "context_len": 0, "k": 0, "value": 1e-12}


def read_corpus(path: str | Path, flag: str = "--corpus") -> pd.DataFrame:
    """The published corpus (or a copy of it given with ``flag``): a regular UTF-8 CSV file with
    :data:`CORPUS_COLUMNS`; PlannerError naming the flag and the file else, never a pandas traceback."""
    import io

    from simulator.files import read_input_bytes
    data = read_input_bytes(path, "published corpus", flag=flag)
    where = f"{flag} {path}"
    try:
        corpus = pd.read_csv(io.BytesIO(data))
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError, ValueError) as err:
        raise PlannerError(f"{where}: not a readable corpus CSV ({(str(err).splitlines() or [''])[0][:100]});"
                           f" give {CORPUS.relative_to(REPO)} or a copy of it") from None
    missing = [c for c in CORPUS_COLUMNS if c not in corpus.columns]
    if missing:
        raise PlannerError(f"{where}: missing column(s) {', '.join(missing)}; a corpus has the columns of"
                           f" {CORPUS.relative_to(REPO)}")
    for col, low in CORPUS_NUMBERS.items():  # counts and the figure: a number (empty: not stated), never text
        values = pd.to_numeric(corpus[col], errors="coerce")
        bad = (corpus[col].notna() & ~np.isfinite(values.fillna(np.inf))) | (values < low)
        if col != "value":
            bad |= values.notna() & (values != values.round())
        if col in ("batch_size", "value"):
            bad |= values.isna()
        if bad.any():
            line = int(np.flatnonzero(bad.to_numpy())[0])
            raise PlannerError(f"{where}: line {line + 2}: {col} {str(corpus[col].iloc[line])[:30]!r} is not"
                               f" {'a finite number' if col == 'value' else 'a whole number'} >= {low:g};"
                               " fix or drop that row")
        corpus[col] = values
    return corpus


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
    """The engine profile a row ran on: its engine, and the profile the version rule picks for the version
    it states (or its source's release line), or the first release that runs its draft method where the one it
    states cannot (simulator/specs/engine_catalog.py release_running): its own profile, else the nearest release
    line's, the older at a tie (nearest_profile); the newest profile where no version is known."""
    name, version = SOURCE_ENGINES.get(row.source_id, (None, None))
    name = name or ENGINES.get(row.engine, "ideal")
    if not pd.isna(row.engine_version) and str(row.engine_version)[:1].isdigit():
        version = str(row.engine_version).split()[0]
    if version is not None:  # a run of a draft method ran on a release that has it (EAGLE-3 on SGLang "0.4.4")
        version = release_running(name, version, (_draft(row.draft_method) or "").split(":")[0]) or version
    return engine_table(name, version)


def engine_table(name: str, version: str | None) -> dict:
    """A scenario's [engine] table for engine ``name`` at ``version``: the profile the version rule picks
    (simulator/specs/engine_catalog.py nearest_profile), the newest where no version is known, none for an
    engine without versioned profiles."""
    versions = engine_versions(name)
    if not versions or not versions[0]:
        return {"name": name}
    if version is None:
        return {"name": name, "version": versions[-1]}
    return {"name": name, "version": nearest_profile(name, version)}


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
    # expert-parallel groups where the row states them (the planner's default, 1, slices every expert)
    ep = {"ep": int(row.ep)} if row.model in MOE_MODELS and not pd.isna(row.ep) else {}
    raw = {"model": {"name": row.model}, "hardware": {"name": hw, "tp": tp} | ep,
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
    if draft == "none":  # plain decoding: the n-gram draft is a placeholder, whichever release runs it
        raw[PLAIN_ONLY] = True
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
        return Case(row, "speedup", raw, float(row.value), hw_note, end_to_end=e2e,
                    closed_loop="max concurrency" in str(row.notes).lower())
    return f"metric {m} with draft {row.draft_method} is not scored"


def anchor_curve_key(row) -> tuple:
    """The speedup curve a row's acceptance is anchored on (source, device, model, draft, K, context, table)."""
    return (row.source_id, row.device, row.model, row.draft_method, int(row.k), row.context_len if not pd.isna(
        row.context_len) else -1, row.locator)


def speculative_running(sc, case: Case) -> int:
    """Requests the speculating server runs at once in the row's benchmark: B, or in a closed loop of B
    users the engine's own running-request cap with speculation where it is below B (the others queue:
    the published runs set no --max-running-requests)."""
    B = int(case.row.batch_size)
    cap = sc.engine.spec_max_running if sc.engine is not None else 0
    return min(B, cap) if case.closed_loop and cap else B


def scenario_for(raw: dict, basis: str, layer=None):
    """The row's scenario on a basis: "planner" or "physics" (the best evidence shipped for its device, its
    engine's profile) or "datasheet" (datasheet peaks, the ideal engine). Never the shipped learned layer
    (it has seen every row): ``layer``, a population learned without the row's source, is put on "planner"."""
    raw = json.loads(json.dumps(raw))
    if basis == "datasheet":
        raw["calibration"] = {"profile": "none"}
        raw["engine"] = {"name": "ideal"}
    raw.setdefault("calibration", {})["learned"] = False
    sc = build_scenario(raw, origin="corpus")
    return replace(sc, step_prior=layer) if basis == "planner" and layer is not None else sc
