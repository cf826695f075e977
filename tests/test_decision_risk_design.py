"""The stored design of the engine terms' draws is the scrambled Sobol design scipy makes (decision_risk.DESIGN_FILE
is read instead of importing scipy.stats at every command's start)."""
from __future__ import annotations

import subprocess
import sys

import numpy as np

from simulator.plan import decision_risk as D


def test_stored_design_is_the_sobol_design():
    stored = D.standard_normal_design(D.N_DRAWS, len(D.TERM_NAMES), 0)
    assert stored.shape == (64, 7) and not stored.flags.writeable
    np.testing.assert_array_equal(stored, D.sobol_normal_design(64, 7, 0))
    # an even cover of each term's distribution: every column's mean near 0 and sd near 1 (64 Sobol points)
    assert np.abs(stored.mean(axis=0)).max() < 0.05 and np.abs(stored.std(axis=0) - 1).max() < 0.1
    # another design is made, not read
    other = D.standard_normal_design(32, 6, 1)
    np.testing.assert_array_equal(other, D.sobol_normal_design(32, 6, 1))


def test_a_prediction_does_not_import_scipy_stats():
    code = ("import sys; from simulator.plan.api import predict; p = predict('default'); p.table; p.provenance;"
            " print('scipy.stats' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "False"
