"""Stage signatures, kernel side: a generated launcher host function per launchable kernel.

Stage ``signatures`` (:mod:`pywave.pipeline`), for the Python launch API: a generated host
function per launchable kernel, its *launcher* (named by
:func:`pywave.runtime.kernel_api.launcher_name`)::

    func.func private @"_pywave_kernel$kernels$add"(%a: memref<?xf32>, ..., %n: index,
            %gx: index, %gy: index, %gz: index, %bx: index, %by: index, %bz: index,
            %smem: i32) {
      gpu.launch_func @kernels::@add blocks in (%gx, %gy, %gz) threads in (%bx, %by, %bz)
          dynamic_shared_memory_size %smem args(%a : memref<?xf32>, ..., %n : index)
      return
    }

It is lowered, packed, cached and called exactly as a host function (so the argument intake,
stream choice, lifetime and launch limits are shared); ``pywave._native.KernelLauncher``
turns ``grid=``, ``block=``, ``shared_mem=`` into its last arguments: the launch
parameters of ``pywave._native.LAUNCH_PARAMS`` ((name, MLIR type) pairs: grid and block
extents as ``index``, the dynamic shared memory in bytes as ``i32``, as ``gpu.launch_func``'s
``dynamic_shared_memory_size``), defined by the C launcher that reads them; their names cannot
be MLIR value names, so they never collide with the kernel's.

Launchable: every ``gpu.func`` kernel of a ``gpu.module`` whose arguments are ranked memrefs
or scalars that host functions take (the kernel's own argument names; a memref is "written"
unless the kernel only reads it), and every kernel of a ``gpu.binary`` in the input that the
host code launches (argument types from its ``gpu.launch_func``s, names ``argN``, memrefs
taken as written). Other kernels are skipped (logged at DEBUG).
"""

from __future__ import annotations

import logging

from mlir import ir
from mlir.dialects import func, gpu

from .._native import LAUNCH_PARAMS
from ..errors import CompileError
from ..mlirutil import gpu_modules, kernels_of
from ..mlirutil import sym_name
from ..program import COARSENED_ATTR, HostSignature, Param
from ..runtime.kernel_api import launcher_name
from .signature import arg_name, as_bool, kernel_written_args, make_param, source_lines

log = logging.getLogger("pywave.launchers")

def add_launchers(module: ir.Module, text: str | None,
                  bool_args: set[tuple[str, int]] = frozenset()) -> list[HostSignature]:
    """Add a private launcher ``func.func`` per launchable kernel to ``module`` (after the
    prepare pipeline, while the kernel bodies exist) and return their signatures.
    ``bool_args``: (``"module::kernel"``, index) of memrefs that were ``i1`` (they take bool
    tensors)."""
    lines = source_lines(text)
    written = kernel_written_args(module)
    kernels: list[tuple[str, str, list[Param], list[ir.Type]]] = []
    for gmod in gpu_modules(module):
        mname = sym_name(gmod)
        for kernel in kernels_of(gmod):
            if COARSENED_ATTR in kernel.attributes:     # the host's own launches' copy
                continue
            kname = sym_name(kernel)
            args = _function_arguments(kernel)
            names = [arg_name(a, lines) or f"arg{i}" for i, a in enumerate(args)]
            params = _params(mname, kname, names, [a.type for a in args],
                             written.get(f"{mname}::{kname}", set()), bool_args)
            if params is not None:
                kernels.append((mname, kname, params, [a.type for a in args]))
    kernels += _binary_kernels(module)
    out = []
    with module.context, ir.Location.unknown(module.context):
        for mname, kname, params, types in kernels:
            name = launcher_name(mname, kname)
            if name is None:
                log.debug("no launcher for @%s::@%s: not a plain symbol name", mname, kname)
                continue
            _add_function(module, name, mname, kname, types)
            extra = tuple(make_param(name, len(params) + i, pname, ir.Type.parse(t), False)
                          for i, (pname, t) in enumerate(LAUNCH_PARAMS))
            out.append(HostSignature(name, tuple(params) + extra))
    return out


def _function_arguments(kernel: ir.Operation) -> list[ir.Value]:
    """The kernel's own arguments: the entry block also holds its workgroup and private
    attributions (``gpu.func ... workgroup(...)``) after them, which are not passed."""
    count = len(ir.FunctionType(ir.TypeAttr(kernel.attributes["function_type"]).value).inputs)
    return list(kernel.regions[0].blocks[0].arguments)[:count]


def _params(mname: str, kname: str, names: list[str], types: list[ir.Type],
            written: set[int], bool_args: set[tuple[str, int]]) -> list[Param] | None:
    """The kernel's arguments as host parameters; None (logged) when one cannot be passed."""
    where = f"{mname}::{kname}"
    out = []
    for i, (pname, t) in enumerate(zip(names, types)):
        if isinstance(t, ir.MemRefType) and ir.MemRefType(t).memory_space is not None:
            log.debug("no launcher for @%s: argument #%d is in memory space %s", where, i,
                      ir.MemRefType(t).memory_space)
            return None
        try:
            param = make_param(where, i, pname, t, i in written)
        except CompileError as exc:
            log.debug("no launcher for @%s: %s", where, exc)
            return None
        if (where, i) in bool_args:
            param = as_bool(param)
        out.append(param)
    if len({p.name for p in out}) != len(out):
        log.debug("no launcher for @%s: repeated argument names", where)
        return None
    return out


def _binary_kernels(module: ir.Module) -> list[tuple[str, str, list[Param], list[ir.Type]]]:
    """Kernels of the input's ``gpu.binary`` ops, typed by the host code's launches of them."""
    binaries = {sym_name(op.operation) for op in module.body.operations
                if op.operation.name == "gpu.binary"}
    seen: dict[tuple[str, str], list[ir.Type] | None] = {}

    def visit(op: ir.Operation) -> ir.WalkResult:
        if op.name == "gpu.launch_func":
            mname, kname = str(op.attributes["kernel"]).replace("@", "").split("::")
            if mname in binaries:
                types = [v.type for v in op.opview.kernelOperands]
                if seen.setdefault((mname, kname), types) != types:
                    seen[(mname, kname)] = None      # launched with different types
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    out = []
    for (mname, kname), types in seen.items():
        if types is None:
            log.debug("no launcher for @%s::@%s: launched with different types", mname, kname)
            continue
        params = _params(mname, kname, [f"arg{i}" for i in range(len(types))], types,
                         set(range(len(types))), set())
        if params is not None:
            out.append((mname, kname, params, types))
    return out


def _add_function(module: ir.Module, name: str, mname: str, kname: str,
                  types: list[ir.Type]) -> None:
    inputs = list(types) + [ir.Type.parse(t) for _, t in LAUNCH_PARAMS]
    with ir.InsertionPoint(module.body):
        fn = func.FuncOp(name, ir.FunctionType.get(inputs, []), visibility="private")
    block = fn.add_entry_block()
    with ir.InsertionPoint(block):
        args = list(block.arguments)
        n = len(types)
        gpu.LaunchFuncOp([mname, kname], tuple(args[n:n + 3]), tuple(args[n + 3:n + 6]),
                         kernel_operands=args[:n], dynamic_shared_memory_size=args[n + 6])
        func.ReturnOp([])
