"""Issue 49 item 3: the dashboard shows no internal error on any tab after any control sequence, offers the
engine and release the CLI does, keeps the draft compatible with the target, and draws K* in whole colours.

The crash that opened the issue (``all input arrays must have the same shape`` on "K* by context" after
the batch-size slider went to 1024 on qwen3-235b-a22b / eagle3 / h100-sxm / TP 8) is replayed step by
step; a seeded random walk then drives every control and tab the page draws, 200 steps.
"""
from __future__ import annotations

import json
import random
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from streamlit.testing.v1 import AppTest  # noqa: E402

from dashboard import state as S  # noqa: E402
from simulator.specs.engine_catalog import engine_versions  # noqa: E402

APP = str(ROOT / "app.py")
TABS = ["K* vs batch size", "Goodput heatmap", "Plain vs fixed K vs DSD", "Roofline", "MoE experts",
        "Operator breakdown", "Validation", "K* by context", "Downloads"]


def new_app() -> AppTest:
    at = AppTest.from_file(APP, default_timeout=120)
    at.run()
    return at


def internal_errors(at: AppTest) -> list[str]:
    return [e.value for e in at.exception] + [e.value for e in at.error if "Internal error" in e.value]


def view(at: AppTest, tab: str) -> None:
    at.session_state["view"] = tab
    at.run()


def provenance(at: AppTest) -> str:
    return next(c.value for c in at.caption if "Prediction rests on" in c.value)


def download_labels(at: AppTest) -> list[str]:
    return [b.label for b in at.get("download_button")]


# --- the crash of issue 49, as the user made it ---------------------------------------------------
def test_the_issue_49_sequence_draws_k_star_by_context():
    at = new_app()
    at.sidebar.selectbox(key="model_name").set_value("qwen3-235b-a22b").run()
    at.sidebar.selectbox(key="draft_method").set_value("eagle3").run()
    at.sidebar.selectbox(key="hw_name").set_value("h100-sxm").run()
    at.sidebar.selectbox(key="tp").set_value(8).run()
    lo, _ = at.session_state["bs_range"]
    at.sidebar.slider(key="bs_range").set_value((lo, 1024)).run()
    assert not internal_errors(at) and not at.error
    view(at, "K* by context")
    assert not internal_errors(at), internal_errors(at)
    (chart,) = at.get("arrow_vega_lite_chart") or [c for c in at.get("vega_lite_chart")]
    assert "Optimal draft length K* over batch size and context length" in chart.proto.spec
    frame = next(d.value for d in at.dataframe)
    assert frame.index.max() == 1024 and frame.shape[1] >= 2  # every batch size up to 1024, several lengths
    view(at, "Downloads")
    assert not internal_errors(at) and "vLLM speculative config (JSON)" in download_labels(at)


def test_the_k_star_map_colours_whole_k_on_an_ordinal_scale():
    at = new_app()
    view(at, "K* by context")
    spec = json.loads(at.get("vega_lite_chart")[0].proto.spec)
    colour = spec["layer"][1]["encoding"]["color"]
    assert colour["type"] == "ordinal" and colour["scale"]["domain"] == list(range(len(colour["scale"]["domain"])))


# --- engine and release --------------------------------------------------------------------------
def test_engine_and_release_selectors_change_the_prediction_and_the_exports():
    at = new_app()
    engine = at.sidebar.selectbox(key="engine_name")
    assert engine.value == "vllm" and {"vLLM", "SGLang", "TensorRT-LLM"} <= set(engine.options)
    assert at.sidebar.selectbox(key="engine_version").options == list(reversed(engine_versions("vllm")))
    view(at, "Downloads")
    vllm_labels = download_labels(at)
    assert any(lb.startswith("vLLM") for lb in vllm_labels)
    assert not any(lb.startswith(("SGLang", "TensorRT-LLM")) for lb in vllm_labels)
    before = provenance(at)

    at.sidebar.selectbox(key="engine_name").set_value("sglang").run()
    assert not internal_errors(at)
    newest = engine_versions("sglang")[-1]
    assert at.session_state["engine_version"] == newest  # a new engine starts at its newest release
    assert f"SGLang {newest}" in provenance(at) and provenance(at) != before
    labels = download_labels(at)
    assert "SGLang 0.5.14+ adaptive config (JSON)" in labels
    assert not any(lb.startswith(("vLLM", "TensorRT-LLM")) for lb in labels)

    at.sidebar.selectbox(key="engine_name").set_value("trtllm").run()
    oldest = engine_versions("trtllm")[0]
    at.sidebar.selectbox(key="engine_version").set_value(oldest).run()
    assert not internal_errors(at)
    assert f"TensorRT-LLM {oldest}" in provenance(at)
    labels = download_labels(at)
    assert "TensorRT-LLM 1.2.x draft_len_schedule (JSON)" in labels
    assert not any(lb.startswith(("vLLM", "SGLang")) for lb in labels)

    at.sidebar.selectbox(key="engine_name").set_value("ideal").run()
    assert not internal_errors(at)
    assert not any(lb.startswith(("vLLM", "SGLang", "TensorRT-LLM")) for lb in download_labels(at))
    assert any("reads no schedule file" in c.value for c in at.caption)


def test_a_cpu_device_gets_its_usual_engine_and_a_gpu_gets_vllm_back():
    at = new_app()
    at.sidebar.selectbox(key="hw_name").set_value("cpu-xeon-2c").run()
    assert at.session_state["engine_name"] == "ideal"
    at.sidebar.selectbox(key="hw_name").set_value("h100-sxm").run()
    assert at.session_state["engine_name"] == "vllm" and not internal_errors(at)


# --- the draft follows the target ---------------------------------------------------------------
def test_changing_the_target_resets_a_draft_model_with_another_vocabulary():
    at = new_app()
    assert at.session_state["draft_method"] == "model" and at.session_state["draft_model"] == "llama-3.2-1b"
    at.sidebar.selectbox(key="model_name").set_value("qwen3-235b-a22b").run()
    assert not at.error and not internal_errors(at)
    # qwen3-8b: the smallest catalog model with Qwen3's 151936-token vocabulary
    assert at.session_state["draft_model"] == "qwen3-8b"
    assert at.sidebar.selectbox(key="draft_model").options == S.draft_models_for("qwen3-235b-a22b")
    note = " ".join(i.value for i in at.sidebar.info)
    assert "Draft reset to qwen3-8b" in note and "vocabulary 128256" in note and "151936" in note
    assert "draft qwen3-8b" in provenance(at).lower() or "qwen3-8b" in provenance(at)
    # no catalog model shares DeepSeek-V3's vocabulary: its own MTP module drafts
    at.sidebar.selectbox(key="draft_method").set_value("model").run()
    at.sidebar.selectbox(key="model_name").set_value("deepseek-v3").run()
    assert at.session_state["draft_method"] == "mtp" and not at.error and not internal_errors(at)
    assert any("no catalog model shares deepseek-v3's vocabulary" in i.value for i in at.sidebar.info)


def test_only_calibration_profiles_are_offered():
    at = new_app()
    options = at.sidebar.selectbox(key="calibration").options
    assert "cpu-xeon-2c.profile.json" in options
    assert not [o for o in options if o.endswith(".meta.json")]


# --- the random walk ------------------------------------------------------------------------------
TEXT = {"acc_list": ["0.8, 0.6, 0.4", "banana", "", "0.99 0.5", "1.5", "0.7"],
        "ctx_lens": ["", "512,2048", "512-131072", "512-32768:6", "abc", "0", "4096"]}
NUMBERS = {"context_len": [1, 512, 4096, 32768, 131072, 1_048_576], "hw_peak_tflops": [0.1, 100.0, 2000.0],
           "hw_bw_tbs": [0.01, 1.0, 8.0], "hw_busbw_gbs": [0.0, 50.0, 900.0]}
RANGES = [(1, 1), (1, 1024), (16, 32), (100, 700), (1, 256), (512, 1024), (1, 64)]


def _step(at: AppTest, rng: random.Random) -> str:
    """One random action on a control the page shows now (or a tab); returns what it did."""
    if rng.random() < 0.25:
        tab = rng.choice(TABS)
        at.session_state["view"] = tab
        return f"tab {tab}"
    widgets = [(kind, w) for kind in ("selectbox", "slider", "number_input", "radio", "toggle", "text_input")
               for w in getattr(at, kind) if w.key and not w.key.startswith("$$")]
    kind, w = rng.choice(widgets)
    if kind == "selectbox":
        i = rng.randrange(len(w.options))
        w.select_index(i)
        return f"{w.key} = #{i} {w.options[i]}"
    if kind == "radio":
        # uploads are their own tests: the walk stays on typed acceptance and the catalog model
        choices = [o for o in w.options if o in (S.ACC_IID, S.ACC_LIST, "catalog")] or list(w.options)
        value = rng.choice(choices)
    elif kind == "toggle":
        value = not w.value
    elif kind == "text_input":
        value = rng.choice(TEXT.get(w.key, ["", "x"]))
    elif kind == "slider" and w.key == "bs_range":
        value = rng.choice(RANGES)
    elif kind == "slider":
        lo, hi = w.min, w.max
        value = type(w.value)(rng.choice([lo, hi, lo + (hi - lo) * rng.random()]))
        if isinstance(w.value, float):
            value = round(value / w.step) * w.step if w.step else value
            value = min(max(value, lo), hi)
    else:  # number_input
        value = rng.choice(NUMBERS.get(w.key, [w.min, w.max]))
        value = type(w.value)(min(max(value, w.min), w.max))
    w.set_value(value)
    return f"{w.key} = {value!r}"


@pytest.mark.slow
def test_a_seeded_random_walk_of_200_steps_never_shows_an_internal_error():
    rng = random.Random(49)
    at = new_app()
    done, start = [], time.monotonic()
    for step in range(200):
        done.append(_step(at, rng))
        at.run()
        assert not internal_errors(at), (step, done[-12:], internal_errors(at))
    assert time.monotonic() - start < 600
