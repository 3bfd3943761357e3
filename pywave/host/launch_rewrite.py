"""The launch rewrite: each launch a libwavert call, each runtime call followed by a check.

Part of stage ``host`` (:mod:`pywave.host.stage`), after the lowering to the LLVM dialect.

One ABI: the ``mgpu*`` calls that MLIR's lowering emits (streams, events, memory, host
registration, TMA descriptors, cuSPARSE) keep their upstream names; libwavert implements each
once (``wavert_mgpu.h``), so every call of a function named ``mgpu*``
(:func:`is_runtime_call`) gets the check and no table maps names. Calls of the module's own
functions that make such a call, directly or not, get it too: their result is poison when
they returned early. Coroutines (``async.execute`` bodies, run by the async runtime's worker
threads, where no libwavert call is in progress) and what they call may make no runtime call
(CompileError).

Host code in Wave's convention calls Wave's runtime: its helpers (through their
``_mlir_ciface_`` C interface) and, once Wave's own pass lowered its launches,
``wave_load_kernel`` / ``wave_launch_kernel``. Their declarations are checked against the
ABI libwavert implements (:data:`WAVE_HELPER_TYPES`, :data:`WAVE_LLVM_TYPES`), the calls
renamed to libwavert's (:data:`WAVE_FUNCTIONS`) and each followed by the same early return,
as is each call of a function that makes such a call (the helpers' C-interface wrappers).
The globals ``wave_load_kernel`` fills are released with the kernel slots. In the packed
entry of such a function, slot 0 is the stream and each object one slot (the address of
its ``wavert_object``).

Each launched kernel has a slot, an internal ``wavert_kernel*`` global that
``wavert_jit_launch`` fills on first use. ``void _pywave_release_kernels(void)`` releases
every slot's kernel and clears the slot; the module's owner calls it once no call runs
(``CompiledModule.close``, an export's ``<name>_unload``).
"""

from __future__ import annotations

import numpy as np
from mlir import ir
from mlir.dialects import llvm

from .. import image_params, sparse
from ..errors import CompileError
from ..mlirutil import next_op, sym_name
from ..program import RELEASE_KERNELS, Binary
from .entries import append_parsed, result_type

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


class LaunchRewriter:
    """Rewrites the launches of a module lowered to the LLVM dialect (after
    :data:`pywave.host.stage.HOST_PIPELINE`) into libwavert calls, follows each launch and each
    runtime call (:func:`is_runtime_call`) by an early return on failure, and adds the kernel
    slots, their helpers and the release entry. ``binaries`` give the images the launches load.

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
        after = next_op(op)
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
        result = result_type(func)
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
        append_parsed(self.module, stubs + redeclared, helpers)


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


def _call(callee: str, operands: list[ir.Value]) -> ir.Value:
    """``llvm.call @callee(operands) -> i32`` at the current insertion point."""
    return llvm.CallOp(ir.IntegerType.get_signless(32), operands, [],
                       ir.DenseI32ArrayAttr.get([]),
                       callee=ir.FlatSymbolRefAttr.get(callee)).result


