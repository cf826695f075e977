"""Hardware sizing: SLO capacity search over the serving simulation, fleet ranking, reports."""
from simulator.sizing.core import *  # noqa: F401,F403
from simulator.sizing.core import Candidate, SizingResult, bundled_sizing_scenarios, size  # noqa: F401
