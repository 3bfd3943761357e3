"""Dump the intermediates of one compile into a fresh numbered folder.

``compile(text, dump_dir=PATH)`` (or ``PYWAVE_DUMP_DIR=PATH``) writes each compile into
``PATH/NNNN-<hash>/``, ``NNNN`` one more than the highest number already there and ``<hash>``
the first 10 hex digits of the input's SHA-256. Its files are numbered in the order they were
produced::

    00-input.mlir           the text as given
    01-parse.mlir           after parsing and verification
    02-prepare.mlir         after PREPARE_PIPELINE (outlining, affine/scf/vector lowering)
    03-nvvm.mlir            kernels lowered to NVVM, before serialisation
    04-kernels.ll           each gpu.module's LLVM IR (gpu-module-to-binary{format=llvm})
    05-kernels.ptx          its PTX (also when the binary is a cubin)
    06-kernels.mlir         after gpu-module-to-binary (gpu.binary ops)
    07-kernels.cubin        each binary as embedded (.ptx, .cubin, .fatbin or .hsaco)
    08-host.mlir            host code in the LLVM dialect after lowering and launch rewrite
    09-host.ll  10-host.s  11-host.o    host LLVM IR, assembly and object code
    manifest.json           pipelines, tool versions, target, options, seconds per stage, files

(An AMD target writes no ``nvvm.mlir``, ``.ll`` or ``.ptx`` files: its kernels are ``.hsaco``.)

``manifest.json`` is rewritten after every stage: a failed compile leaves the files and a
manifest with ``"complete": false`` up to the stage that failed. Nothing here is part of a
compile's result; a compile served from the compile cache writes nothing (``compile`` skips
the cache lookup when dumping).
"""

from __future__ import annotations

import json
import logging
import os
import re
import time
from typing import Any

from .program import FORMATS, ptx_text

log = logging.getLogger("pywave.dump")

ENV = "PYWAVE_DUMP_DIR"
_FOLDER_RE = r"^(\d{4,})-"


def root(dump_dir: "str | os.PathLike[str] | None" = None) -> str | None:
    """The dump root: ``dump_dir``, else ``$PYWAVE_DUMP_DIR``, else None (no dumping)."""
    if dump_dir is not None and os.fspath(dump_dir):
        return os.fspath(dump_dir)
    return os.environ.get(ENV) or None


class Dump:
    """One compile's dump folder. Writes are best effort: an I/O error is logged once and
    turns the dump off, never the compile."""

    def __init__(self, root_dir: str, text: str, *, filename: str = "<input>",
                 options: dict[str, Any] | None = None) -> None:
        import hashlib  # here, not at import: hashlib loads OpenSSL (warm-start cost)
        self.path = _new_folder(root_dir, hashlib.sha256(text.encode()).hexdigest()[:10])
        self._counter = 0
        self._elapsed = 0.0
        self._broken = False
        self.manifest: dict[str, Any] = {
            "complete": False, "filename": filename, "options": options or {},
            "target": None, "pipelines": {}, "tool_versions": {}, "seconds": {},
            "files": [], "binaries": [], "notes": []}
        self.write("input.mlir", text)

    @classmethod
    def start(cls, root_dir: str | None, text: str, **kwargs) -> "Dump | None":
        """A Dump under ``root_dir`` (see :func:`root`), or None when it is None."""
        if root_dir is None:
            return None
        try:
            dump = cls(root_dir, text, **kwargs)
        except OSError as exc:
            log.warning("cannot dump intermediates into %s: %s", root_dir, exc)
            return None
        log.info("dumping compile intermediates into %s", dump.path)
        return dump

    # -- files --------------------------------------------------------------------------------
    def write(self, name: str, data: str | bytes) -> str | None:
        """Write ``NN-name`` (the next number) and return its path."""
        if self._broken:
            return None
        t0 = time.perf_counter()
        fname = f"{self._counter:02d}-{name}"
        self._counter += 1
        path = os.path.join(self.path, fname)
        try:
            with open(path, "wb") as fh:
                fh.write(data.encode() if isinstance(data, str) else data)
        except OSError as exc:
            log.warning("dump: cannot write %s: %s; dumping stops", path, exc)
            self._broken = True
            return None
        finally:
            self._elapsed += time.perf_counter() - t0
        self.manifest["files"].append(fname)
        return path

    def note(self, text: str) -> None:
        self.manifest["notes"].append(text)

    def take_elapsed(self) -> float:
        """Seconds spent dumping since the last call (subtracted from the stage times)."""
        out, self._elapsed = self._elapsed, 0.0
        return out

    # -- stages -------------------------------------------------------------------------------
    def module(self, stage: str, module) -> None:
        """The IR of ``module`` after ``stage``."""
        t0 = time.perf_counter()
        text = str(module)
        self._elapsed += time.perf_counter() - t0
        self.write(f"{stage}.mlir", text)

    def kernels_lowered(self, module, pipeline: str, pipeline_for) -> None:
        """Called between kernel lowering and serialisation (``pipeline``): the NVVM-level IR,
        then each gpu.module's LLVM IR and PTX, from serialising copies of the module with
        ``pipeline_for(mlir_format)``."""
        from .mlirutil import serialise_clone

        t0, before = time.perf_counter(), self._elapsed
        self.manifest["pipelines"]["binary"] = pipeline
        try:
            self.module("nvvm", module)
            for mlir_format, kind in (("llvm", "ll"), ("isa", "ptx")):
                for name, data in serialise_clone(module, pipeline_for(mlir_format)):
                    if kind == "ll":
                        data = _bitcode_to_text(data)
                    else:
                        data = ptx_text(data)
                    self.write(f"{name}.{kind}", data)
        except Exception as exc:  # noqa: BLE001 - a dump must never fail the compile
            log.debug("dump: kernel LLVM IR/PTX unavailable: %s", exc)
            self.note(f"kernel LLVM IR/PTX not dumped: {exc}")
        finally:
            self._elapsed = before + time.perf_counter() - t0

    def binaries(self, binaries) -> None:
        """Each embedded kernel binary, as loaded at run time."""
        for b in binaries:
            self.write(b.name + FORMATS[b.format].extension, b.file_data)
            self.manifest["binaries"].append(
                {"name": b.name, "format": b.format, "chip": b.chip, "bytes": len(b.data)})

    def host(self, llvm_ir: str, assembly: str, object_code: bytes) -> None:
        self.write("host.ll", llvm_ir)
        self.write("host.s", assembly)
        self.write("host.o", object_code)

    # -- manifest -----------------------------------------------------------------------------
    def update(self, **fields: Any) -> None:
        """Merge ``fields`` into the manifest and rewrite ``manifest.json``."""
        if self._broken:
            return
        t0 = time.perf_counter()
        self.manifest.update(fields)
        path = os.path.join(self.path, "manifest.json")
        try:
            with open(path + ".tmp", "w", encoding="utf-8") as fh:
                json.dump(self.manifest, fh, indent=2, sort_keys=True, default=str)
                fh.write("\n")
            os.replace(path + ".tmp", path)
        except OSError as exc:
            log.warning("dump: cannot write %s: %s; dumping stops", path, exc)
            self._broken = True
        self._elapsed += time.perf_counter() - t0


def _new_folder(root_dir: str, digest: str) -> str:
    os.makedirs(root_dir, exist_ok=True)
    numbers = [int(m.group(1)) for n in os.listdir(root_dir) if (m := re.match(_FOLDER_RE, n))]
    n = max(numbers, default=0) + 1
    while True:   # another process may take the same number: try the next one
        path = os.path.join(root_dir, f"{n:04d}-{digest}")
        try:
            os.mkdir(path)
            return path
        except FileExistsError:
            n += 1


def _bitcode_to_text(data: bytes) -> bytes:
    if not data.startswith(b"BC\xc0\xde"):
        return data
    import llvmlite.binding as llvm
    return str(llvm.parse_bitcode(data)).encode()
