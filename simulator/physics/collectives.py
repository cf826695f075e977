"""How many collective calls a step's passes run: what the learned term ``collective_s`` (simulator/specs/
step_terms.py) is paid per.

A collective call is an op of family "comm" (tensor-parallel all-reduces, the vocab-parallel argmax's all-reduces,
the logits all-gather, MoE dispatch and combine all-to-alls), counted ``op.count`` times per pass. The counts
depend on the model, the deployment and the draft, not on B, K or the context, so they are read once per scenario
from the passes' op lists at unit sizes (simulator.physics.step_model.StepModel.collective_counts) and composed
into a step as its draft passes are (step_model.step_collective_calls).
"""
from __future__ import annotations

from dataclasses import dataclass

from simulator.physics.draft_cost import DraftSetting, draft_extend_plan, draft_pass_plan
from simulator.physics.forward_pass import forward_ops


def collective_calls(ops) -> float:
    """Collective calls of one pass: every op of family "comm", ``count`` times."""
    return float(sum(float(o.count) for o in ops if o.family == "comm"))


@dataclass(frozen=True)
class CollectiveCounts:
    """Collective calls of a scenario's passes: the verify (target) pass, one draft pass and the drafter's extend
    pass (None without one)."""

    verify: float
    draft_pass: float = 0.0
    draft_extend: float | None = None


def collective_counts(model, deployment, hardware, draft=None) -> CollectiveCounts:
    """The calls of each pass, from its ops at one sequence, one query and one cached token (none of the counts
    depends on the sizes). ``draft`` None: plain decoding only; an n-gram (host) draft has no draft ops."""
    verify = collective_calls(forward_ops(model, deployment, hardware, 1.0, 1.0, 1.0))
    if draft is None:
        return CollectiveCounts(verify)
    setting = DraftSetting(draft, model, deployment, hardware)
    one = draft_pass_plan(setting, 1.0, 1.0)
    extend = draft_extend_plan(setting, 1.0, 1.0, 1.0)
    return CollectiveCounts(verify, 0.0 if one is None else collective_calls(one.full()),
                            None if extend is None else collective_calls(extend.full()))
