"""TensorRT-LLM's acceptance gate: the threshold below which speculation stops paying, per version.

Break-even acceptance length at batch size B with draft length K: speculation pays while
AL / ITL(B, K) >= 1 / ITL(B, 0), so

    AL*(B, K) = ITL(B, K) / ITL(B, 0)          (step time with K drafts over the plain step time)

The engine turns speculation off PERMANENTLY (for the server's life) once a rolling mean falls
below its threshold; the mean differs by version (tensorrt_llm/_torch/speculative/speculation_gate.py):

1.2.x   ``acceptance_window`` N, ``acceptance_length_threshold`` T: over the last N COMPLETED
        REQUESTS, the mean of max(0, avg_decoded_tokens_per_iter - 1) (record_avg_decoded:
        ``accepted_len = max(0.0, float(avg_decoded_tokens_per_iter) - 1.0)``), i.e. accepted
        drafts per step, AL - 1. So T = AL* - 1, not AL*. The gate lives in the two-model path.
1.3+    ``acceptance_rate_window_size`` N, ``acceptance_rate_threshold`` T in [0, 1]: over the
        last N SPECULATION-ENABLED ITERATIONS, the mean of the batch's accepted draft tokens /
        draft tokens (py_executor _update_batch_acceptance_rate; record_acceptance_rate refuses
        a rate outside [0, 1]). So T = (AL* - 1) / K. PR #12905 (merged 2026-04-09) renamed the
        keys and moved the gate to the one-model path (removed from the two-model path).

Window: the gate trips on noise when the window is short. With X the accepted drafts of one step
(0 <= X <= K, mean m = AL - 1), Var X <= m (K - m) (Bhatia-Davis). A window whose mean lies 4
standard errors above the threshold needs N >= 16 Var / (m - m*)^2 samples; a 1.3+ sample pools
the B requests of one iteration (variance / B, rates / K), a 1.2.x sample is one request (taken as
one step: the conservative end).
"""
from __future__ import annotations

import math

import numpy as np

WINDOW_MIN, WINDOW_MAX = 16, 10_000
SIGMAS = 4.0


def break_even_acceptance_length(itl_k_s, itl_plain_s) -> np.ndarray:
    """AL* = ITL(B, K) / ITL(B, 0): the acceptance length at which K drafts only match plain decoding."""
    return np.asarray(itl_k_s, dtype=float) / np.asarray(itl_plain_s, dtype=float)


def gate_window(mean_accepted: float, threshold_accepted: float, k: int, batch_size: int, per_iteration: bool) -> int:
    """Samples for the rolling mean to sit SIGMAS standard errors above the threshold (module docstring)."""
    margin = mean_accepted - threshold_accepted
    var = max(mean_accepted * (k - mean_accepted), 0.0)
    if per_iteration:
        var /= max(batch_size, 1)
    if margin <= 0:
        return WINDOW_MAX
    return int(min(max(math.ceil(SIGMAS ** 2 * var / margin ** 2), WINDOW_MIN), WINDOW_MAX))


def gate_keys(generation: str, al: float, al_break_even: float, k: int, batch_size: int) -> tuple[dict, str]:
    """({key: value} for the engine generation ('lower' = 1.2.x, 'upto' = 1.3+), the rule in words)."""
    m, m_star = al - 1.0, max(al_break_even - 1.0, 0.0)
    if generation == "lower":
        window = gate_window(m, m_star, k, batch_size, per_iteration=False)
        keys = {"acceptance_window": window, "acceptance_length_threshold": round(m_star, 4)}
        rule = (f"acceptance_length_threshold = AL* - 1 = {m_star:.4f} accepted drafts per step (TensorRT-LLM 1.2.x"
                f" compares avg decoded tokens per iteration - 1, per completed request, over the last {window}"
                " requests; two-model path)")
    else:
        rate = min(max(m_star / k, 0.0), 1.0)
        window = gate_window(m, m_star, k, batch_size, per_iteration=True)
        keys = {"acceptance_rate_window_size": window, "acceptance_rate_threshold": round(rate, 4)}
        rule = (f"acceptance_rate_threshold = (AL* - 1) / K = {rate:.4f} (TensorRT-LLM 1.3+ compares accepted /"
                f" drafted tokens per speculative iteration, over the last {window} iterations; one-model path)")
    return keys, rule
