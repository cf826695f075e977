"""Every cache of the physics, in one object that a :class:`simulator.physics.step_model.StepModel` owns: the
physics functions that keep tables receive it as an argument (``caches``) and keep nothing of their own, so a
cache lives exactly as long as the step model that holds it (the plan layer keeps the last few step models:
simulator.plan.step_models). A function given ``caches=None`` prices everything afresh: the same numbers,
nothing kept.

Every entry holds values that depend only on its key (a table, never a decision), so a hit and a miss give
the same numbers; every store is bounded (per step model: the slot counts below). Keys by ``id()`` keep the
keyed object inside the entry, so the id is not reused while the entry lives.
"""
from __future__ import annotations

from contextlib import contextmanager


def make_room(kept: dict, slots: int) -> None:
    """Drop the oldest entry of a full store (a dashboard's sessions share a step model: another thread may be
    at it too)."""
    if len(kept) >= slots:
        try:
            kept.pop(next(iter(kept)), None)
        except (StopIteration, RuntimeError):
            pass


class PhysicsCaches:
    """The physics' kept tables for one step model (see the module docstring); each store's bound beside it."""

    # pass_tables.token_table: a 512 x 9 grid's tables hold 8 K entries (64 KB); at most 64 K entries (0.5 MB)
    TOKEN_TABLE_SLOTS = 32
    # pass_tables.cells_time: a grid's three passes, a context grid's, grids over other axes (a fit's)
    CELL_SLOTS = 16
    # pass_tables.lin_table: the serving pricer's lin(T), one per longest step
    LIN_SLOTS = 4
    # measured.collective_whole_token_table: a collective's time at whole token counts, per kind, GPUs, message
    COLLECTIVE_SLOTS = 128
    # measured.whole_tokens: the last few token arrays asked (a pass's ops share a few size arrays)
    RECENT_WHOLE = 8
    # experts: a routing's expert groups, and the busiest group's load ratio over a token range, each
    EXPERT_SLOTS = 64
    # engine_time: the padded size of every whole size, one table per capture list
    PAD_SLOTS = 8

    def __init__(self) -> None:
        # segment key, deployment, device, id(profile), specs -> [profile, table (NaN: not priced yet), launch s,
        # kernels]
        self.token_tables: dict = {}
        # cell inputs, deployment, device, id(profile), shape, specs -> (profile, the per-cell ops' PassTime)
        self.cells: dict = {}
        # model, deployment, device, id(profile), T_max -> (profile, lin(T) read-only, lin(T) as a list)
        self.lins: dict = {}
        # id of a profile's collectives, kind, GPUs, bytes per token -> (those collectives, table)
        self.collective_tables: dict = {}
        # ((token array, its whole-number index or None, its max), ...): the last few asked, newest first (a
        # tuple replaced whole: safe to read across threads)
        self.recent_whole: tuple = ()
        # (group means, variances, token range) -> (log nodes, E[max] / mean there)
        self.busiest_ratios: dict = {}
        # (routing probabilities, groups) -> experts._groups' answer
        self.expert_groups: dict = {}
        # capture sizes (a tuple) -> the captured size of each whole size 0..max, NaN past it (read-only)
        self.pad_tables: dict = {}
        # inside :meth:`shared_ops` (a view's, one evaluation): ops and their prices by what built them
        # (simulator.physics.ops.share_op, operators.pass_time), and the objects their keys hold by id; else None
        self.shared: dict | None = None

    def stores(self) -> dict[str, dict]:
        """Every store by name (for a test or a memory check: their sizes are what this object holds)."""
        return {"token_tables": self.token_tables, "cells": self.cells, "lins": self.lins,
                "collective_tables": self.collective_tables, "busiest_ratios": self.busiest_ratios,
                "expert_groups": self.expert_groups, "pad_tables": self.pad_tables}

    def __len__(self) -> int:
        return sum(len(s) for s in self.stores().values()) + len(self.recent_whole)

    @contextmanager
    def shared_ops(self):
        """A view of these caches (the same stores) for one evaluation, in which an op built from the same inputs
        is built and priced once (simulator.physics.ops.share_op): a grid's verify pass and a draft head's extend
        pass run the target's own layer over the same B, K + 1 and L. The scope is the view's alone (a
        dashboard's sessions evaluate in threads of their own) and ends on exit: what reads the view later (a
        pass's per-op detail) builds its own ops, as outside any scope."""
        view = PhysicsCaches.__new__(PhysicsCaches)  # a shallow copy (copy.copy costs 5 times as much)
        view.__dict__.update(self.__dict__)
        view.shared = {"keep": []}
        try:
            yield view
        finally:
            view.shared = None

    def clear(self) -> None:
        """Forget every kept table (the next grid prices its passes afresh, as a new step model's first does)."""
        for store in self.stores().values():
            store.clear()
        self.recent_whole = ()
