"""User-facing errors: one clear line, exit code 2 at the CLI boundary."""
from __future__ import annotations

import difflib
from typing import Iterable


class PlannerError(ValueError):
    """Bad input from the user (unknown name, malformed file, value out of range).

    The CLIs print ``str(err)`` on one line and exit with code 2.
    """


def did_you_mean(name: str, choices: Iterable[str]) -> str:
    """' (did you mean 'x'?)' when a close match exists, else a list of valid names."""
    choices = sorted(choices)
    close = difflib.get_close_matches(name, choices, n=1, cutoff=0.5)
    if close:
        return f" (did you mean '{close[0]}'?)"
    return f" (known: {', '.join(choices)})"
