"""Block coarsening of elementwise kernels: more memory requests in flight per thread.

A kernel that reads and writes global memory one element per thread has one load of each
input in flight per thread. At full occupancy that is about 16 KB an SM, short of what HBM
needs to stream at full rate: on the H200 host a one-element-per-thread vector add reaches
0.80 of ``torch.add`` at 2^28 f32, the same kernel written in CUDA C 0.79, and L2
prefetch-size hints on its loads change nothing (``bench/bandwidth.py``; the CUDA C variants
were measured in the same way). :func:`coarsen` gives such a kernel a copy in which each block
does the work of :data:`FACTOR` consecutive blocks, *virtual block* ``FACTOR * block_id.x + k``
for ``k < FACTOR``, issuing the loads of all of them before it computes with what they load
and stores: the CUDA C version of that reaches 1.01 of ``torch.add``. The host's launches of
the kernel run the copy over ``ceildiv(grid_x, FACTOR)`` blocks when they are large
(:func:`coarsen`'s ``min_threads``), the kernel as written otherwise.

What a kernel must be (:func:`shape`; any other kernel is left alone):

- a ``gpu.func`` kernel without workgroup or private attributions whose body is ops without
  memory effects or regions (``arith``, ``math``, ``index``, ``gpu.block_id``/``thread_id``/
  ``block_dim``/``grid_dim``, ``memref.dim``), loads (``memref.load``, ``vector.load``) and
  stores (``memref.store``, ``vector.store``) of its memref arguments, optionally all but the
  first inside one ``scf.if`` (no results, no else) ending the body;
- at least one load, and every load before the first store.

Why the copy computes what the kernel does: each virtual block runs the kernel's ops for
that block (``block_id.x`` is the virtual block, ``grid_dim.x`` the launch's grid), its loads
and stores in their order (ops without memory effects may run later, on the same operands),
and only when the virtual block exists (``< grid_x``), so every thread's own accesses are
those of the thread it stands for, in the same order. What changes is the order between
the accesses of different virtual blocks, and those blocks ran unordered and concurrently: two
accesses of them to one address, one a store, were a data race, which CUDA's memory model
leaves undefined, so a program with a defined result cannot tell the orders apart. No
barrier, shared memory, atomic or call is allowed, so nothing else orders the blocks.

Applies to NVIDIA targets (:meth:`pywave.lowering.LoweringOptions.coarsen_threshold`); runs
in the prepare stage while the kernels still have ``scf`` ops. The copy is named
``<kernel>`` + :data:`pywave.program.COARSENED_SUFFIX` and carries ``COARSENED_ATTR``; the
kernel API (``mod.kernels[...]``) and its launchers know only the kernel as written.
"""

from __future__ import annotations

import logging
from typing import NamedTuple

from mlir import ir
from mlir.dialects import arith, gpu, scf, vector

from ...mlirutil import find_ops, gpu_modules, kernels_of, sym_name
from ...program import COARSENED_ATTR, COARSENED_SUFFIX

log = logging.getLogger("pywave.kernels")

#: Blocks of the kernel as written that one block of its copy runs.
FACTOR = 4

#: The largest grid x of a CUDA launch (CUDA Programming Guide, "Compute capabilities"); a
#: launch past it runs as written, so that it fails as written.
MAX_GRID_X = 2**31 - 1

_GPU_IDS = {"gpu.block_id", "gpu.thread_id", "gpu.block_dim", "gpu.grid_dim"}
_PURE_DIALECTS = ("arith.", "math.", "index.")
_LOADS = {"memref.load", "vector.load"}
_STORES = {"memref.store", "vector.store"}
#: Operand index of the memref of each load and store.
_MEMREF_OPERAND = {"memref.load": 0, "vector.load": 0, "memref.store": 1, "vector.store": 1}
#: Attributes of the kernel that its copy does not take: its own name and type are new, and a
#: known grid size no longer holds.
_NOT_COPIED = {"function_type", "sym_name", "arg_attrs", "res_attrs", "known_grid_size",
               "workgroup_attributions"}


class Shape(NamedTuple):
    """A coarsenable kernel's body: ``outer`` ops run by every thread, then (``guard``, an
    ``scf.if``) the ``inner`` ops, or with no guard the ``inner`` ops alone. ``early[i]``:
    whether op ``i`` of ``outer + inner`` runs in the load phase (a load, or an op a load or
    the guard needs); the others (stores, and the ops only they need) run in the store phase.
    ``crossing``: the values the load phase hands to the store phase."""
    outer: list[ir.Operation]
    guard: ir.Operation | None
    inner: list[ir.Operation]
    early: list[bool]
    crossing: list[ir.Value]


def coarsen(module: ir.Module, min_threads: int) -> list[str]:
    """Give each coarsenable kernel launched by the host code of ``module`` its copy, and
    make each of its launches choose at run time: the copy when ``grid_x * block_x >=
    min_threads`` and ``grid_x <= MAX_GRID_X``, the kernel as written otherwise.
    ``min_threads`` >= 1. A launch with a cluster or async tokens, one whose grid x and
    block x are constants below ``min_threads`` and one in a region that must stay one block
    (``async.execute``'s, for one) stays as it is; a kernel with no other launch gets no copy.
    Returns the ``"module::kernel"`` names coarsened."""
    launches: dict[str, list[ir.Operation]] = {}
    for op in find_ops(module.operation, lambda o: o.name == "gpu.launch_func"):
        if _may_choose(op, min_threads):
            launches.setdefault(str(op.attributes["kernel"]), []).append(op)
    done = []
    for gmod in gpu_modules(module):
        for kernel in kernels_of(gmod):
            ref = f"@{sym_name(gmod)}::@{sym_name(kernel)}"
            if ref not in launches or COARSENED_ATTR in kernel.attributes:
                continue
            found = shape(kernel)
            if found is None:
                continue
            copy = _copy(kernel, found)
            for launch in launches[ref]:
                _choose_at_launch(launch, sym_name(gmod), copy, min_threads)
            done.append(f"{sym_name(gmod)}::{sym_name(kernel)}")
    if done:
        log.debug("coarsened by %d: %s", FACTOR, ", ".join(done))
    return done


def shape(kernel: ir.Operation) -> Shape | None:
    """The body of ``kernel`` as :class:`Shape` when it can be coarsened (see the module
    docstring), else None."""
    body = kernel.regions[0]
    if len(body.blocks) != 1:
        return None
    block = body.blocks[0]
    inputs = ir.FunctionType(ir.TypeAttr(kernel.attributes["function_type"]).value).inputs
    if len(block.arguments) != len(inputs):         # workgroup or private attributions
        return None
    ops = [op.operation for op in block.operations]
    if ops[-1].name != "gpu.return" or len(ops[-1].operands):
        return None
    guard = ops[-2] if len(ops) > 1 and ops[-2].name == "scf.if" else None
    if guard is not None:
        if len(guard.results) or len(guard.regions[1].blocks):
            return None
        inner = [op.operation for op in guard.regions[0].blocks[0].operations][:-1]
        outer = ops[:-2]
    else:
        inner, outer = ops[:-1], []
    args = list(block.arguments)
    if not all(_allowed(op, args, stores=False) for op in outer):
        return None
    if not all(_allowed(op, args, stores=True) for op in inner):
        return None
    if not any(op.name in _LOADS for op in outer + inner):      # nothing to overlap
        return None
    first_store = next((i for i, op in enumerate(inner) if op.name in _STORES), len(inner))
    if any(op.name in _LOADS for op in inner[first_store:]):
        return None
    early = _early(outer + inner, guard)
    crossing = _crossing(outer + inner, early)
    if not all(_filler_type(v.type) for v in crossing):
        return None
    return Shape(outer, guard, inner, early, crossing)


def _early(ops: list[ir.Operation], guard: ir.Operation | None) -> list[bool]:
    """Which of ``ops`` the load phase runs: the loads and what they or the ``guard``'s
    condition need, found backwards. A value computed from a load only for a store waits for
    the store phase, so a thread issues the loads of every virtual block before it waits for
    any of them."""
    needed = {guard.operands[0]} if guard is not None else set()
    early = [False] * len(ops)
    for i in range(len(ops) - 1, -1, -1):
        op = ops[i]
        if op.name in _LOADS or any(r in needed for r in op.results):
            early[i] = True
            needed.update(op.operands)
    return early


def _crossing(ops: list[ir.Operation], early: list[bool]) -> list[ir.Value]:
    """The values early ops among ``ops`` define and late ops use, without repeats, in order."""
    defined = {r for op, e in zip(ops, early) if e for r in op.results}
    out: list[ir.Value] = []
    for op, e in zip(ops, early):
        if not e:
            for v in op.operands:
                if v in defined and v not in out:
                    out.append(v)
    return out


def _allowed(op: ir.Operation, args: list[ir.Value], *, stores: bool) -> bool:
    if len(op.regions):
        return False
    if op.name.startswith(_PURE_DIALECTS) or op.name in _GPU_IDS or op.name == "memref.dim":
        return True
    if op.name in _LOADS or (stores and op.name in _STORES):
        memref = op.operands[_MEMREF_OPERAND[op.name]]
        return any(memref == a for a in args)
    return False


def _filler_type(t: ir.Type) -> bool:
    """Whether :func:`_filler` can make a value of ``t``."""
    if isinstance(t, ir.VectorType):
        t = t.element_type
    return isinstance(t, (ir.IndexType, ir.IntegerType, ir.FloatType))


def _filler(t: ir.Type, seed: ir.Value) -> ir.Value:
    """A value of ``t`` (index, integer, float or a vector of them) that a virtual block whose
    loads do not run hands to its store phase, which does not run either. Made from ``seed``
    (the ``grid_x`` parameter), not a constant: with a constant, LLVM folds the store phase's
    arithmetic into the load branch (InstCombine's folding of an op into a phi of constants),
    and the thread then waits for each virtual block's loads before it issues the next
    ones (measured: 0.84 of ``torch.add`` instead of the 1.0 the copy exists for)."""
    element = t.element_type if isinstance(t, ir.VectorType) else t
    if isinstance(element, ir.IndexType):
        scalar = seed
    elif isinstance(element, ir.IntegerType):
        scalar = arith.index_cast(element, seed)
    else:
        scalar = arith.uitofp(element, arith.index_cast(ir.IntegerType.get_signless(64), seed))
    return vector.broadcast(t, scalar) if isinstance(t, ir.VectorType) else scalar


def _copy(kernel: ir.Operation, body: Shape) -> ir.Operation:
    """The coarsened copy of ``kernel``, inserted before it: the kernel's parameters and
    then ``grid_x`` (index, the grid of the launch as written)."""
    context = kernel.context
    index = ir.IndexType.get(context)
    i1 = ir.IntegerType.get_signless(1, context)
    old_type = ir.FunctionType(ir.TypeAttr(kernel.attributes["function_type"]).value)
    new_type = ir.FunctionType.get([*old_type.inputs, index], [], context)
    with context, kernel.location:
        copy = gpu.GPUFuncOp(new_type, sym_name=sym_name(kernel) + COARSENED_SUFFIX,
                             ip=ir.InsertionPoint(kernel)).operation
        for name in kernel.attributes:
            if name not in _NOT_COPIED:
                copy.attributes[name] = kernel.attributes[name]
        if "arg_attrs" in kernel.attributes:
            attrs = list(ir.ArrayAttr(kernel.attributes["arg_attrs"]))
            copy.attributes["arg_attrs"] = ir.ArrayAttr.get(attrs + [ir.DictAttr.get({})])
        copy.attributes[COARSENED_ATTR] = ir.UnitAttr.get()
        entry = copy.regions[0].blocks.append(*new_type.inputs)
        grid_x = entry.arguments[len(old_type.inputs)]
        params = dict(zip(kernel.regions[0].blocks[0].arguments, entry.arguments))
        with ir.InsertionPoint(entry):
            block = gpu.block_id(gpu.Dimension.x)
            factor = arith.constant(index, FACTOR)
            phases = []
            for k in range(FACTOR):
                virtual = arith.addi(arith.muli(block, factor), arith.constant(index, k))
                exists = arith.cmpi(arith.CmpIPredicate.ult, virtual, grid_x)
                ids = {"block_id": virtual, "grid_dim": grid_x}
                phases.append((_load_phase(body, exists, dict(params), ids, i1), ids))
            late = [op for op, e in zip(body.outer + body.inner, body.early) if not e]
            for (values, live), ids in phases:
                store = scf.IfOp(live)
                with ir.InsertionPoint(store.then_block):
                    mapping = dict(params)
                    mapping.update(zip(body.crossing, values))
                    for op in late:
                        _clone(op, mapping, ids)
                    scf.yield_([])
            gpu.return_([])
    return copy


def _load_phase(body: Shape, exists: ir.Value, mapping: dict, ids: dict,
                i1: ir.Type) -> tuple[list[ir.Value], ir.Value]:
    """One virtual block's early ops, run when it ``exists``: (the crossing values, whether
    its store phase runs)."""
    early_outer = [op for op, e in zip(body.outer, body.early) if e]
    early_inner = [op for op, e in zip(body.inner, body.early[len(body.outer):]) if e]
    if all(_speculatable(op) for op in early_outer):   # always so without a guard
        # One condition, as a CUDA C programmer writes it: the loads become one predicated
        # block, and nothing between two virtual blocks' loads waits for the first ones.
        for op in early_outer:
            _clone(op, mapping, ids)
        live = exists if body.guard is None else \
            arith.andi(exists, mapping[body.guard.operands[0]])
        return _guarded(live, early_inner, body, mapping, ids), live
    outer = scf.IfOp(exists, [*(v.type for v in body.crossing), i1], has_else=True)
    with ir.InsertionPoint(outer.then_block):
        for op in early_outer:
            _clone(op, mapping, ids)
        live = mapping[body.guard.operands[0]]
        scf.yield_(_guarded(live, early_inner, body, mapping, ids) + [live])
    with ir.InsertionPoint(outer.else_block):
        scf.yield_([_filler(v.type, ids["grid_dim"]) for v in body.crossing]
                   + [arith.constant(i1, 0)])
    results = list(outer.results)
    return results[:-1], results[-1]


def _guarded(live: ir.Value, ops: list[ir.Operation], body: Shape, mapping: dict,
             ids: dict) -> list[ir.Value]:
    """``scf.if live`` running the clones of ``ops``: the crossing values, fillers when not
    ``live``."""
    guarded = scf.IfOp(live, [v.type for v in body.crossing], has_else=True)
    with ir.InsertionPoint(guarded.then_block):
        for op in ops:
            _clone(op, mapping, ids)
        scf.yield_([mapping[v] for v in body.crossing])
    with ir.InsertionPoint(guarded.else_block):
        scf.yield_([_filler(v.type, ids["grid_dim"]) for v in body.crossing])
    return list(guarded.results)


#: Ops whose result for a virtual block that does not exist is harmless to compute: not
#: loads, and not divisions or remainders (LLVM's integer division by zero is undefined).
_NOT_SPECULATABLE = ("div", "rem")


def _speculatable(op: ir.Operation) -> bool:
    name = op.name.split(".", 1)[1]
    return op.name not in _LOADS and not any(w in name for w in _NOT_SPECULATABLE)


def _clone(op: ir.Operation, mapping: dict, ids: dict) -> None:
    """Clone ``op`` at the current insertion point with its operands through ``mapping``
    (which then maps its results to the clone's); ``gpu.block_id x`` and ``gpu.grid_dim x``
    map to ``ids``' values instead of being cloned."""
    if op.name in ("gpu.block_id", "gpu.grid_dim") and \
            str(op.attributes["dimension"]) == "#gpu<dim x>":
        mapping[op.results[0]] = ids[op.name[4:]]
        return
    new = op.clone()
    for i, value in enumerate(op.operands):
        new.operands[i] = mapping[value]
    for old, result in zip(op.results, new.results):
        mapping[old] = result


#: Ops whose regions may hold the launch's choice: scf-to-cf, which runs next, turns
#: them and the choice (an ``scf.if``) into blocks of the enclosing function.
_STRUCTURED = {"scf.for", "scf.if", "scf.while", "scf.execute_region", "scf.index_switch",
               "scf.parallel"}


def _may_choose(launch: ir.Operation, min_threads: int) -> bool:
    """Whether ``launch`` can become a choice (see :func:`coarsen`)."""
    sizes = ir.DenseI32ArrayAttr(launch.attributes["operandSegmentSizes"])
    if any(sizes[i] for i in (7, 8, 9)) or sizes[0] or len(launch.results):
        return False        # a cluster, or async: the choice would pass tokens between blocks
    view = launch.opview
    grid, block = _constant(view.gridSizeX), _constant(view.blockSizeX)
    if grid is not None and block is not None and grid * block < min_threads:
        return False
    parent = launch.parent
    while parent.name in _STRUCTURED:
        parent = parent.parent
    return parent.name == "func.func"


def _constant(value: ir.Value) -> int | None:
    """The value of an ``arith.constant`` index or integer, else None."""
    owner = value.owner
    if isinstance(owner, ir.Block) or owner.name != "arith.constant":
        return None
    attr = owner.attributes["value"]
    return ir.IntegerAttr(attr).value if isinstance(attr, ir.IntegerAttr) else None


def _choose_at_launch(launch: ir.Operation, gmod: str, copy: ir.Operation,
                      min_threads: int) -> None:
    """Replace ``launch`` by ``scf.if`` (large enough) {launch of ``copy``} else {``launch``}."""
    view = launch.opview
    grid_x, block_x = view.gridSizeX, view.blockSizeX
    index = grid_x.type
    with launch.context, launch.location, ir.InsertionPoint(launch):
        threads = arith.muli(grid_x, block_x)
        large = arith.andi(
            arith.cmpi(arith.CmpIPredicate.uge, threads, arith.constant(index, min_threads)),
            arith.cmpi(arith.CmpIPredicate.ule, grid_x, arith.constant(index, MAX_GRID_X)))
        choice = scf.IfOp(large, has_else=True)    # no results: async launches stay as written
        with ir.InsertionPoint(choice.then_block):
            grid = arith.ceildivui(grid_x, arith.constant(index, FACTOR))
            _launch_of(launch, gmod, sym_name(copy), grid, grid_x)
            scf.yield_([])
        with ir.InsertionPoint(choice.else_block):
            launch.clone()
            scf.yield_([])
    launch.erase()


def _launch_of(launch: ir.Operation, gmod: str, kernel: str, grid: ir.Value,
               grid_x: ir.Value) -> ir.Operation:
    """``launch`` of ``@gmod::@kernel`` over ``grid`` blocks along x, with ``grid_x`` after
    its kernel operands. The operand segments of ``gpu.launch_func`` (its ODS definition):
    async dependencies, grid x/y/z, block x/y/z, cluster x/y/z, dynamic shared memory size,
    kernel operands, async object."""
    sizes = list(ir.DenseI32ArrayAttr(launch.attributes["operandSegmentSizes"]))
    operands = list(launch.operands)
    kernel_end = sum(sizes[:12])                 # the end of the kernel operands
    operands[sizes[0]] = grid                    # grid x, after the async dependencies
    operands.insert(kernel_end, grid_x)
    sizes[11] += 1
    attributes = {name: launch.attributes[name] for name in launch.attributes}
    attributes["kernel"] = ir.SymbolRefAttr.get([gmod, kernel])
    attributes["operandSegmentSizes"] = ir.DenseI32ArrayAttr.get(sizes)
    return ir.Operation.create("gpu.launch_func", operands=operands, attributes=attributes)
