"""Dashboard plumbing without Streamlit: controls <-> scenario dicts, validation matching (uploads: dashboard/uploads.py).

Everything here is pure Python so it can be tested and benchmarked without a running app. The
physics stays in ``simulator``: this module only translates what the user picked into the scenario
layout that :func:`simulator.specs.scenario.build_scenario` reads, and reads measured files.
"""
from __future__ import annotations

import copy
import json
import os
import re
from pathlib import Path

from simulator.specs.drafts import named_drafts
from simulator.errors import PlannerError
from simulator.specs.engines import default_engine, engine_names, engine_versions
from simulator.specs.models import list_models, load_model
from simulator.specs.scenario import FALLBACK_RATE, REPO_ROOT, SCENARIO_DIR, read_scenario_file
from simulator.specs.scenario_sections import default_weight_dtype
from simulator.specs.settings import default

CALIBRATION_DIR = REPO_ROOT / "calibration" / "data"
NO_PROFILE = "none (datasheet only)"
AUTO_PROFILE = "best shipped for the device"  # its measured tables, else its published prior (the help says so)
TP_CHOICES = [1, 2, 4, 8, 16]
EP_CHOICES = [1, 2, 4, 8]
DRAFT_CHOICES = list(named_drafts())  # the drafts --list drafts names too, SGLang's 8x63 EAGLE trees among them
ACC_IID, ACC_LIST, ACC_BENCH, ACC_METRICS, ACC_FILE = ("i.i.d. rate", "per-position list", "vLLM bench JSON",
                                                       "vLLM /metrics dump", "acceptance file (any format)")
ACC_MODES = [ACC_IID, ACC_LIST, ACC_BENCH, ACC_METRICS, ACC_FILE]
# the engines the CLI's --engine takes, the three with engine files first; labels as their users name them
ENGINE_LABELS = {"vllm": "vLLM", "sglang": "SGLang", "trtllm": "TensorRT-LLM", "ideal": "none (kernels only)",
                 "gpt-fast": "gpt-fast", "magicdec": "MagicDec"}
BATCH_MAX = 1024
K_MAX_LIMIT = 16
MAX_RATE = 0.99  # Acceptance needs rates < 1
# the checkbox for [workload] allow_context_beyond_model; the scenario's refusal names it (compute.prediction)
ALLOW_BEYOND_LABEL = "Allow context beyond the model's trained length (RoPE scaling)"
ATTENTION_AUTO = "auto"  # attention projections: the checkpoint's exclude list, else the weights' (engines: "auto")
ALLOW_BEYOND_REMEDY = f"tick '{ALLOW_BEYOND_LABEL}' under the context length in the sidebar"


# --- scenario files and calibration profiles --------------------------------------------------

def scenario_names() -> list[str]:
    names = sorted(p.stem for p in SCENARIO_DIR.glob("*.toml"))
    return (["default"] if "default" in names else []) + [n for n in names if n != "default"]


def engine_choices() -> list[str]:
    """Engine names for the selector: vLLM, SGLang, TensorRT-LLM first, then the other profiles."""
    names = engine_names()
    return [n for n in ENGINE_LABELS if n in names] + [n for n in names if n not in ENGINE_LABELS]


def engine_label(name: str) -> str:
    return ENGINE_LABELS.get(name, name)


def release_choices(engine: str) -> list[str]:
    """The engine's profiled releases, newest first (what --engine-version takes)."""
    return list(reversed(engine_versions(engine)))


def profile_files() -> dict[str, str]:
    """Label -> path of calibration profiles (calibration/data/*.json, plus $DSD_PROFILE_DIR); the
    sidecars written beside raw measurements (NAME.raw.csv.meta.json) are not profiles."""
    dirs = [CALIBRATION_DIR] + ([Path(os.environ["DSD_PROFILE_DIR"])] if os.environ.get("DSD_PROFILE_DIR") else [])
    out = {}
    for d in dirs:
        for p in sorted(Path(d).glob("*.json")):
            if not p.name.endswith(".meta.json"):
                out[p.name] = str(p)
    return out


def vocabulary(model: str) -> int:
    """The vocabulary size of a catalog model or an uploaded config.json's path."""
    return load_model(model).vocab_size


def draft_models_for(target: str) -> list[str]:
    """Catalog models that can draft for ``target``: the same vocabulary, fewer parameters; smallest first."""
    t = load_model(target)
    fits = [load_model(m) for m in list_models() if m != t.name]
    fits = [m for m in fits if m.vocab_size == t.vocab_size and m.total_params() < t.total_params()]
    return [m.name for m in sorted(fits, key=lambda m: m.total_params())]


def profile_hardware(path: str) -> str:
    """The catalog hardware a profile was fitted on (PlannerError when it is not a profile)."""
    from simulator.specs.profile import load_profile

    return load_profile(path).hardware


def rates_text(rates) -> str:
    return ", ".join(f"{float(r):g}" for r in rates)


def parse_rates_text(text: str) -> list[float]:
    """'0.8, 0.7 0.6' -> [0.8, 0.7, 0.6]; PlannerError naming the bad item."""
    items = [t for t in re.split(r"[,\s;]+", text.strip()) if t]
    if not items:
        raise PlannerError("per-position acceptance: enter at least one rate, e.g. 0.8, 0.7, 0.6")
    out = []
    for t in items:
        try:
            r = float(t)
        except ValueError:
            raise PlannerError(f"per-position acceptance: '{t}' is not a number") from None
        if not 0.0 <= r < 1.0:
            raise PlannerError(f"per-position acceptance: rate {t} outside [0, 1)")
        out.append(r)
    return out


def controls_from_scenario(raw: dict) -> dict:
    """Widget values (session-state keys) that reproduce a scenario file."""
    hw = raw.get("hardware", {})
    prec = raw.get("precision", {})
    wl = raw.get("workload", {})
    acc = raw.get("acceptance", {})
    draft = raw.get("draft", {})
    rates = acc.get("rates", [acc.get("rate", FALLBACK_RATE)])
    batch = wl.get("batch_sizes", default("workload", "batch_sizes"))
    try:
        from simulator.specs.scenario import parse_batch_sizes
        bs = parse_batch_sizes(batch)
        b_lo, b_hi = int(bs.min()), int(min(bs.max(), BATCH_MAX))
    except PlannerError:
        b_lo, b_hi = 1, 256
    k_max = int(min(wl.get("k_max", default("workload", "k_max")), K_MAX_LIMIT))
    from simulator.specs.hardware import load_hardware
    base = load_hardware(hw.get("name", "h100-sxm"))
    custom = any(k in hw for k in ("peak_bf16_flops_per_s", "hbm_bandwidth_bytes_per_s",
                                   "interconnect_bandwidth_bytes_per_s"))
    model = raw.get("model", {}).get("name", "llama-3.1-8b")
    profile = raw.get("calibration", {}).get("profile")
    engine = raw.get("engine", {}).get("name") or default_engine(base.kind)
    engine = engine if engine in engine_names() else default_engine(base.kind)
    release = str(raw.get("engine", {}).get("version") or release_choices(engine)[0])
    return {
        "engine_name": engine,
        "engine_version": release if release in release_choices(engine) else release_choices(engine)[0],
        "hw_name": hw.get("name", "h100-sxm"),
        "hw_custom": custom,
        "hw_peak_tflops": float(hw.get("peak_bf16_flops_per_s", base.peak_bf16_flops_per_s)) / 1e12,
        "hw_bw_tbs": float(hw.get("hbm_bandwidth_bytes_per_s", base.hbm_bandwidth_bytes_per_s)) / 1e12,
        # 0: all-reduces as the measured tables (or the datasheet link) give them
        "hw_busbw_gbs": float(hw.get("interconnect_bandwidth_bytes_per_s", 0.0)) / 1e9,
        "tp": int(hw.get("tp", default("hardware", "tp"))),
        "ep": int(hw.get("ep", 1)),
        "layout": hw.get("layout") or ("tp-ep" if int(hw.get("ep", 1)) > 1 else "tp"),
        "reuse": float((raw.get("routing") or {}).get("reuse", default("routing", "reuse"))),
        "model_src": "catalog",
        "model_name": model if model in list_models() else list_models()[0],
        "draft_method": draft.get("method", default("draft", "method")),
        "draft_model": draft.get("model", "llama-3.2-1b") if draft.get("model") in list_models() else "llama-3.2-1b",
        "acc_mode": ACC_IID if len(rates) == 1 else ACC_LIST,
        "acc_rate": float(min(rates[0], MAX_RATE)),
        "acc_list": rates_text(rates),
        "acc_band": float(acc.get("band", default("acceptance", "band"))),
        "context_len": int(wl.get("context_len", default("workload", "context_len"))),
        "allow_beyond": bool(wl.get("allow_context_beyond_model", default("workload", "allow_context_beyond_model"))),
        "w_dtype": prec.get("weights", default_weight_dtype(load_model(model)) if model in list_models()
                            else default("precision", "weights")),
        "a_dtype": prec.get("activations", default("precision", "activations")),
        "kv_dtype": prec.get("kv_cache", default("precision", "kv_cache")),
        "attn_dtype": prec.get("attention", ATTENTION_AUTO),
        "bs_range": (b_lo, max(b_hi, b_lo)),
        "k_max": k_max,
        "fixed_k": int(min(wl.get("fixed_k", default("workload", "fixed_k")), k_max)),
        "calibration": Path(profile).name if profile and profile != "none" else (NO_PROFILE if profile else AUTO_PROFILE),
    }


def read_scenario(name: str) -> dict:
    """The raw scenario dict of a bundled scenario (TOML layout, with _base_dir)."""
    raw = read_scenario_file(SCENARIO_DIR / f"{name}.toml")
    raw.pop("_path", None)
    return raw


def scenario_raw(base: dict, c: dict, *, acceptance: list[float], acceptance_source: str,
                 model: str, profile: str | None, deployment_fit: str | None = None,
                 physics_only: bool = False, rank_tail: float | None = None) -> dict:
    """Overlay the controls ``c`` on a scenario dict (keeps its routing, expert dtype, open sections);
    ``rank_tail``: a draft tree's rank tail that goes with ``acceptance`` (a tree's fit: its rates are top-1 rates
    per depth, specs.tree_acceptance), None where the rates are what they say."""
    raw = copy.deepcopy(base)
    raw.setdefault("model", {})["name"] = model
    raw["model"].pop("source", None)
    hw = raw.setdefault("hardware", {})
    for key in ("peak_bf16_flops_per_s", "hbm_bandwidth_bytes_per_s", "interconnect_bandwidth_bytes_per_s"):
        hw.pop(key, None)
    hw.update(name=c["hw_name"], tp=int(c["tp"]), ep=int(c["ep"]))
    hw.pop("dp", None)
    layout = c.get("layout", "tp")
    if layout == "tp" and int(c["ep"]) > 1:
        layout = "tp-ep"  # the EP control asks for expert parallelism
    hw["layout"] = layout
    if layout == "dp-ep":
        hw.pop("ep", None)  # DP attention + EP: experts over all TP GPUs (dp = ep = tp)
    # always written: without it the scenario falls back to the default reuse (0.5), so 0 would read as 0.5
    raw.setdefault("routing", {})["reuse"] = float(c.get("reuse", default("routing", "reuse")))
    if c["hw_custom"]:
        hw["peak_bf16_flops_per_s"] = float(c["hw_peak_tflops"]) * 1e12
        hw["hbm_bandwidth_bytes_per_s"] = float(c["hw_bw_tbs"]) * 1e12
        if float(c.get("hw_busbw_gbs", 0.0)) > 0:
            hw["interconnect_bandwidth_bytes_per_s"] = float(c["hw_busbw_gbs"]) * 1e9
    prec = raw.setdefault("precision", {})
    prec.update(weights=c["w_dtype"], activations=c["a_dtype"], kv_cache=c["kv_dtype"])
    if c.get("attn_dtype", ATTENTION_AUTO) == ATTENTION_AUTO:  # the checkpoint's exclude list, else the weights'
        prec.pop("attention", None)
    else:
        prec["attention"] = c["attn_dtype"]
    engine = raw.setdefault("engine", {})
    engine.update(name=c["engine_name"])
    if c.get("engine_version"):
        engine["version"] = c["engine_version"]
    else:
        engine.pop("version", None)
    raw["draft"] = ({"method": "model", "model": c["draft_model"]} if c["draft_method"] == "model"
                    else {"method": c["draft_method"]})
    raw["acceptance"] = {"rates": [float(r) for r in acceptance], "source": acceptance_source}
    if rank_tail is not None:
        raw["acceptance"]["rank_tail"] = float(rank_tail)
    if float(c.get("acc_band", 0.0)) > 0:
        raw["acceptance"]["band"] = float(c["acc_band"])
    wl = raw.setdefault("workload", {})
    lo, hi = c["bs_range"]
    wl.update(context_len=int(c["context_len"]), batch_sizes=f"{int(lo)}-{int(hi)}", k_max=int(c["k_max"]),
              fixed_k=int(c["fixed_k"]))
    if c.get("allow_beyond"):
        wl["allow_context_beyond_model"] = True
    else:
        wl.pop("allow_context_beyond_model", None)
    raw.pop("calibration", None)
    if profile:
        raw["calibration"] = {"profile": profile}
    if deployment_fit:
        raw.setdefault("calibration", {})["deployment"] = deployment_fit
    if physics_only:  # the physics alone: no engine terms learned from published measurements (--physics-only)
        raw.setdefault("calibration", {})["learned"] = False
    return raw


def scenario_key(raw: dict) -> str:
    """A stable cache key for a scenario dict."""
    return json.dumps(raw, sort_keys=True, default=str)
