"""Sweep CLI: a fleet plan over models x traffic x hardware x parallelism x dtype x policies.

    python -m simulator.sweep scenarios/sweep-small.toml                       # laptop: local process pool
    python -m simulator.sweep scenarios/sweep-small.toml --ray-address auto    # on a Ray cluster
    python -m simulator.sweep SPEC --dry-run                                   # the expansion, nothing run

Rerunning the same command resumes from the output directory's journal.jsonl: finished tasks are
not run again. Bad input (unknown model, hardware, dtype, policy; malformed file; Ray missing)
prints one line on stderr and exits with code 2, before anything runs.
"""
from __future__ import annotations

import signal
import sys

from simulator.cli.common import (OneLineParser, path_given, Terminated, add_save_scenario_arg, check_output_dir, check_save_scenario,
                                 command, save_scenario, say_written)
from simulator.errors import PlannerError


def build_parser():
    p = OneLineParser(prog="python -m simulator.sweep", description=__doc__.split("\n\n")[0])
    p.add_argument("spec", help="sweep file (TOML with [sweep], optional [traffic.NAME], [acceptance.NAME], [run], [output];"
                   " docs/sweeps.md)")
    what = p.add_argument_group("what runs")
    what.add_argument("--deployment", nargs="+", default=[], metavar="FIT.json",
                      help="deployment fit(s) from python -m calibration.fit_deployment: each replaces the planner's own"
                           " engine terms in the combinations of the deployment it was fitted on (model, GPU, TP, engine"
                           " release, draft, precision), and those rows say so (prov_deployment_fit)")
    what.add_argument("--dry-run", action="store_true", help="print the expansion and the filtered combinations; run nothing")
    what.add_argument("--max-tasks", type=int, help="stop after computing this many tasks (rerun to continue)")
    where = p.add_argument_group("where it runs")
    where.add_argument("--workers", type=int, help="local worker processes (default: [run] workers, else 2)")
    where.add_argument("--ray-address", help="run on Ray: auto | HOST[:PORT] | ray://HOST:10001 | local")
    out = p.add_argument_group("output")
    out.add_argument("--output-dir", type=path_given, help="where the journal and the tables go (default: [output] dir)")
    out.add_argument("--quiet", action="store_true", help="no progress line and no 'warning:' lines")
    add_save_scenario_arg(out)  # here the sweep file, with --workers and --output-dir folded in
    return p


def saved_sweep(args) -> dict:
    """The sweep file as run: its tables with --workers into [run] and --output-dir into [output]."""
    from pathlib import Path

    from simulator.sweep.spec import _read
    raw = _read(args.spec)
    raw["_base_dir"] = str(Path(raw.pop("_path")).parent)
    if args.workers is not None:
        raw["run"] = dict(raw.get("run") or {}) | {"workers": args.workers}
    if args.output_dir:
        raw["output"] = dict(raw.get("output") or {}) | {"dir": str(Path(args.output_dir).resolve())}
    return raw


def run(args) -> int:
    from simulator.sweep import check_outputs, parse_sweep, run_sweep

    if args.workers is not None and args.workers < 1:
        raise PlannerError(f"--workers must be >= 1, got {args.workers}")
    if args.max_tasks is not None and args.max_tasks < 0:
        raise PlannerError(f"--max-tasks must be >= 0, got {args.max_tasks}")
    if args.output_dir and not args.dry_run:  # before the expansion; the file names once it is read
        check_output_dir(args.output_dir)
    check_save_scenario(args)
    spec = parse_sweep(args.spec, output_dir=args.output_dir, workers=args.workers, deployment=args.deployment)
    if args.save_scenario:
        save_scenario(args, saved_sweep(args))
    if args.dry_run:
        fitted = f", {spec.fitted_tasks} on a deployment fit" if spec.deployment_fits else ""
        print(f"{spec.name}: {spec.n_combinations} combinations, {len(spec.tasks)} tasks"
              f" x {len(spec.policies) if spec.run['size'] else 1} rows, {len(spec.filtered)} filtered{fitted};"
              f" output {spec.output['dir']}")
        counts: dict = {}
        for f in spec.filtered:
            counts[(f["filter"], f["reason"])] = counts.get((f["filter"], f["reason"]), 0) + 1
        for (kind, reason), n in counts.items():
            print(f"  filtered ({kind}) x{n}: {reason}")
        return 0
    check_outputs(spec, args.output_dir)
    try:
        res = run_sweep(spec, output_dir=args.output_dir, ray_address=args.ray_address, max_tasks=args.max_tasks,
                        progress=not args.quiet)
    except (KeyboardInterrupt, Terminated) as stop:
        signum = getattr(stop, "signum", signal.SIGINT)
        print(f"{chr(10) if sys.stderr.isatty() else ''}interrupted by {signal.Signals(signum).name}: finished tasks are in"
              f" {spec.output['dir']}/journal.jsonl; rerun the same command to resume", file=sys.stderr)
        return 128 + signum
    done = res.resumed + res.computed
    if not res.complete:
        print(f"{spec.name}: {done}/{len(spec.tasks)} tasks in {spec.output['dir']}/journal.jsonl;"
              " rerun the same command to finish", file=sys.stderr)
        return 0
    say_written(res.written)
    n_front = int(res.table["pareto"].sum())
    print(f"{spec.name}: {len(spec.tasks)} tasks ({res.computed} computed, {res.resumed} from the journal),"
          f" {len(res.filtered)} filtered, {len(res.table)} rows, {n_front} on the Pareto front"
          f" ({res.elapsed_s:.1f} s, {res.backend})", file=sys.stderr)
    return 0


main = command(build_parser, run)

if __name__ == "__main__":
    sys.exit(main())
