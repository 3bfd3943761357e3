"""Stage 1: MLIR text -> verified ``mlir.ir.Module``.

MLIR diagnostics become :class:`pywave.CompileError` with file, line, column and the
offending source line.
"""

from __future__ import annotations

import re

from mlir import ir

from .errors import CompileError

_UPSTREAM_DIALECTS_NOTE = ("pywave accepts upstream dialects only (gpu, func, arith, scf, cf, "
                           "memref, math, vector, affine, index, llvm, nvvm, rocdl)")


def parse(text: str, context: ir.Context, *, filename: str = "<input>") -> ir.Module:
    """Parse and verify ``text`` in ``context``.

    Raises
    ------
    CompileError
        On a syntax error, an unknown dialect or op, or a verifier failure; the message
        shows ``filename:line:column: message`` and the offending line.
    """
    try:
        module = ir.Module.parse(text, context)
    except ir.MLIRError as exc:
        raise diagnostic_error("cannot parse MLIR", exc, text, filename) from None
    try:
        module.operation.verify()
    except ir.MLIRError as exc:
        raise diagnostic_error("MLIR verification failed", exc, text, filename) from None
    return module


def diagnostic_error(what: str, exc: ir.MLIRError, text: str | None,
                     filename: str = "<input>") -> CompileError:
    """Build a CompileError from an MLIRError's diagnostics (first one located)."""
    diags = list(getattr(exc, "error_diagnostics", []) or [])
    lines = [f"{what}:"]
    where: tuple[int, int] | None = None
    for diag in diags:
        loc = _file_location(diag.location)
        prefix = f"{filename}:{loc[0]}:{loc[1]}: " if loc else ""
        lines.append(f"  {prefix}{diag.message}")
        for note in diag.notes:
            lines.append(f"    note: {note.message}")
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


_LOC_RE = re.compile(r'loc\("[^"]*":(\d+):(\d+)')


def _file_location(loc: ir.Location) -> tuple[int, int] | None:
    """(line, column) of a file location, looking through fused/call-site locations."""
    match = _LOC_RE.search(str(loc))
    return (int(match.group(1)), int(match.group(2))) if match else None
