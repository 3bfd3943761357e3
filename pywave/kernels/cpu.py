"""Stage ``kernels``, CPU: ``gpu.module``s compiled for the host CPU (``target="cpu"``).

The kernels of each ``gpu.module`` become an ELF shared object for the host that libwavert's
CPU backend (``libwavert/src/backend_cpu.c``) dlopens and runs through the same
``wavert_jit_launch`` as a cubin: the host code is unchanged. Steps, per ``gpu.module``:

1. Refuse what a CPU cannot run: ops of the ``nvvm``, ``rocdl``, ``nvgpu``, ``amdgpu``
   dialects (intrinsics, wgmma, TMA, mbarriers) and every ``gpu`` op but those in
   :data:`GPU_OPS` (MMA, ...): a CompileError naming the op and its line; so is a
   ``gpu.binary`` of the input (a GPU's image).
2. Rewrite the GPU queries into calls of the image's ABI functions (defined in step 4):
   ``gpu.thread_id``/``block_id``/``block_dim``/``grid_dim`` (x, y, z) read the current
   thread's record (:data:`THREAD_FIELDS`); ``gpu.global_id`` is
   ``block_id * block_dim + thread_id``; the cluster queries as in "Clusters" below;
   ``gpu.barrier`` calls ``__wavert_cpu_barrier``;
   the subgroup ops as in "Subgroups" below; ``gpu.printf``'s integer arguments narrower
   than 32 bits are promoted to i32 and floats to f64 (C's default promotions).
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
   The prepare stage leaves the kernels' scf ops for step 2b (``CPU_PREPARE_PIPELINE``).
4. Add the ABI (:data:`CPU_ABI`, libwavert's ``WAVERT_CPU_ABI``): a thread-local pointer to
   the running thread's record, the query and barrier functions reading it, and per kernel K
   ``__wavert_cpu_thread_K(void **params, record *)`` (one thread: loads each kernel
   argument from the launch's parameter array, MLIR's launch ABI) and
   ``__wavert_cpu_block_K`` (one whole block): K itself when :mod:`pywave.kernels.cpu_split`
   made it loops over its block's threads cut at its barriers (step 2b, after step 2: the
   kernels it can rewrite, at a kernel opt level above 0), else, for a module without :data:`SYNC_OPS`, a loop over the
   block's threads, x fastest, into which LLVM inlines the kernel; other kernels run one
   fiber per thread (backend_cpu.c); ``__wavert_cpu_args_K``, the count and ABI byte sizes
   of K's arguments (libwavert copies them when a launch is queued on a stream, as a GPU
   driver copies the host code's argument values at the launch). Every function probes each page of a large stack frame (a fiber's
   overflow faults on its guard page: libwavert stops the process naming the stack size,
   ``$WAVERT_CPU_STACK_KIB``, default 64). Optimise with llvmlite at ``opt_level`` for this
   machine's CPU and features (the cache key holds both: :func:`host_cpu`) but
   :data:`EXACT_FEATURES_OFF`, emit an object and link it with
   the C compiler driver (``$CC``, else ``cc``) ``-shared -lm``.

Subgroups (warps), as on NVIDIA GPUs: :data:`SUBGROUP_SIZE` = 32 lanes, formed from
consecutive linear thread ids (``x + dx * (y + dy * z)``); ``gpu.lane_id`` is the linear id
% 32, ``gpu.subgroup_id`` the linear id / 32, ``gpu.num_subgroups`` ceil(threads / 32); the
last warp of a block whose size is not a multiple of 32 is partial. A module using
``gpu.barrier``, ``gpu.shuffle``, ``gpu.subgroup_reduce`` or ``gpu.all_reduce``
(:data:`SYNC_OPS`) runs each GPU thread as a fiber; lanes exchange values through libwavert's
publish/read functions (a thread publishes a 64-bit value for its warp or its block and waits,
as at a barrier of the warp or the block, until every live thread of it has published;
read then returns any thread's published value).

- ``gpu.shuffle mode %v, %offset, %width`` (integers, index and floats of at most 64 bits):
  the offset is taken mod 32 as NVIDIA's ``shfl`` takes it; lane ``l`` reads lane ``l ^ o``
  (xor), ``l + o`` (down), ``l - o`` (up) or ``o`` (idx). The valid flag is true when
  ``l < width``, the source lane is ``< width`` (``>= 0`` for up) and is a thread of the
  block; otherwise the result is the lane's own value (what NVIDIA's lowering yields for the
  lanes below ``width``, MLIR leaving it unspecified) and the flag false.
- ``gpu.subgroup_reduce`` (every operation of ``#gpu<all_reduce_op>``, ``uniform`` or not,
  ``cluster(size = s, stride = d)``: the lanes ``base + k * d``, ``k < s``, with ``base =
  l - l % (s * d) + l % d``): the combination, in lane order, of the cluster's lanes that are
  threads of the block.
- ``gpu.all_reduce`` (an operation or a region, which becomes a private function): the
  combination, in linear thread order, of every thread's value; it is a barrier of the block.
- Threads of a block that wait at different points (a barrier in some, a warp exchange in
  others) so that none can go on: the launch fails with an error naming the kernel, the block
  and two of the threads with what each waits at (libwavert); a barrier reached a different
  number of times by different threads is detected only in checked mode.

Clusters (``gpu.launch_func ... clusters in (cx, cy, cz)``: the host code calls
``wavert_jit_launch_cluster``, whose grid extents must be multiples of the cluster's, as on
the GPU): the record holds the blocks per cluster (``gpu.cluster_dim_blocks``; 1 for a launch
without clusters, as on an NVIDIA GPU, where every block is then a cluster of one), and
per dimension ``gpu.cluster_id`` is ``block_id / cluster_dim_blocks``, ``gpu.cluster_dim``
(clusters per grid) ``grid_dim / cluster_dim_blocks`` and ``gpu.cluster_block_id``
``block_id % cluster_dim_blocks`` (:func:`_rewrite_cluster_queries`). The blocks of a cluster
are not scheduled together: distributed shared memory and cluster barriers are NVVM ops
(``nvvm.mapa``, ``nvvm.cluster.arrive``...), refused as every NVVM op is.

``gpu.printf``: NVIDIA's ``vprintf`` ABI (convert-gpu-to-nvvm's lowering) implemented by
libwavert: C printf formatting, each argument's size taken from its conversion as the CUDA
driver does; a launch's output goes to the process's stdout, each call whole, flushed when
the launch has run (on the calling thread, or on the worker of the stream it was queued on). ``memref.atomic_rmw`` and
``memref.generic_atomic_rmw`` are LLVM atomics (sequentially consistent, as MLIR lowers them):
blocks run in parallel on the pool's threads.

``cf.assert``: convert-gpu-to-nvvm's call of NVIDIA's ``__assertfail`` (message, file, line,
function) becomes a call of the record's ``assert_fail`` (:data:`ASSERT_FIELD`): libwavert
prints CUDA's line (``file:line: function: block: [x,y,z], thread: [x,y,z] Assertion `msg`
failed.``) to stderr and stops the thread (its fiber is never resumed: the kernels of a
module with ``cf.assert`` run one fiber per thread); the block's other threads go on, the
blocks not yet started are not run, and the launch fails with a KernelFaultError naming the
first failed assertion and how many threads failed one.

Checked mode (``checks=True``, :mod:`pywave.kernels.checks`): the module is instrumented
before step 2 (MLIR's runtime verification, its asserts into calls of ``__wavert_cpu_fault``,
workgroup-memory accesses into ``__wavert_cpu_access``), ``gpu.barrier`` becomes
``__wavert_cpu_barrier_at`` with its line, every kernel runs one fiber per thread (a failing
check stops its thread: the fiber is never resumed, no longjmp), and the image exports
``__wavert_cpu_checked``, which makes libwavert require every thread of a block at each
barrier. Record words :data:`FAULT_FIELD`, :data:`ACCESS_FIELD`, :data:`SITE_FIELD`.

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
from ..mlirutil import at_line, diagnostic_error, find_ops, gpu_modules, sym_name
from ..image_params import undefined_symbols
from ..llvm import host_cpu
from ..program import CPU_KERNEL_ABI, Binary
from . import cpu_abi, cpu_lanes, cpu_split, unused_params
from .rewrites import gpu_ids

log = logging.getLogger("pywave.kernels.cpu")

#: Version of the image ABI (:data:`pywave.program.CPU_KERNEL_ABI`).
CPU_ABI = CPU_KERNEL_ABI
#: Bytes of dynamic workgroup memory every block has (libwavert's WAVERT_CPU_DYNAMIC_SHARED,
#: the CPU device's MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: launches asking more are refused).
DYNAMIC_SHARED_BYTES = 65536
#: Field index (in int64 words) of each query's x component in libwavert's
#: ``wavert__cpu_thread`` record; y and z follow. The barrier function pointer is word 12.
THREAD_FIELDS = {"gpu.thread_id": 0, "gpu.block_id": 3, "gpu.block_dim": 6, "gpu.grid_dim": 9,
                 "gpu.cluster_dim_blocks": 22}
BARRIER_FIELD = 12
#: Words of the record's lane-exchange functions (publish, read) and of its printf function.
PUBLISH_FIELD, READ_FIELD, PRINT_FIELD = 14, 15, 16
#: Words of the checked mode's fault and access functions and of the barrier site pointer.
FAULT_FIELD, ACCESS_FIELD, SITE_FIELD = 18, 19, 20
#: Word of the record's failed-``cf.assert`` function (NVIDIA's ``__assertfail`` ABI).
ASSERT_FIELD = 21
#: Lanes of a subgroup, as on NVIDIA GPUs (libwavert's WAVERT_CPU_WARP).
SUBGROUP_SIZE = cpu_abi.SUBGROUP_SIZE
#: The ``gpu`` ops a CPU kernel may hold (the others are refused, naming them).
GPU_OPS = frozenset(THREAD_FIELDS) | {
    "gpu.module", "gpu.func", "gpu.return", "gpu.barrier", "gpu.global_id", "gpu.lane_id",
    "gpu.dynamic_shared_memory", "gpu.subgroup_size", "gpu.num_subgroups", "gpu.subgroup_id",
    "gpu.shuffle", "gpu.subgroup_reduce", "gpu.all_reduce", "gpu.yield", "gpu.printf",
    "gpu.cluster_id", "gpu.cluster_dim", "gpu.cluster_block_id"}
#: Ops whose threads exchange values or wait for each other: a module holding one runs each
#: GPU thread as a fiber.
SYNC_OPS = ("gpu.barrier", "gpu.shuffle", "gpu.subgroup_reduce", "gpu.all_reduce")
#: Dialects whose ops only a GPU runs.
GPU_ONLY_DIALECTS = ("nvvm", "rocdl", "nvgpu", "amdgpu")
#: The kernel lowering, anchored on the ``gpu.module`` (64-bit index, memref descriptors as
#: parameters: the launch ABI of the other targets).
CPU_PIPELINE = ("gpu.module(convert-scf-to-cf, convert-vector-to-llvm, convert-gpu-to-nvvm{index-bitwidth=64}, "
                "canonicalize, cse, reconcile-unrealized-casts)")
#: Prefix of the image's ABI symbols.
PREFIX = cpu_abi.PREFIX
#: The lowering calls a ``gpu.module``'s external functions through a private wrapper of
#: the declared name that calls ``_mlir_ciface_<name>``: the ABI defines those (scalars only,
#: so the C interface is the plain convention).
CIFACE = "_mlir_ciface_"


def lower_cpu(module: ir.Module, *, text: str | None = None, opt_level: int = 3,
              keep_params: bool = False,
              checks: bool = False) -> tuple[list[Binary], dict[str, tuple]]:
    """Compile every ``gpu.module`` of ``module`` for the host CPU and replace it with a
    ``gpu.binary`` of the same name. Returns one :class:`pywave.program.Binary` (format
    ``"cpu-so"``, chip ``"cpu"``) per module and what :func:`pywave.kernels.unused_params.drop_unused`
    dropped (nothing with ``keep_params``). CompileError for a ``gpu.binary`` of the input
    (a GPU image: named, with its objects' formats), an op a CPU cannot run (named, with
    its line), a failed lowering, a math function libm lacks, or no C compiler driver
    to link with. ``checks``: the checked mode (:mod:`pywave.kernels.checks`): every kernel
    runs one fiber per thread, its memref accesses bounds-checked, its workgroup-memory
    accesses race-checked, its barriers required of every thread."""
    _refuse_binaries(module)
    out, dropped = [], {}
    for gmod in gpu_modules(module):
        name = sym_name(gmod)
        if not find_ops(gmod, lambda op: op.name == "gpu.func" and "gpu.kernel" in op.attributes):
            gmod.erase()
            continue
        _refuse_gpu_only(gmod, name)
        # A failed cf.assert stops its thread alone: only a fiber can be stopped so.
        barriers = checks or bool(find_ops(gmod, lambda op: op.name in SYNC_OPS
                                           or op.name == "cf.assert"))
        sites = None
        if checks:
            from . import checks as checked
            sites = checked.instrument(gmod, name, text)
        gpu_ids.lower_id_queries(gmod, "nvvm")
        cpu_lanes.LaneOps(gmod, name).rewrite()
        for op in find_ops(gmod, lambda o: o.name == "gpu.printf"):
            with gmod.context, ir.InsertionPoint(op), op.location:
                _promote_printf(op)
        _rewrite_cluster_queries(gmod)
        _rewrite_queries(gmod, sites)
        # Kernel opt level 0 keeps every kernel's fibers: the reference the split must match.
        split = set() if checks or not opt_level or \
            find_ops(gmod, lambda op: op.name == "cf.assert") else cpu_split.split_kernels(gmod)
        try:
            passmanager.PassManager.parse(CPU_PIPELINE, module.context).run(gmod)
        except ir.MLIRError as exc:
            raise diagnostic_error(f"lowering gpu.module @{name} for the CPU failed", exc,
                                   text) from None
        _refuse_unlowered(gmod, name)
        if not keep_params:
            dropped.update(unused_params.drop_unused(module, {name}))
        kernels = [sym_name(op.operation) for op in gmod.regions[0].blocks[0].operations
                   if op.operation.name == "llvm.func" and "gpu.kernel" in op.operation.attributes]
        llvm_ir = _host_ir(_translate(gmod), name)
        entries = {k: "block" if k in split else "fibers" if barriers else "loop"
                   for k in kernels}
        obj = compile_object(llvm_ir, entries, opt_level=opt_level,
                             what=f"gpu.module @{name}", checks=checks)
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


#: ``#gpu.object`` formats (the ``gpu.CompilationTarget`` enum) by their number.
_OBJECT_FORMATS = {0: "offload", 1: "LLVM IR", 2: "PTX", 3: "cubin", 4: "fatbin"}


def _refuse_binaries(module: ir.Module) -> None:
    """CompileError for a ``gpu.binary`` of the input: its images are for a GPU (PTX, cubin,
    fatbin, hsaco), and the CPU device runs only what :func:`lower_cpu` builds from a
    ``gpu.module`` (the launches of it would otherwise fail at the first call)."""
    for op in module.body.operations:
        if op.operation.name != "gpu.binary":
            continue
        name = sym_name(op.operation)
        objects = [gpu.ObjectAttr(a) for a in ir.ArrayAttr(op.operation.attributes["objects"])]
        held = ", ".join(f"{_OBJECT_FORMATS.get(int(o.format), 'unknown')} for {o.target}"
                         for o in objects) or "no object"
        raise CompileError(
            f"gpu.binary @{name}{at_line(op.operation)} holds a GPU image ({held}): a PTX, "
            "cubin, fatbin or hsaco image cannot run on the CPU device (target='cpu' compiles "
            "the kernels of gpu.module ops for the host); give the kernels as a gpu.module, "
            "or compile for a GPU target")


#: Cluster query -> (the block query it derives from, the arith op combining it with
#: ``gpu.cluster_dim_blocks``): module docstring, "Clusters".
_CLUSTER_QUERIES = {"gpu.cluster_id": ("gpu.block_id", arith.DivUIOp),
                    "gpu.cluster_dim": ("gpu.grid_dim", arith.DivUIOp),
                    "gpu.cluster_block_id": ("gpu.block_id", arith.RemUIOp)}


def _rewrite_cluster_queries(gmod: ir.Operation) -> None:
    """``gpu.cluster_id``, ``gpu.cluster_dim`` and ``gpu.cluster_block_id`` into arithmetic on
    ``gpu.block_id`` / ``gpu.grid_dim`` and ``gpu.cluster_dim_blocks`` (the record's words,
    read by :func:`_rewrite_queries`)."""
    with gmod.context, gmod.location:
        for op in find_ops(gmod, lambda o: o.name in _CLUSTER_QUERIES):
            base, combine = _CLUSTER_QUERIES[op.name]
            dim = getattr(gpu.Dimension,
                          re.search(r"([xyz])>*$", str(op.attributes["dimension"])).group(1))
            with ir.InsertionPoint(op), op.location:
                of = (gpu.BlockIdOp if base == "gpu.block_id" else gpu.GridDimOp)(dim).result
                value = combine(of, gpu.ClusterDimBlocksOp(dim).result).result
            op.results[0].replace_all_uses_with(value)
            op.erase()


def _refuse_gpu_only(gmod: ir.Operation, name: str) -> None:
    """CompileError for the first op of ``gmod`` that only a GPU runs."""
    def bad(op: ir.Operation) -> bool:
        dialect = op.name.split(".", 1)[0]
        return dialect in GPU_ONLY_DIALECTS or (dialect == "gpu" and op.name not in GPU_OPS)
    found = find_ops(gmod, bad)
    if found:
        op = found[0]
        raise CompileError(
            f"gpu.module @{name}: {op.name}{at_line(op)} cannot run on the CPU target "
            "(target='cpu' runs the gpu dialect's thread and block queries, gpu.barrier and "
            "workgroup memory, subgroup shuffles and reductions, gpu.all_reduce and "
            "gpu.printf; GPU intrinsics, MMA, TMA and clusters need a GPU target)")


def _refuse_unlowered(gmod: ir.Operation, name: str) -> None:
    """CompileError for the first op of the lowered ``gmod`` outside the ``llvm`` dialect
    (``math.trunc``, ``math.ipowi``: ops :data:`CPU_PIPELINE` has no pattern for), named
    with its line. The bindings' LLVM IR translation crashes the process on such an op
    instead of raising."""
    left = find_ops(gmod, lambda op: op.name != "gpu.module" and not op.name.startswith("llvm."))
    if not left:
        return
    op = left[0]
    if op.name.split(".", 1)[0] in GPU_ONLY_DIALECTS:
        raise CompileError(f"gpu.module @{name}: the CPU target cannot run "
                           f"{op.name}{at_line(op)}, which the lowering produced")
    raise CompileError(f"gpu.module @{name}: {op.name}{at_line(op)} has no lowering for the "
                       "CPU target: the kernel lowering (convert-gpu-to-nvvm) leaves it as "
                       "it is, as it does for a GPU target")


def _rewrite_queries(gmod: ir.Operation, sites=None) -> None:
    """Step 2 of the module docstring: the queries and ``gpu.barrier`` into ABI calls
    (checked mode, ``sites`` given: ``__wavert_cpu_barrier_at`` with the barrier's line)."""
    ctx = gmod.context
    with ctx, gmod.location:
        index = ir.IndexType.get()
        body = gmod.regions[0].blocks[0]
        declared: set[str] = set()

        def declare(symbol: str, results: list, inputs: list = ()) -> None:
            if symbol in declared:
                return
            declared.add(symbol)
            with ir.InsertionPoint.at_block_begin(body):
                f = func.FuncOp(symbol, ir.FunctionType.get(list(inputs), results))
                f.sym_visibility = ir.StringAttr.get("private")

        def query(name: str, dim: str) -> ir.Value:
            symbol = f"{PREFIX}{name[4:]}_{dim}"
            declare(symbol, [index])
            return func.CallOp([index], symbol, []).result

        for op in find_ops(gmod, lambda o: o.name in THREAD_FIELDS or o.name in (
                "gpu.barrier", "gpu.lane_id", "gpu.subgroup_size", "gpu.global_id")):
            with ir.InsertionPoint(op), op.location:
                if op.name == "gpu.barrier":
                    if sites is not None:
                        from .checks import barrier_site
                        declare(PREFIX + "barrier_at", [], [ir.Type.parse("!llvm.ptr")])
                        func.CallOp([], PREFIX + "barrier_at", [barrier_site(sites, op)])
                    else:
                        declare(PREFIX + "barrier", [])
                        func.CallOp([], PREFIX + "barrier", [])
                    op.erase()
                    continue
                if op.name == "gpu.lane_id":   # linear thread id % 32
                    tx, ty, tz = (query("gpu.thread_id", d) for d in "xyz")
                    bx, by = (query("gpu.block_dim", d) for d in "xy")
                    inner = arith.AddIOp(ty, arith.MulIOp(by, tz).result).result
                    linear = arith.AddIOp(tx, arith.MulIOp(bx, inner).result).result
                    value = arith.RemUIOp(linear, arith.ConstantOp(index, SUBGROUP_SIZE)).result
                elif op.name == "gpu.subgroup_size":
                    value = arith.ConstantOp(index, SUBGROUP_SIZE).result
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


def _promote_printf(op: ir.Operation) -> None:
    """Step 2: ``gpu.printf``'s integers narrower than 32 bits to i32 (sign-extended; i1
    zero-extended) and floats narrower than 64 bits to f64, as C's default argument
    promotions: the argument buffer then holds 4- or 8-byte items the format decides."""
    i32, f64 = ir.IntegerType.get_signless(32), ir.F64Type.get()
    for i, v in enumerate(list(op.operands)):
        ty = v.type
        if isinstance(ty, ir.IntegerType) and ir.IntegerType(ty).width < 32:
            cls = arith.ExtUIOp if ir.IntegerType(ty).width == 1 else arith.ExtSIOp
            op.operands[i] = cls(i32, v).result
        elif isinstance(ty, ir.FloatType) and ir.FloatType(ty).width < 64:
            op.operands[i] = arith.ExtFOp(f64, v).result
        elif isinstance(ty, ir.IndexType):
            op.operands[i] = arith.IndexCastOp(ir.IntegerType.get_signless(64), v).result


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
#: libdevice functions without a C library namesake, defined by the image (:func:`_libdevice_ir`,
#: as ``__wavert_cpu_<name>``): LLVM IR bodies of their declared signature. rsqrt is 1/sqrt
#: (two correctly rounded steps: within CUDA's 2-ulp bound for rsqrtf), powi by repeated
#: squaring (as libdevice multiplies; a negative power the reciprocal; LLVM's own powi would
#: be a libgcc call), the f64 class tests fcmp's.
_LIBDEVICE_OWN = {
    "rsqrtf": ("float", "float %x", "  %s = call float @llvm.sqrt.f32(float %x)\n"
               "  %r = fdiv float 1.0, %s\n  ret float %r"),
    "rsqrt": ("double", "double %x", "  %s = call double @llvm.sqrt.f64(double %x)\n"
              "  %r = fdiv double 1.0, %s\n  ret double %r"),
    "powif": ("float", "float %x, i32 %n",
              "entry:\n  %neg = icmp slt i32 %n, 0\n"
              "  %m0 = call i32 @llvm.abs.i32(i32 %n, i1 false)\n  br label %loop\n"
              "loop:\n  %m = phi i32 [%m0, %entry], [%m2, %loop]\n"
              "  %b = phi float [%x, %entry], [%b2, %loop]\n"
              "  %r = phi float [1.0, %entry], [%r2, %loop]\n"
              "  %odd = trunc i32 %m to i1\n  %rb = fmul float %r, %b\n"
              "  %r2 = select i1 %odd, float %rb, float %r\n  %b2 = fmul float %b, %b\n"
              "  %m2 = lshr i32 %m, 1\n  %more = icmp ne i32 %m2, 0\n"
              "  br i1 %more, label %loop, label %done\n"
              "done:\n  %inv = fdiv float 1.0, %r2\n"
              "  %v = select i1 %neg, float %inv, float %r2\n  ret float %v"),
    "powi": ("double", "double %x, i32 %n",
              "entry:\n  %neg = icmp slt i32 %n, 0\n"
              "  %m0 = call i32 @llvm.abs.i32(i32 %n, i1 false)\n  br label %loop\n"
              "loop:\n  %m = phi i32 [%m0, %entry], [%m2, %loop]\n"
              "  %b = phi double [%x, %entry], [%b2, %loop]\n"
              "  %r = phi double [1.0, %entry], [%r2, %loop]\n"
              "  %odd = trunc i32 %m to i1\n  %rb = fmul double %r, %b\n"
              "  %r2 = select i1 %odd, double %rb, double %r\n  %b2 = fmul double %b, %b\n"
              "  %m2 = lshr i32 %m, 1\n  %more = icmp ne i32 %m2, 0\n"
              "  br i1 %more, label %loop, label %done\n"
              "done:\n  %inv = fdiv double 1.0, %r2\n"
              "  %v = select i1 %neg, double %inv, double %r2\n  ret double %v"),
    "isnand": ("i32", "double %x", "  %c = fcmp uno double %x, %x\n"
               "  %r = zext i1 %c to i32\n  ret i32 %r"),
    "isinfd": ("i32", "double %x", "  %a = call double @llvm.fabs.f64(double %x)\n"
               "  %c = fcmp oeq double %a, 0x7FF0000000000000\n"
               "  %r = zext i1 %c to i32\n  ret i32 %r"),
    "isfinited": ("i32", "double %x", "  %a = call double @llvm.fabs.f64(double %x)\n"
                  "  %c = fcmp olt double %a, 0x7FF0000000000000\n"
                  "  %r = zext i1 %c to i32\n  ret i32 %r")}


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
    out = re.sub(r"@vprintf\b", f"@{PREFIX}vprintf", out)   # gpu.printf's lowering
    out = re.sub(r"@__assertfail\b", f"@{PREFIX}assertfail", out)   # cf.assert's
    out = _probe_stack(out)
    missing = []

    def libm(match: re.Match) -> str:
        symbol = match.group(1)
        if symbol in _LIBDEVICE_OWN:
            return f"@{PREFIX}{symbol}"
        if symbol.startswith("fast_"):    # fast-math variants: the C library's accurate one
            symbol = symbol[len("fast_"):]
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


def _probe_stack(llvm_ir: str) -> str:
    """Every defined function probes each page of a large frame (LLVM's inline stack
    probes): a fiber that overflows its stack touches the guard page below it instead of
    jumping over it into the neighbouring fiber's stack."""
    return re.sub(r"^(define [^\n]*?)\s*\{$", r'\1 "probe-stack"="inline-asm" {', llvm_ir,
                  flags=re.M)


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


#: Host features the kernels are compiled without: their f32 -> bf16 instructions
#: (VCVTNEPS2BF16 of AVX512-BF16 and AVX-NE-CONVERT) flush denormal inputs and results to zero
#: (Intel SDM), where MLIR's ``arith.truncf`` rounds to nearest even, denormals kept.
#: Without them LLVM calls :data:`BF16_LIBCALLS`, which the image defines exactly.
EXACT_FEATURES_OFF = ("avx512bf16", "avxneconvert")
#: LLVM's libcalls for f32/f64 -> bf16 and f64 -> f16, defined in the image (:func:`_bf16_ir`:
#: the C compiler's runtime may lack them, libgcc before GCC 13 does).
BF16_LIBCALLS = ("__truncsfbf2", "__truncdfbf2", "__truncdfhf2")


def kernel_features(features: str) -> str:
    """The host's LLVM feature string without :data:`EXACT_FEATURES_OFF`."""
    out = []
    for feature in features.split(","):
        if feature[1:] in EXACT_FEATURES_OFF:
            feature = "-" + feature[1:]
        out.append(feature)
    return ",".join(out)


def _bf16_ir() -> list[str]:
    """:data:`BF16_LIBCALLS` in LLVM IR. f32 -> bf16: round to nearest even on the bits (a
    NaN stays a quiet NaN of the same sign). f64 -> bf16 or f16 rounds once: to f32 with
    round to odd (toward zero, then the last bit set when inexact; f32's 24 bits leave the
    narrower type's rounding unchanged), then from f32."""
    def from_f64(name: str, kind: str, last: str) -> str:
        return (f"define hidden {kind} @{name}(double %d) {{\n"
                "  %r = fptrunc double %d to float\n  %back = fpext float %r to double\n"
                "  %rb = bitcast float %r to i32\n  %ad = call double @llvm.fabs.f64(double %d)\n"
                "  %ab = call double @llvm.fabs.f64(double %back)\n"
                "  %away = fcmp ogt double %ab, %ad\n  %dec = sub i32 %rb, 1\n"
                "  %zero = select i1 %away, i32 %dec, i32 %rb\n"
                "  %inexact = fcmp one double %back, %d\n  %odd = or i32 %zero, 1\n"
                "  %ro = select i1 %inexact, i32 %odd, i32 %zero\n  %f = bitcast i32 %ro to float\n"
                f"{last}  ret {kind} %h\n}}")
    return [
        "define hidden bfloat @__truncsfbf2(float %x) {\n"
        "  %b = bitcast float %x to i32\n  %abs = and i32 %b, 2147483647\n"
        "  %nan = icmp ugt i32 %abs, 2139095040\n  %s = lshr i32 %b, 16\n"
        "  %lsb = and i32 %s, 1\n  %bias = add i32 %lsb, 32767\n  %r = add i32 %b, %bias\n"
        "  %h = lshr i32 %r, 16\n  %q = or i32 %s, 64\n  %v = select i1 %nan, i32 %q, i32 %h\n"
        "  %t = trunc i32 %v to i16\n  %f = bitcast i16 %t to bfloat\n  ret bfloat %f\n}",
        "declare double @llvm.fabs.f64(double)",
        from_f64("__truncdfbf2", "bfloat", "  %h = call bfloat @__truncsfbf2(float %f)\n"),
        from_f64("__truncdfhf2", "half", "  %h = fptrunc float %f to half\n")]


def _libdevice_ir() -> list[str]:
    """:data:`_LIBDEVICE_OWN` as LLVM IR functions of the image (the intrinsics they call
    declared once; a declaration no body uses is dropped by LLVM)."""
    lines = ["declare float @llvm.sqrt.f32(float)", "declare double @llvm.sqrt.f64(double)",
             "declare i32 @llvm.abs.i32(i32, i1)"]
    for name, (result, params, body) in _LIBDEVICE_OWN.items():
        lines.append(f"define linkonce_odr hidden {result} @{PREFIX}{name}({params}) {{\n"
                     f"{body}\n}}")
    return lines


def abi_ir(kernels: dict[str, tuple[list[str], str, list[int]]], checks: bool = False) -> str:
    """The image's ABI in LLVM IR: the thread-local record pointer, the query and barrier
    functions, and the per-kernel entries (``kernels``: name -> (LLVM argument types, entry
    kind: ``"block"``, ``"loop"`` or ``"fibers"``, each argument's ABI size in bytes:
    :func:`_entry_ir`)); with ``checks`` the checked mode's functions and the
    ``__wavert_cpu_checked`` marker."""
    lines = [f"@{PREFIX}abi = constant i32 {CPU_ABI}",
             f"@{PREFIX}current = internal thread_local global ptr null"]
    if checks:
        lines += _checks_ir()
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
        + _record_fn(BARRIER_FIELD) + "  call void %f(ptr %t)\n"
        # Other fibers of the block ran meanwhile and set the pointer to their records.
        + _RESTORE + "  ret void\n}")
    lines += _exchange_ir()
    lines.append(
        f"define linkonce_odr hidden void @{PREFIX}assertfail(ptr %msg, ptr %file, i32 %line, "
        "ptr %func, i64 %size) noinline noreturn {\n" + _record_fn(ASSERT_FIELD) +
        "  call void %f(ptr %t, ptr %msg, ptr %file, i32 %line, ptr %func)\n  unreachable\n}")
    lines.append(
        f"define linkonce_odr hidden i32 @{PREFIX}vprintf(ptr %fmt, ptr %args) {{\n" +
        _record_fn(PRINT_FIELD) + "  call void %f(ptr %fmt, ptr %args)\n  ret i32 0\n}")
    lines += _bf16_ir()
    lines += _libdevice_ir()
    for name, (types, kind, sizes) in kernels.items():
        lines += _entry_ir(name, types, kind, sizes)
    return "\n\n".join(lines) + "\n"


#: After a call that may switch fibers: the record pointer back to this thread's.
_RESTORE = f"  store ptr %t, ptr @{PREFIX}current\n"


def _record_fn(field: int) -> str:
    """IR loading the running thread's record (%t) and its function of word ``field`` (%f)."""
    return (f"  %t = load ptr, ptr @{PREFIX}current\n"
            f"  %p = getelementptr inbounds i64, ptr %t, i64 {field}\n"
            "  %f = load ptr, ptr %p\n")


def _checks_ir() -> list[str]:
    """The checked mode's ABI: the marker, fault, access and barrier_at."""
    values = ", ".join(f"i64 %v{k}" for k in range(8))
    idx = ", ".join(f"i64 %v{k}" for k in range(4))
    return [
        f"@{PREFIX}checked = constant i32 1",
        f"define linkonce_odr hidden void @{CIFACE}{PREFIX}fault(ptr %what, ptr %where, "
        f"i64 %rank, {values}) noinline {{\n" + _record_fn(FAULT_FIELD) +
        f"  call void %f(ptr %t, ptr %what, ptr %where, i64 %rank, {values})\n"
        "  unreachable\n}",
        f"define linkonce_odr hidden void @{CIFACE}{PREFIX}access(i64 %addr, i64 %write, "
        f"ptr %what, ptr %where, i64 %rank, {idx}) noinline {{\n" + _record_fn(ACCESS_FIELD) +
        "  %a = inttoptr i64 %addr to ptr\n"
        f"  call void %f(ptr %t, ptr %a, i64 %write, ptr %what, ptr %where, i64 %rank, "
        f"{idx})\n  ret void\n}}",
        f"define linkonce_odr hidden void @{CIFACE}{PREFIX}barrier_at(ptr %site) noinline {{\n"
        f"  %t = load ptr, ptr @{PREFIX}current\n"
        f"  %s = getelementptr inbounds i64, ptr %t, i64 {SITE_FIELD}\n"
        "  store ptr %site, ptr %s\n"
        f"  %p = getelementptr inbounds i64, ptr %t, i64 {BARRIER_FIELD}\n"
        "  %f = load ptr, ptr %p\n  call void %f(ptr %t)\n" + _RESTORE + "  ret void\n}"]


def _exchange_ir() -> list[str]:
    """publish/read of a warp (scope 0) or the block (1), and a warp's exchange."""
    lines = []
    for scope, code in (("warp", 0), ("block", 1)):
        lines.append(
            f"define linkonce_odr hidden void @{CIFACE}{PREFIX}publish_{scope}(i64 %v) "
            "noinline {\n" + _record_fn(PUBLISH_FIELD) +
            f"  call void %f(ptr %t, i64 {code}, i64 %v)\n" + _RESTORE + "  ret void\n}")
        lines.append(
            f"define linkonce_odr hidden i64 @{CIFACE}{PREFIX}read_{scope}(i64 %i) {{\n" +
            _record_fn(READ_FIELD) + f"  %r = call i64 %f(ptr %t, i64 {code}, i64 %i)\n"
            "  ret i64 %r\n}")
    lines.append(
        f"define linkonce_odr hidden i64 @{CIFACE}{PREFIX}exchange_warp(i64 %v, i64 %i) "
        "noinline {\n" + _record_fn(PUBLISH_FIELD) +
        "  call void %f(ptr %t, i64 0, i64 %v)\n" + _RESTORE +
        f"  %rp = getelementptr inbounds i64, ptr %t, i64 {READ_FIELD}\n"
        "  %rf = load ptr, ptr %rp\n  %r = call i64 %rf(ptr %t, i64 0, i64 %i)\n"
        "  ret i64 %r\n}")
    return lines


def _entry_ir(name: str, types: list[str], kind: str, sizes: list[int]) -> list[str]:
    """Kernel ``name``'s image entries: ``__wavert_cpu_thread_<name>`` (one GPU thread: the
    arguments loaded from the launch's parameter array), and ``__wavert_cpu_block_<name>``
    (one whole block) for ``kind`` "block" (the kernel runs its block's threads itself:
    :mod:`pywave.kernels.cpu_split`) or "loop" (a loop over the block's threads, x fastest,
    writing each thread's id into the record); "fibers": no block entry. And
    ``__wavert_cpu_args_<name>``, ``[n + 1 x i64]``: the argument count n, then each
    argument's ABI size in bytes (``sizes``): what libwavert copies out of the launch's
    parameter array when the launch is queued on a stream (the host code's argument values
    live on its stack, which a GPU driver copies at the launch too)."""
    loads = "\n".join(f"  %q{i} = getelementptr inbounds ptr, ptr %params, i64 {i}\n"
                      f"  %p{i} = load ptr, ptr %q{i}\n  %a{i} = load {ty}, ptr %p{i}"
                      for i, ty in enumerate(types))
    args = ", ".join(f"{ty} %a{i}" for i, ty in enumerate(types))
    call = f"  call void @{name}({args})"
    start = f"  store ptr %t, ptr @{PREFIX}current\n" + loads + "\n"
    table = ", ".join(f"i64 {n}" for n in [len(sizes), *sizes])
    lines = [f"@{PREFIX}args_{name} = constant [{len(sizes) + 1} x i64] [{table}]",
             f"declare void @{name}({', '.join(types)})",
             f"define void @{PREFIX}thread_{name}(ptr %params, ptr %t) {{\n" + start +
             f"{call}\n  ret void\n}}"]
    if kind == "block":
        lines.append(f"define void @{PREFIX}block_{name}(ptr %params, ptr %t) {{\n" + start +
                     f"{call}\n  ret void\n}}")
    elif kind == "loop":
        dims = "\n".join(f"  %d{k}p = getelementptr inbounds i64, ptr %t, i64 {6 + k}\n"
                         f"  %d{k} = load i64, ptr %d{k}p\n"
                         f"  %i{k}p = getelementptr inbounds i64, ptr %t, i64 {k}"
                         for k in range(3))
        lines.append(
            f"define void @{PREFIX}block_{name}(ptr %params, ptr %t) {{\nentry:\n" + start +
            dims + "\n  br label %z\n"
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
    return lines


def compile_object(llvm_ir: str, kernels: dict[str, str], *, opt_level: int = 3,
                   what: str = "the kernels", checks: bool = False) -> bytes:
    """Step 4: the kernels' IR with the ABI (``kernels``: name -> entry kind,
    :func:`_entry_ir`), optimised for this CPU, as an ELF object."""
    from ..llvm import native_target
    llvm = native_target()
    cpu, features = host_cpu()
    features = kernel_features(features)
    target = llvm.Target.from_triple(llvm.get_process_triple())
    tm = target.create_target_machine(cpu=cpu, features=features, opt=opt_level, reloc="pic",
                                      codemodel="default")
    try:
        mod = llvm.parse_assembly(llvm_ir)
        target_data = tm.target_data
        entries = {}
        for name, kind in kernels.items():
            arguments = list(mod.get_function(name).arguments)
            entries[name] = ([str(arg.type) for arg in arguments], kind,
                             [target_data.get_abi_size(arg.type) for arg in arguments])
        mod.link_in(llvm.parse_assembly(abi_ir(entries, checks)))
        for fn in mod.functions:    # only the kernel entries are exported
            if not fn.is_declaration and fn.name not in BF16_LIBCALLS and \
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
