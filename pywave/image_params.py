"""The kernel parameters a kernel image declares, read from the image itself.

A launch must pass exactly the parameters the kernel in the image was built with: a cubin
launched with MLIR's whole ABI (16 words for three 1-D memrefs and an index) where its kernel
takes the 4 pywave kept reads past the parameter buffer on the GPU. So every image that reaches
the host stage, whatever its origin (pywave's own, ``binaries=``, a ``gpu.binary`` of the
input), is read for each kernel's parameter count:

- **PTX**: each ``.entry name(.param ..., ...)`` (PTX ISA, "Kernel Function Parameters").
- **cubin** (ELF, ``e_machine`` EM_CUDA): the section ``.nv.info.<kernel>`` holds the kernel's
  attributes as records ``u8 format, u8 attribute, u16 value-or-size`` followed, for the
  format EIFMT_SVAL (4), by ``size`` bytes. Each parameter has one EIATTR_KPARAM_INFO (0x17)
  record of 12 bytes: ``u32 index, u16 ordinal, u16 offset, u32 flags``, the parameter's size
  in bytes in bits 18-31 of the flags. The kernel's count is the number of distinct ordinals
  (a kernel without parameters has no such record). This is the layout ``cuobjdump -elf``
  prints; it is NVIDIA's, undocumented but stable since Kepler.
- **fatbin** (magic 0xBA55ED50): a 16-byte header (``u32 magic, u16 version, u16 header
  size, u64 payload size``), then entries of ``u16 kind`` (1 PTX, 2 ELF), ``u16``, ``u32
  header size``, ``u64 payload size``, ..., ``u64 flags`` at offset 40 (0x2000: the payload is
  compressed); each uncompressed entry is read as PTX or cubin. A compressed entry cannot be
  read here (no decompressor is a dependency).
- **hsaco** (ELF, EM_AMDGPU): the note of owner ``AMDGPU`` and type NT_AMDGPU_METADATA (32)
  holds MessagePack metadata (LLVM AMDGPUUsage, "Code Object V3+ Metadata"): ``amdhsa.kernels``,
  each with ``.name`` and ``.args``; the arguments a launch passes are those whose
  ``.value_kind`` does not start with ``hidden_`` (the runtime fills those).

Nothing here imports MLIR. Every reader bounds each offset by the data's length: a damaged
image is a :class:`~pywave.errors.CompileError`, never an exception from ``struct``.
"""

from __future__ import annotations

import re
import struct
from typing import Any, Optional

from .errors import CompileError

#: ELF machine numbers (System V gABI registry).
EM_CUDA = 190
EM_AMDGPU = 224
FATBIN_MAGIC = 0xBA55ED50

_PTX_ENTRY = re.compile(rb"\.entry\s+([\w$.]+)\s*\(([^)]*)\)")
_PTX_NO_PARAMS = re.compile(rb"\.entry\s+([\w$.]+)(?![\w$.])\s*(?=[{.])")
_NV_INFO = ".nv.info."
_EIFMT_SVAL = 4
_EIATTR_KPARAM_INFO = 0x17
_FATBIN_PTX, _FATBIN_ELF = 1, 2
_FATBIN_COMPRESSED = 0x2000
_NT_AMDGPU_METADATA = 32
_SHT_NOTE = 7

#: {kernel: parameter count}; None where the image cannot be read for them.
Counts = Optional[dict[str, int]]


def param_counts(fmt: str, data: bytes, name: str = "image") -> Counts:
    """{kernel: the number of parameters a launch passes} for every kernel of an image of
    format ``fmt`` (``"ptx"``, ``"cubin"``, ``"fatbin"``, ``"hsaco"``); None where the image
    holds them only compressed (a fatbin of compressed entries). ``name`` names the image in
    errors.

    Raises
    ------
    CompileError
        The image is damaged (an offset past its end), or a fatbin's entries disagree on a
        kernel's count.
    """
    try:
        if fmt == "ptx":
            return ptx_counts(data)
        if fmt == "cubin":
            return _cubin_counts(data)
        if fmt == "hsaco":
            return _hsaco_counts(data)
        if fmt == "fatbin":
            return _fatbin_counts(data, name)
    except (struct.error, IndexError, ValueError, UnicodeDecodeError) as exc:
        raise CompileError(f"{name}: the {fmt} image is damaged: its kernel parameter "
                           f"records cannot be read ({exc})") from None
    return None


def ptx_counts(data: bytes) -> dict[str, int]:
    """{kernel: its parameter count} of each ``.entry`` of PTX text."""
    counts = {m.group(1).decode(): 0 for m in _PTX_NO_PARAMS.finditer(data)}
    counts.update((m.group(1).decode(), m.group(2).count(b".param"))
                  for m in _PTX_ENTRY.finditer(data))
    return counts


def _elf_sections(data: bytes) -> list[tuple[str, int, bytes]]:
    """(name, type, contents) of each section of a little-endian ELF64 file."""
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise ValueError("not a little-endian 64-bit ELF file")
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    headers = [struct.unpack_from("<IIQQQQ", data, shoff + i * shentsize) for i in range(shnum)]
    _, _, _, _, str_off, str_size = headers[shstrndx]
    strings = _slice(data, str_off, str_size)
    out = []
    for name, kind, _, _, off, size in headers:
        end = strings.index(b"\0", name)
        out.append((strings[name:end].decode(), kind, b"" if kind == 8 else _slice(data, off, size)))
    return out


def _slice(data: bytes, off: int, size: int) -> bytes:
    if off + size > len(data):
        raise ValueError(f"a section of {size} bytes at offset {off} ends past the "
                         f"{len(data)}-byte file")
    return data[off:off + size]


def _cubin_counts(data: bytes) -> dict[str, int]:
    return {name[len(_NV_INFO):]: _kparam_count(body) for name, _, body in _elf_sections(data)
            if name.startswith(_NV_INFO)}


def _kparam_count(info: bytes) -> int:
    """The number of distinct parameter ordinals among a ``.nv.info.<kernel>`` section's
    EIATTR_KPARAM_INFO records."""
    ordinals = set()
    pos = 0
    while pos + 4 <= len(info):
        fmt, attr, value = struct.unpack_from("<BBH", info, pos)
        pos += 4
        if fmt != _EIFMT_SVAL:
            continue
        if pos + value > len(info):
            raise ValueError(f"an attribute record of {value} bytes runs past its section")
        if attr == _EIATTR_KPARAM_INFO and value >= 8:
            ordinals.add(struct.unpack_from("<H", info, pos + 4)[0])
        pos += value
    return len(ordinals)


def _fatbin_counts(data: bytes, name: str) -> Counts:
    _, _, header_size, total = struct.unpack_from("<IHHQ", data, 0)
    pos, end = header_size, min(len(data), header_size + total)
    counts: dict[str, int] = {}
    unread = False
    while pos + 48 <= end:
        kind, _, entry_header, size = struct.unpack_from("<HHIQ", data, pos)
        flags, = struct.unpack_from("<Q", data, pos + 40)
        body = _slice(data, pos + entry_header, size)
        pos += entry_header + size
        if flags & _FATBIN_COMPRESSED:
            unread = True
            continue
        found = ptx_counts(body) if kind == _FATBIN_PTX else \
            _cubin_counts(body) if kind == _FATBIN_ELF else {}
        for kernel, count in found.items():
            if counts.setdefault(kernel, count) != count:
                raise CompileError(f"{name}: the fatbin's entries disagree on the parameters "
                                   f"of kernel {kernel}: {counts[kernel]} and {count}")
    return None if unread and not counts else counts


def _hsaco_counts(data: bytes) -> dict[str, int]:
    meta = amdgpu_metadata(data)
    return {k[".name"]: sum(not a.get(".value_kind", "").startswith("hidden_")
                            for a in k.get(".args", ()))
            for k in meta.get("amdhsa.kernels", ())}


def amdgpu_metadata(data: bytes) -> dict:
    """The decoded MessagePack of an hsaco's NT_AMDGPU_METADATA note (``amdhsa.version``,
    ``amdhsa.kernels``...; LLVM AMDGPUUsage), ``{}`` when the ELF has none.

    Raises
    ------
    struct.error, IndexError, ValueError
        A damaged ELF or note (:func:`param_counts` turns these into a CompileError).
    """
    for _, kind, body in _elf_sections(data):
        if kind != _SHT_NOTE:
            continue
        for owner, note_type, desc in _notes(body):
            if owner == b"AMDGPU" and note_type == _NT_AMDGPU_METADATA:
                meta, _ = _unpack(desc, 0)
                return meta if isinstance(meta, dict) else {}
    return {}


def _notes(body: bytes):
    """(owner, type, descriptor) of each ELF note (gABI: sizes padded to 4 bytes)."""
    pos = 0
    while pos + 12 <= len(body):
        namesz, descsz, kind = struct.unpack_from("<III", body, pos)
        pos += 12
        owner = body[pos:pos + namesz].rstrip(b"\0")
        pos += (namesz + 3) & ~3
        yield owner, kind, _slice(body, pos, descsz)
        pos += (descsz + 3) & ~3


# MessagePack (msgpack.org spec), the subset of types a decoder of AMDGPU metadata meets.
_FIXED = {0xC0: None, 0xC2: False, 0xC3: True}
_UINT = {0xCC: "B", 0xCD: ">H", 0xCE: ">I", 0xCF: ">Q",
         0xD0: "b", 0xD1: ">h", 0xD2: ">i", 0xD3: ">q", 0xCA: ">f", 0xCB: ">d"}
_LENGTH = {0xD9: ("B", "str"), 0xDA: (">H", "str"), 0xDB: (">I", "str"),
           0xC4: ("B", "bin"), 0xC5: (">H", "bin"), 0xC6: (">I", "bin"),
           0xDC: (">H", "array"), 0xDD: (">I", "array"),
           0xDE: (">H", "map"), 0xDF: (">I", "map")}


def _unpack(buf: bytes, pos: int) -> tuple[Any, int]:
    """One MessagePack value at ``pos``: (value, the position after it)."""
    tag = buf[pos]
    pos += 1
    if tag <= 0x7F:
        return tag, pos
    if tag >= 0xE0:
        return tag - 0x100, pos
    if 0x80 <= tag <= 0x8F:
        return _sequence(buf, pos, tag & 0x0F, "map")
    if 0x90 <= tag <= 0x9F:
        return _sequence(buf, pos, tag & 0x0F, "array")
    if 0xA0 <= tag <= 0xBF:
        return _sequence(buf, pos, tag & 0x1F, "str")
    if tag in _FIXED:
        return _FIXED[tag], pos
    if tag in _UINT:
        fmt = _UINT[tag]
        return struct.unpack_from(fmt, buf, pos)[0], pos + struct.calcsize(fmt)
    if tag in _LENGTH:
        fmt, kind = _LENGTH[tag]
        length, = struct.unpack_from(fmt, buf, pos)
        return _sequence(buf, pos + struct.calcsize(fmt), length, kind)
    raise ValueError(f"MessagePack type 0x{tag:02x} at offset {pos - 1} is not expected in "
                     "AMDGPU metadata")


def _sequence(buf: bytes, pos: int, length: int, kind: str) -> tuple[Any, int]:
    if kind in ("str", "bin"):
        raw = _slice(buf, pos, length)
        return (raw.decode() if kind == "str" else raw), pos + length
    items = []
    for _ in range(length * (2 if kind == "map" else 1)):
        item, pos = _unpack(buf, pos)
        items.append(item)
    if kind == "array":
        return items, pos
    return {k: v for k, v in zip(items[::2], items[1::2]) if isinstance(k, (str, int))}, pos


def undefined_symbols(obj: bytes) -> list[str]:
    """Names an ELF64 little-endian relocatable object (host code, CPU kernels) leaves
    undefined (global or weak symbols of section index SHN_UNDEF).

    Raises
    ------
    CompileError
        ``obj`` is not an ELF64 little-endian object.
    """
    if obj[:4] != b"\x7fELF" or obj[4] != 2 or obj[5] != 1:
        raise CompileError("host object is not an ELF64 little-endian object")
    shoff, = struct.unpack_from("<Q", obj, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", obj, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", obj, shoff + i * shentsize)
                for i in range(shnum)]
    names = []
    for sh in sections:
        if sh[1] != 2:  # SHT_SYMTAB
            continue
        strtab = sections[sh[6]]
        for off in range(sh[4], sh[4] + sh[5], 24):
            st_name, st_info, _, st_shndx = struct.unpack_from("<IBBH", obj, off)
            if st_shndx == 0 and st_name and (st_info >> 4) in (1, 2):  # GLOBAL/WEAK UNDEF
                end = obj.index(b"\0", strtab[4] + st_name)
                names.append(obj[strtab[4] + st_name:end].decode())
    return names
