"""Synthetic-acceptance sweeps of the reference engine (calibration/engine/synthetic.py), on the CPU.

A 2-layer tiny-shaped model stands in for the real shapes the GPU run uses; what is checked does not
depend on size: rows in the sweep's schema, imposed acceptance within binomial error of the request,
K = 0 identical to plain greedy decoding, step time rising with K (the draft's K passes are real).
"""

from __future__ import annotations

import json
import math
import time

import numpy as np
import pandas as pd
import pytest
import torch

from calibration.engine import COLUMNS, ModelConfig, Transformer, random_weights
from calibration.engine import synthetic as syn
from calibration.validate import read_measured, validate
from simulator.specs.scenario import load_scenario


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def _cfg(moe=False, layers=2):
    return ModelConfig(name="tiny-moe" if moe else "tiny", n_layers=layers, hidden=64, n_heads=4, n_kv_heads=2,
                       head_dim=16, ffn=128, vocab=256, n_experts=8 if moe else 0, top_k=2 if moe else 0,
                       expert_ffn=64 if moe else 0)


def _target(moe=False, seed=0):
    cfg = _cfg(moe)
    return Transformer(cfg, syn.device_random_weights(cfg, seed=seed, dtype=torch.float32, device="cpu"))


@pytest.mark.parametrize("moe", [False, True])
def test_device_weights_have_the_engines_layout(moe):
    """Same keys and shapes as model.random_weights, values on the same scale (std 1/sqrt(fan_in))."""
    cfg = _cfg(moe)
    ref, fast = random_weights(cfg, seed=0), syn.device_random_weights(cfg, seed=0, dtype=torch.float32)
    assert set(ref) == set(fast) and len(ref["layers"]) == len(fast["layers"]) == 2
    assert ref["embed"].shape == fast["embed"].shape and ref["lm_head"].shape == fast["lm_head"].shape
    for lr, lf in zip(ref["layers"], fast["layers"]):
        assert {k: v.shape for k, v in lr.items()} == {k: v.shape for k, v in lf.items()}
    # wqkv: 4096 entries of N(0, 1/64): sample std within 5% of 1/8
    assert float(fast["layers"][0]["wqkv"].std()) == pytest.approx(1 / 8, rel=0.05)


def test_real_shapes_from_the_catalog():
    """Llama-3.1-8B and Qwen3-30B-A3B config.json figures reach the engine's ModelConfig unchanged."""
    c = syn.engine_config("llama-3.1-8b")
    assert (c.n_layers, c.hidden, c.n_heads, c.n_kv_heads, c.head_dim, c.ffn, c.vocab) == \
        (32, 4096, 32, 8, 128, 14336, 128256) and not c.is_moe and not c.tied_embeddings
    m = syn.engine_config("qwen3-30b-a3b", layers=2, router_reuse=0.5)
    assert (m.n_layers, m.hidden, m.n_experts, m.top_k, m.expert_ffn, m.vocab, m.router_reuse) == \
        (2, 2048, 128, 8, 768, 151936, 0.5) and m.name == "qwen3-30b-a3b-L2"


def test_expected_acceptance_length_by_hand():
    # a = (0.8, 0.6, 0.6): 1 + 0.8 + 0.48 + 0.288 = 2.568
    assert syn.expected_acceptance_length([0.8, 0.6], 3) == pytest.approx(2.568)
    assert syn.expected_acceptance_length([0.8], 0) == 1.0


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    out = tmp_path_factory.mktemp("syn") / "runs.csv"
    target = _target()
    run = syn.SyntheticRun("eagle", batch_sizes=[8, 32], ks=[0, 2, 4], acceptance=[0.8, 0.6], context_len=24,
                           steps=8, warmup_steps=1, clock="cpu")
    df = syn.run_synthetic(target, run, output=out, progress=False)
    return out, df


def test_rows_written_in_the_sweep_schema(sweep):
    out, df = sweep
    disk = pd.read_csv(out)
    assert list(disk.columns) == COLUMNS and len(disk) == 6
    assert sorted(zip(disk.batch_size, disk.k)) == [(8, 0), (8, 2), (8, 4), (32, 0), (32, 2), (32, 4)]
    assert (disk.n_steps == 8).all() and (disk.target == "tiny").all() and (disk.draft == "eagle").all()
    assert disk.source.iloc[0] == "torch-reference-engine:synthetic-acceptance a=0.8,0.6"
    assert (disk.itl_ms > 0).all() and (disk.dtype == "float32").all()
    # the validation reader accepts the file
    assert len(read_measured(out)) == 6


def test_acceptance_matches_the_requested_rates(sweep):
    """Per position: measured rate within 4 binomial standard errors of the imposed one (attempts at
    position i = sequences whose first i-1 drafts were accepted, over 8 steps)."""
    _, df = sweep
    checked = 0
    for r in df[df.k == 4].itertuples():
        rates = json.loads(r.per_position_acceptance)
        want = syn.rates_for([0.8, 0.6], 4)
        attempts = r.batch_size * r.n_steps  # position 1 is attempted by every sequence every step
        for i, (got, p) in enumerate(zip(rates, want)):
            assert got is not None
            se = math.sqrt(p * (1 - p) / attempts)
            assert abs(got - p) < 4 * se, (r.batch_size, i, got, p)
            attempts *= p  # expected attempts at the next position
            checked += 1
    assert checked == 8
    # the acceptance length over B=32 x 8 steps: within 4 standard errors of 1 + sum prod a_i
    row = df[(df.k == 4) & (df.batch_size == 32)].iloc[0]
    assert row.acceptance_length == pytest.approx(syn.expected_acceptance_length([0.8, 0.6], 4), abs=0.25)


def test_k0_rows_are_plain_decoding(sweep):
    _, df = sweep
    k0 = df[df.k == 0]
    assert (k0.acceptance_length == 1.0).all() and (k0.draft_ms < 0.05 * k0.verify_ms).all()
    assert (k0.per_position_acceptance == "[]").all()


def test_k0_commits_the_greedy_tokens():
    """K = 0 through the synthetic engine = argmax decoding by full recomputation (no cache reuse)."""
    target = _target(seed=3)
    prompts = np.random.default_rng(0).integers(0, 256, (3, 10)).tolist()
    eng = syn.synthetic_engine(target, None, prompts, [0.7], 0, 40)
    syn.set_acceptance(eng, [0.7], 0)
    with torch.inference_mode():
        eng.reset(0)
        for _ in range(6):
            eng.step()
        got = [eng.seqs[b, 10:16].tolist() for b in range(3)]
        seqs = torch.tensor(prompts)
        for _ in range(6):
            logits = target(seqs, target.new_cache(3, 40))
            seqs = torch.cat([seqs, logits[:, -1].argmax(-1, keepdim=True)], 1)
    assert got == seqs[:, 10:].tolist()


def test_step_time_grows_with_k(sweep):
    """At fixed B a speculative step runs K draft forward calls and verifies K+1 positions: it costs
    more than a plain step, and its draft more at K = 4 than at K = 2. (The calls are counted exactly
    below. Timed comparisons between neighbouring K, a 1.5x draft ratio of 4 calls to 2 or K = 2 below
    K = 4 in step time, each failed once in a full-suite run on the loaded 2-core box: 8 timed steps of
    a few milliseconds beside another test worker.)"""
    _, df = sweep
    for b, g in df.groupby("batch_size"):
        itl = g.sort_values("k").itl_ms.to_numpy()
        assert itl[0] < min(itl[1], itl[2]), (b, itl)
        draft = g.sort_values("k").draft_ms.to_numpy()
        assert draft[2] > draft[1] > 0, (b, draft)  # two more draft forward calls


class _CountingModel:
    """The draft's model with its forward calls counted (everything else passed through)."""

    def __init__(self, model):
        self.model, self.calls = model, 0

    def __call__(self, *args, **kw):
        self.calls += 1
        return self.model(*args, **kw)

    def __getattr__(self, name):
        return getattr(self.model, name)


def test_a_step_runs_k_draft_forward_calls():
    """An EAGLE step's draft work, counted: one catch-up call over the tokens committed since the last
    step, then K - 1 one-token passes, K calls in all (engine.ModelDraft.propose)."""
    target = _target()
    draft = syn.make_synthetic_draft("eagle", target, dense_ffn=128)
    prompts = np.random.default_rng(0).integers(0, 256, (4, 12)).tolist()
    eng = syn.synthetic_engine(target, draft, prompts, [0.8, 0.6], 4, 12 + 6 * 5 + 2)
    counter = _CountingModel(draft.model)
    draft.model = counter
    with torch.inference_mode():
        for k in (1, 2, 4):
            eng.reset(k)
            syn.set_acceptance(eng, [0.8, 0.6], k)
            for _ in range(3):
                counter.calls = 0
                eng.step()
                assert counter.calls == k, (k, counter.calls)


def test_the_engine_clock_hook_accepts_event_stamps():
    """On CUDA the phases are timed by CudaStamp objects set as the engine's clock; the engine must only
    subtract clock values. A CPU stand-in with the same interface checks that contract."""

    class Stamp:
        def __init__(self):
            self.t = time.perf_counter()

        def __sub__(self, other):
            return self.t - other.t

    target = _target()
    drf = syn.make_synthetic_draft("eagle", target, dense_ffn=128)
    eng = syn.synthetic_engine(target, drf, np.zeros((2, 8), dtype=int).tolist(), [0.5], 2, 30)
    eng.clock = Stamp
    syn.set_acceptance(eng, [0.5], 2)
    with torch.inference_mode():
        eng.reset(2)
        rec = eng.step()
    assert all(isinstance(x, float) and x > 0 for x in (rec.draft_s, rec.verify_s, rec.overhead_s))


def test_moe_rows_count_experts(tmp_path):
    target = _target(moe=True)
    run = syn.SyntheticRun("eagle", batch_sizes=[4], ks=[0, 3], acceptance=0.5, context_len=16, steps=3,
                           warmup_steps=0)
    df = syn.run_synthetic(target, run, output=tmp_path / "moe.csv", progress=False)
    # 4 tokens (K=0) on 8 experts, top-2: at most 8, at least 2 distinct; K=3 verifies 16 tokens
    e0, e3 = df.sort_values("k").experts_touched.to_list()
    assert 2 <= e0 <= 8 and e0 <= e3 <= 8 and df.router_reuse.notna().all()


def test_resume_skips_measured_points(sweep, tmp_path):
    out, _ = sweep
    run = syn.SyntheticRun("eagle", batch_sizes=[8], ks=[0, 2], acceptance=[0.8, 0.6], context_len=24, steps=2,
                           warmup_steps=0)
    again = syn.run_synthetic(_target(), run, output=out, progress=False)
    assert again.empty and len(pd.read_csv(out)) == 6


def test_cli_real_shapes_scenario_and_validate(tmp_path):
    """The CLI at a real model's shapes (SmolLM2-135M, 1 layer), with a scenario validate accepts."""
    out, sc = tmp_path / "r.csv", tmp_path / "sc.toml"
    rc = syn.main(["--model", "smollm2-135m", "--layers", "1", "--draft", "eagle", "--acceptance", "0.7",
                   "--batch-sizes", "1-4:pow2", "--k", "0-2", "--device", "cpu", "--dtype", "fp32", "--steps", "2",
                   "--warmup-steps", "0", "--context-len", "16", "--output", str(out), "--scenario-out", str(sc),
                   "--hardware", "cpu-xeon-2c", "--clock", "cpu"])
    assert rc == 0
    df = read_measured(out)
    assert len(df) == 9 and set(df.target) == {"smollm2-135m-L1"}
    res = validate(df, load_scenario(str(sc)), str(out))
    assert res.summary["n_rows"] == 9 and np.isfinite(res.summary["itl_mape"])


@pytest.mark.parametrize("args, needle", [
    (["--acceptance", "1.5"], "--acceptance"),
    (["--model", "no-such-model"], "unknown model"),
    (["--model", "deepseek-v3"], "reference engine has no"),
    (["--layers", "0"], "--layers"),
    (["--draft", "ngram"], "--draft"),
    (["--device", "cuda"] if not torch.cuda.is_available() else ["--k", "0-40"], "--"),
])
def test_bad_input_is_one_line_exit_2(args, needle, tmp_path, capsys):
    base = {"--model": "smollm2-135m", "--device": "cpu", "--output": str(tmp_path / "x.csv")}
    for flag, value in zip(args[::2], args[1::2]):
        base[flag] = value
    argv = [x for kv in base.items() for x in kv] + ["--batch-sizes", "1", "--k", "0"]
    if "--k" in args:
        argv = argv[:-2]
    assert syn.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("error:") and needle in err
