"""`python -m simulator.catalog`: the command lives in :mod:`simulator.cli.catalog`."""
import sys

from simulator.cli.catalog import main

if __name__ == "__main__":
    sys.exit(main())
