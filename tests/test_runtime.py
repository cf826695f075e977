"""The allocator tuning applied when the package is imported (simulator/runtime.py)."""
from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest

PROBE = "import simulator, simulator.runtime as r; print(r._applied)"


def _applied(env_value: str | None) -> str:
    env = {k: v for k, v in os.environ.items() if k != "DSD_PLANNER_MALLOC"}
    if env_value is not None:
        env["DSD_PLANNER_MALLOC"] = env_value
    return subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True,
                          check=True).stdout.strip()


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt is glibc's")
def test_importing_the_package_tunes_glibc_malloc_once_and_the_opt_out_leaves_it():
    assert _applied(None) == "True"
    assert _applied("default") == "False"
    assert _applied("DEFAULT") == "False"


def test_tuning_is_idempotent_in_process():
    import simulator.runtime as r
    first = r.keep_freed_memory()
    assert r.keep_freed_memory() is first
    assert first == (platform.libc_ver()[0] == "glibc" and os.environ.get("DSD_PLANNER_MALLOC", "").lower() != "default")
