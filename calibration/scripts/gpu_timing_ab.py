"""Which part of a cold GPU kernel's timing is the kernel: four ways to time the same calls (GPU only).

    python calibration/scripts/gpu_timing_ab.py [--model llama-3.1-8b] [--output ab.csv]

For GEMMs at the model's weight shapes (a few M) and a 128 MiB read, per call in microseconds:
  flush        an L2 flush (zero_ of 2x L2) before each event-timed call (calibration.run --gpu-timing flush)
  flush+sleep  the same with the GPU kept busy (torch.cuda._sleep) until the host has queued the call:
               what is left over `flush` is the host's launch of the call inside the timed region
  read+sleep   a read of a clean 2x L2 buffer instead of the zero_: no dirty lines to write back
  graph        rotating copies over 2x L2 replayed back to back in one CUDA graph (the default now)
"""
from __future__ import annotations

import argparse
import csv
import statistics
import sys


def main(argv=None) -> int:
    import torch

    from calibration.timing import time_graph_calls
    from simulator.specs.models import load_model
    from calibration.microbench import gemm_shapes

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="llama-3.1-8b")
    ap.add_argument("--output")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("gpu_timing_ab: no CUDA device visible to torch", file=sys.stderr)
        return 2
    dev = torch.device("cuda")
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    flush = torch.empty(2 * l2 // 4, dtype=torch.int32, device=dev)
    clean = torch.ones(2 * l2 // 4, dtype=torch.int32, device=dev)
    cases = []
    for op, (n, k) in gemm_shapes(load_model(args.model)).items():
        for m in (1, 16, 128):
            cases.append((f"{op} M={m}", n * k * 2, _gemm(torch, dev, l2, m, n, k)))
    cases.append(("read 128 MiB", 128 << 20, _read(torch, dev, l2, 128 << 20)))
    rows = []
    for name, nbytes, (call, copies) in cases:
        t = {"flush": _events(torch, call, lambda: flush.zero_()),
             "flush+sleep": _events(torch, call, lambda: (flush.zero_(), torch.cuda._sleep(200_000))),
             "read+sleep": _events(torch, call, lambda: (clean.sum(), torch.cuda._sleep(200_000))),
             "graph": time_graph_calls(call, copies, repeats=20).median_s}
        rows.append({"case": name, "bytes": nbytes, **{k: round(v * 1e6, 2) for k, v in t.items()}})
        print(f"{name:22s} {nbytes / 1e6:9.1f} MB  " + "  ".join(f"{k} {v * 1e6:8.2f} us" for k, v in t.items()),
              flush=True)
    if args.output:
        with open(args.output, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
    return 0


def _gemm(torch, dev, l2, m, n, k):
    copies = max(2, min(256, -(-2 * l2 // (n * k * 2))))
    pool = torch.empty(copies, n, k, dtype=torch.bfloat16, device=dev).uniform_(-0.05, 0.05)
    x = torch.randn(m, k, dtype=torch.bfloat16, device=dev)
    return (lambda i: torch.nn.functional.linear(x, pool[i % copies])), copies


def _read(torch, dev, l2, nbytes):
    copies = max(2, -(-2 * l2 // nbytes))
    pool = torch.ones(copies, nbytes // 2, dtype=torch.bfloat16, device=dev)
    return (lambda i: pool[i % copies].sum()), copies


def _events(torch, call, before, repeats: int = 20) -> float:
    out = []
    for i in range(repeats + 3):
        before()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        call(0)
        end.record()
        end.synchronize()
        if i >= 3:
            out.append(start.elapsed_time(end) / 1e3)
    return statistics.median(out)


if __name__ == "__main__":
    raise SystemExit(main())
