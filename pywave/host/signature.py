"""Stage signatures: the public host functions' arguments and results as Param records.

Stage ``signatures`` (:mod:`pywave.pipeline`): the public host ``func.func``s' arguments
as :class:`pywave.program.Param` records, read once after the prepare pipeline, while the
kernel bodies still exist.

Whether a memref argument may be written decides whether read-only tensors are refused. One
analysis serves kernels and host code: a memref is written unless every use only reads it
(loads, ``memref.dim``...), following view-like ops; in host code, passing it to a kernel
counts as the kernel's own verdict for that argument and a ``gpu.memcpy`` writes only its
destination.
"""

from __future__ import annotations

import dataclasses
import logging
import re
from typing import Callable

from mlir import ir

from .. import _native
from ..errors import CompileError
from ..frontend.prepare import check_element_width
from ..mlirutil import file_location, find_ops, sym_name
from ..program import (DTYPES, SIGNLESS, STRIDED, WAVE_CALLEES, WAVE_CONVENTION, WAVE_RUNTIME,
                       HostSignature, Param)

log = logging.getLogger("pywave.signature")

#: Scalar MLIR types accepted as host arguments: the kinds the call path packs.
SCALAR_KINDS = frozenset(_native.SCALAR_KINDS)

#: Memref element type (MLIR name) -> (DLPack code, bits, signless), from
#: :data:`pywave.program.DTYPES`; ``i1`` memrefs are widened to ``i8`` before signatures are
#: read (their Params then take kDLBool: :func:`as_bool`).
ELEMENT_DTYPES = {d.mlir: (d.code, d.bits, d.signless) for d in DTYPES.values() if d.mlir != "i1"}

# Ops through which a memref argument is only read; view-like ops are followed.
_READ_OPS = {"memref.load", "vector.load", "vector.transfer_read", "memref.dim",
             "vector.gather", "vector.maskedload", "vector.expandload", "memref.rank"}
_VIEW_OPS = {"memref.subview", "memref.cast", "memref.reinterpret_cast", "memref.view",
             "memref.collapse_shape", "memref.expand_shape", "memref.transpose"}
# Ops that take a memref's address as an integer: a write only where that integer can become
# a pointer again (:func:`_address_escapes`).
_ADDRESS_OPS = {"memref.extract_aligned_pointer_as_index"}
# Ops through which an address only stays a number: integer arithmetic and comparisons, whose
# i1 results a cf.assert may test.
_NUMBER_DIALECTS = ("arith.", "index.")


def read_signatures(module: ir.Module, text: str | None,
                    bool_args: set[tuple[str, int]] = frozenset(),
                    strict: bool = True) -> list[HostSignature]:
    """Signatures of the entry points: the public host ``func.func``s with a body. Call after
    the prepare pipeline and before the kernels are serialised (the write analysis reads the
    kernel bodies); ``bool_args`` lists the (function, index) of memrefs that were ``i1``
    before widening to i8 (index -1 - i for result i).

    A public function that Python cannot call (it takes an argument or returns a result of a
    type pywave does not pass) is skipped when another function calls it (it is a helper, as
    in MLIR's own test programs) or when ``strict`` is false (``pywave run``, which calls one
    entry by name); otherwise it is refused with CompileError. A module without entry points
    (kernels only) is valid."""
    text = source_lines(text)
    written = kernel_written_args(module)
    called = _called_functions(module)
    out = []
    for op in module.body.operations:
        op = op.operation
        if op.name not in ("func.func", "llvm.func") or not op.regions[0].blocks:
            continue
        if is_wave_function(op):
            out.append(_wave_signature(op, text, written))
            continue
        if op.name != "func.func":
            continue
        if "sym_visibility" in op.attributes and \
                ir.StringAttr(op.attributes["sym_visibility"]).value != "public":
            continue
        name = sym_name(op)
        try:
            out.append(_signature(op, name, text, written, bool_args))
        except CompileError as exc:
            if strict and name not in called:
                raise
            log.debug("@%s is not an entry point: %s", name, exc)
    return out


def is_wave_function(op: ir.Operation) -> bool:
    """Whether host function ``op`` (a ``func.func``, or an ``llvm.func`` Wave's own lowering
    left) is in Wave's host-wrapper convention: public, with a body, no results, at least one
    argument and every argument ``!llvm.ptr`` (the stream, then one per Python object), and a
    direct call of one of :data:`WAVE_RUNTIME` (a helper also by its C interface,
    ``_mlir_ciface_wave_get_buffer``...). Such functions are refused otherwise (pywave's
    own host arguments are memrefs and scalars), so recognising them changes no other
    function."""
    if not op.regions[0].blocks or (
            "sym_visibility" in op.attributes
            and ir.StringAttr(op.attributes["sym_visibility"]).value != "public"):
        return False
    linkage = str(op.attributes["linkage"]) if "linkage" in op.attributes else ""
    if "internal" in linkage or "private" in linkage:
        return False
    args = op.regions[0].blocks[0].arguments
    if not len(args) or any(str(a.type) != "!llvm.ptr" for a in args):
        return False
    if op.name == "func.func":
        if ir.FunctionType(ir.TypeAttr(op.attributes["function_type"]).value).results:
            return False
    elif not str(ir.TypeAttr(op.attributes["function_type"]).value).startswith(
            "!llvm.func<void "):
        return False
    found = False

    def visit(o: ir.Operation) -> ir.WalkResult:
        nonlocal found
        if o.name in ("func.call", "llvm.call") and "callee" in o.attributes and \
                ir.FlatSymbolRefAttr(o.attributes["callee"]).value in WAVE_CALLEES:
            found = True
            return ir.WalkResult.INTERRUPT
        return ir.WalkResult.ADVANCE

    op.walk(visit)
    return found


def _wave_signature(op: ir.Operation, text: "SourceLines | None",
                    written: dict[str, set[int]]) -> HostSignature:
    """The signature of a host function in Wave's convention: one ``object`` parameter per
    argument after the stream, with the element type the host code views its buffer as
    (:func:`_viewed_dtype`) when it states one, and whether its buffer may be written
    (:func:`_object_written`)."""
    args = list(op.regions[0].blocks[0].arguments)[1:]
    params = []
    for i, arg in enumerate(args):
        dtype, flags = _viewed_dtype(arg)
        params.append(Param(arg_name(arg, text) or f"arg{i + 1}", "object", "!llvm.ptr",
                            dtype=dtype, flags=flags, written=_object_written(arg, written)))
    return HostSignature(sym_name(op), tuple(params), (), WAVE_CONVENTION)


def _object_written(arg: ir.Value, kernels: dict[str, set[int]]) -> bool:
    """Whether the tensor passed as Wave object ``arg`` may be written: through the buffer of
    a ``wave_get_buffer(arg)`` call, followed as a host memref argument is (views, kernels'
    own verdicts); any other use that is not one of Wave's reading helpers counts as a write
    (the pre-lowered form, whose launches take plain pointers, always does)."""
    for use in arg.uses:
        owner = use.owner
        callee = ir.FlatSymbolRefAttr(owner.attributes["callee"]).value \
            if owner.name in ("func.call", "llvm.call") and "callee" in owner.attributes else ""
        if callee in ("wave_get_dim", "wave_get_int64", "wave_get_float64"):
            continue
        if callee == "wave_get_buffer" and owner.name == "func.call":
            if _memref_written(owner.results[0], kernels):
                return True
            continue
        return True
    return False


def _viewed_dtype(arg: ir.Value) -> tuple[tuple[int, int, int], int]:
    """The DLPack dtype (and SIGNLESS flag) that every ``memref.view`` of
    ``wave_get_buffer(arg)`` gives its elements, as Wave's host code states it; ``(0, 0, 0)``
    (not checked) when there is no such view, the views disagree, or the element type is not
    one pywave passes."""
    elements: set[str] = set()
    for use in arg.uses:
        call = use.owner
        if call.name != "func.call" or \
                ir.FlatSymbolRefAttr(call.attributes["callee"]).value != "wave_get_buffer":
            continue
        for view in call.results[0].uses:
            if view.owner.name != "memref.view":
                return (0, 0, 0), 0
            elements.add(str(ir.MemRefType(view.owner.results[0].type).element_type))
    if len(elements) != 1 or next(iter(elements)) not in ELEMENT_DTYPES:
        return (0, 0, 0), 0
    code, bits, signless = ELEMENT_DTYPES[elements.pop()]
    return (code, bits, 1), SIGNLESS if signless else 0


def _signature(op: ir.Operation, name: str, text: "SourceLines | None",
               written: dict[str, set[int]], bool_args: set[tuple[str, int]]) -> HostSignature:
    ftype = ir.FunctionType(ir.TypeAttr(op.attributes["function_type"]).value)
    block = op.regions[0].blocks[0]
    results = tuple(_result(op, name, i, t, (name, -1 - i) in bool_args)
                    for i, t in enumerate(ftype.results))
    params = []
    for i, arg in enumerate(block.arguments):
        pname = arg_name(arg, text) or f"arg{i}"
        param = make_param(name, i, pname, arg.type, _host_arg_written(arg, written))
        if (name, i) in bool_args:
            param = as_bool(param)
        params.append(param)
    return HostSignature(name, tuple(params), results)


#: Memory spaces of a returned memref that name GPU global memory (host code takes no
#: #gpu.address_space: :func:`pywave.frontend.validate.host_spaces`).
_DEVICE_SPACES = {"1", "1 : i64", "1 : i32"}


def _result(op: ir.Operation, fname: str, index: int, t: ir.Type, was_bool: bool) -> Param:
    """Result ``index`` of host function @fname as a Param named ``result<index>``; a memref
    result also records whether its memory space says device memory, and must not return
    memory that dies with the call (``memref.alloca``) or that the call does not own
    (``memref.get_global``)."""
    where = f"host function @{fname} result #{index}"
    if isinstance(t, ir.MemRefType):
        elem = str(ir.MemRefType(t).element_type)
        if elem not in ELEMENT_DTYPES:
            raise CompileError(f"{where} has element type {elem}; returned memrefs may have "
                               "the element types " + ", ".join(sorted(ELEMENT_DTYPES)))
        _check_returned_memory(op, index, where)
    param = make_param(fname, index, f"result{index}", t, False, what="result")
    if param.kind != "memref":
        return param
    if was_bool:   # widened from memref<...xi1>
        param = as_bool(param)
    space = ir.MemRefType(t).memory_space
    text = "" if space is None else str(space)
    if text in ("", "0", "0 : i64", "0 : i32"):
        return param
    if text in _DEVICE_SPACES:
        return dataclasses.replace(param, memory="device")
    raise CompileError(f"{where} has the type {t} in memory space {text}; a returned memref "
                       "lives in host memory (no memory space, or 0) or GPU global memory "
                       "(memory space 1)")


def _check_returned_memory(op: ir.Operation, index: int, where: str) -> None:
    """Refuse a returned memref that comes, through view-like ops, from ``memref.alloca``
    (dead after the return) or ``memref.get_global`` (not the call's to give away)."""
    for ret in find_ops(op, lambda o: o.name == "func.return"):
        value = ret.operands[index]
        owner = _defining_op(value)
        while owner is not None and owner.name in _VIEW_OPS:
            value = owner.operands[0]
            owner = _defining_op(value)
        if owner is not None and owner.name in ("memref.alloca", "memref.get_global"):
            raise CompileError(f"{where} returns the memory of {owner.name}, which "
                               f"{'dies with the call' if owner.name == 'memref.alloca' else 'the call does not own'}"
                               "; return memory from memref.alloc or gpu.alloc")


def _defining_op(value: ir.Value) -> ir.Operation | None:
    """The op defining ``value``; None for a block argument."""
    owner = value.owner
    return None if isinstance(owner, ir.Block) else owner.operation


def _called_functions(module: ir.Module) -> set[str]:
    """Names of the host functions that a ``func.call`` in the module calls."""
    out: set[str] = set()

    def visit(op: ir.Operation) -> ir.WalkResult:
        if op.name == "func.call":
            out.add(ir.FlatSymbolRefAttr(op.attributes["callee"]).value)
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    return out


def make_param(fname: str, index: int, name: str, t: ir.Type, written: bool,
               what: str = "argument") -> Param:
    """The Param of a host function's (or launcher's) argument #``index`` named ``name`` of
    MLIR type ``t`` (``written``: the code may write it; ``what``: "argument" or "result",
    for messages). CompileError for a type Python cannot pass."""
    where = f"host function @{fname} {what} #{index} ('{name}')"
    text = str(t)
    if isinstance(t, ir.MemRefType):
        check_element_width(t, where)
        mt = ir.MemRefType(t)
        elem = str(mt.element_type)
        if elem not in ELEMENT_DTYPES:
            raise CompileError(f"{where} has element type {elem}; supported element types: "
                               + ", ".join(sorted(ELEMENT_DTYPES)))
        code, bits, signless = ELEMENT_DTYPES[elem]
        flags = SIGNLESS if signless else 0
        strides: tuple[int, ...] | None = None
        offset = 0
        layout = mt.layout
        if isinstance(layout, ir.StridedLayoutAttr):
            strides, offset, flags = tuple(layout.strides), layout.offset, flags | STRIDED
        elif not (isinstance(layout, ir.AffineMapAttr)
                  and layout.value == ir.AffineMap.get_identity(mt.rank)):
            raise CompileError(f"{where} has the layout {layout}; pywave passes identity "
                               "and strided<...> layouts")
        return Param(name, "memref", text, dtype=(code, bits, 1), flags=flags,
                     sizes=tuple(mt.shape), strides=strides, offset=offset, written=written)
    if isinstance(t, ir.UnrankedMemRefType):
        raise CompileError(f"{where} has the unranked type {text}; pass a ranked memref")
    if text in SCALAR_KINDS:
        return Param(name, "scalar", text, scalar=text)
    hint = ("; a host function in Wave's convention takes only !llvm.ptr arguments (the "
            "stream, then one per Python object), returns nothing and calls one of "
            + ", ".join(WAVE_RUNTIME)) if text == "!llvm.ptr" else ""
    raise CompileError(f"{where} has the type {text}; host {what}s may be ranked memrefs or "
                       "scalars (" + ", ".join(sorted(SCALAR_KINDS)) + ")" + hint)


def as_bool(param: Param) -> Param:
    """The memref Param of an ``i1`` memref the prepare stage widened to ``i8``: its type
    text says ``i1`` again and it takes bool tensors (the ``i1`` row of
    :data:`pywave.program.DTYPES`: kDLBool, 8 bits)."""
    bool_ = DTYPES["i1"]
    return dataclasses.replace(param, type=param.type.replace("xi8", "xi1"),
                               dtype=(bool_.code, bool_.bits, 1), flags=param.flags & ~SIGNLESS)


#: An SSA value name at the start of a block argument: ``%a``.
_ARG_RE = re.compile(r"%([A-Za-z_$.\-][\w$.\-]*)")


class SourceLines:
    """The lines of a module's source text, split once (a module of n functions asks for
    the names of its arguments n times: splitting the text per argument was quadratic, 10^4
    functions spent seconds in it)."""

    def __init__(self, text: str) -> None:
        self.lines = text.splitlines()


def source_lines(text: "str | SourceLines | None") -> "SourceLines | None":
    """``text`` as :class:`SourceLines` (split once); None stays None."""
    return text if text is None or isinstance(text, SourceLines) else SourceLines(text)


def arg_name(arg: ir.BlockArgument, text: "str | SourceLines | None") -> str | None:
    """The source name (``%a``) of a block argument, read back at its location in ``text``
    (the source, or its :class:`SourceLines`: pass those when asking for many arguments)."""
    if text is None:
        return None
    where = file_location(arg.location)
    if where is None:
        return None
    lines = source_lines(text).lines
    line, col = where
    if not 1 <= line <= len(lines):
        return None
    found = _ARG_RE.match(lines[line - 1], col - 1)
    return found.group(1) if found else None


def kernel_written_args(module: ir.Module) -> dict[str, set[int]]:
    """``"mod::kernel"`` -> indices of memref kernel arguments that may be written."""
    out: dict[str, set[int]] = {}
    for gop in module.body.operations:
        if gop.operation.name != "gpu.module":
            continue
        mname = sym_name(gop.operation)
        for kop in gop.operation.regions[0].blocks[0].operations:
            kop = kop.operation
            if kop.name != "gpu.func" or not kop.regions[0].blocks:
                continue
            kname = sym_name(kop)
            args = kop.regions[0].blocks[0].arguments
            out[f"{mname}::{kname}"] = {i for i, a in enumerate(args)
                                        if isinstance(a.type, ir.MemRefType) and _may_write(a)}
    return out


def _may_write(value: ir.Value, writes: Callable[[ir.OpOperand], bool] = lambda use: True
               ) -> bool:
    """Whether a memref value may be written: reads are skipped, view-like ops followed, and
    any other use is a write unless ``writes(use)`` says otherwise."""
    for use in value.uses:
        name = use.owner.name
        if name in _READ_OPS:
            continue
        if name in _VIEW_OPS:
            if any(_may_write(r, writes) for r in use.owner.results):
                return True
            continue
        if name == "memref.extract_strided_metadata":
            # Its base buffer is a view; sizes, strides and offset are numbers.
            if _may_write(use.owner.results[0], writes):
                return True
            continue
        if name in _ADDRESS_OPS and not _address_escapes(use.owner.results[0]):
            continue
        if writes(use):
            return True
    return False


def _address_escapes(value: ir.Value) -> bool:
    """Whether an integer holding a memref's address may become a pointer again: it does
    unless every use, followed through integer arithmetic, is that arithmetic or a
    ``cf.assert`` (a stored, returned or passed address escapes)."""
    for use in value.uses:
        name = use.owner.name
        if name == "cf.assert":
            continue
        if not name.startswith(_NUMBER_DIALECTS):
            return True
        if any(_address_escapes(r) for r in use.owner.results):
            return True
    return False


def _host_arg_written(arg: ir.Value, kernels: dict[str, set[int]]) -> bool:
    """Whether a host memref argument may be written: by a kernel it is passed to (per
    ``kernels``, from kernel_written_args), as a gpu.memcpy destination, or by any op not
    known to only read it."""
    if not isinstance(arg.type, ir.MemRefType):
        return False
    return _memref_written(arg, kernels)


def _memref_written(value: ir.Value, kernels: dict[str, set[int]]) -> bool:
    """:func:`_host_arg_written` for any memref value of host code."""

    def writes(use: ir.OpOperand) -> bool:
        owner = use.owner
        if owner.name == "gpu.launch_func":
            written = kernels.get(str(owner.attributes["kernel"]).replace("@", ""))
            if written is None:
                return True
            value = owner.operands[use.operand_number]
            return any(i in written and v == value
                       for i, v in enumerate(owner.opview.kernelOperands))
        if owner.name == "gpu.memcpy":
            return use.operand_number == _first_memref_operand(owner)
        return True

    return _may_write(value, writes)


def _first_memref_operand(op: ir.Operation) -> int:
    for i, v in enumerate(op.operands):
        if isinstance(v.type, ir.MemRefType):
            return i
    return -1
