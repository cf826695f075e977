"""Advice on what a release's default runner drafts under a dynamic-K table (rules in
``simulator/data/engine_settings.toml``; the arithmetic here, the Advice and its helpers in ``simulator.plan.advice_line``).

- dsd_drafts_max: vLLM's Model Runner V2 (the default runner for most speculative deployments of 0.29-0.31, for a
  few architectures from 0.25) drafts num_speculative_tokens (the table's largest K, K_top) at every step and
  verifies the table's K; the step there = the table's cell as a runner that drafts its K runs it, less its draft
  passes, plus the draft passes of K_top; gain = that step / the cell's step - 1 (the same tokens a step);
  suggested: VLLM_USE_V2_MODEL_RUNNER=0 (the V1 runner drafts each batch size's K) or vLLM 0.32.
- dsd_block_max: from vLLM 0.32 a block drafter (DFlash, DSpark) drafts K_top's block at every step with K > 0;
  suggested: the cap on the table's K best over the planned load (the geometric mean of goodput per sequence,
  each entry drafting the cap's block), with what it gains and gives up.
"""
from __future__ import annotations

import numpy as np

from simulator.plan.advice_line import MIN_GAIN, Advice, batch_span, engine_label, gain_share
from simulator.specs.engine_settings import block_table_max_rule, drafts_table_max_rule, trt_schedule_stage1_rule


def runner_advice(pred) -> list[Advice]:
    """The runner's advice for ``pred`` (empty where its release drafts each batch size's K)."""
    rule = scenario_drafts_table_max_rule(pred.scenario)
    advice = drafts_table_max_advice(pred, rule) if rule is not None else None
    block_rule = block_table_max_rule(pred.scenario.engine, pred.scenario.draft.method)
    block = block_table_max_advice(pred, block_rule) if block_rule is not None and rule is None else None
    trt_rule = trt_schedule_stage1_rule(pred.scenario.engine, pred.scenario.draft.method)
    trt = trt_schedule_advice(pred, trt_rule) if trt_rule is not None else None
    return [a for a in (advice, block, trt) if a is not None]


def step_drafting_top_s(itl_s, draft_s, draft_top_s) -> np.ndarray:
    """A step that verifies the table's K but drafts its largest K: the cell's step less its own draft passes,
    plus the draft passes of the largest K [s]."""
    return np.asarray(itl_s, dtype=float) - np.asarray(draft_s, dtype=float) + np.asarray(draft_top_s, dtype=float)


def scenario_drafts_table_max_rule(sc) -> dict | None:
    """The ``dsd_drafts_max`` rule where the scenario's release runs its draft on a runner that drafts the
    dynamic-K table's largest K at every step (None: each batch size's K is drafted)."""
    return drafts_table_max_rule(sc.engine, sc.draft.method, sc.draft.is_tree, sc.model.architectures,
                                 sc.hardware.vendor)


def v1_runner_runs_the_table(sc) -> bool:
    """Whether the scenario's table runs as planned only with ``VLLM_USE_V2_MODEL_RUNNER=0``: its release's default
    runner drafts the table's largest K at every step and the V1 runner (which drafts each batch size's K) runs its
    draft method (not DSpark, which only V2 runs)."""
    rule = scenario_drafts_table_max_rule(sc)
    return rule is not None and sc.draft.method not in rule["forced_methods"]


def drafts_table_max_caveat(sc) -> str | None:
    """What a simulated dynamic-K policy does not show on such a release (the serving simulation drafts each
    batch size's K, as the V1 runner does), in one sentence; None where the release drafts each K."""
    rule = scenario_drafts_table_max_rule(sc)
    if rule is None:
        return None
    release = sc.engine.release_asked
    fix = ("vLLM 0.32.0 or later" if sc.draft.method in rule["forced_methods"]
           else "VLLM_USE_V2_MODEL_RUNNER=0, or vLLM 0.32.0 or later")
    return (f"vLLM {release} runs {sc.draft.method} on Model Runner V2, which drafts the per-batch-size table's"
            f" largest K at every step whatever K it gives a batch size: the dynamic-K policies here are simulated"
            f" drafting each batch size's K, as {fix} runs them (predict's advice says what each batch size loses)")


def planned_cells(pred) -> tuple[np.ndarray, int, np.ndarray] | None:
    """(the planned batch sizes (a row mask: they fit with some K), the table's largest K (at least 1: the engine
    file's num_speculative_tokens / max_draft_len), the cells of those rows that fit memory); None on a context grid
    (the advice reads one context) or where nothing fits."""
    g = pred.grid
    if g.itl_s.ndim != 2:
        return None
    fits = pred.table.fits_memory.to_numpy(bool) & (g.k_star >= 0)
    if not fits.any():
        return None
    return fits, int(max(g.k_star[fits].max(), 1)), g.fits_memory & fits[:, None]


def best_over_load(good: dict, k_top: int, batch: np.ndarray) -> tuple[int, np.ndarray, np.ndarray, str] | None:
    """Of the choices ``good`` (K or cap -> goodput per sequence at each planned batch size ``batch``), the one best
    over the load (the geometric mean) against ``k_top``: (it, its gain at each batch size, where it gains, what it
    gives up where it loses, as a clause); None where ``k_top`` is best or the best gains nowhere."""
    score = {k: float(np.nanmean(np.log(v))) for k, v in good.items() if np.isfinite(v).any()}
    best = max(score, key=score.get)
    gain = gain_share(good[best], good[k_top])
    hit = gain > MIN_GAIN
    if best == k_top or not hit.any():
        return None
    lose = gain < -MIN_GAIN  # where the largest K still pays (the smallest batch sizes, mostly)
    cost = f"; it gives up at most {-gain[lose].min():.1%} at B {batch_span(batch[lose])}" if lose.any() else ""
    return best, gain, hit, cost


def drafts_table_max_advice(pred, rule: dict) -> Advice | None:
    """Where the default model runner drafts the table's largest K at every step: what each planned batch size
    whose K* is smaller loses against the table as a runner that drafts each batch size's K runs it."""
    sc, g, planned = pred.scenario, pred.grid, planned_cells(pred)
    if planned is None:
        return None
    fits, k_top, _ = planned
    k_opt = g.k_star[fits]
    runs, rows = g.as_engine_runs, np.flatnonzero(fits)
    cells = [g.k_index(int(k)) for k in k_opt]
    honoured = runs.itl_s[rows, cells]
    drafting_top = step_drafting_top_s(honoured, runs.draft_step_s[rows, cells], g.draft_step_s[rows, g.k_index(k_top)])
    gain = gain_share(drafting_top, honoured)  # goodput a step drafting each K gives / one drafting K_top - 1
    hit = (k_opt < k_top) & (gain > MIN_GAIN)
    if not hit.any():
        return None
    release = sc.engine.release_asked
    # a method only V2 runs (DSpark) has no V1 runner to fall back to: the fix is the release that reads the K
    setting, current, suggested = (("vLLM release", release, "0.32.0") if sc.draft.method in rule["forced_methods"]
                                   else (rule["setting"], "unset (Model Runner V2)", "0 (the V1 runner), or vLLM 0.32.0"))
    return Advice(setting, current, suggested, float(gain[hit].max()), tuple(int(x) for x in g.batch_sizes[rows][hit]),
                  engine_label(sc.engine), rule["source"],
                  f"vLLM {release} runs {sc.draft.method} on Model Runner V2, which drafts the table's largest K"
                  f" (K={k_top}) at every step whatever K it gives a batch size")


def capped_table(g, fits: np.ndarray, cap: int, k0_drafts: bool, part: str = "draft") -> tuple[np.ndarray, np.ndarray]:
    """(K per batch size, its goodput per sequence) of a table whose largest K is ``cap`` on an engine that runs
    ``cap``'s ``part`` ("draft": its draft passes; "verify": its verify pass) at every step with K > 0 (and at K = 0
    too where ``k0_drafts``): each batch size's best K <= cap with that part of its step at ``cap`` (the cell's step
    less its own part, plus the cap's: :func:`step_drafting_top_s`); ``fits``: the cells that fit memory."""
    runs = g.as_engine_runs
    own, at_cap = ((runs.draft_step_s, g.draft_step_s) if part == "draft" else (runs.verify_s, g.verify_s))
    top = np.broadcast_to(at_cap, g.itl_s.shape)[:, g.k_index(cap)][:, None]
    drafts_cap = (g.ks[None, :] > 0) | k0_drafts
    step = np.where(drafts_cap, step_drafting_top_s(runs.itl_s, np.broadcast_to(own, g.itl_s.shape), top), runs.itl_s)
    good = np.where(fits & (g.ks[None, :] <= cap), np.asarray(runs.acceptance_length)[None, :] / step, -np.inf)
    idx = np.argmax(good, axis=1)
    return g.ks[idx], good[np.arange(len(idx)), idx]


def block_table_max_advice(pred, rule: dict) -> Advice | None:
    """A block drafter drafts the table's largest K at every step with K > 0: the cap on the table's K (the vLLM
    file's num_speculative_tokens) best over the planned load (the geometric mean of goodput per sequence over its
    batch sizes), where it beats the table's own largest K."""
    sc, g, planned = pred.scenario, pred.grid, planned_cells(pred)
    if planned is None:
        return None
    fits, k_top, cells = planned
    b = g.batch_sizes[fits].astype(int)
    chosen = best_over_load({c: capped_table(g, cells, c, False)[1][fits] for c in range(1, k_top + 1)}, k_top, b)
    if chosen is None:
        return None
    best, gain, hit, cost = chosen
    release = sc.engine.release_asked
    return Advice(rule["setting"], k_top, best, float(gain[hit].max()), tuple(int(x) for x in b[hit]),
                  engine_label(sc.engine), rule["source"],
                  f"vLLM {release} drafts {sc.draft.method}'s whole block, sized by num_speculative_tokens (K={k_top}),"
                  f" at every step with K > 0 whatever K the table gives a batch size; capped at K={best} every block"
                  f" is narrower{cost}")


def trt_schedule_caveat(sc) -> str | None:
    """What a TensorRT-LLM 1.2.x draft_len_schedule does not do for the scenario's draft, in one sentence (None
    elsewhere): the engine file's warning; predict's advice says what it costs."""
    rule = trt_schedule_stage1_rule(sc.engine, sc.draft.method)
    if rule is None:
        return None
    release = sc.engine.release_asked
    if sc.draft.method in rule["one_model_methods"]:
        return (f"TensorRT-LLM {release} runs draft_len_schedule on the two-model path only (PR #8194): with the"
                f" one-model {sc.draft.method} drafter it does not run and max_draft_len runs at every batch size"
                " (dynamic draft length on that path: PR #10860, 2026-03); predict's advice names the best single K")
    return (f"TensorRT-LLM {release}'s draft_len_schedule saves draft work only (PR #8194, stage 1): every step with"
            " K > 0 verifies max_draft_len + 1 tokens a request; predict's advice names the best cap on the table's K")


def trt_schedule_advice(pred, rule: dict) -> Advice | None:
    """TensorRT-LLM 1.2.x's draft_len_schedule (stage 1): with a two-model draft every step with K > 0 verifies the
    largest K's tokens (draft savings only): the cap on the table's K best over the planned load, as for a block
    drafter; with a one-model draft the schedule does not run and max_draft_len runs at every batch size: the
    single K best over the planned load (the geometric mean of goodput per sequence)."""
    sc, g, planned = pred.scenario, pred.grid, planned_cells(pred)
    if planned is None:
        return None
    fits, k_top, cells = planned
    release = sc.engine.release_asked
    one_model = sc.draft.method in rule["one_model_methods"]
    if one_model:  # one K runs everywhere: each K as it runs at every planned batch size
        good = {k: np.where(cells[:, g.k_index(k)], g.as_engine_runs.goodput_per_seq[:, g.k_index(k)], np.nan)[fits]
                for k in range(1, k_top + 1)}
        why = (f"TensorRT-LLM {release} runs draft_len_schedule on the two-model path only (PR #8194): the one-model"
               f" {sc.draft.method} drafter runs max_draft_len (K={k_top}) at every batch size (dynamic draft length"
               " on that path: PR #10860, 2026-03)")
    else:
        good = {c: capped_table(g, cells, c, False, "verify")[1][fits] for c in range(1, k_top + 1)}
        why = (f"TensorRT-LLM {release}'s draft_len_schedule saves draft work only (PR #8194, stage 1): every step with"
               f" K > 0 verifies max_draft_len + 1 tokens a request (K={k_top})")
    b = g.batch_sizes[fits].astype(int)
    chosen = best_over_load(good, k_top, b)
    if chosen is None:
        return None
    best, gain, hit, cost = chosen
    return Advice("max_draft_len", k_top, best, float(gain[hit].max()), tuple(int(x) for x in b[hit]),
                  engine_label(sc.engine), rule["source"], f"{why}; K={best} at every batch size{cost}"
                  if one_model else f"{why}; capped at K={best} every verify pass is narrower{cost}")
