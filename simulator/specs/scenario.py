"""Scenarios: TOML files (``scenarios/*.toml``) validated on load, plus overrides from flags or code.

Unknown keys and wrong types are errors naming the file, the key and the expected type. Sections
other modules own (``serving``, ``traffic``, ``slo``, ``sizing``) are kept as plain tables in
``Scenario.extra`` and validated there with :func:`check_table`.
"""
from __future__ import annotations

import copy
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from simulator.specs.acceptance import Acceptance, parse_acceptance
from simulator.specs.deployment import Deployment, check_deployment
from simulator.specs.engines import EngineProfile, default_engine, load_engine
from simulator.specs.drafts import DraftSpec, check_draft, parse_draft
from simulator.errors import PlannerError
from simulator.specs.hardware import Hardware, custom_hardware, load_hardware
from simulator.specs.models import ModelSpec, load_model
from simulator.specs.routing import Routing
from simulator.specs.profile import Profile, check_profile_matches, load_profile

REPO_ROOT = Path(__file__).resolve().parent.parent.parent
SCENARIO_DIR = REPO_ROOT / "scenarios"
DEFAULT_SCENARIO = SCENARIO_DIR / "default.toml"

NUM = (int, float)
STR_OR_LIST = (str, list)
SCHEMA: dict[str, dict[str, type | tuple]] = {
    "": {"name": str, "description": str},
    "model": {"name": str, "source": str},
    "hardware": {"name": str, "tp": int, "ep": int, "peak_bf16_flops_per_s": NUM, "peak_fp8_flops_per_s": NUM,
                 "hbm_bandwidth_bytes_per_s": NUM, "memory_bytes": NUM, "price_per_gpu_hour_usd": NUM,
                 "interconnect_bandwidth_bytes_per_s": NUM},
    "precision": {"weights": str, "activations": str, "kv_cache": str, "experts": str},
    "draft": {"method": str, "model": str},
    "acceptance": {"rate": NUM, "rates": list, "source": str},
    "workload": {"context_len": int, "batch_sizes": STR_OR_LIST, "k_max": int, "fixed_k": int,
                 "memory_utilization": NUM},
    "routing": {"kind": str, "skew": NUM, "probabilities": list},
    "calibration": {"profile": str},
    "engine": {"name": str, "version": str},
}
OPEN_SECTIONS = ("serving", "traffic", "slo", "sizing", "validation")
TYPE_NAMES = {str: "a string", int: "an integer", list: "a list", NUM: "a number", STR_OR_LIST: "a string or a list",
              bool: "true or false", dict: "a table"}


def check_table(table: dict, schema: dict, origin: str, section: str) -> None:
    """Reject unknown keys and wrong types, naming file, key and expected type."""
    where = f"[{section}]" if section else "top level"
    for key, value in table.items():
        if key not in schema:
            raise PlannerError(f"{origin}: unknown key '{key}' in {where} (known: {', '.join(sorted(schema))})")
        expected = schema[key]
        ok = isinstance(value, expected) and not (isinstance(value, bool) and expected is not bool)
        if expected is NUM and isinstance(value, bool):
            ok = False
        if not ok:
            label = f"{section}.{key}" if section else key
            raise PlannerError(f"{origin}: key '{label}' must be {TYPE_NAMES.get(expected, expected)},"
                               f" got {type(value).__name__} {value!r}")


def parse_batch_sizes(value) -> np.ndarray:
    """'1-512', '1,2,4,8', '1-8,16,32' or a list of ints -> sorted unique array (each >= 1)."""
    if isinstance(value, (list, tuple, np.ndarray)):
        items = list(value)
        if not all(isinstance(x, (int, np.integer)) and not isinstance(x, bool) for x in items):
            raise PlannerError(f"batch sizes {value!r}: expected integers")
        sizes = [int(x) for x in items]
    else:
        sizes = []
        for part in str(value).split(","):
            part = part.strip()
            if not part:
                continue
            match = re.fullmatch(r"(-?\d+)\s*-\s*(-?\d+)", part)
            if match:
                lo, hi = int(match.group(1)), int(match.group(2))
                if hi < lo:
                    raise PlannerError(f"batch sizes '{part}': range end below its start")
                sizes += list(range(lo, hi + 1))
            elif re.fullmatch(r"-?\d+", part):
                sizes.append(int(part))
            else:
                raise PlannerError(f"batch sizes '{value}': expected '1-256' or '1,2,4,8'")
    if not sizes:
        raise PlannerError("batch sizes: none given")
    if min(sizes) < 1:
        raise PlannerError(f"batch size {min(sizes)} < 1: batch sizes count sequences, the smallest is 1")
    if max(sizes) > 65536:
        raise PlannerError(f"batch size {max(sizes)} > 65536: out of range")
    return np.unique(np.asarray(sizes, dtype=int))


@dataclass
class Scenario:
    """A resolved scenario: specs, deployment, draft, acceptance and workload grid."""

    name: str
    description: str
    model: ModelSpec
    hardware: Hardware
    deployment: Deployment
    draft: DraftSpec
    acceptance: Acceptance
    context_len: int
    batch_sizes: np.ndarray
    k_max: int
    fixed_k: int
    profile: Profile | None = None
    engine: EngineProfile | None = None
    origin: str = "flags"
    extra: dict = field(default_factory=dict)
    raw: dict = field(default_factory=dict, repr=False)

    @property
    def cost_source(self) -> str:
        """What the step times rest on: kernels (datasheet, calibration profile or measured tables)
        and the engine profile that adds host time and graph capture."""
        kernels = self.profile.label if self.profile else "datasheet only (uncalibrated roofline)"
        if self.engine is None or self.engine.name == "ideal":
            return kernels
        return f"{kernels}; {self.engine.label}"

    def with_overrides(self, **overrides) -> "Scenario":
        """A new scenario with flat overrides applied (same keys as :func:`apply_overrides`)."""
        raw = apply_overrides(self.raw, overrides)
        return build_scenario(raw, self.origin, self.raw.get("_base_dir"))


def _resolve_path(path: str, base_dir: str | None) -> str:
    p = Path(path)
    if p.is_absolute() or p.exists():
        return str(p)
    for base in (base_dir, REPO_ROOT):
        if base and (Path(base) / p).exists():
            return str(Path(base) / p)
    return str(p)


def build_scenario(raw: dict, origin: str = "flags", base_dir: str | None = None) -> Scenario:
    """Validate a scenario dict (TOML layout) and resolve every spec in it."""
    raw = copy.deepcopy(raw)
    raw.pop("_base_dir", None)
    top = {k: v for k, v in raw.items() if not isinstance(v, dict)}
    check_table(top, SCHEMA[""], origin, "")
    for section, table in raw.items():
        if not isinstance(table, dict):
            continue
        if section in OPEN_SECTIONS:
            continue
        if section not in SCHEMA:
            raise PlannerError(f"{origin}: unknown section [{section}]"
                               f" (known: {', '.join(sorted(set(SCHEMA) - {''} | set(OPEN_SECTIONS)))})")
        check_table(table, SCHEMA[section], origin, section)
    get = lambda section, key, default=None: raw.get(section, {}).get(key, default)  # noqa: E731

    model_name = get("model", "name")
    if model_name is None:
        raise PlannerError(f"{origin}: missing [model] name (a catalog name or a config.json path)")
    model = load_model(_resolve_path(model_name, base_dir) if model_name.endswith(".json") else model_name)

    hw_name = get("hardware", "name")
    if hw_name is None:
        raise PlannerError(f"{origin}: missing [hardware] name (a catalog name such as h100-sxm)")
    hardware = load_hardware(hw_name)
    hw_over = {k: float(v) for k, v in raw.get("hardware", {}).items() if k not in ("name", "tp", "ep")}
    if hw_over:
        hardware = custom_hardware(hardware, **hw_over, source=f"{hardware.source}; overridden: {', '.join(hw_over)}")

    routing_tbl = raw.get("routing", {})
    routing = Routing(kind=routing_tbl.get("kind", "uniform"), skew=float(routing_tbl.get("skew", 0.0)),
                      probabilities=tuple(routing_tbl.get("probabilities", ())))
    if routing.kind == "zipf" and "skew" not in routing_tbl:
        raise PlannerError(f"{origin}: [routing] kind = 'zipf' needs a 'skew' exponent (e.g. 1.0)")
    deployment = Deployment(
        tp=get("hardware", "tp", 1), ep=get("hardware", "ep", 1),
        weight_dtype=get("precision", "weights", "bf16"), act_dtype=get("precision", "activations", "bf16"),
        kv_dtype=get("precision", "kv_cache", "bf16"), expert_dtype=get("precision", "experts"),
        routing=routing, memory_utilization=float(get("workload", "memory_utilization", 0.9)))
    check_deployment(model, deployment)

    method = get("draft", "method", "eagle")
    if method == "model":
        name = get("draft", "model")
        if not name:
            raise PlannerError(f"{origin}: [draft] method = 'model' needs model = 'NAME' (a catalog model or config.json)")
        method = f"model:{_resolve_path(name, base_dir) if name.endswith('.json') else name}"
    draft = parse_draft(method)
    check_draft(draft, model, deployment)

    acc_tbl = raw.get("acceptance", {})
    if "rate" in acc_tbl and "rates" in acc_tbl:
        raise PlannerError(f"{origin}: [acceptance] give either 'rate' or 'rates', not both")
    acc_value = acc_tbl.get("rates", acc_tbl.get("rate", 0.7))
    acceptance = parse_acceptance(acc_value, acc_tbl.get("source", "assumed"))

    context_len = get("workload", "context_len", 2048)
    if context_len < 1:
        raise PlannerError(f"{origin}: context_len must be >= 1, got {context_len}")
    k_max = get("workload", "k_max", 8)
    fixed_k = get("workload", "fixed_k", 3)
    if k_max < 0 or fixed_k < 0:
        raise PlannerError(f"{origin}: K must be >= 0 (k_max={k_max}, fixed_k={fixed_k})")
    if k_max > 32:
        raise PlannerError(f"{origin}: k_max={k_max} is out of range (at most 32)")
    if fixed_k > k_max:
        raise PlannerError(f"{origin}: fixed_k={fixed_k} exceeds k_max={k_max}")
    batch_sizes = parse_batch_sizes(get("workload", "batch_sizes", "1-512"))

    profile = None
    profile_path = get("calibration", "profile")
    if profile_path:
        profile = load_profile(_resolve_path(profile_path, base_dir))
        check_profile_matches(profile, hardware.name)

    engine_tbl = raw.get("engine", {})
    engine = load_engine(engine_tbl.get("name") or default_engine(hardware.kind), engine_tbl.get("version"))

    raw["_base_dir"] = base_dir
    return Scenario(
        name=raw.get("name", Path(origin).stem if origin != "flags" else "custom"),
        description=raw.get("description", ""), model=model, hardware=hardware, deployment=deployment,
        draft=draft, acceptance=acceptance, context_len=int(context_len), batch_sizes=batch_sizes,
        k_max=int(k_max), fixed_k=int(fixed_k), profile=profile, engine=engine, origin=origin,
        extra={s: raw[s] for s in OPEN_SECTIONS if s in raw}, raw=raw)


def read_scenario_file(path: str | Path) -> dict:
    path = Path(path)
    if not path.exists() and (SCENARIO_DIR / f"{path}.toml").exists():
        path = SCENARIO_DIR / f"{path}.toml"
    try:
        raw = tomllib.loads(path.read_text())
    except FileNotFoundError:
        known = ", ".join(p.stem for p in sorted(SCENARIO_DIR.glob("*.toml")))
        raise PlannerError(f"{path}: scenario file not found (bundled: {known})") from None
    except tomllib.TOMLDecodeError as err:
        raise PlannerError(f"{path}: malformed TOML: {err}") from None
    except UnicodeDecodeError:
        raise PlannerError(f"{path}: not a text file") from None
    raw["_base_dir"] = str(path.parent)
    raw["_path"] = str(path)
    return raw


def load_scenario(path: str | Path, **overrides) -> Scenario:
    raw = read_scenario_file(path)
    origin = raw.pop("_path")
    raw = apply_overrides(raw, overrides)
    return build_scenario(raw, origin, raw.get("_base_dir"))


# Flat override names (CLI flags, API keywords) -> (section, key)
OVERRIDE_KEYS = {
    "model": ("model", "name"), "hardware": ("hardware", "name"), "tp": ("hardware", "tp"), "ep": ("hardware", "ep"),
    "draft": ("draft", "method"), "acceptance": ("acceptance", None), "context_len": ("workload", "context_len"),
    "batch_sizes": ("workload", "batch_sizes"), "k_max": ("workload", "k_max"), "fixed_k": ("workload", "fixed_k"),
    "dtype": ("precision", "weights"), "weight_dtype": ("precision", "weights"),
    "act_dtype": ("precision", "activations"), "kv_dtype": ("precision", "kv_cache"),
    "calibration": ("calibration", "profile"), "memory_utilization": ("workload", "memory_utilization"),
    "routing_skew": ("routing", "skew"), "acceptance_source": ("acceptance", "source"),
    "engine": ("engine", "name"), "engine_version": ("engine", "version"),
    "peak_bf16_flops_per_s": ("hardware", "peak_bf16_flops_per_s"),
    "hbm_bandwidth_bytes_per_s": ("hardware", "hbm_bandwidth_bytes_per_s"),
}


def apply_overrides(raw: dict, overrides: dict) -> dict:
    """Flat overrides (None = keep the scenario's value) applied to a TOML-layout dict."""
    raw = copy.deepcopy(raw)
    for name, value in overrides.items():
        if value is None:
            continue
        if name not in OVERRIDE_KEYS:
            raise PlannerError(f"unknown setting '{name}' (known: {', '.join(sorted(OVERRIDE_KEYS))})")
        section, key = OVERRIDE_KEYS[name]
        table = raw.setdefault(section, {})
        if name == "acceptance":
            table.pop("rate", None)
            table.pop("rates", None)
            acc = parse_acceptance(value)
            table["rates"] = list(acc.rates)
            table["source"] = overrides.get("acceptance_source") or "given as an override"
        elif name == "draft":
            text = str(value)
            table.pop("model", None)
            if text.startswith("model:"):
                table["method"], table["model"] = "model", text.split(":", 1)[1]
            else:
                table["method"] = text
        elif name == "acceptance_source":
            table["source"] = str(value)
        elif name == "routing_skew":
            table["kind"], table["skew"] = "zipf", float(value)
        elif name == "batch_sizes" and isinstance(value, np.ndarray):
            table[key] = [int(x) for x in value]
        else:
            table[key] = value
    return raw
