"""``python -m pywave run FILE.mlir``: ``mlir-runner`` for GPU programs.

Compiles the file (kernels for the chip given, else GPU 0's), loads the host code, calls the
entry function (``-e NAME``, default ``main``; no arguments) inside a libwavert call on GPU 0,
then synchronises the GPU, so that device ``printf`` output is flushed and a kernel fault is
seen. A program with no GPU op (:data:`pywave.program.HOST`) runs as mlir-runner runs it, on
no device: its call is host-only, nothing is synchronised and no GPU driver is opened. Output order is the program's: Python's buffered stdout is flushed before the call, C
stdio (the runner utilities, the driver's printf) after the synchronisation, and the entry's
result (``--entry-point-result=i32|i64|f32``) is printed last, as mlir-runner prints it.

Exit status: 0 on success; 1 when compiling or loading fails, or when the GPU reported an
error (the error is printed on stderr first; output printed before it stays).

The options mirror mlir-runner's (``-e``, ``--entry-point-result``, ``-O0..3``,
``--shared-libs``) and those of upstream's ``gpu-lower-to-nvvm-pipeline`` (``--target``,
``--features``, ``--index-bitwidth``, ``--kernel-bare-ptr``, ``--kernel-opt-level``,
``--format``). The runner utilities (``printMemref*``, ``print*``) and the ``mgpu*`` runtime are
always available from libwavert; ``--shared-libs`` naming MLIR's own runtime libraries are
accepted and not loaded, other libraries are loaded so the program may call into them.
"""

from __future__ import annotations

import argparse
import ctypes
import logging
import os
import struct
import sys
from collections.abc import Callable

from .. import llvm, lookup, lowering, pipeline, runtime
from ..errors import Error
from ..frontend.source import read_input
from ..host import jit
from .. import layout
from ..program import FORMAT_CHOICES, RELEASE_KERNELS, RUN_ENTRY, Target

log = logging.getLogger("pywave.run")

#: mlir-runner's result types -> (struct format of the 8-byte result slot, LLVM type).
RESULTS = {"void": (None, "void"), "i32": ("<i", "i32"), "i64": ("<q", "i64"),
           "f32": ("<f", "f32")}

#: Libraries of MLIR's own runtime whose symbols libwavert provides: not loaded.
UPSTREAM_RUNTIMES = ("mlir_cuda_runtime", "mlir_rocm_runtime", "mlir_runner_utils",
                     "mlir_c_runner_utils", "mlir_async_runtime")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``run`` command's options."""
    parser.add_argument("file", help="MLIR file ('-' reads stdin)")
    parser.add_argument("-e", "--e", dest="entry", default="main",
                        help="entry function (no arguments; default main)")
    parser.add_argument("--entry-point-result", "-entry-point-result", default="void",
                        choices=sorted(RESULTS), help="the entry's result type (default void)")
    parser.add_argument("-O", dest="opt_level", type=int, default=2, choices=range(4),
                        help="host optimisation level (-O0..-O3; default 2)")
    parser.add_argument("--shared-libs", "-shared-libs", action="append", default=[],
                        metavar="LIB[,LIB...]", help="libraries the program calls into")
    parser.add_argument("--target", help="chip, e.g. sm_90 or sm_90a (default: GPU 0's)")
    parser.add_argument("--format", default="auto", choices=FORMAT_CHOICES,
                        help="kernel image format (default: cubin if ptxas compiles for the "
                        "chip, else PTX)")
    parser.add_argument("--compile-only", action="store_true",
                        help="compile the program as a run would (entry and result checked) "
                        "and stop: no GPU needed with --target")
    add_lowering_options(parser)
    add_pass_pipeline_option(parser)


def add_pass_pipeline_option(parser: argparse.ArgumentParser) -> None:
    """``--pass-pipeline``: the user's passes, run before pywave's lowering (shared with
    ``compile``, ``export``, ``precompile`` and ``opt``)."""
    parser.add_argument("--pass-pipeline", "-pass-pipeline", dest="passes", default=None,
                        metavar="PIPELINE", help="your passes, run right after parsing, as "
                        "mlir-opt takes them: 'builtin.module(canonicalize, func.func(cse))'")


def add_lowering_options(parser: argparse.ArgumentParser) -> None:
    """Options of upstream's lowering pipelines (shared with ``compile``)."""
    parser.add_argument("--features", default="", help="PTX features, e.g. +ptx80")
    parser.add_argument("--index-bitwidth", type=int, default=64, choices=(32, 64),
                        help="index width in kernels (default 64)")
    parser.add_argument("--kernel-bare-ptr", action="store_true",
                        help="kernels take static memrefs as bare pointers")
    parser.add_argument("--host-bare-ptr", action="store_true",
                        help="accepted for upstream parity and ignored: pywave calls host "
                        "functions through its own entry wrappers, and host functions calling "
                        "each other agree on their convention")
    parser.add_argument("--kernel-opt-level", type=int, default=3, choices=range(4),
                        help="kernel optimisation level: LLVM's and ptxas's (default 3)")
    parser.add_argument("--line-info", action="store_true",
                        help="source line information in the kernels (nvcc -lineinfo)")
    parser.add_argument("--fast-math", action="store_true",
                        help="approximate division and math functions, f32 denormals "
                        "flushed to zero (nvcc -use_fast_math; changes results)")
    parser.add_argument("--max-registers", type=int, default=None, metavar="N",
                        help="at most N registers per thread in each kernel (1-255)")
    parser.add_argument("--keep-kernel-params", action="store_true",
                        help="kernels keep MLIR's whole kernel ABI, also parameters they never "
                        "read (for images that other code launches)")
    parser.add_argument("--coarsen-threads", type=int, default=None, metavar="N",
                        help="launches of elementwise kernels with at least N threads along x "
                        "run their block-coarsened copy (0: off; default: 2^22 on NVIDIA "
                        "targets, off elsewhere)")
    parser.add_argument("--checks", action="store_true", default=None,
                        help="checked mode of --target cpu: bounds, barrier and workgroup-memory "
                        "race checks, a failure a KernelFaultError naming kernel, block, thread, "
                        "index and memref (default: $PYWAVE_CHECKS)")
    parser.add_argument("--ptxas-option", dest="ptxas_options", action="append", default=[],
                        metavar="OPT", help="extra ptxas option, one per flag, written with "
                        "'=': --ptxas-option=--warn-on-spills")


def lowering_options(args: argparse.Namespace) -> lowering.LoweringOptions:
    """The LoweringOptions of parsed ``add_lowering_options`` arguments (``--checks``, else
    ``$PYWAVE_CHECKS``: :func:`pywave.lowering.with_checks`)."""
    options = lowering.LoweringOptions(index_bitwidth=args.index_bitwidth,
                                    kernel_bare_ptr=args.kernel_bare_ptr,
                                    features=args.features,
                                    kernel_opt_level=args.kernel_opt_level,
                                    line_info=args.line_info, fast_math=args.fast_math,
                                    max_registers=args.max_registers,
                                    ptxas_options=tuple(args.ptxas_options),
                                    keep_kernel_params=args.keep_kernel_params,
                                    coarsen_threads=args.coarsen_threads)
    return lowering.with_checks(options, args.checks, getattr(args, "target", None)) or options


def load_shared_libs(specs: list[str]) -> None:
    """Load the ``--shared-libs`` libraries for the JIT (MLIR's runtime libraries skipped:
    libwavert provides their symbols). Error for a library that does not exist."""
    for spec in specs:
        for path in filter(None, (p.strip() for p in spec.split(","))):
            base = os.path.basename(path)
            if any(name in base for name in UPSTREAM_RUNTIMES):
                log.debug("not loading %s: libwavert provides its symbols", path)
                continue
            if not os.path.exists(path):
                raise Error(f"--shared-libs: {path!r} does not exist")
            llvm.binding.load_library_permanently(path)


def _flush_c_stdio() -> None:
    ctypes.CDLL(None).fflush(None)


class Call:
    """One libwavert call bracket (wavert_call_begin/end) on GPU 0 of ``target``, through
    ctypes; for :data:`pywave.program.HOST` a host-only call (no device: the driver is not
    opened)."""

    def __init__(self, target: Target) -> None:
        self.lib = ctypes.CDLL(runtime.LIBRARY)
        self.lib.wavert_call_begin.argtypes = [ctypes.c_void_p, ctypes.c_void_p,
                                               ctypes.c_void_p]
        self.lib.wavert_call_end.argtypes = [ctypes.c_void_p]
        self.lib.wavert_last_error.restype = ctypes.c_char_p
        self.device = None if target.is_host else int(
            runtime.ffi.cast("uintptr_t", runtime.device(target.device_type, 0)))

    def run(self, entry: "ctypes._CFuncPtr", result: ctypes.Array) -> None:
        """Call ``entry(result)`` inside the bracket; DeviceError for what it recorded."""
        self.call(lambda: entry(ctypes.addressof(result)), "the entry function")

    def call(self, fn: "Callable[[], object]", what: str) -> None:
        """Call ``fn()`` inside the bracket (its mgpu* calls run on this device); DeviceError
        naming ``what`` for the first error it recorded."""
        state = (ctypes.c_void_p * 8)()      # one per call: calls on threads may overlap
        status = self.lib.wavert_call_begin(self.device, None, state)
        if status:
            raise runtime.error_for(status, self._message("wavert_call_begin"))
        fn()
        status = self.lib.wavert_call_end(state)
        if status:
            raise runtime.error_for(status, self._message(what))

    def _message(self, where: str) -> str:
        return f"{where}: {(self.lib.wavert_last_error() or b'').decode(errors='replace')}"


def run_file(text: str, args: argparse.Namespace, filename: str) -> int:
    """Compile ``text`` (in a compile worker: :mod:`pywave.isolation`), run its entry, print
    its result; returns the exit status. With ``args.compile_only``: compile and return 0."""
    result_format, result_type = RESULTS[args.entry_point_result]
    artifacts = lookup.build_artifacts(pipeline.Pipeline(
        text, target=args.target, opt_level=args.opt_level, format=args.format,
        filename=filename, lowering=lowering_options(args), run_entry=args.entry,
        passes=args.passes))
    returned = artifacts.host.run_result
    if returned != result_type:
        raise Error(f"--entry-point-result={args.entry_point_result}: @{args.entry} returns "
                    f"{returned}")
    if args.compile_only:
        print(f"compiled {filename} for {artifacts.target.chip}: entry @{args.entry} returns "
              f"{returned}; not run (--compile-only)", flush=True)
        return 0
    jit.initialise(runtime.LIBRARY)
    load_shared_libs(args.shared_libs)
    code = jit.JitModule(artifacts.object_code)
    target: Target = artifacts.target
    slot = ctypes.create_string_buffer(8)
    status = 0
    try:
        call = Call(target)
        entry = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(code.address(RUN_ENTRY))
        sys.stdout.flush()
        try:
            call.run(entry, slot)
        except Error as exc:
            status = _report(exc)
        jit.wait_async_tasks()   # before the kernels and code that tasks may use go
        try:
            if not target.is_host:      # a host program has no device to wait for
                runtime.synchronize(target.device_type, 0)
        except Error as exc:
            status = status or _report(exc)
        ctypes.CFUNCTYPE(None)(code.address(RELEASE_KERNELS))()
    finally:
        code.close()
        _flush_c_stdio()
    if status == 0 and result_format is not None:
        value, = struct.unpack_from(result_format, slot.raw)
        print(f"{value:e}" if result_type == "f32" else value, flush=True)
    return status


def _report(exc: Error) -> int:
    _flush_c_stdio()
    sys.stdout.flush()
    print(f"error: {exc}", file=sys.stderr, flush=True)
    return 1


def main(args: argparse.Namespace) -> int:
    """Entry of ``python -m pywave run`` (arguments from :func:`add_arguments`; the CLI has
    configured logging)."""
    try:
        text, filename = read_input(args.file)
        return run_file(text, args, filename)
    except Error as exc:
        sys.stdout.flush()
        print(f"error: {exc}", file=sys.stderr)
        return 1


__all__ = ["add_arguments", "add_lowering_options", "add_pass_pipeline_option",
           "lowering_options", "main", "run_file"]
