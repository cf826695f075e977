"""Moved to :mod:`simulator.specs.surfaces` (the simulator reads profiles; calibration writes them)."""
from simulator.specs.surfaces import Surface, collective_time_s, ring_factor  # noqa: F401
