"""A serving step's new prompt chunk is priced in Python floats (physics/operators.py prompt_chunk_point_s,
read by serving/prefill_attention.py PrefillAttention.point_s): the same IEEE operations in the same order as
pass_time over attention_op on a one-pair array, so the same value, bit for bit, on every shipped profile of
measured tables, a fitted CPU profile, the MI300X's published prior and the datasheet alone, for dense,
grouped-query and sliding-window models, both KV dtypes, and chunks and caches from a few tokens to past
the tables' ends. Where the decode surfaces or MLA price the chunk, the point path declines (None) and
the array path prices it."""
from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import pytest

from simulator.physics.attention import MAX_DECODE_SURFACE_QUERIES
from simulator.serving.engine import engine_from_scenario
from simulator.serving.pricer import StepPricer
from simulator.specs import scenario as scenario_module
from simulator.specs.scenario import build_scenario

ROOT = Path(__file__).resolve().parents[1]
MEASURED = sorted((ROOT / "simulator" / "data" / "profiles").glob("*.json"))
# (hardware, engine, calibration profile): every measured-table profile, then the other kinds of basis
BASES = [(p.name.split(".", 1)[0], p.name.split(".")[1].split("-")[0], str(p)) for p in MEASURED] + [
    ("mi300x", "vllm", ""),  # no profile named: the published prior in the hardware file
    ("cpu-xeon-2c", "vllm", str(ROOT / "calibration" / "data" / "cpu-xeon-2c.profile.json")),  # a fitted profile
    ("h100-sxm", "vllm", "none")]  # the datasheet roofline
MODELS = ("llama-3.1-8b", "command-a", "qwen3-32b", "llama-3.1-70b")


@pytest.fixture(autouse=True, scope="module")
def _each_named_profile_read_once():
    """Each basis prices four models, and a scenario that names its profile by path reads and parses the file at
    every build (0.17 s, most of this file's time on the 2-core box). A Profile is a frozen dataclass the
    pricing only reads, and the planner shares one per shipped file the same way (load_shipped_profile), so
    this file reads each named file once; the scenarios are still built, and priced, in full."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(scenario_module, "load_profile", functools.cache(scenario_module.load_profile))
        yield


def _pricer(hw: str, engine: str, profile: str, model: str, kv: str, tp: int) -> StepPricer:
    raw = {"model": {"name": model}, "hardware": {"name": hw, "tp": tp},
           "precision": {"weights": "bf16", "activations": "bf16", "kv_cache": kv},
           "engine": {"name": engine}, **({"calibration": {"profile": profile}} if profile else {}),
           "workload": {"context_len": 512, "batch_sizes": [1], "k_max": 2, "fixed_k": 2}, "draft": {"method": "ngram"}}
    sc = build_scenario(raw, origin="test")
    return StepPricer(sc, engine_from_scenario(sc), 2, 8, 4096, False)


def _array_s(pricer: StepPricer, chunk: int, cached: int) -> float:
    return float(pricer.prefill.pairs_s(np.array([chunk], dtype=float), np.array([cached], dtype=float))[0])


@pytest.mark.parametrize("basis", BASES, ids=lambda b: f"{b[0]}-{Path(b[2]).name.split('.profile')[0] or 'prior'}")
def test_a_prompt_chunk_point_price_equals_the_array_path(basis):
    rng = np.random.default_rng(abs(hash(basis)) % 2**32)
    taken = 0
    for i, model in enumerate(MODELS):
        tp = 1 if basis[0] == "cpu-xeon-2c" else (1, 4)[i % 2]  # one CPU: no interconnect for tp > 1
        pricer = _pricer(*basis, model, ("bf16", "fp8")[i % 2], tp)
        prof = pricer.sc.profile  # the basis is the one named: tables, a fitted or published profile, or none
        assert (prof is None) == (basis[2] == "none") and (prof is not None and bool(prof.surfaces)) == (
            basis[2].startswith(str(ROOT / "simulator")))
        chunks = rng.integers(MAX_DECODE_SURFACE_QUERIES + 1, 20000, 12).tolist() + [MAX_DECODE_SURFACE_QUERIES + 1]
        cached = rng.integers(0, 200000, 13).tolist()
        for c, p in zip(chunks, cached):
            point = pricer.prefill.point_s(c, p)
            assert point is not None, (model, c, p)
            assert point == _array_s(pricer, c, p), (model, c, p)
            taken += 1
        # chunks the decode surfaces price are left to the array path
        assert pricer.prefill.point_s(MAX_DECODE_SURFACE_QUERIES, 100) is None
    assert taken == 13 * len(MODELS)


def test_the_point_path_declines_mla():
    mla = _pricer(*BASES[0], "deepseek-v3", "bf16", 8)
    assert mla.prefill.point_s(512, 0) is None and _array_s(mla, 512, 0) > 0
