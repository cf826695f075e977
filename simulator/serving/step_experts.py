"""The routed experts of a serving step as the planner's grid prices them.

The step pricer reads a step's token ops from lin(T), priced at T independent tokens (T padded to the
CUDA graph it replays). For an MoE model two things differ from that in the grid (simulator.plan.grid):

- a decode step of B sequences x (K + 1) positions routes its positions alike (``[routing] reuse``):
  it loads experts_touched(B, K + 1, rho) experts, not those of B (K + 1) independent tokens; and a
  padded graph's padding rows load experts only where the engine routes them
  (simulator.physics.engine_time.expert_batch);
- a step with prompt tokens whose graph's padding rows the router skips loads the experts of its real
  tokens, not of the padded count.

These tables hold the difference per step shape, added to lin(T): per (B, K) for decode-only steps,
per real T for the others.
"""
from __future__ import annotations

import numpy as np

from simulator.physics.engine_time import expert_batch, padding_routed
from simulator.physics.step_model import lin_index
from simulator.physics.forward_pass import forward_ops
from simulator.physics.layers import decoder_cell_ops
from simulator.physics.operators import pass_time


def _experts_by_tokens(sc, t_top: int, caches=None) -> np.ndarray:
    """Routed experts of a pass at T = 0..t_top independent tokens, as lin(T) holds them (T = 0: nothing)."""
    m, dep, hw = sc.model, sc.deployment, sc.hardware
    t = np.arange(1, t_top + 1, dtype=float)
    ops = [o for o in forward_ops(m, dep, hw, t, 1.0, 0.0, caches=caches) if o.name.endswith("moe_experts")]
    return np.concatenate([[0.0], pass_time(ops, hw, dep, sc.profile, t.shape, caches=caches).total_s])


def _experts_by_cells(sc, b_top: int, k_max: int, caches=None) -> np.ndarray:
    """[B, K] for B = 0..b_top (row 0 unused): the grid's routed experts of a verify pass of B x (K + 1)."""
    m, dep, hw = sc.model, sc.deployment, sc.hardware
    B, K = np.arange(1, b_top + 1, dtype=float)[:, None], np.arange(k_max + 1, dtype=float)[None, :]
    padded = expert_batch(sc.engine, m, B, K, caches)
    ops = [o for o in decoder_cell_ops(m, dep, hw, B, K + 1.0, 0.0, expert_batch=padded, caches=caches)
           if o.name.endswith("moe_experts")]
    return np.concatenate([np.zeros((1, k_max + 1)),
                           pass_time(ops, hw, dep, sc.profile, (b_top, k_max + 1), caches=caches).total_s])


def step_expert_tables(sc, graphs, b_top: int, k_max: int, t_top: int,
                       caches=None) -> tuple[np.ndarray | None, np.ndarray | None]:
    """(per real T = 0..t_top: what to add to lin(padded T) for a step with prompt tokens, None where
    nothing changes; per (B, K), B = 0..b_top: what to add for a decode-only step), both None for a dense
    model. ``graphs``: the engine profile whose padding lin(T) is read at (serving.engine.graph_profile)."""
    if not sc.model.is_moe:
        return None, None
    indep = _experts_by_tokens(sc, t_top, caches)
    real = np.arange(t_top + 1)
    # the lin(T) entry a step of T tokens with prompt chunks reads (physics.step_model.lin_index; B, K aside)
    padded, graph = lin_index(graphs, sc.deployment, 0.0, 0.0, real.astype(float), caches)
    read = np.where(graph & (padded <= t_top), padded, real).astype(np.intp)
    mixed = None if padding_routed(sc.engine, sc.model) else np.where(read == real, 0.0, indep[real] - indep[read])
    B, K = np.arange(b_top + 1.0)[:, None], np.arange(k_max + 1.0)[None, :]
    index = lin_index(graphs, sc.deployment, B, K, caches=caches)[0].astype(np.intp)  # a decode-only step's entry
    decode = _experts_by_cells(sc, b_top, k_max, caches) - indep[np.minimum(index, t_top)]
    decode[0] = 0.0
    return mixed, decode
