"""The one version order (simulator.specs.versions), anchored to PEP 440's own examples."""
import pytest

from simulator.errors import PlannerError
from simulator.specs.versions import parse_version, same_release, version_key

# PEP 440, "Summary of permitted suffixes and relative ordering": the spec's example list, in order
# (its local-version entries 1.0+abc.5 ... are left out: local labels are ignored here)
PEP440_ORDER = ["1.0.dev456", "1.0a1", "1.0a2.dev456", "1.0a12.dev456", "1.0a12", "1.0b1.dev456", "1.0b2",
                "1.0b2.post345.dev456", "1.0b2.post345", "1.0rc1.dev456", "1.0rc1", "1.0",
                "1.0.post456.dev34", "1.0.post456", "1.0.15", "1.1.dev1"]


def test_pep440_example_order():
    keys = [parse_version(v) for v in PEP440_ORDER]
    assert all(a < b for a, b in zip(keys, keys[1:]))
    assert sorted(reversed(PEP440_ORDER), key=version_key) == PEP440_ORDER


def test_engine_version_forms():
    # forms the engines publish: TensorRT-LLM rcs, SGLang post-releases, vLLM dev builds (PyPI tags)
    assert parse_version("1.3.0rc8") < parse_version("1.3.0rc20") < parse_version("1.3.0") < parse_version("1.3.0.post1")
    assert parse_version("0.5.13.post1") > parse_version("0.5.13")
    assert parse_version("0.1.dev19262") < parse_version("0.1") < parse_version("0.1.1")
    assert parse_version("0.9.0") < parse_version("0.10.0") < parse_version("0.12.0")  # numeric, not text
    assert parse_version("0.7a") < parse_version("0.7")  # "0.7a" is 0.7a0 (PEP 440 implicit pre-release number)
    assert parse_version("v0.6.3") == parse_version("0.6.3")


def test_trailing_zeros_name_one_release():
    assert same_release("0.11", "0.11.0") and parse_version("0.11") == parse_version("0.11.0.0")
    assert not same_release("0.11", "0.11.1")
    assert parse_version("1.3").head(3) == (1, 3, 0)


def test_not_a_version_names_its_flag():
    with pytest.raises(PlannerError, match="--export-version 'latest'"):
        parse_version("latest", "--export-version")


def test_engine_version_given_without_trailing_zero():
    from simulator.specs.engines import engine_versions, list_engines, load_engine
    assert "0.11.0" in engine_versions("vllm")
    assert load_engine("vllm", "0.11").key == "vllm-0.11.0"  # --engine-version 0.11 picks the 0.11.0 profile
    e = load_engine("vllm", "0.12")  # no profile of its own: the nearest line's (0.11.0, one line older)
    assert e.key == "vllm-0.11.0" and e.release == "0.12" and "1 minor line older" in e.release_note
    with pytest.raises(PlannerError, match="nearest profile is vllm-0.33.0: pass --engine-version 0.33.0"):
        load_engine("vllm", "0.40")  # more than one minor line past the newest profile
    trt = [k for k in list_engines() if k.startswith("trtllm-")]
    assert trt == ["trtllm-0.9.0", "trtllm-0.12.0", "trtllm-1.1.0", "trtllm-1.2.1", "trtllm-1.4.0rc4"]  # numeric order
