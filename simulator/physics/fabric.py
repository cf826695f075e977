"""Collectives of a TP / EP group larger than one scale-up (NVLink / xGMI) domain: the inter-node stage.

A group of N GPUs over n nodes of g = N / n GPUs each (the hardware file's ``scale_up_domain_gpus``
and ``[scale_out]`` fabric: per-GPU bandwidth one direction and per-step latency, each cited there).
What the node part costs stays as before (a measured table or the link model at g GPUs); the fabric
adds, per collective of S bytes per GPU message:

all-reduce   t_net = 2 log2(n) lat_so + max(0, 2 (N-1)/N S / (g bw_so) - 2 (g-1)/g S / bw_up)
             latency: NCCL's tree model, 2 (ppn - 1) lat_intra + 2 log2(nNodes) lat_net (NVIDIA/nccl
             src/graph/tuning.cc ncclTopoTuneModel); the node's steps are in its table already.
             Bandwidth: the pipelined ring runs at its slowest hop, min(bw_up, g bw_so) with one NIC per
             GPU (8 x 400 Gb/s on an HGX H100: 400 GB/s, the published 2-node figure "~400+ GB/s"); the
             node part already pays 2 (g-1)/g S / bw_up, the network adds the rest.
all-to-all   t_net = lat_so + (N - g)/N S / bw_so       (the share of a rank's buffer bound off-node,
             through its own NIC; the node part then carries (g - 1)/N of it)
all-gather   t_net = lat_so + (N - g) S_shard / bw_so    (shards from the other nodes' GPUs)

n = 1 (the group fits one domain) adds nothing.
"""
from __future__ import annotations

import numpy as np

from simulator.specs.hardware import Hardware
from simulator.specs.wire import collective_factor


def node_split(hw: Hardware, gpus: int) -> tuple[int, int]:
    """(nodes, GPUs per node) of a group of ``gpus`` (one node when it fits the scale-up domain)."""
    dom = hw.scale_up_domain_gpus
    if not dom or gpus <= dom:
        return 1, int(gpus)
    return -(-int(gpus) // dom), dom


def allreduce_fabric_s(nbytes, gpus: int, hw: Hardware):
    """Inter-node stage of an all-reduce of ``nbytes`` per GPU over ``gpus`` (module docstring); 0 in one node."""
    n, g = node_split(hw, gpus)
    if n == 1:
        return 0.0
    bw_so, lat_so = hw.scale_out["bandwidth_bytes_per_s"], hw.scale_out["latency_s"]
    S = np.asarray(nbytes, dtype=float)
    extra = collective_factor("all_reduce", gpus) * S / (g * bw_so) - collective_factor("all_reduce", g) * S \
        / hw.interconnect_bandwidth_bytes_per_s
    return 2.0 * np.log2(n) * lat_so + np.maximum(extra, 0.0)


def alltoall_s(sent, gpus: int, hw: Hardware):
    """One all-to-all of a rank's ``sent`` bytes over ``gpus``: (node part, inter-node stage; 0 in one node)."""
    n, g = node_split(hw, gpus)
    sent = np.asarray(sent, dtype=float)
    node = hw.interconnect_latency_s + (g - 1) / gpus * sent / hw.interconnect_bandwidth_bytes_per_s
    if n == 1:
        return node, 0.0
    return node, hw.scale_out["latency_s"] + (gpus - g) / gpus * sent / hw.scale_out["bandwidth_bytes_per_s"]


def allgather_s(shard, gpus: int, hw: Hardware):
    """An all-gather of ``shard`` bytes from each of ``gpus``: node part + inter-node stage."""
    n, g = node_split(hw, gpus)
    node = hw.interconnect_latency_s + np.asarray(shard, dtype=float) * (g - 1) / hw.interconnect_bandwidth_bytes_per_s
    if n == 1:
        return node
    return node + hw.scale_out["latency_s"] + shard * (gpus - g) / hw.scale_out["bandwidth_bytes_per_s"]
