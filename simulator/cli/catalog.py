"""`python -m simulator.catalog [models|hardware|engines|drafts|dtypes|all]`: what the planner knows, and
what each entry rests on (measured kernel tables, a published prior, the datasheet; the config.json a
model came from; the release an engine profile was read from; each draft method's acceptance preset).

Also ``python -m simulator.predict --list KIND``. One line per entry; the data files hold the full sources.
"""
from __future__ import annotations

import sys

from simulator.cli.common import OneLineParser, command
from simulator.errors import PlannerError

KINDS = ("models", "hardware", "engines", "drafts", "dtypes")


def _models() -> list[str]:
    from simulator.specs.models import list_models, load_model
    out = ["# models (simulator/data/models/*.json): name, parameters (active for MoE), layers, attention kinds"
           " (layers each; window, chunk or top-k); rests on"]
    for name in list_models():
        m = load_model(name)
        size = f"{m.total_params() / 1e9:.1f}B" + (f" ({m.active_params() / 1e9:.1f}B active, {m.num_experts} experts)"
                                                   if m.is_moe else "")
        out.append(f"{name:20s} {size:34s} {m.num_layers:3d} layers  {m.layer_kinds_label():34s}  {m.source}")
    return out


def _hardware_basis(hw) -> str:
    """What a device's kernel times rest on by default (scenario.resolve_profile's order)."""
    from simulator.specs.profile import SHIPPED_DIR, prior_profile
    tables = sorted(p.name[len(hw.name) + 1:-len(".profile.json")] for p in SHIPPED_DIR.glob(f"{hw.name}.*.profile.json"))
    if hw.kind != "gpu":
        return "datasheet only (roofline; calibrate with calibration/ on the machine)"
    if tables:
        return "measured kernel tables (" + ", ".join(tables) + ")"
    if prior_profile(hw) is not None:
        return "published prior (attained matmul / bandwidth / all-reduce figures others measured; [published])"
    return "datasheet only"


def _hardware() -> list[str]:
    from simulator.specs.hardware import list_hardware, load_hardware
    out = ["# hardware: name, memory, GPUs per NVLink domain / the fabric between domains, FP4 tensor cores; kernel times rest on"]
    for name in list_hardware():
        hw = load_hardware(name)
        dom = hw.scale_up_domain_gpus
        fabric = (f"{dom}/domain, {hw.scale_out['fabric']}" if hw.scale_out else
                  f"{dom}/node, no inter-node fabric (tp <= {dom})" if dom else hw.interconnect)
        fp4 = "fp4: " + "/".join(hw.fp4_formats) if hw.fp4_formats else "no fp4"
        out.append(f"{name:12s} {hw.memory_bytes / 1e9:5.0f} GB  {fabric:60s}  {fp4:16s}  {_hardware_basis(hw)}")
    return out


def _engines() -> list[str]:
    from simulator.specs.engine_catalog import list_engines
    from simulator.specs.engines import load_engine
    out = ["# engines (simulator/data/engines/*.toml): profile, values assumed; read from"]
    for key in list_engines():
        e = load_engine(key)
        first = e.source.split(";")[0].strip()
        out.append(f"{key:18s} {len(e.assumed):2d} assumed  {first}")
    return out


def _drafts() -> list[str]:
    from simulator.specs.acceptance import load_presets
    from simulator.specs.drafts import DRAFT_METHODS, DRAFT_SYNTAX, TREE_SYNTAX, named_drafts, parse_draft
    from simulator.specs.engine_catalog import draft_releases_text
    from simulator.specs.scenario import FALLBACK_RATE
    presets = load_presets()
    out = ["# draft methods (--draft): syntax, what is priced; default acceptance rests on"]
    rows = [(DRAFT_SYNTAX[m][0], DRAFT_SYNTAX[m][1], m) for m in DRAFT_METHODS] + [TREE_SYNTAX + ("eagle3-tree",)]
    for name in named_drafts():  # the named trees (the dashboard offers the same list)
        d = parse_draft(name) if ":tree:" in name else None
        if d is not None:
            rows.append((name, f"named tree: topk {d.topk}, {d.tree_tokens} draft tokens, verify up to {d.tree_tokens + 1}"
                                f" tokens/seq", d.preset_key))
    for syntax, what, key in rows:
        p = presets.get(key)
        acc = f"{p['source']}" if p else f"no published preset: i.i.d. {FALLBACK_RATE:g} assumed; give measured rates (--acceptance)"
        out.append(f"{syntax:18s} {what:100s}  {acc}")
    out.append("# the engine releases that run each draft method (simulator/data/engine_releases.toml, read from their"
               " wheels; a release outside them is refused)")
    out += [f"runs {m:13s} {draft_releases_text(m)}" for m in DRAFT_METHODS]
    return out


def _dtypes() -> list[str]:
    from simulator.specs.hardware import ACT_DTYPES, FP4_DTYPES, KV_DTYPES, WEIGHT_DTYPES, fp4_hardware
    return ["# dtypes (bytes per element in simulator/specs/hardware.py DTYPE_BYTES)",
            f"weights (--dtype, [precision] weights):        {', '.join(WEIGHT_DTYPES)}",
            f"activations ([precision] activations):          {', '.join(ACT_DTYPES)}",
            f"KV cache (--kv-dtype, [precision] kv_cache):    {', '.join(KV_DTYPES)}"] + [
            f"{f} weights and activations (--dtype {f} --act-dtype {f}, FP4 tensor cores): "
            + ", ".join(n for n, formats in fp4_hardware().items() if f in formats) for f in FP4_DTYPES]


def catalog_text(kind: str = "all") -> str:
    """The catalog of ``kind`` (one of KINDS, or 'all') as text."""
    if kind != "all" and kind not in KINDS:
        raise PlannerError(f"unknown catalog '{kind}' (use one of {', '.join(KINDS)} or all)")
    parts = {"models": _models, "hardware": _hardware, "engines": _engines, "drafts": _drafts, "dtypes": _dtypes}
    kinds = KINDS if kind == "all" else (kind,)
    return "\n\n".join("\n".join(parts[k]()) for k in kinds) + "\n"


def build_parser():
    p = OneLineParser(prog="python -m simulator.catalog", description=__doc__.split("\n\n")[0])
    p.add_argument("kind", nargs="?", default="all", choices=KINDS + ("all",), help="what to list (default all)")
    return p


def _run(args) -> int:
    sys.stdout.write(catalog_text(args.kind))
    return 0


main = command(build_parser, _run)
