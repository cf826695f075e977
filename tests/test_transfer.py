"""Transfer validation against published GPU measurements (calibration/data/published/corpus.csv).

Anchors: the published numbers themselves (each row cites its table); nothing here was fitted to
them. Run alone with `pytest -m transfer`.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from calibration import transfer as T

pytestmark = pytest.mark.transfer
REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def corpus() -> pd.DataFrame:
    return pd.read_csv(T.CORPUS)


def _rows(corpus, ids):
    return [T.case_for(corpus[corpus.row_id == i].iloc[0]) for i in ids]


def test_iid_rate_inverts_acceptance_length_hand():
    # hand: a = 0.8, K = 3 -> AL = 1 + 0.8 + 0.64 + 0.512 = 2.952
    assert T.iid_rate(2.952, 3) == pytest.approx(0.8, abs=1e-9)


def test_per_user_throughput_row_becomes_step_time(corpus):
    # published: gpt-fast README, Llama-2-7B bf16 on one A100 at batch 1: 104.9 tok/s -> 9.53 ms per step
    case = _rows(corpus, [1])[0]
    assert case.kind == "plain" and case.measured == pytest.approx(1000 / 104.9)
    assert case.raw["hardware"] == {"name": "a100-80gb", "tp": 1}


# Missed since the fifteenth pass (2026-12-08): the ops priced off the measured tables pay 2 us a kernel, 5 element-wise
# kernels a layer (how many torch.compile leaves gpt-fast was not read), 0.3 ms on these 3-4 ms TP 8 steps; the rows'
# mean error went from within 10% to 13.5% (TP 8 rows +13% to +28%). Reported, not tuned (docs/learned_layer_choices.md).
@pytest.mark.xfail(strict=True, reason="gpt-fast A100 rows at 13.5% mean error since the fifteenth pass")
def test_gpt_fast_a100_dense_rows_within_ten_percent(corpus):
    # published: gpt-fast README bf16 rows (Llama-2-7B / Llama-3.1-8B / Llama-2-70B, TP 1-8, batch 1)
    ids = [1, 6, 9, 10, 11, 12, 13, 14, 15, 16, 17, 19, 20]
    errs = [T.predict_case(c, "planner", None)[0] / c.measured - 1 for c in _rows(corpus, ids)]
    assert np.mean(np.abs(errs)) <= 0.10, errs


def test_magicdec_h100_plain_steps_within_ten_percent(corpus):
    # published: MagicDec (arXiv 2408.11049) Tables 3 and 7, plain per-step latency on 8 x H100 at
    # 8k-32k contexts, batch 8-128 (T_AR)
    ids = [122, 124, 126, 128, 138, 140, 142, 144, 146, 148, 150, 152, 154, 156, 158]
    cases = _rows(corpus, ids)
    errs = np.array([T.predict_case(c, "planner", None)[0] / c.measured - 1 for c in cases])
    errs_ds = np.array([T.predict_case(c, "datasheet", None)[0] / c.measured - 1 for c in cases])
    assert np.mean(np.abs(errs)) <= 0.10, errs
    assert np.mean(np.abs(errs)) < np.mean(np.abs(errs_ds))  # measured tables beat the datasheet


def test_eagle_chain_speedup_falls_with_batch_size(corpus):
    # published: EAGLE-3 paper (arXiv 2503.01840) Table 4, chain EAGLE on Llama-3.1-8B / H100 / SGLang:
    # the measured speedup falls from 1.40x at B=2 to 0.88x at B=48; the planner's falls too, though
    # far less (1.27x at B=48: the miss transfer.md reports), so only the direction is asserted here
    ids = [35, 36, 37, 38, 39, 40, 41]
    cases = _rows(corpus, ids)
    al, _ = T.anchor_acceptance(cases)[35]
    pred = [T.predict_case(c, "planner", al)[0] for c in cases]
    assert np.all(np.diff(pred[1:]) < 0) and pred[-1] < pred[0], pred


def test_committed_report_matches_the_band_file():
    # the band every prediction quotes is the committed transfer report's step-time MAPE
    summary = json.loads((REPO / "calibration" / "data" / "transfer" / "transfer.json").read_text())
    bands = json.loads((REPO / "simulator" / "data" / "transfer_error.json").read_text())
    assert bands["_all"]["step_time_mape"] == pytest.approx(summary["step_time"]["planner"]["mape"])
    assert summary["step_time"]["planner"]["mape"] < summary["step_time"]["datasheet"]["mape"]
    assert summary["step_time"]["planner"]["n"] >= 30 and len(summary["step_time"]["sources"]) >= 6
    assert len(summary["step_time"]["gpus"]) >= 3


def test_the_band_file_is_the_committed_reports_figures():
    # transfer_error.json is written from transfer.json alone (transfer_report.bands): every figure a prediction
    # quotes is the committed report's (its date aside)
    from calibration.transfer_report import bands
    summary = json.loads((REPO / "calibration" / "data" / "transfer" / "transfer.json").read_text())
    committed = json.loads((REPO / "simulator" / "data" / "transfer_error.json").read_text())
    assert bands(summary) | {"_date": committed["_date"]} == committed


def test_a_deployment_fit_quotes_how_often_its_intervals_held_out(tmp_path):
    # the two-shot protocol (transfer.md): 90% posterior intervals scored on points their curve's fit never saw; a
    # deployment fit's band quotes that share, and tells the reader to read it as such where it falls short of 85%
    from simulator.specs.uncertainty import posterior_interval_trust_text
    two = json.loads((REPO / "calibration" / "data" / "transfer" / "transfer.json").read_text())["two_shot"]
    text = posterior_interval_trust_text()
    assert f"held {two['interval_coverage']:.0%} of {two['n']} points" in text
    assert f"{two['curves']} published speedup curves" in text
    assert ("read them as about" in text) == (two["interval_coverage"] < 0.85)


def test_dli_trtllm_a100_static_steps_within_ten_percent(corpus):
    # published: NVIDIA DLI 'Sizing LLM Inference Systems', TensorRT-LLM v0.9.0 token-to-token latency,
    # A100-SXM4-80GB, FP16, TP1, 128/2048 tokens: Llama-2-7B / 13B and Mistral-7B at B = 1..32
    rows = corpus[(corpus.source_id == "nvidia-dli-trtllm-v090") & (corpus.device == "A100-80GB")
                  & (corpus.tp == 1) & (corpus.batch_size <= 32)]
    assert len(rows) >= 15
    cases = [T.case_for(r) for _, r in rows.iterrows()]
    errs = [T.predict_case(c, "planner", None)[0] / c.measured - 1 for c in cases]
    assert max(abs(e) for e in errs) < 0.10, errs


def test_random_weight_moe_rows_are_not_scored(corpus):
    # the DLI runs used random weights: Mixtral's measured step (10.4 ms, A100 TP2 B=8) is half its
    # all-experts bf16 roofline, so the router did not spread tokens as the model does
    row = corpus[(corpus.source_id == "nvidia-dli-trtllm-v090") & (corpus.model == "mixtral-8x7b")].iloc[0]
    assert "random weights" in T.case_for(row)


def test_rtx3090_eagle_chain_loses_at_large_batch_on_the_datasheet(corpus):
    # published: EAGLE-3 paper (arXiv 2503.01840) Table 5, chain EAGLE (K=2) on Llama-3.1-8B, one
    # RTX 3090, vLLM: 1.30x at B=2 falling to 0.82x at B=48 and 0.71x at B=56. The 3090's 71 TFLOP/s
    # over 936 GB/s makes the verify pass compute-bound by a few dozen sequences; the datasheet
    # alone (no kernel tables exist for it) reproduces the losing end
    ids = [56, 57, 58, 59, 60, 61, 62, 63]
    cases = _rows(corpus, ids)
    al, anchored = T.anchor_acceptance(cases)[56]
    assert anchored
    pred = {int(c.row.batch_size): T.predict_case(c, "planner", al)[0] for c in cases}
    assert pred[48] < 1 and pred[56] < 1 and pred[4] > 1.2
    meas = {int(c.row.batch_size): c.measured for c in cases}
    assert all(abs(pred[b] / meas[b] - 1) < 0.25 for b in pred)


def test_magicdec_self_speculation_pays_only_at_long_context(corpus):
    # published: MagicDec (arXiv 2408.11049) Table 1, Llama-3.1-8B on 8xA100 drafting for itself over a
    # 512-token StreamingLLM KV, B=32, K=2: 0.90x at 4k context, 1.22x at 32k, 1.64x at 100k
    ids = [73, 81, 89, 95, 101, 105]
    cases = _rows(corpus, ids)
    assert all(c.raw["draft"]["method"] == "self:512" for c in cases)
    pred = [T.predict_case(c, "planner", float(c.row.acceptance_length))[0] for c in cases]
    meas = [c.measured for c in cases]
    assert np.all(np.diff(pred) > 0) and np.all(np.diff(meas) > 0)
    assert pred[0] < 1 < pred[-1]  # the planner's decision flips where the measured one does


def test_end_to_end_speedup_rows_include_the_prefill(corpus):
    # AMD ROCm MTP blog, Table 1: speedup of mean request latency (3200-token prompts, 800 outputs),
    # so the shared prefill dilutes the decode speedup; the planner prices it through the serving loop
    case = _rows(corpus, [166])[0]
    assert case.end_to_end and case.raw["routing"]["reuse"] == T.MOE_REUSE
    e2e = T.predict_case(case, "planner", 2.5)[0]
    decode_only = T.predict_case(T.Case(case.row, "speedup", case.raw, case.measured), "planner", 2.5)[0]
    assert 1.0 < e2e < decode_only


def test_dli_mistral_steps_follow_trtllm_09s_per_query_head_attention(corpus):
    # published: NVIDIA DLI TensorRT-LLM v0.9.0 token-to-token latency, Mistral-7B-v0.1 (32 query / 8 KV
    # heads), TP 1, B = 64 and 120 on H100 / H200 / A100 / L40S. v0.9.0 has no XQA build for 4 query
    # heads per KV head (simulator/data/engines/trtllm-0.9.0.toml): its MMHA kernel re-reads each KV head
    # per query head. Priced with a grouped kernel (TensorRT-LLM 1.1's profile) the planner is 20-45%
    # fast at B = 120 on H100 / H200; with 0.9's kernel choice and the L2 re-read cost, within 25%
    rows = corpus[(corpus.source_id == "nvidia-dli-trtllm-v090") & (corpus.model == "mistral-7b-v0.1")
                  & (corpus.tp == 1) & corpus.batch_size.isin([64, 120])]
    assert len(rows) >= 8
    cases = [T.case_for(r) for _, r in rows.iterrows()]
    assert all(c.raw["engine"] == {"name": "trtllm", "version": "0.9.0"} for c in cases)
    errs = np.array([T.predict_case(c, "planner", None)[0] / c.measured - 1 for c in cases])
    assert np.abs(errs).max() < 0.25, errs
    grouped = [T.Case(c.row, c.kind, c.raw | {"engine": {"name": "trtllm", "version": "1.1.0"}}, c.measured)
               for c in cases if c.row.device in ("H100-SXM", "H200") and c.row.batch_size == 120]
    errs_grouped = np.array([T.predict_case(c, "planner", None)[0] / c.measured - 1 for c in grouped])
    assert np.all(errs_grouped < -0.15), errs_grouped


def test_rows_keep_their_stated_expert_split_and_engine_backend(corpus):
    # row 203 (TensorRT-LLM tech blog 2: "MLA TP8, MoE EP2") states ep = 2; rows that state none keep the
    # planner's default (experts sliced over all TP ranks)
    mtp, plain = _rows(corpus, [203, 197])
    assert mtp.raw["hardware"] == {"name": "b200", "tp": 8, "ep": 2}
    assert "ep" not in plain.raw["hardware"]
    # blogs 1 and 2 ran the PyTorch backend (CUDA graphs, MTP), not the 0.12 C++ runtime their date matched
    assert mtp.raw["engine"] == plain.raw["engine"] == {"name": "trtllm", "version": "1.1.0"}


def test_step_parts_read_from_the_published_table_hand(corpus):
    # published: MagicDec (arXiv 2408.11049) Appendix A.2 Table 3(c), 8 x A100, B = 32, S = 4000, gamma = 2,
    # self-speculation over a StreamingLLM KV of 512: T_AR 8.83 ms, T_SD 9.78 ms per token, gamma x T_D
    # 13.16 ms, T_V 10.32 ms, Omega 2.54 -> the whole speculative step 9.78 x 2.54 = 24.84 ms
    from calibration.transfer_components import published_parts
    parts = published_parts(corpus[corpus.row_id == 73].iloc[0])
    assert parts == {"plain": 8.83, "draft": 13.16, "verify": 10.32, "step": pytest.approx(24.8412)}
    assert published_parts(corpus[corpus.row_id == 72].iloc[0]) is None  # its plain row: no parts


def test_every_expressible_row_with_published_parts_is_priced_by_part(corpus):
    with_parts = corpus[corpus.notes.fillna("").str.contains("gamma*T_D=", regex=False)]
    expressible = {int(r.row_id) for _, r in with_parts.iterrows() if not isinstance(T.case_for(r), str)}
    priced = T.part_cases(corpus)
    assert {int(c.row.row_id) for c, _ in priced} == expressible and len(expressible) >= 20
    for case, grid in priced:  # one batch size, K = 0 and the row's K
        assert grid.itl_s.shape == (1, 2) and int(grid.ks[1]) == int(case.row.k)


def test_closed_loop_rows_run_the_speculating_server_at_its_own_cap(corpus):
    # AMD ROCm MTP blog Table 2 (ShareGPT): "batch_size = max concurrency" on SGLang 0.5.0rc0, whose
    # speculative servers run at most 48 requests at once with no --max-running-requests (its
    # server_args.py:624-626; engine profile sglang-0.5.0rc0.toml). At 64 users 16 queue: the mean-latency
    # ratio is the throughput ratio (Little's law), R gp_K(R) / (B gp_0(B)) with R = 48, B = 64.
    from simulator.plan.grid import compute_grid
    wide, narrow = _rows(corpus, [178, 176])
    assert wide.closed_loop and narrow.closed_loop
    sc = T.speedup_scenario(wide, "planner", 2.6)
    assert sc.engine.version == "0.5.0rc0" and T.speculative_running(sc, wide) == 48
    g = compute_grid(sc, batch_sizes=[48, 64], ks=[0, 2])
    hand = 48 * g.goodput_per_seq[0, 1] / (64 * g.goodput_per_seq[1, 0])
    assert T.step_speedup(sc, wide) == pytest.approx(hand, rel=1e-12)
    assert hand < g.goodput_per_seq[1, 1] / g.goodput_per_seq[1, 0]  # the cap costs speculation throughput
    # below the cap nothing queues: the plain step speedup at B
    sc16 = T.speedup_scenario(narrow, "planner", 2.6)
    g16 = compute_grid(sc16, batch_sizes=[16], ks=[0, 2])
    assert T.speculative_running(sc16, narrow) == 16
    assert T.step_speedup(sc16, narrow) == pytest.approx(g16.goodput_per_seq[0, 1] / g16.goodput_per_seq[0, 0])
    # the EAGLE-3 paper's SGLang rows state a batch size, not a concurrency: no cap is assumed there
    (eagle,) = _rows(corpus, [43])
    assert not eagle.closed_loop


def test_step_time_by_tp_by_hand_and_in_the_report():
    from calibration.transfer_report import step_time_by_tp
    rows = pd.DataFrame({"tp": [1, 1, 2, 4], "error": [-0.1, 0.1, -0.2, np.nan]})
    got = step_time_by_tp(rows)
    assert set(got) == {"1", "2"}  # a TP whose rows have no error is left out
    assert got["1"] == pytest.approx({"n": 2, "mape": 0.1, "median_error": 0.0, "worst": 0.1})
    assert got["2"] == pytest.approx({"n": 1, "mape": 0.2, "median_error": -0.2, "worst": 0.2})
    # the committed report: one line per TP the step rows span, the same figures as the committed rows
    committed = pd.read_csv(T.OUT_DIR / "transfer_rows.csv")
    step = committed[committed.kind.isin(["plain", "itl", "run"])]
    md = (T.OUT_DIR / "transfer.md").read_text()
    for tp, g in step.groupby("tp"):
        assert f"| {tp} | {len(g)} | {g.error.abs().mean():.1%} | {g.error.median():+.1%} |" in md
