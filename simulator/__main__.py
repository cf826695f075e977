import sys

from simulator.cli.launch import launch  # light: Ctrl-C while the command loads is one line

sys.exit(launch("simulator.cli.predict"))
