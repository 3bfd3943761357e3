"""The kernel compile options (fast math, line info, registers) applied around the lowering.

Stage ``kernels`` (:mod:`pywave.pipeline`): apply the kernel compile options of
:class:`pywave.lowering.LoweringOptions` (line info, fast math, a register limit, ptxas
options) to the ``gpu.module``s, around their lowering to NVVM or ROCDL.

- :func:`check_amd`, :func:`check_format`: options an AMD chip or the image format cannot
  honour are CompileErrors.
- :func:`before_lowering`: fast-math flags on the kernels' floating-point ops.
- :func:`after_lowering`: line directives (debug scopes), flush-to-zero and ``.maxnreg`` on
  the lowered ``llvm.func``s.

The ptxas arguments travel in the ``#nvvm.target`` (:func:`pywave.kernels.targets.nvvm_target`,
:func:`pywave.kernels.targets.add_ptxas_arguments`).
"""

from __future__ import annotations

import logging

from mlir import ir

from ..errors import CompileError
from ..lowering import LoweringOptions
from ..mlirutil import gpu_modules, run_pipeline, sym_name

log = logging.getLogger("pywave.kernel_options")

#: The fast-math flags ``fast_math`` puts on floating-point ops: approximate functions and
#: contraction, as nvcc's ``-use_fast_math`` (no finite-math or reassociation assumptions).
FAST_MATH_FLAGS = "#arith.fastmath<afn,contract>"

#: Line directives only (nvcc's ``-lineinfo``): ``.loc`` lines in the PTX, no DWARF
#: variables, the code unchanged. AMD code objects get a line table.
LINE_INFO_PIPELINE = {
    "nvvm": "builtin.module(ensure-debug-info-scope-on-llvm-func{emission-kind="
            "DebugDirectivesOnly})",
    "rocdl": "builtin.module(ensure-debug-info-scope-on-llvm-func{emission-kind="
             "LineTablesOnly})",
}


def check_amd(options: LoweringOptions, chip: str) -> None:
    """CompileError for an NVIDIA-only option set for the AMD chip ``chip``, naming it."""
    for name in options.nvidia_only:
        raise CompileError(f"{name}={getattr(options, name)!r} applies to NVIDIA targets "
                           f"only; the target {chip} is AMD (supported there: "
                           "kernel_opt_level, line_info)")


def check_format(options: LoweringOptions, fmt: str) -> None:
    """CompileError for ptxas options with the image format ``fmt`` (after "auto" was
    resolved) ``"ptx"``, which runs no ptxas."""
    if options.ptxas_options and fmt == "ptx":
        raise CompileError(f"ptxas_options={list(options.ptxas_options)!r} need ptxas, which "
                           "format='ptx' does not run (the driver compiles the PTX); use "
                           "format='cubin' or 'fatbin' with a CUDA toolkit")


def before_lowering(module: ir.Module, options: LoweringOptions) -> None:
    """``fast_math``: the :data:`FAST_MATH_FLAGS` on every op of the kernels that has a
    fast-math attribute (``arith.addf``, ``arith.divf``, ``math.exp``...)."""
    if not options.fast_math:
        return
    flags = ir.Attribute.parse(FAST_MATH_FLAGS, module.context)

    def visit(op: ir.Operation) -> ir.WalkResult:
        if hasattr(type(op.opview), "fastmath"):
            op.attributes["fastmath"] = flags
        return ir.WalkResult.ADVANCE

    for gmod in gpu_modules(module):
        gmod.walk(visit)


def after_lowering(module: ir.Module, options: LoweringOptions, backend: str,
                   text: str | None = None) -> None:
    """On the lowered kernels (``llvm.func``s inside the ``gpu.module``s): debug scopes for
    ``line_info``; ``fast_math``'s flush-to-zero; ``max_registers`` as ``nvvm.maxnreg``."""
    if options.line_info:
        run_pipeline(module, LINE_INFO_PIPELINE[backend], "adding line information", text)
    if not (options.fast_math or options.max_registers):
        return
    ctx = module.context
    i32 = ir.IntegerType.get_signless(32, ctx)
    for gmod in gpu_modules(module):
        body = gmod.regions[0].blocks[0]
        funcs = [op.operation for op in body.operations if op.operation.name == "llvm.func"]
        for func in funcs:
            if options.fast_math and func.regions[0].blocks:
                func.attributes["denormal_fp_math_f32"] = ir.StringAttr.get("preserve-sign", ctx)
            if options.max_registers and "nvvm.kernel" in func.attributes:
                _limit_registers(func, options.max_registers, i32)
        if options.fast_math:
            _reflect_ftz(gmod, body)


def _limit_registers(func: ir.Operation, limit: int, i32: ir.Type) -> None:
    own = func.attributes["nvvm.maxnreg"] if "nvvm.maxnreg" in func.attributes else None
    if own is not None and ir.IntegerAttr(own).value <= limit:
        log.debug("kernel @%s keeps its own nvvm.maxnreg %s", sym_name(func), own)
        return
    func.attributes["nvvm.maxnreg"] = ir.IntegerAttr.get(i32, limit)


def _reflect_ftz(gmod: ir.Operation, body: ir.Block) -> None:
    """``nvvm-reflect-ftz = 1``: libdevice's ``__nvvm_reflect("__CUDA_FTZ")`` reads it."""
    if any(op.operation.name == "llvm.module_flags" for op in body.operations):
        raise CompileError(f"fast_math=True: gpu.module @{sym_name(gmod)} has its own "
                           "llvm.module_flags; add \"nvvm-reflect-ftz\" = 1 there instead")
    flags = ir.Operation.parse('llvm.module_flags [#llvm.mlir.module_flag<override, '
                               '"nvvm-reflect-ftz", 1 : i32>]', context=gmod.context)
    body.append(flags)
