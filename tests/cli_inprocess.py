"""Run a command's ``main(argv)`` in the test process: the code ``python -m simulator.predict ...`` runs,
without starting an interpreter and importing numpy, pandas and the planner again (about 1 s a call
on the 2-core box). The error boundary (one 'error:' line, exit 2), argparse's usage errors and the
warning printer are all inside ``main``, so stdout, stderr and the exit code are what the process
would give. Each CLI keeps at least one test that starts the real process (``python -m``)."""
from __future__ import annotations

import contextlib
import importlib
import io
import os
from dataclasses import dataclass

# the ``python -m`` name -> the module holding its main(argv)
MAINS = {"simulator.predict": "simulator.cli.predict", "simulator.serve": "simulator.cli.serve",
         "simulator.size": "simulator.cli.size", "simulator.sweep": "simulator.cli.sweep",
         "simulator.catalog": "simulator.cli.catalog"}


@dataclass
class Completed:
    """The fields of subprocess.CompletedProcess the tests read."""

    returncode: int
    stdout: str
    stderr: str


def run_main(module: str, *args, cwd=None) -> Completed:
    """``python -m MODULE ARGS`` (run from ``cwd``) as a call of its main(argv)."""
    main = importlib.import_module(MAINS.get(module, module)).main
    out, err = io.StringIO(), io.StringIO()
    here = os.getcwd()
    try:
        if cwd is not None:
            os.chdir(cwd)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                rc = main([str(a) for a in args])
            except SystemExit as stop:  # argparse: --help, usage errors
                rc = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
    finally:
        os.chdir(here)
    return Completed(int(rc or 0), out.getvalue(), err.getvalue())


def refused_line(module: str, *args) -> str:
    """The one 'error:' line a refused command prints (exit 2, no traceback): what the tests then read."""
    done = run_main(module, *args)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    lines = [ln for ln in done.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), done.stderr
    return lines[0]
