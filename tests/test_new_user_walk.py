"""A new user's walk of the planner after the 2026-12-07 merges (issue 47 follow-ups): what it found, each
checked in process (no new subprocess or browser page)."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from cli_inprocess import run_main

ROOT = Path(__file__).resolve().parent.parent


def test_sweep_summary_names_the_replica_cap_the_tasks_ran_under(tmp_path):
    # Before: scenarios/sweeps/sweep-small.toml's summary said "32 meet the target load within max_replicas=of the
    # base scenario." and "seed=None." (the values left out); the base, sizing-dense-command-a, sets [sizing]
    # max_replicas = 32 and seed = 0.
    from simulator.sweep import parse_sweep
    from simulator.sweep.tables import _sections

    spec = parse_sweep(ROOT / "scenarios" / "sweeps" / "sweep-small.toml", output_dir=str(tmp_path / "out"))
    rows = pd.DataFrame({"model": ["command-a"], "traffic": ["chat"], "pareto": [False], "meets_target": [True]})

    def intro():
        return _sections(spec, rows, pd.DataFrame(), {})[0][1]
    assert "1 meet the target load within max_replicas=32 (the base scenario's)." in intro(), intro()
    assert intro().endswith("; seed=0 (the base scenario's)."), intro()
    spec.run["max_replicas"], spec.run["seed"] = 7, 3  # [run] settings of the sweep's own
    assert "within max_replicas=7." in intro() and intro().endswith("; seed=3."), intro()


def test_positions_warning_names_the_k_star_of_every_batch_size_it_lists():
    # Before: "K* = 8 uses acceptance positions beyond the 2 given (B 1, 8, 32 and 128)" where K* is 4 at B = 128
    # (DFlash, Llama-3.1-8B, 1 x H100: K* 8, 8, 8, 3 since the learned host time hides behind vLLM 0.33's steps, 4
    # before; the preset gives rates for positions 1-2).
    done = run_main("simulator.predict", "--model", "llama-3.1-8b", "--hardware", "h100-sxm", "--draft", "dflash",
                    "--batch-sizes", "1,8,32,128")
    assert done.returncode == 0, done.stderr
    rows = [ln.split() for ln in done.stdout.splitlines() if ln.strip()[:1].isdigit()]
    assert {int(r[0]): int(r[1]) for r in rows} == {1: 8, 8: 8, 32: 8, 128: 3}, done.stdout
    line = next(ln for ln in done.stderr.splitlines() if "uses acceptance positions beyond" in ln)
    assert line.startswith("warning: K* = 3-8 uses acceptance positions beyond the 2 given (B 1, 8, 32 and 128)"), line


def test_table_names_sglang_tree_flags_as_one_fixed_k_not_an_adaptive_config():
    # Before: the table's engine line read "SGLang 0.5.23 adaptive config (--format sglang): {...speculative_num_steps
    # 8...}" for an EAGLE-3 8x63 tree, whose file is launch flags of one K for every batch size (K* is 1 at B = 64)
    # and whose load is set by --planned-batch; the dashboard already labels it "launch flags: one fixed K".
    done = run_main("simulator.predict", "--scenario", "llama-3.1-8b-h100", "--engine", "sglang", "--draft",
                    "eagle3:tree:8x63", "--batch-sizes", "1,16,64")
    assert done.returncode == 0, done.stderr
    line = next(ln for ln in done.stdout.splitlines() if "(--format sglang" in ln)
    assert line.startswith("SGLang 0.5.23 launch flags, one fixed K at every batch size (--format sglang;"
                           " --planned-batch picks it for your load): {\"speculative_algorithm\": \"EAGLE3\""), line
    chain = run_main("simulator.predict", "--scenario", "llama-3.1-8b-h100", "--engine", "sglang",
                     "--batch-sizes", "1,16,64")
    assert "SGLang 0.5.23 adaptive config (--format sglang): {\"1\": " in chain.stdout, chain.stdout


def test_dspark_step_cost_table_is_refused_for_a_tree():
    # Before: --format sglang-sps for an EAGLE-3 8x63 tree wrote probes at B (K + 1) batch tokens (9 at B = 1, K = 8)
    # where the tree verifies 64 tokens a sequence, and the dashboard offered it as a download.
    from cli_inprocess import refused_line

    line = refused_line("simulator.predict", "--scenario", "llama-3.1-8b-h100", "--engine", "sglang", "--draft",
                        "eagle3:tree:8x63", "--batch-sizes", "1-8", "--format", "sglang-sps")
    assert line.startswith("error: --draft eagle3:tree:8x63: the DSpark step-cost table (--format sglang-sps)"), line
    assert line.endswith("use --format sglang (its launch flags)"), line
    chain = run_main("simulator.predict", "--scenario", "llama-3.1-8b-h100", "--batch-sizes", "1-8",
                     "--format", "sglang-sps")
    assert chain.returncode == 0 and '"sample_batch_tokens"' in chain.stdout, chain.stderr


def test_a_huge_planned_batch_is_one_line_not_a_traceback():
    # Before: --planned-batch 9999999999999999999999 ended in "OverflowError: Python int too large to convert to C
    # long" (a traceback from plan/exports/fixed_k.py); --batch-sizes already caps a batch size at 65536.
    from cli_inprocess import refused_line

    for value in ("9999999999999999999999", "1-65537"):
        line = refused_line("simulator.predict", "--scenario", "llama-3.1-8b-h100", "--engine", "sglang", "--draft",
                            "eagle3:tree:4x8", "--batch-sizes", "1-8", "--format", "sglang", "--planned-batch", value)
        assert line == (f"error: --planned-batch '{value}': expected a batch size (e.g. 64) or a range LO-HI"
                        " (e.g. 8-64) of batch sizes in 1-65536, LO <= HI"), line


def test_sglang_tree_note_counts_the_draft_tokens_its_flags_carry():
    # Before: K = 1 on an 8x63 tree wrote --speculative-num-draft-tokens 9 (topk 8 at depth 1: 8 nodes + the root)
    # while its note said "tree depth (--speculative-num-steps) 1, topk 8, 63 draft tokens + the root".
    import json

    done = run_main("simulator.predict", "--scenario", "llama-3.1-8b-h100", "--engine", "sglang", "--draft",
                    "eagle3:tree:8x63", "--batch-sizes", "1-128", "--k-max", "1", "--fixed-k", "1",  # depth 1
                    "--format", "json")
    sglang = json.loads(done.stdout)["exports"]["sglang"]
    flags = sglang["file"]
    assert (flags["speculative_num_steps"], flags["speculative_num_draft_tokens"]) == (1, 9), flags
    assert sglang["notes"][0].endswith("tree depth (--speculative-num-steps) 1, topk 8, 8 draft tokens + the root")


def test_dashboard_counts_a_trees_verify_tokens_on_the_roofline_and_experts_charts():
    # Before: the Roofline tab said "T = 64 tokens" at B = 8, K = 7 of an EAGLE-3 4x8 tree, which verifies its 8
    # draft tokens + the root per sequence (72 tokens, as the grid prices it), and the MoE experts chart put a tree's
    # rows at T = B (K + 1) (an 8x63 tree at B = 8, K = 8: 72 tokens where it verifies 512).
    import json

    from streamlit.testing.v1 import AppTest

    from dashboard import compute
    from simulator.plan.api import predict

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60)
    at.session_state["view"] = "Roofline"
    at.run()
    at.sidebar.selectbox(key="draft_method").set_value("eagle3:tree:4x8").run()
    at.sidebar.number_input(key="insp_b").set_value(8).run()
    at.sidebar.selectbox(key="insp_k").set_value(7).run()
    assert not at.exception, [e.value for e in at.exception]
    said = next(c.value for c in at.caption if "Each point is one operator" in c.value)
    assert "at B = 8, K = 7 (T = 72 tokens)" in said, said

    p = predict("default", model="qwen3-30b-a3b", draft="eagle3:tree:8x63", engine="sglang", batch_sizes="8")
    spec = compute.chart_spec(compute.build_chart(p, "experts"))
    rows = next(d for d in spec["datasets"].values() if "experts_touched" in d.columns).set_index("k")
    assert int(rows.loc[8, "tokens"]) == 8 * 64 and int(rows.loc[1, "tokens"]) == 8 * 9, rows
    assert "tree nodes" in json.dumps({k: v for k, v in spec.items() if k != "datasets"})


def test_the_dashboard_offers_every_named_draft_the_cli_lists():
    # Before: the draft choices were the dashboard's own list, with an EAGLE-3 4x8 tree but not SGLang's 8x63
    # EAGLE trees, the trees the eagle3-tree / eagle-tree acceptance presets were measured on (AL 4.68 at depth 5,
    # sgl-project/sglang PR #4247) and that `--list drafts` names: one list now (specs.drafts.named_drafts)
    from streamlit.testing.v1 import AppTest

    from simulator.cli.catalog import catalog_text
    from simulator.specs.drafts import named_drafts

    listed = [line.split()[0] for line in catalog_text("drafts").splitlines()[1:]]
    assert {"eagle3:tree:8x63", "eagle:tree:8x63", "eagle3:tree:4x8"} <= set(named_drafts())
    assert set(named_drafts()) - {"model"} <= set(listed)  # 'model' is model:NAME there, its model picked beside it
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60)
    at.run()
    draft = at.sidebar.selectbox(key="draft_method")
    assert list(draft.options) == list(named_drafts())
    draft.set_value("eagle3:tree:8x63").run()
    assert not at.exception and not at.error, [e.value for e in at.exception] + [e.value for e in at.error]
    # the tree's own preset (its top-1 rates per depth) came with it
    assert "AL 4.68 (depth 5)" in at.session_state["_acc_preset"]["source"]
    assert at.session_state["acc_list"].startswith("0.775")


def test_refused_sglang_flags_of_a_block_draft_keep_their_name():
    # Before: DFlash on SGLang read "SGLang 0.5.13 adaptive config, no K = 0 (JSON): not available: --draft dflash:
    # not verified in SGLang 0.5.13" (and "SGLang 0.5.14+ adaptive config (JSON): not available: no batch size fits"
    # where nothing fits): a block draft's file is launch flags of one fixed K, as the page names it when written.
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60)
    at.session_state["view"] = "Downloads"
    at.run()
    at.sidebar.selectbox(key="engine_name").set_value("sglang")
    at.sidebar.selectbox(key="draft_method").set_value("dflash").run()
    assert not at.exception, [e.value for e in at.exception]
    refused = [c.value for c in at.caption if "not available" in c.value]
    assert [c.split(": not available")[0] for c in refused] == [
        "SGLang 0.5.13 launch flags: one fixed K for this draft (JSON)"], refused
    labels = [b.label for b in at.get("download_button")]
    assert "SGLang 0.5.14+ launch flags: one fixed K for this draft (JSON)" in labels, labels


def test_a_tree_given_rates_without_a_rank_tail_says_how_they_are_read():
    # Before: --draft eagle3:tree:4x8 --acceptance FILE (a vLLM chain's /metrics, AL 2.84 at K = 3) priced the tree
    # at the chain's AL (2.84 at depth 3, where the preset's shape gives a 4x8 tree more) without a word: rates with
    # no [acceptance] rank_tail are read as the tree's own per depth (data/acceptance.toml), a chain's under-count it.
    done = run_main("simulator.predict", "--scenario", "llama-3.1-8b-h100", "--engine", "sglang", "--draft",
                    "eagle3:tree:4x8", "--acceptance", "0.7", "--batch-sizes", "1-4")
    said = [ln for ln in done.stderr.splitlines() if "rank tail" in ln]
    assert said == ["warning: --draft eagle3:tree:4x8: the acceptance rates given carry no rank tail, so they are read"
                    " as the tree's own acceptance per depth, measured on this tree (rates measured on a chain"
                    " under-count a tree, whose lower-ranked candidates catch the top one's misses); to price the"
                    " tree's shape from top-1 rates, give [acceptance] rank_tail in the scenario (the eagle3-tree"
                    " preset's: 0.751)"], done.stderr
    preset = run_main("simulator.predict", "--scenario", "llama-3.1-8b-h100", "--engine", "sglang", "--draft",
                      "eagle3:tree:4x8", "--batch-sizes", "1-4")
    assert "rank tail" not in preset.stderr and preset.returncode == 0


def test_sizing_a_tree_draft_is_refused_up_front():
    # Before: size --draft eagle3:tree:4x8 ran the whole search and answered "buy 24 x h100-sxm (... no speculation)",
    # its fixed and dsd rows "misses the SLOs even at 0.185 req/s: draft eagle3:tree:4x8: the serving simulation and
    # sizing price chains only" (the refusal read as a capacity result), and "fixed cannot meet the SLOs".
    from simulator.errors import PlannerError
    from simulator.plan.api import resolve_scenario
    from simulator.sizing.spec import parse_sizing

    line = __import__("cli_inprocess").refused_line(
        "simulator.size", "--model", "llama-3.1-70b", "--hardware", "h100-sxm", "--draft", "eagle3:tree:4x8",
        "--rate", "30", "--tpot-p50", "0.05", "--tp", "4")
    assert line == ("error: draft eagle3:tree:4x8: sizing prices chains only (the serving simulation verifies K + 1"
                    " tokens a sequence, a tree N + 1), so policies fixed, dsd cannot run: plan the tree with python -m"
                    ' simulator.predict, or size plain decoding alone with [sizing] policies = ["plain"]'), line
    sc = resolve_scenario("sizing-dense-command-a", draft="eagle3:tree:4x8")
    assert parse_sizing(sc, policies=["plain"]).policies == ("plain",)
    try:
        parse_sizing(sc, policies=["plain", "dsd"])
    except PlannerError as err:
        assert "policies dsd cannot run" in str(err)
    else:
        raise AssertionError("a tree with dsd was not refused")
