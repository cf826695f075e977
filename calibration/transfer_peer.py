"""The peer's own estimate of a corpus row (aiconfigurator-core 0.12.0, its compiled step model and
measured tables), set beside the planner's in ``calibration.transfer --peer``. Optional: the package is
unpacked from its cached wheel next to the project (``make transfer``), never installed into it.

- plain and serving rows: its decode-step latency at the row's batch size and lengths;
- speculative speedups of multi-token prediction (MTP) rows that publish their acceptance length:
  AL x its plain decode step / its decode step verifying K + 1 tokens (``nextn = K``: the MTP layers'
  work and the K + 1 query tokens per request are in its step; acceptance, since its 0.12 line, is
  applied above its core, here from the row). Draft heads and draft models (EAGLE, n-gram, a small
  LM) are not in its step model, so their rows get no peer estimate.
"""
from __future__ import annotations

import contextlib
import functools
import io

import pandas as pd

from calibration.transfer_cases import MOE_MODELS

PEER_SYSTEMS = {"h100-sxm": "h100_sxm", "h200": "h200_sxm", "a100-80gb": "a100_sxm", "b200": "b200_sxm",
                "l40s": "l40s"}
PEER_MODELS = {"llama-3.1-8b": "meta-llama/Meta-Llama-3.1-8B", "llama-3.1-70b": "meta-llama/Meta-Llama-3.1-70B",
               "qwen3-32b": "Qwen/Qwen3-32B", "deepseek-v3": "deepseek-ai/DeepSeek-V3"}
MTP_MODELS = ("deepseek-v3",)  # models whose checkpoints carry multi-token-prediction layers


def _quant(case) -> dict:
    """The peer's quantization modes for the row's weights: nvfp4 experts with bf16 attention as the
    corpus spells them, static-scale fp8 GEMMs for fp8 weights (the peer's own reading of a per-tensor FP8
    checkpoint that does not mark its activations dynamic, as ModelOpt's do); otherwise what the peer infers from
    the checkpoint."""
    dtype = "" if pd.isna(case.row.weight_dtype) else str(case.row.weight_dtype)
    if dtype.startswith("nvfp4(moe)"):
        return {"moe_quant_mode": "nvfp4"}
    return {"gemm_quant_mode": "fp8_static"} if case.raw["precision"]["weights"] == "fp8" else {}


def _decode_step_ms(case, nextn: int) -> float | None:
    """The peer's decode step [ms] at the row's B and lengths with ``nextn`` MTP tokens; None where it
    refuses (no tables for the system, a model it does not know) or the package is not importable."""
    try:
        from aiconfigurator_core.sdk.engine import EngineHandle
    except ImportError:
        return None
    hw, model = case.raw["hardware"]["name"], case.raw["model"]["name"]
    if hw not in PEER_SYSTEMS or model not in PEER_MODELS:
        return None
    engine = case.raw["engine"]["name"] if case.raw["engine"]["name"] in ("vllm", "sglang", "trtllm") else "trtllm"
    inp = int(case.row.input_len) if not pd.isna(case.row.input_len) else case.raw["workload"]["context_len"]
    out = int(case.row.output_len) if not pd.isna(case.row.output_len) else 128
    tp = int(case.raw["hardware"]["tp"])
    # an MoE model's expert layers split the same GPUs: experts sliced over tp / ep, in ep groups, as the
    # planner's deployment has them (ep = 1 unless the row states it); the peer refuses a width mismatch
    ep = int(case.raw["hardware"].get("ep") or 1)
    moe = {"moe_tp_size": tp // ep, "moe_ep_size": ep} if model in MOE_MODELS else {}
    return _peer_step_ms(EngineHandle, PEER_MODELS[model], PEER_SYSTEMS[hw], engine, tp, nextn,
                         tuple(sorted((moe | _quant(case)).items())), int(case.row.batch_size), inp, out)


@functools.lru_cache(maxsize=None)
def _peer_step_ms(handle, model_id: str, system: str, engine: str, tp: int, nextn: int, options: tuple,
                  batch: int, inp: int, out: int) -> float | None:
    """One answer of the peer's compiled step model, kept: a pure function of its arguments that costs 2-3 s of
    native work (rows of one curve share their plain step)."""
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            h = handle.compile(model_id, system, engine, backend_version=None, tp_size=tp, nextn=nextn,
                               **dict(options))
            return float(h.decode_step_latency(batch, inp, out))
    except Exception:  # noqa: BLE001 - the peer refuses configurations it has no data for
        return None


def peer_tpot_ms(case) -> float | None:
    """The peer's decode-step estimate [ms] for a plain or serving row (None for other kinds)."""
    return _decode_step_ms(case, 0) if case.kind in ("plain", "itl") else None


def peer_speedup(case) -> float | None:
    """The peer's speedup for an MTP row with a published acceptance length (None otherwise)."""
    row = case.row
    if case.kind != "speedup" or str(row.draft_method) != "mtp" or case.raw["model"]["name"] not in MTP_MODELS \
            or pd.isna(row.acceptance_length) or case.end_to_end:
        return None
    plain, spec = _decode_step_ms(case, 0), _decode_step_ms(case, int(row.k))
    return None if plain is None or spec is None else float(row.acceptance_length) * plain / spec
