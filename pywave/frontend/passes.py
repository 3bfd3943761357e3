"""Stage passes: the user's own pass pipeline (``passes=``), run right after parsing.

Stage ``passes`` (:mod:`pywave.pipeline`): the user's own pass pipeline, run right after
``parse`` and before pywave's lowering (``passes=`` of :func:`pywave.compile`,
:func:`pywave.compile_many`, :func:`pywave.export`; ``--pass-pipeline`` of the command line;
``pywave opt``).

The pipeline is MLIR's textual pass-pipeline syntax anchored on the module,
``builtin.module(canonicalize, func.func(cse), gpu.module(...))``, with any pass or pass
pipeline the MLIR Python bindings register, and pywave's own passes
(:mod:`pywave.frontend.transform_passes`: stand-ins for mlir-opt's test-only transform-dialect
passes, also under their mlir-opt names). It runs one pass at a time (each leaf of the
nesting in order, as its own ``builtin.module(anchor(...)(pass))`` pass manager: the same
result, since a nested pass sees one op of its anchor at a time), so that a failure names the
pass that failed, with MLIR's diagnostics (the op and its location in the input).

:func:`check` needs no MLIR (the user's process runs it before a compile starts, on cache
hits too; without ``passes=`` it imports nothing more); :func:`run` runs in the compile worker.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from ..errors import CompileError

if TYPE_CHECKING:
    from mlir import ir

#: The anchor every user pipeline starts with (the passes run on the parsed module).
ROOT = "builtin.module"
#: Longest pipeline text accepted (a bound on what is parsed and kept in the cache key).
MAX_LENGTH = 64 * 1024
#: Lines kept of each note of a failing pass's diagnostics (MLIR's "see current operation"
#: note prints the op the pass ran on, for a module pass the whole module).
NOTE_LINES = 12


@dataclasses.dataclass(frozen=True)
class Pass:
    """One pass of a pipeline: its text (``canonicalize{max-iterations=3}``) and the anchors
    it is nested in, outermost first (``("builtin.module", "func.func")``)."""

    text: str
    anchors: tuple[str, ...]

    @property
    def pipeline(self) -> str:
        """A pipeline running this pass alone, at its place in the nesting."""
        return "".join(f"{a}(" for a in self.anchors) + self.text + ")" * len(self.anchors)

    @property
    def name(self) -> str:
        """The pass as a user names it: its anchors below the module, then its text
        (``func.func(cse)``; ``canonicalize`` on the module)."""
        inner = self.anchors[1:]
        return "".join(f"{a}(" for a in inner) + self.text + ")" * len(inner)


def check(passes: Any, parameter: str = "passes") -> str | None:
    """``passes`` if it is a pipeline anchored on ``builtin.module`` whose brackets balance
    (the pass names and options are checked by MLIR in the worker), None for None.

    Raises
    ------
    TypeError
        Not a str (nor None).
    CompileError
        Empty, longer than :data:`MAX_LENGTH`, not UTF-8 text, not ``builtin.module(...)``,
        with unbalanced brackets or quotes, or with one of pywave's own passes nested below
        the module or given options; the message names ``parameter`` and the value.
    """
    if passes is None:
        return None
    if not isinstance(passes, str):
        raise TypeError(f"{parameter} must be a pass pipeline (str) such as "
                        f"'builtin.module(canonicalize, cse)', got {type(passes).__name__}")
    shown = passes if len(passes) <= 80 else passes[:80] + "..."
    if len(passes) > MAX_LENGTH:
        raise CompileError(f"{parameter} is {len(passes)} characters long; the limit is "
                           f"{MAX_LENGTH}")
    try:
        passes.encode("utf-8")
    except UnicodeEncodeError:
        raise CompileError(f"{parameter}={shown!r} is not valid Unicode text") from None
    stripped = passes.strip()
    if not (stripped.startswith(ROOT) and stripped[len(ROOT):].lstrip().startswith("(")
            and stripped.endswith(")")):
        raise CompileError(f"{parameter}={shown!r} is not a pass pipeline on the module: "
                           f"expected {ROOT}(PASS, ...), e.g. "
                           "'builtin.module(canonicalize, func.func(cse))'")
    from . import transform_passes
    for step in split(passes, parameter):          # balanced brackets and quotes
        transform_passes.check(step.text, step.anchors, ROOT, parameter)
    return passes


def split(passes: str, parameter: str = "passes") -> list[Pass]:
    """The passes of a pipeline in the order they run, each with its anchors.

    Raises
    ------
    CompileError
        Unbalanced brackets or quotes, or text after the pipeline's closing bracket.
    """
    parser = _Splitter(passes, parameter)
    found = parser.pipeline(())
    parser.skip_space()
    if parser.pos != len(passes):
        parser.fail("text after the end of the pipeline")
    return found


class _Splitter:
    """A recursive-descent reader of the pipeline syntax: ``anchor(element, ...)`` where an
    element is a nested ``anchor(...)`` or a pass with optional ``{options}`` (options may
    hold nested braces and strings quoted with ``"`` or ``'``)."""

    def __init__(self, text: str, parameter: str) -> None:
        self.text, self.parameter, self.pos = text, parameter, 0

    def fail(self, what: str) -> None:
        raise CompileError(f"{self.parameter}={self.text!r}: {what} at character "
                           f"{self.pos + 1}")

    def skip_space(self) -> None:
        while self.pos < len(self.text) and self.text[self.pos].isspace():
            self.pos += 1

    def name(self) -> str:
        self.skip_space()
        start = self.pos
        while self.pos < len(self.text) and self.text[self.pos] not in "(){},\"" and \
                not self.text[self.pos].isspace():
            self.pos += 1
        if self.pos == start:
            self.fail("expected a pass or anchor name")
        return self.text[start:self.pos]

    def pipeline(self, anchors: tuple[str, ...]) -> list[Pass]:
        anchor = self.name()
        self.skip_space()
        if self.pos >= len(self.text) or self.text[self.pos] != "(":
            self.fail(f"expected '(' after {anchor!r}")
        self.pos += 1
        inner = anchors + (anchor,)
        found: list[Pass] = []
        self.skip_space()
        if self.peek() == ")":
            self.pos += 1
            return found
        while True:
            found += self.element(inner)
            self.skip_space()
            char = self.peek()
            self.pos += 1
            if char == ")":
                return found
            if char != ",":
                self.pos -= 1
                self.fail("expected ',' or ')'")

    def element(self, anchors: tuple[str, ...]) -> list[Pass]:
        self.skip_space()
        start = self.pos
        name = self.name()
        self.skip_space()
        if self.peek() == "(":
            self.pos = start
            return self.pipeline(anchors)
        if self.peek() == "{":
            self.options()
        return [Pass(self.text[start:self.pos].strip(), anchors)]

    def options(self) -> None:
        depth = 0
        while self.pos < len(self.text):
            char = self.text[self.pos]
            if char in "\"'":
                end = self.text.find(char, self.pos + 1)
                if end < 0:
                    self.fail("unterminated quoted option value")
                self.pos = end
            elif char == "{":
                depth += 1
            elif char == "}":
                depth -= 1
                if depth == 0:
                    self.pos += 1
                    return
            self.pos += 1
        self.fail("unbalanced '{' in pass options")

    def peek(self) -> str:
        return self.text[self.pos] if self.pos < len(self.text) else ""


def run(module: "ir.Module", passes: str, text: str | None, filename: str) -> None:
    """Run the pipeline ``passes`` on ``module``, one pass at a time (:func:`split`); pywave's
    own passes (:mod:`pywave.frontend.transform_passes`) run in their place among MLIR's.

    Raises
    ------
    CompileError
        A pass of the pipeline does not parse (an unknown pass or pipeline, a bad option or
        option value: MLIR's message, naming the pass; an own pass misplaced), or a pass
        failed (naming it, with MLIR's diagnostics: the op, ``filename:line:column`` and the
        source line).
    """
    from mlir import ir

    from ..mlirutil import diagnostic_error
    from . import transform_passes

    steps = split(passes)
    managers = [_manager(step, passes, module.context) for step in steps]
    for step, manager in zip(steps, managers):
        try:
            if manager is None:
                transform_passes.lookup(step.text).apply(module)
            else:
                manager.run(module.operation)
        except ir.MLIRError as exc:
            raise diagnostic_error(f"the pass {step.name!r} of passes= failed", exc, text,
                                   filename, note_lines=NOTE_LINES) from None
        except CompileError as exc:
            raise CompileError(f"the pass {step.name!r} of passes= failed: {exc}") from None


def _manager(step: Pass, passes: str, context: "ir.Context") -> Any:
    """The pass manager running ``step`` alone, None for one of pywave's own passes."""
    from mlir import ir, passmanager

    from . import transform_passes
    transform_passes.check(step.text, step.anchors, ROOT, "passes")
    if transform_passes.lookup(step.text) is not None:
        return None
    try:
        return passmanager.PassManager.parse(step.pipeline, context)
    except (ValueError, ir.MLIRError) as exc:
        reason = "\n".join(line for line in str(exc).strip().splitlines() if line.strip())
        raise CompileError(f"passes={passes!r} is not a pipeline MLIR can run: "
                           f"{reason}") from None
