"""The package layout: floors import only downward, and the notebook API name is never shadowed."""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FLOORS = ["specs", "physics", "plan", "serving", "sizing", "sweep", "cli"]
# `python -m` entry shims: the one file of a floor that calls the command above it; nothing imports them
ENTRY_SHIMS = {"simulator/sweep/__main__.py"}


def test_predict_is_the_function_after_importing_everything():
    # docs/guide.md's notebook example; importing a CLI module named like the API used to shadow it
    code = ("import simulator, calibration.validate, simulator.cli.predict, simulator.sizing;"
            " from simulator import predict; assert callable(predict) and not hasattr(predict, '__path__'),"
            " predict")
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True)


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return out


def test_floors_import_only_downward():
    # hand: the layout card in README 'Layout' (in full: docs/guide.md 'Layout'); a floor may import its own and lower floors only
    bad = []
    for i, floor in enumerate(FLOORS):
        for path in (ROOT / "simulator" / floor).rglob("*.py"):
            if str(path.relative_to(ROOT)) in ENTRY_SHIMS:
                continue
            for mod in _imports(path):
                parts = mod.split(".")
                if parts[0] == "calibration" or parts[0] == "dashboard":
                    bad.append(f"{path.relative_to(ROOT)} imports {mod}")
                if parts[0] == "simulator" and len(parts) > 1 and parts[1] in FLOORS and FLOORS.index(parts[1]) > i:
                    bad.append(f"{path.relative_to(ROOT)} imports {mod}")
    assert not bad, bad


# The reference engine's core: what produces the measurements the planner is validated against. It
# shares no code with the planner (a planner bug must not appear on both sides of a comparison); its
# CLIs (__main__, synthetic) may use the planner's parsers, error boundary and model catalog.
ENGINE_CORE = ("engine.py", "model.py", "sweep.py", "tokenizer.py", "weights.py", "__init__.py")


def test_calibration_sits_between_simulator_and_dashboard():
    # hand: README 'Layout': simulator below calibration below the dashboard and app; simulator never
    # imports calibration (test above)
    bad = []
    for path in (ROOT / "calibration").rglob("*.py"):
        rel = path.relative_to(ROOT)
        for mod in _imports(path):
            top = mod.split(".")[0]
            if top in ("dashboard", "app", "pages"):
                bad.append(f"{rel} imports {mod}")
            if path.parent.name == "engine" and path.name in ENGINE_CORE and top == "simulator":
                bad.append(f"{rel} (reference engine core) imports {mod}")
    assert not bad, bad
    assert all((ROOT / "calibration" / "engine" / name).is_file() for name in ENGINE_CORE)
