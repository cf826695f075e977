"""The sidebar's acceptance controls: an i.i.d. rate, per-position rates or a measured file (any format the
planner reads, a vLLM bench JSON, a /metrics dump), else the draft method's preset, else the scenario's rates."""
from __future__ import annotations

import streamlit as st

from dashboard import state as S, uploads as U
from simulator.errors import PlannerError


@st.cache_data(max_entries=32, show_spinner=False)
def _bench_file(data: bytes, name: str):
    return U.acceptance_from_bench_json(data, name)


@st.cache_data(max_entries=32, show_spinner=False)
def _metrics_file(data: bytes, name: str):
    return U.acceptance_from_metrics(data, name)


@st.cache_data(max_entries=32, show_spinner=False)
def _file_acceptance(data: bytes, name: str):
    return U.acceptance_file(data, name)


# Each acceptance mode's controls return (rates or None, source text, usable).

def _cap_k_max(got) -> None:
    """K max no higher than the acceptance file supports (its max_supported_k, else the positions it measured),
    as predict caps it: rates measured up to K = n say nothing of position n + 1."""
    ss = st.session_state
    cap, reason = got.measured_cap()
    if cap is not None and int(ss.get("k_max", 1)) > cap:
        ss["k_max"] = cap
        st.sidebar.caption(f"K max lowered to {cap}: {reason}.")


def _iid_acceptance(preset) -> tuple[list | None, str, bool]:
    ss = st.session_state
    st.sidebar.slider("Acceptance rate a (i.i.d.)", 0.0, S.MAX_RATE, step=0.01, key="acc_rate")
    rates, source = [float(ss["acc_rate"])], "i.i.d. rate set in the dashboard"
    if preset and rates == preset["rates"][:1] and len(preset["rates"]) == 1:
        source = preset["source"]
    return rates, source, True


def _listed_acceptance(preset, base_raw: dict, base_controls: dict) -> tuple[list | None, str, bool]:
    ss = st.session_state
    rates, ok = None, True
    st.sidebar.text_input("Per-position rates a_1, a_2, ...", key="acc_list",
                          help="Conditional acceptance of draft position i given 1..i-1 accepted; the last repeats.")
    try:
        rates = S.parse_rates_text(ss["acc_list"])
    except PlannerError as err:  # shown at its control; the page stays on the preset / scenario rates
        st.sidebar.error(f"{err}. Showing the {'preset' if preset else 'scenario'}'s rates until it is fixed.")
        return None, "", ok
    same = ss["acc_list"].strip() == base_controls["acc_list"].strip()
    source = (base_raw.get("acceptance", {}).get("source", "scenario file") if same and not preset
              else "per-position rates entered in the dashboard")
    if preset and ss["acc_list"].strip() == S.rates_text(preset["rates"]).strip():
        source = preset["source"]
    return rates, source, ok


def _file_acceptance_controls() -> tuple[list | None, str, bool]:
    sb = st.sidebar
    up = sb.file_uploader("speculation_profile.json, vLLM bench / per-request JSON, /metrics or runs CSV",
                          type=["json", "jsonl", "txt", "prom", "metrics", "csv"], key="acc_any_file")
    if up is None:
        sb.info("No file uploaded yet: using the scenario's acceptance rates.")
        return None, "", True
    try:
        got = _file_acceptance(up.getvalue(), up.name)
        rates, source = [min(r, S.MAX_RATE) for r in got.conditional], got.source
        _cap_k_max(got)
        sb.caption(source)
    except PlannerError as err:  # shown at its control; the page stays on the preset / scenario rates
        sb.error(f"Acceptance file rejected: {err}. Showing the preset or scenario rates until it is fixed.")
        return None, "", True
    return rates, source, True


def _vllm_acceptance(bench: bool) -> tuple[list | None, str, bool]:
    """A vLLM bench serve JSON (``bench``) or a /metrics dump."""
    sb = st.sidebar
    up = sb.file_uploader("vLLM bench serve JSON" if bench else "vLLM /metrics text",
                          type=["json"] if bench else ["txt", "prom", "metrics", "log"], key="acc_file")
    if up is None:
        sb.info("No file uploaded yet: using the scenario's acceptance rates.")
        return None, "", True
    try:
        got = (_bench_file if bench else _metrics_file)(up.getvalue(), up.name)
    except PlannerError as err:  # shown at its control; the page stays on the preset / scenario rates
        sb.error(f"Acceptance file rejected: {err}. Showing the preset or scenario rates until it is fixed.")
        return None, "", True
    _cap_k_max(got)
    return list(got.conditional), f"measured: {'vLLM bench JSON' if bench else 'vLLM /metrics'} {up.name}", True


def acceptance_controls(base_raw: dict, base_controls: dict) -> tuple[list, str, bool]:
    """The acceptance source and its rates (else the draft method's preset, else the scenario's)."""
    ss, sb = st.session_state, st.sidebar
    sb.subheader("Acceptance")
    sb.radio("Acceptance from", S.ACC_MODES, key="acc_mode")
    mode = ss["acc_mode"]
    preset = ss.get("_acc_preset")
    if preset and preset["method"] != ss["draft_method"]:
        preset = None
    if preset:
        sb.caption(f"Preset for {preset['method']}: {preset['source']}")
    if mode == S.ACC_IID:
        rates, source, ok = _iid_acceptance(preset)
    elif mode == S.ACC_LIST:
        rates, source, ok = _listed_acceptance(preset, base_raw, base_controls)
    elif mode == S.ACC_FILE:
        rates, source, ok = _file_acceptance_controls()
    else:
        rates, source, ok = _vllm_acceptance(mode == S.ACC_BENCH)
    if rates is None and preset:
        rates, source = list(preset["rates"]), preset["source"]
    if rates is None:
        rates = S.parse_rates_text(base_controls["acc_list"])
        source = base_raw.get("acceptance", {}).get("source", "scenario file")

    sb.slider("Acceptance uncertainty +- (per rate)", 0.0, 0.3, step=0.01, key="acc_band",
              help="How far each rate may be off. K* becomes the K nearest the best across the band, and the "
                   "K* tab says where K* depends on acceptance.")
    return rates, source, ok
