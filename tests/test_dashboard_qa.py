"""What a new user met walking the dashboard in Chromium (2026-12-07), each pinned headlessly with AppTest.

Each test names what the user saw before the fix.
"""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from streamlit.testing.v1 import AppTest  # noqa: E402

APP = str(ROOT / "app.py")


def new_app() -> AppTest:
    at = AppTest.from_file(APP, default_timeout=60)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def view(at: AppTest, tab: str) -> None:
    at.session_state["view"] = tab
    at.run()
    assert not at.exception, [e.value for e in at.exception]


def test_download_buttons_do_not_rerun_the_page():
    # Before: every click reran the page, which registers each deferred download (CSV, JSON, PNG) afresh and
    # drops the old ones; in Chromium a second download clicked 3 s after the first gave no file in 3 of 12
    # tries (server log: "Deferred file ... not found"). With on_click="ignore": 0 of 24.
    at = new_app()
    view(at, "Downloads")
    buttons = list(at.get("download_button"))
    assert len(buttons) >= 8, [b.label for b in buttons]  # engine files, data, charts
    assert [b.label for b in buttons if not b.proto.ignore_rerun] == []


def test_routing_reuse_zero_stays_zero():
    # Before: the scenario moe-synthetic-cpu (reuse = 0.0: the reference engine's router draws experts
    # independently), or the slider at 0, gave reuse 0.5 (the default) in the provenance and another K*
    # than `predict --scenario moe-synthetic-cpu` (dashboard "K=3 for 10-16", CLI "K=3 for 10-17").
    from simulator.plan.api import predict

    at = new_app()
    at.sidebar.selectbox(key="scenario").set_value("moe-synthetic-cpu").run()
    assert at.session_state["reuse"] == 0.0
    text = next(c.value for c in at.caption if "Prediction rests on" in c.value)
    assert "reuse 0.5" not in text and "reuse 0" in text, text
    cli = predict("moe-synthetic-cpu").schedule_text()
    shown = next(m.value for m in at.markdown if "K schedule:" in m.value).replace("**", "")
    assert shown == f"K schedule: {cli}"


def test_every_bundled_scenario_picked_after_another_keeps_its_controls():
    # Before: the Weights list had no fp32, so smollm2-cpu and moe-synthetic-cpu (weights = "fp32") ran on bf16
    # weights: "GB per GPU" 0.3 where `predict --scenario smollm2-cpu` says 0.5 (0.55 GB: 135 M parameters x 4 B).
    from dashboard import state as S

    at = new_app()
    for name in ["sizing-moe-qwen3-235b", "smollm2-cpu", "llama-3.1-8b-h100", "moe-synthetic-cpu"]:
        at.sidebar.selectbox(key="scenario").set_value(name).run()
        want = S.controls_from_scenario(S.read_scenario(name))
        assert {k: at.session_state[k] for k in want} == want, name
    text = next(c.value for c in at.caption if "Prediction rests on" in c.value)
    assert "weights=fp32" in text, text


def test_fleet_sweep_filters_follow_the_table_opened(tmp_path, monkeypatch):
    # Before: the Models / Traffic / Policies picks of the last table stayed on the next one: after a table of
    # command-a alone, a table of llama-3.1-70b opened on an empty chart, "0 rows, 0 meet the target".
    import pandas as pd

    row = {"hardware": "h100-sxm", "tp": 8, "traffic": "chat", "usd_per_m_tokens_at_target": 1.0,
           "tpot_p50_s": 0.02, "meets_target": True}
    for name, model, policies in (("a", "command-a", ["dsd"]), ("b", "llama-3.1-70b", ["plain", "dsd"])):
        (tmp_path / name).mkdir()
        pd.DataFrame([dict(row, model=model, policy=p) for p in policies]).to_csv(tmp_path / name / "results.csv")
    monkeypatch.setenv("DSD_RESULTS_DIR", str(tmp_path))
    at = AppTest.from_file(str(ROOT / "pages" / "1_Fleet_sweep.py"), default_timeout=30)
    at.run()
    at.text_input(key="sweep_path").input("a").run()
    assert "**1** rows" in at.markdown[-1].value
    at.text_input(key="sweep_path").input("b").run()
    assert not at.exception and not at.error
    assert "**2** rows, **2** meet the target" in at.markdown[-1].value
    assert [m.value for m in at.multiselect][:2] == [["llama-3.1-70b"], ["chat"]]


def test_kstar_table_shows_the_k_the_engine_files_run():
    # Before: the headline and the vLLM file said K=4 for B 1-25 while the K* table read K* = 3 at B 18 and 20-22,
    # with no column for the schedule's K (the CLI's 'sched K'): the table did not show what the engine runs.
    from simulator.plan.api import predict

    at = new_app()
    table = next(d.value for d in at.dataframe)
    ranges = predict("default").export("vllm").payload["num_speculative_tokens_per_batch_size"]
    runs = {b: k for lo, hi, k in ranges for b in range(lo, hi + 1)}
    shown = dict(zip(table["B (sequences)"], table["schedule K"]))
    assert shown == {b: runs[b] for b in shown}
    assert shown[10] == 4 and dict(zip(table["B (sequences)"], table["K*"]))[10] == 3  # the schedule holds K = 4


def test_a_refused_deployment_fit_leaves_its_measured_acceptance_out(tmp_path):
    # Before: a fit with measured acceptance (the README's smollm2-cpu n-gram fit) uploaded on the default
    # scenario was refused ("Deployment fit ignored: ... model 'smollm2-135m' (scenario: 'llama-3.1-70b')")
    # while its n-gram acceptance 0.37, 0.86, ... stayed in: "K=8 for B 1-24" where the page alone says K=4.
    from calibration.fit_deployment import main as fit_main

    out = tmp_path / "fit.json"
    (tmp_path / "runs.csv").write_text("batch_size,k,itl_ms,acceptance_length\n1,0,40.0,\n1,3,60.0,2.2\n8,3,90.0,2.2\n")
    assert fit_main(["--scenario", "smollm2-cpu", "--measured", str(tmp_path / "runs.csv"), "--output", str(out)]) == 0
    at = new_app()
    own = next(m.value for m in at.markdown if "K schedule:" in m.value)
    own_text = next(c.value for c in at.caption if "Prediction rests on" in c.value)
    at.sidebar.file_uploader(key="deployment_fit").set_value(("fit.json", out.read_bytes(), "application/json")).run()
    assert any(w.value.startswith("Deployment fit ignored: fit.json") for w in at.warning)
    assert next(m.value for m in at.markdown if "K schedule:" in m.value) == own
    text = next(c.value for c in at.caption if "Prediction rests on" in c.value)
    assert "measured on this deployment" not in text and text == own_text


def test_a_vllm_bench_json_measured_at_k3_caps_k_as_predict_does():
    # Before: bench_k3_c8.json (rates measured at positions 1-3) in "vLLM bench JSON" mode planned
    # "K=5 for B 1-13, K=4 for 14-46, ..." on a flat extrapolation, where `predict --acceptance bench_k3_c8.json`
    # caps K at 3 ("K capped at 3 ... acceptance measured up to K=3") and plans "K=3 for B 1-105".
    from dashboard import state as S

    fixtures = ROOT / "tests" / "fixtures" / "vllm"
    for mode, key, name in ((S.ACC_BENCH, "acc_file", "bench_k3_c8.json"), (S.ACC_METRICS, "acc_file", "metrics_k3.txt"),
                            (S.ACC_FILE, "acc_any_file", "bench_k3_c8.json")):
        at = new_app()
        at.sidebar.radio(key="acc_mode").set_value(mode).run()
        at.sidebar.file_uploader(key=key).set_value((name, (fixtures / name).read_bytes(), "text/plain")).run()
        assert not at.exception and not at.error, [e.value for e in at.error]
        assert at.session_state["k_max"] == 3, mode
        shown = next(m.value for m in at.markdown if "K schedule:" in m.value)
        assert "K=4" not in shown and "K=5" not in shown and "K=3 for B 1-" in shown, shown
        assert any("K max lowered to 3: acceptance measured up to K=3" in c.value for c in at.sidebar.caption)


def test_fleet_sweep_names_the_cost_it_shows(tmp_path, monkeypatch):
    # Before: a table from before the fleet's $/M (only usd_per_m_output_tokens, one replica at full load) showed
    # that cost under the header usd_per_m_tokens_at_target (the fleet's at the target: $15.12 where the fleet
    # costs $20.56 on sweep-small's command-a h200 tp=4 rag dsd), and the axis title was cut off.
    import pandas as pd

    from dashboard import sweep_view as V

    row = {"model": "command-a", "hardware": "h200", "tp": 4, "traffic": "rag", "policy": "dsd",
           "tpot_p50_s": 0.0183, "meets_target": True, "fleet_usd_per_hour": 148.0}
    (tmp_path / "new").mkdir()
    (tmp_path / "old").mkdir()
    pd.DataFrame([dict(row, usd_per_m_tokens_at_target=20.5556, usd_per_m_output_tokens=15.1168)]).to_csv(
        tmp_path / "new" / "results.csv")
    pd.DataFrame([dict(row, usd_per_m_output_tokens=15.1168)]).to_csv(tmp_path / "old" / "results.csv")
    monkeypatch.setenv("DSD_RESULTS_DIR", str(tmp_path))
    at = AppTest.from_file(str(ROOT / "pages" / "1_Fleet_sweep.py"), default_timeout=30)
    at.run()
    for folder, header, cost in (("new", "fleet $ per M output tokens at the target", 20.5556),
                                 ("old", "$/M output tokens, one replica at full load", 15.1168)):
        at.text_input(key="sweep_path").input(folder).run()
        assert not at.exception and not at.error
        for table in at.dataframe:
            assert V.COST not in table.value.columns
            assert table.value[header].tolist() == [cost]
        assert "TPOT p50 at capacity (s)" in at.dataframe[0].value.columns


def test_headline_k_at_b1_names_the_k_the_schedule_runs():
    # Before: Llama-3.1-70B on 4 x H100, EAGLE-3, context 2048 read "K schedule: K=5 for B 1-18, ..." and right
    # under it "K* at B = 1: 6", with nothing saying which one the vLLM file runs (5).
    at = new_app()
    at.sidebar.selectbox(key="hw_name").set_value("h100-sxm").run()
    at.sidebar.selectbox(key="tp").set_value(4).run()
    at.sidebar.selectbox(key="draft_method").set_value("eagle3").run()
    at.sidebar.number_input(key="context_len").set_value(2048).run()
    assert next(m.value for m in at.markdown if "K schedule:" in m.value).startswith("**K schedule:** K=5 for B 1-")
    assert at.metric[0].label == "K* at B = 1" and at.metric[0].value == "6 (schedule 5)"


def test_engine_settings_heading_reads_once():
    # Before: "Engine settings: engine settings that cost goodput at this load" (the heading said it twice).
    # On a scenario whose load has such a setting: the default one had one (K=0 -> K=1 at B 150-152, +0.6%) until
    # the learned layer's collective term; DeepSeek-V3 (dp-ep) has a fixed K that costs 6% at B 1-4
    at = new_app()
    at.sidebar.selectbox(key="scenario").set_value("deepseek-v3-dp-ep").run()
    assert not at.exception, [e.value for e in at.exception]
    heads = [m.value for m in at.markdown if "ngine settings" in m.value]
    assert heads == ["**Engine settings that cost goodput at this load:**"], heads


def test_sglang_with_a_block_or_tree_draft_says_what_runs_above_the_range():
    # Before: SGLang with a DFlash / DSpark block or an EAGLE tree (one fixed K in its launch flags, no per-batch
    # keys) broke the headline note "above B=... SGLang keeps K=..": "Internal error (IndexError): list index out
    # of range" on the page, a traceback from `predict --scenario llama-3.1-8b-h100 --engine sglang --draft dflash
    # --batch-sizes 1-64`.
    from simulator.plan.api import predict

    for draft in ("dflash", "eagle3:tree:4x8"):
        p = predict("llama-3.1-8b-h100", engine="sglang", draft=draft, batch_sizes="1-64")
        runs = p.export("sglang").rows[0]["SGLang runs"]
        assert any(f"SGLang 0.5.23 keeps K={runs}" in n or f"SGLang 0.5.23 runs K={runs}" in n for n in p.notes())
    at = new_app()
    at.sidebar.selectbox(key="engine_name").set_value("sglang").run()
    at.sidebar.selectbox(key="draft_method").set_value("dflash").run()
    assert not at.exception and not [e.value for e in at.error], [e.value for e in at.error]


def test_sglang_launch_flags_are_not_offered_as_an_adaptive_config():
    # Before: with a DFlash draft SGLang gets launch flags of one fixed K ({"speculative_algorithm": "DFLASH", ...}),
    # offered as "SGLang 0.5.14+ adaptive config (JSON)" in default-sglang-adaptive.json, the file a user passes to
    # --speculative-adaptive-config.
    at = new_app()
    at.sidebar.selectbox(key="engine_name").set_value("sglang").run()
    view(at, "Downloads")
    assert "SGLang 0.5.14+ adaptive config (JSON)" in [b.label for b in at.get("download_button")]  # EAGLE: adaptive
    at.sidebar.selectbox(key="draft_method").set_value("dflash").run()
    labels = [b.label for b in at.get("download_button")]
    assert not any("adaptive config" in lb for lb in labels), labels
    assert "SGLang 0.5.14+ launch flags: one fixed K for this draft (JSON)" in labels


def test_downloads_say_what_the_engine_file_still_needs():
    # Before: the engine files' warnings were read and dropped: with EAGLE-3 the vLLM JSON carried
    # "model": "<DRAFT CHECKPOINT: pass --draft-model PATH>", which vLLM refuses, and the page said nothing
    # (predict prints "warning: speculative_config 'model' is a placeholder vLLM refuses ...").
    at = new_app()
    at.sidebar.selectbox(key="draft_method").set_value("eagle3").run()
    view(at, "Downloads")
    notes = [c.value for c in at.caption]
    assert sum("'model' is a placeholder vLLM refuses" in n for n in notes) == 1, notes  # once for two vLLM files


# --- a second walk (2026-12-07) ------------------------------------------------------------------

def test_a_context_beyond_the_trained_length_is_allowed_by_a_checkbox_the_error_names():
    # Before: context 200000 on llama-3.1-8b (config.json max_position_embeddings = 131072) said "set [workload]
    # allow_context_beyond_model = true (API: allow_long_context=True)", which the dashboard had no control for.
    from dashboard import state as S

    at = new_app()
    at.sidebar.selectbox(key="model_name").set_value("llama-3.1-8b").run()
    assert not [c for c in at.sidebar.checkbox if c.key == "allow_beyond"]  # within the trained length: not shown
    at.sidebar.number_input(key="context_len").set_value(200_000).run()
    err = " ".join(e.value for e in at.error)
    assert "max_position_embeddings=131072" in err and f"tick '{S.ALLOW_BEYOND_LABEL}'" in err, err
    assert "[workload]" not in err and "API:" not in err, err
    box = at.sidebar.checkbox(key="allow_beyond")
    assert box.label == S.ALLOW_BEYOND_LABEL
    box.check().run()
    assert not at.error, [e.value for e in at.error]
    assert "context: 200000 tokens" in next(c.value for c in at.caption if "Prediction rests on" in c.value)


def test_the_weights_follow_the_checkpoint_of_a_new_model_and_keep_a_choice_for_the_same_one():
    # Before: switching the default scenario's llama-3.1-70b (bf16) to deepseek-v3, whose published checkpoint
    # is fp8 blocks (config.json quantization_config: fp8, weight_block_size [128, 128]), kept Weights = bf16,
    # twice the GB per GPU that `predict --model deepseek-v3` prices.
    at = new_app()
    assert at.session_state["w_dtype"] == "bf16"
    at.sidebar.selectbox(key="model_name").set_value("deepseek-v3").run()
    assert at.session_state["w_dtype"] == "fp8"
    assert "weights=fp8" in next(c.value for c in at.caption if "Prediction rests on" in c.value)
    at.sidebar.selectbox(key="w_dtype").set_value("int4").run()  # the user's choice, same model: kept
    at.sidebar.slider(key="k_max").set_value(6).run()
    assert at.session_state["w_dtype"] == "int4"
    at.sidebar.selectbox(key="model_name").set_value("llama-3.1-8b").run()  # a bf16 checkpoint
    assert at.session_state["w_dtype"] == "bf16"
    assert not at.exception, [e.value for e in at.exception]


def test_the_main_page_has_a_title_in_the_page_navigation():
    # Before: Streamlit's sidebar navigation named the main page "app" (the file name), above "Fleet sweep".
    at = new_app()
    # AppTest (Streamlit 1.67) keeps the pages the navigation registered in this attribute; no public accessor
    assert [p["page_name"] for p in at._registered_pages.values()] == ["Capacity planner", "Fleet sweep"]
    assert [t.value for t in at.title] == ["Speculative decoding capacity planner"]
    at.switch_page("pages/1_Fleet_sweep.py").run()
    assert [t.value for t in at.title] == ["Fleet sweep"] and not at.exception


def test_heatmap_cells_overlap_their_neighbours_so_no_seam_shows():
    # Before: above B ~ 100 the cells of the goodput heatmap and the K* by context map are under a pixel wide, and
    # the anti-aliased edge between two cells let the white background through: in Chromium the map's K* = 0
    # region at B 150-256 read pale and striped, like the grey of "does not fit in memory". Each cell now reaches
    # 1 px past its right and top edges, drawn row by row and left to right, so every edge lies on a drawn cell.
    import json

    from streamlit.dataframe_util import convert_arrow_bytes_to_pandas_df

    at = new_app()
    for tab, row in (("Goodput heatmap", "k_lo"), ("K* by context", "c_lo")):
        at.session_state["view"] = tab
        at.run()
        proto = at.get("vega_lite_chart")[0].proto
        data = {d.name: convert_arrow_bytes_to_pandas_df(d.data.data) for d in proto.datasets}
        rects = [layer for layer in json.loads(proto.spec)["layer"] if layer["mark"]["type"] == "rect"]
        assert len(rects) == 2, tab  # the cells that fit, and the grey ones that do not
        for layer in rects:
            assert layer["mark"]["x2Offset"] >= 1 and layer["mark"]["y2Offset"] <= -1, (tab, layer["mark"])
            cells = data[layer["data"]["name"]]
            drawn = list(zip(cells[row], cells["b_lo"]))
            assert drawn == sorted(drawn), tab


# --- issue 47 follow-ups (2026-12-07) -------------------------------------------------------------

def test_sglang_fixed_k_is_chosen_for_the_batch_sizes_the_user_plans():
    # Before: the DFlash launch flags carried K* at the largest batch size that fits (the default scenario on
    # SGLang: K = 1 at B = 256, where K* = 0; K* is 8 at B = 8) with no control for the load served and no word of
    # which batch size the K was for.
    from simulator.plan.api import predict

    at = AppTest.from_file(APP, default_timeout=60)
    view(at, "Downloads")  # the first run
    at.sidebar.selectbox(key="engine_name").set_value("sglang").run()
    at.sidebar.selectbox(key="draft_method").set_value("dflash").run()
    said = [c.value for c in at.caption if "chosen for" in c.value]
    assert len(said) == 1 and "chosen for batch sizes 1-256" in said[0], said
    at.select_slider(key="planned_batch").set_value((8, 8)).run()
    p = predict("default", engine="sglang", draft="dflash")
    k8 = int(p.table.set_index("batch_size").loc[8, "k_opt"])
    said = [c.value for c in at.caption if "chosen for" in c.value]
    assert said == [f"K = {k8} chosen for batch size 8 (the planned batch size)"], said
    assert p.export("sglang", planned_batch_size=8).payload["speculative_num_draft_tokens"] == k8 + 1


def test_the_fit_caveat_names_the_uploaded_file_not_the_cli_flag():
    # Before: fitting uploaded rows that measure acceptance_length at K = 2 only gave no caveat on the page, and the
    # command's text began '--measured: acceptance_length only ...': a flag the dashboard user never typed.
    from simulator.plan.api import predict

    grid = predict("default").grid_rows
    rows = grid[(grid["batch_size"] == 8) & grid["k"].isin([0, 2])][["batch_size", "k", "itl_ms"]].copy()
    rows["acceptance_length"] = [float("nan"), 2.2]
    at = AppTest.from_file(APP, default_timeout=60)
    view(at, "Validation")  # the first run
    at.file_uploader(key="measured_csv").set_value(("runs.csv", rows.to_csv(index=False).encode(), "text/csv")).run()
    at.button(key="fit_rows").click().run()
    assert not at.exception and not [e.value for e in at.error], [e.value for e in at.error]
    caveats = [w.value for w in at.warning if w.value.startswith("Fit caveat:")]
    assert caveats and caveats[0].startswith(
        "Fit caveat: runs.csv: acceptance_length only (no per_position_acceptance), at K up to 2"), caveats
    shown = [e.value for kind in ("warning", "error", "caption", "markdown") for e in at.get(kind)]
    assert not any("--measured" in str(v) for v in shown)
