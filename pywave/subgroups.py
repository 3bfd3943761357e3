"""Kernel rewrites before the NVVM lowering: ``gpu.subgroup_size`` as the warp size, and
``gpu.subgroup_reduce`` as a butterfly of ``gpu.shuffle xor`` steps.

MLIR 22's ``convert-gpu-to-nvvm`` has no lowering of ``gpu.subgroup_size`` without an
``upper_bound``; on NVIDIA GPUs it is the warp size, 32 (CUDA C++ Programming Guide, "SIMT
Architecture"), so it becomes that constant.

MLIR 22's ``convert-gpu-to-nvvm`` lowers a subgroup reduction only in one form (``uniform``,
32-bit integer, whole warp, through ``redux.sync`` on sm_80 and newer). Every other form
(non-uniform, floating point, clustered, strided clusters) is rewritten here: with
``cluster(size = S, stride = T)`` (S defaults to the warp size 32, T to 1), step k exchanges
values with the lane ``lane ^ (T * 2^k)`` for ``T * 2^k < T * S`` and combines the two, so
after log2(S) steps every lane holds the reduction of its cluster. A cluster spanning more
than the warp (S * T > 32) is a CompileError: the op divides a subgroup into clusters. Like
upstream's shuffle lowering of this op, it assumes the lanes of a cluster are active together
(the shuffles name all 32 lanes), also without ``uniform``.

Scalars of 32 bits (i32, f32) are rewritten; other element types and vectors are left to
MLIR (which reports them as not legalisable).
"""

from __future__ import annotations

from mlir import ir
from mlir.dialects import arith, gpu

from .errors import CompileError

#: The warp size of NVIDIA GPUs (the default cluster size).
WARP_SIZE = 32

#: ``#gpu<all_reduce_op ...>`` kind -> (integer combiner, float combiner).
_COMBINE = {
    "add": (arith.AddIOp, arith.AddFOp),
    "mul": (arith.MulIOp, arith.MulFOp),
    "minui": (arith.MinUIOp, None), "minsi": (arith.MinSIOp, None),
    "maxui": (arith.MaxUIOp, None), "maxsi": (arith.MaxSIOp, None),
    "minnumf": (None, arith.MinNumFOp), "maxnumf": (None, arith.MaxNumFOp),
    "minimumf": (None, arith.MinimumFOp), "maximumf": (None, arith.MaximumFOp),
    "and": (arith.AndIOp, None), "or": (arith.OrIOp, None), "xor": (arith.XOrIOp, None),
}


def lower_subgroup_ops(module: ir.Module) -> int:
    """Rewrite ``gpu.subgroup_size`` and the 32-bit scalar ``gpu.subgroup_reduce`` ops inside
    ``gpu.module``s; returns how many were rewritten. CompileError for a reduction kind that
    does not apply to the type."""
    found: list[ir.Operation] = []

    def collect(op: ir.Operation) -> ir.WalkResult:
        if op.name in ("gpu.subgroup_reduce", "gpu.subgroup_size"):
            found.append(op)
        return ir.WalkResult.ADVANCE

    for top in module.body.operations:
        if top.operation.name == "gpu.module":
            top.operation.walk(collect)
    count = 0
    with module.context:
        for op in found:
            if _rewrite(op):
                count += 1
    return count


def _rewrite(op: ir.Operation) -> bool:
    if op.name == "gpu.subgroup_size":
        with ir.InsertionPoint(op), op.location:
            size = arith.ConstantOp(ir.IndexType.get(), WARP_SIZE).result
        op.results[0].replace_all_uses_with(size)
        op.erase()
        return True
    value = op.operands[0]
    vtype = value.type
    is_float = isinstance(vtype, ir.F32Type)
    if not (is_float or (isinstance(vtype, ir.IntegerType)
                         and ir.IntegerType(vtype).width == 32)):
        return False
    kind = str(op.attributes["op"]).split()[-1].rstrip(">")
    combiners = _COMBINE.get(kind)
    combine = combiners[1 if is_float else 0] if combiners else None
    if combine is None:
        raise CompileError(f"gpu.subgroup_reduce {kind} does not apply to {vtype}")
    size = ir.IntegerAttr(op.attributes["cluster_size"]).value \
        if "cluster_size" in op.attributes else WARP_SIZE
    stride = ir.IntegerAttr(op.attributes["cluster_stride"]).value \
        if "cluster_stride" in op.attributes else 1
    if size * stride > WARP_SIZE:
        raise CompileError(
            f"gpu.subgroup_reduce {kind} at {op.location}: cluster(size = {size}, stride = "
            f"{stride}) spans {size * stride} lanes, more than the {WARP_SIZE} lanes of an "
            "NVIDIA subgroup (a cluster lies within one subgroup)")
    i32 = ir.IntegerType.get_signless(32)
    with ir.InsertionPoint(op), op.location:
        width = arith.ConstantOp(i32, WARP_SIZE).result
        acc = value
        step = 1
        while step < size:
            offset = arith.ConstantOp(i32, stride * step).result
            other = gpu.ShuffleOp(acc, offset, width, gpu.ShuffleMode.XOR).shuffleResult
            acc = combine(acc, other).result
            step *= 2
    op.results[0].replace_all_uses_with(acc)
    op.erase()
    return True
