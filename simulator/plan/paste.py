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

from simulator.plan.runner_advice import v1_runner_runs_the_table
from simulator.specs.drafts import verify_drafts
from simulator.specs.engines import serving_default

NEEDS_CHECKPOINT = {"eagle": "eagle", "eagle3": "eagle3", "model": "draft_model", "dflash": "dflash", "dspark": "dspark",
                    "p-eagle": "eagle3", "pard": "draft_model"}
# vLLM 0.33.0 vllm/config/speculative.py: P-EAGLE is method eagle3 and PARD method draft_model, each with
# parallel_drafting = true (max_num_new_slots_for_drafting's table); dflash / dspark set it themselves
PARALLEL_DRAFTING = ("p-eagle", "pard")
PARD_CHECKPOINTS = {"llama-3.2-1b": "amd/PARD-Llama-3.2-1B"}  # AMD's published PARD drafts of catalog models
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
    cfg = {"method": method} | ({"parallel_drafting": True} if d.method in PARALLEL_DRAFTING else {})
    if d.method not in NEEDS_CHECKPOINT:
        return cfg, []
    given = draft_checkpoint(scenario)
    if given:
        return cfg | {"model": given}, []
    if d.method == "pard" and d.model.name in PARD_CHECKPOINTS:
        return cfg | {"model": PARD_CHECKPOINTS[d.model.name]}, []
    if d.method == "model" and hf_id(d.model):
        return cfg | {"model": hf_id(d.model)}, []
    return cfg | {"model": PLACEHOLDER}, [
        f"speculative_config 'model' is a placeholder vLLM refuses ({method} loads a draft checkpoint of its own;"
        " vLLM 0.33.0 raises 'num_speculative_tokens was provided but without speculative model' without one):"
        " pass --draft-model PATH (or [draft] checkpoint) with the draft's path or Hugging Face id"]


# TensorRT-LLM decoding_type (llm_args.py DecodingConfig subclasses) and SGLang --speculative-algorithm
# (sglang/srt/arg_groups/fields/spec.py of 0.5.23: builtins EAGLE, EAGLE3, NEXTN, STANDALONE, NGRAM, ...)
TRTLLM_TYPE = {"eagle": "Eagle", "eagle3": "Eagle3", "mtp": "MTP", "model": "Draft_Target", "ngram": "NGram"}
SGLANG_ALGO = {"eagle": "EAGLE", "eagle3": "EAGLE3", "mtp": "NEXTN", "model": "STANDALONE", "ngram": "NGRAM",
               "dflash": "DFLASH", "dspark": "DSPARK"}

# Where each block / tree drafter runs (checked against the wheels named; one line per refusal).
VLLM_CHECKED = "0.33.0"  # dflash, dspark (SpeculativeMethod), parallel_drafting (P-EAGLE, PARD)
SGLANG_CHECKED = "0.5.23"  # DFLASH, DSPARK (arg_groups/fields/spec.py builtins); EAGLE trees (topk > 1)


def check_draft_export(draft, fmt: str, version: str) -> None:
    """Refuse, in one line naming a release that runs it, an engine file for a draft the engine (or that
    release) does not run: trees are SGLang's (vLLM and TensorRT-LLM schedules drive chains), P-EAGLE and
    PARD vLLM's, DFlash and DSpark vLLM's and SGLang's; releases before the ones checked are not claimed."""
    from simulator.errors import PlannerError
    from simulator.specs.versions import parse_version
    label = draft.label
    if fmt in ("vllm", "vllm-ctx"):
        if draft.is_tree:
            raise PlannerError(f"--draft {label}: vLLM {version} runs EAGLE chains only (no topk > 1 tree); SGLang"
                               f" {SGLANG_CHECKED} runs EAGLE trees: use --format sglang")
        if draft.is_block and fmt == "vllm" and parse_version(version, what="--export-version") < \
                parse_version(VLLM_CHECKED):
            raise PlannerError(f"--draft {label}: not verified in vLLM {version}; vLLM {VLLM_CHECKED} runs it"
                               f" ({cfg_text(draft)}): use --export-version {VLLM_CHECKED}")
    elif fmt == "trtllm":
        if draft.is_tree or draft.method in ("dflash", "dspark", "p-eagle"):
            where = f"SGLang {SGLANG_CHECKED} (--format sglang)" if draft.is_tree else \
                f"vLLM {VLLM_CHECKED} (--format vllm)"
            raise PlannerError(f"--draft {label}: TensorRT-LLM {version}'s draft_len_schedule does not drive it;"
                               f" {where} runs it")
    elif fmt in ("sglang", "sglang-sps"):
        if fmt == "sglang-sps" and draft.is_tree:  # its probes are B (K + 1) tokens: a chain's or a block's step
            raise PlannerError(f"--draft {label}: the DSpark step-cost table (--format sglang-sps) probes steps of"
                               f" B (K + 1) tokens, and a tree verifies up to its {draft.tree_tokens} draft tokens +"
                               " the root per sequence at one fixed K: use --format sglang (its launch flags)")
        if draft.method in ("p-eagle", "pard"):
            raise PlannerError(f"--draft {label}: SGLang {version} has no {label} algorithm (its builtins: EAGLE,"
                               f" EAGLE3, NEXTN, STANDALONE, NGRAM, DFLASH, DSPARK, UNO); vLLM {VLLM_CHECKED} runs"
                               " it: use --format vllm")
        if (draft.is_tree or draft.is_block) and parse_version(version, what="--export-version") < \
                parse_version(SGLANG_CHECKED):
            raise PlannerError(f"--draft {label}: not verified in SGLang {version}; SGLang {SGLANG_CHECKED} runs it:"
                               f" use --export-version {SGLANG_CHECKED}")


def cfg_text(draft) -> str:
    """How vLLM names the draft in speculative_config."""
    method = NEEDS_CHECKPOINT.get(draft.method, draft.method)
    return f"method {method}" + (", parallel_drafting true" if draft.method in PARALLEL_DRAFTING else "")


def sglang_launch_flags(draft, k: int) -> dict:
    """SGLang 0.5.23 server flags (field names of sglang/srt/arg_groups/fields/spec.py Spec) that run ``draft``
    at K drafts: an EAGLE tree at depth K (--speculative-num-steps K, --speculative-eagle-topk T,
    --speculative-num-draft-tokens N + 1: the verify width counts the root, as SGLang's _handle_eagle_family
    sets it to num_steps + 1 for topk 1); DFLASH / DSPARK verify K + 1 (their block) with one step, topk 1."""
    if draft.is_tree:  # a shallow tree holds at most T + (K - 1) T^2 candidates (specs.drafts.verify_drafts)
        return {"speculative_algorithm": SGLANG_ALGO[draft.method], "speculative_num_steps": int(k),
                "speculative_eagle_topk": int(draft.topk),
                "speculative_num_draft_tokens": int(verify_drafts(draft, k)) + 1}
    return {"speculative_algorithm": SGLANG_ALGO[draft.method], "speculative_num_steps": 1,
            "speculative_eagle_topk": 1, "speculative_num_draft_tokens": int(k) + 1}


def flags_command(pred, flags: dict) -> tuple[str, list[str]]:
    """`python -m sglang.launch_server ...` with ``flags`` (and the draft checkpoint)."""
    sc = pred.scenario
    parts = ["python", "-m", "sglang.launch_server", "--model-path", hf_id(sc.model) or sc.model.name]
    if sc.deployment.tp > 1:
        parts += ["--tp-size", str(sc.deployment.tp)]
    for key, value in flags.items():
        parts += ["--" + key.replace("_", "-"), str(value)]
    ckpt, warns = checkpoint_or_placeholder(sc)
    if ckpt:
        parts += ["--speculative-draft-model-path", ckpt]
    return " ".join(shlex.quote(p) for p in parts), warns


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
    # the per-batch-size table runs as planned on the V1 runner where the default one drafts its largest K always
    parts = (["VLLM_USE_V2_MODEL_RUNNER=0"] if v1_runner_runs_the_table(sc) else []) + ["vllm", "serve", target]
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
    if v1_runner_runs_the_table(pred.scenario):
        release = pred.scenario.engine.release_asked
        out.append(f"VLLM_USE_V2_MODEL_RUNNER=0: vLLM {release} runs {pred.scenario.draft.method} on Model Runner V2"
                   " by default, which drafts num_speculative_tokens at every step whatever K the table gives a batch"
                   " size; the V1 runner drafts each batch size's K (simulator/data/engine_settings.toml"
                   " dsd_drafts_max)")
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


def sglang_fixed_export(pred, table, version: str, planned_batch_size=None):
    """SGLang launch flags for a draft its adaptive config cannot drive (an EAGLE tree: adaptive speculation
    needs topk 1; DFLASH / DSPARK: one block step): one fixed K for the batch size(s) the user plans to serve at
    (an int, a (lo, hi) range, or None: every evaluated batch size that fits; simulator/plan/exports/fixed_k.py),
    as a flag dict (``payload``), rows of K* and the share of the best goodput SGLang keeps, and the launch line."""
    from simulator.plan.exports.common import Export, k_ranges
    from simulator.plan.exports.fixed_k import choose_fixed_k
    choice = choose_fixed_k(table, planned_batch_size)
    k = choice.k
    b = np.asarray(table.batch_sizes, dtype=int)
    # K* of each batch size alone (the best goodput there, as predict's table), not the compressed schedule: a
    # fixed K has no ranges to save
    k1 = np.asarray(table.best_k(np.ones(len(table.ks), dtype=bool))[:, table.context_index], dtype=int)
    d = pred.scenario.draft
    flags = sglang_launch_flags(d, k)
    rows = []
    for lo, hi, kk in k_ranges(b, k1):  # one row per run of K*, with the share of its best goodput K keeps
        here = choice.share[(b >= lo) & (b <= hi)]
        rows.append({"batch sizes": f"{lo}-{hi}" if lo != hi else str(lo), "K*": kk, "SGLang runs": k,
                     "share of the best goodput": _share_text(here)})
    what = (f"tree depth (--speculative-num-steps) {k}, topk {d.topk},"  # the nodes a depth-K tree holds, as flags
            f" {flags['speculative_num_draft_tokens'] - 1} draft tokens + the root"
            if d.is_tree else f"block of {k} drafts (--speculative-num-draft-tokens {k + 1})")
    notes = [f"SGLang runs one fixed K for {d.label} (adaptive speculation needs EAGLE with topk 1): {what}",
             choice.chosen_for()]
    cmd, ck_warns = flags_command(pred, flags)
    return Export("sglang", version, flags, rows, list(choice.warnings) + ck_warns, notes, cmd, choice.chosen_for())


def _share_text(shares: np.ndarray) -> str:
    """'87%-93%' over a run of batch sizes; 'does not fit' where K fits at none, and says where it stops."""
    ok = shares[np.isfinite(shares)]
    if not ok.size:
        return "does not fit"
    lo, hi = f"{ok.min():.0%}", f"{ok.max():.0%}"
    return (lo if lo == hi else f"{lo}-{hi}") + ("" if ok.size == shares.size else " (then does not fit)")
