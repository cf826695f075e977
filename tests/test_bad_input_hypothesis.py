"""Random hostile input: hypothesis mutates config.json files and scenarios; each mutation must either
be refused with a PlannerError or give finite, positive step times (the base configs:
tests/bad_input_corpus.py).
"""
from __future__ import annotations

import json
import math

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bad_input_corpus import DEEPSEEK, LLAMA, QWEN_MOE, edited
from simulator.errors import PlannerError


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

    cfg = edited(_BASES[base], **edits)
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
