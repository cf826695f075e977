"""The Streamlit dashboard (app.py) driven headlessly with streamlit.testing.v1.AppTest.

Kinds of check: behaviour (each control changes what it should), robustness (a seeded random sweep
over control combinations raises nothing and shows no internal error; bad uploads give st.error with
the reason) and one hand anchor (a measured CSV built from the prediction with ITL x 1.25 has an
ITL MAPE of 20% = 1 - 1/1.25).
"""
from __future__ import annotations

import io
import json
import random
import sys
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from streamlit.testing.v1 import AppTest  # noqa: E402

from dashboard import charts as C  # noqa: E402
from dashboard import state as S  # noqa: E402
from simulator.plan.api import predict  # noqa: E402

FIXTURES = ROOT / "tests" / "fixtures" / "vllm"
APP = str(ROOT / "app.py")


# --- helpers ------------------------------------------------------------------------------------
def new_app() -> AppTest:
    at = AppTest.from_file(APP, default_timeout=30)
    at.run()
    assert_clean(at)
    return at


def assert_clean(at: AppTest, errors_ok: bool = False) -> None:
    """No exception element, no internal error; optionally no user error either."""
    assert not at.exception, [e.value for e in at.exception]
    msgs = [e.value for e in at.error]
    assert not any("Internal error" in m for m in msgs), msgs
    if not errors_ok:
        assert not msgs, msgs


def charts(at: AppTest) -> list:
    return list(at.get("vega_lite_chart"))


def chart_frame(el) -> pd.DataFrame:
    """The main dataset of a vega_lite_chart element (Arrow IPC bytes in the proto)."""
    spec = json.loads(el.proto.spec)
    frames = {d.name: pa.ipc.open_stream(d.data.data).read_all().to_pandas() for d in el.proto.datasets}
    name = (spec.get("data") or {}).get("name") or next(iter(frames))
    return frames[name]


def kstar_data(at: AppTest) -> pd.DataFrame:
    els = charts(at)
    assert len(els) == 1, "the K* tab shows exactly one chart"
    assert "Optimal draft length K*" in els[0].proto.spec
    return chart_frame(els[0])


def set_view(at: AppTest, tab: str) -> None:
    at.session_state["view"] = tab
    at.run()


def provenance(at: AppTest) -> str:
    return next(c.value for c in at.caption if "Prediction rests on" in c.value)


def headline(at: AppTest) -> str:
    """The first headline: the K schedule in words (app.headline), without its bold markup."""
    return next(m.value for m in at.markdown if "K schedule:" in m.value).replace("**", "")


def sb(at: AppTest, kind: str, key: str):
    return getattr(at.sidebar, kind)(key=key)


# --- the default page ----------------------------------------------------------------------------
def test_default_page_shows_kstar_chart_metrics_and_provenance():
    at = new_app()
    df = kstar_data(at)
    assert {"batch_size", "k_opt", "bound"} <= set(df.columns)
    assert df["batch_size"].min() == 1
    text = provenance(at)
    assert "measured kernel tables" in text and "how far to trust them" in text
    assert "acceptance:" in text and "assumed" in text
    assert "serving:** TPOT against" in text and "it never saw" in text  # the default scenario's GPU and engine
    assert [m.label for m in at.metric][:2] == ["K* at B = 1", "Speedup vs plain at B = 1"]


def test_every_tab_renders_for_an_moe_scenario():
    at = new_app()
    sb(at, "selectbox", "scenario").set_value("qwen3-235b-h200").run()
    expected = {"K* vs batch size": 1, "Goodput heatmap": 1, "Plain vs fixed K vs DSD": 2, "Roofline": 1,
                "MoE experts": 2, "Operator breakdown": 1, "Validation": 0, "Downloads": 0}
    for tab, n in expected.items():
        set_view(at, tab)
        assert_clean(at)
        assert len(charts(at)) == n, tab
    set_view(at, "Roofline")
    spec = json.loads(charts(at)[0].proto.spec)
    assert spec["layer"][0]["encoding"]["x"]["scale"]["type"] == "log"
    assert "compute roof" in charts(at)[0].proto.spec or any(
        "compute roof" in str(pa.ipc.open_stream(d.data.data).read_all().to_pydict()) for d in charts(at)[0].proto.datasets)
    set_view(at, "Downloads")
    labels = [b.label for b in at.get("download_button")]
    assert "vLLM speculative config (JSON)" in labels and "Goodput grid (CSV)" in labels
    assert any(lbl.endswith("(PNG)") for lbl in labels)


def test_moe_tab_explains_k_and_compares_layouts_and_reuse_moves_k():
    # the MoE view: why K* moves (expert loading share of the verify growth) and the three layouts
    at = new_app()
    sb(at, "selectbox", "scenario").set_value("qwen3-235b-h200").run()
    set_view(at, "MoE experts")
    assert_clean(at)
    assert any("Why K" in m.value and "more experts loaded" in m.value for m in at.markdown)
    layouts = at.dataframe[0].value
    assert set(layouts.layout) == {"tp", "tp-ep", "dp-ep"}
    # dp-ep holds every weight once per 8 GPUs but a full KV copy per DP rank: more memory per GPU than tp
    assert layouts.set_index("layout").loc["dp-ep", "GB per GPU"] > layouts.set_index("layout").loc["tp", "GB per GPU"]
    set_view(at, "K* vs batch size")
    before = kstar_data(at)["k_opt"].to_numpy()
    sb(at, "slider", "reuse").set_value(0.9).run()
    assert_clean(at)
    assert list(kstar_data(at)["k_opt"]) != list(before)  # fewer new experts per draft token


def test_kstar_tab_says_where_k_changes_and_why():
    # qwen3-235b-h200: K* first rises (4 -> 5 at B = 10 when written) where the CLI says it does
    # (Prediction.k_changes, tests/test_k_changes.py); each row one K of a change
    from simulator.plan.api import predict

    first = predict("qwen3-235b-h200").k_changes()[0]
    b, k_from, k_to = first["batch_size"], first["k_from"], first["k_to"]
    assert 0 < k_from < k_to
    at = new_app()
    sb(at, "selectbox", "scenario").set_value("qwen3-235b-h200").run()
    assert_clean(at)
    (exp,) = [e for e in at.expander if e.label.startswith("Where K* changes, and why")]
    changes = next(d.value for d in at.dataframe if "K* change" in d.value.columns)
    assert changes.loc[changes["from B"] == b, "K* change"].tolist() == [f"{k_from} -> {k_to}"] * 2
    assert set(changes.loc[changes["from B"] == b, "K"]) == {k_from, k_to} and "experts at K / at 0" in changes.columns


def test_dense_model_moe_tab_says_so():
    at = new_app()
    set_view(at, "MoE experts")
    assert any("dense model" in i.value for i in at.info)


# --- every control changes what it should ---------------------------------------------------------
def test_scenario_picker_fills_every_control():
    at = new_app()
    sb(at, "selectbox", "scenario").set_value("rl-rollout-long-context").run()
    assert_clean(at)
    ss = at.session_state
    assert (ss["hw_name"], ss["tp"], ss["model_name"], ss["draft_method"]) == ("h200", 2, "qwen3-32b", "ngram")
    assert (ss["context_len"], ss["kv_dtype"], ss["k_max"], ss["fixed_k"]) == (16384, "fp8", 8, 3)
    assert ss["acc_list"].startswith("0.6, 0.5")
    assert "n-gram lookup" in provenance(at)
    sb(at, "selectbox", "scenario").set_value("llama-3.1-8b-h100").run()
    assert (at.session_state["hw_name"], at.session_state["draft_method"]) == ("h100-sxm", "eagle3")
    assert at.session_state["bs_range"] == (1, 512)


def test_hardware_changes_kstar_chart_data():
    at = new_app()
    before = kstar_data(at)
    sb(at, "selectbox", "hw_name").set_value("a100-80gb").run()
    assert_clean(at)
    after = kstar_data(at)
    assert not before["itl_ms"].equals(after["itl_ms"])
    assert "a100-80gb" in provenance(at)


def test_custom_peak_and_bandwidth_change_prediction():
    at = new_app()
    before = kstar_data(at)
    sb(at, "toggle", "hw_custom").set_value(True).run()
    assert at.sidebar.number_input(key="hw_bw_tbs").value == pytest.approx(4.8)
    at.sidebar.number_input(key="hw_bw_tbs").set_value(1.0).run()
    assert_clean(at)
    after = kstar_data(at)
    assert (after["itl_ms"].to_numpy() > before["itl_ms"].to_numpy()).all()  # less bandwidth, slower steps
    assert "overridden" in provenance(at)


def test_allreduce_bus_bandwidth_prices_tp_all_reduces():
    # L40S x 8 over PCIe: a server measured at 5 GB/s busbw is slower than the median published one
    # (14.45 GB/s, simulator/data/pcie_allreduce.toml) the planner assumes by default
    at = new_app()
    sb(at, "selectbox", "hw_name").set_value("l40s").run()
    sb(at, "selectbox", "tp").set_value(8).run()
    assert_clean(at)
    before = kstar_data(at)
    assert "median published PCIe Gen4 server" in provenance(at)
    sb(at, "toggle", "hw_custom").set_value(True).run()
    at.sidebar.number_input(key="hw_busbw_gbs").set_value(5.0).run()
    assert_clean(at)
    after = kstar_data(at)
    # bandwidth-bound all-reduces (B >= 64: >= 1 MiB per message) are slower on the 5 GB/s server
    large = before["batch_size"].to_numpy() >= 64
    plain_step = lambda d: (d["speedup_vs_plain"] / d["goodput_per_seq"]).to_numpy()[large]  # noqa: E731
    assert (plain_step(after) > plain_step(before)).all()
    assert "given 5.0 GB/s bus bandwidth" in provenance(at)


def test_acceptance_slider_changes_goodput_and_kstar():
    at = new_app()
    sb(at, "radio", "acc_mode").set_value(S.ACC_IID).run()
    sb(at, "slider", "acc_rate").set_value(0.5).run()
    low = kstar_data(at)
    sb(at, "slider", "acc_rate").set_value(0.9).run()
    assert_clean(at)
    high = kstar_data(at)
    assert high["goodput_per_seq"].iloc[0] > low["goodput_per_seq"].iloc[0]
    assert high["k_opt"].iloc[0] > low["k_opt"].iloc[0]
    assert "i.i.d. 0.9" in provenance(at)


def test_per_position_list_and_its_source():
    at = new_app()
    assert "assumed: small same-family" in provenance(at)
    sb(at, "text_input", "acc_list").set_value("0.9, 0.85, 0.8").run()
    assert_clean(at)
    assert "per-position 0.9,0.85,0.8 (per-position rates entered in the dashboard)" in provenance(at)


@pytest.mark.parametrize("key,kind,value,column", [
    ("tp", "selectbox", 4, "itl_ms"),
    ("context_len", "number_input", 16384, "itl_ms"),
    ("w_dtype", "selectbox", "fp8", "itl_ms"),
    ("kv_dtype", "selectbox", "fp8", "itl_ms"),
    ("draft_method", "selectbox", "ngram", "itl_ms"),
])
def test_deployment_controls_change_step_time(key, kind, value, column):
    at = new_app()
    before = kstar_data(at)
    sb(at, kind, key).set_value(value).run()
    assert_clean(at)
    after = kstar_data(at)
    assert not before[column].equals(after[column]), key


def test_attention_precision_control_prices_the_projections_on_their_own():
    # fp8 weights with the attention projections kept in bf16 (a checkpoint that left them out): slower steps than
    # all-fp8, the provenance says so, and "as the checkpoint" goes back to the weights' precision
    at = new_app()
    sb(at, "selectbox", "w_dtype").set_value("fp8").run()
    fp8 = kstar_data(at)
    assert sb(at, "selectbox", "attn_dtype").value == S.ATTENTION_AUTO
    sb(at, "selectbox", "attn_dtype").set_value("bf16").run()
    assert_clean(at)
    assert "attention=bf16" in provenance(at)
    bf16_attn, all_fp8 = kstar_data(at)["itl_ms"].to_numpy(), fp8["itl_ms"].to_numpy()
    assert (bf16_attn >= all_fp8).all() and (bf16_attn[:64] > all_fp8[:64]).all()  # twice the projection bytes
    sb(at, "selectbox", "attn_dtype").set_value(S.ATTENTION_AUTO).run()
    assert kstar_data(at)["itl_ms"].equals(fp8["itl_ms"]) and "attention=" not in provenance(at)


def test_batch_range_and_k_controls():
    at = new_app()
    sb(at, "slider", "bs_range").set_value((4, 64)).run()
    df = kstar_data(at)
    assert (df["batch_size"].min(), df["batch_size"].max()) == (4, 64)
    sb(at, "slider", "k_max").set_value(2).run()
    assert_clean(at)
    assert kstar_data(at)["k_opt"].max() <= 2
    assert at.session_state["fixed_k"] <= 2  # clamped to the new K max
    sb(at, "slider", "fixed_k").set_value(1).run()
    set_view(at, "Plain vs fixed K vs DSD")
    assert "fixed K = 1" in charts(at)[0].proto.spec


def test_operating_point_moves_the_roofline():
    at = new_app()
    set_view(at, "Roofline")
    a = charts(at)[0].proto.spec
    sb(at, "number_input", "insp_b").set_value(64).run()
    sb(at, "selectbox", "insp_k").set_value(2).run()
    assert_clean(at)
    b = charts(at)[0].proto.spec
    assert "B = 64, K = 2" in b and a != b


def _profile(tmp_path: Path, hardware: str, name: str) -> Path:
    prof = {"format": "dsd-planner-profile", "format_version": 1, "hardware": hardware,
            "device": {"name": f"test {hardware}"},
            "compute_efficiency": {"gemm": {"tokens": [1, 4096], "efficiency": [0.3, 0.7]}},
            "memory_efficiency": {"bytes": [1e3, 1e10], "efficiency": [0.4, 0.8]},
            "launch_overhead_s": 5e-6}
    path = tmp_path / name
    path.write_text(json.dumps(prof))
    return path


def test_calibration_profile_used_and_mismatch_warned(tmp_path, monkeypatch):
    _profile(tmp_path, "h200", "h200-test.json")
    _profile(tmp_path, "cpu-xeon-2c", "cpu-test.json")
    (tmp_path / "broken.json").write_text("{not json")
    monkeypatch.setenv("DSD_PROFILE_DIR", str(tmp_path))
    at = new_app()
    sb(at, "selectbox", "calibration").set_value("none (datasheet only)").run()
    before = kstar_data(at)  # the datasheet roofline (eta = 1)
    sb(at, "selectbox", "calibration").set_value("h200-test.json").run()
    assert_clean(at)
    assert "calibrated: h200-test.json" in provenance(at)
    after = kstar_data(at)
    same_k = after["k_opt"].to_numpy() == before["k_opt"].to_numpy()  # the step at K*: compare like with like
    assert same_k.sum() > 100
    assert (after["itl_ms"].to_numpy()[same_k] > before["itl_ms"].to_numpy()[same_k]).all()  # eta < 1: slower
    sb(at, "selectbox", "calibration").set_value("cpu-test.json").run()
    assert_clean(at)
    assert any("measured on 'cpu-xeon-2c'" in w.value for w in at.warning)
    assert "measured kernel tables" in provenance(at)  # the mismatched profile is dropped, not the evidence
    sb(at, "selectbox", "calibration").set_value("none (datasheet only)").run()
    assert "datasheet only" in provenance(at)
    sb(at, "selectbox", "calibration").set_value("broken.json").run()
    assert_clean(at, errors_ok=True)
    assert any("not valid JSON" in e.value for e in at.error)
    assert len(charts(at)) == 1  # still shows a prediction


# --- uploads ---------------------------------------------------------------------------------------
def test_uploaded_config_json_is_used():
    cfg = json.loads((ROOT / "simulator" / "data" / "models" / "qwen3-8b.json").read_text())
    cfg["_name_or_path"] = "me/my-qwen"
    at = new_app()
    sb(at, "radio", "model_src").set_value("upload config.json").run()
    at.sidebar.file_uploader(key="model_upload").set_value(("config.json", json.dumps(cfg).encode(), "application/json"))
    sb(at, "selectbox", "draft_method").set_value("eagle").run()
    assert_clean(at)
    assert "my-qwen" in provenance(at)


def _default_fit(tmp_path, acceptance: str = "") -> bytes:
    """A deployment fit of the dashboard's first scenario (scenarios/default.toml) on two measured steps
    (``acceptance``: the K = 3 row's measured acceptance length, if any)."""
    from calibration.fit_deployment import main as fit_main

    (tmp_path / "runs.csv").write_text(f"batch_size,k,itl_ms,acceptance_length\n8,0,25.0,\n8,3,35.0,{acceptance}\n")
    out = tmp_path / "fit.json"
    assert fit_main(["--scenario", "default", "--measured", str(tmp_path / "runs.csv"), "--output", str(out)]) == 0
    return out.read_bytes()


def test_uploaded_deployment_fit_corrects_step_times_and_says_so(tmp_path):
    data = _default_fit(tmp_path)
    at = new_app()
    before = at.dataframe[0].value.set_index("B (sequences)")
    at.sidebar.file_uploader(key="deployment_fit").set_value(("my-fit.json", data, "application/json")).run()
    assert_clean(at)
    text = provenance(at)
    assert "deployment fit my-fit.json (2 points: B=8 K=0, B=8 K=3" in text  # step times rest on it
    assert "deployment fit my-fit.json on 2 measured points" in text  # and its interval is the band
    after = at.dataframe[0].value.set_index("B (sequences)")
    # the page shows the fit's own plain step at B = 8 (the posterior fit_deployment reports for that point),
    # which sits on the measured 25.0 ms within 0.5% (two points, six terms under the learned prior)
    fitted = next(pt["fitted_itl_ms"] for pt in json.loads(data)["points"] if pt["k"] == 0)
    assert after.loc[8, "plain ms per token"] == pytest.approx(fitted, abs=0.01)
    assert fitted == pytest.approx(25.0, rel=0.005)
    assert before.loc[8, "plain ms per token"] != pytest.approx(25.0, abs=0.5)
    # another GPU: the fit does not apply; said once, and the page shows the planner's own terms
    sb(at, "selectbox", "hw_name").set_value("h100-sxm").run()
    assert_clean(at)
    assert any(w.value.startswith("Deployment fit ignored: my-fit.json: fitted for another deployment")
               for w in at.warning), [w.value for w in at.warning]
    assert "deployment fit" not in provenance(at)


def test_deployment_fit_with_measured_acceptance_sets_the_rates(tmp_path):
    data = _default_fit(tmp_path, acceptance="2.4")
    fit = json.loads(data)
    at = new_app()
    at.sidebar.file_uploader(key="deployment_fit").set_value(("my-fit.json", data, "application/json")).run()
    assert_clean(at)
    text = provenance(at)
    assert "measured on this deployment (my-fit.json)" in text
    # the rates the fit measured (scenario rates scaled to reach AL 2.4 at K = 3), as the dashboard shows them
    assert f"per-position {','.join(f'{round(r, 4):g}' for r in fit['acceptance']['rates'][:2])}" in text
    a = [round(r, 4) for r in fit["acceptance"]["rates"]]  # hand: AL(3) = 1 + a1 + a1 a2 + a1 a2 a3 = the measured 2.4
    assert 1 + a[0] + a[0] * a[1] + a[0] * a[1] * a[2] == pytest.approx(2.4, abs=1e-3)


def test_bad_deployment_fit_is_rejected_at_its_control():
    at = new_app()
    at.sidebar.file_uploader(key="deployment_fit").set_value(("fit.json", b"{}", "application/json")).run()
    assert_clean(at, errors_ok=True)
    assert any("Deployment fit rejected" in e.value and "fit.json: not a deployment calibration file" in e.value
               for e in at.sidebar.error)
    assert charts(at) and headline(at).startswith("K schedule:")


@pytest.mark.parametrize("payload,reason", [
    (b"{\"model_type\": \"llama\", ", "not valid JSON"),
    (b"[1, 2, 3]", "expected a JSON object"),
    (b"{\"hidden_size\": 4096}", "missing field 'model_type'"),
    (b"{\"model_type\": \"llama\", \"hidden_size\": 4096}", "missing field 'num_hidden_layers'"),
])
def test_bad_config_json_gives_error_with_reason(payload, reason):
    at = new_app()
    sb(at, "radio", "model_src").set_value("upload config.json").run()
    at.sidebar.file_uploader(key="model_upload").set_value(("config.json", payload, "application/json")).run()
    assert_clean(at, errors_ok=True)
    # issue 24: the error sits at its control (the sidebar) and the rest of the page stays, on the catalog model
    assert any("Model upload rejected" in e.value and reason in e.value for e in at.sidebar.error), \
        [e.value for e in at.error]
    assert charts(at) and headline(at).startswith("K schedule:")


def test_vllm_bench_json_and_metrics_set_acceptance():
    at = new_app()
    sb(at, "radio", "acc_mode").set_value(S.ACC_BENCH).run()
    at.sidebar.file_uploader(key="acc_file").set_value(
        ("bench.json", (FIXTURES / "bench_k3_c8.json").read_bytes(), "application/json")).run()
    assert_clean(at)
    text = provenance(at)
    assert "measured: vLLM bench JSON bench.json" in text
    assert "per-position 0.7866,0.776" in text  # conditional: 0.6105 / 0.7866 = 0.7761
    sb(at, "radio", "acc_mode").set_value(S.ACC_METRICS).run()
    at.sidebar.file_uploader(key="acc_file").set_value(
        ("metrics.txt", (FIXTURES / "metrics_k3.txt").read_bytes(), "text/plain")).run()
    assert_clean(at)
    assert "measured: vLLM /metrics metrics.txt" in provenance(at)


def test_any_acceptance_file_sets_acceptance_and_caps_k():
    # a Model-Optimizer profile: conditional 0.8, 0.6, 0.4, 0.3 and max_supported_k 3
    profile = {"schema_version": "1.0", "measured": True, "method": "eagle3", "num_speculative_tokens": 4,
               "conditional_accept_rates": [0.8, 0.6, 0.4, 0.3], "max_supported_k": 3}
    at = new_app()
    sb(at, "radio", "acc_mode").set_value(S.ACC_FILE).run()
    at.sidebar.file_uploader(key="acc_any_file").set_value(
        ("speculation_profile.json", json.dumps(profile).encode(), "application/json")).run()
    assert_clean(at)
    text = provenance(at)
    assert "per-position 0.8,0.6,0.4,0.3" in text and "speculation_profile.json" in text
    assert at.session_state["k_max"] == 3


@pytest.mark.parametrize("mode,name,payload,reason", [
    (S.ACC_BENCH, "bench.json", (FIXTURES / "bench_k0_c8.json").read_bytes(), "spec_decode_per_position_acceptance_rates"),
    (S.ACC_BENCH, "bench.json", b"\x89PNG\r\n garbage", "not"),
    (S.ACC_BENCH, "bench.json", b"{\"spec_decode_per_position_acceptance_rates\": \"high\"}", "list of numbers"),
    (S.ACC_METRICS, "metrics.txt", b"this is { not prometheus at all", "Prometheus"),
    (S.ACC_METRICS, "metrics.txt", (FIXTURES / "metrics_no_spec.txt").read_bytes(), "spec-decode"),
])
def test_bad_acceptance_files_give_error_with_reason(mode, name, payload, reason):
    at = new_app()
    sb(at, "radio", "acc_mode").set_value(mode).run()
    at.sidebar.file_uploader(key="acc_file").set_value((name, payload, "application/octet-stream")).run()
    assert_clean(at, errors_ok=True)
    assert any("Acceptance file rejected" in e.value and reason in e.value for e in at.sidebar.error), \
        [e.value for e in at.error]
    assert charts(at) and headline(at).startswith("K schedule:")  # the page stays, on the scenario's rates


def test_bad_rates_text_is_shown_at_its_control_and_the_page_stays():
    at = new_app()
    sb(at, "radio", "acc_mode").set_value(S.ACC_LIST).run()
    before = provenance(at)
    sb(at, "text_input", "acc_list").set_value("0.9, banana").run()
    assert_clean(at, errors_ok=True)
    assert [e.value for e in at.sidebar.error] and not [e for e in at.main.error]
    assert charts(at) and headline(at).startswith("K schedule:") and provenance(at) == before


def test_validation_tab_matches_rows_and_reports_mape():
    grid = predict("default").grid_rows
    meas = grid[grid["batch_size"].isin([1, 8, 64]) & grid["k"].isin([0, 2, 4])].copy()
    meas["itl_ms"] *= 1.25                      # measured 25% slower -> predicted error -20%
    meas["goodput_per_seq"] /= 1.25
    meas = pd.concat([meas, meas.iloc[:2]])     # duplicates are reduced to medians
    buf = io.StringIO()
    meas.to_csv(buf, index=False)
    at = new_app()
    set_view(at, "Validation")
    at.file_uploader(key="measured_csv").set_value(("runs.csv", buf.getvalue().encode(), "text/csv")).run()
    assert_clean(at)
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Matched (B, K) points"] == "9"
    assert metrics["ITL error (MAPE)"] == "20.0%"
    assert metrics["Goodput error (MAPE)"] == "25.0%"
    assert len(charts(at)) == 2


def test_validation_tab_fits_the_planner_to_the_rows_and_uses_the_fit():
    # two measured cells, both 25% slower than predicted (error -20% before); once the fit is used the same
    # rows match to the fit's own residual (its points' fitted vs measured, under 0.5%); dropping it brings
    # back the -20%
    grid = predict("default").grid_rows
    meas = grid[(grid["batch_size"] == 8) & grid["k"].isin([0, 2])][["batch_size", "k", "itl_ms"]].copy()
    meas["itl_ms"] *= 1.25
    at = new_app()
    set_view(at, "Validation")
    at.file_uploader(key="measured_csv").set_value(("runs.csv", meas.to_csv(index=False).encode(), "text/csv")).run()
    assert {m.label: m.value for m in at.metric}["ITL error (MAPE)"] == "20.0%"
    at.button(key="fit_rows").click().run()
    assert_clean(at)
    points = json.loads(at.session_state["validation_fit"][1])["points"]
    residual = sum(abs(pt["fitted_itl_ms"] / pt["itl_ms"] - 1) for pt in points) / len(points)
    assert residual < 0.005
    assert {m.label: m.value for m in at.metric}["ITL error (MAPE)"] == f"{residual:.1%}"
    assert "deployment fit fit-runs.json (2 points: B=8 K=0, B=8 K=2" in provenance(at)
    assert any("kernel_scale" in c.value and "next: " in c.value for c in at.code)
    assert "Download fit-runs.json (use it with --deployment)" in [b.label for b in at.get("download_button")]
    at.sidebar.button(key="drop_validation_fit").click().run()
    assert "deployment fit" not in provenance(at)
    assert {m.label: m.value for m in at.metric}["ITL error (MAPE)"] == "20.0%"
    # one measured cell identifies nothing: refused where it was asked, the page stays
    one = meas.iloc[:1].to_csv(index=False).encode()
    at.file_uploader(key="measured_csv").set_value(("one.csv", one, "text/csv")).run()
    at.button(key="fit_rows").click().run()
    assert_clean(at, errors_ok=True)
    assert any(e.value.startswith("Fit refused: one.csv: 1 distinct (batch_size, k, context_len) point(s)")
               for e in at.error), [e.value for e in at.error]
    assert "deployment fit" not in provenance(at)


def test_validation_tab_lists_the_published_rows_behind_the_band():
    # the default scenario runs on H200: its band rests on the committed transfer rows for h200
    rows = pd.read_csv(ROOT / "calibration" / "data" / "transfer" / "transfer_rows.csv")
    h200 = rows[(rows.hardware == "h200") & ~rows.anchor.astype(bool)]
    at = new_app()
    set_view(at, "Validation")
    assert_clean(at)
    label = next(e.label for e in at.expander if e.label.startswith("Published measurements on h200"))
    assert f"{len(h200)} rows" in label and f"{h200.error.abs().mean():.1%}" in label
    shown = at.dataframe[0].value
    assert len(shown) == len(h200) and {"source", "measured", "planner", "error %"} <= set(shown.columns)


@pytest.mark.parametrize("payload,reason", [
    (b"batch_size,k\n1,2\n", "missing column(s) itl_ms"),
    (b"batch_size,k,itl_ms\nx,y,z\n", "not a finite number"),
    (b"", "not a readable measured-runs CSV"),
])
def test_bad_measured_csv_gives_error(payload, reason):
    at = new_app()
    set_view(at, "Validation")
    at.file_uploader(key="measured_csv").set_value(("runs.csv", payload, "text/csv")).run()
    assert_clean(at, errors_ok=True)
    assert any(reason in e.value for e in at.error), [e.value for e in at.error]


# --- robustness --------------------------------------------------------------------------------------
def test_seeded_random_sweep_never_shows_a_traceback():
    rng = random.Random(20240611)
    at = new_app()
    choices = {
        ("selectbox", "scenario"): S.scenario_names(),
        ("selectbox", "hw_name"): ["h100-sxm", "h200", "a100-40gb", "l4", "mi300x", "b200", "cpu-xeon-2c"],
        ("selectbox", "tp"): S.TP_CHOICES,
        ("selectbox", "ep"): S.EP_CHOICES,
        ("selectbox", "model_name"): ["llama-3.1-8b", "qwen3-30b-a3b", "mixtral-8x7b", "deepseek-v3", "gpt-oss-120b",
                                      "smollm2-135m", "command-a"],
        ("selectbox", "draft_method"): S.DRAFT_CHOICES,
        ("radio", "acc_mode"): [S.ACC_IID, S.ACC_LIST],
        ("number_input", "context_len"): [1, 512, 8192, 131072],
        ("selectbox", "w_dtype"): ["bf16", "fp8", "int4", "mxfp4"],
        ("selectbox", "kv_dtype"): ["bf16", "fp8"],
        ("selectbox", "attn_dtype"): [S.ATTENTION_AUTO, "bf16", "fp8"],
        ("slider", "bs_range"): [(1, 1), (1, 1024), (16, 32), (100, 700)],
        ("slider", "k_max"): [1, 4, 16],
        ("toggle", "hw_custom"): [True, False],
    }
    tabs = ["K* vs batch size", "Goodput heatmap", "Plain vs fixed K vs DSD", "Roofline", "MoE experts",
            "Operator breakdown"]
    errors = 0
    for step in range(18):
        for (kind, key), values in rng.sample(sorted(choices.items()), 3):
            widget = getattr(at.sidebar, kind)(key=key)
            widget.set_value(rng.choice(values))
        at.session_state["view"] = rng.choice(tabs)
        at.run()
        assert_clean(at, errors_ok=True)
        errors += bool(at.error)
        if not at.error:
            assert provenance(at)
    assert errors < 18  # most combinations are valid and show charts


# --- chart functions without Streamlit ----------------------------------------------------------------
def test_charts_are_pure_functions_and_export_png():
    p = predict("qwen3-235b-h200", batch_sizes="1-64")
    sc = p.scenario
    made = [C.k_star_chart(p.table), C.goodput_heatmap(p.grid_rows, p.table), C.policy_chart(p.table, sc.fixed_k),
            C.gain_chart(p.table, sc.fixed_k), C.experts_touched_chart(p.grid_rows, 128, 8), C.expert_share_chart(p.grid_rows),
            C.roofline_chart(p.breakdown(8, 3), sc.hardware.peak_bf16_flops_per_s, sc.hardware.hbm_bandwidth_bytes_per_s),
            C.breakdown_chart(p.breakdown(8, 3))]
    for ch in made:
        spec = ch.to_dict()  # validates against the Vega-Lite schema
        assert spec.get("title")
    png = C.to_png(made[0])
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000


def test_physics_only_leaves_out_the_learned_layer():
    # the default scenario (a GPU): the learned layer's engine terms are in the step times and the provenance
    # names them; "Physics only" takes them out (speculating steps faster), as --physics-only does
    at = new_app()
    assert "learned layer" in provenance(at)
    before = at.dataframe[0].value.set_index("B (sequences)")
    at.sidebar.checkbox(key="physics_only").check().run()
    assert_clean(at)
    assert "learned layer" not in provenance(at)
    after = at.dataframe[0].value.set_index("B (sequences)")
    # a plain step loses the layer's host terms where its form has them (none in a speculation-terms form)
    from simulator.specs.step_terms import load_learned_prior
    plain_terms = load_learned_prior().values["host_per_step_s"] + load_learned_prior().values["host_per_seq_s"]
    if plain_terms > 0:
        assert (after["plain ms per token"] < before["plain ms per token"]).all()
    else:
        assert (after["plain ms per token"] == before["plain ms per token"]).all()
    assert after.loc[64, "ms per token"] < before.loc[64, "ms per token"]


def test_kstar_tab_shows_how_sure_the_decision_is():
    # issue 47 item 4: the dashboard shows what predict prints: the decision line (K* chosen at the engine terms'
    # pessimistic 10%, where it differs from their centre or pays in fewer than 90% of the draws) and, per batch
    # size, P(K* beats plain) beside the centre's K
    from simulator.plan.api import predict
    from simulator.plan.speedup_trust import decision_risk_text
    # (llama-3.1-8b-h100: its short steps leave the engine terms' host time exposed somewhere, so their spread
    # moves the choice; command-a-h100's long steps on vLLM 0.33 hide it: its decisions are sure)
    p = predict("llama-3.1-8b-h100")
    want = decision_risk_text(p.table, p.scenario.decision_quantile)
    assert want
    at = new_app()
    sb(at, "selectbox", "scenario").set_value("llama-3.1-8b-h100").run()
    assert_clean(at)
    assert f"Decision: {want}." in [c.value for c in at.caption]
    view = next(d.value for d in at.dataframe if "P(K* beats plain)" in d.value.columns)
    assert "K at the terms' centre" in view.columns and view["P(K* beats plain)"].dropna().between(0, 1).all()


def test_a_release_that_cannot_run_the_draft_is_one_line_naming_the_first_that_can():
    """SGLang 0.4.4 runs no EAGLE-3 (its first release with it is 0.4.4.post2, engine_releases.toml): the
    dashboard says so in one error, offers 0.4.4.post2 among the releases, and runs once it is chosen."""
    at = new_app()
    sb(at, "selectbox", "draft_method").set_value("eagle3").run()
    sb(at, "selectbox", "engine_name").set_value("sglang").run()
    assert "0.4.4.post2" in sb(at, "selectbox", "engine_version").options
    sb(at, "selectbox", "engine_version").set_value("0.4.4").run()
    assert_clean(at, errors_ok=True)
    assert [e.value for e in at.error if "cannot run draft method 'eagle3'" in e.value and "0.4.4.post2" in e.value]
    sb(at, "selectbox", "engine_version").set_value("0.4.4.post2").run()
    assert_clean(at)


def test_a_vllm_release_whose_default_runner_drafts_the_tables_largest_k_says_so_on_the_page():
    """vLLM 0.31.0 runs EAGLE-3 on Model Runner V2, which drafts the table's largest K at every step
    (engine_settings.toml dsd_drafts_max): the page's engine-settings advice names VLLM_USE_V2_MODEL_RUNNER."""
    at = new_app()
    sb(at, "selectbox", "scenario").set_value("llama-3.1-8b-h100").run()
    sb(at, "selectbox", "engine_version").set_value("0.31.0").run()
    assert_clean(at)
    lines = [m.value for m in at.markdown if "VLLM_USE_V2_MODEL_RUNNER" in m.value]
    assert lines and "unset (Model Runner V2) -> 0 (the V1 runner), or vLLM 0.32.0" in lines[0]
    sb(at, "selectbox", "engine_version").set_value("0.33.0").run()
    assert not [m.value for m in at.markdown if "VLLM_USE_V2_MODEL_RUNNER unset" in m.value]
