"""The deployment calibration file ``calibration.fit_deployment`` writes (``simulator/specs/deployment_fit.py``
reads it) and the report it prints: the fitted terms with their intervals, the points refitted, the band before
and after, and the cells to measure next."""
from __future__ import annotations

import datetime as dt
from pathlib import Path

import numpy as np

from calibration import fewshot
from simulator.specs.deployment_fit import DEPLOYMENT_FORMAT, DEPLOYMENT_VERSION, TERMS, scenario_identity
from simulator.specs.scenario import Scenario
from simulator.specs.uncertainty import posterior_interval_trust_text


def _clean(x: float) -> float:
    """A fitted value rounded to 6 significant digits; solver dust at a zero bound (below 1 ns) is 0."""
    x = float(x)
    return 0.0 if abs(x) < 1e-9 else float(f"{x:.6g}")


def document(sc: Scenario, result: dict, files: list[str]) -> dict:
    """The deployment calibration file (simulator/specs/deployment_fit.py reads it)."""
    res = result["fit"]
    lo, hi = fewshot.interval(res["samples"])
    terms = {}
    for i, name in enumerate(TERMS):
        fitted = name in res["terms"]
        v = _clean(res["theta"][i])
        iv = [min(_clean(lo[i]), v), max(_clean(hi[i]), v)] if fitted else [v, v]
        terms[name] = {"value": v, "interval": iv, "fitted": fitted}
    acc = result["acceptance"]
    acc_doc = None
    if acc:
        alo, ahi = fewshot.interval(acc["samples"])
        # the positions measured, no more: a reader repeats the last one beyond them and says so where K* uses it
        n = acc.get("measured_positions", len(acc["rates"]))
        acc_doc = {"rates": [round(float(r), 6) for r in acc["rates"][:n]],
                   "interval": [[round(float(a), 6), round(float(b), 6)] for a, b in zip(alo[:n], ahi[:n])],
                   "source": acc["source"]}
        if acc.get("rank_tail") is not None:  # the rates are a tree's top-1 rates per depth (specs.tree_acceptance)
            acc_doc["rank_tail"] = float(acc["rank_tail"])
    pts = result["cells"]
    predicted = np.exp(fewshot.predict_log("step", res["theta"], result["points"])[0]) * 1e3
    return {
        "format": DEPLOYMENT_FORMAT, "format_version": DEPLOYMENT_VERSION,
        "scenario": scenario_identity(sc.model, sc.hardware, sc.deployment, sc.engine, sc.draft, sc.profile)
                    | {"name": sc.name},
        "terms": terms, "acceptance": acc_doc,
        "uncertainty": {"step_time_rel": round(result["step_rel"], 5), "goodput_rel": round(result["goodput_rel"], 5),
                        "interval": "90% of the posterior (Laplace approximation around the MAP), with one"
                                    " point's scatter; goodput with the learned layer's speedup misfit in quadrature", "log_scatter": round(res["sigma"], 5),
                        "noise_floor": fewshot.NOISE_FLOOR,
                        "zero_shot_step_time_rel": round(result["zero_shot_step_rel"], 5),
                        "zero_shot_goodput_rel": round(result["zero_shot_goodput_rel"], 5),
                        "model_misfit_log": round(result["misfit_log"], 5),
                        "points_disagree": result["disagree"], "prior": result["prior"]},
        "points": [{"batch_size": int(r.batch_size), "k": int(r.k), "context_len": int(r.context_len),
                    "itl_ms": round(float(r.itl_ms), 5), "fitted_itl_ms": round(float(p), 5), "rows": int(r.rows),
                    "file": r.file} for r, p in zip(pts.itertuples(), predicted)],
        "next_measurements": result["next"],
        "provenance": {"files": [Path(f).name for f in files], "scenario_origin": str(sc.origin),
                       "step_time_basis": sc.cost_source, "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
                       "method": "posterior of the engine terms (calibration/fewshot.posterior): the prior is "
                                 + result["prior"] + ", each term within its a priori spread; the points are log"
                                 " step times with their scatter"},
    }


def report(doc: dict) -> str:
    """What was fitted, how well it reproduces the points, and what to measure next."""
    lines = [f"deployment fit for {doc['scenario']['model']} on {doc['scenario']['tp']} x {doc['scenario']['hardware']},"
             f" {doc['scenario']['engine']} {doc['scenario']['engine_version']}, draft {doc['scenario']['draft']}"
             f" ({len(doc['points'])} points)"]
    for name, t in doc["terms"].items():
        unit = (lambda v: f"{v:.3f}") if name.endswith("_scale") else (lambda v: f"{v * 1e6:.2f} us")
        state = f"{unit(t['value'])}  90% [{unit(t['interval'][0])}, {unit(t['interval'][1])}]" if t["fitted"] \
            else f"{unit(t['value'])}  (not identified by these points)"
        lines.append(f"  {name:<18} {state}")
    if doc["acceptance"]:
        lines.append(f"  acceptance rates   {', '.join(f'{r:.3f}' for r in doc['acceptance']['rates'])}"
                     f"  ({doc['acceptance']['source']})")
    for p in doc["points"]:
        lines.append(f"  B={p['batch_size']:<5} K={p['k']:<2} ctx={p['context_len']:<6} measured {p['itl_ms']:.3f} ms,"
                     f" fitted {p['fitted_itl_ms']:.3f} ms ({p['fitted_itl_ms'] / p['itl_ms'] - 1:+.1%})")
    for name, t in doc["terms"].items():
        lo, hi = TERMS[name][1:3]
        if t["fitted"] and (t["value"] >= hi or (name == "kernel_scale" and t["value"] <= lo)):
            lines.append(f"warning: {name} sits at its bound ({t['value']:g}): the planner's step is far from these"
                         " measurements; check the scenario's model, TP, dtypes and context against the deployment")
    u = doc["uncertainty"]
    lines.append(f"uncertainty (90%): step time +-{u['step_time_rel']:.1%}, goodput at K* +-{u['goodput_rel']:.1%}"
                 f" (before these points: +-{u['zero_shot_step_time_rel']:.1%} and +-{u['zero_shot_goodput_rel']:.1%},"
                 f" the prior: {u['prior']})")
    trust = posterior_interval_trust_text()
    if trust:
        lines.append(f"how far to trust the band: {trust}")
    if u.get("points_disagree"):
        lines.append(f"warning: the points disagree with each other beyond a measurement's scatter (RMS log residual"
                     f" {u['log_scatter']:.3f} > {2 * u['noise_floor']:.3f}): the band is sized by their disagreement;"
                     " check that they were measured on one deployment, context and load")
    for n in doc["next_measurements"]:
        lines.append(f"next: measure B={n['batch_size']} at K={n['k']}: its goodput interval overlaps K*={n['k_star']}'s"
                     f" by {n['overlap']:.0%} (K={n['k']} wins in {n['rival_wins']:.0%} of the posterior's samples)")
    if not doc["next_measurements"]:
        lines.append("next: no two K overlap at any batch size; more points would not change K*")
    return "\n".join(lines) + "\n"
