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
import sys

import pandas as pd

from simulator.errors import PlannerError
from simulator.cli.common import OneLineParser, run_cli
from simulator.specs.scenario import DEFAULT_SCENARIO, load_scenario

FORMATS = ("table", "json", "csv")


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="python -m simulator.serve",
                      description="Step-level serving simulation of speculative-decoding policies.")
    p.add_argument("--scenario", default=str(DEFAULT_SCENARIO), help="scenario TOML file or bundled name")
    p.add_argument("--policy", default="all",
                   help="plain|fixed|dsd|dsd-adaptive|per-request|cutoff (fixed:K, cutoff:B), a comma list, or all")
    p.add_argument("--format", default="table", help="table | json | csv")
    p.add_argument("--requests", type=int, help="number of requests (default: [traffic] n_requests)")
    p.add_argument("--seed", type=int, default=0)
    load = p.add_mutually_exclusive_group()
    load.add_argument("--rate", type=float, help="Poisson arrivals at this rate [requests/s]")
    load.add_argument("--concurrency", type=int, help="closed loop with this many users")
    load.add_argument("--waves", help="B,MULT: MULT x B prompts at once, at most B in flight")
    p.add_argument("--max-num-seqs", type=int, help="engine limit on running sequences")
    p.add_argument("--graphs", action="store_true", help="also list the (tokens, K) CUDA graphs each policy's K table needs"
                   " (decode-only steps; the adaptive policies start from dsd's table)")
    return p


def _policies(text: str) -> list[str]:
    from simulator.serving import POLICIES, parse_policy
    if text == "all":
        return list(POLICIES)
    names = [t.strip() for t in text.split(",") if t.strip()]
    if not names:
        raise PlannerError("--policy: none given")
    for n in names:
        parse_policy(n)
    return names


def _workload(sc, args):
    from simulator import serving
    over: dict = {"n_requests": args.requests, "max_num_seqs": args.max_num_seqs}
    if args.requests is not None and args.requests < 1:
        raise PlannerError(f"--requests must be >= 1, got {args.requests}")
    if args.rate is not None:
        if not args.rate > 0:
            raise PlannerError(f"--rate must be > 0 requests/s, got {args.rate:g}")
        over |= {"arrival": "poisson", "rate_per_s": args.rate}
    elif args.concurrency is not None:
        if args.concurrency < 1:
            raise PlannerError(f"--concurrency must be >= 1, got {args.concurrency}")
        over |= {"arrival": "closed", "concurrency": args.concurrency}
    elif args.waves:
        try:
            b, mult = (int(x) for x in args.waves.split(","))
        except ValueError:
            raise PlannerError(f"--waves '{args.waves}': expected B,MULT such as 256,20") from None
        if b < 1 or mult < 1:
            raise PlannerError(f"--waves {args.waves}: B and MULT must be >= 1")
        over |= {"arrival": "waves", "concurrency": b, "n_requests": b * mult}
        if args.max_num_seqs is None:
            over["max_num_seqs"] = max(b, serving.engine_from_scenario(sc).max_num_seqs)
    return serving.workload_from_scenario(sc, **over)


def render(df: pd.DataFrame, fmt: str) -> str:
    if fmt == "csv":
        return df.to_csv(index=False)
    if fmt == "json":
        return json.dumps(json.loads(df.to_json(orient="records")), indent=2) + "\n"
    return df.to_string(index=False, float_format=lambda v: f"{v:.4g}") + "\n"


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return run_cli(lambda: _run(args))


def _run(args) -> int:
    if args.format not in FORMATS:
        raise PlannerError(f"unknown format '{args.format}' (use {', '.join(FORMATS)})")
    from simulator import serving
    policies = _policies(args.policy)
    sc = load_scenario(args.scenario)
    engine = serving.engine_from_scenario(sc)
    workload = _workload(sc, args)
    results = [serving.simulate(sc, p, workload=workload, seed=args.seed, engine=engine) for p in policies]
    df = pd.DataFrame([r.summary for r in results])
    text = render(df, args.format)
    if args.graphs:
        max_seqs = int(workload.max_num_seqs or engine.max_num_seqs)
        frames = [serving.required_graphs(serving.policy_k_table(sc, p, max_seqs, engine), engine)
                  .assign(policy=p) for p in policies]
        graphs = pd.concat(frames, ignore_index=True)[["policy", "tokens", "k", "batch_min", "batch_max",
                                                       "captured"]]
        if args.format == "json":
            text = json.dumps({"summary": json.loads(df.to_json(orient="records")),
                               "graphs": json.loads(graphs.to_json(orient="records"))}, indent=2) + "\n"
        else:
            text += ("\n" if args.format == "table" else "") + render(graphs, args.format)
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
