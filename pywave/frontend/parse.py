"""Stage ``parse`` (:mod:`pywave.pipeline`): MLIR text -> verified ``mlir.ir.Module``.

MLIR diagnostics become :class:`pywave.CompileError` with file, line, column and the
offending source line (:func:`pywave.mlirutil.diagnostic_error`).
"""

from __future__ import annotations

from mlir import ir

from ..mlirutil import diagnostic_error
from .validate import nesting, top_level


def parse(text: str, context: ir.Context, *, filename: str = "<input>") -> ir.Module:
    """Parse and verify ``text`` in ``context``.

    Raises
    ------
    CompileError
        Brackets nested deeper than :data:`pywave.frontend.validate.MAX_NESTING` (refused before
        MLIR's recursive parser sees them), naming line and column; a syntax error, an
        unknown dialect or op, or a verifier failure, with ``filename:line:column: message``
        and the offending line. Nested or several top-level modules, or no host function
        and no gpu.module (:func:`pywave.frontend.validate.top_level`).
    """
    nesting(text)
    try:
        module = ir.Module.parse(text, context)
    except ir.MLIRError as exc:
        raise diagnostic_error("cannot parse MLIR", exc, text, filename) from None
    try:
        module.operation.verify()
    except ir.MLIRError as exc:
        raise diagnostic_error("MLIR verification failed", exc, text, filename) from None
    top_level(module)
    return module
