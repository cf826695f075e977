"""Engine-setting advice: which setting of the serving engine costs goodput at the planned load, what
to set it to, and what that gains, per engine release, with where the engine's code applies the rule.

The rules' data (setting names, release ranges, defaults, code locations) live in
``simulator/data/engine_settings.toml``; the functions here are the arithmetic. Every gain is the
planner's own: the goodput table rerun with the setting changed, compared at the batch sizes where the
setting binds. "Planned load": the batch sizes of the K* table that fit in memory.

- capture: the verify pass of B (K + 1) tokens (vLLM) or B sequences (SGLang) above the capture limit
  runs eagerly; suggested = the smallest limit on the engine's stride that covers K* of the grid rerun
  with every size captured; gain = goodput at K* with that limit / goodput now.
- max_num_seqs: a running-batch cap M below the largest planned batch size B_max: the engine never runs
  more than M sequences; gain = throughput(B_max) / throughput(M). M is the scenario's, else the engine's
  default with speculation on where it sets one (engine profile [speculative] max_running_default), else
  its default on this GPU (engine profile [serving]).
- max_num_batched_tokens: a step's token budget T below B (K* + 1): only T // (K + 1) sequences verify
  per step; gain = throughput(B, K*) / max_K throughput(min(B, T // (K + 1)), K).
- dsd_k0: vLLM's drafter still runs its first pass over the B verified tokens at a K = 0 entry (and
  SGLang's draft extend at an adaptive step 0, keeping the draft warm), so K = 0 is not plain decoding
  there; where K >= 1 beats that, the entry should say so.
- dp_dsd_off: vLLM turns the per-batch-size table off at data_parallel_size > 1 and runs
  num_speculative_tokens (the table's largest K) at every batch size; suggested = the single K best
  over the planned load.
- dsd_drafts_max, dsd_block_max: what a release's default runner drafts under a dynamic-K table
  (simulator/plan/runner_advice.py).
"""
from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from simulator.errors import PlannerError
from simulator.specs.engines import EngineProfile, serving_default, with_capture_limit
from simulator.plan.advice_line import MIN_GAIN, Advice, advice_text, engine_label, gain_share
from simulator.plan.runner_advice import runner_advice
from simulator.specs.engine_settings import rule_for

# rules matched by the release asked rather than the profile pricing it: what they say is not in the profile's
# step prices (the table dropped at data parallel > 1), so a release between two profiles gets its own behaviour
RELEASE_MATCHED = ("dp_dsd_off",)


# --- pure arithmetic -------------------------------------------------------------------------------

def verify_size(batch, k, unit: str) -> np.ndarray:
    """What the engine's capture limit counts for the verify pass: B (K + 1) tokens or B sequences."""
    batch, k = np.broadcast_arrays(np.asarray(batch, dtype=np.int64), np.asarray(k, dtype=np.int64))
    return batch * (k + 1) if unit == "tokens" else batch.copy()


def round_up(value: int, step: int) -> int:
    """The next multiple of ``step`` at or above ``value``: the engine captures sizes on that stride."""
    return int(math.ceil(value / step) * step)


def sequences_within_budget(batch, k, budget: int) -> np.ndarray:
    """Sequences that verify in one step when each needs K + 1 tokens of a ``budget``-token step."""
    batch, k = np.broadcast_arrays(np.asarray(batch, dtype=np.int64), np.asarray(k, dtype=np.int64))
    return np.minimum(batch, budget // (k + 1))


# --- the rules ---------------------------------------------------------------------------------------

def planned(pred) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(batch sizes, K*, goodput per sequence at K*) of the planned load: the table's rows that fit."""
    t = pred.table[pred.table.fits_memory.to_numpy(bool)]
    return (t.batch_size.to_numpy(np.int64), t.k_opt.astype(int).to_numpy(np.int64),
            t.goodput_per_seq.to_numpy(float))


def capture_advice(pred, rule: dict, predict_scenario) -> Advice | None:
    """Raise the capture limit where the verify pass at the planned K* runs eagerly."""
    sc, eng = pred.scenario, pred.scenario.engine
    if not eng.graphs_enabled or eng.unlimited:
        return None
    b, _, good_now = planned(pred)
    if not b.size:
        return None
    unit = rule["unit"]
    current = current_capture_limit(eng, unit)
    # K* with every planned cell captured: the sizes the plan would use if nothing ran eagerly
    everything = round_up(int(verify_size(b.max(), sc.k_max, unit)), rule["round_to"])
    if everything <= current:
        return None
    b_all, k_free, _ = planned(rerun(pred, eng, everything, predict_scenario, b))
    need = verify_size(b_all, k_free, unit)
    over = need > current
    if not over.any():
        return None
    suggested = round_up(int(need[over].max()), rule["round_to"])
    _, _, good_raised = planned(rerun(pred, eng, suggested, predict_scenario, b))
    gain = gain_share(good_raised, good_now)
    hit = over & (gain > MIN_GAIN)
    if not hit.any():
        return None
    what = "B (K + 1) tokens" if unit == "tokens" else "B sequences"
    return Advice(rule["setting"], current, suggested, float(gain[hit].max()), tuple(int(x) for x in b_all[hit]),
                  engine_label(eng), rule["source"],
                  f"the verify pass of {what} above {current} runs without a CUDA graph")


def current_capture_limit(eng: EngineProfile, unit: str) -> int:
    """The verify pass's capture limit in the rule's unit, as the engine profile states it."""
    if unit == "tokens" and eng.spec_capture_max_tokens:
        return int(eng.spec_capture_max_tokens)
    if unit == "sequences" and eng.spec_capture_max_batch:
        return int(eng.spec_capture_max_batch)
    return int(eng.max_capture_size)


def rerun(pred, eng: EngineProfile, limit: int, predict_scenario, batch_sizes):
    """The prediction over the planned batch sizes with the engine's capture limit at ``limit``."""
    sc = replace(pred.scenario, engine=with_capture_limit(eng, int(limit)))
    return predict_scenario(sc, batch_sizes=batch_sizes, ks=pred.grid.ks)


def serving_value(sc, key: str) -> int | None:
    """[serving] max_num_seqs / max_num_batched_tokens as the scenario (or its flag) gives it."""
    value = (sc.extra.get("serving") or {}).get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise PlannerError(f"{sc.origin}: [serving] {key} = {value!r}: give a whole number >= 1"
                           f" (or --{key.replace('_', '-')} N)")
    return value


def max_num_seqs_advice(pred, rule: dict, predict_scenario) -> Advice | None:
    """Raise the running-batch cap where it sits below the largest planned batch size."""
    sc = pred.scenario
    b, k, good = planned(pred)
    cap = serving_value(sc, "max_num_seqs")
    why = "the engine runs at most {} sequences at once"
    if cap is None and sc.engine.spec_max_running and (k > 0).any():
        # the engine's own default once a draft is loaded (SGLang resets --max-running-requests to 48)
        cap = sc.engine.spec_max_running
        why = "with speculative decoding on and no cap given the engine runs at most {} sequences at once"
    cap = cap or serving_default(sc.engine, "max_num_seqs", sc.hardware.memory_bytes, sc.hardware.name)
    if not cap or not b.size or cap >= b.max():
        return None
    capped = predict_scenario(sc, batch_sizes=[cap], ks=pred.grid.ks).table
    if not bool(capped.fits_memory.iloc[0]):
        return None
    throughput_capped = float(capped.throughput.iloc[0])
    above = b > cap
    gain = gain_share(good[above] * b[above], throughput_capped)
    hit = gain > MIN_GAIN
    if not hit.any():
        return None
    return Advice(rule["setting"], int(cap), int(b.max()), float(gain[hit].max()), tuple(int(x) for x in b[above][hit]),
                  engine_label(sc.engine), rule["source"], why.format(cap))


def token_budget_advice(pred, rule: dict, predict_scenario) -> Advice | None:
    """Raise the step's token budget where B (K* + 1) verify tokens do not fit it."""
    sc = pred.scenario
    budget = serving_value(sc, "max_num_batched_tokens") or serving_default(
        sc.engine, "max_num_batched_tokens", sc.hardware.memory_bytes, sc.hardware.name)
    if not budget:
        return None
    b, k, good = planned(pred)
    need = verify_size(b, k, "tokens")
    over = need > budget
    if not over.any():
        return None
    ks = pred.grid.ks.astype(np.int64)
    fitting = sequences_within_budget(b[over][:, None], ks[None, :], budget)  # (n_over, n_k)
    sizes = np.unique(fitting[fitting >= 1])
    if not sizes.size:
        return None
    small = predict_scenario(sc, batch_sizes=sizes, ks=ks).grid
    rows = np.searchsorted(sizes, np.maximum(fitting, 1))
    per_seq = np.where(small.fits_memory, small.goodput_per_seq, 0.0)[rows, np.arange(ks.size)[None, :]]
    throughput_budgeted = np.where(fitting >= 1, per_seq * fitting, 0.0).max(axis=1)
    gain = gain_share(good[over] * b[over], throughput_budgeted)
    hit = gain > MIN_GAIN
    if not hit.any():
        return None
    return Advice(rule["setting"], int(budget), int(need[over].max()), float(gain[hit].max()),
                  tuple(int(x) for x in b[over][hit]), engine_label(sc.engine), rule["source"],
                  f"B (K* + 1) verify tokens above {budget} do not fit one step; later sequences wait")


def k0_step_s(grid) -> np.ndarray | None:
    """Step time of a K = 0 entry where the engine still runs the drafter's first pass over the B
    verified tokens, as the grid prices it (plain step + that pass, Grid.dsd_k0); None: the draft has no
    such pass (e.g. n-gram) or the engine does not run it there."""
    if grid.dsd_k0 is None:
        return None
    return grid.as_engine_runs.itl_s[:, grid.k_index(0)]


def dsd_k0_advice(pred, rule: dict) -> Advice | None:
    """Where K* = 0 and K >= 1 beats K = 0 as the engine runs it, write that K instead."""
    sc, g = pred.scenario, pred.grid
    if not sc.engine.supports_dynamic_k:
        return None
    step = k0_step_s(g)
    if step is None:
        return None
    b_all = g.batch_sizes.astype(np.int64)
    t = pred.table
    k_opt = g.k_star
    zero = (k_opt == 0) & t.fits_memory.to_numpy(bool)
    if not zero.any():
        return None
    k0_goodput = 1.0 / step  # one committed token per step
    spec = np.where(g.fits_memory & (g.ks[None, :] > 0), g.goodput_per_seq, -np.inf)
    best_k = g.ks[np.argmax(spec, axis=1)].astype(int)
    gain = gain_share(spec.max(axis=1), k0_goodput)
    hit = zero & (gain > MIN_GAIN)
    if not hit.any():
        return None
    ks = sorted(set(best_k[hit].tolist()))
    suggested = f"K={ks[0]}" if len(ks) == 1 else "K=" + "/".join(map(str, ks)) + " by batch size"
    return Advice(rule["setting"], "K=0", suggested, float(gain[hit].max()), tuple(int(x) for x in b_all[hit]),
                  engine_label(sc.engine), rule["source"],
                  "at K=0 the drafter still runs its first pass over the B verified tokens, so K=0 is slower than"
                  " plain decoding there")


def dp_dsd_advice(pred, rule: dict) -> Advice | None:
    """At data_parallel_size > 1 the engine runs num_speculative_tokens at every batch size: name the
    single K best over the planned load where it beats the table's largest K."""
    sc, g = pred.scenario, pred.grid
    dep = sc.deployment
    if not (sc.engine.supports_dynamic_k and dep.dp_attention and dep.dp > 1):
        return None
    t = pred.table
    fits = t.fits_memory.to_numpy(bool)
    k_opt = g.k_star[fits]
    if not k_opt.size or k_opt.min() == k_opt.max():
        return None  # one K everywhere: nothing is lost when the table is off
    static = int(k_opt.max())  # what the vLLM file writes as num_speculative_tokens
    good = np.where(g.fits_memory, g.goodput_per_seq, np.nan)[fits]
    best = np.nanmax(good, axis=1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        mean_log_share = np.nanmean(np.log(good / best), axis=0)  # geometric-mean share per K
    mean_log_share = np.where(np.isfinite(mean_log_share), mean_log_share, -np.inf)
    k_best = int(g.ks[int(np.argmax(mean_log_share))])
    if k_best == static:
        return None
    gain = gain_share(good[:, g.k_index(k_best)], good[:, g.k_index(static)])
    hit = gain > MIN_GAIN
    if not hit.any():
        return None
    b = g.batch_sizes.astype(np.int64)[fits]
    return Advice(rule["setting"], static, k_best, float(gain[hit].max()), tuple(int(x) for x in b[hit]),
                  engine_label(sc.engine), rule["source"],
                  f"data_parallel_size {dep.dp} turns num_speculative_tokens_per_batch_size off, so K={static} runs"
                  " at every batch size")


def engine_advice(pred, predict_scenario) -> list[Advice]:
    """Every engine setting that costs goodput at the planned load of ``pred`` (empty: none does);
    ``predict_scenario``: how a changed scenario is predicted (simulator.plan.api's, which calls this)."""
    eng = pred.scenario.engine
    if eng is None:
        return []
    found = []
    for kind, make in (("capture", lambda r: capture_advice(pred, r, predict_scenario)),
                       ("max_num_seqs", lambda r: max_num_seqs_advice(pred, r, predict_scenario)),
                       ("max_num_batched_tokens", lambda r: token_budget_advice(pred, r, predict_scenario)),
                       ("dsd_k0", lambda r: dsd_k0_advice(pred, r)),
                       ("dp_dsd_off", lambda r: dp_dsd_advice(pred, r))):
        rule = rule_for(kind, eng, by_release=kind in RELEASE_MATCHED)
        if rule is not None:
            advice = make(rule)
            if advice is not None:
                found.append(advice)
    return found + runner_advice(pred)  # what the release's default runner drafts under a dynamic-K table


ADVICE_HEADING = "engine settings that cost goodput at this load (the planner's step times with and without the change):"


def advice_lines(advice) -> list[str]:
    """The advice (Advice objects or their dicts) as lines under a K* table; no lines, no heading either,
    when nothing costs goodput."""
    if not advice:
        return []
    return [ADVICE_HEADING] + [f"  {advice_text(a if isinstance(a, dict) else a.to_dict())}" for a in advice]
