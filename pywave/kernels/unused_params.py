"""Kernel parameters that no kernel reads, dropped: each launch passes only the ones read.

MLIR's kernel ABI passes a memref as its whole descriptor, 3 + 2r words (allocated and aligned
pointers, offset, sizes, strides), and a kernel of ``memref<?xf32>`` arguments that only loads
and stores through them reads one of its five words: the aligned pointer (the offset and
stride are the static 0 and 1 of the identity layout, the allocated pointer is for
deallocation). Every word costs the launch: the driver copies each parameter, and the host
builds a pointer to each (about 3 ns a parameter in ``cuLaunchKernel`` on an H200, measured by
``bench/launch.py``'s floors with n and 5n parameters). So, once the kernels are lowered to the
LLVM dialect and before they are serialised, :func:`drop_unused` removes every parameter of a
kernel that has no use (an unused block argument of its ``llvm.func``, with its
``arg_attrs``), and :mod:`pywave.host.launch_rewrite` passes, at each ``gpu.launch_func``, only
the operands of the parameters kept (:attr:`pywave.program.Binary.params`). A parameter without
a use cannot change what the kernel computes, so the program means what it meant.

It is skipped where pywave does not own both sides of the launch: kernels launched by Wave's
runtime calls (``wave_launch_kernel`` passes its own parameter array), kernels referenced inside
their ``gpu.module`` (an ``llvm.call`` or ``llvm.mlir.addressof`` of them), images given with
``binaries=`` (their kernels keep MLIR's ABI: no entry), and every kernel when
``LoweringOptions(keep_kernel_params=True)`` asks for MLIR's ABI unchanged (binaries launched
by other code with MLIR's argument layout) and in the ExecutionEngine's compiles
(:class:`pywave.entry.engine.ExecutionEngine`), whose launches MLIR's own translation emits.
"""

from __future__ import annotations

from mlir import ir

from ..mlirutil import find_ops, gpu_modules, sym_name

#: Runtime calls of Wave's convention that launch kernels with a parameter array of their own.
WAVE_LAUNCH_CALLS = ("wave_load_kernel", "wave_launch_kernel")


def launched_by_wave(module: ir.Module) -> bool:
    """Whether ``module`` declares one of Wave's launch calls (:data:`WAVE_LAUNCH_CALLS`)."""
    return any(op.operation.name in ("func.func", "llvm.func")
               and sym_name(op.operation) in WAVE_LAUNCH_CALLS
               for op in module.body.operations)


def drop_unused(module: ir.Module, names: "set[str] | None" = None
                ) -> dict[str, tuple[tuple[str, int, tuple[int, ...]], ...]]:
    """Remove the unused parameters of every lowered kernel (an ``llvm.func`` with
    ``gpu.kernel``) of the ``gpu.module``s named in ``names`` (None: all), unless the module
    is launched by Wave's runtime (:func:`launched_by_wave`: nothing is removed).

    Returns ``{gpu.module name: ((kernel, parameters before, indices kept), ...)}`` for the
    kernels that lost a parameter, indices into the parameters before, ascending."""
    if launched_by_wave(module):
        return {}
    out: dict[str, tuple[tuple[str, int, tuple[int, ...]], ...]] = {}
    for gmod in gpu_modules(module):
        name = sym_name(gmod)
        if names is not None and name not in names:
            continue
        referenced = _referenced_symbols(gmod)
        dropped = tuple(entry for kernel in _lowered_kernels(gmod)
                        if sym_name(kernel) not in referenced
                        and (entry := _drop_from(kernel)) is not None)
        if dropped:
            out[name] = dropped
    return out


def _lowered_kernels(gmod: ir.Operation) -> list[ir.Operation]:
    return [op.operation for op in gmod.regions[0].blocks[0].operations
            if op.operation.name == "llvm.func" and "gpu.kernel" in op.operation.attributes
            and op.operation.regions[0].blocks]


def _referenced_symbols(gmod: ir.Operation) -> set[str]:
    """The symbols that ops of ``gmod`` call or take the address of (one walk)."""
    found: set[str] = set()
    for op in find_ops(gmod, lambda op: op.name in ("llvm.call", "llvm.mlir.addressof")):
        for attr in ("callee", "global_name"):
            if attr in op.attributes:
                found.add(ir.FlatSymbolRefAttr(op.attributes[attr]).value)
    return found


def _drop_from(kernel: ir.Operation) -> tuple[str, int, tuple[int, ...]] | None:
    """Remove ``kernel``'s unused parameters: (name, parameters before, indices kept), or
    None when it keeps them all (or returns a value, which no kernel does)."""
    block = kernel.regions[0].blocks[0]
    arguments = list(block.arguments)
    unused = [i for i, a in enumerate(arguments) if next(iter(a.uses), None) is None]
    if not unused or not str(ir.TypeAttr(kernel.attributes["function_type"]).value
                             ).startswith("!llvm.func<void ("):
        return None
    dead = set(unused)
    kept = tuple(i for i in range(len(arguments)) if i not in dead)
    if "arg_attrs" in kernel.attributes:
        attrs = list(ir.ArrayAttr(kernel.attributes["arg_attrs"]))
        kernel.attributes["arg_attrs"] = ir.ArrayAttr.get([attrs[i] for i in kept])
    for i in reversed(unused):
        block.erase_argument(i)
    types = ", ".join(str(a.type) for a in block.arguments)
    kernel.attributes["function_type"] = ir.TypeAttr.get(
        ir.Type.parse(f"!llvm.func<void ({types})>"))
    return sym_name(kernel), len(arguments), kept
