"""Stage host: host code lowered to LLVM, every launch rewritten into libwavert calls.

Stage ``host`` (:mod:`pywave.pipeline`). Lower host code to the LLVM dialect
(``gpu-to-llvm``, ``convert-to-llvm``), rewrite every ``gpu.launch_func`` into a call of
``wavert_jit_launch`` (``wavert_jit_launch_cluster`` for ``clusters in``) that passes the
parameters its kernel kept (:mod:`pywave.kernels.unused_params`), follow each launch
and each call of a runtime function by an early return on failure (``wavert_jit_failed``),
embed each ``gpu.binary`` as one internal constant global, add a packed entry per host
function and the release entry, and translate to LLVM IR.

The launch rewrite is :mod:`pywave.host.launch_rewrite`; the entries the host functions get
(the packed entry, MLIR ExecutionEngine's wrappers, ``pywave run``'s entry) are
:mod:`pywave.host.entries`. (The signatures were read earlier, by
:mod:`pywave.host.signature`.)
"""

from __future__ import annotations

from mlir import ir
from mlir.dialects import gpu, llvm

from ..errors import CompileError
from ..frontend import cpu_lowering, validate
from ..mlirutil import diagnostic_error, file_location, find_ops, run_pipeline, sym_name
from .async_inline import ASYNC_RUNTIME_PIPELINE, inline_async_execute, uses_async_groups
from .entries import add_engine_entries, add_packed_entries, add_packed_interface, add_run_entry
from .launch_rewrite import WAVE_FUNCTIONS, WAVE_HELPER_TYPES, WAVE_LLVM_TYPES, LaunchRewriter
from ..program import Binary, HostModule, HostSignature

def host_pipeline(kernel_bare_ptr: bool = False, late: "list[str] | tuple[str, ...]" = ()
                  ) -> str:
    """Host lowering to the LLVM dialect; gpu.launch_func survives with LLVM-typed operands
    (bare pointers for memrefs with ``kernel_bare_ptr``, as the kernels then expect).
    ``late``: pipeline elements run after ``convert-to-llvm``, each followed by another
    ``convert-to-llvm`` for the ops they produce
    (:data:`pywave.frontend.cpu_lowering.LATE_STEPS`)."""
    gpu_to_llvm = "gpu-to-llvm{use-bare-pointers-for-kernels=1}" if kernel_bare_ptr \
        else "gpu-to-llvm"
    after = "".join(f"{step}, convert-to-llvm, " for step in late)
    return (f"builtin.module({gpu_to_llvm}, convert-to-llvm, {after}"
            "reconcile-unrealized-casts, canonicalize)")


#: The host pipeline of the default options.
HOST_PIPELINE = host_pipeline()

#: GPU ops that gpu-to-llvm lowers only in their ``async`` form (except a host-shared
#: gpu.alloc, which it lowers only in the synchronous form).
_STREAM_OPS = ("gpu.alloc", "gpu.dealloc", "gpu.memcpy", "gpu.memset")


def lower(module: ir.Module, binaries: list[Binary], functions: list[HostSignature],
          *, text: str | None = None, kernel_bare_ptr: bool = False,
          run_entry: str | None = None, packed_interface: bool = False) -> HostModule:
    """Lower host code and produce LLVM IR text (the module is consumed). ``run_entry``:
    also emit :data:`pywave.program.RUN_ENTRY` calling that function, and give synchronous
    launches upstream's meaning (see :class:`LaunchRewriter`).

    ``packed_interface`` (:class:`pywave.entry.engine.ExecutionEngine`): host code as MLIR's own
    ExecutionEngine runs it. Launches and ``gpu.binary`` ops are left to MLIR's translation
    (``#gpu.select_object``: ``mgpuModuleLoad`` in a global constructor, ``mgpuLaunchKernel``
    and a stream synchronisation per synchronous launch), whose ``mgpu*`` calls libwavert
    implements; every externally visible host function gets the packed wrapper
    ``_mlir_<f>`` (:func:`add_packed_interface`), and the global constructors and destructors
    are called by :data:`pywave.program.ENGINE_INIT` and :data:`ENGINE_FINI`
    (:func:`add_engine_entries`: an object file loaded into MCJIT runs none)."""
    if uses_async_groups(module):
        # Groups need a real runtime: MLIR's async lowering (coroutines over libwavert_runner's
        # mlirAsyncRuntime* functions) instead of running the bodies in place.
        run_pipeline(module, ASYNC_RUNTIME_PIPELINE, "lowering async to the async runtime", text)
    else:
        inline_async_execute(module)
    _join_async_dependencies(module)
    _synchronous_ops_on_streams(module)
    validate.host_spaces(module)
    _check_wave_helpers(module)
    present = cpu_lowering.host_ops(module)
    before = cpu_lowering.steps(cpu_lowering.HOST_STEPS, present)
    if before:
        run_pipeline(module, f"builtin.module({', '.join(before)})",
                     "lowering host math, complex and small-float ops", text)
    run_pipeline(module, host_pipeline(kernel_bare_ptr,
                                       cpu_lowering.steps(cpu_lowering.LATE_STEPS, present)),
                 "lowering host code to LLVM", text)
    _check_wave_declarations(module)
    if packed_interface:
        add_packed_interface(module)
    else:
        LaunchRewriter(module, binaries, synchronous=run_entry is not None).run()
        add_packed_entries(module, functions)
    run_result = add_run_entry(module, run_entry) if run_entry is not None else None
    if not packed_interface:
        for op in list(module.body.operations):
            if op.operation.name == "gpu.binary":
                op.operation.erase()
        if "gpu.container_module" in module.operation.attributes:
            del module.operation.attributes["gpu.container_module"]
    kept = _TRANSLATED_GPU_OPS if packed_interface else ()
    leftovers: list[str] = []

    def find_gpu_ops(op: ir.Operation) -> ir.WalkResult:
        if op.name.startswith("gpu.") and op.name not in kept:
            leftovers.append(op.name)
        return ir.WalkResult.ADVANCE

    module.operation.walk(find_gpu_ops)
    if leftovers:
        raise CompileError("host code still holds GPU ops after lowering: "
                           + ", ".join(sorted(set(leftovers))))
    _check_all_llvm(module, kept)
    try:
        module.operation.verify()
        ir_text = llvm.translate_module_to_llvmir(module.operation)
    except ir.MLIRError as exc:
        raise diagnostic_error("translating host code to LLVM IR", exc, None) from None
    if packed_interface:
        ir_text = add_engine_entries(ir_text)
    return HostModule(ir_text, tuple(functions), run_result)


def _check_wave_helpers(module: ir.Module) -> None:
    """CompileError for a declaration of one of Wave's helpers that does not have Wave's type
    and ``llvm.emit_c_interface`` (libwavert implements exactly that ABI), or a module that
    defines one itself."""
    for op, name, ftype in _declarations(module, "func.func", WAVE_HELPER_TYPES,
                                         "one of Wave's helpers, which"):
        c_interface = "llvm.emit_c_interface" in op.attributes
        if ftype != WAVE_HELPER_TYPES[name] or not c_interface:
            missing = "" if c_interface else " without llvm.emit_c_interface"
            raise CompileError(
                f"@{name} is declared as {ftype}{missing}; Wave's helper is func.func private "
                f"@{name}{WAVE_HELPER_TYPES[name]} attributes {{llvm.emit_c_interface}}")


def _check_wave_declarations(module: ir.Module) -> None:
    """CompileError for a lowered declaration of one of :data:`WAVE_FUNCTIONS` whose LLVM type
    is not the one libwavert implements, or a module that defines one."""
    for _, name, ftype in _declarations(module, "llvm.func", WAVE_FUNCTIONS,
                                        "a function of Wave's runtime that"):
        if ftype != WAVE_LLVM_TYPES[name]:
            raise CompileError(f"@{name} is declared as {ftype}; Wave's runtime function has "
                               f"the type {WAVE_LLVM_TYPES[name]}")


def _declarations(module: ir.Module, op_name: str, names, what: str):
    """(op, name, function type text) of each top-level ``op_name`` declaring one of
    ``names``; CompileError when the module defines one (``what``: how the message names
    it, ending before "pywave's runtime provides")."""
    for op in module.body.operations:
        op = op.operation
        if op.name != op_name or sym_name(op) not in names:
            continue
        name = sym_name(op)
        if op.regions[0].blocks:
            raise CompileError(f"the module defines @{name}, {what} pywave's runtime "
                               "provides; declare it without a body")
        yield op, name, str(ir.TypeAttr(op.attributes["function_type"]).value)


#: GPU ops MLIR's translation to LLVM IR lowers itself (the ExecutionEngine's host code).
_TRANSLATED_GPU_OPS = ("gpu.binary", "gpu.launch_func")


def _check_all_llvm(module: ir.Module, kept: tuple[str, ...] = ()) -> None:
    """CompileError naming the first op the host lowering left outside the LLVM dialect
    (convert-to-llvm is a partial conversion: an op it cannot lower stays, wrapped in
    ``builtin.unrealized_conversion_cast``s). Translating such a module fails, and MLIR 22's
    Python binding then dereferences the missing result (SIGSEGV)."""
    left: list[ir.Operation] = []

    def visit(op: ir.Operation) -> ir.WalkResult:
        if op.name != "builtin.module" and not op.name.startswith("llvm.") and \
                op.name not in kept:
            left.append(op)
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    if not left:
        return
    op = next((o for o in left if o.name != "builtin.unrealized_conversion_cast"), left[0])
    loc = file_location(op.location)
    where = f" at line {loc[0]}, column {loc[1]}" if loc else ""
    if op.name.startswith("transform."):
        raise CompileError(
            f"{op.name}{where} belongs to a transform schedule, which is no program: apply it "
            "and erase it with your passes, e.g. --pass-pipeline='builtin.module("
            "transform-interpreter, pywave-erase-transform-schedule)' (passes= of "
            "pywave.compile), or erase it alone with pywave-erase-transform-schedule",
            line=loc[0] if loc else None, column=loc[1] if loc else None)
    types = ", ".join(str(v.type) for v in op.operands)
    raise CompileError(
        f"{op.name}{where} (operands: {types or 'none'}) was not lowered to LLVM by the host "
        "stage (gpu-to-llvm, convert-to-llvm); rewrite it with ops that lower, or look at "
        "the IR of each stage in a dump (dump_dir= or $PYWAVE_DUMP_DIR)",
        line=loc[0] if loc else None, column=loc[1] if loc else None)


def _join_async_dependencies(module: ir.Module) -> None:
    """``gpu.launch_func async [%a, %b]`` -> ``%j = gpu.wait async [%a, %b]`` and a launch
    depending on ``%j`` alone: gpu-to-llvm lowers launches with one dependency only."""
    launches = find_ops(module.operation, lambda op: op.name == "gpu.launch_func"
                        and len(op.opview.asyncDependencies) > 1)
    for op in launches:
        deps = list(op.opview.asyncDependencies)
        with ir.InsertionPoint(op), op.location:
            joined = gpu.WaitOp(gpu.AsyncTokenType.get(), deps).result
        attrs = {name: op.attributes[name] for name in
                 [op.attributes[i].name for i in range(len(op.attributes))]}
        sizes = list(ir.DenseI32ArrayAttr(attrs["operandSegmentSizes"]))
        sizes[0] = 1
        attrs["operandSegmentSizes"] = ir.DenseI32ArrayAttr.get(sizes)
        with ir.InsertionPoint(op), op.location:
            new = ir.Operation.create("gpu.launch_func", [r.type for r in op.results],
                                      [joined] + list(op.operands)[len(deps):], attrs)
        for old_result, new_result in zip(op.results, new.results):
            old_result.replace_all_uses_with(new_result)
        op.erase()


def _synchronous_ops_on_streams(module: ir.Module) -> None:
    """Give each synchronous ``gpu.alloc`` (not host-shared), ``gpu.dealloc``, ``gpu.memcpy``
    and ``gpu.memset`` in host code a stream of its own: ``%t = gpu.wait async``, the op made
    ``async [%t]``, then a blocking ``gpu.wait`` on its token. The op then has upstream's
    meaning (done when it returns), and gpu-to-llvm lowers it to the mgpu* calls (a stream
    made inside a call first waits for the call's stream, so earlier launches are seen)."""
    ops: list[ir.Operation] = []

    def collect(op: ir.Operation) -> ir.WalkResult:
        if op.name == "gpu.module":
            return ir.WalkResult.SKIP
        if op.name in _STREAM_OPS and not len(op.opview.asyncDependencies) and \
                not any(isinstance(r.type, gpu.AsyncTokenType) for r in op.results) and \
                not (op.name == "gpu.alloc" and "hostShared" in op.attributes):
            ops.append(op)
        return ir.WalkResult.ADVANCE

    module.operation.walk(collect)
    with module.context:
        token_type = gpu.AsyncTokenType.get()
        for op in ops:
            attrs = {op.attributes[i].name: op.attributes[i].attr
                     for i in range(len(op.attributes))}
            if "operandSegmentSizes" in attrs:
                sizes = list(ir.DenseI32ArrayAttr(attrs["operandSegmentSizes"]))
                sizes[0] += 1
                attrs["operandSegmentSizes"] = ir.DenseI32ArrayAttr.get(sizes)
            with ir.InsertionPoint(op), op.location:
                start = gpu.WaitOp(token_type, []).result
                new = ir.Operation.create(op.name, [r.type for r in op.results] + [token_type],
                                          [start] + list(op.operands), attrs)
                gpu.WaitOp(None, [new.results[len(op.results)]])
            for old, replacement in zip(op.results, new.results):
                old.replace_all_uses_with(replacement)
            op.erase()
