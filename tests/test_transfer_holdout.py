"""`python -m calibration.transfer --holdout-source SOURCE`: one source scored by a layer learned without it, the
same figures the full leave-one-source-out pass commits (calibration/data/transfer/transfer_rows.csv)."""
import pandas as pd
import pytest

from calibration import transfer as T

pytestmark = pytest.mark.transfer


def test_holdout_source_reproduces_the_committed_held_out_rows(capsys):
    # a source of step speedups and a plain step (8 x B200, DeepSeek-R1 MTP): no serving simulation to score
    source = "trtllm-dsr1-b200-blog"
    assert T.main(["--holdout-source", source]) == 0
    out = capsys.readouterr().out
    assert f"layer learned without {source}" in out and "speedup: MAPE" in out
    committed = pd.read_csv(T.OUT_DIR / "transfer_rows.csv")
    mine = committed[(committed.source_id == source) & ~committed.anchor]
    for kind, block in (("speedup", "speedup"), ("plain", "plain_only")):
        mape = mine[mine.kind == kind].error.abs().mean()
        assert f"{block}: MAPE {mape:.1%}" in out  # the same layer, learned without the source, as the full pass


def test_holdout_source_unknown_is_one_line(capsys):
    assert T.main(["--holdout-source", "no-such-source"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--holdout-source no-such-source" in err[0]
