"""What the compile entry points take as the module: text, a file, or a module object.

What ``compile``, ``compile_many`` and ``export`` take as the module: MLIR text, a file,
or a module object of MLIR's Python bindings (:func:`text_and_name`).

MLIR source is UTF-8 (MLIR's LangRef); a file that is not is refused with the offending
byte, its offset and line, never a UnicodeDecodeError. Nothing here imports MLIR: a module
object is printed by its own bindings, in the caller's process, and the compile (in a worker)
parses the text.
"""

from __future__ import annotations

import os
import stat
import sys
from typing import Any

from ..errors import CompileError

#: A module object of an MLIR build's Python bindings (see :func:`module_text`): typed loosely,
#: since the bindings of other builds (IREE's ``iree.compiler.ir``) are other classes.
MlirModule = Any

#: What the module argument may be, for TypeErrors.
ACCEPTED = ("MLIR text (str), a path to an .mlir file (os.PathLike), or an MLIR module object "
            "(mlir.ir.Module, Operation or OpView, or another MLIR build's, such as "
            "iree.compiler.ir.Module: an object with get_asm() or operation.get_asm())")


def read_mlir(path: "str | os.PathLike[str]") -> str:
    """The text of the MLIR file at ``path``.

    Raises
    ------
    CompileError
        The file cannot be read (naming the OS error), is not a regular file (a FIFO, a
        device, a folder: reading those could block or never end), or is not UTF-8 (naming
        the byte, its offset and line).
    """
    path = os.fspath(path)
    try:
        # O_NONBLOCK: opening a FIFO for reading returns at once instead of waiting for a
        # writer, so that it can be refused below.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise CompileError(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise CompileError(f"cannot read {path}: it is {_kind(mode)}, not a regular file "
                               "(the command line reads standard input from '-')")
        os.set_blocking(fd, True)
        with os.fdopen(fd, "rb") as fh:
            fd = -1
            raw = fh.read()
    except OSError as exc:
        raise CompileError(f"cannot read {path}: {exc.strerror or exc}") from None
    finally:
        if fd >= 0:
            os.close(fd)
    return decode(raw, path)


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "a special file"


def decode(raw: bytes, name: str) -> str:
    """``raw`` as UTF-8 text; CompileError naming ``name``, the byte, its offset and line when
    it is not UTF-8."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise CompileError(f"{name} is not UTF-8 text: byte 0x{raw[exc.start]:02x} at offset "
                           f"{exc.start} (line {line}) cannot be decoded; MLIR files are "
                           "UTF-8") from None


def read_input(path: str) -> tuple[str, str]:
    """(MLIR text, name for diagnostics) of a command-line input: ``-`` reads standard input
    (named ``<stdin>``), anything else is a file (:func:`read_mlir`)."""
    if path == "-":
        return decode(sys.stdin.buffer.read(), "<stdin>"), "<stdin>"
    return read_mlir(path), path


def text_and_name(text: "str | os.PathLike[str] | MlirModule") -> tuple[str, str]:
    """(MLIR text, name for diagnostics) of what ``compile``/``export``/``compile_many`` take:
    the text itself (named ``<input>``), a path whose file is read (:func:`read_mlir`), or a
    module object printed by its bindings (:func:`module_text`, named ``<Module object>``
    after its class).

    Raises
    ------
    TypeError
        Anything else, naming what is accepted (:data:`ACCEPTED`).
    CompileError
        An unreadable file, or a module object whose printing fails.
    """
    if isinstance(text, str):
        return str(text), "<input>"    # a subclass as a plain str: it travels to the worker
    if isinstance(text, (bytes, bytearray, memoryview)):
        raise TypeError(f"the module must be {ACCEPTED}; got {type(text).__name__}: decode "
                        "MLIR source first (text.decode('utf-8')), or pass the path of its "
                        "file")
    if isinstance(text, os.PathLike):
        return read_mlir(text), os.fspath(text)
    printed = module_text(text)
    if printed is None:
        raise TypeError(f"the module must be {ACCEPTED}; got {type(text).__name__}")
    return printed, f"<{type(text).__name__} object>"


def module_text(obj: object) -> str | None:
    """The MLIR text of a module object of any MLIR build's Python bindings, None when
    ``obj`` is none.

    Accepted: an object with a callable ``get_asm`` (an ``Operation`` or ``OpView``), or one
    whose ``operation`` attribute has it (a ``Module``); the text is ``get_asm()`` with the
    bindings' defaults: the custom assembly form, without locations, large constants in
    full. The text (not bytecode, whose format version ties it to one MLIR build) is what is
    compiled and what the compile cache keys on, so an object of another MLIR build (IREE's)
    compiles when its text uses the upstream dialects this MLIR knows. The object is only
    read (left unchanged, usable afterwards); the compile never touches its context.

    Raises
    ------
    CompileError
        ``get_asm()`` failed or did not return a str (naming the object's type and the
        error).
    """
    get_asm = getattr(obj, "get_asm", None)
    if not callable(get_asm):
        get_asm = getattr(getattr(obj, "operation", None), "get_asm", None)
    if not callable(get_asm):
        return None
    try:
        printed = get_asm()
    except Exception as exc:  # noqa: BLE001 - any failure of foreign bindings
        raise CompileError(f"cannot print the {type(obj).__name__} object as MLIR text: "
                           f"{type(exc).__name__}: {exc}") from None
    if not isinstance(printed, str):
        raise CompileError(f"{type(obj).__name__}.get_asm() returned "
                           f"{type(printed).__name__}, not MLIR text (str)")
    return printed


#: A str longer than this, or holding a newline, is never taken for a file name by
#: :func:`path_hint`.
_PATH_MAX = 4096


def path_hint(text: object) -> str:
    """A sentence for a compile error when ``text`` (a str, so MLIR text) is the name of an
    existing file: the caller meant ``pathlib.Path(text)``. "" otherwise."""
    if not isinstance(text, str) or len(text) > _PATH_MAX or "\n" in text:
        return ""
    name = text.strip()
    try:
        if not name or not os.path.isfile(name):
            return ""
    except (OSError, ValueError):      # a NUL byte, a name too long for the system
        return ""
    return (f"\nhint: the text {name!r} names an existing file, but a str is MLIR text: "
            f"pass pathlib.Path({name!r}) to compile that file")


def with_path_hint(exc: CompileError, text: object) -> CompileError:
    """``exc`` itself, or a new CompileError with its message and location plus
    :func:`path_hint`'s sentence when ``text`` names an existing file."""
    hint = path_hint(text)
    if not hint:
        return exc
    return CompileError(f"{exc}{hint}", filename=exc.filename, line=exc.line,
                        column=exc.column, source_line=exc.source_line)
