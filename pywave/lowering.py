"""The lowering options (LoweringOptions) and the NVVM kernel pipeline they select.

Lowering options: what upstream's ``gpu-lower-to-nvvm-pipeline`` lets a user choose
(index bitwidth, bare-pointer kernel arguments, chip features, kernel optimisation level) plus
the kernel compile options of nvcc users (line info, fast math, a register limit, extra ptxas
options), the kernel pipeline they make, and the image format a chip can be compiled to.

Plain data and strings; no MLIR import (the options are part of the compile-cache key,
computed before MLIR loads). :mod:`pywave.kernels.compile_flags` applies the kernel compile options
to the IR.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
import re
from typing import Mapping

from .errors import CompileError

log = logging.getLogger("pywave.lowering")


#: The most registers a thread can use on every NVIDIA GPU (sm_35 and later): the limit of
#: ``max_registers`` (ptxas raises a value below the ABI minimum to that minimum).
MAX_REGISTERS = 255

#: Default ``coarsen_threads`` of NVIDIA targets: 2^22 threads, about 15 times what an H200
#: (132 SMs of 2,048 threads) holds at once, so the coarsened launch still fills the GPU
#: several times over; below it a launch is short and coarsening gains little.
COARSEN_THREADS = 1 << 22

#: The largest ``coarsen_threads``: a launch has at most 2^31 - 1 blocks of 1,024 threads.
MAX_COARSEN_THREADS = (2**31 - 1) * 1024

#: ptxas options pywave sets itself (the chip, the output, the optimisation level) or that
#: have their own LoweringOptions field, or would read more options from a file: refused in
#: ``ptxas_options``. Keyed by every spelling ptxas accepts.
RESERVED_PTXAS_OPTIONS = {
    "-arch": "the chip comes from target=", "--gpu-name": "the chip comes from target=",
    "-o": "pywave names the output", "--output-file": "pywave names the output",
    "-O": "use kernel_opt_level=", "--opt-level": "use kernel_opt_level=",
    "-maxrregcount": "use max_registers=", "--maxrregcount": "use max_registers=",
    "-lineinfo": "use line_info=True", "--generate-line-info": "use line_info=True",
    "-c": "a relocatable object cannot be loaded", "--compile-only":
        "a relocatable object cannot be loaded",
    "-optf": "options come from the list only", "--options-file":
        "options come from the list only",
    "-ias": "the PTX comes from the compile", "--input-as-string":
        "the PTX comes from the compile",
}

#: ptxas options that make it print and compile nothing (no cubin would come out).
NO_OUTPUT_PTXAS_OPTIONS = {
    "--version": "it prints ptxas's version and compiles nothing",
    "-V": "it prints ptxas's version and compiles nothing",
    "--help": "it prints ptxas's help and compiles nothing",
    "-h": "it prints ptxas's help and compiles nothing",
    "--list-version": "it lists PTX versions and compiles nothing",
    "-list-version": "it lists PTX versions and compiles nothing",
}

#: One ptxas option: a dash or two, a name, and an optional ``=value`` without spaces, quotes
#: or shell/pipeline metacharacters (``--def-load-cache=cg``, ``-v``, ``--warn-on-spills``).
_PTXAS_OPTION = r"--?[A-Za-z][A-Za-z0-9_-]*(=[A-Za-z0-9_.,:+/-]+)?"


@dataclasses.dataclass(frozen=True)
class LoweringOptions:
    """Options of the kernel and host lowering (the defaults are pywave's historic ones).
    Every field is part of the compile-cache key. Thread-safe (immutable).

    index_bitwidth : int
        Width of ``index`` inside kernels (32 or 64; upstream's ``index-bitwidth``).
    kernel_bare_ptr : bool
        Kernels take memrefs of static shape as bare pointers (upstream's
        ``kernel-bare-ptr-calling-convention``; every kernel memref must then be static with
        an identity layout).
    features : str
        PTX features of ``#nvvm.target`` (``"+ptx80"``); "" keeps MLIR's default.
    kernel_opt_level : int
        Optimisation level of the kernels (0-3), independent of the host's ``opt_level``:
        LLVM's level for the kernel IR and, on NVIDIA, ptxas's ``--opt-level``
        (``#nvvm.target<O = N>``); on AMD, the level of the AMDGPU code generation.
    line_info : bool
        Source line information for profilers and sanitizers (Nsight Compute's source view,
        ``compute-sanitizer`` reports), as nvcc's ``-lineinfo``: the kernels keep their MLIR
        locations as line directives (``.loc`` in the PTX; LLVM's "debug directives only",
        no variables, no change to the generated code) and ptxas gets ``-lineinfo``, which
        puts a line table into the cubin. On AMD, the code object gets a DWARF line table.
        With ``format="ptx"`` the PTX carries the ``.loc`` lines; the driver's JIT compile
        keeps them only where the driver does so by default.
    fast_math : bool
        nvcc's ``-use_fast_math`` (NVIDIA only). **Changes results**; off by default. It sets,
        for every kernel:

        - the ``afn`` and ``contract`` fast-math flags on each floating-point ``arith`` and
          ``math`` op (not ``nnan``/``ninf``/``reassoc``: NaN and infinity handling and the
          order of operations stay as written, as with nvcc): f32 division becomes
          ``div.approx.f32`` (2 ulp for divisors in [2^-126, 2^126]; nvcc's
          ``--prec-div=false`` gives the similar ``div.full.f32``); ``math.exp``, ``log``,
          ``sin``, ``cos``, ``tan``, ``pow``... on f32 call libdevice's ``__nv_fast_*``
          variants, the hardware approximations (``ex2.approx``, ``sin.approx``...) whose
          error grows outside a small range (CUDA's ``__expf``, ``__sinf``...);
        - f32 denormals flushed to zero (nvcc's ``--ftz=true``): LLVM's
          ``denormal-fp-math-f32 = preserve-sign`` (``.ftz`` instructions) and libdevice's
          flush-to-zero paths (its ``__CUDA_FTZ`` reflection, ``nvvm-reflect-ftz = 1``).

        f32 ``math.sqrt`` is ``sqrt.approx.ftz.f32`` with it and the correctly rounded
        ``sqrt.rn.f32`` without it (:func:`pywave.kernels.rewrites.semantics.precise_sqrt`:
        MLIR's libdevice ``__nv_sqrtf`` is approximate, its ``__CUDA_PREC_SQRT`` reflection
        left at 0). Fused multiply-add contraction (``--fmad=true``) is LLVM's NVPTX default
        either way.
    max_registers : int or None
        Most registers a thread of each kernel may use (1-255), as ptxas's
        ``--maxrregcount``: a ``.maxnreg`` directive on every kernel, so it holds for cubin,
        fatbin and PTX compiled by the driver alike (a kernel's own smaller ``nvvm.maxnreg``
        wins). Fewer registers allow more resident threads but may spill to local memory.
        NVIDIA only. None: no limit.
    ptxas_options : tuple of str
        Extra ptxas options (NVIDIA; ``format`` ``"cubin"``, ``"fatbin"`` or ``"auto"`` with
        ptxas), one option per string with its value after ``=``
        (``("--warn-on-spills", "--def-load-cache=cg")``). They reach ptxas as separate
        arguments (``#nvvm.target``'s ``ptxas-cmd-options``), never through a pass-pipeline
        string. Options pywave sets itself are refused (:data:`RESERVED_PTXAS_OPTIONS`).
    keep_kernel_params : bool
        Kernels keep every parameter of MLIR's kernel ABI (a memref as its whole descriptor),
        also those they never read. Off by default: pywave drops the unused ones and its
        launches pass only the rest (:mod:`pywave.kernels.unused_params`), which saves the driver
        about 3 ns a parameter per launch. Set it for kernel images that code other than
        pywave's launches with MLIR's argument layout (``pywave.api.build(...).binaries``).
    checks : bool
        The CPU target's checked mode (``target="cpu"`` only: a CompileError for a GPU
        target): every memref access bounds-checked (MLIR's ``generate-runtime-verification``),
        every ``gpu.barrier`` required of all threads of the block, workgroup-memory data races
        reported; a failure raises :class:`pywave.KernelFaultError` naming the kernel, the
        block, the thread(s), the op, the index and the memref
        (:mod:`pywave.kernels.checks`). Kernels run slower (one fiber per thread).
    coarsen_threads : int or None
        Block coarsening of elementwise kernels (:mod:`pywave.kernels.rewrites.coarsen`): a
        host launch of such a kernel with at least this many threads along x (grid x times
        block x) runs a copy of it in which each block does the work of 4 consecutive blocks,
        all their loads first: 4x the memory requests in flight, so a one-element-per-thread
        kernel streams at the bandwidth of a vectorised one. What the kernel computes is the
        same; smaller launches and the kernel API (``mod.kernels[...]``) run the kernel as
        written. None (the default): :data:`COARSEN_THREADS` on NVIDIA targets, off on the CPU
        and AMD targets; 0: off; N >= 1: launches of at least N threads, on every target.
    """

    index_bitwidth: int = 64
    kernel_bare_ptr: bool = False
    features: str = ""
    kernel_opt_level: int = 3
    line_info: bool = False
    fast_math: bool = False
    max_registers: int | None = None
    ptxas_options: tuple[str, ...] = ()
    keep_kernel_params: bool = False
    checks: bool = False
    coarsen_threads: int | None = None

    def __post_init__(self) -> None:
        if self.index_bitwidth not in (32, 64):
            raise CompileError(f"index_bitwidth must be 32 or 64, got {self.index_bitwidth!r}")
        if self.kernel_opt_level not in (0, 1, 2, 3):
            raise CompileError("kernel_opt_level must be 0, 1, 2 or 3, got "
                               f"{self.kernel_opt_level!r}")
        if self.features and not re.fullmatch(r"(\+[\w.]+)(,\+[\w.]+)*", self.features):
            raise CompileError(f"features must look like '+ptx80' (comma-separated, each "
                               f"starting with '+'), got {self.features!r}")
        for name in ("kernel_bare_ptr", "line_info", "fast_math", "keep_kernel_params",
                     "checks"):
            if not isinstance(getattr(self, name), bool):
                raise CompileError(f"{name} must be a bool, got {getattr(self, name)!r}")
        regs = self.max_registers
        if regs is not None and (isinstance(regs, bool) or not isinstance(regs, int)
                                 or not 1 <= regs <= MAX_REGISTERS):
            raise CompileError(f"max_registers must be an int in [1, {MAX_REGISTERS}] (the "
                               f"per-thread register limit of NVIDIA GPUs) or None, got "
                               f"{regs!r}")
        threads = self.coarsen_threads
        if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int)
                                    or not 0 <= threads <= MAX_COARSEN_THREADS):
            raise CompileError(f"coarsen_threads must be None or an int in [0, "
                               f"{MAX_COARSEN_THREADS}] (0: off), got {threads!r}")
        object.__setattr__(self, "ptxas_options", _checked_ptxas_options(self.ptxas_options))

    def coarsen_threshold(self, backend: str) -> int:
        """The ``coarsen_threads`` that applies to kernels for ``backend`` (``"nvvm"``,
        ``"rocdl"``, ``"cpu"``): 0 when off."""
        if self.coarsen_threads is not None:
            return self.coarsen_threads
        return COARSEN_THREADS if backend == "nvvm" else 0

    def key(self) -> dict:
        """The options as plain data, for the compile-cache key and dumps."""
        return dataclasses.asdict(self)

    @property
    def nvidia_only(self) -> list[str]:
        """The fields set away from their defaults that only NVIDIA targets support. The
        ROCDL lowering takes none of upstream's NVVM pipeline options: ``kernel_bare_ptr``
        would give the host's launches bare pointers for kernels that read descriptors."""
        return [name for name, unset in (("index_bitwidth", 64), ("kernel_bare_ptr", False),
                                         ("features", ""), ("fast_math", False),
                                         ("max_registers", None), ("ptxas_options", ()))
                if getattr(self, name) != unset]

    @property
    def ptxas_arguments(self) -> tuple[str, ...]:
        """What ptxas gets beyond pywave's own arguments: ``-lineinfo`` with line info, then
        :attr:`ptxas_options`."""
        return (("-lineinfo",) if self.line_info else ()) + self.ptxas_options


def options_of(value: "LoweringOptions | Mapping[str, object] | None"
               ) -> LoweringOptions | None:
    """``lowering=`` of :func:`pywave.compile`/:func:`pywave.export` as LoweringOptions (a
    mapping gives its fields; CompileError names an unknown field; TypeError for another
    type)."""
    if value is None or isinstance(value, LoweringOptions):
        return value
    if isinstance(value, Mapping):
        fields = {f.name for f in dataclasses.fields(LoweringOptions)}
        unknown = sorted(set(value) - fields)
        if unknown:
            raise CompileError(f"lowering: unknown option {unknown[0]!r}; the options are "
                               f"{', '.join(sorted(fields))}")
        return LoweringOptions(**value)
    raise TypeError(f"lowering must be a pywave.lowering.LoweringOptions or a dict, got "
                    f"{type(value).__name__}")


#: Environment variable that turns the checked mode on for ``target="cpu"`` compiles that do
#: not pass ``checks=`` (``1``; ``0`` or unset: off). GPU targets ignore it (logged).
CHECKS_ENV = "PYWAVE_CHECKS"


def with_checks(options: LoweringOptions | None, checks: "bool | None",
                target: object) -> LoweringOptions | None:
    """``options`` with the ``checks=`` of :func:`pywave.compile` applied: None reads
    :data:`CHECKS_ENV` (on for ``target="cpu"`` only). TypeError for a non-bool,
    CompileError for ``checks=True`` with a target other than ``"cpu"``."""
    if checks is None:
        value = os.environ.get(CHECKS_ENV, "").strip().lower()
        if value in ("", "0", "false", "no", "off"):
            return options
        if target != "cpu":
            log.info("%s=%s: ignored for target %r (the checked mode is the CPU target's)",
                     CHECKS_ENV, value, target)
            return options
        checks = True
    if not isinstance(checks, bool):
        raise TypeError(f"checks must be a bool, got {checks!r}")
    if not checks:
        return options
    if target != "cpu":
        raise CompileError(f"checks=True needs target='cpu' (got target={target!r}): the "
                           "checked mode (bounds, barrier and race checks) runs the kernels "
                           "on the CPU device")
    return dataclasses.replace(options or LoweringOptions(), checks=True)


def _checked_ptxas_options(options: object) -> tuple[str, ...]:
    """``ptxas_options`` as a tuple of validated strings (CompileError naming the bad one)."""
    if isinstance(options, (str, bytes)) or not isinstance(options, (list, tuple)):
        raise CompileError(f"ptxas_options must be a list of strings (one option each, e.g. "
                           f"['--warn-on-spills']), got {options!r}")
    for i, option in enumerate(options):
        where = f"ptxas_options[{i}] = {option!r}"
        if not isinstance(option, str) or len(option) > 200 or \
                not re.fullmatch(_PTXAS_OPTION, option):
            raise CompileError(f"{where} is not one ptxas option: expected '-name' or "
                               "'--name=value' (letters, digits, '_', '-'; a value without "
                               "spaces or quotes; at most 200 characters)")
        name = option.split("=", 1)[0]
        reserved = RESERVED_PTXAS_OPTIONS.get(name) or \
            (RESERVED_PTXAS_OPTIONS["-O"] if re.fullmatch(r"-O\d*", name) else None)
        if reserved:
            raise CompileError(f"{where}: pywave sets {name} itself ({reserved})")
        if name in NO_OUTPUT_PTXAS_OPTIONS:
            raise CompileError(f"{where} is refused: {NO_OUTPUT_PTXAS_OPTIONS[name]}")
    return tuple(options)


def nvvm_pipeline(options: LoweringOptions) -> str:
    """Kernel lowering to NVVM, the kernel half of upstream's ``gpu-lower-to-nvvm-pipeline``:
    nvgpu (TMA, mbarrier, warpgroup MMA; also the host's TMA descriptor encoding), the vector
    ops left after the prepare stage (transfer reads and writes of rank 1, transposes, type
    casts), the GPU ops (subgroup reductions and queries, all-reduce, shuffles, WMMA, printf,
    assert) and NVVM's own ops."""
    gpu_to_nvvm = (f"convert-gpu-to-nvvm{{index-bitwidth={options.index_bitwidth} "
                   f"use-bare-ptr-memref-call-conv={int(options.kernel_bare_ptr)}}}")
    return ("builtin.module(convert-nvgpu-to-nvvm, gpu.module(convert-vector-to-llvm, "
            f"{gpu_to_nvvm}, canonicalize, cse, convert-nvvm-to-llvm, "
            "reconcile-unrealized-casts))")


@functools.cache
def ptxas_chips(ptxas: str) -> frozenset[str]:
    """The ``sm_*`` chips this ``ptxas`` compiles for, read from its ``--help`` (empty when
    the list cannot be read: then every chip is tried)."""
    import subprocess
    try:
        out = subprocess.run([ptxas, "--help"], capture_output=True, text=True,
                             timeout=30).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        log.debug("cannot ask %s for its chips: %s", ptxas, exc)
        return frozenset()
    block = out.split("--gpu-name", 1)[-1].split("\n--", 1)[0]
    return frozenset(re.findall(r"'(sm_\w+)'", block))


def image_format(fmt: str, chip: str, toolkit: str | None) -> str:
    """The kernel image format to produce for ``chip``: ``fmt``, except that a chip the
    toolkit's ptxas no longer compiles for (CUDA 13 dropped sm_50...sm_72) gets PTX when
    ``fmt`` is ``"auto"`` or ``"fatbin"``: the driver compiles PTX for the GPU it runs on,
    and a GPU runs PTX written for any older chip. ``"cubin"`` for such a chip is an error."""
    if fmt not in ("auto", "fatbin", "cubin") or not toolkit:
        return fmt
    ptxas = os.path.join(toolkit, "bin", "ptxas")
    if not os.access(ptxas, os.X_OK):
        return fmt
    chips = ptxas_chips(ptxas)
    if not chips or chip in chips:
        return fmt
    if fmt == "cubin":
        raise CompileError(f"format='cubin' for {chip}: the ptxas of {toolkit} does not compile "
                           f"for {chip} (it knows {', '.join(sorted(chips))}); use "
                           "format='ptx' or 'auto' (the driver compiles PTX for the GPU)")
    log.info("ptxas of %s does not compile for %s: emitting PTX for the driver to compile",
             toolkit, chip)
    return "ptx"
