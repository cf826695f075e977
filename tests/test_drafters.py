"""Block drafters (DFlash, DSpark, P-EAGLE, PARD) and EAGLE draft trees (issue 48, item 1).

Anchors: hand computations of one draft pass's GEMM FLOPs and weight bytes from the model configs
(qwen3-8b, llama-3.1-8b, llama-3.2-1b in simulator/data/models) and the token counts the engines' code
runs (vLLM 0.33.0 dflash/dspark speculators and config/speculative.py; TensorRT-LLM pard.py); the
tree's verify width N + 1 (SGLang --speculative-num-draft-tokens counts the root); the engines' own
config code for the exports (tests marked ``engines``).
"""
from __future__ import annotations

import numpy as np
import pytest

from simulator.errors import PlannerError
from simulator.plan.api import predict
from simulator.specs.drafts import parse_draft, verify_drafts

LAYER_GEMMS = ("attn_qkv", "attn_o", "mlp_gate_up", "mlp_down")


def _params_per_layer(D, hq, hkv, d, inter):
    """Weights of one decoder layer: QKV D (hq + 2 hkv) d, O hq d D, gate/up/down 3 D F."""
    return D * (hq + 2 * hkv) * d + hq * d * D + 3 * D * inter


QWEN3_8B = _params_per_layer(4096, 32, 8, 128, 12288)  # 192,937,984
LLAMA_8B = _params_per_layer(4096, 32, 8, 128, 14336)  # 218,103,808
LLAMA_1B = _params_per_layer(2048, 32, 8, 64, 8192)  # 60,817,408


def _draft_rows(pred, b, k, prefix):
    df = pred.breakdown(b, k)
    return df[(df.step == "draft") & df.op.str.startswith(prefix)]


def _gemm_sum(rows, prefix, col):
    return float(rows[rows.op.isin([prefix + n for n in LAYER_GEMMS])][col].sum())


def test_hand_layer_params():  # hand: the per-layer weights used below
    assert QWEN3_8B == 25_165_824 + 16_777_216 + 150_994_944
    assert LLAMA_8B == 218_103_808 and LLAMA_1B == 60_817_408


def test_dflash_k7_is_one_pass_of_k_plus_1_tokens():
    # vLLM 0.33.0 dflash/speculator.py: num_query_per_req = 1 + K; 5 target-sized layers (z-lab DFlash)
    p = predict(model="qwen3-8b", hardware="h100-sxm", draft="dflash")
    g = predict(model="qwen3-8b", hardware="h100-sxm", draft="dflash").grid
    rows = _draft_rows(p, 1, 7, "draft_block.")
    assert _gemm_sum(rows, "draft_block.", "gflops") * 1e9 == pytest.approx(2 * 8 * 5 * QWEN3_8B, rel=1e-6)
    # the five layers' weights are read ONCE (7 sequential passes would read them 7 times)
    weights = 5 * QWEN3_8B * 2
    assert weights <= _gemm_sum(rows, "draft_block.", "mbytes") * 1e6 < 1.01 * weights
    # the LM head at the K = 7 predicted positions: 2 x 7 x V x D
    head = rows[rows.op == "draft_block.lm_head"]
    assert float(head.gflops.iloc[0]) * 1e9 == pytest.approx(2 * 7 * 151936 * 4096, rel=1e-6)
    # context step: one K/V GEMM for the 5 layers over the K + 1 verified tokens: 2 x 8 x D x (5 x 2 x 8 x 128)
    kv = rows[rows.op == "draft_block.context_kv"]
    assert float(kv.gflops.iloc[0]) * 1e9 == pytest.approx(2 * 8 * 4096 * 5 * 2 * 8 * 128, rel=1e-6)
    # no one-token passes: the draft step is the block pass alone
    k7 = list(g.ks).index(7)
    assert g.draft_passes[0, k7] == 1.0 and g.one_token_passes[0, k7] == 0.0
    assert not _draft_rows(p, 1, 7, "draft.").gflops.sum() > 0


def test_one_pass_vs_k_sequential_passes_of_the_same_layers():
    # EAGLE-3 chain (one layer per pass) at K = 7 reads its layer's weights 6 times in the one-token
    # passes (+ the extend pass); DFlash reads its 5 layers once: per-layer weight reads 7 vs 1
    chain = _draft_rows(predict(model="llama-3.1-8b", hardware="h100-sxm", draft="eagle3"), 1, 7, "draft.")
    assert _gemm_sum(chain, "draft.", "mbytes") * 1e6 == pytest.approx(6 * LLAMA_8B * 2, rel=0.01)
    block = _draft_rows(predict(model="llama-3.1-8b", hardware="h100-sxm", draft="dflash"), 1, 7, "draft_block.")
    assert _gemm_sum(block, "draft_block.", "mbytes") * 1e6 == pytest.approx(5 * LLAMA_8B * 2, rel=0.01)


def test_p_eagle_pass_runs_2k_tokens_per_sequence():
    # vLLM 0.33.0 config/speculative.py: P-EAGLE (eagle3 + parallel_drafting) adds K - 1 mask slots to the
    # K + 1 verified positions: 2K tokens per sequence; 4 layers (amazon/gpt-oss-120b-p-eagle)
    rows = _draft_rows(predict(model="llama-3.1-8b", hardware="h100-sxm", draft="p-eagle"), 2, 7, "draft_block.")
    assert _gemm_sum(rows, "draft_block.", "gflops") * 1e9 == pytest.approx(2 * (2 * 14) * 4 * LLAMA_8B, rel=1e-6)


def test_pard_pass_runs_2k_tokens_per_sequence_through_the_draft_model():
    # TensorRT-LLM pard.py: tokens_per_gen = 2 * max_draft_len; PARD-Llama-3.2-1B: 16 layers of llama-3.2-1b
    rows = _draft_rows(predict(model="llama-3.1-8b", hardware="h100-sxm", draft="pard"), 2, 4, "draft_block.")
    assert _gemm_sum(rows, "draft_block.", "gflops") * 1e9 == pytest.approx(2 * (2 * 8) * 16 * LLAMA_1B, rel=1e-6)
    head = rows[rows.op == "draft_block.lm_head"]  # logits at K positions per sequence, vocabulary 128256
    assert float(head.gflops.iloc[0]) * 1e9 == pytest.approx(2 * (2 * 4) * 128256 * 2048, rel=1e-6)


def test_dspark_pass_runs_k_tokens_and_k_markov_steps():
    # vLLM 0.33.0 dspark/speculator.py: N = K query tokens (anchor + K - 1); Markov head [B, r] x [r, V] K times
    rows = _draft_rows(predict(model="qwen3-8b", hardware="h100-sxm", draft="dspark"), 1, 7, "draft_block.")
    assert _gemm_sum(rows, "draft_block.", "gflops") * 1e9 == pytest.approx(2 * 7 * 5 * QWEN3_8B, rel=1e-6)
    markov = rows[rows.op == "draft_block.markov_head"]
    assert float(markov.mbytes.iloc[0]) * 1e6 >= 7 * 151936 * 256 * 2  # the [r, V] weight read K times


def test_tree_verify_width_is_n_plus_1():
    tree = parse_draft("eagle3:tree:4x8")
    assert (tree.topk, tree.tree_tokens, tree.label) == (4, 8, "eagle3:tree:4x8")
    # depth 1 scores the root's 4 children; from depth 2 on 4 + 16 >= 8 candidates: N = 8
    assert verify_drafts(tree, np.array([0, 1, 2, 5])).tolist() == [0, 4, 8, 8]
    assert verify_drafts(parse_draft("eagle3"), np.array([0, 3])).tolist() == [0, 3]
    p_tree = predict(model="llama-3.1-8b", hardware="h100-sxm", draft="eagle3:tree:4x8")
    df = p_tree.breakdown(2, 3)
    qkv = float(df[(df.step == "verify") & (df.op == "attn_qkv")].gflops.iloc[0]) * 1e9
    qkv_params = 4096 * (32 + 16) * 128
    # B (N + 1) = 2 x 9 = 18 tokens, run in the captured graph of 24 tokens (vLLM: 1, 2, 4, then every 8), 32 layers
    assert qkv == pytest.approx(2 * 24 * 32 * qkv_params, rel=1e-6)
    chain = predict(model="llama-3.1-8b", hardware="h100-sxm", draft="eagle3").breakdown(2, 3)
    assert float(chain[(chain.step == "verify") & (chain.op == "attn_qkv")].gflops.iloc[0]) * 1e9 == \
        pytest.approx(2 * (2 * 4) * 32 * qkv_params, rel=1e-6)  # a chain: B (K + 1) = 8, a captured size
    # the draft: the extend pass + K - 1 = 2 passes of topk = 4 candidates per sequence
    rows = df[(df.step == "draft") & (df.op == "draft.attn_qkv")]
    assert float(rows.gflops.iloc[0]) * 1e9 == pytest.approx(2 * 2 * (2 * 4) * qkv_params, rel=1e-6)


def test_tree_acceptance_depends_on_the_tree():
    # the preset's tree (8 x 63, SGLang PR #4247) gives the published AL 4.68 at depth 5 and 5.39 at depth 8;
    # the default 4 x 8 tree of the same head accepts less at every depth, and more than a chain
    g = predict(model="llama-3.1-8b", hardware="h100-sxm", draft="eagle3:tree:8x63", batch_sizes="1").grid
    al_big = np.asarray(g.acceptance_length)
    assert "eagle3-tree" in predict(model="llama-3.1-8b", hardware="h100-sxm",
                                    draft="eagle3:tree:8x63", batch_sizes="1").scenario.acceptance.source
    assert al_big[5] == pytest.approx(4.68, abs=0.01) and al_big[8] == pytest.approx(5.39, abs=0.01)
    al_small = np.asarray(predict(model="llama-3.1-8b", hardware="h100-sxm", draft="eagle3:tree:4x8",
                                  batch_sizes="1").grid.acceptance_length)
    assert (al_small[1:9] < al_big[1:9]).all() and (al_big[3:9] - al_small[3:9] > 0.5).all()
    from simulator.specs.acceptance import preset_for
    chain = preset_for("eagle3-tree").acceptance_length(np.arange(9))  # topk 1: the top-1 rates as a chain
    assert (al_small[1:9] >= chain[1:9] - 1e-12).all() and al_small[2] > chain[2] + 0.2


@pytest.mark.parametrize("name, al, k", [("dflash", 3.74, 7), ("dspark", 3.41, 7), ("p-eagle", 2.68, 5)])
def test_block_presets_reproduce_their_published_lengths(name, al, k):
    from simulator.specs.acceptance import preset_for
    assert preset_for(name).acceptance_length(k) == pytest.approx(al, abs=0.01)


@pytest.mark.parametrize("text, msg", [("eagle3:tree:4x", "TOPKxTOKENS"), ("eagle3:tree:8x4", "TOPK <="),
                                       ("pard:", "PARD draft model")])
def test_bad_draft_spellings(text, msg):
    with pytest.raises(PlannerError, match=msg):
        parse_draft(text)


def test_pard_needs_the_targets_vocabulary():
    with pytest.raises(PlannerError, match="pard:NAME"):
        predict(model="qwen3-8b", hardware="h100-sxm", draft="pard")


def test_serving_refuses_trees_in_one_line():
    from simulator.serving.pricer import StepPricer
    sc = predict(model="llama-3.1-8b", hardware="h100-sxm", draft="eagle3:tree:4x8").scenario
    with pytest.raises(PlannerError, match="chains only"):
        StepPricer(sc, None, 8, 64, 4096, True)


@pytest.mark.parametrize("draft, fmt, version, msg", [
    ("eagle3:tree:4x8", "vllm", None, "SGLang 0.5.23 runs EAGLE trees"),
    ("dflash", "vllm", "0.29.0", "vLLM 0.33.0 runs it"),
    ("dflash", "trtllm", None, "vLLM 0.33.0"),
    ("pard", "sglang", None, "vLLM 0.33.0 runs it"),
    ("eagle3:tree:4x8", "sglang", "0.5.19", "SGLang 0.5.23 runs it")])
def test_exports_refuse_what_the_engine_release_does_not_run(draft, fmt, version, msg):
    p = predict(model="llama-3.1-8b", hardware="h100-sxm", draft=draft, batch_sizes="1-16")
    with pytest.raises(PlannerError, match=msg):
        p.export(fmt, version)


def test_vllm_payloads_name_the_methods():
    want = {"dflash": {"method": "dflash"}, "dspark": {"method": "dspark"},
            "p-eagle": {"method": "eagle3", "parallel_drafting": True},
            "pard": {"method": "draft_model", "parallel_drafting": True, "model": "amd/PARD-Llama-3.2-1B"}}
    for draft, keys in want.items():
        payload = predict(model="llama-3.1-8b", hardware="h100-sxm", draft=draft, batch_sizes="1-16").export(
            "vllm").payload
        assert keys.items() <= payload.items(), draft


def test_sglang_tree_flags_carry_n_plus_1_draft_tokens():
    p = predict(model="llama-3.1-8b", hardware="h100-sxm", draft="eagle3:tree:4x8", batch_sizes="1-16")
    exp = p.export("sglang", planned_batch_size=4)
    flags = exp.payload
    assert flags["speculative_eagle_topk"] == 4 and flags["speculative_algorithm"] == "EAGLE3"
    k = flags["speculative_num_steps"]
    # K* at the planned batch size (6; plan/exports/fixed_k.py on main), or, before that export, the K the engine
    # schedule keeps over B 1-16 within its tolerance (7)
    row = p.table.set_index("batch_size").loc[4]
    assert k in (int(row["k_opt"]), int(row["k_schedule"])) and k >= 2
    assert flags["speculative_num_draft_tokens"] == 9
    assert "--speculative-eagle-topk 4" in exp.how_to_use


# --- the engines' own code -----------------------------------------------------------------------

def _skip_unavailable(fn, *a, **k):
    import engine_code as ec
    try:
        return fn(*a, **k)
    except ec.EngineCodeUnavailable as exc:
        pytest.skip(f"engine code unavailable: {exc}")


@pytest.mark.engines
@pytest.mark.parametrize("draft, method", [("dflash", "dflash"), ("dspark", "dspark"), ("p-eagle", "eagle3"),
                                           ("pard", "draft_model")])
def test_engines_vllm_0330_reads_the_block_drafter_configs(draft, method):
    import engine_code_vllm_config as vc
    p = predict(model="llama-3.1-8b", hardware="h100-sxm", draft=draft, batch_sizes="1-16",
                draft_checkpoint="org/some-draft")
    payload = p.export("vllm", "0.33.0").payload
    got = _skip_unavailable(vc.check_speculative_config, payload, "meta-llama/Llama-3.1-8B-Instruct", "0.33.0")
    assert got["method"] == method
    # the same code refuses what it does not know: our spelling where vLLM's differs, a misspelt field
    bad = payload | ({"method": draft} if draft != method else {"parallel_draft": True})
    with pytest.raises(ValueError, match="SpeculativeMethod|no field"):
        vc.check_speculative_config(bad, "meta-llama/Llama-3.1-8B-Instruct", "0.33.0")


@pytest.mark.engines
@pytest.mark.parametrize("draft", ["eagle3:tree:4x8", "eagle:tree:2x4", "dflash", "dspark"])
def test_engines_sglang_0523_reads_the_launch_flags(draft):
    import engine_code_sglang_spec as sg
    p = predict(model="llama-3.1-8b", hardware="h100-sxm", draft=draft, batch_sizes="1-16")
    flags = p.export("sglang", "0.5.23").payload
    spec = _skip_unavailable(sg.read_flags, flags, "0.5.23")
    assert spec.speculative_algorithm in _skip_unavailable(sg.builtin_algorithms, "0.5.23")
    assert spec.speculative_num_draft_tokens == flags["speculative_num_draft_tokens"]
    if p.scenario.draft.is_tree:
        assert spec.speculative_eagle_topk == p.scenario.draft.topk
    assert not {"P-EAGLE", "PARD"} & _skip_unavailable(sg.builtin_algorithms, "0.5.23")


def test_catalog_lists_the_new_drafts_with_their_basis():
    from simulator.cli.catalog import catalog_text
    text = catalog_text("drafts")
    for syntax, basis in (("dflash", "arXiv:2602.06036"), ("dspark", "preset dspark"), ("p-eagle", "parallel_drafting"),
                          ("pard or pard:NAME", "pard.py"), ("eagle3:tree:TxN", "sgl-project/sglang PR #4247")):
        line = next(x for x in text.splitlines() if x.startswith(syntax + " "))
        assert basis in line, syntax


def test_dflash_memory_hand():
    # 5 target-sized layers + the 5D -> D fc (bf16), the draft's own KV in each of its 5 layers
    from simulator.physics.memory import draft_memory_bytes
    sc = predict(model="qwen3-8b", hardware="h100-sxm", draft="dflash").scenario
    weights = float(draft_memory_bytes(sc.draft, sc.model, sc.deployment, 0.0, 0.0))
    assert weights == pytest.approx((5 * QWEN3_8B + 5 * 4096 * 4096) * 2, rel=1e-9)
    kv = float(draft_memory_bytes(sc.draft, sc.model, sc.deployment, 1.0, 1000.0)) - weights
    assert kv == pytest.approx(5 * 1000 * 2 * 8 * 128 * 2, rel=1e-9)


def test_a_tree_accepts_at_most_its_n_tokens():
    # eagle:tree:2x4 holds 4 draft tokens: AL <= N + 1 = 5 at every depth, and a deeper tree of the same N
    # never accepts less (its candidates are a superset)
    g = predict(model="llama-3.1-8b", hardware="h100-sxm", draft="eagle:tree:2x4", k_max=6, batch_sizes="1-4").grid
    al = np.asarray(g.acceptance_length)
    assert (al <= 5.0).all() and (np.diff(al) >= -1e-12).all()
