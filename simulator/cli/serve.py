"""`python -m simulator.serve`: simulate serving traffic under speculative-decoding policies.

Examples::

    python -m simulator.serve --scenario rl-rollout-long-tail --policy all
    python -m simulator.serve --scenario command-a-h100 --waves 256,20 --policy plain,fixed,dsd
    python -m simulator.serve --scenario command-a-h100 --rate 4 --requests 2000 --format json
    python -m simulator.serve --scenario command-a-h100 --policy dsd --graphs   # CUDA graphs the K table needs

The traffic and engine come from the scenario's [traffic] and [serving] sections; --rate,
--concurrency and --waves replace its arrival process. One summary row per policy.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import warnings

import pandas as pd

from simulator.errors import PlannerError, PlannerWarning
from simulator.cli.common import (OneLineParser, add_dtype_args, add_save_scenario_arg, add_setting_args, check_save_scenario,
                                 command, dtype_overrides, dtypes_text, load_with_flags, save_scenario)
from simulator.specs.scenario import DEFAULT_SCENARIO
from simulator.plan.runner_advice import drafts_table_max_caveat

FORMATS = ("table", "json", "csv")
# Bounds that keep one simulation within a laptop's memory and minutes: the step loop keeps a few
# arrays per request (about 1 kB each), so 10^6 requests is ~1 GB; 10^12 would be terabytes.
MAX_REQUESTS = 1_000_000
MAX_SEQS = 65_536


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="python -m simulator.serve",
                      description="Step-level serving simulation of speculative-decoding policies.")
    what = p.add_argument_group("scenario", "what runs: the scenario file, and flags that override its values")
    what.add_argument("--scenario", default=str(DEFAULT_SCENARIO),
                      help="scenario TOML file or bundled name (default scenarios/default.toml)")
    what.add_argument("--policy", default="all",
                      help="plain|fixed|dsd|dsd-adaptive|per-request|cutoff (fixed:K, cutoff:B), a comma list, or all"
                      " (the default)")
    add_setting_args(what, "acceptance")
    add_dtype_args(what)
    traffic = p.add_argument_group("traffic", "the requests (default: the scenario's [traffic]); one arrival process at most")
    traffic.add_argument("--requests", type=int, help="number of requests (default: [traffic] n_requests)")
    traffic.add_argument("--seed", type=int, default=0, help="seed of the arrival times and request lengths (default 0)")
    load = traffic.add_mutually_exclusive_group()
    load.add_argument("--rate", type=float, help="Poisson arrivals at this rate [requests/s]")
    load.add_argument("--concurrency", type=int, help="closed loop with this many users")
    load.add_argument("--waves", help="B,MULT: MULT x B prompts at once, at most B in flight")
    server = p.add_argument_group("deployment", "calibration and the engine's settings")
    add_setting_args(server, "deployment", "learned", "max_num_seqs", notes={"deployment": "every serving step uses them"})
    out = p.add_argument_group("output", "what to print")
    out.add_argument("--format", default="table", help="table | json | csv (default table; json: an object with"
                     " 'provenance' (the step times' basis and band, the speedups' band, as predict's JSON) and"
                     " 'summary'; csv: the summary rows only, as predict's csv)")
    out.add_argument("--graphs", action="store_true", help="also list the (tokens, K) CUDA graphs each policy's K table needs"
                     " (decode-only steps; the adaptive policies start from dsd's table)")
    add_save_scenario_arg(out)
    return p


def saved_raw(sc, args) -> dict:
    """The scenario with the load flags folded into [traffic] and the running cap into [serving]: what
    --save-scenario writes, which simulates the same workload when loaded back."""
    raw = dict(sc.raw)
    traffic = dict(raw.get("traffic") or {})
    if args.requests is not None:
        traffic["n_requests"] = args.requests
    if args.rate is not None:
        traffic = {k: v for k, v in traffic.items() if k not in ("concurrency", "waves")} | {
            "arrival": "poisson", "rate_per_s": args.rate}
    elif args.concurrency is not None:
        traffic = {k: v for k, v in traffic.items() if k != "waves"} | {"arrival": "closed",
                                                                      "concurrency": args.concurrency}
    elif args.waves:
        b, mult = _waves(args.waves)
        traffic = {k: v for k, v in traffic.items() if k not in ("concurrency", "n_requests", "arrival")} | {
            "waves": [b, mult]}
    if traffic:
        raw["traffic"] = traffic
    cap = args.max_num_seqs
    if cap is None and args.waves:  # a wave's batch size is the server's running cap (as _run sets it)
        from simulator import serving
        cap = max(_waves(args.waves)[0], serving.engine_from_scenario(sc).max_num_seqs)
    if cap is not None:
        raw["serving"] = dict(raw.get("serving") or {}) | {"max_num_seqs": cap}
    return raw


def _policies(text: str) -> list[str]:
    from simulator.serving import POLICIES, parse_policy
    if text == "all":
        return list(POLICIES)
    names = [t.strip() for t in text.split(",") if t.strip()]
    if not names:
        raise PlannerError("--policy: none given")
    for n in names:
        try:
            parse_policy(n)
        except PlannerError as err:
            raise PlannerError(f"--policy: {err}") from None
    return names


def _waves(text: str) -> tuple[int, int]:
    try:
        b, mult = (int(x) for x in text.split(","))
    except ValueError:
        raise PlannerError(f"--waves '{text}': expected B,MULT such as 256,20") from None
    if b < 1 or mult < 1:
        raise PlannerError(f"--waves {text}: B and MULT must be >= 1")
    if b > MAX_SEQS or b * mult > MAX_REQUESTS:
        raise PlannerError(f"--waves {text}: at most B={MAX_SEQS} and B x MULT = {MAX_REQUESTS} requests")
    return b, mult


def check_flags(args) -> None:
    """Flag ranges, checked before the scenario is loaded or anything simulated."""
    if args.format not in FORMATS:
        raise PlannerError(f"unknown format '{args.format}' (use {', '.join(FORMATS)})")
    if args.graphs and args.format == "csv":  # two tables with different columns make no one CSV file
        raise PlannerError("--graphs --format csv: the summary and the graphs are two tables; use --format json"
                           " (both, as 'summary' and 'graphs') or --format table")
    if not 0 <= args.seed < 2**63:
        raise PlannerError(f"--seed must be an integer in [0, 2^63), got {args.seed}")
    if args.requests is not None and not 1 <= args.requests <= MAX_REQUESTS:
        raise PlannerError(f"--requests must be in 1-{MAX_REQUESTS}, got {args.requests}")
    if args.max_num_seqs is not None and not 1 <= args.max_num_seqs <= MAX_SEQS:
        raise PlannerError(f"--max-num-seqs must be in 1-{MAX_SEQS}, got {args.max_num_seqs}")
    if args.rate is not None and not (args.rate > 0 and math.isfinite(args.rate)):
        raise PlannerError(f"--rate must be a finite number > 0 requests/s, got {args.rate:g}")
    if args.concurrency is not None and not 1 <= args.concurrency <= MAX_REQUESTS:
        raise PlannerError(f"--concurrency must be in 1-{MAX_REQUESTS}, got {args.concurrency}")
    if args.waves:
        _waves(args.waves)


def _workload(sc, args):
    from simulator import serving
    over: dict = {"n_requests": args.requests, "max_num_seqs": args.max_num_seqs}
    if args.rate is not None:
        over |= {"arrival": "poisson", "rate_per_s": args.rate}
    elif args.concurrency is not None:
        over |= {"arrival": "closed", "concurrency": args.concurrency}
    elif args.waves:
        b, mult = _waves(args.waves)
        over |= {"arrival": "waves", "concurrency": b, "n_requests": b * mult}
        if args.max_num_seqs is None:
            over["max_num_seqs"] = max(b, serving.engine_from_scenario(sc).max_num_seqs)
    workload = serving.workload_from_scenario(sc, **over)
    if workload.n_requests > MAX_REQUESTS:
        raise PlannerError(f"{sc.origin}: [traffic] asks for {workload.n_requests} requests; at most {MAX_REQUESTS}"
                           " per simulation (pass --requests N)")
    return workload


LATENCY = ("ttft_", "tpot_", "itl_")  # latency columns in seconds in the summary: printed in ms


def table_view(df: pd.DataFrame) -> pd.DataFrame:
    """The summary for reading: latencies in ms (1 decimal), rates and counts with thousands
    separators, no scientific notation. CSV and JSON keep the raw columns (seconds)."""
    out = pd.DataFrame(index=df.index)
    for col in df.columns:
        v = df[col]
        if col.startswith(LATENCY) and col.endswith("_s"):
            out[col[:-2] + " ms"] = [f"{x * 1e3:,.1f}" if pd.notna(x) else "-" for x in v]
        elif col == "makespan_s":
            out["makespan s"] = [f"{x:,.1f}" for x in v]
        elif col in ("throughput_tok_s", "output_tokens", "n_requests"):
            out[col.replace("_tok_s", " tok/s")] = [f"{x:,.0f}" for x in v]
        elif pd.api.types.is_float_dtype(v):
            out[col] = [f"{x:,.2f}" if pd.notna(x) else "-" for x in v]
        else:
            out[col] = v
    return out


def same_as_dsd(df: pd.DataFrame) -> str:
    """A note when dsd and dsd-adaptive produced identical summaries, with the reason."""
    if "policy" not in df or not {"dsd", "dsd-adaptive"} <= set(df.policy):
        return ""
    a = df[df.policy == "dsd"].drop(columns="policy").iloc[0]
    b = df[df.policy == "dsd-adaptive"].drop(columns="policy").iloc[0]
    def close(x, y):
        if isinstance(x, (int, float)) and isinstance(y, (int, float)):
            return (pd.isna(x) and pd.isna(y)) or abs(x - y) <= 0.01 * max(abs(x), abs(y))
        return x == y
    if not all(close(x, y) for x, y in zip(a, b)):
        return ""
    same = "=" if all((x == y) or (pd.isna(x) and pd.isna(y)) for x, y in zip(a, b)) else "matches (within 1%)"
    return (f"note: dsd-adaptive {same} dsd here. It starts from the scenario's acceptance rates and re-solves K* from"
            " the accepts it observes; the simulated traffic accepts at those same rates, so it keeps dsd's K"
            " table. The two differ when the traffic's acceptance differs from the scenario's ([traffic] classes).\n")


def render(df: pd.DataFrame, fmt: str) -> str:
    if fmt == "csv":
        return df.to_csv(index=False)
    if fmt == "json":
        return json.dumps(json.loads(df.to_json(orient="records")), indent=2) + "\n"
    return table_view(df).to_string(index=False) + "\n" + same_as_dsd(df)


def _run(args) -> int:
    check_flags(args)
    check_save_scenario(args)
    from simulator import serving
    policies = _policies(args.policy)
    sc = load_with_flags(args.scenario, acceptance=args.acceptance, deployment=args.deployment,
                         learned=False if args.physics_only else None, **dtype_overrides(args))
    workload = _workload(sc, args)
    # --max-num-seqs, or a wave's batch size, is the server's running cap: the engine's own default with
    # speculation (SGLang's 48) applies only where neither sets one
    explicit = args.max_num_seqs if args.max_num_seqs is not None else (workload.max_num_seqs if args.waves else None)
    engine = serving.engine_from_scenario(sc, max_num_seqs=explicit)
    capped = [p for p in policies if p != "plain" and serving.running_cap(engine, workload, True)
              < serving.running_cap(engine, workload, False)]
    if capped:
        warnings.warn(PlannerWarning(
            f"{sc.engine.display_name} runs at most {engine.spec_max_num_seqs} requests at once with speculative"
            f" decoding on and no cap set (its --max-running-requests default): {', '.join(capped)} simulated at"
            f" that cap; give [serving] max_num_seqs or --max-num-seqs N to set the server's own"))
    caveat = drafts_table_max_caveat(sc) if {"dsd", "dsd-adaptive"} & {p.split(":")[0] for p in policies} else None
    if caveat:
        warnings.warn(PlannerWarning(caveat))
    results = [serving.simulate(sc, p, workload=workload, seed=args.seed, engine=engine) for p in policies]
    df = pd.DataFrame([r.summary for r in results])
    text = render(df, args.format)
    graphs = None
    if args.graphs:
        frames = [serving.required_graphs(serving.policy_k_table(
            sc, p, serving.running_cap(engine, workload, p != "plain"), engine),
            serving.graph_profile(sc.engine, engine)).assign(policy=p)
            for p in policies]
        graphs = pd.concat(frames, ignore_index=True)[["policy", "tokens", "k", "batch_min", "batch_max",
                                                       "captured"]]
        if args.format != "json":
            text += "\n" + render(graphs, args.format)
    if args.format == "json":  # what the numbers rest on, as predict's JSON carries it
        from simulator.plan.provenance import scenario_provenance
        text = json.dumps({"provenance": scenario_provenance(sc), "summary": json.loads(df.to_json(orient="records"))}
                          | ({} if graphs is None else {"graphs": json.loads(graphs.to_json(orient="records"))}),
                          indent=2) + "\n"
    if args.format == "table":
        from simulator.plan.provenance import scenario_serving_check_text, step_trust_text
        text += (f"# {sc.model.name} on {sc.deployment.tp} x {sc.hardware.name}, draft {sc.draft.label};"
                 f" {dtypes_text(sc)}\n# step times: {sc.cost_source}\n"
                 f"# how far to trust them: {step_trust_text(sc)}\n"
                 f"# serving {scenario_serving_check_text(sc)}\n")
    sys.stdout.write(text)
    if args.save_scenario:
        save_scenario(args, saved_raw(sc, args), sc.name)
    return 0


main = command(build_parser, _run)

if __name__ == "__main__":
    sys.exit(main())
