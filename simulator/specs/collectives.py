"""Which all-reduce bandwidth a scenario's server has: the measured tables', the user's, or a typical one.

A measured all-reduce table is one server. Over NVLink every 8-GPU server is alike, but over PCIe the
bus bandwidth of a g-GPU ring depends on the box: switches, CPU sockets, P2P on or off, containers.
``data/pcie_allreduce.toml`` holds published nccl-tests runs on PCIe servers (large messages: 14.45 and
20.64 GB/s over 8 GPUs of one dual-socket server with P2P off and on; 25.27 and 2.57 GB/s over 4 GPUs
with P2P on and inside a container). The L40S tables of aiconfigurator-core 0.12.0 ran 18.6 GB/s over 2
GPUs, 5.0 over 4 and 1.8 over 8: one more server. So, over PCIe, each g-GPU all-reduce is priced at the
median of the servers measured at that g and PCIe generation, the table's own among them (an even count
takes the slower middle one); where that median server is a published one, its times cap the table's
(a measured table is never made slower) and the scenario says so. A user who measured their own server
gives its busbw as ``[hardware] interconnect_bandwidth_bytes_per_s``: it then prices every
all-reduce's bandwidth term, whatever the tables say.
"""
from __future__ import annotations

import re
import tomllib
from functools import lru_cache
from pathlib import Path

import numpy as np

from simulator.specs.surfaces import collective_time_s
from simulator.specs.wire import collective_factor

PCIE_SERVERS_FILE = Path(__file__).resolve().parent.parent / "data" / "pcie_allreduce.toml"
ALL_REDUCE_KINDS = ("all_reduce", "all_reduce_nccl")


@lru_cache(maxsize=None)
def published_pcie_servers() -> tuple[dict, ...]:
    """The published PCIe all-reduce runs, each with its bus bandwidth at its largest message."""
    servers = []
    for s in tomllib.loads(PCIE_SERVERS_FILE.read_text())["server"]:
        b, t = np.asarray(s["bytes"], float), np.asarray(s["time_us"], float) * 1e-6
        servers.append(s | {"latency_s": t, "bus_bandwidth": float(collective_factor("all_reduce", s["gpus"]) * b[-1] / t[-1])})
    return tuple(servers)


def pcie_generation(interconnect: str) -> int | None:
    """'PCIe Gen4 x16' -> 4 (None when the string names no generation)."""
    m = re.search(r"gen\s*(\d)", interconnect.lower())
    return int(m.group(1)) if m else None


def server_entry(server: dict) -> dict:
    """A published run as a collective entry (alpha-beta fitted through its two largest messages)."""
    b, t, g = np.asarray(server["bytes"], float), server["latency_s"], server["gpus"]
    inv_bw = (t[-1] - t[-2]) / (collective_factor("all_reduce", g) * (b[-1] - b[-2]))
    alpha = max(float(t[-1] - collective_factor("all_reduce", g) * b[-1] * inv_bw), 0.0)
    return {"alpha_s": alpha, "bus_bandwidth_bytes_per_s": float(1.0 / inv_bw),
            "bytes": [int(x) for x in b], "latency_s": [float(x) for x in t]}


def capped_by(entry: dict, other: dict, gpus: int) -> dict:
    """``entry``'s times capped by ``other``'s from ``other``'s smallest measured message up (its
    alpha-beta fit says nothing below), then made non-decreasing in size (a smaller message can always
    pad to a larger one), on the union of both entries' sizes."""
    b = np.union1d(np.asarray(entry["bytes"], float), np.asarray(other["bytes"], float))
    own = collective_time_s({str(gpus): entry}, gpus, b)  # an all-reduce: ring factor 2 (g-1)/g
    cap = np.where(b >= float(other["bytes"][0]), collective_time_s({str(gpus): other}, gpus, b), np.inf)
    t = np.minimum.accumulate(np.minimum(own, cap)[::-1])[::-1]
    return {"alpha_s": float(entry["alpha_s"]),
            "bus_bandwidth_bytes_per_s": max(float(entry["bus_bandwidth_bytes_per_s"]),
                                             float(other["bus_bandwidth_bytes_per_s"])),
            "bytes": [int(x) for x in b], "latency_s": [float(x) for x in t]}


def given_bandwidth(collectives: dict, bus_bandwidth: float) -> tuple[dict, str]:
    """Every all-reduce entry at the user's measured bus bandwidth (tables keep their latency term)."""
    out = dict(collectives)
    for kind in ALL_REDUCE_KINDS:
        if kind in out:
            out[kind] = {g: {"alpha_s": float(e["alpha_s"]), "bus_bandwidth_bytes_per_s": float(bus_bandwidth),
                             "bytes": [], "latency_s": []} for g, e in out[kind].items()}
    return out, (f"all-reduce bandwidth: given {bus_bandwidth / 1e9:.1f} GB/s bus bandwidth"
                 " ([hardware] interconnect_bandwidth_bytes_per_s; measured latency terms kept)")


def median_server(table_bw: float, gpus: int, generation: int | None) -> dict | None:
    """The published server at the median (slower middle) of {table, published runs at g GPUs and this
    PCIe generation} by bus bandwidth; None when the median is the table itself."""
    runs = [s for s in published_pcie_servers() if s["gpus"] == gpus and s["pcie_gen"] == generation]
    ranked = sorted([(table_bw, None)] + [(s["bus_bandwidth"], s) for s in runs], key=lambda x: x[0])
    return ranked[(len(ranked) - 1) // 2][1]


def pcie_typical_server(collectives: dict, interconnect: str) -> tuple[dict, dict[str, str]]:
    """PCIe tables: each g-GPU all-reduce capped by the median published server's times, if that is one
    (second value: a note per GPU count changed)."""
    out, notes, generation = dict(collectives), {}, pcie_generation(interconnect)
    for kind in ALL_REDUCE_KINDS:
        table = out.get(kind)
        if not table:
            continue
        changed = {}
        for g, entry in table.items():
            server = median_server(float(entry["bus_bandwidth_bytes_per_s"]), int(g), generation)
            if server is None:
                continue
            changed[g] = capped_by(entry, server_entry(server), int(g))
            if kind == ALL_REDUCE_KINDS[0] or "all_reduce" not in out:
                notes[g] = (f"{g}-GPU all-reduce: the table's server ran {entry['bus_bandwidth_bytes_per_s'] / 1e9:.1f}"
                            f" GB/s; priced as the median published PCIe Gen{generation} server"
                            f" ({server['name']}, {server['bus_bandwidth'] / 1e9:.1f} GB/s)")
        if changed:
            out[kind] = table | changed
    return out, notes


def server_collectives(collectives: dict, interconnect: str, given_bus_bandwidth: float | None) -> tuple[dict, dict]:
    """The all-reduce tables for the scenario's server, and what was changed ({} when the tables stand
    as measured): ``{"basis": "given" | "median published PCIe server", "note": ..., "gpus": [...]}``, and for the
    PCIe servers ``"notes_by_gpus"``: the note of each GPU count changed."""
    if not collectives:
        return collectives, {}
    if given_bus_bandwidth:
        out, note = given_bandwidth(collectives, given_bus_bandwidth)
        return out, {"basis": "given", "note": note, "gpus": sorted(int(g) for t in out.values() for g in t)}
    if interconnect.lower().startswith("pcie"):
        out, notes = pcie_typical_server(collectives, interconnect)
        if notes:
            return out, {"basis": "median published PCIe server", "note": "; ".join(notes.values()),
                         "gpus": sorted(int(g) for g in notes), "notes_by_gpus": notes}
        return out, {}
    return collectives, {}
