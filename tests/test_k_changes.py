"""Where K* changes, and why (simulator/plan/k_changes.py): each change of the schedule with what the old
and the new K give over plain decoding there, the bound, the experts each loads and the CUDA-graph padding
that makes some changes."""
from __future__ import annotations

import json

import numpy as np

from simulator.cli.predict import main as predict_main
from simulator.physics.engine_time import graph_batch
from simulator.plan.k_changes import ScheduleGrid, change_points, describe_change, k_changes
from simulator.specs.engines import load_engine


def test_changes_on_a_hand_grid():
    # hand grid: plain 10-13 ms; K=1 and K=2 steps; AL(K) = 1, 1.8, 2.4; the schedule K* = 2, 2, 1, 0
    itl = np.array([[10, 12, 14], [11, 14, 16], [12, 18, 24], [13, 20, 30]], dtype=float) * 1e-3
    recs = k_changes(ScheduleGrid([1, 2, 3, 4], [0, 1, 2], itl, [1.0, 1.8, 2.4], np.array([2, 2, 1, 0])))
    assert [(r["batch_size"], r["previous_batch_size"], r["k_from"], r["k_to"]) for r in recs] == [(3, 2, 2, 1), (4, 3, 1, 0)]
    k1, k2 = recs[0]["cells"]
    # B=3: K=1 step 18 / 12 = 1.5x plain, AL 1.8 -> 1.8 / 1.5 = 1.2x; K=2 step 24 / 12 = 2.0x, AL 2.4 -> 1.2x
    assert (k1["k"], k2["k"]) == (1, 2)
    assert np.isclose(k1["step_vs_plain"], 1.5) and np.isclose(k1["vs_plain"], 1.2)
    assert np.isclose(k2["step_vs_plain"], 2.0) and np.isclose(k2["vs_plain"], 1.2)
    # B=4: only K=1 (K=0 is plain itself): 20 / 13 = 1.538x, 1.8 / 1.538 = 1.17x
    (only,) = recs[1]["cells"]
    assert only["k"] == 1 and np.isclose(only["step_vs_plain"], 20 / 13) and np.isclose(only["vs_plain"], 1.8 * 13 / 20)
    assert describe_change(recs[1]).startswith("B=4: K* 1 -> 0: K=1 1.17x plain (step 1.54x plain, acceptance length 1.80")


def test_no_change_into_or_out_of_nothing_fits():
    assert change_points(np.array([1, -1, 1, 1])).size == 0
    assert list(change_points(np.array([3, 3, 2, -1, -1]))) == [2]


def test_padding_is_named_where_plain_and_speculative_graphs_differ():
    # SGLang 0.5.19's capture lists (simulator/data/engines/sglang-0.5.19.toml, from server_args.py
    # _generate_cuda_graph_batch_sizes): plain [.., 8, 12, 16, ..]; with speculation [.., 8, 10, 12, ..]
    eng = load_engine("sglang", "0.5.19")
    assert graph_batch(eng, 9, 0) == 12 and graph_batch(eng, 9, 1) == 10 and graph_batch(eng, 8, 0) == 8
    # vLLM 0.29.0 keys graphs by tokens (PR #50488 grid: .., 240, 248, 256, ..): B = 122 at K = 1 is 244
    # tokens, padded to 248 = 124 sequences' worth
    assert graph_batch(load_engine("vllm", "0.29.0"), 122, 1) == 124
    itl = np.array([[8.0, 14.0], [12.0, 13.0]]) * 1e-3
    recs = k_changes(ScheduleGrid([8, 9], [0, 1], itl, [1.0, 1.65], np.array([0, 1])),
                     graph_batch=lambda b, k: (b, float(graph_batch(eng, b, k))))
    assert recs[0]["padded"] == {0: 12, 1: 10}
    assert describe_change(recs[0]).endswith("its CUDA graphs are padded: plain to 12 sequences, K=1 to 10")


def test_cli_and_json_say_where_k_changes(capsys):
    # gpt-oss-120b / H100 / SGLang: K* rises from 1 to 3 at B = 9, where plain decoding pads 9 sequences to its 12
    # graph and speculation to its 10 (SGLang's capture lists: plain [.., 8, 12, 16, ..], with speculation
    # [.., 8, 10, 12, 14, 16, ..]). (Since the kernels priced off the measured tables pay their launch, 2026-12-08
    # fifteenth pass; between the ninth pass and it the rise was at B = 11, where both pad to 12; before the
    # ninth pass at B = 9 as now; before the experts' MXFP4 kernel had its measured surface, at B = 13: plain to 16,
    # speculation to 14.)
    # independent routing (reuse 0; the default is 0.5): the case the padding lists above were worked out for
    argv = ["--model", "gpt-oss-120b", "--hardware", "h100-sxm", "--tp", "1", "--engine", "sglang", "--draft", "eagle3",
            "--routing-reuse", "0"]
    assert predict_main(argv) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    head = lines.index("where the schedule's K changes (what the old and new K give over plain decoding there):")
    rise = next(x for x in lines[head:] if x.startswith("  B=9: K* 1 -> 3"))
    assert "plain to 12 sequences, K=" in rise and rise.endswith("K=3 to 10") and "of 128 experts a layer" in rise
    assert any(x.startswith("  ... ") and "k_changes" in x for x in lines[head:])  # more than 6 changes
    assert predict_main(argv + ["--format", "json"]) == 0
    d = json.loads(capsys.readouterr().out)
    ks = [r["k_to"] for r in d["k_changes"]]
    assert len(ks) > 6 and all(r["text"].startswith(f"B={r['batch_size']}: K* ") for r in d["k_changes"])
    rows = {r["batch_size"]: r["k_schedule"] for r in d["rows"]}
    for r in d["k_changes"]:  # each change is where the table's schedule K changes
        assert rows[r["previous_batch_size"]] == r["k_from"] and rows[r["batch_size"]] == r["k_to"]
