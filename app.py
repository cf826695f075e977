"""DSD capacity planner dashboard.

    streamlit run app.py --server.address 127.0.0.1 --server.headless true --browser.gatherUsageStats false

A thin shell over the Python API (``simulator.plan.api``): the sidebar builds a scenario, the tabs draw
``Prediction.table`` / ``.grid_rows`` / ``.breakdown``. No physics here. Charts live in ``dashboard/charts.py``.
"""
from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path

import pandas as pd
import streamlit as st

st.set_page_config(page_title="DSD capacity planner", page_icon="⚡", layout="wide")

from calibration.measured import mape, match  # noqa: E402
from dashboard import compute, state as S, uploads as U  # noqa: E402
from dashboard.sidebar import sidebar  # noqa: E402
from simulator.errors import PlannerError  # noqa: E402
from simulator.specs.deployment_fit import DeploymentMismatch  # noqa: E402
from simulator.specs.drafts import verify_drafts  # noqa: E402
from simulator.plan.advice import advice_lines  # noqa: E402
from simulator.plan.speedup_trust import decision_risk_text, gain_at_risk_text  # noqa: E402

log = logging.getLogger("dsd.dashboard")


def _charts():
    """dashboard.charts, imported on first use: Altair takes ~0.5 s to import on a small CPU, and the
    first headline does not need it."""
    from dashboard import charts

    return charts
TABS = ["K* vs batch size", "Goodput heatmap", "Plain vs fixed K vs DSD", "Roofline", "MoE experts",
        "Operator breakdown", "Validation", "K* by context", "Downloads"]


# --- caches (keyed on the scenario JSON; Prediction objects are shared, not copied) --------------
@st.cache_resource(max_entries=64, show_spinner=False)
def cached_prediction(key: str, origin: str):
    return compute.prediction(key, origin)


@st.cache_resource(max_entries=256, show_spinner=False)
def cached_spec(key: str, origin: str, name: str, b: int = 1, k: int = 0) -> dict:
    """Vega-Lite dict of one chart; built once per (scenario, chart, operating point)."""
    return compute.chart_spec(compute.build_chart(cached_prediction(key, origin), name, b, k))


@st.cache_resource(max_entries=256, show_spinner=False)
def cached_breakdown(key: str, origin: str, b: int, k: int):
    return cached_prediction(key, origin).breakdown(b, k)


@st.cache_resource(max_entries=32, show_spinner=False)
def cached_validation(key: str, origin: str, digest: str, data: bytes, name: str):
    measured = U.read_measured_csv(data, name)
    predicted = compute.predicted_points(cached_prediction(key, origin), measured)
    return match(predicted, measured)


def png_button(label: str, p, name: str, b: int, k: int, file_name: str) -> None:
    """A download button that builds and renders the chart to PNG only when clicked."""
    def render() -> bytes:
        return _charts().to_png(compute.build_chart(p, name, b, k))
    download(label, render, file_name, "image/png", f"dl_png_{name}")


def download(label: str, data, file_name: str, mime: str, key: str, width: str = "stretch") -> None:
    """A download button that does not rerun the page: a rerun registers every deferred download afresh and
    drops the old ones, so a click on another button while it ran got no file ('Deferred file ... not found')."""
    st.download_button(label, data, file_name=file_name, mime=mime, key=key, on_click="ignore", width=width)


class Page:
    """What every tab needs: the prediction, its cache key and the operating point (B, K)."""

    def __init__(self, p, key: str, origin: str, b: int, k: int):
        self.p, self.key, self.origin, self.b, self.k = p, key, origin, b, k

    def chart(self, name: str, at_point: bool = False) -> None:
        b, k = (self.b, self.k) if at_point else (1, 0)
        spec = cached_spec(self.key, self.origin, name, b, k)
        st.vega_lite_chart(spec=dict(spec), width="stretch", key=f"chart_{name}")


# --- page ----------------------------------------------------------------------------------------
def headline(p) -> None:
    """The answer first: the K* schedule in words, then K* at the smallest B, and the largest B whose
    memory fits in the evaluated table (not the slider's maximum)."""
    t = p.table
    fits = t[t["fits_memory"]]
    st.markdown(f"**K schedule:** {p.schedule_text()}")
    for note in p.notes():
        st.caption(f"⚠ {note}")
    if fits.empty:
        st.warning("No batch size in the range fits in device memory: add GPUs (TP), quantize, or shorten the context.")
        return
    c = st.columns(4)
    first = fits.iloc[0]
    k_run = first.get("k_schedule", first.k_opt)  # what the engine files run there: K* or the schedule's range
    c[0].metric(f"K* at B = {int(first.batch_size)}", int(first.k_opt) if pd.isna(k_run) or k_run == first.k_opt
                else f"{int(first.k_opt)} (schedule {int(k_run)})",
                help="K* is the best K at this batch size alone; the schedule (and the engine files) may run a"
                     " neighbour's K within the schedule tolerance for fewer ranges.")
    c[1].metric(f"Speedup vs plain at B = {int(first.batch_size)}", f"{first.speedup_vs_plain:.2f}×")
    c[2].metric(f"Time per token at B = {int(first.batch_size)}", f"{first.token_latency_ms:.2f} ms",
                help=f"step time {first.itl_ms:.2f} ms / {first.acceptance_length:.2f} tokens per step")
    largest = int(fits.batch_size.max())
    evaluated = int(t.batch_size.max())
    c[3].metric("Largest B that fits memory", largest if largest < evaluated else f"≥ {largest}",
                help=f"{p.scenario.deployment.memory_utilization:.0%} of "
                     f"{p.scenario.hardware.memory_bytes / 1e9:.0f} GB per GPU"
                     + ("" if largest < evaluated else f"; every evaluated B up to {evaluated} fits: widen the range"
                                                       " to find the limit"))


def provenance_line(p) -> None:
    pv = p.provenance
    st.caption(f"**Prediction rests on** step times: {pv['step_time_source']} · **how far to trust them:**"
               f" {pv['uncertainty']} · **serving:** {pv['serving_check']} ·"
               f" **speedups:** {pv['speedup_uncertainty']} · acceptance: {pv['acceptance']} · "
               f"hardware: {pv['hardware']} · model: {pv['model']} · {pv['deployment']} · draft: {pv['draft']} · "
               f"context: {pv['context_len']} tokens")


def tab_kstar(pg: Page) -> None:
    pg.chart("k_star")
    st.caption("K* is the schedule with the fewest ranges of constant K whose goodput AL(K) / ITL(B, K) is within"
               f" {pg.p.scenario.schedule_tolerance:.0%} of the best K at every batch size, among the K whose memory"
               f" fits; K = 0 is plain decoding. {pg.p.schedule_note().split('; --schedule')[0]}.")
    t, sc = pg.p.table, pg.p.scenario
    needs = t.break_even_acceptance_length.dropna()
    if not needs.empty:
        worst = t.loc[needs.idxmax()]
        st.caption(f"Fixed K = {sc.fixed_k} reaches acceptance length {t.fixed_acceptance_length.iloc[0]:.2f}; it ties "
                   f"plain decoding where the acceptance length reaches step time (K) / step time (plain): "
                   f"{needs.iloc[0]:.2f} at B = {int(t.batch_size.iloc[needs.index[0]])}, "
                   f"{worst.break_even_acceptance_length:.2f} at B = {int(worst.batch_size)} "
                   "(column 'fixed K needs AL').")
    dependence = pg.p.acceptance_dependence_text()
    if dependence:
        st.caption(dependence)
    risk = gain_at_risk_text(t)
    if risk:
        st.caption(f"Note: {risk}.")
    decision = decision_risk_text(t, sc.decision_quantile)
    if decision:
        st.caption(f"Decision: {decision}.")
    st.dataframe(compute.kstar_view(t), hide_index=True, width="stretch", height=260)
    changes = compute.k_changes_view(pg.p)
    if not changes.empty:
        n = changes["from B"].nunique()
        with st.expander(f"Where K* changes, and why ({n} change{'s' if n != 1 else ''})"):
            st.caption("At each batch size where K* changes: what the old and the new K give over plain decoding"
                       " there (acceptance length / step-time ratio), which term bounds that step and, for MoE,"
                       " how many experts each loads; a change where the CUDA graphs pad plain and speculative"
                       " batches to different sizes comes from the padding, not the work.")
            st.dataframe(changes, hide_index=True, width="stretch")
    advice = advice_lines(pg.p.engine_advice())  # nothing (no heading) when no setting costs goodput
    if advice:
        head = advice[0].split(" (")[0]  # "engine settings that cost goodput at this load"
        st.markdown(f"**{head[:1].upper()}{head[1:]}:**")
        for line in advice[1:]:
            st.markdown(f"- {line.strip()}")


def tab_heatmap(pg: Page) -> None:
    rel = st.toggle("Colour relative to the best K at each batch size", key="heat_rel",
                    help="Shows how flat the optimum is: cells near 100% are almost as good as K*.")
    pg.chart("heatmap_rel" if rel else "heatmap")


def tab_policy(pg: Page) -> None:
    pg.chart("policy")
    pg.chart("gain")
    t = pg.p.table.dropna(subset=["speedup_vs_fixed"])
    if not t.empty:
        best = t.loc[t["speedup_vs_fixed"].idxmax()]
        st.caption(f"Largest gain of dynamic K* over fixed K = {pg.p.scenario.fixed_k}: "
                   f"{best.speedup_vs_fixed:.2f}× at B = {int(best.batch_size)} (K* = {int(best.k_opt)}).")


def tab_roofline(pg: Page) -> None:
    pg.chart("roofline", at_point=True)
    hw = pg.p.scenario.hardware
    drafts = int(verify_drafts(pg.p.scenario.draft, pg.k))  # a draft tree verifies its nodes, not K
    st.caption(f"Each point is one operator of the verify step at B = {pg.b}, K = {pg.k} "
               f"(T = {pg.b * (drafts + 1)} tokens). On the slope: memory-bound; on the flat roof: compute-bound. "
               f"Ridge point of {hw.name}: {hw.ridge_point:,.0f} FLOP/byte (bf16). Datasheet-only predictions sit "
               "on the roof; a calibration profile moves them below it. Set B and K in the sidebar.")


def tab_moe(pg: Page) -> None:
    if not compute.is_moe(pg.p):
        st.info(f"{pg.p.scenario.model.name} is a dense model: no experts. Pick an MoE model (qwen3-235b-a22b, "
                "qwen3-30b-a3b, mixtral-8x7b, deepseek-v3, gpt-oss-120b) or the qwen3-235b-h200 scenario.")
        return
    pg.chart("experts")
    pg.chart("expert_share")
    st.caption("Distinct experts of B sequences x (K+1) positions: at small B each extra draft token loads new "
               "experts (fewer when adjacent positions re-use experts, rho); once nearly all are loaded, extra K "
               "is almost free until the step turns compute-bound.")
    why = pg.p.k_rise_attribution()
    if why:
        st.markdown(f"**Why K\\* moves:** {why}")
    st.markdown(f"**Layouts at B = {pg.b}**")
    st.dataframe(compute.layout_table(pg.p, pg.b), hide_index=True, width="stretch")


def tab_breakdown(pg: Page) -> None:
    pg.chart("breakdown", at_point=True)
    st.dataframe(cached_breakdown(pg.key, pg.origin, pg.b, pg.k), hide_index=True, width="stretch")


def published_rows(pg: Page) -> None:
    """The published GPU measurements behind this device's uncertainty band (calibration/data/transfer)."""
    from calibration.transfer import published_rows_for

    hw = pg.p.scenario.hardware
    rows = published_rows_for(hw.name)
    if rows.empty:
        st.caption(f"No published end-to-end measurement on {hw.name} is scored in the corpus yet.")
        return
    err = rows["error"].abs()
    with st.expander(f"Published measurements on {hw.name}: {len(rows)} rows, planner off by {err.mean():.1%} "
                     f"on average (worst {err.max():.0%})"):
        st.caption("From calibration/data/transfer/transfer_rows.csv (`make transfer`); sources and locators "
                   "in calibration/data/published/. Measured and planner in ms per step, or x for speedups.")
        st.dataframe(rows.assign(error=(rows["error"] * 100).round(1)).rename(columns={"error": "error %"}),
                     hide_index=True, width="stretch")


def tab_validation(pg: Page) -> None:
    published_rows(pg)
    st.markdown("Upload measured engine runs (CSV with `batch_size, k, itl_ms` and optionally `goodput_per_seq`, "
                "as written by `python -m calibration.engine` or `calibration.vllm_io`). Rows are matched on "
                "(batch_size, k); repeated points are reduced to their median. The prediction uses the "
                "scenario in the sidebar, its acceptance included.")
    up = st.file_uploader("Measured runs (CSV)", type=["csv"], key="measured_csv")
    if up is None:
        return
    data = up.getvalue()
    try:
        m = cached_validation(pg.key, pg.origin, hashlib.sha256(data).hexdigest(), data, up.name)
    except PlannerError as err:
        st.error(f"Measured CSV rejected: {err}")
        return
    c = st.columns(3)
    c[0].metric("Matched (B, K) points", len(m))
    c[1].metric("ITL error (MAPE)", f"{mape(m['itl_err']):.1%}")
    gp = mape(m["goodput_err"])
    c[2].metric("Goodput error (MAPE)", "n/a" if gp != gp else f"{gp:.1%}")
    left, right = st.columns(2)
    with left:
        st.altair_chart(_charts().parity_chart(m, "itl_ms", "ITL (ms per step)"), width="stretch", key="chart_val_itl")
    with right:
        if m["goodput_per_seq_meas"].notna().any():
            st.altair_chart(_charts().parity_chart(m, "goodput_per_seq", "goodput (tokens/s per seq)"), width="stretch",
                            key="chart_val_goodput")
        else:
            st.info("The CSV has no goodput_per_seq column: only ITL is compared.")
    st.dataframe(m, hide_index=True, width="stretch")
    fit_measured_rows(pg, data, up.name)


def fit_measured_rows(pg: Page, data: bytes, name: str) -> None:
    """Correct the planner with the uploaded rows: the engine terms of `calibration.fit_deployment`, fitted
    here, used for every prediction on the page (the sidebar's deployment fit) and offered as its file."""
    st.markdown("**Correct the planner with these rows** (`python -m calibration.fit_deployment`): a kernel-time scale"
                " and host times per step, sequence and speculative token, as many as the rows identify, with 90%"
                " intervals; the predictions then rest on them, and it says which (B, K) to measure next.")
    if st.button("Fit this deployment's engine terms to these rows", key="fit_rows"):
        try:
            fit_name, fit_bytes, text, caveats = U.fit_from_measured(pg.p.scenario, data, name)
        except PlannerError as err:
            st.error(f"Fit refused: {err}")
            return
        st.session_state["validation_fit"] = (fit_name, fit_bytes)
        st.session_state["validation_fit_report"] = text
        st.session_state["validation_fit_caveats"] = caveats
        st.rerun()
    made = st.session_state.get("validation_fit")
    if made is None:
        return
    st.code(st.session_state.get("validation_fit_report", ""), language=None)
    for caveat in st.session_state.get("validation_fit_caveats", []):  # what the command prints as 'warning:'
        st.warning(f"Fit caveat: {caveat}")
    download(f"Download {made[0]} (use it with --deployment)", made[1], made[0], "application/json",
             "dl_validation_fit", width="content")


def context_axis(p) -> list[int]:
    """The context lengths of the K* map: the scenario's context_lens, else powers of 4 from 512 up to
    the model's trained length (at most 131072); the text box on the 'K* by context' tab overrides it."""
    text = st.session_state.get("ctx_lens")
    if text:
        from simulator.specs.scenario import parse_context_lens
        return [int(x) for x in parse_context_lens(text, "context lengths")]
    return p.default_context_lens()


@st.cache_resource(max_entries=64, show_spinner=False)
def cached_k_map(key: str, origin: str, lens: tuple):
    return cached_prediction(key, origin).kstar_frame(list(lens))


@st.cache_resource(max_entries=128, show_spinner=False)
def cached_export(key: str, origin: str, fmt: str, version: str | None, lens: tuple, planned: tuple | None = None):
    """(engine file text, Markdown table, warnings, which batch sizes its one K was chosen for) or
    (None, error line, [], "")."""
    p = cached_prediction(key, origin)
    try:
        e = p.export(fmt, version, context_lens=list(lens) if fmt == "vllm-ctx" else None, planned_batch_size=planned)
    except PlannerError as err:
        return None, str(err), [], ""
    return e.json(), e.markdown(), e.warnings, e.chosen_for


def planned_batches(p) -> tuple | None:
    """The batch sizes a draft of one fixed K on SGLang (a tree or block draft) is chosen for: a range slider over
    the batch sizes that fit, every one of them by default (None: the draft is not of one fixed K there)."""
    d, engine = p.scenario.draft, p.scenario.engine
    if engine is None or engine.name != "sglang" or not (d.is_tree or d.is_block):
        return None
    fits = [int(b) for b in p.table.loc[p.table.fits_memory, "batch_size"]]
    if len(fits) < 2:
        return None
    lo, hi = st.select_slider(
        "Batch sizes you will serve at (SGLang runs one K for this draft)", options=fits, value=(fits[0], fits[-1]),
        key="planned_batch", help="the one K of the SGLang launch flags: K* where both ends meet, else the K keeping"
        " most of each batch size's best goodput over the range (each doubling of batch size weighted equally);"
        " predict --planned-batch on the command line")
    return None if (lo, hi) == (fits[0], fits[-1]) else (lo if lo == hi else (lo, hi))


def tab_context(pg: Page) -> None:
    p = pg.p
    st.text_input("Context lengths (tokens)", key="ctx_lens", placeholder="512,2048,8192,32768,131072",
                  help="a list, 512-131072 (powers of two) or 512-131072:16 (16 log-spaced points); the scenario's"
                       " context length is always included")
    try:
        lens = tuple(context_axis(p))
        k2d = cached_k_map(pg.key, pg.origin, lens)
    except PlannerError as err:
        st.error(str(err))
        return
    sub = f"{p.scenario.name}: acceptance {p.provenance['acceptance']}"
    if p.scenario.acceptance_context is not None:
        sub += f"; {p.scenario.acceptance_context.label}"
    else:
        sub += "; acceptance assumed not to depend on context"
    st.altair_chart(_charts().kstar_context_heatmap(k2d, sub), width="stretch", key="chart_kmap")
    st.caption("K*(B, L) = argmax over K of goodput at batch size B and context length L: longer contexts make the"
               " verify pass attention-bound. Only the proposal format vLLM PR #48944 (Downloads: vLLM 5-item) can"
               " hold a context axis; the released formats encode the scenario's context length.")
    st.dataframe(k2d, width="stretch", height=260)


EXPORTS = [  # (engine, label, format, version, file suffix)
    ("vllm", "vLLM speculative config (JSON)", "vllm", None, "vllm.json"),
    ("vllm", "vLLM 5-item context-aware schedule, PR #48944 proposal (JSON)", "vllm-ctx", None, "vllm-ctx.json"),
    ("trtllm", "TensorRT-LLM 1.2.x draft_len_schedule (JSON)", "trtllm", "1.2.1", "trtllm-1.2.json"),
    ("trtllm", "TensorRT-LLM 1.3.0rc8+ draft_len_schedule (JSON)", "trtllm", "1.3.0rc8", "trtllm-1.3.json"),
    ("sglang", "SGLang 0.5.14+ adaptive config (JSON)", "sglang", None, "sglang-adaptive.json"),
    ("sglang", "SGLang 0.5.13 adaptive config, no K = 0 (JSON)", "sglang", "0.5.13", "sglang-0.5.13-adaptive.json"),
    ("sglang", "SGLang DSpark step-cost table, 0.5.16+ (JSON)", "sglang-sps", None, "sglang-sps.json"),
]


def engine_exports(p) -> list[tuple]:
    """The engine files of the scenario's engine (the sidebar's selector), as (label, format, version, suffix)."""
    engine = p.scenario.engine.name if p.scenario.engine is not None else ""
    return [row[1:] for row in EXPORTS if row[0] == engine]


def tab_downloads(pg: Page) -> None:
    p = pg.p
    name = p.scenario.name
    try:
        lens = tuple(context_axis(p))
    except PlannerError as err:
        st.error(str(err))
        lens = (p.scenario.context_len,)
    c1, c2 = st.columns(2)
    with c1:
        engine = p.scenario.engine
        shown = engine_exports(p)
        st.markdown(f"**{S.engine_label(engine.name) if engine else 'Engine'} schedules** (each for the engine"
                    " version named; `--export-version` on the command line)")
        if not shown:
            st.caption(f"{engine.display_name if engine else 'This engine'} reads no schedule file: pick vLLM, SGLang"
                       " or TensorRT-LLM as the serving engine in the sidebar for its files.")
        tables, warned = [], set()
        planned = planned_batches(p)
        for label, fmt, version, suffix in shown:
            text, md, warns, chosen_for = cached_export(pg.key, pg.origin, fmt, version, lens,
                                                        planned if fmt == "sglang" else None)
            if fmt == "sglang" and (p.scenario.draft.is_tree or p.scenario.draft.is_block):  # one fixed K (as
                # Prediction.export), named so where the file is refused too
                label = label.split(" adaptive config")[0] + " launch flags: one fixed K for this draft (JSON)"
                suffix = suffix.replace("adaptive", "flags")
            if text is None:
                st.caption(f"{label}: not available: {md}")
                continue
            download(label, text, f"{name}-{suffix}", "application/json", f"dl_{suffix}")
            if chosen_for:
                st.caption(chosen_for)
            for w in warns:  # what predict prints as 'warning:' (a placeholder draft path, the grid's end), once
                if w not in warned:
                    st.caption(f"⚠ {w}")
                    warned.add(w)
            tables.append(md)
        if tables:
            download("All engine schedules as Markdown tables (MD)", "\n".join(tables),
                     f"{name}-engine-schedules.md", "text/markdown", "dl_md")
        st.markdown("**Data**")
        download("Goodput grid (CSV)", lambda: p.grid_rows.to_csv(index=False), f"{name}-grid.csv", "text/csv",
                 "dl_grid")
        download("K* table (CSV)", lambda: p.table.to_csv(index=False), f"{name}-kstar.csv", "text/csv", "dl_table")
        download("K* by batch size x context length (CSV)", lambda: cached_k_map(pg.key, pg.origin, lens).to_csv(),
                 f"{name}-kstar-by-context.csv", "text/csv", "dl_kmap")
        download("Prediction with provenance (JSON)", lambda: json.dumps(p.to_dict(), indent=2),
                 f"{name}-prediction.json", "application/json", "dl_dict")
        if tables:
            with st.expander("What the engine will do (Markdown)"):
                for md in tables:
                    st.markdown(md)
    with c2:
        st.markdown(f"**Charts (PNG, rendered on click; roofline and breakdown at B = {pg.b}, K = {pg.k})**")
        names = [("K* vs batch size", "k_star"), ("Goodput heatmap", "heatmap"), ("Tokens/s per user", "policy"),
                 ("DSD gain", "gain"), ("Roofline", "roofline"), ("Operator breakdown", "breakdown")]
        if compute.is_moe(p):
            names += [("MoE experts touched", "experts"), ("MoE expert time share", "expert_share")]
        for label, chart_name in names:
            png_button(f"{label} (PNG)", p, chart_name, pg.b, pg.k, f"{name}-{chart_name.replace('_', '-')}.png")


TAB_VIEWS = dict(zip(TABS, [tab_kstar, tab_heatmap, tab_policy, tab_roofline, tab_moe, tab_breakdown,
                            tab_validation, tab_context, tab_downloads]))


def main() -> None:
    st.title("Speculative decoding capacity planner")
    inputs = sidebar()
    if inputs.raw is None:
        return
    key = S.scenario_key(inputs.raw)
    try:
        try:
            p = cached_prediction(key, inputs.origin)
        except DeploymentMismatch as err:  # a fit for another deployment: said, and the planner's own terms
            stored = inputs.raw["calibration"]["deployment"]  # the upload's copy: name the file, not the copy
            st.warning(f"Deployment fit ignored: {str(err).replace(stored, Path(stored).name)}")
            key = S.scenario_key(inputs.raw_without_fit)
            p = cached_prediction(key, inputs.origin)
        k = compute.inspect_k(p, inputs.inspect_b, inputs.inspect_k)
    except PlannerError as err:
        st.error(str(err))
        return
    provenance_line(p)
    headline(p)
    pg = Page(p, key, inputs.origin, inputs.inspect_b, k)
    # on_change="rerun": only the open tab's content runs (and builds its charts)
    for tab, (label, view) in zip(st.tabs(TABS, key="view", on_change="rerun"), TAB_VIEWS.items()):
        if tab.open:
            with tab:
                view(pg)


def planner_page() -> None:
    try:
        main()
    except PlannerError as err:
        st.error(str(err))
    except Exception as err:  # never show a traceback; the log keeps it
        log.exception("dashboard failed")
        st.error(f"Internal error ({type(err).__name__}): {err}. Please report it with the scenario you used.")


# the pages as the sidebar names them (without st.navigation the first would read "app", this file's name)
st.navigation([st.Page(planner_page, title="Capacity planner", default=True),
               st.Page("pages/1_Fleet_sweep.py", title="Fleet sweep", url_path="Fleet_sweep")]).run()
