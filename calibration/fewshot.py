"""Few-shot fit of a deployment's engine terms: the pure numerics behind ``calibration.fit_deployment``.

Parameters theta = the seven engine terms of ``simulator/specs/step_terms.py`` plus a scale s_a on the
acceptance rates::

    T(B, K)  = s s_spec^[K>0] kernel(B, K) + overhead(B, K)
               + max(0, c_step + c_seq B + (c_seq_spec B + c_spec B (K + 1)) [K > 0] - room(B, K))
               + c_coll calls(B, K)                                  the step's collective calls
    AL(K)    = 1 + sum_{j <= K} prod_{i <= j} min(s_a a_i, 0.999)          a chain (or a tree's own rates per depth)
    AL(K)    = the tree's, from its top-1 rates min(s_a a_d, 0.999) and rank tail   a draft tree (specs.tree_acceptance)
    speedup  = AL(K) * T(B, 0) / T(B, K)

kernel and overhead are the planner's own components at each point (verify + draft as the engine runs
them; the engine profile's host time), room the part of the engine's overlap window its own host time leaves
free (0 where it does not overlap: physics.engine_time.host_exposed_and_room_s). Observations are log step times or log speedups, each with the
scatter of one measurement (NOISE_FLOOR). The terms are the posterior of a prior (:func:`posterior`: the
learned population's centre, each term within its a priori spread) given the points: the maximum a
posteriori by bounded least squares (scipy.optimize.least_squares) and samples of the Laplace
approximation around it. With no point the answer is the prior; every consistent point narrows it.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.optimize import least_squares

from simulator.specs.deployment_fit import TERMS
from simulator.specs.step_terms import from_fit, to_fit
from simulator.specs import step_terms
from simulator.specs.tree_acceptance import TreeShape, draft_acceptance_lengths

PARAMS = tuple(TERMS) + ("acceptance_scale",)
ACCEPTANCE = PARAMS.index("acceptance_scale")
LOWER = np.array([TERMS[n][1] for n in TERMS] + [0.02])
UPPER = np.array([TERMS[n][2] for n in TERMS] + [50.0])  # the acceptance cap of 0.999 bounds it too
# log-scale scatter of one measured point when the fit leaves no residual to estimate it from:
# 2% is the repeat-to-repeat spread of step times in this project's engine sweeps and the rounding of
# published speedups to two digits (1.38x +- 0.005)
NOISE_FLOOR = 0.02


@dataclass(frozen=True)
class Points:
    """The planner's components at each measured point (arrays of shape (n,); rates (n, k_max))."""

    batch: np.ndarray
    k: np.ndarray
    kernel_s: np.ndarray  # verify + draft at (B, K) as the engine runs them
    overhead_s: np.ndarray  # host time at (B, K)
    kernel0_s: np.ndarray  # the same at (B, 0): the plain step a speedup divides by
    overhead0_s: np.ndarray
    rates: np.ndarray  # per-position acceptance rates the scale multiplies
    # a closed-loop benchmark whose speculating server runs fewer requests than plain decoding does: plain's
    # batch (None: ``batch``) and the speculative throughput's share R / B of it (None: 1)
    batch0: np.ndarray | None = None
    share: np.ndarray | None = None
    # the draft tree the rates are of (specs.tree_acceptance.tree_shape: with its rank tail, they are its top-1
    # rates per depth); None: a chain
    tree: TreeShape | None = None
    # the collective calls of the step at (B, K) and of the plain step a speedup divides by (None: 0, as at TP 1;
    # physics.step_model.step_collective_calls)
    calls: np.ndarray | None = None
    calls0: np.ndarray | None = None
    # the host room of their engines' overlap windows (physics.engine_time.host_exposed_and_room_s; None: 0, no overlap)
    room: np.ndarray | None = None
    room0: np.ndarray | None = None

    def __len__(self) -> int:
        return int(self.batch.size)


def step_time_s(theta: np.ndarray, batch, k, kernel_s, overhead_s, calls=None, room=None) -> np.ndarray:
    """The step of simulator/specs/step_terms.py; theta (m, 8) -> (m, n); ``calls`` the steps' collective calls,
    ``room`` their host room (None: 0)."""
    return step_terms.step_time_s(np.atleast_2d(theta)[:, :len(TERMS)], batch, k, kernel_s, overhead_s,
                                  0.0 if calls is None else calls, 0.0 if room is None else room)


def acceptance_length(scale, rates: np.ndarray, k, tree: TreeShape | None = None) -> np.ndarray:
    """AL at each point's K from its rates, every rate multiplied by s_a (capped at 0.999): the planner's formula
    for the draft (specs.tree_acceptance.draft_acceptance_lengths, the grid's); scale (m,), rates (n, k_max) -> (m, n).

    A tree with a rank tail: s_a scales the draft's top-1 rate at each depth (how often its best guess is the
    target's token on this deployment's prompts) and keeps the rank tail (how its lower-ranked candidates share
    the misses: the draft head's spread of confidence, not the prompts'), so a fitted scale moves the lengths
    through the tree as the grid's context factor does."""
    sa = np.atleast_1d(np.asarray(scale, dtype=float))
    k = np.atleast_1d(np.asarray(k)).astype(int)
    rates = np.broadcast_to(np.atleast_2d(np.asarray(rates, dtype=float)), (k.size, np.shape(rates)[-1]))
    out = np.empty((sa.size, k.size))
    unique, which = np.unique(rates, axis=0, return_inverse=True)
    for i, row in enumerate(unique):  # points with one rate set share one evaluation
        at = which.ravel() == i
        out[:, at] = draft_acceptance_lengths(row, k[at], sa, tree).T
    return out


def predict_log(kind: str, theta: np.ndarray, pts: Points) -> np.ndarray:
    """log of what is observed at each point: step time [s] ("step") or speedup over plain ("speedup")."""
    th = np.atleast_2d(theta)
    t = step_time_s(th, pts.batch, pts.k, pts.kernel_s, pts.overhead_s, pts.calls, pts.room)
    if kind == "step":
        return np.log(t)
    batch0 = pts.batch if pts.batch0 is None else pts.batch0
    t0 = step_time_s(th, batch0, np.zeros_like(pts.k), pts.kernel0_s, pts.overhead0_s, pts.calls0, pts.room0)
    share = 0.0 if pts.share is None else np.log(pts.share)
    return np.log(acceptance_length(th[:, ACCEPTANCE], pts.rates, pts.k, pts.tree)) + np.log(t0) - np.log(t) + share


POINT_FIELDS = ("batch", "k", "kernel_s", "overhead_s", "kernel0_s", "overhead0_s", "rates", "batch0", "share",
                "calls", "calls0", "room", "room0")


def subset(pts: Points, keep) -> Points:
    """The points ``keep`` selects (a mask or indices)."""
    return Points(**{f: None if getattr(pts, f) is None else np.asarray(getattr(pts, f))[keep] for f in POINT_FIELDS},
                  tree=pts.tree)


def scatter(residuals: np.ndarray, n_terms: int) -> float:
    """Log-scale scatter of one point: the residuals' RMS over the degrees of freedom, at least NOISE_FLOOR."""
    dof = residuals.size - n_terms
    rms = float(np.sqrt(np.sum(residuals ** 2) / dof)) if dof > 0 else 0.0
    return max(rms, NOISE_FLOOR)


def interval(samples: np.ndarray, level: float = 0.90) -> tuple[np.ndarray, np.ndarray]:
    """Equal-tailed percentile interval over the first axis."""
    tail = (1.0 - level) / 2 * 100
    return np.percentile(samples, tail, axis=0), np.percentile(samples, 100 - tail, axis=0)


def goodput_samples(samples: np.ndarray, kernel_s: np.ndarray, overhead_s: np.ndarray, batch: np.ndarray,
                    ks: np.ndarray, al: np.ndarray, calls=0.0, room=0.0) -> np.ndarray:
    """Goodput per sequence over a (B, K) grid for each theta sample: (m, nb, nk). al (m, nk) or (nk,); ``calls``
    the cells' collective calls and ``room`` their host room, broadcasting to (nb, nk)."""
    nb, nk = kernel_s.shape
    B = np.broadcast_to(np.asarray(batch, dtype=float)[:, None], (nb, nk)).ravel()
    K = np.broadcast_to(np.asarray(ks, dtype=float)[None, :], (nb, nk)).ravel()
    calls = np.broadcast_to(np.asarray(calls, dtype=float), (nb, nk)).ravel()
    room = np.broadcast_to(np.asarray(room, dtype=float), (nb, nk)).ravel()
    t = step_time_s(samples, B, K, kernel_s.ravel(), overhead_s.ravel(), calls, room).reshape(-1, nb, nk)
    al = np.atleast_2d(al)
    return al[:, None, :] / t


def next_measurements(goodput: np.ndarray, batch: np.ndarray, ks: np.ndarray, measured: set, n: int = 2
                      ) -> list[dict]:
    """The (B, K) cells where K* is least settled, best first, skipping measured cells; goodput (m, nb, nk).

    At each B the rival of K* is the K whose goodput interval overlaps K*'s and which is ahead of K* in
    the most samples (the posterior's draws); cells are ranked by that share (a measurement there decides K* at that B), then
    by how much the two 90% intervals overlap (intersection / the narrower one)."""
    lo, hi = interval(goodput)
    mid = np.median(goodput, axis=0)
    out = []
    for i, b in enumerate(batch):
        best = int(np.argmax(mid[i]))
        width = np.maximum(np.minimum(hi[i] - lo[i], hi[i, best] - lo[i, best]), 1e-30)
        overlap = np.clip((np.minimum(hi[i], hi[i, best]) - np.maximum(lo[i], lo[i, best])) / width, 0.0, 1.0)
        wins = np.mean(goodput[:, i, :] > goodput[:, i, best:best + 1], axis=0)
        wins = np.where((overlap > 0) & (np.arange(ks.size) != best), wins, -1.0)
        j = int(np.argmax(wins))
        if wins[j] < 0 or (int(b), int(ks[j])) in measured:
            continue
        out.append({"batch_size": int(b), "k": int(ks[j]), "k_star": int(ks[best]), "overlap": float(overlap[j]),
                    "rival_wins": float(wins[j])})
    out.sort(key=lambda d: (-round(d["rival_wins"], 2), -d["overlap"]))
    picked, seen_b = [], set()
    for d in out:  # distinct batch sizes
        if d["batch_size"] not in seen_b:
            picked.append(d)
            seen_b.add(d["batch_size"])
        if len(picked) == n:
            break
    return picked


# --- the posterior: a deployment's points update the learned population -----------------------------------

# tight tolerances: at the default ones a first step that happens not to reduce the cost (the cost terms start
# at their zero bound) ends the solve where it started
SOLVER = {"xtol": 1e-12, "ftol": 1e-12}

def posterior(kind: str, pts: Points, y_log: np.ndarray, prior_mean_fit, prior_sd_fit, n_samples: int = 200,
              seed: int = 0, free_acceptance: bool = False) -> dict:
    """Maximum a posteriori terms given the points and the prior N(mean, sd^2) over the seven terms in fit
    coordinates (log of a scale, microseconds of a cost; a term of spread 0 stays at its mean), and samples of
    the Laplace approximation around it (the inverse of the whitened Jacobian's J^T J). Each point is a log
    observation with scatter NOISE_FLOOR; when the points disagree with each other beyond it (their RMS
    residual above 2 NOISE_FLOOR with residual degrees of freedom), the scatter is the residuals' own and
    ``disagree`` says so. With no point it is the prior. ``free_acceptance``: also a scale on the rates
    (flat prior on its log), for speedups without a measured acceptance."""
    mean, sd = np.asarray(prior_mean_fit, dtype=float), np.asarray(prior_sd_fit, dtype=float)
    free = np.flatnonzero(sd > 0)
    n_t = free.size
    lo_all, hi_all = to_fit(LOWER[:len(TERMS)]), to_fit(UPPER[:len(TERMS)])
    lo = np.concatenate([lo_all[free], [np.log(LOWER[ACCEPTANCE])] if free_acceptance else []])
    hi = np.concatenate([hi_all[free], [np.log(UPPER[ACCEPTANCE])] if free_acceptance else []])

    def theta_of(z):
        phi = mean.copy()
        phi[free] = z[:n_t]
        th = np.concatenate([from_fit(phi), [np.exp(z[n_t]) if free_acceptance else 1.0]])
        return th

    def resid(z, sigma):
        obs = (predict_log(kind, theta_of(z), pts)[0] - y_log) / sigma if len(pts) else np.zeros(0)
        return np.concatenate([obs, (z[:n_t] - mean[free]) / sd[free]])

    z0 = np.concatenate([mean[free], [0.0] if free_acceptance else []])
    z0 = np.clip(z0, lo + 1e-9, hi - 1e-9)
    scale = np.concatenate([sd[free], [0.1] if free_acceptance else []])
    # solved for z - lo + scale, the same minimum: the solver's first trust region is the start's norm in spreads,
    # ~1e-14 where every free term starts on its zero bound (then the first step ends the solve where it started)
    shift = lo - scale

    def solve(start, sigma):
        return shift + least_squares(lambda w: resid(w + shift, sigma), start - shift, bounds=(lo - shift, hi - shift),
                                     x_scale=scale, method="trf", **SOLVER).x

    sigma, disagree = NOISE_FLOOR, False
    z = solve(z0, sigma)
    obs = predict_log(kind, theta_of(z), pts)[0] - y_log if len(pts) else np.zeros(0)
    rms = float(np.sqrt(np.mean(obs ** 2))) if obs.size else 0.0
    if obs.size >= 3 and rms > 2 * NOISE_FLOOR:  # the points disagree with each other beyond their scatter
        sigma, disagree = rms, True
        z = solve(z, sigma)
        obs = predict_log(kind, theta_of(z), pts)[0] - y_log
    jac = _jacobian_z(lambda v: resid(v, sigma), z)
    cov = np.linalg.pinv(jac.T @ jac)
    rng = np.random.default_rng(seed)
    draws = np.clip(rng.multivariate_normal(z, cov, n_samples, check_valid="ignore", method="eigh"), lo, hi)
    samples = np.array([theta_of(d) for d in draws])
    moved = [PARAMS[i] for i in free] + (["acceptance_scale"] if free_acceptance else [])
    return {"theta": theta_of(z), "samples": samples, "terms": moved, "residuals": obs, "sigma": sigma,
            "disagree": disagree, "prior_sd_fit": sd, "posterior_sd_fit": np.sqrt(np.clip(np.diag(cov)[:n_t], 0, None))}


def _jacobian_z(f, z: np.ndarray, h: float = 1e-5) -> np.ndarray:
    """Central differences of f at z (n_residuals, n_z)."""
    cols = []
    for i in range(z.size):
        e = np.zeros_like(z)
        e[i] = h * max(1.0, abs(z[i]))
        cols.append((f(z + e) - f(z - e)) / (2 * e[i]))
    return np.stack(cols, axis=1)


def prior_samples(prior_mean_fit, prior_sd_fit, n_samples: int = 200, seed: int = 0) -> np.ndarray:
    """Term vectors (n, 8) drawn from the prior (the zero-shot spread), acceptance scale 1."""
    rng = np.random.default_rng(seed)
    phi = rng.normal(np.asarray(prior_mean_fit), np.asarray(prior_sd_fit), (n_samples, len(TERMS)))
    return np.column_stack([from_fit(phi), np.ones(n_samples)])
