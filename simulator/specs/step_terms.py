"""The engine terms on top of the physics' step time, and the population they are learned as.

One formula, used by the grid, the serving simulation and both fits (learned prior, deployment posterior)::

    ITL(B, K) = s * s_spec^[K > 0] * (verify(B, K) + draft(B, K))   kernel time as the engine runs it, scaled
              + overhead(B, K)                                       the engine profile's host time
              + max(0, H(B, K) - room(B, K))                         the terms' host time beyond the room left
              + c_coll calls(B, K)                                   per collective call of the step

    H(B, K) = c_step + c_seq B                                       host time per step and per sequence
            + c_seq_spec B [K > 0]                                   host time per sequence with speculation on
            + c_spec B (K + 1) [K > 0]                               per speculative token (sampling, rejection)

room(B, K) is the part of the engine's overlap window its own host time leaves free (0 where the engine does not
hide host time behind the GPU: simulator.physics.engine_time.host_exposed_and_room_s): the terms' host time is host
time, hidden as the engine hides its own (docs/learned_layer_choices.md, ninth pass).

calls(B, K) is the number of collective calls (ops of family "comm": tensor-parallel all-reduces, the logits
gather, MoE all-to-alls) the step runs: the verify pass's and the draft passes' as the engine runs them
(simulator.physics.step_model.step_collective_calls); 0 at TP 1 without expert parallelism.

Each term is physically named: ``kernel_scale`` (every kernel runs s x its priced time), ``spec_kernel_scale``
(a speculating step's verify and draft kernels relative to the plain decode kernels: custom-mask or tree
attention at q = K + 1, drafts outside a CUDA graph), the host terms in seconds, ``collective_s`` the time per
collective call beyond its measured table (ranks waiting on each other, launch and sync in a real step). Neutral
values leave the physics untouched.

The learned layer (``simulator/data/learned_step.json``, written by ``python -m calibration.learn_step``) holds
the population these terms are drawn from across the published sources: a mean and a spread per term in its
fit coordinate (log for scales, microseconds for costs). A zero-shot prediction uses the population's centre;
its spread is the prediction's band. A deployment's own points update it (``calibration.fit_deployment``).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from simulator.errors import PlannerError
from simulator.files import read_json_file
from simulator.specs.hardware import ARCHITECTURES, load_hardware

# name -> (neutral value, lower bound, upper bound, fit coordinate); seconds unless a scale
TERMS = {
    "kernel_scale": (1.0, 0.5, 2.0, "log"),
    "host_per_step_s": (0.0, 0.0, 0.1, "us"),
    "host_per_seq_s": (0.0, 0.0, 1e-3, "us"),
    "spec_per_token_s": (0.0, 0.0, 1e-3, "us"),
    "spec_kernel_scale": (1.0, 0.5, 3.0, "log"),
    "spec_host_per_seq_s": (0.0, 0.0, 1e-3, "us"),
    "collective_s": (0.0, 0.0, 1e-4, "us"),
}
TERM_NAMES = tuple(TERMS)
# terms added after learned layers were first shipped: a file without them holds them neutral, spread 0
LATER_TERMS = ("collective_s",)
OLDER_TERMS = tuple(n for n in TERMS if n not in LATER_TERMS)
NEUTRAL = np.array([TERMS[n][0] for n in TERMS])
LOWER = np.array([TERMS[n][1] for n in TERMS])
UPPER = np.array([TERMS[n][2] for n in TERMS])
LOG_TERMS = np.array([TERMS[n][3] == "log" for n in TERMS])

# how far each term varies between deployments, fit coordinates (log of a scale; microseconds), fixed a priori
# from what engines' host loops and kernels are known to span: a kernel scale +-15% between implementations of
# the same op; host time per step ~100 us (a graph replay to a Python scheduler loop); per sequence ~10 us
# (scheduling, detokenizing); per speculative token ~5 us (sampling, rejection bookkeeping); per speculating
# sequence ~20 us (draft / tree bookkeeping on the host); per collective call ~10 us (ranks waiting on each other,
# a launch and a sync beyond the measured collective's own time; docs/learned_layer_choices.md, "a cost per
# collective"). The population's spread (calibration.learn_step) and a deployment's prior
# (calibration.fit_deployment) start here.
A_PRIORI_SD = np.array([0.15, 100.0, 10.0, 5.0, 0.15, 20.0, 10.0])

# engine -> family, for a learned layer with an engine-family level (its sources of one family share an offset):
# research harnesses (gpt-fast, a paper's own loop; "other" in the corpus) are single-process PyTorch decode loops
ENGINE_FAMILY = {"vllm": "vllm", "sglang": "sglang", "trtllm": "trtllm", "gpt-fast": "research",
                 "magicdec": "research", "other": "research"}


def engine_family(engine: str) -> str:
    return ENGINE_FAMILY.get(str(engine), str(engine))


LEARNED_FORMAT = "dsd-planner-learned-step"
LEARNED_FILE = Path(__file__).resolve().parent.parent / "data" / "learned_step.json"


def kernel_factor(s, s_spec, k) -> np.ndarray:
    """What the kernel time of a step is multiplied by: s, and s_spec more when the step speculates."""
    return s * np.where(np.asarray(k) > 0, s_spec, 1.0)


def _floats(x) -> np.ndarray:
    """x as a float array: float64 unless it is floats already (float32 draws stay float32)."""
    x = np.asarray(x)
    return x if np.issubdtype(x.dtype, np.floating) else x.astype(float)


def host_per_seq_s(c_seq, c_spec, k, c_seq_spec=0.0) -> np.ndarray:
    """Host time the terms add per sequence of a step [s]: c_seq + (c_seq_spec + c_spec (K + 1)) [K > 0]."""
    k = _floats(k)
    return c_seq + (c_seq_spec + c_spec * (k + 1.0)) * (k > 0)


def no_room(room_s) -> bool:
    """Whether ``room_s`` is the scalar 0 of an engine that hides no host time (the formula's room term drops)."""
    return np.ndim(room_s) == 0 and room_s == 0


def exposed_host_s(host_s, room_s=0.0):
    """The part of the terms' host time a step waits for: what exceeds the room the engine's overlap window
    leaves, max(0, H - room) (room 0: all of it)."""
    return host_s if no_room(room_s) else np.maximum(host_s - room_s, 0.0)


def added_step_s(c_step, c_seq, c_spec, batch, k, c_seq_spec=0.0) -> np.ndarray:
    """The terms' host time in one step [s], H = c_step + c_seq B + (c_seq_spec B + c_spec B (K + 1)) [K > 0]."""
    batch, k = _floats(batch), _floats(k)
    # factored as c_step + B (c_seq + (c_seq_spec + c_spec (K + 1)) [K > 0]): on a grid the bracket is a K vector
    return c_step + batch * host_per_seq_s(c_seq, c_spec, k, c_seq_spec)


def terms_added_s(values: dict, batch, k, calls=0.0, room_s=0.0) -> np.ndarray:
    """Time the terms (name -> natural units) add to one step [s]: max(0, H - room) + c_coll calls (``calls`` the
    step's collective calls, ``room_s`` the host room of its engine's overlap window)."""
    host = added_step_s(values["host_per_step_s"], values["host_per_seq_s"], values["spec_per_token_s"], batch, k,
                        values.get("spec_host_per_seq_s", 0.0))
    return exposed_host_s(host, room_s) + values.get("collective_s", 0.0) * _floats(calls)


def compose_step_s(terms, batch, k, kernel_s, overhead_s, calls=0.0, room_s=0.0) -> np.ndarray:
    """The formula above, elementwise (numpy broadcasting): ``terms`` the seven terms in TERM_NAMES order,
    ``calls`` the step's collective calls, ``room_s`` its host room."""
    s, c0, c1, c2, sv, c3, cc = terms
    batch, k = _floats(batch), _floats(k)
    added = exposed_host_s(added_step_s(c0, c1, c2, batch, k, c3), room_s) + cc * _floats(calls)
    return kernel_factor(s, sv, k) * kernel_s + overhead_s + added


def compose_step_draws_s(theta: np.ndarray, batch, k, kernel_s, overhead_s, dtype=np.float32,
                         calls=0.0, room_s=0.0) -> np.ndarray:
    """:func:`compose_step_s` at every cell for every draw of the terms, draws on the last axis: ``theta`` (n, 7)
    term vectors, ``batch``, ``k``, ``kernel_s``, ``overhead_s``, ``calls``, ``room_s`` broadcasting to the cells'
    shape; every input cast to ``dtype`` first -> (*cells, n). The same operations in the same order, so the same
    values as compose_step_s on the same inputs (tests/test_decision_risk_speed_equivalence.py); the formula's kernel
    factor and per-sequence host time depend on (K, draw) only and are formed on those small arrays, the operations
    over the (cells x draws) array write into two buffers where the broadcast formula allocates more, and the host
    time is formed only in the box of cells where some draw's may exceed its room (a bound from the largest terms):
    elsewhere it adds 0, as max(0, H - room) does."""
    cast = lambda a: np.asarray(a, dtype=dtype)  # noqa: E731
    s, c0, c1, c2, sv, c3, cc = cast(theta).T
    batch, k, kernel_s, overhead_s, calls = cast(batch), cast(k), cast(kernel_s), cast(overhead_s), cast(calls)
    kd = k[..., None]  # K with the draws' axis
    room = None if no_room(room_s) else cast(room_s)
    shape = np.broadcast_shapes(batch.shape, k.shape, kernel_s.shape, overhead_s.shape, calls.shape,
                                () if room is None else room.shape) + s.shape
    step = np.multiply(kernel_factor(s, sv, kd), kernel_s[..., None], out=np.empty(shape, dtype))
    step += overhead_s[..., None]
    per_seq = host_per_seq_s(c1, c2, kd, c3)
    box = _host_box(c0, per_seq, batch, room, shape[:-1])  # the cells whose host time is formed
    coll = cc * calls[..., None] if calls.any() else None  # c_coll calls (none at TP 1: adding 0 changes no bit)
    if box is not None:
        host = np.add(c0, _in_box(batch, box)[..., None] * _in_box(per_seq, box))  # c_step + B (...), as added_step_s
        if room is not None:  # what exceeds the room the overlap window leaves, as exposed_host_s takes it
            host = host - _in_box(np.broadcast_to(room, shape[:-1]), box)[..., None]
            np.maximum(host, 0.0, out=host)
        if coll is None:
            step[box] += host
            return step
        coll = np.array(np.broadcast_to(coll, shape), dtype)
        coll[box] = host + coll[box]  # as terms_added_s adds them: the exposed host time + c_coll calls
    if coll is not None:
        step += coll
    return step


def _host_box(c_step, per_seq, batch, room, cells: tuple) -> tuple | None:
    """The cells where some draw's host time may exceed its room: every cell where the engine leaves none
    (``room`` None), else the smallest box of cells (slices over the cells' axes) where the largest host time
    any draw adds, an upper bound (c_step's largest + B x the largest per-sequence), exceeds the room; None
    where it exceeds it nowhere (max(0, H - room) is 0 for every draw there and adds nothing)."""
    if room is None:
        return tuple(slice(None) for _ in cells)
    reach = np.broadcast_to(c_step.max(initial=0) + batch * per_seq.max(axis=-1, initial=0) > room, cells)
    if not reach.any():
        return None
    return tuple(slice(int(i.min()), int(i.max()) + 1) for i in np.nonzero(reach))


def draws_vary_box(theta: np.ndarray, batch, k, calls=0.0, room_s=0.0, dtype=np.float32) -> tuple | None:
    """The box of cells (slices over the cells' axes, as :func:`compose_step_draws_s` forms them) outside which
    every draw of the terms gives a cell the same step time: all cells where the kernel factor or the collective
    term differs between draws, else the host time's box (:func:`_host_box`) where the host terms differ; None
    where no cell's step differs between draws."""
    cast = lambda a: np.asarray(a, dtype=dtype)  # noqa: E731
    s, c0, c1, c2, sv, c3, cc = cast(theta).T
    batch, k, calls = cast(batch), cast(k), cast(calls)
    room = None if no_room(room_s) else cast(room_s)
    cells = np.broadcast_shapes(batch.shape, k.shape, calls.shape, () if room is None else room.shape)
    kd = k[..., None]
    factor = kernel_factor(s, sv, kd)
    if (factor != factor[..., :1]).any() or (calls.any() and (cc != cc[:1]).any()):
        return tuple(slice(None) for _ in cells)
    per_seq = host_per_seq_s(c1, c2, kd, c3)
    if (c0 == c0[:1]).all() and (per_seq == per_seq[..., :1]).all():
        return None
    return _host_box(c0, per_seq, batch, room, cells)


def _in_box(a: np.ndarray, box: tuple) -> np.ndarray:
    """``a`` (broadcasting to the cells, leading axes) cut to the cells' ``box``; its axes of length 1 kept whole."""
    return a[tuple(slice(None) if n == 1 else box[i] for i, n in enumerate(a.shape[:len(box)]))]


def step_time_s(theta: np.ndarray, batch, k, kernel_s, overhead_s, calls=0.0, room_s=0.0) -> np.ndarray:
    """The formula above for term vectors theta (m, >= 7, TERM_NAMES order) at n points -> (m, n)."""
    th = np.atleast_2d(theta)
    return compose_step_s([th[:, i, None] for i in range(len(TERMS))], batch, k, kernel_s, overhead_s, calls,
                          room_s)


def to_fit(theta: np.ndarray) -> np.ndarray:
    """Natural units -> fit coordinates (log of a scale, microseconds of a cost)."""
    th = np.asarray(theta, dtype=float)
    return np.where(LOG_TERMS, np.log(np.where(LOG_TERMS, th, 1.0)), th * 1e6)


def from_fit(phi: np.ndarray) -> np.ndarray:
    """Fit coordinates -> natural units, inside each term's bounds."""
    ph = np.asarray(phi, dtype=float)
    return np.clip(np.where(LOG_TERMS, np.exp(np.where(LOG_TERMS, ph, 0.0)), ph * 1e-6), LOWER, UPPER)


@dataclass(frozen=True)
class StepTerms:
    """Term values applied to a step (a learned population's centre, or a deployment's posterior)."""

    values: dict  # name -> natural units

    @property
    def kernel_scale(self) -> float:
        return self.values["kernel_scale"]

    def kernel_factor(self, k) -> np.ndarray:
        v = self.values
        return kernel_factor(v["kernel_scale"], v.get("spec_kernel_scale", 1.0), k)

    @property
    def collective_s(self) -> float:
        return self.values.get("collective_s", 0.0)

    def added_s(self, batch, k, calls=0.0, room_s=0.0) -> np.ndarray:
        return terms_added_s(self.values, batch, k, calls, room_s)


@dataclass(frozen=True)
class LearnedPrior(StepTerms):
    """The population of the terms learned from the published corpus (mean and spread in fit coordinates)."""

    mean_fit: tuple = ()
    sd_fit: tuple = ()
    learned_from: dict = field(default_factory=dict)
    path: str = ""
    misfit_log: dict = field(default_factory=dict)  # kind of row ("step", "speedup") -> RMS log residual left

    @property
    def label(self) -> str:
        f = self.learned_from
        return (f"learned layer {Path(self.path).name} (population of {len(TERMS)} engine terms over"
                f" {f.get('sources', '?')} published sources, {f.get('rows', '?')} rows)")

    def samples(self, n: int = 200, seed: int = 0) -> np.ndarray:
        """Term vectors (n, 7) drawn from the population, natural units (a new deployment's spread)."""
        rng = np.random.default_rng(seed)
        phi = rng.normal(np.asarray(self.mean_fit), np.asarray(self.sd_fit), (n, len(TERMS)))
        return from_fit(phi)


def prior_from(mean_fit, sd_fit, learned_from: dict | None = None, path: str = "",
               misfit_log: dict | None = None) -> LearnedPrior:
    mean = np.asarray(mean_fit, dtype=float)
    centre = from_fit(mean)
    return LearnedPrior(dict(zip(TERM_NAMES, map(float, centre))), tuple(map(float, mean)),
                        tuple(map(float, sd_fit)), dict(learned_from or {}), path, dict(misfit_log or {}))


_LOADED: dict = {}  # path -> its parsed file; (path, engine family, GPU family) -> LearnedPrior: read once per process


def load_learned_prior(path: str | Path = LEARNED_FILE, engine: str | None = None,
                       architecture: str | None = None) -> LearnedPrior | None:
    """The shipped learned layer, None where no file is shipped (the physics alone); where it has an engine-family
    or a GPU-family level, centred on ``engine``'s family and on the hardware's ``architecture`` (its GPU family,
    simulator/specs/hardware.py). A family it has no offset for adds nothing: with neither, the population's
    centre (the same object)."""
    path = Path(path)
    if str(path) not in _LOADED:
        if not path.is_file():
            return None
        _LOADED[str(path)] = _read_learned(path)
    layer = _LOADED[str(path)]
    family = engine_family(engine) if engine and engine_family(engine) in layer["engine"] else None
    gpu = architecture if architecture in layer["gpu"] else None
    if family is None and gpu is None:
        return layer["base"]
    key = (str(path), family, gpu)
    if key not in _LOADED:
        base = layer["base"]
        mean = np.asarray(base.mean_fit) + layer["engine"].get(family, 0.0) + layer["gpu"].get(gpu, 0.0)
        _LOADED[key] = prior_from(mean, base.sd_fit, base.learned_from, str(path), base.misfit_log)
    return _LOADED[key]


def _offsets(data: dict, key: str, what: str, path: Path, known=None) -> dict:
    """``key`` of the layer file: family -> its offset from the population mean (len(TERMS) finite numbers)."""
    offsets = data.get(key) or {}
    if isinstance(offsets, dict):  # a file older than the later terms: their offsets 0
        offsets = {f: v + [0.0] * (len(TERMS) - len(v)) if isinstance(v, list) and len(OLDER_TERMS) <= len(v)
                   else v for f, v in offsets.items()}
    if not (isinstance(offsets, dict) and all(isinstance(v, list) and len(v) == len(TERMS)
                                              and all(isinstance(x, (int, float)) and not isinstance(x, bool)
                                                      and np.isfinite(x) for x in v)
                                              for v in offsets.values())):
        raise PlannerError(f"{path}: {key} must give {len(TERMS)} finite numbers per {what};"
                           " regenerate it with python -m calibration.learn_step")
    unknown = sorted(set(offsets) - set(known)) if known is not None else []
    if unknown:
        raise PlannerError(f"{path}: {key} names {', '.join(map(repr, unknown))}, not a {what} (one of"
                           f" {', '.join(known)}); regenerate it with python -m calibration.learn_step")
    return {f: np.asarray(v, dtype=float) for f, v in offsets.items()}


def _read_learned(path: Path) -> dict:
    """Parse and check the layer file once: its population's prior and its engine- and GPU-family offsets."""
    data = read_json_file(path, "learned step layer")
    if not isinstance(data, dict) or data.get("format") != LEARNED_FORMAT:
        raise PlannerError(f"{path}: not a learned step layer ('{LEARNED_FORMAT}'); regenerate it with"
                           " python -m calibration.learn_step")
    pop = data.get("population", {})
    # a file older than a later term (one of LATER_TERMS absent) holds it at neutral with no spread
    pop = {n: {"mean_fit": float(to_fit(NEUTRAL)[i]), "sd_fit": 0.0} for i, n in enumerate(TERMS)
           if n in LATER_TERMS} | (pop if isinstance(pop, dict) else {})
    try:
        mean = [float(pop[n]["mean_fit"]) for n in TERMS]
        sd = [float(pop[n]["sd_fit"]) for n in TERMS]
    except (KeyError, TypeError, ValueError):
        raise PlannerError(f"{path}: 'population' must give mean_fit and sd_fit for {', '.join(TERMS)};"
                           " regenerate it with python -m calibration.learn_step") from None
    if not all(np.isfinite(mean + sd)) or min(sd) < 0:
        raise PlannerError(f"{path}: population values must be finite and spreads >= 0")
    misfit = data.get("misfit_log_by_kind") or {}
    if not (isinstance(misfit, dict) and all(isinstance(v, (int, float)) and 0 <= v < 10 for v in misfit.values())):
        raise PlannerError(f"{path}: misfit_log_by_kind must map kinds to log scatters in [0, 10)")
    return {"base": prior_from(mean, sd, data.get("learned_from", {}), str(path), misfit),
            "engine": _offsets(data, "family_offsets_fit", "engine family", path),
            # a file older than the GPU-family level has no such key: no offset, as before
            "gpu": _offsets(data, "gpu_family_offsets_fit", "GPU family", path, ARCHITECTURES)}


def gpu_family(hardware: str) -> str:
    """A catalog device's family (its hardware file's ``architecture``)."""
    return load_hardware(hardware).architecture
