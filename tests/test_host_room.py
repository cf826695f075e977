"""The engine terms' host time hides where the engine hides its own (docs/learned_layer_choices.md, ninth pass):
a step pays max(0, H - room), room the part of the engine's overlap window its own host time leaves free
(physics.engine_time.host_exposed_and_room_s). Anchors: hand computations of the overlap rule, and the rule itself (adding
host time to the engine's own and asking host_exposed_s again gives the same exposed time)."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from simulator.physics.engine_time import host_exposed_and_room_s, host_exposed_and_room_scalar_s, host_exposed_s
from simulator.plan.grid import compute_grid
from simulator.specs.scenario import load_scenario
from simulator.specs.step_terms import TERM_NAMES, added_step_s


@pytest.fixture(scope="module")
def overlapping():
    """vLLM 0.33's profile (async scheduling: host work of step n + 1 behind GPU step n) with host times by hand."""
    eng = load_scenario("llama-3.1-8b-h100").engine
    assert (eng.overlap_window, eng.spec_overlap_window) == ("step", "step")
    return replace(eng, host_fixed_s=100e-6, host_per_sequence_s=1e-6, spec_fixed_s=0.0, spec_per_sequence_s=0.0,
                   min_exposed_s=30e-6)


def test_room_by_hand(overlapping):
    # B = 10: host 100 + 10 x 1 = 110 us. A 5 ms GPU step hides it but the 30 us floor: exposed 30 us, and
    # 5000 + 30 - 110 = 4920 us more host time would hide. A 100 us step: exposed max(30, 110 - 100) = 30 us,
    # room 100 + 30 - 110 = 20 us.
    for gpu_s, room_us in ((5e-3, 4920.0), (100e-6, 20.0)):
        exposed, room = host_exposed_and_room_s(overlapping, 10, 0, gpu_s, 0.0)
        assert float(exposed) == pytest.approx(30e-6, rel=1e-9)
        assert float(room) * 1e6 == pytest.approx(room_us, rel=1e-9)
        # the serving loop's scalar twin: the same bits
        assert host_exposed_and_room_scalar_s(overlapping, 10, 0, gpu_s, 0.0) == (float(exposed), float(room))


@pytest.mark.parametrize("gpu_s", [20e-6, 100e-6, 1e-3, 5e-3])
def test_room_is_what_the_engines_own_overlap_rule_hides(overlapping, gpu_s):
    # H more host time a step, given to the engine itself, exposes max(0, H - room) more: the terms' host time
    # hides exactly as the engine's own does
    exposed, room = host_exposed_and_room_s(overlapping, 10, 0, gpu_s, 0.0)
    room = float(room)
    for extra in (0.0, 10e-6, 50e-6, 500e-6, 8e-3):
        more = replace(overlapping, host_fixed_s=overlapping.host_fixed_s + extra)
        grew = float(host_exposed_s(more, 10, 0, gpu_s, 0.0) - exposed)
        assert grew == pytest.approx(max(0.0, extra - room), abs=1e-12)


def test_no_room_on_an_engine_that_hides_no_host_time():
    eng = load_scenario("llama-3.1-8b-h100", engine="vllm", engine_version="0.11.0").engine
    assert (eng.overlap_window, eng.spec_overlap_window) == ("none", "none")
    assert not np.any(host_exposed_and_room_s(eng, np.arange(1, 65.0), 3, 5e-3, 1e-3)[1])
    assert host_exposed_and_room_scalar_s(eng, 8, 3, 5e-3, 1e-3)[1] == 0.0


@pytest.mark.parametrize("version", ["0.33.0", "0.11.0"])
def test_the_grid_adds_the_layers_host_time_beyond_the_room(version):
    # the learned grid less the physics-only grid, cell by cell: max(0, H - room) + c_coll calls by hand, with H
    # the layer's host terms (c_step + c_seq B + (c_seq_spec B + c_spec B (K + 1)) [K > 0]); at TP 1 no calls.
    # vLLM 0.11 has no room: H in full; 0.33 hides it behind the GPU step (8B model on one H100: 6-20 ms a step)
    sc = load_scenario("llama-3.1-8b-h100", engine="vllm", engine_version=version)
    physics = replace(sc, step_prior=None)
    B, ks = np.array([1.0, 16.0, 64.0, 256.0]), np.array([0.0, 3.0])
    g, p = compute_grid(sc, batch_sizes=B, ks=ks), compute_grid(physics, batch_sizes=B, ks=ks)
    v = dict(zip(TERM_NAMES, (sc.step_terms.values[n] for n in TERM_NAMES)))
    Bc, Kc = B[:, None], ks[None, :]
    H = added_step_s(v["host_per_step_s"], v["host_per_seq_s"], v["spec_per_token_s"], Bc, Kc,
                     v["spec_host_per_seq_s"])
    room = np.broadcast_to(p.host_room_s, p.itl_s.shape)
    assert np.all(H > 100e-6)  # the layer's host time is there to hide (450 us a step in the shipped one)
    np.testing.assert_allclose(g.itl_s - p.itl_s, np.maximum(H - room, 0.0), rtol=1e-9, atol=1e-12)
    if version == "0.11.0":
        assert not room.any()
    else:
        assert (room > H).all()  # every step here is long enough to hide it: the layer adds nothing


def test_provenance_says_where_the_layers_host_time_hides():
    # what a prediction rests on names the learned layer and, on an engine that overlaps, that its host time hides
    note = "its host time hides where the engine overlaps host work with the GPU: plain and speculating steps"
    assert note in load_scenario("llama-3.1-8b-h100").cost_source  # vLLM 0.33: async scheduling, spec too
    assert note not in load_scenario("llama-3.1-8b-h100", engine="vllm", engine_version="0.11.0").cost_source
    assert "hides" not in load_scenario("llama-3.1-8b-h100", learned=False).cost_source  # nothing to hide


def test_speedup_band_says_the_layers_host_time_hides_on_this_engine():
    # the published band is the layer's on curves whose engines mostly paid host time while speculating; on vLLM
    # 0.33 the layer's host time hides, so the line adds the physics alone's median errors on those curves
    from simulator.plan.speedup_trust import speedup_trust_text
    from simulator.specs.uncertainty import speedup_bands
    medians = ", ".join(f"{b.median_error:+.0%}" for b in speedup_bands(physics_only=True))
    assert medians  # transfer_error.json's physics-alone bands (e.g. +5%, +17%, +21%)
    said = speedup_trust_text(load_scenario("llama-3.1-8b-h100"))
    assert "hides host time while speculating" in said and f"whose median errors on them were {medians}" in said
    assert "hides host time" not in speedup_trust_text(load_scenario("llama-3.1-8b-h100", engine="vllm",
                                                                      engine_version="0.11.0"))
    assert "hides host time" not in speedup_trust_text(load_scenario("llama-3.1-8b-h100", learned=False))
