"""The sweep file's sections and axes (schemas, defaults, the scenario override each axis sets) and the
records an expansion makes (:class:`SweepSpec`, :class:`SweepTask`); every name here is also importable
from :mod:`simulator.sweep.spec`, which reads and expands the file."""
from __future__ import annotations

from dataclasses import dataclass, field

from simulator.specs.scenario import SCENARIO_DIR

SWEEP_DIR = SCENARIO_DIR / "sweeps"  # bundled sweep files (not scenarios/*.toml: those must all be scenarios)
FORMAT_VERSION = 1  # part of every task key: bump when a task's rows change meaning
AXES = ("models", "hardware", "tp", "ep", "dtype", "act_dtype", "kv_dtype", "draft", "engine", "context_len",
        "traffic", "acceptance")
SWEEP_SCHEMA = {"base": str, "policies": list, **{a: list for a in AXES}}
RUN_SCHEMA = {"size": bool, "n_requests": int, "search_steps": int, "duration_s": (int, float),
              "max_requests": int, "max_replicas": int, "seed": int, "workers": int}
OUTPUT_SCHEMA = {"dir": str, "formats": list, "latency": str}
FORMATS = ("parquet", "csv", "markdown", "html")
LATENCY_COLUMNS = ("tpot_p50_s", "tpot_p99_s", "ttft_p99_s")
# None: the base scenario's [sizing] setting (else the sizing default), so a row is what `size` finds
RUN_DEFAULTS = {"size": True, "n_requests": None, "search_steps": None, "duration_s": None, "max_requests": None,
                "max_replicas": None, "seed": None, "workers": 2}
# axis -> the flat scenario override it sets (simulator.specs.scenario.OVERRIDE_KEYS)
OVERRIDE = {"models": "model", "hardware": "hardware", "tp": "tp", "ep": "ep", "dtype": "weight_dtype",
            "act_dtype": "act_dtype", "kv_dtype": "kv_dtype", "draft": "draft", "context_len": "context_len", "engine": "engine"}


@dataclass(frozen=True)
class SweepTask:
    """One scenario-sized unit of work: a resolved scenario dict plus what to run on it."""

    index: int  # position in the expansion (the final table's order)
    key: str  # stable hash of everything the result depends on
    axes: dict  # axis name -> value (traffic / acceptance: the preset name)
    raw: dict  # scenario in TOML layout, axes applied
    origin: str
    base_dir: str | None
    policies: tuple
    run: dict


@dataclass
class SweepSpec:
    name: str
    description: str
    path: str
    base: str
    base_raw: dict
    axes: dict  # axis -> tuple of values (every axis present; defaults from the base)
    traffic: dict  # preset name -> [traffic] table (None: the base's own)
    acceptance: dict  # preset name -> [acceptance] table (None: the base's own)
    policies: tuple
    run: dict
    output: dict
    tasks: list = field(default_factory=list)
    filtered: list = field(default_factory=list)  # {axes..., reason}
    deployment_fits: tuple = ()  # DeploymentFit files (--deployment): each applies where it was measured
    fitted_tasks: int = 0  # tasks whose step times rest on one of them

    @property
    def n_combinations(self) -> int:
        return len(self.tasks) + len(self.filtered)
