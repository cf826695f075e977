"""Bad-input corpus: every command line, file reader and dashboard upload helper, fed hostile input.

Each case must be refused the way the project promises (README, simulator/errors.py): exit code 2
(or a PlannerError for a reader), exactly one line on stderr that starts with 'error:', no
traceback, and nothing changed on disk (every file under the case's folder hashed, with its mode,
before and after). The cases are tables; `test_corpus_size` prints how many there are (the issue
asks for at least 150). Two hypothesis tests mutate config.json files and scenarios at random:
each mutation must either be refused with a PlannerError or give finite, positive step times.
"""
from __future__ import annotations

import contextlib
import copy
import hashlib
import io
import json
import math
import os
import stat
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simulator.errors import PlannerError

REPO = Path(__file__).resolve().parent.parent
MODELS = REPO / "simulator" / "data" / "models"
CPU_PROFILE = REPO / "calibration" / "data" / "cpu-xeon-2c.profile.json"
CPU_RAW = REPO / "calibration" / "data" / "cpu-xeon-2c.raw.csv"
RUNS = REPO / "calibration" / "data" / "runs" / "smollm2-cpu-ngram.csv"
VLLM = REPO / "tests" / "fixtures" / "vllm"

try:
    import torch
    HAS_CUDA = torch.cuda.is_available()
except ImportError:  # pragma: no cover
    HAS_CUDA = False


# --- the fixture folder: one copy of every bad file, built once --------------------------------

def _cfg(name: str) -> dict:
    return json.loads((MODELS / f"{name}.json").read_text())


def _with(base: dict, **changes) -> dict:
    out = copy.deepcopy(base)
    for key, value in changes.items():
        if value is _DROP:
            out.pop(key, None)
        else:
            out[key] = value
    return out


_DROP = object()
LLAMA, QWEN_MOE, DEEPSEEK, GPT_OSS = _cfg("llama-3.1-8b"), _cfg("qwen3-30b-a3b"), _cfg("deepseek-v3"), _cfg("gpt-oss-120b")

# config.json mutations: (name, dict or raw bytes, substring the message must contain)
CONFIGS = [
    ("kv-heads-string", _with(LLAMA, num_key_value_heads="8"), "num_key_value_heads"),
    ("kv-heads-negative", _with(LLAMA, num_key_value_heads=-8), "num_key_value_heads"),
    ("kv-heads-not-divisor", _with(LLAMA, num_key_value_heads=5), "multiple"),
    ("kv-heads-above-heads", _with(LLAMA, num_key_value_heads=64), "multiple"),
    ("head-dim-negative", _with(LLAMA, head_dim=-128), "head_dim"),
    ("head-dim-string", _with(LLAMA, head_dim="abc"), "head_dim"),
    ("head-dim-float", _with(LLAMA, head_dim=128.5), "head_dim"),
    ("sliding-window-string", _with(LLAMA, sliding_window="abc"), "sliding_window"),
    ("sliding-window-negative", _with(LLAMA, sliding_window=-4096), "sliding_window"),
    ("quant-config-string", _with(LLAMA, quantization_config="fp8"), "quantization_config"),
    ("quant-method-number", _with(LLAMA, quantization_config={"quant_method": 8}), "quant_method"),
    ("layer-types-int", _with(LLAMA, sliding_window=4096, layer_types=5), "layer_types"),
    ("layer-types-wrong-length", _with(LLAMA, sliding_window=4096, layer_types=["sliding_attention"]), "layer_types"),
    ("layer-types-numbers", _with(LLAMA, sliding_window=4096, layer_types=[1] * 32), "layer_types"),
    ("window-pattern-zero", _with(LLAMA, sliding_window=4096, sliding_window_pattern=0), "sliding_window_pattern"),
    ("use-sliding-string", _with(LLAMA, sliding_window=4096, use_sliding_window="no"), "use_sliding_window"),
    ("hidden-zero", _with(LLAMA, hidden_size=0), "hidden_size"),
    ("hidden-float", _with(LLAMA, hidden_size=4096.0), "hidden_size"),
    ("hidden-bool", _with(LLAMA, hidden_size=True), "hidden_size"),
    ("hidden-huge", _with(LLAMA, hidden_size=10**30), "hidden_size"),
    ("hidden-not-multiple", _with(LLAMA, hidden_size=4097, head_dim=_DROP), "head_dim"),
    ("layers-missing", _with(LLAMA, num_hidden_layers=_DROP), "num_hidden_layers"),
    ("layers-negative", _with(LLAMA, num_hidden_layers=-1), "num_hidden_layers"),
    ("heads-zero", _with(LLAMA, num_attention_heads=0), "num_attention_heads"),
    ("vocab-string", _with(LLAMA, vocab_size="x"), "vocab_size"),
    ("intermediate-null", _with(LLAMA, intermediate_size=None), "intermediate_size"),
    ("intermediate-huge", _with(LLAMA, intermediate_size=2**40), "intermediate_size"),
    ("tie-string", _with(LLAMA, tie_word_embeddings="yes"), "tie_word_embeddings"),
    ("max-pos-negative", _with(LLAMA, max_position_embeddings=-1), "max_position_embeddings"),
    ("max-pos-string", _with(LLAMA, max_position_embeddings="128k"), "max_position_embeddings"),
    ("model-type-unknown", _with(LLAMA, model_type="gpt2"), "model_type"),
    ("model-type-number", _with(LLAMA, model_type=5), "model_type"),
    ("model-type-missing", _with(LLAMA, model_type=_DROP), "model_type"),
    ("top-level-list", [LLAMA], "JSON object"),
    ("moe-topk-above-experts", _with(QWEN_MOE, num_experts_per_tok=200), "num_experts_per_tok"),
    ("moe-experts-negative", _with(QWEN_MOE, num_experts=-1), "num_experts"),
    ("moe-mlp-only-string", _with(QWEN_MOE, mlp_only_layers="3"), "mlp_only_layers"),
    ("moe-mlp-only-out-of-range", _with(QWEN_MOE, mlp_only_layers=[500]), "mlp_only_layers"),
    ("moe-sparse-step-zero", _with(QWEN_MOE, decoder_sparse_step=0), "decoder_sparse_step"),
    ("moe-shared-negative", _with(QWEN_MOE, shared_expert_intermediate_size=-5), "shared_expert_intermediate_size"),
    ("deepseek-dense-above-layers", _with(DEEPSEEK, first_k_dense_replace=100), "dense layers"),
    ("moe-no-sparse-layer", _with(QWEN_MOE, decoder_sparse_step=49), "dense layers"),
    ("deepseek-shared-string", _with(DEEPSEEK, n_shared_experts="1"), "n_shared_experts"),
    ("deepseek-topk-above-experts", _with(DEEPSEEK, num_experts_per_tok=300), "num_experts_per_tok"),
    ("deepseek-kv-lora-zero", _with(DEEPSEEK, kv_lora_rank=0), "kv_lora_rank"),
    ("deepseek-mtp-negative", _with(DEEPSEEK, num_nextn_predict_layers=-1), "num_nextn_predict_layers"),
    ("gptoss-experts-string", _with(GPT_OSS, num_local_experts="128"), "num_local_experts"),
    ("not-json", b"{ this is not json", "JSON"),
    ("not-utf8", b"\xff\xfe\x00garbage", "JSON"),
    ("empty-file", b"", "JSON"),
]


def _dump(obj) -> bytes:
    return obj if isinstance(obj, bytes) else json.dumps(obj).encode()


# scenario mutations: (name, TOML text, substring)
BASE_TOML = """name = "bad"
[model]
name = "llama-3.1-8b"
[hardware]
name = "h100-sxm"
tp = 1
[draft]
method = "eagle"
[workload]
context_len = 1024
batch_sizes = "1-8"
k_max = 4
fixed_k = 2
"""


def _toml(section: str, line: str) -> str:
    """BASE_TOML with ``line`` added to (or replacing the same key in) ``section``."""
    key = line.split("=")[0].strip()
    lines, out, current, placed = BASE_TOML.splitlines(), [], "", False
    for ln in lines:
        if ln.startswith("["):
            if current == section and not placed:
                out.append(line)
                placed = True
            current = ln.strip("[] ")
        elif current == section and ln.split("=")[0].strip() == key:
            out.append(line)
            placed = True
            continue
        out.append(ln)
    if not placed:
        if current != section:
            out.append(f"[{section}]")
        out.append(line)
    return "\n".join(out) + "\n"


SCENARIOS = [
    ("context-beyond-model", _toml("workload", "context_len = 200000"), "max_position_embeddings"),
    ("context-zero", _toml("workload", "context_len = 0"), "context_len"),
    ("context-float", _toml("workload", "context_len = 1024.5"), "context_len"),
    ("allow-long-string", _toml("workload", 'allow_context_beyond_model = "yes"'), "allow_context_beyond_model"),
    ("bandwidth-nan", _toml("hardware", "hbm_bandwidth_bytes_per_s = nan"), "hbm_bandwidth_bytes_per_s"),
    ("bandwidth-inf", _toml("hardware", "hbm_bandwidth_bytes_per_s = inf"), "hbm_bandwidth_bytes_per_s"),
    ("bandwidth-negative", _toml("hardware", "hbm_bandwidth_bytes_per_s = -1.0"), "hbm_bandwidth_bytes_per_s"),
    ("peak-zero", _toml("hardware", "peak_bf16_flops_per_s = 0"), "peak_bf16_flops_per_s"),
    ("memory-nan", _toml("hardware", "memory_bytes = nan"), "memory_bytes"),
    ("price-negative-inf", _toml("hardware", "price_per_gpu_hour_usd = -inf"), "price_per_gpu_hour_usd"),
    ("tp-string", _toml("hardware", 'tp = "2"'), "tp"),
    ("tp-zero", _toml("hardware", "tp = 0"), "tp"),
    ("hardware-prefix", _toml("hardware", 'name = "h100"'), "h100-"),
    ("model-unknown", _toml("model", 'name = "llama"'), "unknown model"),
    ("acceptance-nan", _toml("acceptance", "rate = nan"), "rate"),
    ("acceptance-one", _toml("acceptance", "rate = 1.0"), "1"),
    ("acceptance-list-inf", _toml("acceptance", "rates = [0.8, inf]"), "rates"),
    ("acceptance-list-strings", _toml("acceptance", 'rates = ["a", "b"]'), "acceptance"),
    ("acceptance-both", _toml("acceptance", "rate = 0.7\nrates = [0.7]"), "not both"),
    ("memory-util-nan", _toml("workload", "memory_utilization = nan"), "memory_utilization"),
    ("memory-util-above-one", _toml("workload", "memory_utilization = 1.5"), "memory_utilization"),
    ("routing-skew-inf", _toml("routing", 'kind = "zipf"\nskew = inf'), "skew"),
    ("routing-skew-huge", _toml("routing", 'kind = "zipf"\nskew = 1e6'), "skew"),
    ("routing-skew-negative", _toml("routing", 'kind = "zipf"\nskew = -1.0'), "skew"),
    ("batch-huge-range", _toml("workload", 'batch_sizes = "1-99999999999999999999"'), "batch sizes"),
    ("batch-large-range", _toml("workload", 'batch_sizes = "1-100000"'), "batch sizes"),
    ("batch-zero", _toml("workload", 'batch_sizes = "0-8"'), "batch size"),
    ("batch-letters", _toml("workload", 'batch_sizes = "a-b"'), "batch sizes"),
    ("batch-list-strings", _toml("workload", 'batch_sizes = [1, "2"]'), "batch sizes"),
    ("batch-empty", _toml("workload", 'batch_sizes = ""'), "batch sizes"),
    ("k-max-99", _toml("workload", "k_max = 99"), "k_max"),
    ("fixed-k-negative", _toml("workload", "fixed_k = -1"), "K must be"),
    ("fixed-above-kmax", _toml("workload", "fixed_k = 9"), "fixed_k"),
    ("unknown-key", _toml("workload", "contxt_len = 5"), "contxt_len"),
    ("unknown-section", _toml("workloads", "x = 1"), "workloads"),
    ("dtype-unknown", _toml("precision", 'weights = "fp3"'), "fp3"),
    ("draft-unknown", _toml("draft", 'method = "eagle9"'), "eagle9"),
    ("malformed", BASE_TOML + "[workload\n", "malformed TOML"),
    ("engine-unknown", _toml("engine", 'name = "tgi"'), "tgi"),
]


def _profile(**changes) -> dict:
    data = json.loads(CPU_PROFILE.read_text())
    for key, value in changes.items():
        data[key] = value
    return data


PROFILES = [
    ("launch-negative", _profile(launch_overhead_s=-1), "launch_overhead_s"),
    ("launch-string", _profile(launch_overhead_s="4us"), "launch_overhead_s"),
    ("step-overhead-string", _profile(step_overhead_s={"fixed": "x"}), "step_overhead_s"),
    ("step-overhead-list", _profile(step_overhead_s=[1, 2]), "step_overhead_s"),
    ("engine-string", _profile(engine="fast"), "engine"),
    ("engine-scale-nan", _profile(engine={"scale": float("nan")}), "engine.scale"),
    ("device-list", _profile(device=["cpu"]), "device"),
    ("hardware-number", _profile(hardware=5), "hardware"),
    ("compute-curve-strings", _profile(compute_efficiency={"gemm": {"tokens": ["a"], "efficiency": [0.5]}}),
     "compute_efficiency"),
    ("compute-curve-nan-x", _profile(compute_efficiency={"gemm": {"tokens": [float("nan"), 2], "efficiency": [0.5, 0.5]}}),
     "compute_efficiency"),
    ("compute-not-object", _profile(compute_efficiency=[1, 2]), "compute_efficiency"),
    ("memory-eff-above", _profile(memory_efficiency={"bytes": [1, 2], "efficiency": [0.5, 3.0]}), "memory_efficiency"),
    ("collectives-bad", _profile(collectives={"all_reduce": {"2": {"alpha_s": 1, "bus_bandwidth_bytes_per_s": -1,
                                                                  "bytes": [1], "latency_s": [1]}}}), "collectives"),
    ("version-9", _profile(format_version=9), "format_version"),
    ("not-a-profile", {"hello": 1}, "not a calibration profile"),
]

HARDWARE = [
    ("hw-bandwidth-nan", 'name = "x"\npeak_bf16_flops_per_s = 1e15\nhbm_bandwidth_bytes_per_s = nan\nmemory_bytes = 8e10\n',
     "hbm_bandwidth_bytes_per_s"),
    ("hw-memory-string", 'name = "x"\npeak_bf16_flops_per_s = 1e15\nhbm_bandwidth_bytes_per_s = 3e12\nmemory_bytes = "80GB"\n',
     "memory_bytes"),
    ("hw-missing-peak", 'name = "x"\nhbm_bandwidth_bytes_per_s = 3e12\nmemory_bytes = 8e10\n', "peak_bf16_flops_per_s"),
    ("hw-latency-negative", 'name = "x"\npeak_bf16_flops_per_s = 1e15\nhbm_bandwidth_bytes_per_s = 3e12\n'
     'memory_bytes = 8e10\n[assumed]\ninterconnect_latency_s = -1.0\n', "interconnect_latency_s"),
    ("hw-assumed-not-table", 'name = "x"\npeak_bf16_flops_per_s = 1e15\nhbm_bandwidth_bytes_per_s = 3e12\n'
     'memory_bytes = 8e10\nassumed = 5\n', "assumed"),
    ("hw-fp8-inf", 'name = "x"\npeak_bf16_flops_per_s = 1e15\npeak_fp8_flops_per_s = inf\n'
     'hbm_bandwidth_bytes_per_s = 3e12\nmemory_bytes = 8e10\n', "peak_fp8_flops_per_s"),
    ("hw-compute-units-string", 'name = "x"\npeak_bf16_flops_per_s = 1e15\nhbm_bandwidth_bytes_per_s = 3e12\n'
     'memory_bytes = 8e10\ncompute_units = "132"\n', "compute_units"),
    ("hw-malformed", 'name = "x\n', "malformed TOML"),
]


def _raw_csv(edit) -> str:
    lines = CPU_RAW.read_text().splitlines()
    header = lines[0].split(",")
    rows = [ln.split(",") for ln in lines[1:40]]
    edit(header, rows)
    return "\n".join([",".join(header)] + [",".join(r) for r in rows]) + "\n"


def _set(col: str, value: str, row: int = 3):
    def edit(header, rows):
        rows[row][header.index(col)] = value
    return edit


RAWS = [
    ("raw-negative-bytes", _raw_csv(_set("bytes", "-4096")), "bytes"),
    ("raw-inf-median", _raw_csv(_set("median_s", "inf")), "median_s"),
    ("raw-nan-flops", _raw_csv(_set("flops", "nan")), "flops"),
    ("raw-negative-kernels", _raw_csv(_set("n_kernels", "-1")), "n_kernels"),
    ("raw-not-calibration", "a,b,c\n1,2,3\n", "not a calibration raw sample file"),
]


def _measured(edit) -> str:
    lines = RUNS.read_text().splitlines()
    import csv
    rows = list(csv.reader(lines))
    header, body = rows[0], rows[1:]
    edit(header, body)
    buf = io.StringIO()
    csv.writer(buf).writerows([header] + body)
    return buf.getvalue()


MEASURED = [
    ("meas-text-itl", _measured(_set("itl_ms", "fast")), "itl_ms"),
    ("meas-inf-itl", _measured(_set("itl_ms", "inf")), "itl_ms"),
    ("meas-negative-itl", _measured(_set("itl_ms", "-3")), "itl_ms"),
    ("meas-text-k", _measured(_set("k", "three")), "'k'"),
    ("meas-k-99", _measured(_set("k", "99")), "k"),
    ("meas-broken-ppa", _measured(_set("per_position_acceptance", "[0.5, ")), "per_position_acceptance"),
    ("meas-ppa-above-one", _measured(_set("per_position_acceptance", "[1.5]")), "per_position_acceptance"),
    ("meas-ppa-object", _measured(_set("per_position_acceptance", '{"a": 1}')), "per_position_acceptance"),
    ("meas-al-below-one", _measured(_set("acceptance_length", "0.2")), "acceptance_length"),
    ("meas-missing-column", "batch_size,k\n1,0\n", "missing column"),
    ("meas-empty", "", "csv"),
    ("meas-binary", "\x00\x01\x02", "csv"),
]

_BENCH = json.loads((VLLM / "bench_k3_c8.json").read_text())
BENCHES = [
    ("bench-broken-json", b"{ nope", "JSON"),
    ("bench-list", b"[1, 2]", "object"),
    ("bench-rate-above-one", _dump(_with(_BENCH, spec_decode_per_position_acceptance_rates=[1.2, 0.5])), "outside [0, 1]"),
    ("bench-rates-rising", _dump(_with(_BENCH, spec_decode_per_position_acceptance_rates=[0.3, 0.6])), "rises"),
    ("bench-rates-strings", _dump(_with(_BENCH, spec_decode_per_position_acceptance_rates=["a"])), "list of numbers"),
    ("bench-no-rates", _dump(_with(_BENCH, spec_decode_per_position_acceptance_rates=_DROP)), "spec_decode"),
    ("bench-itl-string", _dump(_with(_BENCH, median_itl_ms="abc")), "median_itl_ms"),
    ("bench-concurrency-string", _dump(_with(_BENCH, max_concurrency="8")), "max_concurrency"),
    ("bench-itl-negative", _dump(_with(_BENCH, median_itl_ms=-1)), "median_itl_ms"),
    ("bench-not-utf8", b"\xff\xfe\xfa", "text"),
]

_METRICS = (VLLM / "metrics_k3.txt").read_text()
METRICS = [
    ("metrics-position-text", _METRICS.replace('position="1"', 'position="one"'), "position"),
    ("metrics-position-negative", _METRICS.replace('position="1"', 'position="-1"'), "position"),
    ("metrics-counter-nan", _METRICS.replace("} 9000.0", "} NaN"), "NaN"),
    ("metrics-counter-negative", _METRICS.replace("} 9000.0", "} -9000.0"), "counters"),
    ("metrics-counter-inf", _METRICS.replace("} 9000.0", "} +Inf"), "inf"),
    ("metrics-stray-quote", _METRICS.replace('engine="0",model_name', 'engine="a"b",model_name'), "label"),
    ("metrics-unterminated-label", _METRICS.replace('engine="0",', 'engine="0,', 1), "label"),
    ("metrics-not-prometheus", "this is not {prometheus\n", "Prometheus"),
    ("metrics-no-spec", (VLLM / "metrics_no_spec.txt").read_text(), "spec_decode"),
    ("metrics-accepted-above-drafts", _METRICS.replace("} 16550.0", "} 99999999.0"), "disagree"),
    ("metrics-zero-drafts", _METRICS.replace("} 9000.0", "} 0.0").replace("} 9040.0", "} 0.0"), "0"),
    ("metrics-pos-above-drafts", _METRICS.replace("} 7080.0", "} 90000.0"), "outside [0, 1]"),
]


@pytest.fixture(scope="module")
def fx(tmp_path_factory) -> Path:
    """A folder with every bad file of the tables above (and a few good ones to point flags at)."""
    root = tmp_path_factory.mktemp("bad-input")
    for name, cfg, _ in CONFIGS:
        d = root / "configs" / name
        d.mkdir(parents=True)
        (d / "config.json").write_bytes(_dump(cfg))
    (root / "configs" / "a-directory.json").mkdir()
    for group, table, suffix in (("scenarios", SCENARIOS, ".toml"), ("hardware", HARDWARE, ".toml"),
                                 ("raw", RAWS, ".raw.csv"), ("measured", MEASURED, ".csv"),
                                 ("metrics", METRICS, ".txt")):
        (root / group).mkdir()
        for name, text, _ in table:
            (root / group / f"{name}{suffix}").write_text(text)
    (root / "profiles").mkdir()
    for name, data, _ in PROFILES:
        (root / "profiles" / f"{name}.json").write_text(json.dumps(data))
    (root / "profiles" / "broken.json").write_text('{"format": ')
    (root / "bench").mkdir()
    for name, data, _ in BENCHES:
        (root / "bench" / f"{name}.json").write_bytes(data)
    # raw files whose metadata is broken: a good CSV beside a bad sidecar
    for name, meta in (("meta-broken", "{ nope"), ("meta-list", "[1, 2]"), ("meta-hardware-number", '{"hardware": 5}')):
        (root / "raw" / f"{name}.raw.csv").write_text(_raw_csv(lambda h, r: None))
        (root / "raw" / f"{name}.raw.csv.meta.json").write_text(meta)
    (root / "a-file.txt").write_text("I am a file, not a folder\n")
    existing = root / "out"
    existing.mkdir()
    (existing / "keep.json").write_text('{"keep": true}\n')
    os.chmod(existing / "keep.json", 0o640)
    (root / "empty-dir").mkdir()
    return root


def _snapshot(root: Path) -> dict:
    """Every file and folder under root: path -> (mode, sha256 of the content)."""
    out = {}
    for p in sorted(root.rglob("*")):
        st_ = p.lstat()
        digest = hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
        out[str(p.relative_to(root))] = (stat.S_IMODE(st_.st_mode), digest)
    return out


# --- command lines --------------------------------------------------------------------------------

def _main(module: str):
    import importlib
    return importlib.import_module(module).main


def _cli_cases():
    """(id, module, argv) with {fx} standing for the fixture folder."""
    cases = []
    P, S, SZ = "simulator.cli.predict", "simulator.cli.serve", "simulator.cli.size"
    for name, _, _ in CONFIGS:
        cases.append((f"predict-config-{name}", P, ["--model", "{fx}/configs/%s/config.json" % name,
                                                    "--hardware", "h100-sxm", "--batch-sizes", "1-4"]))
    cases.append(("predict-config-directory", P, ["--model", "{fx}/configs/a-directory.json", "--hardware", "h100-sxm"]))
    cases.append(("predict-config-missing", P, ["--model", "{fx}/configs/nope/config.json", "--hardware", "h100-sxm"]))
    for name, _, _ in SCENARIOS:
        cases.append((f"predict-scenario-{name}", P, ["--scenario", "{fx}/scenarios/%s.toml" % name]))
    for name, _, _ in HARDWARE:
        cases.append((f"predict-hardware-{name}", P, ["--model", "llama-3.1-8b", "--hardware", "{fx}/hardware/%s.toml" % name]))
    for name, _, _ in PROFILES:
        cases.append((f"predict-profile-{name}", P, ["--scenario", "smollm2-cpu", "--calibration",
                                                     "{fx}/profiles/%s.json" % name]))
    base = ["--model", "llama-3.1-8b", "--hardware", "h100-sxm", "--batch-sizes", "1-4"]
    cases += [
        ("predict-scenario-directory", P, ["--scenario", "{fx}/empty-dir"]),
        ("predict-scenario-missing", P, ["--scenario", "{fx}/no-such.toml"]),
        ("predict-scenario-binary", P, ["--scenario", "{fx}/configs/not-utf8/config.json"]),
        ("predict-profile-broken-json", P, ["--scenario", "smollm2-cpu", "--calibration", "{fx}/profiles/broken.json"]),
        ("predict-profile-directory", P, ["--scenario", "smollm2-cpu", "--calibration", "{fx}/empty-dir"]),
        ("predict-profile-wrong-device", P, base + ["--calibration", str(CPU_PROFILE)]),
        ("predict-output-directory", P, base + ["--output", "{fx}/out"]),
        ("predict-output-missing-dir", P, base + ["--output", "{fx}/no/such/dir/k.json"]),
        ("predict-output-under-file", P, base + ["--output", "{fx}/a-file.txt/k.json"]),
        ("predict-output-proc", P, base + ["--output", "/proc/dsd-planner-test.json"]),
        ("predict-hardware-h100", P, ["--model", "llama-3.1-8b", "--hardware", "h100"]),
        ("predict-tp-zero", P, base + ["--tp", "0"]),
        ("predict-tp-text", P, base + ["--tp", "two"]),
        ("predict-batch-huge", P, base[:4] + ["--batch-sizes", "1-99999999999999999999"]),
        ("predict-batch-negative", P, base[:4] + ["--batch-sizes", "-4-8"]),
        ("predict-context-negative", P, base + ["--context-len", "-5"]),
        ("predict-context-beyond", P, base + ["--context-len", "1000000"]),
        ("predict-acceptance-above-one", P, base + ["--acceptance", "1.5"]),
        ("predict-acceptance-nan", P, base + ["--acceptance", "nan"]),
        ("predict-acceptance-text", P, base + ["--acceptance", "high"]),
        ("predict-kmax-99", P, base + ["--k-max", "99"]),
        ("predict-format-bogus", P, base + ["--format", "xml"]),
        ("predict-breakdown-text", P, base + ["--breakdown", "x"]),
        ("predict-breakdown-negative", P, base + ["--breakdown", "0,-1"]),
        ("predict-dtype-unknown", P, base + ["--dtype", "fp3"]),
        ("predict-engine-unknown", P, base + ["--engine", "tgi"]),
        ("predict-unknown-flag", P, ["--modle", "x"]),
        # serve
        ("serve-requests-1e12", S, ["--requests", "1000000000000"]),
        ("serve-requests-zero", S, ["--requests", "0"]),
        ("serve-seed-negative", S, ["--seed", "-1"]),
        ("serve-rate-nan", S, ["--rate", "nan"]),
        ("serve-rate-inf", S, ["--rate", "inf"]),
        ("serve-rate-negative", S, ["--rate", "-2"]),
        ("serve-concurrency-zero", S, ["--concurrency", "0"]),
        ("serve-concurrency-huge", S, ["--concurrency", "10000000000"]),
        ("serve-waves-text", S, ["--waves", "8,x"]),
        ("serve-waves-huge", S, ["--waves", "100000,100000"]),
        ("serve-max-seqs-zero", S, ["--max-num-seqs", "0"]),
        ("serve-policy-bogus", S, ["--policy", "greedy"]),
        ("serve-format-bogus", S, ["--format", "xml"]),
        ("serve-scenario-directory", S, ["--scenario", "{fx}/empty-dir"]),
        ("serve-scenario-nan", S, ["--scenario", "{fx}/scenarios/bandwidth-nan.toml"]),
        ("serve-two-loads", S, ["--rate", "1", "--concurrency", "2"]),
        # size: every refusal comes before the (long) search
        ("size-output-dir-is-file", SZ, ["--scenario", "sizing-dense-command-a", "--output-dir", "{fx}/a-file.txt"]),
        ("size-output-dir-under-file", SZ, ["--scenario", "sizing-dense-command-a", "--output-dir", "{fx}/a-file.txt/r"]),
        ("size-output-dir-proc", SZ, ["--scenario", "sizing-dense-command-a", "--output-dir", "/proc/dsd-reports"]),
        ("size-workers-zero", SZ, ["--scenario", "sizing-dense-command-a", "--workers", "0"]),
        ("size-rate-negative", SZ, ["--scenario", "sizing-dense-command-a", "--rate", "-1"]),
        ("size-tp-text", SZ, ["--scenario", "sizing-dense-command-a", "--tp", "x,y"]),
        ("size-candidate-prefix", SZ, ["--scenario", "sizing-dense-command-a", "--candidates", "h100"]),
        ("size-scenario-missing", SZ, ["--scenario", "{fx}/no-such.toml"]),
        ("size-no-source", SZ, []),
    ]
    C = "calibration.run"
    cases += [
        ("run-device-tpu", C, ["--device", "tpu"]),
        ("run-threads-negative", C, ["--threads", "-1"]),
        ("run-threads-zero", C, ["--threads", "0"]),
        ("run-mode-bogus", C, ["--mode", "huge"]),
        ("run-extra-m-text", C, ["--extra-m", "x"]),
        ("run-extra-m-negative", C, ["--extra-m", "3,-5"]),
        ("run-stop-after-negative", C, ["--stop-after", "-1"]),
        ("run-name-path", C, ["--name", "../escape"]),
        ("run-output-dir-is-file", C, ["--output-dir", "{fx}/a-file.txt", "--no-fit"]),
        ("run-model-unknown", C, ["--model", "no-such-model"]),
        ("run-hardware-unknown", C, ["--hardware", "h100"]),
        ("run-moe-model-dense", C, ["--moe-model", "llama-3.1-8b"]),
        ("run-dtype-int8", C, ["--dtype", "int8"]),
        ("run-quick-and-full", C, ["--quick", "--full"]),
    ]
    if not HAS_CUDA:
        cases.append(("run-device-cuda-on-cpu", C, ["--device", "cuda"]))
    SH = "calibration.show"
    cases += [
        ("show-missing", SH, ["{fx}/profiles/nope.json"]),
        ("show-directory", SH, ["{fx}/empty-dir"]),
        ("show-broken", SH, ["{fx}/profiles/broken.json"]),
        ("show-not-profile", SH, ["{fx}/profiles/not-a-profile.json"]),
        ("show-version-9", SH, ["{fx}/profiles/version-9.json"]),
        ("show-step-overhead-string", SH, ["{fx}/profiles/step-overhead-string.json"]),
        ("show-hardware-mismatch", SH, [str(CPU_PROFILE), "--hardware", "h100-sxm"]),
        ("show-no-args", SH, []),
        ("show-unknown-flag", SH, [str(CPU_PROFILE), "--verbose"]),
    ]
    F = "calibration.fit"
    for name, _, _ in RAWS:
        cases.append((f"fit-{name}", F, ["{fx}/raw/%s.raw.csv" % name, "--output", "{fx}/out/p.json"]))
    cases += [
        ("fit-meta-broken", F, ["{fx}/raw/meta-broken.raw.csv", "--output", "{fx}/out/p.json"]),
        ("fit-meta-list", F, ["{fx}/raw/meta-list.raw.csv", "--output", "{fx}/out/p.json"]),
        ("fit-meta-hardware-number", F, ["{fx}/raw/meta-hardware-number.raw.csv", "--output", "{fx}/out/p.json"]),
        ("fit-raw-missing", F, ["{fx}/raw/nope.raw.csv", "--output", "{fx}/out/p.json"]),
        ("fit-raw-directory", F, ["{fx}/empty-dir", "--output", "{fx}/out/p.json"]),
        ("fit-output-directory", F, [str(CPU_RAW), "--output", "{fx}/out"]),
        ("fit-output-under-file", F, [str(CPU_RAW), "--output", "{fx}/a-file.txt/p.json"]),
        ("fit-no-output", F, [str(CPU_RAW)]),
        ("fit-hardware-unknown", F, [str(CPU_RAW), "--output", "{fx}/out/p.json", "--hardware", "h100"]),
        ("fit-hardware-gpu-for-cpu", F, [str(CPU_RAW), "--output", "{fx}/out/p.json", "--hardware", "h100-sxm"]),
    ]
    E = "calibration.engine.__main__"
    sweep = ["sweep", "--output", "{fx}/out/sweep.csv"]
    cases += [
        ("engine-device-tpu", E, sweep + ["--device", "tpu"]),
        ("engine-threads-negative", E, sweep + ["--threads", "-1"]),
        ("engine-seed-negative", E, sweep + ["--seed", "-1"]),
        ("engine-temperature-nan", E, sweep + ["--temperature", "nan"]),
        ("engine-temperature-negative", E, sweep + ["--temperature", "-1"]),
        ("engine-k-huge-range", E, sweep + ["--k", "0-99999999999"]),
        ("engine-k-40", E, sweep + ["--k", "40"]),
        ("engine-batch-zero", E, sweep + ["--batch-sizes", "0"]),
        ("engine-batch-huge", E, sweep + ["--batch-sizes", "1-99999999999999999999"]),
        ("engine-forced-acceptance-2", E, sweep + ["--forced-acceptance", "2"]),
        ("engine-draft-bogus", E, sweep + ["--draft", "medusa"]),
        ("engine-target-bogus", E, sweep + ["--target", "gpt-5"]),
        ("engine-output-directory", E, ["sweep", "--output", "{fx}/out"]),
        ("engine-context-one", E, sweep + ["--context-len", "1"]),
        ("engine-no-command", E, []),
    ]
    if not HAS_CUDA:
        cases.append(("engine-device-cuda-on-cpu", E, sweep + ["--device", "cuda"]))
    V = "calibration.validate"
    val = ["--scenario", "smollm2-cpu"]
    for name, _, _ in MEASURED:
        cases.append((f"validate-{name}", V, val + ["--measured", "{fx}/measured/%s.csv" % name]))
    cases += [
        ("validate-measured-missing", V, val + ["--measured", "{fx}/measured/nope.csv"]),
        ("validate-measured-directory", V, val + ["--measured", "{fx}/empty-dir"]),
        ("validate-output-dir-is-file", V, val + ["--measured", str(RUNS), "--output-dir", "{fx}/a-file.txt"]),
        ("validate-scenario-missing", V, ["--scenario", "{fx}/no.toml", "--measured", str(RUNS)]),
        ("validate-no-measured", V, val),
    ]
    return cases


CLI_CASES = _cli_cases()


def _run_cli(module: str, argv: list[str]) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            rc = _main(module)(argv)
        except SystemExit as exc:
            rc = exc.code if isinstance(exc.code, int) else 1
    return rc, err.getvalue()


def _assert_one_line(text: str, where: str) -> None:
    assert "Traceback" not in text, f"{where}: traceback\n{text}"
    lines = [ln for ln in text.splitlines() if ln.strip()]
    assert len(lines) == 1, f"{where}: expected one stderr line, got {len(lines)}:\n{text}"
    assert lines[0].startswith("error:"), f"{where}: {lines[0]!r}"


@pytest.mark.parametrize("case_id,module,argv", CLI_CASES, ids=[c[0] for c in CLI_CASES])
def test_cli_refuses_with_one_line(fx, case_id, module, argv):
    argv = [a.replace("{fx}", str(fx)) for a in argv]
    before = _snapshot(fx)
    rc, err = _run_cli(module, argv)
    assert rc == 2, f"{case_id}: exit {rc}\n{err}"
    _assert_one_line(err, case_id)
    assert _snapshot(fx) == before, f"{case_id}: files changed on disk"


# --- readers and the dashboard's upload helpers ---------------------------------------------------

def _reader_cases():
    """(id, callable(fx) that must raise PlannerError, substring the message must name)."""
    from calibration import measured, vllm_io
    from calibration.fit import fit_raw
    from calibration.rawio import read_raw
    from dashboard import state
    from simulator.specs.hardware import load_hardware
    from simulator.specs.models import load_model_config
    from simulator.specs.profile import load_profile
    from simulator.specs.scenario import load_scenario

    cases = []
    for name, cfg, expect in CONFIGS:
        cases.append((f"config-{name}", lambda fx, n=name: load_model_config(fx / "configs" / n / "config.json"), expect))
        cases.append((f"upload-config-{name}", lambda fx, c=cfg: state.uploaded_model(_dump(c), "up.json"), expect))
    for name, _, expect in SCENARIOS:
        cases.append((f"scenario-{name}", lambda fx, n=name: load_scenario(fx / "scenarios" / f"{n}.toml"), expect))
    for name, _, expect in PROFILES:
        cases.append((f"profile-{name}", lambda fx, n=name: load_profile(fx / "profiles" / f"{n}.json"), expect))
    for name, _, expect in HARDWARE:
        cases.append((f"hardware-{name}", lambda fx, n=name: load_hardware(str(fx / "hardware" / f"{n}.toml")), expect))
    for name, _, expect in RAWS:
        cases.append((f"{name}", lambda fx, n=name: fit_raw(fx / "raw" / f"{n}.raw.csv"), expect))
    for name, text, expect in MEASURED:
        cases.append((f"read-{name}", lambda fx, n=name: measured.read_measured(fx / "measured" / f"{n}.csv"), expect))
        cases.append((f"upload-{name}", lambda fx, t=text: state.read_measured_csv(t.encode(), "runs.csv"), expect))
    def read_bench(path: Path):  # what calibration.validate and the vLLM import read of a bench file
        vllm_io.bench_acceptance(vllm_io.read_bench_json(path), path.name)
        return vllm_io.bench_to_row(path)

    # the dashboard reads only the acceptance rates of an uploaded bench JSON
    upload_irrelevant = {"bench-itl-string", "bench-concurrency-string", "bench-itl-negative"}
    for name, data, expect in BENCHES:
        cases.append((f"read-{name}", lambda fx, n=name: read_bench(fx / "bench" / f"{n}.json"), expect))
        if name not in upload_irrelevant:
            cases.append((f"upload-{name}", lambda fx, d=data: state.acceptance_from_bench_json(d, "bench.json"), expect))
    for name, text, expect in METRICS:
        cases.append((f"read-{name}", lambda fx, n=name: vllm_io.read_metrics(fx / "metrics" / f"{n}.txt"), expect))
        cases.append((f"upload-{name}", lambda fx, t=text: state.acceptance_from_metrics(t.encode(), "metrics.txt"), expect))
    cases += [
        ("raw-directory", lambda fx: read_raw(fx / "empty-dir"), "empty-dir"),
        ("rates-nan", lambda fx: state.parse_rates_text("0.8, nan"), "nan"),
        ("rates-above-one", lambda fx: state.parse_rates_text("1.5"), "1.5"),
        ("rates-empty", lambda fx: state.parse_rates_text("  "), "rate"),
        ("rates-text", lambda fx: state.parse_rates_text("high"), "high"),
        ("upload-empty", lambda fx: state.uploaded_model(b"", "config.json"), "empty"),
        ("upload-too-large", lambda fx: state.acceptance_from_metrics(b" " * (state.MAX_UPLOAD_BYTES + 1), "m.txt"),
         "too large"),
        ("upload-deep-json", lambda fx: state.uploaded_model(b"[" * 100000 + b"]" * 100000, "deep.json"), "deep"),
        ("write-files-name-with-slash", lambda fx: _write_files(fx / "out", {"../x.md": "x"}), "file name"),
        ("write-files-target-is-dir", lambda fx: _write_files(fx, {"out": "x", "new.md": "y"}), "out"),
        ("write-atomically-dir", lambda fx: _write_one(fx / "out", "x"), "directory"),
        ("write-atomically-proc", lambda fx: _write_one(Path("/proc/dsd-test.txt"), "x"), "/proc"),
    ]
    return cases


def _write_files(out, files):
    from simulator.cli.common import write_files_atomically
    return write_files_atomically(out, files)


def _write_one(path, text):
    from simulator.cli.common import write_atomically
    return write_atomically(path, text)


READER_CASES = _reader_cases()


@pytest.mark.parametrize("case_id,call,expect", READER_CASES, ids=[c[0] for c in READER_CASES])
def test_reader_refuses_with_one_line(fx, case_id, call, expect):
    before = _snapshot(fx)
    with pytest.raises(PlannerError) as info:
        call(fx)
    message = " ".join(str(info.value).split())
    assert message and len(message) < 600, f"{case_id}: {message!r}"
    assert expect.lower() in message.lower(), f"{case_id}: {message!r} does not name {expect!r}"
    assert _snapshot(fx) == before, f"{case_id}: files changed on disk"


def test_corpus_size():
    n = len(CLI_CASES) + len(READER_CASES)
    print(f"\nbad-input corpus: {len(CLI_CASES)} command-line cases + {len(READER_CASES)} reader/upload cases = {n}")
    assert n >= 150


# --- outputs: all or nothing, modes kept ----------------------------------------------------------

def test_multi_file_output_is_all_or_nothing_and_keeps_modes(tmp_path):
    from simulator.cli.common import write_files_atomically

    (tmp_path / "a.md").write_text("old a\n")
    os.chmod(tmp_path / "a.md", 0o600)
    (tmp_path / "b.md").mkdir()  # the second target cannot be replaced: nothing may be
    with pytest.raises(PlannerError):
        write_files_atomically(tmp_path, {"a.md": "new a\n", "b.md": "new b\n"})
    assert (tmp_path / "a.md").read_text() == "old a\n"
    (tmp_path / "b.md").rmdir()
    written = write_files_atomically(tmp_path, {"a.md": "new a\n", "b.md": b"\x89PNG"})
    assert [p.name for p in written] == ["a.md", "b.md"]
    assert (tmp_path / "a.md").read_text() == "new a\n"
    assert stat.S_IMODE((tmp_path / "a.md").stat().st_mode) == 0o600  # replaced file keeps its mode
    assert stat.S_IMODE((tmp_path / "b.md").stat().st_mode) == 0o644  # new file: 0644, not mkstemp's 0600
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no staging left behind


def test_single_output_keeps_mode(tmp_path):
    from simulator.cli.common import write_atomically

    target = tmp_path / "k.json"
    target.write_text("old")
    os.chmod(target, 0o664)
    write_atomically(target, "new")
    assert target.read_text() == "new" and stat.S_IMODE(target.stat().st_mode) == 0o664
    fresh = tmp_path / "fresh.json"
    write_atomically(fresh, "x")
    assert stat.S_IMODE(fresh.stat().st_mode) == 0o644


def test_size_writes_its_reports_together(tmp_path, monkeypatch):
    """A sizing run whose second report cannot be written replaces none of them."""
    import simulator.sizing as sizing
    import simulator.sizing.report as report
    from simulator.cli import size as size_cli

    class Res:  # what the renderers and the CLI read of a SizingResult
        class scenario:
            name = "demo"
        message, elapsed_s = "ok", 0.0

    monkeypatch.setattr(sizing, "size", lambda *a, **k: Res())
    monkeypatch.setattr(report, "render_html", lambda res: "<p>new</p>")
    monkeypatch.setattr(report, "render_markdown", lambda res: "new\n")
    (tmp_path / "demo.html").write_text("<p>old</p>")
    os.chmod(tmp_path / "demo.html", 0o640)
    (tmp_path / "demo.md").mkdir()
    rc, err = _run_cli("simulator.cli.size", ["--scenario", "x", "--output-dir", str(tmp_path)])
    assert rc == 2 and "demo.md" in err
    assert (tmp_path / "demo.html").read_text() == "<p>old</p>"
    (tmp_path / "demo.md").rmdir()
    rc, err = _run_cli("simulator.cli.size", ["--scenario", "x", "--output-dir", str(tmp_path)])
    assert rc == 0, err
    assert (tmp_path / "demo.html").read_text() == "<p>new</p>" and (tmp_path / "demo.md").read_text() == "new\n"
    assert stat.S_IMODE((tmp_path / "demo.html").stat().st_mode) == 0o640


# --- what is accepted, with its caveat ------------------------------------------------------------

def test_odd_prometheus_labels_parse_to_the_same_counters():
    """Labels vLLM or a proxy may add (unicode, escapes, extra labels, spaces) change nothing."""
    from calibration import vllm_io

    plain = vllm_io.acceptance_from_counters(vllm_io.spec_decode_counters(_METRICS))
    odd = _METRICS.replace('engine="0",', 'engine="0", zone="é\\\\x \\"q\\"", note="a\\nb", ')
    assert odd != _METRICS
    got = vllm_io.acceptance_from_counters(vllm_io.spec_decode_counters(odd))
    assert got == plain
    labels = vllm_io.parse_prometheus('m{a="x\\\\y",b="q\\"r",c="é\\\\z"} 1\n')[0][1]
    assert labels == {"a": "x\\y", "b": 'q"r', "c": "é\\z"}  # only backslash, quote and n are escapes
    # an escape the text format does not have (\z) is refused, not kept as written
    with pytest.raises(vllm_io.VllmFormatError, match=r"m.txt:1: .*escape '\\z'"):
        vllm_io.parse_prometheus('m{c="é\\z"} 1\n', "m.txt")


def test_long_context_needs_explicit_override_and_warns(tmp_path):
    import warnings

    from simulator.errors import PlannerWarning
    from simulator.plan.api import predict

    # hand: llama-3.1-8b config.json max_position_embeddings = 131072
    kw = dict(model="llama-3.1-8b", hardware="h100-sxm", batch_sizes="1-2", context_len=131073)
    with pytest.raises(PlannerError, match="131072"):
        predict(None, **kw)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        pred = predict(None, allow_long_context=True, **kw)
    assert any(issubclass(w.category, PlannerWarning) and "131072" in str(w.message) for w in caught)
    assert pred.scenario.warnings and np.all(np.isfinite(pred.table.itl_ms.dropna()))
    assert predict(None, **(kw | {"context_len": 131072})).scenario.warnings == []


def test_cli_prints_a_warning_as_one_line(tmp_path):
    scen = tmp_path / "long.toml"
    scen.write_text(_toml("workload", "context_len = 140000").replace(
        'batch_sizes = "1-8"', 'batch_sizes = "1-2"\nallow_context_beyond_model = true'))
    rc, err = _run_cli("simulator.cli.predict", ["--scenario", str(scen), "--format", "csv"])
    assert rc == 0, err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    # each caveat is one 'warning:' line on stderr (the table's own notes print there too)
    assert lines and all(ln.startswith("warning:") for ln in lines)
    assert sum("max_position_embeddings" in ln for ln in lines) == 1


def test_hardware_prefix_suggests_its_variants_not_a_neighbour():
    from simulator.errors import did_you_mean
    from simulator.specs.hardware import list_hardware

    text = did_you_mean("h100", list_hardware())
    assert "h100-sxm" in text and "h100-pcie" in text and "h200" not in text
    assert did_you_mean("h100-sm", list_hardware()) == " (did you mean 'h100-sxm'?)"


def test_calibration_run_defaults_to_a_file_of_this_device():
    """The README's `calibration.run --quick` must not resume the shipped CPU's raw file elsewhere."""
    from calibration.device import DeviceInfo
    from calibration.run import device_stem

    cpu = DeviceInfo.__new__(DeviceInfo)
    object.__setattr__(cpu, "name", "Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz")
    object.__setattr__(cpu, "kind", "cpu")
    object.__setattr__(cpu, "compute_units", 4)
    assert device_stem(cpu) == "intel-xeon-platinum-8481c-cpu-2-70ghz-4c"
    assert device_stem(cpu) != "cpu-xeon-2c"  # the shipped profile's name stays the shipped machine's


def test_physics_doc_datasheet_table_matches_the_catalog():
    """docs/physics.md's datasheet table is what the hardware TOMLs hold (provenance lines cite it)."""
    from simulator.specs.hardware import list_hardware, load_hardware

    text = (REPO / "docs" / "physics.md").read_text()
    rows = {ln.split("|")[1].strip().strip("`"): [c.strip() for c in ln.split("|")[2:-1]]
            for ln in text.splitlines() if ln.startswith("| `")}
    gpus = [n for n in list_hardware() if load_hardware(n).kind == "gpu"]
    assert sorted(rows) == sorted(gpus)
    for name in gpus:
        hw = load_hardware(name)
        _, bf16, fp8, bw, mem = rows[name][:5]
        assert float(bf16) == pytest.approx(hw.peak_bf16_flops_per_s / 1e12, abs=0.05)
        assert fp8 == "-" if hw.peak_fp8_flops_per_s is None else \
            float(fp8) == pytest.approx(hw.peak_fp8_flops_per_s / 1e12, abs=0.05)
        assert float(bw) == pytest.approx(hw.hbm_bandwidth_bytes_per_s / 1e9, abs=0.5)
        assert float(mem) == pytest.approx(hw.memory_bytes / 1e9, abs=0.5)


def test_no_repo_file_points_at_shared():
    hits = []
    for folder in ("simulator", "calibration", "dashboard", "docs", "scenarios"):
        for p in (REPO / folder).rglob("*"):
            if p.suffix in (".py", ".md", ".toml", ".json") and "../shared" in p.read_text(errors="ignore"):
                hits.append(str(p.relative_to(REPO)))
    for p in (REPO / "README.md", REPO / "app.py"):
        if "../shared" in p.read_text() or "shared/reference" in p.read_text():
            hits.append(p.name)
    assert not hits


# --- hypothesis: random config.json and scenario mutations -----------------------------------------

_values = st.one_of(
    st.integers(min_value=-10, max_value=10), st.integers(min_value=-2**40, max_value=2**40),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=5), st.booleans(), st.none(),
    st.lists(st.integers(min_value=-3, max_value=70), max_size=4), st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)
_CONFIG_KEYS = ["hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim",
                "intermediate_size", "vocab_size", "sliding_window", "layer_types", "quantization_config",
                "tie_word_embeddings", "max_position_embeddings", "num_experts", "num_experts_per_tok",
                "moe_intermediate_size", "mlp_only_layers", "decoder_sparse_step", "use_sliding_window", "model_type"]
_BASES = {"llama-3.1-8b": LLAMA, "qwen3-30b-a3b": QWEN_MOE, "deepseek-v3": DEEPSEEK}


def _finite_positive(pred) -> None:
    t = pred.table
    fits = t[t.fits_memory]
    for col in ("itl_ms", "goodput_per_seq"):
        values = fits[col].to_numpy(dtype=float)
        assert np.all(np.isfinite(values)) and np.all(values > 0), (col, values[:5])
    mem = fits.memory_gb_per_gpu.to_numpy(dtype=float)
    assert np.all(np.isfinite(mem)) and np.all(mem > 0)
    assert t.fits_memory.dtype == bool  # a row that does not fit says so; it is never NaN-as-fit


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(base=st.sampled_from(sorted(_BASES)), edits=st.dictionaries(st.sampled_from(_CONFIG_KEYS), _values,
                                                                   min_size=1, max_size=3))
def test_hypothesis_config_mutations_refused_or_sane(tmp_path_factory, base, edits):
    from simulator.plan.api import predict_scenario
    from simulator.specs.scenario import build_scenario

    cfg = _with(_BASES[base], **edits)
    folder = tmp_path_factory.mktemp("cfg")
    path = folder / "config.json"
    try:
        path.write_text(json.dumps(cfg, allow_nan=True))
    except (TypeError, ValueError):
        return
    raw = {"model": {"name": str(path)}, "hardware": {"name": "h200", "tp": 8},
           "draft": {"method": "eagle"}, "workload": {"context_len": 1024, "batch_sizes": "1,8,64", "k_max": 3}}
    try:
        pred = predict_scenario(build_scenario(raw))
    except PlannerError:
        return
    m = pred.scenario.model
    assert m.total_params() > 0 and m.active_params() > 0 and m.head_dim > 0 and m.num_kv_heads > 0
    assert m.experts_per_token <= max(m.num_experts, 0) or not m.is_moe
    _finite_positive(pred)


_SCENARIO_EDITS = [("hardware", "hbm_bandwidth_bytes_per_s"), ("hardware", "peak_bf16_flops_per_s"),
                   ("hardware", "memory_bytes"), ("hardware", "tp"), ("workload", "context_len"),
                   ("workload", "batch_sizes"), ("workload", "k_max"), ("workload", "fixed_k"),
                   ("workload", "memory_utilization"), ("acceptance", "rate"), ("acceptance", "rates"),
                   ("routing", "skew"), ("precision", "weights"), ("precision", "kv_cache")]
_scenario_values = st.one_of(
    _values, st.floats(min_value=1e-3, max_value=1e16), st.sampled_from(["1-4", "0-3", "2,4,8", "1-70000", "bf16", "fp8"]),
    st.lists(st.floats(allow_nan=True, allow_infinity=True), min_size=1, max_size=3),
)


@settings(max_examples=40, deadline=None)
@given(edits=st.lists(st.tuples(st.sampled_from(_SCENARIO_EDITS), _scenario_values), min_size=1, max_size=3))
def test_hypothesis_scenario_mutations_refused_or_sane(edits):
    from simulator.plan.api import predict_scenario
    from simulator.specs.scenario import build_scenario

    raw = {"model": {"name": "qwen3-30b-a3b"}, "hardware": {"name": "h100-sxm", "tp": 2},
           "draft": {"method": "eagle"}, "routing": {"kind": "zipf", "skew": 0.5},
           "workload": {"context_len": 2048, "batch_sizes": "1,4,32", "k_max": 4, "fixed_k": 2}}
    for (section, key), value in edits:
        raw.setdefault(section, {})[key] = value
    try:
        pred = predict_scenario(build_scenario(raw))
    except PlannerError:
        return
    _finite_positive(pred)
    assert all(math.isfinite(float(b)) for b in pred.scenario.batch_sizes)
