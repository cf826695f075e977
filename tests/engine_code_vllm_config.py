"""vLLM's own ``SpeculativeConfig`` checks from its released wheel, on a ``--speculative-config`` dict.

Test-support module (no tests). Importing vllm needs torch, transformers and CUDA libraries; the
whole ``SpeculativeConfig.__post_init__`` also loads the draft checkpoint's config.json. So this
runs the parts of ``vllm/config/speculative.py`` that judge the dict itself, cut out of the cached
wheel with ``ast`` and executed unmodified:

* the class's fields: ``@config`` makes it a pydantic dataclass with ``extra="forbid"``
  (vllm/config/utils.py), so a key that is not a field is refused;
* ``SpeculativeMethod`` (the module's Literal aliases): a method outside it is refused;
* the head of ``__post_init__``, up to and including the ``if self.model is None and
  self.num_speculative_tokens is not None`` block: method inference and the refusal
  "num_speculative_tokens was provided but without speculative model".
"""
from __future__ import annotations

import ast
import functools
import logging
import types
import typing

import engine_code as ec

_SPEC = "vllm/config/speculative.py"
_ALIASES = ("MTPModelTypes", "NgramGPUTypes", "DFlashModelTypes", "DSparkModelTypes", "EagleModelTypes",
            "SpeculativeMethod")


@functools.lru_cache(maxsize=None)
def _parts(version: str):
    path = ec._extract_member("vllm", version, _SPEC)
    tree = ast.parse(path.read_text(encoding="utf-8"))
    ns: dict = {"Literal": typing.Literal}
    aliases = [n for n in tree.body if isinstance(n, ast.Assign) and len(n.targets) == 1
               and getattr(n.targets[0], "id", None) in _ALIASES]
    exec(compile(ast.Module(body=aliases, type_ignores=[]), str(path), "exec"), ns)
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "SpeculativeConfig")
    fields = {n.target.id for n in cls.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)}
    post = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "__post_init__")
    stop = next(i for i, st in enumerate(post.body) if isinstance(st, ast.If)
                and "num_speculative_tokens" in ast.unparse(st.test) and "self.model is None" in ast.unparse(st.test))
    post.body = post.body[: stop + 1]
    post.decorator_list = []
    custom = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "_is_custom_proposer_path")
    custom.decorator_list = []
    code_ns = {"get_args": typing.get_args, "logger": logging.getLogger("vllm-config"),
               "MTPModelTypes": ns["MTPModelTypes"]}
    exec(compile(ast.Module(body=[custom, post], type_ignores=[]), str(path), "exec"), code_ns)
    owner = types.SimpleNamespace(_is_custom_proposer_path=staticmethod(code_ns["_is_custom_proposer_path"]))
    code_ns["SpeculativeConfig"] = owner
    owner._is_custom_proposer_path = code_ns["_is_custom_proposer_path"]
    return fields, _flatten(ns["SpeculativeMethod"]), code_ns["__post_init__"]


def _flatten(alias) -> set[str]:
    out: set[str] = set()
    for arg in typing.get_args(alias):
        out |= _flatten(arg) if typing.get_args(arg) else {arg}
    return out


def check_speculative_config(cfg: dict, target_model: str, version: str = ec.DEFAULT_VLLM_VERSION) -> dict:
    """Run vLLM's field set, method Literal and __post_init__ head on ``cfg``; ValueError as vLLM
    would raise; returns the resolved {method, model}."""
    fields, methods, post_init = _parts(version)
    cfg = {k.replace("-", "_"): v for k, v in cfg.items()}  # as EngineArgs.create_speculative_config does
    unknown = sorted(set(cfg) - fields)
    if unknown:
        raise ValueError(f"SpeculativeConfig has no field(s) {unknown} (extra='forbid')")
    if cfg.get("method") is not None and cfg["method"] not in methods:
        raise ValueError(f"method {cfg['method']!r} is not a SpeculativeMethod")
    target = types.SimpleNamespace(model=target_model, model_weights=None, quantization=None)
    obj = types.SimpleNamespace(**{f: None for f in fields})
    obj.__dict__.update(cfg, target_model_config=target)
    post_init(obj)
    return {"method": obj.method, "model": obj.model}
