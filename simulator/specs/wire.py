"""Bytes a collective puts on each GPU's link per byte of message: the one definition of the ring factor.

Ring algorithms over g GPUs (NCCL's, and nccl-tests' bus-bandwidth convention, docs/PERFORMANCE.md of
NVIDIA/nccl-tests): an all-reduce is a reduce-scatter then an all-gather, each moving (g - 1)/g of the
message through every link, so 2 (g - 1)/g; an all-gather, a reduce-scatter and an all-to-all move
(g - 1)/g (in an all-to-all the share 1/g addressed to the GPU itself stays local). g = 1 moves nothing.
"""
from __future__ import annotations

import numpy as np

ONE_PASS = ("all_gather", "reduce_scatter", "all_to_all")


def collective_factor(kind: str, gpus):
    """2 (g-1)/g for an all-reduce (any ``all_reduce*`` table: the engine's own kernels or NCCL's),
    (g-1)/g for an all-gather, reduce-scatter or all-to-all; ``gpus`` a number or an array."""
    if kind.startswith("all_reduce"):
        passes = 2.0
    elif kind in ONE_PASS:
        passes = 1.0
    else:
        raise ValueError(f"unknown collective '{kind}' (known: all_reduce, {', '.join(ONE_PASS)})")
    g = np.asarray(gpus, dtype=float) if np.ndim(gpus) else float(gpus)
    return passes * (g - 1.0) / g
