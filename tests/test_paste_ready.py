"""Paste-ready engine files (simulator/plan/paste.py): the draft checkpoint in the vLLM file and the
serve line with every flag the schedule assumes, judged by vLLM 0.33.0's own config code from its
released wheel (tests/engine_code_vllm_config.py; cached in ~/.cache/dsd-planner like engine_code).
"""
from __future__ import annotations

import contextlib
import io
import json
import re
import shlex

import pytest

from simulator.cli.predict import main as predict_main
from simulator.plan.paste import PLACEHOLDER

EAGLE3 = "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"
BASE = ["--model", "llama-3.1-8b", "--hardware", "h100-sxm", "--draft", "eagle3", "--format", "vllm"]


def _predict(argv):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = predict_main(argv)
    assert rc == 0, err.getvalue()
    return json.loads(out.getvalue()), err.getvalue()


def _serve_line(err: str) -> list[str]:
    line = next(ln for ln in err.splitlines() if ln.startswith("use: "))
    return shlex.split(line[len("use: "):])


def _flag(argv: list[str], name: str):
    return argv[argv.index(name) + 1] if name in argv else None


def test_vllm_0330_accepts_the_printed_eagle3_config_with_the_draft_path():
    ev = pytest.importorskip("engine_code_vllm_config")
    payload, err = _predict(BASE + ["--batch-sizes", "1-2048", "--draft-model", EAGLE3])
    assert payload["model"] == EAGLE3 and payload["method"] == "eagle3"
    argv = _serve_line(err)
    assert argv[:3] == ["vllm", "serve", "meta-llama/Llama-3.1-8B-Instruct"]
    printed = json.loads(_flag(argv, "--speculative-config"))
    assert printed == payload  # the line carries the file as written
    assert ev.check_speculative_config(printed, argv[2], "0.33.0") == {"method": "eagle3", "model": EAGLE3}
    # the same config without a model is what vLLM 0.33.0 refuses (why the file must carry one)
    with pytest.raises(ValueError, match="without speculative model"):
        ev.check_speculative_config({k: v for k, v in printed.items() if k != "model"}, argv[2], "0.33.0")


def test_memory_bound_plan_prints_max_num_seqs():
    payload, err = _predict(BASE + ["--batch-sizes", "1-2048", "--draft-model", EAGLE3])
    argv = _serve_line(err)
    # the largest batch size that fits is where the table ends (the export warns 'the table ends at N')
    ends = int(re.search(r"the table ends at (\d+)", err)[1])
    assert _flag(argv, "--max-num-seqs") == str(ends)
    assert max(r[1] for r in payload["num_speculative_tokens_per_batch_size"]) == ends
    _, err_small = _predict(BASE + ["--batch-sizes", "1-16", "--draft-model", EAGLE3])
    assert "--max-num-seqs" not in _serve_line(err_small)  # everything fits: the engine's own limit applies


def test_missing_checkpoint_gets_a_placeholder_the_engine_refuses_and_a_warning():
    payload, err = _predict(BASE + ["--batch-sizes", "1-16"])
    assert payload["model"] == PLACEHOLDER
    assert any(ln.startswith("warning:") and "--draft-model" in ln and "placeholder" in ln for ln in err.splitlines())
    # neither a Hugging Face repository id (huggingface_hub validate_repo_id: [\w.-]+ with one optional
    # 'namespace/') nor a path anyone has: the engine's model loading refuses it
    assert re.fullmatch(r"[\w.-]+(/[\w.-]+)?", PLACEHOLDER) is None


def test_draft_model_method_names_the_catalog_checkpoint():
    payload, _ = _predict(["--scenario", "default", "--batch-sizes", "1-8", "--format", "vllm"])
    # scenarios/default.toml drafts with the catalog llama-3.2-1b, whose config.json is
    # meta-llama/Llama-3.2-1B-Instruct (simulator/data/models/llama-3.2-1b.json _source)
    assert payload["method"] == "draft_model" and payload["model"] == "meta-llama/Llama-3.2-1B-Instruct"


def test_trtllm_and_sglang_carry_the_draft_checkpoint():
    from simulator.plan.api import predict
    p = predict(None, model="llama-3.1-8b", hardware="h100-sxm", draft="eagle3", draft_checkpoint=EAGLE3,
                batch_sizes="1-16")
    # TensorRT-LLM llm_args.py: Eagle3DecodingConfig (decoding_type 'Eagle3') refuses a missing
    # speculative_model ("Draft model must be provided for EAGLE")
    trt = p.export("trtllm").payload
    assert trt["decoding_type"] == "Eagle3" and trt["speculative_model"] == EAGLE3
    argv = shlex.split(p.export("sglang").how_to_use)
    assert _flag(argv, "--speculative-algorithm") == "EAGLE3" and _flag(argv, "--speculative-draft-model-path") == EAGLE3
    bare = predict(None, model="llama-3.1-8b", hardware="h100-sxm", draft="eagle3", batch_sizes="1-16")
    e = bare.export("trtllm")
    assert e.payload["speculative_model"] == PLACEHOLDER and any("placeholder" in w for w in e.warnings)
    ngram = predict(None, model="llama-3.1-8b", hardware="h100-sxm", draft="ngram", batch_sizes="1-16")
    assert "speculative_model" not in ngram.export("trtllm").payload  # n-gram loads no checkpoint


def test_sglang_line_raises_the_speculative_running_cap():
    # SGLang resets --max-running-requests to 48 with speculation (sglang 0.5.13 speculative_hook.py:282-283,
    # checked in tests/test_advice.py): a plan over B 1-128 must say 128, one over B 1-48 needs no flag
    from simulator.plan.api import predict
    kw = dict(model="llama-3.1-8b", hardware="h100-sxm", draft="eagle3", draft_checkpoint=EAGLE3, engine="sglang")
    argv = shlex.split(predict(None, batch_sizes="1-128", **kw).export("sglang").how_to_use)
    assert _flag(argv, "--max-running-requests") == "128"
    argv = shlex.split(predict(None, batch_sizes="1-48", **kw).export("sglang").how_to_use)
    assert "--max-running-requests" not in argv
