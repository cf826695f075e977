"""python -m calibration.engine sweep --target smollm2-135m --draft model:4 --batch-sizes 1,4,16 --k 0-4 ..."""

from __future__ import annotations

import math
import re
import sys

# the planner's batch-size syntax: '1-64' is every integer, '1-64:pow2' the powers of two inside plus
# both ends (what '1-64' meant in this CLI before), '1,2,4,8' those
from simulator.cli.common import OneLineParser, run_cli
from simulator.specs.values import parse_batch_sizes


_LIMIT = 65536  # largest batch size or K a sweep may ask for (checked before a range is expanded)


def _parts(s: str):
    for part in s.split(","):
        part = part.strip()
        if not part:
            continue
        if re.fullmatch(r"-?\d{1,9}", part):
            yield int(part), None
        elif m := re.fullmatch(r"(\d{1,9})-(\d{1,9})", part):
            a, b = int(m[1]), int(m[2])
            if b < a:
                raise ValueError(f"empty range {part!r}")
            if b > _LIMIT:
                raise ValueError(f"{part!r} goes beyond {_LIMIT}")
            yield a, b
        elif re.fullmatch(r"-?\d+(-\d+)?", part):
            raise ValueError(f"{part!r} is out of range (at most {_LIMIT})")
        else:
            raise ValueError(f"cannot parse {part!r}")


def parse_int_list(s: str) -> list[int]:
    """'0,2,4' or '0-6' (every integer) or mixed '0-3,6'."""
    out: list[int] = []
    for a, b in _parts(s):
        out.extend([a] if b is None else range(a, b + 1))
    if not out:
        raise ValueError("empty list")
    return sorted(set(out))


def _reuses(text):
    if text is None:
        return None
    try:
        values = [float(x) for x in str(text).split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"--router-reuse {text!r}: expected numbers such as 0.4 or 0,0.4,0.8") from None
    if not values or any(not 0 <= v < 1 for v in values):
        raise ValueError(f"--router-reuse {text!r}: each value must be in [0, 1)")
    return values


# columns a sweep reads back from an existing --output to skip finished points (sweep._existing_points)
_RESUME_COLUMNS = ("target", "draft", "dtype", "context_len", "batch_size", "k")


def _profile(a) -> int:
    from simulator.errors import PlannerError

    from .profile import write_profile
    try:
        path = write_profile(a.runs, a.output)
    except PlannerError as e:
        print(f"error: {' '.join(str(e).split())}", file=sys.stderr)
        return 2
    print(f"wrote {path}", file=sys.stderr)
    return 0


def main(argv=None) -> int:
    """The sweep CLI inside the planner's error boundary (simulator.cli.common.run_cli): bad input
    raised anywhere below is one line and exit 2; warnings print once."""
    return run_cli(lambda: _main(argv))


def _parser() -> OneLineParser:
    p = OneLineParser(prog="python -m calibration.engine", description=__doc__)
    sub = p.add_subparsers(dest="cmd", required=True, parser_class=OneLineParser)
    s = sub.add_parser("sweep", help="measure ITL and acceptance over (batch size, K)")
    s.add_argument("--target", default="smollm2-135m", help="smollm2-135m | moe-synthetic")
    s.add_argument("--draft", default="ngram", help="ngram | early-exit:N | model:N")
    s.add_argument("--batch-sizes", default="1,2,4,8", help="e.g. 1,2,4,8, 1-64:pow2 (powers of two and both ends) or 1-8 (every integer)")
    s.add_argument("--k", default="0-6", help="e.g. 0-6 or 0,2,4")
    s.add_argument("--context-len", type=int, default=128)
    s.add_argument("--gen-tokens", type=int, default=16)
    s.add_argument("--temperature", type=float, default=0.0)
    s.add_argument("--output", required=True, help="CSV to append rows to")
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--warmup-steps", type=int, default=2)
    s.add_argument("--max-steps", type=int, default=12, help="cap on timed steps per window")
    s.add_argument("--min-steps", type=int, default=4, help="least timed steps per window")
    s.add_argument("--warmup-tokens", type=int, default=0,
                   help="tokens generated once per batch size before timing; every K starts from there")
    s.add_argument("--rounds", type=int, default=1, help="interleaved rounds over all K (medians over all)")
    s.add_argument("--min-sequences", type=int, default=1,
                   help="small batches repeat with other prompts until this many sequences were measured")
    s.add_argument("--forced-acceptance", type=float, default=None,
                   help="timing-only: impose per-position acceptance probability (random-weight targets)")
    s.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    s.add_argument("--device", default=None, help="cpu | cuda (default: cuda if available)")
    s.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's)")
    s.add_argument("--router-reuse", default=None,
                   help="MoE targets: probability that a position re-uses the previous position's experts;"
                        " a comma list (0,0.4,0.8) interleaves them within each round")
    s.add_argument("--trace-output", default=None, help="MoE targets: .npz of router traces (to fit the reuse)")
    s.add_argument("--router-mode", default="learned", choices=["learned", "sampled"],
                   help="MoE targets: sampled = each token draws its experts from Zipf(--router-skew)")
    s.add_argument("--router-skew", type=float, default=0.0, help="Zipf exponent of the sampled router")
    s.add_argument("--clock", default="wall", choices=["wall", "cpu"],
                   help="cpu: time phases by the thread's CPU time (CPU, --threads 1; robust to a busy machine)")
    pr = sub.add_parser("profile", help="write speculation_profile.json (Model-Optimizer schema 1.0) from sweep runs")
    pr.add_argument("--runs", required=True, help="measured-runs CSV of one target/draft pair (sweep --output)")
    pr.add_argument("--output", required=True, help="speculation_profile.json to write")
    return p


def _main(argv=None) -> int:
    a = _parser().parse_args(argv)
    if a.cmd == "profile":
        return _profile(a)
    try:
        bs = [int(b) for b in parse_batch_sizes(a.batch_sizes)]
        ks = parse_int_list(a.k)
    except ValueError as e:
        print(f"error: bad --batch-sizes/--k: {e}", file=sys.stderr)
        return 2
    problem = _sweep_arg_error(a, bs, ks) or _output_error(a)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    return _sweep(a, bs, ks)


def _sweep_arg_error(a, bs: list[int], ks: list[int]) -> str | None:
    """The first problem with the sweep's options (the message after 'error: '), or None."""
    from .weights import TARGETS

    if a.target not in TARGETS:
        return f"unknown target {a.target!r}; choose one of {', '.join(TARGETS)}"
    if any(k < 0 for k in ks):
        return "--k values must be >= 0"
    if any(b < 1 for b in bs):
        return "--batch-sizes values must be >= 1"
    if a.warmup_tokens < 0 or a.rounds < 1 or a.min_steps < 1 or a.max_steps < a.min_steps:
        return "--warmup-tokens must be >= 0, --rounds >= 1, 1 <= --min-steps <= --max-steps"
    if a.context_len < 2 or a.gen_tokens < 1:
        return "--context-len must be >= 2 and --gen-tokens >= 1"
    if not (math.isfinite(a.temperature) and 0 <= a.temperature <= 100):
        return f"--temperature must be a finite number in [0, 100] (0 = greedy), got {a.temperature}"
    if not 0 <= a.seed < 2**63:
        return f"--seed must be an integer in [0, 2^63), got {a.seed}"
    if a.threads is not None and not 1 <= a.threads <= 4096:
        return f"--threads must be a positive number of CPU threads, got {a.threads}"
    if max(ks) > 32:
        return f"--k up to {max(ks)}; the planner handles K <= 32"
    if a.device not in (None, "cpu", "cuda"):
        return f"--device {a.device!r}: use cpu or cuda"
    if a.device == "cuda":
        import torch
        if not torch.cuda.is_available():
            return f"--device cuda: no usable CUDA device (torch {torch.__version__}); use --device cpu"
    if a.forced_acceptance is not None and not 0 <= a.forced_acceptance <= 1:
        return "--forced-acceptance must be in [0, 1]"
    if not re.fullmatch(r"none|ngram(:\d+)?|(early-exit|model):\d+", a.draft):
        return f"unknown draft {a.draft!r}; use ngram, early-exit:N or model:N"
    return None


def _output_error(a) -> str | None:
    """None when --output can be used, else the problem."""
    # the output must be writable and, if it exists, a readable CSV
    from pathlib import Path

    import os
    import stat

    from simulator.files import file_kind

    out = Path(a.output)
    try:
        if out.exists() and not stat.S_ISREG(os.stat(out).st_mode):  # read to resume, then appended to
            return (f"--output {a.output}: is {file_kind(os.stat(out).st_mode)}; the sweep resumes from and appends"
                    " to a regular CSV file: give one")
        if out.exists():
            import pandas as pd
            if out.stat().st_size:
                head = pd.read_csv(out, nrows=1)
                missing = [c for c in _RESUME_COLUMNS if c not in head.columns]
                if missing:
                    return (f"--output {a.output}: not a runs CSV of this sweep (no column"
                            f" {', '.join(missing)}); give a new file or one an earlier sweep wrote")
        else:
            out.parent.mkdir(parents=True, exist_ok=True)
            with open(out, "a"):
                pass
            out.unlink()
    except Exception as e:
        return f"cannot use --output {a.output}: {e.__class__.__name__}: {e}"
    return None


def _sweep(a, bs: list[int], ks: list[int]) -> int:
    """Run the sweep the checked options describe (exit 2 on a target or draft the engine refuses)."""
    from pathlib import Path

    from .sweep import SweepSettings, run_sweep
    from .weights import TargetUnavailable

    out = Path(a.output)
    try:
        settings = SweepSettings(
            target=a.target, draft=a.draft, batch_sizes=bs, ks=ks, context_len=a.context_len,
            gen_tokens=a.gen_tokens, temperature=a.temperature, seed=a.seed,
            warmup_steps=a.warmup_steps, max_steps=a.max_steps, min_steps=a.min_steps,
            warmup_tokens=a.warmup_tokens, rounds=a.rounds, min_sequences=a.min_sequences,
            forced_acceptance=a.forced_acceptance, dtype=a.dtype, device=a.device, threads=a.threads,
            router_reuse=_reuses(a.router_reuse), clock=a.clock, router_mode=a.router_mode, router_skew=a.router_skew)
        run_sweep(settings, output=str(out), trace_output=a.trace_output)
    except (ValueError, TargetUnavailable) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted: finished points are in the output file", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
