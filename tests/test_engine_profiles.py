"""Engine profiles (simulator/data/engines/*.toml): a schema that refuses keys nothing reads, and the
SGLang speculative capture list checked against SGLang's own code."""
from __future__ import annotations

import tomllib

import numpy as np
import pytest

from simulator.errors import PlannerError
from simulator.plan.api import predict
from simulator.specs.engine_catalog import ENGINES_DIR, list_engines
from simulator.specs.engines import engine_from_dict, load_engine
from simulator.specs.scenario import SCENARIO_DIR

BUNDLED = sorted(p.stem for p in SCENARIO_DIR.glob("*.toml"))


def _profile(name: str) -> dict:
    with open(ENGINES_DIR / f"{name}.toml", "rb") as f:
        return tomllib.load(f)


def test_every_bundled_profile_loads_under_the_schema():
    assert len(list_engines()) == 28  # 14 + 13 from issue 48 + sglang-0.4.4.post2 (docs/engines.md)
    for key in list_engines():
        load_engine(key)


@pytest.mark.parametrize("edit,needle", [
    (lambda d: d["host"].update(step_fixd_s=1e-4), "[host] step_fixd_s (did you mean 'step_fixed_s'?)"),
    (lambda d: d["cuda_graphs"].update(cudagraph_mode="FULL"), "[cuda_graphs] cudagraph_mode"),
    (lambda d: d["assumed"]["host"].update(overlap_scheduling=True), "[assumed.host] overlap_scheduling"),
    (lambda d: d.update(hosts={}), "unknown table [hosts]"),
    (lambda d: d.update(versoin="0.11.0"), "unknown top-level key 'versoin'"),
])
def test_unknown_key_is_refused_naming_file_and_key(edit, needle):
    data = _profile("vllm-0.11.0")
    edit(data)
    with pytest.raises(PlannerError) as err:
        engine_from_dict(data, "engines/vllm-0.11.0.toml")
    msg = str(err.value)
    assert msg.startswith("engines/vllm-0.11.0.toml: ") and needle in msg and "\n" not in msg
    assert "[notes]" in msg  # says where descriptive facts go


def test_notes_and_sources_are_free_form():
    data = _profile("vllm-0.11.0")
    data["notes"]["anything"] = [1, "two"]
    data["sources"]["new_citation"] = "https://example.org"
    assert engine_from_dict(data, "x.toml").capture_sizes == load_engine("vllm", "0.11.0").capture_sizes


def _sglang():
    import engine_code
    return engine_code


def _skip_unavailable(fn, *a, **k):
    ec = _sglang()
    try:
        return fn(*a, **k)
    except ec.EngineCodeUnavailable as exc:
        pytest.skip(f"engine code unavailable: {exc}")


@pytest.mark.engines
def test_sglang_capture_lists_are_sglangs_own():
    """The profile's lists at cuda_graph_max_bs 256 (its max_capture_size) are what SGLang 0.5.23's
    generate_decode_cuda_graph_batch_sizes returns, with and without a speculative algorithm."""
    ec = _sglang()
    eng = load_engine("sglang")
    assert eng.max_capture_size == 256
    spec = _skip_unavailable(ec.sglang_decode_capture_sizes, 256, True, "0.5.23")
    plain = _skip_unavailable(ec.sglang_decode_capture_sizes, 256, False, "0.5.23")
    assert list(eng.spec_capture_sizes) == spec and list(eng.capture_sizes) == plain
    assert spec[:10] == [1, 2, 3, 4, 5, 6, 7, 8, 10, 12] and plain[:6] == [1, 2, 4, 8, 12, 16]  # by hand


@pytest.mark.engines
@pytest.mark.slow
@pytest.mark.parametrize("name", BUNDLED)
def test_sglang_routes_every_batch_size_to_kstar_at_the_padded_size(name):
    """SGLang 0.5.23's AdaptiveSpeculativeParams, given the engine's speculative capture list, pads
    each batch size and routes it to a slot whose candidate steps hold the planner's K* at the padded
    size (where the padded size is not on the grid or does not fit: the K* of the largest batch size
    that pads there, one K per padded size)."""
    ec = _sglang()
    p = predict(SCENARIO_DIR / f"{name}.toml", engine="sglang")
    eng = p.scenario.engine
    assert eng.name == "sglang" and eng.spec_capture_sizes
    exp = p.export("sglang", "0.5.23")
    params = _skip_unavailable(ec.sglang_adaptive_params, exp.payload, "0.5.23",
                               cuda_graph_bs=list(eng.spec_capture_sizes))
    t = p.kstar_map()
    b, k = t.batch_sizes, t.k_opt[:, t.context_index]
    k_at = {int(x): int(v) for x, v in zip(b, k) if v >= 0}
    by_pad: dict[int, set[int]] = {}
    for x in b[k >= 0]:
        padded = int(params._pad_to_cuda_graph_bs(int(x)))  # SGLang's own padding
        cand = list(params._route(int(x)).candidate_steps)
        want = k_at.get(padded, k_at[max(y for y in k_at if y <= padded and
                                         int(params._pad_to_cuda_graph_bs(y)) == padded)])
        assert want in cand, f"{name}: B={x} pads to {padded}, slot offers {cand}, K* there is {want}"
        by_pad.setdefault(padded, set()).update(cand)
    assert all(len(v) == 1 for v in by_pad.values())  # kstar candidates: one K per padded size
    assert np.any(np.array([int(params._pad_to_cuda_graph_bs(int(x))) for x in b]) != b)  # padding was exercised
