"""Readers for `vllm bench serve --save-result` JSON and vLLM /metrics Prometheus text."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from calibration import vllm_io as v

FIX = Path(__file__).parent / "fixtures" / "vllm"


def test_bench_json_with_spec_decode():
    r = v.bench_to_row(FIX / "bench_k3_c8.json", v.BenchRun(draft="eagle"))
    assert list(r) == list(v.ROW_COLUMNS)
    assert r["source"] == "vllm-bench-serve" and r["target"] == "meta-llama/Llama-3.1-8B-Instruct"
    assert r["batch_size"] == 8 and r["k"] == 3 and r["itl_ms"] == 26.74
    assert r["acceptance_length"] == pytest.approx(2.8381)
    a = json.loads(r["per_position_acceptance"])  # conditional a_i from vLLM's unconditional r_i
    assert a[0] == pytest.approx(0.7866) and a[1] == pytest.approx(0.6105 / 0.7866, rel=1e-4)
    assert 1 + a[0] + a[0] * a[1] + a[0] * a[1] * a[2] == pytest.approx(r["acceptance_length"], abs=1e-3)
    assert r["goodput_per_seq"] == pytest.approx(2.8381 / 0.02674, rel=1e-4)
    assert r["date"] == "2025-06-12T14:15:03"


def test_bench_json_plain_decoding():
    r = v.bench_to_row(FIX / "bench_k0_c8.json")
    assert r["k"] == 0 and r["acceptance_length"] == 1.0 and r["per_position_acceptance"] == "[]"
    with pytest.raises(v.VllmFormatError, match="bench_k0_c8.json: no spec_decode"):
        v.bench_to_row(FIX / "bench_k0_c8.json", v.BenchRun(k=3))
    # acceptance from /metrics scrapes when the JSON lacks spec_decode_* fields
    r = v.bench_to_row(FIX / "bench_k0_c8.json", v.BenchRun(k=3), metrics_after=FIX / "metrics_k3.txt")
    assert r["k"] == 3 and r["acceptance_length"] == pytest.approx(1 + 33159 / 18040)


def test_bench_json_errors(tmp_path):
    with pytest.raises(v.VllmFormatError, match=r"bench_missing_itl.json: missing 'median_itl_ms' — was it written by `vllm bench serve --save-result`\?"):
        v.read_bench_json(FIX / "bench_missing_itl.json")
    bad = tmp_path / "bench.json"
    bad.write_text("{not json")
    with pytest.raises(ValueError, match="bench.json: not JSON"):
        v.read_bench_json(bad)
    with pytest.raises(v.VllmFormatError, match="nope.json: cannot read"):
        v.read_bench_json(tmp_path / "nope.json")
    bad.write_text(json.dumps({"median_itl_ms": 10, "output_throughput": 5, "completed": 3}))
    with pytest.raises(v.VllmFormatError, match="max_concurrency"):
        v.bench_to_row(bad)


def test_metrics_summed_over_engines():
    a = v.read_metrics(FIX / "metrics_k3.txt")
    assert a["k"] == 3
    assert a["acceptance_length"] == pytest.approx(1 + (16550 + 16609) / (9000 + 9040))
    assert a["acceptance_rate"] == pytest.approx((16550 + 16609) / (27000 + 27120))
    assert a["per_position_unconditional"][0] == pytest.approx((7080 + 7110) / 18040)
    assert 1 + sum(a["per_position_unconditional"]) == pytest.approx(a["acceptance_length"])


def test_metrics_before_after_diff(tmp_path):
    before = tmp_path / "before.txt"
    before.write_text(
        '# TYPE vllm:spec_decode_num_drafts_total counter\n'
        'vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 40\n'
        'vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} 120\n'
        'vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 60\n'
        'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="0"} 30\n'
        'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="1"} 20\n'
        'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="2"} 10\n')
    a = v.read_metrics(FIX / "metrics_k3.txt", before=before)
    assert a["acceptance_length"] == pytest.approx(1 + (33159 - 60) / (18040 - 40))


def test_prometheus_parser_labels_and_values():
    s = v.parse_prometheus('# HELP x y\nm_total{a="x,y",b="q\\"z"} 1.5e3 1700000000\nn NaN\n\n')
    assert s[0] == ("m_total", {"a": "x,y", "b": 'q"z'}, 1500.0)
    with pytest.raises(v.VllmFormatError, match="m.txt:1"):
        v.parse_prometheus("this is not prometheus", "m.txt")


def test_metrics_errors(tmp_path):
    with pytest.raises(v.VllmFormatError, match=r"metrics_no_spec.txt: no spec-decode counters \(vllm:spec_decode_\*\) — was speculative decoding enabled\?"):
        v.read_metrics(FIX / "metrics_no_spec.txt")
    part = tmp_path / "metrics.txt"
    part.write_text('vllm:spec_decode_num_drafts_total{engine="0"} 5\n')
    with pytest.raises(ValueError, match="metrics.txt: missing counter 'vllm:spec_decode_num_draft_tokens_total'"):
        v.read_metrics(part)
    zero = tmp_path / "zero.txt"
    zero.write_text('vllm:spec_decode_num_drafts_total 0\nvllm:spec_decode_num_draft_tokens_total 0\n'
                    'vllm:spec_decode_num_accepted_tokens_total 0\n')
    with pytest.raises(v.VllmFormatError, match="zero.txt: .*num_drafts_total is 0"):
        v.read_metrics(zero)


def test_metrics_to_row():
    r = v.metrics_to_row(FIX / "metrics_k3.txt", target="llama-8b", draft="eagle", batch_size=8, itl_ms=26.74)
    assert list(r) == list(v.ROW_COLUMNS) and r["k"] == 3 and r["throughput"] == pytest.approx(r["goodput_per_seq"] * 8)


def test_schema_matches_engine():
    pytest.importorskip("torch")
    from calibration.engine.sweep import COLUMNS
    assert list(v.ROW_COLUMNS) == COLUMNS
