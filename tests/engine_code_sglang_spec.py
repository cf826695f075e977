"""SGLang's own ``Spec`` config fields (``sglang/srt/arg_groups/fields/spec.py``) from its released wheel.

Test-support module (no tests). The file declares every ``--speculative-*`` server flag as a field of a
``msgspec.Struct`` (flag = ``--`` + field name with ``-`` for ``_``). It is executed unmodified; of its
imports, ``arg_utils`` gives ``A = Annotated`` and ``Arg`` (a flag's help text, aliases and argparse options; metadata msgspec ignores), and
``choices`` three lists of allowed values that these checks do not use: both are stubbed with those
shapes. msgspec comes from its own cached wheel, as for the DSpark table parser.
"""
from __future__ import annotations

import functools
import sys
import types
from typing import Annotated

import engine_code as ec

_SPEC = "sglang/srt/arg_groups/fields/spec.py"


@functools.lru_cache(maxsize=None)
def spec_struct(version: str = ec.DEFAULT_SGLANG_VERSION):
    path = ec._extract_member("sglang", version, _SPEC)
    ec._ensure_msgspec()
    import msgspec

    class Arg:  # the flag's help, aliases and argparse options: metadata that msgspec ignores
        def __init__(self, **options):
            self.options = options

    stubs = {name: types.ModuleType(name) for name in
             ("sglang", "sglang.srt", "sglang.srt.arg_groups", "sglang.srt.arg_groups.arg_utils",
              "sglang.srt.arg_groups.choices")}
    stubs["sglang.srt.arg_groups.arg_utils"].A = Annotated
    stubs["sglang.srt.arg_groups.arg_utils"].Arg = Arg
    for name in ("LOAD_FORMAT_CHOICES", "MOE_RUNNER_BACKEND_CHOICES", "QUANTIZATION_CHOICES"):
        setattr(stubs["sglang.srt.arg_groups.choices"], name, [])
    modname = f"_dsd_engine_sglang_{ec._norm(version)}_spec_fields"
    mod = ec._load_module(path, modname, stubs)
    sys.modules[modname] = mod  # msgspec resolves the postponed annotations in the module's namespace
    return mod.Spec


@functools.lru_cache(maxsize=None)
def spec_parser(version: str = ec.DEFAULT_SGLANG_VERSION):
    """SGLang's own argparse for the ``--speculative-*`` server flags: ``add_cli_args_from_dataclass``
    (``sglang/srt/arg_groups/arg_utils.py``) over ``Spec``, with arg_utils, the choices lists and spec.py all
    executed unmodified from the wheel (arg_utils needs only msgspec), as ``launch_server`` builds them."""
    import argparse
    ec._ensure_msgspec()
    tag = ec._norm(version)
    real = {}
    for name, member in (("arg_utils", "sglang/srt/arg_groups/arg_utils.py"),
                         ("choices", "sglang/srt/arg_groups/choices.py")):
        real[f"sglang.srt.arg_groups.{name}"] = ec._load_module(ec._extract_member("sglang", version, member),
                                                                f"_dsd_engine_sglang_{tag}_{name}")
    stubs = {name: types.ModuleType(name) for name in ("sglang", "sglang.srt", "sglang.srt.arg_groups")} | real
    modname = f"_dsd_engine_sglang_{tag}_spec_fields_real_args"
    mod = ec._load_module(ec._extract_member("sglang", version, _SPEC), modname, stubs)
    sys.modules[modname] = mod  # get_type_hints resolves the postponed annotations in the module's namespace
    parser = argparse.ArgumentParser(prog="sglang.launch_server", exit_on_error=False)
    real["sglang.srt.arg_groups.arg_utils"].add_cli_args_from_dataclass(parser, mod.Spec)
    return parser


def parse_launch_line(command: str, version: str = ec.DEFAULT_SGLANG_VERSION):
    """The ``--speculative-*`` flags of a ``python -m sglang.launch_server ...`` line, parsed by SGLang's own
    argparse (:func:`spec_parser`; the other flags belong to other groups); argparse.ArgumentError or
    SystemExit where SGLang would refuse one."""
    import shlex
    words = shlex.split(command)
    spec_words = []
    for i, w in enumerate(words):
        if w.startswith("--speculative-"):
            spec_words.append(w)
            if i + 1 < len(words) and not words[i + 1].startswith("--"):
                spec_words.append(words[i + 1])
    return spec_parser(version).parse_args(spec_words)


def read_flags(flags: dict, version: str = ec.DEFAULT_SGLANG_VERSION):
    """The ``Spec`` SGLang builds from these fields (msgspec.convert: each value of its declared type);
    ValueError for a name that is no field of it (SGLang's argparse would refuse the flag)."""
    spec = spec_struct(version)  # first: makes msgspec importable
    import msgspec
    unknown = sorted(set(flags) - set(spec.__struct_fields__))
    if unknown:
        raise ValueError(f"SGLang {version} Spec has no field(s) {unknown}")
    return msgspec.convert(flags, spec, strict=True)


def builtin_algorithms(version: str = ec.DEFAULT_SGLANG_VERSION) -> set[str]:
    """The builtin --speculative-algorithm names the field's help lists."""
    text = str(spec_struct(version).__annotations__["speculative_algorithm"])  # the field's A[type, help]
    text = text.split("Builtins:", 1)[1].split(".", 1)[0] if "Builtins:" in text else ""
    return {x.strip() for x in text.split(",") if x.strip()}
