"""pywave.ExecutionEngine: a drop-in for MLIR's ExecutionEngine that runs GPU programs.

``pywave.ExecutionEngine``: a drop-in for ``mlir.execution_engine.ExecutionEngine`` that runs
GPU programs on libwavert.

Same constructor (``module, opt_level=2, shared_libs=[], enable_object_dump=False``), methods
(``invoke``, ``lookup``, ``raw_lookup``, ``register_runtime``, ``raw_register_runtime``,
``initialize``, ``dump_to_object_file``) and calling convention: ``invoke(name, *args)`` calls
the ``llvm.emit_c_interface`` wrapper ``_mlir_ciface_<name>`` through its packed form, each
argument a ctypes pointer to the value (a memref: a pointer to a pointer to the descriptor
``mlir.runtime`` builds; a scalar: ``ctypes.pointer(ctypes.c_float(1.0))``), a result written
through one more pointer at the end.

The module is compiled by pywave (:class:`pywave.pipeline.Pipeline` with
``packed_interface``, in a compile worker): a GPU module before lowering (``gpu.module``
kernels or ``gpu.launch`` regions, host ``func.func``s), or one already lowered by upstream's
``gpu-lower-to-nvvm-pipeline`` (host in the LLVM dialect with ``gpu.binary`` and
``gpu.launch_func``). The host code is MLIR's own: its ``mgpu*`` calls (module load in a
global constructor, launches, streams, memory) and the runner utilities (``printMemref*``)
resolve into libwavert, so ``shared_libs`` naming MLIR's runtime libraries
(``libmlir_cuda_runtime.so``, ``libmlir_c_runner_utils.so``...) are accepted and not needed;
other libraries are loaded for the program to call.

Differences from upstream, where it differs:

- Errors are pywave exceptions: a compile failure a :class:`~pywave.errors.CompileError`, an
  unknown function a :class:`~pywave.errors.Error` that is also a ``RuntimeError`` (as
  upstream's), a failed ``mgpu*`` call during ``invoke`` (a launch, an allocation, a kernel
  fault seen by the synchronisation after a launch) a :class:`~pywave.errors.DeviceError`
  after the function returns (upstream prints it and carries on).
- ``lookup`` and ``raw_lookup`` give the packed function itself (no error check); errors of
  such calls stay readable with libwavert's ``wavert_last_status`` until cleared.
- ``register_runtime`` adds the symbol to the process (LLVM's symbol table) and must come
  before the engine's code is loaded: before the first ``lookup``, ``invoke`` or
  ``initialize``.
- Keyword-only extras: ``target`` (chip, for compiling without a GPU), ``format``,
  ``lowering``, ``passes``, ``isolate``, ``timeout`` as for :func:`pywave.compile`.
"""

from __future__ import annotations

import ctypes
import logging
import os
import re
import sys
import threading
from typing import Any, Mapping, Sequence

from llvmlite import binding as llvm

from . import run
from .. import lookup, pipeline, runtime
from ..errors import Error
from ..frontend.source import MlirModule, text_and_name
from ..host import jit
from ..host.entries import PACKED_INTERFACE_PREFIX
from ..lowering import LoweringOptions, options_of
from ..program import ENGINE_FINI, ENGINE_INIT

log = logging.getLogger("pywave.engine")

#: What ``invoke`` takes for an argument: ctypes pointers (``ctypes._Pointer`` is the
#: documented base of ``ctypes.POINTER`` types), void pointers, arrays (passed by address).
_POINTERS = (ctypes._Pointer, ctypes.c_void_p, ctypes.Array)

#: Prefix of the C interface wrappers that ``llvm.emit_c_interface`` makes.
CIFACE_PREFIX = "_mlir_ciface_"


class UnknownFunction(Error, RuntimeError):
    """The engine has no such function (upstream raises a RuntimeError)."""


class ExecutionEngine:
    """JIT-compiled host code of an MLIR GPU program, called through MLIR's packed interface.

    Parameters
    ----------
    module : mlir.ir.Module, another MLIR build's module object, or str
        The program (see the module docstring for the two forms accepted); printed, left
        unchanged.
    opt_level : int
        LLVM optimisation level of the host code (0-3).
    shared_libs : sequence of str
        Libraries the program calls into (MLIR's runtime libraries are skipped: libwavert
        provides their symbols). A path that does not exist is an :class:`Error`.
    enable_object_dump : bool
        Keep the host object code for :meth:`dump_to_object_file`.

    Raises
    ------
    CompileError
        The program does not compile (or ``opt_level`` is out of range).
    TypeError
        ``module`` or an option of the wrong type.

    Thread-compatible: calls of the compiled functions may run on any thread; the engine's
    own methods (``register_runtime``, ``close``) are the caller's to serialise.
    """

    def __init__(self, module: "MlirModule | str", opt_level: int = 2,
                 shared_libs: Sequence[str] = (), enable_object_dump: bool = False, *,
                 target: str | None = None, format: str = "auto",
                 lowering: "LoweringOptions | Mapping | None" = None,
                 passes: str | None = None, isolate: bool | None = None,
                 timeout: float | None = None) -> None:
        text, filename = text_and_name(module)
        if isinstance(shared_libs, str) or not all(isinstance(p, str) for p in shared_libs):
            raise TypeError(f"shared_libs must be a list of library paths (str), got "
                            f"{shared_libs!r}")
        compiler = pipeline.Pipeline(text, target=target, opt_level=opt_level, format=format,
                                     filename=filename, lowering=options_of(lowering),
                                     passes=passes, packed_interface=True)
        done = lookup.build_artifacts(compiler, isolate=isolate, timeout=timeout)
        self._object = done.object_code
        self._target = done.target
        self._slots = packed_slots(done.host.llvm_ir)
        self._dump = bool(enable_object_dump)
        self._shared_libs = list(shared_libs)
        self._lock = threading.Lock()
        self._code: jit.JitModule | None = None
        self._initialized = False
        self._closed = False
        self._callbacks: dict[str, Any] = {}      # register_runtime's, kept alive
        self._functions: dict[str, Any] = {}      # lookup's, by name
        self._cpu_call: "run.Call | None" = None  # target="cpu": the call bracket
        jit.initialise(runtime.LIBRARY)
        run.load_shared_libs(self._shared_libs)

    # ---- loading -------------------------------------------------------------------------
    def _loaded(self) -> "jit.JitModule":
        """The JIT module, loaded on first use (after any ``register_runtime``)."""
        with self._lock:
            if self._closed:
                raise Error("the ExecutionEngine is closed")
            if self._code is None:
                self._code = jit.JitModule(self._object)
            return self._code

    def initialize(self) -> None:
        """Run the host code's global constructors once (they load the kernel images on the
        calling thread's default GPU, ``mgpuSetDefaultDevice``; 0 unless set). ``lookup``
        and ``invoke`` do so on first use. DeviceError when a load failed."""
        code = self._loaded()
        with self._lock:
            if self._initialized:
                return
            self._initialized = True
        self._checked(lambda: ctypes.CFUNCTYPE(None)(code.address(ENGINE_INIT))(),
                      "loading the kernel images")

    # ---- lookup and calls -------------------------------------------------------------------
    def raw_lookup(self, name: str) -> int:
        """Address of the packed wrapper ``void _mlir_<name>(void **args)``, 0 when there is
        none (as upstream's)."""
        if not isinstance(name, str):
            raise TypeError(f"name must be a str, got {type(name).__name__}")
        self.initialize()
        try:
            return self._loaded().address(PACKED_INTERFACE_PREFIX + name)
        except Error:
            return 0

    def lookup(self, name: str):
        """The packed C interface of ``name`` (a function with ``llvm.emit_c_interface``) as
        a ctypes function taking ``void **args``. UnknownFunction (a RuntimeError) when there
        is none. Its calls are not checked for GPU errors: :meth:`invoke` is."""
        found = self._functions.get(name)
        if found is not None:
            return found
        address = self.raw_lookup(CIFACE_PREFIX + name)
        if not address:
            raise UnknownFunction(f"Unknown function {name}: the engine has no "
                                  f"{CIFACE_PREFIX}{name} (give @{name} the "
                                  "llvm.emit_c_interface attribute)")
        found = self._functions[name] = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(address)
        return found

    def invoke(self, name: str, *ctypes_args) -> None:
        """Call ``name`` through its packed C interface: each argument a ctypes pointer (to
        the memref descriptor pointer, to the scalar, and last to the result's storage).
        DeviceError for a failure of the GPU runtime during the call (named by libwavert:
        the driver call and its error); the call ran to its end regardless."""
        func = self.lookup(name)
        wanted = self._slots.get(CIFACE_PREFIX + name)
        if wanted is not None and wanted != len(ctypes_args):
            raise TypeError(f"invoke({name!r}) takes {wanted} pointers (the arguments of "
                            f"{CIFACE_PREFIX}{name}, then its result's storage if it returns "
                            f"one), got {len(ctypes_args)}")
        packed = (ctypes.c_void_p * len(ctypes_args))()
        for i, arg in enumerate(ctypes_args):
            # ctypes.cast would also take a str or an int and pass the wrong memory
            if not isinstance(arg, _POINTERS):
                raise TypeError(f"invoke({name!r}): argument {i} must be a ctypes pointer "
                                f"(ctypes.pointer(...)), got {type(arg).__name__}")
            packed[i] = ctypes.cast(arg, ctypes.c_void_p)
        self._checked(lambda: func(packed), f"@{name}")

    def _checked(self, call, what: str) -> None:
        """:func:`_checked`; on the CPU device (``target="cpu"``) inside a libwavert call on
        it, so that the program's mgpu* calls (module loads, gpu.alloc, memcpy, launches)
        run there rather than on the thread's default GPU."""
        if not self._target.is_cpu:
            _checked(call, what)
            return
        if self._cpu_call is None:
            self._cpu_call = run.Call(self._target)
        self._cpu_call.call(call, what)

    # ---- runtime symbols and object code ---------------------------------------------------
    def register_runtime(self, name: str, ctypes_callback) -> None:
        """Make ``ctypes_callback`` (a ctypes function, kept alive by the engine) the
        definition of ``_mlir_ciface_<name>`` for the host code. Must precede the first
        ``lookup``, ``invoke`` or ``initialize``; the symbol is the process's (LLVM's symbol
        table), so an engine loaded later sees it too."""
        address = ctypes.cast(ctypes_callback, ctypes.c_void_p).value
        self._callbacks[name] = ctypes_callback
        self.raw_register_runtime(CIFACE_PREFIX + name, address)

    def raw_register_runtime(self, name: str, address: int) -> None:
        """Define symbol ``name`` at ``address`` for the host code (see
        :meth:`register_runtime`)."""
        if not isinstance(address, int) or not address:
            raise TypeError(f"raw_register_runtime({name!r}): the address must be a "
                            f"non-zero int, got {address!r}")
        with self._lock:
            if self._code is not None or self._closed:
                raise Error(f"register_runtime({name!r}): the engine's code is loaded "
                            "already; register runtime functions before the first lookup, "
                            "invoke or initialize")
            llvm.add_symbol(name, address)

    def dump_to_object_file(self, file_name: "str | os.PathLike[str]") -> None:
        """Write the host object code (an ELF relocatable object) to ``file_name``; needs
        ``enable_object_dump=True``."""
        if not self._dump:
            raise Error("dump_to_object_file: the engine was made with "
                        "enable_object_dump=False; pass enable_object_dump=True")
        with open(file_name, "wb") as fh:
            fh.write(self._object)

    # ---- lifetime ---------------------------------------------------------------------------
    def close(self) -> None:
        """Wait for the async runtime's tasks (:func:`pywave.host.jit.wait_async_tasks`), run
        the global destructors (unloading the kernel images) and free the code; later calls
        raise. Idempotent; no call of the engine's functions may be running."""
        with self._lock:
            code, self._code = self._code, None
            initialized, self._initialized = self._initialized, False
            self._functions.clear()
            self._closed = True
        if code is None:
            return
        try:
            # Tasks of the async runtime (async.execute bodies, async-parallel-for's blocks)
            # may still run the code, or use the kernels the destructors unload.
            jit.wait_async_tasks()
            if initialized and not sys.is_finalizing():
                ctypes.CFUNCTYPE(None)(code.address(ENGINE_FINI))()
        finally:
            code.close()

    def __enter__(self) -> "ExecutionEngine":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        if "_lock" not in self.__dict__:      # __init__ failed before there was anything
            return
        try:
            self.close()
        except Exception:  # noqa: BLE001 - never raise from a finaliser
            log.debug("closing an ExecutionEngine at collection failed", exc_info=True)

    def __repr__(self) -> str:
        state = "closed" if self._closed else \
            "loaded" if self._code is not None else "not loaded"
        return f"<pywave.ExecutionEngine target={self._target.chip} {state}>"


def packed_slots(llvm_ir: str) -> dict[str, int]:
    """{function: pointers its packed wrapper reads} for every function of the host LLVM IR
    with a body: one per parameter, one more for a result."""
    out = {}
    for match in _DEFINE.finditer(llvm_ir):
        result, name, params = match.group(1), match.group(2), match.group(3)
        depth, count = 0, 0 if not params.strip() else 1
        for char in params:
            depth += char in "{[<("
            depth -= char in "}]>)"
            count += char == "," and depth == 0
        out[name.strip('"')] = count + (result != "void")
    return out


#: ``define [linkage/attributes] <result type> @name(<params>)`` of LLVM IR text.
_DEFINE = re.compile(r'^define (?:[a-z_]+ )*?(void|[^@\s]+|\{[^@]*\}) @("[^"]+"|[\w.$]+)'
                     r'\((.*)\)[^(]*\{$', re.M)


def _checked(call, what: str) -> None:
    """Run ``call`` with libwavert's thread error cleared; the pywave exception
    (:func:`pywave.runtime.recorded_error`) for the first error an ``mgpu*`` function
    recorded meanwhile."""
    runtime.clear_error()
    call()
    error = runtime.recorded_error(what)
    if error is not None:
        raise error


__all__ = ["ExecutionEngine", "UnknownFunction", "packed_slots"]
