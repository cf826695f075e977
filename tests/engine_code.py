"""Run the serving engines' OWN schedule parsing/lookup code in our tests.

Test-support module (contains no tests).  For each engine it takes the one
source module that holds the schedule logic out of the engine's released
artefact, and executes it unmodified:

* vLLM     -- wheel from PyPI, ``vllm/v1/spec_decode/dynamic/utils.py``
              (pure Python, no imports; present in 0.24.0 .. 0.33.0).
* SGLang   -- wheel from PyPI, ``sglang/srt/speculative/adaptive_spec_params.py``
              (per-batch-size adaptive config, 0.5.13+) and
              ``sglang/srt/speculative/dspark_components/dspark_sps.py``
              (DSpark step-cost table, 0.5.16+).  Unrelated ``sglang.*``
              imports of those modules are replaced by stubs; ``msgspec``
              (a real dependency of the table parser) comes from its own
              PyPI wheel, also cached.
* TensorRT-LLM -- NVIDIA publishes only ~10 kB stub sdists on PyPI (the real
              wheels live on pypi.nvidia.com, unreachable here), so the
              functions are read from a cache directory:
              ``<cache>/engine-src/tensorrt_llm/<version>/<path>`` (a full file,
              e.g. taken from the GitHub tag) or, failing that, a cached wheel
              ``<cache>/wheels/tensorrt_llm-<version>-*.whl``, or the verbatim
              excerpts in ``<cache>/engine-src/tensorrt_llm/<gen>-snippets/``.
              The function is cut out with ``ast`` and executed as is.

Everything downloaded or extracted lives under ``$DSD_PLANNER_CACHE``
(default ``~/.cache/dsd-planner``), never in the repository.  A wheel is
fetched once with ``pip download --no-deps --only-binary=:all:``; set
``DSD_PLANNER_OFFLINE=1`` to forbid downloads.  When code cannot be had, the
functions raise :class:`EngineCodeUnavailable` so tests can skip with the
reason.

Measured here (PyPI mirror at ~100-150 MB/s): vllm 0.33.0 wheel 336 MB,
~4 s download; sglang 0.5.23 wheel 39 MB, ~2 s; msgspec 0.23.0 wheel 0.2 MB.
Extracting one member and exec'ing it takes well under a second once the
wheel is cached.  See /work/notes/engine-formats.md for the formats.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import json
import logging
import os
import re
import subprocess
import sys
import tempfile
import textwrap
import types
import zipfile
from pathlib import Path
from typing import Any, Iterable

from simulator.specs.versions import parse_version

__all__ = [
    "EngineCodeUnavailable",
    "cache_dir",
    "DEFAULT_VLLM_VERSION",
    "DEFAULT_SGLANG_VERSION",
    "DEFAULT_TRTLLM_VERSION",
    "vllm_validate",
    "vllm_dense_lookup",
    "vllm_k_for",
    "trtllm_validate",
    "trtllm_code_source",
    "trtllm_k_for",
    "sglang_load_adaptive_config",
    "sglang_adaptive_params",
    "sglang_candidate_steps_for",
    "sglang_steps_for",
    "sglang_steps_table",
    "sglang_decode_capture_sizes",
    "sglang_load_sps_table",
    "sglang_sps_lookup",
    "sglang_sps_runtime_lookup",
]

DEFAULT_VLLM_VERSION = "0.33.0"
DEFAULT_SGLANG_VERSION = "0.5.23"
DEFAULT_TRTLLM_VERSION = "1.2.1"

# First released versions that carry each format (verified against the wheels).
VLLM_FIRST_DYNAMIC_SD = parse_version("0.24.0")
SGLANG_FIRST_PER_BS_ADAPTIVE = parse_version("0.5.13")
SGLANG_FIRST_DSPARK_SPS = parse_version("0.5.16")

_log = logging.getLogger(__name__)


class EngineCodeUnavailable(RuntimeError):
    """The engine's code for this version cannot be obtained (offline, not
    published, or the feature does not exist in that version)."""


# --------------------------------------------------------------------------
# cache / download / extraction
# --------------------------------------------------------------------------


def cache_dir() -> Path:
    root = os.environ.get("DSD_PLANNER_CACHE")
    return Path(root).expanduser() if root else Path.home() / ".cache" / "dsd-planner"


def _wheels_dir() -> Path:
    return cache_dir() / "wheels"


def _src_dir() -> Path:
    return cache_dir() / "engine-src"


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def _find_wheel(name: str, version: str | None) -> Path | None:
    d = _wheels_dir()
    if not d.is_dir():
        return None
    pat = f"{_norm(name)}-{version}-*.whl" if version else f"{_norm(name)}-*.whl"
    hits = sorted(p for p in d.glob(pat) if zipfile.is_zipfile(p))
    if version is None:
        hits.sort(key=lambda p: parse_version(p.name.split("-")[1]))
    return hits[-1] if hits else None


def _download_wheel(name: str, version: str | None, timeout: float = 1800) -> Path:
    spec = f"{name}=={version}" if version else name
    if os.environ.get("DSD_PLANNER_OFFLINE"):
        raise EngineCodeUnavailable(
            f"{spec} wheel is not cached in {_wheels_dir()} and DSD_PLANNER_OFFLINE is set")
    _wheels_dir().mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
           "--disable-pip-version-check", "-q", spec, "-d", str(_wheels_dir())]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as exc:  # pragma: no cover - environment
        raise EngineCodeUnavailable(f"pip download {spec} failed: {exc}") from exc
    whl = _find_wheel(name, version)
    if proc.returncode != 0 or whl is None:
        tail = (proc.stderr or proc.stdout or "").strip().splitlines()[-3:]
        raise EngineCodeUnavailable(
            f"could not download a binary wheel for {spec} (offline, or not on the index): "
            + " | ".join(tail))
    return whl


def wheel_path(name: str, version: str | None) -> Path:
    """Path of the cached wheel, downloading it on first use."""
    return _find_wheel(name, version) or _download_wheel(name, version)


def _extract_member(name: str, version: str, member: str) -> Path:
    """Extract ONE file of a wheel into the cache and return its path."""
    dest = _src_dir() / _norm(name) / version / member
    if dest.is_file():
        return dest
    whl = wheel_path(name, version)
    with zipfile.ZipFile(whl) as zf:
        try:
            data = zf.read(member)
        except KeyError:
            raise EngineCodeUnavailable(
                f"{name} {version} wheel has no {member}: the feature does not exist in "
                f"that release") from None
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_suffix(dest.suffix + ".part")
    tmp.write_bytes(data)
    tmp.replace(dest)
    return dest


def _load_module(path: Path, modname: str, stubs: dict[str, types.ModuleType] | None = None
                 ) -> types.ModuleType:
    """Exec an engine source file, unmodified, as a private module.

    ``stubs`` are placed in ``sys.modules`` only while the module body runs
    (entries that were there before are restored afterwards)."""
    src = path.read_text(encoding="utf-8")
    mod = types.ModuleType(modname)
    mod.__file__ = str(path)
    code = compile(src, str(path), "exec")
    saved: dict[str, Any] = {}
    stubs = stubs or {}
    for key, stub in stubs.items():
        saved[key] = sys.modules.get(key, _MISSING)
        sys.modules[key] = stub
    try:
        sys.modules[modname] = mod  # needed by dataclass / msgspec introspection
        exec(code, mod.__dict__)
    finally:
        for key, old in saved.items():
            if old is _MISSING:
                sys.modules.pop(key, None)
            else:
                sys.modules[key] = old
    return mod


_MISSING = object()


class _Unrelated:
    """Placeholder for an engine symbol that has nothing to do with schedules."""

    def __init__(self, qualname: str):
        self._qualname = qualname

    def __call__(self, *a, **k):
        raise EngineCodeUnavailable(
            f"{self._qualname} is stubbed out by tests/engine_code.py (unrelated heavy import)")

    def __getattr__(self, item):
        return _Unrelated(f"{self._qualname}.{item}")


def _log_info_on_rank0(logger, msg, *a, **k):
    logger.info(msg)


def _stub_imports(src: str, prefixes: tuple[str, ...]) -> dict[str, types.ModuleType]:
    """Stub modules for every top-level ``from X import a, b`` whose X starts
    with one of ``prefixes`` (the engine's own, unrelated, heavy internals)."""
    tree = ast.parse(src)
    stubs: dict[str, types.ModuleType] = {}

    def ensure(modname: str) -> types.ModuleType:
        parts = modname.split(".")
        for i in range(1, len(parts) + 1):
            key = ".".join(parts[:i])
            if key not in stubs:
                m = types.ModuleType(key)
                m.__path__ = []  # mark as package
                stubs[key] = m
        return stubs[modname]

    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 \
                and node.module.startswith(prefixes):
            m = ensure(node.module)
            for alias in node.names:
                if alias.name == "log_info_on_rank0":
                    setattr(m, alias.name, _log_info_on_rank0)
                else:
                    setattr(m, alias.name, _Unrelated(f"{node.module}.{alias.name}"))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith(prefixes):
                    ensure(alias.name)
    return stubs


# --------------------------------------------------------------------------
# vLLM
# --------------------------------------------------------------------------

_VLLM_UTILS = "vllm/v1/spec_decode/dynamic/utils.py"


@functools.lru_cache(maxsize=None)
def _vllm_dynamic_utils(version: str) -> types.ModuleType:
    if parse_version(version) < VLLM_FIRST_DYNAMIC_SD:
        raise EngineCodeUnavailable(
            f"vllm {version} has no num_speculative_tokens_per_batch_size "
            f"(first released in 0.24.0)")
    path = _extract_member("vllm", version, _VLLM_UTILS)
    return _load_module(path, f"_dsd_engine_vllm_{_norm(version)}_dynamic_utils")


def vllm_validate(schedule: Any, version: str = DEFAULT_VLLM_VERSION) -> list[tuple[int, int, int]]:
    """vLLM's ``validate_and_normalize_dynamic_sd_schedule`` (raises ValueError)."""
    return _vllm_dynamic_utils(version).validate_and_normalize_dynamic_sd_schedule(schedule)


def vllm_dense_lookup(config: dict, max_num_seqs: int,
                      version: str = DEFAULT_VLLM_VERSION) -> list[int]:
    """vLLM's ``build_dynamic_sd_schedule_lookup``: index = batch size (1..max_num_seqs)."""
    return _vllm_dynamic_utils(version).build_dynamic_sd_schedule_lookup(
        config["num_speculative_tokens_per_batch_size"],
        vllm_max_batch_size=max_num_seqs,
        vllm_num_speculative_tokens=config["num_speculative_tokens"],
    )


def vllm_k_for(config: dict, batch_size: int, context_len: int | None = None,
               version: str = DEFAULT_VLLM_VERSION, max_num_seqs: int | None = None) -> int:
    """K that vLLM's scheduler schedules for ``batch_size`` running requests.

    ``config`` is a ``speculative_config`` dict with ``num_speculative_tokens``
    and ``num_speculative_tokens_per_batch_size``.  Mirrors
    ``Scheduler.__init__`` / ``Scheduler.schedule`` (vllm/v1/core/sched/
    scheduler.py): no/empty schedule -> static ``num_speculative_tokens``;
    otherwise ``dense[len(num_scheduled_tokens)]`` of the engine's dense
    lookup built with ``max_num_seqs``.  The dense table below
    ``batch_size`` does not depend on ``max_num_seqs``, so it defaults to
    ``batch_size``.  ``context_len`` is accepted for the proposed 5-item
    (ctx-aware) form; no released vLLM reads it -- a 5-item entry makes the
    released validator raise ValueError, which is propagated.
    """
    schedule = config.get("num_speculative_tokens_per_batch_size")
    k_max = config.get("num_speculative_tokens")
    if not schedule:  # scheduler.py: `if speculative_config.num_speculative_tokens_per_batch_size:`
        _vllm_dynamic_utils(version)  # still require the release to exist/have the feature
        return int(k_max)
    if max_num_seqs is None:
        max_num_seqs = batch_size
    if batch_size < 1 or batch_size > max_num_seqs:
        raise ValueError(f"batch_size {batch_size} outside 1..max_num_seqs={max_num_seqs}")
    dense = vllm_dense_lookup(config, max_num_seqs, version)
    return int(dense[batch_size])


# --------------------------------------------------------------------------
# TensorRT-LLM
# --------------------------------------------------------------------------

_TRT_ARGS = "tensorrt_llm/llmapi/llm_args.py"
_TRT_DRAFTER = "tensorrt_llm/_torch/speculative/drafter.py"
_TRT_UTILS = "tensorrt_llm/_torch/speculative/utils.py"


def _trt_generation(version: str) -> str:
    """'1.2' = keys are lower bounds (release/1.2 line: 1.2.0rc*, 1.2.0, 1.2.1);
    '1.3' = key means "up to this batch size" (main after PR #10860, 1.3.0rc line)."""
    v = parse_version(version).head(2)
    if v == (1, 2):
        return "1.2"
    if v >= (1, 3):
        return "1.3"
    raise EngineCodeUnavailable(
        f"tensorrt_llm {version}: draft_len_schedule does not exist before the 1.2 line")


def _trt_source(version: str, relpath: str) -> Path:
    base = _src_dir() / "tensorrt_llm"
    full = base / version / relpath
    if full.is_file():
        return full
    whl = _find_wheel("tensorrt_llm", version)
    if whl is not None:
        return _extract_member("tensorrt_llm", version, relpath)
    gen = _trt_generation(version) if version not in ("1.2", "1.3") else version
    snip = base / f"{gen}-snippets" / relpath
    if snip.is_file():
        return snip
    tag = f"v{version}" if version not in ("1.2", "1.3") else f"a v{version}.x release"
    raise EngineCodeUnavailable(
        f"TensorRT-LLM {version} source {relpath} is not cached. TensorRT-LLM wheels are not on "
        f"PyPI (only ~10 kB stub sdists); put the file from GitHub tag {tag} at {full}, "
        f"or a tensorrt_llm-{version}-*.whl (pypi.nvidia.com) in {_wheels_dir()}, or the "
        f"verbatim excerpts in {base / (gen + '-snippets')}")


def _extract_function(path: Path, qualname: str, namespace: dict) -> types.FunctionType:
    """Compile ONE function (``Class.method`` or ``func``) out of an engine file,
    body unchanged; decorators (pydantic's @field_validator/@classmethod,
    typing.final) are dropped so it can be called directly."""
    src = path.read_text(encoding="utf-8")
    tree = ast.parse(src)
    parts = qualname.split(".")
    body: Iterable[ast.stmt] = tree.body
    node = None
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        for cand in body:
            if last and isinstance(cand, (ast.FunctionDef, ast.AsyncFunctionDef)) and cand.name == part:
                node = cand
                break
            if not last and isinstance(cand, ast.ClassDef) and cand.name == part:
                body = cand.body
                break
        else:
            raise EngineCodeUnavailable(f"{qualname} not found in {path}")
    assert node is not None
    node.decorator_list = []
    module = ast.Module(body=[node], type_ignores=[])
    ast.fix_missing_locations(module)
    ns = dict(namespace)
    exec(compile(module, str(path), "exec"), ns)
    return ns[node.name]


class _TrtLogger:
    def __getattr__(self, level):
        return getattr(_log, level if level in ("debug", "info", "warning", "error") else "info")


@functools.lru_cache(maxsize=None)
def _trt_functions(version: str):
    import bisect
    from typing import Dict, List, Optional

    ns = {"bisect_left": bisect.bisect_left, "bisect_right": bisect.bisect_right,
          "logger": _TrtLogger(), "Dict": Dict, "List": List, "Optional": Optional}
    validator = _extract_function(_trt_source(version, _TRT_ARGS),
                                  "DecodingBaseConfig.validate_draft_len_schedule_and_sort", ns)
    gen = _trt_generation(version) if version not in ("1.2", "1.3") else version
    if gen == "1.2":
        method = _extract_function(_trt_source(version, _TRT_DRAFTER),
                                   "Drafter.get_draft_len_for_batch_size", ns)

        def lookup(schedule, batch_size, max_draft_len):
            # Drafter.__init__ stores the validated (sorted) schedule on self.
            return method(types.SimpleNamespace(draft_len_schedule=schedule), batch_size)
    else:
        func = _extract_function(_trt_source(version, _TRT_UTILS),
                                 "get_draft_len_for_batch_size", ns)

        def lookup(schedule, batch_size, max_draft_len):
            return func(schedule, batch_size, max_draft_len)
    return validator, lookup


def _coerce_int_keys(schedule: dict) -> dict:
    # pydantic (lax mode) turns JSON/YAML string keys "4" into int 4 for dict[int, int].
    return {int(k): int(v) for k, v in schedule.items()}


def trtllm_code_source(version: str = DEFAULT_TRTLLM_VERSION) -> str:
    """'engine' when TensorRT-LLM's own functions are cached for ``version``, else 'rule': the
    documented rule restated in tests/trtllm_rule.py (no wheel on PyPI to download)."""
    try:
        _trt_functions(version)
        return "engine"
    except EngineCodeUnavailable:
        return "rule"


def trtllm_validate(schedule: dict, max_draft_len: int | None,
                    version: str = DEFAULT_TRTLLM_VERSION) -> dict[int, int]:
    """TensorRT-LLM's ``DecodingBaseConfig.validate_draft_len_schedule_and_sort``.

    Raises ``ValueError`` as the engine does (pydantic wraps it into a ``ValidationError`` at config
    construction).  Returns the sorted dict.  Where the engine's source is not cached, the
    documented rule of tests/trtllm_rule.py (cited line by line) stands in."""
    if trtllm_code_source(version) == "rule":
        import trtllm_rule
        return trtllm_rule.validate(_coerce_int_keys(schedule), max_draft_len, version)
    validator, _ = _trt_functions(version)
    info = types.SimpleNamespace(data={"max_draft_len": max_draft_len})
    return validator(None, _coerce_int_keys(schedule), info)


def trtllm_k_for(schedule: dict, batch_size: int, version: str = DEFAULT_TRTLLM_VERSION,
                 max_draft_len: int | None = None) -> int:
    """Runtime draft length TensorRT-LLM uses for ``batch_size`` active requests.

    The schedule is validated/sorted first (as the config validator does
    before the runtime sees it).  ``max_draft_len`` defaults to the value the
    validator requires (schedule[1] for 1.2, schedule[min key] for 1.3)."""
    if trtllm_code_source(version) == "rule":
        import trtllm_rule
        return trtllm_rule.k_for(_coerce_int_keys(schedule), batch_size, version, max_draft_len)
    _, lookup = _trt_functions(version)
    sched = _coerce_int_keys(schedule)
    if max_draft_len is None and sched:
        max_draft_len = sched[min(sched)]
    sched = trtllm_validate(sched, max_draft_len, version)
    return int(lookup(sched, batch_size, max_draft_len))


# --------------------------------------------------------------------------
# SGLang
# --------------------------------------------------------------------------

_SG_ADAPTIVE = "sglang/srt/speculative/adaptive_spec_params.py"
_SG_SPS = "sglang/srt/speculative/dspark_components/dspark_sps.py"


@functools.lru_cache(maxsize=None)
def _sglang_adaptive(version: str) -> types.ModuleType:
    if parse_version(version) < SGLANG_FIRST_PER_BS_ADAPTIVE:
        raise EngineCodeUnavailable(
            f"sglang {version}: the per-batch-size adaptive config ({{\"1\": {{...}}, \"8\": {{...}}}}) "
            f"first appears in 0.5.13 (0.5.11/0.5.12 read one flat config)")
    path = _extract_member("sglang", version, _SG_ADAPTIVE)
    stubs = _stub_imports(path.read_text(encoding="utf-8"), ("sglang",))
    return _load_module(path, f"_dsd_engine_sglang_{_norm(version)}_adaptive", stubs)


@functools.lru_cache(maxsize=None)
def _msgspec_dir() -> Path:
    whl = wheel_path("msgspec", None)
    ver = whl.name.split("-")[1]
    dest = _src_dir() / "msgspec" / ver
    if not (dest / "msgspec" / "__init__.py").is_file():
        with zipfile.ZipFile(whl) as zf:
            zf.extractall(dest)
    return dest


def _ensure_msgspec() -> None:
    import importlib

    try:
        importlib.import_module("msgspec")
        return
    except ImportError:
        pass
    d = str(_msgspec_dir())
    if d not in sys.path:
        sys.path.append(d)
    try:
        importlib.import_module("msgspec")
    except ImportError as exc:
        raise EngineCodeUnavailable(f"msgspec wheel in {d} cannot be imported: {exc}") from exc


@functools.lru_cache(maxsize=None)
def _sglang_sps(version: str) -> types.ModuleType:
    if parse_version(version) < SGLANG_FIRST_DSPARK_SPS:
        raise EngineCodeUnavailable(
            f"sglang {version}: DSpark SPS table (--speculative-dspark-sps-table-path) first "
            f"appears in 0.5.16")
    path = _extract_member("sglang", version, _SG_SPS)
    _ensure_msgspec()
    return _load_module(path, f"_dsd_engine_sglang_{_norm(version)}_dspark_sps")


@contextlib.contextmanager
def _as_path(config_or_path: dict | str | os.PathLike):
    if isinstance(config_or_path, (str, os.PathLike)):
        yield str(config_or_path)
        return
    fd, name = tempfile.mkstemp(suffix=".json", prefix="dsd-sglang-")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(config_or_path, f)
        yield name
    finally:
        os.unlink(name)


def sglang_load_adaptive_config(path: str | os.PathLike | dict,
                                version: str = DEFAULT_SGLANG_VERSION) -> dict[int, dict]:
    """SGLang's ``_load_adaptive_config``: {batch-size lower bound: entry}.
    Raises ValueError like the engine (and json errors for bad JSON)."""
    with _as_path(path) as p:
        _cfg, bs_entries = _sglang_adaptive(version)._load_adaptive_config(p)
    return bs_entries


def sglang_adaptive_params(config: dict | str | os.PathLike,
                           version: str = DEFAULT_SGLANG_VERSION,
                           initial_steps: int | None = None,
                           cuda_graph_bs: list[int] | None = None):
    """Build the engine's ``AdaptiveSpeculativeParams`` for a config.

    ``initial_steps`` defaults to what ServerArgs resolution picks when
    ``--speculative-num-steps`` is omitted: the middle of the union of all
    candidate steps (speculative_hook.py ``_init_adaptive_speculative_params``).
    ``cuda_graph_bs`` (sorted captured batch sizes) makes routing pad the batch
    size up to the next captured size first, as the worker does."""
    mod = _sglang_adaptive(version)
    with _as_path(config) as p:
        if initial_steps is None:
            union = mod.resolve_candidate_steps_from_config(p)
            initial_steps = union[len(union) // 2]
        params = mod.AdaptiveSpeculativeParams(initial_steps=initial_steps, cfg_path=p)
    params.set_cuda_graph_bs(cuda_graph_bs)
    return params


def sglang_candidate_steps_for(config: dict | str | os.PathLike, batch_size: int,
                               version: str = DEFAULT_SGLANG_VERSION,
                               cuda_graph_bs: list[int] | None = None) -> list[int]:
    """Candidate steps of the slot SGLang routes ``batch_size`` to
    (largest key <= batch size; below the smallest key -> smallest key's slot)."""
    params = sglang_adaptive_params(config, version, cuda_graph_bs=cuda_graph_bs)
    return list(params._route(batch_size).candidate_steps)


def sglang_steps_for(config: dict | str | os.PathLike, batch_size: int,
                     version: str = DEFAULT_SGLANG_VERSION, initial_steps: int | None = None,
                     cuda_graph_bs: list[int] | None = None) -> int:
    """Steps (K) SGLang uses at ``batch_size`` before any acceptance feedback
    (``get_steps_for_batch``).  With a single candidate per slot this is the
    fixed K of that slot."""
    params = sglang_adaptive_params(config, version, initial_steps, cuda_graph_bs)
    return int(params.get_steps_for_batch(batch_size))


def sglang_steps_table(config: dict | str | os.PathLike, batch_sizes: Iterable[int],
                       version: str = DEFAULT_SGLANG_VERSION, initial_steps: int | None = None,
                       cuda_graph_bs: list[int] | None = None) -> list[int]:
    """``sglang_steps_for`` at many batch sizes with ONE engine params object (the engine's
    ``get_steps_for_batch``, CUDA-graph padding included when ``cuda_graph_bs`` is given)."""
    params = sglang_adaptive_params(config, version, initial_steps, cuda_graph_bs)
    return [int(params.get_steps_for_batch(int(b))) for b in batch_sizes]


_SG_GRAPHS = "sglang/srt/arg_groups/cuda_graph_hook.py"


def sglang_decode_capture_sizes(max_bs: int, speculative: bool, version: str = DEFAULT_SGLANG_VERSION,
                                disable_padding: bool = False) -> list[int]:
    """SGLang's ``generate_decode_cuda_graph_batch_sizes``: the decode batch sizes it captures (and
    pads to) at ``cuda_graph_max_bs = max_bs``, with or without a speculative algorithm set.
    The function is cut out of the wheel's cuda_graph_hook.py and run as is; its
    ``resolving_view(server_args)`` is given the arguments themselves."""
    fn = _extract_function(_extract_member("sglang", version, _SG_GRAPHS),
                           "generate_decode_cuda_graph_batch_sizes", {"resolving_view": lambda a: a, "Any": Any})
    args = types.SimpleNamespace(disable_cuda_graph_padding=disable_padding,
                                 speculative_algorithm="EAGLE3" if speculative else None)
    return list(fn(args, max_bs))


def sglang_load_sps_table(table: dict | str | os.PathLike,
                          version: str = DEFAULT_SGLANG_VERSION):
    """SGLang's ``load_sps_table_from_path`` (SpsCostTable or SpsAdditiveCostTable).
    Invalid tables raise what msgspec/the engine raise (msgspec.ValidationError
    wraps the __post_init__ ValueError)."""
    mod = _sglang_sps(version)
    with _as_path(table) as p:
        return mod.load_sps_table_from_path(p)


def sglang_sps_lookup(table: dict | str | os.PathLike, batch_tokens: int,
                      version: str = DEFAULT_SGLANG_VERSION) -> float:
    """Steps/sec the DSpark planner reads for ``batch_tokens`` (floor probe)."""
    t = sglang_load_sps_table(table, version)
    if not hasattr(t, "lookup"):
        raise TypeError("additive SPS tables have step_time(num_reqs=, budget=), not lookup()")
    return float(t.lookup(batch_tokens))


_SG_PLANNER = "sglang/srt/speculative/dspark_components/dspark_planner.py"


def sglang_sps_runtime_lookup(table: dict | str | os.PathLike, batch_tokens: list[int],
                              version: str = DEFAULT_SGLANG_VERSION) -> list[float]:
    """The ragged-verify budget planner's own vectorised lookup
    (``dspark_planner._lookup_sps_tensor``, torch.bucketize right=True, -1,
    clamp), cut out of the released file with ``ast``.  Needs torch."""
    try:
        import torch
    except ImportError as exc:
        raise EngineCodeUnavailable(f"torch is needed for _lookup_sps_tensor: {exc}") from exc
    t = sglang_load_sps_table(table, version)
    path = _extract_member("sglang", version, _SG_PLANNER)
    fn = _extract_function(path, "_lookup_sps_tensor", {"torch": torch, "SpsCostTable": type(t)})
    out = fn(sps_table=t, batch_tokens=torch.tensor(list(batch_tokens), dtype=torch.int64))
    return [float(x) for x in out.tolist()]


def _describe() -> str:  # pragma: no cover - manual aid
    return textwrap.dedent(f"""
        cache: {cache_dir()}
        wheels: {sorted(p.name for p in _wheels_dir().glob('*.whl')) if _wheels_dir().is_dir() else []}
    """)
