"""Stage ``kernels``, CPU: lane exchanges into calls of the CPU image's publish/read ABI.

:class:`LaneOps` rewrites a ``gpu.module``'s ``gpu.shuffle``, ``gpu.subgroup_reduce`` and
``gpu.all_reduce`` (step 2 of :mod:`pywave.kernels.cpu`; their semantics on the CPU device
are its docstring's "Subgroups"): a thread publishes a 64-bit value for its warp or block and
waits until every live thread of it has published (``__wavert_cpu_publish_warp`` /
``_block``), then reads any thread's published value (``__wavert_cpu_read_warp`` /
``_block``, ``__wavert_cpu_exchange_warp`` for a shuffle: both at once). Values are
exchanged as 64-bit patterns: integers and index zero-extended, floats bitcast first.
"""

from __future__ import annotations

from mlir import ir
from mlir.dialects import arith, func, gpu, scf

from ..errors import CompileError
from ..mlirutil import at_line, find_ops
from .cpu_abi import PREFIX, SUBGROUP_SIZE

#: gpu.all_reduce / gpu.subgroup_reduce operation -> (arith op for integers, for floats).
COMBINE = {
    "add": ("addi", "addf"), "mul": ("muli", "mulf"), "minui": ("minui", None),
    "minsi": ("minsi", None), "maxui": ("maxui", None), "maxsi": ("maxsi", None),
    "minnumf": (None, "minnumf"), "maxnumf": (None, "maxnumf"),
    "minimumf": (None, "minimumf"), "maximumf": (None, "maximumf"),
    "and": ("andi", None), "or": ("ori", None), "xor": ("xori", None)}
LANE_OPS = ("gpu.shuffle", "gpu.subgroup_reduce", "gpu.all_reduce")


class LaneOps:
    """The rewrite of one ``gpu.module`` (``name`` for messages): :meth:`rewrite`.
    CompileError for a value that is not a scalar integer, index or float of at most 64 bits,
    and for a reduction operation undefined on its type."""

    def __init__(self, gmod: ir.Operation, name: str):
        self.gmod, self.name = gmod, name
        self.body = gmod.regions[0].blocks[0]
        self.declared: set[str] = set()
        self.combiners = 0

    def rewrite(self) -> None:
        with self.gmod.context, self.gmod.location:
            self.i32 = ir.IntegerType.get_signless(32)
            self.i64 = ir.IntegerType.get_signless(64)
            self.index = ir.IndexType.get()
            for op in find_ops(self.gmod, lambda o: o.name in LANE_OPS):
                with ir.InsertionPoint(op), op.location:
                    self._check_type(op, op.operands[0].type)
                    if op.name == "gpu.shuffle":
                        self._shuffle(op)
                        continue
                    if op.name == "gpu.all_reduce":
                        result = self._all_reduce(op)
                    else:
                        result = self._subgroup_reduce(op)
                op.results[0].replace_all_uses_with(result)
                op.erase()

    # -- helpers ------------------------------------------------------------------------
    def _call(self, symbol: str, args: list, results: list) -> list:
        if symbol not in self.declared:
            self.declared.add(symbol)
            with ir.InsertionPoint.at_block_begin(self.body):
                f = func.FuncOp(symbol, ir.FunctionType.get([a.type for a in args], results))
                f.sym_visibility = ir.StringAttr.get("private")
        return list(func.CallOp(results, symbol, args).results)

    def _const(self, ty: ir.Type, value: int) -> ir.Value:
        return arith.ConstantOp(ty, value).result

    def _check_type(self, op: ir.Operation, ty: ir.Type) -> None:
        scalar = isinstance(ty, ir.IndexType) or (
            isinstance(ty, ir.IntegerType) and ir.IntegerType(ty).width <= 64) or (
            isinstance(ty, ir.FloatType) and ir.FloatType(ty).width <= 64)
        if not scalar:
            raise CompileError(f"gpu.module @{self.name}: {op.name}{at_line(op)} on {ty}: "
                               "the CPU target exchanges scalar integers, index and floats of "
                               "at most 64 bits")

    def _to_bits(self, v: ir.Value) -> ir.Value:
        ty = v.type
        if isinstance(ty, ir.IndexType):
            return arith.IndexCastOp(self.i64, v).result
        if isinstance(ty, ir.FloatType):
            v = arith.BitcastOp(ir.IntegerType.get_signless(ir.FloatType(ty).width), v).result
        if ir.IntegerType(v.type).width < 64:
            v = arith.ExtUIOp(self.i64, v).result
        return v

    def _from_bits(self, bits: ir.Value, ty: ir.Type) -> ir.Value:
        if isinstance(ty, ir.IndexType):
            return arith.IndexCastOp(self.index, bits).result
        width = ir.FloatType(ty).width if isinstance(ty, ir.FloatType) \
            else ir.IntegerType(ty).width
        if width < 64:
            bits = arith.TruncIOp(ir.IntegerType.get_signless(width), bits).result
        return arith.BitcastOp(ty, bits).result if isinstance(ty, ir.FloatType) else bits

    def _read(self, scope: str, which: ir.Value, ty: ir.Type) -> ir.Value:
        """Thread ``which`` (index, of the warp or block) 's published value, as ``ty``."""
        k = arith.IndexCastOp(self.i64, which).result
        return self._from_bits(self._call(f"{PREFIX}read_{scope}", [k], [self.i64])[0], ty)

    @staticmethod
    def _linear_and_count() -> tuple[ir.Value, ir.Value]:
        """The thread's linear id in its block and the block's thread count."""
        tx, ty_, tz = (gpu.ThreadIdOp(getattr(gpu.Dimension, d)).result for d in "xyz")
        bx, by, bz = (gpu.BlockDimOp(getattr(gpu.Dimension, d)).result for d in "xyz")
        inner = arith.AddIOp(ty_, arith.MulIOp(by, tz).result).result
        linear = arith.AddIOp(tx, arith.MulIOp(bx, inner).result).result
        count = arith.MulIOp(arith.MulIOp(bx, by).result, bz).result
        return linear, count

    def _combiner(self, op: ir.Operation, ty: ir.Type):
        """A function (lhs, rhs) -> value combining two values of ``ty`` as ``op`` says: its
        ``op`` attribute, or its region (which becomes a private function called per step)."""
        if "op" in op.attributes:
            kind = str(op.attributes["op"]).split()[-1].rstrip(">")
            names = COMBINE.get(kind)
            which = names and names[1 if isinstance(ty, ir.FloatType) else 0]
            if not which:
                raise CompileError(f"gpu.module @{self.name}: {op.name}{at_line(op)}: "
                                   f"reduction '{kind}' on {ty} is not defined")
            opname = "arith." + which
            return lambda a, b: ir.Operation.create(opname, results=[ty],
                                                    operands=[a, b]).result
        block = op.regions[0].blocks[0]
        self.combiners += 1
        fname = f"{PREFIX}combine_{self.combiners}"
        with ir.InsertionPoint.at_block_begin(self.body):
            f = func.FuncOp(fname, ir.FunctionType.get([ty, ty], [ty]))
            f.sym_visibility = ir.StringAttr.get("private")
            entry = f.add_entry_block()
        block.arguments[0].replace_all_uses_with(entry.arguments[0])
        block.arguments[1].replace_all_uses_with(entry.arguments[1])
        yielded = None
        for inner in list(block.operations):
            if inner.operation.name == "gpu.yield":
                yielded = inner.operation
            else:
                _append(inner.operation, entry)
        with ir.InsertionPoint(entry), yielded.location:
            func.ReturnOp(list(yielded.operands))
        yielded.erase()
        return lambda a, b: func.CallOp([ty], fname, [a, b]).results[0]

    # -- the ops ------------------------------------------------------------------------
    def _all_reduce(self, op: ir.Operation) -> ir.Value:
        """Every thread's value combined in linear thread order (a block exchange)."""
        value = op.operands[0]
        ty = value.type
        combine = self._combiner(op, ty)
        _, count = self._linear_and_count()
        one = self._const(self.index, 1)
        self._call(PREFIX + "publish_block", [self._to_bits(value)], [])
        first = self._read("block", self._const(self.index, 0), ty)
        loop = scf.ForOp(one, count, one, [first])
        with ir.InsertionPoint(loop.body):
            got = self._read("block", loop.induction_variable, ty)
            scf.YieldOp([combine(loop.inner_iter_args[0], got)])
        return loop.results[0]

    def _subgroup_reduce(self, op: ir.Operation) -> ir.Value:
        """The cluster's lanes that are threads of the block, combined in lane order."""
        value = op.operands[0]
        ty = value.type
        combine = self._combiner(op, ty)
        linear, count = self._linear_and_count()
        size = int(ir.IntegerAttr(op.attributes["cluster_size"]).value) \
            if "cluster_size" in op.attributes else SUBGROUP_SIZE
        stride = int(ir.IntegerAttr(op.attributes["cluster_stride"]).value) \
            if "cluster_stride" in op.attributes else 1
        index = self.index
        self._call(PREFIX + "publish_warp", [self._to_bits(value)], [])
        lane = arith.RemUIOp(linear, self._const(index, SUBGROUP_SIZE)).result
        warp_base = arith.SubIOp(linear, lane).result
        base = arith.AddIOp(
            arith.SubIOp(lane, arith.RemUIOp(lane, self._const(index, size * stride)).result)
            .result, arith.RemUIOp(lane, self._const(index, stride)).result).result
        first = self._read("warp", base, ty)
        one = self._const(index, 1)
        loop = scf.ForOp(one, self._const(index, size), one, [first])
        with ir.InsertionPoint(loop.body):
            member = arith.AddIOp(base, arith.MulIOp(
                loop.induction_variable, self._const(index, stride)).result).result
            exists = arith.CmpIOp(arith.CmpIPredicate.ult,
                                  arith.AddIOp(warp_base, member).result, count).result
            got = self._read("warp", member, ty)
            acc = loop.inner_iter_args[0]
            scf.YieldOp([arith.SelectOp(exists, combine(acc, got), acc).result])
        return loop.results[0]

    def _shuffle(self, op: ir.Operation) -> None:
        """One ``gpu.shuffle``: its result and valid flag replaced, the op erased."""
        value = op.operands[0]
        i32, i64, ult = self.i32, self.i64, arith.CmpIPredicate.ult
        mode = str(op.attributes["mode"]).split()[-1].rstrip(">")
        offset = arith.AndIOp(op.operands[1], self._const(i32, SUBGROUP_SIZE - 1)).result
        width = op.operands[2]
        lane = arith.IndexCastOp(i32, gpu.LaneIdOp().result).result
        if mode == "xor":
            source = arith.XOrIOp(lane, offset).result
        elif mode == "down":
            source = arith.AddIOp(lane, offset).result
        elif mode == "up":
            source = arith.SubIOp(lane, offset).result
        else:   # idx
            source = offset
        if mode == "up":
            ok = arith.CmpIOp(arith.CmpIPredicate.sge, source, self._const(i32, 0)).result
        else:
            ok = arith.CmpIOp(ult, source, width).result
        valid = arith.AndIOp(ok, arith.CmpIOp(ult, lane, width).result).result
        # ... and the source lane is a thread of the block (the last warp may be partial).
        linear, count = self._linear_and_count()
        base = arith.SubIOp(linear, arith.IndexCastOp(self.index, lane).result).result
        there = arith.CmpIOp(ult, arith.AddIOp(base, arith.IndexCastOp(
            self.index, arith.ExtUIOp(i64, source).result).result).result, count).result
        valid = arith.AndIOp(valid, there).result
        chosen = arith.ExtUIOp(i64, arith.SelectOp(valid, source, lane).result).result
        got = self._call(PREFIX + "exchange_warp", [self._to_bits(value), chosen], [i64])[0]
        op.results[0].replace_all_uses_with(self._from_bits(got, value.type))
        op.results[1].replace_all_uses_with(valid)
        op.erase()


def _append(op: ir.Operation, block: ir.Block) -> None:
    """Move ``op`` to the end of ``block``."""
    if len(block.operations):
        op.move_after(block.operations[len(block.operations) - 1])
    else:
        with ir.InsertionPoint(block):
            tmp = arith.ConstantOp(ir.IntegerType.get_signless(1), 0)
        op.move_before(tmp.operation)
        tmp.operation.erase()
