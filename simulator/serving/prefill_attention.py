"""The attention of prompt chunks in a serving step (q = chunk tokens over the p tokens already cached, causal),
priced with the cost model's attention operator, each (chunk, cached) pair once per scenario's pricer.

A run's steps repeat the same pairs (a prompt length, its chunk split), so most prices are lookups. The chunk's
GEMM tokens are part of the step's token-sized ops (simulator/serving/pricer.py lin(T)); the launch is folded
into the decode pass's.
"""
from __future__ import annotations

import numpy as np

from simulator.physics.attention import MAX_DECODE_SURFACE_QUERIES, attention_kind_op, attention_op
from simulator.physics.operators import pass_time, prompt_chunk_point_s


class PrefillAttention:
    """Prompt-chunk attention of one scenario: ``attn_ops_layers`` the target pass's attention ops (name, layer
    count), ``caches`` the scenario's step model's physics caches."""

    def __init__(self, sc, attn_ops_layers: list, caches):
        self.sc, self.attn_ops_layers, self.caches = sc, attn_ops_layers, caches
        self.memo: dict[tuple[int, int], float] = {}

    def pairs_total_s(self, chunks: list, cached: list) -> float:
        """Summed attention of the pairs (chunk tokens, cached tokens) of Python ints; each priced on its own."""
        memo = self.memo
        try:  # the common case: every pair seen before
            return float(sum([memo[k] for k in zip(chunks, cached)]))
        except KeyError:
            pass
        keys = list(zip(chunks, cached))
        new = []
        for k in dict.fromkeys(keys):
            if k not in memo:
                t = self.point_s(*k)
                if t is None:
                    new.append(k)
                else:
                    memo[k] = t
        if new:
            c = np.array([k[0] for k in new], dtype=float)
            p = np.array([k[1] for k in new], dtype=float)
            memo.update(zip(new, self.pairs_s(c, p).tolist()))
        return float(sum(memo[k] for k in keys))

    def point_s(self, chunk: int, cached: int) -> float | None:
        """One pair's price in Python floats where physics.operators.prompt_chunk_point_s takes it (a prefill
        chunk), else None; equal to :meth:`pairs_s`."""
        sc = self.sc
        return prompt_chunk_point_s(sc.model, sc.deployment, sc.hardware, sc.profile, self.attn_ops_layers,
                                    float(chunk), float(cached))

    def pairs_s(self, chunks: np.ndarray, cached: np.ndarray) -> np.ndarray:
        """Each pair on its own kernel's path, whatever is priced beside it: a chunk of up to
        MAX_DECODE_SURFACE_QUERIES tokens as a multi-query decode, a longer one as a prefill kernel
        (physics.attention.attention_op chooses by the largest chunk it is given)."""
        small = chunks <= MAX_DECODE_SURFACE_QUERIES
        if small.all() or not small.any():
            return self._group_s(chunks, cached)
        out = np.empty(chunks.shape)
        out[small] = self._group_s(chunks[small], cached[small])
        out[~small] = self._group_s(chunks[~small], cached[~small])
        return out

    def _group_s(self, chunks: np.ndarray, cached: np.ndarray) -> np.ndarray:
        sc = self.sc
        m = sc.model
        ops = []
        for name, count in self.attn_ops_layers:
            if not m.uniform_attention:  # each layer kind's own op (physics.attention.attention_kind_op)
                ops.append(attention_kind_op(m, sc.deployment, 1.0, chunks, cached, count, name))
                continue
            window = m.sliding_window if name.endswith("sliding") else None
            ops.append(attention_op(m, sc.deployment, 1.0, chunks, cached, count, window, name))
        cost = pass_time(ops, sc.hardware, sc.deployment, sc.profile, chunks.shape, caches=self.caches)
        return cost.total_s - cost.launch_s
