"""Reading MLIR source files. MLIR source is UTF-8 (MLIR's LangRef); a file that is not is
refused with the offending byte, its offset and line, never a UnicodeDecodeError."""

from __future__ import annotations

import os

from .errors import CompileError


def read_mlir(path: "str | os.PathLike[str]") -> str:
    """The text of the MLIR file at ``path``.

    Raises
    ------
    CompileError
        The file cannot be read (naming the OS error) or is not UTF-8 (naming the byte, its
        offset and line).
    """
    path = os.fspath(path)
    try:
        with open(path, "rb") as fh:
            raw = fh.read()
    except OSError as exc:
        raise CompileError(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise CompileError(f"{path} is not UTF-8 text: byte 0x{raw[exc.start]:02x} at offset "
                           f"{exc.start} (line {line}) cannot be decoded; MLIR files are "
                           "UTF-8") from None


def text_and_name(text: "str | os.PathLike[str]") -> tuple[str, str]:
    """(MLIR text, name for diagnostics) of what ``compile``/``export``/``compile_many`` take:
    the text itself (named ``<input>``), or a path whose file is read (:func:`read_mlir`)."""
    if isinstance(text, os.PathLike):
        return read_mlir(text), os.fspath(text)
    return text, "<input>"
