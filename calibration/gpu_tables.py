"""Read the measured GPU kernel tables shipped in the ``aiconfigurator-core`` wheel.

Source: aiconfigurator-core 0.12.0 (NVIDIA, Apache-2.0), directory
``aiconfigurator_core/systems/data/<system>/<family>/<framework>/<version>/<table>.parquet``
(latencies in milliseconds, one row per measured shape). We only read its data files;
none of its code is used or copied.

Lookup order for the tables (:func:`locate_tables`):
  1. the installed package ``aiconfigurator_core`` (``pip install 'dsd-planner[gpu-tables]'``),
  2. a cached wheel ``~/.cache/dsd-planner/wheels/aiconfigurator_core-0.12.0-*.whl``
     (``$DSD_PLANNER_WHEELS`` overrides the folder),
  3. otherwise a one-line :class:`PlannerError` saying how to get it.
"""
from __future__ import annotations

import importlib.util
import io
import os
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from simulator.errors import PlannerError
from simulator.specs.versions import version_key  # the planner's version order (PEP 440)

PACKAGE = "aiconfigurator_core"
PACKAGE_VERSION = "0.12.0"
DATA_PREFIX = f"{PACKAGE}/systems/data/"
WHEEL_DIR = Path(os.environ.get("DSD_PLANNER_WHEELS", Path.home() / ".cache" / "dsd-planner" / "wheels"))
WHEEL_GLOB = f"{PACKAGE}-{PACKAGE_VERSION}-*.whl"
INSTALL_HINT = (f"measured GPU tables not found: run `pip install 'dsd-planner[gpu-tables]'` or "
                f"`pip download --no-deps --only-binary=:all: aiconfigurator-core=={PACKAGE_VERSION} "
                f"-d {WHEEL_DIR}`")

# aiconfigurator system name -> planner catalog name (simulator/data/hardware/<name>.toml).
# a100_sxm is the 80 GB part (its system yaml: 2039 GB/s, 80 GiB). Every table's `device` column
# names the part measured (b300_sxm: "NVIDIA B300 SXM6 AC"; gb200 / gb300: one GPU of a Grace
# Blackwell tray, "NVIDIA GB200" / "NVIDIA GB300"; rtx_pro_6000_server: "NVIDIA RTX PRO 6000 Blackwell
# Server Edition"). Systems without a catalog entry (b60, a30) are listed but not imported.
SYSTEM_TO_CATALOG = {
    "h100_sxm": "h100-sxm",
    "h200_sxm": "h200",
    "a100_sxm": "a100-80gb",
    "b200_sxm": "b200",
    "b300_sxm": "b300",
    "gb200": "gb200",
    "gb300": "gb300",
    "l40s": "l40s",
    "rtx_pro_6000_server": "rtx-pro-6000",
    "h100_pcie": "h100-pcie",
    "l4": "l4",
}
CATALOG_TO_SYSTEM = {v: k for k, v in SYSTEM_TO_CATALOG.items()}
ENGINES = ("trtllm", "vllm", "sglang")


@dataclass(frozen=True)
class TableSource:
    """Where the tables live: an installed package folder or a wheel (zip) file."""

    kind: str  # "package" | "wheel"
    path: Path

    def describe(self) -> str:
        return f"{self.kind} {self.path}"

    def names(self) -> list[str]:
        """All data file paths, relative to ``systems/data/`` (``h100_sxm/gemm/trtllm/1.3.0rc20/gemm_perf.parquet``)."""
        if self.kind == "wheel":
            with zipfile.ZipFile(self.path) as z:
                return sorted(n[len(DATA_PREFIX):] for n in z.namelist()
                              if n.startswith(DATA_PREFIX) and not n.endswith("/"))
        root = self.path / "systems" / "data"
        return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())

    def read_bytes(self, rel: str) -> bytes:
        """Bytes of a file relative to ``systems/`` (``data/...`` or ``query_versions.yaml``)."""
        if self.kind == "wheel":
            with zipfile.ZipFile(self.path) as z:
                return z.read(f"{PACKAGE}/systems/{rel}")
        return (self.path / "systems" / rel).read_bytes()


def _installed_package() -> Path | None:
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    root = Path(list(spec.submodule_search_locations)[0])
    return root if (root / "systems" / "data").is_dir() else None


def _cached_wheel(folder: Path = WHEEL_DIR) -> Path | None:
    wheels = sorted(Path(folder).glob(WHEEL_GLOB)) if Path(folder).is_dir() else []
    return wheels[-1] if wheels else None


def locate_tables(prefer: str | None = None) -> TableSource:
    """The installed package, else the cached wheel; PlannerError with install hint if neither."""
    pkg = _installed_package() if prefer in (None, "package") else None
    if pkg is not None:
        return TableSource("package", pkg)
    whl = _cached_wheel()
    if whl is not None:
        return TableSource("wheel", whl)
    raise PlannerError(INSTALL_HINT)


def tables_available() -> bool:
    try:
        locate_tables()
        return True
    except PlannerError:
        return False


# ---------------------------------------------------------------- versions and listing
def list_tables(src: TableSource) -> pd.DataFrame:
    """One row per data file: system, family (gemm, attention, moe, comm, mla, ...), engine, version, table, path."""
    rows = []
    for rel in src.names():
        parts = rel.split("/")
        if len(parts) != 5:
            continue
        system, family, engine, version, fname = parts
        rows.append({"system": system, "family": family, "engine": engine, "version": version,
                     "table": fname.rsplit(".", 1)[0], "ext": fname.rsplit(".", 1)[-1], "path": rel})
    return pd.DataFrame(rows, columns=["system", "family", "engine", "version", "table", "ext", "path"])


def list_combos(src: TableSource) -> pd.DataFrame:
    """Distinct (system, catalog name, engine, version) with the families each version has."""
    t = list_tables(src)
    t = t[t.ext == "parquet"]
    g = t.groupby(["system", "engine", "version"])["family"].agg(lambda s: ",".join(sorted(set(s))))
    out = g.reset_index().rename(columns={"family": "families"})
    out.insert(1, "hardware", out.system.map(SYSTEM_TO_CATALOG))
    return out


def current_versions(src: TableSource) -> dict[tuple[str, str], str]:
    """{(system, engine): version} from the wheel's ``query_versions.yaml`` "current" slots."""
    import yaml

    doc = yaml.safe_load(src.read_bytes("query_versions.yaml"))
    defaults = {e: v.get("current") for e, v in (doc.get("defaults") or {}).items()}
    systems = sorted(list_tables(src).system.unique())
    out = {}
    for s in systems:
        over = (doc.get("overrides") or {}).get(s, {})
        for e in ENGINES:
            v = (over.get(e) or {}).get("current") or defaults.get(e)
            if v:
                out[(s, e)] = v
    return out


def resolve_table(tables: pd.DataFrame, system: str, family: str, engine: str, version: str,
                  table: str) -> str | None:
    """Path of ``table`` for (system, family, engine): the newest version <= ``version``
    (backward fill, never forward), or None."""
    t = tables[(tables.system == system) & (tables.family == family) & (tables.engine == engine)
               & (tables.table == table) & (tables.ext == "parquet")]
    if t.empty:
        return None
    vk = version_key(version)
    ok = [v for v in t.version.unique() if version_key(v) <= vk]
    if not ok:
        return None
    best = max(ok, key=version_key)
    return t[t.version == best].path.iloc[0]


def newest_table(tables: pd.DataFrame, system: str, family: str, engine: str, table: str) -> str | None:
    """Path of the newest version of ``table`` (for engine-independent tables such as nccl)."""
    t = tables[(tables.system == system) & (tables.family == family) & (tables.engine == engine)
               & (tables.table == table) & (tables.ext == "parquet")]
    if t.empty:
        return None
    best = max(t.version.unique(), key=version_key)
    return t[t.version == best].path.iloc[0]


def read_table(src: TableSource, rel: str) -> pd.DataFrame:
    """A parquet table as a DataFrame (``rel`` relative to ``systems/data/``)."""
    return pd.read_parquet(io.BytesIO(src.read_bytes(f"data/{rel}")))


def read_meta(src: TableSource, rel_table: str) -> dict:
    """The ``collection_meta.yaml`` next to a table, or {}."""
    import yaml

    folder = rel_table.rsplit("/", 1)[0]
    try:
        return yaml.safe_load(src.read_bytes(f"data/{folder}/collection_meta.yaml")) or {}
    except (KeyError, FileNotFoundError):
        return {}


def table_status(meta: dict, table: str) -> str:
    """'<provenance>/<status>' of one table from its collection_meta (e.g. 'collected/complete')."""
    st = ((meta.get("tables") or {}).get(table) or {}).get("status", "unknown")
    return f"{meta.get('provenance', 'unspecified')}/{st}"

