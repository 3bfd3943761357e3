"""Checks that run before MLIR or LLVM sees a value they would assert on.

Two halves:

- :func:`options`, :func:`chip`, :func:`source`, :func:`isolate`, :func:`timeout` and
  :func:`pipeline_value` need no MLIR: they check what the caller passed (types, target
  names, the text's encoding, strings that go into a pass pipeline) and run in the user's
  process before a compile starts (on cache hits too: they are cheap). :func:`nesting` runs
  right before the text is parsed (:func:`pywave.frontend.parse.parse`): a cache hit skips it.
- :func:`module`, :func:`prepared` and :func:`host_spaces` walk a parsed module (in the
  compile worker): memory spaces, allocas, ``memref.dim`` indices, kernel launch-bound
  attributes, host code that touches device memory or is typed with a GPU memory space, ops
  that no stage lowers.

Every failure is a :class:`~pywave.errors.CompileError` (a bad ``timeout``: a
:class:`~pywave.errors.Error`; ``TypeError`` for a wrong Python type) naming the parameter or
op, the value and the limit.
"""

from __future__ import annotations

import logging
import os
import re
from typing import TYPE_CHECKING, Any, Mapping

from . import dense
from ..errors import CompileError, Error
from ..program import FORMAT_CHOICES

if TYPE_CHECKING:
    import numpy
    from mlir import ir

log = logging.getLogger("pywave.validate")

# --------------------------------------------------------------------------------------------
# Targets
# --------------------------------------------------------------------------------------------
#: NVPTX processors of LLVM 22 (llvm/lib/Target/NVPTX/NVPTX.td).
NVPTX_CHIPS = (
    "sm_20", "sm_21", "sm_30", "sm_32", "sm_35", "sm_37", "sm_50", "sm_52", "sm_53",
    "sm_60", "sm_61", "sm_62", "sm_70", "sm_72", "sm_75", "sm_80", "sm_86", "sm_87",
    "sm_88", "sm_89", "sm_90", "sm_90a", "sm_100", "sm_100a", "sm_100f", "sm_101",
    "sm_101a", "sm_101f", "sm_103", "sm_103a", "sm_103f", "sm_110", "sm_110a", "sm_110f",
    "sm_120", "sm_120a", "sm_120f", "sm_121", "sm_121a", "sm_121f")
#: AMDGPU processors of LLVM 22 (llvm/lib/Target/AMDGPU/GCNProcessors.td, GCN only).
AMDGPU_CHIPS = (
    "gfx600", "gfx601", "gfx602", "gfx700", "gfx701", "gfx702", "gfx703", "gfx704",
    "gfx705", "gfx801", "gfx802", "gfx803", "gfx805", "gfx810", "gfx900", "gfx902",
    "gfx904", "gfx906", "gfx908", "gfx909", "gfx90a", "gfx90c", "gfx942", "gfx950",
    "gfx1010", "gfx1011", "gfx1012", "gfx1013", "gfx1030", "gfx1031", "gfx1032", "gfx1033",
    "gfx1034", "gfx1035", "gfx1036", "gfx1100", "gfx1101", "gfx1102", "gfx1103", "gfx1150",
    "gfx1151", "gfx1152", "gfx1153", "gfx1200", "gfx1201", "gfx1250")

#: Optimisation levels of the host code (LLVM -O0..-O3).
OPT_LEVELS = (0, 1, 2, 3)


#: The oldest NVIDIA chip pywave compiles for. libwavert needs a CUDA driver of 9.0 or newer
#: (its required entry points include cuFuncSetAttribute, CUDA 9.0), and CUDA 9.0 dropped
#: Fermi (sm_20, sm_21): no driver pywave can use runs those GPUs.
MIN_NVPTX_CHIP = "sm_30"
#: NVIDIA chips pywave accepts: LLVM's, from :data:`MIN_NVPTX_CHIP` on.
SUPPORTED_NVPTX_CHIPS = NVPTX_CHIPS[NVPTX_CHIPS.index(MIN_NVPTX_CHIP):]


#: The CPU device's one "chip" (:mod:`pywave.kernels.cpu`): ``target="cpu"``.
CPU_CHIP = "cpu"


def chip(name: Any, parameter: str = "target") -> str:
    """``name`` if it is a chip LLVM's NVPTX or AMDGPU backend knows (NVIDIA: from
    :data:`MIN_NVPTX_CHIP` on), else CompileError with the closest valid name, or the valid
    names when none is close (TypeError when it is not a str). Names are exact: ``SM_90`` or
    ``sm90`` are suggested as ``sm_90``, not accepted, so that one chip has one cache key."""
    if not isinstance(name, str):
        raise TypeError(f"{parameter} must be a chip name (str) such as 'sm_90' or 'gfx942', "
                        f"got {type(name).__name__} {name!r}")
    if name in SUPPORTED_NVPTX_CHIPS or name in AMDGPU_CHIPS or name == CPU_CHIP:
        return name
    if name in NVPTX_CHIPS:
        raise CompileError(f"{parameter} {name!r} is older than {MIN_NVPTX_CHIP}, the oldest "
                           "NVIDIA chip pywave supports: libwavert needs a CUDA 9.0 or newer "
                           "driver, which does not run Fermi GPUs (sm_2x)")
    shown = name if len(name) <= 40 else name[:40] + "..."
    close = _closest_chip(name)
    if close:
        raise CompileError(f"{parameter} {shown!r} is not a chip the compiler knows; did you "
                           f"mean {close!r}? (chip names are exact and lower case: sm_90, "
                           "sm_90a, gfx942)")
    amd = name.lower().startswith("gfx")
    raise CompileError(f"{parameter} {shown!r} is not a chip the compiler knows; valid "
                       f"names: {', '.join(AMDGPU_CHIPS if amd else SUPPORTED_NVPTX_CHIPS)}"
                       + ("" if amd else "; AMD chips: gfx942, gfx90a, ... (see "
                          "pywave.frontend.validate.AMDGPU_CHIPS)") +
                       f"; the host CPU as a device: {CPU_CHIP!r}")


def targets(value: Any, parameter: str = "target") -> str:
    """The chips of a ``target=`` value as one comma-separated str (``"sm_80,sm_90"``): a chip
    name, several separated by commas (the CLI's ``--target sm_80,sm_90``), or a list/tuple
    of chip names. Each must be known (:func:`chip`); CompileError for an empty list, a chip
    named twice, or NVIDIA and AMD chips together; TypeError for another type."""
    if isinstance(value, (list, tuple)):
        if not all(isinstance(v, str) for v in value):
            raise TypeError(f"{parameter} must be a chip name or a list of chip names, got "
                            f"{value!r}")
        names = [v.strip() for v in value]
    elif isinstance(value, str):
        names = [v.strip() for v in value.split(",")] if "," in value else [value]
    else:
        chip(value, parameter)      # the TypeError naming the parameter
        names = []
    if not names:
        raise CompileError(f"{parameter}={value!r} names no chip; expected e.g. 'sm_90' or "
                           "['sm_80', 'sm_90']")
    for name in names:
        chip(name, parameter)
    if len(set(names)) != len(names):
        raise CompileError(f"{parameter}={value!r} names a chip twice")
    if CPU_CHIP in names and len(names) > 1:
        raise CompileError(f"{parameter}={value!r} mixes the CPU with GPU chips; one compile "
                           "builds for one backend")
    if len({n[:3] for n in names}) > 1:
        raise CompileError(f"{parameter}={value!r} mixes NVIDIA and AMD chips; one compile "
                           "builds for one backend")
    return ",".join(names)


def _closest_chip(name: str) -> str | None:
    """The valid chip ``name`` was probably meant to be: the same with case, ``-``/``_`` and a
    missing ``_`` after ``sm`` fixed (``SM_90``, ``sm90``, ``sm-90a`` -> ``sm_90``...), else
    the closest by spelling; None when nothing is close."""
    import difflib
    valid = SUPPORTED_NVPTX_CHIPS + AMDGPU_CHIPS
    folded = name.strip().lower().replace("-", "_")
    fixed = re.sub(r"^sm_?(?=[0-9])", "sm_", folded)
    if fixed in valid:
        return fixed
    if len(name) > 40:
        return None
    found = difflib.get_close_matches(fixed, valid, n=1, cutoff=0.8)
    return found[0] if found else None


def options(text: Any, *, target: Any = None, opt_level: Any = 2, format: Any = "auto",
            filename: Any = "<input>", dump_dir: Any = None, replacements: Any = None,
            keep_stages: Any = False, library: Any = False,
            run_entry: Any = None) -> str | None:
    """Check the options of a compile (:class:`pywave.pipeline.Pipeline`'s parameters)
    before any work: TypeError for a wrong type, CompileError for a wrong value (each naming
    the parameter). ``lowering`` checks itself (:class:`pywave.lowering.LoweringOptions`).
    Returns the chips of ``target`` as :func:`targets` gives them (None without one)."""
    source(text)
    chips = targets(target) if target is not None else None
    if isinstance(opt_level, bool) or not isinstance(opt_level, int):
        raise TypeError(f"opt_level must be an int (0-3), got {opt_level!r}")
    if opt_level not in OPT_LEVELS:
        raise CompileError(f"opt_level={opt_level} is out of range; expected 0, 1, 2 or 3")
    if not isinstance(format, str):
        raise TypeError(f"format must be a str, got {format!r}")
    if format not in FORMAT_CHOICES:
        raise CompileError(f"format={format!r} is not a binary format; expected one of "
                           f"{', '.join(FORMAT_CHOICES)}")
    if not isinstance(filename, str):
        raise TypeError(f"filename must be a str, got {type(filename).__name__}")
    if dump_dir is not None and not isinstance(dump_dir, (str, os.PathLike)):
        raise TypeError(f"dump_dir must be a path (str or os.PathLike), got {dump_dir!r}")
    if dump_dir is not None:
        path = os.fspath(dump_dir)
        if not isinstance(path, str) or "\0" in path:
            raise CompileError(f"dump_dir={path!r} is not a usable path: "
                               + ("it holds a NUL character, which no file name can hold"
                                  if isinstance(path, str) and "\0" in path else
                                  "expected a str path"))
    for name, value in (("keep_stages", keep_stages), ("library", library)):
        if not isinstance(value, bool):
            raise TypeError(f"{name} must be a bool, got {value!r}")
    if run_entry is not None and not isinstance(run_entry, str):
        raise TypeError(f"run_entry must be a function name (str), got {run_entry!r}")
    _replacements(replacements)
    return chips


def _replacements(replacements: Any) -> None:
    """``binaries=`` maps gpu.module names (str) to paths or bytes (TypeError otherwise)."""
    if replacements is None:
        return
    if not isinstance(replacements, Mapping):
        raise TypeError(f"binaries must be a dict {{gpu.module name: path or bytes}}, "
                        f"got {type(replacements).__name__}")
    for name, value in replacements.items():
        if not isinstance(name, str) or \
                not isinstance(value, (str, bytes, bytearray, os.PathLike)):
            raise TypeError(f"binaries[{name!r}] must map a gpu.module name (str) to a "
                            f"path or bytes, got {type(value).__name__}")


def isolate(value: Any) -> None:
    """``isolate=`` is a bool or None (TypeError otherwise)."""
    if value is not None and not isinstance(value, bool):
        raise TypeError(f"isolate must be a bool or None, got {value!r}")


def timeout(value: Any, parameter: str = "timeout") -> float:
    """``value`` as seconds: any real number (int, float, NumPy scalars, Fraction; not bool)
    that is finite and > 0 as a float. TypeError for a non-number, pywave.Error otherwise."""
    import numbers
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{parameter} must be a number of seconds, got {value!r}")
    try:
        seconds = float(value)
    except OverflowError:
        seconds = float("inf")
    if not seconds > 0 or seconds == float("inf"):
        raise Error(f"{parameter} must be a finite number of seconds > 0 (at most "
                    f"{1.7976931348623157e308:g}), got {value!r:.60}")
    return seconds


#: Largest MLIR text compiled (bytes of UTF-8 are at least its characters): larger input is
#: refused before parsing (MLIR's parser holds the whole text and its IR in memory).
MAX_TEXT_CHARS = 256 << 20


def source(text: Any) -> None:
    """MLIR text must be a str (an exact str: a subclass does not travel to the compile
    worker; :func:`pywave.frontend.source.text_and_name` converts one) of at most
    :data:`MAX_TEXT_CHARS` characters that encodes to UTF-8 (no lone surrogates) and holds no
    NUL (MLIR's parser stops at one: whatever follows would be silently dropped)."""
    if not isinstance(text, str):
        raise TypeError(f"compile() takes MLIR text (str), got {type(text).__name__}")
    if len(text) > MAX_TEXT_CHARS:
        raise CompileError(f"the MLIR text has {len(text)} characters, more than the "
                           f"{MAX_TEXT_CHARS} compiled (pywave.frontend.validate."
                           "MAX_TEXT_CHARS)")
    at = text.find("\0")
    if at >= 0:
        line = text.count("\n", 0, at) + 1
        column = at - (text.rfind("\n", 0, at) + 1) + 1
        raise CompileError(f"the MLIR text holds a NUL character at line {line}, column "
                           f"{column}; MLIR's parser would stop there and drop the rest",
                           line=line, column=column)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        line = text.count("\n", 0, exc.start) + 1
        column = exc.start - (text.rfind("\n", 0, exc.start) + 1) + 1
        raise CompileError(
            f"the MLIR text holds {exc.object[exc.start]!r} at line {line}, column {column}, "
            "a lone UTF-16 surrogate that is not valid Unicode text (UTF-8 cannot encode "
            "it); remove it or write the character it was meant to pair into",
            line=line, column=column) from None


#: Brackets nested deeper than this are refused before parsing: MLIR's parser and verifier
#: recurse per level and their time grows faster than linearly (100,000 levels: > 60 s).
MAX_NESTING = 1000
#: Escapes (a backslash and the character after it, not a line break), removed before
#: :data:`_SKIPPED` reads strings. In a string this is MLIR's lexing (an escape is read as a
#: unit, left to right; mlir/lib/AsmParser/Lexer.cpp); a backslash outside a string is a
#: lexer error ("unexpected character") where MLIR stops reading, so what the check makes
#: of the text after it never reaches MLIR.
_ESCAPES = re.compile(r"\\.")
#: What the nesting check skips, in text without escapes: a string (``"`` up to the next
#: ``"``; it cannot span a line), a ``//`` comment to the end of its line, and an
#: unterminated string with all that follows it: MLIR stops there ("expected '\"' in
#: string literal"), so the check stops there too. Both substitutions replace by "" (a
#: literal replacement: C speed, where a group reference would call Python per match), and
#: no alternative can match the same text two ways: one pass, however many quotes.
_SKIPPED = re.compile(r'"[^"\\\n]*"|//[^\n]*|"[\s\S]*')
#: The tokens of one line that the nesting check reads to name the column of a refusal: the
#: same reading as :data:`_ESCAPES` then :data:`_SKIPPED`, one token at a time.
_TOKENS = re.compile(r'\\.|"[^"\\\n]*(?:\\.[^"\\\n]*)*"|//[^\n]*|[(){}\[\]]')
_OPEN = "({["


def nesting(text: str) -> None:
    """CompileError when (), {} or [] outside strings and comments nest deeper than
    MAX_NESTING, naming the line and column where the limit is passed. Texts with no more
    opening brackets than that in all (strings and comments included) cannot nest deeper and
    are not scanned.

    Time proportional to the text, at C speed: two regular-expression substitutions
    (:data:`_ESCAPES`, :data:`_SKIPPED`) cut out escapes, strings and comments (line numbers
    are kept: none spans a line) and everything from the first unterminated string on
    (where MLIR's lexer stops: a first-error stop), and the depths are running sums
    (:func:`_depths`). Only the line of a refusal is scanned token by token, for its
    column."""
    if sum(map(text.count, _OPEN)) <= MAX_NESTING:
        return
    code = text
    if '"' in text or "//" in text:
        code = _SKIPPED.sub("", _ESCAPES.sub("", text) if "\\" in text else text)
    import numpy as np      # here, not at import: `import pywave` stays light
    raw = code.encode("utf-8", "surrogatepass")
    depths = _depths(raw)
    over = np.flatnonzero(depths > MAX_NESTING)
    if over.size == 0:
        return
    at = int(over[0])
    line = raw.count(b"\n", 0, at) + 1
    start = raw.rfind(b"\n", 0, at)
    start_depth = int(depths[start]) if start >= 0 else 0
    column = _column_over(_line(text, line), start_depth)
    raise CompileError(
        f"the MLIR text nests brackets deeper than {MAX_NESTING} levels at line "
        f"{line}, column {column}; flatten the nesting (regions, affine "
        "expressions, attributes)", line=line, column=column)


def _line(text: str, number: int) -> str:
    """Line ``number`` (1-based, lines split at ``\\n``) of ``text``."""
    import numpy as np
    raw = text.encode("utf-8", "surrogatepass")
    breaks = np.flatnonzero(np.frombuffer(raw, dtype=np.uint8) == 10)
    start = int(breaks[number - 2]) + 1 if number > 1 else 0
    end = int(breaks[number - 1]) if number - 1 < breaks.size else len(raw)
    return raw[start:end].decode("utf-8", "surrogatepass")


def _column_over(line: str, depth: int) -> int:
    """The 1-based column of the bracket in ``line`` (which starts at ``depth``) that first
    nests deeper than MAX_NESTING (the caller knows there is one)."""
    for match in _TOKENS.finditer(line):
        token = match.group()
        if token in _OPEN:
            depth += 1
            if depth > MAX_NESTING:
                return match.start() + 1
        elif len(token) == 1:
            depth = max(depth - 1, 0)
    return 1


_STEPS = None


def _depths(raw: bytes) -> "numpy.ndarray":
    """The bracket depth after each byte of ``raw`` (UTF-8 text without strings nor
    comments), computed at C speed: the running sum of +1/-1 less its running minimum
    (clamped at 0: a stray closer does not go below 0)."""
    import numpy as np
    global _STEPS
    if _STEPS is None:
        table = np.zeros(256, dtype=np.int8)
        for ch in _OPEN:
            table[ord(ch)] = 1
        for ch in ")}]":
            table[ord(ch)] = -1
        _STEPS = table
    data = np.frombuffer(raw, dtype=np.uint8)
    if data.size == 0:
        return np.zeros(0, dtype=np.int32)
    total = np.cumsum(_STEPS[data], dtype=np.int32)     # MAX_TEXT_CHARS fits an int32
    floor = np.minimum.accumulate(total)
    np.minimum(floor, 0, out=floor)
    np.subtract(total, floor, out=total)
    return total


def pipeline_value(what: str, value: str) -> str:
    """``value`` quoted for a pass-pipeline option (``"..."``): the quotes keep spaces and
    ``=``/``}`` inside one option; a value holding a quote or a control character cannot be
    quoted and is a CompileError naming ``what``."""
    if any(ch == '"' or ord(ch) < 0x20 or ch == "\x7f" for ch in value):
        raise CompileError(f"{what} {value!r} holds a double quote or a control character, "
                           "which cannot be passed to the MLIR pass pipeline; use a path "
                           "without them")
    return f'"{value}"'


# --------------------------------------------------------------------------------------------
# Module checks (in the worker, after parsing)
# --------------------------------------------------------------------------------------------
#: LLVM address spaces are 24-bit (llvm::PointerType); larger or negative ones assert.
MAX_ADDRESS_SPACE = (1 << 24) - 1
#: Kernel attributes holding launch bounds (each entry a positive 32-bit count).
LAUNCH_BOUND_ATTRIBUTES = ("known_block_size", "known_grid_size", "known_cluster_size",
                           "nvvm.maxntid", "nvvm.reqntid", "nvvm.cluster_dim",
                           "nvvm.minctasm", "nvvm.maxnreg", "nvvm.maxclusterrank",
                           "rocdl.flat_work_group_size", "rocdl.reqd_work_group_size")
MAX_LAUNCH_BOUND = (1 << 31) - 2
#: Launch-size hints and the largest launch each dimension (x, y, z) can have.
HINT_LIMITS = {"known_block_size": (1024, 1024, 64),
               "known_grid_size": ((1 << 31) - 1, 65535, 65535)}
#: Flattened LLVM arguments of one host function (see _check_argument_words).
MAX_HOST_ARGUMENT_WORDS = 4096
#: Ops that read or write memref elements (host code must not run them on device memory).
ELEMENT_ACCESS_OPS = frozenset({
    "memref.load", "memref.store", "memref.copy", "memref.atomic_rmw",
    "memref.generic_atomic_rmw", "vector.load", "vector.store", "vector.transfer_read",
    "vector.transfer_write", "vector.maskedload", "vector.maskedstore", "vector.gather",
    "vector.scatter", "vector.expandload", "vector.compressstore", "affine.load",
    "affine.store", "affine.vector_load", "affine.vector_store"})
#: View-like ops: their result aliases their first operand's memory.
VIEW_OPS = frozenset({"memref.subview", "memref.cast", "memref.reinterpret_cast",
                      "memref.view", "memref.collapse_shape", "memref.expand_shape",
                      "memref.transpose", "memref.memory_space_cast",
                      "memref.assume_alignment", "memref.extract_strided_metadata"})
#: Dialects the kernel lowering turns into LLVM (pywave.lowering.nvvm_pipeline:
#: convert-nvgpu-to-nvvm, convert-vector-to-llvm, convert-gpu-to-nvvm, convert-nvvm-to-llvm;
#: pywave.kernels.rocdl: convert-gpu-to-rocdl, which also lowers the amdgpu dialect).
KERNEL_DIALECTS = frozenset({"arith", "math", "memref", "vector", "gpu", "cf", "index",
                             "llvm", "nvvm", "nvgpu", "rocdl", "amdgpu", "builtin", "ub",
                             "func", "complex"})
#: Dialects the host lowering turns into LLVM (pywave.host.stage: async.execute run in place,
#: or, with async groups, MLIR's async lowering onto libwavert_runner's async runtime;
#: gpu-to-llvm, convert-to-llvm; nvgpu's TMA descriptors by convert-nvgpu-to-nvvm).
HOST_DIALECTS = frozenset({"arith", "math", "memref", "vector", "gpu", "cf", "index",
                           "llvm", "builtin", "ub", "func", "complex", "nvvm", "nvgpu",
                           "rocdl", "async"})


def _where(op: "ir.Operation") -> str:
    """:func:`pywave.mlirutil.where` (imported here: this module loads without MLIR)."""
    from ..mlirutil import where
    return where(op)


def single_threaded(ctx: "ir.Context") -> None:
    """Run MLIR on the calling thread only. With a multithreaded context MLIR verifies and
    runs passes on its thread pool, and a diagnostic emitted there (two ``gpu.func`` of one
    name: "redefinition of symbol") reaches the bindings' error-capture handler, which
    touches Python objects without the GIL: nanobind aborts the process (incref_check)."""
    ctx.enable_multithreading(False)


def top_level(mod: "ir.Module") -> None:
    """The parsed module must be one module pywave can use: no nested ``builtin.module``
    holding code (two top-level modules parse as one module holding both; a transform
    library, ``module attributes {transform.with_named_sequence}`` or one of transform ops
    only, is a schedule for ``passes=``, not code), and at least one function with a body
    (``func.func`` or an ``llvm.func`` of prelowered host code) or one ``gpu.module``.
    CompileError naming what was found."""
    names = [op.operation.name for op in mod.body.operations]
    nested = sum(op.operation.name == "builtin.module" and not _transform_library(op.operation)
                 for op in mod.body.operations)
    if nested:
        raise CompileError(
            f"the MLIR text holds {nested} nested module{'s' if nested > 1 else ''} "
            "(builtin.module inside the top-level module, or several top-level modules); "
            "pywave compiles one module: put the functions and gpu.modules directly in one "
            "top-level module")
    callable_ = any(op.operation.name == "gpu.module" or (
        op.operation.name in ("func.func", "llvm.func") and
        len(op.operation.regions[0].blocks) > 0)
        for op in mod.body.operations)
    if not callable_:
        found = ", ".join(sorted(set(names))) or "nothing"
        raise CompileError(f"the MLIR module has no function pywave can call: no func.func "
                           f"or llvm.func with a body and no gpu.module at its top level "
                           f"(found: {found})")


#: Most functions (with a body) one module may define: host ``func.func``/``llvm.func`` at
#: its top level plus ``gpu.func``/``func.func``/``llvm.func`` in its ``gpu.module``\ s. LLVM's
#: optimisation and code generation of the host object take time that grows faster than
#: the count (measured on a 2-core x86-64 machine, one trivial ``func.func`` each, isolated:
#: 10,000 in 20 s, 20,000 in 48 s; 100,000 took minutes and over 2 GiB), so a larger
#: module is refused right after parsing (in time proportional to its size: about 1 s for
#: 100,000) instead of after minutes. Split such a module into several compiles.
MAX_FUNCTIONS = 20_000


def function_count(mod: "ir.Module") -> None:
    """CompileError naming the count and :data:`MAX_FUNCTIONS` when ``mod`` defines more
    functions with a body than that (one pass over its top level and its gpu.modules'
    bodies)."""
    count = 0
    for op in mod.body.operations:
        op = op.operation
        if op.name == "gpu.module":
            blocks = op.regions[0].blocks
            count += sum(_defines(o.operation) for o in blocks[0].operations) if len(blocks) else 0
        else:
            count += _defines(op)
    if count > MAX_FUNCTIONS:
        raise CompileError(
            f"the MLIR module defines {count} functions, more than the {MAX_FUNCTIONS} "
            "pywave compiles in one module (pywave.frontend.validate.MAX_FUNCTIONS: LLVM's "
            "time grows faster than the count); split it into several modules and compile "
            "each")


_FUNCTION_OPS = frozenset({"func.func", "llvm.func", "gpu.func"})


def _defines(op: "ir.Operation") -> bool:
    """Whether ``op`` is a function with a body."""
    return op.name in _FUNCTION_OPS and len(op.regions) > 0 and len(op.regions[0].blocks) > 0


def _transform_library(op: "ir.Operation") -> bool:
    """Whether a nested ``builtin.module`` is a transform schedule: it carries
    ``transform.with_named_sequence`` or holds transform ops only."""
    if "transform.with_named_sequence" in op.attributes:
        return True
    body = op.regions[0].blocks[0].operations
    return len(body) > 0 and all(o.operation.name.startswith("transform.") for o in body)


def module(mod: "ir.Module") -> None:
    """Checks on the parsed module: memory spaces, allocas, kernel launch bounds, the element
    types of dense elements attributes (:func:`pywave.frontend.dense.check`)."""
    from mlir import ir

    _walk_checking(mod.operation, lambda op: _check_op(op, ir), ir)
    dense.check(mod)


def _walk_checking(root: "ir.Operation", check, ir) -> None:
    """Walk ``root`` calling ``check(op)``; the first CompileError it raises stops the walk
    and is raised after it (an exception must not cross MLIR's walk callback)."""
    problems: list[CompileError] = []

    def visit(op: "ir.Operation") -> "ir.WalkResult":
        try:
            check(op)
        except CompileError as exc:
            problems.append(exc)
            return ir.WalkResult.INTERRUPT
        return ir.WalkResult.ADVANCE

    root.walk(visit)
    if problems:
        raise problems[0]


def _check_op(op: "ir.Operation", ir) -> None:
    for result in op.results:
        _check_type(result.type, op, ir)
    for region in op.regions:
        for block in region.blocks:
            for arg in block.arguments:
                _check_type(arg.type, op, ir)
    if op.name in ("func.func", "gpu.func", "llvm.func") and "function_type" in op.attributes:
        attr = op.attributes["function_type"]
        if isinstance(attr, ir.TypeAttr) and isinstance(attr.value, ir.FunctionType):
            for t in list(attr.value.inputs) + list(attr.value.results):
                _check_type(t, op, ir)
    if op.name == "memref.alloca":
        _check_alloca(op, ir)
    if op.name == "memref.dim":
        _check_dim_index(op, ir)
    if op.name in ("gpu.func", "llvm.func"):
        _check_launch_bounds(op, ir)


#: Memory-space attributes the kernel lowerings map to address spaces (gpu-to-nvvm/rocdl:
#: #gpu.address_space; convert-amdgpu-to-rocdl: #amdgpu.address_space). The host lowering
#: (gpu-to-llvm, convert-to-llvm) maps neither: host code typed with one is refused by
#: :func:`host_spaces`.
MAPPED_SPACES = ("#gpu.address_space<", "#amdgpu.address_space<")


def _check_type(t: "ir.Type", op: "ir.Operation", ir) -> None:
    if not isinstance(t, (ir.MemRefType, ir.UnrankedMemRefType)):
        return
    space = t.memory_space
    if space is None:
        return
    if not isinstance(space, ir.IntegerAttr):
        if not str(space).startswith(MAPPED_SPACES):
            raise CompileError(
                f"{op.name} at {_where(op)} uses the type {t} with memory space {space}, "
                f"which no lowering maps to an LLVM address space; memory spaces are "
                f"0..{MAX_ADDRESS_SPACE} (LLVM address spaces) or, in kernel code, "
                "#gpu.address_space<global|workgroup|private> or (AMD kernels) "
                "#amdgpu.address_space<...>")
        return
    value = ir.IntegerAttr(space).value
    if not 0 <= value <= MAX_ADDRESS_SPACE:
        raise CompileError(f"{op.name} at {_where(op)} uses the type {t} with memory space "
                           f"{value}; memory spaces are 0..{MAX_ADDRESS_SPACE} (LLVM "
                           "address spaces), or #gpu.address_space<global|workgroup|private>")


def _check_dim_index(op: "ir.Operation", ir) -> None:
    """A ``memref.dim`` of a ranked memref whose index is a constant must name one of its
    dimensions: MLIR leaves an out-of-range index undefined (memref dialect, ``memref.dim``)
    and its folding asserts on one (ShapedType::isDynamicDim)."""
    source, index = op.operands[0], op.operands[1]
    if not isinstance(source.type, ir.MemRefType) or not isinstance(index, ir.OpResult):
        return
    owner = index.owner
    if owner.name not in ("arith.constant", "index.constant") or \
            not isinstance(owner.attributes["value"], ir.IntegerAttr):
        return
    value = ir.IntegerAttr(owner.attributes["value"]).value
    rank = ir.MemRefType(source.type).rank
    if not 0 <= value < rank:
        raise CompileError(f"memref.dim at {_where(op)} asks for dimension {value} of "
                           f"{source.type}, which has {rank} dimension(s): the index must be "
                           f"0..{rank - 1}")


def _check_alloca(op: "ir.Operation", ir) -> None:
    space = ir.MemRefType(op.results[0].type).memory_space
    if space is None:
        return
    text = str(space)
    private = text in ("#gpu.address_space<private>", "5 : i64", "5 : i32", "5")
    if private or (isinstance(space, ir.IntegerAttr) and ir.IntegerAttr(space).value in (0, 5)):
        return
    raise CompileError(
        f"memref.alloca at {_where(op)} allocates in memory space {text}: an alloca is "
        "thread-private stack memory (the default or #gpu.address_space<private>); for "
        "workgroup memory use a workgroup attribution of the gpu.func "
        "(workgroup(%buf : memref<..., #gpu.address_space<workgroup>>)), "
        "gpu.dynamic_shared_memory or a memref.global in the gpu.module")


def _check_launch_bounds(op: "ir.Operation", ir) -> None:
    for name in LAUNCH_BOUND_ATTRIBUTES:
        if name not in op.attributes:
            continue
        attr = op.attributes[name]
        values = _integers(attr, ir)
        if values is None:
            continue
        for value in values:
            if not 1 <= value <= MAX_LAUNCH_BOUND:
                fname = ir.StringAttr(op.attributes["sym_name"]).value \
                    if "sym_name" in op.attributes else "?"
                raise CompileError(
                    f"{op.name} @{fname} at {_where(op)} has {name} = {attr} with the entry "
                    f"{value}; launch bounds are 1..{MAX_LAUNCH_BOUND}")


def _integers(attr: "ir.Attribute", ir) -> list[int] | None:
    if isinstance(attr, ir.DenseI32ArrayAttr):
        return list(ir.DenseI32ArrayAttr(attr))
    if isinstance(attr, ir.DenseI64ArrayAttr):
        return list(ir.DenseI64ArrayAttr(attr))
    if isinstance(attr, ir.IntegerAttr):
        return [ir.IntegerAttr(attr).value]
    if isinstance(attr, ir.ArrayAttr):
        out = []
        for a in ir.ArrayAttr(attr):
            if not isinstance(a, ir.IntegerAttr):
                return None
            out.append(ir.IntegerAttr(a).value)
        return out
    return None


def prepared(mod: "ir.Module", *, device_arguments: bool = True,
             structured_kernels: bool = False) -> None:
    """Checks after the prepare pipeline (kernels outlined): host code touching device
    memory, ops that neither the kernel nor the host lowering handles. ``device_arguments``:
    the memref arguments of public host functions hold GPU memory (tensors from Python;
    False for ``pywave run``, whose entry takes none and whose other functions get what
    their callers pass). ``structured_kernels``: the CPU target's kernels keep their scf ops
    (:data:`pywave.frontend.prepare.CPU_PREPARE_PIPELINE`)."""
    from mlir import ir

    kernel_dialects = KERNEL_DIALECTS | {"scf"} if structured_kernels else KERNEL_DIALECTS
    for top in mod.body.operations:
        top = top.operation
        if top.name == "gpu.module":
            _drop_impossible_launch_hints(top, ir)
            _check_lowerable(top, kernel_dialects, "kernels (convert-gpu-to-nvvm/rocdl)", ir,
                             skip_self=True)
        elif top.name == "func.func":
            _check_argument_words(top, ir)
            _check_lowerable(top, HOST_DIALECTS, "host (gpu-to-llvm, convert-to-llvm)", ir)
            _check_host_access(top, ir, device_arguments and not _private(top, ir))


def host_spaces(mod: "ir.Module") -> None:
    """Host code typed with a :data:`MAPPED_SPACES` memory space, anywhere in a type
    (``!async.value<memref<...>>``, a memref of memrefs) or in a type attribute (a
    ``memref.global``'s type, a function type), is a CompileError naming the op, its place
    and the type. Run on the module as it enters the host lowering (kernels outlined and
    serialised, async regions inlined or lowered to the async runtime, dead values gone): the host lowering maps no such
    space, and MLIR 22 then reports a failed type conversion inside a pass that still
    succeeds, which aborts the Python bindings (fuzz seed 34, case 90)."""
    from mlir import ir

    def types(op: "ir.Operation"):
        yield from (r.type for r in op.results)
        for region in op.regions:
            for block in region.blocks:
                yield from (a.type for a in block.arguments)
        for name in op.attributes:
            attr = op.attributes[name]
            if isinstance(attr, ir.TypeAttr):
                yield attr.value

    def check(op: "ir.Operation") -> None:
        for t in types(op):
            text = str(t)
            space = next((s for s in MAPPED_SPACES if s in text), None)
            if space is not None and not dense.in_gpu_module(op):   # the kernel path's
                raise CompileError(
                    f"{op.name} at {_where(op)} uses the type {t} in host code; the host "
                    f"lowering (gpu-to-llvm) maps no {space[:-1]} memory space to an LLVM "
                    "address space: outside a gpu.module write GPU global memory as memory "
                    "space 1 (or none), in the kernel's signature too")

    _walk_checking(mod.operation, check, ir)


def _drop_impossible_launch_hints(gmod: "ir.Operation", ir) -> None:
    """Remove ``known_block_size``/``known_grid_size`` hints outside the GPU's launch limits.
    gpu-kernel-outlining copies them from constant launch sizes (an index constant above
    2^31 even wraps to a negative i32), and NVVM's range metadata then asserts in LLVM
    (ConstantRange, APInt). They are hints only: such a launch is refused at run time with
    an ArgumentError naming the limit, as one of a non-constant size is."""
    for op in gmod.regions[0].blocks[0].operations:
        op = op.operation
        if op.name != "gpu.func":
            continue
        for name, limits in HINT_LIMITS.items():
            if name not in op.attributes:
                continue
            values = _integers(op.attributes[name], ir) or []
            if any(not 1 <= v <= hi for v, hi in zip(values, limits)):
                log.debug("dropping %s = %s of @%s: outside the launch limits %s", name,
                          values, ir.StringAttr(op.attributes["sym_name"]).value, limits)
                del op.attributes[name]


def _check_argument_words(func: "ir.Operation", ir) -> None:
    """Host functions pass at most MAX_HOST_ARGUMENT_WORDS LLVM arguments: LLVM's O2 module
    pipeline takes time quadratic in the arguments of the packed entry's call (1,000
    memrefs, 5,000 words: 4 s; 10,000 words: 20 s)."""
    attr = func.attributes["function_type"]
    words = 0
    for t in ir.FunctionType(ir.TypeAttr(attr).value).inputs:
        words += 3 + 2 * ir.MemRefType(t).rank if isinstance(t, ir.MemRefType) else 1
    if words > MAX_HOST_ARGUMENT_WORDS:
        name = ir.StringAttr(func.attributes["sym_name"]).value
        raise CompileError(
            f"host function @{name} at {_where(func)} takes {words} argument words (a rank-r "
            f"memref is 3 + 2r, a scalar 1); the limit is {MAX_HOST_ARGUMENT_WORDS}: pass "
            "many scalars in one memref instead")


def _check_lowerable(root: "ir.Operation", dialects: frozenset[str], stage: str, ir,
                     skip_self: bool = False) -> None:
    found: list[ir.Operation] = []

    def visit(op: ir.Operation) -> ir.WalkResult:
        if op.name.split(".", 1)[0] not in dialects:
            found.append(op)
            return ir.WalkResult.INTERRUPT
        return ir.WalkResult.ADVANCE

    root.walk(visit, ir.WalkOrder.PRE_ORDER)      # the outermost unlowerable op
    if found:
        op = found[0]
        hint = _tensor_hint(op, ir)
        raise CompileError(
            f"{op.name} at {_where(op)} cannot be lowered by the {stage} stage: it lowers the "
            f"{', '.join(sorted(dialects - {'builtin', 'ub'}))} dialects (and linalg on "
            f"memrefs, to loops); {hint or 'rewrite the op with those'} (the IR after each "
            "stage is in a dump: dump_dir= or $PYWAVE_DUMP_DIR)")


def no_host_tensors(mod: "ir.Module") -> None:
    """CompileError naming the first op outside ``gpu.module`` bodies that works on tensors
    (a tensor operand or result, or a ``tensor``/``bufferization`` op): the prepare stage's
    loop lowering would fail on it with a message about ``scf.for`` instead
    (:func:`_tensor_hint` says what to run)."""
    from mlir import ir

    found: list[ir.Operation] = []

    def visit(op: "ir.Operation") -> "ir.WalkResult":
        if op.name == "gpu.module":
            return ir.WalkResult.SKIP
        if op.name != "func.func" and _tensor_hint(op, ir):
            found.append(op)
            return ir.WalkResult.INTERRUPT
        return ir.WalkResult.ADVANCE

    mod.operation.walk(visit, ir.WalkOrder.PRE_ORDER)
    if found:
        op = found[0]
        raise CompileError(f"{op.name} at {_where(op)} cannot be lowered by pywave: "
                           f"{_tensor_hint(op, ir)}")


def _tensor_hint(op: "ir.Operation", ir) -> str:
    """How to lower an op on tensors (pywave does not bufferize: MLIR's bufferization
    changes function signatures, which a caller would see), "" for another op."""
    types = [v.type for v in op.operands] + [v.type for v in op.results]
    if op.name.split(".", 1)[0] not in ("tensor", "bufferization") and not any(
            isinstance(t, (ir.RankedTensorType, ir.UnrankedTensorType)) for t in types):
        return ""
    return ("it works on tensors, which pywave does not bufferize: turn them into memrefs "
            "first with MLIR's one-shot-bufferize, e.g. --pass-pipeline='builtin.module("
            "one-shot-bufferize{bufferize-function-boundaries})' (passes= of pywave.compile)")


def _private(func: "ir.Operation", ir) -> bool:
    """``func`` is a private function (called by host code only, never from Python)."""
    return "sym_visibility" in func.attributes and \
        ir.StringAttr(func.attributes["sym_visibility"]).value == "private"


def _check_host_access(func: "ir.Operation", ir, arguments: bool) -> None:
    """CompileError for element reads/writes in host code of a memref that holds device
    memory: an argument of the function when ``arguments`` (tensors passed from Python
    live on the GPU) or a ``gpu.alloc`` result (not ``host_shared``), followed through
    view-like ops."""
    if not func.regions[0].blocks:
        return
    fname = ir.StringAttr(func.attributes["sym_name"]).value
    device: dict[Any, str] = {}
    for i, arg in enumerate(func.regions[0].blocks[0].arguments if arguments else ()):
        if isinstance(arg.type, (ir.MemRefType, ir.UnrankedMemRefType)):
            device[arg] = f"argument #{i} of host function @{fname}"
    bad: list[tuple[ir.Operation, str]] = []

    def visit(op: ir.Operation) -> ir.WalkResult:
        if op.name == "gpu.alloc" and "hostShared" not in op.attributes:
            device[op.results[0]] = f"the gpu.alloc at {_where(op)}"
        elif op.name in VIEW_OPS and len(op.operands) and op.operands[0] in device:
            for result in op.results:
                if isinstance(result.type, (ir.MemRefType, ir.UnrankedMemRefType)):
                    device[result] = device[op.operands[0]]
        elif op.name in ELEMENT_ACCESS_OPS or op.name.startswith("linalg."):
            for operand in op.operands:
                if operand in device:
                    bad.append((op, device[operand]))
                    return ir.WalkResult.INTERRUPT
        return ir.WalkResult.ADVANCE

    func.walk(visit)
    if bad:
        op, origin = bad[0]
        raise CompileError(
            f"{op.name} at {_where(op)} reads or writes the elements of {origin} on the host, "
            "but that memref holds GPU memory; access it in a kernel (gpu.launch_func) or "
            "copy it with gpu.memcpy into host memory first", )
