"""Kernel binaries given from outside the compile: ``compile(text, binaries={...})``.

A replacement swaps the compiled image of one ``gpu.binary`` (a ``gpu.module`` after
``gpu-module-to-binary``, or a ``gpu.binary`` of the input) for a file's bytes, keeping the
host code: a hand-tuned PTX, a cubin from ``nvcc -cubin``, a fatbin, or an AMD hsaco. The
format is read from the bytes (ELF ``e_machine``: EM_CUDA cubin, EM_AMDGPU hsaco; the fatbin
magic; PTX text), the file extension only settles text that does not look like PTX. No MLIR
import: the compile-cache key hashes the loaded bytes.
"""

from __future__ import annotations

import os
import struct
from typing import Mapping, Union

from .. import image_params
from ..image_params import EM_AMDGPU, EM_CUDA, FATBIN_MAGIC
from ..errors import CompileError
from ..program import Binary, Target, format_of_extension, ptx_image

#: What a replacement may be: a path (str or PathLike) or the image bytes themselves.
Source = Union[str, "os.PathLike[str]", bytes, bytearray]

def detect(data: bytes, hint: str = "") -> str:
    """Format of a kernel image: ``"ptx"``, ``"cubin"``, ``"fatbin"`` or ``"hsaco"``.
    ``hint`` is a file name whose extension settles text without PTX directives."""
    if data[:4] == b"\x7fELF" and len(data) >= 20:
        machine, = struct.unpack_from("<H", data, 18)
        if machine == EM_CUDA:
            return "cubin"
        if machine == EM_AMDGPU:
            return "hsaco"
        raise CompileError(f"{hint or 'binary'}: an ELF file for machine {machine}, neither a "
                           f"CUDA cubin (EM_CUDA = {EM_CUDA}) nor an AMD hsaco "
                           f"(EM_AMDGPU = {EM_AMDGPU})")
    if len(data) >= 4 and struct.unpack_from("<I", data, 0)[0] == FATBIN_MAGIC:
        return "fatbin"
    head = data[:65536]
    if b".target" in head or b".version" in head:
        return "ptx"
    if format_of_extension(hint) == "ptx":
        return "ptx"
    raise CompileError(f"{hint or 'binary'}: cannot tell the format: not an ELF cubin/hsaco, "
                       "not a fatbin, and no PTX '.version'/'.target' directive")


def load(name: str, source: Source) -> tuple[str, bytes]:
    """(format, bytes) of the replacement for ``gpu.binary @name``; PTX gets a final NUL."""
    if isinstance(source, (bytes, bytearray)):
        data, hint = bytes(source), ""
    elif isinstance(source, (str, os.PathLike)):
        hint = os.fspath(source)
        try:
            with open(hint, "rb") as fh:
                data = fh.read()
        except OSError as exc:
            raise CompileError(f"binaries[{name!r}]: cannot read {hint}: "
                               f"{exc.strerror or exc}") from None
    else:
        raise TypeError(f"binaries[{name!r}] must be a path or bytes, got "
                        f"{type(source).__name__}")
    if not data:
        raise CompileError(f"binaries[{name!r}]: {hint or 'the image'} is empty")
    fmt = detect(data, hint)
    return fmt, ptx_image(data) if fmt == "ptx" else data


def load_all(replacements: Mapping[str, Source] | None) -> dict[str, tuple[str, bytes]]:
    """:func:`load` each entry (an empty dict for None)."""
    if not replacements:
        return {}
    if not isinstance(replacements, Mapping):
        raise TypeError("binaries must map gpu.module names to paths or bytes, e.g. "
                        "{'kernels': 'k.ptx'}")
    return {str(name): load(str(name), src) for name, src in replacements.items()}


def digest(loaded: Mapping[str, tuple[str, bytes]]) -> dict[str, str]:
    """name -> sha256 of the replacement bytes (for the compile-cache key)."""
    import hashlib  # here, not at import: hashlib loads OpenSSL, a cost on every warm start
    return {n: hashlib.sha256(d).hexdigest() for n, (_, d) in sorted(loaded.items())}


def replacement_params(compiled: Binary, fmt: str, data: bytes
                       ) -> tuple[tuple[str, int, tuple[int, ...]], ...]:
    """The kernel parameters a replacement of ``compiled`` takes, as ``Binary.params``, read
    from the image (:func:`pywave.image_params.param_counts`): a kernel that pywave compiled
    with fewer parameters than MLIR's ABI (``compiled.params``) takes the ones kept where the
    image's kernel has that many (pywave's own image given back), MLIR's whole ABI where it has
    that many (an image built with ``keep_kernel_params`` or by other tools). Kernels pywave
    dropped nothing of take MLIR's ABI, which the host stage checks against the image.

    Raises
    ------
    CompileError
        A kernel of the image takes neither count, or its count cannot be read (a compressed
        fatbin) while the two differ: the message names the kernel, the counts and the fix.
    """
    if not compiled.params:
        return ()
    label = f"binaries[{compiled.name!r}]"
    counts = image_params.param_counts(fmt, data, label)
    kept_entries = []
    for entry in compiled.params:
        kernel, before, kept = entry
        declared = None if counts is None else counts.get(kernel)
        if declared == len(kept):
            kept_entries.append(entry)
        elif counts is None:
            raise CompileError(
                f"{label}: the {fmt} holds kernel {kernel} compressed, so pywave cannot read "
                f"whether it takes the {len(kept)} parameters pywave kept or MLIR's {before}; "
                "give the cubin or PTX instead, or build the image and this module with "
                "keep_kernel_params=True (--keep-kernel-params), which keeps MLIR's ABI")
        elif declared is not None and declared != before:
            raise CompileError(
                f"{label}: kernel {kernel} in the {fmt} takes {declared} parameters, but a "
                f"launch passes either the {len(kept)} pywave kept or MLIR's {before} "
                "(keep_kernel_params=True); give an image built from this module, with the "
                "same keep_kernel_params")
    return tuple(kept_entries)


def replace(binaries: list[Binary], replacements: Mapping[str, tuple[str, bytes]],
            target: Target) -> list[Binary]:
    """``binaries`` with the images named in ``replacements`` (as :func:`load_all` returns
    them) swapped in (their kernel parameters: :func:`replacement_params`).

    Raises
    ------
    CompileError
        A name that is not a ``gpu.module``/``gpu.binary`` of the module, an unreadable file,
        an unknown format, or a format the backend cannot load.
    """
    if not replacements:
        return binaries
    names = [b.name for b in binaries]
    for name in replacements:
        if name not in names:
            raise CompileError(f"binaries: the module has no gpu.module or gpu.binary @{name}; "
                               f"it has: {', '.join('@' + n for n in names) or 'none'}")
    out = []
    for b in binaries:
        if b.name not in replacements:
            out.append(b)
            continue
        fmt, data = replacements[b.name]
        if fmt not in target.formats:
            raise CompileError(f"binaries[{b.name!r}] is a {fmt} image but the module targets "
                               f"{b.chip} ({target.backend}), which loads "
                               f"{', '.join(target.formats)}")
        out.append(Binary(b.name, fmt, data, b.chip,
                          params=replacement_params(b, fmt, data)))
    return out
