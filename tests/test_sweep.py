"""Fleet sweeps (simulator.sweep): validation, filters, resume after a kill, local pool vs Ray."""
from __future__ import annotations

import ast
import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from simulator.errors import PlannerError
from simulator.sweep import parse_sweep, pareto_flags, read_journal, run_sweep
from simulator.sweep.backends import Progress
from cli_inprocess import run_main

ROOT = Path(__file__).resolve().parent.parent

# 6 combinations: h100 tp=2 does not fit Command A's weights (filtered), 5 tasks x 2 policies
SPEC = """
name = "sweep-test"
[sweep]
base = "sizing-dense-command-a"
models = ["command-a"]
hardware = ["h100-sxm", "h200"]
tp = [2, 4, 8]
policies = ["plain", "dsd"]
[traffic.chat]
rate_per_s = 8.0
prompt_len = 512
output_len = 100
[run]
n_requests = 20
search_steps = 0
duration_s = 2.0
max_requests = 60
workers = 2
[output]
formats = ["parquet", "csv", "markdown", "html"]
"""


def _spec(tmp_path: Path, text: str = SPEC, name: str = "spec.toml") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def _table(out: Path) -> pd.DataFrame:
    return pd.read_parquet(out / "results.parquet")


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The sweep run once, uninterrupted, on the local pool: (spec path, output dir)."""
    tmp = tmp_path_factory.mktemp("sweep-ref")
    spec = _spec(tmp)
    res = run_sweep(spec, output_dir=tmp / "out", progress=False)
    assert res.complete and res.computed == 5 and res.backend == "local"
    return spec, tmp / "out"


def test_sweep_writes_tidy_table_with_provenance_and_uncertainty(reference):
    _, out = reference
    df = _table(out)
    assert len(df) == 10 and set(df.policy) == {"plain", "dsd"}
    assert (df.status == "ok").all()
    for col in ("usd_per_m_output_tokens", "tpot_p50_s", "gpus", "rel_error", "uncertainty", "load_band_low",
                "prov_step_time_source", "prov_hardware", "grid_k_opt_b1", "pareto", "task"):
        assert col in df.columns, col
    assert df.uncertainty.str.len().gt(0).all() and df.prov_hardware.str.len().gt(0).all()
    csv = pd.read_csv(out / "results.csv")
    assert list(csv.columns) == list(df.columns) and len(csv) == len(df)
    assert np.allclose(csv.usd_per_m_output_tokens, df.usd_per_m_output_tokens, rtol=1e-12, equal_nan=True)
    filtered = pd.read_csv(out / "filtered.csv")
    assert list(filtered["filter"]) == ["memory"] and "exceed" in filtered.reason[0]
    md = (out / "summary.md").read_text()
    assert "Pareto front: command-a" in md and "Filtered combinations" in md
    assert (out / "summary.html").read_text().startswith("<!doctype html>")
    assert df.pareto.any()
    assert len(read_journal(out / "journal.jsonl")) == 5


def test_resume_with_task_budget_computes_nothing_twice(reference, tmp_path):
    spec, ref_out = reference
    out = tmp_path / "out"
    first = run_sweep(spec, output_dir=out, max_tasks=2, progress=False)
    assert not first.complete and first.computed == 2 and not (out / "results.parquet").exists()
    second = run_sweep(spec, output_dir=out, progress=False)
    assert second.complete and second.resumed == 2 and second.computed == 3
    lines = (out / "journal.jsonl").read_text().splitlines()
    assert len(lines) == 5 and len({json.loads(x)["key"] for x in lines}) == 5
    third = run_sweep(spec, output_dir=out, progress=False)  # all done: nothing runs again
    assert third.computed == 0 and third.resumed == 5
    pd.testing.assert_frame_equal(_table(out), _table(ref_out))


def test_killed_sweep_resumes_to_the_same_table(reference, tmp_path):
    spec, ref_out = reference
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "simulator.sweep", str(spec), "--output-dir", str(out), "--workers", "1"]
    proc = subprocess.Popen(cmd, cwd=ROOT, stderr=subprocess.PIPE, text=True)
    journal = out / "journal.jsonl"
    deadline = time.time() + 60
    while time.time() < deadline and proc.poll() is None:
        if journal.exists() and len(journal.read_text().splitlines()) >= 1:
            break
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL, "the sweep finished before it could be killed"
    assert not (out / "results.parquet").exists()
    with journal.open("a") as f:  # and a line torn mid-write, as a kill inside write() leaves
        f.write('{"key": "torn", "rows": [')
    n_before = len(read_journal(journal))
    assert 1 <= n_before < 5
    rerun = run_main(*cmd[2:], cwd=ROOT)  # the resume in this process: the killed run above was the real one
    assert rerun.returncode == 0, rerun.stderr
    assert f"({n_before} from journal)" in rerun.stderr and "ETA" in rerun.stderr and "5/5 tasks" in rerun.stderr
    pd.testing.assert_frame_equal(_table(out), _table(ref_out))
    keys = [json.loads(x)["key"] for x in journal.read_text().splitlines() if x.startswith('{"key"') and x.endswith("}")]
    assert len(keys) == len(set(keys)) == 5  # nothing computed twice


@pytest.mark.parametrize("edit, message", [
    ('models = ["command-a"]', ('models = ["gpt-9"]', "unknown model 'gpt-9'")),
    ('hardware = ["h100-sxm", "h200"]', ('hardware = ["h100-sxm", "h2000"]', "unknown hardware 'h2000'")),
    ('tp = [2, 4, 8]', ('tp = [2, 0]', "tp value 0")),
    ('policies = ["plain", "dsd"]', ('policies = ["plain", "turbo"]', "unknown policy 'turbo'")),
    ('models = ["command-a"]', ('models = ["command-a"]\ndtype = ["bf17"]', "dtype 'bf17' is not a dtype")),
    ('models = ["command-a"]', ('models = ["command-a"]\ntraffic = ["bulk"]', "traffic 'bulk' names no")),
    ('models = ["command-a"]', ('models = ["command-a"]\nengine = ["vllmx"]', "engine 'vllmx'")),
    ('n_requests = 20', ('n_requests = 5', "n_requests must be >= 20")),
])
def test_bad_axis_value_is_refused_before_anything_runs(tmp_path, edit, message):
    old, (new, expected) = edit, message
    spec = _spec(tmp_path, SPEC.replace(old, new))
    out = tmp_path / "out"
    r = run_main("simulator.sweep", str(spec), "--output-dir", str(out), cwd=ROOT)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and expected in lines[0], r.stderr
    assert not out.exists()


def test_layout_and_memory_filters():
    spec_text = SPEC.replace("tp = [2, 4, 8]", "tp = [2, 5, 8]")
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        spec = parse_sweep(_spec(Path(d), spec_text))
    kinds = {(f["hardware"], f["tp"]): f["filter"] for f in spec.filtered}
    assert kinds[("h100-sxm", 5)] == kinds[("h200", 5)] == "layout"
    assert kinds[("h100-sxm", 2)] == "memory"
    assert any("does not divide" in f["reason"] for f in spec.filtered)
    assert len(spec.tasks) == 3 and len({t.key for t in spec.tasks}) == 3



def test_activation_dtype_axis_means_what_predict_means(tmp_path):
    """act_dtype is a sweep axis like dtype and kv_dtype (issue 24: one meaning per setting): fp8 weights x
    (bf16, fp8) activations give two scenarios whose deployments carry them; a bad value is one line."""
    text = SPEC.replace('hardware = ["h100-sxm", "h200"]', 'hardware = ["h200"]').replace(
        "tp = [2, 4, 8]", 'tp = [8]\ndtype = ["fp8"]\nact_dtype = ["bf16", "fp8"]')
    spec = parse_sweep(_spec(tmp_path, text))
    assert [(t.axes["dtype"], t.axes["act_dtype"]) for t in spec.tasks] == [("fp8", "bf16"), ("fp8", "fp8")]
    assert [t.raw["precision"]["activations"] for t in spec.tasks] == ["bf16", "fp8"]
    assert len({t.key for t in spec.tasks}) == 2
    with pytest.raises(PlannerError, match="act_dtype 'fp7' is not a dtype"):
        parse_sweep(_spec(tmp_path, text.replace('act_dtype = ["bf16", "fp8"]', 'act_dtype = ["fp7"]'), "bad.toml"))

def test_task_keys_are_stable_and_ignore_the_pool_size(tmp_path):
    a = parse_sweep(_spec(tmp_path), workers=1)
    b = parse_sweep(_spec(tmp_path), workers=2)
    assert [t.key for t in a.tasks] == [t.key for t in b.tasks]
    c = parse_sweep(_spec(tmp_path, SPEC.replace("search_steps = 0", "search_steps = 1")))
    assert not set(t.key for t in a.tasks) & set(t.key for t in c.tasks)


def test_missing_ray_is_one_line_exit_2(tmp_path, monkeypatch, capsys):
    from simulator.cli.sweep import main
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ImportError
    out = tmp_path / "out"
    assert main([str(_spec(tmp_path)), "--output-dir", str(out), "--ray-address", "auto"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "pip install 'dsd-planner[cluster]'" in err[0]
    assert not (out / "journal.jsonl").exists()


def test_pareto_front_per_model():
    df = pd.DataFrame({"model": ["a"] * 4 + ["b"], "meets_target": [True, True, True, False, True],
                       "tpot_p50_s": [0.01, 0.02, 0.03, 0.001, 0.05],
                       "usd_per_m_tokens_at_target": [3.0, 1.0, 2.0, 0.1, 9.0]})
    assert list(pareto_flags(df)) == [True, True, False, False, True]


def test_pareto_front_ranks_the_fleet_at_the_target_not_one_replica_at_full_load():
    # hand: two 40-GPU fleets at $148/h serve the same 9.9 M output tokens/h (the target): $148 / 9.9 = $14.95/M
    # each, so the faster one dominates; one replica at full load ($15.12 and $13.33/M, loads 1.36 and 3.08
    # req/s per replica) would have kept the slower one on the front as "cheaper"
    from simulator.sweep.tables import COST
    df = pd.DataFrame({"model": ["m", "m"], "meets_target": [True, True], "tpot_p50_s": [0.01833, 0.02069],
                       "fleet_usd_per_hour": [148.0, 148.0], COST: [148.0 / 9.9, 148.0 / 9.9],
                       "usd_per_m_output_tokens": [15.12, 13.33]})
    assert COST == "usd_per_m_tokens_at_target" and list(pareto_flags(df)) == [True, False]


def test_progress_line_shows_done_total_and_eta():
    import io
    buf = io.StringIO()
    p = Progress(10, 4, stream=buf, every_s=0.0)
    p.update()
    assert "5/10 tasks (4 from journal)" in buf.getvalue() and "ETA" in buf.getvalue()


def test_sweep_floor_imports_only_downward():
    # sweep sits between sizing and cli; __main__.py is the `python -m` shim into cli (like simulator/size.py)
    bad = []
    for path in (ROOT / "simulator" / "sweep").glob("*.py"):
        if path.name == "__main__.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            mods = [node.module] if isinstance(node, ast.ImportFrom) and node.module else (
                [a.name for a in node.names] if isinstance(node, ast.Import) else [])
            bad += [f"{path.name}: {m}" for m in mods if m.startswith(("simulator.cli", "calibration", "dashboard"))]
    assert not bad, bad


@pytest.mark.slow
@pytest.mark.ray
def test_local_pool_and_ray_give_identical_tables(reference, tmp_path):
    ray = pytest.importorskip("ray")
    spec, ref_out = reference
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        res = run_sweep(spec, output_dir=tmp_path / "out", ray_address="auto", progress=False)
    finally:
        ray.shutdown()
    assert res.complete and res.backend == "ray" and res.computed == 5
    pd.testing.assert_frame_equal(_table(tmp_path / "out"), _table(ref_out))


def test_dashboard_sweep_view_opens_a_table_and_draws_the_front(reference):
    pytest.importorskip("altair")
    from dashboard import sweep_view as V
    _, out = reference
    df = V.read_table(out)  # an output directory: its results.parquet
    assert len(V.read_table(out / "results.csv")) == len(df)
    front = V.pareto_frame(df)
    assert front.pareto.any() and front.config.str.contains("tp=").all()
    spec = V.pareto_chart(df).to_dict()
    assert spec["layer"] and "Pareto" in str(spec["title"])
    with pytest.raises(PlannerError, match="not a sweep result table"):
        V.read_table(io.BytesIO(b"a,b\n1,2\n"), "x.csv")
    # a table written before the fleet's $/M at the target opens, its front on one replica's cost, and says so
    old = df.drop(columns=[V.COST]).to_csv(index=False).encode()
    legacy = V.read_table(io.BytesIO(old), "old.csv")
    assert "one replica at full load" in str(V.pareto_chart(legacy).to_dict())


def test_fleet_sweep_page_runs(reference, monkeypatch):
    pytest.importorskip("streamlit")
    from streamlit.testing.v1 import AppTest
    _, out = reference
    monkeypatch.setenv("DSD_RESULTS_DIR", str(out.parent))  # the page opens typed paths under this folder only
    at = AppTest.from_file(str(ROOT / "pages" / "1_Fleet_sweep.py"), default_timeout=30)
    at.run()
    assert not at.exception and at.info
    at.text_input(key="sweep_path").input(str(out)).run()
    assert not at.exception and not at.error
    assert "on the front" in at.markdown[-1].value


def test_dry_run_lists_the_expansion_and_runs_nothing(tmp_path, capsys):
    from simulator.cli.sweep import main
    out = tmp_path / "out"
    assert main([str(_spec(tmp_path)), "--output-dir", str(out), "--dry-run"]) == 0
    text = capsys.readouterr().out
    assert "6 combinations, 5 tasks x 2 rows, 1 filtered" in text and "filtered (memory) x1" in text
    assert not out.exists()



def test_tasks_under_two_traffic_mixes_share_one_grid(tmp_path, monkeypatch):
    """Issue 22 item 1: a configuration's K* grid reads no [traffic], so its tasks under the chat and RAG
    mixes price it once per worker; each task's grid columns are what its own scenario's grid gives."""
    import simulator.sweep.task as task_mod
    from simulator.specs.scenario import build_scenario
    text = SPEC.replace('hardware = ["h100-sxm", "h200"]', 'hardware = ["h200"]').replace("tp = [2, 4, 8]", "tp = [8]")
    text = text.replace("[run]", "[traffic.rag]\nrate_per_s = 4.0\nprompt_len = 2048\noutput_len = 80\n[run]")
    text = text.replace('policies = ["plain", "dsd"]', 'policies = ["plain", "dsd"]\ntraffic = ["chat", "rag"]')
    tasks = parse_sweep(_spec(tmp_path, text)).tasks
    assert [t.axes["traffic"] for t in tasks] == ["chat", "rag"] and tasks[0].raw["traffic"] != tasks[1].raw["traffic"]
    own, computed = task_mod._grid_columns, []
    monkeypatch.setattr(task_mod, "_GRIDS", {})
    monkeypatch.setattr(task_mod, "_grid_columns", lambda sc: computed.append(sc) or own(sc))
    scenarios = [build_scenario(t.raw, t.origin, t.base_dir) for t in tasks]
    shared = [task_mod._shared_grid_columns(t, sc) for t, sc in zip(tasks, scenarios)]
    assert len(computed) == 1 and shared[0] == shared[1]
    assert own(scenarios[1]) == shared[1]  # the RAG task's own grid, computed apart, is the shared one


# --- a deployment fit in a sweep (issue 20: --deployment for predict / serve / size / sweep) ----------
FIT_SPEC = """
name = "fit-sweep"
[sweep]
base = "sizing-dense-command-a"
models = ["command-a"]
hardware = ["h100-sxm"]
tp = [4, 8]
policies = ["dsd"]
[run]
n_requests = 30
search_steps = 0
duration_s = 2.0
max_requests = 60
workers = 1
[output]
formats = ["csv"]
"""


def _command_a_fit(tmp_path: Path) -> Path:
    """A fit of the bundled sizing scenario's deployment: Command A on 8 x H100, vLLM 0.29.0, EAGLE, bf16."""
    from calibration.fit_deployment import main as fit_main
    # the planner says 13.4 ms plain and 17.1 ms at K = 3 there; measured 20% and 35% slower
    (tmp_path / "runs.csv").write_text("batch_size,k,itl_ms\n16,0,16.0\n16,3,23.1\n")
    fit = tmp_path / "fit.json"
    assert fit_main(["--scenario", "sizing-dense-command-a", "--measured", str(tmp_path / "runs.csv"),
                     "--output", str(fit)]) == 0
    return fit


def test_sweep_applies_a_deployment_fit_only_where_it_was_measured(tmp_path, capsys):
    from simulator.cli.sweep import main
    from simulator.plan.api import predict
    fit = _command_a_fit(tmp_path)
    spec = _spec(tmp_path, FIT_SPEC)
    assert main([str(spec), "--output-dir", str(tmp_path / "dry"), "--dry-run", "--deployment", str(fit)]) == 0
    assert "2 combinations, 2 tasks x 1 rows, 0 filtered, 1 on a deployment fit" in capsys.readouterr().out
    assert main([str(spec), "--output-dir", str(tmp_path / "out"), "--deployment", str(fit), "--quiet"]) == 0
    rows = pd.read_csv(tmp_path / "out" / "results.csv").set_index("tp")
    assert rows.loc[8, "prov_deployment_fit"].startswith("deployment fit fit.json (2 points: B=16 K=0, B=16 K=3")
    assert pd.isna(rows.loc[4, "prov_deployment_fit"])  # TP 4 was not measured: the planner's own terms
    # the fitted row's grid is predict's with the same fit (plain step at B = 16: the measured 16.0 ms)
    fitted = predict("sizing-dense-command-a", deployment=str(fit))
    assert rows.loc[8, "grid_itl_ms_b1"] == pytest.approx(float(fitted.table.itl_ms.iloc[0]), rel=1e-9)
    # (a posterior: the measured point within its 2% scatter)
    assert float(fitted.grid.itl_s[15, 0]) * 1e3 == pytest.approx(16.0, rel=0.01)
    assert rows.loc[8, "grid_itl_ms_b1"] != pytest.approx(float(predict("sizing-dense-command-a").table.itl_ms.iloc[0]),
                                                           rel=1e-3)


def test_sweep_deployment_flag_refuses_bad_files_and_names_unused_fits(tmp_path):
    fit = _command_a_fit(tmp_path)
    spec = _spec(tmp_path, FIT_SPEC)
    missing = run_main("simulator.sweep", spec, "--dry-run", "--deployment", tmp_path / "nope.json")
    assert missing.returncode == 2 and missing.stderr.startswith("error: --deployment ") and missing.stderr.count("\n") == 1
    twice = run_main("simulator.sweep", spec, "--dry-run", "--deployment", fit, fit)
    assert twice.returncode == 2 and "were both fitted on command-a on 8 x h100-sxm" in twice.stderr
    rel = run_main("simulator.sweep", spec, "--dry-run", "--deployment", "fit.json", cwd=tmp_path)  # from its folder
    assert rel.returncode == 0 and "1 on a deployment fit" in rel.stdout
    other = _spec(tmp_path, FIT_SPEC.replace('hardware = ["h100-sxm"]', 'hardware = ["h200"]'), "other.toml")
    unused = run_main("simulator.sweep", other, "--dry-run", "--deployment", fit)
    assert unused.returncode == 0 and "none of the sweep's 2 combinations" in unused.stderr and "0 on a deployment fit" in unused.stdout
