"""`python -m simulator.catalog`: the command lives in :mod:`simulator.cli.catalog`."""
import sys

from simulator.cli.launch import launch  # light: Ctrl-C while the command loads is one line

if __name__ == "__main__":
    sys.exit(launch("simulator.cli.catalog"))
