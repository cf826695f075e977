"""Bad input to ``python -m simulator.predict``: every hostile model config, scenario, hardware file,
calibration profile and flag of the corpus (tests/bad_input_corpus.py) is refused with one 'error:'
line and exit 2, nothing changed on disk; inputs accepted with a caveat warn in one line.
"""
from __future__ import annotations

import numpy as np
import pytest

from bad_input_corpus import CONFIGS, CPU_PROFILE, HARDWARE, PROFILES, SCENARIOS, check_cli_refuses, run_cli, scenario_toml
from simulator.errors import PlannerError


def _cli_cases():
    """(id, module, argv) with {fx} standing for the fixture folder."""
    cases = []
    P = "simulator.cli.predict"
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
    ]
    return cases


CLI_CASES = _cli_cases()


@pytest.mark.parametrize("case_id,module,argv", CLI_CASES, ids=[c[0] for c in CLI_CASES])
def test_cli_refuses_with_one_line(fx, case_id, module, argv):
    check_cli_refuses(fx, case_id, module, argv)


# --- what is accepted, with its caveat ------------------------------------------------------------

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
    scen.write_text(scenario_toml("workload", "context_len = 140000").replace(
        'batch_sizes = "1-8"', 'batch_sizes = "1-2"\nallow_context_beyond_model = true'))
    rc, err = run_cli("simulator.cli.predict", ["--scenario", str(scen), "--format", "csv"])
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
