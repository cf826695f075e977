"""`python -m simulator.size`: kept for the README's commands; the command lives in :mod:`simulator.cli.size`.

Nothing in the project imports this module (importing it would shadow ``simulator.predict``, the
API function, with a module): run it with ``python -m`` or use the ``dsd-size`` entry point.
"""
import sys

from simulator.cli.launch import launch  # light: Ctrl-C while the command loads is one line

if __name__ == "__main__":
    sys.exit(launch("simulator.cli.size"))
