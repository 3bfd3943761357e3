"""Stage host: host code lowered to LLVM, every launch rewritten into libwavert calls.

Stage ``host`` (:mod:`pywave.pipeline`). Lower host code to the LLVM dialect
(``gpu-to-llvm``, ``convert-to-llvm``), rewrite every ``gpu.launch_func`` into a call of
``wavert_jit_launch`` (``wavert_jit_launch_cluster`` for ``clusters in``) that passes the
parameters its kernel kept (:mod:`pywave.kernels.unused_params`), follow each launch
and each call of a runtime function by an early return on failure (``wavert_jit_failed``),
embed each ``gpu.binary`` as one internal constant global, add a packed entry per host
function and the release entry, and translate to LLVM IR.

One ABI: the ``mgpu*`` calls that MLIR's lowering emits (streams, events, memory, host
registration, TMA descriptors, cuSPARSE) keep their upstream names; libwavert implements each
once (``wavert_mgpu.h``), so every call of a function named ``mgpu*``
(:func:`is_runtime_call`) gets the check and no table maps names. Calls of the module's own
functions that make such a call, directly or not, get it too: their result is poison when
they returned early. Coroutines (``async.execute`` bodies, run by the async runtime's worker
threads, where no libwavert call is in progress) and what they call may make no runtime call
(CompileError). (The signatures were read earlier, by :mod:`pywave.host.signature`.)

Host code in Wave's convention calls Wave's runtime: its helpers (through their
``_mlir_ciface_`` C interface) and, once Wave's own pass lowered its launches,
``wave_load_kernel`` / ``wave_launch_kernel``. Their declarations are checked against the
ABI libwavert implements (:data:`WAVE_HELPER_TYPES`, :data:`WAVE_LLVM_TYPES`), the calls
renamed to libwavert's (:data:`WAVE_FUNCTIONS`) and each followed by the same early return,
as is each call of a function that makes such a call (the helpers' C-interface wrappers).
The globals ``wave_load_kernel`` fills are released with the kernel slots. In the packed
entry of such a function, slot 0 is the stream and each object one slot (the address of
its ``wavert_object``).

The packed entry of host function ``f`` is ``void _pywave_packed_f(uint64_t *slots)``: the
flattened LLVM arguments of ``f`` (a rank-r memref is 3 + 2r words: allocated, aligned,
offset, sizes, strides; a scalar is one word holding its value in the low bytes) in order,
``HostSignature.words`` slots; then ``HostSignature.result_words`` result slots that the
entry writes when ``f`` returns: each result in order, in the same layout (a scalar's value
in the low bytes of its word: the caller zeroes the result slots first; an ``i1`` is one
byte, 0 or 1; a memref's descriptor as its 3 + 2r words). When the call fails (an error
recorded by a runtime call, reported by ``wavert_call_end``), the result slots hold no
meaning and the caller must not read them.

Each launched kernel has a slot, an internal ``wavert_kernel*`` global that
``wavert_jit_launch`` fills on first use. ``void _pywave_release_kernels(void)`` releases
every slot's kernel and clears the slot; the module's owner calls it once no call runs
(``CompiledModule.close``, an export's ``<name>_unload``).
"""

from __future__ import annotations

import re

import numpy as np
from mlir import ir
from mlir.dialects import gpu, llvm

from .. import image_params, sparse
from ..errors import CompileError
from ..frontend import cpu_lowering, validate
from ..mlirutil import diagnostic_error, file_location, find_ops, run_pipeline, sym_name
from .async_inline import ASYNC_RUNTIME_PIPELINE, inline_async_execute, uses_async_groups
from ..program import (ENGINE_FINI, ENGINE_INIT, PACKED_PREFIX, RELEASE_KERNELS, RUN_ENTRY,
                       Binary, HostModule, HostSignature)

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

#: Prefix of MLIR's runtime functions (``mgpu*``), each declared once in libwavert's
#: ``wavert_mgpu.h`` and called by generated host code under that name.
MGPU_PREFIX = "mgpu"

#: Wave's runtime functions, as host code calls them after lowering -> libwavert's
#: implementations (wavert_jit.h). The helpers are declared with ``llvm.emit_c_interface``, so
#: the calls go to their ``_mlir_ciface_`` symbols; the launch pair is what Wave's own
#: gpu-to-gpu-runtime pass emits.
WAVE_FUNCTIONS = {
    "_mlir_ciface_wave_get_buffer": "wavert_jit_wave_get_buffer",
    "_mlir_ciface_wave_get_dim": "wavert_jit_wave_get_dim",
    "_mlir_ciface_wave_get_int64": "wavert_jit_wave_get_int64",
    "_mlir_ciface_wave_get_float64": "wavert_jit_wave_get_float64",
    "wave_load_kernel": "wavert_jit_wave_load_kernel",
    "wave_launch_kernel": "wavert_jit_wave_launch_kernel",
}

#: The LLVM type each of :data:`WAVE_FUNCTIONS` must be declared with (its C ABI in libwavert).
WAVE_LLVM_TYPES = {
    "_mlir_ciface_wave_get_buffer": "!llvm.func<void (ptr, ptr)>",
    "_mlir_ciface_wave_get_dim": "!llvm.func<i64 (ptr, i32)>",
    "_mlir_ciface_wave_get_int64": "!llvm.func<i64 (ptr)>",
    "_mlir_ciface_wave_get_float64": "!llvm.func<f64 (ptr)>",
    "wave_load_kernel": "!llvm.func<ptr (ptr, ptr, ptr, i64, ptr)>",
    "wave_launch_kernel": "!llvm.func<void (ptr, ptr, i32, " + "i64, " * 9 + "ptr, i32)>",
}

#: Wave's helpers as host code declares them before lowering (``func.func`` declarations with
#: ``llvm.emit_c_interface``).
WAVE_HELPER_TYPES = {
    "wave_get_buffer": "(!llvm.ptr) -> memref<?xi8>",
    "wave_get_dim": "(!llvm.ptr, i32) -> i64",
    "wave_get_int64": "(!llvm.ptr) -> i64",
    "wave_get_float64": "(!llvm.ptr) -> f64",
}


def is_runtime_call(callee: str) -> bool:
    """Whether a call of ``callee`` in lowered host code calls libwavert's runtime, which
    records a failure for ``wavert_jit_failed``: one of MLIR's ``mgpu*`` functions
    (``wavert_mgpu.h``), of MLIR's sparse runtime (its file reader and tensor storage,
    ``wavert_sparse_file.h`` and ``wavert_sparse_storage.h``:
    :data:`pywave.sparse.RUNTIME_FUNCTIONS`) or of Wave's (:data:`WAVE_FUNCTIONS`, before
    their renaming)."""
    return (callee.startswith(MGPU_PREFIX) or callee in WAVE_FUNCTIONS
            or callee in sparse.RUNTIME_FUNCTIONS)


# --------------------------------------------------------------------------------------------
# Lowering and launch rewrite
# --------------------------------------------------------------------------------------------
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
        _add_packed_entries(module, functions)
    run_result = _add_run_entry(module, run_entry) if run_entry is not None else None
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


def add_engine_entries(llvm_ir: str) -> str:
    """``llvm_ir`` with :data:`ENGINE_INIT` calling the functions of ``@llvm.global_ctors``
    and :data:`ENGINE_FINI` those of ``@llvm.global_dtors``, each list in its priority order
    (ctors ascending, dtors descending, as the loader runs them)."""
    out = [llvm_ir.rstrip("\n"), ""]
    for entry, array, reverse in ((ENGINE_INIT, "llvm.global_ctors", False),
                                  (ENGINE_FINI, "llvm.global_dtors", True)):
        match = re.search(rf"^@{re.escape(array)} = .*$", llvm_ir, re.M)
        found = re.findall(r"\{ i32 (-?\d+), ptr @([\w.$]+|\"[^\"]+\"), ptr [^}]*\}",
                           match.group(0)) if match else []
        calls = [f"  call void @{name}()" for _, name in
                 sorted(found, key=lambda f: int(f[0]), reverse=reverse)]
        out += [f"define void @{entry}() {{", *calls, "  ret void", "}", ""]
    return "\n".join(out)


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


class LaunchRewriter:
    """Rewrites the launches of a module lowered to the LLVM dialect (after
    :data:`HOST_PIPELINE`) into libwavert calls, follows each launch and each runtime call
    (:func:`is_runtime_call`) by an early return on failure, and adds the kernel slots, their
    helpers and the release entry. ``binaries`` give the images the launches load.

    A ``gpu.launch_func`` without ``async`` goes to the call's stream and returns at once
    (pywave's fast path: Python callers order work by streams). With ``synchronous``, it
    returns when the kernel has finished, as upstream's lowering does (``pywave run``: MLIR
    programs read host memory a kernel wrote right after the launch)."""

    def __init__(self, module: ir.Module, binaries: list[Binary], *,
                 synchronous: bool = False) -> None:
        self.module = module
        self.ctx = module.context
        self.binaries = {b.name: b for b in binaries}
        self.image_params: dict[str, dict[str, int]] = {}   # binary -> its kernels' counts
        self.images: dict[str, str] = {}
        self.slots: dict[tuple[str, str], str] = {}
        self.names: dict[tuple[str, str], str] = {}
        self.helpers: list[str] = []
        self.fail_blocks: list[tuple[ir.Operation, ir.Block]] = []
        self.handles: list[str] = []   # globals wave_load_kernel fills (released like slots)
        self.declared: set[str] = set()
        self.counter = 0
        self.synchronous = synchronous

    def run(self) -> None:
        with self.ctx, ir.Location.unknown(self.ctx):
            self._declare("llvm.func @wavert_jit_failed() -> i32")
            launches: list[ir.Operation] = []
            calls: list[ir.Operation] = []
            loads: list[ir.Operation] = []
            helper_calls: list[ir.Operation] = []
            functions = {sym_name(op.operation): op.operation
                         for op in self.module.body.operations
                         if op.operation.name == "llvm.func" and op.operation.regions[0].blocks}
            callees: dict[str, set[str]] = {name: set() for name in functions}
            runtime_use: dict[str, str] = {}   # function -> first runtime callee or launch
            coroutines = {name for name, f in functions.items() if _is_coroutine(f)}

            for name, func in functions.items():
                def collect(op: ir.Operation, name: str = name) -> ir.WalkResult:
                    if op.name == "gpu.launch_func":
                        launches.append(op)
                        runtime_use.setdefault(name, "gpu.launch_func")
                    elif op.name == "llvm.call" and "callee" in op.attributes:
                        callee = ir.FlatSymbolRefAttr(op.attributes["callee"]).value
                        if is_runtime_call(callee):
                            calls.append(op)
                            runtime_use.setdefault(name, f"@{callee}")
                        elif callee in functions:
                            callees[name].add(callee)
                            helper_calls.append(op)
                        if callee == "wave_load_kernel":
                            loads.append(op)
                    return ir.WalkResult.ADVANCE

                func.walk(collect)
            _check_worker_code(coroutines, callees, runtime_use)
            # Only a callee that makes a runtime call (itself or below) can fail; calls of the
            # others get no check (code run by the async runtime's workers, where
            # wavert_jit_failed is always set, calls only such functions).
            failing = _may_fail(callees, runtime_use)
            helper_calls = [op for op in helper_calls
                            if ir.FlatSymbolRefAttr(op.attributes["callee"]).value in failing]
            for op in loads:
                self._note_handle(op)
            for op in launches:
                self._rewrite_launch(op)
            for op in calls:
                self._rewrite_runtime_call(op)
            # A host function that failed returned early, with a poison result when it returns
            # one (a memref's pointer, say): its caller must not go on to use that.
            for op in helper_calls:
                self._return_early_on_error(op)
            self._rename_wave_declarations()
            self.helpers.append(self._release_entry())
            self._emit_helpers()

    # -- globals -----------------------------------------------------------------------------
    def _image(self, binary: str) -> tuple[str, int]:
        if binary not in self.binaries:
            raise CompileError(f"gpu.launch_func refers to @{binary}, which is not a gpu.binary")
        data = self.binaries[binary].data
        if binary not in self.images:
            gname = f"__pywave_image_{binary}"
            with ir.InsertionPoint(self.module.body):
                llvm.GlobalOp(
                    global_type=ir.Type.parse(f"!llvm.array<{len(data)} x i8>"),
                    sym_name=gname, linkage=ir.Attribute.parse("#llvm.linkage<internal>"),
                    constant=True, alignment=16,
                    value=ir.DenseElementsAttr.get(np.frombuffer(data, dtype=np.int8),
                                                   type=ir.IntegerType.get_signless(8)))
            self.images[binary] = gname
        return self.images[binary], len(data)

    def _kernel_globals(self, binary: str, kernel: str) -> tuple[str, str]:
        key = (binary, kernel)
        if key not in self.slots:
            n = len(self.slots)
            self.slots[key] = f"__pywave_slot_{n}"
            self.names[key] = f"__pywave_kname_{n}"
            encoded = kernel.encode() + b"\0"
            escaped = "".join(f"\\{b:02X}" for b in encoded)
            self.helpers.append(
                f'llvm.mlir.global private constant @{self.names[key]}("{escaped}") '
                f'{{addr_space = 0 : i32}} : !llvm.array<{len(encoded)} x i8>')
            self.helpers.append(
                f"llvm.mlir.global internal @{self.slots[key]}() {{addr_space = 0 : i32}} "
                ": !llvm.ptr {\n  %0 = llvm.mlir.zero : !llvm.ptr\n  llvm.return %0 : !llvm.ptr\n}")
        return self.slots[key], self.names[key]

    def _release_entry(self) -> str:
        """``void _pywave_release_kernels(void)``: release each slot's kernel (NULL when it
        was never launched; wavert_kernel_release accepts it) and clear the slot."""
        body = []
        slots = list(self.slots.values()) + self.handles
        if slots:
            self._declare("llvm.func @wavert_kernel_release(!llvm.ptr)")
            body.append("  %null = llvm.mlir.zero : !llvm.ptr")
        for i, slot in enumerate(slots):
            body += [f"  %s{i} = llvm.mlir.addressof @{slot} : !llvm.ptr",
                     f"  %k{i} = llvm.load %s{i} : !llvm.ptr -> !llvm.ptr",
                     f"  llvm.call @wavert_kernel_release(%k{i}) : (!llvm.ptr) -> ()",
                     f"  llvm.store %null, %s{i} : !llvm.ptr, !llvm.ptr"]
        return f"llvm.func @{RELEASE_KERNELS}() {{\n" + "\n".join(body + ["  llvm.return"]) \
            + "\n}"

    def _declare(self, decl: str) -> None:
        if decl not in self.declared:
            self.declared.add(decl)
            self.helpers.append(decl)

    # -- launches ----------------------------------------------------------------------------
    def _rewrite_launch(self, op: ir.Operation) -> None:
        view = op.opview
        binary, kernel = str(op.attributes["kernel"]).replace("@", "").split("::")
        if len(view.asyncDependencies):
            raise CompileError(f"gpu.launch_func of @{binary}::@{kernel} still has async "
                               "dependencies after gpu-to-llvm")
        image, size = self._image(binary)
        slot, kname = self._kernel_globals(binary, kernel)
        cluster = [view.clusterSizeX, view.clusterSizeY, view.clusterSizeZ] \
            if view.clusterSizeX is not None else []
        dims = cluster + [view.gridSizeX, view.gridSizeY, view.gridSizeZ,
                          view.blockSizeX, view.blockSizeY, view.blockSizeZ]
        for d in dims:
            if str(d.type) != "i64":
                raise CompileError(f"gpu.launch_func of @{binary}::@{kernel}: cluster/grid/"
                                   f"block operand of type {d.type}, expected i64 after "
                                   "lowering")
        smem = view.dynamicSharedMemorySize
        stream = view.asyncObject
        args = self._kernel_arguments(binary, kernel, list(view.kernelOperands))
        operands = dims + ([smem] if smem is not None else []) + \
            ([stream] if stream is not None else []) + args
        helper = f"__pywave_launch_{self.counter}"
        self.counter += 1
        self.helpers.append(self._launch_helper(
            helper, image, size, slot, kname, smem is not None, stream is not None,
            [str(a.type) for a in args], clustered=bool(cluster)))
        with ir.InsertionPoint(op):
            status = _call(helper, operands)
            zero = llvm.mlir_constant(ir.IntegerAttr.get(ir.IntegerType.get_signless(32), 0))
            ok = llvm.icmp(llvm.ICmpPredicate.eq, status, zero)
        self._branch_on(ok, op)
        op.erase()

    def _kernel_arguments(self, binary: str, kernel: str,
                          operands: list[ir.Value]) -> list[ir.Value]:
        """The launch's kernel operands the kernel reads: all of them, unless the kernels
        stage dropped some of its parameters (:attr:`pywave.program.Binary.params`).
        CompileError unless the image's kernel takes that many parameters, where the image
        says (:func:`pywave.image_params.param_counts`)."""
        image = self.binaries[binary]
        found = next((entry for entry in image.params if entry[0] == kernel), None)
        if found is not None:
            _, count, kept = found
            if len(operands) != count:
                raise CompileError(f"gpu.launch_func of @{binary}::@{kernel} passes "
                                   f"{len(operands)} kernel operands after lowering; the "
                                   f"kernel was lowered with {count} parameters")
            operands = [operands[i] for i in kept]
        if binary not in self.image_params:
            self.image_params[binary] = image_params.param_counts(
                image.format, image.data, f"gpu.binary @{binary}") or {}
        declared = self.image_params[binary].get(kernel)
        if declared is not None and declared != len(operands):
            raise CompileError(
                f"gpu.launch_func of @{binary}::@{kernel} passes {len(operands)} kernel "
                f"parameters, but kernel {kernel} in the {image.format} image takes "
                f"{declared}; images made by pywave take only the parameters their kernels "
                "read: build the image for MLIR's kernel ABI with "
                "lowering={'keep_kernel_params': True} (--keep-kernel-params), or give it to "
                "a compile of the same module without that option")
        return operands

    def _launch_helper(self, name: str, image: str, size: int, slot: str, kname: str,
                       has_smem: bool, has_stream: bool, arg_types: list[str], *,
                       clustered: bool = False) -> str:
        """The launch helper: ``[cluster x3,] grid x3, block x3 (i64), [smem (i32),]
        [stream,] kernel arguments`` -> ``wavert_jit_launch`` (``wavert_jit_launch_cluster``
        when ``clustered``); returns its status (i32, 0 = success)."""
        cluster = [f"%c{i}" for i in range(3)] if clustered else []
        params = [f"{c}: i64" for c in cluster] + [f"%g{i}: i64" for i in range(6)]
        launcher = "wavert_jit_launch_cluster" if clustered else "wavert_jit_launch"
        extents = ", ".join(cluster + [f"%g{i}" for i in range(6)])
        launcher_type = ("(!llvm.ptr, !llvm.ptr, i64, !llvm.ptr, "
                         + "i64, " * (len(cluster) + 6) + "i32, !llvm.ptr, !llvm.ptr) -> i32")
        body = ["  %one = llvm.mlir.constant(1 : i64) : i64"]
        if has_smem:
            params.append("%smem: i32")
        else:
            body.append("  %smem = llvm.mlir.constant(0 : i32) : i32")
        if has_stream:
            params.append("%stream: !llvm.ptr")
        else:
            body.append("  %stream = llvm.mlir.zero : !llvm.ptr")
        n = len(arg_types)
        body.append(f"  %params = llvm.alloca %one x !llvm.array<{max(n, 1)} x ptr> "
                    ": (i64) -> !llvm.ptr")
        for i, t in enumerate(arg_types):
            params.append(f"%a{i}: {t}")
            body += [
                f"  %v{i} = llvm.alloca %one x {t} : (i64) -> !llvm.ptr",
                f"  llvm.store %a{i}, %v{i} : {t}, !llvm.ptr",
                f"  %p{i} = llvm.getelementptr %params[0, {i}] : (!llvm.ptr) -> !llvm.ptr, "
                f"!llvm.array<{max(n, 1)} x ptr>",
                f"  llvm.store %v{i}, %p{i} : !llvm.ptr, !llvm.ptr",
            ]
        body += [
            f"  %slot = llvm.mlir.addressof @{slot} : !llvm.ptr",
            f"  %image = llvm.mlir.addressof @{image} : !llvm.ptr",
            f"  %size = llvm.mlir.constant({size} : i64) : i64",
            f"  %kname = llvm.mlir.addressof @{kname} : !llvm.ptr",
            f"  %r = llvm.call @{launcher}(%slot, %image, %size, %kname, {extents}, %smem, "
            f"%stream, %params) : {launcher_type}",
        ]
        if self.synchronous and not has_stream:
            self._declare("llvm.func @mgpuStreamSynchronize(!llvm.ptr)")
            body += ["  llvm.call @mgpuStreamSynchronize(%stream) : (!llvm.ptr) -> ()",
                     "  %failed = llvm.call @wavert_jit_failed() : () -> i32",
                     "  llvm.return %failed : i32"]
        else:
            body.append("  llvm.return %r : i32")
        self._declare(f"llvm.func @{launcher}{launcher_type.removesuffix(' -> i32')} -> i32")
        return (f"llvm.func internal @{name}({', '.join(params)}) -> i32 "
                "attributes {always_inline} {\n" + "\n".join(body) + "\n}")

    def _note_handle(self, op: ir.Operation) -> None:
        """Keep the global that a ``wave_load_kernel`` call fills (its second operand, a
        ``wavert_kernel*`` once loaded) for the release entry."""
        where = "a call of @wave_load_kernel"
        if len(op.operands) != 5:
            raise CompileError(f"{where} has {len(op.operands)} operands; Wave's has 5 "
                               "(stream, handle, image, image size, kernel name)")
        owner = op.operands[1].owner
        if isinstance(owner, ir.Block) or owner.name != "llvm.mlir.addressof":
            source = "a block argument" if isinstance(owner, ir.Block) else owner.name
            raise CompileError(f"{where} takes its kernel handle from {source}; pywave needs "
                               "the address of a module global (llvm.mlir.addressof) to "
                               "release the kernel when the module closes")
        name = ir.FlatSymbolRefAttr(owner.attributes["global_name"]).value
        handle = next((g.operation for g in self.module.body.operations
                       if g.operation.name == "llvm.mlir.global"
                       and sym_name(g.operation) == name), None)
        if handle is None or str(ir.TypeAttr(handle.attributes["global_type"]).value) \
                != "!llvm.ptr" or "constant" in handle.attributes:
            raise CompileError(f"{where} takes the handle @{name}, which is not a mutable "
                               "!llvm.ptr global of the module")
        if name not in self.handles:
            self.handles.append(name)

    # -- runtime calls -----------------------------------------------------------------------
    def _rewrite_runtime_call(self, op: ir.Operation) -> None:
        """Rename a call of Wave's runtime to libwavert's function (:data:`WAVE_FUNCTIONS`;
        ``mgpu*`` calls keep their names) and return early after it when the call has
        failed."""
        callee = ir.FlatSymbolRefAttr(op.attributes["callee"]).value
        if callee in WAVE_FUNCTIONS:
            op.attributes["callee"] = ir.FlatSymbolRefAttr.get(WAVE_FUNCTIONS[callee])
        self._return_early_on_error(op)

    def _return_early_on_error(self, op: ir.Operation) -> None:
        """After ``op`` (a call), return from the function when the host call has failed."""
        after = _next_op(op)
        with ir.InsertionPoint(after) if after is not None else ir.InsertionPoint(op.block):
            failed = _call("wavert_jit_failed", [])
            zero = llvm.mlir_constant(ir.IntegerAttr.get(ir.IntegerType.get_signless(32), 0))
            ok = llvm.icmp(llvm.ICmpPredicate.eq, failed, zero)
        self._branch_on(ok, None, after_op=ok.owner)

    def _rename_wave_declarations(self) -> None:
        for op in self.module.body.operations:
            op = op.operation
            if op.name == "llvm.func" and "sym_name" in op.attributes:
                name = sym_name(op)
                if name in WAVE_FUNCTIONS:
                    op.attributes["sym_name"] = ir.StringAttr.get(WAVE_FUNCTIONS[name])

    # -- control flow ------------------------------------------------------------------------
    def _branch_on(self, ok: ir.Value, launch: ir.Operation | None, *,
                   after_op: ir.Operation | None = None) -> None:
        """Split the block after the check: continue when ``ok``, else return early."""
        anchor = (after_op if after_op is not None else ok.owner).operation
        block = anchor.block
        rest = []
        seen = False
        for o in block.operations:
            o = o.operation
            if seen and (launch is None or o != launch):
                rest.append(o)
            if o == anchor:
                seen = True
        cont = block.create_after()
        for o in rest:
            cont.append(o)
        fail = self._fail_block(block)
        with ir.InsertionPoint(block):
            llvm.CondBrOp(ok, [], [], cont, fail,
                          branch_weights=ir.DenseI32ArrayAttr.get([1000, 1]))

    def _fail_block(self, block: ir.Block) -> ir.Block:
        """The function's shared early-return block: entry points return nothing; a helper
        returning a value returns poison. The error stays recorded: the caller returns at its
        own next check, and the call reports the error when it ends."""
        func = block.region.owner
        for owner, fail in self.fail_blocks:
            if owner == func:
                return fail
        result = _result_type(func)
        fail = block.region.blocks.append()
        with ir.InsertionPoint(fail):
            if result is None:
                llvm.ReturnOp()
            else:
                llvm.ReturnOp(arg=llvm.PoisonOp(result).result)
        self.fail_blocks.append((func, fail))
        return fail

    def _emit_helpers(self) -> None:
        # The images live in the main module already; the helper text only declares them.
        stubs = [f"llvm.mlir.global external constant @{g}() {{addr_space = 0 : i32}} "
                 f": !llvm.array<{len(self.binaries[b].data)} x i8>"
                 for b, g in self.images.items()]
        stubs += [f"llvm.mlir.global external @{h}() {{addr_space = 0 : i32}} : !llvm.ptr"
                  for h in self.handles]
        # A declaration the module already has (mgpuStreamSynchronize, when gpu-to-llvm
        # declared it) is kept as it is: the helper text refers to it through a stub.
        defined = {sym_name(op.operation) for op in self.module.body.operations
                   if "sym_name" in op.operation.attributes}
        redeclared = [d for d in self.declared if d.split("@")[1].split("(")[0] in defined]
        helpers = [h for h in self.helpers if h not in redeclared]
        _append_parsed(self.module, stubs + redeclared, helpers)


def _is_coroutine(func: ir.Operation) -> bool:
    """Whether an ``llvm.func`` is a coroutine (``passthrough = ["presplitcoroutine"]``:
    an ``async.execute`` body or ``async.func`` lowered by convert-async-to-llvm)."""
    return "passthrough" in func.attributes and \
        '"presplitcoroutine"' in str(func.attributes["passthrough"])


def _check_worker_code(coroutines: set[str], callees: dict[str, set[str]],
                       runtime_use: dict[str, str]) -> None:
    """Refuse runtime calls (launches, ``mgpu*``, the sparse runtime, Wave's) in coroutines
    and in the functions they call, directly or not.

    A coroutine resumes on a worker thread of the async runtime (libwavert_runner), where no
    libwavert call is in progress: such a call has no device or stream and
    ``wavert_jit_failed`` reports a failure, so the code would return early after its first
    runtime call, and an early return after a suspension point never completes the
    coroutine's token (before this check: garbage jumps at -O0, hangs at -O2). Raises
    CompileError naming the coroutine, the function and the call."""
    for coroutine in sorted(coroutines):
        seen, work = {coroutine}, [coroutine]
        while work:
            name = work.pop()
            if name in runtime_use:
                via = "" if name == coroutine else f" through @{name}"
                raise CompileError(
                    f"the coroutine @{coroutine} (an async.execute body, run on the async "
                    f"runtime's worker threads) makes a libwavert runtime call{via} "
                    f"({runtime_use[name]}); pywave runs runtime calls, launches included, "
                    "only on the calling thread: keep them out of async.execute bodies and "
                    "scf.parallel loops lowered by async-parallel-for")
            for callee in callees.get(name, ()):
                if callee not in seen:
                    seen.add(callee)
                    work.append(callee)


def _may_fail(callees: dict[str, set[str]], runtime_use: dict[str, str]) -> set[str]:
    """The functions that make a runtime call themselves or through functions they call."""
    failing = set(runtime_use)
    changed = True
    while changed:
        changed = False
        for name, called in callees.items():
            if name not in failing and called & failing:
                failing.add(name)
                changed = True
    return failing


def _result_type(func: ir.Operation) -> ir.Type | None:
    """The type an ``llvm.func`` returns (None: void), read from its ``llvm.return`` ops."""
    found: list[ir.Type] = []

    def visit(op: ir.Operation) -> ir.WalkResult:
        if op.name == "llvm.return" and len(op.operands):
            found.append(op.operands[0].type)
            return ir.WalkResult.INTERRUPT
        return ir.WalkResult.ADVANCE

    func.walk(visit)
    return found[0] if found else None


def _call(callee: str, operands: list[ir.Value]) -> ir.Value:
    """``llvm.call @callee(operands) -> i32`` at the current insertion point."""
    return llvm.CallOp(ir.IntegerType.get_signless(32), operands, [],
                       ir.DenseI32ArrayAttr.get([]),
                       callee=ir.FlatSymbolRefAttr.get(callee)).result


def _next_op(op: ir.Operation) -> ir.Operation | None:
    found = False
    for o in op.block.operations:
        if found:
            return o.operation
        if o.operation == op:
            found = True
    return None


def _add_packed_entries(module: ir.Module, functions: list[HostSignature]) -> None:
    """``void _pywave_packed_f(ptr slots)`` for each host function ``f``."""
    texts, stubs = [], []
    funcs = {sym_name(op.operation): op.operation
             for op in module.body.operations if op.operation.name == "llvm.func"}
    for fn in functions:
        lowered = funcs.get(fn.name)
        if lowered is None:
            raise CompileError(f"host function @{fn.name} vanished during lowering")
        types = [str(a.type) for a in lowered.regions[0].blocks[0].arguments]
        if len(types) != fn.words:
            raise CompileError(f"host function @{fn.name}: {len(types)} lowered arguments, "
                               f"expected {fn.words}")
        result = _lowered_result(lowered, fn)
        stubs.append(f"llvm.func @{fn.name}({', '.join(types)})"
                     + (f" -> {result}" if result else ""))
        body = []
        for i, t in enumerate(types):
            body.append(f"  %p{i} = llvm.getelementptr %slots[{i}] : (!llvm.ptr) -> !llvm.ptr, "
                        "i64")
            body.append(f"  %v{i} = llvm.load %p{i} : !llvm.ptr -> {t}")
        values = ", ".join(f"%v{i}" for i in range(len(types)))
        if result is None:
            body.append(f"  llvm.call @{fn.name}({values}) : ({', '.join(types)}) -> ()")
        else:
            body.append(f"  %r = llvm.call @{fn.name}({values}) : ({', '.join(types)}) "
                        f"-> {result}")
            body += _store_results(fn, result)
        body.append("  llvm.return")
        texts.append(f"llvm.func @{PACKED_PREFIX}{fn.name}(%slots: !llvm.ptr) {{\n"
                     + "\n".join(body) + "\n}")
    _append_parsed(module, stubs, texts)


#: Prefix of MLIR ExecutionEngine's packed wrappers: ``void _mlir_<f>(void **args)``.
PACKED_INTERFACE_PREFIX = "_mlir_"


def add_packed_interface(module: ir.Module) -> list[str]:
    """MLIR ExecutionEngine's packed wrapper ``void _mlir_<f>(ptr args)`` of every host
    ``llvm.func`` ``f`` with a body and external linkage (pywave's own ``_pywave_*`` entries
    excepted), as ``ExecutionEngine::packFunctionArguments`` makes them: ``args[i]`` points
    to the value of argument ``i`` (loaded and passed), and ``args[n]`` to where the result
    goes, if ``f`` returns one. Returns the names of the wrapped functions. CompileError when
    the module already defines a wrapper's name."""
    funcs = {sym_name(op.operation): op.operation
             for op in module.body.operations if op.operation.name == "llvm.func"}
    texts, stubs, wrapped = [], [], []
    for name, func in funcs.items():
        linkage = str(func.attributes["linkage"]) if "linkage" in func.attributes else ""
        if not func.regions[0].blocks or name.startswith("_pywave_") or \
                any(k in linkage for k in ("internal", "private")):
            continue
        packed = PACKED_INTERFACE_PREFIX + name
        if packed in funcs:
            raise CompileError(f"the module defines @{packed}, the name of the packed "
                               f"wrapper of @{name} that the ExecutionEngine interface needs")
        types = [str(a.type) for a in func.regions[0].blocks[0].arguments]
        found = _result_type(func)
        result = None if found is None else str(found)
        # Symbols as MLIR prints them: quoted where the name is not a bare identifier (the
        # sparsifier names helpers @"_insert_dense_compressed_-9223372036854775808_...").
        symbol = str(ir.FlatSymbolRefAttr.get(name, context=module.context))
        packed_symbol = str(ir.FlatSymbolRefAttr.get(packed, context=module.context))
        stubs.append(f"llvm.func {symbol}({', '.join(types)})"
                     + (f" -> {result}" if result else ""))
        body = []
        for i, t in enumerate(types):
            body += [f"  %p{i} = llvm.getelementptr %args[{i}] : (!llvm.ptr) -> !llvm.ptr, "
                     "!llvm.ptr",
                     f"  %a{i} = llvm.load %p{i} : !llvm.ptr -> !llvm.ptr",
                     f"  %v{i} = llvm.load %a{i} : !llvm.ptr -> {t}"]
        values = ", ".join(f"%v{i}" for i in range(len(types)))
        if result is None:
            body.append(f"  llvm.call {symbol}({values}) : ({', '.join(types)}) -> ()")
        else:
            n = len(types)
            body += [f"  %r = llvm.call {symbol}({values}) : ({', '.join(types)}) -> {result}",
                     f"  %pr = llvm.getelementptr %args[{n}] : (!llvm.ptr) -> !llvm.ptr, "
                     "!llvm.ptr",
                     "  %ar = llvm.load %pr : !llvm.ptr -> !llvm.ptr",
                     f"  llvm.store %r, %ar : {result}, !llvm.ptr"]
        body.append("  llvm.return")
        texts.append(f"llvm.func {packed_symbol}(%args: !llvm.ptr) {{\n" + "\n".join(body)
                     + "\n}")
        wrapped.append(name)
    _append_parsed(module, stubs, texts)
    return wrapped


def _lowered_result(lowered: ir.Operation, fn: HostSignature) -> str | None:
    """The LLVM type the lowered host function returns (None: void): one result's own type,
    several results packed in a struct."""
    found = _result_type(lowered)
    result = None if found is None else str(found)
    if (result is None) != (not fn.results):
        raise CompileError(f"host function @{fn.name}: lowered to return {result or 'void'}, "
                           f"expected {len(fn.results)} results")
    return result


def _store_results(fn: HostSignature, result: str) -> list[str]:
    """Ops storing ``%r`` (of LLVM type ``result``) into the result slots (after the
    ``fn.words`` argument slots): a result at its first slot; a memref descriptor (a struct
    of 64-bit fields, so laid out as its words) stored whole."""
    if len(fn.results) == 1:
        return [f"  %q0 = llvm.getelementptr %slots[{fn.words}] : (!llvm.ptr) -> !llvm.ptr, i64",
                f"  llvm.store %r, %q0 : {result}, !llvm.ptr"]
    fields = _struct_fields(result)
    if len(fields) != len(fn.results):
        raise CompileError(f"host function @{fn.name}: lowered to return {result}, expected "
                           f"a struct of {len(fn.results)} results")
    body, slot = [], fn.words
    for i, (field, param) in enumerate(zip(fields, fn.results)):
        body += [f"  %e{i} = llvm.extractvalue %r[{i}] : {result}",
                 f"  %q{i} = llvm.getelementptr %slots[{slot}] : (!llvm.ptr) -> !llvm.ptr, i64",
                 f"  llvm.store %e{i}, %q{i} : {field}, !llvm.ptr"]
        slot += param.words
    return body


def _struct_fields(text: str) -> list[str]:
    """Top-level field types of ``!llvm.struct<(a, b, ...)>``, each as a type of its own."""
    inner = text.removeprefix("!llvm.struct<(").removesuffix(")>")
    fields, depth, start = [], 0, 0
    for i, ch in enumerate(inner):
        if ch in "<([":
            depth += 1
        elif ch in ">)]":
            depth -= 1
        elif ch == "," and depth == 0:
            fields.append(inner[start:i].strip())
            start = i + 1
    fields.append(inner[start:].strip())
    # nested LLVM types print without their dialect prefix inside a struct
    return [f"!llvm.{f}" if f.startswith(("struct<", "array<", "ptr", "vec<")) else f
            for f in fields]


def check_run_entry(module: ir.Module, name: str) -> None:
    """Before any lowering: ``name`` is a function defined in ``module`` that ``pywave run``
    can call (a ``func.func`` without arguments, or an ``llvm.func``, checked once lowered).
    CompileError in the module's own terms otherwise: its MLIR argument types, and the
    functions it defines (never the names lowering adds)."""
    defined = {sym_name(op.operation): op.operation for op in module.body.operations
               if op.operation.name in ("func.func", "llvm.func")
               and op.operation.regions[0].blocks}
    if name not in defined:
        names = ", ".join(f"@{n}" for n in sorted(defined)) or "none"
        raise CompileError(f"the entry function @{name} is not defined in the module (it "
                           f"defines: {names}); choose the entry with -e NAME")
    func = defined[name]
    if func.name != "func.func":
        return
    inputs = ir.FunctionType(ir.TypeAttr(func.attributes["function_type"]).value).inputs
    if inputs:
        raise CompileError(
            f"the entry function @{name} takes arguments ({', '.join(map(str, inputs))}); "
            "`pywave run` calls an entry without arguments: call it from Python "
            "(pywave.compile) with tensors, or add an entry that allocates its buffers and "
            f"calls @{name}")


def _add_run_entry(module: ir.Module, name: str) -> str:
    """``void _pywave_run(ptr result)``: call ``name`` (no arguments) and store its result,
    if any, at ``result`` (the caller provides room for it). Returns the result's LLVM type
    (``"void"`` for none)."""
    funcs = {sym_name(op.operation): op.operation
             for op in module.body.operations if op.operation.name == "llvm.func"}
    if name not in funcs or not funcs[name].regions[0].blocks:
        raise CompileError(f"the entry function @{name} is not a host function of the module "
                           f"(functions: {', '.join(sorted(funcs)) or 'none'})")
    ftype = str(ir.TypeAttr(funcs[name].attributes["function_type"]).value)
    result, _, params = ftype.removeprefix("!llvm.func<").removesuffix(">").partition("(")
    result = result.strip()
    if params.strip(") "):
        raise CompileError(f"the entry function @{name} takes arguments ({params.rstrip(')')});"
                           " `pywave run` calls an entry without arguments")
    body = []
    if result == "void":
        body.append(f"  llvm.call @{name}() : () -> ()")
    else:
        body += [f"  %r = llvm.call @{name}() : () -> {result}",
                 f"  llvm.store %r, %out : {result}, !llvm.ptr"]
    signature = f"llvm.func @{name}() -> {result}" if result != "void" \
        else f"llvm.func @{name}()"
    _append_parsed(module, [signature], [f"llvm.func @{RUN_ENTRY}(%out: !llvm.ptr) {{\n"
                                         + "\n".join(body + ["  llvm.return"]) + "\n}"])
    return result


def _append_parsed(module: ir.Module, stubs: list[str], texts: list[str]) -> None:
    """Parse ``texts`` (which may refer to symbols of ``module`` declared by ``stubs``) and
    move the ops of ``texts`` to the end of ``module``."""
    if not texts:
        return
    parsed = ir.Module.parse("\n".join(stubs + texts), module.context)
    for op in list(parsed.body.operations)[len(stubs):]:
        module.body.append(op.operation)
