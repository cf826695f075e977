"""Sizing CLI: hardware, GPU count and cost per million tokens for a scenario's traffic and SLOs.

    python -m simulator.size --scenario scenarios/sizing-dense-command-a.toml --output-dir reports/
    python -m simulator.size --all-bundled --output-dir reports/          # every scenarios/sizing-*.toml
    python -m simulator.size --scenario S --format json                   # to stdout when no --output-dir
    python -m simulator.size --model llama-3.1-70b --hardware h100-sxm --tp 4 --draft eagle3 \
        --rate 30 --prompt-len 1024 --output-len 300 --ttft-p99 2 --tpot-p50 0.05 \
        --candidates h100-sxm,h200 --save-scenario mine.toml             # no TOML needed; saved for next time

Errors in the input (unknown hardware, negative SLO, malformed section) print one line on stderr
and exit with code 2.
"""
from __future__ import annotations

import math
import sys

from simulator.errors import PlannerError
from simulator.cli.common import (OneLineParser, path_given, add_dtype_args, add_save_scenario_arg, add_setting_args, blame_flag,
                                 check_output_dir, check_save_scenario, command, dtype_overrides, load_with_flags,
                                 save_scenario, say_written, setting_overrides, write_files_atomically)
from simulator.sizing.spec import SLO_KEYS

FORMATS = ("html", "markdown", "json")
SUFFIX = {"html": ".html", "markdown": ".md", "json": ".json"}


def _default(key: str):
    """What a scenario without [sizing] KEY gets (SizingSpec's default), for the help text."""
    from simulator.sizing.spec import SizingSpec
    return SizingSpec.__dataclass_fields__[key].default


def build_parser():
    p = OneLineParser(prog="python -m simulator.size", description=__doc__.split("\n\n")[0])
    what = p.add_argument_group("scenario", "what to size: a scenario with [traffic], [slo], [sizing], or flags alone"
                                " (--model and --hardware with --rate and an SLO flag); flags override its values")
    src = what.add_mutually_exclusive_group()
    src.add_argument("--scenario", help="scenario TOML with [traffic], [slo], [sizing] (path or bundled name); the"
                     " flags below override it, or replace it: --model and --hardware with --rate and an SLO flag")
    src.add_argument("--all-bundled", action="store_true", help="size every bundled scenarios/sizing-*.toml")
    add_setting_args(what, "model", "hardware", "draft", "engine", "engine_version")
    what.add_argument("--rate", type=float, help="target load in the scenario's unit: requests/s ([sizing] target_rate_per_s),"
                      " or users where it sizes by [sizing] target_concurrency (overrides the scenario's target; without"
                      " --scenario, Poisson arrivals at this rate)")
    add_setting_args(what, "acceptance")
    add_dtype_args(what)  # the scenario's precision (the [sizing] dtypes entry ""); fp8 candidates stay W8A8
    traffic = p.add_argument_group("traffic and SLOs", "instead of [traffic] and [slo]")
    traffic.add_argument("--prompt-len", type=int, metavar="TOKENS",
                         help=f"mean prompt length (default [traffic] prompt_len, else {WORKLOAD_DEFAULTS['prompt_len']})")
    traffic.add_argument("--output-len", type=int, metavar="TOKENS",
                         help=f"mean output length (default [traffic] output_len, else {WORKLOAD_DEFAULTS['output_len']})")
    for key in SLO_KEYS:
        traffic.add_argument(_slo_flag(key), type=float, metavar="SECONDS", help=f"SLO: {key} <= SECONDS ([slo] {key})")
    search = p.add_argument_group("search", "the candidates and how hard to look (default: the scenario's [sizing])")
    search.add_argument("--candidates", help="comma-separated hardware names (overrides [sizing] candidates; default: the"
                        " scenario's own hardware)")
    search.add_argument("--tp", help="comma-separated TP degrees (overrides [sizing] tp); without --scenario the first is"
                        " the deployment's own")
    search.add_argument("--dtypes", help="precisions searched, comma-separated: own (the scenario's) and/or fp8 (W8A8);"
                        " default: the scenario's own alone (a quantized pick names its quality caveat)")
    search.add_argument("--price", metavar="GPU=USD,...", help="price per GPU-hour, e.g. h100-sxm=2.5,h200=3.2 (overrides"
                        " [sizing] prices and the catalog's indicative prices)")
    add_setting_args(search, "deployment", "learned", notes={
        "deployment": "for the scenario's own deployment; candidates on other hardware or TP are sized without it"})
    search.add_argument("--workers", type=int, help=f"parallel worker processes (default [sizing] workers, else {_default('workers')})")
    search.add_argument("--n-requests", type=int, help=f"requests per serving simulation (default [sizing] n_requests, else {_default('n_requests')})")
    search.add_argument("--search-steps", type=int, help=f"bisection steps after bracketing (default [sizing] search_steps, else {_default('search_steps')})")
    search.add_argument("--no-sensitivity", action="store_true", help="skip the acceptance / bandwidth reruns (also [sizing] sensitivity = false)")
    out = p.add_argument_group("output", "what to write and where")
    out.add_argument("--output-dir", type=path_given, help="write <scenario>.html/.md/.json here, in place of an earlier"
                     " run's reports of the scenario in other formats (default: print to stdout)")
    out.add_argument("--format", action="append", choices=FORMATS,
                     help="output format, repeatable (default: html and markdown with --output-dir, markdown otherwise)")
    add_save_scenario_arg(out)
    return p


WORKLOAD_DEFAULTS = {"prompt_len": 1024, "output_len": 256}  # simulator.serving.Workload's own defaults


def _slo_flag(key: str) -> str:
    """[slo] ttft_p99_s -> --ttft-p99."""
    return "--" + key.removesuffix("_s").replace("_", "-")


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
                           sensitivity=False if args.no_sensitivity else None,
                           dtypes=[d.strip() for d in args.dtypes.split(",") if d.strip()] if args.dtypes else None,
                           prices=_prices(args.price) if args.price else None)


def _prices(text: str) -> dict:
    out = {}
    for item in text.split(","):
        name, _, usd = item.partition("=")
        try:
            out[name.strip()] = float(usd)
        except ValueError:
            raise PlannerError(f"--price '{text}': expected GPU=USD per GPU-hour, e.g. h100-sxm=2.5,h200=3.2") from None
        if not 0 <= out[name.strip()] < math.inf:
            raise PlannerError(f"--price {item}: give a finite price per GPU-hour >= 0, e.g. h100-sxm=2.5")
    return out


SCENARIO_FLAGS = ("model", "hardware", "draft", "engine", "engine_version", "acceptance", "deployment", "learned",
                  "dtype", "act_dtype", "kv_dtype", "attention_dtype")
SIZING_KEYS = ("candidates", "tp", "policies", "dtypes", "workers", "n_requests", "search_steps", "seed", "sensitivity",
               "max_replicas", "duration_s", "max_requests", "headroom", "spare_replicas")


def flags_scenario(args):
    """The one scenario this command sizes: the --scenario file (if any) with every flag folded into it
    ([traffic], [slo], [sizing] included), so that what runs is what --save-scenario writes."""
    from simulator.sizing.spec import parse_sizing
    from simulator.specs.scenario import apply_overrides, build_scenario, read_scenario_file

    over = setting_overrides(args, *SCENARIO_FLAGS)
    ov = _overrides(args)
    if args.scenario:
        raw = read_scenario_file(args.scenario)
        origin = raw.pop("_path")
    else:
        if not (args.model and args.hardware):
            raise PlannerError("give --scenario FILE, or --model and --hardware with --rate and an SLO"
                               " (e.g. --tpot-p50 0.05): python -m simulator.size --help")
        raw, origin = {"model": {}, "hardware": {}}, "flags"
        if ov.tp:
            over["tp"] = ov.tp[0]  # the deployment's own TP: the first asked
    base = raw
    try:
        raw = apply_overrides(base, over)
        build_scenario(raw, origin, raw.get("_base_dir"))  # refused here: said of the flag that causes it
    except PlannerError as err:
        raise blame_flag(err, lambda **o: build_scenario(apply_overrides(base, o), origin, base.get("_base_dir")),
                         over) from None
    traffic = raw.setdefault("traffic", {})
    if origin == "flags":
        traffic.setdefault("arrival", "poisson")
    for key in ("prompt_len", "output_len"):
        if getattr(args, key) is not None:
            if getattr(args, key) < 1:
                raise PlannerError(f"--{key.replace('_', '-')} {getattr(args, key)}: give a token count >= 1")
            traffic[key] = getattr(args, key)
        elif origin == "flags":
            traffic.setdefault(key, WORKLOAD_DEFAULTS[key])
    slo = {key: getattr(args, _slo_flag(key)[2:].replace("-", "_")) for key in SLO_KEYS}
    slo = {k: v for k, v in slo.items() if v is not None}
    for key, value in slo.items():
        if not value > 0:
            raise PlannerError(f"{_slo_flag(key)} {value:g}: give the SLO in seconds (> 0), e.g. {_slo_flag(key)} 0.05")
    if slo:
        raw["slo"] = dict(raw.get("slo") or {}) | slo
    if origin == "flags" and args.rate is not None:
        traffic["rate_per_s"] = args.rate
    if origin == "flags" and not slo:
        raise PlannerError("give at least one SLO flag (e.g. --ttft-p99 2 --tpot-p50 0.05, in seconds)")
    if origin == "flags" and args.rate is None:
        raise PlannerError("give the target load: --rate REQUESTS_PER_S")
    sc = build_scenario(raw, origin, raw.get("_base_dir"))
    # the [sizing] flags into [sizing], the target load where the scenario reads it
    spec = parse_sizing(sc, **ov.as_kwargs())
    sizing = dict(raw.get("sizing") or {})
    given = ov.as_kwargs()
    for key in SIZING_KEYS:
        if given.get(key) is not None:
            sizing[key] = given[key]
    if given.get("prices"):
        sizing["prices"] = dict(sizing.get("prices") or {}) | given["prices"]
    if args.rate is not None and origin != "flags":
        for key in ("target_rate_per_s", "target_concurrency"):
            sizing.pop(key, None)
        if spec.load_kind == "rate":
            sizing["target_rate_per_s"] = spec.target_load
        else:
            sizing["target_concurrency"] = int(spec.target_load)
    if sizing:
        raw["sizing"] = sizing
    return build_scenario(raw, origin, raw.get("_base_dir"))


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


def stale_reports(out_dir, names, formats) -> list[str]:
    """The reports of these scenarios in ``out_dir`` in a format not written this time (an earlier run's
    .html beside this run's .md): they would disagree with the new set. Only files this command wrote
    (a regular file that reads as a sizing report of that scenario) are named, never a user's own."""
    import os
    import stat
    from simulator.files import read_input_text
    from simulator.sizing.report import is_sizing_report

    out = []
    for name in dict.fromkeys(names):
        for fmt in FORMATS:
            path = out_dir / f"{name}{SUFFIX[fmt]}"
            if fmt in formats or not os.path.lexists(path) or not stat.S_ISREG(os.lstat(path).st_mode):
                continue
            try:
                if is_sizing_report(read_input_text(path, "sizing report"), name):
                    out.append(path.name)
            except PlannerError:  # unreadable, too large, not text: not ours to remove
                pass
    return out


def check_sizing_flags(args) -> None:
    """Each numeric flag finite and in its range (the caps of [sizing], simulator.sizing.spec), named by its flag."""
    from simulator.sizing.spec import MAX_TARGET_LOAD, SETTING_CAPS

    if args.workers is not None and not 1 <= args.workers <= SETTING_CAPS["workers"]:
        raise PlannerError(f"--workers must be between 1 and {SETTING_CAPS['workers']}, got {args.workers}")
    if args.rate is not None and not (math.isfinite(args.rate) and 0 < args.rate <= MAX_TARGET_LOAD):
        raise PlannerError(f"--rate must be a finite load > 0 and at most {MAX_TARGET_LOAD:g}, got {args.rate}")
    if args.n_requests is not None and not 20 <= args.n_requests <= SETTING_CAPS["n_requests"]:
        raise PlannerError(f"--n-requests {args.n_requests}: give between 20 (stable percentiles) and"
                           f" {SETTING_CAPS['n_requests']} requests per serving run")
    if args.search_steps is not None and not 0 <= args.search_steps <= SETTING_CAPS["search_steps"]:
        raise PlannerError(f"--search-steps {args.search_steps}: give between 0 and {SETTING_CAPS['search_steps']}")


def run(args) -> int:
    from simulator.sizing import bundled_sizing_scenarios, size
    from simulator.sizing.report import render_html, render_json, render_markdown
    from simulator.specs.scenario import Scenario

    check_sizing_flags(args)
    # checked before the (long) search, the files it will write included; written at the end, all or none
    out_dir = check_output_dir(args.output_dir) if args.output_dir else None
    formats = args.format or (["html", "markdown"] if out_dir else ["markdown"])
    if args.all_bundled:
        one_only = [f for f, v in (("--deployment", args.deployment), ("--save-scenario", args.save_scenario),
                                   ("--model", args.model), ("--hardware", args.hardware), ("--draft", args.draft),
                                   ("--engine", args.engine)) if v]
        if one_only:
            raise PlannerError(f"{one_only[0]} applies to one scenario (--scenario or flags), not --all-bundled")
    precision = dtype_overrides(args)
    scenarios = bundled_sizing_scenarios() if args.all_bundled else [flags_scenario(args)]
    if not scenarios:
        raise PlannerError("no bundled sizing scenarios (scenarios/sizing-*.toml)")
    report_names = [f"{n}{SUFFIX[f]}" for n in _names(scenarios) for f in formats] if out_dir is not None else []
    if out_dir is not None:
        check_output_dir(out_dir, names=report_names)
    check_save_scenario(args, [out_dir / name for name in report_names])
    renderers = {"html": render_html, "markdown": render_markdown, "json": render_json}
    if "html" in formats:
        from simulator.sizing.report_charts import start_renderer_warmup
        start_renderer_warmup()  # the chart renderer starts while the search runs
    files: dict[str, str] = {}
    sized: list[str] = []  # the scenario names of the reports written
    for scenario in scenarios:
        if isinstance(scenario, Scenario):  # one scenario: every flag is in it already
            res = size(scenario)
        else:
            if args.acceptance or args.physics_only or any(v is not None for v in precision.values()):
                scenario = load_with_flags(str(scenario), acceptance=args.acceptance,
                                           learned=False if args.physics_only else None, **precision)
            res = size(scenario if isinstance(scenario, Scenario) else str(scenario), _overrides(args))
        if not args.all_bundled:  # one scenario: the report's "Regenerate" is the command as typed
            res.command = getattr(args, "command_line", "")
        sized.append(res.scenario.name)
        for fmt in dict.fromkeys(formats):
            text = renderers[fmt](res)
            if out_dir is None:
                sys.stdout.write(text + "\n")
            else:
                files[f"{res.scenario.name}{SUFFIX[fmt]}"] = text
        print(f"{res.scenario.name}: {res.message} ({res.elapsed_s:.0f} s)", file=sys.stderr)
    if out_dir is not None:
        stale = stale_reports(out_dir, sized, formats)
        say_written(write_files_atomically(out_dir, files, drop=stale))
        for name in stale:
            print(f"removed {out_dir / name} (an older report of another format; the set is the one just written)",
                  file=sys.stderr)
    if args.save_scenario:
        save_scenario(args, scenarios[0].raw, scenarios[0].name)
    return 0


main = command(build_parser, run)

if __name__ == "__main__":
    sys.exit(main())
