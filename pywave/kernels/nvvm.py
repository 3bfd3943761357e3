"""NVIDIA kernels: lowered to NVVM, serialised to PTX, assembled into cubins or fatbins.

NVIDIA kernels: lower the ``gpu.module``s to NVVM and serialise them with
``gpu-module-to-binary`` (PTX), then assemble cubins or fatbins with ptxas
(:mod:`pywave.kernels.ptxas`). Output: the module (now holding ``gpu.binary`` ops) plus a
plain list of :class:`pywave.program.Binary`. AMD's counterpart: :mod:`pywave.kernels.rocdl`.
"""

from __future__ import annotations

import logging
import os
from typing import Callable

from mlir import ir
from mlir.dialects import gpu

from .. import lowering
from ..errors import CompileError
from ..frontend import validate
from ..mlirutil import gpu_modules, run_pipeline, sym_name
from ..program import FORMATS, Binary, Target, ptx_image
from . import unused_params
from .targets import TargetAttr, module_targets, raise_ptx_version
from .toolkit import Toolkit, find_toolkit, ptx_isa

log = logging.getLogger("pywave.kernels")

#: Kernel lowering for NVIDIA targets (64-bit index, memref descriptors as parameters).
NVVM_PIPELINE = lowering.nvvm_pipeline(lowering.LoweringOptions())

#: pywave format -> ``gpu-module-to-binary`` format, for the formats that pass produces.
NVVM_FORMATS = {f.name: f.serialised_as for f in FORMATS.values()
                if f.backend == "nvvm" and f.serialised_as}


def has_ptxas(toolkit: str | None) -> bool:
    return bool(toolkit) and os.access(os.path.join(toolkit, "bin", "ptxas"), os.X_OK)


def binary_pipeline(mlir_format: str, toolkit: str | None) -> str:
    """The ``gpu-module-to-binary`` pipeline for an MLIR format (``isa``, ``bin``, ``llvm``...).
    The toolkit path is quoted (a space, ``}`` or ``=`` in it stays inside the option);
    CompileError for a path that cannot be quoted."""
    options = f"format={mlir_format}"
    if toolkit:
        options += " toolkit=" + validate.pipeline_value("the CUDA toolkit path", toolkit)
    return f"builtin.module(gpu-module-to-binary{{{options}}})"


def lower_nvvm(module: ir.Module, *, fmt: str, text: str | None = None,
               observe: "Callable[[ir.Module, str, Callable[[str], str]], None] | None" = None,
               options: "lowering.LoweringOptions | None" = None
               ) -> tuple[dict[str, Binary], dict[str, tuple]]:
    """Lower every NVVM-targeted ``gpu.module`` with ``options`` (the kernel pipeline and the
    kernel compile options, :mod:`pywave.kernels.compile_flags`) and serialise it into a
    ``gpu.binary`` of PTX. ``observe(module, pipeline, pipeline_for)`` (for dumps) sees the
    module between the two, with the serialisation pipeline and a function giving it for
    another MLIR format. When ptxas assembles the kernels, targets without ``features`` get
    the highest PTX ISA it accepts (:func:`pywave.kernels.targets.raise_ptx_version`; PTX handed
    to the driver keeps LLVM's default, since the driver's own PTX version is known at run
    time only).

    The kernels' unused parameters are dropped first (:func:`pywave.kernels.unused_params.drop_unused`,
    unless ``options.keep_kernel_params``); the second value returned is what it dropped.
    ``fmt`` ``"ptx"`` leaves the PTX for the driver (returns {}: :func:`collect_binaries`
    reads it). Otherwise pywave runs ptxas per chip (:mod:`pywave.kernels.ptxas`: its warnings are
    logged, its figures kept) and returns ``{gpu.module name: Binary}``: a cubin (one chip;
    ``"auto"``), or a fatbin (``"fatbin"``, and ``"auto"`` for a module of several chips)
    holding each chip's cubin and PTX. Several chips with ``"cubin"`` or ``"ptx"`` are a
    CompileError, as is a format other than ``"ptx"`` without ptxas."""
    from . import compile_flags as kernel_options
    from .rewrites import index_width, nvvm_wmma, semantics

    options = options or lowering.LoweringOptions()
    found = find_toolkit()
    toolkit = found.root if found else None
    several = {sym_name(g): [t.chip for t in module_targets(g)] for g in gpu_modules(module)
               if len(module_targets(g)) > 1}
    fmt = _resolve_format(fmt, toolkit, several)
    kernel_options.check_format(options, fmt)
    kernel_options.before_lowering(module, options)
    semantics.precise_sqrt(module)
    nvvm_wmma.lower_elementwise(module)
    if fmt != "ptx" and found is not None:
        raise_ptx_version(module, ptx_isa(found.version))
    names = [sym_name(g) for g in gpu_modules(module)]
    if options.index_bitwidth != 64:
        run_pipeline(module, index_width.VECTOR_PIPELINE, "lowering kernel vector ops", text)
        index_width.widen_index_casts(module, options.index_bitwidth)
    run_pipeline(module, lowering.nvvm_pipeline(options), "lowering kernels to NVVM", text)
    semantics.set_data_layout(module)
    kernel_options.after_lowering(module, options, "nvvm", text)
    extern_dynamic_shared_memory(module)
    _check_libdevice(module, toolkit)
    dropped = {} if options.keep_kernel_params else unused_params.drop_unused(module, set(names))
    pipeline = binary_pipeline(NVVM_FORMATS["ptx"], toolkit)
    if observe is not None:
        observe(module, pipeline, lambda mlir_format: binary_pipeline(mlir_format, toolkit))
    run_pipeline(module, pipeline, "compiling kernels (gpu-module-to-binary)", text)
    if fmt == "ptx":
        return {}, dropped
    return assemble_binaries(module, set(names), fmt, found), dropped


def _resolve_format(fmt: str, toolkit: str | None, several: dict[str, list[str]]) -> str:
    """The image format for ``fmt`` (see :func:`lower_nvvm`); ``several`` maps the modules of
    more than one chip to their chips."""
    if fmt == "auto":
        fmt = ("fatbin" if several else "cubin") if has_ptxas(toolkit) else "ptx"
    if fmt not in NVVM_FORMATS:
        raise CompileError(f"unknown binary format {fmt!r}; expected one of "
                           f"{sorted(NVVM_FORMATS)} or 'auto'")
    if several and fmt in ("ptx", "cubin"):
        name, chips = next(iter(several.items()))
        raise CompileError(f"format={fmt!r} holds code for one chip, but gpu.module @{name} is "
                           f"built for {', '.join(chips)}; use format='fatbin' or 'auto' (one "
                           "fatbin with each chip's code, the driver loads its GPU's)")
    if fmt != "ptx" and not has_ptxas(toolkit):
        what = "several chips" if several else f"format={fmt!r}"
        raise CompileError(f"{what} need{'' if several else 's'} ptxas from a CUDA toolkit "
                           "(none found; set CUDA_HOME or PYWAVE_CUDA_PATH), or use "
                           "format='ptx' with one chip")
    return fmt


def assemble_binaries(module: ir.Module, names: set[str], fmt: str,
                      found: Toolkit) -> dict[str, Binary]:
    """Assemble the PTX objects of the ``gpu.binary`` ops named in ``names`` with ptxas
    (one cubin per chip) and, for ``"fatbin"``, pack each op's chips into one fatbin. A chip
    this ptxas no longer compiles for (:func:`pywave.lowering.ptxas_chips`) gets PTX only in
    a fatbin, and is a CompileError for ``"cubin"``."""
    from . import ptxas

    supported = lowering.ptxas_chips(found.ptxas)
    out = {}
    for op in module.body.operations:
        op = op.operation
        if op.name != "gpu.binary" or sym_name(op) not in names:
            continue
        name = sym_name(op)
        images, figures = [], []
        for attr in ir.ArrayAttr(op.attributes["objects"]):
            obj = gpu.ObjectAttr(attr)
            target = ptxas.TargetOptions.parse(str(obj.target))
            ptx = bytes(obj.object)
            cubin = None
            if not supported or target.chip in supported:
                cubin, kernels = ptxas.assemble(found.ptxas, ptx, target, name)
                figures += kernels
            elif fmt == "cubin":
                raise CompileError(
                    f"format='cubin' for {target.chip}: the ptxas of {found.root} does not "
                    f"compile for {target.chip} (it knows {', '.join(sorted(supported))}); "
                    "use format='ptx', 'fatbin' or 'auto' (the driver compiles PTX for the GPU)")
            else:
                log.info("ptxas of %s does not compile for %s: gpu.module @%s carries its PTX "
                         "only, which the driver compiles", found.root, target.chip, name)
            images.append((target.chip, ptx, cubin))
        chips = ",".join(chip for chip, _, _ in images)
        if fmt == "cubin":
            out[name] = Binary(name, "cubin", images[0][2], chips, tuple(figures))
        else:
            fatbinary = os.path.join(found.root, "bin", "fatbinary")
            if not os.access(fatbinary, os.X_OK):
                raise CompileError(f"format='fatbin' (or several chips) needs fatbinary beside "
                                   f"ptxas; {fatbinary} is missing")
            out[name] = Binary(name, "fatbin", ptxas.fatbin(fatbinary, images, name), chips,
                               tuple(figures))
    return out


def extern_dynamic_shared_memory(module: ir.Module) -> None:
    """Make the globals that name the dynamic shared memory region external: the
    ``__dynamic_shmem__*`` globals that ``gpu.dynamic_shared_memory`` lowers to, and every
    zero-element workgroup global without an initializer (``memref.global "private" @smem :
    memref<0xf16, 3>``, the ``extern __shared__ T smem[]`` of CUDA C++, as upstream's sm90
    GEMM programs use it: a base that ``memref.reinterpret_cast`` views as the region).

    MLIR 22 emits both internal, and NVPTX then demotes each into a one-byte static shared
    variable of its own, which overlaps the kernel's static workgroup memory instead of
    addressing the dynamic region (``.extern .shared`` arrays all start at the dynamic
    region, after the static shared memory: CUDA C++ Programming Guide, "__shared__"). A
    zero-element global has no element a program may access, so no defined program changes
    meaning; one that views it as the dynamic region now reads the region."""
    external = ir.Attribute.parse("#llvm.linkage<external>", module.context)
    for gmod in gpu_modules(module):
        tma = _uses_tma(gmod)
        for op in gmod.regions[0].blocks[0].operations:
            op = op.operation
            if op.name == "llvm.mlir.global" and _names_dynamic_region(op):
                op.attributes["linkage"] = external
                if tma:
                    op.attributes["alignment"] = ir.IntegerAttr.get(
                        ir.IntegerType.get_signless(64), TMA_SHARED_ALIGNMENT)


def _names_dynamic_region(op: ir.Operation) -> bool:
    """Whether an ``llvm.mlir.global`` stands for the dynamic shared memory region: a
    ``__dynamic_shmem__*`` global, or a zero-element array in address space 3 without an
    initializer."""
    if sym_name(op).startswith("__dynamic_shmem__"):
        return True
    attrs = op.attributes
    if "addr_space" not in attrs or ir.IntegerAttr(attrs["addr_space"]).value != 3 or \
            "value" in attrs or len(op.regions[0].blocks) > 0:
        return False
    return str(ir.TypeAttr(attrs["global_type"]).value).startswith("!llvm.array<0 x ")


#: Alignment (bytes) of the dynamic shared memory region in a module that copies with the
#: tensor memory accelerator: a TMA's shared-memory box must be 128-byte aligned, 1024 with
#: the 128-byte swizzle (CUDA C++ Programming Guide, "Tensor Memory Access"). The region
#: starts after the static shared memory, so MLIR's 16-byte alignment put it at offset 16
#: behind an mbarrier: CUDA_ERROR_MISALIGNED_ADDRESS (upstream's sm90 TMA tests, on the H200).
TMA_SHARED_ALIGNMENT = 1024


def _uses_tma(gmod: ir.Operation) -> bool:
    """Whether a lowered ``gpu.module`` issues a bulk tensor copy (TMA): an NVVM op, or the
    inline PTX that predicated copies lower to (``nvgpu.tma.async.load ..., predicate = %p``
    becomes ``llvm.inline_asm "@$p cp.async.bulk.tensor..."``)."""
    found = []

    def visit(op: ir.Operation) -> ir.WalkResult:
        if op.name.startswith("nvvm.cp.async.bulk.tensor") or (
                op.name == "llvm.inline_asm" and
                "cp.async.bulk.tensor" in ir.StringAttr(op.attributes["asm_string"]).value):
            found.append(op)
            return ir.WalkResult.INTERRUPT
        return ir.WalkResult.ADVANCE
    gmod.walk(visit)
    return bool(found)


def _check_libdevice(module: ir.Module, toolkit: str | None) -> None:
    if toolkit:
        return
    for gmod in gpu_modules(module):
        for op in gmod.regions[0].blocks[0].operations:
            name = sym_name(op.operation) \
                if "sym_name" in op.operation.attributes else ""
            if name.startswith("__nv_"):
                raise CompileError(
                    f"the kernels call the CUDA device math library ({name}) but libdevice was "
                    "not found; install a CUDA toolkit (or `pip install nvidia-cuda-nvcc`) and "
                    "set CUDA_HOME or PYWAVE_CUDA_PATH")


def collect_binaries(module: ir.Module, target: Target) -> list[Binary]:
    """Plain copies of the module's ``gpu.binary`` objects (one per binary: the object whose
    target matches ``target``, else the first)."""
    out = []
    formats = {0: "offload", 1: "llvm", 2: "ptx", 3: "cubin", 4: "fatbin"}
    for op in module.body.operations:
        if op.operation.name != "gpu.binary":
            continue
        name = sym_name(op.operation)
        objects = [gpu.ObjectAttr(a) for a in ir.ArrayAttr(op.operation.attributes["objects"])]
        chosen = next((o for o in objects
                       if TargetAttr.parse(str(o.target)).get("chip") == f'"{target.chip}"'),
                      objects[0])
        fmt = formats.get(int(chosen.format), "unknown")
        if target.backend == "rocdl" and fmt in ("cubin", "fatbin"):
            fmt = "hsaco"
        if fmt in ("offload", "llvm", "unknown"):
            raise CompileError(f"gpu.binary @{name} holds an object of format {fmt}; pywave "
                               "loads PTX, cubin, fatbin and hsaco objects")
        data = bytes(chosen.object)
        out.append(Binary(name, fmt, ptx_image(data) if fmt == "ptx" else data, target.chip))
    return out
