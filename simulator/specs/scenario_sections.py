"""The scenario TOML's schema and the parsers of its sections (model, hardware, parallel layout,
draft, acceptance, workload), each validated with a message naming the file and the key.

:func:`simulator.specs.scenario.build_scenario` assembles a :class:`~simulator.specs.scenario.Scenario`
from them; every name here is also importable from :mod:`simulator.specs.scenario`.
"""
from __future__ import annotations

import contextlib
from dataclasses import replace
from pathlib import Path

from simulator.errors import PlannerError
from simulator.specs.acceptance import Acceptance, parse_acceptance, preset_for
from simulator.specs.acceptance_files import AcceptanceFile, read_acceptance_file
from simulator.specs.deployment import LAYOUTS, Deployment, check_deployment, make_deployment
from simulator.specs.drafts import DraftSpec, check_draft, parse_draft
from simulator.specs.hardware import Hardware, custom_hardware, load_hardware
from simulator.specs.models import ModelSpec, load_model
from simulator.specs.routing import Routing, check_reuse
from simulator.specs.settings import DECISION_QUANTILE, OPEN_SECTIONS, SCHEDULE_TOLERANCE, SCHEMA, default  # noqa: F401 (API)
from simulator.specs.tree_acceptance import check_rank_tail
from simulator.specs.values import check_table, parse_batch_sizes, parse_context_lens

REPO_ROOT = Path(__file__).resolve().parent.parent.parent


def repo_relative(path) -> str:
    """A path as a report shows it: relative to the project where it lies inside it (not this machine's layout)."""
    try:
        return str(Path(path).resolve().relative_to(REPO_ROOT))
    except (ValueError, OSError, TypeError):
        return str(path)

# raw-dict marker: acceptance was given as an override, so a deployment fit's measured rates do not replace it
ACCEPTANCE_GIVEN = "_acceptance_given"
# set by a caller that prices plain decoding only (the published corpus's plain rows): the draft is a placeholder,
# so whether the engine release runs it is not checked
PLAIN_ONLY = "_plain_only"
MAX_K = 32  # the largest draft length the planner prices (k_max, a fixed K, a measured run's k)


# Beyond this exponent a Zipf router sends every token to the same top-k experts to within 1e-9
# (2^-30 < 1e-9), and i^skew overflows float64 for i = 256 experts at skew ~ 128.
ZIPF_SKEW_MAX = 30.0


def _resolve_path(path: str, base_dir: str | None) -> str:
    p = Path(path)
    if p.is_absolute() or p.exists():
        return str(p)
    for base in (base_dir, REPO_ROOT):
        if base and (Path(base) / p).exists():
            return str(Path(base) / p)
    return str(p)


def check_section_tables(raw: dict, origin: str) -> None:
    """A section written as a value (``workload = 5``) or as an array of tables (``[[workload]]``): refused
    as such, before a flag's override is folded into it."""
    for section, table in raw.items():
        if (section in SCHEMA or section in OPEN_SECTIONS) and section and not isinstance(table, dict):
            shape = "an array of tables ([[...]])" if isinstance(table, list) else "a plain value, not a table"
            raise PlannerError(f"{origin}: [{section}] is {shape}; write it as one table: a [{section}] line,"
                               " then key = value lines")


def _check_sections(raw: dict, origin: str) -> None:
    """Unknown sections and keys, wrong types, NaN: refused before anything is resolved."""
    check_section_tables(raw, origin)
    check_table({k: v for k, v in raw.items() if not isinstance(v, dict)}, SCHEMA[""], origin, "")
    for section, table in raw.items():
        if not isinstance(table, dict) or section in OPEN_SECTIONS:
            continue
        if section not in SCHEMA:
            raise PlannerError(f"{origin}: unknown section [{section}]"
                               f" (known: {', '.join(sorted(set(SCHEMA) - {''} | set(OPEN_SECTIONS)))})")
        check_table(table, SCHEMA[section], origin, section)


def _model_and_hardware(raw: dict, get, origin: str, base_dir: str | None) -> tuple[ModelSpec, Hardware]:
    model_name = get("model", "name")
    if model_name is None:
        raise PlannerError(f"{origin}: missing [model] name (a catalog name or a config.json path)")
    model = load_model(_resolve_path(model_name, base_dir) if model_name.endswith(".json") else model_name)
    hw_name = get("hardware", "name")
    if hw_name is None:
        raise PlannerError(f"{origin}: missing [hardware] name (a catalog name such as h100-sxm)")
    if isinstance(hw_name, str) and not hw_name.strip():
        raise PlannerError(f"{origin}: [hardware] name is empty; give a catalog name such as h100-sxm, or the path"
                           " of a hardware TOML file")
    hardware = load_hardware(hw_name)
    hw_over = {k: float(v) for k, v in raw.get("hardware", {}).items() if k not in ("name", "tp", "ep", "layout", "dp")}
    if hw_over:
        hardware = custom_hardware(hardware, **hw_over, source=f"{hardware.source}; overridden: {', '.join(hw_over)}")
    return model, hardware


def default_weight_dtype(model: ModelSpec) -> str:
    """The weights' precision when none is given: the checkpoint's own (fp8 for DeepSeek-V3's published blocks),
    else the settings table's."""
    return model.checkpoint_weight_dtype or default("precision", "weights")


def _deployment(raw: dict, get, origin: str, model: ModelSpec) -> Deployment:
    routing_tbl = raw.get("routing", {})
    routing = Routing(kind=routing_tbl.get("kind", default("routing", "kind")), skew=float(routing_tbl.get("skew", default("routing", "skew"))),
                      probabilities=tuple(routing_tbl.get("probabilities", ())),
                      reuse=check_reuse(float(routing_tbl.get("reuse", default("routing", "reuse"))), f"{origin}: [routing] reuse"))
    if routing.kind == "zipf" and "skew" not in routing_tbl:
        raise PlannerError(f"{origin}: [routing] kind = 'zipf' needs a 'skew' exponent (e.g. 1.0)")
    if not 0 <= routing.skew <= ZIPF_SKEW_MAX:
        raise PlannerError(f"{origin}: [routing] skew = {routing.skew:g} is outside [0, {ZIPF_SKEW_MAX:g}]"
                           " (Zipf exponent: 0 is uniform, 1-2 is strongly skewed)")
    layout = get("hardware", "layout")
    if layout is not None and layout not in LAYOUTS:
        raise PlannerError(f"{origin}: [hardware] layout = '{layout}' is unknown (use one of {', '.join(LAYOUTS)})")
    deployment = make_deployment(
        tp=get("hardware", "tp", default("hardware", "tp")), ep=get("hardware", "ep"), layout=layout, dp=get("hardware", "dp"),
        weight_dtype=get("precision", "weights", default_weight_dtype(model)), act_dtype=get("precision", "activations", default("precision", "activations")),
        kv_dtype=get("precision", "kv_cache", default("precision", "kv_cache")), expert_dtype=get("precision", "experts"),
        attention_dtype=get("precision", "attention"),
        routing=routing, memory_utilization=float(get("workload", "memory_utilization", default("workload", "memory_utilization"))))
    try:
        check_deployment(model, deployment)
    except PlannerError as err:
        raise PlannerError(f"{origin}: {err}") from None
    return deployment


def _draft(get, origin: str, base_dir: str | None, model: ModelSpec, deployment: Deployment) -> DraftSpec:
    method = get("draft", "method", default("draft", "method"))
    if method == "model":
        name = get("draft", "model")
        if not name:
            raise PlannerError(f"{origin}: [draft] method = 'model' needs model = 'NAME' (a catalog model or config.json)")
        method = f"model:{_resolve_path(name, base_dir) if name.endswith('.json') else name}"
    draft = parse_draft(method)
    check_draft(draft, model, deployment)
    return draft


def _workload(get, origin: str, model: ModelSpec, allow_beyond: str | None = None) -> dict:
    """context_len, K range, batch sizes, context lengths, and the caveats allowed through (warnings).

    ``allow_beyond``: how the caller's front end allows a context beyond the model's trained length, as the
    refusal tells the user (the dashboard names its checkbox); None: the TOML key and the API's argument."""
    context_len = get("workload", "context_len", default("workload", "context_len"))
    if context_len < 1:
        raise PlannerError(f"{origin}: context_len must be >= 1, got {context_len}")
    warnings_: list[str] = []
    max_pos = model.max_position_embeddings
    beyond_ok = get("workload", "allow_context_beyond_model",
                    default("workload", "allow_context_beyond_model"))
    allow = allow_beyond or "set [workload] allow_context_beyond_model = true"
    if max_pos and context_len > max_pos:
        if not beyond_ok:
            raise PlannerError(f"{origin}: context_len={context_len} exceeds {model.name}'s max_position_embeddings"
                               f"={max_pos}; shorten it, or {allow}"
                               f"{'' if allow_beyond else ' (API: allow_long_context=True)'}"
                               " for a model served with RoPE scaling")
        warnings_.append(f"context_len={context_len} exceeds {model.name}'s max_position_embeddings={max_pos}"
                         " (allowed by allow_context_beyond_model: assumes the model is served with RoPE scaling)")
    # fixed_k left unset compares against the default K, or k_max where that is smaller (--k-max 1 alone is legal)
    k_max, fixed_k = get("workload", "k_max", default("workload", "k_max")), get("workload", "fixed_k")
    if fixed_k is None:
        fixed_k = min(default("workload", "fixed_k"), max(k_max, 0))
    if k_max < 0 or fixed_k < 0:
        raise PlannerError(f"{origin}: K must be >= 0 (k_max={k_max}, fixed_k={fixed_k})")
    if k_max > MAX_K:
        raise PlannerError(f"{origin}: k_max={k_max} is out of range (at most {MAX_K})")
    if fixed_k > k_max:
        raise PlannerError(f"{origin}: fixed_k={fixed_k} exceeds k_max={k_max}; give a fixed K of at most {k_max}"
                           " ([workload] fixed_k, --fixed-k) or a larger k_max")
    context_lens = None
    if get("workload", "context_lens") is not None:
        context_lens = parse_context_lens(get("workload", "context_lens"), f"{origin}: [workload] context_lens")
        if max_pos and context_lens.max() > max_pos and not beyond_ok:
            raise PlannerError(f"{origin}: context_lens up to {context_lens.max()} exceed {model.name}'s"
                               f" max_position_embeddings={max_pos}; shorten them, or {allow}"
                               " for a model served with RoPE scaling")
    tol = float(get("workload", "schedule_tolerance", default("workload", "schedule_tolerance")))
    if not 0 <= tol < 0.5:
        raise PlannerError(f"{origin}: schedule_tolerance={tol:g} is outside [0, 0.5): the share of the best goodput"
                           " a K* schedule may give up at any batch size for fewer ranges (0.01 = 1%; 0 = per-batch"
                           " argmax)")
    quantile = float(get("workload", "decision_quantile", default("workload", "decision_quantile")))
    if not 0 <= quantile < 0.5:
        raise PlannerError(f"{origin}: decision_quantile={quantile:g} is outside [0, 0.5): the quantile of the engine"
                           " terms' draws K* is chosen at (0.10 = the pessimistic 10%; 0 = at their centre)")
    with named_key(origin, "[workload] batch_sizes"):
        batch_sizes = parse_batch_sizes(get("workload", "batch_sizes", default("workload", "batch_sizes")))
    return {"context_len": int(context_len), "k_max": int(k_max), "fixed_k": int(fixed_k), "schedule_tolerance": tol,
            "decision_quantile": quantile, "batch_sizes": batch_sizes, "context_lens": context_lens, "warnings": warnings_}


@contextlib.contextmanager
def named_key(origin: str, key: str):
    """A PlannerError raised inside says which file and key it is about (when it does not already)."""
    try:
        yield
    except PlannerError as err:
        text = str(err)
        if text.startswith(str(origin)):
            raise
        raise PlannerError(f"{origin}: {key}: {text}") from None


FALLBACK_RATE = 0.7  # used only where no preset exists (early-exit) and the scenario gives none


def _scenario_acceptance(acc_tbl: dict, method: str, origin: str,
                         base_dir: str | None = None) -> tuple[Acceptance, AcceptanceFile | None]:
    """[acceptance]: a measured file, or explicit rate / rates; else the named preset; else the draft
    method's preset. Returns the acceptance and the file it was read from (None otherwise).

    Presets (simulator/data/acceptance.toml) carry their own source; a method without one (early-exit)
    falls back to an i.i.d. FALLBACK_RATE labelled as an assumption.
    """
    if "file" in acc_tbl:
        clash = [k for k in ("rate", "rates", "preset") if k in acc_tbl]
        if clash:
            raise PlannerError(f"{origin}: [acceptance] give either 'file' or '{clash[0]}', not both")
        got = read_acceptance_file(_resolve_path(acc_tbl["file"], base_dir), flag="[acceptance] file")
        return got.acceptance(), got
    return _table_acceptance(acc_tbl, method, origin), None


def _table_acceptance(acc_tbl: dict, method: str, origin: str) -> Acceptance:
    """The table's rates or preset, with ``rank_tail`` (a draft tree's, specs.tree_acceptance) where given."""
    acc = _table_rates(acc_tbl, method, origin)
    if "rank_tail" in acc_tbl:
        return replace(acc, rank_tail=check_rank_tail(acc_tbl["rank_tail"], origin))
    preset = preset_for(method)
    if preset is not None and preset.rank_tail is not None and (acc.rates, acc.source) == (preset.rates, preset.source):
        return preset  # a tree preset's rates restated with its source (the dashboard's controls): the preset
    return acc


def _table_rates(acc_tbl: dict, method: str, origin: str) -> Acceptance:
    if "rate" in acc_tbl and "rates" in acc_tbl:
        raise PlannerError(f"{origin}: [acceptance] give either 'rate' or 'rates', not both")
    explicit = "rate" in acc_tbl or "rates" in acc_tbl
    if explicit and "preset" in acc_tbl:
        raise PlannerError(f"{origin}: [acceptance] give either 'preset' or 'rate'/'rates', not both")
    if explicit:
        key = "rates" if "rates" in acc_tbl else "rate"
        with named_key(origin, f"[acceptance] {key}"):
            return parse_acceptance(acc_tbl[key], acc_tbl.get("source", "assumed"))
    name = acc_tbl.get("preset", method)
    preset = preset_for(name)
    if preset is None and "preset" in acc_tbl:
        from simulator.specs.acceptance import load_presets
        raise PlannerError(f"{origin}: [acceptance] unknown preset '{name}' (known: {', '.join(load_presets())})")
    if preset is None:
        return Acceptance((FALLBACK_RATE,), acc_tbl.get("source", f"assumed {FALLBACK_RATE:g}: no published preset for"
                                                                 f" draft method {method}; give measured rates"))
    if "source" in acc_tbl:
        return replace(preset, source=acc_tbl["source"])
    return preset
