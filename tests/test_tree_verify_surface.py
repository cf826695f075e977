"""A tree of more than 31 draft tokens verifies K + 1 > 32 queries per sequence at depth >= 2 (a prefill
kernel, physics.attention.MAX_DECODE_SURFACE_QUERIES) while plain decoding and depth 1 run decode attention.
An attention op is priced on one surface, so the grid prices each side of that limit as its own pass: before,
plain decoding on a grid holding an 8x63 tree was priced through the prefill kernel (214 ms a step at B = 128
for Llama-3.1-8B on an H100, where the same cell alone costs 12.8 ms), and the tree looked 3.7x faster than
plain decoding there."""
import numpy as np
import pytest

from simulator.plan.grid import evaluate_grid
from simulator.plan.step_passes import surface_sides
from simulator.specs.scenario import SCENARIO_DIR, load_scenario

B = np.array([1.0, 8.0, 128.0])


@pytest.fixture(scope="module")
def tree_scenario():
    return load_scenario(SCENARIO_DIR / "llama-3.1-8b-h100.toml", engine="sglang", draft="eagle3:tree:8x63")


def test_a_cells_price_does_not_depend_on_the_other_ks_of_the_grid(tree_scenario):
    whole = evaluate_grid(tree_scenario, B, np.arange(9.0))
    for k in range(9):
        alone = evaluate_grid(tree_scenario, B, np.array([float(k)]))
        np.testing.assert_allclose(whole.verify_s[:, k], alone.verify_s[:, 0], rtol=1e-12)
        np.testing.assert_allclose(whole.itl_s[:, k], alone.itl_s[:, 0], rtol=1e-12)
    # the per-op detail is joined in the grid's K order too
    detail = whole.verify.detail
    np.testing.assert_allclose(detail.time_s.sum(axis=0), whole.verify.total_s, rtol=1e-9)


def test_plain_decoding_is_priced_as_decode_on_a_tree_grid(tree_scenario):
    g = evaluate_grid(tree_scenario, B, np.arange(9.0))
    plain = g.verify_s[:, 0]
    # plain decoding of an 8B bf16 model on one H100 reads ~16 GB of weights: a few ms to ~13 ms at B = 128,
    # and nowhere near the 64-query tree's verify (which checks 64 tokens per sequence at depth >= 2)
    assert plain[-1] < 0.02
    assert (g.verify_s[:, 2] > plain).all()
    assert (np.diff(g.verify_s[:, :3], axis=1) >= 0).all()  # deeper trees verify at least as many tokens


def test_surface_sides_splits_only_a_k_axis_that_spans_the_limit():
    assert surface_sides(np.array([[[0.0], [8.0]]]).reshape(1, 2, 1)) is None  # 1 and 9 queries: decode
    sides = surface_sides(np.array([0.0, 8.0, 63.0]).reshape(1, 3, 1))  # 1, 9 and 64 queries
    assert sides.tolist() == [True, True, False]
    assert surface_sides(np.array([63.0]).reshape(1, 1, 1)) is None


def test_a_deep_trees_attention_runs_at_a_prefill_kernels_rate(tree_scenario):
    """64 tree queries per sequence over 512 keys is one prefill (FlashAttention) launch over all 8 sequences'
    and 8 KV heads' query rows. FlashAttention-3 runs the bf16 forward at ~330-500 TFLOP/s on an H100 at
    sequence length 512, head dim 128 (Shah et al. 2024, arXiv:2407.08608, Fig. 5), under the 989 TFLOP/s
    dense peak. Priced per sequence and head (m = q g = 256 rows) it ran at 26 TFLOP/s."""
    g = evaluate_grid(tree_scenario, np.array([8.0]), np.array([2.0]), np.array([512.0, 4096.0]))
    attention = g.verify_context.detail  # the ops that read the context: attention alone here
    assert attention.names == ["attention"]
    rate = float(attention.flops[..., 0].sum() / attention.time_s[..., 0].sum())  # at 512 keys
    assert 150e12 < rate < 989e12


def test_a_trees_memory_terms_count_the_nodes_it_verifies(tree_scenario):
    # plan.fit's memory terms (what a 'does not fit' answer shows) price the verify width the grid prices: an
    # SGLang 8x63 tree verifies min(63, 8 + (K - 1) 64) drafts + the root per sequence (specs.drafts.verify_drafts):
    # 9 tokens at K = 1, 64 from K = 2 (SGLang's speculative_num_draft_tokens = 64), not K + 1 = 2..5
    from simulator.physics.memory import activation_bytes_per_gpu
    from simulator.plan.fit import memory_terms
    sc, b = tree_scenario, 64
    grid = evaluate_grid(sc, np.array([float(b)]), np.arange(5.0))
    for k, width in ((0, 1), (1, 9), (2, 64), (3, 64), (4, 64)):
        t = memory_terms(sc, b, k)
        assert t["tokens_per_seq"] == sc.context_len + width
        assert t["activations"] == pytest.approx(float(activation_bytes_per_gpu(sc.model, sc.deployment, b * width)))
        # before: 25.91 GB at K = 3 (4 tokens a sequence, B = 64, context 1024) where the grid holds 28.74 GB
        assert t["need"] == pytest.approx(float(grid.memory_per_gpu_bytes[0, k]), rel=1e-12)
