"""All-reduce bandwidth over the GPUs of one host (NCCL), measured only with >= 2 GPUs.

Untested here (no multi-GPU machine was available when it was written): one process per GPU,
rank 0 times ``dist.all_reduce`` over sizes with CUDA events and reports median per size.
"""
from __future__ import annotations

import os
from dataclasses import replace

from calibration.timing import summarize


def _worker(rank: int, world: int, sizes: list[int], dtype: str, repeats: int, queue) -> None:
    import torch
    import torch.distributed as dist

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=world)
    tdt = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[dtype]
    elt = torch.tensor([], dtype=tdt).element_size()
    out = {}
    for s in sizes:
        x = torch.ones(max(s // elt, 1), dtype=tdt, device="cuda")
        for _ in range(5):
            dist.all_reduce(x)
        torch.cuda.synchronize()
        times = []
        for _ in range(repeats):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            dist.barrier()
            a.record()
            dist.all_reduce(x)
            b.record()
            b.synchronize()
            times.append(a.elapsed_time(b) / 1e3)
        out[s] = times
    if rank == 0:
        queue.put(out)
    dist.destroy_process_group()


def run_allreduce(points, dtype: str, mode) -> list:
    import torch.multiprocessing as mp

    world = points[0].experts  # ranks are stored in the 'experts' column
    sizes = [int(p.bytes) for p in points]
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(r, world, sizes, dtype, max(mode.repeats, 10), q))
             for r in range(world)]
    for p in procs:
        p.start()
    res = q.get(timeout=600)
    for p in procs:
        p.join()
    return [(replace(p, n_kernels=1), summarize(res[int(p.bytes)])) for p in points]
