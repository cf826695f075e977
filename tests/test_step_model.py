"""One step model (simulator/physics/step_model.py): the grid, the serving simulation's step pricer and the
few-shot fit compose a decode step the same way, with CUDA graphs, padding and overheads on.

Anchors: "model" (two paths of this tool must give the same step time: they claim one formula), "hand" (a
padding worked out from the engine's capture list by hand).
"""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from calibration import fewshot
from calibration.fit_deployment import planner_step_parts
from simulator import serving as sv
from simulator.errors import PlannerError
from simulator.physics.engine_time import pad
from simulator.physics.step_model import ServingExtras, step_time, step_time_scalar
from simulator.plan.grid import compute_grid
from simulator.specs.engines import load_engine
from simulator.specs.scenario import load_scenario
from simulator.specs.step_terms import NEUTRAL, TERM_NAMES, StepTerms

REPO = Path(__file__).resolve().parent.parent
SCENARIOS = sorted(p.stem for p in (REPO / "scenarios").glob("*.toml"))
# a spread of batch sizes on and off the captured sizes (vLLM's 1, 2, 4, 8, 16, 24, ...; SGLang's), across the
# capture limits with speculation on (SGLang 32 sequences, vLLM 512 tokens) and beyond them
BATCHES = [1, 2, 3, 5, 8, 13, 17, 31, 33, 64, 100, 129, 200, 256]
TOLERANCE = 0.005  # the "agree within 0.5%"


def _three_ways(name: str):
    """(batch sizes, ks, grid ITL, serving step, few-shot step) of a bundled scenario, decode-only steps at a
    context bucket of the step pricer (its attention is interpolated between buckets, exact on them)."""
    sc = load_scenario(REPO / "scenarios" / f"{name}.toml")
    ks = list(range(min(sc.k_max, 7) + 1))
    eng = sv.engine_from_scenario(sc)  # the engine's defaults: graphs and host overheads on
    try:
        pricer = sv.StepPricer(sc, eng, max(ks), max(BATCHES), max(4000, sc.context_len + 64), True)
    except PlannerError as err:  # e.g. a tree draft: the serving steps price chains only
        pytest.skip(f"{name}: the serving simulation refuses it ({err})")
    ctx = int(round(pricer.ctx[np.argmin(abs(pricer.ctx - sc.context_len))]))
    at = sc.with_overrides(context_len=ctx)
    grid = compute_grid(at, batch_sizes=BATCHES, ks=ks).itl_s
    serving = np.array([[pricer.step_s(b, k, b * (k + 1), float(ctx), k > 0, 0.0)[0] for k in ks] for b in BATCHES])
    # the physics' parts, the steps' collective calls and host room, as calibration.fit_deployment reads them
    kernel, overhead, calls, room = planner_step_parts(at, BATCHES, ks)
    terms = at.step_terms
    theta = np.concatenate([NEUTRAL if terms is None else [terms.values[n] for n in TERM_NAMES], [1.0]])
    B, K = np.meshgrid(np.asarray(BATCHES, dtype=float), np.asarray(ks, dtype=float), indexing="ij")
    few = fewshot.step_time_s(theta, B.ravel(), K.ravel(), kernel.ravel(), overhead.ravel(),
                              calls.ravel(), room.ravel())[0].reshape(B.shape)
    return grid, serving, few


@pytest.mark.parametrize("name", SCENARIOS)
def test_grid_serving_and_few_shot_compose_one_step(name):
    # model: the same (B, K) decode step priced three ways agrees within 0.5% on every bundled scenario, with the
    # engine's CUDA graphs (padding by its profile), eager launches, host time, profile overheads and the learned
    # layer on. Before the step model the serving steps padded every engine by vLLM's token list and read the
    # grid's unpadded token ops: command-a-h100 3.0% apart at B = 3, K = 2; smollm2-cpu 39% at B = 1, K = 2
    grid, serving, few = _three_ways(name)
    assert np.max(abs(serving / grid - 1)) < TOLERANCE
    assert np.max(abs(few / grid - 1)) < TOLERANCE


def _random_step_inputs(rng, n):
    batch = rng.integers(1, 300, n)
    k = rng.integers(0, 8, n)
    return dict(batch=batch, k=k, verify_gpu_s=rng.uniform(1e-4, 5e-2, n), verify_kernels=rng.uniform(100, 3000, n),
                in_graph=rng.random(n) < 0.5, eager_s=4e-6, draft_s=np.where(k > 0, rng.uniform(0, 1e-2, n), 0.0),
                passes=k.astype(float), profile_s=rng.uniform(0, 1e-3, n), calls=161.0 + 33.0 * k)


@pytest.mark.parametrize("engine", [("vllm", "0.33.0"), ("sglang", "0.4.4"), ("trtllm", "1.2.1"), ("vllm", "0.11.0")])
def test_scalar_twin_equals_the_array_formula_to_the_bit(engine, command_a_terms):
    # model: the serving loop's per-step twin does the array formula's arithmetic in the same order, whatever the
    # engine's overlap rule, with the engine terms, a serving config's extras and the DSD-at-K=0 cost on
    eng = load_engine(*engine)
    rng = np.random.default_rng(7)
    x = _random_step_inputs(rng, 64)
    extras = ServingExtras(2e-4, 3e-6, 0.02, 1e-5)
    for spec_mode in (False, True):
        for host_draft in (False, True):
            vec = step_time(eng, 8, x["batch"], x["k"], x["verify_gpu_s"], x["verify_kernels"], x["in_graph"],
                            x["eager_s"], x["draft_s"], x["passes"], host_draft, x["profile_s"], command_a_terms,
                            extras, spec_mode, calls=x["calls"]).total_s
            for i in range(64):
                b, k = int(x["batch"][i]), int(x["k"][i])
                one = step_time_scalar(eng, 8, b, k, float(x["verify_gpu_s"][i]), float(x["verify_kernels"][i]),
                                       bool(x["in_graph"][i]), x["eager_s"], float(x["draft_s"][i]),
                                       float(x["passes"][i]), host_draft, float(x["profile_s"][i]),
                                       float(command_a_terms.kernel_factor(k)), float(command_a_terms.added_s(b, k)),
                                       extras, spec_mode, command_a_terms.collective_s, float(x["calls"][i]))
                assert one == vec[i]


@pytest.fixture(scope="module")
def command_a_terms():
    terms = load_scenario(REPO / "scenarios" / "command-a-h100.toml").step_terms
    assert terms is not None  # the learned layer is shipped
    # a cost per collective call whatever the shipped layer learned, so that the calls' arithmetic is exercised
    return StepTerms(terms.values | {"collective_s": 15e-6})


def test_one_padding_rule_per_engine_profile():
    # hand: vLLM 0.33 keys graphs by tokens (1, 2, 4, then every 8): 5 sequences x 4 tokens = 20 -> 24 tokens,
    # a plain step of 3 -> 4; SGLang 0.4.4 keys them by sequences (with EAGLE: 1..32): 5 sequences stay 5, 20 tokens
    vllm, sgl = load_engine("vllm", "0.33.0"), load_engine("sglang", "0.4.4")
    assert [x.item() for x in pad(vllm, 5, 3)] == [24.0, True]
    assert [x.item() for x in pad(vllm, 3, 0)] == [4.0, True]
    assert [x.item() for x in pad(sgl, 5, 3)] == [20.0, True]
    # an ideal engine captures every size exactly: nothing padded
    ideal = load_engine("ideal")
    assert [x.item() for x in pad(ideal, 5, 3)] == [20.0, True]


# what composes a step: host exposure, host time between draft passes, the DSD-at-K=0 cost, the engine terms'
# kernel factor and added seconds. Only the step model (and the primitives it calls) may combine them.
COMPOSING = re.compile(r"host_exposed(_scalar)?_s\(|\.per_draft_pass_s|spec_k0_overhead|\.kernel_factor\(|\.added_s\(")
ALLOWED = {
    "simulator/physics/step_model.py": "the composition",
    "simulator/physics/engine_time.py": "host exposure's definition",
    "simulator/specs/step_terms.py": "the terms' definitions",
    "simulator/specs/deployment_fit.py": "a deployment fit's terms",
    "simulator/specs/engines.py": "the engine profile's field",
    "simulator/specs/engine_settings.py": "the default runner's per-draft-pass host time (none on a fused draft loop)",
    "simulator/serving/engine.py": "[serving] settings handed to the step model (ServingExtras)",
    # draws other engine terms for a grid: divides the scenario's out of the grid's parts first (issue 47 item 4,
    # the K schedule's own file; it could read the step model's parts before the terms instead)
    "simulator/plan/decision_risk.py": "inverts the grid's terms to redraw them",
}


def test_no_other_module_composes_a_step():
    # model: `grep` for the composition's pieces finds only the step model (issue 47: one composition of a step)
    found = set()
    for path in list((REPO / "simulator").rglob("*.py")) + list((REPO / "calibration").rglob("*.py")):
        rel = path.relative_to(REPO).as_posix()
        if COMPOSING.search(path.read_text()):
            found.add(rel)
    assert found <= set(ALLOWED), sorted(found - set(ALLOWED))
    assert "simulator/plan/grid.py" not in found and "simulator/serving/pricer.py" not in found
