"""Session-wide test settings."""
from __future__ import annotations

import functools
import os
import sys

import pytest

# One BLAS thread per test process, set before numpy loads OpenBLAS (this file loads before any test module; the
# xdist workers and every subprocess a test starts inherit it). `make test` runs 3 workers on 2 cores: OpenBLAS's
# own threads, which spin while they wait, then outnumber the cores, and one SVD of the learned layer's Jacobian
# (calibration/learn_step.fit_population, 2,966 of them in tests/test_transfer_holdout.py) took 61 ms instead of
# under 1 ms: that test ran 178.7 s in the suite (9.3 s alone with one thread) on the shared 2-core box,
# 2026-12-07. Only the threads change: the same LAPACK routines run on the same inputs. A value set in the
# environment is kept.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from simulator.runtime import keep_freed_memory  # noqa: E402 (after the thread count above)

# the test session runs grids as the planner's programs do, allocator tuned (simulator/runtime.py); the library
# import alone leaves it (tests/test_runtime.py probes that in a fresh process)
keep_freed_memory()


@pytest.fixture(autouse=True)
def _streamlit_components_scanned_once():
    """Every AppTest run scans the metadata of each installed distribution for Streamlit v2 components
    (about 0.5 s a run on the 2-core box, most of a dashboard test); the installed packages do not change
    during a test session, so each worker scans once. The dashboard itself still runs in full."""
    scanner = sys.modules.get("streamlit.components.v2.manifest_scanner")
    if scanner is not None and not hasattr(scanner.scan_component_manifests, "cache_info"):
        scanner.scan_component_manifests = functools.cache(scanner.scan_component_manifests)
    yield


_COMPILED_SCRIPTS: dict = {}  # (path, source, magic on) -> code object, for this test session's worker


@pytest.fixture(autouse=True)
def _streamlit_scripts_compiled_once():
    """Every AppTest run builds a new ScriptCache (two, with its runner), so each run reads app.py, rewrites
    its syntax tree for Streamlit's "magic" and compiles it again: about 0.1 s a compile, a third of a
    dashboard rerun on the 2-core box. A code object is a pure function of the source, its path and the
    magic flag, so the session keeps one per (path, source, flag): an edited or new script (AppTest.from_string)
    still compiles, and every run still executes the whole script."""
    module = sys.modules.get("streamlit.runtime.scriptrunner.script_cache")
    if module is not None and not hasattr(module.ScriptCache.get_bytecode, "compiled_once"):
        from streamlit import config
        from streamlit.source_util import open_python_file
        compile_script = module.ScriptCache.get_bytecode

        def get_bytecode(self, script_path):
            path = os.path.abspath(script_path)
            with open_python_file(path) as f:
                key = (path, f.read(), bool(config.get_option("runner.magicEnabled")))
            if key not in _COMPILED_SCRIPTS:
                _COMPILED_SCRIPTS[key] = compile_script(self, path)
            return _COMPILED_SCRIPTS[key]
        get_bytecode.compiled_once = True
        module.ScriptCache.get_bytecode = get_bytecode
    yield


@pytest.fixture(scope="module")
def fx(tmp_path_factory):
    """The bad-input corpus's folder (tests/bad_input_corpus.py): every hostile file, written once per test file."""
    from bad_input_corpus import write_folder
    return write_folder(tmp_path_factory.mktemp("bad-input"))


# The longest files first: `make test` hands whole files to two workers (--dist loadfile), and starting
# with the long ones keeps the workers' finish times close (longest-processing-time-first). Seconds of
# file totals under 2 workers on the loaded 2-core box (--junitxml, 2026-12-07, session 6: the mean of two full
# runs, the second alone for the files whose tests changed then), seconds: 61, 52, 52, 42, 36, 28, 28, 28, 23,
# 23, 22, 20, 19, 19, 17, 17, 16, 12, 11, 11, 11, 11, 11, 9; files not listed keep their order after them.
# (Long files that came to run last, in alphabetical order, left the suite ending with one worker busy.)
# Session 9 (2026-12-07): test_transfer_holdout.py moved from third to beside test_monotone.py (52 s -> about
# 12 s with one BLAS thread per process, above; test_monotone.py 17 s -> about 10 s).
LONGEST_FIRST = ("test_engine.py", "test_docs.py", "test_browser.py", "test_hostile.py",
                 "test_step_grid.py", "test_sizing.py", "test_flags_first.py", "test_app.py", "test_validate.py",
                 "test_sweep.py", "test_app_walk.py", "test_gpu_tables.py", "test_transfer_peer.py",
                 "test_prompt_chunk_point.py", "test_transfer_holdout.py", "test_monotone.py", "test_calibration.py",
                 "test_exports.py",
                 "test_learned_family.py", "test_engine_releases.py", "test_dashboard_qa.py", "test_runtime.py",
                 "test_bad_input_readers.py", "test_sizing_report.py")


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: a file's own order is kept
