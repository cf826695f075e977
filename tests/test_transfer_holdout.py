"""`python -m calibration.transfer --holdout-source SOURCE`: one source scored by a layer learned without it, the
same figures the full leave-one-source-out pass commits (calibration/data/transfer/transfer_rows.csv)."""
import pandas as pd
import pytest

from calibration import transfer as T

pytestmark = pytest.mark.transfer


def test_holdout_source_reproduces_the_committed_held_out_rows(capsys):
    assert T.main(["--holdout-source", "amd-rocm-mtp-blog"]) == 0
    out = capsys.readouterr().out
    assert "layer learned without amd-rocm-mtp-blog" in out and "speedup: MAPE" in out
    committed = pd.read_csv(T.OUT_DIR / "transfer_rows.csv")
    mine = committed[(committed.source_id == "amd-rocm-mtp-blog") & (committed.kind == "speedup") & ~committed.anchor]
    mape = mine.error.abs().mean()
    assert f"speedup: MAPE {mape:.1%}" in out  # the same layer, learned without the source, as the full pass


def test_holdout_source_unknown_is_one_line(capsys):
    assert T.main(["--holdout-source", "no-such-source"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--holdout-source no-such-source" in err[0]
