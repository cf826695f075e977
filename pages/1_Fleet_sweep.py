"""Fleet sweep page: open a sweep result table (results.parquet / results.csv from
``python -m simulator.sweep``) and plot its Pareto front of $ per M output tokens vs latency."""
from __future__ import annotations

import hashlib
import logging

import streamlit as st

from dashboard import sweep_view as V
from dashboard.server_files import RESULTS_ENV, read_results_table, results_dir
from simulator.errors import PlannerError

st.set_page_config(page_title="Fleet sweep", page_icon="⚡", layout="wide")
st.title("Fleet sweep")
st.caption("Open the table a sweep wrote (`python -m simulator.sweep SPEC.toml` -> OUTPUT_DIR/results.parquet)"
           " and compare configurations on cost and latency.")

upload = st.file_uploader("Sweep table (Parquet or CSV)", type=["parquet", "csv"], key="sweep_upload")
path = st.text_input(f"... or a path under the results folder {results_dir()} (a table or a sweep's output folder)",
                     key="sweep_path", help=f"Only tables under this folder open; start the dashboard with {RESULTS_ENV}"
                                            "=FOLDER to open another one.")
df = None
try:
    if upload is not None:
        df = V.read_table(upload, upload.name)
    elif path.strip():
        name, data = read_results_table(path)
        df = V.read_table(data, name)
except PlannerError as err:
    st.error(str(err))

if df is None:
    st.info("No table loaded yet.")
    st.stop()


def show(df) -> None:
    """Filters, the Pareto chart and the front of a loaded table."""
    latencies = [c for c in V.LATENCIES if c in df.columns]
    if not latencies:
        st.error(f"The table has none of the latency columns {', '.join(V.LATENCIES)}: not a sweep's results table.")
        return
    cols = st.columns(4)
    models = sorted(df.model.astype(str).unique())
    traffic = sorted(df.traffic.astype(str).unique()) if "traffic" in df.columns else []
    policies = sorted(df.policy.astype(str).unique())
    # the filters belong to the table's choices: another table starts with all of its own selected, not with
    # the last table's picks (a table of other models opened on an empty chart, "0 rows")
    table = hashlib.sha256(repr((models, traffic, policies, latencies)).encode()).hexdigest()[:12]
    pick = cols[0].multiselect("Models", models, default=models, key=f"sweep_models_{table}")
    pick_t = cols[1].multiselect("Traffic", traffic, default=traffic, key=f"sweep_traffic_{table}") if traffic else []
    pick_p = cols[2].multiselect("Policies", policies, default=policies, key=f"sweep_policies_{table}")
    latency = cols[3].selectbox("Latency axis", latencies,
                                format_func=V.LATENCIES.get, key=f"sweep_latency_{table}")
    view = df[df.model.astype(str).isin(pick) & df.policy.astype(str).isin(pick_p)]
    if traffic:
        view = view[view.traffic.astype(str).isin(pick_t)]

    front = V.pareto_frame(view, latency)
    st.altair_chart(V.pareto_chart(view, latency), width="stretch")
    st.markdown(f"**{len(view)}** rows, **{len(front)}** meet the target, **{int(front.pareto.sum())}** on the front.")
    shown = [c for c in ["model", "config", latency, V.COST, "fleet_usd_per_hour", "gpus", "gpus_band",
                        "max_load_per_replica", "rel_error", "uncertainty"] if c in front.columns]
    # headers say what each number is: the cost column of a table from before the fleet's $/M holds one replica's
    named = {V.COST: V.cost_title(df), latency: V.LATENCIES[latency]}
    st.dataframe(front[front.pareto].sort_values(["model", latency])[shown].rename(columns=named), hide_index=True,
                 width="stretch")
    with st.expander("All rows"):
        st.dataframe(view.rename(columns=named), hide_index=True, width="stretch")


try:
    show(df)
except Exception as err:  # never a traceback in the browser; the server log keeps it
    logging.getLogger("dsd.dashboard").exception("fleet sweep page failed")
    st.error(f"Internal error ({type(err).__name__}) on this table. Please report it with the table you used.")
