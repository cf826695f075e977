"""Reference speculative-decoding engine: exactness (greedy), distribution (sampling), sweeps, CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from scipy import stats

from calibration.engine import (COLUMNS, ModelConfig, SpecDecoder, Transformer, accept_sampling, load_target,
                                SweepSettings, make_draft, random_weights, run_sweep)
from calibration.engine.__main__ import main as cli_main
from calibration.engine.weights import TargetUnavailable, gguf_path


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """One intra-op thread: small ops gain nothing from two, and OpenMP spinning collapses when
    other processes share the 2 cores."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def _tiny(seed=0, moe=False, vocab=64, logit_scale=1.0):
    cfg = ModelConfig(name="tiny-moe" if moe else "tiny", n_layers=3, hidden=32, n_heads=4, n_kv_heads=2, head_dim=8,
                      ffn=64, vocab=vocab, n_experts=8 if moe else 0, top_k=2 if moe else 0, expert_ffn=32 if moe else 0)
    return Transformer(cfg, random_weights(cfg, seed=seed, logit_scale=logit_scale))


@pytest.fixture(scope="module")
def smollm():
    try:
        gguf_path()
    except TargetUnavailable as e:
        pytest.skip(str(e))
    from calibration.engine import load_tokenizer
    return load_target("smollm2-135m", device="cpu"), load_tokenizer()


@pytest.fixture(scope="module")
def smollm_plain(smollm):
    model, tok = smollm
    texts = ["<|im_start|>user\nWrite a haiku about the sea.<|im_end|>\n<|im_start|>assistant\n",
             "<|im_start|>user\nList three prime numbers and say why 1 is not prime.<|im_end|>\n<|im_start|>assistant\n",
             "def fibonacci(n):\n    if n < 2:\n        return n\n    return"]
    prompts = [tok.encode(t) for t in texts]
    assert len({len(p) for p in prompts}) == 3  # different lengths in one batch
    return prompts, SpecDecoder(model).generate(prompts, 10).tokens


def test_smollm2_loads_and_speaks(smollm, smollm_plain):
    model, tok = smollm
    assert model.cfg.n_layers == 30 and model.cfg.hidden == 576 and model.cfg.vocab == 49152
    assert model.cfg.rope_theta == 100000.0
    prompts, plain = smollm_plain
    assert tok.decode(tok.encode("Hello, world! 123")) == "Hello, world! 123"
    text = tok.decode(plain[2])
    assert "fibonacci" in text  # a 135M model continues the recursion readably


# the real model at one draft (K = 1) and several (K = 4); K = 2 of every draft, dense and MoE, is the tiny
# model's below (the real model's K = 2 cases took 7 s of the suite's 180)
@pytest.mark.parametrize("draft", ["ngram", "early-exit:6", "model:4"])
@pytest.mark.parametrize("k", [1, 4])
def test_greedy_speculative_equals_plain_smollm2(smollm, smollm_plain, draft, k):
    model, _ = smollm
    prompts, plain = smollm_plain
    g = SpecDecoder(model, make_draft(draft, model), k=k).generate(prompts, 10)
    assert g.tokens == plain
    assert g.attempts[0] == len(prompts) * len(g.steps)  # position 1 attempted every step
    assert all(a <= t for a, t in zip(g.accepts, g.attempts))


@pytest.mark.parametrize("moe", [False, True])
@pytest.mark.parametrize("draft", ["ngram", "early-exit:1", "model:2"])
@pytest.mark.parametrize("k", [1, 2, 4])
def test_greedy_speculative_equals_plain_tiny(moe, draft, k):
    model = _tiny(moe=moe)
    g = torch.Generator().manual_seed(1)
    prompts = [torch.randint(0, 64, (n,), generator=g).tolist() for n in (5, 9, 14, 7)]
    plain = SpecDecoder(model).generate(prompts, 12).tokens
    assert SpecDecoder(model, make_draft(draft, model), k=k).generate(prompts, 12).tokens == plain


def test_self_draft_accepts_everything():
    """A draft identical to the target (early-exit at the last layer) is always accepted: AL = K+1."""
    model = _tiny()
    prompts = [[1, 2, 3, 4], [5, 6, 7]]
    g = SpecDecoder(model, make_draft(f"early-exit:{model.n_layers}", model), k=3).generate(prompts, 12)
    assert g.accepts == g.attempts
    assert all(s.n_accepted == [3, 3] for s in g.steps)


def _hist(x, v):
    return np.bincount(np.asarray(x), minlength=v)


def test_acceptance_residual_matches_target_distribution():
    """Hand-made p, q: the first emitted token (accepted draft or residual sample) must follow p."""
    V, N = 5, 20000
    p = torch.tensor([0.05, 0.40, 0.25, 0.10, 0.20])
    q = torch.tensor([0.30, 0.10, 0.30, 0.25, 0.05])
    g = torch.Generator().manual_seed(0)
    x = torch.multinomial(q.expand(N, V), 1, replacement=True, generator=g)  # [N, 1] drafts
    P = torch.stack([p, p], 0).expand(N, 2, V)  # p_1 and (bonus) p_2
    Q = q.expand(N, 1, V)
    n, nxt = accept_sampling(x, P, Q, generator=g)
    first = torch.where(n >= 1, x[:, 0], nxt)
    h = _hist(first, V)
    assert stats.chisquare(h, N * p.numpy()).pvalue > 1e-3
    # negative control: resampling from p (not max(0, p - q)) at a rejection is detectably wrong
    u = torch.rand(N, generator=g)
    acc = u < (p[x[:, 0]] / q[x[:, 0]]).clamp(max=1)
    wrong = torch.where(acc, x[:, 0], torch.multinomial(p.expand(N, V), 1, generator=g)[:, 0])
    assert stats.chisquare(_hist(wrong, V), N * p.numpy()).pvalue < 1e-6
    # deterministic draft (q = one-hot, the n-gram case)
    n2, nxt2 = accept_sampling(x, P, None, generator=g)
    first2 = torch.where(n2 >= 1, x[:, 0], nxt2)
    assert stats.chisquare(_hist(first2, V), N * p.numpy()).pvalue > 1e-3


@pytest.mark.parametrize("draft", ["model:1", "ngram"])
def test_sampling_histograms_with_and_without_speculation_agree(draft):
    """Temperature 1: token histograms at fixed positions agree (chi-square, 2 x V table)."""
    V, N = 12, 3000
    model = _tiny(seed=3, vocab=V, logit_scale=3.0)
    prompts = [[1, 4, 2, 7, 1, 4]] * N
    plain = np.array(SpecDecoder(model, temperature=1.0, seed=1).generate(prompts, 4).tokens)
    spec = np.array(SpecDecoder(model, make_draft(draft, model), k=2, temperature=1.0, seed=2).generate(prompts, 4).tokens)
    for pos in (0, 1, 3):
        table = np.stack([_hist(plain[:, pos], V), _hist(spec[:, pos], V)])
        table = table[:, table.sum(0) > 0]
        assert stats.chi2_contingency(table).pvalue > 1e-3, (pos, table)


def test_moe_touches_more_experts_with_more_tokens():
    model = load_target("moe-synthetic", device="cpu", n_layers=2, hidden=64, head_dim=16, n_heads=4,
                        n_kv_heads=2, vocab=256, expert_ffn=32)
    touched = {}
    for B, T in [(1, 1), (8, 5)]:
        cache = model.new_cache(B, 16)
        model.expert_stats = []
        with torch.inference_mode():
            model(torch.randint(0, 256, (B, T)), cache)
        touched[B * T] = np.mean(model.expert_stats[-1])
    assert touched[1] == model.cfg.top_k
    assert touched[40] > touched[1]


def test_sweep_writes_rows_and_resumes(tmp_path):
    out = tmp_path / "runs.csv"
    settings = SweepSettings(target="moe-synthetic", draft="ngram", batch_sizes=[1, 2], ks=[0, 2], context_len=24,
                             gen_tokens=2, warmup_steps=1, min_steps=2, max_steps=3, forced_acceptance=0.6)
    df = run_sweep(settings, output=str(out), progress=False)
    assert len(df) == 4
    disk = __import__("pandas").read_csv(out)
    assert list(disk.columns) == COLUMNS and len(disk) == 4
    r = disk[(disk.batch_size == 2) & (disk.k == 2)].iloc[0]
    assert r.source == "torch-reference-engine" and r.experts_touched > 0
    assert 1 <= r.acceptance_length <= 3
    ppa = json.loads(r.per_position_acceptance)
    assert len(ppa) == 2 and all(0 <= a <= 1 for a in ppa)
    assert abs(r.itl_ms - 0) > 0 and r.throughput == pytest.approx(r.goodput_per_seq * 2, rel=1e-3)
    assert json.loads(disk[disk.k == 0].iloc[0].per_position_acceptance) == []
    assert run_sweep(settings, output=str(out), progress=False).empty  # rerun: every point already in the file
    assert len(__import__("pandas").read_csv(out)) == 4


def test_sweep_rounds_keep_each_rounds_step_time(tmp_path):
    """--rounds 3: each row keeps its three interleaved rounds' median step times, which bracket the
    point's ITL (a median of the windows' medians); the few-shot scorer reads their spread as the
    cell's measurement interval: goodput AL / t per round."""
    from calibration.fewshot_heldout import measured_goodput
    settings = SweepSettings(target="moe-synthetic", draft="ngram", batch_sizes=[2], ks=[0, 2], context_len=24,
                             gen_tokens=2, warmup_steps=1, min_steps=2, max_steps=3, forced_acceptance=0.6, rounds=3)
    df = run_sweep(settings, output=str(tmp_path / "runs.csv"), progress=False)
    disk = __import__("pandas").read_csv(tmp_path / "runs.csv")
    for r in disk.itertuples():
        rounds = json.loads(r.itl_ms_rounds)
        assert len(rounds) == 3 and all(t > 0 for t in rounds)
        assert min(rounds) * (1 - 1e-6) <= r.itl_ms <= max(rounds) * (1 + 1e-6)
    g = measured_goodput(disk).set_index(["batch_size", "k"])
    r = disk[disk.k == 2].iloc[0]
    rounds = json.loads(r.itl_ms_rounds)
    assert g.loc[(2, 2), "size"] == 3
    assert g.loc[(2, 2), "min"] == pytest.approx(r.acceptance_length / (max(rounds) / 1e3))
    assert g.loc[(2, 2), "max"] == pytest.approx(r.acceptance_length / (min(rounds) / 1e3))
    assert len(df) == 2


@pytest.mark.parametrize("args,needle", [
    (["--target", "gpt5"], "unknown target"),
    (["--draft", "medusa"], "unknown draft"),
    (["--k", "-1"], "--k"),
    (["--batch-sizes", "0"], "--batch-sizes"),
    (["--batch-sizes", "x"], "--batch-sizes"),
])
def test_cli_bad_input_exits_2(tmp_path, capsys, args, needle):
    rc = cli_main(["sweep", "--output", str(tmp_path / "o.csv"), *args])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and needle in err and "\n" not in err and "Traceback" not in err


def test_cli_unreadable_output_and_missing_args(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_bytes(b"\xff\xfe\x00garbage\x00")
    p = subprocess.run([sys.executable, "-m", "calibration.engine", "sweep", "--output", str(bad)],
                       capture_output=True, text=True)
    assert p.returncode == 2 and "Traceback" not in p.stderr and p.stderr.count("\n") == 1
    with pytest.raises(SystemExit) as e:
        cli_main(["sweep"])  # --output missing
    assert e.value.code == 2


@pytest.mark.parametrize("kind", ["fifo", "dir"])
def test_cli_output_that_is_no_regular_file_is_refused_before_measuring(tmp_path, capsys, kind):
    """The sweep reads its --output to resume, then appends to it: a FIFO (before: the run measured, then
    waited forever on it) or a folder is one line before any measurement."""
    out = tmp_path / "runs.csv"
    os.mkfifo(out) if kind == "fifo" else out.mkdir()
    rc = cli_main(["sweep", "--output", str(out)])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "\n" not in err and "regular CSV file" in err and str(out) in err
