"""Stage llvm-codegen: LLVM IR to host object code, and its loading into llvmlite's MCJIT.

Stage ``llvm-codegen`` (:mod:`pywave.pipeline`): LLVM IR -> optimised host object code;
then loaded into llvmlite's MCJIT (:class:`JitModule`).

Object code is the unit (so it can be cached on disk and loaded without MLIR). Before an
object is loaded, every symbol it leaves undefined must resolve in the process or in
libwavert: MCJIT would otherwise jump to address 0 on the first call.
"""

from __future__ import annotations

import ctypes
import functools
import logging
import sys
import threading

from .. import layout, sparse
from ..errors import CompileError
from ..image_params import undefined_symbols
from ..llvm import binding as llvm   # llvmlite.binding, imported on first use
from ..llvm import native_target

log = logging.getLogger("pywave.jit")

_init_lock = threading.Lock()
_runtime_loaded = False

#: Host-side half/bfloat16 conversions that LLVM lowers to compiler-rt calls. No library in
#: a Python process provides them, so they are defined here over libwavert's bit-exact
#: (round-to-nearest-even) conversions, whose ABI is plain integers.
SOFTFLOAT_IR = r"""
declare i16 @wavert_f16_from_f32(float)
declare i16 @wavert_f16_from_f64(double)
declare float @wavert_f32_from_f16(i16)
declare i16 @wavert_bf16_from_f32(float)
declare i16 @wavert_bf16_from_f64(double)

define half @__truncsfhf2(float %x) {
  %b = call i16 @wavert_f16_from_f32(float %x)
  %r = bitcast i16 %b to half
  ret half %r
}
define half @__truncdfhf2(double %x) {
  %b = call i16 @wavert_f16_from_f64(double %x)
  %r = bitcast i16 %b to half
  ret half %r
}
define float @__extendhfsf2(half %x) {
  %b = bitcast half %x to i16
  %r = call float @wavert_f32_from_f16(i16 %b)
  ret float %r
}
define float @__gnu_h2f_ieee(half %x) {
  %r = call float @__extendhfsf2(half %x)
  ret float %r
}
define half @__gnu_f2h_ieee(float %x) {
  %r = call half @__truncsfhf2(float %x)
  ret half %r
}
define bfloat @__truncsfbf2(float %x) {
  %b = call i16 @wavert_bf16_from_f32(float %x)
  %r = bitcast i16 %b to bfloat
  ret bfloat %r
}
define bfloat @__truncdfbf2(double %x) {
  %b = call i16 @wavert_bf16_from_f64(double %x)
  %r = bitcast i16 %b to bfloat
  ret bfloat %r
}
"""


def initialise(runtime_library: str | None = None) -> None:
    """Initialise LLVM's native target once; with ``runtime_library``, also make libwavert's
    symbols visible to the JIT."""
    global _runtime_loaded
    native_target()
    with _init_lock:
        if runtime_library and not _runtime_loaded:
            llvm.load_library_permanently(runtime_library)
            # MLIR's runner utilities (printMemref*, vector.print's print*), shipped with it.
            runner = layout.runner_library()
            if runner is not None:
                llvm.load_library_permanently(runner)
            _runtime_loaded = True


@functools.cache
def target_machine(opt_level: int) -> llvm.TargetMachine:
    """The target machine of host code at ``opt_level`` (one per level, reused): the generic
    CPU of the host's triple. Host code is launch glue (descriptor words, driver calls), and
    its object is kept in the disk cache, whose key does not hold the host CPU: one built for
    this CPU's extensions (AVX-512) would die of SIGILL on another machine sharing the cache
    (a home directory on NFS) or under valgrind."""
    initialise()
    target = llvm.Target.from_triple(llvm.get_process_triple())
    return target.create_target_machine(cpu="generic", features="", opt=opt_level,
                                        reloc="pic", codemodel="jitdefault")


def compile_object(llvm_ir: str, *, opt_level: int = 2, library: bool = False,
                   assembly: bool = False) -> tuple[bytes, str]:
    """Optimise ``llvm_ir`` at ``opt_level`` (0-3) and emit (object code, assembly text);
    the assembly is emitted only with ``assembly=True`` (else "": it costs a second codegen).

    The code is for the generic CPU of the host's triple (:func:`target_machine`).
    ``library=True`` makes an object to link into a shared library (``pywave.export``): every
    defined symbol hidden (so a host function named ``main`` cannot
    clash with a program's; the library's wrapper still reaches the packed entries and
    ``_pywave_release_kernels``)."""
    if opt_level not in (0, 1, 2, 3):
        raise CompileError(f"opt_level must be 0, 1, 2 or 3, got {opt_level!r}")
    tm = target_machine(opt_level)
    try:
        module = llvm.parse_assembly(llvm_ir)
        module.link_in(llvm.parse_assembly(SOFTFLOAT_IR))
        module.triple = tm.triple
        module.data_layout = str(tm.target_data)
        if library:
            _hide_symbols(module)
        module.verify()
    except RuntimeError as exc:
        raise CompileError(f"LLVM rejected the host IR: {exc}") from None
    if opt_level or _has_coroutines(llvm_ir):
        # LLVM's default pipeline at every level, -O0 included, runs the coroutine passes
        # (coro-early, coro-split, coro-cleanup) that the async dialect's lowering needs:
        # instruction selection cannot lower llvm.coro.* intrinsics. At -O0 it is run only
        # for such modules, so other programs' compile time does not change.
        pto = llvm.create_pipeline_tuning_options(speed_level=opt_level)
        pb = llvm.create_pass_builder(tm, pto)
        pb.getModulePassManager().run(module, pb)
    return tm.emit_object(module), tm.emit_assembly(module) if assembly else ""


def _has_coroutines(llvm_ir: str) -> bool:
    """Whether LLVM IR text calls coroutine intrinsics (``llvm.coro.*``: async.execute bodies
    lowered by convert-async-to-llvm)."""
    return "@llvm.coro." in llvm_ir


def _hide_symbols(module: llvm.ModuleRef) -> None:
    for value in list(module.functions) + list(module.global_variables):
        if not value.is_declaration and value.linkage.name in ("external", "weak_odr"):
            value.visibility = "hidden"


@functools.cache
def _async_wait_quiet():
    """``wavert_async_wait_quiet`` of libwavert_runner (a ctypes function), None when the
    runner library is not built."""
    path = layout.runner_library()
    if path is None:
        return None
    wait = ctypes.CDLL(path).wavert_async_wait_quiet
    wait.restype, wait.argtypes = None, []
    return wait


def wait_async_tasks() -> None:
    """Block until the async runtime's worker threads (libwavert_runner) run no task and none
    is queued: ``mlirAsyncRuntimeExecute``'s tasks of every program, finished before a
    program's code or kernels are freed (a task can still be running the tail of an
    ``async.execute`` body after it made its token ready, so the entry, and an ``await`` in
    it, may return first). Tasks queued meanwhile are waited for too."""
    wait = _async_wait_quiet()
    if wait is not None:
        wait()


def _uses_async_runtime(undefined: list[str]) -> bool:
    """Whether an object calls the async runtime's task pool (its coroutines resume there)."""
    return any(name.startswith("mlirAsyncRuntime") for name in undefined)


#: Symbols the JIT linker (RuntimeDyld) defines itself.
_LINKER_DEFINED = {"_GLOBAL_OFFSET_TABLE_"}


#: The engines not closed yet. An engine stays reachable from here until ``close``: llvmlite
#: frees an ExecutionEngine in its ``__del__``, and when the garbage collector takes a cycle
#: holding a compiled module it runs every finaliser of the cycle first, in no set order, so
#: the engine's code could be freed before the module's release calls into it.
_open_engines: set["JitModule"] = set()
_open_lock = threading.Lock()


class JitModule:
    """Host object code loaded into an MCJIT engine. Thread-safe after construction;
    ``close`` frees the code (callers must make sure no call is running; tasks of the async
    runtime that the code started are waited for). The code lives
    until ``close``: garbage collection alone never frees it (:data:`_open_engines`)."""

    def __init__(self, obj: bytes) -> None:
        undefined = undefined_symbols(obj)
        missing = [s for s in undefined
                   if s not in _LINKER_DEFINED and not llvm.address_of_symbol(s)]
        if missing:
            raise CompileError("host code needs symbols that nothing in the process provides: "
                               + ", ".join(sorted(missing)))
        sparse.preload(undefined)   # libwavert opens cuSPARSE(Lt) by soname when called
        self._async = _uses_async_runtime(undefined)
        if self._async:
            _async_wait_quiet()      # looked up now: close may run at interpreter exit
        tm = target_machine.__wrapped__(0)   # a fresh one: the engine owns and frees it
        base = llvm.parse_assembly("")
        base.triple = tm.triple
        self._engine = llvm.create_mcjit_compiler(base, tm)
        self._engine.add_object_file(llvm.ObjectFileRef.from_data(obj))
        self._engine.finalize_object()
        with _open_lock:
            _open_engines.add(self)

    def address(self, name: str) -> int:
        """Address of a function or global defined in the object (CompileError if absent)."""
        addr = self._engine.get_function_address(name) or \
            self._engine.get_global_value_address(name)
        if not addr:
            raise CompileError(f"the JIT-compiled host code has no symbol {name!r}")
        return addr

    def close(self, _finalizing=sys.is_finalizing, _lock=_open_lock,
              _open=_open_engines) -> None:
        """Free the code (idempotent). Code calling the async runtime is freed once the
        runtime's workers are quiet (:func:`wait_async_tasks`)."""
        if self._engine is not None:
            if self._async:
                wait = _async_wait_quiet()
                if wait is not None:
                    wait()
            engine, self._engine = self._engine, None
            with _lock:
                _open.discard(self)
            if _finalizing():   # llvmlite's globals may be gone at exit; the process frees it
                engine.detach()
            else:
                engine.close()
