"""Bad input to the calibration commands (``python -m calibration.run``, ``.show``, ``.fit``, ``.engine``,
``.import_tables``, ``.validate``): hostile flags, raw samples, profiles and measured runs are refused with
one 'error:' line and exit 2, nothing changed on disk (the corpus and its checks: tests/bad_input_corpus.py).
"""
from __future__ import annotations

import pytest

from bad_input_corpus import CPU_PROFILE, CPU_RAW, HAS_CUDA, MEASURED, RAWS, RUNS, check_cli_refuses


def _cli_cases():
    """(id, module, argv) with {fx} standing for the fixture folder."""
    C = "calibration.run"
    cases = [
        ("run-device-tpu", C, ["--device", "tpu"]),
        ("run-threads-negative", C, ["--threads", "-1"]),
        ("run-threads-zero", C, ["--threads", "0"]),
        ("run-mode-bogus", C, ["--mode", "huge"]),
        ("run-extra-m-text", C, ["--extra-m", "x"]),
        ("run-extra-m-negative", C, ["--extra-m", "3,-5"]),
        ("run-stop-after-negative", C, ["--stop-after", "-1"]),
        ("run-name-path", C, ["--name", "../escape"]),
        ("run-output-dir-is-file", C, ["--output-dir", "{fx}/a-file.txt", "--no-fit"]),
        ("run-model-unknown", C, ["--model", "no-such-model"]),
        ("run-hardware-unknown", C, ["--hardware", "h100"]),
        ("run-moe-model-dense", C, ["--moe-model", "llama-3.1-8b"]),
        ("run-dtype-int8", C, ["--dtype", "int8"]),
        ("run-quick-and-full", C, ["--quick", "--full"]),
    ]
    if not HAS_CUDA:
        cases.append(("run-device-cuda-on-cpu", C, ["--device", "cuda"]))
    SH = "calibration.show"
    cases += [
        ("show-missing", SH, ["{fx}/profiles/nope.json"]),
        ("show-directory", SH, ["{fx}/empty-dir"]),
        ("show-broken", SH, ["{fx}/profiles/broken.json"]),
        ("show-not-profile", SH, ["{fx}/profiles/not-a-profile.json"]),
        ("show-version-9", SH, ["{fx}/profiles/version-9.json"]),
        ("show-step-overhead-string", SH, ["{fx}/profiles/step-overhead-string.json"]),
        ("show-hardware-mismatch", SH, [str(CPU_PROFILE), "--hardware", "h100-sxm"]),
        ("show-no-args", SH, []),
        ("show-unknown-flag", SH, [str(CPU_PROFILE), "--verbose"]),
    ]
    F = "calibration.fit"
    for name, _, _ in RAWS:
        cases.append((f"fit-{name}", F, ["{fx}/raw/%s.raw.csv" % name, "--output", "{fx}/out/p.json"]))
    cases += [
        ("fit-meta-broken", F, ["{fx}/raw/meta-broken.raw.csv", "--output", "{fx}/out/p.json"]),
        ("fit-meta-list", F, ["{fx}/raw/meta-list.raw.csv", "--output", "{fx}/out/p.json"]),
        ("fit-meta-hardware-number", F, ["{fx}/raw/meta-hardware-number.raw.csv", "--output", "{fx}/out/p.json"]),
        ("fit-raw-missing", F, ["{fx}/raw/nope.raw.csv", "--output", "{fx}/out/p.json"]),
        ("fit-raw-directory", F, ["{fx}/empty-dir", "--output", "{fx}/out/p.json"]),
        ("fit-output-directory", F, [str(CPU_RAW), "--output", "{fx}/out"]),
        ("fit-output-under-file", F, [str(CPU_RAW), "--output", "{fx}/a-file.txt/p.json"]),
        ("fit-no-output", F, [str(CPU_RAW)]),
        ("fit-hardware-unknown", F, [str(CPU_RAW), "--output", "{fx}/out/p.json", "--hardware", "h100"]),
        ("fit-hardware-gpu-for-cpu", F, [str(CPU_RAW), "--output", "{fx}/out/p.json", "--hardware", "h100-sxm"]),
    ]
    E = "calibration.engine.__main__"
    sweep = ["sweep", "--output", "{fx}/out/sweep.csv"]
    cases += [
        ("engine-device-tpu", E, sweep + ["--device", "tpu"]),
        ("engine-threads-negative", E, sweep + ["--threads", "-1"]),
        ("engine-seed-negative", E, sweep + ["--seed", "-1"]),
        ("engine-temperature-nan", E, sweep + ["--temperature", "nan"]),
        ("engine-temperature-negative", E, sweep + ["--temperature", "-1"]),
        ("engine-k-huge-range", E, sweep + ["--k", "0-99999999999"]),
        ("engine-k-40", E, sweep + ["--k", "40"]),
        ("engine-batch-zero", E, sweep + ["--batch-sizes", "0"]),
        ("engine-batch-huge", E, sweep + ["--batch-sizes", "1-99999999999999999999"]),
        ("engine-forced-acceptance-2", E, sweep + ["--forced-acceptance", "2"]),
        ("engine-draft-bogus", E, sweep + ["--draft", "medusa"]),
        ("engine-target-bogus", E, sweep + ["--target", "gpt-5"]),
        ("engine-output-directory", E, ["sweep", "--output", "{fx}/out"]),
        ("engine-context-one", E, sweep + ["--context-len", "1"]),
        ("engine-no-command", E, []),
    ]
    if not HAS_CUDA:
        cases.append(("engine-device-cuda-on-cpu", E, sweep + ["--device", "cuda"]))
    IT = "calibration.import_tables"
    cases += [
        ("import-engine-bogus", IT, ["--engine", "tgi"]),
        ("import-family-bogus", IT, ["--family", "conv"]),
        ("import-gpu-unknown", IT, ["--gpu", "h100", "--output-dir", "{fx}/out-tables"]),
        ("import-output-dir-is-file", IT, ["--gpu", "h200", "--output-dir", "{fx}/a-file.txt"]),
    ]
    V = "calibration.validate"
    val = ["--scenario", "smollm2-cpu"]
    for name, _, _ in MEASURED:
        cases.append((f"validate-{name}", V, val + ["--measured", "{fx}/measured/%s.csv" % name]))
    cases += [
        ("validate-measured-missing", V, val + ["--measured", "{fx}/measured/nope.csv"]),
        ("validate-measured-directory", V, val + ["--measured", "{fx}/empty-dir"]),
        ("validate-output-dir-is-file", V, val + ["--measured", str(RUNS), "--output-dir", "{fx}/a-file.txt"]),
        ("validate-scenario-missing", V, ["--scenario", "{fx}/no.toml", "--measured", str(RUNS)]),
        ("validate-no-measured", V, val),
    ]
    return cases


CLI_CASES = _cli_cases()


@pytest.mark.parametrize("case_id,module,argv", CLI_CASES, ids=[c[0] for c in CLI_CASES])
def test_cli_refuses_with_one_line(fx, case_id, module, argv):
    check_cli_refuses(fx, case_id, module, argv)


def test_calibration_run_defaults_to_a_file_of_this_device():
    """docs/guide.md's `calibration.run --quick` must not resume the shipped CPU's raw file elsewhere."""
    from calibration.device import DeviceInfo
    from calibration.run import device_stem

    cpu = DeviceInfo.__new__(DeviceInfo)
    object.__setattr__(cpu, "name", "Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz")
    object.__setattr__(cpu, "kind", "cpu")
    object.__setattr__(cpu, "compute_units", 4)
    assert device_stem(cpu) == "intel-xeon-platinum-8481c-cpu-2-70ghz-4c"
    assert device_stem(cpu) != "cpu-xeon-2c"  # the shipped profile's name stays the shipped machine's
