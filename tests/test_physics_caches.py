"""The physics keeps no state of its own (issue 47, item 1): every table it keeps while pricing passes lives in
the caches of one step model (simulator/physics/caches.py PhysicsCaches, held by physics.step_model.StepModel,
the last few kept by simulator/plan/step_models.py), handed to the physics functions as an argument. So:

- no module of simulator/physics/ holds mutable state: no module-level dict, list, set or writeable array, no
  ContextVar, no ``global`` statement, no lru_cache / functools.cache / cached_property. A read-only lookup table
  is allowed when it is frozen (a tuple, a frozenset, a MappingProxyType, a frozen dataclass);
- two step models (two scenarios) share no store and no entry, and pricing one leaves the other as it was;
- dropping a step model frees its tables (nothing else refers to them), and the plan layer keeps a bounded number;
- every store is bounded (its slot count).
"""
from __future__ import annotations

import ast
import dataclasses
import gc
import importlib
import pathlib
import types
import weakref

import numpy as np
import pytest

import simulator
from simulator.physics.caches import PhysicsCaches
from simulator.physics.pass_tables import lin_table
from simulator.physics.step_model import StepModel
from simulator.plan import step_models
from simulator.plan.grid import evaluate_grid
from simulator.plan.step_passes import verify_over_context
from simulator.plan.step_models import step_model
from simulator.specs.scenario import SCENARIO_DIR, load_scenario

PHYSICS = pathlib.Path(simulator.__file__).parent / "physics"
MUTABLE = (dict, list, set, bytearray)
CACHING_DECORATORS = ("cache", "lru_cache", "cached_property")


def _source_findings(source: str) -> list[str]:
    """What the source of a module does that keeps state: ``global`` statements, ContextVars, caching
    decorators (by name, e.g. functools.lru_cache, cache, cached_property)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Global):
            found.append(f"global {', '.join(node.names)} (line {node.lineno})")
        if (isinstance(node, ast.ImportFrom) and node.module == "contextvars") or (
                isinstance(node, ast.Import) and any(a.name == "contextvars" for a in node.names)):
            found.append(f"contextvars import (line {node.lineno})")
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for d in node.decorator_list:
                name = ast.unparse(d.func if isinstance(d, ast.Call) else d).rsplit(".", 1)[-1]
                if name in CACHING_DECORATORS:
                    found.append(f"@{name} on {node.name} (line {node.lineno})")
    return found


def _own_names(source: str) -> set[str]:
    """Names a module's source binds at its top level (assignments, functions, classes; not its imports)."""
    names = set()
    for node in ast.parse(source).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
            node, (ast.AnnAssign, ast.AugAssign)) else []
        for target in targets:
            names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
    return names


def _object_findings(module, own: set[str]) -> list[str]:
    """Mutable objects a module holds at its top level (``own``: the names it binds itself, not those it imports)
    or in its classes' attributes."""
    found = []
    for name, value in vars(module).items():
        if name.startswith("__") or name not in own:
            continue
        if isinstance(value, MUTABLE) or (isinstance(value, np.ndarray) and value.flags.writeable):
            found.append(f"{name}: {type(value).__name__}")
        elif type(value).__name__ == "ContextVar":
            found.append(f"{name}: ContextVar")
        elif callable(value) and hasattr(value, "cache_info"):
            found.append(f"{name}: an lru_cache'd function")
        elif dataclasses.is_dataclass(value) and not isinstance(value, type) and \
                not type(value).__dataclass_params__.frozen:
            found.append(f"{name}: a dataclass instance that is not frozen")
        elif isinstance(value, type) and getattr(value, "__module__", None) == module.__name__:
            for attr, held in vars(value).items():
                if not attr.startswith("__") and isinstance(held, MUTABLE):
                    found.append(f"{name}.{attr}: {type(held).__name__} (class attribute)")
    return found


def test_the_checks_find_state_where_there_is_some():
    """The two checks below catch each kind of state they look for (so that their passing means something)."""
    source = ("import functools\nfrom contextvars import ContextVar\n_X = {}\n_S = ContextVar('s')\n"
              "@functools.lru_cache(maxsize=4)\ndef f(a):\n    return a\n"
              "def g():\n    global _X\n    _X = {}\n")
    assert len(_source_findings(source)) == 3  # the ContextVar import, @lru_cache, global
    source += ("import numpy as np\nfrom types import MappingProxyType\n"
               "from simulator.specs.hardware import DTYPE_BYTES\n"
               "T = np.zeros(3)\nFROZEN = MappingProxyType({'a': 1})\nclass Holder:\n    kept: dict = {}\n")
    module = types.ModuleType("fake")
    exec(compile(source, "fake", "exec"), module.__dict__)  # noqa: S102 - a fixed string above
    found = " ".join(_object_findings(module, _own_names(source)))
    for what in ("_X", "_S", "f:", "T:", "Holder.kept"):
        assert what in found
    assert "FROZEN" not in found and "DTYPE_BYTES" not in found  # frozen, and imported (its own module's matter)


@pytest.mark.parametrize("path", sorted(PHYSICS.glob("*.py")), ids=lambda p: p.name)
def test_no_physics_module_keeps_state(path):
    """No module-level cache in simulator/physics/: frozen tables (tuples, MappingProxyType) and constants only."""
    module = importlib.import_module(f"simulator.physics.{path.stem}")
    source = path.read_text()
    findings = _source_findings(source) + _object_findings(module, _own_names(source))
    assert not findings, f"{path.name} keeps state: {findings}"


B, K = np.arange(1, 65, dtype=float)[:, None, None], np.arange(5, dtype=float)[None, :, None]
C = np.array([[[1024.0]]])


def _entries(caches: PhysicsCaches) -> dict[int, object]:
    """Every kept value of every store by id (the keys hold specs by value: equal specs are equal keys)."""
    return {id(v): v for store in caches.stores().values() for v in store.values()}


def test_two_scenarios_step_models_share_no_store_and_no_entry():
    a = load_scenario(SCENARIO_DIR / "llama-3.1-8b-h100.toml")
    b = load_scenario(SCENARIO_DIR / "deepseek-v3-dp-ep.toml")  # MoE, expert-parallel
    ma, mb = step_model(a), step_model(b)
    assert ma is not mb and ma.caches is not mb.caches
    for name, store in ma.caches.stores().items():
        assert store is not mb.caches.stores()[name], name
    evaluate_grid(a, B[:, 0, 0], K[0, :, 0])
    before = {name: dict(store) for name, store in ma.caches.stores().items()}
    assert ma.caches.token_tables and ma.caches.cells
    evaluate_grid(b, B[:, 0, 0], K[0, :, 0])
    assert mb.caches.token_tables and mb.caches.cells and mb.caches.expert_groups  # an MoE model's expert groups too
    assert not set(_entries(ma.caches)) & set(_entries(mb.caches))
    # pricing b added nothing to a's stores and replaced none of its entries
    for name, store in ma.caches.stores().items():
        assert store.keys() == before[name].keys() and all(store[k] is before[name][k] for k in store), name
    assert step_model(a) is ma  # asked again: the same step model, its tables kept


def test_scenarios_that_differ_only_above_the_passes_share_a_step_model():
    """Acceptance, traffic, SLO and axes do not price a pass: scenarios loaded apart that differ only there read
    one step model; another device, deployment, draft or profile object gets its own."""
    a = load_scenario(SCENARIO_DIR / "llama-3.1-8b-h100.toml")
    same = load_scenario(SCENARIO_DIR / "llama-3.1-8b-h100.toml", acceptance=0.5)
    assert same is not a and step_model(same) is step_model(a)
    for overrides in ({"tp": 2}, {"draft": "ngram"}, {"calibration": "none"}):
        assert step_model(load_scenario(SCENARIO_DIR / "llama-3.1-8b-h100.toml", **overrides)) is not step_model(a)


def test_dropping_a_step_model_frees_its_tables():
    sc = load_scenario(SCENARIO_DIR / "command-a-h100.toml")
    model = StepModel.of(sc)  # built apart from the plan layer's store: this test holds its only reference
    verify_over_context(sc, B, K, C, caches=model.caches)
    assert len(model.caches) > 0
    gone = weakref.ref(model.caches)
    del model
    gc.collect()
    assert gone() is None


def test_the_plan_layer_keeps_a_bounded_number_of_step_models():
    sc = load_scenario(SCENARIO_DIR / "llama-3.1-8b-h100.toml")
    first = step_model(types.SimpleNamespace(model=sc.model, deployment=sc.deployment, hardware=sc.hardware,
                                             engine=sc.engine, draft=sc.draft, profile=object()))
    gone = weakref.ref(first.caches)
    del first
    for _ in range(step_models.STEP_MODEL_SLOTS + step_models.RECENT_SCENARIOS):  # as many other profiles
        step_model(types.SimpleNamespace(model=sc.model, deployment=sc.deployment, hardware=sc.hardware,
                                         engine=sc.engine, draft=sc.draft, profile=object()))
    gc.collect()
    assert gone() is None
    assert len(step_models._STEP_MODELS) <= step_models.STEP_MODEL_SLOTS


def test_every_store_is_bounded():
    sc = load_scenario(SCENARIO_DIR / "llama-3.1-8b-h100.toml")
    caches = PhysicsCaches()
    for t_top in range(8, 8 + 2 * PhysicsCaches.LIN_SLOTS):  # more lin(T) tables than it keeps
        lin_table(sc.model, sc.deployment, sc.hardware, sc.profile, t_top, caches)
    assert len(caches.lins) == PhysicsCaches.LIN_SLOTS
    for n in range(2 * PhysicsCaches.CELL_SLOTS):  # per-cell prices over more axes than it keeps
        verify_over_context(sc, B[: n + 1], K, C, caches=caches)
    assert len(caches.cells) == PhysicsCaches.CELL_SLOTS
    assert len(caches.recent_whole) <= PhysicsCaches.RECENT_WHOLE
    caches.clear()
    assert len(caches) == 0
