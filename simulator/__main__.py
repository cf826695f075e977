import sys

from simulator.cli.common import launch  # light: Ctrl-C while the command loads is one line

sys.exit(launch("simulator.cli.predict"))
