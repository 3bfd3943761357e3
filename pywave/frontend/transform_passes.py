"""pywave's own passes for ``passes=``: stand-ins for mlir-opt's test-only transform passes.

pywave's own passes for a ``passes=`` / ``--pass-pipeline`` pipeline: stand-ins for
mlir-opt's test-only transform-dialect passes, which upstream RUN lines use and the MLIR
Python bindings do not register.

* ``pywave-apply-transform-schedule`` (alias ``test-transform-dialect-interpreter``): applies
  each top-level transform op of the module that is not a ``transform.named_sequence`` (the
  schedule, e.g. ``transform.sequence failures(propagate) {...}``) to the whole module, in
  order. A schedule written as ``transform.named_sequence @__transform_main`` is applied by
  MLIR's own ``transform-interpreter`` pass, which the bindings register.
* ``pywave-erase-transform-schedule`` (alias ``test-transform-dialect-erase-schedule``):
  erases every transform op (with its body) and every nested ``builtin.module`` that holds
  only transform ops (the ``module attributes {transform.with_named_sequence}`` a schedule
  lives in), and drops the module's ``transform.with_named_sequence`` attribute: what is left
  is the payload program.

Both run on the module itself (directly inside ``builtin.module(...)``) and take no options;
:func:`check` says so before any work. They run in the compile worker, like every pass.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Callable

from ..errors import CompileError

if TYPE_CHECKING:
    from mlir import ir

#: The attribute marking a module that holds named transform sequences.
NAMED_SEQUENCE_ATTR = "transform.with_named_sequence"


@dataclasses.dataclass(frozen=True)
class OwnPass:
    """A pass pywave implements itself: its name, the mlir-opt name it stands in for, and
    the function that runs it on a module (raises ``ir.MLIRError`` or CompileError)."""

    name: str
    alias: str
    apply: Callable[["ir.Module"], None]


def apply_schedule(module: "ir.Module") -> None:
    """Apply each top-level transform op but named sequences to ``module``, in order.

    Raises
    ------
    CompileError
        The module has no such op.
    mlir.ir.MLIRError
        Applying a schedule failed; the message holds MLIR's diagnostics (the transform op
        that failed and the payload op, with their locations).
    """
    from mlir import ir
    from mlir.dialects.transform import interpreter

    roots = [op.operation for op in module.body.operations
             if op.operation.name.startswith("transform.")
             and op.operation.name != "transform.named_sequence"]
    if not roots:
        raise CompileError(
            "pywave-apply-transform-schedule found no top-level transform op (such as "
            "transform.sequence) to apply; a schedule written as transform.named_sequence "
            "@__transform_main is applied by MLIR's transform-interpreter pass")
    for root in roots:
        try:
            interpreter.apply_named_sequence(module.operation, root, module.operation)
        except ValueError as exc:   # the bindings put the diagnostics in the message
            raise ir.MLIRError(str(exc), []) from None


def erase_schedule(module: "ir.Module") -> None:
    """Erase the transform ops and the nested modules holding only transform ops."""
    from mlir import ir

    root = module.operation
    doomed: list[ir.Operation] = []

    def visit(op: "ir.Operation") -> "ir.WalkResult":
        if op.name.startswith("transform.") or (op != root and _holds_only_schedule(op)):
            doomed.append(op)
            return ir.WalkResult.SKIP
        return ir.WalkResult.ADVANCE

    root.walk(visit, ir.WalkOrder.PRE_ORDER)
    for op in doomed:
        op.erase()
    if NAMED_SEQUENCE_ATTR in root.attributes:
        del root.attributes[NAMED_SEQUENCE_ATTR]


def _holds_only_schedule(op: "ir.Operation") -> bool:
    """A nested ``builtin.module`` whose body is transform ops only (and not empty)."""
    if op.name != "builtin.module":
        return False
    names = [inner.operation.name for inner in op.regions[0].blocks[0].operations]
    return bool(names) and all(name.startswith("transform.") for name in names)


#: pywave's passes, by name and by the mlir-opt name each stands in for.
OWN_PASSES = (
    OwnPass("pywave-apply-transform-schedule", "test-transform-dialect-interpreter",
            apply_schedule),
    OwnPass("pywave-erase-transform-schedule", "test-transform-dialect-erase-schedule",
            erase_schedule),
)
BY_NAME = {name: p for p in OWN_PASSES for name in (p.name, p.alias)}


def lookup(text: str) -> OwnPass | None:
    """The own pass a pipeline element (``name`` or ``name{options}``) names, else None."""
    return BY_NAME.get(text.split("{", 1)[0].strip())


def check(text: str, anchors: tuple[str, ...], root: str, parameter: str) -> None:
    """An own pass placed where it can run: on the module, without options.

    Raises
    ------
    CompileError
        Nested in another anchor, or given options; the message names the pass.
    """
    own = lookup(text)
    if own is None:
        return
    name = text.split("{", 1)[0].strip()
    if anchors != (root,):
        inner = "(".join(anchors[1:])
        raise CompileError(f"{parameter}: {name!r} runs on the module; put it directly inside "
                           f"{root}(...), not inside {inner}(...)")
    if "{" in text:
        raise CompileError(f"{parameter}: {name!r} ({own.name}) takes no options, got {text!r}")


__all__ = ["BY_NAME", "NAMED_SEQUENCE_ATTR", "OWN_PASSES", "OwnPass", "apply_schedule",
           "check", "erase_schedule", "lookup"]
