"""Few-shot fit of a deployment's engine terms: the pure numerics behind ``calibration.fit_deployment``.

Parameters theta = (s, c_step, c_seq, c_spec, s_a), the terms of ``simulator/specs/deployment_fit.py``
plus a scale on the acceptance rates::

    T(B, K)  = s * kernel(B, K) + overhead(B, K) + c_step + c_seq B + c_spec B (K + 1) [K > 0]
    AL(K)    = 1 + sum_{j <= K} prod_{i <= j} min(s_a a_i, 0.999)
    speedup  = AL(K) * T(B, 0) / T(B, K)

kernel and overhead are the planner's own components at each point (verify + draft as the engine runs
them; the engine profile's host time). Observations are log step times or log speedups; the terms are
fitted by bounded least squares (scipy.optimize.least_squares, trust-region reflective) on those logs,
only as many as the points identify: with one or two points in a stated priority order by a rank test
on the Jacobian, with three or more the identified subset whose fits best predict each point left out
(:func:`select_terms`). Intervals: a parametric bootstrap that redraws every point from the fitted value with the
residuals' scatter (never below NOISE_FLOOR, the repeat-to-repeat spread of a measured step), refits,
and reads the 5th and 95th percentiles.
"""
from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations

import numpy as np
from scipy.optimize import least_squares

from simulator.specs.deployment_fit import TERMS

PARAMS = tuple(TERMS) + ("acceptance_scale",)
NEUTRAL = np.array([TERMS[n][0] for n in TERMS] + [1.0])
LOWER = np.array([TERMS[n][1] for n in TERMS] + [0.02])
UPPER = np.array([TERMS[n][2] for n in TERMS] + [50.0])  # the acceptance cap of 0.999 bounds it too
# solver units (so every step of the trust region is of order one): -, ms per step, 10 us per sequence,
# 1 us per speculative token, -
UNITS = np.array([1.0, 1e-3, 1e-5, 1e-6, 1.0])
# log-scale scatter of one measured point when the fit leaves no residual to estimate it from:
# 2% is the repeat-to-repeat spread of step times in this project's engine sweeps and the rounding of
# published speedups to two digits (1.38x +- 0.005)
NOISE_FLOOR = 0.02
COLLINEAR = 0.05  # smallest / largest singular value of the normalized Jacobian columns below this: not identified
STEP_PRIORITY = ("kernel_scale", "spec_per_token_s", "host_per_step_s", "host_per_seq_s")
SPEEDUP_PRIORITY = ("acceptance_scale", "spec_per_token_s", "kernel_scale", "host_per_step_s", "host_per_seq_s")


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

    def __len__(self) -> int:
        return int(self.batch.size)


def step_time_s(theta: np.ndarray, batch, k, kernel_s, overhead_s) -> np.ndarray:
    """T = s kernel + overhead + c_step + c_seq B + c_spec B (K + 1) [K > 0]; theta (m, 5) -> (m, n)."""
    th = np.atleast_2d(theta)
    s, c0, c1, c2 = (th[:, i, None] for i in range(4))
    batch, k = np.asarray(batch, dtype=float), np.asarray(k, dtype=float)
    return s * kernel_s + overhead_s + c0 + c1 * batch + c2 * batch * (k + 1.0) * (k > 0)


def acceptance_length(scale, rates: np.ndarray, k) -> np.ndarray:
    """AL = 1 + sum_{j <= K} prod_{i <= j} min(s_a a_i, 0.999); scale (m,), rates (n, k_max) -> (m, n)."""
    sa = np.atleast_1d(np.asarray(scale, dtype=float))[:, None, None]
    r = np.minimum(sa * np.asarray(rates, dtype=float)[None], 0.999)
    reached = np.arange(1, r.shape[-1] + 1)[None, :] <= np.asarray(k)[:, None]
    return 1.0 + (np.cumprod(r, axis=-1) * reached[None]).sum(axis=-1)


def predict_log(kind: str, theta: np.ndarray, pts: Points) -> np.ndarray:
    """log of what is observed at each point: step time [s] ("step") or speedup over plain ("speedup")."""
    th = np.atleast_2d(theta)
    t = step_time_s(th, pts.batch, pts.k, pts.kernel_s, pts.overhead_s)
    if kind == "step":
        return np.log(t)
    batch0 = pts.batch if pts.batch0 is None else pts.batch0
    t0 = step_time_s(th, batch0, np.zeros_like(pts.k), pts.kernel0_s, pts.overhead0_s)
    share = 0.0 if pts.share is None else np.log(pts.share)
    return np.log(acceptance_length(th[:, 4], pts.rates, pts.k)) + np.log(t0) - np.log(t) + share


def jacobian(kind: str, theta: np.ndarray, pts: Points) -> np.ndarray:
    """d log(observation) / d parameter in solver units, forward differences: (n, 5)."""
    base = predict_log(kind, theta, pts)[0]
    cols = []
    for i in range(len(PARAMS)):
        step = np.zeros(len(PARAMS))
        step[i] = 1e-4 * UNITS[i]
        cols.append((predict_log(kind, theta + step, pts)[0] - base) / 1e-4)
    return np.stack(cols, axis=1)


def choose_terms(kind: str, pts: Points, priority: tuple, max_terms: int) -> list[str]:
    """Terms in ``priority`` order that the points identify: a term is taken when it moves the
    observations and its Jacobian column is not (nearly) a combination of those already taken."""
    jac = jacobian(kind, NEUTRAL, pts)
    chosen: list[int] = []
    for name in priority:
        if len(chosen) >= max_terms:
            break
        i = PARAMS.index(name)
        if identified(jac, chosen + [i]):
            chosen.append(i)
    return [PARAMS[i] for i in chosen]


def identified(jac: np.ndarray, idx: list[int]) -> bool:
    """Whether the Jacobian columns ``idx`` all move the observations and none is (nearly) a
    combination of the others (the rank test of :func:`choose_terms`)."""
    if any(np.linalg.norm(jac[:, i]) < 1e-9 for i in idx):
        return False
    cols = jac[:, idx] / np.linalg.norm(jac[:, idx], axis=0)
    sv = np.linalg.svd(cols, compute_uv=False)
    return bool(sv[-1] / sv[0] >= COLLINEAR)


# Most points whose fits are compared leave-one-out (beyond, the rank test's choice stands)
MAX_LOO_POINTS = 30


POINT_FIELDS = ("batch", "k", "kernel_s", "overhead_s", "kernel0_s", "overhead0_s", "rates", "batch0", "share")


def subset(pts: Points, keep) -> Points:
    """The points ``keep`` selects (a mask or indices)."""
    return Points(*(None if getattr(pts, f) is None else np.asarray(getattr(pts, f))[keep] for f in POINT_FIELDS))


def loo_error(kind: str, pts: Points, y_log: np.ndarray, terms: list[str]) -> float:
    """Root-mean-square log error of each point predicted by the terms fitted to all the others."""
    errs = []
    for i in range(len(pts)):
        keep = np.arange(len(pts)) != i
        theta = fit_terms(kind, subset(pts, keep), y_log[keep], terms)
        errs.append(predict_log(kind, theta, subset(pts, ~keep))[0][0] - y_log[i])
    return float(np.sqrt(np.mean(np.square(errs))))


def select_terms(kind: str, pts: Points, y_log: np.ndarray, priority: tuple, max_terms: int) -> list[str]:
    """The terms to fit: as many as the rank test takes in priority order (:func:`choose_terms`), and
    with three or more points (one more than the terms: each point can be left out) the identified
    subset of that size whose fits predict the left-out point best (:func:`loo_error`; a tie within
    1e-6 goes to the priority order), so that the points themselves say whether a fixed cost per step,
    per sequence or per speculative token is what the planner misses. With fewer points there is no
    point to leave out: the rank test's choice."""
    n = len(pts)
    chosen = choose_terms(kind, pts, priority, max_terms)
    if n < 3 or n > MAX_LOO_POINTS:
        return chosen
    jac = jacobian(kind, NEUTRAL, pts)
    best, best_err = chosen, np.inf
    for names in combinations(priority, len(chosen)):  # as many terms as the rank test takes
        if not identified(jac, [PARAMS.index(x) for x in names]):
            continue
        err = loo_error(kind, pts, y_log, list(names))
        if err < best_err - 1e-6:
            best, best_err = list(names), err
    return best


def max_terms_for(n_points: int) -> int:
    """At most as many terms as points up to 2 points; one fewer beyond (a residual to judge them by)."""
    return n_points if n_points <= 2 else n_points - 1


def fit_terms(kind: str, pts: Points, y_log: np.ndarray, terms: list[str], start: np.ndarray | None = None
              ) -> np.ndarray:
    """theta (5,) minimizing sum (log predicted - y_log)^2 over ``terms`` within their bounds; the
    others stay neutral (s = 1, c = 0; s_a = 1: the acceptance given)."""
    idx = [PARAMS.index(n) for n in terms]
    theta = NEUTRAL.copy() if start is None else start.copy()
    if not idx:
        return theta
    lo, hi = LOWER[idx] / UNITS[idx], UPPER[idx] / UNITS[idx]
    x0 = np.clip(theta[idx] / UNITS[idx], lo + 1e-6 * (hi - lo), hi - 1e-6 * (hi - lo))

    def resid(x):
        th = theta.copy()
        th[idx] = x * UNITS[idx]
        return predict_log(kind, th, pts)[0] - y_log

    sol = least_squares(resid, x0, bounds=(lo, hi), method="trf", xtol=1e-10, ftol=1e-12)
    theta[idx] = sol.x * UNITS[idx]
    return theta


def scatter(residuals: np.ndarray, n_terms: int) -> float:
    """Log-scale scatter of one point: the residuals' RMS over the degrees of freedom, at least NOISE_FLOOR."""
    dof = residuals.size - n_terms
    rms = float(np.sqrt(np.sum(residuals ** 2) / dof)) if dof > 0 else 0.0
    return max(rms, NOISE_FLOOR)


def bootstrap(kind: str, pts: Points, theta: np.ndarray, terms: list[str], sigma: float, n_boot: int = 200,
              seed: int = 0) -> np.ndarray:
    """Parametric bootstrap: each point redrawn as fitted * exp(N(0, sigma^2)) and refitted: (n_boot, 5)."""
    rng = np.random.default_rng(seed)
    fitted = predict_log(kind, theta, pts)[0]
    out = np.empty((n_boot, len(PARAMS)))
    for i in range(n_boot):
        out[i] = fit_terms(kind, pts, fitted + rng.normal(0.0, sigma, fitted.size), terms, theta)
    return out


def interval(samples: np.ndarray, level: float = 0.90) -> tuple[np.ndarray, np.ndarray]:
    """Equal-tailed percentile interval over the first axis."""
    tail = (1.0 - level) / 2 * 100
    return np.percentile(samples, tail, axis=0), np.percentile(samples, 100 - tail, axis=0)


def fit_with_intervals(kind: str, pts: Points, y_log: np.ndarray, priority: tuple, n_boot: int = 200,
                       seed: int = 0) -> dict:
    """Choose the terms, fit them, bootstrap them: theta, samples, terms, residuals, sigma."""
    terms = select_terms(kind, pts, y_log, priority, max_terms_for(len(pts)))
    theta = fit_terms(kind, pts, y_log, terms)
    resid = predict_log(kind, theta, pts)[0] - y_log
    sigma = scatter(resid, len(terms))
    samples = bootstrap(kind, pts, theta, terms, sigma, n_boot, seed)
    return {"theta": theta, "samples": samples, "terms": terms, "residuals": resid, "sigma": sigma}


def goodput_samples(samples: np.ndarray, kernel_s: np.ndarray, overhead_s: np.ndarray, batch: np.ndarray,
                    ks: np.ndarray, al: np.ndarray) -> np.ndarray:
    """Goodput per sequence over a (B, K) grid for each theta sample: (m, nb, nk). al (m, nk) or (nk,)."""
    nb, nk = kernel_s.shape
    B = np.broadcast_to(np.asarray(batch, dtype=float)[:, None], (nb, nk)).ravel()
    K = np.broadcast_to(np.asarray(ks, dtype=float)[None, :], (nb, nk)).ravel()
    t = step_time_s(samples, B, K, kernel_s.ravel(), overhead_s.ravel()).reshape(-1, nb, nk)
    al = np.atleast_2d(al)
    return al[:, None, :] / t


def next_measurements(goodput: np.ndarray, batch: np.ndarray, ks: np.ndarray, measured: set, n: int = 2
                      ) -> list[dict]:
    """The (B, K) cells where K* is least settled, best first, skipping measured cells; goodput (m, nb, nk).

    At each B the rival of K* is the K whose goodput interval overlaps K*'s and which is ahead of K* in
    the most resamples; cells are ranked by that share (a measurement there decides K* at that B), then
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
