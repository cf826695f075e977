"""Learn the engine terms' population from the published corpus: the planner's learned layer.

    python -m calibration.learn_step [--corpus calibration/data/published/corpus.csv] [--output FILE]

What is learned are the seven physically named terms of ``simulator/specs/step_terms.py`` (kernel scale,
speculative kernel scale, host time per step, per sequence, per sequence when speculating, per speculative
token, per collective call), as a population: each source of the corpus (one lab's engine, GPU and harness) has its own values,
drawn from a normal population in fit coordinates (log of a scale, microseconds of a cost). A zero-shot
prediction uses the population's centre; the population's spread, with the rows' own scatter, is its band.

Rows learned from: plain decode step times (log step time) and speculative step speedups (log speedup),
priced by the physics alone (``--physics-only``, the row's measured kernel tables and engine profile). A
speedup curve without a published acceptance length has its own acceptance length, free (a nuisance: its
rows inform only how the speedup falls with batch size). Serving and static-batch rows need the serving
simulation for every guess and are not learned from; they are scored with the layer all the same.

The fit: maximum a posteriori over the population mean, each source's values and each curve's acceptance
(bounded least squares, scipy), with the population spread and the rows' scatter re-estimated from the
fit a few times (empirical Bayes). The form of the layer, its terms and the starting spreads are fixed
here, before any score is read; ``calibration.transfer`` scores it on sources it never saw.
"""
from __future__ import annotations

import datetime as dt
import hashlib
import json
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
from scipy.optimize import least_squares

from calibration.learn_rows import Rows, corpus_cases, rows_digest, training_rows  # noqa: F401 (the module's API)
from calibration.transfer_cases import CORPUS, read_corpus
from simulator.cli.common import OneLineParser, check_output_file, check_output_spares_inputs, run_cli, write_atomically
from simulator.specs.step_terms import (A_PRIORI_SD, LEARNED_FILE, LEARNED_FORMAT, LOWER, NEUTRAL, TERM_NAMES, TERMS, UPPER,
                                        compose_step_s, engine_family, from_fit, gpu_family, prior_from,
                                        to_fit)

N_TERMS = len(TERMS)
# the population's spread across sources is fixed a priori (step_terms.A_PRIORI_SD): a handful of sources cannot
# estimate it (point estimates of shrunken per-source values would collapse it)
START_SD = A_PRIORI_SD
HYPER_SD = np.array([0.7, 2000.0, 100.0, 50.0, 0.7, 100.0, 50.0])  # a weak pull of the population mean to the physics
ROW_SIGMA_START = 0.05  # log-scale scatter of one row inside its source, before it is estimated
EB_ROUNDS = 2  # the rows' scatter is re-estimated from the fit; the population spread stays START_SD
LOG_AL_BOUNDS = (np.log(1.0 + 1e-6), np.log(9.0))


def predict_log(rows: Rows, theta_rows: np.ndarray, log_al: np.ndarray) -> np.ndarray:
    """log of what each row observes given its terms (n, 7) and its log acceptance length (n,)."""
    t = _step(theta_rows, rows.batch, rows.k, rows.kernel_s, rows.overhead_s, rows.calls, rows.room)
    t0 = _step(theta_rows, rows.batch0, np.zeros_like(rows.k), rows.kernel0_s, rows.overhead0_s, rows.calls0,
               rows.room0)
    spd = log_al + np.log(t0) - np.log(t) + rows.log_share
    return np.where(rows.kind == "step", np.log(np.where(rows.kind == "step", t, 1.0)), spd)


def _step(th: np.ndarray, batch, k, kernel_s, overhead_s, calls, room) -> np.ndarray:
    """The step of simulator/specs/step_terms.py with each row's own terms (n, 7)."""
    return compose_step_s([th[:, i] for i in range(N_TERMS)], batch, k, kernel_s, overhead_s, calls, room)


@dataclass(frozen=True)
class Population:
    """What the fit learned: population mean and spread (fit coordinates), the rows' scatter, each source's values."""

    mean_fit: np.ndarray
    sd_fit: np.ndarray
    row_sigma: float
    source_fit: dict  # source -> (7,) fit coordinates
    n_rows: int
    sources: tuple
    form: str = "all terms"
    form_errors: dict = field(default_factory=dict)  # leave-one-source-out MAPE of each form on the training rows
    # what the terms leave unexplained once each source has its own (RMS log residual per kind of row): the
    # model's own misfit along one deployment's curve, which a posterior's band carries beside its terms' spread
    misfit_by_kind: dict = field(default_factory=dict)
    # engine family -> its offset from the population mean (fit coordinates), where the form has a family level
    family_fit: dict = field(default_factory=dict)
    # GPU family (the hardware file's architecture) -> its offset, where the form has a GPU-family level
    gpu_family_fit: dict = field(default_factory=dict)

    def mean_for(self, family: str | None = None, gpu: str | None = None) -> np.ndarray:
        """The population's centre for a new deployment of an engine family on a GPU family (a family the rows
        never saw adds nothing: the mean)."""
        return self.mean_fit + self.family_fit.get(family, 0.0) + self.gpu_family_fit.get(gpu, 0.0)

    def prior(self, learned_from: dict | None = None, path: str = "", family: str | None = None,
              gpu: str | None = None):
        return prior_from(self.mean_for(family, gpu), self.sd_fit, learned_from, path, self.misfit_by_kind)

    def centre_of(self, engine: str, hardware: str) -> tuple[str | None, str | None]:
        """(engine family, GPU family) a deployment's centre is read at: each only where the form has its level."""
        return (engine_family(engine) if self.family_fit else None,
                gpu_family(hardware) if self.gpu_family_fit else None)


# The forms the layer may take (which terms are free; the others stay at the physics), fixed before any score:
# every term; only what speculation adds (the plain step rests on measured kernel tables already); host time only.
# Each also with an engine-family level (sources of one engine family share an offset from the population mean,
# drawn with the a priori spread: a family's host loop and kernels differ from another's about as much as two
# deployments do), or with a GPU-family level (sources on one GPU family, the hardware file's architecture, share
# one, with the same spread); not both at once (docs/learned_layer_choices.md). Which one a prediction uses is
# chosen by leave-one-source-out on the training sources alone (:meth:`Learner.learn`), so a held-out source's rows
# never choose the form that predicts them, and a family level is used only where the training rows support it.
BASE_FORMS = {
    "all terms": TERM_NAMES,
    "speculation terms": ("spec_per_token_s", "spec_kernel_scale", "spec_host_per_seq_s"),
    "host terms": ("host_per_step_s", "host_per_seq_s", "spec_per_token_s", "spec_host_per_seq_s", "collective_s"),
}
FAMILY_LEVEL = " + engine family"
GPU_LEVEL = " + GPU family"
# the speculative cost in the kernels alone (no host cost per speculating sequence, which is blind to the model's
# size), without family levels (docs/learned_layer_choices.md, session 5)
KERNEL_FORMS = {
    "speculative kernel scale": ("spec_kernel_scale",),
    "speculative kernels and tokens": ("spec_kernel_scale", "spec_per_token_s"),
}
FORMS = (BASE_FORMS | {name + FAMILY_LEVEL: terms for name, terms in BASE_FORMS.items()}
         | {name + GPU_LEVEL: terms for name, terms in BASE_FORMS.items()} | KERNEL_FORMS)


def has_family_level(form: str) -> bool:
    return FAMILY_LEVEL in form


def has_gpu_level(form: str) -> bool:
    return GPU_LEVEL in form


def _levels(rows: Rows, form: str) -> list[tuple[str, tuple, np.ndarray]]:
    """The form's family levels: each ("engine" or "gpu", its families, each row's family index)."""
    out = []
    if has_family_level(form):
        out.append(("engine", [engine_family(e) for e in rows.engine]))
    if has_gpu_level(form):
        out.append(("gpu", [gpu_family(g) for g in rows.gpu]))  # the hardware file's architecture
    return [(level, fams := tuple(sorted(set(of_row))), np.array([fams.index(f) for f in of_row], dtype=int))
            for level, of_row in out]


def fit_population(rows: Rows, form: str = "all terms", start_sd: np.ndarray = START_SD) -> Population:
    """Maximum a posteriori population, per-source values and per-curve acceptance of the form's free terms
    (the others at the physics' neutral values); the rows' scatter by empirical Bayes."""
    fit = _PopulationFit(rows, form, start_sd)
    x = fit.initial()
    scale = np.maximum(np.concatenate([fit.sd, np.tile(fit.sd, fit.n_src), np.tile(fit.sd, fit.n_fam),
                                       np.full(fit.n_curves, 0.1)]), 1e-6)
    for _ in range(EB_ROUNDS):
        x = least_squares(fit.resid, x, jac=fit.jac, bounds=(fit.lower, fit.upper), method="trf", x_scale=scale,
                          tr_solver="exact", xtol=1e-8, ftol=1e-8).x
        fit.sigma = max(float(np.sqrt(np.mean((fit.resid(x)[:fit.n] * fit.sigma) ** 2))), 0.01)
    return fit.population(x)


class _PopulationFit:
    """The MAP problem of :func:`fit_population`: the fit vector [population mean | per-source values | family
    offsets | per-curve log acceptance] (each block ``nf`` free terms wide but the last), its residuals (rows in
    units of the rows' scatter ``sigma``, then the priors) and their Jacobian. ``sigma`` is re-estimated between
    the empirical-Bayes rounds."""

    def __init__(self, rows: Rows, form: str, start_sd: np.ndarray):
        self.free = np.array([TERM_NAMES.index(n) for n in FORMS[form]])
        self.form, self.nf = form, self.free.size
        self.sources = tuple(sorted(set(rows.source)))
        self.src_idx = np.array([self.sources.index(s) for s in rows.source])
        self.levels = levels = _levels(rows, form)
        self.n_fam = sum(len(families) for _, families, _ in levels)  # every family of every level: one offset each
        # each row's offset vector per level, as an index into the n_fam offsets
        self.fam_idx = [idx + sum(len(f) for _, f, _ in levels[:i]) for i, (_, _, idx) in enumerate(levels)]
        curve_ids = sorted(set(rows.curve[rows.curve >= 0].tolist()))  # the curves left after a hold-out, renumbered
        self.rows = replace(rows, curve=np.array([curve_ids.index(c) if c >= 0 else -1 for c in rows.curve], dtype=int))
        self.n_src, self.n_curves, self.n = len(self.sources), len(curve_ids), len(rows)
        self.neutral_all = to_fit(NEUTRAL)
        self.neutral, self.sd = self.neutral_all[self.free], start_sd[self.free].astype(float)
        self.sigma = ROW_SIGMA_START
        self.cut_src = self.nf * (1 + self.n_src)
        self.cut = self.cut_src + self.nf * self.n_fam
        lo, hi = to_fit(LOWER)[self.free], to_fit(UPPER)[self.free]
        # a family's offset is bounded so that mean + offset can reach each term's bounds (the sum is clipped there)
        self.lower = np.concatenate([lo, np.tile(lo, self.n_src), np.tile(lo - hi, self.n_fam),
                                     np.full(self.n_curves, LOG_AL_BOUNDS[0])])
        self.upper = np.concatenate([hi, np.tile(hi, self.n_src), np.tile(hi - lo, self.n_fam),
                                     np.full(self.n_curves, LOG_AL_BOUNDS[1])])

    def initial(self) -> np.ndarray:
        """Every value at the physics' neutral, no offsets, each curve's acceptance at its largest speedup."""
        rows, nf = self.rows, self.nf
        al0 = [np.clip(np.max(rows.y_log[rows.curve == c]), *LOG_AL_BOUNDS) for c in range(self.n_curves)]
        x = np.concatenate([self.neutral, np.tile(self.neutral, self.n_src), np.zeros(self.n_fam * nf),
                            np.asarray(al0, dtype=float)])
        return np.clip(x, self.lower + 1e-9, self.upper - 1e-9)

    def unpack(self, v):
        nf, cut_src, cut = self.nf, self.cut_src, self.cut
        return v[:nf], v[nf:cut_src].reshape(self.n_src, nf), v[cut_src:cut].reshape(self.n_fam, nf), v[cut:]

    def _log_al(self, al) -> np.ndarray:
        rows = self.rows
        return np.where(rows.curve >= 0, al[np.maximum(rows.curve, 0)] if self.n_curves else 0.0, rows.log_al)

    def _row_log(self, phi_free, log_al):
        phi = np.tile(self.neutral_all, (self.n, 1))
        phi[:, self.free] = phi_free
        return predict_log(self.rows, from_fit(phi), log_al)

    def resid(self, v):
        mu, per, off, al = self.unpack(v)
        phi_free = per[self.src_idx] + sum(off[idx] for idx in self.fam_idx)
        r_rows = (self._row_log(phi_free, np.nan_to_num(self._log_al(al))) - self.rows.y_log) / self.sigma
        sd = self.sd
        return np.concatenate([r_rows, ((per - mu) / sd).ravel(), (off / sd).ravel(),
                               (mu - self.neutral) / HYPER_SD[self.free]])

    def jac(self, v):
        """Dense (a hundred parameters): a row moves only with its own terms (its source's values plus its
        families' offsets, one finite difference per term for every row at once) and its curve's acceptance
        (slope 1); the prior residuals are linear. Exact trust-region steps on it are several times faster than
        scipy's grouped differences of the whole residual with an iterative solver."""
        _, per, off, al = self.unpack(v)
        n, nf, n_src, sd, sigma, rows = self.n, self.nf, self.n_src, self.sd, self.sigma, self.rows
        n_off = self.n_fam * nf
        phi_free = per[self.src_idx] + sum(off[idx] for idx in self.fam_idx)
        log_al = np.nan_to_num(self._log_al(al))
        base = self._row_log(phi_free, log_al)
        grad = np.empty((n, nf))
        for j in range(nf):
            h = np.sqrt(np.finfo(float).eps) * np.maximum(1.0, np.abs(phi_free[:, j]))
            moved = phi_free.copy()
            moved[:, j] += h
            grad[:, j] = (self._row_log(moved, log_al) - base) / h
        J = np.zeros((n + n_src * nf + n_off + nf, v.size))
        rows_at = np.arange(n)[:, None]
        J[rows_at, nf + self.src_idx[:, None] * nf + np.arange(nf)] = grad / sigma
        for idx in self.fam_idx:
            J[rows_at, self.cut_src + idx[:, None] * nf + np.arange(nf)] = grad / sigma
        curve_rows = np.flatnonzero(rows.curve >= 0)
        J[curve_rows, self.cut + rows.curve[curve_rows]] = 1.0 / sigma
        prior_rows, prior_terms = n + np.arange(n_src * nf), np.tile(np.arange(nf), n_src)
        J[prior_rows, nf + np.arange(n_src * nf)] = 1.0 / sd[prior_terms]
        J[prior_rows, prior_terms] = -1.0 / sd[prior_terms]
        J[n + n_src * nf + np.arange(n_off), self.cut_src + np.arange(n_off)] = 1.0 / sd[np.arange(n_off) % nf]
        J[n + n_src * nf + n_off + np.arange(nf), np.arange(nf)] = 1.0 / HYPER_SD[self.free]
        return J

    def population(self, x) -> Population:
        """The fitted vector as a :class:`Population` (every term; the ones the form leaves out at neutral)."""
        mu, per, off, _ = self.unpack(x)
        rows, free, neutral_all = self.rows, self.free, self.neutral_all
        left = self.resid(x)[:self.n] * self.sigma  # log residuals with every source's own terms
        misfit = {str(k): float(np.sqrt(np.mean(left[rows.kind == k] ** 2))) for k in ("step", "speedup")
                  if (rows.kind == k).any()}
        mean, spread = neutral_all.copy(), np.zeros(N_TERMS)
        mean[free], spread[free] = mu, self.sd
        per_all = {}
        for i, src in enumerate(self.sources):
            v = neutral_all.copy()
            v[free] = per[i]
            per_all[src] = v
        offsets = {"engine": {}, "gpu": {}}
        first = 0
        for level, families, _ in self.levels:
            for i, fam in enumerate(families):
                v = np.zeros(N_TERMS)
                v[free] = off[first + i]
                offsets[level][fam] = v
            first += len(families)
        return Population(mean, spread, self.sigma, per_all, self.n, self.sources, self.form, misfit_by_kind=misfit,
                          family_fit=offsets["engine"], gpu_family_fit=offsets["gpu"])


def predict_rows(rows: Rows, pop: Population) -> tuple[np.ndarray, np.ndarray]:
    """(predicted value, scored?) of each row with the population's centre: a plain step [s] or a speedup. A
    curve without a published acceptance length is anchored on its smallest batch size (that row not scored),
    as calibration.transfer anchors it."""
    theta = from_fit(np.array([pop.mean_for(*pop.centre_of(e, g)) for e, g in zip(rows.engine, rows.gpu)])
                     .reshape(len(rows), N_TERMS))
    base = predict_log(rows, theta, np.zeros(len(rows)))  # a speedup's log without log AL
    log_al = rows.log_al.copy()
    scored = np.ones(len(rows), dtype=bool)
    for c in set(rows.curve[rows.curve >= 0].tolist()):
        idx = np.flatnonzero(rows.curve == c)
        first = idx[np.argmin(rows.batch0[idx] + 1e-3 * rows.k[idx])]
        log_al[idx] = rows.y_log[first] - base[first]
        scored[first] = False
    return np.exp(base + np.where(rows.kind == "step", 0.0, np.nan_to_num(log_al))), scored


def held_out_errors(rows: Rows, pop: Population) -> np.ndarray:
    """|predicted / measured - 1| of the scored rows."""
    pred, scored = predict_rows(rows, pop)
    return np.abs(pred / np.exp(rows.y_log) - 1)[scored]


class Learner:
    """Learns layers from subsets of the training rows, each fit kept for the subsets asked again (the nested
    hold-outs share most of them); it lives as long as one scoring run."""

    def __init__(self, rows: Rows):
        self.rows = rows
        self._fits: dict = {}
        self._learned: dict = {}

    def fit(self, mask: np.ndarray, form: str) -> Population:
        key = (np.flatnonzero(mask).tobytes(), form)
        if key not in self._fits:
            self._fits[key] = fit_population(self.rows.take(mask), form)
        return self._fits[key]

    def form_errors(self, mask: np.ndarray) -> dict:
        """Leave-one-source-out MAPE of each form over the rows of ``mask`` (each predicted without its source)."""
        out = {}
        for form in FORMS:
            errs = [held_out_errors(self.rows.take(mask & (self.rows.source == src)),
                                    self.fit(mask & (self.rows.source != src), form))
                    for src in sorted(set(self.rows.source[mask]))]
            out[form] = float(np.mean(np.concatenate(errs)))
        return out

    def learn(self, mask: np.ndarray | None = None) -> Population:
        """The layer learned from the rows of ``mask``: its form chosen on them by leave-one-source-out, then
        fitted to all of them."""
        mask = np.ones(len(self.rows), dtype=bool) if mask is None else mask
        key = np.flatnonzero(mask).tobytes()
        if key not in self._learned:  # a hold-out asked again (e.g. --holdout-source and its scoring) is learned once
            errs = self.form_errors(mask)
            form = min(errs, key=errs.get)
            self._learned[key] = replace(self.fit(mask, form), form_errors=errs)
        return self._learned[key]

    def without(self, column: str, value) -> Population:
        """The layer learned from every row whose ``column`` (source, gpu or engine) is not ``value``, form choice
        included: nothing of the held-out group informs it."""
        return self.learn(getattr(self.rows, column) != value)


def learned_document(pop: Population, corpus_path: Path, rows: Rows) -> dict:
    """The shipped layer: population per term, what it was learned from and how."""
    centre = from_fit(pop.mean_fit)
    return {
        "format": LEARNED_FORMAT, "format_version": 1,
        "population": {n: {"centre": float(f"{centre[i]:.6g}"), "mean_fit": float(f"{pop.mean_fit[i]:.6g}"),
                           "sd_fit": float(f"{pop.sd_fit[i]:.6g}"), "fit_coordinate": TERMS[n][3]}
                       for i, n in enumerate(TERM_NAMES)},
        "row_log_scatter": round(pop.row_sigma, 5),
        "misfit_log_by_kind": {k: round(v, 5) for k, v in pop.misfit_by_kind.items()},
        "learned_from": {"corpus": str(corpus_path.name), "corpus_sha256": hashlib.sha256(corpus_path.read_bytes()).hexdigest(),
                         "training_rows_sha256": rows_digest(rows),
                         "rows": int(pop.n_rows), "sources": len(pop.sources), "source_ids": list(pop.sources),
                         "kinds": {k: int((rows.kind == k).sum()) for k in ("step", "speedup")},
                         "command": "python -m calibration.learn_step",
                         "date": dt.date.today().isoformat()},
        "per_source_fit": {s: [float(f"{v:.5g}") for v in pop.source_fit[s]] for s in pop.sources},
        "form": pop.form, "free_terms": list(FORMS[pop.form]),
        **({"family_offsets_fit": {f: [float(f"{v:.6g}") for v in off] for f, off in pop.family_fit.items()}}
           if pop.family_fit else {}),
        **({"gpu_family_offsets_fit": {f: [float(f"{v:.6g}") for v in off] for f, off in pop.gpu_family_fit.items()}}
           if pop.gpu_family_fit else {}),
        "form_loso_mape": {k: round(v, 5) for k, v in pop.form_errors.items()},
        "method": "form chosen by leave-one-source-out MAPE on the training rows; maximum a posteriori of a normal population over per-source terms (fit coordinates), empirical-Bayes"
                  " spreads; calibration/learn_step.py. Scored leave-one-source-out in calibration/data/transfer/transfer.md",
    }


def main(argv: list[str] | None = None) -> int:
    p = OneLineParser(prog="python -m calibration.learn_step", description=__doc__.split("\n\n")[0])
    p.add_argument("--corpus", default=str(CORPUS), help="published corpus CSV")
    p.add_argument("--output", default=str(LEARNED_FILE), help="the learned layer JSON (default: the shipped one)")
    args = p.parse_args(argv)

    def body() -> int:
        path = Path(args.corpus)
        check_output_file(args.output)  # before the learning, as every command
        check_output_spares_inputs(args, "--output", args.output)
        rows = training_rows(corpus_cases(read_corpus(path)))
        pop = Learner(rows).learn()
        doc = learned_document(pop, path, rows)
        write_atomically(args.output, json.dumps(doc, indent=1) + "\n")
        for n, t in doc["population"].items():
            print(f"{n:<20} centre {t['centre']:.4g}  spread {t['sd_fit']:.3g} ({t['fit_coordinate']})")
        print(f"{pop.n_rows} rows from {len(pop.sources)} sources; row scatter {pop.row_sigma:.3f} (log)")
        print(f"wrote {args.output}", file=sys.stderr)
        return 0

    return run_cli(body)


if __name__ == "__main__":
    sys.exit(main())
