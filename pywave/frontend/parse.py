"""Stage ``parse`` (:mod:`pywave.pipeline`): MLIR text -> verified ``mlir.ir.Module``.

MLIR diagnostics become :class:`pywave.CompileError` with file, line, column and the
offending source line (:func:`pywave.mlirutil.diagnostic_error`).
"""

from __future__ import annotations

from mlir import ir

from ..mlirutil import diagnostic_error
from .validate import MAX_FUNCTIONS, function_count, nesting, top_level


def parse(text: str, context: ir.Context, *, filename: str = "<input>") -> ir.Module:
    """Parse and verify ``text`` in ``context``.

    Limits (each checked in time proportional to the text, before the stage that would be
    slow): at most :data:`pywave.frontend.validate.MAX_TEXT_CHARS` characters (checked
    before the compile starts), brackets nested at most
    :data:`pywave.frontend.validate.MAX_NESTING` deep (before MLIR parses: its parser
    recurses per level), and at most :data:`MAX_FUNCTIONS` functions with a body in one
    module (20,000; counted right after MLIR parses, before verification: LLVM's time grows
    faster than the count, 10,000 trivial functions compile in about 20 s on a 2-core
    machine).

    Raises
    ------
    CompileError
        Brackets nested deeper than :data:`pywave.frontend.validate.MAX_NESTING` (refused before
        MLIR's recursive parser sees them), naming line and column; a syntax error, an
        unknown dialect or op, or a verifier failure, with ``filename:line:column: message``
        and the offending line. Nested or several top-level modules, or no host function
        and no gpu.module (:func:`pywave.frontend.validate.top_level`). More than
        :data:`MAX_FUNCTIONS` functions, naming the count and the limit
        (:func:`pywave.frontend.validate.function_count`).
    """
    nesting(text)
    try:
        module = ir.Module.parse(text, context)
    except ir.MLIRError as exc:
        raise diagnostic_error("cannot parse MLIR", exc, text, filename) from None
    function_count(module)
    try:
        module.operation.verify()
    except ir.MLIRError as exc:
        raise diagnostic_error("MLIR verification failed", exc, text, filename) from None
    top_level(module)
    return module
