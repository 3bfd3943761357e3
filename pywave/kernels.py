"""Stage 2: kernels. Outline ``gpu.launch`` regions, attach a target to each ``gpu.module``,
lower kernels to NVVM and serialise them with ``gpu-module-to-binary`` (PTX, cubin or
fatbin). Output: the module (now holding ``gpu.binary`` ops) plus a plain list of
:class:`Binary`.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import shutil
from typing import Callable

from mlir import ir, passmanager
from mlir.dialects import arith, gpu

from . import toolchain, validate
from .cache import Binary
from .errors import CompileError
from .parse import diagnostic_error

log = logging.getLogger("pywave.kernels")

#: Run on the whole module first: outline ``gpu.launch`` bodies into ``gpu.func`` kernels and
#: lower the structured dialects both host and kernels may use.
PREPARE_PIPELINE = ("builtin.module(gpu-kernel-outlining, lower-affine, convert-vector-to-scf, "
                    "convert-scf-to-cf, expand-strided-metadata, arith-expand)")

#: Kernel lowering for NVIDIA targets (64-bit index, memref descriptors as parameters).
NVVM_PIPELINE = ("builtin.module(gpu.module(convert-gpu-to-nvvm{index-bitwidth=64}, "
                 "convert-nvvm-to-llvm, reconcile-unrealized-casts))")

#: ``gpu-module-to-binary`` formats by pywave name.
BINARY_FORMATS = {"ptx": "isa", "cubin": "bin", "fatbin": "fatbin"}


@dataclasses.dataclass(frozen=True)
class Target:
    """A GPU target: ``backend`` is ``"nvvm"`` or ``"rocdl"``, ``chip`` e.g. ``"sm_90"``."""

    backend: str
    chip: str

    @classmethod
    def parse(cls, name: str) -> "Target":
        name = name.strip()
        if name.startswith("sm_"):
            return cls("nvvm", name)
        if name.startswith("gfx"):
            return cls("rocdl", name)
        raise CompileError(f"unknown target {name!r}: expected an NVIDIA chip such as 'sm_90' "
                           "or an AMD chip such as 'gfx942'")

    @property
    def device_type(self) -> int:
        """DLPack device type the kernels run on (kDLCUDA = 2, kDLROCM = 10)."""
        return 2 if self.backend == "nvvm" else 10


def cuda_toolkit() -> str | None:
    """Root of a CUDA toolkit holding ``nvvm/libdevice`` (for ``math.*``) and, optionally,
    ``bin/ptxas``: ``PYWAVE_CUDA_PATH``, ``CUDA_HOME``, ``CUDA_PATH``, the ``ptxas`` on PATH,
    then ``/usr/local/cuda``."""
    candidates = [os.environ.get(v) for v in ("PYWAVE_CUDA_PATH", "CUDA_HOME", "CUDA_PATH")]
    ptxas = shutil.which("ptxas")
    if ptxas:
        candidates.append(os.path.dirname(os.path.dirname(os.path.realpath(ptxas))))
    candidates.append("/usr/local/cuda")
    for root in candidates:
        if root and os.path.isfile(os.path.join(root, "nvvm", "libdevice", "libdevice.10.bc")):
            return root
    return None


def has_ptxas(toolkit: str | None) -> bool:
    return bool(toolkit) and os.access(os.path.join(toolkit, "bin", "ptxas"), os.X_OK)


def run_pipeline(module: ir.Module, pipeline: str, what: str, text: str | None = None) -> None:
    """Run a textual pass pipeline; MLIR failures become CompileError."""
    try:
        passmanager.PassManager.parse(pipeline, module.context).run(module.operation)
    except ir.MLIRError as exc:
        raise diagnostic_error(f"{what} failed", exc, text) from None


def gpu_modules(module: ir.Module) -> list[ir.Operation]:
    return [op.operation for op in module.body.operations if op.operation.name == "gpu.module"]


def _kernels_of(gmod: ir.Operation) -> list[ir.Operation]:
    return [op.operation for op in gmod.regions[0].blocks[0].operations
            if op.operation.name == "gpu.func" and "gpu.kernel" in op.operation.attributes]


def widen_bool_memrefs(module: ir.Module) -> set[tuple[str, int]]:
    """Give ``memref<...xi1>`` values i8 elements (DLPack bools are 8-bit, and MLIR 22's memref
    lowering cannot address sub-byte elements): loads gain an ``arith.trunci`` to i1, stores
    an ``arith.extui`` from i1. Applies to kernels and host code alike. Returns the
    (host function, argument index) pairs that were ``memref<...xi1>``, which still take bool
    tensors."""
    host_args: set[tuple[str, int]] = set()
    i1 = ir.IntegerType.get_signless(1, module.context)
    i8 = ir.IntegerType.get_signless(8, module.context)

    def widened(t: ir.Type) -> ir.Type | None:
        if isinstance(t, ir.MemRefType) and t.element_type == i1:
            return ir.MemRefType.get(t.shape, i8, t.layout, t.memory_space)
        return None

    def retype(op: ir.Operation) -> ir.WalkResult:
        for region in op.regions:
            for block in region.blocks:
                for arg in block.arguments:
                    if (new := widened(arg.type)) is not None:
                        arg.set_type(new)
        for result in op.results:
            if (new := widened(result.type)) is not None:
                result.set_type(new)
        if op.name in ("func.func", "gpu.func"):
            ftype = ir.FunctionType(ir.TypeAttr(op.attributes["function_type"]).value)
            inputs = [widened(t) or t for t in ftype.inputs]
            if op.name == "func.func":
                fname = ir.StringAttr(op.attributes["sym_name"]).value
                host_args.update((fname, i) for i, t in enumerate(ftype.inputs)
                                 if widened(t) is not None)
            if inputs != list(ftype.inputs):
                op.attributes["function_type"] = ir.TypeAttr.get(
                    ir.FunctionType.get(inputs, list(ftype.results)))
        return ir.WalkResult.ADVANCE

    accesses: list[ir.Operation] = []

    def collect(op: ir.Operation) -> ir.WalkResult:
        if op.name == "memref.load" and op.results[0].type == i1:
            accesses.append(op)
        elif op.name == "memref.store" and op.operands[0].type == i1:
            accesses.append(op)
        return ir.WalkResult.ADVANCE

    with module.context, ir.Location.unknown(module.context):
        module.operation.walk(retype)
        module.operation.walk(collect)
        for op in accesses:
            if op.name == "memref.load":
                op.results[0].set_type(i8)
                with ir.InsertionPoint.after(op) if hasattr(ir.InsertionPoint, "after") \
                        else ir.InsertionPoint(op):
                    narrow = arith.TruncIOp(i1, op.results[0])
                if not hasattr(ir.InsertionPoint, "after"):
                    narrow.operation.move_after(op)
                op.results[0].replace_all_uses_except(narrow.result, narrow.operation)
            else:
                with ir.InsertionPoint(op):
                    wide = arith.ExtUIOp(i8, op.operands[0])
                op.operands[0] = wide.result
    return host_args


def check_kernels(module: ir.Module) -> None:
    """Reject kernel signatures the launch path cannot pass (unranked memrefs) and memrefs of
    sub-byte elements, which MLIR 22's memref-to-LLVM lowering aborts on."""
    for gmod in gpu_modules(module):
        mod_name = ir.StringAttr(gmod.attributes["sym_name"]).value
        for kernel in _kernels_of(gmod):
            name = ir.StringAttr(kernel.attributes["sym_name"]).value
            ftype = ir.FunctionType(ir.TypeAttr(kernel.attributes["function_type"]).value)
            for i, t in enumerate(ftype.inputs):
                where = f"kernel @{mod_name}::@{name} argument #{i}"
                if isinstance(t, ir.UnrankedMemRefType):
                    raise CompileError(
                        f"{where} has the unranked type {t}: unranked memrefs cannot be passed "
                        "to kernels; use a ranked memref")
                check_element_width(t, where)


def check_element_width(t: ir.Type, where: str) -> None:
    """CompileError for a memref whose integer elements are narrower than 8 bits."""
    if isinstance(t, ir.MemRefType) and isinstance(t.element_type, ir.IntegerType) and \
            ir.IntegerType(t.element_type).width < 8:
        raise CompileError(
            f"{where} has the type {t}: MLIR's memref lowering cannot load or store elements "
            "narrower than 8 bits; declare the memref with i8 elements (bool tensors are "
            "8-bit) and convert with arith.trunci / arith.extui")


def _module_target(gmod: ir.Operation) -> Target | None:
    if "targets" not in gmod.attributes:
        return None
    targets = ir.ArrayAttr(gmod.attributes["targets"])
    if len(targets) == 0:
        return None
    text = str(targets[0])
    backend = "nvvm" if text.startswith("#nvvm.target") else \
        "rocdl" if text.startswith("#rocdl.target") else None
    if backend is None:
        raise CompileError(f"gpu.module @{ir.StringAttr(gmod.attributes['sym_name']).value} has "
                           f"the target {text}; pywave supports #nvvm.target and #rocdl.target")
    chip = text.split('chip = "')[1].split('"')[0] if 'chip = "' in text else \
        ("sm_50" if backend == "nvvm" else "gfx900")
    name = ir.StringAttr(gmod.attributes["sym_name"]).value
    validate.chip(chip, f"the chip of gpu.module @{name}")      # hook
    return Target(backend, chip)


def assign_targets(module: ir.Module, requested: Target | None,
                   default: Target | None) -> Target:
    """Give every ``gpu.module`` without a target the requested (else default) target; check
    that modules with a target agree with the requested one and with each other. Empty
    ``gpu.module``s are removed. Returns the module's target."""
    found: dict[str, Target] = {}
    for gmod in gpu_modules(module):
        name = ir.StringAttr(gmod.attributes["sym_name"]).value
        if not _kernels_of(gmod):
            log.debug("removing empty gpu.module @%s", name)
            gmod.erase()
            continue
        own = _module_target(gmod)
        if own is not None:
            wanted = requested or default
            if wanted is not None and own.backend != wanted.backend:
                origin = "the requested target" if requested else "the GPU's chip"
                raise CompileError(
                    f"gpu.module @{name} has the target {own.backend} ({own.chip}) but "
                    f"{origin} is {wanted.chip} ({wanted.backend}); a {own.backend} module "
                    f"cannot run on a {wanted.backend} device")
            found[name] = own
            continue
        target = requested or default
        if target is None:
            raise CompileError(
                f"gpu.module @{name} has no target and no GPU was found to take one from; "
                "pass target='sm_90' (NVIDIA) or target='gfx942' (AMD)")
        gmod.attributes["targets"] = ir.Attribute.parse(
            f'[#{target.backend}.target<chip = "{target.chip}", O = 3>]', module.context)
        found[name] = target
    backends = {t.backend for t in found.values()}
    if len(backends) > 1:
        raise CompileError("gpu.modules target different backends: " + ", ".join(
            f"@{n}: {t.backend} ({t.chip})" for n, t in found.items()))
    if found:
        return next(iter(found.values()))
    return requested or default or Target("nvvm", "sm_90")


def binary_pipeline(mlir_format: str, toolkit: str | None) -> str:
    """The ``gpu-module-to-binary`` pipeline for an MLIR format (``isa``, ``bin``, ``llvm``...)."""
    options = f"format={mlir_format}"
    if toolkit:
        options += " toolkit=" + validate.pipeline_value("the CUDA toolkit path", toolkit)
    return f"builtin.module(gpu-module-to-binary{{{options}}})"


def lower_nvvm(module: ir.Module, *, fmt: str, text: str | None = None,
               observe: "Callable[[ir.Module, str, Callable[[str], str]], None] | None" = None
               ) -> None:
    """Lower every NVVM-targeted ``gpu.module`` and serialise it into a ``gpu.binary``.
    ``observe(module, pipeline, pipeline_for)`` (for dumps) sees the module between the two,
    with the serialisation pipeline and a function giving it for another MLIR format."""
    toolkit = cuda_toolkit()
    if fmt == "auto":
        fmt = "cubin" if has_ptxas(toolkit) else "ptx"
    if fmt not in BINARY_FORMATS:
        raise CompileError(f"unknown binary format {fmt!r}; expected one of "
                           f"{sorted(BINARY_FORMATS)} or 'auto'")
    if fmt != "ptx" and not has_ptxas(toolkit):
        raise CompileError(f"format={fmt!r} needs ptxas from a CUDA toolkit (none found; set "
                           "CUDA_HOME or PYWAVE_CUDA_PATH), or use format='ptx'")
    if fmt != "ptx":
        toolchain.raise_ptx_version(module, toolkit)                # hook
    run_pipeline(module, NVVM_PIPELINE, "lowering kernels to NVVM", text)
    _extern_dynamic_shared_memory(module)
    _check_libdevice(module, toolkit)
    pipeline = binary_pipeline(BINARY_FORMATS[fmt], toolkit)
    if observe is not None:
        observe(module, pipeline, lambda mlir_format: binary_pipeline(mlir_format, toolkit))
    run_pipeline(module, pipeline, "compiling kernels (gpu-module-to-binary)", text)


def _extern_dynamic_shared_memory(module: ir.Module) -> None:
    """Make the ``__dynamic_shmem__*`` globals that ``gpu.dynamic_shared_memory`` lowers to
    external. MLIR 22 emits them internal, and NVPTX then demotes them into a one-byte static
    shared variable that overlaps the kernel's static workgroup memory instead of addressing
    the dynamic region (``.extern .shared`` arrays start after all static shared memory)."""
    external = ir.Attribute.parse("#llvm.linkage<external>", module.context)
    for gmod in gpu_modules(module):
        for op in gmod.regions[0].blocks[0].operations:
            op = op.operation
            if op.name == "llvm.mlir.global" and \
                    ir.StringAttr(op.attributes["sym_name"]).value.startswith("__dynamic_shmem__"):
                op.attributes["linkage"] = external


def _check_libdevice(module: ir.Module, toolkit: str | None) -> None:
    if toolkit:
        return
    for gmod in gpu_modules(module):
        for op in gmod.regions[0].blocks[0].operations:
            name = ir.StringAttr(op.operation.attributes["sym_name"]).value \
                if "sym_name" in op.operation.attributes else ""
            if name.startswith("__nv_"):
                raise CompileError(
                    f"the kernels call the CUDA device math library ({name}) but libdevice was "
                    "not found; install a CUDA toolkit (or `pip install nvidia-cuda-nvcc`) and "
                    "set CUDA_HOME or PYWAVE_CUDA_PATH")


def binaries(module: ir.Module, target: Target) -> list[Binary]:
    """Plain copies of the module's ``gpu.binary`` objects (one per binary: the object whose
    target matches ``target``, else the first)."""
    out = []
    formats = {0: "offload", 1: "llvm", 2: "ptx", 3: "cubin", 4: "fatbin"}
    for op in module.body.operations:
        if op.operation.name != "gpu.binary":
            continue
        name = ir.StringAttr(op.operation.attributes["sym_name"]).value
        objects = [gpu.ObjectAttr(a) for a in ir.ArrayAttr(op.operation.attributes["objects"])]
        chosen = next((o for o in objects if f'"{target.chip}"' in str(o.target)), objects[0])
        fmt = formats.get(int(chosen.format), "unknown")
        if target.backend == "rocdl" and fmt in ("cubin", "fatbin"):
            fmt = "hsaco"
        if fmt in ("offload", "llvm", "unknown"):
            raise CompileError(f"gpu.binary @{name} holds an object of format {fmt}; pywave "
                               "loads PTX, cubin, fatbin and hsaco objects")
        data = bytes(chosen.object)
        if fmt == "ptx" and not data.endswith(b"\0"):
            data += b"\0"
        out.append(Binary(name, fmt, data, target.chip))
    return out
