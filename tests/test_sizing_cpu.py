"""Sizing a CPU deployment: one machine per replica, and a plain word where the catalog has no price."""
import math

import pytest

from simulator.sizing import SizingOverrides, size
from simulator.specs.scenario import SCENARIO_DIR

SLO = "\n[slo]\ntpot_p50_s = 0.2\n\n[sizing]\npolicies = [\"dsd\"]\nsensitivity = false\ntarget_rate_per_s = 0.5\n"


@pytest.fixture(scope="module")
def cpu_case(tmp_path_factory):
    # the bundled SmolLM2-135M on the 2-core Xeon slice (n-gram drafts), with a load and an SLO to size for
    path = tmp_path_factory.mktemp("cpu") / "cpu.toml"
    path.write_text((SCENARIO_DIR / "smollm2-cpu.toml").read_text() + SLO)
    return path


def test_cpu_fleet_is_machines_and_says_it_has_no_price(cpu_case):
    r = size(str(cpu_case))
    best = r.recommendation
    # by hand: ceil(0.5 req/s x 1.2 headroom / capacity) + 1 spare, one machine each (not whole nodes of 8)
    machines = math.ceil(0.5 * 1.2 / best["max_load_per_replica"] - 1e-9) + 1
    assert best["gpus"] == best["nodes"] == machines
    assert f"buy {machines} x cpu-xeon-2c ({machines} machine(s);" in r.message
    assert "node(s) of 8" not in r.message
    assert "no price is known for cpu-xeon-2c" in r.message and "--price cpu-xeon-2c=USD_PER_HOUR" in r.message
    assert any("--price cpu-xeon-2c=USD_PER_HOUR" in line for line in r.why())


def test_cpu_fleet_priced_when_given(cpu_case):
    r = size(str(cpu_case), SizingOverrides(prices={"cpu-xeon-2c": 0.1}))
    best = r.recommendation
    assert best["fleet_usd_per_hour"] == pytest.approx(best["gpus"] * 0.1)
    assert f": ${best['fleet_usd_per_hour']:,.2f}/h" in r.message and "no price" not in r.message
