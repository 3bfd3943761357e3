"""Warm starts without llvmlite: host object code pre-linked into a shared object.

When the compile cache stores an entry (:func:`store`, called by :mod:`pywave.cache`) and a C
compiler driver is present (``$CC``, else ``cc``), the entry's host object code is linked
into a shared object and kept in the cache directory as ``<digest>.pwso``, named by the
BLAKE2b-256 digest of the object code (so entries with the same host code share it). A
:class:`pywave.api.CompiledModule` asks :func:`load` first: a matching, intact shared object
is opened with ``dlopen``, which needs neither llvmlite nor LLVM's JIT; on any failure
(no linker at store time, a missing or corrupt file, ``dlopen`` refusing it) ``load`` returns
None and the module is loaded with MCJIT as before (:mod:`pywave.jit`).

File: ``MAGIC`` + BLAKE2b-256 of the shared object + the shared object (an ELF ``cc -shared``
output). Each load copies it into a memfd of its own and opens that, so two open modules of
the same code never share their kernel slots (a ``dlopen`` of one path twice would return
the first). Linking
uses ``-Wl,-Bsymbolic``: the code's calls to its own functions (a host function may be called
``main``) bind inside it, never to a same-named symbol of the process.
"""

from __future__ import annotations

import ctypes
import logging
import os
import threading
from _ctypes import dlclose

try:   # BLAKE2b is built into CPython; hashlib's import loads OpenSSL (~5 ms per process)
    from _blake2 import blake2b
except ImportError:
    from hashlib import blake2b

from . import sparse
from .errors import CompileError

log = logging.getLogger("pywave.sharedobj")

MAGIC = b"PYWAVE-SO-1\n"
SUFFIX = ".pwso"
#: Seconds a link may take before it is given up (the entry then has no shared object).
LINK_TIMEOUT = 60


def _name(object_code: bytes) -> str:
    return blake2b(object_code, digest_size=32).hexdigest() + SUFFIX


def link(object_code: bytes) -> bytes | None:
    """``object_code`` (an ELF relocatable object) linked into a shared object, or None (logged
    at debug level) when there is no C compiler driver or the link fails."""
    import shlex       # the store path only: a warm start imports none of these
    import subprocess
    import tempfile
    with tempfile.TemporaryDirectory(prefix="pywave-link-") as tmp:
        obj, out = os.path.join(tmp, "host.o"), os.path.join(tmp, "host.so")
        with open(obj, "wb") as fh:
            fh.write(object_code)
        command = shlex.split(os.environ.get("CC") or "cc") + [
            "-shared", "-Wl,-Bsymbolic", "-o", out, obj]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=LINK_TIMEOUT)
        except (OSError, subprocess.TimeoutExpired) as exc:
            log.debug("no pre-linked host code: %s: %s", command[0], exc)
            return None
        if done.returncode != 0:
            log.debug("no pre-linked host code: %s exited %d: %s", " ".join(command),
                      done.returncode, done.stderr.strip())
            return None
        with open(out, "rb") as fh:
            return fh.read()


def store(root: str, object_code: bytes) -> None:
    """Link ``object_code`` and write ``root/<digest>.pwso`` atomically, unless it is there
    already. A failed link or write leaves no file (logged): loads then use MCJIT."""
    path = os.path.join(root, _name(object_code))
    if os.path.exists(path):
        return
    shared = link(object_code)
    if shared is None:
        return
    from .cache import write_atomic
    write_atomic(root, os.path.basename(path),
                 MAGIC + blake2b(shared, digest_size=32).digest() + shared)


def _read(path: str) -> bytes | None:
    """The shared object in ``path`` if the file is intact, else None (corrupt: removed)."""
    try:
        with open(path, "rb") as fh:
            raw = fh.read()
    except OSError:
        return None
    head = len(MAGIC) + 32
    shared = raw[head:]
    if not raw.startswith(MAGIC) or blake2b(shared, digest_size=32).digest() != raw[len(MAGIC):head]:
        log.warning("compile cache: ignoring corrupt shared object %s", path)
        try:
            os.unlink(path)
        except OSError:
            pass
        return None
    try:
        os.utime(path)   # recency for the cache's LRU eviction
    except OSError:
        pass
    return shared


_runtime_lock = threading.Lock()
_runtime_loaded = False


def _load_runtime(runtime_library: str) -> None:
    """libwavert (and MLIR's runner utilities beside it) with global symbols, which the shared
    object leaves undefined (as pywave.jit.initialise does for MCJIT); once per process."""
    global _runtime_loaded
    with _runtime_lock:
        if _runtime_loaded:
            return
        mode = os.RTLD_NOW | os.RTLD_GLOBAL
        ctypes.CDLL(runtime_library, mode=mode)
        runner = os.path.join(os.path.dirname(runtime_library), "libwavert_runner.so")
        if os.path.exists(runner):
            ctypes.CDLL(runner, mode=mode)
        _runtime_loaded = True


#: dlopen handles of the open SharedObjectModules (a new load must not alias one of them).
_open_handles: set[int] = set()
_open_lock = threading.Lock()


class SharedObjectModule:
    """Host code opened with ``dlopen`` from a private memfd copy; the interface of
    :class:`pywave.jit.JitModule` (``address``, ``close``). Thread-safe after construction;
    ``close`` unloads the code (callers must make sure no call is running).

    The memfd stays open until ``close``: glibc recognises a loaded object by its path, and
    ``/proc/self/fd/N`` names a different file once N is closed and reused, so an open
    module's N is never reused by the next one. A load that still comes back with the handle
    of an open module raises OSError (the caller falls back to MCJIT)."""

    def __init__(self, shared: bytes) -> None:
        self._fd = os.memfd_create("pywave-host", os.MFD_CLOEXEC)
        self._library = None
        try:
            os.write(self._fd, shared)
            library = ctypes.CDLL(f"/proc/self/fd/{self._fd}", mode=os.RTLD_NOW | os.RTLD_LOCAL)
            with _open_lock:
                fresh = library._handle not in _open_handles
                if fresh:
                    _open_handles.add(library._handle)
            if not fresh:
                dlclose(library._handle)
                raise OSError("dlopen returned the handle of a module that is open")
            self._library = library
        except BaseException:
            os.close(self._fd)
            raise

    def address(self, name: str) -> int:
        """Address of a function or global defined in the code (CompileError if absent)."""
        try:
            return ctypes.cast(self._library[name], ctypes.c_void_p).value
        except AttributeError:
            raise CompileError(f"the pre-linked host code has no symbol {name!r}") from None

    def close(self, _dlclose=dlclose, _close=os.close, _lock=_open_lock,
              _handles=_open_handles) -> None:
        # What close uses is bound at definition: a module released at interpreter exit may
        # find this module's globals already cleared (a module held by an attribute of sys).
        if self._library is not None:
            handle, self._library = self._library._handle, None
            _dlclose(handle)
            with _lock:
                _handles.discard(handle)
            _close(self._fd)


def load(root: str | None, object_code: bytes, runtime_library: str) -> SharedObjectModule | None:
    """The pre-linked shared object of ``object_code`` from cache directory ``root``, opened;
    None when there is none (or no cache) or it cannot be opened (logged at debug level)."""
    if root is None or not hasattr(os, "memfd_create"):
        return None
    shared = _read(os.path.join(root, _name(object_code)))
    if shared is None:
        return None
    try:
        _load_runtime(runtime_library)
        sparse.preload(sparse.named_in(object_code))   # as jit.JitModule does
        return SharedObjectModule(shared)
    except OSError as exc:
        log.debug("pre-linked host code not usable (%s); loading it with MCJIT", exc)
        return None
