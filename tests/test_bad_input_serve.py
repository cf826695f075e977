"""Bad input to ``python -m simulator.serve``: hostile flags and scenarios are refused with one 'error:'
line and exit 2, nothing changed on disk (the corpus and its checks: tests/bad_input_corpus.py).
"""
from __future__ import annotations

import pytest

from bad_input_corpus import check_cli_refuses

S = "simulator.cli.serve"
# (id, module, argv) with {fx} standing for the fixture folder
CLI_CASES = [
    ("serve-requests-1e12", S, ["--requests", "1000000000000"]),
    ("serve-requests-zero", S, ["--requests", "0"]),
    ("serve-seed-negative", S, ["--seed", "-1"]),
    ("serve-rate-nan", S, ["--rate", "nan"]),
    ("serve-rate-inf", S, ["--rate", "inf"]),
    ("serve-rate-negative", S, ["--rate", "-2"]),
    ("serve-concurrency-zero", S, ["--concurrency", "0"]),
    ("serve-concurrency-huge", S, ["--concurrency", "10000000000"]),
    ("serve-waves-text", S, ["--waves", "8,x"]),
    ("serve-waves-huge", S, ["--waves", "100000,100000"]),
    ("serve-max-seqs-zero", S, ["--max-num-seqs", "0"]),
    ("serve-policy-bogus", S, ["--policy", "greedy"]),
    ("serve-format-bogus", S, ["--format", "xml"]),
    ("serve-scenario-directory", S, ["--scenario", "{fx}/empty-dir"]),
    ("serve-scenario-nan", S, ["--scenario", "{fx}/scenarios/bandwidth-nan.toml"]),
    ("serve-two-loads", S, ["--rate", "1", "--concurrency", "2"]),
]


@pytest.mark.parametrize("case_id,module,argv", CLI_CASES, ids=[c[0] for c in CLI_CASES])
def test_cli_refuses_with_one_line(fx, case_id, module, argv):
    check_cli_refuses(fx, case_id, module, argv)
