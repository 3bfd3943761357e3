"""Dense elements attributes: element types checked without reading elements; two rewrites.

A ``memref.global`` initializer or a constant is a ``dense<...>`` attribute
(``DenseIntOrFPElementsAttr``: integer, index, float or ``complex`` elements, splat or not,
``dense<>`` for zero elements) or a ``dense_resource<key>`` one (its bytes in the module's
``{-# dialect_resources #-}`` section). MLIR's lowerings take most of them; what they do
not take ends in an abort, a crash of the Python bindings or silently wrong values, so
:func:`check` refuses it first with a :class:`~pywave.errors.CompileError` naming the op,
the element type and what is supported:

- ``tf32``: MLIR's LLVM type converter has no LLVM type for it;
- integers of 2 to 7 bits (and ``complex`` of integers under 8 bits) in a ``memref.global``:
  MLIR 22's ``memref.load`` lowering reads such elements packed, two or more to a byte,
  while the LLVM translation lays a global's initializer out one element per byte (a
  ``memref<4xi4>`` global ``[1, -2, 3, 7]`` reads back ``[1, 0, -2, 0]``);
- in a ``gpu.module``: ``f80``/``f128`` (LLVM's NVPTX back end aborts on them) and
  elements under 8 bits in a ``memref.global`` (ptxas refuses the ``.u4`` globals NVPTX
  writes);
- ``dense_resource`` blobs that the LLVM translation cannot convert (its failure crashes
  the bindings): ``complex``, ``i1`` and sub-byte elements, a key with no blob in the
  module, a blob whose size is not the type's.

The checks read types, shapes and (for ``dense_resource`` only) the printed resource
section, never elements, so a global of millions of elements costs no Python time.
:func:`widen_bool_global` (``i1`` globals, bool memrefs being bytes) and
:func:`empty_resources` are the rewrites; :func:`pywave.frontend.prepare` runs them.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from ..errors import CompileError

if TYPE_CHECKING:
    from mlir import ir

#: What :func:`check` lets through, for its messages.
SUPPORTED = ("supported element types: signless/signed/unsigned integers of 8 bits or more, "
             "i1 (kept as bytes), index, f16, bf16, f32, f64, the f8/f6/f4 types, f80 and "
             "f128 (host code only), and complex of these")

#: One blob of the printed ``{-# dialect_resources: { builtin: { ... } } #-}`` section.
_BLOB_RE = re.compile(r'^\s*([A-Za-z_][\w.$-]*|"(?:[^"\\]|\\.)*")\s*:\s*"0x([0-9A-Fa-f]*)"',
                      re.MULTILINE)

#: Float types with no LLVM type (MLIR's LLVMTypeConverter converts none of them).
_NO_LLVM_TYPE = ("tf32",)
#: Float types the GPU back ends have no type for (NVPTX aborts: "unsupported type").
_HOST_ONLY = ("f80", "f128")


def _where(op: "ir.Operation") -> str:
    """:func:`pywave.mlirutil.where` (imported here: this module loads without MLIR)."""
    from ..mlirutil import where
    return where(op)


def in_gpu_module(op: "ir.Operation") -> bool:
    """Whether ``op`` is or is nested in a ``gpu.module`` (kernel code, not host code)."""
    while op is not None:
        if op.name == "gpu.module":
            return True
        op = op.parent
    return False


def _is_resource(attr: "ir.Attribute", ir) -> bool:
    """Whether ``attr`` is a ``dense_resource`` (the bindings hand those out as plain
    Attributes; the class's constructor is their isa check)."""
    try:
        ir.DenseResourceElementsAttr(attr)
    except ValueError:
        return False
    return True


def dense_attributes(op: "ir.Operation", ir) -> list[tuple[str, "ir.Attribute", bool]]:
    """The (name, attribute, is a dense_resource) of ``op``'s dense elements attributes."""
    found = []
    for name in op.attributes:
        attr = op.attributes[name]
        if isinstance(attr, ir.DenseElementsAttr):
            found.append((name, attr, False))
        elif _is_resource(attr, ir):
            found.append((name, attr, True))
    return found


def _parts(element: "ir.Type", ir) -> tuple["ir.Type", int]:
    """(the scalar type, parts per element): ``complex<T>`` is two ``T``."""
    if isinstance(element, ir.ComplexType):
        return ir.ComplexType(element).element_type, 2
    return element, 1


def _bits(scalar: "ir.Type", ir) -> int:
    """Bits of a scalar element (index: 64, MLIR's storage width for index)."""
    if isinstance(scalar, ir.IndexType):
        return 64
    if isinstance(scalar, ir.IntegerType):
        return ir.IntegerType(scalar).width
    return ir.FloatType(scalar).width


def storage_bytes(element: "ir.Type", ir) -> int:
    """Bytes of one element in a ``dense_resource`` blob: each scalar part rounded up to
    whole bytes (i1 included: MLIR keeps resource bools one per byte), index 8."""
    scalar, parts = _parts(element, ir)
    return parts * ((_bits(scalar, ir) + 7) // 8)


def check(mod: "ir.Module") -> None:
    """CompileError for the first dense elements attribute in ``mod`` that no stage takes
    (the module docstring lists them); reads no elements."""
    from mlir import ir

    problems: list[CompileError] = []
    resources: list[tuple["ir.Operation", str, "ir.Attribute"]] = []

    def visit(op: "ir.Operation") -> "ir.WalkResult":
        try:
            for name, attr, resource in dense_attributes(op, ir):
                _check_attribute(op, name, attr, resource, ir)
                if resource:
                    resources.append((op, name, attr))
        except CompileError as exc:
            problems.append(exc)
            return ir.WalkResult.INTERRUPT
        return ir.WalkResult.ADVANCE

    mod.operation.walk(visit)
    if problems:
        raise problems[0]
    if resources:
        _check_blobs(mod, resources, ir)


def _refuse(op: "ir.Operation", name: str, attr_type: "ir.Type", why: str) -> CompileError:
    return CompileError(f"{op.name} at {_where(op)} has the {name} attribute of type "
                        f"{attr_type}: {why}; {SUPPORTED}")


def _check_attribute(op: "ir.Operation", name: str, attr: "ir.Attribute", resource: bool,
                     ir) -> None:
    shaped = ir.ShapedType(attr.type)
    element = shaped.element_type
    scalar, parts = _parts(element, ir)
    scalar_text = str(scalar)
    kernel = in_gpu_module(op)
    if scalar_text in _NO_LLVM_TYPE:
        raise _refuse(op, name, attr.type, f"{scalar_text} elements have no LLVM type")
    if kernel and scalar_text in _HOST_ONLY:
        raise _refuse(op, name, attr.type, f"{scalar_text} elements have no type on the GPU "
                      "(LLVM's NVPTX and AMDGPU back ends lower none)")
    bits = _bits(scalar, ir)
    sub_byte = bits < 8 and not (bits == 1 and parts == 1)    # i1 is widened to bytes
    if op.name == "memref.global" and sub_byte and \
            (isinstance(scalar, ir.IntegerType) or kernel):
        raise _refuse(op, name, attr.type,
                      f"a memref.global of {bits}-bit elements is read "
                      + ("packed by MLIR 22's memref.load lowering while its initializer "
                         "is laid out one element per byte"
                         if isinstance(scalar, ir.IntegerType) else
                         "through a sub-byte PTX global, which ptxas refuses")
                      + "; declare it with 8-bit elements (i8) and convert after loading")
    if resource and (parts == 2 or bits < 8):
        raise _refuse(op, name, attr.type,
                      f"MLIR 22's LLVM translation converts dense_resource blobs of "
                      f"integers and floats of 8 bits or more only, not of {element}; "
                      "write the initializer as dense<...>")


def _check_blobs(mod: "ir.Module", resources: list, ir) -> None:
    """Each dense_resource's key names a blob of the module whose size is the type's (the
    LLVM translation's failure on either crashes the bindings). Prints the module with
    dense elements elided (resources are printed in full): run only when one exists."""
    text = mod.operation.get_asm(large_elements_limit=16, assume_verified=True)
    start = text.rfind("{-#")
    blobs = {}
    if start >= 0:
        for match in _BLOB_RE.finditer(text, start):
            key = match.group(1)
            blobs[key.strip('"')] = (len(match.group(2)) - 8) // 2   # 4 bytes of alignment
    for op, name, attr in resources:
        key = str(attr).split("<", 1)[1].split(">", 1)[0]
        shaped = ir.ShapedType(attr.type)
        count = 1
        for size in shaped.shape:
            count *= size
        want = count * storage_bytes(shaped.element_type, ir)
        if key not in blobs:
            raise _refuse(op, name, attr.type,
                          f"the module has no blob {key!r} in its dialect_resources section")
        if count and blobs[key] != want:
            raise _refuse(op, name, attr.type,
                          f"its blob {key!r} holds {blobs[key]} bytes where {count} "
                          f"element(s) of {shaped.element_type} take {want}")


def empty_resources(mod: "ir.Module") -> None:
    """A ``dense_resource`` of zero elements becomes ``dense<>`` of the same type (the
    LLVM translation asserts on an empty resource; no value is lost)."""
    from mlir import ir

    from ..mlirutil import find_ops
    for op in find_ops(mod.operation, lambda o: any(
            resource for _, _, resource in dense_attributes(o, ir))):
        for name, attr, resource in dense_attributes(op, ir):
            if resource and 0 in ir.ShapedType(attr.type).shape:
                op.attributes[name] = ir.Attribute.parse(f"dense<> : {attr.type}",
                                                         mod.context)


def widen_bool_global(op: "ir.Operation", i8: "ir.Type") -> None:
    """Give a ``memref.global`` of i1 i8 elements and its initializer the same values as
    bytes (0/1): splats through their one value, others through the bindings' NumPy view
    (unpacked from MLIR's bit-packed storage in C), never per element in Python. A
    dense_resource initializer is refused by :func:`check` first."""
    from mlir import ir
    import numpy as np

    memref = ir.MemRefType(ir.TypeAttr(op.attributes["type"]).value)
    op.attributes["type"] = ir.TypeAttr.get(
        ir.MemRefType.get(memref.shape, i8, memref.layout, memref.memory_space))
    if "initial_value" not in op.attributes:
        return
    attr = op.attributes["initial_value"]
    if not isinstance(attr, ir.DenseIntElementsAttr):
        return                                                   # unit: uninitialized
    tensor = ir.RankedTensorType.get(ir.ShapedType(attr.type).shape, i8)
    if attr.is_splat:
        value = 1 if ir.IntegerAttr(attr.get_splat_value()).value else 0
        widened = ir.DenseElementsAttr.get_splat(tensor, ir.IntegerAttr.get(i8, value))
    else:
        widened = ir.DenseElementsAttr.get(np.asarray(attr).astype(np.int8), type=i8,
                                           shape=list(tensor.shape))
    op.attributes["initial_value"] = widened
