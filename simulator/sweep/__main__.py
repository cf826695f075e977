"""`python -m simulator.sweep SPEC.toml`: the command lives in :mod:`simulator.cli.sweep`.

This entry shim is the one file of the sweep package that imports from ``cli`` (a floor above it);
the package itself never does, and nothing imports this module.
"""
import sys

from simulator.cli.launch import launch  # light: Ctrl-C while the command loads is one line

if __name__ == "__main__":
    sys.exit(launch("simulator.cli.sweep"))
