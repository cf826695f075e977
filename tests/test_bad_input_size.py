"""Bad input to ``python -m simulator.size``: hostile flags and output folders are refused with one
'error:' line and exit 2, nothing changed on disk (the corpus and its checks: tests/bad_input_corpus.py);
a run whose second report cannot be written replaces none of them.
"""
from __future__ import annotations

import os
import stat

import pytest

from bad_input_corpus import check_cli_refuses, run_cli

SZ = "simulator.cli.size"
# (id, module, argv) with {fx} standing for the fixture folder; every refusal comes before the (long) search
CLI_CASES = [
    ("size-output-dir-is-file", SZ, ["--scenario", "sizing-dense-command-a", "--output-dir", "{fx}/a-file.txt"]),
    ("size-output-dir-under-file", SZ, ["--scenario", "sizing-dense-command-a", "--output-dir", "{fx}/a-file.txt/r"]),
    ("size-output-dir-proc", SZ, ["--scenario", "sizing-dense-command-a", "--output-dir", "/proc/dsd-reports"]),
    ("size-workers-zero", SZ, ["--scenario", "sizing-dense-command-a", "--workers", "0"]),
    ("size-rate-negative", SZ, ["--scenario", "sizing-dense-command-a", "--rate", "-1"]),
    ("size-tp-text", SZ, ["--scenario", "sizing-dense-command-a", "--tp", "x,y"]),
    ("size-candidate-prefix", SZ, ["--scenario", "sizing-dense-command-a", "--candidates", "h100"]),
    ("size-scenario-missing", SZ, ["--scenario", "{fx}/no-such.toml"]),
    ("size-no-source", SZ, []),
]


@pytest.mark.parametrize("case_id,module,argv", CLI_CASES, ids=[c[0] for c in CLI_CASES])
def test_cli_refuses_with_one_line(fx, case_id, module, argv):
    check_cli_refuses(fx, case_id, module, argv)


def test_size_writes_its_reports_together(tmp_path, monkeypatch):
    """A sizing run whose second report cannot be written replaces none of them."""
    import simulator.sizing as sizing
    import simulator.sizing.report as report
    from simulator.cli import size as size_cli

    class Res:  # what the renderers and the CLI read of a SizingResult
        class scenario:
            name = "demo"
        message, elapsed_s = "ok", 0.0

    monkeypatch.setattr(sizing, "size", lambda *a, **k: Res())
    monkeypatch.setattr(report, "render_html", lambda res: "<p>new</p>")
    monkeypatch.setattr(report, "render_markdown", lambda res: "new\n")
    (tmp_path / "demo.html").write_text("<p>old</p>")
    os.chmod(tmp_path / "demo.html", 0o640)
    (tmp_path / "demo.md").mkdir()
    rc, err = run_cli("simulator.cli.size", ["--scenario", "sizing-dense-command-a", "--output-dir", str(tmp_path)])
    assert rc == 2 and "demo.md" in err
    assert (tmp_path / "demo.html").read_text() == "<p>old</p>"
    (tmp_path / "demo.md").rmdir()
    rc, err = run_cli("simulator.cli.size", ["--scenario", "sizing-dense-command-a", "--output-dir", str(tmp_path)])
    assert rc == 0, err
    assert (tmp_path / "demo.html").read_text() == "<p>new</p>" and (tmp_path / "demo.md").read_text() == "new\n"
    assert stat.S_IMODE((tmp_path / "demo.html").stat().st_mode) == 0o640


@pytest.mark.parametrize("exchange", [True, False], ids=["one-exchange", "renames"])
def test_a_report_set_of_another_format_replaces_the_older_set(tmp_path, monkeypatch, exchange):
    """--format markdown after an --format html run: the older demo.html would disagree with the new
    demo.md, so it leaves when the new set appears; files the command did not write stay."""
    import simulator.file_sets as file_sets
    import simulator.sizing as sizing
    import simulator.sizing.report as report

    class Res:
        class scenario:
            name = "demo"
        message, elapsed_s = "ok", 0.0

    real_html, real_md = report._html_head, report._markdown_title  # the heads the real renderers write
    monkeypatch.setattr(sizing, "size", lambda *a, **k: Res())
    monkeypatch.setattr(report, "render_html", lambda res: real_html(res.scenario.name) + "old</html>")
    monkeypatch.setattr(report, "render_markdown", lambda res: real_md(res.scenario.name) + "\n\nnew\n")
    if not exchange:
        def refuse(*a):
            raise file_sets._NotExchangeable
        monkeypatch.setattr(file_sets, "_publish_by_exchange", refuse)
    args = ["--scenario", "sizing-dense-command-a", "--output-dir", str(tmp_path)]
    assert run_cli("simulator.cli.size", args + ["--format", "html"])[0] == 0
    (tmp_path / "demo.json").write_text('{"scenario": "demo", "mine": true}\n')  # the user's, not a report
    (tmp_path / "other.html").write_text(real_html("other") + "</html>")  # another scenario's report
    rc, err = run_cli("simulator.cli.size", args + ["--format", "markdown"])
    assert rc == 0, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["demo.json", "demo.md", "other.html"]  # before: demo.html too
    assert (tmp_path / "demo.md").read_text().endswith("new\n") and "removed" in err and "demo.html" in err
    (tmp_path / "demo.html").write_text("<p>my own page</p>")  # a user's file of a report's name stays
    assert run_cli("simulator.cli.size", args + ["--format", "markdown"])[0] == 0
    assert (tmp_path / "demo.html").read_text() == "<p>my own page</p>"
