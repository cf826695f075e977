"""Issue 49: the dashboard's "K* by context" tab crashed with `all input arrays must have the same shape`
after the batch range grew to 1024 (qwen3-235b-a22b, eagle3, h100-sxm, TP 8). Cause: the whole-batch
attention table of one context length, kept from a smaller batch range in the same octave (0..1024),
was stacked beside a new one built for the larger range (0..2048). Same process, same surface cache,
as the dashboard's server holds it."""
from __future__ import annotations

import pandas as pd

from simulator.plan.api import predict

QWEN = dict(model="qwen3-235b-a22b", hardware="h100-sxm", tp=8, draft="eagle3")


def test_context_map_after_a_larger_batch_range_matches_each_length_alone():
    predict(None, batch_sizes="1-256", **QWEN).kstar_frame([512, 2048])  # keeps tables for 512 and 2048 up to B 1024
    p = predict(None, batch_sizes="1-1024", **QWEN)
    both = p.kstar_frame([512, 2048, 8192])  # 8192 is new: its table is built for B up to 2048
    assert both.shape == (1024, 3)
    # each column as its own one-length map (another code path: one table, no stack) gives the same K*
    for length in (512, 2048, 8192):
        alone = p.kstar_frame([length])[length]
        pd.testing.assert_series_equal(both[length], alone)
