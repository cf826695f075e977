"""What every command line shares: a one-line argparse, one error boundary, atomic writes (re-exported
from :mod:`simulator.files`).

Bad input is a :class:`PlannerError`: the boundary prints it as one line on stderr and exits 2;
outputs are written beside their target and renamed into place, so a failure never leaves a
half-written or half-replaced file (or set of files) behind.
"""
from __future__ import annotations

import argparse
import sys
import warnings
from typing import Callable

from simulator.errors import PlannerError, PlannerWarning
from simulator.files import check_output_dir, check_output_file, write_atomically, write_files_atomically

__all__ = ["OneLineParser", "run_cli", "command", "say_written", "add_save_scenario_arg", "check_save_scenario",
           "save_scenario", "command_line", "one_line", "check_output_dir", "check_output_file", "write_atomically",
           "write_files_atomically", "add_dtype_args", "dtype_overrides", "dtypes_text", "add_setting_args",
           "setting_overrides"]


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a usage error is one line on stderr and exit code 2."""

    def error(self, message):
        self.exit(2, f"error: {message} (see --help)\n")


def one_line(text: str) -> str:
    """Whitespace (newlines included) collapsed: what a one-line message prints."""
    return " ".join(str(text).split())


def _warning_printer(quiet: bool = False):
    """showwarning for one command: each PlannerWarning once, as one 'warning: ...' line on stderr (a
    sizing run builds the same scenario for many candidates and would repeat its caveats); none with
    ``quiet`` (--quiet)."""
    seen: set[str] = set()

    def show(message, category, filename, lineno, file=None, line=None):
        if not issubclass(category, PlannerWarning):
            _ORIGINAL_SHOWWARNING(message, category, filename, lineno, file, line)
            return
        text = one_line(message)
        if text not in seen and not quiet:
            seen.add(text)
            print(f"warning: {text}", file=sys.stderr)
    return show


_ORIGINAL_SHOWWARNING = warnings.showwarning


def run_cli(body: Callable[[], int | None], quiet: bool = False) -> int:
    """Run a command's body: PlannerError -> one line on stderr, exit 2; a closed pipe is not an error.

    Inputs accepted with a caveat (PlannerWarning) print as one 'warning: ...' line each, once, on
    stderr (never into the command's output); ``quiet``: not at all (errors still print).
    """
    with warnings.catch_warnings():
        warnings.simplefilter("always", PlannerWarning)
        warnings.showwarning = _warning_printer(quiet)
        try:
            return body() or 0
        except PlannerError as err:
            print(f"error: {one_line(err)}", file=sys.stderr)
            return 2
        except BrokenPipeError:
            return 0


def command(build_parser: Callable[[], argparse.ArgumentParser], body: Callable[[argparse.Namespace], int | None]):
    """A CLI's ``main(argv)``: parse (a usage error is one line, exit 2), then run ``body`` inside the
    error boundary of :func:`run_cli`. Every command gets ``--quiet`` (no 'warning:' lines)."""
    def main(argv: list[str] | None = None) -> int:
        parser = build_parser()
        if not any("--quiet" in action.option_strings for action in parser._actions):  # sweep has its own
            parser.add_argument("--quiet", action="store_true",
                                help="print no 'warning:' lines on stderr (errors still print)")
        args = parser.parse_args(argv)
        args.command_line = command_line(parser.prog, argv)  # what --save-scenario's header repeats
        return run_cli(lambda: body(args), quiet=args.quiet)
    return main


def command_line(prog: str, argv: list[str] | None) -> str:
    """The command as typed: PROG ARGS (arguments with spaces quoted)."""
    import shlex
    args = sys.argv[1:] if argv is None else argv
    return " ".join([prog] + [shlex.quote(str(a)) for a in args])


SAVE_FLAG = "--save-scenario"


def add_save_scenario_arg(p: argparse.ArgumentParser) -> None:
    """--save-scenario FILE: every command's way to keep what it ran as a commented scenario TOML."""
    p.add_argument(SAVE_FLAG, metavar="FILE", help="also write what this command ran (flags folded in) as a commented"
                   " TOML; given back as the scenario (a sweep: as the sweep file) it gives the same answer")


def check_save_scenario(args: argparse.Namespace) -> None:
    """Refuse an unwritable --save-scenario before any work (one line naming the flag)."""
    if getattr(args, "save_scenario", None):
        check_output_file(args.save_scenario, SAVE_FLAG)


def save_scenario(args: argparse.Namespace, raw: dict, name: str | None = None) -> None:
    """Write ``raw`` (a scenario's TOML-layout dict) to --save-scenario, atomically, with the command in its
    header; ``name``: the scenario's name, kept when the file has none; one 'wrote FILE' line on stderr."""
    from simulator.specs.scenario_toml import scenario_toml
    if name and "name" not in raw:
        raw = {"name": name} | raw
    text = scenario_toml(raw, getattr(args, "command_line", ""))
    write_atomically(args.save_scenario, text, flag=SAVE_FLAG)
    say_written([args.save_scenario])


def say_written(paths) -> None:
    """One 'wrote PATH' line on stderr per file written."""
    for path in paths:
        print(f"wrote {path}", file=sys.stderr)


def add_setting_args(p, *names: str, notes: dict | None = None) -> None:
    """Add the flags of these scenario settings (simulator.specs.settings: flag, type, metavar, help), in order;
    ``notes``: what a setting means for this command, after its help."""
    from simulator.specs.settings import BY_NAME
    for name in names:
        s = BY_NAME[name]
        kwargs = {"type": s.arg_type, "metavar": s.metavar, "choices": s.choices}
        if s.arg_type is bool:  # an on/off switch: the flag alone
            kwargs = {"action": "store_true"}
        note = (notes or {}).get(name)
        p.add_argument(s.flag, help=s.help_text() + (f"; {note}" if note else "") + _toml_text(s),
                       **{k: v for k, v in kwargs.items() if v is not None})


def _toml_text(s) -> str:
    """' [TOML: [workload] k_max; default 8]': where the flag's value lives in a scenario, and what a scenario
    without it gets (the settings table's default), unless the help already says."""
    if s.key is None:
        return ""
    where = f"[{s.section}] {s.key}" if s.section else s.key
    said = "default" in s.help_text()
    return f" [TOML: {where}" + ("" if s.default is None or said else f"; default {s.default}") + "]"


def setting_overrides(args: argparse.Namespace, *names: str) -> dict:
    """The scenario overrides the flags of :func:`add_setting_args` give (None: keep the scenario's), each
    read in the setting's units and checked (one line naming the flag when it is unusable)."""
    from simulator.specs.settings import BY_NAME
    out = {}
    for name in names:
        s = BY_NAME[name]
        value = getattr(args, s.dest)
        out[name] = s.from_flag(value, s.flag) if s.from_flag else value
    return out


DTYPE_SETTINGS = ("dtype", "act_dtype", "kv_dtype")


def add_dtype_args(p: argparse.ArgumentParser) -> None:
    """The three precision flags, named and meant the same in every command (predict, serve, size):
    weights, activations, KV cache; each overrides the scenario's [precision] key."""
    add_setting_args(p, *DTYPE_SETTINGS)


def dtype_overrides(args: argparse.Namespace) -> dict:
    """The scenario overrides of :func:`add_dtype_args` (None: keep the scenario's)."""
    return setting_overrides(args, *DTYPE_SETTINGS)


def dtypes_text(sc) -> str:
    """'weights bf16 (experts mxfp4), activations bf16, KV fp8': what every header prints."""
    dep = sc.deployment
    experts = dep.expert_dtype_for(sc.model) if sc.model.is_moe else None
    return (f"weights {dep.weight_dtype}" + (f" (experts {experts})" if experts and experts != dep.weight_dtype else "")
            + f", activations {dep.act_dtype}, KV {dep.kv_dtype}")
