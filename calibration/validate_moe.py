"""MoE routing learnt from measured expert counts (used by :mod:`calibration.validate`): the Zipf skew,
the router's own adjacent-token reuse, and the routed-expert op time the planner predicts per row."""
from __future__ import annotations

import numpy as np
import pandas as pd

from simulator.plan.grid import compute_grid
from simulator.specs.routing import Routing
from simulator.specs.scenario import Scenario


def router_reuse(df: pd.DataFrame) -> pd.Series | None:
    """The configured adjacent-token routing reuse of each row (synthetic MoE runs), or None."""
    if "router_reuse" not in df or not df.router_reuse.notna().any():
        return None
    return df.router_reuse.fillna(0.0).astype(float)


def fit_routing_skew(rows: pd.DataFrame, sc: Scenario) -> float:
    """Zipf exponent whose E_touched(T) best matches measured distinct experts (log error)."""
    from simulator.physics.experts import experts_touched
    from simulator.specs.routing import expert_probabilities
    rows = rows[rows.experts_touched.notna()]
    tokens = (rows.batch_size * (rows.k + 1)).to_numpy(float)
    measured = rows.experts_touched.to_numpy(float)
    skews = np.linspace(0.0, 4.0, 401)
    errors = [np.mean(np.abs(np.log(experts_touched(tokens, expert_probabilities(
        Routing("zipf", skew=s), sc.model.num_experts, sc.model.experts_per_token)) / measured))) for s in skews]
    return float(skews[int(np.argmin(errors))])


def fit_skew_and_reuse(rows: pd.DataFrame, sc: Scenario) -> tuple[float, float]:
    """(Zipf skew, router's own reuse rho_0) whose E_touched(B, K + 1, r + (1 - r) rho_0) best matches
    the measured distinct-expert counts of rows with configured reuse r (least squared log error; a
    0.1 x 0.05 grid, then a local refinement)."""
    from simulator.physics.experts import experts_touched_correlated
    from simulator.specs.routing import expert_probabilities
    rows = rows[rows.experts_touched.notna()]
    r = router_reuse(rows).to_numpy()
    b, q = rows.batch_size.to_numpy(float), rows.k.to_numpy(float) + 1
    measured = rows.experts_touched.to_numpy(float)

    def error(skew, rho0):
        p = expert_probabilities(Routing("zipf", skew=skew), sc.model.num_experts, sc.model.experts_per_token)
        pred = np.array([experts_touched_correlated(bi, qi, p, ri + (1 - ri) * rho0) for bi, qi, ri in zip(b, q, r)],
                        dtype=float)
        return float(np.mean(np.log(pred / measured) ** 2))

    def search(skews, rhos):
        return min(((error(s, x), s, x) for s in skews for x in rhos))[1:]

    s0, x0 = search(np.arange(0.0, 4.001, 0.1), np.arange(0.0, 0.951, 0.05))
    return search(np.clip(np.arange(s0 - 0.1, s0 + 0.101, 0.02), 0, 4), np.clip(np.arange(x0 - 0.05, x0 + 0.051, 0.01), 0, 0.98))


def grid_verify_expert_ms(sc: Scenario, df: pd.DataFrame, k_max: int) -> np.ndarray:
    """Predicted time of the routed-expert operator in each row's verify step [ms]."""
    grid = compute_grid(sc, batch_sizes=np.unique(df.batch_size), ks=np.arange(k_max + 1))
    bi = np.searchsorted(grid.batch_sizes, df.batch_size)
    return grid.op_time_s("moe_experts")[bi, df.k.to_numpy()] * 1e3
