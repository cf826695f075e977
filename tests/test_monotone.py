"""A step given more work is not faster (issue 20, item 2).

For every shipped measured-table profile, with its own engine, and every catalog model family it can
hold (the smallest TP whose weights fit; all MoE models plus a dense sample), the verify pass's
kernel time (graph effects aside: ``StepCost.total_s``) never decreases when the work grows:
batch size at fixed K, K at fixed batch size, context length, and distinct experts (a higher routing
reuse rho touches fewer experts with the same tokens: never costlier). Plus hand-computed checks of
the envelope itself (simulator/physics/monotone.py).
"""
from __future__ import annotations

import warnings
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from simulator.physics.forward_pass import verify_cost
from simulator.physics.memory import weight_bytes_per_gpu
from simulator.physics.monotone import affine_envelope_s, lattice_interp, monotone_lattice, surface_time_s
from simulator.specs.profile import SHIPPED_DIR
from simulator.specs.scenario import resolve_scenario
from simulator.specs.surfaces import Surface, collective_time_s

pytestmark = pytest.mark.monotone

PROFILES = sorted(SHIPPED_DIR.glob("*.profile.json"))
MOE_MODELS = ("gpt-oss-120b", "qwen3-30b-a3b", "qwen3-235b-a22b", "mixtral-8x7b", "deepseek-v3", "moe-synthetic")
DENSE_MODELS = ("llama-3.1-8b", "llama-3.1-70b")
BATCH = np.array([1, 2, 3, 4, 6, 8, 12, 16, 23, 32, 48, 64, 128, 256], dtype=float)[:, None]
KS = np.arange(0, 9, dtype=float)[None, :]
CONTEXTS = (512.0, 4096.0, 32768.0)
REUSE = (0.0, 0.5, 0.9)
# float summation order only: every op is a running maximum over less work
RTOL = 1e-9


def _scenario(model: str, profile: Path):
    """The model on the profile's device and engine (the engine resolves to this shipped profile, so
    the cached copy with its borrowed surfaces is used) at the smallest TP whose weights fit: the scenario
    `predict` would run (plan/api.predict resolves it the same way), without pricing its grid."""
    hardware, tag = profile.name.split(".", 1)
    for tp in (1, 2, 4, 8):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            sc = resolve_scenario(model=model, hardware=hardware, tp=tp, engine=tag.split("-")[0])
        assert Path(sc.profile.path).name == profile.name
        if weight_bytes_per_gpu(sc.model, sc.deployment) < 0.9 * sc.hardware.memory_bytes:
            return sc
    return None


def _worst_drop(t: np.ndarray, axis: int) -> float:
    """Largest relative decrease of t along ``axis`` (0 when it never decreases)."""
    d = np.diff(t, axis=axis) / np.delete(t, -1, axis=axis)
    return float(max(0.0, -d.min()))


def _kernel_s(sc, dep=None, context=None) -> np.ndarray:
    return verify_cost(sc.model, dep or sc.deployment, sc.hardware, BATCH, KS,
                       sc.context_len if context is None else context, sc.profile).total_s


@pytest.mark.parametrize("profile", PROFILES, ids=lambda p: p.name.replace(".profile.json", ""))
def test_verify_kernel_time_never_falls_as_work_grows(profile):
    failures = []
    for model in MOE_MODELS + DENSE_MODELS:
        sc = _scenario(model, profile)
        if sc is None:
            continue
        by_ctx = np.stack([_kernel_s(sc, context=c) for c in CONTEXTS], axis=2)
        drops = {"batch": _worst_drop(by_ctx, 0), "K": _worst_drop(by_ctx, 1), "context": _worst_drop(by_ctx, 2)}
        if sc.model.is_moe:
            routing = sc.deployment.routing
            by_reuse = np.stack([_kernel_s(sc, replace(sc.deployment, routing=replace(routing, reuse=r)))
                                 for r in REUSE])
            drops["fewer experts costlier"] = _worst_drop(by_reuse[::-1], 0)  # rho falling = more experts
        failures += [f"{model} tp{sc.deployment.tp}: {k} -{v:.2%}" for k, v in drops.items() if v > RTOL]
    assert not failures, "verify time falls as work grows: " + "; ".join(failures)


def test_issue_case_qwen3_30b_h100_vllm_k0_to_k1():
    """The issue's worst case: Qwen3-30B-A3B / H100 / vLLM at B = 23, verify time -8.9% from K = 0 to 1."""
    sc = _scenario("qwen3-30b-a3b", SHIPPED_DIR / "h100-sxm.vllm-0.24.0.profile.json")
    t = verify_cost(sc.model, sc.deployment, sc.hardware, np.array([[23.0]]), np.array([[0.0, 1.0]]),
                    sc.context_len, sc.profile).total_s
    assert t[0, 1] >= t[0, 0]


def test_affine_envelope_by_hand():
    """F = 2 x, M = 100 + x, P = 1, BW = 1 (memory-bound: t = (100 + x) / eta), eta 0.5, 1, 0.4 at
    x = 1, 2, 3: t = 101 / 0.5 = 202, 102 / 1 = 102, 103 / 0.4 = 257.5. The least-squares non-decreasing
    fit of log t (one weight per node) pools x = 1, 2 at their geometric mean sqrt(202 * 102) = 143.54;
    x = 3 stands."""
    env = affine_envelope_s(np.array([1.0, 2.0, 3.0]), np.array([0.5, 1.0, 0.4]), 2.0, 0.0, 1.0, 100.0, 1.0, 1.0)
    pooled = np.sqrt(202.0 * 102.0)
    np.testing.assert_allclose(env, [pooled, pooled, 257.5], rtol=1e-12)
    t = np.array([[202.0], [102.0], [257.5]])
    np.testing.assert_allclose(monotone_lattice(t, mode="max")[:, 0], [202.0, 202.0, 257.5])  # less work
    np.testing.assert_allclose(monotone_lattice(t, mode="min")[:, 0], [102.0, 102.0, 257.5])  # padded up


def test_envelope_equals_surface_time_where_it_already_grows():
    """A GEMM surface whose time grows with m everywhere (flat while the weight read dominates, rising
    slower than the FLOPs once compute-bound, from m ~ 345 for n = k = 4096 bf16 on H100): the envelope is
    the surface's own time at every whole m (hand roofline: F = 2 m n k, M = n k w + m (n + k) a)."""
    n = k = 4096.0
    surf = Surface(["m"], [[1, 16, 256, 4096]], [0.7, 0.7, 0.7, 0.8])
    m = np.arange(1, 4097)
    peak, bw = 989e12, 3.35e12
    t = surface_time_s(2 * m * n * k, n * k * 2 + m * (n + k) * 2, surf(m=m.astype(float)), peak, bw)
    assert np.all(np.diff(t) >= 0)
    env = affine_envelope_s(m.astype(float), surf(m=m.astype(float)), 2 * n * k, 0.0, (n + k) * 2, n * k * 2, peak, bw)
    np.testing.assert_allclose(env, t, rtol=1e-12)


def test_lattice_interpolation_is_monotone_in_both_axes():
    """Bilinear interpolation of a lattice non-decreasing along both axes stays non-decreasing."""
    rng = np.random.default_rng(0)
    lat = np.cumsum(np.cumsum(rng.random((6, 5)), axis=0), axis=1)
    lx, y = np.arange(6.0), np.linspace(0, 4, 5)
    q = np.exp2(np.linspace(0, 5, 200))
    along_x = lattice_interp(lat, lx, y, q, 2.3)
    along_y = lattice_interp(lat, lx, y, 7.0, np.linspace(0, 4, 200))
    assert np.all(np.diff(along_x) >= 0) and np.all(np.diff(along_y) >= 0)


def test_collective_larger_message_never_faster():
    """Measured points 10 us at 1 kB, 8 us at 2 kB (a protocol switch), 20 us at 64 kB: as the planner
    prices a step (monotone) 1 kB and 2 kB pool at their geometric mean sqrt(10 * 8) = 8.94 us and the
    curve never falls."""
    table = {"all_reduce": {"2": {"alpha_s": 5e-6, "bus_bandwidth_bytes_per_s": 1e11,
                                  "bytes": [1024.0, 2048.0, 65536.0], "latency_s": [10e-6, 8e-6, 20e-6]}}}
    sizes = np.geomspace(256, 1 << 20, 200)
    t = collective_time_s(table, 2, sizes, monotone=True)
    assert np.all(np.diff(t) >= 0)
    assert float(collective_time_s(table, 2, 2048.0, monotone=True)) == pytest.approx(np.sqrt(80) * 1e-6)
    assert float(collective_time_s(table, 2, 1024.0, monotone=True)) == pytest.approx(np.sqrt(80) * 1e-6)
    assert float(collective_time_s(table, 2, 2048.0)) == pytest.approx(8e-6)  # the table's own point


def test_collective_pool_adjacent_violators_matches_scipy():
    """The all-reduce fit's pool-adjacent-violators against SciPy's isotonic_regression (>= 1.12)."""
    from scipy.optimize import isotonic_regression

    from simulator.specs.surfaces import isotonic_increasing

    rng = np.random.default_rng(1)
    for _ in range(100):
        y = rng.normal(size=int(rng.integers(1, 30)))
        np.testing.assert_allclose(isotonic_increasing(y), isotonic_regression(y).x, rtol=1e-12, atol=1e-12)


def test_a_cells_price_does_not_depend_on_the_other_cells_evaluated():
    # an envelope is a property of the op at its own shape: evaluating it beside cells the lattice does
    # not cover (no cached key, a GEMM beyond the integer lattice) must not change it
    import numpy as np

    from simulator.physics.forward_pass import forward_ops
    from simulator.physics.operators import evaluate
    from simulator.specs.scenario import load_scenario

    sc = load_scenario("command-a-h100")
    m, dep, hw, prof = sc.model, sc.deployment, sc.hardware, sc.profile

    def attention_s(B, L):
        B, q, L = np.broadcast_arrays(np.asarray(B, float), 1.0, np.asarray(L, float))
        ops = [o for o in forward_ops(m, dep, hw, B, q, L) if o.family == "attention"]
        return evaluate(ops, hw, dep, prof, B.shape).total_s

    alone = attention_s([[1.0]], [[1960.0]])[0, 0]
    beside = attention_s(np.array([[1.0], [2.0]]), np.array([[0.0, 1960.0, 4000.0]]))
    assert beside[0, 1] == alone


@pytest.mark.parametrize("name", ["command-a-h100", "deepseek-v3-dp-ep"])
def test_a_context_axis_read_from_whole_batch_tables_prices_as_the_lattice_does(name):
    # up to MAX_WHOLE_BATCH_CONTEXTS context lengths of whole batch sizes are read from one table per
    # length; more go through the lattice interpolation per cell: the same lengths must cost the same
    # either way (GQA decode and MLA, a verify pass of q = 1..9 queries)
    from simulator.physics.forward_pass import forward_ops
    from simulator.physics.measured import MAX_WHOLE_BATCH_CONTEXTS
    from simulator.physics.operators import evaluate
    from simulator.specs.scenario import load_scenario

    sc = load_scenario(name)
    m, dep, hw, prof = sc.model, sc.deployment, sc.hardware, sc.profile
    few = np.unique(np.round(np.geomspace(300, 120_000, 16)))
    many = np.concatenate([few, np.arange(1, MAX_WHOLE_BATCH_CONTEXTS) * 97.0 + 1])  # > 64 lengths
    B, q = np.arange(1.0, 301.0)[:, None, None], np.arange(1.0, 10.0)[None, :, None]

    def attention_s(lens):
        L = lens[None, None, :]
        ops = [o for o in forward_ops(m, dep, hw, B, q, L) if o.family == "attention"]
        assert ops and all(o.surface in ("attention_decode", "mla_decode") for o in ops)
        return evaluate(ops, hw, dep, prof, np.broadcast_shapes(B.shape, q.shape, L.shape)).total_s

    np.testing.assert_allclose(attention_s(few), attention_s(many)[:, :, :few.size], rtol=1e-13, atol=0)


def test_pool_adjacent_violators_by_hand_and_against_scipy():
    """specs.surfaces.isotonic_increasing (the planner's own PAVA; scipy.optimize is not imported at run
    time). Hand: y = 3, 1, 2 with weights 1, 1, 2: 3 > 1 pools to 2 (weight 2); 2 > 2 is no violation:
    2, 2, 2. Weights 3, 1, 1: (9 + 1) / 4 = 2.5 > 2 pools all: (10 + 2) / 5 = 2.4."""
    from scipy.optimize import isotonic_regression

    from simulator.specs.surfaces import isotonic_increasing
    np.testing.assert_allclose(isotonic_increasing([3.0, 1.0, 2.0], [1.0, 1.0, 2.0]), [2.0, 2.0, 2.0])
    np.testing.assert_allclose(isotonic_increasing([3.0, 1.0, 2.0], [3.0, 1.0, 1.0]), [2.4, 2.4, 2.4])
    rng = np.random.default_rng(7)
    for _ in range(300):
        n = int(rng.integers(1, 50))
        y, w = rng.normal(size=n).cumsum() * rng.choice([-1.0, 1.0]), rng.uniform(0.1, 5.0, n)
        np.testing.assert_allclose(isotonic_increasing(y, w), isotonic_regression(y, weights=w).x, rtol=0, atol=1e-12)


def test_monotone_lattice_pools_only_the_lines_that_fall():
    # hand: log t = 0, 2, 1, 3 down one column pools the 2 and the 1 at their mean, 1.5
    t = np.exp(np.array([0.0, 2.0, 1.0, 3.0]))[:, None]
    np.testing.assert_allclose(monotone_lattice(t), np.exp(np.array([0.0, 1.5, 1.5, 3.0]))[:, None], rtol=1e-12)
    # a lattice already non-decreasing along both axes comes back as it is
    ok = np.exp(np.add.outer(np.arange(5.0), 0.5 * np.arange(4.0)))
    np.testing.assert_array_equal(monotone_lattice(ok), ok)
    # one falling node in the middle of a 2-D lattice: its column and row are pooled, the rest stands
    bent = ok.copy()
    bent[2, 1] = ok[1, 1] * 0.9
    out = monotone_lattice(bent)
    assert (np.diff(out, axis=0) >= 0).all() and (np.diff(out, axis=1) >= 0).all()
    np.testing.assert_array_equal(out[:, 3], ok[:, 3])


@pytest.mark.parametrize("y, want", [
    ([1.0, 3.0, 2.0, 5.0, 6.0, 7.0], [1.0, 2.5, 2.5, 5.0, 6.0, 7.0]),  # one fall, the rise after it untouched
    ([1.0, 5.0, 0.0, 2.0, 3.0], [1.0, 7 / 3, 7 / 3, 7 / 3, 3.0]),  # the pooled block (5, 0) pulls in the 2 after it
    ([4.0, 3.0, 2.0, 1.0], [2.5, 2.5, 2.5, 2.5]),  # falling all the way: one block at the mean
])
def test_isotonic_fit_by_hand(y, want):
    # hand: pool adjacent violators; the weighted least-squares non-decreasing fit of each
    from simulator.specs.surfaces import isotonic_increasing
    np.testing.assert_allclose(isotonic_increasing(np.array(y)), want, rtol=1e-15)
    # weights 1, 3 on the first fall of the first case: (3 x 1 + 2 x 3) / 4 = 2.25
    np.testing.assert_allclose(isotonic_increasing(np.array([3.0, 2.0, 5.0]), np.array([1.0, 3.0, 1.0])),
                               [2.25, 2.25, 5.0], rtol=1e-15)


@pytest.mark.parametrize("profile", PROFILES, ids=lambda p: p.name.replace(".profile.json", ""))
def test_routed_experts_rise_with_the_bytes_they_load(profile):
    """Issue 47: gpt-oss-120b / H100 / vLLM at B = 8 priced moe_experts at 22.04 ms for K = 4, 6 and 8 while its
    bytes grew from 44 to 55 GB. On every shipped profile and MoE model, wherever K + 1 loads more than 1% more
    expert bytes, the routed experts' time rises too. The flat stretch was the tables' own time for all the
    experts their rows loaded (min(E, T k)) priced to steps that load fewer (test below and
    simulator/physics/monotone.moe_lattice_s)."""
    failures = []
    for model in MOE_MODELS:
        sc = _scenario(model, profile)
        if sc is None:
            continue
        cost = verify_cost(sc.model, sc.deployment, sc.hardware, BATCH, KS, sc.context_len, sc.profile)
        i = cost.names.index("moe_experts")
        t, nbytes = np.broadcast_to(cost.time_s[i], cost.total_s.shape), np.broadcast_to(cost.nbytes[i], cost.total_s.shape)
        more = np.diff(nbytes, axis=1) > 0.01 * nbytes[:, :-1]
        flat = more & (np.diff(t, axis=1) <= 1e-9 * t[:, :-1])
        if flat.any():
            b, k = np.argwhere(flat)[0]
            failures.append(f"{model} tp{sc.deployment.tp} B={int(BATCH[b, 0])} K={k}->{k + 1}:"
                            f" {t[b, k] * 1e3:.3f} -> {t[b, k + 1] * 1e3:.3f} ms")
    assert not failures, "routed experts flat while their bytes grow: " + "; ".join(failures)


def _collector_balanced_experts(tokens: int, experts: int, topk: int) -> int:
    """Distinct experts of aiconfigurator's "balanced" router logits (collector/helper.py balanced_logits,
    re-stated): stride = ceil(E / k); token t takes (t + i stride) mod E when T >= stride, else
    (floor(t stride / T) + i stride) mod E, for i < k."""
    stride = -(-experts // topk)
    return len({(t + i * stride) % experts if tokens >= stride else (t * stride // tokens + i * stride) % experts
                for t in range(tokens) for i in range(topk)})


@pytest.mark.parametrize("experts, topk", [(128, 8), (128, 4), (8, 2), (256, 8)])
def test_tables_rows_load_every_expert_their_pairs_reach(experts, topk):
    # the cause of the issue-47 flat spot: a table row of T tokens loaded min(E, T k) experts (all 128 of
    # Qwen3-30B-A3B's at T = 16), while independent tokens touch E (1 - (1 - k/E)^T) (82.4 at T = 16)
    from simulator.physics.experts import experts_touched, table_experts_touched

    for tokens in (1, 2, 3, 4, 8, 16, 32, 64, 128):
        assert table_experts_touched(tokens, experts, topk) == _collector_balanced_experts(tokens, experts, topk)
    # the timed GPU of an expert-parallel row holds experts [0, E / ep): 128 experts, top-1 over 64 GPUs:
    # token 0 takes expert 0, expert 1 only once T reaches 128 (floor(t 128 / T) = 1 needs T > 64, i.e. ceil)
    assert [float(table_experts_touched(t, 128, 1, 64)) for t in (1, 8, 64, 128, 256)] == [1, 1, 1, 2, 2]
    # 256 experts, top-8 over 8 GPUs (32 each, stride 32): T < 32 tokens spread one expert each over block 0
    assert [float(table_experts_touched(t, 256, 8, 8)) for t in (1, 4, 16, 32, 64)] == [1, 4, 16, 32, 32]
    assert float(experts_touched(16.0, np.full(128, 8 / 128))) == pytest.approx(128 * (1 - (15 / 16) ** 16))
    assert 128 * (1 - (15 / 16) ** 16) == pytest.approx(82.4, abs=0.05)


def test_moe_price_reads_the_tables_efficiency_where_they_did_that_work():
    """Eight experts, top-2, memory-bound (expert bytes only, peak out of reach), a measured surface of
    efficiency 0.25 everywhere, fitted on rows labelled with the independent-token count e_0(u) =
    8 (1 - 0.75^u). The table's time at u tokens is then e_0(u) s w / (0.25 BW); those rows loaded
    min(8, 2 u) experts, so their efficiency in that work is eta_tab(u) = 0.25 min(8, 2 u) / e_0(u).
    At T = 4 independent tokens (E = e_0(4) = 5.46875 experts): u_1 = E / 2 = 2.734 (the same experts,
    one token each), u_2 = 4 x 8 / E = 5.851 (the same tokens per expert, all experts), u_full = 4:

        eta = eta_tab(u_1) eta_tab(u_2) / eta_tab(4) = 0.25 e_0(4)^2 / (e_0(u_1) e_0(u_2))
        t = E s w / (eta BW) = s w e_0(u_1) e_0(u_2) / (0.25 BW e_0(4))

    e_0(2.734) = 4.3570, e_0(5.851) = 6.5140: t = 41.52 us for s w = 2 MB, BW = 1 TB/s, where reading
    the surface at the labels priced 5.46875 x 2 MB / (0.25 TB/s) = 43.75 us."""
    from simulator.physics.monotone import moe_lattice_s, moe_time_s

    p = np.full(8, 0.25)
    surf = Surface(["tokens_per_expert", "expert_bytes", "n"], [[1.0], [1.0], [1.0]], [[[0.25]]])
    shape = {"probabilities": p, "topk": 2, "moe_ep": 1, "params_slice": 1e6, "w_bytes": 2.0, "pair_bytes": 0.0,
             "n": 1.0}
    lattice = moe_lattice_s(surf, None, shape, 2.0 ** 17, 32.0, 1e30, 1e12)
    e0 = lambda u: 8 * (1 - 0.75 ** u)  # noqa: E731
    E = e0(4.0)
    hand = 2e6 * e0(E / 2) * e0(4 * 8 / E) / (0.25e12 * E)
    assert E == pytest.approx(5.46875) and e0(E / 2) == pytest.approx(4.3570, abs=1e-4)
    assert e0(4 * 8 / E) == pytest.approx(6.5140, abs=1e-4) and hand == pytest.approx(41.52e-6, rel=1e-3)
    assert float(moe_time_s(lattice, 4.0, E, p)) == pytest.approx(hand, rel=1e-3)
    # at all experts loaded (T = 64: e_0 = 8 to 1e-8) the table's own time, 8 x 2 MB / (0.25 TB/s) = 64 us
    assert float(moe_time_s(lattice, 64.0, e0(64.0), p)) == pytest.approx(64e-6, rel=1e-6)


@pytest.mark.parametrize("batch, ks", [(8.0, (4.0, 6.0, 8.0)), (12.0, (5.0, 6.0, 8.0))])
def test_issue_case_gpt_oss_120b_h100_vllm_rises_with_its_bytes(batch, ks):
    """Issue 47: gpt-oss-120b / 1 x H100 / vLLM, moe_experts 22.04 ms at K = 4, 6 and 8 at B = 8 when filed, and
    22.04 ms at K = 5, 6 and 8 at B = 12 before the fix (45.0 -> 47.9 -> 52.2 GB). From the first K to the second
    the routed experts load dM more bytes; the step rises by at least dM at the HBM peak (3.35 TB/s: the least a
    larger read adds) and at most dM at the bandwidth the first step achieves (M_1 / t_1: what the extra bytes
    cost if the kernel grew no more efficient). B = 12: dM = 2.84 GB, 0.85 ms <= 0.92 ms <= 1.06 ms."""
    sc = _scenario("gpt-oss-120b", SHIPPED_DIR / "h100-sxm.vllm-0.24.0.profile.json")
    cost = verify_cost(sc.model, sc.deployment, sc.hardware, np.array([[batch]]), np.array([ks]),
                       sc.context_len, sc.profile)
    i = cost.names.index("moe_experts")
    t, m = np.broadcast_to(cost.time_s[i], (1, 3))[0], np.broadcast_to(cost.nbytes[i], (1, 3))[0]
    dm = m[1] - m[0]
    assert dm > 0.05 * m[0] and m[2] > m[1]
    assert dm / sc.hardware.hbm_bandwidth_bytes_per_s <= t[1] - t[0] <= dm / (m[0] / t[0])
    assert t[2] > t[1]
