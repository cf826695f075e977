"""Paste-ready engine files: the draft checkpoint where the engine needs one, and the serve command
line with every flag the schedule assumes.

vLLM 0.33.0 ``SpeculativeConfig.__post_init__`` (vllm/config/speculative.py) refuses
``num_speculative_tokens`` without ``model`` for every method that loads weights of its own
("num_speculative_tokens was provided but without speculative model."); ngram derives its model,
MTP reads the target's own checkpoint. So eagle / eagle3 / draft_model files need ``"model"``:
the ``--draft-model PATH`` flag or ``[draft] checkpoint``, else, for a catalog draft model, its
Hugging Face id; otherwise a placeholder vLLM refuses (not a path, not a repository id) and a
warning that says so.

The serve line carries ``--tensor-parallel-size``, ``--max-num-seqs`` where memory binds or the plan
runs more sequences than the engine's own default on this GPU (the largest batch size the plan found
to fit; the default from the engine profile's [serving], e.g. 1024 on >= 70 GiB GPUs) and, where the
engine profile caps CUDA-graph
capture, ``--max-cudagraph-capture-size`` (vllm/engine/arg_utils.py of 0.33.0 defines all three).
"""
from __future__ import annotations

import json
import re
import shlex

import numpy as np

from simulator.specs.engines import serving_default

NEEDS_CHECKPOINT = {"eagle": "eagle", "eagle3": "eagle3", "model": "draft_model"}
PLACEHOLDER = "<DRAFT CHECKPOINT: pass --draft-model PATH>"
_HF_ID = re.compile(r"config\.json of ([\w.-]+/[\w.-]+)")


def hf_id(model) -> str | None:
    """A catalog model's Hugging Face id, read from its source line ('config.json of ORG/NAME')."""
    m = _HF_ID.search(getattr(model, "source", "") or "")
    return m[1] if m else None


def draft_checkpoint(scenario) -> str | None:
    """[draft] checkpoint (or --draft-model PATH), as given."""
    value = (scenario.raw.get("draft") or {}).get("checkpoint")
    return str(value) if value else None


def vllm_method(scenario) -> tuple[dict, list[str]]:
    """(vLLM speculative_config method and model, warnings) for the scenario's draft."""
    d = scenario.draft
    method = NEEDS_CHECKPOINT.get(d.method, d.method)
    cfg = {"method": method}
    if d.method not in NEEDS_CHECKPOINT:
        return cfg, []
    given = draft_checkpoint(scenario)
    if given:
        return cfg | {"model": given}, []
    if d.method == "model" and hf_id(d.model):
        return cfg | {"model": hf_id(d.model)}, []
    return cfg | {"model": PLACEHOLDER}, [
        f"speculative_config 'model' is a placeholder vLLM refuses ({method} loads a draft checkpoint of its own;"
        " vLLM 0.33.0 raises 'num_speculative_tokens was provided but without speculative model' without one):"
        " pass --draft-model PATH (or [draft] checkpoint) with the draft's path or Hugging Face id"]


# TensorRT-LLM decoding_type (llm_args.py DecodingConfig subclasses) and SGLang --speculative-algorithm
# (sglang/srt/arg_groups/fields/spec.py of 0.5.23: builtins EAGLE, EAGLE3, NEXTN, STANDALONE, NGRAM, ...)
TRTLLM_TYPE = {"eagle": "Eagle", "eagle3": "Eagle3", "mtp": "MTP", "model": "Draft_Target", "ngram": "NGram"}
SGLANG_ALGO = {"eagle": "EAGLE", "eagle3": "EAGLE3", "mtp": "NEXTN", "model": "STANDALONE", "ngram": "NGRAM"}


def checkpoint_or_placeholder(scenario) -> tuple[str | None, list[str]]:
    """The draft checkpoint the engine loads (None: the method needs none), with a warning for a placeholder."""
    if scenario.draft.method not in NEEDS_CHECKPOINT:
        return None, []
    cfg, warns = vllm_method(scenario)
    if not warns:
        return cfg["model"], []
    return cfg["model"], [f"the draft checkpoint is a placeholder the engine refuses ({scenario.draft.method} loads a"
                          " checkpoint of its own): pass --draft-model PATH (or [draft] checkpoint) with the draft's"
                          " path or Hugging Face id"]


def trtllm_draft_entry(scenario) -> tuple[dict, list[str]]:
    """decoding_type and speculative_model (1.2.x and 1.3 llm_args.py: EAGLE refuses a missing one)."""
    kind = TRTLLM_TYPE.get(scenario.draft.method)
    if kind is None:
        return {}, []
    ckpt, warns = checkpoint_or_placeholder(scenario)
    return {"decoding_type": kind} | ({"speculative_model": ckpt} if ckpt else {}), warns


def sglang_serve_command(pred, config_file: str = "adaptive.json") -> tuple[str, list[str]]:
    sc = pred.scenario
    parts = ["python", "-m", "sglang.launch_server", "--model-path", hf_id(sc.model) or sc.model.name]
    if sc.deployment.tp > 1:
        parts += ["--tp-size", str(sc.deployment.tp)]
    parts += ["--speculative-algorithm", SGLANG_ALGO.get(sc.draft.method, sc.draft.method.upper())]
    ckpt, warns = checkpoint_or_placeholder(sc)
    if ckpt and sc.draft.method != "mtp":
        parts += ["--speculative-draft-model-path", ckpt]
    if sc.draft.method in ("eagle", "eagle3"):
        parts += ["--speculative-eagle-topk", "1"]  # adaptive speculation runs EAGLE with topk 1 only
    # memory binds, or the plan runs more sequences than SGLang's own cap with speculation on (48)
    spec_cap = sc.engine.spec_max_running if sc.engine is not None else 0
    if (~pred.table.fits_memory).any() or (spec_cap and max_num_seqs(pred.table) > spec_cap):
        parts += ["--max-running-requests", str(max_num_seqs(pred.table))]
    parts += ["--speculative-adaptive", "--speculative-adaptive-config", config_file]
    return " ".join(shlex.quote(p) for p in parts), warns


def max_num_seqs(table) -> int:
    """The largest batch size that fits in memory (every planned one fits: the largest planned)."""
    fits = table.loc[table.fits_memory, "batch_size"].to_numpy()
    return int(fits.max()) if fits.size else int(np.asarray(table.batch_size).min())


def vllm_serve_command(pred, payload: dict) -> str:
    sc = pred.scenario
    target = hf_id(sc.model) or sc.model.name
    parts = ["vllm", "serve", target]
    if sc.deployment.tp > 1:
        parts += ["--tensor-parallel-size", str(sc.deployment.tp)]
    # memory binds (the engine must not admit more sequences) or the plan goes past the engine's default
    if (~pred.table.fits_memory).any() or _above_default(pred):
        parts += ["--max-num-seqs", str(max_num_seqs(pred.table))]
    cap = getattr(sc.engine, "max_capture_size", 0) if sc.engine is not None and sc.engine.name == "vllm" else 0
    if cap:
        parts += ["--max-cudagraph-capture-size", str(int(cap))]
    parts += ["--speculative-config", json.dumps(payload, separators=(",", ":"))]
    return " ".join(shlex.quote(p) for p in parts)


def engine_default_seqs(pred) -> int | None:
    """The engine's own running-request cap on the scenario's GPU (engine profile [serving])."""
    sc = pred.scenario
    return serving_default(sc.engine, "max_num_seqs", sc.hardware.memory_bytes, sc.hardware.name)


def _above_default(pred) -> bool:
    default = engine_default_seqs(pred)
    return bool(default) and max_num_seqs(pred.table) > default


def serve_notes(pred) -> list[str]:
    t = pred.table
    out = []
    if _above_default(pred) and t.fits_memory.all():
        out.append(f"--max-num-seqs {max_num_seqs(t)}: the plan runs batch sizes up to {max_num_seqs(t)}, above"
                   f" {pred.scenario.engine.display_name}'s default of {engine_default_seqs(pred)} on"
                   f" {pred.scenario.hardware.name}")
    if (~t.fits_memory).any():
        first = int(t.loc[~t.fits_memory, "batch_size"].min())
        out.append(f"--max-num-seqs {max_num_seqs(t)}: batch sizes from {first} do not fit in memory"
                   f" ({pred.scenario.hardware.memory_bytes / 1e9:.0f} GB x"
                   f" {pred.scenario.deployment.memory_utilization:.0%} per GPU)")
    return out
