"""``python -m simulator.X``: the shims' first import, kept to the standard library's already-loaded
modules so that Ctrl-C while the command loads (numpy, pandas, the planner: about a second) is the
same one line and exit 130 as during the run, not a traceback. Only the interpreter's own start-up
(tens of ms, before any of the project's code) is left outside it."""
from __future__ import annotations

import importlib
import signal
import sys


def interrupted_line(signum: int) -> str:
    """The one line a command prints when a signal stops it."""
    return (f"interrupted by {signal.Signals(signum).name}: stopped; every output is whole"
            " (the old version or the new one)")


def launch(module: str) -> int:
    """Import the command's module, then run its ``main()``; Ctrl-C during the import: one line, exit 130
    (SIGTERM / SIGHUP kill the process quietly until ``main`` installs its handlers)."""
    try:
        main = importlib.import_module(module).main
    except KeyboardInterrupt:
        print(interrupted_line(signal.SIGINT), file=sys.stderr)
        return 128 + signal.SIGINT
    return main()
