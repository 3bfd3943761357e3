"""Stage prepare: bool memrefs widened, nvgpu lowered, kernels outlined, structured ops lowered.

Stage ``prepare``: what every module gets before its signatures are read and its kernels
lowered: ``memref<...xi1>`` widened to bytes, nvgpu ops lowered, ``gpu.launch`` bodies
outlined into kernels, the structured dialects lowered, and the checks that must see the
outlined kernels (:func:`pywave.frontend.validate.prepared`)."""

from __future__ import annotations

from typing import Callable

from mlir import ir
from mlir.dialects import arith

from . import cpu_lowering, dense, gpu_use, validate
from ..errors import CompileError
from ..mlirutil import file_location, find_ops, gpu_modules, kernels_of, run_pipeline, sym_name

#: Run on the whole module first: lower nvgpu ops (before outlining, as upstream's
#: ``gpu-lower-to-nvvm-pipeline`` does: a TMA descriptor made on the host then reaches the
#: outlined kernel as an ``!llvm.ptr``, not as an ``!nvgpu.tensormap.descriptor`` argument no
#: kernel lowering converts; ``nvgpu.tma.create.descriptor`` becomes a call of libwavert's
#: ``mgpuTensorMapEncodeTiledMemref``), outline ``gpu.launch`` bodies into ``gpu.func``
#: kernels and lower the structured dialects both host and kernels may use. No
#: ``arith-expand``: its select-based expansion of ``arith.maximumf``/``minimumf`` returns
#: -0.0 for ``maximumf(+0.0, -0.0)`` where the op's documentation orders -0.0 below +0.0; the
#: LLVM lowerings (``convert-gpu-to-nvvm``, ``convert-to-llvm``) lower every arith op
#: themselves (``ceildivsi``/``floordivsi``/``ceildivui`` included) and min/max to LLVM's IEEE
#: intrinsics.
_HEAD = ("canonicalize, convert-nvgpu-to-nvvm, gpu-kernel-outlining, convert-vector-to-scf, "
         "expand-strided-metadata, lower-affine")
_TAIL = "convert-scf-to-cf"
PREPARE_PIPELINE = f"builtin.module({_HEAD}, {_TAIL})"

#: The same for the CPU target, whose kernels keep scf's structured control flow until their
#: own lowering (:mod:`pywave.kernels.cpu_split` cuts them at their barriers into thread
#: loops; ``pywave.kernels.cpu.CPU_PIPELINE`` lowers scf to cf then): scf-to-cf on the host
#: functions alone.
_CPU_TAIL = "func.func(convert-scf-to-cf), llvm.func(convert-scf-to-cf)"
CPU_PREPARE_PIPELINE = f"builtin.module({_HEAD}, {_CPU_TAIL})"


def prepare(module: ir.Module, text: str, *, device_arguments: bool,
            structured_kernels: bool = False,
            outlined: Callable[[ir.Module], object] | None = None
            ) -> tuple[set[tuple[str, int]], str | None]:
    """Run the stage on ``module`` (in place). ``device_arguments``: the public host
    functions' memref arguments hold GPU memory when the module uses the GPU (False for
    runner programs); in a host program (:func:`pywave.frontend.gpu_use.first_gpu_op` finds
    no GPU op) they hold host memory. ``structured_kernels`` (the CPU target): the kernels'
    scf ops are kept (:data:`CPU_PREPARE_PIPELINE`). ``outlined(module)``, when given, runs
    once the kernels are outlined, while kernels and host code still have their scf ops (the
    driver's block coarsening, :mod:`pywave.kernels.rewrites.coarsen`). Returns
    :func:`widen_bool_memrefs`'s pairs and the module's first GPU op (None: a host program);
    CompileError for what the later stages cannot take."""
    dense.empty_resources(module)
    validate.no_host_tensors(module)
    bool_args = widen_bool_memrefs(module)
    structured = cpu_lowering.steps(cpu_lowering.STRUCTURED_STEPS,
                                    cpu_lowering.host_ops(module))
    if structured:      # before PREPARE_PIPELINE's vector-to-scf and scf-to-cf (upstream's order)
        run_pipeline(module, f"builtin.module({', '.join(structured)})",
                     "lowering structured ops to loops", text)
    tail = _CPU_TAIL if structured_kernels else _TAIL
    if outlined is not None:
        run_pipeline(module, f"builtin.module({_HEAD})", "preparing the module", text)
        outlined(module)
        run_pipeline(module, f"builtin.module({tail})", "preparing the module", text)
    else:
        run_pipeline(module, f"builtin.module({_HEAD}, {tail})", "preparing the module", text)
    check_kernels(module)
    gpu_op = gpu_use.first_gpu_op(module)
    validate.prepared(module, device_arguments=device_arguments and gpu_op is not None,
                      structured_kernels=structured_kernels)
    return bool_args, gpu_op


def widen_bool_memrefs(module: ir.Module) -> set[tuple[str, int]]:
    """Give ``memref<...xi1>`` values i8 elements (DLPack bools are 8-bit, and MLIR 22's memref
    lowering cannot address sub-byte elements): loads (``memref.load``, ``affine.load``) gain
    an ``arith.trunci`` to i1, stores an ``arith.extui`` from i1; a ``memref.global`` of i1
    gets i8 elements and its initializer as bytes
    (:func:`pywave.frontend.dense.widen_bool_global`); a vector access of i1 elements is a CompileError. Applies to kernels and host code alike.
    Returns the (host function or ``"module::kernel"``, argument index) pairs that were
    ``memref<...xi1>``, which still take bool tensors, and (host function, -1 - result index)
    for such results (returned as bools)."""
    i1 = ir.IntegerType.get_signless(1, module.context)
    i8 = ir.IntegerType.get_signless(8, module.context)
    _refuse_unwidenable(module, i1)
    with module.context, ir.Location.unknown(module.context):
        for op in find_ops(module.operation, lambda op: op.name == "memref.global" and
                           _bools(ir.TypeAttr(op.attributes["type"]).value, i1)):
            dense.widen_bool_global(op, i8)
        bool_args = _retype_bool_memrefs(module, i1, i8)
        _narrow_accesses(module, i1, i8)
    return bool_args


def _retype_bool_memrefs(module: ir.Module, i1: ir.Type, i8: ir.Type) -> set[tuple[str, int]]:
    """Every ``memref<...xi1>`` block argument, result and function type as i8 elements;
    returns :func:`widen_bool_memrefs`'s pairs."""
    host_args: set[tuple[str, int]] = set()

    def widened(t: ir.Type) -> ir.Type | None:
        if isinstance(t, ir.MemRefType) and t.element_type == i1:
            return ir.MemRefType.get(t.shape, i8, t.layout, t.memory_space)
        return None

    def retype(op: ir.Operation) -> ir.WalkResult:
        for region in op.regions:
            for block in region.blocks:
                for arg in block.arguments:
                    if (new := widened(arg.type)) is not None:
                        arg.set_type(new)
        for result in op.results:
            if (new := widened(result.type)) is not None:
                result.set_type(new)
        if op.name in ("func.func", "gpu.func"):
            ftype = ir.FunctionType(ir.TypeAttr(op.attributes["function_type"]).value)
            inputs = [widened(t) or t for t in ftype.inputs]
            results = [widened(t) or t for t in ftype.results]
            fname = sym_name(op) if op.name == "func.func" else \
                f"{sym_name(op.parent)}::{sym_name(op)}"
            host_args.update((fname, i) for i, t in enumerate(ftype.inputs)
                             if widened(t) is not None)
            host_args.update((fname, -1 - i) for i, t in enumerate(ftype.results)
                             if widened(t) is not None)
            if inputs != list(ftype.inputs) or results != list(ftype.results):
                op.attributes["function_type"] = ir.TypeAttr.get(
                    ir.FunctionType.get(inputs, results))
        return ir.WalkResult.ADVANCE

    module.operation.walk(retype)
    return host_args


def _narrow_accesses(module: ir.Module, i1: ir.Type, i8: ir.Type) -> None:
    """Loads of the widened memrefs (``memref.load``, ``affine.load``: the same operand
    layout) gain an ``arith.trunci`` to i1, stores an ``arith.extui`` from i1."""
    accesses = find_ops(module.operation, lambda op: (
        op.name in ("memref.load", "affine.load") and op.results[0].type == i1) or (
        op.name in ("memref.store", "affine.store") and op.operands[0].type == i1))
    for op in accesses:
        if op.name.endswith(".load"):
            op.results[0].set_type(i8)
            with ir.InsertionPoint.after(op) if hasattr(ir.InsertionPoint, "after") \
                    else ir.InsertionPoint(op):
                narrow = arith.TruncIOp(i1, op.results[0])
            if not hasattr(ir.InsertionPoint, "after"):
                narrow.operation.move_after(op)
            op.results[0].replace_all_uses_except(narrow.result, narrow.operation)
        else:
            with ir.InsertionPoint(op):
                wide = arith.ExtUIOp(i8, op.operands[0])
            op.operands[0] = wide.result


def _bools(t: ir.Type, i1: ir.Type) -> bool:
    return isinstance(t, ir.MemRefType) and t.element_type == i1


def _refuse_unwidenable(module: ir.Module, i1: ir.Type) -> None:
    """CompileError for a vector access of i1 elements of a ``memref<...xi1>``: bool memrefs
    are narrowed at scalar loads and stores only."""
    def unwidenable(op: ir.Operation) -> bool:
        return any(_bools(v.type, i1) for v in op.operands) and any(
            isinstance(v.type, ir.VectorType) and v.type.element_type == i1
            for v in [*op.operands, *op.results])

    for op in find_ops(module.operation, unwidenable)[:1]:
        loc = file_location(op.location)
        where = f"line {loc[0]}, column {loc[1]}" if loc else "an unknown location"
        what = "reads or writes i1 elements of a memref<...xi1>"
        raise CompileError(
            f"{op.name} at {where} {what}: pywave keeps bool memrefs as bytes (DLPack bools are "
            "8-bit) and narrows their elements at memref.load/affine.load and "
            "memref.store/affine.store only; use those, or an i8 memref with arith.trunci / "
            "arith.extui")


def check_kernels(module: ir.Module) -> None:
    """Reject kernel signatures the launch path cannot pass (unranked memrefs) and memrefs of
    sub-byte elements, which MLIR 22's memref-to-LLVM lowering aborts on."""
    for gmod in gpu_modules(module):
        mod_name = sym_name(gmod)
        for kernel in kernels_of(gmod):
            name = sym_name(kernel)
            ftype = ir.FunctionType(ir.TypeAttr(kernel.attributes["function_type"]).value)
            for i, t in enumerate(ftype.inputs):
                where = f"kernel @{mod_name}::@{name} argument #{i}"
                if isinstance(t, ir.UnrankedMemRefType):
                    raise CompileError(
                        f"{where} has the unranked type {t}: unranked memrefs cannot be passed "
                        "to kernels; use a ranked memref")
                check_element_width(t, where)


def check_element_width(t: ir.Type, where: str) -> None:
    """CompileError for a memref whose integer elements are narrower than 8 bits."""
    if isinstance(t, ir.MemRefType) and isinstance(t.element_type, ir.IntegerType) and \
            ir.IntegerType(t.element_type).width < 8:
        raise CompileError(
            f"{where} has the type {t}: MLIR's memref lowering cannot load or store elements "
            "narrower than 8 bits; declare the memref with i8 elements (bool tensors are "
            "8-bit) and convert with arith.trunci / arith.extui")
