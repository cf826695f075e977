"""Calibration: microbenchmarks, engine runs, fitting and validation."""
