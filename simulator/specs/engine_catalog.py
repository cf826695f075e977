"""The engine catalog: which profiles exist (``simulator/data/engines/<name>-<version>.toml``), which releases
each engine published (``simulator/data/engine_releases.toml``), and the version rule that picks the profile
pricing a release that has none of its own (docs/engines.md).
"""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from simulator.errors import PlannerError
from simulator.files import read_toml_file
from simulator.specs.versions import parse_version, same_release, version_key

ENGINES_DIR = Path(__file__).resolve().parent.parent / "data" / "engines"
# which releases --engine-version accepts per engine, and the releases each engine published
RELEASES_FILE = ENGINES_DIR.parent / "engine_releases.toml"


def split_key(key: str) -> tuple[str, str]:
    """'vllm-0.11.0' -> ('vllm', '0.11.0'), 'gpt-fast-2024' -> ('gpt-fast', '2024'); a profile without a
    version in its file name ('ideal') -> ('ideal', '')."""
    name, _, version = key.rpartition("-")
    if not name or not version[:1].isdigit():
        return key, ""
    return name, version


@lru_cache(maxsize=None)
def list_engines() -> tuple[str, ...]:
    """Catalog keys, ``name-version``, oldest to newest per engine."""
    keys = [p.stem for p in ENGINES_DIR.glob("*.toml")]
    return tuple(sorted(keys, key=lambda k: (split_key(k)[0], version_key(split_key(k)[1]))))


def engine_names() -> tuple[str, ...]:
    return tuple(dict.fromkeys(split_key(k)[0] for k in list_engines()))


def engine_versions(name: str) -> tuple[str, ...]:
    return tuple(split_key(k)[1] for k in list_engines() if split_key(k)[0] == name)


@lru_cache(maxsize=None)
def engine_releases() -> dict:
    """simulator/data/engine_releases.toml: per engine, ``accepts_from`` and ``releases``."""
    return read_toml_file(RELEASES_FILE, "engine releases")


def release_distance(a: str, b: str) -> tuple[int, int, int]:
    """How far apart two releases are: (major lines, minor lines, patch releases), each counted only
    within the line above it (0.9.2 and 0.8.5 are one minor line apart, whatever their patches)."""
    x, y = version_key(a).head(3), version_key(b).head(3)
    major, minor, patch = (abs(p - q) for p, q in zip(x, y))
    return (major, 0, 0) if major else (0, minor, 0) if minor else (0, 0, patch)


def nearest_profile(name: str, version: str) -> str:
    """The version rule: the profile that prices ``version`` of engine ``name``. Its own profile where
    one exists (0.11 is 0.11.0); else the profile nearest in release lines (major, then minor, then
    patch within the line); at equal distance the older profile, whose code the release inherits
    (0.9.x sits between 0.8.5 and 0.10.2 and gets 0.8.5), and of older ones the newest."""
    versions = [v for v in engine_versions(name) if v]  # oldest to newest
    own = next((v for v in versions if same_release(v, version)), None)
    if own is not None or not versions:
        return own or ""
    asked = version_key(version)

    def rank(i_v):  # nearest line, then older, then the closest release of them (0.4.5 -> 0.4.4.post2, not 0.4.4)
        i, v = i_v
        newer = version_key(v) > asked
        return release_distance(v, version), newer, i if newer else -i
    return min(enumerate(versions), key=rank)[1]


def draft_release_ranges(name: str, method: str) -> list | None:
    """The [first, last] release ranges of engine ``name`` that run draft method ``method`` ("" last: to the newest),
    where ``engine_releases.toml`` records them ([<engine>.draft_releases]); None where it records nothing."""
    ranges = engine_releases().get(name, {}).get("draft_releases", {}).get(method)
    return None if ranges is None else [tuple(r) for r in ranges]


def research_draft_engine(method: str) -> dict | None:
    """For a draft method no serving engine runs, the engine profile of the research code that does:
    ``{"engine": name, "code": what runs it}`` (engine_releases.toml [research_drafts]); None for any other."""
    return engine_releases().get("research_drafts", {}).get(method)


def draft_releases_text(method: str) -> str:
    """Which releases of each engine run ``method``, where recorded: 'vllm >= 0.8.5; sglang >= 0.4.4.post2'
    ('...; runs on gpt-fast (research code)' where only a research engine does)."""
    parts = []
    for name in engine_releases():
        ranges = draft_release_ranges(name, method)
        if ranges is not None:
            spans = [f">= {a}" if not b else f"{a}-{b}" for a, b in ranges]
            parts.append(f"{name} {', '.join(spans) if spans else 'none'}")
    research = research_draft_engine(method)
    if research:
        parts.append(f"runs on {research['engine']} (research code)")
    return "; ".join(parts) or "not recorded for any engine"


def release_running(name: str, version: str, method: str) -> str | None:
    """``version`` where it runs ``method`` (or nothing is recorded), else the next release that does; None where
    none does from ``version`` on. A published run of the method cannot have used a release that does not run it;
    a deployment asking for one is refused."""
    ranges = draft_release_ranges(name, method)
    if ranges is None or not version:
        return version
    asked = version_key(version)
    for first, last in ranges:
        if asked < version_key(first):
            return first
        if not last or asked <= version_key(last):
            return version
    return None


def resolve_release(name: str, version: str) -> tuple[str, str]:
    """(profile version, note) for a release of ``name``: the note says which release the profile
    prices in its stead and how far apart they are ('' when the profile is the release's own). A
    version the engine does not accept (before its ``accepts_from`` line, more than one minor line past
    its newest profile, or any other version of an engine without a release range) is refused in one
    line that names the nearest profile."""
    versions = engine_versions(name)
    if not any(versions):  # a profile without versions ('ideal')
        return "", ""
    parsed = parse_version(version, f"--engine-version / [engine] version for {name}")
    nearest = nearest_profile(name, version)
    if same_release(nearest, version):
        return nearest, ""
    spec = engine_releases().get(name)
    newest = versions[-1]
    too_old = spec is None or parsed.head(2) < version_key(spec["accepts_from"]).head(2)
    too_new = parsed > version_key(newest) and release_distance(newest, version) > (0, 1, 0)
    if too_old or too_new:
        accepted = (f"accepts releases from {spec['accepts_from']} to one minor line past {newest}" if spec
                    else "has profiles only for")
        raise PlannerError(f"engine {name} {accepted} ({', '.join(v for v in versions if v)}), not '{version}';"
                           f" the nearest profile is {name}-{nearest}: pass --engine-version {nearest} to use it")
    lines = release_distance(nearest, version)
    way = "newer" if version_key(nearest) > parsed else "older"
    far = next((f"{n} {what}{'s' if n > 1 else ''} {way}" for n, what in zip(lines, ("major line", "minor line",
                "patch release")) if n), "same release line")
    known = "" if not spec or not spec["releases"] or any(same_release(r, version) for r in spec["releases"]) else \
        f"; '{version}' is not among {name}'s published releases ({RELEASES_FILE.name})"
    return nearest, (f"{name} {version}: no profile of its own, priced with {name}-{nearest} (nearest profile,"
                     f" {far}; docs/engines.md){known}")
