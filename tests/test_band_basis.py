"""A GPU with too few published rows of its own quotes the residuals of its own kind of evidence.

Before the fix a GPU priced from a published prior with no corpus rows (b300, gb200, mi355x) quoted the MAPE
over all GPUs, mostly GPUs with measured kernel tables (+-19%), while the same GPUs' rows on a published
prior fell 30% (a100-40gb) and 45% (mi300x) away: GB300 (datasheet only, +-41%) and B300 gave the same
bandwidth-bound step time with bands a factor two apart.
"""
import pytest

from simulator.specs import uncertainty as u


BANDS = {
    "_all": {"step_time_mape": 0.19, "step_time_worst": 0.9, "n": 100},
    "a": {"step_time_mape": 0.30, "step_time_worst": 0.48, "n": 15, "basis": "published prior: matmul table of a"},
    "b": {"step_time_mape": 0.45, "step_time_worst": 0.89, "n": 63, "basis": "published prior: matmul table of b"},
    "c": {"step_time_mape": 0.15, "step_time_worst": 0.51, "n": 22, "basis": "measured kernel tables: c.json"},
}


def test_pooled_mape_weights_each_gpu_by_its_rows():
    # by hand: (15 x 0.30 + 63 x 0.45) / 78 = (4.5 + 28.35) / 78 = 0.421154
    mape, worst, n, gpus = u.basis_band(BANDS, "published prior")
    assert mape == pytest.approx(32.85 / 78)
    assert (worst, n, gpus) == (0.89, 78, ["a", "b"])
    assert u.basis_band(BANDS, "measured kernel tables")[:3] == (0.15, 0.51, 22)
    assert u.basis_band(BANDS, "published prior", exclude="b")[:3] == (0.30, 0.48, 15)
    assert u.basis_band(BANDS, "calibration profile") is None  # no row rests on it: the caller quotes all GPUs
    assert u.basis_band({"a": BANDS["a"] | {"n": 2}}, "published prior") is None  # under MIN_ROWS


def test_prior_gpu_without_rows_quotes_the_prior_rows_not_all_gpus():
    bands = u._bands()
    assert int((bands.get("b300") or {}).get("n") or 0) < u.MIN_ROWS
    pooled = u.basis_band(bands, "published prior", exclude="b300")
    band = u.step_time_band("b300", "gpu", "published prior")
    assert band.mape == pytest.approx(pooled[0]) and band.n == pooled[2]
    assert band.mape != pytest.approx(bands["_all"]["step_time_mape"])
    assert "published prior" in band.describe() and "b300 has 0" in band.describe()
    # the prior rows (a100-40gb 30%, mi300x 45% in the shipped file) sit far from the all-GPU figure
    assert band.mape > bands["_all"]["step_time_mape"] + 0.1
