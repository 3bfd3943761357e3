"""Subgroup ops for NVVM: id queries, subgroup size, and reductions as redux.sync or shuffles.

Kernel rewrites before the NVVM lowering: the id queries upstream lacks
(:mod:`pywave.kernels.rewrites.gpu_ids`), ``gpu.subgroup_size`` as the warp size, and
``gpu.subgroup_reduce`` as ``redux.sync`` or a butterfly of ``gpu.shuffle xor`` steps.

MLIR 22's ``convert-gpu-to-nvvm`` has no lowering of ``gpu.subgroup_size`` without an
``upper_bound``; on NVIDIA GPUs it is the warp size, 32 (CUDA C++ Programming Guide, "SIMT
Architecture"), so it becomes that constant.

MLIR 22's ``convert-gpu-to-nvvm`` lowers subgroup reductions only when run with
``has-redux``, and then only ``add``, ``minsi``, ``maxsi``, ``and``, ``or``, ``xor`` (not the
unsigned ``minui``/``maxui``, which ``redux.sync`` also computes). So every reduction is
rewritten here, per ``gpu.module`` and its chip:

- ``uniform``, no ``cluster``, i32, kind ``add``, ``and``, ``or``, ``xor``, ``minsi``,
  ``minui``, ``maxsi`` or ``maxui``, on sm_80 and newer: one ``nvvm.redux.sync`` over the
  whole warp (``redux.sync`` needs sm_80);
- every other form (non-uniform, floating point, ``mul``, clustered, strided clusters, any
  form before sm_80): with
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
from mlir.dialects import arith, gpu, nvvm

from . import gpu_ids
from ...errors import CompileError
from ...mlirutil import find_ops, gpu_modules
from ..targets import module_target

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


#: Kinds of ``gpu.subgroup_reduce`` that ``redux.sync`` computes on 32-bit integers, and the
#: ``nvvm.redux.sync`` kind of each (``min``/``max`` are signed, ``umin``/``umax`` unsigned).
_REDUX = {"add": nvvm.ReduxKind.ADD, "and": nvvm.ReduxKind.AND, "or": nvvm.ReduxKind.OR,
          "xor": nvvm.ReduxKind.XOR, "minsi": nvvm.ReduxKind.MIN, "minui": nvvm.ReduxKind.UMIN,
          "maxsi": nvvm.ReduxKind.MAX, "maxui": nvvm.ReduxKind.UMAX}
REDUX_KINDS = frozenset(_REDUX)

#: The first NVIDIA architecture with ``redux.sync`` (PTX ISA: "requires sm_80 or higher").
REDUX_MIN_ARCH = 80


def lower_subgroup_ops(module: ir.Module) -> int:
    """Rewrite, inside each NVVM ``gpu.module``, the id queries upstream does not lower
    (:mod:`pywave.kernels.rewrites.gpu_ids`), ``gpu.subgroup_size`` and the 32-bit scalar
    ``gpu.subgroup_reduce`` ops: as one ``redux.sync`` where the form allows it
    (:func:`lowers_to_redux`) and the module's chip has it (:func:`has_redux`), else as
    shuffles. Every ``gpu.module`` must have its target
    (:func:`pywave.kernels.targets.assign_targets`). Returns how many ops were rewritten.
    CompileError for a reduction kind that does not apply to the type."""
    count = 0
    for gmod in gpu_modules(module):
        target = module_target(gmod)
        if target is None or target.backend != "nvvm":
            continue
        count += gpu_ids.lower_id_queries(gmod, "nvvm")
        redux = has_redux(target.chip)
        found = find_ops(gmod, lambda op: op.name in ("gpu.subgroup_reduce",
                                                      "gpu.subgroup_size"))
        with module.context:
            for op in found:
                count += _redux(op) if redux and lowers_to_redux(op) else _rewrite(op)
    return count


def has_redux(chip: str) -> bool:
    """Whether the NVIDIA ``chip`` (``"sm_90a"``) has ``redux.sync`` (sm_80 and newer)."""
    digits = "".join(c for c in chip.removeprefix("sm_") if c.isdigit())
    return bool(digits) and int(digits) >= REDUX_MIN_ARCH


def lowers_to_redux(op: ir.Operation) -> bool:
    """Whether this ``gpu.subgroup_reduce`` is one ``redux.sync``: ``uniform``, no cluster, an
    i32 value and a kind of :data:`REDUX_KINDS`."""
    if op.name != "gpu.subgroup_reduce":
        return False
    value_type = op.operands[0].type
    return ("uniform" in op.attributes and "cluster_size" not in op.attributes
            and isinstance(value_type, ir.IntegerType)
            and ir.IntegerType(value_type).width == 32 and _kind(op) in REDUX_KINDS)


def _redux(op: ir.Operation) -> bool:
    """``gpu.subgroup_reduce`` as ``nvvm.redux.sync`` over the whole warp (member mask -1, as
    upstream's lowering; ``uniform`` promises that every lane of the subgroup reaches it)."""
    i32 = ir.IntegerType.get_signless(32)
    with ir.InsertionPoint(op), op.location:
        mask = arith.ConstantOp(i32, -1).result
        result = nvvm.ReduxOp(i32, op.operands[0], _REDUX[_kind(op)], mask).result
    op.results[0].replace_all_uses_with(result)
    op.erase()
    return True


def _kind(op: ir.Operation) -> str:
    """The reduction kind of a ``gpu.subgroup_reduce`` (``#gpu<all_reduce_op add>``: add)."""
    return str(op.attributes["op"]).split()[-1].rstrip(">")


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
    kind = _kind(op)
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
