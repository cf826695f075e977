"""The allocator tuning the planner's programs apply (simulator/runtime.py); the library leaves an importer alone."""
from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest

# the library imported as a notebook would (its API included), then a CLI command run in the same process
LIBRARY = "import simulator, simulator.runtime as r; simulator.predict; print(r._applied)"
COMMAND = ("import simulator.runtime as r\nfrom simulator.cli.predict import main\ntry:\n    main(['--help'])\n"
           "except SystemExit:\n    pass\nprint(r._applied)")


def _applied(probe: str, env_value: str | None = None) -> str:
    env = {k: v for k, v in os.environ.items() if k != "DSD_PLANNER_MALLOC"}
    if env_value is not None:
        env["DSD_PLANNER_MALLOC"] = env_value
    return subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True,
                          check=True).stdout.strip().splitlines()[-1]


def test_importing_the_library_leaves_the_allocator_alone():
    # issue 47: a library that retunes malloc on import changes every notebook and service that imports it
    assert _applied(LIBRARY) == "None"


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt is glibc's")
def test_a_planner_command_tunes_glibc_malloc_once_and_the_opt_out_leaves_it():
    assert _applied(COMMAND) == "True"
    assert _applied(COMMAND, "default") == "False"
    assert _applied(COMMAND, "DEFAULT") == "False"


def test_tuning_is_idempotent_in_process():
    import simulator.runtime as r
    first = r.keep_freed_memory()
    assert r.keep_freed_memory() is first
    assert first == (platform.libc_ver()[0] == "glibc" and os.environ.get("DSD_PLANNER_MALLOC", "").lower() != "default")
