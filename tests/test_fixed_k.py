"""One fixed K for an engine that cannot switch K per batch size (SGLang launch flags for a tree or block draft),
chosen for the batch size(s) the user will serve at (simulator/plan/exports/fixed_k.py, predict --planned-batch).

Before: the flags carried K* at the largest batch size that fits, whatever load the user served:
`predict --scenario llama-3.1-8b-h100 --draft dflash --format sglang` gave --speculative-num-draft-tokens 2
(K = 1, the best K >= 1 at B = 342, where K* = 0) while K* is 8 from B = 1 to 35; the CLI had no way to say
which batch size to choose K for, and the file did not say which batch size its K was chosen for.
"""
from __future__ import annotations

import numpy as np
import pytest

from cli_inprocess import refused_line, run_main
from simulator.plan.exports import KTable
from simulator.plan.exports.fixed_k import choose_fixed_k, log_weights

# hand-made grid: batch sizes 1, 2, 4, 8 x K 0-3, goodput per sequence (one context length)
B = np.array([1, 2, 4, 8])
GOODPUT = np.array([[10, 15, 18, 20],    # shares of the best: .5, .75, .9, 1      K* = 3
                    [10, 14, 16, 15],    # .625, .875, 1, .9375                     K* = 2
                    [10, 12, 11, 9],     # .8333, 1, .9167, .75                     K* = 1
                    [10, 9, 8, 6]], float)  # 1, .9, .8, .6                         K* = 0


def _table(fits=None) -> KTable:
    k_opt = np.array([[3], [2], [1], [0]])
    fits = np.ones((4, 4, 1), bool) if fits is None else fits
    return KTable(B, np.array([1024]), k_opt, np.arange(4), GOODPUT[:, :, None], fits, None, 0)


def test_log_weights_by_hand():
    # log B = 0, 1, 2, 3 (x ln 2): cut at the midpoints 0.5, 1.5, 2.5 -> widths .5, 1, 1, .5 of 3
    assert log_weights(B) == pytest.approx([1 / 6, 1 / 3, 1 / 3, 1 / 6])
    assert log_weights([64]) == pytest.approx([1.0])


def test_default_is_the_best_log_weighted_share_over_every_batch_size():
    # K = 1: .75/6 + .875/3 + 1/3 + .9/6 = .9; K = 2: .9/6 + 1/3 + .9167/3 + .8/6 = .9222; K = 3: .8292.
    # Before, K* at the largest batch size (B = 8: K* = 0, best K >= 1 = 1) whatever the load.
    c = choose_fixed_k(_table())
    assert (c.k, c.lo, c.hi, c.given) == (2, 1, 8, False)
    assert c.mean_share == pytest.approx(0.92222, abs=1e-4)
    assert (c.worst_share, c.worst_at) == (pytest.approx(0.8), 8)
    assert c.plain_share == pytest.approx(0.5 / 6 + 0.625 / 3 + 0.8333 / 3 + 1 / 6, abs=1e-4)
    assert "K = 2 chosen for batch sizes 1-8" in c.chosen_for() and "92%" in c.chosen_for()


@pytest.mark.parametrize("planned, k, said", [
    (1, 3, "batch size 1 (the planned batch size)"),
    (4, 1, "batch size 4"),
    ((2, 4), 2, "batch sizes 2-4"),   # K = 2: (1 + .9167) / 2 = .958 over K = 1: (.875 + 1) / 2 = .9375
    ((4, 8), 1, "batch sizes 4-8"),   # K = 1: (1 + .9) / 2 = .95 over K = 2: .858 (and plain .917)
])
def test_planned_batch_sizes_choose_k(planned, k, said):
    c = choose_fixed_k(_table(), planned)
    assert c.k == k and said in c.chosen_for() and not c.warnings


def test_plain_winning_or_an_unevaluated_batch_size_is_said():
    c = choose_fixed_k(_table(), 8)  # K* = 0: the flags still need a K >= 1 (K = 1 keeps 90%)
    assert c.k == 1 and "plain decoding keeps more of the best goodput at batch size 8 (100%)" in c.warnings[0]
    assert "(K = 1: 90%)" in c.warnings[0]
    c = choose_fixed_k(_table(), 5)  # nearest evaluated: 4
    assert c.k == 1 and c.lo == 4 and "planned batch size 5 was not evaluated" in c.warnings[0]


def test_a_k_that_does_not_fit_loses_those_batch_sizes():
    # K = 2 does not fit at B = 8: its share there is 0, so K = 2 scores .15 + .3333 + .3056 = .789 < K = 1's .9
    fits = np.ones((4, 4, 1), bool)
    fits[3, 2:, 0] = False
    c = choose_fixed_k(_table(fits))
    assert c.k == 1 and c.no_fit_from is None
    c = choose_fixed_k(_table(fits), (1, 2))  # K = 3: (1 + .9375) / 2 beats K = 2; it fits at both
    assert c.k == 3 and c.no_fit_from is None


def test_cli_planned_batch_gives_k_star_there_and_says_so():
    from simulator.plan.api import predict
    k8 = int(predict("llama-3.1-8b-h100", draft="dflash", batch_sizes="1-64").table.set_index("batch_size")
             .loc[8, "k_opt"])
    base = ("--scenario", "llama-3.1-8b-h100", "--draft", "dflash", "--batch-sizes", "1-64", "--format", "sglang")
    done = run_main("simulator.predict", *base, "--planned-batch", "8")
    assert done.returncode == 0, done.stderr
    assert f'"speculative_num_draft_tokens": {k8 + 1}' in done.stdout
    assert f"note: K = {k8} chosen for batch size 8 (the planned batch size)" in done.stderr
    done = run_main("simulator.predict", *base)
    assert "chosen for batch sizes 1-64" in done.stderr and "--planned-batch B (or LO-HI)" in done.stderr


@pytest.mark.parametrize("args, msg", [
    (("--format", "vllm", "--planned-batch", "8"), "--planned-batch applies to --format sglang"),
    (("--format", "sglang", "--planned-batch", "64-8"), "--planned-batch '64-8': expected a batch size"),
    (("--format", "trtllm", "--planned-batch", "8-64"), "TensorRT-LLM's acceptance gate sits at one batch size"),
    (("--format", "sglang", "--draft", "eagle3", "--batch-sizes", "1-8", "--planned-batch", "8"),
     "SGLang's adaptive config switches K per batch size itself"),
    (("--format", "sglang", "--draft", "dflash", "--batch-sizes", "1-8", "--planned-batch", "600-700"),
     "--planned-batch: planned batch sizes 600-700: none of them"),
])
def test_cli_refuses_a_planned_batch_it_cannot_use(args, msg):
    assert msg in refused_line("simulator.predict", "--scenario", "llama-3.1-8b-h100", *args)


@pytest.mark.engines
@pytest.mark.parametrize("draft", ["dflash", "eagle3:tree:4x8"])
def test_engines_sglang_0523_argparse_reads_the_planned_launch_line(draft):
    # SGLang 0.5.23's own argparse (arg_utils.add_cli_args_from_dataclass over Spec, from the wheel) parses the
    # launch line; the K it carries is K* at the planned batch size
    import engine_code as ec
    import engine_code_sglang_spec as sg
    from simulator.plan.api import predict
    p = predict("llama-3.1-8b-h100", draft=draft, batch_sizes="1-64")
    k4 = int(p.table.set_index("batch_size").loc[4, "k_opt"])
    exp = p.export("sglang", "0.5.23", planned_batch_size=4)
    try:
        ns = sg.parse_launch_line(exp.how_to_use, "0.5.23")
    except ec.EngineCodeUnavailable as exc:
        pytest.skip(f"engine code unavailable: {exc}")
    assert ns.speculative_algorithm == exp.payload["speculative_algorithm"]
    if p.scenario.draft.is_tree:
        assert (ns.speculative_num_steps, ns.speculative_eagle_topk) == (k4, 4)
    else:
        assert (ns.speculative_num_steps, ns.speculative_num_draft_tokens) == (1, k4 + 1)
    with pytest.raises(SystemExit):  # the same parser refuses a flag SGLang does not have
        sg.parse_launch_line("python -m sglang.launch_server --speculative-num-drafts 3", "0.5.23")
