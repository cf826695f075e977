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

__all__ = ["OneLineParser", "run_cli", "command", "say_written", "one_line", "check_output_dir", "check_output_file", "write_atomically",
           "write_files_atomically"]


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
        return run_cli(lambda: body(args), quiet=args.quiet)
    return main


def say_written(paths) -> None:
    """One 'wrote PATH' line on stderr per file written."""
    for path in paths:
        print(f"wrote {path}", file=sys.stderr)

