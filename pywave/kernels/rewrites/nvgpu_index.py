"""nvgpu's lowering in kernels whose ``index`` is 32 bits wide.

Upstream's ``convert-nvgpu-to-nvvm`` (MLIR 22.1) builds its LLVM type converter with the
default options: ``index`` is i64 and a memref descriptor holds i64 offset, sizes and strides,
whatever the kernel's index width; the pass has no ``index-bitwidth`` option and reads no data
layout. Where an nvgpu op takes an ``index`` or a memref, it leaves a
``builtin.unrealized_conversion_cast`` from that value to i64 or to the 64-bit descriptor.
``convert-gpu-to-nvvm{index-bitwidth=32}`` then gives the value i32 or a 32-bit descriptor, and
the two casts meet across widths, which ``reconcile-unrealized-casts`` cannot fold: "LLVM
Translation failed for operation: builtin.unrealized_conversion_cast" (upstream's own
``gpu-lower-to-nvvm-pipeline{index-bitwidth=32}`` fails the same way on such kernels, e.g.
the TMA load of mlir/test/Integration/GPU/CUDA/sm90/transform-dialect).

:func:`widen_nvgpu_casts` replaces those casts, before the kernel lowering, by what they
mean at the kernel's width: an ``index`` to i64 becomes ``arith.index_cast`` (sign extension,
MLIR's conversion between ``index`` and a wider integer), and a memref to the 64-bit
descriptor becomes a cast to the kernel's descriptor followed by its widening field by field
(pointers as they are, offset, sizes and strides sign-extended). The nvgpu lowering then
computes with the values the program holds; no op of nvgpu produces an ``index`` or a memref,
so no cast goes the other way. Kernels at 64-bit index are left as they are.
"""

from __future__ import annotations

from mlir import ir
from mlir.dialects import arith, llvm

from ...mlirutil import gpu_modules

CAST = "builtin.unrealized_conversion_cast"


def widen_nvgpu_casts(module: ir.Module, index_bitwidth: int) -> int:
    """Rewrite the casts to nvgpu's 64-bit index types inside every ``gpu.module`` of
    ``module`` whose kernels use ``index_bitwidth``-bit ``index`` (nothing at 64). Run after
    nvgpu is lowered (the prepare stage) and before ``convert-gpu-to-nvvm``. Returns the
    number of casts rewritten."""
    if index_bitwidth == 64:
        return 0
    ctx = module.context
    index = ir.IndexType.get(ctx)
    i64 = ir.IntegerType.get_signless(64, ctx)
    narrow = ir.IntegerType.get_signless(index_bitwidth, ctx)
    scalars: list[ir.Operation] = []
    descriptors: list[tuple[ir.Operation, ir.Type]] = []

    def visit(op: ir.Operation) -> ir.WalkResult:
        if op.name != CAST or len(op.operands) != 1 or len(op.results) != 1:
            return ir.WalkResult.ADVANCE
        source, target = op.operands[0], op.results[0].type
        if _round_trip(source, target):
            return ir.WalkResult.ADVANCE    # reconcile-unrealized-casts folds the pair
        if source.type == index and target == i64:
            scalars.append(op)
        elif isinstance(source.type, ir.MemRefType):
            kernel_type = _descriptor_at(target, ir.MemRefType(source.type).rank, i64, narrow)
            if kernel_type is not None:
                descriptors.append((op, kernel_type))
        return ir.WalkResult.ADVANCE

    with ctx, ir.Location.unknown(ctx):
        for gmod in gpu_modules(module):
            gmod.walk(visit)
        for op in scalars:
            with ir.InsertionPoint(op), op.location:
                new = arith.IndexCastOp(i64, op.operands[0])
            op.results[0].replace_all_uses_with(new.result)
            op.erase()
        for op, kernel_type in descriptors:
            _widen_descriptor(op, kernel_type, narrow, i64)
    return len(scalars) + len(descriptors)


def _round_trip(source: ir.Value, target: ir.Type) -> bool:
    """Whether ``source`` is itself a cast from ``target`` (the pair cancels out)."""
    owner = source.owner
    if not isinstance(owner, ir.Operation) and hasattr(owner, "operation"):
        owner = owner.operation
    return isinstance(owner, ir.Operation) and owner.name == CAST and \
        len(owner.operands) == 1 and owner.operands[0].type == target


def _descriptor_at(t: ir.Type, rank: int, wide: ir.Type, narrow: ir.Type) -> ir.Type | None:
    """The memref descriptor ``t`` (MLIR's LLVM layout: allocated and aligned pointers, the
    offset, then for rank > 0 the sizes and the strides as arrays) with ``narrow`` integers for
    its ``wide`` ones; None when ``t`` is no ``wide`` descriptor of that rank."""
    if not isinstance(t, llvm.StructType):
        return None
    struct = t
    if struct.name is not None or struct.opaque:
        return None
    body = list(struct.body)
    arrays = [] if rank == 0 else [ir.Type.parse(f"!llvm.array<{rank} x {wide}>", t.context)]
    if len(body) != 3 + 2 * bool(rank) or body[2] != wide or body[3:] != arrays * 2 or \
            not all(isinstance(p, llvm.PointerType) for p in body[:2]):
        return None
    narrow_arrays = [ir.Type.parse(f"!llvm.array<{rank} x {narrow}>", t.context)] * 2 \
        if rank else []
    return llvm.StructType.get_literal(body[:2] + [narrow] + narrow_arrays)


def _widen_descriptor(op: ir.Operation, kernel_type: ir.Type, narrow: ir.Type,
                      wide: ir.Type) -> None:
    """Replace the cast ``op`` (memref to the wide descriptor) by a cast to ``kernel_type``
    followed by the field-by-field widening of that descriptor."""
    wide_type = op.results[0].type
    rank = ir.MemRefType(op.operands[0].type).rank
    positions = [[0], [1], [2]] + [[field, i] for field in (3, 4) for i in range(rank)]
    with ir.InsertionPoint(op), op.location:
        cast = ir.Operation.create(CAST, results=[kernel_type], operands=[op.operands[0]])
        value = llvm.PoisonOp(wide_type).result
        for position in positions:
            element = narrow if position[0] >= 2 else \
                llvm.StructType(kernel_type).body[position[0]]
            field = llvm.ExtractValueOp(element, cast.results[0], position).result
            if position[0] >= 2:
                field = llvm.SExtOp(wide, field).result
            value = llvm.InsertValueOp(value, field, position).result
    op.results[0].replace_all_uses_with(value)
    op.erase()
