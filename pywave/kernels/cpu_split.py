"""Stage ``kernels``, CPU: a kernel as loops over its block's threads, split at its barriers.

A GPU thread run as a fiber costs a context switch at every ``gpu.barrier``; a kernel whose
barriers sit in control flow every thread of the block takes alike needs none. This module
rewrites such a kernel (after :func:`pywave.kernels.cpu` step 2, whose ABI calls it reads)
into a function that runs a whole block, as Polygeist and POCL do:

- the kernel body is cut at each barrier into *segments*; each segment becomes a loop nest
  over the block's threads (``z``, ``y``, ``x``, x fastest), in which the thread-id queries
  are the loops' induction variables. One segment running every thread before the next
  begins is the barrier: no thread passes it before all reached it.
- ``scf.for``, ``scf.if`` and ``scf.while`` ops holding barriers stay outside the thread
  loops (every thread takes them alike) and their bodies are cut in turn; their operands and
  yielded values must be *uniform*.
- *Uniform* values are the same for every thread of the block: the kernel's arguments and
  workgroup memory, the block, grid and block-dimension queries, the induction variables and
  iteration values of those control ops, and what pure ops (:data:`PURE`) compute from uniform
  values only. Uniform ops run once per block, outside the thread loops.
- A value a segment computes and a later segment uses is recomputed there when a chain of
  pure ops on uniform values and thread ids makes it (a rematerialisation), else kept per
  thread: stored after its definition into the thread's row of a stack array (one per element
  type, ``threads x values``, sized by the launch's block: a thread's values side by side) and
  loaded at the start of each later loop that uses it. More than :data:`SPILL_BYTES` of such
  values per thread keep the fibers (the arrays would outgrow the stack of the host thread
  running the block, where each fiber has its own).
- A static ``memref.alloca`` at a segment's top level (private memory no later segment
  sees) is made once per block: threads of a segment run one after another, so each has it
  alone while it runs. Other allocations in a segment are freed at the end of each thread's
  run of it (``llvm.intr.stacksave``/``stackrestore`` around it).

Threads of a segment run in thread order, as the fibers run them between two barriers: a
program's results are those of the fiber mode, which is the reference, unless they depend
on how threads interleave where no barrier runs (atomics' old values, printf order, races):
a control op holding barriers cuts the thread loops also where it runs none (an scf.if
branch or a loop of zero trips without a barrier), where the fibers run on. A kernel outside these rules keeps the
fibers (:func:`split_kernels` says which were split): barriers in unstructured control flow
or in a loop whose bounds a thread computes for itself (a barrier only some threads reach is
undefined behaviour on a GPU; the fibers name it), lane exchanges (``gpu.shuffle``,
``gpu.subgroup_reduce``, ``gpu.all_reduce``), ``cf.assert`` (only a fiber can be stopped
alone), private attributions with a barrier, a per-thread memref or value of another type
living across a barrier, and modules whose non-kernel functions query thread ids or wait at
barriers.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from mlir import ir
from mlir.dialects import arith, func, llvm, memref, scf

from ..mlirutil import find_ops, next_op
from .cpu_abi import PREFIX

log = logging.getLogger("pywave.kernels.cpu_split")

#: Bytes of values a thread keeps across barriers at most (1024 threads times this on
#: the stack of the host thread running a block: 1 MiB of its 8 MiB).
SPILL_BYTES = 1024
#: Queries whose value is the block's own (the same for every thread of it).
UNIFORM_QUERIES = frozenset(f"{PREFIX}{q}_{d}" for q in ("block_id", "block_dim", "grid_dim",
                                                           "cluster_dim_blocks")
                            for d in "xyz")
#: Thread-id queries -> the thread loop they read (0: x, 1: y, 2: z).
THREAD_QUERIES = {f"{PREFIX}thread_id_{d}": i for i, d in enumerate("xyz")}
BARRIER = f"{PREFIX}barrier"
#: Ops without memory effects or regions (MLIR's Pure trait, by name): run once when their
#: operands are uniform, recomputed where a later segment needs them.
PURE_DIALECTS = frozenset({"arith", "index", "math", "complex"})
PURE = frozenset({
    "affine.apply", "affine.min", "affine.max",
    "memref.dim", "memref.rank", "memref.subview", "memref.cast", "memref.reinterpret_cast",
    "memref.view", "memref.expand_shape", "memref.collapse_shape", "memref.get_global",
    "memref.extract_strided_metadata", "memref.extract_aligned_pointer_as_index",
    "memref.memory_space_cast", "gpu.dynamic_shared_memory",
    "vector.broadcast", "vector.splat", "vector.extract", "vector.insert",
    "vector.extractelement", "vector.insertelement", "vector.shuffle", "vector.bitcast",
    "vector.shape_cast", "vector.fma", "vector.reduction", "vector.step",
    "vector.from_elements", "vector.constant_mask", "vector.create_mask",
    "llvm.mlir.constant", "llvm.mlir.addressof", "llvm.mlir.zero", "llvm.mlir.undef",
    "llvm.mlir.poison", "ub.poison", "builtin.unrealized_conversion_cast"})
#: Control ops a barrier may sit in.
CONTROL = frozenset({"scf.for", "scf.if", "scf.while"})
#: Depth of a rematerialised chain of pure ops.
REMAT_DEPTH = 8


class NotSplit(Exception):
    """The kernel keeps its fibers (the message says why, logged at debug level)."""


def split_kernels(gmod: ir.Operation) -> set[str]:
    """Rewrite every kernel of ``gmod`` (a ``gpu.module`` after cpu.py's step 2) that the
    module docstring's rules allow into thread loops; returns the names of those kernels
    (their image entry runs a whole block in one call). The others are left unchanged."""
    body = gmod.regions[0].blocks[0]
    kernels, others = [], []
    for op in body.operations:
        op = op.operation
        if op.name == "gpu.func" and "gpu.kernel" in op.attributes:
            kernels.append(op)
        elif op.regions:
            others.append(op)
    for op in others:      # a device function waiting or asking its thread: fibers for all
        if _calls(op, lambda callee: callee == BARRIER or callee in THREAD_QUERIES
                  or callee.startswith(PREFIX + ("publish", "read", "exchange"))):
            log.debug("gpu.module: a device function queries thread ids or waits: no split")
            return set()
    done = set()
    for kernel in kernels:
        name = ir.StringAttr(kernel.attributes["sym_name"]).value
        try:
            _Splitter(kernel).run()
        except NotSplit as why:
            log.debug("kernel %s runs as fibers: %s", name, why)
            continue
        done.add(name)
    return done


def _callee(op: ir.Operation) -> str | None:
    if op.name != "func.call":
        return None
    return ir.FlatSymbolRefAttr(op.attributes["callee"]).value


def _calls(root: ir.Operation, pred) -> bool:
    """Whether ``root`` or an op in it calls a function whose name ``pred`` accepts."""
    return _finds(root, lambda op: (callee := _callee(op)) is not None and pred(callee))


def _is_barrier(op: ir.Operation) -> bool:
    return _callee(op) == BARRIER


def _holds_barrier(op: ir.Operation) -> bool:
    return _calls(op, lambda callee: callee == BARRIER)


def _pure(op: ir.Operation) -> bool:
    if op.regions:
        return False
    name = op.name
    return (name in PURE or name.split(".", 1)[0] in PURE_DIALECTS
            or _callee(op) in UNIFORM_QUERIES)


#: Discardable attributes marking ops while a kernel is rewritten (removed after): Python's
#: handles of MLIR ops and values are not stable dictionary keys once ops move, these are.
SEGMENT_TAG, UNIFORM_TAG = "wavert.segment_op", "wavert.uniform_op"


@dataclass
class _Loop:
    """One segment's thread-loop nest (z, y, x scf.for ops)."""
    op: ir.Operation        # the outermost scf.for (z)
    ivs: tuple              # the x, y, z induction variables: the thread id
    linear: ir.Value        # x + dx * (y + dy * z)
    anchor: ir.Operation    # values carried into the loop are made before it, in order
    remade: dict = field(default_factory=dict)   # value key -> its value in this loop


class _Splitter:
    """The rewrite of one kernel (:func:`split_kernels`): :meth:`run` classifies every op,
    plans the values that cross a barrier, then rewrites (NotSplit before any change but
    the tags, which are removed either way). Segment ops carry :data:`SEGMENT_TAG` (their
    number in :attr:`ops`), uniform and control ops :data:`UNIFORM_TAG`; a value's key is
    (its op's number, its result number)."""

    def __init__(self, kernel: ir.Operation):
        self.kernel = kernel
        self.ops: list[ir.Operation] = []      # segment ops by number
        self.segment: list[int] = []           # segment of each segment op
        self.segments: list[list[ir.Operation]] = []
        self.barriers: list[ir.Operation] = []
        self.crossings: dict = {}              # (value key, user segment) -> (value, plan)
        self.loops: list[_Loop | None] = []
        self.spills: dict = {}                 # value key -> (its array, its column)
        self.stored: set = set()

    def run(self) -> None:
        try:
            self._analyse()
            self._rewrite(self.kernel.regions[0].blocks[0])
        finally:
            _untag(self.kernel)

    def _analyse(self) -> None:
        region = self.kernel.regions[0]
        if len(region.blocks) != 1:
            raise NotSplit("its body has more than one block (unstructured control flow)")
        entry = region.blocks[0]
        if _calls(self.kernel, lambda c: c.startswith(PREFIX) and c not in UNIFORM_QUERIES
                  and c not in THREAD_QUERIES and c != BARRIER):
            raise NotSplit("its lanes exchange values")
        if _finds(self.kernel, lambda op: op.name in ("llvm.alloca", "cf.assert")):
            raise NotSplit("it holds llvm.alloca or cf.assert")
        attrs = self.kernel.attributes
        nargs = len(ir.FunctionType(ir.TypeAttr(attrs["function_type"]).value).inputs)
        workgroup = (ir.IntegerAttr(attrs["workgroup_attributions"]).value
                     if "workgroup_attributions" in attrs else 0)
        if len(entry.arguments) > nargs + workgroup and _holds_barrier(self.kernel):
            raise NotSplit("it has private attributions and a barrier")
        self._classify(entry)
        self._plan_crossings()
        self._check_spills()

    # -- keys -------------------------------------------------------------------------
    def _number(self, op: ir.Operation) -> int | None:
        """A segment op's number (None: not a segment op)."""
        if SEGMENT_TAG not in op.attributes:
            return None
        return ir.IntegerAttr(op.attributes[SEGMENT_TAG]).value

    def _key(self, value: ir.Value) -> tuple[int, int] | None:
        """(op number, result number) of a segment op's result, else None."""
        if isinstance(value, ir.BlockArgument):
            return None
        number = self._number(value.owner.operation)
        return None if number is None else (number, value.result_number)

    @staticmethod
    def _uniform(value: ir.Value) -> bool:
        """Uniform: a block argument a top-level op sees (the kernel's, or a control op's
        region's: classification visits no other block), or a uniform or control op's
        result."""
        return isinstance(value, ir.BlockArgument) or \
            UNIFORM_TAG in value.owner.operation.attributes

    # -- analysis ---------------------------------------------------------------------
    def _classify(self, block: ir.Block) -> None:
        """Sort the ops of ``block`` into uniform, control, barrier and segment ops (one
        segment: the per-thread ops between two barriers or control ops)."""
        ops = [op.operation for op in block.operations]
        current: list[ir.Operation] | None = None
        for op in ops[:-1]:
            if _is_barrier(op):
                self.barriers.append(op)
                current = None
            elif op.name in CONTROL and _holds_barrier(op):
                self._classify_control(op)
                current = None
            elif _pure(op) and all(self._uniform(v) for v in op.operands):
                op.attributes[UNIFORM_TAG] = ir.UnitAttr.get()
            else:
                if op.regions and _holds_barrier(op):
                    raise NotSplit(f"a barrier sits in {op.name}")
                if current is None:
                    current = []
                    self.segments.append(current)
                current.append(op)
                op.attributes[SEGMENT_TAG] = ir.IntegerAttr.get(
                    ir.IntegerType.get_signless(64), len(self.ops))
                self.ops.append(op)
                self.segment.append(len(self.segments) - 1)
        owner = block.owner.operation
        if owner != self.kernel and not all(self._uniform(v) for v in ops[-1].operands):
            raise NotSplit(f"{owner.name} holding a barrier yields a per-thread value")

    def _classify_control(self, op: ir.Operation) -> None:
        operands = [op.operands[0]] if op.name == "scf.if" else list(op.operands)
        if not all(self._uniform(v) for v in operands):
            raise NotSplit(f"{op.name} holding a barrier takes a per-thread operand (a barrier "
                           "some threads may not reach)")
        regions = list(op.regions)
        if op.name == "scf.while":     # the condition: computed once, from uniform values
            for inner in regions.pop(0).blocks[0].operations:
                inner = inner.operation
                if inner.name != "scf.condition" and not _pure(inner):
                    raise NotSplit(f"scf.while holding a barrier computes its condition "
                                   f"with {inner.name}")
                if not all(self._uniform(v) for v in inner.operands):
                    raise NotSplit("scf.while holding a barrier has a per-thread condition")
                inner.attributes[UNIFORM_TAG] = ir.UnitAttr.get()
        for region in regions:
            for block in region.blocks:
                self._classify(block)
        op.attributes[UNIFORM_TAG] = ir.UnitAttr.get()    # its results: checked yields

    def _plan_crossings(self) -> None:
        """Plan every per-thread value that a later segment uses: "remat" (recomputed there)
        or "spill" (a per-thread array); NotSplit for one neither way can carry."""
        found = []       # (value, segment of a use); not planned in the walk's callback,
        for number, ops in enumerate(self.segments):     # which cannot raise NotSplit
            for top in ops:
                def visit(op, number=number):
                    for value in op.operands:
                        key = self._key(value)
                        if key is not None and self.segment[key[0]] != number:
                            found.append((key, value, number))
                    return ir.WalkResult.ADVANCE
                top.walk(visit)
        for key, value, number in found:
            if (key, number) not in self.crossings:
                self.crossings[(key, number)] = (value, self._plan(value))

    def _check_spills(self) -> None:
        """NotSplit when a thread keeps more than :data:`SPILL_BYTES` across barriers."""
        total = sum(_bytes(_stored_type(value.type)) for key, value in
                    {key: value for (key, _), (value, plan) in self.crossings.items()
                     if plan == "spill"}.items())
        if total > SPILL_BYTES:
            raise NotSplit(f"a thread keeps {total} bytes of values across barriers (more "
                           f"than {SPILL_BYTES})")

    def _plan(self, value: ir.Value) -> str:
        if self._remat_ok(value, REMAT_DEPTH):
            return "remat"
        if isinstance(value.type, (ir.IntegerType, ir.IndexType, ir.FloatType, ir.VectorType)):
            return "spill"
        raise NotSplit(f"a per-thread value of type {value.type} lives across a barrier")

    def _remat_ok(self, value: ir.Value, depth: int) -> bool:
        if self._uniform(value):
            return True
        if depth == 0:
            return False
        op = value.owner.operation
        if _callee(op) in THREAD_QUERIES:
            return True
        return _pure(op) and all(self._remat_ok(v, depth - 1) for v in op.operands)

    # -- rewrite ----------------------------------------------------------------------
    def _rewrite(self, entry: ir.Block) -> None:
        with self.kernel.context, self.kernel.location:
            index = ir.IndexType.get()
            _declare_queries(self.kernel.parent, index)
            with ir.InsertionPoint.at_block_begin(entry):
                self.c0 = arith.ConstantOp(index, 0).result
                self.c1 = arith.ConstantOp(index, 1).result
                self.dims = [func.CallOp([index], f"{PREFIX}block_dim_{d}", []).result
                             for d in "xyz"]
                columns: dict = {}          # stored type -> value keys, in order
                for (key, _), (value, plan) in self.crossings.items():
                    if plan == "spill":
                        keys = columns.setdefault(str(_stored_type(value.type)), [])
                        if key not in keys:
                            keys.append(key)
                            self.spills[key] = (_stored_type(value.type), len(keys) - 1)
                threads = arith.MulIOp(arith.MulIOp(self.dims[0], self.dims[1]).result,
                                       self.dims[2]).result
                arrays = {}
                for kind, keys in columns.items():
                    element = self.spills[keys[0]][0]
                    arrays[kind] = memref.AllocaOp(
                        ir.MemRefType.get([ir.ShapedType.get_dynamic_size(), len(keys)],
                                          element), [threads], []).result
                for key, (element, column) in list(self.spills.items()):
                    self.spills[key] = (arrays[str(element)],
                                        arith.ConstantOp(index, column).result)
            start = entry.operations[0].operation
            for ops in self.segments:
                for op in [op for op in ops if op.name == "memref.alloca" and
                           not list(op.operands)]:
                    op.move_before(start)        # private memory made once per block
                    ops.remove(op)
            self.loops = [self._loop(ops) for ops in self.segments]
            self._carry()
            for loop in self.loops:
                if loop is not None:
                    self._thread_ids(loop)
            for op in self.barriers:
                op.erase()

    def _loop(self, ops: list[ir.Operation]) -> _Loop | None:
        """The thread-loop nest of one segment, placed after its last op, the segment's ops
        moved into it (between a stack save and restore when they allocate)."""
        if not ops:
            return None
        with ir.InsertionPoint(next_op(ops[-1])):
            outer = scf.ForOp(self.c0, self.dims[2], self.c1)
        with ir.InsertionPoint(outer.body):
            middle = scf.ForOp(self.c0, self.dims[1], self.c1)
            scf.YieldOp([])
        with ir.InsertionPoint(middle.body):
            inner = scf.ForOp(self.c0, self.dims[0], self.c1)
            scf.YieldOp([])
        x, y, z = inner.induction_variable, middle.induction_variable, outer.induction_variable
        with ir.InsertionPoint(inner.body):
            yz = arith.AddIOp(y, arith.MulIOp(self.dims[1], z).result).result
            linear = arith.AddIOp(x, arith.MulIOp(self.dims[0], yz).result).result
            end = scf.YieldOp([]).operation
        if any(_finds(op, lambda o: o.name == "memref.alloca") for op in ops):
            # Each thread's allocations freed at its end: the stack saved and restored
            # around the segment (not memref.alloca_scope, whose single block the scf
            # ops inside it break when convert-scf-to-cf runs first).
            with ir.InsertionPoint(end):
                save = llvm.StackSaveOp(ir.Type.parse("!llvm.ptr"))
                end = llvm.StackRestoreOp(save.result).operation
            anchor = save.operation
        else:
            anchor = ops[0]
        for op in ops:
            op.move_before(end)
        return _Loop(outer.operation, (x, y, z), linear, anchor)

    def _carry(self) -> None:
        """Each crossing value into the loop that uses it: recomputed or stored and loaded."""
        for (key, number), (value, plan) in self.crossings.items():
            loop = self.loops[number]
            if plan == "remat":
                new = self._remat(value, loop)
            else:
                self._store(key, value)
                with ir.InsertionPoint(loop.anchor):
                    array, column = self.spills[key]
                    new = memref.LoadOp(array, [loop.linear, column]).result
                    if new.type != value.type:
                        new = arith.TruncIOp(value.type, new).result
            for use in list(value.uses):
                owner = use.owner
                owner = getattr(owner, "operation", owner)
                if _inside(owner, loop.op):
                    owner.operands[use.operand_number] = new

    def _store(self, key: tuple[int, int], value: ir.Value) -> None:
        """value into its per-thread array, right after its definition (once)."""
        if key in self.stored:
            return
        self.stored.add(key)
        home = self.loops[self.segment[key[0]]]
        with ir.InsertionPoint(next_op(value.owner.operation)):
            kind = _stored_type(value.type)
            if kind != value.type:
                value = arith.ExtUIOp(kind, value).result
            array, column = self.spills[key]
            memref.StoreOp(value, array, [home.linear, column])

    def _remat(self, value: ir.Value, loop: _Loop) -> ir.Value:
        """value recomputed in ``loop`` (its chain of pure ops cloned before the anchor)."""
        key = self._key(value)
        if key is None:            # uniform
            return value
        if key not in loop.remade:
            op = value.owner.operation
            operands = [self._remat(v, loop) for v in op.operands]
            with ir.InsertionPoint(loop.anchor):
                clone = op.clone()
            for i, v in enumerate(operands):
                clone.operands[i] = v
            for i in range(len(op.results)):
                loop.remade[(key[0], i)] = clone.results[i]
        return loop.remade[key]

    def _thread_ids(self, loop: _Loop) -> None:
        """The thread-id queries in ``loop``: its induction variables."""
        for op in find_ops(loop.op, lambda o: _callee(o) in THREAD_QUERIES):
            op.results[0].replace_all_uses_with(loop.ivs[THREAD_QUERIES[_callee(op)]])
            op.erase()


def _stored_type(kind: ir.Type) -> ir.Type:
    """The element type of a per-thread array of values of type ``kind``: ``kind``, or for
    integers (and vectors of them) of a width not a multiple of 8, such as i1, the next
    multiple of 8 (the memref lowering stores no sub-byte elements: it aborts on them)."""
    vector = ir.VectorType(kind) if isinstance(kind, ir.VectorType) else None
    element = vector.element_type if vector is not None else kind
    if not isinstance(element, ir.IntegerType) or element.width % 8 == 0:
        return kind
    wide = ir.IntegerType.get_signless((element.width + 7) // 8 * 8)
    return ir.VectorType.get(vector.shape, wide) if vector is not None else wide


def _bytes(kind: ir.Type) -> int:
    """Bytes of a value of type ``kind`` (an integer, index, float or vector of them)."""
    if isinstance(kind, ir.VectorType):
        vector = ir.VectorType(kind)
        count = 1
        for n in vector.shape:
            count *= n
        return count * _bytes(vector.element_type)
    if isinstance(kind, ir.IndexType):
        return 8
    width = ir.IntegerType(kind).width if isinstance(kind, ir.IntegerType) else \
        ir.FloatType(kind).width
    return (width + 7) // 8


def _untag(kernel: ir.Operation) -> None:
    """Remove :data:`SEGMENT_TAG` and :data:`UNIFORM_TAG` from every op of ``kernel``."""
    for op in find_ops(kernel, lambda o: SEGMENT_TAG in o.attributes
                       or UNIFORM_TAG in o.attributes):
        for tag in (SEGMENT_TAG, UNIFORM_TAG):
            if tag in op.attributes:
                del op.attributes[tag]


def _declare_queries(gmod: ir.Operation, index: ir.Type) -> None:
    """Declarations of the block-dimension queries the thread loops call (cpu.py defines
    them in the image's ABI), where step 2 declared none."""
    body = gmod.regions[0].blocks[0]
    have = {ir.StringAttr(op.operation.attributes["sym_name"]).value
            for op in body.operations if "sym_name" in op.operation.attributes}
    with ir.InsertionPoint.at_block_begin(body):
        for d in "xyz":
            symbol = f"{PREFIX}block_dim_{d}"
            if symbol not in have:
                f = func.FuncOp(symbol, ir.FunctionType.get([], [index]))
                f.sym_visibility = ir.StringAttr.get("private")


def _finds(root: ir.Operation, pred) -> bool:
    found = False

    def visit(op):
        nonlocal found
        if pred(op):
            found = True
            return ir.WalkResult.INTERRUPT
        return ir.WalkResult.ADVANCE
    root.walk(visit)
    return found


def _inside(op: ir.Operation, ancestor: ir.Operation) -> bool:
    while op is not None:
        if op == ancestor:
            return True
        op = op.parent
    return False
