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
# one file on the 2-core box (--durations=0, 2026-12-07): 37, 32, 30, 26, 25, 20, 17, 11, 9, 9, 8, 7, 7, 6, 6, 6,
# 5, 5, 5, 5, 5, 5, 5, 5; files not listed keep their order after them. (Three files of 20-32 s had come to run
# last, in alphabetical order: the suite ended with one worker idle.)
LONGEST_FIRST = ("test_engine.py", "test_app_walk.py", "test_browser.py", "test_docs.py", "test_app.py",
                 "test_transfer_holdout.py", "test_hostile.py", "test_sweep.py", "test_sizing.py", "test_transfer_peer.py",
                 "test_monotone.py", "test_learned_family.py", "test_gpu_tables.py", "test_exports.py",
                 "test_step_grid.py", "test_engine_releases.py", "test_flags_first.py", "test_bad_input_readers.py",
                 "test_validate.py", "test_prompt_chunk_point.py", "test_core.py", "test_dashboard_files.py",
                 "test_layout.py", "test_dashboard_qa.py")


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: a file's own order is kept
