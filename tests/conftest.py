"""Session-wide test settings."""
from __future__ import annotations

import functools
import sys

import pytest

from simulator.runtime import keep_freed_memory

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


@pytest.fixture(scope="module")
def fx(tmp_path_factory):
    """The bad-input corpus's folder (tests/bad_input_corpus.py): every hostile file, written once per test file."""
    from bad_input_corpus import write_folder
    return write_folder(tmp_path_factory.mktemp("bad-input"))


# The longest files first: `make test` hands whole files to two workers (--dist loadfile), and starting
# with the long ones keeps the workers' finish times close (longest-processing-time-first). Seconds of
# one file on the 2-core box (--durations=0, 2026-12-02): 60, 29, 27, 25, 20, 16, 13, 13, 13, 10, 9, 9, 8, 7,
# 6, 6, 6, 4; the test_bad_input_* files are the old 21 s test_bad_input.py split per command, their share of
# it from one run of the split files (readers 43%, predict 29%, calibration 19%; the hypothesis file 3-30%,
# as its random examples fall); files not listed keep their order after them.
LONGEST_FIRST = ("test_engine.py", "test_app.py", "test_sweep.py", "test_hostile.py", "test_sizing.py", "test_browser.py",
                 "test_monotone.py", "test_validate.py", "test_serving.py", "test_gpu_tables.py", "test_calibration.py",
                 "test_bad_input_readers.py", "test_exports.py", "test_answers.py", "test_core.py",
                 "test_bad_input_predict.py", "test_bad_input_hypothesis.py", "test_actionable.py",
                 "test_bad_input_calibration.py")


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: a file's own order is kept
