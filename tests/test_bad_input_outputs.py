"""Outputs are written all or nothing: a multi-file write that cannot replace every target replaces
none, and a replaced file keeps its mode (a new one gets 0644)."""
from __future__ import annotations

import os
import stat

import pytest

from simulator.errors import PlannerError


def test_multi_file_output_is_all_or_nothing_and_keeps_modes(tmp_path):
    from simulator.cli.common import write_files_atomically

    (tmp_path / "a.md").write_text("old a\n")
    os.chmod(tmp_path / "a.md", 0o600)
    (tmp_path / "b.md").mkdir()  # the second target cannot be replaced: nothing may be
    with pytest.raises(PlannerError):
        write_files_atomically(tmp_path, {"a.md": "new a\n", "b.md": "new b\n"})
    assert (tmp_path / "a.md").read_text() == "old a\n"
    (tmp_path / "b.md").rmdir()
    written = write_files_atomically(tmp_path, {"a.md": "new a\n", "b.md": b"\x89PNG"})
    assert [p.name for p in written] == ["a.md", "b.md"]
    assert (tmp_path / "a.md").read_text() == "new a\n"
    assert stat.S_IMODE((tmp_path / "a.md").stat().st_mode) == 0o600  # replaced file keeps its mode
    assert stat.S_IMODE((tmp_path / "b.md").stat().st_mode) == 0o644  # new file: 0644, not mkstemp's 0600
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no staging left behind


def test_single_output_keeps_mode(tmp_path):
    from simulator.cli.common import write_atomically

    target = tmp_path / "k.json"
    target.write_text("old")
    os.chmod(target, 0o664)
    write_atomically(target, "new")
    assert target.read_text() == "new" and stat.S_IMODE(target.stat().st_mode) == 0o664
    fresh = tmp_path / "fresh.json"
    write_atomically(fresh, "x")
    assert stat.S_IMODE(fresh.stat().st_mode) == 0o644
