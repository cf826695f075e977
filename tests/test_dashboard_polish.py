"""Dashboard polish from a QA walk (2026-12-07), each pinned headlessly with AppTest.

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
