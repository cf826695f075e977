"""A serving step's new prompt chunk is priced in Python floats (physics/attention.py prompt_chunk_point_s,
read by serving/pricer.py StepPricer._prefill_point_s): the same IEEE operations in the same order as
pass_time over attention_op on a one-pair array, so the same value, bit for bit, on every shipped profile of
measured tables, for dense, grouped-query and sliding-window models, both KV dtypes, and chunks and caches
from a few tokens to past the tables' ends. Where the decode surfaces, MLA or no measured table price the
chunk, the point path declines (None) and the array path prices it."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from simulator.physics.attention import MAX_DECODE_SURFACE_QUERIES
from simulator.serving.engine import engine_from_scenario
from simulator.serving.pricer import StepPricer
from simulator.specs.scenario import build_scenario

PROFILES = sorted((Path(__file__).resolve().parents[1] / "simulator" / "data" / "profiles").glob("*.json"))
MODELS = ("llama-3.1-8b", "command-a", "qwen3-32b", "llama-3.1-70b")


def _pricer(profile: Path, model: str, kv: str, tp: int) -> StepPricer:
    hw, engine = profile.name.split(".", 1)[0], profile.name.split(".")[1].split("-")[0]
    raw = {"model": {"name": model}, "hardware": {"name": hw, "tp": tp},
           "precision": {"weights": "bf16", "activations": "bf16", "kv_cache": kv},
           "engine": {"name": engine}, "calibration": {"profile": str(profile)},
           "workload": {"context_len": 512, "batch_sizes": [1], "k_max": 2, "fixed_k": 2}, "draft": {"method": "ngram"}}
    sc = build_scenario(raw, origin="test")
    return StepPricer(sc, engine_from_scenario(sc), 2, 8, 4096, False)


def _array_s(pricer: StepPricer, chunk: int, cached: int) -> float:
    return float(pricer._prefill_pairs_s(np.array([chunk], dtype=float), np.array([cached], dtype=float))[0])


@pytest.mark.parametrize("profile", PROFILES, ids=lambda p: p.name.split(".profile")[0])
def test_a_prompt_chunk_point_price_equals_the_array_path(profile):
    rng = np.random.default_rng(abs(hash(profile.name)) % 2**32)
    taken = 0
    for i, model in enumerate(MODELS):
        pricer = _pricer(profile, model, ("bf16", "fp8")[i % 2], (1, 4)[i % 2])
        chunks = rng.integers(MAX_DECODE_SURFACE_QUERIES + 1, 20000, 12).tolist() + [MAX_DECODE_SURFACE_QUERIES + 1]
        cached = rng.integers(0, 200000, 13).tolist()
        for c, p in zip(chunks, cached):
            point = pricer._prefill_point_s(c, p)
            assert point is not None, (model, c, p)
            assert point == _array_s(pricer, c, p), (model, c, p)
            taken += 1
        # chunks the decode surfaces price are left to the array path
        assert pricer._prefill_point_s(MAX_DECODE_SURFACE_QUERIES, 100) is None
    assert taken == 13 * len(MODELS)


def test_the_point_path_declines_mla_and_profiles_without_tables():
    mla = _pricer(PROFILES[0], "deepseek-v3", "bf16", 8)
    assert mla._prefill_point_s(512, 0) is None and _array_s(mla, 512, 0) > 0
    raw = {"model": {"name": "llama-3.1-8b"}, "hardware": {"name": "h100-sxm", "tp": 1},
           "calibration": {"profile": "none"},
           "workload": {"context_len": 512, "batch_sizes": [1], "k_max": 2, "fixed_k": 2}, "draft": {"method": "ngram"}}
    sc = build_scenario(raw, origin="test")
    datasheet = StepPricer(sc, engine_from_scenario(sc), 2, 8, 4096, False)
    assert datasheet._prefill_point_s(512, 0) is None and _array_s(datasheet, 512, 0) > 0
