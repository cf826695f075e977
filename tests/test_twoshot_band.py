"""The two-shot band sized on training sources only (calibration/transfer_twoshot.py: calibrate_band)."""
import numpy as np
import pytest

from calibration import transfer_twoshot as tt
from calibration.fewshot import NOISE_FLOOR


def inner(err, spread=0.0, dist=1.0, misfit=0.0):
    n = len(err)
    return tt.InnerPoints(np.asarray(err, float), np.full(n, spread), np.broadcast_to(np.asarray(dist, float), (n,)).copy(),
                          np.full(n, misfit))


def test_constant_band_holds_nine_of_ten_inner_points():
    # ten points at |log error| 0.01 .. 0.10, no posterior spread: 90% coverage needs a half-width of 0.09,
    # i.e. 1.645 sqrt(0.02^2 + m^2) = 0.09 -> m = sqrt((0.09 / 1.645)^2 - 0.02^2) = 0.05092 (by hand)
    pts = inner(np.arange(1, 11) / 100, dist=0.0)
    m = tt.smallest_covering(pts, lambda x: tt.Band(x).extra(pts.distance))
    assert m == pytest.approx(np.sqrt((0.09 / 1.645) ** 2 - NOISE_FLOOR ** 2), rel=1e-6)
    assert pts.coverage(tt.Band(m).extra(pts.distance)) == pytest.approx(0.9)


def test_errors_growing_with_distance_choose_the_distance_band():
    # errors 0.1 x distance: the distance band covers them at a rate near 0.1 / 1.645 and is narrower near the fit
    # points, so its interval score is lower than a constant band's
    d = np.array([0.5, 1, 1, 2, 2, 3, 3, 4, 4, 5.0])
    band = tt.calibrate_band(inner(0.1 * d, dist=d, misfit=0.0), layer_misfit=0.0)
    assert band.rate > 0 and band.misfit == 0.0
    assert band.rate == pytest.approx(np.sqrt((0.4 / 1.645) ** 2 - NOISE_FLOOR ** 2) / 4, rel=1e-3)


def test_constant_errors_choose_a_constant_band_and_no_points_keep_the_layers_misfit():
    d = np.array([0.5, 1, 1, 2, 2, 3, 3, 4, 4, 5.0])
    band = tt.calibrate_band(inner(np.full(10, 0.08), dist=d), layer_misfit=0.0)
    assert band.rate == 0.0 and band.misfit > 0
    assert tt.calibrate_band(None, 0.07) == tt.Band(0.07, 0.0)


def test_fit_distance_is_zero_at_the_fit_points():
    class Row:
        def __init__(self, b, k):
            self.batch_size, self.k = b, k

    class C:
        def __init__(self, b, k):
            self.row = Row(b, k)

    members = [C(b, 3) for b in (1, 4, 8, 16, 64)]
    d = tt.fit_distance(members, tt.fit_indices(5))  # fit on B = 1 and B = 8
    assert list(d) == [0.0, 1.0, 0.0, 1.0, 3.0]
