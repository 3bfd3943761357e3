"""Host rewrite before lowering: ``async.execute`` regions run in place, in program order.

For host code without async groups (:func:`uses_async_groups`); code with groups is lowered
by MLIR's async passes (:data:`ASYNC_RUNTIME_PIPELINE`) onto the async runtime in
libwavert_runner instead. Running each ``async.execute`` body where the op stands is one of
the schedules the async semantics allow: SSA dominance puts every
dependency (a token or ``!async.value`` operand) before its user, so an execute's
dependencies have already run. GPU work inside the bodies keeps its own stream ordering.

After the rewrite: an ``async.await`` of a value is that value, one of a token is nothing;
``!async.value`` operands of later executes are the yielded values. Programs that pass async
values or tokens to functions, return them, or use them in other ops are refused
(CompileError naming the op).
"""

from __future__ import annotations

from mlir import ir

from ..errors import CompileError

_ASYNC_USERS = ("async.execute", "async.await")

#: MLIR's async lowering to coroutines and mlirAsyncRuntime* calls (libwavert_runner), for
#: programs that run in place cannot express (groups, async.await_all).
ASYNC_RUNTIME_PIPELINE = ("builtin.module(async-to-async-runtime, async-runtime-ref-counting, "
                          "async-runtime-ref-counting-opt, convert-async-to-llvm)")

#: Async ops that only the async runtime implements.
_GROUP_OPS = ("async.create_group", "async.add_to_group", "async.await_all")


def uses_async_groups(module: ir.Module) -> bool:
    """Whether host code uses async groups (``async.create_group``, ``add_to_group``,
    ``await_all``), which need :data:`ASYNC_RUNTIME_PIPELINE` instead of the inlining."""
    found = []

    def visit(op: ir.Operation) -> ir.WalkResult:
        if op.name == "gpu.module":
            return ir.WalkResult.SKIP
        if op.name in _GROUP_OPS:
            found.append(op.name)
            return ir.WalkResult.INTERRUPT
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit, ir.WalkOrder.PRE_ORDER)
    return bool(found)


def inline_async_execute(module: ir.Module) -> int:
    """Inline every ``async.execute`` of host code; returns how many were inlined."""
    executes: list[ir.Operation] = []
    awaits: list[ir.Operation] = []

    def collect(op: ir.Operation) -> ir.WalkResult:
        if op.name == "gpu.module":
            return ir.WalkResult.SKIP
        if op.name == "async.execute":
            executes.append(op)
        elif op.name == "async.await":
            awaits.append(op)
        return ir.WalkResult.ADVANCE

    module.operation.walk(collect, ir.WalkOrder.PRE_ORDER)
    if not executes and not awaits:
        return 0
    yielded: dict[ir.Value, ir.Value] = {}
    for op in executes:                       # outer executes first (pre-order)
        _check_uses(op)
        _inline(op, yielded)
    for op in awaits:
        if len(op.results):
            op.results[0].replace_all_uses_with(_lookup(yielded, op.operands[0], op))
        op.erase()
    for op in reversed(executes):
        op.erase()
    return len(executes)


def _lookup(yielded: dict[ir.Value, ir.Value], value: ir.Value, user: ir.Operation
            ) -> ir.Value:
    for key, found in yielded.items():
        if key == value:
            return found
    raise CompileError(f"{user.name} uses an !async.value that no inlined async.execute "
                       "yields (pywave runs async.execute bodies in place)")


def _check_uses(op: ir.Operation) -> None:
    for result in op.results:
        for use in result.uses:
            if use.owner.name not in _ASYNC_USERS:
                raise CompileError(
                    f"a result of async.execute is used by {use.owner.name}; pywave runs "
                    "async.execute bodies in place and supports their tokens and values in "
                    "async.execute and async.await only")


def _inline(op: ir.Operation, yielded: dict[ir.Value, ir.Value]) -> None:
    body = op.regions[0].blocks[0]
    dependencies = list(ir.DenseI32ArrayAttr(op.attributes["operandSegmentSizes"]))[0]
    values = list(op.operands)[dependencies:]
    for arg, value in zip(body.arguments, values):
        arg.replace_all_uses_with(_lookup(yielded, value, op))
    for inner in list(body.operations):
        if inner.operation.name == "async.yield":
            for result, value in zip(list(op.results)[1:], inner.operation.operands):
                yielded[result] = value
            inner.operation.erase()
            continue
        inner.operation.move_before(op)
