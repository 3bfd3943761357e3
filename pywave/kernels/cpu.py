"""Stage ``kernels``, CPU: ``gpu.module``s compiled for the host CPU (``target="cpu"``).

The kernels of each ``gpu.module`` become an ELF shared object for the host that libwavert's
CPU backend (``libwavert/src/backend_cpu.c``) dlopens and runs through the same
``wavert_jit_launch`` as a cubin: the host code is unchanged. Steps, per ``gpu.module``:

1. Refuse what a CPU cannot run: ops of the ``nvvm``, ``rocdl``, ``nvgpu``, ``amdgpu``
   dialects (intrinsics, wgmma, TMA, mbarriers) and every ``gpu`` op but those in
   :data:`GPU_OPS` (shuffles, subgroup reductions, MMA, printf, clusters...): a CompileError
   naming the op and its line.
2. Rewrite the GPU queries into calls of the image's ABI functions (defined in step 4):
   ``gpu.thread_id``/``block_id``/``block_dim``/``grid_dim`` (x, y, z) read the current
   thread's record (:data:`THREAD_FIELDS`); a subgroup is one thread (``gpu.subgroup_size`` 1, ``gpu.lane_id`` 0, the device reports
   warp size 1, so ``subgroup_id`` is the linear thread id); ``gpu.global_id`` is
   ``block_id * block_dim + thread_id``; ``gpu.barrier`` calls
   ``__wavert_cpu_barrier``.
3. Lower with MLIR's own passes (:data:`CPU_PIPELINE`: ``convert-gpu-to-nvvm`` turns
   ``gpu.func`` into ``llvm.func``, workgroup attributions, address-space-3
   ``memref.global``s and ``gpu.dynamic_shared_memory`` into address-space-3 globals, every
   other dialect into LLVM; no NVVM op is left, step 2 having replaced the ones it would make)
   and translate the body to LLVM IR. Then, in the IR: every address-space-3 global becomes a
   ``thread_local`` global (workgroup memory is per block because a pool thread runs one
   block at a time, its fibers sharing the thread's storage), the dynamic region a
   ``thread_local`` array of :data:`DYNAMIC_SHARED_BYTES` (the device's opt-in limit),
   address spaces are dropped (one address space on the host), and libdevice calls
   (``__nv_expf``) become the C library's (``expf``); one that libm lacks is a CompileError.
4. Add the ABI (:data:`CPU_ABI`, libwavert's ``WAVERT_CPU_ABI``): a thread-local pointer to
   the running thread's record, the query and barrier functions reading it, and per kernel K
   ``__wavert_cpu_thread_K(void **params, record *)`` (one thread: loads each kernel
   argument from the launch's parameter array, MLIR's launch ABI) and, for a module without
   ``gpu.barrier``, ``__wavert_cpu_block_K`` (a loop over the block's threads, x fastest,
   into which LLVM inlines the kernel); kernels of modules with barriers run one fiber per
   thread (backend_cpu.c). Optimise with llvmlite at ``opt_level`` for this machine's CPU
   and features (the cache key holds both: :func:`host_cpu`), emit an object and link it with
   the C compiler driver (``$CC``, else ``cc``) ``-shared -lm``.

The image's undefined symbols are checked against the process before it is returned (a
missing one would fail the ``dlopen`` at the first launch): a CompileError names them.
"""

from __future__ import annotations

import ctypes
import functools
import logging
import os
import re
import shlex
import subprocess
import tempfile

from mlir import ir, passmanager
from mlir.dialects import arith, func, gpu
from mlir.dialects import llvm as mlir_llvm

from ..errors import CompileError
from ..mlirutil import diagnostic_error, file_location, find_ops, gpu_modules, sym_name
from ..image_params import undefined_symbols
from ..llvm import host_cpu
from ..program import Binary
from . import params
from .rewrites import gpu_ids

log = logging.getLogger("pywave.kernels.cpu")

#: Version of the image ABI; libwavert's WAVERT_CPU_ABI (backend_cpu.c) must be equal.
CPU_ABI = 1
#: Bytes of dynamic workgroup memory every block has (libwavert's WAVERT_CPU_DYNAMIC_SHARED,
#: the CPU device's MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: launches asking more are refused).
DYNAMIC_SHARED_BYTES = 65536
#: Field index (in int64 words) of each query's x component in libwavert's
#: ``wavert__cpu_thread`` record; y and z follow. The barrier function pointer is word 12.
THREAD_FIELDS = {"gpu.thread_id": 0, "gpu.block_id": 3, "gpu.block_dim": 6, "gpu.grid_dim": 9}
BARRIER_FIELD = 12
#: The ``gpu`` ops a CPU kernel may hold (the others are refused, naming them).
GPU_OPS = frozenset(THREAD_FIELDS) | {
    "gpu.module", "gpu.func", "gpu.return", "gpu.barrier", "gpu.global_id", "gpu.lane_id",
    "gpu.dynamic_shared_memory", "gpu.subgroup_size", "gpu.num_subgroups", "gpu.subgroup_id"}
#: Dialects whose ops only a GPU runs.
GPU_ONLY_DIALECTS = ("nvvm", "rocdl", "nvgpu", "amdgpu")
#: The kernel lowering, anchored on the ``gpu.module`` (64-bit index, memref descriptors as
#: parameters: the launch ABI of the other targets).
CPU_PIPELINE = ("gpu.module(convert-vector-to-llvm, convert-gpu-to-nvvm{index-bitwidth=64}, "
                "canonicalize, cse, reconcile-unrealized-casts)")
#: Prefix of the image's ABI symbols.
PREFIX = "__wavert_cpu_"
#: The lowering calls a ``gpu.module``'s external functions through a private wrapper of
#: the declared name that calls ``_mlir_ciface_<name>``: the ABI defines those (scalars only,
#: so the C interface is the plain convention).
CIFACE = "_mlir_ciface_"


def lower_cpu(module: ir.Module, *, text: str | None = None, opt_level: int = 3,
              keep_params: bool = False) -> tuple[list[Binary], dict[str, tuple]]:
    """Compile every ``gpu.module`` of ``module`` for the host CPU and replace it with a
    ``gpu.binary`` of the same name. Returns one :class:`pywave.program.Binary` (format
    ``"cpu-so"``, chip ``"cpu"``) per module and what :func:`pywave.kernels.params.drop_unused`
    dropped (nothing with ``keep_params``). CompileError for an op a CPU cannot run (named,
    with its line), a failed lowering, a math function libm lacks, or no C compiler driver
    to link with."""
    out, dropped = [], {}
    for gmod in gpu_modules(module):
        name = sym_name(gmod)
        if not find_ops(gmod, lambda op: op.name == "gpu.func" and "gpu.kernel" in op.attributes):
            gmod.erase()
            continue
        _refuse_gpu_only(gmod, name)
        barriers = bool(find_ops(gmod, lambda op: op.name == "gpu.barrier"))
        gpu_ids.lower_id_queries(gmod, "nvvm")
        _rewrite_queries(gmod)
        try:
            passmanager.PassManager.parse(CPU_PIPELINE, module.context).run(gmod)
        except ir.MLIRError as exc:
            raise diagnostic_error(f"lowering gpu.module @{name} for the CPU failed", exc,
                                   text) from None
        left = find_ops(gmod, lambda op: op.name.split(".", 1)[0] in GPU_ONLY_DIALECTS)
        if left:
            raise CompileError(f"gpu.module @{name}: the CPU target cannot run "
                               f"{left[0].name}, which the lowering produced")
        if not keep_params:
            dropped.update(params.drop_unused(module, {name}))
        kernels = [sym_name(op.operation) for op in gmod.regions[0].blocks[0].operations
                   if op.operation.name == "llvm.func" and "gpu.kernel" in op.operation.attributes]
        llvm_ir = _host_ir(_translate(gmod), name)
        obj = compile_object(llvm_ir, kernels, barriers=barriers, opt_level=opt_level,
                             what=f"gpu.module @{name}")
        image = link(obj, what=f"gpu.module @{name}")
        with module.context, gmod.location:
            # The target is a placeholder the host stage erases with the gpu.binary (the
            # launches read the Binary); gpu.binary needs an attribute of a GPU target.
            placeholder = ir.Attribute.parse('#nvvm.target<chip = "sm_90">')
            obj_attr = gpu.ObjectAttr.get(placeholder, 3, image)
            with ir.InsertionPoint(gmod):
                gpu.BinaryOp(name, ir.ArrayAttr.get([obj_attr]),
                             offloadingHandler=ir.Attribute.parse("#gpu.select_object<0>"))
        gmod.erase()
        out.append(Binary(name, "cpu-so", image, "cpu"))
    return out, dropped


def _where(op: ir.Operation) -> str:
    loc = file_location(op.location)
    return f" at line {loc[0]}, column {loc[1]}" if loc else ""


def _refuse_gpu_only(gmod: ir.Operation, name: str) -> None:
    """CompileError for the first op of ``gmod`` that only a GPU runs."""
    def bad(op: ir.Operation) -> bool:
        dialect = op.name.split(".", 1)[0]
        return dialect in GPU_ONLY_DIALECTS or (dialect == "gpu" and op.name not in GPU_OPS)
    found = find_ops(gmod, bad)
    if found:
        op = found[0]
        raise CompileError(
            f"gpu.module @{name}: {op.name}{_where(op)} cannot run on the CPU target "
            "(target='cpu' runs the gpu dialect's thread and block queries, gpu.barrier and "
            "workgroup memory; GPU intrinsics, subgroup operations, MMA, TMA and printf need "
            "a GPU target)")


def _rewrite_queries(gmod: ir.Operation) -> None:
    """Step 2 of the module docstring: the queries and ``gpu.barrier`` into ABI calls."""
    ctx = gmod.context
    with ctx, gmod.location:
        index = ir.IndexType.get()
        body = gmod.regions[0].blocks[0]
        declared: set[str] = set()

        def declare(symbol: str, results: list) -> None:
            if symbol in declared:
                return
            declared.add(symbol)
            with ir.InsertionPoint.at_block_begin(body):
                f = func.FuncOp(symbol, ir.FunctionType.get([], results))
                f.sym_visibility = ir.StringAttr.get("private")

        def query(name: str, dim: str) -> ir.Value:
            symbol = f"{PREFIX}{name[4:]}_{dim}"
            declare(symbol, [index])
            return func.CallOp([index], symbol, []).result

        for op in find_ops(gmod, lambda o: o.name in THREAD_FIELDS or o.name in (
                "gpu.barrier", "gpu.lane_id", "gpu.subgroup_size", "gpu.global_id")):
            with ir.InsertionPoint(op), op.location:
                if op.name == "gpu.barrier":
                    declare(PREFIX + "barrier", [])
                    func.CallOp([], PREFIX + "barrier", [])
                    op.erase()
                    continue
                if op.name == "gpu.lane_id":
                    value = arith.ConstantOp(index, 0).result
                elif op.name == "gpu.subgroup_size":
                    value = arith.ConstantOp(index, 1).result
                else:
                    dim = re.search(r"([xyz])>*$", str(op.attributes["dimension"])).group(1)
                    if op.name == "gpu.global_id":   # block_id * block_dim + thread_id
                        value = arith.AddIOp(
                            arith.MulIOp(query("gpu.block_id", dim),
                                         query("gpu.block_dim", dim)).result,
                            query("gpu.thread_id", dim)).result
                    else:
                        value = query(op.name, dim)
            op.results[0].replace_all_uses_with(value)
            op.erase()


def _translate(gmod: ir.Operation) -> str:
    """LLVM IR of the lowered module's body (copied into a builtin module without the GPU
    attributes, which would make kernels NVPTX entry points)."""
    ctx = gmod.context
    with ctx, ir.Location.unknown(ctx):
        body = ir.Module.create()
        with ir.InsertionPoint(body.body):
            for op in gmod.regions[0].blocks[0].operations:
                clone = op.operation.clone()
                names = [a if isinstance(a, str) else a.name for a in clone.attributes]
                for attr in [a for a in names if a.startswith(("nvvm.", "gpu.", "rocdl."))]:
                    del clone.attributes[attr]
        try:
            return mlir_llvm.translate_module_to_llvmir(body.operation)
        except ir.MLIRError as exc:
            raise diagnostic_error("translating CPU kernels to LLVM IR", exc, None) from None


_GLOBAL_AS3 = re.compile(r"^(@[\w.$\"-]+ = )([\w ]*?)addrspace\(3\) (global|constant) (.*)$",
                         re.M)
_DYNAMIC = re.compile(r"^(@__dynamic_shmem__\w+) = .*$", re.M)
_LIBDEVICE = re.compile(r"@__nv_(\w+)\b")


def _host_ir(llvm_ir: str, name: str) -> str:
    """Step 3's rewrites of the translated IR: workgroup globals thread-local, address
    spaces dropped, libdevice names to libm's."""
    def dynamic(match: re.Match) -> str:
        return (f"{match.group(1)} = internal thread_local global [{DYNAMIC_SHARED_BYTES} x i8] "
                "zeroinitializer, align 64")
    out = _DYNAMIC.sub(dynamic, llvm_ir)

    def static(match: re.Match) -> str:
        linkage = match.group(2).replace("external ", "")
        rest = match.group(4)
        if rest.startswith("[0 x") and "zeroinitializer" not in rest and "undef" not in rest:
            # A zero-element global without initializer: the dynamic region (as NVVM reads it).
            return (f"{match.group(1)}internal thread_local global [{DYNAMIC_SHARED_BYTES} x "
                    "i8] zeroinitializer, align 64")
        return f"{match.group(1)}{linkage}thread_local {match.group(3)} {rest}"
    out = _GLOBAL_AS3.sub(static, out)
    out = re.sub(r" addrspace\(\d+\)", "", out)
    out = out.replace("addrspacecast", "bitcast")
    missing = []

    def libm(match: re.Match) -> str:
        symbol = match.group(1)
        if not _process_has(symbol):
            missing.append(symbol)
        return "@" + symbol
    out = _LIBDEVICE.sub(libm, out)
    if missing:
        raise CompileError(f"gpu.module @{name}: the math function{'s' * (len(missing) > 1)} "
                           f"{', '.join(sorted(set('__nv_' + m for m in missing)))} (CUDA "
                           "libdevice) ha" + ("ve" if len(missing) > 1 else "s") +
                           " no C library equivalent on this host: the CPU target cannot "
                           "run the math op that lowers to it")
    return out


@functools.cache
def _process_has(symbol: str) -> bool:
    """Whether the process (libc, libm) defines ``symbol``."""
    for lib in (None, "libm.so.6"):
        try:
            getattr(ctypes.CDLL(lib), symbol)
            return True
        except (OSError, AttributeError):
            continue
    return False


def abi_ir(kernels: dict[str, list[str]], barriers: bool) -> str:
    """The image's ABI in LLVM IR: the thread-local record pointer, the query and barrier
    functions, and the per-kernel entries (``kernels``: name -> LLVM argument types)."""
    lines = [f"@{PREFIX}abi = constant i32 {CPU_ABI}",
             f"@{PREFIX}current = internal thread_local global ptr null"]
    for op, base in THREAD_FIELDS.items():
        for i, dim in enumerate("xyz"):
            lines.append(
                f"define linkonce_odr hidden i64 @{CIFACE}{PREFIX}{op[4:]}_{dim}() "
                "alwaysinline {\n"
                f"  %t = load ptr, ptr @{PREFIX}current\n"
                f"  %p = getelementptr inbounds i64, ptr %t, i64 {base + i}\n"
                f"  %v = load i64, ptr %p\n  ret i64 %v\n}}")
    lines.append(
        f"define linkonce_odr hidden void @{CIFACE}{PREFIX}barrier() noinline {{\n"
        f"  %t = load ptr, ptr @{PREFIX}current\n"
        f"  %p = getelementptr inbounds i64, ptr %t, i64 {BARRIER_FIELD}\n"
        f"  %f = load ptr, ptr %p\n  call void %f(ptr %t)\n"
        # Other fibers of the block ran meanwhile and set the pointer to their records.
        f"  store ptr %t, ptr @{PREFIX}current\n  ret void\n}}")
    for name, types in kernels.items():
        lines.append(f"declare void @{name}({', '.join(types)})")
        loads = []
        for i, ty in enumerate(types):
            loads.append(f"  %q{i} = getelementptr inbounds ptr, ptr %params, i64 {i}\n"
                         f"  %p{i} = load ptr, ptr %q{i}\n  %a{i} = load {ty}, ptr %p{i}")
        args = ", ".join(f"{ty} %a{i}" for i, ty in enumerate(types))
        call = f"  call void @{name}({args})"
        lines.append(f"define void @{PREFIX}thread_{name}(ptr %params, ptr %t) {{\n"
                     f"  store ptr %t, ptr @{PREFIX}current\n" + "\n".join(loads) +
                     f"\n{call}\n  ret void\n}}")
        if barriers:
            continue
        dims = "\n".join(f"  %d{k}p = getelementptr inbounds i64, ptr %t, i64 {6 + k}\n"
                         f"  %d{k} = load i64, ptr %d{k}p\n"
                         f"  %i{k}p = getelementptr inbounds i64, ptr %t, i64 {k}"
                         for k in range(3))
        lines.append(
            f"define void @{PREFIX}block_{name}(ptr %params, ptr %t) {{\nentry:\n"
            f"  store ptr %t, ptr @{PREFIX}current\n" + "\n".join(loads) + "\n" + dims +
            "\n  br label %z\n"
            "z:\n  %z.i = phi i64 [0, %entry], [%z.n, %z.end]\n  store i64 %z.i, ptr %i2p\n"
            "  br label %y\n"
            "y:\n  %y.i = phi i64 [0, %z], [%y.n, %y.end]\n  store i64 %y.i, ptr %i1p\n"
            "  br label %x\n"
            "x:\n  %x.i = phi i64 [0, %y], [%x.n, %x]\n  store i64 %x.i, ptr %i0p\n"
            f"{call}\n"
            "  %x.n = add i64 %x.i, 1\n  %x.c = icmp ult i64 %x.n, %d0\n"
            "  br i1 %x.c, label %x, label %y.end\n"
            "y.end:\n  %y.n = add i64 %y.i, 1\n  %y.c = icmp ult i64 %y.n, %d1\n"
            "  br i1 %y.c, label %y, label %z.end\n"
            "z.end:\n  %z.n = add i64 %z.i, 1\n  %z.c = icmp ult i64 %z.n, %d2\n"
            "  br i1 %z.c, label %z, label %done\n"
            "done:\n  ret void\n}")
    return "\n\n".join(lines) + "\n"


def compile_object(llvm_ir: str, kernels: list[str], *, barriers: bool, opt_level: int = 3,
                   what: str = "the kernels") -> bytes:
    """Step 4: the kernels' IR with the ABI, optimised for this CPU, as an ELF object."""
    from ..llvm import native_target
    llvm = native_target()
    cpu, features = host_cpu()
    target = llvm.Target.from_triple(llvm.get_process_triple())
    tm = target.create_target_machine(cpu=cpu, features=features, opt=opt_level, reloc="pic",
                                      codemodel="default")
    try:
        mod = llvm.parse_assembly(llvm_ir)
        types = {}
        for name in kernels:
            fn = mod.get_function(name)
            types[name] = [str(arg.type) for arg in fn.arguments]
        mod.link_in(llvm.parse_assembly(abi_ir(types, barriers)))
        for fn in mod.functions:    # only the kernel entries are exported
            if not fn.is_declaration and \
                    not fn.name.startswith((PREFIX + "thread_", PREFIX + "block_")):
                fn.linkage = llvm.Linkage.internal
        mod.triple = tm.triple
        mod.data_layout = str(tm.target_data)
        mod.verify()
    except RuntimeError as exc:
        raise CompileError(f"LLVM rejected the CPU kernels of {what}: {exc}") from None
    if opt_level:
        pto = llvm.create_pipeline_tuning_options(speed_level=opt_level)
        pto.loop_vectorization = True
        pto.slp_vectorization = True
        pb = llvm.create_pass_builder(tm, pto)
        pb.getModulePassManager().run(mod, pb)
    return tm.emit_object(mod)


def link(object_code: bytes, *, what: str = "the kernels") -> bytes:
    """The kernels' object linked into a shared object (``$CC``, else ``cc``, ``-shared
    -lm``); CompileError without a working C compiler driver, or naming an undefined symbol
    the process cannot provide."""
    command = shlex.split(os.environ.get("CC") or "cc")
    with tempfile.TemporaryDirectory(prefix="pywave-cpu-") as tmp:
        obj, out = os.path.join(tmp, "kernels.o"), os.path.join(tmp, "kernels.so")
        with open(obj, "wb") as fh:
            fh.write(object_code)
        full = [*command, "-shared", "-Wl,-Bsymbolic", "-o", out, obj, "-lm"]
        try:
            done = subprocess.run(full, capture_output=True, text=True, timeout=120)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise CompileError(f"linking {what} for the CPU target needs a C compiler driver "
                               f"($CC, else cc): {' '.join(full[:1])}: {exc}") from None
        if done.returncode != 0:
            raise CompileError(f"{' '.join(command)} -shared failed on {what} "
                               f"(exit {done.returncode}): {done.stderr.strip()}")
        with open(out, "rb") as fh:
            image = fh.read()
    missing = [s for s in undefined_symbols(object_code) if not _process_has(s)
               and not s.startswith(PREFIX)]
    if missing:
        raise CompileError(f"the CPU kernels of {what} call {', '.join(sorted(missing))}, which "
                           "neither the C library nor libm defines")
    return image
