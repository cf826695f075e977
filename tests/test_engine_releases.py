"""Engine releases (issue 48): the profiles read from the released wheels, the version rule that says
which profile prices a release, and the serving defaults each profile carries into serving, sizing and
the printed launch line.

Wheel-anchored tests (marked ``engines``; skipped where no wheel can be had) run the engine's own code:
vLLM's serving defaults by GPU memory come from each release's vllm/engine/arg_utils.py, the function cut
out with ``ast`` and run unmodified with the device queries stubbed (a GPU of the catalog's memory and
name); the lines each profile cites must hold what the profile says they hold.
"""
from __future__ import annotations

import enum
import logging
import re
import sys
import tomllib
import types
import zipfile

import numpy as np
import pytest

from simulator.errors import PlannerError
from simulator.specs.engine_catalog import (ENGINES_DIR, engine_releases, engine_versions, draft_release_ranges,
                                            nearest_profile, release_distance, resolve_release)
from simulator.specs.engines import load_engine, serving_default
from simulator.specs.hardware import load_hardware
from simulator.specs.versions import parse_version
from simulator.specs.scenario import build_scenario


def _wheel(name: str, version: str):
    import engine_code
    try:
        return engine_code.wheel_path(name, version)
    except engine_code.EngineCodeUnavailable as exc:
        pytest.skip(f"engine code unavailable: {exc}")


def wheel_lines(name: str, version: str, member: str) -> list[str]:
    with zipfile.ZipFile(_wheel(name, version)) as z:
        return z.read(member).decode().splitlines()


# --- the version rule, by hand ---------------------------------------------------------------------

def test_release_distance_counts_lines_then_patches():
    assert release_distance("0.9.2", "0.8.5") == (0, 1, 0)  # patches do not count across lines
    assert release_distance("0.10.0", "0.10.2") == (0, 0, 2)
    assert release_distance("1.0", "0.12.0") == (1, 0, 0)
    assert release_distance("0.5.0rc0", "0.5.0") == (0, 0, 0)


@pytest.mark.parametrize("engine,asked,profile", [
    ("vllm", "0.33", "0.33.0"),  # its own profile: 0.33 is 0.33.0
    ("vllm", "0.8.0", "0.8.5"),  # the first V1-default line
    ("vllm", "0.9.2", "0.8.5"),  # one line from 0.8.5 and from 0.10.2: the older, whose code it inherits
    ("vllm", "0.10.0", "0.10.2"),  # same line
    ("vllm", "0.12.0", "0.11.0"),
    ("vllm", "0.13.0", "0.14.0"),
    ("vllm", "0.30.0", "0.29.0"),
    ("vllm", "0.34.0", "0.33.0"),  # one line past the newest profile
    ("vllm", "0.7.3", "0.6.3"),  # V0 line: 0.6.3 and 0.8.5 one line away each, the older
    ("sglang", "0.5.3.post3", "0.5.0rc0"),  # 3 patch releases from 0.5.0rc0 and from 0.5.6: the older
    ("sglang", "0.5.8", "0.5.6"),
    ("sglang", "0.5.10", "0.5.13"),
    ("sglang", "0.5.16", "0.5.13"),  # 3 from 0.5.13 and from 0.5.19: the older
    ("sglang", "0.5.21", "0.5.19"),  # 2 from 0.5.19 and 0.5.23: the older
    ("sglang", "0.5.22", "0.5.23"),
    ("trtllm", "1.0", "1.1.0"),  # the same major line before an older major's
])
def test_version_rule(engine, asked, profile):
    assert nearest_profile(engine, asked) == profile
    e = load_engine(engine, asked)
    assert e.version == profile
    if parse_version(asked) != parse_version(profile):
        # the profile says which release it prices, in its label (predict's provenance line)
        assert e.release == asked and f"priced with {engine}-{profile}" in e.label


def test_engine_version_033_and_the_newest_profiles():
    assert load_engine("vllm", "0.33").key == "vllm-0.33.0" and load_engine("vllm", "0.33").release_note == ""
    assert load_engine("vllm").version == "0.33.0" and load_engine("sglang").version == "0.5.23"


@pytest.mark.parametrize("engine,asked,nearest", [
    ("vllm", "0.5.5", "0.6.3"),  # before the 0.6 line
    ("vllm", "0.40.0", "0.33.0"),  # more than one minor line past the newest profile
    ("sglang", "0.3.6", "0.4.4"),
    ("gpt-fast", "2025", "2024"),  # an engine without a release range: its profiles only
])
def test_an_unaccepted_version_names_the_nearest_profile(engine, asked, nearest):
    with pytest.raises(PlannerError) as err:
        load_engine(engine, asked)
    msg = str(err.value)
    assert "\n" not in msg and f"the nearest profile is {engine}-{nearest}" in msg
    assert f"--engine-version {nearest}" in msg


def test_a_version_not_among_the_releases_says_so():
    note = resolve_release("vllm", "0.16.5")[1]
    assert "not among vllm's published releases" in note and "priced with vllm-0.17.1" in note


def _lines(engine: str, first: str) -> list[tuple[int, int]]:
    """The (major, minor) release lines of the engine's published releases from ``first`` on."""
    return sorted({parse_version(r).head(2) for r in engine_releases()[engine]["releases"]
                   if parse_version(r) >= parse_version(first)})


@pytest.mark.parametrize("engine,first", [("vllm", "0.6"), ("sglang", "0.4")])
def test_every_release_is_accepted_and_priced(engine, first):
    """--engine-version takes every published release from the accepted line on."""
    for r in engine_releases()[engine]["releases"]:
        assert load_engine(engine, r).name == engine


@pytest.mark.parametrize("engine,first", [("vllm", "0.8"), ("sglang", "0.5.0")])
def test_every_release_from_08_and_050_maps_within_one_minor_line(engine, first):
    """Issue 48: every vLLM release from 0.8 and every SGLang release from 0.5.0 on is priced with a
    profile at most one minor release line away (docs/engines.md tabulates the map)."""
    far = {}
    for r in engine_releases()[engine]["releases"]:
        if parse_version(r) < parse_version(first):
            continue
        major, minor, _ = release_distance(nearest_profile(engine, r), r)
        if major or minor > 1:
            far[r] = nearest_profile(engine, r)
    assert not far, f"{engine} releases priced more than one minor line away: {far}"


# --- the profiles read from the wheels ---------------------------------------------------------------

NEW_PROFILES = ("vllm-0.8.5", "vllm-0.10.2", "vllm-0.17.1", "vllm-0.19.1", "vllm-0.22.1", "vllm-0.25.1", "vllm-0.27.1",
                "vllm-0.31.0", "vllm-0.33.0", "sglang-0.5.6", "sglang-0.5.13", "sglang-0.5.23")


@pytest.mark.parametrize("key", NEW_PROFILES)
def test_new_profiles_load_and_say_where_they_were_read(key):
    e = load_engine(key)
    text = (ENGINES_DIR / f"{key}.toml").read_text()
    assert "read from its wheel" in text and e.key == key
    assert e.default_max_num_seqs  # [serving] present


# (profile, wheel version, member, 1-based line, text the line holds): the facts each profile rests on
VLLM_LINES = [
    ("0.8.5", "vllm/config.py", 4036, "[i for i in range(8, 513, 8)]"),
    ("0.8.5", "vllm/v1/worker/gpu_model_runner.py", 1023, "num_scheduled_tokens <= self.cudagraph_batch_sizes[-1]"),
    ("0.8.5", "vllm/model_executor/models/llama_eagle.py", 40, "class LlamaModel(nn.Module):"),
    ("0.8.5", "vllm/model_executor/models/llama.py", 290, "@support_torch_compile"),
    ("0.8.5", "vllm/engine/arg_utils.py", 1432, 'elif speculative_method in ("eagle", "eagle3"):'),
    ("0.10.2", "vllm/config/scheduler.py", 155, "async_scheduling: bool = False"),
    ("0.10.2", "vllm/config/scheduler.py", 244, "self.cuda_graph_sizes = [min(self.max_num_seqs * 2, 512)]"),
    ("0.10.2", "vllm/config/__init__.py", 3655, "i for i in range(8, cuda_graph_sizes[0] + 1, 8)"),
    ("0.10.2", "vllm/config/__init__.py", 3393, "CUDAGraphMode.PIECEWISE"),
    ("0.10.2", "vllm/forward_context.py", 205, "cudagraph_runtime_mode: CUDAGraphMode = CUDAGraphMode.NONE"),
    ("0.10.2", "vllm/v1/spec_decode/eagle.py", 212, "with set_forward_context(per_layer_attn_metadata,"),
    ("0.10.2", "vllm/v1/spec_decode/eagle.py", 214, "num_tokens=num_input_tokens):"),
    ("0.33.0", "vllm/config/vllm.py", 2464, "1024 if current_platform.is_device_capability_family(100) else 512"),
    ("0.33.0", "vllm/config/vllm.py", 2469, "max_num_seqs * decode_query_len * 2, default_max_graph_size"),
    ("0.33.0", "vllm/config/vllm.py", 2546, "if n * query_len <= max_cudagraph_capture_size"),
    ("0.33.0", "vllm/config/vllm.py", 2590, "range(256, max_cudagraph_capture_size + 1, 16)"),
    ("0.33.0", "vllm/config/vllm.py", 1719, "self.scheduler_config.async_scheduling = True"),
    ("0.33.0", "vllm/config/vllm.py", 1658, '("draft_model", "dspark", "dflash")'),
    ("0.33.0", "vllm/config/vllm.py", 311, '"cudagraph_mode": CUDAGraphMode.FULL_AND_PIECEWISE'),
    ("0.33.0", "vllm/v1/spec_decode/llm_base_proposer.py", 431, "eagle_cudagraph_mode = CUDAGraphMode.PIECEWISE"),
    ("0.33.0", "vllm/v1/core/sched/async_scheduler.py", 28, "self._spec_token_placeholders = ["),
    ("0.33.0", "vllm/config/speculative.py", 524, "num_speculative_tokens_per_batch_size:"),
    ("0.33.0", "vllm/envs.py", 1642, '"VLLM_MOE_SKIP_PADDING", "1"'),
    ("0.33.0", "vllm/model_executor/layers/fused_moe/layer.py", 327, "use_deepep_v2_kernels"),
]
SGLANG_LINES = [
    ("0.5.6", "sglang/srt/server_args.py", 500, "disable_overlap_schedule: bool = False"),
    ("0.5.6", "sglang/srt/server_args.py", 487, "disable_cuda_graph_padding: bool = False"),
    ("0.5.6", "sglang/srt/server_args.py", 783, "self.cuda_graph_max_bs = 256"),
    ("0.5.6", "sglang/srt/server_args.py", 1679, "self.max_running_requests = 48"),
    ("0.5.6", "sglang/srt/server_args.py", 1693, "if not envs.SGLANG_ENABLE_SPEC_V2.get():"),
    ("0.5.6", "sglang/srt/server_args.py", 1694, "self.disable_overlap_schedule = True"),
    ("0.5.6", "sglang/srt/environ.py", 307, "SGLANG_ENABLE_SPEC_V2 = EnvBool(False)"),
    ("0.5.6", "sglang/srt/speculative/eagle_draft_extend_cuda_graph_runner.py", 39,
     "class EAGLEDraftExtendCudaGraphRunner"),
    ("0.5.6", "sglang/srt/model_executor/model_runner.py", 1682, "2048,"),
    ("0.5.23", "sglang/srt/arg_groups/memory_hook.py", 143, "decode_cuda_graph_config.max_bs = 256"),
    ("0.5.23", "sglang/srt/arg_groups/fields/schedule.py", 199, "] = False"),
    ("0.5.23", "sglang/srt/arg_groups/speculative_hook.py", 1090, "max_running_requests=48"),
    ("0.5.23", "sglang/srt/arg_groups/speculative_hook.py", 1100, "Non-overlap (synchronous) spec v2"),
    ("0.5.23", "sglang/srt/arg_groups/fields/spec.py", 237, "speculative_adaptive: A["),
    ("0.5.23", "sglang/srt/mem_cache/kv_cache_configurator.py", 3124, "estimated = max(min(estimated, 4096), 2048)"),
    ("0.5.13", "sglang/srt/environ.py", 620, "SGLANG_ENABLE_SPEC_V2 = EnvBool(True)"),
    ("0.5.13", "sglang/srt/arg_groups/speculative_hook.py", 283, "server_args.max_running_requests = 48"),
    ("0.5.13", "sglang/srt/arg_groups/speculative_hook.py", 291, "not envs.SGLANG_ENABLE_SPEC_V2.get()"),
    ("0.5.13", "sglang/srt/server_args.py", 633, "speculative_adaptive: bool = False"),
    ("0.5.13", "sglang/srt/server_args.py", 738, "disable_cuda_graph_padding: bool = False"),
    ("0.5.13", "sglang/srt/server_args.py", 756, "disable_overlap_schedule: bool = False"),
    ("0.5.13", "sglang/srt/server_args.py", 1506, "self.cuda_graph_max_bs = 256"),
    ("0.5.13", "sglang/srt/server_args.py", 1681, "if bs <= self.cuda_graph_max_bs]"),
    ("0.5.13", "sglang/srt/speculative/eagle_worker_v2.py", 809, "class EAGLEWorkerV2"),
    ("0.5.13", "sglang/srt/model_executor/model_runner_kv_cache_mixin.py", 881,
     "estimated = max(min(estimated, 4096), 2048)"),
    ("0.5.19", "sglang/srt/mem_cache/kv_cache_configurator.py", 2110, "estimated = max(min(estimated, 4096), 2048)"),
]


@pytest.mark.engines
@pytest.mark.parametrize("version,member,line,text", VLLM_LINES)
def test_vllm_profile_lines_hold_what_they_say(version, member, line, text):
    assert text in wheel_lines("vllm", version, member)[line - 1]
    assert f"{member.removeprefix('vllm/')}:" in (ENGINES_DIR / f"vllm-{version}.toml").read_text()


@pytest.mark.engines
@pytest.mark.parametrize("version,member,line,text", SGLANG_LINES)
def test_sglang_profile_lines_hold_what_they_say(version, member, line, text):
    assert text in wheel_lines("sglang", version, member)[line - 1]


@pytest.mark.engines
@pytest.mark.parametrize("version", ["0.8.5", "0.10.2", "0.33.0"])
def test_vllm_capture_lists_are_the_wheels(version):
    """The profile's token grid is the list the wheel's own expression builds at its ceiling (512)."""
    e = load_engine("vllm", version)
    grid = {"0.8.5": [1, 2, 4] + list(range(8, 513, 8)), "0.10.2": [1, 2, 4] + list(range(8, 512 + 1, 8)),
            "0.33.0": [1, 2, 4] + list(range(8, min(512 + 1, 256), 8)) + list(range(256, 512 + 1, 16))}[version]
    assert list(e.capture_sizes) == grid and e.max_capture_size == 512
    assert e.spec_capture_max_tokens == 512 and e.spec_capture_max_batch == 0  # 512 // (K + 1) requests


@pytest.mark.engines
@pytest.mark.parametrize("version", ["0.5.6", "0.5.13", "0.5.23"])
def test_sglang_capture_lists_are_the_wheels(version):
    """The lists at max_bs 256 are what the release's own function returns (0.5.23: the hook module, run
    by tests/engine_code.py; 0.5.6, 0.5.13: ServerArgs._generate_cuda_graph_batch_sizes cut out of the wheel)."""
    import engine_code as ec
    e = load_engine("sglang", version)
    if version == "0.5.23":
        spec = ec.sglang_decode_capture_sizes(256, True, version)
        plain = ec.sglang_decode_capture_sizes(256, False, version)
    else:
        path = ec._extract_member("sglang", version, "sglang/srt/server_args.py")
        fn = ec._extract_function(path, "ServerArgs._generate_cuda_graph_batch_sizes", {})
        args = lambda algo: types.SimpleNamespace(disable_cuda_graph_padding=False,  # noqa: E731
                                                  speculative_algorithm=algo, cuda_graph_max_bs=256)
        spec, plain = fn(args("EAGLE3")), fn(args(None))
    assert list(e.spec_capture_sizes) == spec and list(e.capture_sizes) == plain


# The V1 releases between the hand-read profiles: each fact looked up by the same code line in each wheel
LINE_RELEASES = ("0.17.1", "0.19.1", "0.22.1", "0.25.1", "0.27.1", "0.31.0")


def _find(z: zipfile.ZipFile, member: str, pattern: str) -> int | None:
    """The first line (1-based) of ``member`` matching ``pattern``; None where the member or the line is
    absent from this release."""
    try:
        lines = z.read(member).decode().splitlines()
    except KeyError:
        return None
    return next((i + 1 for i, line in enumerate(lines) if re.search(pattern, line)), None)


@pytest.mark.engines
@pytest.mark.parametrize("version", LINE_RELEASES)
def test_line_profiles_rest_on_the_lines_they_cite(version):
    """The profile's priced values follow from what its wheel holds, and it cites the line it rests on:
    the 512-token ceiling with speculation, async scheduling on by default, PIECEWISE drafter graphs,
    zero-bubble speculation (optimistic seq_lens) or not, K per batch size or not."""
    e = load_engine("vllm", version)
    text = (ENGINES_DIR / f"vllm-{version}.toml").read_text()
    with zipfile.ZipFile(_wheel("vllm", version)) as z:
        ceiling_code = r"max_num_seqs \* decode_query_len \* 2, (512|default_max_graph_size)"
        ceiling = _find(z, "vllm/config/vllm.py", ceiling_code)
        on = _find(z, "vllm/config/vllm.py", r"self\.scheduler_config\.async_scheduling = True")
        piecewise = r"eagle_cudagraph_mode = CUDAGraphMode\.PIECEWISE"
        drafter = (_find(z, "vllm/v1/spec_decode/eagle.py", piecewise)
                   or _find(z, "vllm/v1/spec_decode/llm_base_proposer.py", piecewise))
        zero = _find(z, "vllm/v1/worker/gpu_model_runner.py", r"self\.optimistic_seq_lens_cpu = torch\.zeros\(")
        dynamic = _find(z, "vllm/config/speculative.py", r"num_speculative_tokens_per_batch_size:")
    assert ceiling and f"config/vllm.py:{ceiling}" in text and e.spec_capture_max_tokens == 512
    assert on and f"config/vllm.py:{on})" in text and e.overlap_window == "step"
    assert drafter and f":{drafter})" in text and e.draft_captured
    assert e.spec_overlap_window == ("step" if zero else "draft")
    assert not zero or f"v1/worker/gpu_model_runner.py:{zero}" in text
    assert e.supports_dynamic_k == bool(dynamic) and (not dynamic or f"config/speculative.py:{dynamic}" in text)


# --- vLLM's serving defaults: the wheel's own function on a stubbed GPU --------------------------------

class _UsageContext(enum.Enum):
    UNKNOWN_CONTEXT = "UNKNOWN_CONTEXT"
    LLM_CLASS = "LLM_CLASS"
    API_SERVER = "API_SERVER"
    OPENAI_API_SERVER = "OPENAI_API_SERVER"
    OPENAI_BATCH_RUNNER = "OPENAI_BATCH_RUNNER"
    ENGINE_CONTEXT = "ENGINE_CONTEXT"


class _Platform:
    """current_platform for one GPU: its total memory and name; every other query answers False."""

    def __init__(self, memory_bytes: float, name: str):
        self.memory, self.name = int(memory_bytes), name

    def get_device_total_memory(self, device_id: int = 0) -> int:
        return self.memory

    def get_device_name(self, device_id: int = 0) -> str:
        return self.name

    def __getattr__(self, item):
        return lambda *a, **k: False


class _Args:
    """An EngineArgs with nothing set by the user: every attribute the defaults code reads is None."""

    scheduler_cls = "vllm.core.scheduler.Scheduler"
    pipeline_parallel_size = tensor_parallel_size = 1

    def __getattr__(self, item):
        return None


# release -> (qualified name of the function that sets the defaults, its arguments)
DEFAULTS_CODE = {"0.8.5": "EngineArgs._set_default_args_v1", "0.10.2": "EngineArgs._set_default_args_v1",
                 "0.11.0": "EngineArgs._set_default_args"} | {
    v: "EngineArgs.get_batch_defaults" for v in ("0.14.0", "0.17.1", "0.19.1", "0.22.1", "0.25.1", "0.27.1", "0.29.0",
                                                  "0.31.0", "0.33.0")}


def vllm_serve_defaults(version: str, memory_bytes: float, device_name: str, monkeypatch) -> tuple[int, int]:
    """(max_num_seqs, max_num_batched_tokens) that ``vllm serve`` of this release sets on this GPU,
    computed by the release's own code."""
    import engine_code as ec
    platform = _Platform(memory_bytes, device_name)
    for mod, attrs in {"vllm": {}, "vllm.usage": {}, "vllm.usage.usage_lib": {"UsageContext": _UsageContext},
                       "vllm.platforms": {"current_platform": platform}}.items():
        monkeypatch.setitem(sys.modules, mod, types.SimpleNamespace(**attrs, __path__=[]))
    path = ec._extract_member("vllm", version, "vllm/engine/arg_utils.py")
    ns = {"current_platform": platform, "GiB_bytes": 1 << 30, "UsageContext": _UsageContext, "sys": sys,
          "logger": logging.getLogger("vllm-defaults"), "EngineArgs": _Args, "envs": types.SimpleNamespace()}
    fn = ec._extract_function(path, DEFAULTS_CODE[version], ns)
    if DEFAULTS_CODE[version].endswith("get_batch_defaults"):
        tokens, seqs = fn(_Args, 1)
        return seqs[_UsageContext.OPENAI_API_SERVER], tokens[_UsageContext.OPENAI_API_SERVER]
    args = _Args()
    model = types.SimpleNamespace(runner_type="generate", max_model_len=131072)
    fn(args, _UsageContext.OPENAI_API_SERVER, *([model] if version != "0.8.5" else []))
    return args.max_num_seqs, args.max_num_batched_tokens


GPUS = ("h100-sxm", "a100-80gb", "l40s", "h200", "b200")


@pytest.mark.engines
@pytest.mark.parametrize("version", list(DEFAULTS_CODE))
def test_vllm_serving_defaults_are_the_wheels_own(version, monkeypatch):
    """Each profile's [serving] gives, on every GPU here, what the release's own defaults code sets for
    `vllm serve` on a GPU of that memory and name; at 80 GB (H100 SXM) that is 1024 sequences."""
    e = load_engine("vllm", version)
    for gpu in GPUS:
        hw = load_hardware(gpu)
        own = vllm_serve_defaults(version, hw.memory_bytes, f"NVIDIA {gpu.upper()}", monkeypatch)
        assert (serving_default(e, "max_num_seqs", hw.memory_bytes, hw.name),
                serving_default(e, "max_num_batched_tokens", hw.memory_bytes, hw.name)) == own, gpu
    h100 = load_hardware("h100-sxm")
    assert h100.memory_bytes == 80e9 and serving_default(e, "max_num_seqs", 80e9, h100.name) == 1024


# --- the defaults in serving, sizing and the launch line ------------------------------------------------

def _scenario(engine: str, version: str, hardware: str = "h100-sxm", **extra):
    from simulator.specs.scenario import build_scenario
    raw = {"model": {"name": "llama-3.1-8b"}, "hardware": {"name": hardware, "tp": 1},
           "engine": {"name": engine, "version": version}, "draft": {"method": "eagle3"}} | extra
    return build_scenario(raw, "test")


def test_serving_runs_at_the_engines_default_not_256():
    from simulator import serving
    assert serving.engine_from_scenario(_scenario("vllm", "0.33.0")).max_num_seqs == 1024  # H100: >= 70 GiB
    assert serving.engine_from_scenario(_scenario("vllm", "0.33.0", "l40s")).max_num_seqs == 256
    assert serving.engine_from_scenario(_scenario("vllm", "0.33.0", "l40s")).max_num_batched_tokens == 2048
    assert serving.engine_from_scenario(_scenario("vllm", "0.33.0", "b200")).max_num_batched_tokens == 16384
    sc = _scenario("vllm", "0.33.0", serving={"max_num_seqs": 64})
    assert serving.engine_from_scenario(sc).max_num_seqs == 64  # the scenario's own cap wins
    assert serving.workload_from_scenario(_scenario("vllm", "0.33.0")).max_num_seqs == 1024
    sg = serving.engine_from_scenario(_scenario("sglang", "0.5.23"))
    assert sg.max_num_seqs == 2048 and sg.spec_max_num_seqs == 48  # plain pool floor; 48 with speculation
    assert serving.engine_from_scenario(_scenario("vllm", "0.6.3", draft={"method": "eagle"})).max_num_seqs == 256  # V0: 256


def test_launch_line_names_max_num_seqs_above_the_default():
    from simulator.plan.api import predict
    p = predict(model="llama-3.1-8b", hardware="a100-80gb", draft="eagle3", engine="vllm", engine_version="0.33",
                batch_sizes="1-300", context_len=512)
    cmd = p.export("vllm", "0.33.0").how_to_use
    assert p.table.fits_memory.all()  # 300 x 513 tokens of KV fit in 80 GB
    assert "--max-num-seqs 300" in cmd  # above vLLM's 256 on an A100 (kept on the small tier by name)
    p = predict(model="llama-3.1-8b", hardware="h100-sxm", draft="eagle3", engine="vllm", engine_version="0.33",
                batch_sizes="1-64")
    assert "--max-num-seqs" not in p.export("vllm", "0.33.0").how_to_use  # 64 <= 1024 and all fit


def test_releases_file_lists_pypi_versions_from_the_accepted_lines():
    data = tomllib.loads((ENGINES_DIR.parent / "engine_releases.toml").read_text())
    assert "0.33.0" in data["vllm"]["releases"] and "0.5.23" in data["sglang"]["releases"]
    assert min(parse_version(r) for r in data["vllm"]["releases"]) >= parse_version("0.6")
    assert engine_versions("vllm")[-1] == "0.33.0"


def test_sglang_05_releases_are_within_three_patch_releases():
    for r in engine_releases()["sglang"]["releases"]:
        if parse_version(r) >= parse_version("0.5.0"):
            assert release_distance(nearest_profile("sglang", r), r)[:2] == (0, 0)
            assert release_distance(nearest_profile("sglang", r), r)[2] <= 3, r


def test_docs_table_is_the_rule():
    """docs/engines.md lists each release line's releases and the profile the rule gives them."""
    from pathlib import Path
    doc = (Path(__file__).resolve().parent.parent / "docs" / "engines.md").read_text()
    rows = [r for r in doc.splitlines() if re.match(r"\| \d+\.\d+(\.\d+)? \| ", r)]
    seen = set()
    for row in rows:
        _, line, releases, profiles, _, _ = row.split("|")
        names = re.findall(r"`(\w+)-([\w.]+)`(?: \(([^)]*)\))?", profiles)
        for engine, version, which in names:
            for r in (which.split(", ") if which else releases.strip().split(", ")):
                assert nearest_profile(engine, r.strip()) == version, row
                seen.add((engine, r.strip()))
    assert {(e, r) for e in ("vllm", "sglang") for r in engine_releases()[e]["releases"]} == seen


# --- EAGLE-3 on SGLang: 0.4.4.post2 is the first release that runs it --------------------------------

def _sglang_044_capture_lists(version: str, max_running: int) -> tuple[list[int], list[int]]:
    """(speculative, plain) lists of the release's own get_batch_sizes_to_capture, run on a stand-in
    model runner (no padding opt-out, cuda_graph_max_bs 160, a request pool of ``max_running``)."""
    import engine_code as ec
    path = ec._extract_member("sglang", version, "sglang/srt/model_executor/cuda_graph_runner.py")
    fn = ec._extract_function(path, "get_batch_sizes_to_capture", {"_is_hip": False})

    def run(algo):
        args = types.SimpleNamespace(cuda_graph_bs=None, speculative_algorithm=algo, disable_cuda_graph_padding=False,
                                     cuda_graph_max_bs=160, enable_torch_compile=False, torch_compile_max_bs=32)
        runner = types.SimpleNamespace(server_args=args, req_to_token_pool=types.SimpleNamespace(size=max_running))
        return fn(runner)[0]
    return run("EAGLE"), run(None)


@pytest.mark.engines
@pytest.mark.parametrize("version, first", [("0.4.4", False), ("0.4.4.post1", False), ("0.4.4.post2", True)])
def test_eagle3_first_runs_on_sglang_044_post2(version, first):
    """The wheels' --speculative-algorithm choices: EAGLE3 from 0.4.4.post2, as engine_releases.toml records."""
    text = "\n".join(wheel_lines("sglang", version, "sglang/srt/server_args.py"))
    assert ('"EAGLE3"' in re.search(r"choices=\[[^\]]*\"NEXTN\"\]", text).group(0)) is first
    assert draft_release_ranges("sglang", "eagle3") == [("0.4.4.post2", "")]


@pytest.mark.engines
def test_sglang_044_post2_speculative_graphs_are_the_wheels():
    """post2 captures 1..8, odd 9..31, 64, 96, 128, 160 with speculation (0.4.4: 1..32), and the profile holds it;
    with a request pool of 48 (--max-running-requests 48) the release's list ends at 31 and 48 (its pool size)."""
    spec, plain = _sglang_044_capture_lists("0.4.4.post2", 4096)
    e = load_engine("sglang", "0.4.4.post2")
    assert list(e.spec_capture_sizes) == spec and list(e.capture_sizes) == plain
    assert e.spec_capture_max_batch == max(spec) == 160 and e.padding
    assert _sglang_044_capture_lists("0.4.4", 4096)[0] == list(load_engine("sglang", "0.4.4").spec_capture_sizes) \
        == list(range(1, 33))
    assert _sglang_044_capture_lists("0.4.4.post2", 48)[0][-3:] == [31, 47, 48]


def test_eagle3_on_a_release_before_it_is_refused_with_the_first_that_runs_it():
    with pytest.raises(PlannerError, match=r"sglang 0\.4\.4 cannot run draft method 'eagle3': the next release that does is 0\.4\.4\.post2; use"):
        _scenario("sglang", "0.4.4")
    assert _scenario("sglang", "0.4.4", draft={"method": "eagle"}).engine.version == "0.4.4"
    assert _scenario("sglang", "0.4.4.post3").engine.version == "0.4.4.post2"  # its own line's newest profile


def test_post2_graphs_a_verify_of_48_padded_to_64_where_044_ran_it_eagerly():
    from simulator.physics.engine_time import draft_in_graph, graph_batch, verify_in_graph
    old, new = load_engine("sglang", "0.4.4"), load_engine("sglang", "0.4.4.post2")
    b, k = np.array([24.0, 48.0, 64.0]), np.array([3.0, 3.0, 3.0])
    assert verify_in_graph(old, b, k).tolist() == [True, False, False]
    assert verify_in_graph(new, b, k).tolist() == [True, True, True]
    assert draft_in_graph(new, b).tolist() == [True, True, True] and not draft_in_graph(old, b)[1:].any()
    assert graph_batch(new, b, k).tolist() == [25.0, 64.0, 64.0]  # padded to the next captured size


def test_a_published_eagle3_row_naming_044_is_priced_on_post2():
    from calibration.transfer_cases import engine_for
    row = lambda draft: types.SimpleNamespace(source_id="any", engine="sglang", engine_version="0.4.4",  # noqa: E731
                                              draft_method=draft)
    assert engine_for(row("eagle3")) == {"name": "sglang", "version": "0.4.4.post2"}
    assert engine_for(row("eagle")) == {"name": "sglang", "version": "0.4.4"}


# --- which releases run each draft method (engine_releases.toml [<engine>.draft_releases]) -----------------------

@pytest.mark.parametrize("engine, version, method, runs", [
    ("vllm", "0.6.3", "eagle3", "0.8.5"), ("vllm", "0.8.5", "eagle3", "0.8.5"), ("vllm", "0.7.2", "mtp", "0.7.3"),
    ("vllm", "0.9.2", "model", "0.9.2"), ("vllm", "0.11.0", "model", "0.15.0"), ("vllm", "0.33.0", "model", "0.33.0"),
    ("vllm", "0.19.1", "dflash", "0.20.0"), ("vllm", "0.22.1", "dspark", "0.25.0"), ("vllm", "0.14.0", "pard", "0.16.0"),
    ("vllm", "0.6.3", "eagle", "0.6.3"), ("vllm", "0.6.3", "ngram", "0.6.3"),  # every release read runs them
    ("sglang", "0.4.1", "eagle", "0.4.1.post4"), ("sglang", "0.4.3", "mtp", "0.4.3.post1"),
    ("sglang", "0.5.1", "model", "0.5.2"), ("sglang", "0.5.2", "ngram", "0.5.3"), ("sglang", "0.5.6", "dflash", "0.5.11"),
    ("sglang", "0.5.13", "dspark", "0.5.16"), ("sglang", "0.5.23", "p-eagle", None), ("sglang", "0.5.6", "pard", None),
    ("trtllm", "1.2.1", "pard", "1.2.1"),  # TensorRT-LLM records only the methods no release runs: others pass
    ("vllm", "0.33.0", "early-exit", None), ("vllm", "0.6.3", "self", None), ("sglang", "0.5.23", "early-exit", None),
    ("sglang", "0.4.4.post2", "self", None), ("trtllm", "1.4.0rc4", "early-exit", None), ("trtllm", "0.9.0", "self", None),
])
def test_release_running_by_hand(engine, version, method, runs):
    from simulator.specs.engine_catalog import release_running
    assert release_running(engine, version, method) == runs


def test_a_release_no_later_release_improves_on_is_refused_in_one_line():
    with pytest.raises(PlannerError, match=r"vllm 0\.11\.0 cannot run draft method 'model': the next release that does"
                                           r" is 0\.15\.0"):
        _scenario("vllm", "0.11.0", draft={"method": "model", "model": "llama-3.2-1b"})
    with pytest.raises(PlannerError, match=r"sglang 0\.5\.23 cannot run draft method 'p-eagle', nor can any later"):
        _scenario("sglang", "0.5.23", draft={"method": "p-eagle"})


@pytest.mark.parametrize("engine, version, draft, home", [
    ("vllm", "0.33.0", "early-exit:8", "gpt-fast"), ("sglang", "0.5.23", "self:512", "magicdec"),
    ("trtllm", "1.2.1", "early-exit:8", "gpt-fast")])
def test_a_research_draft_on_a_serving_engine_names_the_engine_that_runs_it(engine, version, draft, home):
    """Layer-skip and compressed-KV self-speculation run in no serving engine release: refused in one line naming
    the research engine profile that runs them, which prices them."""
    method = draft.split(":")[0]
    with pytest.raises(PlannerError, match=rf"{engine} {re.escape(version)} cannot run draft method '{method}', nor can"
                                           rf" any later {engine} release .*: use --engine {home} \(\[engine\] name\)"):
        _scenario(engine, version, draft={"method": draft})
    sc = build_scenario({"model": {"name": "llama-3.1-8b"}, "hardware": {"name": "h100-sxm"},
                         "engine": {"name": home}, "draft": {"method": draft}}, "test")
    assert sc.engine.name == home and sc.draft.method == method


@pytest.mark.engines
@pytest.mark.parametrize("engine, version, member, start", [
    ("vllm", "0.9.2", "vllm/config.py", "SpeculativeMethod = Literal["),
    ("vllm", "0.33.0", "vllm/config/speculative.py", "SpeculativeMethod = Literal["),
    ("sglang", "0.4.4.post2", "sglang/srt/server_args.py", '"--speculative-algorithm",'),
    ("sglang", "0.5.6", "sglang/srt/server_args.py", '"--speculative-algorithm",'),
    ("sglang", "0.5.23", "sglang/srt/arg_groups/fields/spec.py", "speculative_algorithm: A["),
])
def test_no_release_offers_a_layer_skip_or_compressed_kv_self_draft(engine, version, member, start):
    """The speculative method vocabulary the wheels accept (vLLM's SpeculativeMethod, SGLang's
    --speculative-algorithm choices) names no early-exit / layer-skip drafter and no StreamingLLM self-draft."""
    lines = wheel_lines(engine, version, member)
    at = next(i for i, line in enumerate(lines) if start in line)
    vocabulary = "\n".join(lines[at:at + 14]).lower()
    assert ("eagle" in vocabulary) and not re.search(r"early.?exit|layer.?skip|skip.?layer|streaming|self.?spec",
                                                     vocabulary)


# each range's first release ships what runs the method and the release before it does not (the wheels' files;
# for vLLM's draft models between 0.10.0 and 0.14.1 the refusal in the config)
BOUNDARIES = [
    ("vllm", "0.7.2", "0.7.3", r"model_executor/models/deepseek_mtp\.py$"),
    ("vllm", "0.8.4", "0.8.5", r"model_executor/models/llama_eagle3\.py$"),
    ("vllm", "0.9.2", "0.10.0", r"^vllm/spec_decode/multi_step_worker\.py$"),  # the last V0 draft-model worker: gone
    ("vllm", "0.14.1", "0.15.0", r"^vllm/v1/spec_decode/draft_model\.py$"),
    ("vllm", "0.19.1", "0.20.0", r"^vllm/v1/spec_decode/dflash\.py$"),
    ("vllm", "0.24.0", "0.25.0", r"spec_decode/dspark/"),
    ("sglang", "0.4.1.post3", "0.4.1.post4", r"srt/speculative/eagle_worker\.py$"),
    ("sglang", "0.5.1.post3", "0.5.2", r"srt/speculative/standalone_worker"),
    ("sglang", "0.5.2", "0.5.3", r"srt/speculative/ngram"),
    ("sglang", "0.5.10.post1", "0.5.11", r"srt/speculative/dflash"),
    ("sglang", "0.5.15.post1", "0.5.16", r"srt/speculative/dspark"),
]


@pytest.mark.engines
@pytest.mark.slow
@pytest.mark.parametrize("engine, before, first, member", BOUNDARIES)
def test_draft_release_boundaries_are_the_wheels(engine, before, first, member):
    def ships(version):
        with zipfile.ZipFile(_wheel(engine, version)) as z:
            return any(re.search(member, n) for n in z.namelist())
    if member.endswith("multi_step_worker\\.py$"):  # a range's end: the last release has it, the next does not
        assert ships(before) and not ships(first)
    else:
        assert ships(first) and not ships(before)


@pytest.mark.engines
def test_vllm_011_refuses_draft_models_and_016_drafts_in_parallel():
    text = "\n".join(wheel_lines("vllm", "0.11.0", "vllm/config/speculative.py"))
    assert "Speculative decoding with draft model is not" in text
    assert "parallel_drafting" in "\n".join(wheel_lines("vllm", "0.16.0", "vllm/config/speculative.py"))
    assert "parallel_drafting" not in "\n".join(wheel_lines("vllm", "0.15.1", "vllm/config/speculative.py"))


def test_a_plain_only_scenario_takes_any_placeholder_draft():
    """The corpus's and the silicon sample's plain rows price plain decoding through an n-gram placeholder, which
    SGLang runs only from 0.5.3: marked plain-only, their scenarios are built on any release (and stay so when
    overridden); unmarked, the same scenario is refused."""
    from simulator.specs.scenario import build_scenario
    from simulator.specs.scenario_sections import PLAIN_ONLY
    raw = {"model": {"name": "llama-3.1-8b"}, "hardware": {"name": "h100-sxm", "tp": 1},
           "engine": {"name": "sglang", "version": "0.5.0rc0"}, "draft": {"method": "ngram"}}
    with pytest.raises(PlannerError, match="cannot run draft method 'ngram'"):
        build_scenario(raw, "test")
    sc = build_scenario(raw | {PLAIN_ONLY: True}, "test")
    assert sc.engine.version == "0.5.0rc0" and sc.with_overrides(batch_sizes="1-8").engine.version == "0.5.0rc0"


def test_the_drafts_catalog_says_which_releases_run_each_method():
    from simulator.cli.catalog import catalog_text
    text = catalog_text("drafts")
    assert "runs eagle3        vllm >= 0.8.5; sglang >= 0.4.4.post2" in text
    assert "runs model         vllm 0.6.0-0.9.2, >= 0.15.0; sglang >= 0.5.2" in text
    assert "runs p-eagle       vllm >= 0.16.0; sglang none" in text
    assert "runs early-exit    vllm none; sglang none; trtllm none; runs on gpt-fast (research code)" in text
