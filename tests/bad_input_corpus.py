"""The bad-input corpus shared by the tests/test_bad_input_*.py files: one copy of every hostile file
(config.json, scenario, profile, hardware, raw and measured CSVs, vLLM bench and metrics), the folder
they are written to (the ``fx`` fixture of tests/conftest.py), and the checks every case makes.

Each case must be refused the way the project promises (README, simulator/errors.py): exit code 2
(or a PlannerError for a reader), exactly one line on stderr that starts with 'error:', no
traceback, and nothing changed on disk (every file under the case's folder hashed, with its mode,
before and after). The cases are tables; `test_corpus_size` prints how many there are (the issue
asks for at least 150).
"""
from __future__ import annotations

import copy
import csv
import hashlib
import io
import json
import os
import stat
from pathlib import Path

from cli_inprocess import run_main

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


def edited(base: dict, **changes) -> dict:
    out = copy.deepcopy(base)
    for key, value in changes.items():
        if value is DROP:
            out.pop(key, None)
        else:
            out[key] = value
    return out


DROP = object()
LLAMA, QWEN_MOE, DEEPSEEK, GPT_OSS = _cfg("llama-3.1-8b"), _cfg("qwen3-30b-a3b"), _cfg("deepseek-v3"), _cfg("gpt-oss-120b")

# config.json mutations: (name, dict or raw bytes, substring the message must contain)
CONFIGS = [
    ("kv-heads-string", edited(LLAMA, num_key_value_heads="8"), "num_key_value_heads"),
    ("kv-heads-negative", edited(LLAMA, num_key_value_heads=-8), "num_key_value_heads"),
    ("kv-heads-not-divisor", edited(LLAMA, num_key_value_heads=5), "multiple"),
    ("kv-heads-above-heads", edited(LLAMA, num_key_value_heads=64), "multiple"),
    ("head-dim-negative", edited(LLAMA, head_dim=-128), "head_dim"),
    ("head-dim-string", edited(LLAMA, head_dim="abc"), "head_dim"),
    ("head-dim-float", edited(LLAMA, head_dim=128.5), "head_dim"),
    ("sliding-window-string", edited(LLAMA, sliding_window="abc"), "sliding_window"),
    ("sliding-window-negative", edited(LLAMA, sliding_window=-4096), "sliding_window"),
    ("quant-config-string", edited(LLAMA, quantization_config="fp8"), "quantization_config"),
    ("quant-method-number", edited(LLAMA, quantization_config={"quant_method": 8}), "quant_method"),
    ("weight-block-size-one", edited(DEEPSEEK, quantization_config={"quant_method": "fp8", "weight_block_size": [128]}),
     "weight_block_size"),
    ("layer-types-int", edited(LLAMA, sliding_window=4096, layer_types=5), "layer_types"),
    ("layer-types-wrong-length", edited(LLAMA, sliding_window=4096, layer_types=["sliding_attention"]), "layer_types"),
    ("layer-types-numbers", edited(LLAMA, sliding_window=4096, layer_types=[1] * 32), "layer_types"),
    ("window-pattern-zero", edited(LLAMA, sliding_window=4096, sliding_window_pattern=0), "sliding_window_pattern"),
    ("use-sliding-string", edited(LLAMA, sliding_window=4096, use_sliding_window="no"), "use_sliding_window"),
    ("hidden-zero", edited(LLAMA, hidden_size=0), "hidden_size"),
    ("hidden-float", edited(LLAMA, hidden_size=4096.0), "hidden_size"),
    ("hidden-bool", edited(LLAMA, hidden_size=True), "hidden_size"),
    ("hidden-huge", edited(LLAMA, hidden_size=10**30), "hidden_size"),
    ("hidden-not-multiple", edited(LLAMA, hidden_size=4097, head_dim=DROP), "head_dim"),
    ("layers-missing", edited(LLAMA, num_hidden_layers=DROP), "num_hidden_layers"),
    ("layers-negative", edited(LLAMA, num_hidden_layers=-1), "num_hidden_layers"),
    ("heads-zero", edited(LLAMA, num_attention_heads=0), "num_attention_heads"),
    ("vocab-string", edited(LLAMA, vocab_size="x"), "vocab_size"),
    ("intermediate-null", edited(LLAMA, intermediate_size=None), "intermediate_size"),
    ("intermediate-huge", edited(LLAMA, intermediate_size=2**40), "intermediate_size"),
    ("tie-string", edited(LLAMA, tie_word_embeddings="yes"), "tie_word_embeddings"),
    ("max-pos-negative", edited(LLAMA, max_position_embeddings=-1), "max_position_embeddings"),
    ("max-pos-string", edited(LLAMA, max_position_embeddings="128k"), "max_position_embeddings"),
    ("model-type-unknown", edited(LLAMA, model_type="gpt2"), "model_type"),
    ("model-type-number", edited(LLAMA, model_type=5), "model_type"),
    ("model-type-missing", edited(LLAMA, model_type=DROP), "model_type"),
    ("top-level-list", [LLAMA], "JSON object"),
    ("moe-topk-above-experts", edited(QWEN_MOE, num_experts_per_tok=200), "num_experts_per_tok"),
    ("moe-experts-negative", edited(QWEN_MOE, num_experts=-1), "num_experts"),
    ("moe-mlp-only-string", edited(QWEN_MOE, mlp_only_layers="3"), "mlp_only_layers"),
    ("moe-mlp-only-out-of-range", edited(QWEN_MOE, mlp_only_layers=[500]), "mlp_only_layers"),
    ("moe-sparse-step-zero", edited(QWEN_MOE, decoder_sparse_step=0), "decoder_sparse_step"),
    ("moe-shared-negative", edited(QWEN_MOE, shared_expert_intermediate_size=-5), "shared_expert_intermediate_size"),
    ("deepseek-dense-above-layers", edited(DEEPSEEK, first_k_dense_replace=100), "dense layers"),
    ("moe-no-sparse-layer", edited(QWEN_MOE, decoder_sparse_step=49), "dense layers"),
    ("deepseek-shared-string", edited(DEEPSEEK, n_shared_experts="1"), "n_shared_experts"),
    ("deepseek-topk-above-experts", edited(DEEPSEEK, num_experts_per_tok=300), "num_experts_per_tok"),
    ("deepseek-kv-lora-zero", edited(DEEPSEEK, kv_lora_rank=0), "kv_lora_rank"),
    ("deepseek-mtp-negative", edited(DEEPSEEK, num_nextn_predict_layers=-1), "num_nextn_predict_layers"),
    ("gptoss-experts-string", edited(GPT_OSS, num_local_experts="128"), "num_local_experts"),
    ("not-json", b"{ this is not json", "JSON"),
    ("not-utf8", b"\xff\xfe\x00garbage", "JSON"),
    ("empty-file", b"", "JSON"),
]


def as_bytes(obj) -> bytes:
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


def scenario_toml(section: str, line: str) -> str:
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
    ("context-beyond-model", scenario_toml("workload", "context_len = 200000"), "max_position_embeddings"),
    ("context-zero", scenario_toml("workload", "context_len = 0"), "context_len"),
    ("context-float", scenario_toml("workload", "context_len = 1024.5"), "context_len"),
    ("allow-long-string", scenario_toml("workload", 'allow_context_beyond_model = "yes"'), "allow_context_beyond_model"),
    ("bandwidth-nan", scenario_toml("hardware", "hbm_bandwidth_bytes_per_s = nan"), "hbm_bandwidth_bytes_per_s"),
    ("bandwidth-inf", scenario_toml("hardware", "hbm_bandwidth_bytes_per_s = inf"), "hbm_bandwidth_bytes_per_s"),
    ("bandwidth-negative", scenario_toml("hardware", "hbm_bandwidth_bytes_per_s = -1.0"), "hbm_bandwidth_bytes_per_s"),
    ("peak-zero", scenario_toml("hardware", "peak_bf16_flops_per_s = 0"), "peak_bf16_flops_per_s"),
    ("memory-nan", scenario_toml("hardware", "memory_bytes = nan"), "memory_bytes"),
    ("price-negative-inf", scenario_toml("hardware", "price_per_gpu_hour_usd = -inf"), "price_per_gpu_hour_usd"),
    ("tp-string", scenario_toml("hardware", 'tp = "2"'), "tp"),
    ("tp-zero", scenario_toml("hardware", "tp = 0"), "tp"),
    ("hardware-prefix", scenario_toml("hardware", 'name = "h100"'), "h100-"),
    ("hardware-name-empty", scenario_toml("hardware", 'name = ""'), "[hardware] name is empty; give a catalog name"),
    ("model-unknown", scenario_toml("model", 'name = "llama"'), "unknown model"),
    ("acceptance-nan", scenario_toml("acceptance", "rate = nan"), "rate"),
    ("acceptance-one", scenario_toml("acceptance", "rate = 1.0"), "1"),
    ("acceptance-list-inf", scenario_toml("acceptance", "rates = [0.8, inf]"), "rates"),
    ("acceptance-list-strings", scenario_toml("acceptance", 'rates = ["a", "b"]'), "acceptance"),
    ("acceptance-both", scenario_toml("acceptance", "rate = 0.7\nrates = [0.7]"), "not both"),
    ("memory-util-nan", scenario_toml("workload", "memory_utilization = nan"), "memory_utilization"),
    ("memory-util-above-one", scenario_toml("workload", "memory_utilization = 1.5"), "memory_utilization"),
    ("routing-skew-inf", scenario_toml("routing", 'kind = "zipf"\nskew = inf'), "skew"),
    ("routing-skew-huge", scenario_toml("routing", 'kind = "zipf"\nskew = 1e6'), "skew"),
    ("routing-skew-negative", scenario_toml("routing", 'kind = "zipf"\nskew = -1.0'), "skew"),
    ("batch-huge-range", scenario_toml("workload", 'batch_sizes = "1-99999999999999999999"'), "batch sizes"),
    ("batch-large-range", scenario_toml("workload", 'batch_sizes = "1-100000"'), "batch sizes"),
    ("batch-zero", scenario_toml("workload", 'batch_sizes = "0-8"'), "batch size"),
    ("batch-letters", scenario_toml("workload", 'batch_sizes = "a-b"'), "batch sizes"),
    ("batch-list-strings", scenario_toml("workload", 'batch_sizes = [1, "2"]'), "batch sizes"),
    ("batch-empty", scenario_toml("workload", 'batch_sizes = ""'), "batch sizes"),
    ("k-max-99", scenario_toml("workload", "k_max = 99"), "k_max"),
    ("fixed-k-negative", scenario_toml("workload", "fixed_k = -1"), "K must be"),
    ("fixed-above-kmax", scenario_toml("workload", "fixed_k = 9"), "fixed_k"),
    ("unknown-key", scenario_toml("workload", "contxt_len = 5"), "contxt_len"),
    ("unknown-section", scenario_toml("workloads", "x = 1"), "workloads"),
    ("dtype-unknown", scenario_toml("precision", 'weights = "fp3"'), "fp3"),
    ("draft-unknown", scenario_toml("draft", 'method = "eagle9"'), "eagle9"),
    ("malformed", BASE_TOML + "[workload\n", "malformed TOML"),
    ("engine-unknown", scenario_toml("engine", 'name = "tgi"'), "tgi"),
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
    ("hw-name-empty", 'name = ""\npeak_bf16_flops_per_s = 1e15\nhbm_bandwidth_bytes_per_s = 3e12\nmemory_bytes = 8e10\n',
     "key 'name' is empty; give the device a name"),
    # the device's family (architecture, optional: "other"): one of the known families, agreeing with the vendor
    ("hw-architecture-unknown", 'name = "x"\narchitecture = "hoper"\npeak_bf16_flops_per_s = 1e15\n'
     'hbm_bandwidth_bytes_per_s = 3e12\nmemory_bytes = 8e10\n', "'architecture' must be one of"),
    ("hw-architecture-vendor", 'name = "x"\nvendor = "nvidia"\narchitecture = "cdna3"\npeak_bf16_flops_per_s = 1e15\n'
     'hbm_bandwidth_bytes_per_s = 3e12\nmemory_bytes = 8e10\n', "is a family of amd devices"),
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

BENCH = json.loads((VLLM / "bench_k3_c8.json").read_text())
BENCHES = [
    ("bench-broken-json", b"{ nope", "JSON"),
    ("bench-list", b"[1, 2]", "object"),
    ("bench-rate-above-one", as_bytes(edited(BENCH, spec_decode_per_position_acceptance_rates=[1.2, 0.5])), "outside [0, 1]"),
    ("bench-rates-rising", as_bytes(edited(BENCH, spec_decode_per_position_acceptance_rates=[0.3, 0.6])), "rises"),
    ("bench-rates-strings", as_bytes(edited(BENCH, spec_decode_per_position_acceptance_rates=["a"])), "list of numbers"),
    ("bench-no-rates", as_bytes(edited(BENCH, spec_decode_per_position_acceptance_rates=DROP)), "spec_decode"),
    ("bench-itl-string", as_bytes(edited(BENCH, median_itl_ms="abc")), "median_itl_ms"),
    ("bench-concurrency-string", as_bytes(edited(BENCH, max_concurrency="8")), "max_concurrency"),
    ("bench-itl-negative", as_bytes(edited(BENCH, median_itl_ms=-1)), "median_itl_ms"),
    ("bench-not-utf8", b"\xff\xfe\xfa", "text"),
]

METRICS_TEXT = (VLLM / "metrics_k3.txt").read_text()
METRICS = [
    ("metrics-position-text", METRICS_TEXT.replace('position="1"', 'position="one"'), "position"),
    ("metrics-position-negative", METRICS_TEXT.replace('position="1"', 'position="-1"'), "position"),
    ("metrics-counter-nan", METRICS_TEXT.replace("} 9000.0", "} NaN"), "NaN"),
    ("metrics-counter-negative", METRICS_TEXT.replace("} 9000.0", "} -9000.0"), "counters"),
    ("metrics-counter-inf", METRICS_TEXT.replace("} 9000.0", "} +Inf"), "inf"),
    ("metrics-stray-quote", METRICS_TEXT.replace('engine="0",model_name', 'engine="a"b",model_name'), "label"),
    ("metrics-unterminated-label", METRICS_TEXT.replace('engine="0",', 'engine="0,', 1), "label"),
    ("metrics-not-prometheus", "this is not {prometheus\n", "Prometheus"),
    ("metrics-no-spec", (VLLM / "metrics_no_spec.txt").read_text(), "spec_decode"),
    ("metrics-accepted-above-drafts", METRICS_TEXT.replace("} 16550.0", "} 99999999.0"), "disagree"),
    ("metrics-zero-drafts", METRICS_TEXT.replace("} 9000.0", "} 0.0").replace("} 9040.0", "} 0.0"), "0"),
    ("metrics-pos-above-drafts", METRICS_TEXT.replace("} 7080.0", "} 90000.0"), "outside [0, 1]"),
]


def write_folder(root: Path) -> Path:
    """``root`` filled with every bad file of the tables above (and a few good ones to point flags at)."""
    for name, cfg, _ in CONFIGS:
        d = root / "configs" / name
        d.mkdir(parents=True)
        (d / "config.json").write_bytes(as_bytes(cfg))
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


# --- what every case checks -----------------------------------------------------------------------

def snapshot(root: Path) -> dict:
    """Every file and folder under root: path -> (mode, sha256 of the content); a symlink -> its target (never
    followed), a device -> its major/minor, a FIFO or socket -> its kind (never opened)."""
    out = {}
    for p in sorted(root.rglob("*")):
        st_ = p.lstat()
        if stat.S_ISLNK(st_.st_mode):
            digest = "link -> " + os.readlink(p)
        elif stat.S_ISREG(st_.st_mode):
            digest = hashlib.sha256(p.read_bytes()).hexdigest()
        elif stat.S_ISDIR(st_.st_mode):
            digest = "dir"
        elif stat.S_ISCHR(st_.st_mode) or stat.S_ISBLK(st_.st_mode):
            digest = f"device {stat.S_IFMT(st_.st_mode):o} {os.major(st_.st_rdev)},{os.minor(st_.st_rdev)} inode {st_.st_ino}"
        else:
            digest = f"special {stat.S_IFMT(st_.st_mode):o} inode {st_.st_ino}"
        out[str(p.relative_to(root))] = (stat.S_IMODE(st_.st_mode), digest)
    return out


def run_cli(module: str, argv: list[str]) -> tuple[int, str]:
    """(exit code, stderr) of the command's main(argv), run in the test process."""
    done = run_main(module, *argv)
    return done.returncode, done.stderr


def check_cli_refuses(fx: Path, case_id: str, module: str, argv: list[str]) -> None:
    """A command-line case ({fx} standing for the fixture folder): exit 2, one 'error:' line, no file changed."""
    argv = [a.replace("{fx}", str(fx)) for a in argv]
    before = snapshot(fx)
    rc, err = run_cli(module, argv)
    assert rc == 2, f"{case_id}: exit {rc}\n{err}"
    assert_one_line(err, case_id)
    assert snapshot(fx) == before, f"{case_id}: files changed on disk"


def assert_one_line(text: str, where: str) -> None:
    assert "Traceback" not in text, f"{where}: traceback\n{text}"
    lines = [ln for ln in text.splitlines() if ln.strip()]
    assert len(lines) == 1, f"{where}: expected one stderr line, got {len(lines)}:\n{text}"
    assert lines[0].startswith("error:"), f"{where}: {lines[0]!r}"

