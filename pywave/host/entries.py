"""The entries lowered host code gets: the packed entry, the ExecutionEngine's, pywave run's.

Part of stage ``host`` (:mod:`pywave.host.stage`): :func:`add_packed_entries` (the JIT's
and the C export's calls), :func:`add_packed_interface` and :func:`add_engine_entries`
(:class:`pywave.entry.engine.ExecutionEngine`), :func:`check_run_entry` and
:func:`add_run_entry` (``pywave run``).

The packed entry of host function ``f`` is ``void _pywave_packed_f(uint64_t *slots)``: the
flattened LLVM arguments of ``f`` (a rank-r memref is 3 + 2r words: allocated, aligned,
offset, sizes, strides; a scalar is one word holding its value in the low bytes) in order,
``HostSignature.words`` slots; then ``HostSignature.result_words`` result slots that the
entry writes when ``f`` returns: each result in order, in the same layout (a scalar's value
in the low bytes of its word: the caller zeroes the result slots first; an ``i1`` is one
byte, 0 or 1; a memref's descriptor as its 3 + 2r words). When the call fails (an error
recorded by a runtime call, reported by ``wavert_call_end``), the result slots hold no
meaning and the caller must not read them.
"""

from __future__ import annotations

import re

from mlir import ir

from ..errors import CompileError
from ..mlirutil import sym_name
from ..program import ENGINE_FINI, ENGINE_INIT, PACKED_PREFIX, RUN_ENTRY, HostSignature

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


def result_type(func: ir.Operation) -> ir.Type | None:
    """The type an ``llvm.func`` returns (None: void), read from its ``llvm.return`` ops."""
    found: list[ir.Type] = []

    def visit(op: ir.Operation) -> ir.WalkResult:
        if op.name == "llvm.return" and len(op.operands):
            found.append(op.operands[0].type)
            return ir.WalkResult.INTERRUPT
        return ir.WalkResult.ADVANCE

    func.walk(visit)
    return found[0] if found else None


def add_packed_entries(module: ir.Module, functions: list[HostSignature]) -> None:
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
    append_parsed(module, stubs, texts)


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
        found = result_type(func)
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
    append_parsed(module, stubs, texts)
    return wrapped


def _lowered_result(lowered: ir.Operation, fn: HostSignature) -> str | None:
    """The LLVM type the lowered host function returns (None: void): one result's own type,
    several results packed in a struct."""
    found = result_type(lowered)
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


def add_run_entry(module: ir.Module, name: str) -> str:
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
    append_parsed(module, [signature], [f"llvm.func @{RUN_ENTRY}(%out: !llvm.ptr) {{\n"
                                         + "\n".join(body + ["  llvm.return"]) + "\n}"])
    return result


def append_parsed(module: ir.Module, stubs: list[str], texts: list[str]) -> None:
    """Parse ``texts`` (which may refer to symbols of ``module`` declared by ``stubs``) and
    move the ops of ``texts`` to the end of ``module``."""
    if not texts:
        return
    parsed = ir.Module.parse("\n".join(stubs + texts), module.context)
    for op in list(parsed.body.operations)[len(stubs):]:
        module.body.append(op.operation)
