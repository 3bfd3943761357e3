"""Checked mode of the CPU target: kernels instrumented for bounds, barriers and races.

``checks=True`` or ``$PYWAVE_CHECKS=1``: the kernels of a ``gpu.module`` instrumented before
:mod:`pywave.kernels.cpu` lowers them.

1. MLIR's own ``generate-runtime-verification`` (:data:`VERIFY_PIPELINE`) adds a
   ``cf.assert`` before every op that implements ``RuntimeVerifiableOpInterface``: for the
   memref dialect (MLIR 22.1) ``memref.load``/``store`` (each index within its dimension),
   ``subview``, ``reinterpret_cast``, ``cast``, ``expand_shape``, ``collapse_shape``,
   ``dim``, ``copy``, ``atomic_rmw``, ``generic_atomic_rmw``, ``assume_alignment`` and the
   arith, tensor and linalg ops it knows.
2. Each ``cf.assert`` the verification added (the kernel's own stay asserts, reported as
   on CUDA: :mod:`pywave.kernels.cpu`) becomes ``scf.if`` (condition false) calling the image's
   ``__wavert_cpu_fault(what, where, rank, i0..i3, s0..s3)`` (libwavert records the first
   failure and stops the block: the thread is never resumed). Before a ``memref.load`` or
   ``memref.store`` the call carries the index values and the memref's sizes (ranks up to
   4): "memref.load out of bounds of memref<4x8xf32>: index [5, 1] is outside the sizes
   [4, 8]"; other asserts carry upstream's own message (the op and what failed). ``where`` is
   the op's line and column and its line of the source text.
3. Every ``memref.load``/``memref.store`` of workgroup memory (``#gpu.address_space<
   workgroup>`` or memory space 3) first calls ``__wavert_cpu_access(address, write, what,
   where, rank, i0..i3)`` with the element's address: libwavert keeps, per element, its last
   writer and its readers since the block's last barrier and reports the first conflicting
   pair (write/write, read-after-write, write-after-read by two threads) as a data race.
   Vector loads and stores and atomics of workgroup memory are not race-checked.
4. :func:`barrier_site`: a checked ``gpu.barrier`` passes its line to libwavert, which then
   requires every thread of the block to reach the same ``gpu.barrier`` (a thread that
   returns while others wait, or threads waiting at different barriers, are errors naming
   both threads and the barriers' lines).
"""

from __future__ import annotations

import logging

from mlir import ir, passmanager
from mlir.dialects import arith, func, memref, scf
from mlir.dialects import llvm as mlir_llvm

from ..mlirutil import diagnostic_error, file_location, find_ops, next_op

log = logging.getLogger("pywave.kernels.checks")

#: MLIR's runtime verification, anchored on the ``gpu.module``.
VERIFY_PIPELINE = "gpu.module(generate-runtime-verification)"
#: The image's check functions (defined by :func:`pywave.kernels.cpu.abi_ir`).
FAULT = "__wavert_cpu_fault"
ACCESS = "__wavert_cpu_access"
#: Marks the kernel's own ``cf.assert``s while the verification adds its own: those stay
#: asserts (libwavert's ``__assertfail``, CUDA's line on stderr), these become faults.
USER_ASSERT = "pywave.user_assert"
#: Index values a message shows (memrefs of higher rank are reported without them).
MAX_RANK = 4


class _Sites:
    """The check sites' strings as private ``llvm.mlir.global`` constants of the module."""

    def __init__(self, gmod: ir.Operation, text: str | None) -> None:
        self.body = gmod.regions[0].blocks[0]
        self.lines = text.splitlines() if text else []
        self.symbols: dict[str, str] = {}
        self.declared: set[str] = set()

    def where(self, op: ir.Operation) -> str:
        """"line L, column C: <the source line>" for ``op`` (its location's text if none)."""
        loc = file_location(op.location)
        if loc is None:
            return str(op.location)
        line, column = loc
        source = self.lines[line - 1].strip() if 0 < line <= len(self.lines) else ""
        return f"line {line}, column {column}" + (f": {source}" if source else "")

    def pointer(self, value: str) -> ir.Value:
        """An ``!llvm.ptr`` to the NUL-terminated ``value`` (at the insertion point)."""
        symbol = self.symbols.get(value)
        if symbol is None:
            symbol = f"__wavert_cpu_site_{len(self.symbols)}"
            self.symbols[value] = symbol
            data = value.encode() + b"\0"
            escaped = "".join(chr(b) if 32 <= b < 127 and chr(b) not in '"\\' else f"\\{b:02X}"
                              for b in data)
            op = ir.Operation.parse(
                f'llvm.mlir.global internal constant @{symbol}("{escaped}") '
                "{addr_space = 0 : i32}")
            ir.InsertionPoint.at_block_begin(self.body).insert(op)
        return mlir_llvm.AddressOfOp(ir.Type.parse("!llvm.ptr"), symbol).result

    def declare(self, symbol: str, inputs: list[ir.Type]) -> None:
        if symbol in self.declared:
            return
        self.declared.add(symbol)
        with ir.InsertionPoint.at_block_begin(self.body):
            f = func.FuncOp(symbol, ir.FunctionType.get(inputs, []))
            f.sym_visibility = ir.StringAttr.get("private")


def instrument(gmod: ir.Operation, name: str, text: str | None) -> "_Sites":
    """Steps 1-3 of the module docstring on ``gpu.module`` ``gmod`` (named ``name``, from the
    source ``text``). Returns the site table :func:`barrier_site` adds to. CompileError when
    the runtime verification fails."""
    with gmod.context:   # the kernel's own asserts keep CUDA's behaviour (cpu.py)
        for op in find_ops(gmod, lambda o: o.name == "cf.assert"):
            op.attributes[USER_ASSERT] = ir.UnitAttr.get()
    try:
        passmanager.PassManager.parse(VERIFY_PIPELINE, gmod.context).run(gmod)
    except ir.MLIRError as exc:
        raise diagnostic_error(f"runtime verification of gpu.module @{name}", exc,
                               text) from None
    sites = _Sites(gmod, text)
    with gmod.context, gmod.location:
        for op in find_ops(gmod, lambda o: o.name == "cf.assert"):
            if USER_ASSERT in op.attributes:
                del op.attributes[USER_ASSERT]
                continue
            _fault(op, sites)       # first: each assert is right before the op it guards
        for op in find_ops(gmod, lambda o: o.name in ("memref.load", "memref.store")):
            target = op.operands[0 if op.name == "memref.load" else 1]
            if _is_workgroup(target.type):
                _access(op, target, sites)
    return sites


def barrier_site(sites: "_Sites", op: ir.Operation) -> ir.Value:
    """The site string of a ``gpu.barrier`` (step 4), at the insertion point."""
    return sites.pointer(sites.where(op))


def _is_workgroup(ty: ir.Type) -> bool:
    if not isinstance(ty, ir.MemRefType):
        return False
    space = ir.MemRefType(ty).memory_space
    return space is not None and str(space) in ("#gpu.address_space<workgroup>", "3", "3 : i64",
                                                "3 : i32")


def _element_bytes(ty: ir.Type) -> int | None:
    if isinstance(ty, ir.IndexType):
        return 8
    if isinstance(ty, (ir.IntegerType, ir.FloatType)):
        width = ir.IntegerType(ty).width if isinstance(ty, ir.IntegerType) \
            else ir.FloatType(ty).width
        return max(1, (width + 7) // 8)
    if isinstance(ty, ir.VectorType):
        inner = _element_bytes(ir.VectorType(ty).element_type)
        count = 1
        for d in ir.VectorType(ty).shape:
            count *= d
        return inner * count if inner else None
    return None


def _i64(value: ir.Value) -> ir.Value:
    return arith.IndexCastOp(ir.IntegerType.get_signless(64), value).result


def _indices(op: ir.Operation) -> list[ir.Value]:
    return list(op.operands)[1 if op.name == "memref.load" else 2:]


def _padded(values: list[ir.Value]) -> list[ir.Value]:
    """``values`` as i64, padded with zeros (or all zeros past :data:`MAX_RANK`)."""
    i64 = ir.IntegerType.get_signless(64)
    zero = arith.ConstantOp(i64, 0).result
    shown = [_i64(v) for v in values] if len(values) <= MAX_RANK else []
    return shown + [zero] * (MAX_RANK - len(shown))


def _access(op: ir.Operation, target: ir.Value, sites: _Sites) -> None:
    """Step 3: the race check's call before a workgroup-memory load or store."""
    ty = ir.MemRefType(target.type)
    size = _element_bytes(ty.element_type)
    if size is None:
        return
    i64, ptr = ir.IntegerType.get_signless(64), ir.Type.parse("!llvm.ptr")
    sites.declare(ACCESS, [i64, i64, ptr, ptr, i64] + [i64] * MAX_RANK)
    indices = _indices(op)
    with ir.InsertionPoint(op), op.location:
        index = ir.IndexType.get()
        meta = memref.ExtractStridedMetadataOp(target)
        results = list(meta.results)
        offset, strides = results[1], results[2 + ty.rank:]
        linear = offset
        for k, idx in enumerate(indices):
            linear = arith.AddIOp(linear, arith.MulIOp(idx, strides[k]).result).result
        base = memref.ExtractAlignedPointerAsIndexOp(target).result
        address = arith.AddIOp(base, arith.MulIOp(
            linear, arith.ConstantOp(index, size).result).result).result
        write = arith.ConstantOp(i64, int(op.name == "memref.store")).result
        what = sites.pointer(f"{op.name} of {target.type}")
        where = sites.pointer(sites.where(op))
        rank = arith.ConstantOp(i64, len(indices)).result
        func.CallOp([], ACCESS, [_i64(address), write, what, where, rank, *_padded(indices)])


def _fault(op: ir.Operation, sites: _Sites) -> None:
    """Step 2: ``cf.assert`` into a call of the fault function when its condition is false."""
    i64, ptr = ir.IntegerType.get_signless(64), ir.Type.parse("!llvm.ptr")
    sites.declare(FAULT, [ptr, ptr, i64] + [i64] * (2 * MAX_RANK))
    message = ir.StringAttr(op.attributes["msg"]).value
    lines = message.split("\n")
    optext = lines[1].strip() if len(lines) > 1 else ""
    reason = next((ln[1:].strip() for ln in lines if ln.startswith("^")), message.strip())
    checked = next_op(op)
    with ir.InsertionPoint(op), op.location:
        true = arith.ConstantOp(ir.IntegerType.get_signless(1), 1).result
        failed = arith.XOrIOp(op.operands[0], true).result
        branch = scf.IfOp(failed)
        with ir.InsertionPoint(branch.then_block):
            where = sites.pointer(sites.where(op))
            if checked is not None and checked.name in ("memref.load", "memref.store") and \
                    reason == "out-of-bounds access":
                target = checked.operands[0 if checked.name == "memref.load" else 1]
                indices = _indices(checked)
                what = sites.pointer(f"{checked.name} out of bounds of {target.type}")
                index = ir.IndexType.get()
                sizes = [memref.DimOp(target, arith.ConstantOp(index, k).result).result
                         for k in range(len(indices))]
                rank = len(indices) if len(indices) <= MAX_RANK else 0
                args = [what, where, arith.ConstantOp(i64, rank).result,
                        *_padded(indices), *_padded(sizes)]
            else:
                what = sites.pointer(f"{reason}: {optext}" if optext else reason)
                zero = arith.ConstantOp(i64, 0).result
                args = [what, where, zero] + [zero] * (2 * MAX_RANK)
            func.CallOp([], FAULT, args)
            scf.YieldOp([])
    op.erase()


