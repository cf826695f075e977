"""`python -m simulator.size`: kept for the README's commands; the command lives in :mod:`simulator.cli.size`.

Nothing in the project imports this module (importing it would shadow ``simulator.predict``, the
API function, with a module): run it with ``python -m`` or use the ``dsd-size`` entry point.
"""
import sys

from simulator.cli.size import main

if __name__ == "__main__":
    sys.exit(main())
