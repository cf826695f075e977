"""One table of settings (simulator/specs/settings.py): the schema, the override map, the flags and the
defaults every reader falls back on are the table's, so a setting cannot mean two things in two places."""
from __future__ import annotations

import argparse

import numpy as np
import pytest

from dashboard.state import controls_from_scenario
from simulator.cli.predict_args import SETTING_FLAGS, build_parser
from simulator.errors import PlannerError
from simulator.specs import settings
from simulator.specs.scenario import SCHEMA, apply_overrides, build_scenario
from simulator.specs.values import parse_batch_sizes

MINIMAL = {"model": {"name": "llama-3.1-8b"}, "hardware": {"name": "h100-sxm"}}


def test_every_schema_key_and_override_is_one_row():
    keys = [(s.section, s.key) for s in settings.SETTINGS if s.key is not None]
    assert len(keys) == len(set(keys)), "a (section, key) written twice"
    names = [n for s in settings.SETTINGS for n in ((s.name,) if s.name else ()) + s.aliases]
    assert len(names) == len(set(names)), "an override name written twice"
    assert set(SCHEMA) == {s.section for s in settings.SETTINGS if s.section not in settings.OPEN_SECTIONS}
    for name, (section, key) in settings.OVERRIDE_KEYS.items():
        assert key is None or section in settings.OPEN_SECTIONS or key in SCHEMA[section], name


def test_predict_flags_are_the_tables():
    """Every predict flag that sets the scenario is a table row: same flag, type and help, the help followed by
    where the value lives in a scenario file (and the table's default)."""
    parser = build_parser()
    actions = {a.option_strings[0]: a for a in parser._actions if a.option_strings}
    for name in SETTING_FLAGS:
        s = settings.BY_NAME[name]
        action = actions[s.flag]
        switch = s.arg_type is bool and action.nargs == 0  # an on/off flag (store_true) reads no value
        assert action.dest == s.dest and (switch or action.type is s.arg_type) and action.help.startswith(s.help_text())
        if s.key is not None:
            assert f"[TOML: [{s.section}] {s.key}" in action.help, s.flag
    assert "[TOML: [workload] k_max; default 8]" in actions["--k-max"].help  # hand: the table's row
    flagged = {s.flag for s in settings.SETTINGS if s.flag}
    assert flagged <= set(actions), flagged - set(actions)


def test_a_flag_reaches_its_toml_key():
    """--tp 4 (override tp) lands in [hardware] tp; --allreduce-busbw 18.6 (GB/s) as 18.6e9 bytes/s."""
    args = build_parser().parse_args(["--tp", "4", "--allreduce-busbw", "18.6", "--schedule-tolerance", "2%",
                                      "--draft-model", "yuhuili/EAGLE-LLaMA3.1-Instruct-8B"])
    from simulator.cli.common import setting_overrides
    over = setting_overrides(args, *SETTING_FLAGS)
    raw = apply_overrides(MINIMAL, over)
    assert raw["hardware"]["tp"] == 4
    assert raw["hardware"]["interconnect_bandwidth_bytes_per_s"] == pytest.approx(18.6e9)
    assert raw["workload"]["schedule_tolerance"] == pytest.approx(0.02)
    assert raw["draft"]["checkpoint"] == "yuhuili/EAGLE-LLaMA3.1-Instruct-8B"


@pytest.mark.parametrize("argv", [["--allreduce-busbw", "0"], ["--schedule-tolerance", "60%"], ["--max-num-seqs", "0"]])
def test_a_bad_flag_value_names_the_flag(argv):
    from simulator.cli.common import setting_overrides
    args = build_parser().parse_args(argv)
    with pytest.raises(PlannerError, match=argv[0]):
        setting_overrides(args, *SETTING_FLAGS)


def test_a_scenario_without_the_keys_gets_the_tables_defaults():
    sc = build_scenario(MINIMAL)
    d = settings.default
    assert sc.context_len == d("workload", "context_len") == 2048
    assert sc.k_max == d("workload", "k_max") and sc.fixed_k == d("workload", "fixed_k")
    assert np.array_equal(sc.batch_sizes, parse_batch_sizes(d("workload", "batch_sizes")))
    assert sc.schedule_tolerance == d("workload", "schedule_tolerance")
    assert sc.deployment.tp == d("hardware", "tp")
    assert (sc.deployment.weight_dtype, sc.deployment.act_dtype, sc.deployment.kv_dtype) == \
        (d("precision", "weights"), d("precision", "activations"), d("precision", "kv_cache"))
    assert sc.deployment.memory_utilization == d("workload", "memory_utilization")
    assert sc.draft.method == d("draft", "method")


def test_the_dashboard_opens_a_bare_scenario_at_the_same_defaults():
    c = controls_from_scenario(MINIMAL)
    d = settings.default
    assert (c["context_len"], c["k_max"], c["fixed_k"], c["tp"]) == \
        (d("workload", "context_len"), d("workload", "k_max"), d("workload", "fixed_k"), d("hardware", "tp"))
    assert c["bs_range"] == (1, int(parse_batch_sizes(d("workload", "batch_sizes")).max()))
    assert (c["w_dtype"], c["a_dtype"], c["kv_dtype"], c["draft_method"]) == \
        (d("precision", "weights"), d("precision", "activations"), d("precision", "kv_cache"), d("draft", "method"))


def test_serve_and_size_share_the_acceptance_flag():
    from simulator.cli import serve, size
    for parser in (serve.build_parser(), size.build_parser()):
        assert isinstance(parser, argparse.ArgumentParser)
        help_ = {a.option_strings[0]: a.help for a in parser._actions if a.option_strings}
        assert help_["--acceptance"] == settings.BY_NAME["acceptance"].help_text()
