"""How a model is deployed: parallel layout, precisions, routing, memory share; facts derived from them.

Sits below the physics: the operator builders and the memory model both read these facts
(heads per GPU, sliding layers), so neither has to import the other.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from simulator.errors import PlannerError
from simulator.specs.hardware import DTYPE_BYTES
from simulator.specs.models import ModelSpec
from simulator.specs.routing import Routing


@dataclass(frozen=True)
class Deployment:
    """How a model runs: parallelism and precisions."""

    tp: int = 1
    ep: int = 1  # expert-parallel groups among the tp GPUs (experts split, not sliced)
    weight_dtype: str = "bf16"
    act_dtype: str = "bf16"
    kv_dtype: str = "bf16"
    expert_dtype: str | None = None  # None: the model's native expert dtype, else weight_dtype
    routing: Routing = field(default_factory=Routing)
    memory_utilization: float = 0.9  # share of device memory the engine may use (vLLM default)

    def expert_dtype_for(self, model: ModelSpec) -> str:
        return self.expert_dtype or model.expert_weight_dtype or self.weight_dtype


def check_deployment(model: ModelSpec, dep: Deployment) -> None:
    """Raise PlannerError when the parallel layout cannot split this model."""
    if dep.tp < 1 or dep.ep < 1:
        raise PlannerError(f"tp and ep must be >= 1, got tp={dep.tp}, ep={dep.ep}")
    if model.num_heads % dep.tp:
        raise PlannerError(f"tp={dep.tp} does not divide the {model.num_heads} attention heads of {model.name}"
                           f" (try one of {[t for t in (1, 2, 4, 8, 16) if model.num_heads % t == 0]})")
    if dep.ep > 1:
        if not model.is_moe:
            raise PlannerError(f"ep={dep.ep} needs an MoE model; {model.name} is dense")
        if dep.tp % dep.ep:
            raise PlannerError(f"ep={dep.ep} must divide tp={dep.tp} (experts are split over the same GPUs)")
        if model.num_experts % dep.ep:
            raise PlannerError(f"ep={dep.ep} does not divide the {model.num_experts} experts of {model.name}")
    for label, value, allowed in (("weight", dep.weight_dtype, DTYPE_BYTES), ("activation", dep.act_dtype, DTYPE_BYTES),
                                  ("kv-cache", dep.kv_dtype, DTYPE_BYTES)):
        if value not in allowed:
            raise PlannerError(f"unknown {label} dtype '{value}' (known: {', '.join(DTYPE_BYTES)})")
    if not 0 < dep.memory_utilization <= 1:
        raise PlannerError(f"memory_utilization must be in (0, 1], got {dep.memory_utilization}")


def kv_heads_per_gpu(model: ModelSpec, tp: int) -> int:
    """KV heads are replicated when tp exceeds their number."""
    return max(1, -(-model.num_kv_heads // tp))


def sliding_layers(model: ModelSpec, layers: int | None = None) -> int:
    """Sliding-window layers among all of the model's layers, or among a draft head's ``layers``
    (a head copies the model's full-attention layers unless every layer slides)."""
    if layers is None:
        return model.num_sliding_layers
    return layers if model.num_sliding_layers == model.num_layers else 0
