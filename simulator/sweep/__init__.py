"""Fleet-scale sweeps: models x traffic x hardware x parallelism x dtype x policies, resumable, local or Ray.

A floor above ``sizing`` and below ``cli``: imports specs, plan, sizing (and serving for validation),
never cli. Modules: ``spec`` (the sweep file, validation, the expansion with its filters) -> ``task``
(one scenario: grid prediction + SLO searches) -> ``journal`` (JSON lines, the resume record) ->
``backends`` (in-process, local process pool, Ray; progress) -> ``tables`` (tidy table, Pareto,
summaries). :func:`run_sweep` ties them together; ``python -m simulator.sweep`` is the command.
"""
from __future__ import annotations

import importlib.util
import time
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from simulator.errors import PlannerError
from simulator.sweep.backends import Progress, import_ray, run_inline, run_local, run_ray
from simulator.sweep.journal import JOURNAL, Journal, read_journal, roundtrip
from simulator.sweep.spec import SweepSpec, SweepTask, parse_sweep, task_key
from simulator.file_sets import write_files_atomically
from simulator.files import check_output_dir
from simulator.sweep.tables import pareto_flags, results_table, summary_html, summary_markdown, table_bytes

OUTPUT_NAMES = {"parquet": "results.parquet", "csv": "results.csv", "markdown": "summary.md", "html": "summary.html"}


@dataclass
class SweepOutcome:
    spec: SweepSpec
    complete: bool
    table: pd.DataFrame | None  # None until every task is done
    filtered: pd.DataFrame
    written: list = field(default_factory=list)
    computed: int = 0  # tasks run by this call
    resumed: int = 0  # tasks found in the journal
    elapsed_s: float = 0.0
    task_seconds: list = field(default_factory=list)  # per task computed now (worker-side wall time)
    task_cpu_seconds: list = field(default_factory=list)  # per task computed now (worker-side CPU time)
    backend: str = "local"


def output_names(spec: SweepSpec) -> list[str]:
    """Every file a sweep writes into its output directory."""
    return [JOURNAL, "filtered.csv"] + [OUTPUT_NAMES[f] for f in spec.output["formats"]]


def check_outputs(spec: SweepSpec, output_dir=None) -> Path:
    """Refuse, before any task runs, outputs that cannot be written: pyarrow missing for Parquet, an output
    directory that is a file, lies under one or is not writable, an output file name taken by a directory."""
    if "parquet" in spec.output["formats"] and importlib.util.find_spec("pyarrow") is None:
        raise PlannerError("Parquet output needs pyarrow: pip install 'dsd-planner[sweep]'"
                           " (or set [output] formats without \"parquet\")")
    out = Path(output_dir or spec.output["dir"])
    flag = "--output-dir" if output_dir is not None else f"{spec.path}: [output] dir"  # where the user fixes it
    return check_output_dir(out, flag, names=output_names(spec))


def run_sweep(spec: str | Path | SweepSpec, output_dir=None, workers=None, ray_address=None, max_tasks=None,
              progress=True, write=True, write_partial=False) -> SweepOutcome:
    """Run (or resume) a sweep. ``spec``: a sweep file path or a parsed :class:`SweepSpec`.

    ``workers``: local processes (default [run] workers); ``ray_address``: run on Ray instead
    ('auto', 'HOST[:PORT]', 'ray://HOST:10001' or 'local'); ``max_tasks``: stop after computing this
    many tasks (the journal keeps them; rerun to continue). Final tables are written, atomically,
    once every task is in the journal.
    """
    t0 = time.perf_counter()
    if not isinstance(spec, SweepSpec):
        spec = parse_sweep(spec, output_dir=None if output_dir is None else str(output_dir), workers=workers)
    elif workers is not None:
        spec.run["workers"] = workers
    if max_tasks is not None and max_tasks < 0:
        raise PlannerError(f"--max-tasks must be >= 0, got {max_tasks}")
    out = _output_dir(spec, output_dir, write, ray_address)
    records = read_journal(out / JOURNAL, {t.key: t for t in spec.tasks})
    todo = [t for t in spec.tasks if t.key not in records]
    resumed = len(spec.tasks) - len(todo)
    if max_tasks is not None:
        todo = todo[:max_tasks]
    bar = Progress(len(spec.tasks), resumed, enabled=progress)
    backend = "ray" if ray_address is not None else ("local" if spec.run["workers"] > 1 else "inline")
    seconds, cpu = _compute(todo, out, records, ray_address, spec.run["workers"], bar)
    filtered = pd.DataFrame(spec.filtered, columns=["model", "hardware", "tp", "ep", "dtype", "act_dtype", "kv_dtype", "draft",
                                                    "engine", "context_len", "traffic", "acceptance", "filter", "reason"])
    complete = all(t.key in records for t in spec.tasks)
    outcome = SweepOutcome(spec, complete, None, filtered, computed=len(seconds), resumed=resumed,
                           task_seconds=seconds, task_cpu_seconds=cpu, backend=backend)
    if complete or write_partial:
        done = [t for t in spec.tasks if t.key in records]
        table = results_table(done, records, spec.output["latency"])
        outcome.table = table
        if write and complete:
            outcome.written = write_outputs(spec, out, table, filtered, {"computed": len(seconds), "resumed": resumed})
    outcome.elapsed_s = time.perf_counter() - t0
    return outcome


def _output_dir(spec: SweepSpec, output_dir, write: bool, ray_address) -> Path:
    """The output directory, checked (with the files it will get when ``write``) and created."""
    out = check_outputs(spec, output_dir) if write else check_output_dir(Path(output_dir or spec.output["dir"]))
    if ray_address is not None:
        import_ray()  # refuse before anything runs when Ray is missing
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise PlannerError(f"--output-dir {out}: cannot create it ({err.strerror or err})") from None
    return out


def _compute(todo: list, out: Path, records: dict, ray_address, workers: int, bar: Progress) -> tuple[list, list]:
    """Run the tasks not yet in the journal, appending each result to it (and to ``records``) as it
    arrives; returns each computed task's seconds and CPU seconds."""
    journal = Journal(out / JOURNAL)
    seconds, cpu = [], []

    def on_result(rec: dict) -> None:
        rec = roundtrip(rec)  # the table is built from what the journal holds, in this run as in a resumed one
        journal.append(rec)
        records[rec["key"]] = rec
        seconds.append(rec.get("elapsed_s", float("nan")))
        cpu.append(rec.get("cpu_s", float("nan")))
        bar.update()

    try:
        if todo:
            bar.start()
            if ray_address is not None:
                run_ray(todo, ray_address, workers, on_result)
            elif workers > 1:
                run_local(todo, workers, on_result)
            else:
                run_inline(todo, on_result)
    finally:
        journal.close()
    return seconds, cpu


def write_outputs(spec: SweepSpec, out: Path, table: pd.DataFrame, filtered: pd.DataFrame, stats: dict) -> list:
    files: dict[str, str | bytes] = {}
    for fmt in spec.output["formats"]:
        if fmt in ("parquet", "csv"):
            files[OUTPUT_NAMES[fmt]] = table_bytes(table, fmt)
        elif fmt == "markdown":
            files[OUTPUT_NAMES[fmt]] = summary_markdown(spec, table, filtered, stats)
        else:
            files[OUTPUT_NAMES[fmt]] = summary_html(spec, table, filtered, stats)
    files["filtered.csv"] = filtered.to_csv(index=False)
    return write_files_atomically(out, files)


__all__ = ["OUTPUT_NAMES", "SweepOutcome", "SweepSpec", "SweepTask", "check_outputs", "output_names", "parse_sweep",
           "pareto_flags", "read_journal", "results_table", "run_sweep", "task_key", "write_outputs"]
