"""Sidebar inputs. Every widget has a session-state key; the scenario picker fills all of them."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import streamlit as st

from dashboard import state as S, uploads as U
from dashboard.sidebar_acceptance import acceptance_controls
from simulator.errors import PlannerError
from simulator.specs.acceptance import preset_for
from simulator.specs.drafts import parse_draft
from simulator.specs.hardware import ACT_DTYPES, KV_DTYPES, WEIGHT_DTYPES, list_hardware, load_hardware
from simulator.specs.engines import default_engine
from simulator.specs.models import list_models, load_model
from simulator.specs.scenario_sections import default_weight_dtype


@dataclass
class Inputs:
    """What the sidebar resolved to: a scenario dict to build, plus notes for the page."""

    raw: dict | None          # None when an input is unusable (an error was shown)
    raw_without_fit: dict | None  # the same without the deployment fit, its acceptance included (fit refused)
    origin: str
    inspect_b: int
    inspect_k: int | None     # None: use K* at inspect_b
    acceptance_note: str


def _apply_scenario() -> None:
    ss = st.session_state
    ss["_base_raw"] = S.read_scenario(ss["scenario"])
    ss["_base_controls"] = S.controls_from_scenario(ss["_base_raw"])
    for key, value in ss["_base_controls"].items():
        ss[key] = value
    ss["_weights_model"] = ss["model_name"]  # the scenario's weights stand until the model changes


def _draft_changed() -> None:
    """A new draft method brings its own acceptance preset and source (simulator/data/acceptance.toml);
    the previous method's rates are dropped. A method without a preset keeps the current rates."""
    ss = st.session_state
    preset = preset_for(parse_draft(ss["draft_method"]).preset_key)  # a tree's preset is per depth
    if preset is None:
        ss.pop("_acc_preset", None)
        return
    rates = [min(r, S.MAX_RATE) for r in preset.rates]
    ss["acc_mode"] = S.ACC_IID if len(rates) == 1 else S.ACC_LIST
    ss["acc_rate"] = float(rates[0])
    ss["acc_list"] = S.rates_text(rates)
    ss["_acc_preset"] = {"method": ss["draft_method"], "rates": rates, "source": preset.source}


def _scenario_picked() -> None:
    st.session_state.pop("_acc_preset", None)
    _apply_scenario()


def _hardware_changed() -> None:
    ss = st.session_state
    hw = load_hardware(ss["hw_name"])
    ss["hw_peak_tflops"] = hw.peak_bf16_flops_per_s / 1e12
    ss["hw_bw_tbs"] = hw.hbm_bandwidth_bytes_per_s / 1e12
    if default_engine(hw.kind) != default_engine(ss.get("_hw_kind", hw.kind)):  # GPU <-> CPU: its usual engine
        ss["engine_name"] = default_engine(hw.kind)
        _engine_changed()
    ss["_hw_kind"] = hw.kind


def _engine_changed() -> None:
    """A new engine starts at its newest profiled release."""
    ss = st.session_state
    ss["engine_version"] = S.release_choices(ss["engine_name"])[0]


def _init_state() -> None:
    """First run: fill from the default scenario. Later runs: keep the values of hidden widgets.

    Streamlit drops the state of a widget that was not drawn in the last run (e.g. the draft-model
    select while the draft method is eagle), so every control is re-assigned from itself or from
    a shadow copy before any widget is drawn.
    """
    ss = st.session_state
    if "scenario" not in ss:
        ss["scenario"] = S.scenario_names()[0]
        _apply_scenario()
    ss.setdefault("insp_b", 8)
    ss.setdefault("insp_k", "K*")
    shadow = ss.setdefault("_shadow", {})
    for key in list(ss["_base_controls"]) + ["insp_b", "insp_k"]:
        if key in ss:
            ss[key] = ss[key]
        elif key in shadow:
            ss[key] = shadow[key]
        elif key in ss["_base_controls"]:
            ss[key] = ss["_base_controls"][key]


@st.cache_data(max_entries=32, show_spinner=False)
def _uploaded_model(data: bytes, name: str) -> str:
    return U.uploaded_model(data, name)


def _scenario_controls() -> tuple[dict, dict]:
    """The scenario picker; returns the picked scenario's dict and the controls it fills."""
    ss, sb = st.session_state, st.sidebar
    sb.selectbox("Scenario", S.scenario_names(), key="scenario", on_change=_scenario_picked,
                 help="A file in scenarios/; picking one fills every control below.")
    base_raw = ss.get("_base_raw") or S.read_scenario(ss["scenario"])
    base_controls = ss.get("_base_controls") or S.controls_from_scenario(base_raw)
    if base_raw.get("description"):
        sb.caption(base_raw["description"])
    return base_raw, base_controls


def _hardware_controls() -> None:
    ss, sb = st.session_state, st.sidebar
    sb.subheader("Hardware")
    sb.selectbox("Accelerator", list(list_hardware()), key="hw_name", on_change=_hardware_changed)
    sb.toggle("Custom peak FLOP/s and bandwidth", key="hw_custom",
              help="What-if device: the selected accelerator with these figures replaced.")
    if ss["hw_custom"]:
        c1, c2 = sb.columns(2)
        c1.number_input("Peak bf16 (TFLOP/s)", min_value=0.1, max_value=100000.0, step=50.0, key="hw_peak_tflops")
        c2.number_input("HBM (TB/s)", min_value=0.01, max_value=1000.0, step=0.1, key="hw_bw_tbs")
        sb.number_input("All-reduce bus bandwidth (GB/s)", min_value=0.0, max_value=10000.0, step=1.0,
                        key="hw_busbw_gbs",
                        help="Your server's nccl-tests all_reduce_perf busbw at large messages; it prices every"
                             " TP all-reduce's bandwidth term. 0: the measured tables (PCIe: the median published"
                             " server) or the datasheet link. PCIe servers differ by up to 10x.")
    ss["_hw_kind"] = load_hardware(ss["hw_name"]).kind  # what _hardware_changed compares the next device with
    c1, c2 = sb.columns(2)
    c1.selectbox("Tensor parallel (TP)", S.TP_CHOICES, key="tp")
    c2.selectbox("Expert parallel (EP)", S.EP_CHOICES, key="ep", help="MoE models only; must divide TP.")
    c1, c2 = sb.columns(2)
    c1.selectbox("MoE layout", ["tp", "tp-ep", "dp-ep"], key="layout",
                 help="tp: TP attention + TP experts; tp-ep: TP attention + expert parallelism; dp-ep: data-parallel"
                      " attention (each GPU B/dp sequences) + expert parallelism over all GPUs. MoE models only.")
    c2.slider("Routing reuse rho", 0.0, 0.9, step=0.05, key="reuse",
              help="MoE: probability that a draft position re-uses the previous position's experts (adjacent tokens"
                   " of one sequence route alike; 0 = independent tokens)")


def _engine_controls() -> None:
    """The serving engine and its release (the CLI's --engine / --engine-version): host time per step,
    CUDA-graph padding and which engine files the Downloads tab writes."""
    ss, sb = st.session_state, st.sidebar
    if ss.get("engine_version") not in S.release_choices(ss["engine_name"]):
        _engine_changed()
    sb.subheader("Serving engine")
    sb.selectbox("Engine", S.engine_choices(), key="engine_name", format_func=S.engine_label,
                 on_change=_engine_changed,
                 help="Whose host time per step and CUDA-graph padding the step times include (--engine); the"
                      " Downloads tab writes this engine's files. none (kernels only): the GPU work alone.")
    sb.selectbox("Engine release", S.release_choices(ss["engine_name"]), key="engine_version",
                 format_func=lambda v: v or "-",
                 help="The engine profile's release (--engine-version; simulator/data/engines/), newest first.")


def _model_controls() -> tuple[str, bool]:
    """Target model (catalog or uploaded config.json) and draft; returns (model, usable)."""
    ss, sb = st.session_state, st.sidebar
    ok = True
    sb.subheader("Model and draft")
    sb.radio("Target model", ["catalog", "upload config.json"], key="model_src", horizontal=True)
    model = ss["model_name"]
    if ss["model_src"] == "catalog":
        sb.selectbox("Catalog model", list(list_models()), key="model_name")
    else:
        up = sb.file_uploader("Hugging Face config.json", type=["json"], key="model_upload")
        if up is None:
            sb.info(f"No config.json uploaded yet: using the catalog model {model}.")
        else:
            try:
                model = _uploaded_model(up.getvalue(), up.name)
            except PlannerError as err:  # shown at its control; the page stays on the catalog model
                sb.error(f"Model upload rejected: {err}. Showing the catalog model {model} until it is fixed.")
    _fit_draft_to(model)
    _fit_weights_to(model)
    sb.selectbox("Draft method", S.DRAFT_CHOICES, key="draft_method", on_change=_draft_changed,
                 help="eagle / eagle3: a one-layer head; mtp: the model's multi-token-prediction module; "
                      "ngram: prompt lookup on the host; model: a separate small draft model; dflash / dspark / "
                      "p-eagle / pard: one-pass block drafters; eagle3:tree:TxN: an EAGLE tree of topk T and N draft"
                      " tokens (8x63: the tree SGLang's published tree acceptance was measured on).")
    if ss["draft_method"] == "model":
        sb.selectbox("Draft model", S.draft_models_for(model), key="draft_model",
                     help="Catalog models that share the target's vocabulary and are smaller than it.")
    note = ss.pop("_draft_note", None)
    if note:
        sb.info(note)
    return model, ok


def _fit_draft_to(model: str) -> None:
    """A separate draft model must share the target's vocabulary: when the target changes, the draft
    becomes the smallest catalog model that does, else a head (the model's MTP module, else EAGLE-3),
    and the sidebar says so. Runs before the draft widgets are drawn."""
    ss = st.session_state
    if ss["draft_method"] != "model" or ss["draft_model"] in S.draft_models_for(model):
        return
    old, fits = ss["draft_model"], S.draft_models_for(model)
    target = Path(model).parent.name if model.endswith(".json") else model
    why = f"draft model {old} has vocabulary {S.vocabulary(old)}, {target} has {S.vocabulary(model)}"
    if fits:
        ss["draft_model"] = fits[0]
        ss["_draft_note"] = f"Draft reset to {fits[0]}, the smallest catalog model with {target}'s vocabulary ({why})."
    else:
        ss["draft_method"] = "mtp" if load_model(model).num_mtp_layers else "eagle3"
        _draft_changed()
        ss["_draft_note"] = (f"Draft set to {ss['draft_method']}: no catalog model shares {target}'s vocabulary"
                             f" ({why}); a head drafts with the target's own vocabulary.")


def _fit_weights_to(model: str) -> None:
    """A new target model brings its checkpoint's weight precision (fp8 for DeepSeek-V3's published blocks,
    else the default), as --model alone does; a choice made for the same model stays. Runs before the
    Weights control is drawn."""
    ss = st.session_state
    if ss.setdefault("_weights_model", model) == model:
        return
    ss["_weights_model"] = model
    ss["w_dtype"] = default_weight_dtype(load_model(model))


def _workload_controls(model: str, base_raw: dict) -> None:
    ss, sb = st.session_state, st.sidebar
    sb.subheader("Workload and precision")
    sb.number_input("Context length L (tokens)", min_value=1, max_value=1_048_576, step=512, key="context_len")
    spec = load_model(model)
    trained = spec.max_position_embeddings
    # shown where it matters: a context (or the scenario's context axis) beyond the trained length, or ticked
    if ss["allow_beyond"] or (trained and ("context_lens" in base_raw.get("workload", {})
                                           or int(ss["context_len"]) > trained)):
        sb.checkbox(S.ALLOW_BEYOND_LABEL, key="allow_beyond",
                    help=(f"{spec.name} was trained to {trained:,} tokens (max_position_embeddings); " if trained
                          else "") + "tick this for a deployment that serves it longer with RoPE scaling (as"
                                     " [workload] allow_context_beyond_model = true in a scenario file).")
    c1, c2 = sb.columns(2)  # two to a row: three cut "bf16" to "bf1" in the sidebar's width
    c1.selectbox("Weights", list(WEIGHT_DTYPES), key="w_dtype")
    c2.selectbox("Activations", list(ACT_DTYPES), key="a_dtype")
    c1.selectbox("KV cache", list(KV_DTYPES), key="kv_dtype")
    c2.selectbox("Attention", [S.ATTENTION_AUTO, *WEIGHT_DTYPES], key="attn_dtype",
                 help="the attention projections' weights ([precision] attention; auto: bf16 where the checkpoint's"
                      " quantization config leaves them out, else the weights'): NVIDIA's NVFP4 DeepSeek keeps them bf16")
    sb.slider("Batch sizes B", 1, S.BATCH_MAX, key="bs_range")
    sb.slider("K max (draft tokens)", 1, S.K_MAX_LIMIT, key="k_max")
    ss["fixed_k"] = min(int(ss.get("fixed_k", 3)), int(ss["k_max"]))
    sb.slider("Fixed K to compare against", 0, int(ss["k_max"]), key="fixed_k")


def _calibration_controls():
    """The calibration profile: a path, "none" (datasheet roofline) or None (the best shipped evidence)."""
    ss, sb = st.session_state, st.sidebar
    sb.subheader("Calibration")
    profiles = S.profile_files()
    options = [S.AUTO_PROFILE, S.NO_PROFILE] + list(profiles)
    if ss.get("calibration") not in options:
        ss["calibration"] = S.AUTO_PROFILE
    sb.selectbox("Calibration profile", options, key="calibration",
                 help="Best shipped: the device's measured kernel tables (simulator/data/profiles) or its published"
                      " prior; none = pure datasheet roofline; or a profile fitted by calibration.fit.")
    profile = "none" if ss["calibration"] == S.NO_PROFILE else None
    if ss["calibration"] not in (S.NO_PROFILE, S.AUTO_PROFILE):
        path = profiles[ss["calibration"]]
        try:
            measured_on = S.profile_hardware(path)
        except PlannerError as err:
            st.error(f"Calibration profile unusable, showing predictions on the best shipped evidence: {err}")
            measured_on = None
        if measured_on is not None:
            if measured_on != ss["hw_name"] and not ss["hw_custom"]:
                st.warning(f"Calibration profile {ss['calibration']} was measured on '{measured_on}', not on "
                           f"'{ss['hw_name']}': ignored, predictions below rest on the best shipped evidence.")
            else:
                profile = path
    return profile


@st.cache_data(max_entries=16, show_spinner=False)
def _uploaded_fit(data: bytes, name: str):
    return U.uploaded_deployment_fit(data, name)


def _deployment_fit_controls():
    """A ``calibration.fit_deployment`` file: (its stored path, the fit), or (None, None) without one or
    when it is rejected (the reason at the control; the page stays on the planner's own terms)."""
    sb = st.sidebar
    up = sb.file_uploader("Deployment fit (python -m calibration.fit_deployment ... --output fit.json)", type=["json"],
                          key="deployment_fit",
                          help="Engine terms fitted on 2-4 measured steps of your own deployment: step times, their"
                               " interval and (when the rows carried it) the measured acceptance replace the"
                               " planner's own for the model, GPU, TP, engine release and draft it was fitted on.")
    made = st.session_state.get("validation_fit")  # (name, bytes): fitted in the Validation tab
    if up is None and made is None:
        return None, None
    name, data = (up.name, up.getvalue()) if up is not None else made
    if up is None:
        sb.caption("Deployment fit made in the Validation tab from your measured rows:")
        if sb.button("Stop using it", key="drop_validation_fit"):
            st.session_state.pop("validation_fit", None)
            st.rerun()
    try:
        path, fit = _uploaded_fit(data, name)
    except PlannerError as err:
        sb.error(f"Deployment fit rejected: {err}. Showing the planner's own step times until it is fixed.")
        return None, None
    sb.caption(fit.label)
    return path, fit


def _operating_point_controls() -> None:
    ss, sb = st.session_state, st.sidebar
    sb.subheader("Operating point (roofline, breakdown)")
    lo, hi = ss["bs_range"]
    ss["insp_b"] = int(min(max(int(ss["insp_b"]), lo), hi))
    sb.number_input("Batch size B", min_value=int(lo), max_value=int(hi), step=1, key="insp_b")
    k_opts = ["K*"] + list(range(int(ss["k_max"]) + 1))
    if ss["insp_k"] not in k_opts:
        ss["insp_k"] = "K*"
    sb.selectbox("Draft length K", k_opts, key="insp_k", help="K* = the optimal K at this batch size.")


def sidebar() -> Inputs:
    """Draw the sidebar; return the scenario dict the controls describe."""
    _init_state()
    ss = st.session_state
    base_raw, base_controls = _scenario_controls()
    _hardware_controls()
    _engine_controls()
    model, model_ok = _model_controls()
    rates, source, acceptance_ok = acceptance_controls(base_raw, base_controls)
    _workload_controls(model, base_raw)
    profile = _calibration_controls()
    fit_path, fit = _deployment_fit_controls()
    own_rates, own_source = rates, source  # the controls' acceptance, for the page without the fit
    rank_tail = None  # a tree fit's rank tail goes with its top-1 rates
    physics_only = st.sidebar.checkbox(
        "Physics only (leave out the learned layer)", key="physics_only",
        help="The step times without the engine terms learned from published measurements"
             " (simulator/data/learned_step.json), as --physics-only on the command line; a deployment fit still applies.")
    if fit is not None and fit.acceptance_rates and ss["acc_mode"] in (S.ACC_IID, S.ACC_LIST):
        # measured on the deployment: wins over the preset / typed rates, not over an uploaded acceptance file
        rates = [round(min(float(r), S.MAX_RATE), 4) for r in fit.acceptance_rates]  # as the other controls show them
        source = f"measured on this deployment ({Path(fit.path).name})"  # the stored copy keeps the upload's name
        rank_tail = fit.acceptance_rank_tail
        st.sidebar.caption(f"Acceptance: {source}; the acceptance controls above are not used while the fit applies"
                           " (a fit refused for another deployment leaves them in use).")
    _operating_point_controls()

    controls = {k: ss[k] for k in base_controls}
    ss["_shadow"].update(controls, insp_b=ss["insp_b"], insp_k=ss["insp_k"])
    if (int(controls["ep"]) > 1 or controls["layout"] != "tp") and not load_model(model).num_experts:
        # expert parallelism needs experts: a dense target runs TP only (the controls keep their values)
        controls.update(ep=1, layout="tp")
        st.sidebar.caption(f"EP and the MoE layout apply to MoE models only: {load_model(model).name} is dense,"
                           " so it runs on TP alone.")
    usable = model_ok and acceptance_ok
    raw = S.scenario_raw(base_raw, controls, acceptance=rates, acceptance_source=source, model=model,
                         profile=profile, deployment_fit=fit_path, physics_only=physics_only,
                         rank_tail=rank_tail) if usable else None
    # a fit for another deployment is refused when the scenario is built: then neither its terms nor its
    # measured acceptance apply
    raw_without_fit = S.scenario_raw(base_raw, controls, acceptance=own_rates, acceptance_source=own_source,
                                     model=model, profile=profile, physics_only=physics_only) if usable else None
    return Inputs(raw=raw, raw_without_fit=raw_without_fit,
                  origin=f"dashboard (from scenarios/{ss['scenario']}.toml)", inspect_b=int(ss["insp_b"]),
                  inspect_k=None if ss["insp_k"] == "K*" else int(ss["insp_k"]), acceptance_note=source)
