"""``gpu.subgroup_mma_elementwise`` kinds that MLIR 22's NVVM lowering does not handle.

``convert-gpu-to-nvvm`` (MLIR 22.1, WmmaOpsToNvvm.cpp) lowers the elementwise op on WMMA
fragments for ``addf``, ``mulf``, ``divf``, ``maxf`` and ``minf`` only; every other kind of the
op's enum (``subf``, ``negatef``, ``addi``, ``subi``, ``muli``, ``divs``, ``divu``,
``negates``) hits an ``llvm_unreachable`` and aborts the compiler. ``convert-vector-to-gpu``
emits ``subf`` and ``negatef`` for ``arith.subf``/``arith.negf`` on a matmul result (MLIR's
own ``wmma-matmul-f16-elementwise`` integration test).

:func:`lower_elementwise` lowers those kinds before the NVVM lowering, the way upstream
lowers the kinds it knows: a fragment is an LLVM struct (the registers one lane holds), and
the op applies the scalar (or 2-element vector) LLVM op member by member. The struct type of
each fragment type is taken from the NVVM lowering itself (a probe module), so it always
matches; ``unrealized_conversion_cast`` joins the two sides and ``reconcile-unrealized-casts``
removes the casts. ``extf`` changes the fragment's element type and register layout: it
stays a CompileError naming the op.
"""

from __future__ import annotations

from mlir import ir
from mlir.dialects import llvm

from ...errors import CompileError
from ...mlirutil import find_ops, gpu_modules, run_pipeline

#: Kinds MLIR 22's convert-gpu-to-nvvm lowers itself.
UPSTREAM_KINDS = frozenset({"addf", "mulf", "divf", "maxf", "minf"})

_OVERFLOW_NONE = "#llvm.overflow<none>"


def _kind(op: ir.Operation) -> str:
    text = str(op.attributes["opType"])              # "#gpu<mma_element_wise subf>"
    return text.rstrip(">").split()[-1]


def lower_elementwise(module: ir.Module) -> int:
    """Lower every ``gpu.subgroup_mma_elementwise`` of a kind upstream's NVVM lowering lacks
    (see the module docstring); returns how many. CompileError (with the op's location) for
    ``extf``, which has no member-by-member form."""
    found = [op for gmod in gpu_modules(module) for op in find_ops(
        gmod, lambda op: op.name == "gpu.subgroup_mma_elementwise"
        and _kind(op) not in UPSTREAM_KINDS)]
    structs: dict[str, ir.Type] = {}
    for op in found:
        kind = _kind(op)
        if kind not in _SCALAR:
            raise CompileError(
                f"{op.location}: gpu.subgroup_mma_elementwise {kind} cannot be lowered to "
                f"NVVM (MLIR 22 lowers {', '.join(sorted(UPSTREAM_KINDS))}; pywave adds "
                f"{', '.join(sorted(_SCALAR))})")
        _lower_one(op, kind, structs)
    return len(found)


def _struct_type(mma: ir.Type, cache: dict[str, ir.Type]) -> ir.Type:
    """The LLVM struct the NVVM lowering gives a ``!gpu.mma_matrix`` type (the result of the
    ``nvvm.wmma.load`` a probe kernel's ``gpu.subgroup_mma_load_matrix`` of it lowers to)."""
    key = str(mma)
    if key in cache:
        return cache[key]
    element = key.split("<", 1)[1].split(",")[0].split("x")[-1]   # <16x16xf16, "COp">
    text = (f"gpu.module @probe {{ gpu.func @f(%buf: memref<16x16x{element}>) kernel {{\n"
            f"  %c0 = arith.constant 0 : index\n"
            f"  %m = gpu.subgroup_mma_load_matrix %buf[%c0, %c0] {{leadDimension = 16 : index}}"
            f" : memref<16x16x{element}> -> {key}\n"
            f"  gpu.subgroup_mma_store_matrix %m, %buf[%c0, %c0] {{leadDimension = 16 : index}}"
            f" : {key}, memref<16x16x{element}>\n"
            f"  gpu.return }} }}")
    probe = ir.Module.parse(text, mma.context)
    run_pipeline(probe, "builtin.module(gpu.module(convert-gpu-to-nvvm))",
                 f"finding the NVVM form of {key}")
    types: list[ir.Type] = []

    def visit(op: ir.Operation) -> ir.WalkResult:
        if op.name == "nvvm.wmma.load":
            types.append(op.results[0].type)
        return ir.WalkResult.ADVANCE

    probe.operation.walk(visit)
    if not types:
        raise CompileError(f"the NVVM lowering gives {key} no LLVM struct type")
    cache[key] = types[-1]
    return types[-1]


def _lower_one(op: ir.Operation, kind: str, cache: dict[str, ir.Type]) -> None:
    result_type = op.results[0].type
    struct = _struct_type(result_type, cache)
    members = llvm.StructType(struct).body
    with ir.InsertionPoint(op), op.location:
        operands = [ir.Operation.create(
            "builtin.unrealized_conversion_cast", results=[_struct_type(v.type, cache)],
            operands=[v]).results[0] for v in op.operands]
        acc = llvm.UndefOp(struct).result
        for i, member in enumerate(members):
            position = ir.DenseI64ArrayAttr.get([i])
            parts = [llvm.ExtractValueOp(member, v, position).result for v in operands]
            value = _SCALAR[kind](member, parts)
            acc = llvm.InsertValueOp(acc, value, position).result
        back = ir.Operation.create("builtin.unrealized_conversion_cast",
                                   results=[result_type], operands=[acc])
    op.results[0].replace_all_uses_with(back.results[0])
    op.erase()


def _neg_int(t: ir.Type, parts: list[ir.Value]) -> ir.Value:
    zero = llvm.ZeroOp(t).result
    return llvm.SubOp(zero, parts[0], ir.Attribute.parse(_OVERFLOW_NONE)).result


def _int(cls):
    return lambda t, p: cls(p[0], p[1], ir.Attribute.parse(_OVERFLOW_NONE)).result


#: Kind -> the LLVM op on one member (its type, the operands' members); the semantics of
#: the arith op each kind stands for (arith.subf, arith.negf, arith.addi, ...).
_SCALAR = {
    "subf": lambda t, p: llvm.FSubOp(p[0], p[1]).result,
    "negatef": lambda t, p: llvm.FNegOp(p[0]).result,
    "addi": _int(llvm.AddOp),
    "subi": _int(llvm.SubOp),
    "muli": _int(llvm.MulOp),
    "divs": lambda t, p: llvm.SDivOp(p[0], p[1]).result,
    "divu": lambda t, p: llvm.UDivOp(p[0], p[1]).result,
    "negates": _neg_int,
}
