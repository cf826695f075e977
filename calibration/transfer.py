"""Transfer validation: score the planner on published GPU measurements it was never fitted to.

    python -m calibration.transfer [--corpus calibration/data/published/corpus.csv]
                                   [--output-dir calibration/data/transfer] [--peer]
    python -m calibration.transfer --holdout-source SOURCE   (one source scored by a layer learned without it)

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
``aiconfigurator_core`` package importable, the peer's own estimate is set beside ours where it can
express the row (plain and serving step times; speedups of multi-token prediction with a published
acceptance length: ``calibration/transfer_peer.py``). The per-device residuals become the uncertainty band every prediction quotes
(``simulator/data/transfer_error.json``). Where a source publishes a speculative step's parts (plain, draft
passes, verify), each part is set beside the planner's (``calibration/transfer_components.py``,
``transfer_part_rows.csv``): which part an optimistic speedup comes from.
"""
from __future__ import annotations

import json
import sys
import warnings
from dataclasses import replace
from pathlib import Path

import pandas as pd
from scipy.optimize import brentq

# re-exported: tests, calibration.transfer_twoshot and the rows' notes ("see DEVICES in calibration/transfer.py")
from calibration.transfer_cases import (CORPUS, DEVICES, MOE_REUSE, OUT_DIR, REPO, Case, anchor_curve_key,  # noqa: F401
                                        case_for, iid_rate, read_corpus, scenario_for, speculative_running)
from calibration.transfer_components import part_rows, published_parts, summarize_parts
from calibration.transfer_peer import peer_speedup, peer_tpot_ms
from calibration.transfer_report import bands, markdown, summarize
from calibration.transfer_serving import serving_e2e_speedup, serving_row_ms
from simulator.cli.common import OneLineParser, run_cli, write_atomically, write_files_atomically
from simulator.errors import PlannerError, PlannerWarning
from simulator.plan.grid import compute_grid
from simulator.specs.scenario import Scenario

BAND_FILE = REPO / "simulator" / "data" / "transfer_error.json"


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


def speedup_scenario(case: Case, basis: str, acceptance_length: float, layer=None) -> Scenario:
    """A speedup row's scenario on ``basis``, its acceptance the i.i.d. rate of the row's acceptance length."""
    sc = scenario_for(case.raw, basis)
    return replace(sc.with_overrides(acceptance=iid_rate(acceptance_length, int(case.row.k))),
                   step_prior=layer if basis == "planner" else None)


def speedup_grid(sc: Scenario, case: Case):
    """The (B, [0, K]) grid of a speedup row: plain decoding and the row's K at its batch size."""
    return compute_grid(sc, batch_sizes=[int(case.row.batch_size)], ks=[0, int(case.row.k)])


def step_speedup(sc: Scenario, case: Case) -> float:
    """A speedup row's step speedup: goodput per sequence at K over plain at B; in a closed loop whose
    speculating server runs only R < B requests at once, the throughputs' ratio R gp_K(R) / (B gp_0(B))
    (mean request latency in a closed loop of B users is B / throughput: Little's law)."""
    B, K = int(case.row.batch_size), int(case.row.k)
    R = speculative_running(sc, case)
    if R == B:
        g = speedup_grid(sc, case)
        return float(g.goodput_per_seq[0, 1] / g.goodput_per_seq[0, 0])
    g = compute_grid(sc, batch_sizes=[R, B], ks=[0, K])
    return float(R * g.goodput_per_seq[0, 1] / (B * g.goodput_per_seq[1, 0]))


def predict_case(case: Case, basis: str, acceptance_length: float | None, layer=None) -> tuple[float, str]:
    """(predicted value in the measured unit, what the prediction rests on); ``layer``: the learned terms
    (a population learned without this row's source) on the "planner" basis, None: the physics alone."""
    B, K = int(case.row.batch_size), int(case.row.k) if not pd.isna(case.row.k) else 0
    if case.kind == "speedup":
        sc = speedup_scenario(case, basis, acceptance_length, layer)
        if case.end_to_end:
            return serving_e2e_speedup(sc, B, int(case.row.input_len), int(case.row.output_len), K), sc.cost_source
        return step_speedup(sc, case), sc.cost_source
    sc = scenario_for(case.raw, basis, layer)
    served = serving_row_ms(sc, case.kind, case.row)
    if served is not None:
        return served, sc.cost_source
    g = compute_grid(sc, batch_sizes=[B], ks=[0])
    return float(g.itl_s[0, 0]) * 1e3, sc.cost_source


def part_cases(corpus: pd.DataFrame) -> list[tuple[Case, object]]:
    """(case, its (B, [0, K]) grid) of every expressible speedup row whose notes give the step's parts
    (calibration/transfer_components.py), priced as :func:`predict_case` prices the row."""
    out = []
    for _, row in corpus.iterrows():
        if published_parts(row) is None:
            continue
        case = case_for(row)
        if isinstance(case, str) or case.kind != "speedup" or case.end_to_end:
            continue
        out.append((case, speedup_grid(speedup_scenario(case, "planner", float(row.acceptance_length)), case)))
    return out


def anchor_acceptance(cases: list[Case], layer_for=None) -> dict[int, tuple[float | None, bool]]:
    """Acceptance length per speedup case: the row's own, else solved so that the smallest-batch row of
    its curve is reproduced by the datasheet-free planner basis (that anchor row is not scored); where no
    acceptance length in (1, K + 1) reproduces it, the one that comes closest (the curve is scored all the
    same: dropping it would hide the miss)."""
    out: dict[int, tuple[float | None, bool]] = {}
    curves: dict[tuple, list[Case]] = {}
    for c in cases:
        if c.kind != "speedup":
            continue
        if not pd.isna(c.row.acceptance_length):
            out[c.row.row_id] = (float(c.row.acceptance_length), False)
        else:
            curves.setdefault(anchor_curve_key(c.row), []).append(c)
    for members in curves.values():
        members.sort(key=lambda c: c.row.batch_size)
        first, K = members[0], int(members[0].row.k)
        try:
            layer = layer_for(first) if layer_for else None
            miss = lambda a: predict_case(first, "planner", a, layer)[0] - first.measured  # noqa: E731
            lo, hi = 1.0 + 1e-6, K + 1 - 1e-6
            try:
                al = brentq(miss, lo, hi)
            except ValueError:  # no acceptance reaches the anchor: the closest one (its curve is still scored)
                al = min((lo, hi), key=lambda a: abs(miss(a)))
        except PlannerError:
            al = None
        out[first.row.row_id] = (al, True)
        for c in members[1:]:
            out[c.row.row_id] = (al, False)
    return out


def score(corpus: pd.DataFrame, peer: bool = False, layer_for=None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(scored rows, skipped rows with reasons). ``layer_for(case)``: the learned layer a row is predicted with
    (learned without its source, GPU or engine: calibration.learn_step), None: the physics alone. Scenario
    caveats (PlannerWarning) are not printed: the report is about the error, not the inputs."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PlannerWarning)
        return _score(corpus, peer, layer_for)


def _score(corpus: pd.DataFrame, peer: bool, layer_for=None) -> tuple[pd.DataFrame, pd.DataFrame]:
    cases, skipped = [], []
    for _, row in corpus.iterrows():
        c = case_for(row)
        if isinstance(c, str):
            skipped.append({"row_id": row.row_id, "source_id": row.source_id, "device": row.device,
                            "model": row.model, "metric": row.metric, "reason": c})
        else:
            cases.append(c)
    acc = anchor_acceptance(cases, layer_for)
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
            pred, basis = predict_case(c, "planner", al, layer_for(c) if layer_for else None)
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
        if peer:
            p = peer_speedup(c) or peer_tpot_ms(c)  # each answers only for its own kinds of row
            rec["peer_predicted"] = p
            rec["peer_error"] = None if p is None else p / c.measured - 1
        rows.append(rec)
    return pd.DataFrame(rows), pd.DataFrame(skipped)


HOLD_OUT = {"source": lambda c: c.row.source_id, "gpu": lambda c: c.raw["hardware"]["name"],
            "engine": lambda c: str(c.row.engine)}


def held_out_layers(learner, column: str, forms: dict | None = None):
    """layer_for(case): the learned layer of calibration.learn_step learned without the case's source, GPU or
    engine (``column``); a group with no training rows gets the layer of every training row (none of them is its).
    Where the form chosen has an engine-family or a GPU-family level, the centre of the case's family (a family not
    trained on: the population's). Each held-out layer is learned once; ``forms`` (if given) gets each held-out
    group's chosen form."""
    pops: dict = {}
    layers: dict = {}
    group = HOLD_OUT[column]
    present = set(getattr(learner.rows, column).tolist())

    def layer_for(case):
        g = group(case)
        key = g if g in present else None
        if key not in pops:
            pops[key] = learner.without(column, g) if key is not None else learner.learn()
            if forms is not None and key is not None:
                forms[str(g)] = pops[key].form
        pop = pops[key]
        family, gpu = pop.centre_of(case.row.engine, case.raw["hardware"]["name"])  # where the form has the level
        if (key, family, gpu) not in layers:
            layers[key, family, gpu] = pop.prior({"sources": len(pop.sources), "rows": pop.n_rows},
                                                 f"held out {column} {g}", family, gpu)
        return layers[key, family, gpu]

    return layer_for


def held_out_summary(rows: pd.DataFrame) -> dict:
    """mape / worst / n of plain steps and speedups, and the share of decisions right, of one scoring pass."""
    plain = rows[rows.kind == "plain"]
    spec = rows[(rows.kind == "speedup") & ~rows.anchor.astype(bool)]
    stat = lambda e: {"n": int(e.notna().sum()), "mape": float(e.abs().mean()) if len(e) else float("nan"),  # noqa: E731
                      "worst": float(e.abs().max()) if len(e) else float("nan")}
    return {"plain_only": stat(plain.error), "step_time": stat(rows[rows.kind != "speedup"].error),
            "speedup": stat(spec.error),
            "decision": {"n": int(len(spec)), "share": float(spec.decision_right.astype(bool).mean()) if len(spec) else float("nan")}}


def by_group(rows: pd.DataFrame, column: str) -> dict:
    """The held-out pass's figures per GPU or engine."""
    return {str(k): held_out_summary(g) for k, g in rows.groupby(column)}


def two_shot(corpus: pd.DataFrame, rows: pd.DataFrame, summary: dict, layer_for=None, learner=None) -> pd.DataFrame:
    """Two-shot rows of the speedup curves (calibration/transfer_twoshot.py); their summary goes into
    ``summary["two_shot"]`` beside the zero-shot planner on the same rows. ``layer_for``: the learned layer
    each curve's posterior starts from (learned without its source); ``learner``: where each held-out source's
    band is calibrated from its training sources' curves (None: the layer's misfit)."""
    from calibration.transfer_twoshot import held_out_bands, score_two_shot, summarize_two_shot
    cases = [c for c in (case_for(r) for _, r in corpus.iterrows()) if isinstance(c, Case)]
    two = score_two_shot(cases, layer_for, held_out_bands(learner, cases) if learner is not None else None)
    summary["two_shot"] = summarize_two_shot(two, rows)
    return two


def holdout_source(corpus: pd.DataFrame, learner, source: str) -> int:
    """Learn the layer without ``source`` (its form chosen on the other sources), score ``source``'s rows with it and
    with the physics alone, and print both: one source checked by hand."""
    if source not in set(corpus.source_id):
        raise PlannerError(f"--holdout-source {source}: no such source in the corpus (its source_id column); e.g."
                           f" {', '.join(sorted(set(corpus.source_id))[:3])}")
    mine = corpus[corpus.source_id == source]
    pop = learner.without("source", source)
    rows, _ = score(mine, layer_for=held_out_layers(learner, "source"))
    physics, _ = score(mine)
    if rows.empty:
        print(f"{source}: no row the planner can express")
        return 0
    cols = ["row_id", "kind", "hardware", "engine", "model", "batch_size", "k", "anchor", "measured", "predicted", "error"]
    print(rows[cols].assign(physics_error=physics.set_index("row_id").error.reindex(rows.row_id).values)
          .to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    print(f"layer learned without {source}: form '{pop.form}' from {pop.n_rows} rows of {len(pop.sources)} sources")
    lay, phys = held_out_summary(rows), held_out_summary(physics)
    for block in ("plain_only", "speedup"):
        if lay[block]["n"]:
            print(f"{block}: MAPE {lay[block]['mape']:.1%} (physics alone {phys[block]['mape']:.1%}) on {lay[block]['n']} rows")
    if lay["decision"]["n"]:
        print(f"decisions right {lay['decision']['share']:.1%} (physics alone {phys['decision']['share']:.1%})")
    return 0


def learner_summary(learner) -> dict:
    """The shipped layer's form and the training rows it rests on (the held-out figures are the summary's)."""
    pop = learner.learn()
    return {"form": pop.form, "form_loso_mape_on_training_rows": pop.form_errors, "rows": pop.n_rows,
            "sources": list(pop.sources), "row_log_scatter": pop.row_sigma}


def main(argv: list[str] | None = None) -> int:
    p = OneLineParser(prog="python -m calibration.transfer", description=__doc__.split("\n\n")[0])
    p.add_argument("--corpus", default=str(CORPUS), help="published corpus CSV")
    p.add_argument("--output-dir", default=str(OUT_DIR), help="where transfer.md / .json / rows CSV go")
    p.add_argument("--peer", action="store_true", help="also ask aiconfigurator-core for its own estimate")
    p.add_argument("--no-bands", action="store_true", help="do not rewrite simulator/data/transfer_error.json")
    p.add_argument("--holdout-source", metavar="SOURCE",
                   help="learn the layer without SOURCE, score SOURCE's rows and print them (no file is written)")
    args = p.parse_args(argv)

    def body() -> int:
        path = Path(args.corpus)
        corpus = read_corpus(path)
        from calibration.learn_step import Learner, corpus_cases, training_rows
        learner = Learner(training_rows(corpus_cases(corpus)))
        if args.holdout_source is not None:
            return holdout_source(corpus, learner, args.holdout_source)
        physics, _ = score(corpus)
        forms: dict = {"source": {}, "gpu": {}, "engine": {}}  # the form each hold-out chose on its training rows
        rows, skipped = score(corpus, peer=args.peer, layer_for=held_out_layers(learner, "source", forms["source"]))
        by_gpu_rows, _ = score(corpus, layer_for=held_out_layers(learner, "gpu", forms["gpu"]))
        by_engine_rows, _ = score(corpus, layer_for=held_out_layers(learner, "engine", forms["engine"]))
        summary = summarize(rows)
        loso, phys = held_out_summary(rows), held_out_summary(physics)
        for block in ("plain_only", "speedup", "step_time"):
            summary[block]["leave_one_source_out"] = loso[block]
            summary[block]["physics_only"] = phys[block]
        summary["decision"]["leave_one_source_out"] = loso["decision"]
        summary["decision"]["physics_only"] = phys["decision"]
        summary["physics_only_by_batch"] = summarize(physics)["speedup"]["by_batch"]
        summary["leave_one_gpu_out"] = by_group(by_gpu_rows, "hardware")
        summary["leave_one_engine_out"] = by_group(by_engine_rows, "engine")
        summary["physics_only_by_gpu"] = by_group(physics, "hardware")
        summary["physics_only_by_engine"] = by_group(physics, "engine")
        summary["learned_layer"] = learner_summary(learner)
        summary["learned_layer"]["held_out_forms"] = {k: dict(sorted(v.items())) for k, v in forms.items()}
        two = two_shot(corpus, rows, summary, held_out_layers(learner, "source"), learner)
        parts = part_rows(part_cases(corpus))
        summary["parts"] = summarize_parts(parts)
        text = markdown(summary, rows, skipped, str(path.relative_to(REPO) if path.is_relative_to(REPO) else path))
        write_files_atomically(args.output_dir, {
            "transfer.md": text, "transfer.json": json.dumps(summary, indent=1, default=float) + "\n",
            "transfer_rows.csv": rows.to_csv(index=False), "not_expressible.csv": skipped.to_csv(index=False),
            "transfer_twoshot_rows.csv": two.to_csv(index=False), "transfer_part_rows.csv": parts.to_csv(index=False)})
        if not args.no_bands:
            write_atomically(BAND_FILE, json.dumps(bands(summary), indent=1) + "\n", flag="bands")
        print(text.split("\n## By GPU")[0])
        return 0

    return run_cli(body)


if __name__ == "__main__":
    sys.exit(main())
