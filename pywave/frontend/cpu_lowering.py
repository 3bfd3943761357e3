"""MLIR's CPU lowerings of the dialects ``convert-to-llvm`` does not finish, applied by need.

``convert-to-llvm`` (the host stage, :mod:`pywave.host.stage`) lowers each dialect through
its ``ConvertToLLVMPatternInterface``: for ``vector`` only the 1-D patterns (no n-D
``broadcast``, ``constant_mask``, ``outerproduct``, ``shape_cast``, ``transpose``,
``contract``: the rewrites ``convert-vector-to-llvm`` applies before its conversion), for
``math`` only the ops with an LLVM intrinsic, and nothing for ``complex`` beyond its
arithmetic, ``linalg`` or the small float types without an LLVM type. This module adds
MLIR's own passes for those, in the order of upstream's CPU lowering (the
``test-lower-to-llvm`` pipeline of ``mlir/test/lib/Dialect/LLVM/TestLowerToLLVM.cpp`` that the
Vector/CPU integration tests run, and the Complex/CPU and Math/CPU tests' RUN lines):

* prepare stage (:data:`STRUCTURED_STEPS`, before ``convert-vector-to-scf`` and
  ``convert-scf-to-cf``): ``linalg`` ops on memrefs become loops
  (``convert-linalg-to-loops``);
* host stage (:data:`HOST_STEPS`, before ``convert-to-llvm``; :data:`LATE_STEPS` after it):
  ``complex`` ops become arith/math (``convert-complex-to-standard``), ``math`` ops LLVM
  intrinsics (``convert-math-to-llvm``), then functions of their own
  (``convert-math-to-funcs``: ``ipowi``, ``fpowi``; first, as ``convert-math-to-libm``
  refuses ``ipowi``) and then libm calls (``convert-math-to-libm``: ``tan``, ``atan2``,
  ``erf``, ``cbrt``, ... of f32/f64); the extension and truncation of ``f4E2M1FN`` and
  ``f8E8M0FNU``, which have no LLVM type, become integer
  arithmetic (``arith-expand{include-f4e2m1 include-f8e8m0}``, after
  ``convert-arith-to-llvm`` so that no other arith op is expanded: arith-expand's select-based
  ``maximumf``/``minimumf`` orders -0.0 and +0.0 unlike the ops' documentation, see
  :data:`pywave.frontend.prepare.PREPARE_PIPELINE`); ``vector`` ops get
  ``convert-vector-to-llvm`` with its default options (no reassociation of floating-point
  reductions: MLIR's semantics), after ``vector.mask`` regions and multi-reductions are
  rewritten (``lower-vector-mask``, ``lower-vector-multi-reduction``, which run on
  ``func.func``, before it is lowered).

Each step runs only when the host code holds an op of its dialect (:func:`host_ops`: one
walk of the module, ``gpu.module`` bodies skipped), so a module without such ops compiles
exactly as before and pays one walk. Tensors are not bufferized: a host op on tensors left
after the user's passes is a CompileError naming the op and ``one-shot-bufferize``
(:func:`pywave.frontend.validate.no_host_tensors`), as MLIR's bufferization changes function
signatures, which the caller of a pywave function would see.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mlir import ir

#: (dialect prefix of an op that needs it, pipeline elements), prepare stage, in order.
STRUCTURED_STEPS: tuple[tuple[str, str], ...] = (
    ("linalg.", "func.func(convert-linalg-to-loops)"),
)

#: (trigger, pipeline elements), host stage, in order; a trigger is a dialect prefix, or
#: :data:`SMALL_FLOAT_CASTS` for an ``arith.extf``/``truncf`` of a type without an LLVM type.
HOST_STEPS: tuple[tuple[str, str], ...] = (
    ("complex.", "convert-complex-to-standard"),
    ("math.", "func.func(convert-math-to-llvm), convert-math-to-funcs, convert-math-to-libm"),
    ("small-float-casts", "convert-arith-to-llvm, "
                          "arith-expand{include-f4e2m1=true include-f8e8m0=true}"),
    ("vector.", "func.func(lower-vector-mask, lower-vector-multi-reduction)"),
)

#: (trigger, pipeline elements) run after the host stage's ``convert-to-llvm`` (each followed
#: by another): ``convert-vector-to-llvm`` then finds the LLVM functions that host code
#: declares for ``vector.print`` (``func.func private @printF32(f32)``) already lowered (run
#: before ``convert-func-to-llvm``, its ``printF32`` would redefine the symbol).
LATE_STEPS: tuple[tuple[str, str], ...] = (
    ("vector.", "convert-vector-to-llvm"),
)

#: The trigger of the small-float step.
SMALL_FLOAT_CASTS = "small-float-casts"

#: Float types whose ``arith.extf``/``arith.truncf`` arith-expand lowers to integer arithmetic.
_EXPANDED_FLOATS = ("f4E2M1FN", "f8E8M0FNU")


def host_ops(module: "ir.Module") -> frozenset[str]:
    """The triggers present in host code: each dialect prefix (``"vector."``) of an op
    outside ``gpu.module`` bodies, and :data:`SMALL_FLOAT_CASTS` when an ``arith.extf`` or
    ``arith.truncf`` has an operand or result of :data:`_EXPANDED_FLOATS` (a scalar or the
    elements of a vector)."""
    from mlir import ir

    found: set[str] = set()

    def visit(op: "ir.Operation") -> "ir.WalkResult":
        name = op.name
        if name == "gpu.module":
            return ir.WalkResult.SKIP
        found.add(name.split(".", 1)[0] + ".")
        if name in ("arith.extf", "arith.truncf") and any(
                _element_name(v.type) in _EXPANDED_FLOATS
                for v in list(op.operands) + list(op.results)):
            found.add(SMALL_FLOAT_CASTS)
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit, ir.WalkOrder.PRE_ORDER)
    return frozenset(found)


def _element_name(t: "ir.Type") -> str:
    from mlir import ir
    if isinstance(t, ir.ShapedType):
        t = t.element_type
    return str(t)


def steps(table: tuple[tuple[str, str], ...], present: frozenset[str]) -> list[str]:
    """The pipeline elements of ``table`` whose trigger is ``present``, in order."""
    return [elements for trigger, elements in table if trigger in present]


__all__ = ["HOST_STEPS", "LATE_STEPS", "SMALL_FLOAT_CASTS", "STRUCTURED_STEPS", "host_ops", "steps"]
