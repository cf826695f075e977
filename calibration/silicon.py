"""Silicon check: the planner's serving TPOT against end-to-end runs it never saw.

aiconfigurator-core 0.12.0 ships ``systems/silicon_sample.csv``: serving runs of its vendor's collection
(H100, H200, B200, B300, GB200; vLLM, SGLang, TensorRT-LLM; Llama-3.1, Qwen3, DeepSeek-V3/R1, gpt-oss,
MiniMax-M2.5, Kimi-K2.5) with the measured time to first token and time per output token at a client
concurrency. Nothing of the planner was learned from them (the learned layer reads only
``calibration/data/published/``), so they judge it the way a deployment it never saw would.

Each aggregated ("agg") row becomes a scenario (``calibration/data/validation/silicon_map.toml`` says how)
and runs through the same closed-loop serving simulation as the corpus's serving rows
(:func:`calibration.transfer_serving.closed_loop`: ``concurrency`` users, each sending its next request when the
last finishes, prefills chunked into the decode steps). The planner's TPOT is the run's median per-request
time per output token; the sample's is its benchmark's figure (the statistic is not stated: a mean over
requests, close to the median in a closed loop of equal requests). Disaggregated rows (prefill and decode
on separate pools) and rows the planner cannot express are listed with the reason.

    python -m calibration.silicon            # writes calibration/data/validation/silicon/

A full run (no ``--system`` / ``--limit``) also writes ``simulator/data/serving_error.json``: the errors by GPU
and engine, which a prediction on that GPU and engine quotes (:func:`simulator.specs.uncertainty.serving_check`).
"""
from __future__ import annotations

import argparse
import datetime as dt
import io
import json
import math
import sys
import tomllib
import warnings
from pathlib import Path

import pandas as pd

from calibration import gpu_tables as gt
from calibration.transfer_serving import closed_loop
from calibration.transfer_cases import MOE_REUSE, REPO, engine_table, scenario_for
from simulator.cli.common import OneLineParser, command, write_atomically, write_files_atomically
from simulator.errors import PlannerError, PlannerWarning
from simulator.specs.hardware import FP4_DTYPES, load_hardware
from simulator.specs.models import load_model
from simulator.specs.scenario import build_scenario
from simulator.specs.scenario_sections import PLAIN_ONLY
from simulator.specs.uncertainty import PHYSICS_ONLY_CHECKS

SILICON_FILE = "silicon_sample.csv"  # relative to the package's systems/ folder
MAP_FILE = REPO / "calibration" / "data" / "validation" / "silicon_map.toml"
OUT_DIR = REPO / "calibration" / "data" / "validation" / "silicon"
CHECK_FILE = REPO / "simulator" / "data" / "serving_error.json"
CONFIG_COLUMNS = ["model_path", "system", "backend", "backend_version", "gemm_quant_mode", "moe_quant_mode",
                  "tp_size", "attention_dp_size", "moe_tp_size", "moe_ep_size"]
BANDS = [(1, 8), (9, 32), (33, 128), (129, 100_000)]


def read_silicon(src: gt.TableSource) -> pd.DataFrame:
    """The sample's rows, as shipped."""
    return pd.read_csv(io.BytesIO(src.read_bytes(SILICON_FILE)))


def load_map(path: Path = MAP_FILE) -> dict:
    return tomllib.loads(path.read_text())


def _whole(v) -> int | None:
    return None if pd.isna(v) or float(v) != int(v) else int(v)


def layout_for(row, dense_model: bool = False) -> dict | str:
    """The [hardware] parallel layout of a row: tensor parallel (experts sliced or in EP groups inside
    the TP group) or data-parallel attention with experts over every GPU; anything else is a reason."""
    tp, dp, mtp, mep = (_whole(row[c]) for c in ("tp_size", "attention_dp_size", "moe_tp_size", "moe_ep_size"))
    dp = 1 if pd.isna(row["attention_dp_size"]) else dp  # not stated: no data-parallel attention
    if not tp or not dp:
        return "TP or attention DP size missing or zero"
    if not dense_model:  # a dense model's expert sizes are blank, 0 or 1 in the sample: they mean nothing
        if not (mtp and mep):
            return "expert TP or EP size missing or zero"
    else:
        mtp, mep = tp * dp, 1
    if dp == 1:
        if mtp * mep != tp:
            return f"experts over {mtp} x {mep} GPUs, attention over {tp}: not one group"
        return {"tp": tp} | ({"ep": mep} if mep > 1 else {})
    if mtp == 1 and mep == tp * dp:  # dp attention groups of tp GPUs each, experts over all of them
        return {"tp": tp * dp, "layout": "dp-ep", "dp": dp, "ep": tp * dp}
    return f"attention DP {dp} x TP {tp} with experts over {mtp} x {mep}: a layout the planner has no name for"


def precision_for(row, model: str, hardware, kv_rule: dict) -> dict | str:
    """The [precision] table of a row from its quantization modes (silicon_map.toml [kv_cache] for the KV)."""
    gemm = "bf16" if pd.isna(row.gemm_quant_mode) else str(row.gemm_quant_mode)
    moe = "bf16" if pd.isna(row.moe_quant_mode) else str(row.moe_quant_mode)
    spec = load_model(model)
    if spec.expert_weight_dtype in FP4_DTYPES and gemm == "nvfp4":  # a release with FP4 experts (gpt-oss's
        out = {"weights": "bf16", "activations": "bf16", "experts": spec.expert_weight_dtype}  # MXFP4): its own
    elif gemm == "nvfp4":
        if "nvfp4" not in (hardware.fp4_formats or ()):
            return f"NVFP4 on {hardware.name}, which has no FP4 tensor cores"
        out = {"weights": "nvfp4", "activations": "nvfp4"}
    elif gemm == "int4_wo":  # INT4 weight-only (group 32) routed experts, the rest bf16 (Kimi-K2.5's release)
        out = {"weights": "bf16", "activations": "bf16", "experts": "int4"}
    elif gemm == "fp8" and moe == "fp8":  # per-tensor fp8 GEMMs, fp8 activations
        out = {"weights": "fp8", "activations": "fp8"}
    elif "fp8_block" in (gemm, moe):
        # 128 x 128 block scales, activations quantized per token group inside the kernel: the planner's block
        # kernel where the catalog model holds block-scaled fp8 (bf16 activations in, fp8 math), else its
        # per-tensor fp8 kernel (the same fp8 x fp8 math)
        out = {"weights": "fp8", "activations": "bf16" if spec.weight_block_size else "fp8"}
    elif gemm == "bf16":
        out = {"weights": "bf16", "activations": "bf16"}
    else:
        return f"quantization {gemm} / {moe} has no planner dtype"
    if spec.is_moe and "experts" not in out:  # the row's mode covers the experts too (the catalog's
        out["experts"] = out["weights"]                  # default is the checkpoint's own expert dtype)
    quantized = out["weights"] != "bf16" or out.get("experts", "bf16") != "bf16"
    kv = "fp8" if quantized and row.backend in kv_rule["fp8_for_quantized_on"] else "bf16"
    return out | {"kv_cache": kv}


def engine_of(row, engines: dict) -> dict | str:
    """The row's [engine] table (the corpus's version rule; a nightly or unnamed build: the newest profile)."""
    name = engines.get(str(row.backend))
    if name is None:
        return f"backend {row.backend} is not a planner engine"
    version = str(row.backend_version) if not pd.isna(row.backend_version) else ""
    return engine_table(name, version.split("+")[0] if version[:1].isdigit() else None)


def raw_for(row, mapping: dict) -> dict | str:
    """A row's scenario (the transfer corpus's layout), or the reason it cannot be expressed."""
    if row["mode"] != "agg":
        return "disaggregated serving (separate prefill and decode pools)"
    m = mapping["models"].get(str(row.model_path))
    if m is None:
        return f"model {row.model_path} is not in the catalog"
    hw_name = gt.SYSTEM_TO_CATALOG.get(str(row.system))
    if hw_name is None:
        return f"system {row.system} is not in the hardware catalog"
    moe = load_model(m["model"]).is_moe
    layout = layout_for(row, dense_model=not moe)
    if isinstance(layout, str):
        return layout
    prec = precision_for(row, m["model"], load_hardware(hw_name), mapping["kv_cache"])
    if isinstance(prec, str):
        return prec
    engine = engine_of(row, mapping["engines"])
    if isinstance(engine, str):
        return engine
    isl, osl, conc = int(row.isl), int(row.osl), int(row.batch_size)
    raw = {"model": {"name": m["model"]}, "hardware": {"name": hw_name} | layout, "precision": prec,
           "workload": {"context_len": isl + osl // 2, "batch_sizes": [conc], "k_max": 1, "fixed_k": 1,
                        "memory_utilization": 0.9},
           "engine": engine, "draft": {"method": "ngram"},
           PLAIN_ONLY: True}  # plain decoding: the n-gram draft is a placeholder, whichever release runs it
    if moe:
        raw["routing"] = {"kind": "uniform", "reuse": MOE_REUSE}
    return raw


def predict_tpot_ms(raw: dict, row, cache: dict) -> tuple[float, float, str]:
    """The median TPOT [ms] of the row's closed loop by the planner as a user runs it (physics, measured tables
    and the shipped learned layer) and by the physics alone (``--physics-only``), and what the first rests on."""
    # one scenario pair per deployment: the closed loop sets its own lengths and concurrency, and the rest of the
    # workload table is the same for every row
    key = repr(sorted((k, repr(v)) for k, v in raw.items() if k != "workload"))
    if key not in cache:
        cache[key] = (build_scenario(json.loads(json.dumps(raw)), origin="corpus"), scenario_for(raw, "physics"))
    planner, physics = cache[key]
    tpot = [float(closed_loop(sc, "plain", int(row.batch_size), int(row.isl), int(row.osl)).summary["tpot_p50_s"])
            * 1e3 for sc in (planner, physics)]
    return tpot[0], tpot[1], planner.cost_source


def score(rows: pd.DataFrame, mapping: dict, progress=None) -> pd.DataFrame:
    """One record per row: the planner's TPOT beside the measured one, or the reason it has none."""
    out, cache = [], {}
    for i, (_, row) in enumerate(rows.iterrows()):
        rec = {"row": int(row.name), "id": row.get("id", ""), **{c: row[c] for c in CONFIG_COLUMNS + ["isl", "osl", "batch_size"]},
               "measured_tpot_ms": float(row.silicon_tpot_ms)}
        raw = raw_for(row, mapping)
        if isinstance(raw, str):
            out.append(rec | {"not_expressible": raw})
            continue
        rec |= {"model": raw["model"]["name"], "hardware": raw["hardware"]["name"], "quant": quant_label(row),
                "engine_profile": f"{raw['engine']['name']}-{raw['engine'].get('version', '')}",
                "weights": raw["precision"]["weights"], "kv_cache": raw["precision"]["kv_cache"]}
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", PlannerWarning)
                pred, physics, basis = predict_tpot_ms(raw, row, cache)
        except PlannerError as err:
            # the row is built as a corpus scenario: its messages start "corpus: "
            out.append(rec | {"not_expressible": str(err).splitlines()[0].removeprefix("corpus: ")[:200]})
            continue
        out.append(rec | {"predicted_tpot_ms": pred, "physics_tpot_ms": physics, "basis": basis, "not_expressible": ""})
        if progress and i % 100 == 0:
            progress(i, len(rows))
    df = pd.DataFrame(out)
    if "predicted_tpot_ms" in df:
        df["error"] = df.predicted_tpot_ms / df.measured_tpot_ms - 1
        df["physics_error"] = df.physics_tpot_ms / df.measured_tpot_ms - 1
    return df


def quant_label(row) -> str:
    """The row's own quantization modes, GEMMs / experts (bf16 where blank)."""
    gemm = "bf16" if pd.isna(row.gemm_quant_mode) else str(row.gemm_quant_mode)
    moe = "bf16" if pd.isna(row.moe_quant_mode) else str(row.moe_quant_mode)
    return gemm if gemm == moe else f"{gemm} / {moe}"


def distinct_runs(rows: pd.DataFrame) -> pd.DataFrame:
    """The sample lists some runs twice under two ids (same configuration, lengths, concurrency and
    measured figures): each run once, so none weighs double."""
    return rows.drop_duplicates(subset=[c for c in rows.columns if c != "id"])


def _stats(err: pd.Series) -> dict:
    e = err.dropna()
    if e.empty:
        return {"n": 0}
    a = e.abs()
    return {"n": int(e.size), "mape": float(a.mean()), "median_error": float(e.median()), "worst": float(a.max()),
            "within_20pct": float((a <= 0.20).mean())}


def summarize(scored: pd.DataFrame) -> dict:
    ok = scored[scored.not_expressible == ""] if "error" in scored else scored.iloc[:0]
    band = pd.cut(ok.batch_size, [lo - 0.5 for lo, _ in BANDS] + [BANDS[-1][1] + 0.5],
                  labels=[f"{lo}-{hi}" if hi < 100_000 else f">= {lo}" for lo, hi in BANDS])
    by = lambda col: {str(k): _stats(g.error) for k, g in ok.groupby(col, observed=True)}  # noqa: E731
    return {"rows": int(len(scored)), "scored": int(len(ok)), "all": _stats(ok.error) if len(ok) else {"n": 0},
            "by_hardware": by("hardware"), "by_engine": by(ok.engine_profile.map(engine_family_of)),
            "by_model": by("model"), "by_quant": by("quant"), "by_concurrency": by(band),
            # the same rows by the physics alone (--physics-only), which a prediction without the layer quotes
            "physics_only": {"all": _stats(ok.physics_error) if len(ok) else {"n": 0},
                             "by_engine": {str(k): _stats(g.physics_error)
                                           for k, g in ok.groupby(ok.engine_profile.map(engine_family_of))}},
            "not_expressible": scored[scored.not_expressible != ""].not_expressible.value_counts().to_dict()}


def engine_family_of(profile: str) -> str:
    """The engine of a scored row's engine profile ("vllm-0.11.0" -> "vllm")."""
    return str(profile).split("-")[0]


def serving_checks(scored: pd.DataFrame) -> dict:
    """The errors of the priced rows by GPU and engine, as a prediction on that GPU and engine quotes them
    (``simulator/data/serving_error.json``): ``{gpu: {engine: stats}}`` beside where they come from."""
    ok = scored[scored.not_expressible == ""] if "error" in scored else scored.iloc[:0]
    out = {"_source": f"aiconfigurator-core {gt.PACKAGE_VERSION} silicon sample,"
                      " calibration/data/validation/silicon/silicon.md",
           "_date": dt.date.today().isoformat()}
    for (gpu, engine), g in ok.groupby([ok.hardware, ok.engine_profile.map(engine_family_of)]):
        out.setdefault(str(gpu), {})[str(engine)] = _stats(g.error)
        out.setdefault(PHYSICS_ONLY_CHECKS, {}).setdefault(str(gpu), {})[str(engine)] = _stats(g.physics_error)
    return out


def _pct(x) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:+.1%}" if x < 0 else f"{x:.1%}"


def _table(title: str, groups: dict) -> list[str]:
    lines = [f"| {title} | rows | MAPE | median error | worst | within 20% |", "|---|---|---|---|---|---|"]
    for name, s in groups.items():
        if s.get("n"):
            lines.append(f"| {name} | {s['n']} | {s['mape']:.1%} | {s['median_error']:+.1%} | {s['worst']:.1%} |"
                         f" {s['within_20pct']:.0%} |")
    return lines + [""]


def markdown(summary: dict, src: str) -> str:
    a = summary["all"]
    head = [
        "# Silicon check: serving TPOT against end-to-end runs the planner never saw", "",
        f"Rows: aiconfigurator-core {gt.PACKAGE_VERSION} `systems/{SILICON_FILE}` ({src}), {summary['rows']} rows;"
        f" {summary['scored']} aggregated-serving rows priced, the rest listed below with the reason.",
        "`python -m calibration.silicon` regenerates this page; `calibration/data/validation/silicon_map.toml` says"
        " how a row becomes a scenario (chosen before any row was scored). Nothing of the planner was learned from"
        " these rows. Error = planner / measured - 1; the planner's TPOT is the median of a closed-loop serving"
        " simulation at the row's concurrency and lengths: the planner as shipped (the physics, the device's measured"
        " kernel tables and the learned layer, which learned only from the published corpus).", "",
        f"**All rows: MAPE {a.get('mape', float('nan')):.1%}, median error {a.get('median_error', float('nan')):+.1%},"
        f" worst {a.get('worst', float('nan')):.1%}, {a.get('within_20pct', float('nan')):.0%} within 20%.**", ""]
    p = (summary.get("physics_only") or {}).get("all") or {}
    if p.get("n"):
        head += [f"The physics alone (`--physics-only`, no learned layer) on the same rows: MAPE {p['mape']:.1%}, median"
                 f" error {p['median_error']:+.1%}, {p['within_20pct']:.0%} within 20%; by engine: "
                 + "; ".join(f"{e} {g['mape']:.1%} ({g['median_error']:+.1%})"
                             for e, g in summary["physics_only"]["by_engine"].items() if g.get("n")) + ".", ""]
    body = (_table("GPU", summary["by_hardware"]) + _table("engine", summary["by_engine"])
            + _table("model", summary["by_model"]) + _table("quantization (GEMMs / experts)", summary["by_quant"])
            + _table("concurrency", summary["by_concurrency"]))
    tail = ["## Not expressible", "", "| reason | rows |", "|---|---|"]
    tail += [f"| {r} | {n} |" for r, n in summary["not_expressible"].items()]
    return "\n".join(head + body + tail) + "\n"


def _parser() -> argparse.ArgumentParser:
    ap = OneLineParser(prog="python -m calibration.silicon", description=__doc__.split("\n")[0])
    ap.add_argument("--output-dir", type=Path, default=OUT_DIR)
    ap.add_argument("--system", nargs="*", help="only these aiconfigurator systems (h100_sxm, b200_sxm, ...)")
    ap.add_argument("--limit", type=int, help="score only the first N rows (a quick look)")
    return ap


def _run(args: argparse.Namespace) -> int:
    src = gt.locate_tables()
    rows = distinct_runs(read_silicon(src))
    if args.system:
        rows = rows[rows.system.isin(args.system)]
    if args.limit:
        rows = rows.head(args.limit)
    scored = score(rows, load_map(), progress=lambda i, n: print(f"  {i}/{n}", flush=True))
    summary = summarize(scored)
    files = {"silicon.md": markdown(summary, src.describe().split(" ")[0]),
             "silicon.json": json.dumps(summary, indent=1, sort_keys=True) + "\n",
             "silicon_rows.csv": scored.to_csv(index=False, float_format="%.6g")}
    write_files_atomically(args.output_dir, files)
    if not (args.system or args.limit):  # a partial run says nothing about the GPUs and engines it skipped
        write_atomically(CHECK_FILE, json.dumps(serving_checks(scored), indent=1, sort_keys=True) + "\n",
                         flag="serving checks")
    a = summary["all"]
    print(f"{summary['scored']} of {summary['rows']} rows priced: TPOT MAPE {a.get('mape', float('nan')):.1%},"
          f" median error {a.get('median_error', float('nan')):+.1%}; wrote {args.output_dir}/silicon.md")
    return 0


main = command(_parser, _run)

if __name__ == "__main__":
    sys.exit(main())
