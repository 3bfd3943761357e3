"""The CUDA toolkit kernel compiles use: ptxas, fatbinary, libdevice and the PTX ISA.

Finding the CUDA toolkit that kernel compiles use: ``ptxas`` (cubin, fatbin) and libdevice
(``math.*``), and the PTX ISA version its ptxas accepts (:func:`ptx_isa`). Imports no MLIR:
the compile-cache key reads :func:`find_toolkit`'s version on cache hits too.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import os
import re
import sys
from typing import Iterator

from .. import files
from ..errors import warn_config

log = logging.getLogger("pywave.toolkit")

#: Where NVIDIA's pip wheels put a toolkit root (``bin/ptxas``, ``nvvm/libdevice``) under
#: site-packages: ``nvidia-cuda-nvcc`` for CUDA 13 (``nvidia/cu13``) and
#: ``nvidia-cuda-nvcc-cu12`` (``nvidia/cuda_nvcc``).
WHEEL_ROOTS = (os.path.join("nvidia", "cu13"), os.path.join("nvidia", "cuda_nvcc"))

LIBDEVICE = os.path.join("nvvm", "libdevice", "libdevice.10.bc")

#: PTX ISA version (x10) each CUDA release introduced (NVIDIA's PTX ISA manual, "PTX ISA
#: Version" release history): ptxas of that release accepts ``.version`` up to it.
PTX_OF_CUDA = {(11, 8): 78, (12, 0): 80, (12, 1): 81, (12, 2): 82, (12, 3): 83, (12, 4): 84,
               (12, 5): 85, (12, 6): 85, (12, 7): 86, (12, 8): 87, (12, 9): 88, (13, 0): 90}
#: Highest PTX ISA version the NVPTX backend of MLIR's LLVM (22) emits (``+ptx90``).
LLVM_MAX_PTX = 90


@dataclasses.dataclass(frozen=True)
class Toolkit:
    """A CUDA toolkit root as ``gpu-module-to-binary{toolkit=...}`` reads it: ``root`` holds
    ``nvvm/libdevice/libdevice.10.bc`` and, optionally, ``bin/ptxas``. ``source`` says where
    it was found (an environment variable, ``cuda-pathfinder``, ``wheel``, ``PATH``,
    ``default``); ``version`` is ptxas's release (``"13.0.88"``), "" without ptxas."""

    root: str
    source: str
    ptxas: str | None
    libdevice: str
    version: str


def _wheel_roots() -> list[tuple[str, str]]:
    """Toolkit roots of NVIDIA's wheels: cuda-pathfinder's answer when it is installed, then
    the wheel folders on ``sys.path``."""
    out = []
    try:
        import cuda.pathfinder as pathfinder
    except ImportError:
        pathfinder = None
    if pathfinder is not None:
        try:
            ptxas = pathfinder.find_nvidia_binary_utility("ptxas")
            if ptxas:
                out.append((os.path.dirname(os.path.dirname(ptxas)), "cuda-pathfinder"))
            bitcode = pathfinder.find_bitcode_lib("device")
            out.append((os.path.dirname(os.path.dirname(os.path.dirname(bitcode))),
                        "cuda-pathfinder"))
        except Exception as exc:   # its own not-found errors, and anything else it may raise
            log.debug("cuda-pathfinder found no toolkit: %s", exc)
    for entry in sys.path:
        for rel in WHEEL_ROOTS:
            out.append((os.path.join(entry or ".", rel), "wheel"))
    return out


def _candidates() -> Iterator[tuple[str, str]]:
    """(root, where from) in the search order, each looked up only when the ones before it
    were not a toolkit (a warm start keys its cache lookup on the toolkit: a root found early
    spares it the wheel and PATH searches and the import of shutil)."""
    for variable in ("PYWAVE_CUDA_PATH", "CUDA_HOME", "CUDA_PATH"):
        yield os.environ.get(variable, ""), variable
    yield from _wheel_roots()
    import shutil
    ptxas = shutil.which("ptxas")
    if ptxas:
        yield os.path.dirname(os.path.dirname(os.path.realpath(ptxas))), "PATH"
    yield "/usr/local/cuda", "default"


#: File in the compile cache folder remembering each ptxas binary's release, so that a warm
#: start (which keys its cache lookup on it) runs no subprocess: JSON sealed with a checksum
#: (pywave.files.sealed), read as every cache file is (pywave.files.read_file). Versions
#: before it was sealed kept plain JSON in LEGACY_VERSIONS_FILE, left to them.
VERSIONS_FILE = "ptxas-versions.pwm"
LEGACY_VERSIONS_FILE = "ptxas-versions.json"
_VERSIONS_MAGIC = b"PYWAVE-PTXAS-VERSIONS-1\n"
#: Largest memo read (bytes); a few hundred bytes per ptxas binary.
_VERSIONS_MAX_BYTES = 1 << 20


def ptxas_version(ptxas: str) -> str:
    """The release of ``ptxas --version`` (``"13.0.88"`` from ``V13.0.88``); "" when it cannot
    be run or read. Remembered across processes in :data:`VERSIONS_FILE` of the compile cache
    folder, keyed by the binary's real path, size, modification time and inode (a replaced
    ptxas is run again)."""
    try:
        st = os.stat(ptxas)
    except OSError:
        return ""
    key = f"{os.path.realpath(ptxas)}:{st.st_size}:{st.st_mtime_ns}:{st.st_ino}"
    root = files.directory()        # None: no cache folder, nothing remembered
    known = _versions(root)
    if key in known:
        return known[key]
    found = _run_ptxas_version(ptxas)
    if found and root is not None:
        known = _versions(root)     # read again: another process may have added one meanwhile
        known[key] = found
        files.write_atomic(root, VERSIONS_FILE, files.sealed(
            _VERSIONS_MAGIC, json.dumps(known, sort_keys=True).encode()))
    return found


def _versions(root: str | None) -> dict[str, str]:
    """The remembered releases in ``root``'s :data:`VERSIONS_FILE` ({} when none, unreadable,
    or damaged: then logged and removed, and rebuilt by the next ptxas run)."""
    if root is None:
        return {}
    path = os.path.join(root, VERSIONS_FILE)
    try:
        data = json.loads(files.unsealed(
            _VERSIONS_MAGIC, files.read_file(path, _VERSIONS_MAX_BYTES)))
        if not isinstance(data, dict):
            raise files.CorruptFile(f"a JSON {type(data).__name__}, not an object")
    except FileNotFoundError:       # none yet
        return {}
    except (files.CorruptFile, ValueError, RecursionError) as exc:
        files.discard_file(path, str(exc))
        return {}
    except OSError as exc:
        log.debug("cannot read %s: %s", path, exc)
        return {}
    return {k: v for k, v in data.items() if isinstance(k, str) and isinstance(v, str)}


def _run_ptxas_version(ptxas: str) -> str:
    import subprocess
    try:
        proc = subprocess.run([ptxas, "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as exc:
        log.debug("cannot run %s --version: %s", ptxas, exc)
        return ""
    found = re.search(r"\bV(\d+\.\d+\.\d+)", proc.stdout)
    return found.group(1) if found else ""


def _check_explicit_root() -> None:
    """Warn (:class:`~pywave.errors.ConfigWarning`) when ``$PYWAVE_CUDA_PATH`` is set but
    names no toolkit root: the search then goes on without it, and the user should know."""
    value = os.environ.get("PYWAVE_CUDA_PATH", "")
    if not value:
        return
    if not os.path.isdir(value):
        why = "does not exist" if not os.path.exists(value) else "is not a folder"
    elif not os.path.isfile(os.path.join(value, LIBDEVICE)):
        why = f"has no {LIBDEVICE}"
    else:
        return
    warn_config(log, f"PYWAVE_CUDA_PATH={value!r} {why}, so it is not a CUDA toolkit root; "
                "looking in CUDA_HOME, CUDA_PATH, NVIDIA's wheels, PATH and /usr/local/cuda "
                "instead")


def _real(path: str) -> str:
    """``path`` resolved ("" for "", and for a relative path when the working folder was
    removed: ``''`` on sys.path is the working folder, which then no longer exists)."""
    if not path:
        return ""
    try:
        return os.path.realpath(path)
    except OSError:
        return ""


@functools.lru_cache(maxsize=8)
def _find_toolkit(environment: tuple) -> Toolkit | None:
    _check_explicit_root()
    for root, source in _candidates():
        root = _real(root)
        libdevice = os.path.join(root, LIBDEVICE) if root else ""
        if root and os.path.isfile(libdevice):
            ptxas = os.path.join(root, "bin", "ptxas")
            ptxas = ptxas if os.access(ptxas, os.X_OK) else None
            found = Toolkit(root, source, ptxas, libdevice,
                            ptxas_version(ptxas) if ptxas else "")
            log.debug("CUDA toolkit: %s (from %s), ptxas %s, libdevice %s", found.root,
                      source, found.ptxas and f"{found.ptxas} {found.version}", libdevice)
            return found
    log.debug("no CUDA toolkit found (PYWAVE_CUDA_PATH, CUDA_HOME, CUDA_PATH, NVIDIA's wheels, "
              "ptxas on PATH, /usr/local/cuda): kernels are shipped as PTX")
    return None


def find_toolkit() -> Toolkit | None:
    """The CUDA toolkit compiles use, looked for in order: ``$PYWAVE_CUDA_PATH``,
    ``$CUDA_HOME``, ``$CUDA_PATH``, NVIDIA's pip wheels (``nvidia-cuda-nvcc``,
    ``nvidia-cuda-nvcc-cu12``; through ``cuda-pathfinder`` when installed), the ``ptxas`` on
    ``PATH``, ``/usr/local/cuda``. The first root holding libdevice wins. Remembered per
    value of the variables and ``PATH`` (ptxas is run once per root for its version)."""
    environment = tuple(os.environ.get(v) for v in
                        ("PYWAVE_CUDA_PATH", "CUDA_HOME", "CUDA_PATH", "PATH")) + \
        (tuple(sys.path),)
    return _find_toolkit(environment)


def cuda_toolkit() -> str | None:
    """Root of :func:`find_toolkit`'s toolkit (None when none was found)."""
    found = find_toolkit()
    return found.root if found else None


def ptx_isa(release: str) -> int | None:
    """The PTX ISA version (x10) to emit for a ptxas of ``release`` (``"13.0.88"``): the one
    that release introduced, capped at :data:`LLVM_MAX_PTX`; None when the release is older
    than :data:`PTX_OF_CUDA` or cannot be read (then LLVM's default stays: PTX 7.8 for LLVM
    22, whose kernels take at most 4 KiB of parameters; PTX 8.1+ allows 32,764 bytes)."""
    found = re.match(r"(\d+)\.(\d+)", release or "")
    if not found:
        return None
    key = (int(found.group(1)), int(found.group(2)))
    known = [v for r, v in PTX_OF_CUDA.items() if r <= key]
    return min(max(known), LLVM_MAX_PTX) if known else None
