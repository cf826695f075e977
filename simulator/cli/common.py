"""What every command line shares: a one-line argparse, one error boundary, atomic writes (re-exported
from :mod:`simulator.files` and :mod:`simulator.file_sets`).

Bad input is a :class:`PlannerError`: the boundary prints it as one line on stderr and exits 2;
outputs are written beside their target and renamed into place, so a failure never leaves a
half-written or half-replaced file (or set of files) behind.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import threading
import warnings
from typing import Callable

from simulator.errors import PlannerError, PlannerWarning
from simulator.runtime import keep_freed_memory
from simulator.cli.launch import interrupted_line, launch  # noqa: F401 (API)
from simulator.file_sets import write_files_atomically
from simulator.files import check_output_dir, check_output_file, write_atomically

__all__ = ["OneLineParser", "run_cli", "command", "say_written", "add_save_scenario_arg", "check_save_scenario",
           "save_scenario", "command_line", "one_line", "check_output_dir", "check_output_file", "write_atomically",
           "write_files_atomically", "path_given", "add_dtype_args", "dtype_overrides", "dtypes_text", "add_setting_args",
           "setting_overrides", "blame_flag", "load_with_flags", "Terminated", "signals_as_exceptions", "launch"]


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a usage error is one line on stderr and exit code 2."""

    def error(self, message):
        self.exit(2, f"error: {message} (see --help)\n")


def path_given(text: str) -> str:
    """argparse type of an output path flag: an empty one is refused (the commands read '' as the flag left
    out, so --output '' would print to stdout where a file was asked for)."""
    if not text:
        raise argparse.ArgumentTypeError("empty; give a path, or leave the flag out")
    if text == "-":  # the usual spelling of stdout elsewhere; here it would be a file named '-'
        raise argparse.ArgumentTypeError("'-' is not stdout here; leave the flag out to print to stdout (./- names"
                                         " a file '-')")
    return text


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


class Terminated(BaseException):
    """SIGTERM or SIGHUP, raised in the main thread so that every ``finally`` and worker pool cleans up
    (a BaseException: no ``except Exception`` swallows it), as KeyboardInterrupt is for SIGINT."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def _raise_terminated(signum, frame):
    raise Terminated(signum)


@contextlib.contextmanager
def signals_as_exceptions():
    """SIGTERM / SIGHUP raise :class:`Terminated` (SIGINT raises KeyboardInterrupt) inside the block; the
    previous handlers come back after it. Only the main thread can set handlers; elsewhere nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    wanted = {signal.SIGTERM: _raise_terminated, signal.SIGHUP: _raise_terminated,
              signal.SIGINT: signal.default_int_handler}
    old = {}
    for signum, handler in wanted.items():
        if signal.getsignal(signum) == signal.SIG_IGN:
            continue  # ignored by whoever started us (nohup: SIGHUP): stays ignored
        old[signum] = signal.signal(signum, handler)
    try:
        yield
    finally:
        for signum, handler in old.items():
            signal.signal(signum, handler)


def run_cli(body: Callable[[], int | None], quiet: bool = False) -> int:
    """Run a command's body: PlannerError -> one line on stderr, exit 2; a closed pipe is not an error;
    Ctrl-C (SIGINT) -> one line, exit 130; SIGTERM / SIGHUP -> one line, exit 128 + the signal (143, 129).

    Inputs accepted with a caveat (PlannerWarning) print as one 'warning: ...' line each, once, on
    stderr (never into the command's output); ``quiet``: not at all (errors still print).
    """
    with warnings.catch_warnings(), signals_as_exceptions():
        warnings.simplefilter("always", PlannerWarning)
        warnings.showwarning = _warning_printer(quiet)
        try:
            return body() or 0
        except PlannerError as err:
            print(f"error: {one_line(err)}", file=sys.stderr)
            return 2
        except BrokenPipeError:
            return 0
        except KeyboardInterrupt:
            print(interrupted_line(signal.SIGINT), file=sys.stderr)
            return 128 + signal.SIGINT
        except Terminated as stop:
            print(interrupted_line(stop.signum), file=sys.stderr)
            return 128 + stop.signum


def command(build_parser: Callable[[], argparse.ArgumentParser], body: Callable[[argparse.Namespace], int | None]):
    """A CLI's ``main(argv)``: parse (a usage error is one line, exit 2), then run ``body`` inside the
    error boundary of :func:`run_cli`. Every command gets ``--quiet`` (no 'warning:' lines)."""
    def main(argv: list[str] | None = None) -> int:
        keep_freed_memory()  # a planner program: freed grid temporaries stay in the heap (simulator/runtime.py)
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
    p.add_argument(SAVE_FLAG, metavar="FILE", type=path_given, help="also write what this command ran (flags folded in) as a commented"
                   " TOML; given back as the scenario (a sweep: as the sweep file) it gives the same answer")


def check_save_scenario(args: argparse.Namespace, report_files=()) -> None:
    """Refuse, before any work: an unwritable --save-scenario (one line naming the flag); one that names the
    --output file or one of ``report_files`` (the scenario, written last, would replace the answer); and an
    --output or --save-scenario that names a file the command reads (:func:`check_output_spares_inputs`)."""
    output = getattr(args, "output", None)
    outputs = [("--output", output)] * bool(output) + [("--output-dir", p) for p in report_files]
    for flag, path in outputs:
        check_output_spares_inputs(args, flag, path)
    if getattr(args, "save_scenario", None):
        check_output_file(args.save_scenario, SAVE_FLAG)
        for flag, path in outputs:
            if _same_file(path, args.save_scenario):
                raise PlannerError(f"{SAVE_FLAG} {args.save_scenario}: the same file as {flag} {path}; give the"
                                   " scenario another name")
        # the scenario it was given may be updated in place (what is saved reads back as the same run)
        check_output_spares_inputs(args, SAVE_FLAG, args.save_scenario, spare=("scenario", "spec"))


# the arguments that name files a command reads (predict, serve, size, sweep, calibration.fit_deployment)
INPUT_ARGS = ("scenario", "spec", "measured", "acceptance", "calibration", "deployment", "model", "hardware",
              "draft_model", "corpus", "raw")


def check_output_spares_inputs(args: argparse.Namespace, flag: str, path, spare=()) -> None:
    """Refuse an output that would replace a file the command reads (its scenario, its measured rows): the
    input would be lost, replaced by the report. ``spare``: input arguments an output may replace."""
    from simulator.files import output_target
    through, target = output_target(path, flag)
    if through or not os.path.isfile(target):
        return
    for dest in INPUT_ARGS:
        value = getattr(args, dest, None)
        for given in value if isinstance(value, (list, tuple)) else [value]:
            if dest in spare or not isinstance(given, (str, os.PathLike)):
                continue
            read = given if os.path.isfile(given) else _named_file(dest, str(given))
            if read is not None and os.path.samefile(target, read):
                named = {"spec": "the sweep file", "raw": "the raw samples"}.get(dest, f"--{dest.replace('_', '-')}")
                fix = "choose another directory" if flag == "--output-dir" else "give the output another name"
                raise PlannerError(f"{flag} {path}: the same file as {named} {given}, which this command reads; {fix}")


def _named_file(dest: str, name: str):
    """The file a bundled name reads (``--scenario llama-3.1-8b-h100``, ``--hardware h100-sxm``), else None."""
    from simulator.specs.hardware import HARDWARE_DIR
    from simulator.specs.models import MODELS_DIR
    from simulator.specs.scenario import SCENARIO_DIR
    folder, suffix = {"scenario": (SCENARIO_DIR, ".toml"), "hardware": (HARDWARE_DIR, ".toml"),
                      "model": (MODELS_DIR, ".json")}.get(dest, (None, ""))
    path = folder / f"{name}{suffix}" if folder is not None and name and "/" not in name else None
    return path if path is not None and path.is_file() else None


def _same_file(a, b) -> bool:
    """Whether two output paths replace the same file (a device or a FIFO, written through, is never 'the same':
    both writes reach it)."""
    from simulator.files import output_target
    (through_a, path_a), (through_b, path_b) = output_target(a), output_target(b, SAVE_FLAG)
    return not (through_a or through_b) and os.path.realpath(path_a) == os.path.realpath(path_b)


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


def blame_flag(err: PlannerError, build: Callable[..., object], overrides: dict, keep=("model", "hardware")) -> PlannerError:
    """``err`` (a scenario built with flag overrides was refused) said of the flag whose value alone gives
    the same refusal: '--k-max -1: K must be >= 0 ...' rather than the scenario file's name. ``build``:
    overrides -> scenario; ``keep``: overrides every build needs (a scenario made of flags alone). Asked
    only on the error path; ``err`` itself when the scenario is refused without the flags, or when no
    single flag gives that refusal (a clash of two flags is the scenario's message to give)."""
    from simulator.specs.settings import BY_NAME

    def bare(text: str) -> str:
        origin, _, rest = text.partition(": ")
        return rest if rest and (origin.endswith(".toml") or origin == "flags") else text

    given = {n: v for n, v in overrides.items() if v is not None}
    base = {n: v for n, v in given.items() if n in keep}
    rest = {n: v for n, v in given.items() if n not in keep and n in BY_NAME and BY_NAME[n].flag}
    if not rest:
        return err
    try:
        build(**base)
    except PlannerError:
        return err
    for name, value in rest.items():
        try:
            build(**base, **{name: value})
        except PlannerError as alone:
            text, flag = bare(str(alone)), BY_NAME[name].flag
            if text != bare(str(err)) or text.startswith(flag) or (str(value) and text.startswith(str(value))):
                continue  # another refusal, or one that names what is wrong already
            return PlannerError(f"{flag} {value}: {text}")
    return err


def load_with_flags(path, **overrides):
    """load_scenario(path, **overrides), a refusal said of the flag that causes it (:func:`blame_flag`)."""
    from simulator.specs.scenario import load_scenario
    try:
        return load_scenario(path, **overrides)
    except PlannerError as err:
        raise blame_flag(err, lambda **o: load_scenario(path, **o), overrides, keep=()) from None


DTYPE_SETTINGS = ("dtype", "act_dtype", "kv_dtype", "attention_dtype")


def add_dtype_args(p: argparse.ArgumentParser) -> None:
    """The precision flags, named and meant the same in every command (predict, serve, size):
    weights, activations, KV cache, attention projections; each overrides the scenario's [precision] key."""
    add_setting_args(p, *DTYPE_SETTINGS)


def dtype_overrides(args: argparse.Namespace) -> dict:
    """The scenario overrides of :func:`add_dtype_args` (None: keep the scenario's)."""
    return setting_overrides(args, *DTYPE_SETTINGS)


def dtypes_text(sc) -> str:
    """'weights nvfp4 (experts mxfp4, attention bf16), activations bf16, KV fp8': what every header prints."""
    dep = sc.deployment
    experts = dep.expert_dtype_for(sc.model) if sc.model.is_moe else None
    apart = [f"experts {experts}"] if experts and experts != dep.weight_dtype else []
    apart += [f"attention {a}"] if (a := dep.attention_label(sc.model)) else []
    return (f"weights {dep.weight_dtype}" + (f" ({', '.join(apart)})" if apart else "")
            + f", activations {dep.act_dtype}, KV {dep.kv_dtype}")
