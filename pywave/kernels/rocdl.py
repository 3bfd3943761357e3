"""Stage ``kernels``, AMD: lower ``#rocdl.target`` ``gpu.module``s to hsaco code objects.

MLIR's Python build has no AMDGPU backend, so ``gpu-module-to-binary`` cannot serialise ROCDL
modules. This stage does what it would do, with the tools at hand:

1. ``gpu.subgroup_mma_*`` ops become gfx11 WMMA (:mod:`pywave.kernels.rewrites.amdgpu_wmma`), then
   ``convert-gpu-to-rocdl`` runs on each ROCDL ``gpu.module`` (64-bit index, the chip's chipset);
2. the module body, copied into a builtin module, is translated to LLVM IR;
3. llvmlite (LLVM 22, AMDGPU target) parses it, links the ROCm device libraries (ocml, ockl)
   when the kernels call ``__ocml_*``/``__ockl_*``, defines the ``__oclc_*`` control
   variables as ROCm's compilers do, internalises everything but the kernels, optimises and
   emits an ``amdgcn-amd-amdhsa`` object for the chip (code object v5);
4. ``ld.lld -shared`` links the object into the hsaco that ``hipModuleLoadData`` loads.

Each ``gpu.module`` is then replaced by a ``gpu.binary`` holding the hsaco, so that the host
stage treats it exactly like a cubin.
"""

from __future__ import annotations

import glob
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile

from mlir import ir, passmanager
from mlir.dialects import func, gpu
from mlir.dialects import llvm as mlir_llvm

from ..errors import CompileError
from ..llvm import all_targets
from ..mlirutil import diagnostic_error, find_ops, sym_name
from ..program import BACKENDS, FORMATS, Binary
from . import unused_params
from .rewrites import gpu_ids
from .rewrites.amdgpu_wmma import lower_wmma

log = logging.getLogger("pywave.amdgpu")

#: Kernel lowering for AMD targets (64-bit index, memref descriptors as parameters); run
#: anchored on one ``gpu.module``.
#: The kernel lowering to ROCDL. canonicalize and cse follow it, as in the NVVM pipeline
#: (:func:`pywave.lowering.nvvm_pipeline`): they fold the memref descriptors built from the
#: kernel's parameters, so that a parameter the kernel never reads has no use left
#: (:mod:`pywave.kernels.unused_params`).
ROCDL_PIPELINE = ("gpu.module(convert-gpu-to-rocdl{{index-bitwidth=64 chipset={chip} runtime=HIP}}, "
                  "canonicalize, cse, reconcile-unrealized-casts)")

TRIPLE = BACKENDS["rocdl"].triple

#: AMDHSA code object version of the emitted hsaco (and the matching ``__oclc_ABI_version``
#: the device libraries read): v5 (ROCm >= 5.2 loads it); v4 when the only ld.lld is older
#: than LLVM 15, which rejects v5 objects ("unknown abi version"). ROCm 6 loads both.
CODE_OBJECT_VERSION = 500
CODE_OBJECT_VERSION_OLD_LLD = 400

#: Bitcode files of the ROCm device libraries linked on demand.
DEVICE_LIBRARIES = ("ocml.bc", "ockl.bc")

#: Where the device libraries are looked for (after ``$ROCM_PATH``): ROCm's default prefix,
#: Debian/Ubuntu's ``rocm-device-libs`` package.
DEVICE_LIBRARY_DIRS = ("/opt/rocm/amdgcn/bitcode", "/opt/rocm/lib/llvm/lib/clang/*/lib/amdgcn/bitcode",
                       "/usr/lib/x86_64-linux-gnu/amdgcn/bitcode", "/usr/lib/amdgcn/bitcode",
                       "/usr/share/amdgcn/bitcode")

INSTALL_HINT = ("install ROCm (set ROCM_PATH) or, on Debian/Ubuntu, "
                "`apt-get install lld rocm-device-libs`")



def lower_rocdl(module: ir.Module, *, fmt: str = "auto", opt_level: int = 3,
                text: str | None = None, line_info: bool = False,
                keep_params: bool = False) -> tuple[list[Binary], dict[str, tuple]]:
    """Lower every ROCDL-targeted ``gpu.module`` of ``module`` to an hsaco and replace it with
    a ``gpu.binary`` of the same name. Returns the binaries (format ``"hsaco"``) and what
    :func:`pywave.kernels.unused_params.drop_unused` dropped from their kernels (nothing with
    ``keep_params``); ``fmt`` must be ``"auto"`` or ``"hsaco"``. ``opt_level``: the kernels'
    optimisation level (0-3); ``line_info``: a DWARF line table from the MLIR locations (no
    variables)."""
    from ..mlirutil import gpu_modules, run_pipeline
    from .nvvm import extern_dynamic_shared_memory
    from .compile_flags import LINE_INFO_PIPELINE
    from .targets import first_attribute, module_target

    amd = [f.name for f in FORMATS.values() if f.backend == "rocdl"]
    if fmt != "auto" and fmt not in amd:
        raise CompileError(f"format={fmt!r} is an NVIDIA format; AMD targets produce "
                           f"format={' or '.join(map(repr, amd))} (or 'auto')")

    out, dropped = [], {}
    for gmod in gpu_modules(module):
        target = module_target(gmod)
        if target is None or target.backend != "rocdl":
            continue
        name = sym_name(gmod)
        isa_version(target.chip)
        target_attr = first_attribute(gmod)
        lower_wmma(gmod, target.chip)
        gpu_ids.lower_id_queries(gmod, "rocdl")
        lower_asserts(gmod)
        try:
            passmanager.PassManager.parse(ROCDL_PIPELINE.format(chip=target.chip),
                                          module.context).run(gmod)
        except ir.MLIRError as exc:
            raise diagnostic_error(f"lowering gpu.module @{name} to ROCDL failed", exc,
                                   text) from None
        extern_dynamic_shared_memory(module)
        if line_info:
            run_pipeline(module, LINE_INFO_PIPELINE["rocdl"], "adding line information", text)
        if not keep_params:
            dropped.update(unused_params.drop_unused(module, {name}))
        kernels = _kernel_names(gmod)
        llvm_ir = translate(gmod)
        hsaco = compile_llvm_ir(llvm_ir, target.chip, kernels, opt_level=opt_level,
                                what=f"gpu.module @{name}")
        with module.context, gmod.location:
            obj = gpu.ObjectAttr.get(target_attr, 3, hsaco)  # 3 = #gpu.compilation_target<bin>
            with ir.InsertionPoint(gmod):
                gpu.BinaryOp(name, ir.ArrayAttr.get([obj]),
                             offloadingHandler=ir.Attribute.parse("#gpu.select_object<0>"))
        gmod.erase()
        out.append(Binary(name, "hsaco", hsaco, target.chip))
    return out, dropped


def lower_asserts(gmod: ir.Operation) -> int:
    """Rewrite each ``cf.assert`` of a ROCDL ``gpu.module`` into a call of a helper
    ``func.func`` that, when the condition is false, prints the message (``gpu.printf``: the
    HIP runtime's printf, as HIP's own device ``assert`` does) and ends the kernel with
    ``llvm.intr.trap`` (a wave trap: the launch fails, as HIP's ``__assert_fail``). MLIR 22's
    ``convert-gpu-to-rocdl`` lowers ``cf.assert`` with the host's ``puts``/``abort`` and
    places the message global outside the ``gpu.module`` (``'llvm.mlir.addressof' op must
    reference a global``). Returns how many asserts were rewritten."""
    found = find_ops(gmod, lambda op: op.name == "cf.assert")
    helpers: dict[str, str] = {}
    body = gmod.regions[0].blocks[0]
    with gmod.context:
        for op in found:
            message = _assert_message(op)
            name = helpers.get(message)
            if name is None:
                name = helpers[message] = f"__pywave_assert_{len(helpers)}"
                helper = ir.Module.parse(_ASSERT_HELPER.format(
                    name=name, message=_mlir_string(message.replace("%", "%%"))))
                body.append(helper.body.operations[0].operation.clone())
            with ir.InsertionPoint(op), op.location:
                func.CallOp([], ir.FlatSymbolRefAttr.get(name), [op.operands[0]])
            op.erase()
    return len(found)


#: The helper a ``cf.assert`` becomes (:func:`lower_asserts`).
_ASSERT_HELPER = """
func.func private @{name}(%ok: i1) {{
  cf.cond_br %ok, ^pass, ^fail
^fail:
  gpu.printf "{message}"
  llvm.intr.trap
  llvm.unreachable
^pass:
  return
}}"""


def _assert_message(op: ir.Operation) -> str:
    """What a failed ``cf.assert`` prints: ``line N: Device-side assertion `msg' failed.``
    (HIP's wording; the line of the op in the input, when it has a file location)."""
    from ..mlirutil import file_location
    text = ir.StringAttr(op.attributes["msg"]).value
    where = file_location(op.location)
    prefix = f"line {where[0]}: " if where is not None else ""
    return f"{prefix}Device-side assertion `{text}' failed.\n"


def _mlir_string(text: str) -> str:
    """``text`` as the inside of an MLIR string literal: printable ASCII other than ``"`` and
    ``\\`` as it is, every other byte of its UTF-8 as a ``\\XX`` escape."""
    out = []
    for byte in text.encode("utf-8"):
        char = chr(byte)
        out.append(char if 0x20 <= byte < 0x7f and char not in '"\\' else f"\\{byte:02X}")
    return "".join(out)


def _kernel_names(gmod: ir.Operation) -> list[str]:
    names = []
    for op in gmod.regions[0].blocks[0].operations:
        op = op.operation
        if op.name == "llvm.func" and "rocdl.kernel" in op.attributes:
            names.append(sym_name(op))
    return names


def translate(gmod: ir.Operation) -> str:
    """LLVM IR text of a lowered ``gpu.module``'s body (its ops copied into a builtin module,
    with the ``llvm.data_layout`` the ROCDL lowering gave it: the translation aligns loads and
    stores by it, LLVM's default layout aligns i64/f64 to 4 bytes).

    Kernels without a known block size get the whole flat work-group range (1-1024): MLIR's
    default of 1-256 would make larger launches undefined, and the launch size is chosen by
    the host code at run time."""
    ctx = gmod.context
    with ctx, ir.Location.unknown(ctx):
        body = ir.Module.create()
        if "llvm.data_layout" in gmod.attributes:
            body.operation.attributes["llvm.data_layout"] = gmod.attributes["llvm.data_layout"]
        with ir.InsertionPoint(body.body):
            for op in gmod.regions[0].blocks[0].operations:
                clone = op.operation.clone()
                if clone.name == "llvm.func" and "rocdl.kernel" in clone.attributes and \
                        "rocdl.reqd_work_group_size" not in clone.attributes:
                    clone.attributes["rocdl.flat_work_group_size"] = ir.StringAttr.get("1,1024")
        try:
            return mlir_llvm.translate_module_to_llvmir(body.operation)
        except ir.MLIRError as exc:
            raise diagnostic_error("translating AMD kernels to LLVM IR", exc, None) from None


# --------------------------------------------------------------------------------------------
# Tools
# --------------------------------------------------------------------------------------------
def _rocm_roots() -> list[str]:
    roots = [os.environ.get("ROCM_PATH"), os.environ.get("HIP_PATH")]
    return [r for r in roots if r] + ["/opt/rocm"]


def device_library_dir() -> str | None:
    """Folder holding ``ocml.bc`` and ``ockl.bc``: ``$ROCM_PATH/amdgcn/bitcode``, then ROCm's
    and Debian's default locations."""
    candidates = [os.path.join(r, "amdgcn", "bitcode") for r in _rocm_roots()]
    for pattern in DEVICE_LIBRARY_DIRS:
        candidates.extend(sorted(glob.glob(pattern), reverse=True))
    for folder in candidates:
        if all(os.path.isfile(os.path.join(folder, f)) for f in DEVICE_LIBRARIES):
            return folder
    return None


def linker() -> list[str] | None:
    """Command that runs an ELF ``ld.lld``: ``$ROCM_PATH/llvm/bin/ld.lld``, ``ld.lld`` (or
    ``ld.lld-NN``, newest first) on PATH, then PyPI's ``ziglang`` (``python -m ziglang
    ld.lld``)."""
    for root in _rocm_roots():
        path = os.path.join(root, "llvm", "bin", "ld.lld")
        if os.access(path, os.X_OK):
            return [path]
    found = shutil.which("ld.lld")
    if found:
        return [found]
    versioned = []
    for folder in os.environ.get("PATH", "").split(os.pathsep):
        for path in glob.glob(os.path.join(folder, "ld.lld-[0-9]*")):
            match = re.search(r"ld\.lld-(\d+)$", path)
            if match and os.access(path, os.X_OK):
                versioned.append((int(match.group(1)), path))
    if versioned:
        return [max(versioned)[1]]
    try:
        import importlib.util
        if importlib.util.find_spec("ziglang") is not None:
            return [sys.executable, "-m", "ziglang", "ld.lld"]
    except (ImportError, ValueError):
        pass
    return None


_linker_major: dict[tuple[str, ...], int] = {}


def linker_major(command: list[str]) -> int:
    """LLVM major version of an ld.lld command (0 when it cannot be told)."""
    key = tuple(command)
    if key not in _linker_major:
        try:
            out = subprocess.run([*command, "--version"], capture_output=True, text=True,
                                 timeout=60).stdout
            match = re.search(r"LLD (\d+)\.", out)
            _linker_major[key] = int(match.group(1)) if match else 0
        except (OSError, subprocess.TimeoutExpired):
            _linker_major[key] = 0
    return _linker_major[key]


def code_object_version() -> int:
    """AMDHSA code object version to emit (see :data:`CODE_OBJECT_VERSION`)."""
    command = linker()
    if command is not None and 0 < linker_major(command) < 15:
        return CODE_OBJECT_VERSION_OLD_LLD
    return CODE_OBJECT_VERSION


# --------------------------------------------------------------------------------------------
# LLVM IR -> hsaco
# --------------------------------------------------------------------------------------------
def isa_version(chip: str) -> int:
    """``__oclc_ISA_version`` of a chip: gfx942 -> 9402, gfx90a -> 9010, gfx1100 -> 11000."""
    match = re.fullmatch(r"gfx(\d+)([0-9a-f])([0-9a-f])", chip)
    if not match:
        raise CompileError(f"unknown AMD chip {chip!r}; expected a name such as 'gfx942'")
    return int(match.group(1)) * 1000 + int(match.group(2), 16) * 100 + int(match.group(3), 16)


def wavefront_size(chip: str) -> int:
    """Default wavefront size: 64 before gfx10 (GCN/CDNA), 32 from gfx10 (RDNA)."""
    return 64 if isa_version(chip) < 10000 else 32


def control_ir(chip: str, version: int, variables: bool = True) -> str:
    """The code-object-version module flag and (with ``variables``) the ``__oclc_*`` control
    variables of the device libraries, as clang sets them for default (non fast-math)
    compiles."""
    def var(name: str, ty: str, value: int) -> str:
        return (f"@{name} = linkonce_odr hidden local_unnamed_addr addrspace(4) constant "
                f"{ty} {value}, align {1 if ty == 'i8' else 4}\n")
    flag = ("!llvm.module.flags = !{!0}\n"
            f'!0 = !{{i32 1, !"amdhsa_code_object_version", i32 {version}}}\n')
    if not variables:
        return f'target triple = "{TRIPLE}"\n' + flag
    return (f'target triple = "{TRIPLE}"\n'
            + var("__oclc_finite_only_opt", "i8", 0)
            + var("__oclc_unsafe_math_opt", "i8", 0)
            + var("__oclc_daz_opt", "i8", 0)
            + var("__oclc_correctly_rounded_sqrt32", "i8", 1)
            + var("__oclc_wavefrontsize64", "i8", int(wavefront_size(chip) == 64))
            + var("__oclc_ISA_version", "i32", isa_version(chip))
            + var("__oclc_ABI_version", "i32", version)
            + flag)


def target_machine(chip: str, opt_level: int = 3):
    llvm = all_targets()
    try:
        target = llvm.Target.from_triple(TRIPLE)
    except RuntimeError as exc:
        raise CompileError(f"this llvmlite has no AMDGPU target ({exc}); "
                           "pywave needs llvmlite 0.50 or later") from None
    return target.create_target_machine(cpu=chip, features="", opt=opt_level, reloc="pic",
                                        codemodel="default")


def compile_llvm_ir(llvm_ir: str, chip: str, kernels: list[str], *, opt_level: int = 3,
                    what: str = "the kernels") -> bytes:
    """hsaco (an ``ld.lld -shared`` ELF) for ``chip`` from the LLVM IR of a kernel module."""
    isa_version(chip)
    object_code = compile_object(llvm_ir, chip, kernels, opt_level=opt_level, what=what)
    return link(object_code, what=what)


def compile_object(llvm_ir: str, chip: str, kernels: list[str], *, opt_level: int = 3,
                   what: str = "the kernels") -> bytes:
    """Relocatable AMDGPU object for ``chip`` (device libraries linked, optimised)."""
    return _codegen(llvm_ir, chip, kernels, opt_level=opt_level, what=what, assembly=False)


def kernel_assembly(llvm_ir: str, chip: str, kernels: list[str], *, opt_level: int = 3,
                    what: str = "the kernels") -> str:
    """The AMDGPU assembly (text) of what :func:`compile_object` emits for the same input:
    the instructions a kernel runs, for inspection and tests."""
    return _codegen(llvm_ir, chip, kernels, opt_level=opt_level, what=what, assembly=True)


def _codegen(llvm_ir: str, chip: str, kernels: list[str], *, opt_level: int, what: str,
             assembly: bool) -> bytes | str:
    llvm = all_targets()
    tm = target_machine(chip, opt_level)
    try:
        module = llvm.parse_assembly(llvm_ir)
        module.triple = TRIPLE
        module.data_layout = str(tm.target_data)
        wanted = sorted({f.name for f in module.functions
                         if f.is_declaration and f.name.startswith(("__ocml_", "__ockl_"))})
        version = code_object_version()
        if wanted:
            folder = device_library_dir()
            if folder is None:
                raise CompileError(
                    f"{what} needs the ROCm device library (it calls "
                    f"{', '.join(wanted[:3])}) but ocml.bc/ockl.bc were not found in "
                    "$ROCM_PATH/amdgcn/bitcode, /opt/rocm/amdgcn/bitcode or "
                    f"/usr/lib/x86_64-linux-gnu/amdgcn/bitcode; {INSTALL_HINT}")
            for lib in DEVICE_LIBRARIES:
                with open(os.path.join(folder, lib), "rb") as f:
                    bitcode = llvm.parse_bitcode(f.read())
                bitcode.triple = TRIPLE
                bitcode.data_layout = module.data_layout
                module.link_in(bitcode)
            log.debug("linked %s from %s for %s", ", ".join(DEVICE_LIBRARIES), folder, wanted)
        # After the libraries: the linker drops linkonce definitions nothing references yet.
        control = llvm.parse_assembly(control_ir(chip, version, bool(wanted)))
        control.data_layout = module.data_layout
        module.link_in(control)
        keep = set(kernels)
        for fn in module.functions:
            if not fn.is_declaration and fn.name not in keep:
                fn.linkage = llvm.Linkage.internal
        for gv in module.global_variables:
            if not gv.is_declaration and not gv.name.startswith("__dynamic_shmem__"):
                gv.linkage = llvm.Linkage.internal
        module.verify()
    except RuntimeError as exc:
        raise CompileError(f"LLVM rejected the AMD kernel IR of {what}: {exc}") from None
    pto = llvm.create_pipeline_tuning_options(speed_level=max(opt_level, 1))
    pb = llvm.create_pass_builder(tm, pto)
    pb.getModulePassManager().run(module, pb)
    module = _without_comment_asm(llvm, module, what)
    try:
        return tm.emit_assembly(module) if assembly else tm.emit_object(module)
    except RuntimeError as exc:
        raise CompileError(f"AMDGPU code generation for {chip} failed on {what}: {exc}") from None


#: An inline-asm template that is only an assembler comment (ockl's "readfirstlane hoisting
#: hack": an optimisation barrier whose text is a comment).
_COMMENT_ASM = re.compile(r'(\basm (?:sideeffect |alignstack |inteldialect |unwind )*)'
                          r'"\s*(?:;|//)[^"\\]*"')
_ANY_ASM = re.compile(r'\basm (?:sideeffect |alignstack |inteldialect |unwind )*"(?!")')


def _without_comment_asm(llvm, module, what: str):
    """Empty the templates of comment-only inline asm, and reject any other inline asm.

    llvmlite has no AMDGPU assembly parser, and LLVM's object emitter aborts the process on
    inline asm it cannot parse. An empty template is never parsed (the call, and so the
    barrier, stays); a comment emits nothing either way, so the code is unchanged."""
    text = str(module)
    if "asm " not in text:
        return module
    text = _COMMENT_ASM.sub(r'\1""', text)
    if _ANY_ASM.search(text):
        raise CompileError(f"{what}: inline assembly cannot be assembled for AMD GPUs here "
                           "(llvmlite has no AMDGPU assembly parser)")
    try:
        rebuilt = llvm.parse_assembly(text)
        rebuilt.verify()
    except RuntimeError as exc:
        raise CompileError(f"LLVM rejected the AMD kernel IR of {what}: {exc}") from None
    return rebuilt


def link(object_code: bytes, *, what: str = "the kernels") -> bytes:
    """``ld.lld -shared`` of one relocatable AMDGPU object into an hsaco."""
    command = linker()
    if command is None:
        raise CompileError(f"linking {what} into an hsaco needs ld.lld (none found in "
                           "$ROCM_PATH/llvm/bin or on PATH); install ROCm, or "
                           "`apt-get install lld`, or `pip install ziglang`")
    with tempfile.TemporaryDirectory(prefix="pywave-hsaco-") as tmp:
        obj, out = os.path.join(tmp, "kernels.o"), os.path.join(tmp, "kernels.hsaco")
        with open(obj, "wb") as f:
            f.write(object_code)
        try:
            done = subprocess.run([*command, "-shared", "--no-undefined", obj, "-o", out],
                                  capture_output=True, text=True, timeout=120)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise CompileError(f"running {' '.join(command)} failed: {exc}") from None
        if done.returncode != 0:
            raise CompileError(f"{' '.join(command)} -shared failed on {what} "
                               f"(exit {done.returncode}): {done.stderr.strip()}")
        with open(out, "rb") as f:
            return f.read()
