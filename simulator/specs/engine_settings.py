"""Engine behaviours read from the engines' code, release by release (``simulator/data/engine_settings.toml``).

Each rule names a kind of behaviour, the engine and the releases that have it (``first`` up to ``before``), the
setting it concerns and the lines of the wheel that show it. The plan layer's advice (``simulator.plan.advice``)
turns them into "this setting costs goodput here" lines; the step model reads the one that changes what a step
costs (``dsd_k0``: a dynamic-K server's K = 0 entry still runs the drafter's extend pass).
"""
from __future__ import annotations

from dataclasses import replace
from functools import lru_cache
from pathlib import Path

from simulator.files import read_toml_file
from simulator.specs.engines import EngineProfile
from simulator.specs.versions import version_key

SETTINGS_FILE = Path(__file__).resolve().parent.parent / "data" / "engine_settings.toml"


@lru_cache(maxsize=None)
def load_rules(path: str = str(SETTINGS_FILE)) -> tuple[dict, ...]:
    return tuple(read_toml_file(Path(path), "engine settings").get("rule", []))


def rule_for(kind: str, engine: EngineProfile | None, rules=None, by_release: bool = False) -> dict | None:
    """The rule of this kind whose release range holds the engine profile's version (``by_release``: the release
    asked, which a profile of a nearby release may price); None if none does."""
    if engine is None or not engine.version:
        return None
    v = version_key(engine.release_asked if by_release else engine.version)
    for r in load_rules() if rules is None else rules:
        if r["kind"] == kind and r["engine"] == engine.name and version_key(r["first"]) <= v \
                and (not r["before"] or v < version_key(r["before"])):
            return r
    return None


def k0_runs_draft_extend(engine: EngineProfile | None) -> bool:
    """Whether a speculating server of this engine release, at a K = 0 entry of its dynamic-K table, still runs
    the drafter's extend pass over the step's tokens (vLLM from 0.24, SGLang from 0.5.14: keeping the draft's KV
    warm), so that K = 0 there is not plain decoding."""
    return rule_for("dsd_k0", engine) is not None


def drafts_table_max_rule(engine: EngineProfile | None, method: str, tree: bool, architectures, vendor: str) -> dict | None:
    """The ``dsd_drafts_max`` rule where this release's default model runner drafts the dynamic-K table's largest K
    at every step (vLLM's Model Runner V2 in 0.25-0.31, for the methods and architectures it takes by default);
    None where each batch size's K is drafted (EAGLE trees: not read, None)."""
    rule = rule_for("dsd_drafts_max", engine, by_release=True)
    if rule is None or tree or not (engine is not None and engine.supports_dynamic_k):
        return None
    arch = set(architectures)
    if vendor == "amd" and arch & set(rule["rocm_v1_architectures"]):
        return None
    takes = method in rule["methods"] and (not rule["architectures"] or bool(arch & set(rule["architectures"])))
    return rule if takes or method in rule["forced_methods"] else None


def fused_draft_decode_rule(engine: EngineProfile | None, method: str, tree: bool, attention: str,
                            gpu_architecture: str) -> dict | None:
    """The ``v2_fused_draft_decode`` rule where this release's default runner drafts with no host work between draft
    passes (vLLM's Model Runner V2 fused draft loop, from 0.32, over an attention backend that updates draft metadata
    in place); None elsewhere (EAGLE trees: not read)."""
    rule = rule_for("v2_fused_draft_decode", engine, by_release=True)
    if rule is None or tree:
        return None
    fits = method in rule["methods"] and attention in rule["attention"] and gpu_architecture in rule["gpu_architectures"]
    return rule if fits else None


def with_runner_facts(engine: EngineProfile, method: str, tree: bool, attention: str,
                      gpu_architecture: str) -> EngineProfile:
    """The engine profile as its default runner runs this draft: no per-draft-pass host time where the draft loop is
    one fused graph (:func:`fused_draft_decode_rule`), said in its label; the profile itself elsewhere."""
    if not engine.per_draft_pass_s or fused_draft_decode_rule(engine, method, tree, attention, gpu_architecture) is None:
        return engine
    return replace(engine, per_draft_pass_s=0.0,
                   runner_note="Model Runner V2: one fused draft-decode graph, no host work between draft passes")


def block_table_max_rule(engine: EngineProfile | None, method: str) -> dict | None:
    """The ``dsd_block_max`` rule where this release drafts a block drafter's whole block at the dynamic-K table's
    largest K at every step with K > 0 (vLLM from 0.32: DFlash, DSpark); None elsewhere."""
    rule = rule_for("dsd_block_max", engine, by_release=True)
    if rule is None or not (engine is not None and engine.supports_dynamic_k) or method not in rule["methods"]:
        return None
    return rule


def trt_schedule_stage1_rule(engine: EngineProfile | None, method: str) -> dict | None:
    """The ``trt_schedule_stage1`` rule where this TensorRT-LLM release's draft_len_schedule saves draft work only
    (two-model drafts: every step with K > 0 verifies the largest K) or does not run (one-model drafts); None
    elsewhere."""
    rule = rule_for("trt_schedule_stage1", engine, by_release=True)
    if rule is None or method not in rule["two_model_methods"] + rule["one_model_methods"]:
        return None
    return rule
