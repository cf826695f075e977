"""Release versions: the one parser and order of engine, export and table versions.

PEP 440's ordering for the forms engines publish (PEP 440, "Summary of permitted suffixes and
relative ordering"): ``1.0.dev1 < 1.0a1 < 1.0b1 < 1.0rc1 < 1.0 < 1.0.post1 < 1.0.1``; a pre-release
or post-release may carry a ``.devN`` of its own, which sorts before it. Trailing zeros of the release
do not count, so ``0.11`` and ``0.11.0`` are the same release. Local labels (``+cu121``) are ignored.
Calendar versions (``2024``) are one-part releases.
"""
from __future__ import annotations

import re
from typing import NamedTuple

from simulator.errors import PlannerError

_FORM = re.compile(
    r"v?(?P<release>\d+(?:\.\d+)*)"
    r"(?:[-_.]?(?P<pre>a|alpha|b|beta|c|rc|pre|preview)[-_.]?(?P<pre_n>\d+)?)?"
    r"(?:-(?P<post_implicit>\d+)|[-_.]?(?P<post>post|rev|r)[-_.]?(?P<post_n>\d+)?)?"
    r"(?:[-_.]?(?P<dev>dev)[-_.]?(?P<dev_n>\d+)?)?"
    r"(?:\+[a-z0-9]+(?:[-_.][a-z0-9]+)*)?", re.IGNORECASE)
_PHASE = {"a": 0, "alpha": 0, "b": 1, "beta": 1, "c": 2, "rc": 2, "pre": 2, "preview": 2}
DEV_ONLY, FINAL = -1, 3  # pre-release phase of "X.devN" (below alpha) and of a release (above rc)
NO_POST = -1
NO_DEV = (1, 0)  # sorts after every (0, N): a dev build comes before what it leads to


class Version(NamedTuple):
    """Ordered as a tuple: release, then pre-release phase, then post-release, then dev build."""
    release: tuple[int, ...]  # trailing zeros stripped
    pre: tuple[int, int]  # (phase, number): a 0, b 1, rc 2, release FINAL, dev-only DEV_ONLY
    post: int  # NO_POST, or the post-release number
    dev: tuple[int, int]  # (0, N) for .devN, NO_DEV otherwise

    def head(self, n: int) -> tuple[int, ...]:
        """The first ``n`` release fields, zero-padded: Version('1.3').head(3) == (1, 3, 0)."""
        return (self.release + (0,) * n)[:n]

    @property
    def is_rc(self) -> bool:
        return self.pre[0] == _PHASE["rc"]

    @property
    def is_dev(self) -> bool:
        return self.dev != NO_DEV


def parse_version(text, what: str = "version") -> Version:
    """'1.3.0rc8' -> release (1, 3), rc 8; '0.5.13.post1' -> (0, 5, 13), post 1; '0.11' == '0.11.0'.
    Not a version: PlannerError naming ``what`` (a flag or file)."""
    m = _FORM.fullmatch(str(text).strip())
    if not m:
        raise PlannerError(f"{what} '{text}': expected a version such as 0.33.0, 1.2.1 or 1.3.0rc8")
    release = tuple(int(x) for x in m["release"].split("."))
    while len(release) > 1 and release[-1] == 0:
        release = release[:-1]
    post_n = m["post_implicit"] or m["post_n"]
    post = int(post_n or 0) if (m["post"] or m["post_implicit"]) else NO_POST
    dev = (0, int(m["dev_n"] or 0)) if m["dev"] else NO_DEV
    if m["pre"]:
        pre = (_PHASE[m["pre"].lower()], int(m["pre_n"] or 0))
    elif dev != NO_DEV and post == NO_POST:
        pre = (DEV_ONLY, 0)
    else:
        pre = (FINAL, 0)
    return Version(release, pre, post, dev)


def version_key(text: str) -> Version:
    """Sort key: the parsed version (a profile without a version, '', sorts first)."""
    return Version((), (DEV_ONLY, 0), NO_POST, (0, 0)) if not str(text).strip() else parse_version(text)


def same_release(a: str, b: str) -> bool:
    """'0.11' and '0.11.0' name the same release; unparsable text matches only itself."""
    try:
        return version_key(a) == version_key(b)
    except PlannerError:
        return str(a).strip() == str(b).strip()
