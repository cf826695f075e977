"""The step models of the last few scenarios (:class:`simulator.physics.step_model.StepModel`): built once per
what prices a scenario's passes, kept while it is among the last :data:`STEP_MODEL_SLOTS` asked for (or its
scenario object among the last :data:`RECENT_SCENARIOS`), and with it every table the physics kept for it (its
``caches``). The grid, the K* tables, the serving pricer and the fits read them through :func:`step_model`."""
from __future__ import annotations

from simulator.physics.caches import make_room
from simulator.physics.step_model import StepModel

STEP_MODEL_SLOTS = 8  # a dashboard's last few settings, a sweep's scenarios that share a model and device
RECENT_SCENARIOS = 4  # scenario objects found by identity first (a key by value costs hashing its specs)
_STEP_MODELS: dict = {}  # StepModel.key_of(scenario) -> StepModel (it holds the profile whose id the key has)
_RECENT: tuple = ()  # ((scenario, its profile, its step model), ...), newest first; a tuple replaced whole


def step_model(sc) -> StepModel:
    """The scenario's step model: the one kept for its specs and profile, else a new one (the oldest dropped)."""
    global _RECENT
    recent = _RECENT
    profile = getattr(sc, "profile", None)
    for entry in recent:
        if entry[0] is sc and entry[1] is profile:
            return entry[2]
    key = StepModel.key_of(sc)
    model = _STEP_MODELS.get(key)
    if model is None or model.profile is not profile:
        model = StepModel.of(sc)
        make_room(_STEP_MODELS, STEP_MODEL_SLOTS)
        _STEP_MODELS[key] = model
    _RECENT = ((sc, profile, model),) + recent[:RECENT_SCENARIOS - 1]
    return model
