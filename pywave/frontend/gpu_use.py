"""Does a module need a device? The one place that decides, once per compile.

A module *uses the GPU* when, after the prepare stage (kernels outlined), it holds an op of a
GPU dialect (:data:`GPU_DIALECTS`: ``gpu.module``, ``gpu.binary``, ``gpu.launch_func``,
``gpu.alloc``, ``gpu.memcpy``, ``gpu.wait``, ...) anywhere, or calls or declares one of MLIR's
GPU runtime functions (:data:`RUNTIME_PREFIX`: ``mgpuMemAlloc``, ``mgpuStreamCreate``, ...)
or one of Wave's runtime helpers (:data:`pywave.program.WAVE_RUNTIME`).
Every other module is a host program: its target is :data:`pywave.program.HOST`, its calls
open no driver and its host functions take CPU tensors (README "Host-only modules").

:func:`may_use_gpu` is the conservative pre-check on the text, made before anything is
parsed (the compile cache keys on GPU 0's chip, which asking the driver for costs a driver
open): text and pass pipeline without the letters ``gpu`` cannot hold a GPU op, so no driver
is asked. It imports no MLIR.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..program import WAVE_CALLEES

if TYPE_CHECKING:
    from mlir import ir

#: Dialects whose ops need a GPU (the ``nvgpu``/``amdgpu`` ops lower to kernels; ``nvvm`` and
#: ``rocdl`` ops live in kernels).
GPU_DIALECTS = ("gpu", "nvgpu", "amdgpu", "nvvm", "rocdl")
#: MLIR's GPU runtime functions (``mgpu*``, libwavert's ``mgpu.c``).
RUNTIME_PREFIX = "mgpu"
#: The letters every GPU op name, GPU type, GPU attribute and runtime function contains;
#: also every upstream pass that makes GPU ops (``convert-parallel-loops-to-gpu``).
_MARK = "gpu"
#: In the name of every helper of Wave's runtime (``wave_launch_kernel``,
#: ``_mlir_ciface_wave_get_buffer``: :data:`pywave.program.WAVE_RUNTIME`), which the
#: pre-check on the text looks for.
WAVE_MARK = "wave_"


def _gpu_runtime(symbol: str) -> bool:
    """``symbol`` is one of MLIR's GPU runtime functions or one of Wave's helpers (Wave's
    host wrappers take GPU tensors and launch kernels)."""
    return symbol.startswith(RUNTIME_PREFIX) or symbol in WAVE_CALLEES


def may_use_gpu(text: str, passes: str | None = None) -> bool:
    """False when ``text`` and the pass pipeline ``passes`` cannot yield a GPU op (neither
    contains ``gpu`` or ``wave_``, in any case, nor names ``nvvm``/``rocdl``): no driver need be asked
    for a default target. True means only "maybe" (a comment or a name may say gpu)."""
    for s in (text, passes or ""):
        lowered = s.lower()
        if any(mark in lowered for mark in (_MARK, WAVE_MARK, "nvvm", "rocdl")):
            return True
    return False


def first_gpu_op(module: "ir.Module") -> str | None:
    """The first op of ``module`` that needs a GPU, described for messages
    (``"gpu.launch_func at line 5, column 3"``, ``"a call of @mgpuMemAlloc at ..."``), or
    None for a host program. Read after the prepare stage."""
    from mlir import ir

    from ..mlirutil import file_location
    found: list[str] = []

    def where(op: "ir.Operation") -> str:
        loc = file_location(op.location)
        return f"line {loc[0]}, column {loc[1]}" if loc else "an unknown location"

    def visit(op: "ir.Operation") -> "ir.WalkResult":
        name = op.name
        if name.split(".", 1)[0] in GPU_DIALECTS:
            found.append(f"{name} at {where(op)}")
        elif name in ("func.call", "llvm.call") and "callee" in op.attributes:
            callee = str(op.attributes["callee"]).lstrip("@")
            if _gpu_runtime(callee):
                found.append(f"a call of @{callee} at {where(op)}")
        elif name in ("func.func", "llvm.func") and "sym_name" in op.attributes:
            symbol = ir.StringAttr(op.attributes["sym_name"]).value
            if _gpu_runtime(symbol):
                found.append(f"the declaration of @{symbol} at {where(op)}")
        return ir.WalkResult.INTERRUPT if found else ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    return found[0] if found else None
