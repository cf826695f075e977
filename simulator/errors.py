"""User-facing errors: one clear line, exit code 2 at the CLI boundary."""
from __future__ import annotations

import difflib
from typing import Iterable


class PlannerError(ValueError):
    """Bad input from the user (unknown name, malformed file, value out of range).

    The CLIs print ``str(err)`` on one line and exit with code 2.
    """


class PlannerWarning(UserWarning):
    """An input accepted with a caveat (e.g. a context beyond the model's trained length, explicitly
    allowed). The CLIs print each as one 'warning: ...' line on stderr; the dashboard shows it."""


def did_you_mean(name: str, choices: Iterable[str]) -> str:
    """' (did you mean 'x'?)' when a close match exists, else a list of valid names.

    Names that start with what was typed come first ('h100' -> 'h100-pcie' or 'h100-sxm', never
    'h200'): a prefix is a more specific intent than a one-character spelling difference.
    """
    choices = sorted(choices)
    prefixed = [c for c in choices if c.lower().startswith(name.lower())] if name else []
    if len(prefixed) == 1:
        return f" (did you mean '{prefixed[0]}'?)"
    if prefixed:
        return f" (did you mean one of: {', '.join(prefixed)}?)"
    close = difflib.get_close_matches(name, choices, n=1, cutoff=0.5)
    if close:
        return f" (did you mean '{close[0]}'?)"
    return f" (known: {', '.join(choices)})"
