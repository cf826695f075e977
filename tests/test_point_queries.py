"""One-point queries of a measured surface and of a monotone lattice (a serving step's prompt chunk) take a
Python-float path (specs/surfaces.py Surface._at_one_point, physics/monotone.py _lattice_point): the same
IEEE operations in the same order as the array path, so the same value, bit for bit, at every shipped
profile's surfaces and at random lattices, on nodes, between them, beyond the ends and at zero."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from simulator.physics.monotone import lattice_interp
from simulator.specs.profile import load_profile

PROFILES = sorted((Path(__file__).resolve().parents[1] / "simulator" / "data" / "profiles").glob("*.json"))


def _point(rng, grids) -> list[float]:
    out = []
    for g in grids:
        v = float(np.exp2(rng.uniform(g[0] - 1.5, g[-1] + 1.5)))
        r = rng.random()
        out.append(float(np.exp2(g[rng.integers(g.size)])) if r < 0.2 else 0.0 if r < 0.25 else v)
    return out


def test_a_surface_at_one_point_equals_the_array_path():
    rng = np.random.default_rng(7)
    checked = 0
    for path in PROFILES:
        for surf in load_profile(str(path)).surfaces.values():
            if len(surf.axes) < 2:
                continue
            for _ in range(25):
                pt = dict(zip(surf.axes, _point(rng, surf.log_grid)))
                beside = surf(**{a: np.array([v, 3.0 * v + 7.0]) for a, v in pt.items()})  # the array path
                assert surf(**{a: np.array([v]) for a, v in pt.items()})[0] == beside[0]
                assert float(surf(**pt)) == beside[0]
                checked += 1
    assert checked >= 1000  # every shipped measured-table profile's multi-axis surfaces


def test_a_lattice_at_one_point_equals_the_array_path():
    rng = np.random.default_rng(11)
    for _ in range(2000):
        log_x = np.unique(rng.uniform(-2, 12, rng.integers(2, 40)))
        y = np.unique(rng.uniform(-3, 17, rng.integers(2, 40)))
        if log_x.size < 2 or y.size < 2:
            continue
        t = rng.normal(size=(log_x.size, y.size))
        qx = _point(rng, [log_x])[0]
        qy = float(y[rng.integers(y.size)]) if rng.random() < 0.2 else float(rng.uniform(y[0] - 2, y[-1] + 2))
        beside = lattice_interp(t, log_x, y, np.array([qx, 2.0 * qx + 1.0]), np.array([qy, qy - 1.0]))
        one = lattice_interp(t, log_x, y, np.array([qx]), np.array([qy]))
        scalar = lattice_interp(t, log_x, y, qx, qy)
        assert one.shape == (1,) and scalar.shape == ()
        assert one[0] == beside[0] and float(scalar) == beside[0]
