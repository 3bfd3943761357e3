"""Kernels whose ``index`` is 32 bits wide, through lowerings that know only 64.

Two of MLIR 22.1's lowerings that pywave runs on kernels build their LLVM type converter with
the default options: ``index`` is i64 and a memref descriptor holds i64 offset, sizes and
strides, whatever the kernel's index width; neither has an ``index-bitwidth`` option or reads
a data layout:

- ``convert-nvgpu-to-nvvm`` (TMA, mbarriers, ``cp.async``, ``ldmatrix``, warpgroup MMA), which
  runs on the whole module before kernels are outlined, as in upstream's
  ``gpu-lower-to-nvvm-pipeline``;
- ``convert-vector-to-llvm``, which pywave runs in the kernels before ``convert-gpu-to-nvvm``
  for the vector ops the latter does not lower (transfers, transposes).

Where such a lowering meets a value it does not produce, an ``index`` (or a vector of them)
or a memref, it leaves a ``builtin.unrealized_conversion_cast`` to i64 or to the 64-bit
descriptor, and where it produces an ``index`` for other ops, a cast from i64.
``convert-gpu-to-nvvm{index-bitwidth=32}`` then gives the other side i32 or a 32-bit descriptor,
and the casts meet across widths, which ``reconcile-unrealized-casts`` cannot fold: "LLVM
Translation failed for operation: builtin.unrealized_conversion_cast" (upstream's own
``gpu-lower-to-nvvm-pipeline{index-bitwidth=32}`` fails the same way on nvgpu kernels, e.g.
the TMA load of mlir/test/Integration/GPU/CUDA/sm90/transform-dialect).

:func:`widen_index_casts` replaces those casts, between the 64-bit lowerings and the kernel
lowering, by what they mean at the kernel's width: between ``index`` and i64 (scalars or
vectors) by ``arith.index_cast``, MLIR's conversion (sign extension to i64, truncation from
it), and from a memref to the 64-bit descriptor by a cast to the kernel's descriptor followed
by its widening field by field (pointers as they are, offset, sizes and strides
sign-extended; a memref of ``index`` elements is a CompileError: those lowerings would
address its elements as 8 bytes wide, the kernel's memref ops as 4); a cast back to the
original type is folded first, as ``reconcile-unrealized-casts`` would. The 64-bit lowerings
then compute with the values the program holds. No op of those dialects produces a memref,
so no descriptor is narrowed. Kernels at 64-bit index are left as they are.
"""

from __future__ import annotations

from mlir import ir
from mlir.dialects import arith, llvm

from ...errors import CompileError
from ...mlirutil import file_location, gpu_modules

CAST = "builtin.unrealized_conversion_cast"

#: What pywave runs on the kernels before :func:`widen_index_casts` at 32-bit index: the
#: first step of :func:`pywave.lowering.nvvm_pipeline` that lowers with a 64-bit index
#: (nvgpu is lowered in the prepare stage). Running it again there finds nothing left.
VECTOR_PIPELINE = "builtin.module(gpu.module(convert-vector-to-llvm))"


def widen_index_casts(module: ir.Module, index_bitwidth: int) -> int:
    """Rewrite the casts between ``index`` values or memrefs and the 64-bit lowerings' types
    inside every ``gpu.module`` of ``module`` whose kernels use ``index_bitwidth``-bit
    ``index`` (nothing at 64). Run after nvgpu and the vector ops are lowered and before
    ``convert-gpu-to-nvvm``. Returns the number of casts rewritten."""
    if index_bitwidth == 64:
        return 0
    ctx = module.context
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
        if _index_pair(source.type, target, i64) or _index_pair(target, source.type, i64):
            scalars.append(op)
        elif isinstance(source.type, ir.MemRefType):
            kernel_type = _descriptor_at(target, ir.MemRefType(source.type).rank, i64, narrow)
            if kernel_type is not None:
                descriptors.append((op, kernel_type))
        return ir.WalkResult.ADVANCE

    with ctx, ir.Location.unknown(ctx):
        for gmod in gpu_modules(module):
            gmod.walk(visit)
        for op, _ in descriptors:
            _check_elements(op, ir.MemRefType(op.operands[0].type), index_bitwidth)
        for op in scalars:
            _fold_round_trips(op)
            with ir.InsertionPoint(op), op.location:
                new = arith.IndexCastOp(op.results[0].type, op.operands[0])
            op.results[0].replace_all_uses_with(new.result)
            op.erase()
        for op, kernel_type in descriptors:
            _fold_round_trips(op)
            _widen_descriptor(op, kernel_type, narrow, i64)
    return len(scalars) + len(descriptors)


def _check_elements(op: ir.Operation, memref: ir.MemRefType, index_bitwidth: int) -> None:
    """CompileError for a memref of ``index`` elements reaching a 64-bit lowering: it would
    address them as 8-byte elements, where the kernel's own memref ops use
    ``index_bitwidth``-bit ones (one memref, two layouts)."""
    element = memref.element_type
    if isinstance(element, ir.VectorType):
        element = ir.VectorType(element).element_type
    if not isinstance(element, ir.IndexType):
        return
    loc = file_location(op.location)
    where = f" at line {loc[0]}, column {loc[1]}" if loc else ""
    raise CompileError(
        f"an nvgpu or vector op{where} accesses the memref type {memref} with "
        f"index_bitwidth={index_bitwidth}: MLIR's nvgpu and vector lowerings address index "
        f"elements as 64-bit integers, the kernel's memref ops as {index_bitwidth}-bit ones; "
        f"use a memref of i{index_bitwidth} or i64 elements, or index_bitwidth=64",
        line=loc[0] if loc else None, column=loc[1] if loc else None)


def _index_pair(index_side: ir.Type, int_side: ir.Type, i64: ir.Type) -> bool:
    """Whether ``index_side`` is ``index`` and ``int_side`` i64, or both vectors of the same
    shape of them."""
    if isinstance(index_side, ir.VectorType) and isinstance(int_side, ir.VectorType):
        a, b = ir.VectorType(index_side), ir.VectorType(int_side)
        if a.shape != b.shape or a.scalable_dims != b.scalable_dims:
            return False
        index_side, int_side = a.element_type, b.element_type
    return isinstance(index_side, ir.IndexType) and int_side == i64


def _fold_round_trips(op: ir.Operation) -> None:
    """Give the users of the cast ``op`` that cast its result back to its operand's type that
    operand (what ``reconcile-unrealized-casts`` would do; after ``op`` is rewritten, it no
    longer could)."""
    source = op.operands[0]
    backs = []
    for use in op.results[0].uses:
        user = use.owner
        user = user.operation if hasattr(user, "operation") else user
        if user.name == CAST and len(user.operands) == 1 and len(user.results) == 1 and \
                user.results[0].type == source.type and user not in backs:
            backs.append(user)
    for back in backs:
        back.results[0].replace_all_uses_with(source)
        back.erase()


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
    if not isinstance(t, llvm.StructType) or t.name is not None or t.opaque:
        return None
    body = list(t.body)
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
    pointers = llvm.StructType(kernel_type).body[:2]
    rank = ir.MemRefType(op.operands[0].type).rank
    positions = [[0], [1], [2]] + [[field, i] for field in (3, 4) for i in range(rank)]
    with ir.InsertionPoint(op), op.location:
        cast = ir.Operation.create(CAST, results=[kernel_type], operands=[op.operands[0]])
        value = llvm.PoisonOp(wide_type).result
        for position in positions:
            pointer = position[0] < 2
            field = llvm.ExtractValueOp(pointers[position[0]] if pointer else narrow,
                                        cast.results[0], position).result
            if not pointer:
                field = llvm.SExtOp(wide, field).result
            value = llvm.InsertValueOp(value, field, position).result
    op.results[0].replace_all_uses_with(value)
    op.erase()
