"""The public surface: :func:`compile` and :class:`CompiledModule`.

``compile`` takes the named steps of :mod:`pywave.lookup`: the in-memory cache, the disk cache
(:mod:`pywave.cache`), on a miss the :class:`pywave.pipeline.Pipeline` in a compile worker
(:mod:`pywave.isolation`: a crash or hang of MLIR/LLVM there is a CompileError); a
:class:`CompiledModule` loads the program's host object code into the JIT and wraps each
host function in ``pywave._native.HostFunction``. MLIR is imported only when something must
be compiled, and then in the worker: a compile-cache hit needs llvmlite and libwavert alone
and starts no worker.
"""

from __future__ import annotations

import functools
import logging
import os
import time
from typing import Mapping, Sequence

from . import cache, lookup, pipeline, runtime
from .errors import (ArgumentError, CompileError, DeviceError, Error, NoAttributeError,
                     NotFoundError)
from .frontend import validate
from .frontend.source import MlirModule, text_and_name
from .host import jit, sharedobj
from .lowering import LoweringOptions, options_of, with_checks
from .pipeline import Artifacts
from .program import BACKENDS, PACKED_PREFIX, RELEASE_KERNELS, Binary, Program
from .runtime import kernel_api

log = logging.getLogger("pywave")

def device_count() -> int:
    """Number of GPUs pywave can launch on: the CUDA GPUs, else (none) the HIP GPUs; 0 when
    no GPU or no driver is present. Needs no GPU and never raises for a missing driver.

    Raises
    ------
    DeviceError
        A driver is present but fails to answer (its message)."""
    for backend in BACKENDS.values():
        count = runtime.device_count(backend.device_type)
        if count:
            return count
    return 0


#: The largest device ordinal libwavert takes (``int32_t``).
MAX_DEVICE = 2**31 - 1


def synchronize(device: int = 0) -> None:
    """Wait until all work on a GPU has finished; the synchronisation point for kernel faults.

    Calls return without waiting for their kernels, so a kernel fault (an out-of-bounds
    store, ``CUDA_ERROR_ILLEGAL_ADDRESS``) is reported by the next synchronisation: this
    function, a blocking ``gpu.wait`` in host code, or the framework's own synchronisation.

    Parameters
    ----------
    device : int
        Ordinal of the GPU (a CUDA GPU; a HIP GPU where no CUDA GPU is present).

    Raises
    ------
    DeviceError
        The driver's error, e.g. ``cuCtxSynchronize: CUDA_ERROR_ILLEGAL_ADDRESS (...)``.
        After a kernel fault CUDA poisons the GPU's context for the rest of the process:
        restart the process to use that GPU again.
    ArgumentError
        ``device`` is not an int in 0..2**31-1 (libwavert's device ordinals are int32).
    """
    if isinstance(device, bool) or not isinstance(device, int) or device < 0:
        raise ArgumentError(f"synchronize(): device must be a GPU ordinal (int >= 0), "
                            f"got {device!r}")
    if device > MAX_DEVICE:
        raise ArgumentError(f"synchronize(): device {device} is out of range; GPU ordinals "
                            f"are at most {MAX_DEVICE} (int32)")
    for backend in BACKENDS.values():
        if runtime.device_count(backend.device_type):
            runtime.synchronize(backend.device_type, device)
            return
    raise DeviceError("synchronize(): no CUDA or HIP GPU is present")


def build(text: str, *, target: str | Sequence[str] | None = None, opt_level: int = 2,
          format: str = "auto", filename: str = "<input>", keep_stages: bool = False,
          dump_dir: str | None = None, binaries: Mapping | None = None,
          lowering: "LoweringOptions | Mapping | None" = None,
          passes: str | None = None) -> Artifacts:
    """Run every compile stage on ``text`` and return their plain outputs (no GPU needed
    when ``target`` is given): :class:`pywave.pipeline.Pipeline` with ``compile``'s options,
    in this process (no compile worker: for tests and debuggers).
    ``keep_stages``: keep each stage's IR text. ``dump_dir`` (or ``$PYWAVE_DUMP_DIR``):
    write every intermediate into a fresh numbered folder there (:mod:`pywave.dump`)."""
    return pipeline.Pipeline(text, target=target, opt_level=opt_level, format=format,
                             filename=filename, replacements=binaries,
                             keep_stages=keep_stages, dump_dir=dump_dir,
                             lowering=options_of(lowering), passes=passes).run()


def compile(text: "str | os.PathLike[str] | MlirModule", *,
            target: str | Sequence[str] | None = None,
            opt_level: int = 2, format: str = "auto", disk_cache: bool = True,
            dump_dir: str | None = None, binaries: dict | None = None,
            lowering: LoweringOptions | Mapping | None = None,
            passes: str | None = None, checks: bool | None = None,
            isolate: bool | None = None, timeout: float | None = None) -> CompiledModule:
    """Compile an MLIR module of ``gpu.module`` kernels and host ``func.func`` functions.

    Parameters
    ----------
    text : str, os.PathLike or MLIR module object
        MLIR in upstream dialects (gpu, func, arith, scf, cf, memref, math, vector, affine,
        index, llvm, nvvm). A ``str`` is always MLIR text; a path object
        (``pathlib.Path("kernels.mlir")``, any ``os.PathLike``) names a UTF-8 file to read,
        whose name then appears in diagnostics. An ``mlir.ir.Module``, ``Operation`` or
        ``OpView`` of the MLIR Python bindings, or a module object of another MLIR build's
        bindings (IREE's ``iree.compiler.ir``), is compiled from its text
        (:func:`pywave.frontend.source.text_and_name` says exactly what is accepted): it is printed
        here, left unchanged and may be used again; the compiled module does not depend on
        its context.
    target : str or list of str, optional
        Chip to build every ``gpu.module`` for, e.g. ``"sm_90"`` (NVIDIA) or ``"gfx942"``
        (AMD), or several NVIDIA chips (``["sm_80", "sm_90"]`` or ``"sm_80,sm_90"``: one
        fatbin per gpu.module). It wins over chips the IR names (a warning says so). Default:
        the chips the IR names, else the chip of GPU 0; required when neither exists.
    opt_level : int
        LLVM optimisation level of the host code (0-3).
    format : str
        Kernel binary: ``"cubin"``, ``"ptx"``, ``"fatbin"`` or ``"auto"`` (NVIDIA: cubin when
        ptxas is found, else PTX; AMD: ``"hsaco"``, the only one).
    disk_cache : bool
        Use the on-disk compile cache (see :mod:`pywave.cache`); the in-memory cache is
        always used.
    dump_dir : str, optional
        Write every intermediate (IR per stage, kernel LLVM IR, PTX, binaries, host IR,
        assembly, object, ``manifest.json``) into a fresh numbered folder there
        (:mod:`pywave.dump`); default ``$PYWAVE_DUMP_DIR``. Dumping forces a real compile:
        the caches are not looked up (the result is still stored).
    binaries : dict, optional
        ``{gpu.module name: path or bytes}``: use this image (PTX, cubin, fatbin or hsaco,
        told apart by its bytes) instead of the module's compiled one, keeping the host code.
    lowering : LoweringOptions or dict, optional
        Options of upstream's GPU lowering pipeline: ``index_bitwidth`` (32/64),
        ``kernel_bare_ptr``, ``features`` (``"+ptx80"``), ``kernel_opt_level`` (0-3, the
        kernels' own level); and the kernel compile options ``line_info``, ``fast_math``
        (changes results), ``max_registers`` (1-255), ``ptxas_options`` (a list of
        strings), ``keep_kernel_params`` (MLIR's whole kernel ABI: unread parameters kept);
        see :class:`pywave.lowering.LoweringOptions` for what each does. Part of the cache
        key.
    passes : str, optional
        Your own pass pipeline in MLIR's textual syntax, anchored on the module
        (``"builtin.module(canonicalize, func.func(cse))"``; any pass the MLIR Python bindings
        register), run right after parsing, before pywave's lowering
        (:mod:`pywave.frontend.passes`). Part of the cache key. An unknown pass, a bad option
        or a failing pass is a ``CompileError`` naming the pass (a failure also the op and its
        location).
    checks : bool, optional
        The checked mode of ``target="cpu"``: every memref access bounds-checked, every
        ``gpu.barrier`` required of all threads of a block, data races on workgroup memory
        reported; a failure raises :class:`pywave.KernelFaultError` naming the kernel, block,
        thread(s), op, index and memref, never a hang or a crash
        (:mod:`pywave.kernels.checks`). Default: ``$PYWAVE_CHECKS`` (``1``: on for
        ``target="cpu"``, ignored for GPU targets). ``True`` with another target is a
        ``CompileError``. Part of the cache key; kernels run slower.
    isolate : bool, optional
        Run MLIR and LLVM in a compile worker process (the default; ``$PYWAVE_ISOLATE=0``
        turns it off): a crash, abort or hang there becomes a ``CompileError`` naming the
        stage, the tool's last message and a saved reproducer (:mod:`pywave.isolation`).
        ``False`` compiles in this process (for debuggers). Cache hits start no worker.
    timeout : float, optional
        Seconds an isolated compile may take (default ``$PYWAVE_COMPILE_TIMEOUT``, else 300).

    Returns
    -------
    CompiledModule
        Callable host functions; see its docstring for the argument rules. The same text and
        options return the same (still open) module.

    Raises
    ------
    CompileError
        Malformed or unsupported MLIR, a failing pass, a missing tool or library, an unknown
        chip or an option out of range, a crash or time-out of the compile worker.
    TypeError
        An option of the wrong type (naming it), or ``text`` of a type not accepted.
    """
    call = lookup.call_key(text, (target, opt_level, format, disk_cache, dump_dir, binaries,
                                  lowering, passes, checks, isolate, timeout)) \
        if binaries is None else None       # images given by path are read on every call
    if call is not None:
        hit = lookup.live(call)
        if hit is not None:
            log.info("compile: in-memory cache hit")
            return hit
    text, filename = text_and_name(text)
    compiler = pipeline.Pipeline(text, target=target, opt_level=opt_level, format=format,
                                 filename=filename, replacements=binaries, dump_dir=dump_dir,
                                 lowering=with_checks(options_of(lowering), checks, target),
                                 launchers=True, passes=passes)
    validate.isolate(isolate)                                # checked on hits too
    if timeout is not None:
        validate.timeout(timeout)
    dumping = compiler.dump_root is not None
    req = lookup.request(compiler)
    started = time.perf_counter()
    hit = lookup.live(req.memo) if not dumping else None
    if hit is not None:
        log.info("compile: in-memory cache hit")
        return lookup.adopt(req.memo, hit, call)
    module = _from_disk(req) if disk_cache and not dumping else None
    how = "disk cache hit"
    if module is None:
        program = lookup.build_program(compiler, isolate=isolate, timeout=timeout)
        if disk_cache:
            program = lookup.keep(req, program) or program   # as stored: pre-linked
        how = "compiled (cache miss)" if disk_cache and not dumping else "compiled (cache off)"
        module = CompiledModule(program)
    log.info("compile %s: %s for %s in %.1f ms", req.key[:16], how, module.target,
             (time.perf_counter() - started) * 1e3)
    return lookup.adopt(req.memo, module, call if not dumping else None)


def _from_disk(req: "lookup.Request") -> "CompiledModule | None":
    """The disk cache's module for ``req``, loaded; None on a miss. An entry that decodes but
    does not load (e.g. a parameter record the call path refuses) is discarded."""
    program = lookup.stored(req)
    if program is None:
        return None
    try:
        return CompiledModule(program)
    except (Error, TypeError, ValueError, OverflowError) as exc:
        cache.discard(req.key, f"the module does not load: {exc}")
        return None


class CompiledModule:
    """Host functions of one compiled MLIR module, callable on DLPack tensors.

    ``mod(*args, stream=None)`` calls the only host function; ``mod.NAME(...)`` and
    ``mod["NAME"](...)`` call one by name. A memref argument takes a GPU tensor
    (torch, cupy, jax, any ``__dlpack__`` producer) whose dtype, rank, static sizes and layout
    match; a scalar takes a Python or NumPy number in range for its type. In a host program
    (``target == "host"``: the module has no GPU op) a memref argument takes a CPU tensor
    instead (NumPy, torch CPU, any DLPack producer on kDLCPU, or pinned host memory
    kDLCUDAHost/kDLROCMHost; not managed memory), a GPU tensor is an ``ArgumentError``
    naming the argument and its device, the call takes no ``stream=`` and opens no driver. Launches go to the
    tensors' device on the producer's current stream (or ``stream=``) without host
    synchronisation. A host function in Wave's host-wrapper convention (README: Running
    Wave's host wrappers) takes Python objects instead: tensors, ints and floats, read by
    Wave's helpers.

    Thread-safe: any thread may call the functions concurrently.

    Lifetime: a host function keeps the module's code alive (``f = pywave.compile(text).main``
    stays callable after the module object is gone); the code is released (kernels unloaded
    after their pending work, host code freed) when ``close()`` is called or when the module
    and all of its functions are gone. ``close()`` (or leaving a ``with`` block) never
    waits: calls that have not launched yet raise ``ArgumentError`` ("the compiled module is
    closed"), and when calls are in flight on other threads, or ``close()`` runs inside a
    call (a producer's ``__dlpack__``, a scalar's ``__index__``), the release is deferred
    until the last of them returns and is done by that call's thread.
    """

    def __init__(self, program: Program) -> None:
        import ctypes

        from . import _native
        self._program = program
        engine = _prelinked(program)
        if engine is None:   # no usable pre-linked shared object (pywave.host.sharedobj): MCJIT
            jit.initialise(runtime.LIBRARY)
            engine = jit.JitModule(program.object_code)
        self._engine = engine   # MCJIT or pre-linked: which one served is visible for tests
        try:
            release_kernels = ctypes.CFUNCTYPE(None)(engine.address(RELEASE_KERNELS))
            # The release holds the engine, never the module: a function outliving its
            # module keeps the code, and the module's death alone releases nothing.
            self._code = _native.HostCode(functools.partial(_release, engine,
                                                            release_kernels))
        except BaseException:
            engine.close()          # nothing owns it yet (engines live until closed)
            raise
        device_type = program.target.device_type
        self._functions = {}
        launchers = {}
        for sig in program.functions:
            kernel = kernel_api.kernel_of(sig.name)
            fn = _native.HostFunction(engine.address(PACKED_PREFIX + sig.name),
                                      kernel or sig.name, sig.params, device_type,
                                      code=self._code, results=sig.results,
                                      convention=sig.convention,
                                      cpu_device=program.target.is_cpu)
            if kernel is None:
                self._functions[sig.name] = fn
            else:
                launchers[kernel] = _native.KernelLauncher(fn, kernel)
        self._kernels = kernel_api.Kernels(launchers, self._code)
        # Plain instance attributes: mod.NAME is then found without __getattr__ (a Python-level
        # call that would cost a few hundred ns on every launch).
        for name, fn in self._functions.items():
            if name.isidentifier() and not hasattr(type(self), name):
                self.__dict__[name] = fn

    @property
    def closed(self) -> bool:
        """``close()`` was called (the release may still wait for calls in flight)."""
        return self._code.closed

    @property
    def functions(self) -> list[str]:
        """Names of the callable host functions."""
        return list(self._functions)

    @property
    def kernels(self) -> "kernel_api.Kernels":
        """The kernels Python can launch, by ``"module::kernel"`` (or the kernel's name alone
        when unique): ``mod.kernels["add"](a, b, c, n, grid=(g, 1, 1), block=(256, 1, 1),
        shared_mem=0, stream=None)``. Each launch validates its arguments as a host
        function's do (dtype, rank, static sizes, device, scalar ranges) plus the grid and
        block (1-3 ints, each >= 1, within the device's and kernel's limits) and the dynamic
        shared memory (bytes); it is asynchronous on the stream. See
        :class:`pywave.runtime.kernel_api.Kernels`."""
        return self._kernels

    def kernel(self, name: str):
        """The launcher of kernel ``name`` (``"module::kernel"`` or a unique kernel name):
        ``mod.kernels[name]``."""
        return self._kernels[name]

    def kernel_attributes(self, name: str, *, device: int | None = None,
                          chip: str | None = None) -> "kernel_api.KernelAttributes":
        """Registers, spills, local, shared and constant memory, limits and versions of
        kernel ``name`` (``"module::kernel"`` or a unique kernel name; launchable or not).

        ``device=None``: ptxas' figures from the compile (no GPU needed; kept in the compile
        cache), for ``chip`` (default: the image's first chip). ``device=N``: the driver's
        (``cuFuncGetAttribute``) for the code it loads from the image on GPU ``N`` of the
        target's backend; the image is loaded for the query and released after it, which
        waits for the device's pending work. See
        :class:`pywave.runtime.kernel_api.KernelAttributes`.

        Raises ArgumentError for an unknown or ambiguous name, or no figures for the chip
        (PTX left to the driver, images given with ``binaries=``); DeviceError without that
        GPU or when the driver fails; TypeError for arguments of the wrong type."""
        binary, kernel = kernel_api.find_kernel(self._program.binaries, name, list(self._kernels))
        if chip is not None and not isinstance(chip, str):
            raise TypeError(f"chip must be a chip name (str) or None, got {chip!r}")
        if device is None:
            return kernel_api.compiled_attributes(binary, kernel, chip)
        if isinstance(device, bool) or not isinstance(device, int):
            raise TypeError(f"device must be a GPU ordinal (int) or None, got {device!r}")
        values = runtime.function_attributes(self._program.target.device_type, device,
                                             binary.data, kernel)
        return kernel_api.driver_attributes(binary, kernel, values)

    @property
    def target(self) -> str:
        """Target chip of the kernels (``"sm_90"``; several: ``"sm_80,sm_90"``), or
        ``"host"`` for a host program: a module with no GPU op (no ``gpu.module``, launch,
        GPU memory op or ``mgpu*`` call), whose calls open no driver and take CPU tensors
        (README "Host-only modules")."""
        return self._program.target.chip

    @property
    def program(self) -> Program:
        """The compiled program this module runs (plain data: what the disk cache keeps)."""
        return self._program

    @property
    def binaries(self) -> list[Binary]:
        """The embedded kernel binaries (name, format, data, chip)."""
        return list(self._program.binaries)

    def __getitem__(self, name: str):
        try:
            return self._live()[name]
        except KeyError:
            raise NotFoundError(f"no host function {name!r}; functions: "
                                f"{self.functions}") from None

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        try:
            return self._live()[name]
        except KeyError:
            raise NoAttributeError(f"no host function {name!r}; functions: "
                                   f"{self.functions}") from None

    def __call__(self, *args, **kwargs):
        live = self._live()
        if len(live) != 1:
            raise ArgumentError(f"the module has {len(live)} host functions "
                                f"({', '.join(live)}); call one by name")
        return next(iter(live.values()))(*args, **kwargs)

    def _live(self) -> dict:
        if self._code.closed:
            raise Error("the compiled module is closed")
        return self._functions

    def close(self) -> None:
        """Close the module: later calls of its functions raise; its kernels are unloaded
        (after their pending work) and its host code freed now, or, while calls are in
        flight (other threads, or this call's own callbacks), when the last one returns.
        Idempotent; never waits for other threads."""
        for name in self._functions:
            self.__dict__.pop(name, None)
        self._code.close()

    def __enter__(self) -> "CompiledModule":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        state = " closed" if self._code.closed else ""
        return f"<pywave.CompiledModule functions={self.functions} target={self.target}{state}>"


def _prelinked(program: Program) -> "sharedobj.SharedObjectModule | None":
    """``program.shared_object`` opened, if it has one, it opens and it defines every symbol
    the module uses (else None, logged: the caller loads ``object_code`` with MCJIT). The
    program holds the bytes to open (the disk cache checked them against the entry's
    checksum and key): no file is read here."""
    if program.shared_object is None:
        return None
    engine = sharedobj.load(program.shared_object, runtime.LIBRARY)
    if engine is None:
        return None
    try:
        engine.address(RELEASE_KERNELS)
        for sig in program.functions:
            engine.address(PACKED_PREFIX + sig.name)
    except CompileError as exc:
        engine.close()
        log.warning("%s; loading the host code with MCJIT", exc)
        return None
    return engine


def _release(engine: "jit.JitModule | sharedobj.SharedObjectModule", release_kernels) -> None:
    """The release of one module's code (run once by its ``_native.HostCode``, GIL held):
    the generated ``_pywave_release_kernels`` (releases each loaded kernel, waiting for its
    pending work), then the engine holding the host code (MCJIT or the pre-linked object)."""
    release_kernels()
    engine.close()


__all__ = ["compile", "device_count", "synchronize", "CompiledModule", "CompileError",
           "ArgumentError", "DeviceError", "Error"]
