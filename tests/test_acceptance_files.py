"""Acceptance files other tools write, read by content (simulator/specs/acceptance_files.py).

Anchors: hand computations of AL(K) = 1 + a_1 + a_1 a_2 + ... from the file's rates; the formats'
own definitions (Model-Optimizer PR #2247: marginal[i] = P(at least i+1 drafts accepted),
histogram keys = accepted + 1; vLLM serve.py: per-position rate = accepted at i / drafts; vLLM PR
#48915: acceptance_histogram[j] = steps accepting exactly j drafts).
"""
from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

from simulator.specs.acceptance_files import parse_acceptance_bytes, read_acceptance_file
from cli_inprocess import run_main

ROOT = Path(__file__).resolve().parent.parent
FIX = ROOT / "tests" / "fixtures" / "vllm"

# hand: a = 0.8, 0.6, 0.4, 0.3 -> marginals 0.8, 0.48, 0.192, 0.0576
# AL(1) = 1 + 0.8 = 1.8; AL(2) = 1.8 + 0.8*0.6 = 2.28; AL(3) = 2.28 + 0.8*0.6*0.4 = 2.472
HAND_AL = {1: 1.8, 2: 2.28, 3: 2.472}
# hand: over 10000 steps, P(length L) = P(>= L-1 accepted) - P(>= L accepted):
# L=1: 1-0.8 = 0.2, L=2: 0.8-0.48 = 0.32, L=3: 0.48-0.192 = 0.288, L=4: 0.192-0.0576 = 0.1344, L=5: 0.0576
PROFILE = {"schema_version": "1.0", "measured": True, "producer": "specdec_bench", "method": "eagle3",
           "num_speculative_tokens": 4, "conditional_accept_rates": [0.8, 0.6, 0.4, 0.3],
           "marginal_accept_rates": [0.8, 0.48, 0.192, 0.0576], "mean_accept_length": 2.5296,
           "acceptance_length_histogram": {"1": 2000, "2": 3200, "3": 2880, "4": 1344, "5": 576},
           "max_supported_k": 3, "accept_length_model": "chain_analytic",
           "measurement_conditions": {"dataset": "mt_bench", "osl": 2048, "num_samples": 80}}
BENCH = {"model_id": "meta-llama/Llama-3.1-70B-Instruct", "max_concurrency": 8, "num_prompts": 200,
         "completed": 200, "median_itl_ms": 20.0, "output_throughput": 400.0,
         "spec_decode_acceptance_length": 2.472, "spec_decode_per_position_acceptance_rates": [0.8, 0.48, 0.192]}


def _write(tmp_path, name, obj) -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(obj) if not isinstance(obj, str) else obj)
    return path


def test_speculation_profile_lengths_and_cap(tmp_path):
    got = read_acceptance_file(_write(tmp_path, "speculation_profile.json", PROFILE))
    assert got.conditional == (0.8, 0.6, 0.4, 0.3)
    assert got.acceptance_length([1, 2, 3]) == pytest.approx([HAND_AL[1], HAND_AL[2], HAND_AL[3]])
    assert got.max_supported_k == 3
    assert "speculation_profile.json" in got.source and "mt_bench" in got.source and "eagle3" in got.source


def test_bench_json_unconditional_rates_give_the_same_lengths(tmp_path):
    # hand: vLLM r = 0.8, 0.48, 0.192 are unconditional: a = 0.8, 0.48/0.8 = 0.6, 0.192/0.48 = 0.4
    got = read_acceptance_file(_write(tmp_path, "bench.json", BENCH))
    assert got.conditional == pytest.approx((0.8, 0.6, 0.4))
    assert got.acceptance_length([1, 2, 3]) == pytest.approx([HAND_AL[1], HAND_AL[2], HAND_AL[3]])
    assert got.max_supported_k is None
    assert "unconditional" in got.conversion and "max concurrency 8" in got.source


def test_marginal_only_profile_is_converted(tmp_path):
    prof = {k: v for k, v in PROFILE.items() if k != "conditional_accept_rates"}
    got = read_acceptance_file(_write(tmp_path, "p.json", prof))
    assert got.conditional == pytest.approx((0.8, 0.6, 0.4, 0.3))
    assert "marginal" in got.conversion


def test_measured_per_k_profile_caps_at_its_k(tmp_path):
    prof = {k: v for k, v in PROFILE.items() if k not in ("max_supported_k", "accept_length_model")}
    assert read_acceptance_file(_write(tmp_path, "p.json", prof)).max_supported_k is None
    prof["accept_length_model"] = "measured_per_k"  # block-parallel drafts (dflash): K does not extrapolate
    got = read_acceptance_file(_write(tmp_path, "p.json", prof))
    assert got.max_supported_k == 4 and "measured_per_k" in got.source


def test_per_request_histogram(tmp_path):
    # vLLM PR #48915's own example: [39, 1, 0, 3] over 43 steps, 10 accepted, mean 1.2325581395348837
    # hand: accepted >= 1: 4 of 43; >= 2: 3 of 4; >= 3: 3 of 3 -> a = 4/43, 3/4, 1 (held at 0.999)
    resp = {"choices": [], "metrics": {"speculative_decoding": {
        "mean_acceptance_length": 1.2325581395348837, "draft_acceptance_rate": 0.07751937984496124,
        "acceptance_histogram": [39, 1, 0, 3], "num_spec_steps": 43, "num_accepted_draft_tokens": 10,
        "num_draft_tokens": 129, "num_spec_tokens": 3}}}
    got = read_acceptance_file(_write(tmp_path, "resp.json", resp))
    assert got.conditional == pytest.approx((4 / 43, 3 / 4, 0.999))
    assert "43 verify steps" in got.source


def test_per_request_histogram_by_draft_length(tmp_path):
    # hand: K=1 steps [2, 8] and K=3 steps [1, 2, 3, 4] (10 each).
    # a_1 = (8 + 9) / 20; a_2 (K >= 2 steps only) = (3 + 4) / 9; a_3 = 4 / 7
    sd = {"acceptance_histogram_by_draft_length": {"1": [2, 8], "3": [1, 2, 3, 4]}, "num_spec_steps": 20,
          "mean_acceptance_length": 1 + (8 + 2 + 6 + 12) / 20}
    got = read_acceptance_file(_write(tmp_path, "resp.json", [{"metrics": {"speculative_decoding": sd}}]))
    assert got.conditional == pytest.approx((17 / 20, 7 / 9, 4 / 7))


def test_metrics_scrape_and_csv_rows(tmp_path):
    # the fixture's counters, engines 0 + 1: drafts 9000 + 9040 = 18040; accepted at positions 0, 1, 2:
    # 7080 + 7110 = 14190, 5495 + 5518 = 11013, 3975 + 3981 = 7956 (unconditional: / drafts)
    got = read_acceptance_file(FIX / "metrics_k3.txt")
    assert got.conditional == pytest.approx((14190 / 18040, 11013 / 14190, 7956 / 11013), abs=1e-6)
    csv = ("source,target,draft,k,n_steps,per_position_acceptance\n"
           'engine,smollm2-135m,ngram,2,100,"[0.5, 0.4]"\n'
           'engine,smollm2-135m,ngram,3,300,"[0.7, 0.6, 0.2]"\n'
           "engine,smollm2-135m,ngram,0,300,[]\n")
    got = read_acceptance_file(_write(tmp_path, "runs.csv", csv))
    # hand: step-weighted: a_1 = (0.5*100 + 0.7*300) / 400 = 0.65; a_2 = (40 + 180) / 400 = 0.55; a_3 = 0.2
    assert got.conditional == pytest.approx((0.65, 0.55, 0.2))
    assert "smollm2-135m" in got.source


def _predict(acceptance, **kw):
    from simulator.plan.api import predict
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return predict("default", draft="eagle3", acceptance=acceptance, batch_sizes="1-64", **kw)


def test_max_supported_k_caps_the_table_and_every_export(tmp_path):
    path = _write(tmp_path, "speculation_profile.json", PROFILE)
    # at a long context (a verify step barely dearer than a plain one) the per-batch argmax over these
    # rates wants K > 3 without the cap
    free = _predict("0.8,0.6,0.4,0.3", context_len=32768)
    assert free.grid.ks[free.grid.argmax_k_index()].max() > 3
    capped = _predict(str(path), context_len=32768)
    assert capped.scenario.k_max == 3 and capped.grid.ks.max() == 3 and capped.table.k_opt.max() <= 3
    pred = _predict(str(path), context_lens="512,2048,8192")
    assert pred.scenario.k_max == 3 and pred.table.k_opt.max() <= 3
    assert pred.scenario.acceptance.acceptance_length([1, 2, 3]) == pytest.approx(list(HAND_AL.values()))
    ks = {"vllm": lambda p: [r[-1] for r in p["num_speculative_tokens_per_batch_size"]] + [p["num_speculative_tokens"]],
          "vllm-ctx": lambda p: [r[-1] for r in p["num_speculative_tokens_per_batch_size"]] + [p["num_speculative_tokens"]],
          "trtllm": lambda p: list(p["draft_len_schedule"].values()) + [p["max_draft_len"]],
          "sglang": lambda p: [k for v in p.values() for k in v["candidate_steps"]]}
    for fmt, get in ks.items():
        assert max(get(pred.export(fmt).payload)) <= 3, fmt
    sps = pred.export("sglang-sps").payload
    assert max(sps["sample_batch_tokens"]) <= 64 * (3 + 1)  # B (K + 1) with K <= 3
    assert "speculation_profile.json" in pred.provenance["acceptance"]


def test_predict_cli_reads_the_file(tmp_path):
    path = _write(tmp_path, "speculation_profile.json", PROFILE)
    out = run_main("simulator.predict", "--draft", "eagle3", "--batch-sizes", "1-16",
                   "--acceptance", str(path), "--format", "vllm", cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["num_speculative_tokens"] <= 3
    assert "K capped at 3" in out.stderr


def test_dashboard_upload_reads_any_format():
    got = parse_acceptance_bytes((FIX / "bench_k3_c8.json").read_bytes(), "bench.json")
    # hand: r = 0.7866, 0.6105, 0.4410 -> a = 0.7866, 0.6105/0.7866, 0.4410/0.6105
    assert got.conditional == pytest.approx((0.7866, 0.6105 / 0.7866, 0.4410 / 0.6105), abs=1e-6)


def test_engine_runs_write_a_profile_the_reader_takes_back(tmp_path):
    from calibration.engine.__main__ import main
    runs = tmp_path / "runs.csv"
    runs.write_text("source,target,draft,device,dtype,batch_size,k,n_steps,per_position_acceptance\n"
                    'engine,smollm2-135m,ngram,cpu,float32,1,2,100,"[0.5, 0.4]"\n'
                    'engine,smollm2-135m,ngram,cpu,float32,1,3,300,"[0.7, 0.6, 0.2]"\n')
    out = tmp_path / "speculation_profile.json"
    assert main(["profile", "--runs", str(runs), "--output", str(out)]) == 0
    prof = json.loads(out.read_text())
    # hand: a = 0.65, 0.55, 0.2 (step-weighted, as above); marginal = 0.65, 0.3575, 0.0715; AL = 2.079
    assert prof["schema_version"] == "1.0" and prof["num_speculative_tokens"] == 3 and prof["method"] == "ngram"
    assert prof["conditional_accept_rates"] == pytest.approx([0.65, 0.55, 0.2])
    assert prof["marginal_accept_rates"] == pytest.approx([0.65, 0.3575, 0.0715])
    assert prof["mean_accept_length"] == pytest.approx(2.079)
    back = read_acceptance_file(out)
    assert back.conditional == pytest.approx((0.65, 0.55, 0.2)) and back.max_supported_k is None


def test_sweep_acceptance_preset_reads_a_file_next_to_the_sweep(tmp_path):
    from simulator.specs.scenario import build_scenario
    from simulator.sweep import parse_sweep
    _write(tmp_path, "speculation_profile.json", PROFILE)
    spec_file = tmp_path / "sweep.toml"
    spec_file.write_text('name = "s"\n[sweep]\nbase = "sizing-dense-command-a"\nhardware = ["h200"]\ntp = [4]\n'
                         'policies = ["plain"]\n[acceptance.measured]\nfile = "speculation_profile.json"\n'
                         '[run]\nn_requests = 20\nsearch_steps = 0\nduration_s = 2.0\nmax_requests = 60\n')
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        spec = parse_sweep(spec_file, output_dir=str(tmp_path / "out"))
        task = spec.tasks[0]
        sc = build_scenario(task.raw, task.origin, task.base_dir)
    assert task.axes["acceptance"] == "measured"
    assert sc.k_max == 3 and sc.acceptance.rates == (0.8, 0.6, 0.4, 0.3)  # the file's max_supported_k caps K
