"""A draft tree's acceptance grows with its size and shape (simulator/specs/tree_acceptance.py), anchored to
published chain-vs-tree and tree figures and to hand computations; a model's MTP preset says whose rates it is."""
import numpy as np
import pytest

from simulator.errors import PlannerError
from simulator.specs.acceptance import Acceptance, load_presets, preset_for
from simulator.specs.drafts import parse_draft, verify_drafts
from simulator.specs.tree_acceptance import (rank_probabilities, tree_acceptance_length, tree_acceptance_lengths,
                                             verified_nodes)

TAIL = preset_for("eagle3-tree").rank_tail

# EAGLE-1's static tree (SafeAILab/EAGLE eagle/model/choices.py mc_sim_7b_63): 25 nodes, each the ranks of
# the candidates on its path (0: the draft's top-1)
EAGLE1_TREE = [[0], [1], [2], [3], [0, 0], [0, 1], [0, 2], [1, 0], [1, 1], [2, 0], [2, 1], [3, 0], [0, 0, 0],
               [0, 0, 1], [0, 0, 2], [0, 1, 0], [0, 1, 1], [0, 2, 0], [0, 2, 1], [1, 0, 0], [0, 0, 0, 0],
               [0, 0, 0, 1], [0, 0, 0, 2], [0, 0, 0, 0, 0], [0, 0, 0, 0, 1]]


def _static_tree_al(choices, a, m):
    q = rank_probabilities(a, m, 4)
    return 1.0 + sum(np.prod([q[r] for r in path]) for path in choices)


def test_rank_tail_reproduces_eagle_chain_and_tree():
    # EAGLE (arXiv:2401.15077), LLaMA2-Chat 7B, MT-bench, T = 0: tau 3.0 with a chain, 3.62 with the 25-node
    # tree (as quoted in SafeAILab/EAGLE issue #132). Chain of 5: 1 + a + ... + a^5 = 3.0 -> a = 0.709 (hand:
    # 1 + .709 + .503 + .357 + .253 + .179 = 3.00); the preset's rank tail then gives the tree's 3.62
    a = 0.709
    assert sum(a ** i for i in range(6)) == pytest.approx(3.0, abs=0.005)
    assert _static_tree_al(EAGLE1_TREE, a, TAIL) == pytest.approx(3.62, abs=0.01)
    assert preset_for("eagle-tree").rank_tail == TAIL


def test_two_candidates_by_hand():
    # T = 2, N = 2, depth 1: AL = 1 + a + (1 - a)(1 - m); a = 0.7, m = 0.75 -> 1 + 0.7 + 0.3 x 0.25 = 1.775
    assert tree_acceptance_length([0.7], 0.75, 2, 2) == pytest.approx(1.775, abs=1e-12)
    # depth 2, N = 3: the 3 best of {0.7, 0.075} and their children {0.49, 0.0525, 0.0525, 0.005625}:
    # 0.7, 0.49, 0.075 -> AL = 2.265
    assert tree_acceptance_length([0.7, 0.7], 0.75, 2, 3) == pytest.approx(2.265, abs=1e-12)


def test_a_chain_is_the_per_position_formula():
    rates = (0.8, 0.7, 0.6, 0.5)
    chain = Acceptance(rates).acceptance_length(np.arange(5))
    assert tree_acceptance_lengths(rates, TAIL, 1, 63, np.arange(5)) == pytest.approx(chain, abs=1e-12)


@pytest.mark.parametrize("name, k, published", [("eagle3-tree", 5, 4.68), ("eagle3-tree", 8, 5.39),
                                                ("eagle-tree", 8, 3.76)])
def test_tree_presets_reproduce_sglang_lengths_on_their_tree(name, k, published):
    # sgl-project/sglang PR #4247 (Llama 3.1 8B, MT-bench, T = 0), on the preset's stated 8 x 63 tree
    entry, acc = load_presets()[name], preset_for(name)
    al = tree_acceptance_length(acc.rates_upto(k), acc.rank_tail, entry["tree_topk"], entry["tree_tokens"])
    assert entry["published_acceptance_length"] in (4.68, 5.39, 3.76)
    assert al == pytest.approx(published, abs=0.01)


def test_bigger_trees_accept_more_and_verify_what_they_accept_over():
    acc = preset_for("eagle3-tree")
    for k in range(1, 9):
        top1 = acc.rates_upto(k)
        al = {(t, n): tree_acceptance_length(top1, TAIL, t, n) for t in (1, 2, 4, 8) for n in (4, 8, 16, 63)}
        for (t, n), v in al.items():
            draft = parse_draft(f"eagle3:tree:{t}x{n}") if n >= t else None
            if draft is not None:  # one tree description: the acceptance sums over the nodes verify prices
                assert len(verified_nodes(top1, TAIL, t, n)[0]) == int(verify_drafts(draft, k))
            assert v <= min(n, t + (k - 1) * t * t) + 1  # at most one token per verified node, plus the bonus
            for t2, n2 in ((2 * t, n), (t, 2 * n)):  # more candidates per depth, or more tokens: never less
                if (t2, n2) in al:
                    assert al[(t2, n2)] >= v - 1e-12
    # the preset's tree vs the engine default 4 x 8 at depth 5 (SGLang's --speculative-num-steps default)
    assert tree_acceptance_length(acc.rates_upto(5), TAIL, 8, 63) - tree_acceptance_length(acc.rates_upto(5), TAIL, 4, 8) > 1.0


def test_rank_tail_in_a_scenario_is_checked():
    from simulator.specs.scenario_sections import _table_acceptance
    acc = _table_acceptance({"rates": [0.7], "rank_tail": 0.6}, "eagle3-tree", "s.toml")
    assert acc.rank_tail == 0.6 and acc.rates == (0.7,)
    with pytest.raises(PlannerError, match=r"s.toml: \[acceptance\] rank_tail = 1.2 must be in \(0, 1\)"):
        _table_acceptance({"rates": [0.7], "rank_tail": 1.2}, "eagle3-tree", "s.toml")
    # a tree preset with the scenario's own source keeps its rank tail; its rates restated with its source (the
    # dashboard's controls) are the preset; other rates for a tree are that tree's own per depth
    assert _table_acceptance({"source": "mine"}, "eagle3-tree", "s.toml").rank_tail == TAIL
    p = preset_for("eagle3-tree")
    assert _table_acceptance({"rates": list(p.rates), "source": p.source}, "eagle3-tree", "s.toml") == p
    assert _table_acceptance({"rates": list(p.rates), "source": "typed"}, "eagle3-tree", "s.toml").rank_tail is None


def test_mtp_preset_names_whose_rates_it_is():
    from simulator.specs.acceptance import preset_for_model
    mtp = preset_for("mtp")
    qwen = preset_for_model("mtp", mtp, "qwen3-next-80b-a3b")
    assert qwen.rates == mtp.rates
    assert "no published mtp acceptance for qwen3-next-80b-a3b: rests on the rates of deepseek-v3" in qwen.source
    assert preset_for_model("mtp", mtp, "deepseek-v3") == mtp
    given = Acceptance((0.9,), "measured")  # a scenario's own rates are left as they are
    assert preset_for_model("mtp", given, "qwen3-next-80b-a3b") == given


def test_qwen3_next_mtp_prediction_says_it_rests_on_deepseek_rates():
    from simulator.specs.scenario import build_scenario
    sc = build_scenario({"model": {"name": "qwen3-next-80b-a3b"}, "hardware": {"name": "h100-sxm", "tp": 4},
                         "draft": {"method": "mtp"}})
    assert sc.acceptance.rates == preset_for("mtp").rates
    assert "rests on the rates of deepseek-v3" in sc.acceptance.source
