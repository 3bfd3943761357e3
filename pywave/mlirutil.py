"""MLIR helpers every stage shares: names, locations, pipelines, diagnostics, op search.

MLIR helpers every stage shares: symbol names, source locations, pass pipelines, and MLIR
diagnostics turned into :class:`pywave.CompileError` (file:line:column, the source line and
a caret)."""

from __future__ import annotations

import re
from typing import Callable

from mlir import ir, passmanager

from .errors import CompileError

_UPSTREAM_DIALECTS_NOTE = ("pywave accepts upstream dialects only (gpu, func, arith, scf, cf, "
                           "memref, math, vector, affine, index, llvm, nvvm, rocdl)")

#: A file location in printed MLIR: ``loc("file":line:column``.
_LOC_RE = re.compile(r'loc\("[^"]*":(\d+):(\d+)')


_DENSE_CASTER_INSTALLED = False


def _dense_elements(attr: ir.Attribute) -> ir.Attribute:
    """The bindings' class for a ``DenseIntOrFPElementsAttr``: DenseFPElementsAttr or
    DenseIntElementsAttr by element type, and the general DenseElementsAttr for every other
    element type (``complex<...>``), whose elements neither subclass reads."""
    for cls in (ir.DenseFPElementsAttr, ir.DenseIntElementsAttr):
        try:
            return cls(attr)
        except ValueError:
            pass
    return ir.DenseElementsAttr(attr)


def install_attribute_casters() -> None:
    """Make every dense elements attribute readable from Python; call with a context
    current. The bindings (MLIR 22) cast each ``DenseIntOrFPElementsAttr`` they hand out to
    its integer or float subclass and raise ``TypeError: Can't cast unknown element type``
    for any other element type, so ``op.attributes[name]`` of a ``memref.global`` or
    ``arith.constant`` of ``complex<f32>`` raises (and reading it through a
    ``NamedAttribute`` inside a walk callback aborts the process); upstream keeps this open
    (llvm-project issue 105701). This replaces that caster, once per process, with
    :func:`_dense_elements`, which returns the same classes for integer and float elements
    and a plain ``DenseElementsAttr`` where the bindings raised. In a compile worker this
    is the worker's own process; with ``isolate=False`` it is the caller's, where it only
    changes what used to raise."""
    global _DENSE_CASTER_INSTALLED
    if _DENSE_CASTER_INSTALLED:
        return
    from mlir._mlir_libs import _mlir
    typeid = ir.Attribute.parse("dense<0> : tensor<1xi8>").typeid
    _mlir.register_type_caster(typeid, replace=True)(_dense_elements)
    _DENSE_CASTER_INSTALLED = True


def sym_name(op: ir.Operation) -> str:
    """The ``sym_name`` of a symbol op (``gpu.module``, ``func.func``, ``llvm.func``, ...)."""
    return ir.StringAttr(op.attributes["sym_name"]).value


def file_location(loc: ir.Location) -> tuple[int, int] | None:
    """(line, column) of a file location, looking through fused/call-site locations."""
    match = _LOC_RE.search(str(loc))
    return (int(match.group(1)), int(match.group(2))) if match else None


def where(op: ir.Operation) -> str:
    """``line L, column C`` of ``op``'s file location, else ``an unknown location``."""
    loc = file_location(op.location)
    return f"line {loc[0]}, column {loc[1]}" if loc else "an unknown location"


def at_line(op: ir.Operation) -> str:
    """`` at line L, column C`` of ``op``'s file location (for a message), else ``""``."""
    loc = file_location(op.location)
    return f" at line {loc[0]}, column {loc[1]}" if loc else ""


def run_pipeline(module: ir.Module, pipeline: str, what: str, text: str | None = None) -> None:
    """Run a textual pass pipeline; MLIR failures become CompileError."""
    try:
        passmanager.PassManager.parse(pipeline, module.context).run(module.operation)
    except ir.MLIRError as exc:
        raise diagnostic_error(f"{what} failed", exc, text) from None


def diagnostic_error(what: str, exc: ir.MLIRError, text: str | None,
                     filename: str = "<input>", note_lines: int | None = None) -> CompileError:
    """Build a CompileError from an MLIRError's diagnostics (first one located).
    ``note_lines``: keep at most this many lines of each note (a failing pass's "see current
    operation" note prints the whole op it ran on: for a module pass, the module)."""
    diags = list(getattr(exc, "error_diagnostics", []) or [])
    lines = [f"{what}:"]
    where: tuple[int, int] | None = None
    for diag in diags:
        loc = file_location(diag.location)
        prefix = f"{filename}:{loc[0]}:{loc[1]}: " if loc else ""
        lines.append(f"  {prefix}{diag.message}")
        for note in diag.notes:
            shown = note.message.splitlines()
            if note_lines is not None and len(shown) > note_lines:
                shown = shown[:note_lines] + [f"... ({len(shown) - note_lines} more lines)"]
            lines.append("    note: " + "\n".join(shown))
        if where is None and loc:
            where = loc
    if not diags:
        lines.append(f"  {exc}")
    source_line = None
    if where and text is not None:
        src = text.splitlines()
        if 1 <= where[0] <= len(src):
            source_line = src[where[0] - 1]
            lines.append(f"  {where[0]:5d} | {source_line}")
            lines.append("        | " + " " * max(where[1] - 1, 0) + "^")
    message = "\n".join(lines)
    if "unregistered" in message or "dialect" in message and "not" in message:
        message += f"\n  ({_UPSTREAM_DIALECTS_NOTE})"
    return CompileError(message, filename=filename if where else None,
                        line=where[0] if where else None, column=where[1] if where else None,
                        source_line=source_line)


def gpu_modules(module: ir.Module) -> list[ir.Operation]:
    """The ``gpu.module`` ops at the top level of ``module``, in order."""
    return [op.operation for op in module.body.operations if op.operation.name == "gpu.module"]


def kernels_of(gmod: ir.Operation) -> list[ir.Operation]:
    """The kernels (``gpu.func`` with ``gpu.kernel``) of a ``gpu.module``, in order."""
    return [op.operation for op in gmod.regions[0].blocks[0].operations
            if op.operation.name == "gpu.func" and "gpu.kernel" in op.operation.attributes]


def find_ops(root: ir.Operation, keep: "Callable[[ir.Operation], bool]") -> list[ir.Operation]:
    """The ops nested in ``root`` (``root`` included) for which ``keep(op)`` holds, in the
    order ``Operation.walk`` visits them (post-order). Collect first, then rewrite: changing
    the IR during a walk is unsafe."""
    found: list[ir.Operation] = []

    def visit(op: ir.Operation) -> ir.WalkResult:
        if keep(op):
            found.append(op)
        return ir.WalkResult.ADVANCE

    root.walk(visit)
    return found


def serialise_clone(module: ir.Module, pipeline: str) -> list[tuple[str, bytes]]:
    """(gpu.binary name, first object's bytes) after running ``pipeline`` (a
    ``gpu-module-to-binary`` pipeline) on a copy of ``module``, which stays as it is: the
    kernels' LLVM IR or PTX for a dump or a kept stage."""
    from mlir.dialects import gpu
    clone = ir.Module.parse(str(module), module.context)
    run_pipeline(clone, pipeline, "serialising a copy of the kernels")
    out = []
    for op in clone.body.operations:
        op = op.operation
        if op.name == "gpu.binary":
            objects = ir.ArrayAttr(op.attributes["objects"])
            out.append((sym_name(op), bytes(gpu.ObjectAttr(objects[0]).object)))
    return out


def next_op(op: ir.Operation) -> "ir.Operation | None":
    """The op after ``op`` in its block (None for the last)."""
    found = False
    for other in op.block.operations:
        if found:
            return other.operation
        if other.operation == op:
            found = True
    return None
