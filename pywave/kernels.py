"""Stages ``prepare`` and ``kernels`` (:mod:`pywave.pipeline`). Outline ``gpu.launch``
regions, attach a target to each ``gpu.module``, lower kernels to NVVM and serialise them
with ``gpu-module-to-binary`` (PTX, cubin or fatbin; AMD targets: :mod:`pywave.amdgpu`).
Output: the module (now holding ``gpu.binary`` ops) plus a plain list of
:class:`pywave.program.Binary`.
"""

from __future__ import annotations

import logging
import os
import re
from typing import Callable

from mlir import ir
from mlir.dialects import arith, gpu

from . import lowering, validate
from .errors import CompileError
from .mlirutil import gpu_modules, kernels_of, run_pipeline, sym_name
from .program import FORMATS, Binary, Target
from .targets import module_targets
from .toolkit import Toolkit, find_toolkit, ptx_isa

log = logging.getLogger("pywave.kernels")

#: Run on the whole module first: lower nvgpu ops (before outlining, as upstream's
#: ``gpu-lower-to-nvvm-pipeline`` does: a TMA descriptor made on the host then reaches the
#: outlined kernel as an ``!llvm.ptr``, not as an ``!nvgpu.tensormap.descriptor`` argument no
#: kernel lowering converts; ``nvgpu.tma.create.descriptor`` becomes a call of libwavert's
#: ``mgpuTensorMapEncodeTiledMemref``), outline ``gpu.launch`` bodies into ``gpu.func``
#: kernels and lower the structured dialects both host and kernels may use. No
#: ``arith-expand``: its select-based expansion of ``arith.maximumf``/``minimumf`` returns
#: -0.0 for ``maximumf(+0.0, -0.0)`` where the op's documentation orders -0.0 below +0.0; the
#: LLVM lowerings (``convert-gpu-to-nvvm``, ``convert-to-llvm``) lower every arith op
#: themselves (``ceildivsi``/``floordivsi``/``ceildivui`` included) and min/max to LLVM's IEEE
#: intrinsics.
PREPARE_PIPELINE = ("builtin.module(canonicalize, convert-nvgpu-to-nvvm, gpu-kernel-outlining, "
                    "convert-vector-to-scf, expand-strided-metadata, lower-affine, "
                    "convert-scf-to-cf)")

#: Kernel lowering for NVIDIA targets (64-bit index, memref descriptors as parameters).
NVVM_PIPELINE = lowering.nvvm_pipeline(lowering.LoweringOptions())

#: pywave format -> ``gpu-module-to-binary`` format, for the formats that pass produces.
NVVM_FORMATS = {f.name: f.serialised_as for f in FORMATS.values()
                if f.backend == "nvvm" and f.serialised_as}


def has_ptxas(toolkit: str | None) -> bool:
    return bool(toolkit) and os.access(os.path.join(toolkit, "bin", "ptxas"), os.X_OK)


def widen_bool_memrefs(module: ir.Module) -> set[tuple[str, int]]:
    """Give ``memref<...xi1>`` values i8 elements (DLPack bools are 8-bit, and MLIR 22's memref
    lowering cannot address sub-byte elements): loads gain an ``arith.trunci`` to i1, stores
    an ``arith.extui`` from i1. Applies to kernels and host code alike. Returns the
    (host function or ``"module::kernel"``, argument index) pairs that were
    ``memref<...xi1>``, which still take bool tensors, and (host function, -1 - result index)
    for such results (returned as bools)."""
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
            results = [widened(t) or t for t in ftype.results]
            fname = sym_name(op) if op.name == "func.func" else \
                f"{sym_name(op.parent)}::{sym_name(op)}"
            host_args.update((fname, i) for i, t in enumerate(ftype.inputs)
                             if widened(t) is not None)
            host_args.update((fname, -1 - i) for i, t in enumerate(ftype.results)
                             if widened(t) is not None)
            if inputs != list(ftype.inputs) or results != list(ftype.results):
                op.attributes["function_type"] = ir.TypeAttr.get(
                    ir.FunctionType.get(inputs, results))
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
        mod_name = sym_name(gmod)
        for kernel in kernels_of(gmod):
            name = sym_name(kernel)
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


def assign_targets(module: ir.Module, requested: Target | None,
                   default: Target | None) -> Target:
    """Decide each ``gpu.module``'s chips (the rule of README "Targets and chips"):

    - ``requested`` (``target=``, one chip or several) applies to every module. A module
      whose own ``#nvvm.target`` list names other chips is rebuilt for the requested ones,
      keeping its targets' other parameters (``O``, features, flags; those of its target of
      the same chip, else of its first), with a WARNING naming both lists;
    - without ``requested``, a module keeps the chips its IR lists (all of them), and one
      without targets gets ``default`` (GPU 0's chip).

    Another backend than the requested one is a CompileError. Empty ``gpu.module``s are
    removed. Returns the program's target: its backend and every chip built, in order
    (``Target.chip`` ``"sm_80,sm_90"`` for several)."""
    found: dict[str, list[Target]] = {}
    for gmod in gpu_modules(module):
        name = sym_name(gmod)
        if not kernels_of(gmod):
            log.debug("removing empty gpu.module @%s", name)
            gmod.erase()
            continue
        own = module_targets(gmod)
        wanted = requested or default
        if own and wanted is not None and own[0].backend != wanted.backend:
            origin = "the requested target" if requested else "the GPU's chip"
            raise CompileError(
                f"gpu.module @{name} has the target {own[0].backend} ({own[0].chip}) but "
                f"{origin} is {wanted.chip} ({wanted.backend}); a {own[0].backend} module "
                f"cannot run on a {wanted.backend} device")
        if own and requested is not None:
            found[name] = _retarget(gmod, own, requested)
        elif own:
            found[name] = own
        elif wanted is None:
            raise CompileError(
                f"gpu.module @{name} has no target and no GPU was found to take one from; "
                "pass target='sm_90' (NVIDIA) or target='gfx942' (AMD); on the command line "
                "--target sm_90")
        else:
            gmod.attributes["targets"] = ir.Attribute.parse("[" + ", ".join(
                f'#{wanted.backend}.target<chip = "{chip}", O = 3>' for chip in wanted.chips)
                + "]", module.context)
            found[name] = [Target(wanted.backend, chip) for chip in wanted.chips]
    backends = {t.backend for targets in found.values() for t in targets}
    if len(backends) > 1:
        raise CompileError("gpu.modules target different backends: " + ", ".join(
            f"@{n}: {t[0].backend} ({t[0].chip})" for n, t in found.items()))
    chips = list(dict.fromkeys(t.chip for targets in found.values() for t in targets))
    if backends == {"rocdl"} and any(len(t) > 1 for t in found.values()):
        raise CompileError("several chips per gpu.module are supported on NVIDIA targets only; "
                           "AMD modules: " + ", ".join(
                               f"@{n}: {', '.join(x.chip for x in t)}" for n, t in found.items()))
    if chips:
        return Target(backends.pop(), ",".join(chips))
    return requested or default or Target("nvvm", "sm_90")


def _retarget(gmod: ir.Operation, own: list[Target], requested: Target) -> list[Target]:
    """Give ``gmod`` one target per requested chip (see :func:`assign_targets`)."""
    name = sym_name(gmod)
    texts = [str(a) for a in ir.ArrayAttr(gmod.attributes["targets"])]
    own_chips = [t.chip for t in own]
    if own_chips == list(requested.chips):
        return own
    log.warning("gpu.module @%s lists the chip%s %s in its IR but the requested target is %s: "
                "building for %s (the request wins; drop the chip from the IR, or request it, "
                "to silence this)", name, "s" if len(own) > 1 else "", ", ".join(own_chips),
                requested.chip, requested.chip)
    chosen = [texts[own_chips.index(chip)] if chip in own_chips else
              _with_chip(texts[0], chip) for chip in requested.chips]
    gmod.attributes["targets"] = ir.Attribute.parse(f"[{', '.join(chosen)}]", gmod.context)
    return [Target(requested.backend, chip) for chip in requested.chips]


def _with_chip(target: str, chip: str) -> str:
    """``#nvvm.target<...>``/``#rocdl.target<...>`` text with its chip set to ``chip``."""
    if 'chip = "' in target:
        return re.sub(r'chip = "[^"]*"', f'chip = "{chip}"', target, count=1)
    if target.endswith(">"):
        head, _, rest = target.partition("<")
        return f'{head}<chip = "{chip}", {rest}'
    return f'{target}<chip = "{chip}">'


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
               options: "lowering.LoweringOptions | None" = None) -> dict[str, Binary]:
    """Lower every NVVM-targeted ``gpu.module`` with ``options`` (the kernel pipeline and the
    kernel compile options, :mod:`pywave.kernel_options`) and serialise it into a
    ``gpu.binary`` of PTX. ``observe(module, pipeline, pipeline_for)`` (for dumps) sees the
    module between the two, with the serialisation pipeline and a function giving it for
    another MLIR format. When ptxas assembles the kernels, targets without ``features`` get
    the highest PTX ISA it accepts (:func:`raise_ptx_version`).

    ``fmt`` ``"ptx"`` leaves the PTX for the driver (returns {}: :func:`collect_binaries`
    reads it). Otherwise pywave runs ptxas per chip (:mod:`pywave.ptxas`: its warnings are
    logged, its figures kept) and returns ``{gpu.module name: Binary}``: a cubin (one chip;
    ``"auto"``), or a fatbin (``"fatbin"``, and ``"auto"`` for a module of several chips)
    holding each chip's cubin and PTX. Several chips with ``"cubin"`` or ``"ptx"`` are a
    CompileError, as is a format other than ``"ptx"`` without ptxas."""
    from . import kernel_options, nvvm_wmma, semantics

    options = options or lowering.LoweringOptions()
    found = find_toolkit()
    toolkit = found.root if found else None
    several = {sym_name(g): [t.chip for t in module_targets(g)] for g in gpu_modules(module)
               if len(module_targets(g)) > 1}
    fmt = _resolve_format(fmt, toolkit, several)
    kernel_options.check_target(options, Target("nvvm", ""), fmt)
    kernel_options.before_lowering(module, options)
    semantics.precise_sqrt(module)
    nvvm_wmma.lower_elementwise(module)
    if fmt != "ptx":
        raise_ptx_version(module, found)
    names = [sym_name(g) for g in gpu_modules(module)]
    run_pipeline(module, lowering.nvvm_pipeline(options), "lowering kernels to NVVM", text)
    semantics.set_data_layout(module)
    kernel_options.after_lowering(module, options, "nvvm", text)
    extern_dynamic_shared_memory(module)
    _check_libdevice(module, toolkit)
    pipeline = binary_pipeline(NVVM_FORMATS["ptx"], toolkit)
    if observe is not None:
        observe(module, pipeline, lambda mlir_format: binary_pipeline(mlir_format, toolkit))
    run_pipeline(module, pipeline, "compiling kernels (gpu-module-to-binary)", text)
    if fmt == "ptx":
        return {}
    return assemble_binaries(module, set(names), fmt, found)


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


def raise_ptx_version(module: ir.Module, found: Toolkit | None) -> int | None:
    """Give every ``#nvvm.target`` without ``features`` the ``+ptxNN`` that ``found``'s ptxas
    accepts (:func:`pywave.toolkit.ptx_isa`); returns NN (None: nothing to raise to). Only
    for images ptxas assembles: PTX handed to the driver keeps LLVM's default, since the
    driver's own PTX version is known at run time only. Targets with ``features`` (the
    user's, ``lowering=LoweringOptions(features=...)``) are left as they are."""
    version = ptx_isa(found.version) if found else None
    if version is None:
        return None
    for gmod in gpu_modules(module):
        if "targets" not in gmod.attributes:
            continue
        targets = [str(t) for t in ir.ArrayAttr(gmod.attributes["targets"])]
        raised = [_with_features(t, f"+ptx{version}") for t in targets]
        if raised != targets:
            gmod.attributes["targets"] = ir.Attribute.parse(f"[{', '.join(raised)}]",
                                                            module.context)
    return version


def _with_features(target: str, features: str) -> str:
    """``#nvvm.target<...>`` text with ``features`` added when it has none (other targets and
    targets with features unchanged). All-default targets print bare: ``#nvvm.target``."""
    if not target.startswith("#nvvm.target") or "features" in target:
        return target
    if target == "#nvvm.target":
        return f'#nvvm.target<features = "{features}">'
    return target[:-1] + f', features = "{features}">'


def serialise_clone(module: ir.Module, pipeline: str) -> list[tuple[str, bytes]]:
    """(gpu.binary name, first object's bytes) after running ``pipeline`` (a
    ``gpu-module-to-binary`` pipeline) on a copy of ``module``, which stays as it is: the
    kernels' LLVM IR or PTX for a dump."""
    clone = ir.Module.parse(str(module), module.context)
    run_pipeline(clone, pipeline, "serialising a copy of the kernels")
    out = []
    for op in clone.body.operations:
        op = op.operation
        if op.name == "gpu.binary":
            objects = ir.ArrayAttr(op.attributes["objects"])
            out.append((sym_name(op), bytes(gpu.ObjectAttr(objects[0]).object)))
    return out


def extern_dynamic_shared_memory(module: ir.Module) -> None:
    """Make the ``__dynamic_shmem__*`` globals that ``gpu.dynamic_shared_memory`` lowers to
    external. MLIR 22 emits them internal, and NVPTX then demotes them into a one-byte static
    shared variable that overlaps the kernel's static workgroup memory instead of addressing
    the dynamic region (``.extern .shared`` arrays start after all static shared memory)."""
    external = ir.Attribute.parse("#llvm.linkage<external>", module.context)
    for gmod in gpu_modules(module):
        tma = _uses_tma(gmod)
        for op in gmod.regions[0].blocks[0].operations:
            op = op.operation
            if op.name == "llvm.mlir.global" and \
                    sym_name(op).startswith("__dynamic_shmem__"):
                op.attributes["linkage"] = external
                if tma:
                    op.attributes["alignment"] = ir.IntegerAttr.get(
                        ir.IntegerType.get_signless(64), TMA_SHARED_ALIGNMENT)


#: Alignment (bytes) of the dynamic shared memory region in a module that copies with the
#: tensor memory accelerator: a TMA's shared-memory box must be 128-byte aligned, 1024 with
#: the 128-byte swizzle (CUDA C++ Programming Guide, "Tensor Memory Access"). The region
#: starts after the static shared memory, so MLIR's 16-byte alignment put it at offset 16
#: behind an mbarrier: CUDA_ERROR_MISALIGNED_ADDRESS (upstream's sm90 TMA tests, on the H200).
TMA_SHARED_ALIGNMENT = 1024


def _uses_tma(gmod: ir.Operation) -> bool:
    """Whether a lowered ``gpu.module`` issues a bulk tensor copy (TMA)."""
    found = []

    def visit(op: ir.Operation) -> ir.WalkResult:
        if op.name.startswith("nvvm.cp.async.bulk.tensor"):
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
