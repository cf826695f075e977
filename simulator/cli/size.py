"""Sizing CLI: hardware, GPU count and cost per million tokens for a scenario's traffic and SLOs.

    python -m simulator.size --scenario scenarios/sizing-dense-command-a.toml --output-dir reports/
    python -m simulator.size --all-bundled --output-dir reports/          # every scenarios/sizing-*.toml
    python -m simulator.size --scenario S --format json                   # to stdout when no --output-dir

Errors in the input (unknown hardware, negative SLO, malformed section) print one line on stderr
and exit with code 2.
"""
from __future__ import annotations

import sys

from simulator.errors import PlannerError
from simulator.cli.common import (OneLineParser, add_dtype_args, add_setting_args, check_output_dir, command, dtype_overrides, say_written,
                                 write_files_atomically)

FORMATS = ("html", "markdown", "json")
SUFFIX = {"html": ".html", "markdown": ".md", "json": ".json"}


def _default(key: str):
    """What a scenario without [sizing] KEY gets (SizingSpec's default), for the help text."""
    from simulator.sizing.spec import SizingSpec
    return SizingSpec.__dataclass_fields__[key].default


def build_parser():
    p = OneLineParser(prog="python -m simulator.size", description=__doc__.split("\n\n")[0])
    what = p.add_argument_group("scenario", "what to size: a scenario with [traffic], [slo], [sizing], and flags that"
                                " override its values")
    src = what.add_mutually_exclusive_group(required=True)
    src.add_argument("--scenario", help="scenario TOML with [traffic], [slo], [sizing] (path or bundled name)")
    src.add_argument("--all-bundled", action="store_true", help="size every bundled scenarios/sizing-*.toml")
    what.add_argument("--rate", type=float, help="target load in the scenario's unit: requests/s ([sizing] target_rate_per_s),"
                      " or users where it sizes by [sizing] target_concurrency (overrides the scenario's target)")
    add_setting_args(what, "acceptance")
    add_dtype_args(what)  # the scenario's precision (the [sizing] dtypes entry ""); fp8 candidates stay W8A8
    search = p.add_argument_group("search", "the candidates and how hard to look (default: the scenario's [sizing])")
    search.add_argument("--candidates", help="comma-separated hardware names (overrides [sizing] candidates)")
    search.add_argument("--tp", help="comma-separated TP degrees (overrides [sizing] tp)")
    add_setting_args(search, "deployment", notes={
        "deployment": "for the scenario's own deployment; candidates on other hardware or TP are sized without it"})
    search.add_argument("--workers", type=int, help=f"parallel worker processes (default [sizing] workers, else {_default('workers')})")
    search.add_argument("--n-requests", type=int, help=f"requests per serving simulation (default [sizing] n_requests, else {_default('n_requests')})")
    search.add_argument("--search-steps", type=int, help=f"bisection steps after bracketing (default [sizing] search_steps, else {_default('search_steps')})")
    search.add_argument("--no-sensitivity", action="store_true", help="skip the acceptance / bandwidth reruns (also [sizing] sensitivity = false)")
    out = p.add_argument_group("output", "what to write and where")
    out.add_argument("--output-dir", help="write <scenario>.html/.md/.json here (default: print to stdout)")
    out.add_argument("--format", action="append", choices=FORMATS,
                     help="output format, repeatable (default: html and markdown with --output-dir, markdown otherwise)")
    return p


def _ints(text: str, flag: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise PlannerError(f"{flag} '{text}': expected integers such as 4,8") from None


def _overrides(args) -> SizingOverrides:
    """The [sizing] settings the flags replace (None: the scenario's own)."""
    from simulator.sizing import SizingOverrides

    return SizingOverrides(candidates=args.candidates.split(",") if args.candidates else None,
                           tp=_ints(args.tp, "--tp") if args.tp else None, target_load=args.rate,
                           workers=args.workers, n_requests=args.n_requests, search_steps=args.search_steps,
                           sensitivity=False if args.no_sensitivity else None)


def _names(scenarios) -> list[str]:
    """The scenario names the output files are named after (a scenario that does not load is refused by
    the search itself, with its own message)."""
    from simulator.specs.scenario import Scenario, load_scenario

    out = []
    for scenario in scenarios:
        if isinstance(scenario, Scenario):  # already loaded (--deployment)
            out.append(scenario.name)
            continue
        try:
            out.append(load_scenario(str(scenario)).name)
        except PlannerError:
            pass
    return out


def run(args) -> int:
    from simulator.sizing import bundled_sizing_scenarios, size
    from simulator.sizing.report import render_html, render_json, render_markdown
    from simulator.specs.scenario import Scenario, load_scenario

    if args.workers is not None and args.workers < 1:
        raise PlannerError(f"--workers must be >= 1, got {args.workers}")
    if args.rate is not None and not args.rate > 0:
        raise PlannerError(f"--rate must be > 0, got {args.rate}")
    # checked before the (long) search, the files it will write included; written at the end, all or none
    out_dir = check_output_dir(args.output_dir) if args.output_dir else None
    formats = args.format or (["html", "markdown"] if out_dir else ["markdown"])
    if args.deployment and args.all_bundled:
        raise PlannerError("--deployment applies to one --scenario (the deployment it was fitted on), not --all-bundled")
    scenarios = bundled_sizing_scenarios() if args.all_bundled else [args.scenario]
    precision = dtype_overrides(args)
    if args.deployment:
        scenarios = [load_scenario(args.scenario, deployment=args.deployment, acceptance=args.acceptance, **precision)]
    if not scenarios:
        raise PlannerError("no bundled sizing scenarios (scenarios/sizing-*.toml)")
    if out_dir is not None:
        check_output_dir(out_dir, names=[f"{n}{SUFFIX[f]}" for n in _names(scenarios) for f in formats])
    renderers = {"html": render_html, "markdown": render_markdown, "json": render_json}
    if "html" in formats:
        from simulator.sizing.report_charts import start_renderer_warmup
        start_renderer_warmup()  # the chart renderer starts while the search runs
    files: dict[str, str] = {}
    for scenario in scenarios:
        if (args.acceptance or any(v is not None for v in precision.values())) and not args.deployment:
            scenario = load_scenario(str(scenario), acceptance=args.acceptance, **precision)
        res = size(scenario if isinstance(scenario, Scenario) else str(scenario), _overrides(args))
        for fmt in dict.fromkeys(formats):
            text = renderers[fmt](res)
            if out_dir is None:
                sys.stdout.write(text + "\n")
            else:
                files[f"{res.scenario.name}{SUFFIX[fmt]}"] = text
        print(f"{res.scenario.name}: {res.message} ({res.elapsed_s:.0f} s)", file=sys.stderr)
    if out_dir is not None:
        say_written(write_files_atomically(out_dir, files))
    return 0


main = command(build_parser, run)

if __name__ == "__main__":
    sys.exit(main())
