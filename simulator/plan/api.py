"""Python API for notebooks: specs in, pandas DataFrames out.

    >>> from simulator import predict
    >>> p = predict(model="llama-3.1-8b", hardware="h100-sxm", draft="eagle", acceptance=0.8)
    >>> p.table.head()          # per batch size: k_opt, goodput, speedups, bound regime
    >>> p.grid.k_star           # K* per batch size (numpy; -1 where no K fits memory)
    >>> p.breakdown(8, 3)       # per operator of the verify and draft steps
    >>> p.export("vllm").payload  # {"num_speculative_tokens": ..., "num_speculative_tokens_per_batch_size": ...}
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import pandas as pd

from simulator.plan import exports, paste
from simulator.errors import PlannerError
from simulator.plan.advice import engine_advice
from simulator.plan.runner_advice import trt_schedule_caveat
from simulator.plan.answer import _span, answer_notes, schedule_text  # noqa: F401 (schedule_text: API)
from simulator.plan.grid import Grid, compute_grid
from simulator.plan.kstar_columns import kstar_columns
from simulator.plan.k_changes import ScheduleGrid, describe_change, k_changes
from simulator.plan.schedule import schedule_loss, schedule_ranges
from simulator.plan.decision_risk import beats_plain
from simulator.plan.provenance import scenario_provenance, scenario_step_band
from simulator.plan.tables import breakdown_table, grid_rows_table, kstar_table
from simulator.physics.attribution import describe_growth, verify_growth
from simulator.physics.engine_time import graph_batch
from simulator.specs.scenario import MAX_K, Scenario, load_scenario, resolve_scenario  # noqa: F401 (load_scenario: API)


# the K-schedule formats each serving engine reads (simulator/plan/exports)
ENGINE_FORMATS = {"vllm": ("vllm",), "sglang": ("sglang",), "trtllm": ("trtllm",)}
SCHEDULE_FORMATS = ("vllm", "trtllm", "sglang")


@dataclass
class Prediction:
    scenario: Scenario
    grid: Grid  # numpy arrays over (batch size, K): step costs, goodput, memory, K*

    # --- provenance ---------------------------------------------------------------------------
    @property
    def provenance(self) -> dict:
        return scenario_provenance(self.scenario)

    def k_rise_attribution(self) -> str | None:
        """MoE: where K* rises from B = 1 to its peak, what the verify pass's growth from K = 0 to K* is
        made of at both (more experts loaded vs more tokens through loaded experts vs attention vs
        communication vs overhead: non-negative shares of what grew, summing to 100%); None for dense."""
        sc = self.scenario
        if not sc.model.is_moe:
            return None
        t = self.table.dropna(subset=["k_opt"])
        if t.empty:
            return None
        k = t.k_opt.to_numpy(dtype=int)
        first, peak = 0, int(np.argmax(k))
        rows = t.iloc[sorted({first, peak})]  # one batch size (or K* peaking at the first): said once
        growth = verify_growth(sc.model, sc.deployment, sc.hardware, rows.batch_size.to_numpy(float),
                               rows.k_opt.to_numpy(float), sc.context_len, sc.profile)
        return "; ".join(f"B={int(b)} (K*={int(kk)}): {describe_growth(growth, i)}"
                         for i, (b, kk) in enumerate(zip(rows.batch_size, rows.k_opt)))

    def k_changes(self) -> list[dict]:
        """Each change of K* over the batch sizes, with what the old and new K cost against plain decoding
        there, the acceptance length each reaches, its bound and (MoE) the experts it loads
        (:mod:`simulator.plan.k_changes`); each record's ``text`` says it in one line."""
        g = self.grid
        if g.itl_s.ndim != 2:
            return []
        eng = self.scenario.engine
        per = (lambda k: k + 1) if eng is not None and eng.size_unit == "tokens" else (lambda k: 1)
        padded = (lambda b, k: (b * per(k), round(float(graph_batch(eng, b, k)) * per(k)))) if eng else None
        grid = ScheduleGrid(g.batch_sizes, g.ks, g.itl_s, g.acceptance_length, g.k_star, g.regime(),
                            g.experts_touched, np.asarray(g.fits_memory))
        recs = k_changes(grid, padded)
        experts = self.scenario.model.num_experts if self.scenario.model.is_moe else None
        unit = eng.size_unit if eng is not None else "sequences"
        return [r | {"text": describe_change(r, experts, unit)} for r in recs]

    @cached_property
    def uncertainty(self):
        """Step-time band of this basis and device (see :mod:`simulator.specs.uncertainty`)."""
        return scenario_step_band(self.scenario)

    # --- tables -------------------------------------------------------------------------------
    @cached_property
    def grid_rows(self) -> pd.DataFrame:
        """The grid as a table: one row per (batch size, K)."""
        return grid_rows_table(self.grid)

    @cached_property
    def choice_grid(self) -> Grid:
        """The grid read per batch size alone: K* at B is the best K at B (of the robust score with an
        acceptance band; ties to the smaller K), whatever batch range was asked. The compressed schedule of
        :attr:`grid` (fewest ranges within the schedule tolerance, solved over the range asked) is what the
        engine files hold; where it runs another K, the table says so at that batch size (``k_schedule``)."""
        return dataclasses.replace(self.grid, schedule_tolerance=0.0)

    @cached_property
    def columns(self) -> dict:
        """Per batch size, as numpy arrays: what :attr:`table` shows without its per-cell bound regime
        (:func:`simulator.plan.kstar_columns.kstar_columns` at the per-batch choice; a fleet sweep reads these alone),
        plus ``k_schedule``: the engine schedule's K (-1 where none fits)."""
        cols = kstar_columns(self.choice_grid, self.scenario.fixed_k)
        cols["k_schedule"] = self.grid.k_star
        return cols

    @cached_property
    def table(self) -> pd.DataFrame:
        """One row per batch size: K*, its goodput, and plain / fixed-K / dynamic-K compared (plan.tables)."""
        return kstar_table(self.choice_grid, self.columns, self.scenario, self.beats_plain)

    @cached_property
    def beats_plain(self) -> np.ndarray:
        """P(K beats plain decoding) per (B, K) cell under the engine terms' uncertainty."""
        return beats_plain(self.grid, self.scenario.step_terms)[0]

    def breakdown(self, batch_size: int, k: int) -> pd.DataFrame:
        """Per-operator time, FLOPs, bytes and bound of the draft and verify steps at (B, K): the physics of
        each operator. ``attrs["step_ms"]``: the step the K* table prices there (verify and draft with the
        engine terms' kernel scales, host time, and their sum); ``attrs["fits_memory"]``: whether (B, K) fits."""
        if k < 0 or k > MAX_K or batch_size < 1:
            raise PlannerError(f"breakdown needs batch size >= 1 and K from 0 to {MAX_K}, got {batch_size},{k}")
        return breakdown_table(predict_scenario(self.scenario, batch_sizes=[batch_size], ks=[k]).grid)

    # --- exports ------------------------------------------------------------------------------
    def kstar_by_batch(self) -> tuple[np.ndarray, np.ndarray]:
        """(batch sizes, K* at each; -1 where no K fits memory): :attr:`Grid.k_star`."""
        return self.grid.batch_sizes.astype(int), self.grid.k_star

    def schedule_text(self) -> str:
        """The K* schedule in words, e.g. "K=4 for B 1-43, K=3 for 44-84, no speculation from 196";
        with an acceptance band, where K* depends on the rates inside it."""
        text = schedule_text(*self.kstar_by_batch())
        dependence = self.acceptance_dependence_text()
        return f"{text} ({dependence})" if dependence else text

    def acceptance_dependence_text(self) -> str | None:
        """With an acceptance band: the batch sizes whose K* differs between the band's low and high
        rates, in words; None without a band."""
        band = self.scenario.acceptance_band
        if not band:
            return None
        t = self.table
        hit = t.batch_size[t.k_opt_depends_on_acceptance.to_numpy(bool)].to_numpy()
        if not hit.size:
            return f"acceptance band +-{band:g}: K* holds across it at every batch size"
        runs = np.split(hit, np.flatnonzero(np.diff(hit) > 1) + 1) if t.batch_size.diff().max() == 1 else [hit]
        where = ", ".join(_span(r, t.batch_size.diff().max() == 1) for r in runs)
        return (f"acceptance band +-{band:g}: K* depends on acceptance at B {where};"
                " the K shown is the one nearest the best across the band")

    def schedule_summary(self) -> dict:
        """What the K* schedule trades: its ranges vs the per-batch argmax's, and the goodput it gives
        up at each batch size (share of the per-batch optimum; :mod:`simulator.plan.schedule`)."""
        g = self.grid
        chosen, raw = g.optimal_k_index(), g.argmax_k_index()
        # the share of the per-batch best score (what K* is chosen on: goodput at the engine terms' decision
        # quantile, plan.decision_risk) the schedule gives up; and of the goodput at the terms' centre
        loss = schedule_loss(g.selection_score, g.fits_memory, chosen)
        centre = schedule_loss(g.centre_score, g.fits_memory, chosen)
        worst, worst_centre = (int(np.argmax(x)) if x.size else 0 for x in (loss, centre))
        some = (chosen >= 0).any()
        return {"tolerance": float(g.schedule_tolerance), "ranges": schedule_ranges(chosen),
                "argmax_ranges": schedule_ranges(raw), "decision_quantile": float(g.decision_quantile),
                "max_loss": float(loss.max(initial=0.0)),
                "max_loss_batch_size": int(g.batch_sizes[worst]) if loss.size else None,
                "mean_loss": float(loss[chosen >= 0].mean()) if some else 0.0,
                "centre_max_loss": float(centre.max(initial=0.0)),
                "centre_max_loss_batch_size": int(g.batch_sizes[worst_centre]) if centre.size else None}

    def schedule_note(self) -> str:
        """The schedule's trade in one line (printed under the schedule)."""
        s = self.schedule_summary()
        if s["tolerance"] <= 0:
            return f"{s['ranges']} ranges: the per-batch argmax (schedule tolerance 0)"
        saved = s["argmax_ranges"] - s["ranges"]
        q = s["decision_quantile"]
        judged = (f" at the engine terms' pessimistic {q:.0%} (or in at least half of their draws)" if q > 0
                  else "")
        text = (f"{s['ranges']} ranges, the fewest within {s['tolerance']:.1%} of the best goodput{judged} at every"
                f" batch size (per-batch argmax: {s['argmax_ranges']} ranges, {saved} saved)")
        if s["max_loss"] > 0:
            text += (f"; gives up at most {s['max_loss']:.2%} (B={s['max_loss_batch_size']}),"
                     f" {s['mean_loss']:.2%} on average")
        if q > 0 and s["centre_max_loss"] > s["max_loss"] + 1e-9:
            text += (f"; at the terms' centre up to {s['centre_max_loss']:.2%} (B={s['centre_max_loss_batch_size']},"
                     " a gain inside their spread; --decision-quantile 0 chooses there)")
        return text + "; --schedule-tolerance 0 gives the argmax"

    def notes(self) -> list[str]:
        """Warnings a reader of the K* table needs: extrapolated acceptance, sparse batch sizes, engines
        past the last exported batch size. Each one line."""
        return answer_notes(self)

    def engine_advice(self) -> list:
        """Engine settings that cost goodput at the planned load, with the gain of changing each
        (:mod:`simulator.plan.advice`); empty when none does."""
        if "_advice" not in self.__dict__:
            self.__dict__["_advice"] = engine_advice(self, predict_scenario)  # reruns grids through this module
        return self.__dict__["_advice"]

    # --- the context-length axis and engine-exact exports ----------------------------------------
    def context_lens(self, context_lens=None) -> np.ndarray:
        """The context axis: given, else the scenario's context_lens; the scenario's context_len is
        always one of them (the column formats without a context axis encode)."""
        given = context_lens if context_lens is not None else self.scenario.context_lens
        base = [] if given is None else list(np.asarray(given, dtype=int).ravel())
        return np.unique(np.asarray(base + [self.scenario.context_len], dtype=int))

    def default_context_lens(self) -> list[int]:
        """The scenario's context_lens, else 512, 2048, 8192, 32768, 131072 up to the model's trained
        length (what the dashboard map and --format vllm-ctx use when no axis is given)."""
        if self.scenario.context_lens is not None:
            return [int(x) for x in self.scenario.context_lens]
        top = min(self.scenario.model.max_position_embeddings or 131072, 131072)
        return [L for L in (512, 2048, 8192, 32768, 131072) if L <= top] or [self.scenario.context_len]

    def context_grid(self, context_lens=None) -> Grid:
        """The (B, K, L) grid over the scenario's batch sizes and K (cached per context axis)."""
        lens = self.context_lens(context_lens)
        key = tuple(int(x) for x in lens)
        cache = self.__dict__.setdefault("_context_grids", {})
        if key not in cache:
            cache[key] = compute_grid(self.scenario, self.grid.batch_sizes, self.grid.ks, lens)
        return cache[key]

    def kstar_frame(self, context_lens=None) -> pd.DataFrame:
        """K* per batch size (rows) and context length (columns); <NA> where no K fits in memory."""
        g = self.context_grid(context_lens)
        df = pd.DataFrame(g.k_star, index=pd.Index(g.batch_sizes.astype(int), name="batch_size"),
                          columns=pd.Index(g.context_lens.astype(int), name="context_len")).astype("Int64")
        return df.mask(df < 0)

    def kstar_map(self, context_lens=None) -> exports.KTable:
        """What the exporters read: K*(B, L) with the goodput grid for runner-up choices; without a
        context axis (none given, none in the scenario) the plain grid as its one column."""
        if context_lens is None and self.scenario.context_lens is None:
            g = self.grid
            return exports.KTable(g.batch_sizes.astype(int), np.array([self.scenario.context_len]), g.k_star[:, None],
                                  g.ks, g.goodput_per_seq[:, :, None], np.asarray(g.fits_memory)[:, :, None],
                                  g.itl_s[:, :, None], 0)
        g = self.context_grid(context_lens)
        j = int(np.flatnonzero(g.context_lens == self.scenario.context_len)[0])
        return exports.KTable(g.batch_sizes.astype(int), g.context_lens, g.k_star, g.ks, g.goodput_per_seq,
                              g.fits_memory, g.itl_s, j)

    def vllm_method(self) -> dict:
        """vLLM's speculative_config method and draft checkpoint (simulator/plan/paste.py)."""
        return paste.vllm_method(self.scenario)[0]

    def cuda_graph_bs(self) -> list[int] | None:
        """Captured batch sizes SGLang pads to before routing (the scenario's SGLang engine profile): an
        adaptive config runs with a speculative algorithm set, so the speculative capture list."""
        eng = self.scenario.engine
        if eng is None or eng.name != "sglang" or not eng.padding:
            return None
        sizes = eng.spec_capture_sizes or eng.capture_sizes
        return [int(x) for x in sizes] or None

    def export(self, fmt: str, version: str | None = None, context_lens=None, cuda_graph_bs=None,
               sglang_candidates: str = "kstar", planned_batch_size: int | None = None) -> exports.Export:
        """The engine file for ``fmt`` (vllm, vllm-ctx, trtllm, sglang, sglang-sps) targeting
        ``version`` (default: the newest release checked); ``.json()`` / ``.markdown()`` render it.
        ``planned_batch_size``: the batch size (int) or range (lo, hi) the user will serve at, for a file of one
        K at every batch size (SGLang's launch flags for a tree or block draft; default: every batch size that
        fits) and TensorRT-LLM's acceptance gate (an int; default: the largest that still speculates)."""
        if fmt == "trtllm" and isinstance(planned_batch_size, tuple):
            raise PlannerError(f"planned batch sizes {planned_batch_size[0]}-{planned_batch_size[1]}: TensorRT-LLM's"
                               " acceptance gate sits at one batch size; give one")
        table = self.kstar_map(context_lens if context_lens is not None or fmt != "vllm-ctx"
                            else self.default_context_lens())
        draft = self.scenario.draft
        if fmt in exports.FORMATS:  # a draft the engine (or that release) does not run: one line naming one that does
            paste.check_draft_export(draft, fmt, version or exports.DEFAULT_VERSION[fmt])
        if fmt == "sglang" and (draft.is_tree or draft.is_block):
            version, notes = exports.check_version(fmt, version)
            exp = paste.sglang_fixed_export(self, table, version, planned_batch_size)
            exp.notes = notes + exp.notes
            return exp
        if cuda_graph_bs is None:
            cuda_graph_bs = self.cuda_graph_bs()
        method_cfg, draft_warnings = paste.vllm_method(self.scenario)
        exp = exports.export(fmt, table, version, method_cfg=method_cfg, cuda_graph_bs=cuda_graph_bs,
                             sglang_candidates=sglang_candidates, planned_batch_size=planned_batch_size,
                             draft_method=self.scenario.draft.method)
        if fmt in ("vllm", "vllm-ctx"):
            exp.warnings += draft_warnings
            if draft.is_block:
                exp.notes.append(f"vLLM 0.33.0 drafts {draft.label}'s whole block every step, sized by"
                                 " num_speculative_tokens (dflash/speculator.py: num_query_per_req = 1 + K); the"
                                 " per-batch-size schedule trims the drafts verified, not the draft pass: where"
                                 " K* is below num_speculative_tokens the engine's one draft pass is wider than"
                                 " the one priced here")
            exp.notes += paste.serve_notes(self)
            exp.how_to_use = paste.vllm_serve_command(self, exp.payload) + (
                "  (a build of PR #48944 only)" if fmt == "vllm-ctx" else "")
        elif fmt == "trtllm":
            entry, warns = paste.trtllm_draft_entry(self.scenario)
            exp.payload = entry | exp.payload
            exp.warnings += warns + [c for c in (trt_schedule_caveat(self.scenario),) if c]
            if draft.method == "pard":
                exp.warnings.append("PARD runs in TensorRT-LLM as its own decoding config (PARDDecodingConfig,"
                                    " tensorrt_llm/_torch/speculative/pard.py): its keys were not read from a wheel"
                                    " here; add its decoding_type and draft model by hand")
        elif fmt == "sglang":
            exp.how_to_use, warns = paste.sglang_serve_command(self)
            exp.warnings += warns
        if version is None:
            exp.warnings += self._release_reads_format(fmt, exp, lambda release: self.export(
                fmt, release, context_lens, cuda_graph_bs, sglang_candidates, planned_batch_size))
        return exp

    def _release_reads_format(self, fmt: str, exp: exports.Export, export_for) -> list[str]:
        """A warning when the file targets the format's default release while the scenario prices another release
        of the same engine (--engine-version) that cannot read that file, or reads another one (TensorRT-LLM 1.3+
        reads draft_len_schedule keys as "up to", 1.2.x as lower bounds); nothing otherwise."""
        eng = self.scenario.engine
        release = eng.release_asked if eng is not None else ""
        target = exp.version
        if eng is None or eng.name != fmt.split("-")[0] or not release or release == target:
            return []
        lead = (f"this file is {exports.ENGINE_OF[fmt]} {target}'s format (the --export-version default), but the"
                f" step times are priced for {eng.name} {release} (the engine release: --engine-version)")
        try:
            exports.check_version(fmt, release)
        except PlannerError as err:
            return [f"{lead}, which cannot read it: {str(err).split(': ', 1)[-1]}"]
        if export_for(release).json() != exp.json():
            return [f"{lead}, which reads another file: pass --export-version {release}"]
        return []

    def engine_formats(self) -> tuple[str, ...]:
        """The K-schedule formats of the scenario's engine (vLLM: vllm; SGLang: sglang; TensorRT-LLM: trtllm);
        an engine no server reads files for (ideal, research engines): all three."""
        eng = self.scenario.engine
        return ENGINE_FORMATS.get(eng.name if eng is not None else "", SCHEDULE_FORMATS)

    def engine_exports(self, versions: dict | None = None) -> dict:
        """fmt -> the :class:`exports.Export` of :meth:`export` (``versions``: fmt -> release, default the
        newest checked) for each of :meth:`engine_formats`, or the one-line reason the engine cannot take
        the schedule (TensorRT-LLM with K* = 0 at batch size 1). Warnings stay in each Export."""
        import warnings
        key = tuple(sorted((versions or {}).items()))
        cache = self.__dict__.setdefault("_engine_exports", {})
        if key not in cache:
            out = {}
            for fmt in self.engine_formats():
                try:
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        out[fmt] = self.export(fmt, (versions or {}).get(fmt))
                except PlannerError as err:
                    out[fmt] = str(err)
            cache[key] = out
        return cache[key]

    def exports_dict(self, versions: dict | None = None) -> dict:
        """What the JSON output embeds per format: the engine, release, the file exactly as ``export(fmt)``
        writes it, its warnings and notes; or the reason the engine cannot take the schedule."""
        out = {}
        for fmt, exp in self.engine_exports(versions).items():
            out[fmt] = {"error": exp} if isinstance(exp, str) else {
                "engine": exp.engine, "version": exp.version, "file": json.loads(exp.json()),
                "warnings": list(exp.warnings), "notes": list(exp.notes)}
        return out

    def to_dict(self, versions: dict | None = None) -> dict:
        rows = json.loads(self.table.to_json(orient="records"))
        eng = self.scenario.engine
        return {"provenance": self.provenance, "schedule": self.schedule_text(),
                "schedule_trade": self.schedule_summary(), "k_changes": self.k_changes(), "notes": self.notes(),
                "fixed_k": self.scenario.fixed_k,
                "engine_advice": [a.to_dict() for a in self.engine_advice()],
                "engine": eng.name if eng is not None else None, "exports": self.exports_dict(versions), "rows": rows}


def predict_scenario(scenario: Scenario, batch_sizes=None, ks=None) -> Prediction:
    return Prediction(scenario, compute_grid(scenario, batch_sizes, ks))


def predict(scenario: str | Scenario | None = None, **overrides) -> Prediction:
    """Predict the goodput grid and K* table.

    ``scenario``: a Scenario, a TOML path or bundled name, or None for the default scenario when
    no model is given (else an empty base). Keyword overrides: model, hardware, tp, ep, draft,
    acceptance, context_len, batch_sizes, k_max, fixed_k, dtype, kv_dtype, calibration, ...
    """
    return predict_scenario(resolve_scenario(scenario, **overrides))
