"""Reading MLIR source files. MLIR source is UTF-8 (MLIR's LangRef); a file that is not is
refused with the offending byte, its offset and line, never a UnicodeDecodeError."""

from __future__ import annotations

import os
import stat
import sys

from .errors import CompileError


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


def text_and_name(text: "str | os.PathLike[str]") -> tuple[str, str]:
    """(MLIR text, name for diagnostics) of what ``compile``/``export``/``compile_many`` take:
    the text itself (named ``<input>``), or a path whose file is read (:func:`read_mlir`)."""
    if isinstance(text, os.PathLike):
        return read_mlir(text), os.fspath(text)
    return text, "<input>"


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
