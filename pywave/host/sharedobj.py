"""Warm starts without llvmlite: host object code pre-linked into a shared object.

Before the compile cache stores an entry (:func:`pywave.lookup.keep`), when a C compiler driver
is present (``$CC``, else ``cc``), :func:`link` links the entry's host object code into a shared
object, kept inside the entry (``Program.shared_object``, under the entry's checksum and
key). A :class:`pywave.api.CompiledModule` whose program carries one opens it with
:func:`load`, which needs neither llvmlite nor LLVM's JIT; without one (no linker, the
cache off, ``disk_cache=False``), or when ``load`` fails, the host code is loaded with MCJIT
(:mod:`pywave.host.jit`). Nothing here reads a file: ``load`` opens the bytes it is given.

Each load copies the bytes into a memfd of its own, sealed against writes, and opens that,
so what runs is exactly the bytes the caller checked, and two open modules of the same code
never share their kernel slots (a ``dlopen`` of one path twice would return the first).
Linking uses ``-Wl,-Bsymbolic``: the code's calls to its own functions (a host function may
be called ``main``) bind inside it, never to a same-named symbol of the process.
"""

from __future__ import annotations

import ctypes
import fcntl
import logging
import os
import threading
from _ctypes import dlclose

from .. import sparse
from ..errors import CompileError
from .jit import wait_async_tasks

log = logging.getLogger("pywave.sharedobj")

#: Seconds a link may take before it is given up (the entry then has no shared object).
LINK_TIMEOUT = 60


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


_runtime_lock = threading.Lock()
_runtime_loaded = False


def _load_runtime(runtime_library: str) -> None:
    """libwavert (and MLIR's runner utilities beside it) with global symbols, which the shared
    object leaves undefined (as pywave.host.jit.initialise does for MCJIT); once per process."""
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
    """Host code opened with ``dlopen`` from a private, sealed memfd copy of ``shared`` (an
    ELF shared object; the caller keeps nothing alive); the interface of
    :class:`pywave.host.jit.JitModule` (``address``, ``close``). Thread-safe after construction;
    ``close`` unloads the code (callers must make sure no call is running).

    The memfd stays open until ``close``: glibc recognises a loaded object by its path, and
    ``/proc/self/fd/N`` names a different file once N is closed and reused, so an open
    module's N is never reused by the next one. A load that still comes back with the handle
    of an open module raises OSError (the caller falls back to MCJIT)."""

    def __init__(self, shared: bytes) -> None:
        self._fd = os.memfd_create("pywave-host", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        self._library = None
        # Code calling the async runtime is unloaded once its workers are quiet: a task may
        # still run the tail of a coroutine of this code after the entry returned.
        self._async = b"mlirAsyncRuntime" in shared
        try:
            view = memoryview(shared)
            while view:
                view = view[os.write(self._fd, view):]
            fcntl.fcntl(self._fd, fcntl.F_ADD_SEALS,   # its bytes can no longer change
                        fcntl.F_SEAL_SEAL | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW |
                        fcntl.F_SEAL_WRITE)
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
              _handles=_open_handles, _wait=wait_async_tasks) -> None:
        # What close uses is bound at definition: a module released at interpreter exit may
        # find this module's globals already cleared (a module held by an attribute of sys).
        if self._library is not None:
            if self._async:
                _wait()
            handle, self._library = self._library._handle, None
            _dlclose(handle)
            with _lock:
                _handles.discard(handle)
            _close(self._fd)


def load(shared: bytes, runtime_library: str) -> SharedObjectModule | None:
    """Shared object ``shared`` (bytes, e.g. ``Program.shared_object``) opened, with
    libwavert ``runtime_library`` loaded for it; None when it cannot be opened (no memfd
    support, ``dlopen`` refusing it: logged at debug level), for the caller to use MCJIT."""
    if not hasattr(os, "memfd_create"):
        return None
    try:
        _load_runtime(runtime_library)
        sparse.preload(sparse.named_in(shared))   # as jit.JitModule does
        return SharedObjectModule(shared)
    except OSError as exc:
        log.debug("pre-linked host code not usable (%s); loading it with MCJIT", exc)
        return None
