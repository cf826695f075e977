"""A weight GEMM's operands and its operator: the one place a GEMM's weight and activation bytes, its fp8 block
scaling and the measured kernel family that runs it are decided (decoder layers, the LM head, draft heads)."""
from __future__ import annotations

from dataclasses import dataclass

from simulator.physics.ops import GemmOp, Op
from simulator.physics.terms import gemm_terms
from simulator.specs.deployment import Deployment
from simulator.specs.hardware import BLOCK_FP8, DTYPE_BYTES, gemm_kernel_dtype
from simulator.specs.models import ModelSpec


@dataclass(frozen=True)
class GemmPrecision:
    """A weight GEMM's operands: bytes per weight and per activation element, and whether W is a checkpoint's
    block-scaled fp8 (:meth:`ModelSpec.fp8_blocks`), multiplied by a block-scaled fp8 kernel on activations the
    engine quantized to fp8 (a = 1, as the measured tables' fp8_block rows are read: calibration/import_rows.py)."""

    w_bytes: float
    a_bytes: float
    fp8_blocks: bool = False

    @classmethod
    def of(cls, model: ModelSpec, dep: Deployment) -> "GemmPrecision":
        """The deployment's weights and activations, block-scaled where the checkpoint is."""
        return cls(DTYPE_BYTES[dep.weight_dtype], DTYPE_BYTES[dep.act_dtype], model.fp8_blocks(dep.weight_dtype))

    @classmethod
    def held(cls, dep: Deployment, held: str, fp8_blocks: bool = False) -> "GemmPrecision":
        """A GEMM over weights held in ``held``: the deployment's activations where that is its weights' precision;
        weights held in another (a module left unquantized, an attention projection, a head's fusion) multiply
        activations at least as wide as themselves, up to bf16 (an unquantized layer takes bf16 inputs, an fp8 one
        beside FP4 weights fp8 inputs)."""
        w, a = DTYPE_BYTES[held], DTYPE_BYTES[dep.act_dtype]
        return cls(w, a if held == dep.weight_dtype else max(a, min(w, DTYPE_BYTES["bf16"])), fp8_blocks)

    @property
    def block_scaled(self) -> bool:
        return self.fp8_blocks and self.a_bytes <= DTYPE_BYTES["bf16"]

    @property
    def kernel_a_bytes(self) -> float:
        """Activation bytes the kernel reads: fp8 under block scaling."""
        return DTYPE_BYTES["fp8"] if self.block_scaled else self.a_bytes

    @property
    def kernel_dtype(self) -> str:
        """The measured kernel family that runs it (GEMMs and MoE experts)."""
        return BLOCK_FP8 if self.block_scaled else gemm_kernel_dtype(self.w_bytes, self.a_bytes)


def gemm(name: str, tokens, n: float, k: float, precision: GemmPrecision, count: float, family: str = "gemm") -> Op:
    """Y[T, n] = X[T, k] @ W[k, n]:  F = 2 T n k,  M = n k w + T (n + k) a (w, a: ``precision``'s, a as its kernel
    reads it)."""
    return GemmOp(name, family, gemm_terms, kernels=1, count=count, eff_tokens=tokens, surface="gemm",
                  shape={"m": tokens, "n": n, "k": k, "nk": n * k, "w_bytes": precision.w_bytes,
                         "a_bytes": precision.kernel_a_bytes}, dtype=precision.kernel_dtype)


def module_precision(model: ModelSpec, dep: Deployment, module: str) -> GemmPrecision:
    """A GEMM over the LM head or a router, in the precision the engine holds it in
    (:meth:`Deployment.module_dtype_for`)."""
    return GemmPrecision.held(dep, dep.module_dtype_for(model, module))
