"""The step grid (calibration/step_grid.py, calibration/scripts/gpu_step_grid.py) and its scorer
(calibration/score_step_grid.py): the GPU run is prepared, and smoke-tested here on the CPU."""
from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from calibration import score_step_grid as sg_score
from calibration import step_grid as sg
from calibration import step_grid_kernels as sgk
from calibration import step_grid_model as sgm

REPO = Path(__file__).resolve().parent.parent
torch = pytest.importorskip("torch")


# --- pieces, fast ---------------------------------------------------------------------------------
def test_layer_bytes_add_up_to_the_published_parameter_counts():
    """Weights per layer x layers + embeddings = the models' published sizes: Llama-3.1-8B 8.03 B parameters
    (meta-llama/Llama-3.1-8B model card), Qwen3-30B-A3B 30.5 B (Qwen/Qwen3-30B-A3B model card; our layout
    leaves out Qwen3's q/k norms, 256 parameters a layer)."""
    from calibration.engine.synthetic_model import engine_config

    for model, published in (("llama-3.1-8b", 8.03e9), ("qwen3-30b-a3b", 30.5e9)):
        cfg = engine_config(model)
        total = cfg.n_layers * sgm.layer_bytes(cfg, 1) + cfg.vocab * cfg.hidden * (1 if cfg.tied_embeddings else 2)
        assert total == pytest.approx(published, rel=0.005), model


def test_memory_plan_keeps_every_layer_on_an_h100_and_shares_sets_when_short():
    """Qwen3-30B-A3B in bf16 (58 GB of layers) on an 80 GB H100 (85.0e9 bytes free, 6 GiB reserve): all 48
    weight sets; the KV pool = what is left (85.0e9 - 6 GiB - 1.245e9 embeddings - 48 x 1.246e9 layers =
    17.7e9 bytes, below 48 layers' 1.076e9 each at B 128, L 4104). With 30e9 free the sets are shared."""
    from calibration.engine.synthetic_model import engine_config

    cfg = engine_config("qwen3-30b-a3b")
    per_layer, kv_one = sgm.layer_bytes(cfg, 2), sgm.kv_layer_bytes(cfg, 128, 4104, 2)
    assert per_layer == 623_120_384 * 2  # hand count: attention 18,878,464 + experts 603,979,776 + router 262,144
    assert kv_one == 2 * 128 * 4 * 4104 * 128 * 2
    plan = sgm.plan_memory(cfg, 48, int(85.0e9), 2, 128, 4104)
    assert plan.weight_sets == 48 and not plan.notes
    shared = 151936 * 2048 * 2 * 2 + 2048 * 2
    assert plan.kv_pool_bytes == int(85.0e9) - sgm.RESERVE_BYTES - shared - 48 * per_layer
    short = sgm.plan_memory(cfg, 48, int(30e9), 2, 128, 4104)
    assert short.weight_sets == (int(30e9) - sgm.RESERVE_BYTES - shared - kv_one) // per_layer < 48
    assert short.notes and "set i mod" in short.notes[0]


def test_attention_kernel_is_aligned_to_the_cache_end():
    """The CausalBias path matches the bottom-right float32 reference; a top-left causal kernel (the CPU
    flash kernel's is_causal, or SDPA's is_causal with T != S) fails the same check by far."""
    import torch.nn.functional as F

    err = sgk.check_attention(torch, sgk.ATTENTION_KERNELS["sdpa-causal-lower-right"](torch), torch.device("cpu"),
                             torch.float32, 8, 2, 64)
    assert err < 1e-4
    top_left = lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)  # noqa: E731
    assert sgk.check_attention(torch, top_left, torch.device("cpu"), torch.float32, 8, 2, 64) > 0.1
    name, _, _, _ = sgk.pick_attention(torch, torch.device("cpu"), torch.float32, 8, 2, 64)
    assert name == "sdpa-causal-lower-right"


def test_grouped_experts_equal_the_per_expert_loop():
    """Sorting (token, expert) pairs and one grouped GEMM per projection gives the loop's output and counts."""
    assert sgk.check_experts(torch, torch.device("cpu"), torch.float32, 64, 32, 16, 4) < 1e-5
    x = torch.randn(10, 64)
    w, ids = sgk.route(torch, x, torch.randn(16, 64), 4)
    assert torch.allclose(w.sum(-1), torch.ones(10)) and ids.shape == (10, 4)
    _, counts = sgk.experts_grouped(torch, x, torch.randn(16, 64, 64), torch.randn(16, 64, 32), w, ids, 16)
    assert int(counts.sum()) == 40 and int(counts.max()) <= 10


def test_bad_flags_are_one_line_and_exit_2(tmp_path, capsys):
    for argv, needle in ((["--batch-sizes", "1,x"], "--batch-sizes"), (["--models", "no-such-model"], "no-such-model"),
                         (["--models", "qwen3-30b-a3b", "--layers", "99"], "--layers")):
        assert sg.main(["--output", str(tmp_path / "o"), "--smoke", *argv]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and needle in err
    assert not (tmp_path / "o").exists()  # nothing written before the flags were checked


def test_scorer_bad_input_is_one_line_and_exit_2(tmp_path, capsys):
    assert sg_score.main([str(tmp_path / "missing")]) == 2
    (tmp_path / sg.CSV_NAME).write_text("model,batch_size\nx,1\n")
    assert sg_score.main([str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and "not a folder" in err[0] and "columns" in err[1]


# --- the scorer on a synthetic grid with a hand-computed MAPE -----------------------------------------
def _synthetic(folder: Path, model: str, factors: dict) -> pd.DataFrame:
    """A grid whose measured times are the planner's own times divided by the given factors (so
    predicted / measured - 1 = factor - 1)."""
    sc = sg_score.scenario_for(model, "h100-sxm", "bf16", 512)
    bs, ks = sorted({b for b, _ in factors}), sorted({k for _, k in factors})
    t, _ = sg_score.predict_verify_s(sc, bs, ks)
    rows = [{"model": model, "context_len": 512, "batch_size": b, "k": k, "q_tokens": k + 1, "layers_timed": 32,
             "layers_model": 32, "dtype": "bf16", "median_s": t[bs.index(b), ks.index(k)] / f}
            for (b, k), f in factors.items()]
    folder.mkdir()
    with open(folder / sg.CSV_NAME, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=sg.COLUMNS, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    (folder / sg.META_NAME).write_text(json.dumps({"hardware": "h100-sxm", "dtype": "bf16", "status": "complete"}))
    return pd.DataFrame(rows)


def test_scorer_mape_by_band_k_and_ratio_by_hand(tmp_path, capsys):
    """Errors (predicted / measured - 1) set to -0.2, +0.25, 0, -0.5 at (B, K) = (1, 0), (1, 3), (64, 0), (64, 3):
    MAPE = (0.2 + 0.25 + 0 + 0.5) / 4 = 0.2375; B 1-8: 0.225, B 33+: 0.25; K 0: 0.1, K 3: 0.375.
    r(B, 3) predicted / measured = (1 + e(B, 3)) / (1 + e(B, 0)): B 1: 1.25 / 0.8 = 1.5625, B 64: 0.5 / 1 = 0.5,
    so the ratio's MAPE = (0.5625 + 0.5) / 2 = 0.53125."""
    factors = {(1, 0): 0.8, (1, 3): 1.25, (64, 0): 1.0, (64, 3): 0.5}
    _synthetic(tmp_path / "g", "llama-3.1-8b", factors)
    df, meta = sg_score.read_grid(tmp_path / "g")
    cells, basis = sg_score.score_cells(df, meta)
    s = sg_score.summary(cells)["llama-3.1-8b"]
    assert s["n"] == 4 and s["mape"] == pytest.approx(0.2375)
    assert s["worst"] == pytest.approx(0.5)
    assert s["by_band"]["B 1-8"]["mape"] == pytest.approx(0.225) and s["by_band"]["B 33+"]["mape"] == pytest.approx(0.25)
    assert "B 9-32" not in s["by_band"]
    assert s["by_k"] == pytest.approx({0: 0.1, 3: 0.375})
    assert s["ratio_mape"] == pytest.approx(0.53125)
    assert s["ratio_by_band"]["B 1-8"]["mape"] == pytest.approx(0.5625)
    assert "measured kernel tables" in basis["llama-3.1-8b"] and "ideal engine" in basis["llama-3.1-8b"]
    assert sg_score.main([str(tmp_path / "g"), "--json", str(tmp_path / "s.json")]) == 0
    out = capsys.readouterr().out
    assert "| llama-3.1-8b | 4 | 23.8% | 50.0% |" in out
    assert json.loads((tmp_path / "s.json").read_text())["summary"]["llama-3.1-8b"]["mape"] == pytest.approx(0.2375)


def test_prediction_is_the_grids_verify_pass_without_its_sampler():
    """The scorer's predicted time is simulator/plan/grid.py's verify_s less its sampling op, on the same
    scenario (dense and MoE), and a run of fewer layers is predicted for those layers."""
    from simulator.plan.grid import evaluate_grid

    for model in ("llama-3.1-8b", "qwen3-30b-a3b"):
        sc = sg_score.scenario_for(model, "h100-sxm", "bf16", 4096)
        g = evaluate_grid(sc, np.array([1.0, 32.0]), np.array([0.0, 5.0]))
        want = g.verify_s - g.op_time_s("sampling")
        got, touched = sg_score.predict_verify_s(sc, [1, 32], [0, 5])
        np.testing.assert_allclose(got, want, rtol=1e-12)
        assert (touched is not None) == (model == "qwen3-30b-a3b")
    full = sg_score.scenario_for("llama-3.1-8b", "h100-sxm", "bf16", 512)
    four = sg_score.scenario_for("llama-3.1-8b", "h100-sxm", "bf16", 512, layers=4)
    t_full, t_four = sg_score.predict_verify_s(full, [8], [3])[0], sg_score.predict_verify_s(four, [8], [3])[0]
    assert four.model.num_layers == 4 and 0 < t_four[0, 0] < 0.3 * t_full[0, 0]


# --- the smoke run, end to end (CPU) ------------------------------------------------------------------
@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    out = tmp_path_factory.mktemp("step_grid")
    assert sg.main(["--output", str(out), "--smoke"]) == 0
    return out


@pytest.mark.slow
def test_smoke_run_writes_the_schema_with_positive_times(smoke):
    df = pd.read_csv(smoke / sg.CSV_NAME)
    meta = json.loads((smoke / sg.META_NAME).read_text())
    assert list(df.columns) == sg.COLUMNS
    assert len(df) == 8 and meta["status"] == "complete" and meta["cells_measured"] == 8
    assert set(df["model"]) == {"smollm2-135m", "moe-synthetic"}
    assert (df["median_s"] > 0).all() and (df["min_s"] > 0).all()
    assert (df["p25_s"] <= df["median_s"]).all() and (df["median_s"] <= df["p75_s"]).all()
    assert (df["q_tokens"] == df["k"] + 1).all() and (df["layers_timed"] == 2).all()
    assert set(df["attention"]) == {"sdpa-causal-lower-right"}
    moe = df[df["model"] == "moe-synthetic"]
    assert (moe["moe_dispatch"] == "grouped").all() and (moe["experts_touched"].between(1, 32)).all()
    for key in ("device", "torch_version", "timing", "models", "hardware", "dtype"):
        assert key in meta
    m = meta["models"]["moe-synthetic"]
    assert m["experts"] == 32 and m["top_k"] == 4 and m["layers_model"] == 8 and m["attention_max_abs_error"] < 1e-4


@pytest.mark.slow
def test_smoke_run_k_plus_one_queries_cost_at_least_one(smoke):
    """At each (model, B) the pass with K + 1 = 8 query tokens takes at least the plain pass's time (the
    slowest plain repeat against the fastest K = 7 one: a CPU's noise cannot make this pass by chance)."""
    df = pd.read_csv(smoke / sg.CSV_NAME)
    for (model, b), g in df.groupby(["model", "batch_size"]):
        plain, spec = g[g["k"] == 0].iloc[0], g[g["k"] == 7].iloc[0]
        assert spec["min_s"] >= plain["median_s"], (model, b)


@pytest.mark.slow
def test_scorer_reads_the_smoke_output(smoke, capsys):
    """Shape only (a CPU against the CPU entry's datasheet roofline): one prediction per row, r(B, 0) = 1."""
    assert sg_score.main([str(smoke)]) == 0
    out = capsys.readouterr().out
    assert "## smollm2-135m, context 32" in out and "2 of 30 layers, as timed" in out
    df, meta = sg_score.read_grid(smoke)
    cells, _ = sg_score.score_cells(df, meta)
    assert len(cells) == len(df) and (cells["predicted_s"] > 0).all()
    assert np.allclose(cells.loc[cells["k"] == 0, "measured_ratio"], 1.0)
    assert set(sg_score.summary(cells)) == {"smollm2-135m", "moe-synthetic"}


def test_script_runs_as_a_file_without_pythonpath(tmp_path):
    """`python calibration/scripts/gpu_step_grid.py` (what the GPU session runs) finds the repository's
    packages itself: an unknown model is refused by the catalog (simulator.specs.models) in one line."""
    r = subprocess.run([sys.executable, "calibration/scripts/gpu_step_grid.py", "--output", str(tmp_path / "o"),
                        "--models", "no-such-model"], cwd=REPO, capture_output=True, text=True, timeout=120,
                       env={"PATH": "/usr/bin:/bin", "HOME": str(Path.home())})
    assert r.returncode == 2 and "unknown model 'no-such-model'" in r.stderr, r.stderr[-2000:]
    assert "Traceback" not in r.stderr and not (tmp_path / "o").exists()


@pytest.mark.parametrize("model", ["smollm2-135m", "moe-synthetic"])
def test_static_pass_computes_what_the_reference_engine_computes(model):
    """The graph-ready pass (joint RoPE, KV written at L .. L + K, bottom-right causal kernel, residual in the
    GEMM epilogue, grouped experts) gives the reference engine's own logits (calibration/engine/model.py:
    boolean-mask SDPA, per-expert loop) for K + 1 = 4 tokens over a 9-token cache, same weights."""
    from dataclasses import replace

    from calibration.engine.model import Transformer
    from calibration.engine.synthetic_model import device_random_weights, engine_config

    cfg = engine_config(model, layers=2)
    w = device_random_weights(cfg, seed=3, dtype=torch.float32)
    ref = Transformer(cfg, w)
    B, L, T = 2, 9, 4
    g = torch.Generator().manual_seed(5)
    prompt, new = torch.randint(0, cfg.vocab, (B, L), generator=g), torch.randint(0, cfg.vocab, (B, T), generator=g)
    cache = ref.new_cache(B, L + T)
    ref.forward(prompt, cache, logits_for="none")
    want = ref.forward(new, cache)  # [B, T, V]; also writes the new K/V at L .. L + T - 1
    attend = sgk.ATTENTION_KERNELS["sdpa-causal-lower-right"](torch)
    dec = sgm._decoder_class()(replace(cfg), w, cfg.n_layers, attend, "grouped")
    kv = torch.stack([cache.k, cache.v], dim=1).clone()  # [layers, 2, B, Hkv, L + T, D]
    kv[:, :, :, :, L:] = float("nan")  # the pass must write these positions itself
    cos, sin = dec.rope_tables(L + torch.arange(T)[None, :].expand(B, T))
    got = dec.forward_static(new, kv, L, cos, sin).view(B, T, -1)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(kv[:, 0], cache.k, rtol=1e-5, atol=1e-5)


def test_budget_stops_cleanly_and_keeps_the_header(tmp_path, capsys):
    """A budget spent before the first cell: exit 0, the CSV's header, a meta that says partial; the scorer
    then refuses the folder in one line."""
    assert sg.main(["--output", str(tmp_path), "--smoke", "--models", "moe-synthetic", "--budget-s", "0.001"]) == 0
    meta = json.loads((tmp_path / sg.META_NAME).read_text())
    assert meta["status"] == "partial" and meta["cells_measured"] == 0 and meta["cells_planned"] == 4
    assert (tmp_path / sg.CSV_NAME).read_text().strip() == ",".join(sg.COLUMNS)
    capsys.readouterr()
    assert sg_score.main([str(tmp_path)]) == 2
    assert "no measured rows" in capsys.readouterr().err


def test_a_model_that_fails_is_noted_and_the_next_runs(tmp_path, monkeypatch):
    """No attention kernel passing its check for one model stops that model only (noted in the meta)."""
    real = sgk.pick_attention

    def failing(torch_, device, dtype, n_heads, *rest):
        if n_heads == 9:  # smollm2-135m
            raise RuntimeError("no causal attention kernel aligned to the cache's end passed its check: test")
        return real(torch_, device, dtype, n_heads, *rest)

    monkeypatch.setattr(sg, "pick_attention", failing)
    assert sg.main(["--output", str(tmp_path), "--smoke", "--batch-sizes", "1", "--ks", "0"]) == 0
    meta = json.loads((tmp_path / sg.META_NAME).read_text())
    assert "passed its check" in meta["models"]["smollm2-135m"]["error"]
    assert meta["models"]["moe-synthetic"]["cells_measured"] == 1 and meta["status"] == "partial"
    assert list(pd.read_csv(tmp_path / sg.CSV_NAME)["model"]) == ["moe-synthetic"]


def test_scorer_flags_rows_a_gpu_ran_without_a_graph(tmp_path, capsys):
    """A GPU row timed eagerly (the per-expert loop fallback) is host-bound: the report says so."""
    _synthetic(tmp_path / "g", "llama-3.1-8b", {(1, 0): 1.0, (1, 1): 1.0})
    df = pd.read_csv(tmp_path / "g" / sg.CSV_NAME)
    df["graphed"] = [1, 0]
    df.to_csv(tmp_path / "g" / sg.CSV_NAME, index=False)
    (tmp_path / "g" / sg.META_NAME).write_text(json.dumps({"hardware": "h100-sxm", "dtype": "bf16",
                                                           "device": "cuda: NVIDIA H100 80GB HBM3"}))
    assert sg_score.main([str(tmp_path / "g")]) == 0
    assert "**1 rows were not captured in a CUDA graph**" in capsys.readouterr().out


def test_the_gpu_grid_is_the_issues_grid():
    """Issue 47 item 5: Llama-3.1-8B and Qwen3-30B-A3B, bf16, B 1-128 x K 0-7 x context 512 and 4096 (128 cells
    a model), every layer (no --layers), inside the 8-minute limit with the default 300 s budget."""
    from calibration.engine.synthetic_model import engine_config

    assert sg.FULL["models"] == ("llama-3.1-8b", "qwen3-30b-a3b") and sg.FULL["dtype"] == "bf16"
    assert "layers" not in sg.FULL and sg.Settings((), (), (), (), "bf16").budget_s <= 300
    for model in sg.FULL["models"]:
        cells = sg.cells_for(model, sg.FULL["batch_sizes"], sg.FULL["ks"], sg.FULL["contexts"])
        assert len(cells) == 128 and {c.batch_size for c in cells} == {1, 2, 4, 8, 16, 32, 64, 128}
        assert {c.k for c in cells} == set(range(8)) and {c.context_len for c in cells} == {512, 4096}
        cfg = engine_config(model)
        assert cfg.n_layers == {"llama-3.1-8b": 32, "qwen3-30b-a3b": 48}[model]
