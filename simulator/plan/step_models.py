"""The step models of the last few scenarios (:class:`simulator.physics.step_model.StepModel`): built once per
what prices a scenario's passes, kept while it is among the last :data:`STEP_MODEL_SLOTS` asked for, and with
it every table the physics kept for it (its ``caches``). The grid, the K* tables, the serving pricer and the
fits read them through :func:`step_model`."""
from __future__ import annotations

from simulator.physics.caches import make_room
from simulator.physics.step_model import StepModel

STEP_MODEL_SLOTS = 8  # a dashboard's last few settings, a sweep's scenarios that share a model and device
_STEP_MODELS: dict = {}  # StepModel.key_of(scenario) -> StepModel (it holds the profile whose id the key has)


def step_model(sc) -> StepModel:
    """The scenario's step model: the one kept for its specs and profile, else a new one (the oldest dropped)."""
    key = StepModel.key_of(sc)
    hit = _STEP_MODELS.get(key)
    if hit is not None and hit.profile is getattr(sc, "profile", None):
        return hit
    made = StepModel.of(sc)
    make_room(_STEP_MODELS, STEP_MODEL_SLOTS)
    _STEP_MODELS[key] = made
    return made
