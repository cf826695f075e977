"""One sweep task: one scenario, its grid prediction and (``[run] size``) one SLO load search per policy.

Runs in a worker process (local pool or Ray): takes a :class:`SweepTask`, returns plain rows
(JSON-safe dicts) so the journal stores exactly what the final table is built from.
"""
from __future__ import annotations

import json
import time

import numpy as np

from simulator.errors import PlannerError
from simulator.runtime import keep_freed_memory
from simulator.plan.api import predict_scenario
from simulator.plan.answer import spec_stops_paying
from simulator.sizing.fleet import size
from simulator.sizing.ranking import speculation_caveat
from simulator.sizing.spec import SizingOverrides
from simulator.sizing.uncertainty import uncertainty
from simulator.specs.scenario import build_scenario

CAPACITY_COLUMNS = (
    "policy", "meets_target", "max_load_per_replica", "load_band_low", "load_band_high", "bounded",
    "throughput_tok_s", "tok_s_per_gpu", "ttft_p99_s", "tpot_p50_s", "tpot_p99_s", "mean_batch_size", "mean_k",
    "replicas", "gpus", "gpus_band", "gpus_low", "gpus_high", "basis", "search_resolution", "price_per_gpu_hour_usd", "fleet_usd_per_hour", "usd_per_m_output_tokens",
    "usd_per_m_tokens_at_target", "energy_j_per_token_est", "price_source", "reason",
)


def _plain(v):
    """numpy scalars -> Python; NaN stays a float (the journal writes it as NaN)."""
    if hasattr(v, "item"):
        v = v.item()
    if v is None or isinstance(v, (str, bool, int, float)):
        return v
    return str(v)


def _grid_columns(sc) -> dict:
    """What the K* grid says for this scenario (batch size 1 and the best throughput over batch sizes)."""
    pred = predict_scenario(sc)
    t = pred.columns  # the prediction table's columns, without its per-cell bound regime
    thr = t["throughput"]
    best = int(np.nanargmax(thr)) if np.isfinite(thr).any() else None
    k1 = int(t["k_opt"][0])
    return {
        "grid_k_opt_b1": None if k1 < 0 else k1,
        "grid_speedup_b1": float(t["speedup_vs_plain"][0]),
        "grid_itl_ms_b1": float(t["itl_ms"][0]),
        "grid_peak_throughput_tok_s": float(thr[best]) if best is not None else float("nan"),
        "grid_peak_batch_size": int(t["batch_size"][best]) if best is not None else None,
        "grid_spec_stops": spec_stops_paying(t, pred.grid),
    } | {f"prov_{k}": str(v) for k, v in pred.provenance.items() if k not in ("scenario", "origin", "context_len")}


# The K* grid reads no [traffic]: a configuration's tasks under several traffic mixes (expanded next to each
# other) share one grid per worker, the last few kept
_GRIDS: dict = {}
_GRID_SLOTS = 8


def _shared_grid_columns(task, sc) -> dict:
    """:func:`_grid_columns` of ``sc``, computed once per task scenario apart from its [traffic] table."""
    key = json.dumps([{k: v for k, v in task.raw.items() if k != "traffic"}, task.origin, task.base_dir],
                     sort_keys=True, default=str)
    hit = _GRIDS.get(key)
    if hit is None:
        hit = _grid_columns(sc)
        if len(_GRIDS) >= _GRID_SLOTS:
            _GRIDS.pop(next(iter(_GRIDS)))
        _GRIDS[key] = hit
    return dict(hit)


def run_task(task) -> dict:
    """Rows for one task: one per policy (or one with policy '-' when sizing is off)."""
    keep_freed_memory()  # a sweep worker is a planner program (simulator/runtime.py); once per process
    t0, c0 = time.perf_counter(), time.process_time()
    sc = build_scenario(task.raw, task.origin, task.base_dir)
    base = {"task": task.key} | task.axes
    grid = _shared_grid_columns(task, sc)
    err, note = uncertainty(sc)
    unc = {"rel_error": err if err is not None else float("nan"), "uncertainty": note}
    rows = []
    if not task.run["size"]:
        rows.append(base | {"policy": "-", "status": "ok"} | grid | unc)
    else:
        r = task.run
        try:
            # the same search as `size` (None: the base scenario's [sizing] setting), the scenario as its own
            # candidate (dtype "" keeps its precision)
            res = size(sc, SizingOverrides(
                candidates=[sc.hardware.name], tp=[sc.deployment.tp], policies=list(task.policies), workers=1,
                n_requests=r["n_requests"], search_steps=r["search_steps"], seed=r["seed"], sensitivity=False,
                max_replicas=r["max_replicas"], duration_s=r["duration_s"], max_requests=r["max_requests"],
                dtypes=[""]), engine_tables=False)
        except PlannerError as e:
            status = "error: " + " ".join(str(e).split())
            rows += [base | {"policy": p, "status": status} | grid | unc for p in task.policies]
        else:
            by_policy = {row["policy"]: row for row in res.capacity_rows}
            for p in task.policies:
                row = by_policy.get(p)
                if row is None:
                    reason = "; ".join(r["reason"] for r in res.rejected_rows) or "no result"
                    rows.append(base | {"policy": p, "status": "rejected: " + reason} | grid | unc)
                    continue
                cols = {c: _plain(row.get(c)) for c in CAPACITY_COLUMNS}
                cap_, low = row.get("max_load_per_replica"), row.get("load_band_low")
                # the end-to-end band of the capacity row (size's candidate band), not the scenario's own
                band = {"rel_error": 1.0 - low / cap_ if cap_ and low == low else unc["rel_error"],  # noqa: PLR0124
                        "uncertainty": res.band_note}
                # as size's headline: a speculative edge over plain smaller than the published optimism
                plain_row = by_policy.get("plain")
                caveat = speculation_caveat(row, plain_row["max_load_per_replica"] if plain_row else None,
                                            sc).removeprefix("; ")
                rows.append(base | {"status": "ok"} | cols | {"target_load": res.spec.target_load,
                                                              "load_unit": res.spec.load_unit,
                                                              "slo": res.spec.slo.describe(),
                                                              "speculation_caveat": caveat} | grid | band)
    return {"key": task.key, "index": task.index, "rows": rows, "elapsed_s": time.perf_counter() - t0,
            "cpu_s": time.process_time() - c0}
