"""Module objects through the front door: ``compile``, ``compile_many`` and ``export`` take an
``mlir.ir.Module``/``Operation``/``OpView`` of the bindings pywave uses, or a module object of
another MLIR build's bindings (duck-typed: ``get_asm()`` or ``operation.get_asm()``), compiled
from its text; anything else is a TypeError naming what is accepted."""

from __future__ import annotations

import gc
import os
import shutil
import subprocess
import sys

import pytest

import pywave
from pywave import cache, pipeline
from pywave.frontend.source import module_text, text_and_name
from conftest import TESTS

DATA = TESTS / "data"
VECTOR_ADD = (DATA / "vector_add.mlir").read_text()


class ForeignOperation:
    """An Operation of another MLIR build's bindings, as pywave sees it: only get_asm()."""

    def __init__(self, text: str) -> None:
        self._text = text
        self.printed = 0

    def get_asm(self) -> str:
        self.printed += 1
        return self._text


class ForeignModule:
    """A Module of another MLIR build's bindings (IREE's iree.compiler.ir.Module): its
    ``operation`` prints."""

    def __init__(self, text: str) -> None:
        self.operation = ForeignOperation(text)


def _key(text: str) -> str:
    made = pipeline.Pipeline(text, target="sm_90", format="ptx", launchers=True)
    return cache.key(text, cache.described(made.options(), pipeline.tool_versions()))


def test_an_mlir_module_compiles_and_stays_unchanged():
    from mlir import ir
    with ir.Context():
        module = ir.Module.parse(VECTOR_ADD)
        before = str(module)
        mod = pywave.compile(module, target="sm_90", format="ptx", disk_cache=False)
        assert str(module) == before                      # left as it was
        again = pywave.compile(module.operation, target="sm_90", format="ptx",
                               disk_cache=False)
    assert again is mod                   # the same text: the in-memory cache's module
    assert mod.functions == ["main"] and list(mod.kernels) == ["kernels::add"]


def test_the_compiled_module_outlives_the_callers_context():
    from mlir import ir
    ctx = ir.Context()
    module = ir.Module.parse(VECTOR_ADD, ctx)
    text, name = text_and_name(module)
    mod = pywave.compile(module, target="sm_90", format="ptx", disk_cache=False)
    del module, ctx
    gc.collect()
    assert name == "<Module object>" and "gpu.launch_func" in text
    assert mod.functions == ["main"] and not mod.closed


def test_an_opview_compiles():
    from mlir import ir
    with ir.Context():
        module = ir.Module.parse(VECTOR_ADD)
        op = module.operation.opview
        assert module_text(op) == module.operation.get_asm()
        pywave.compile(op, target="sm_90", format="ptx", disk_cache=False)


def test_the_cache_key_is_the_printed_texts():
    from mlir import ir
    with ir.Context():
        module = ir.Module.parse(VECTOR_ADD)
        printed = module.operation.get_asm()
    assert text_and_name(module)[0] == printed
    assert _key(text_and_name(ForeignModule(printed))[0]) == _key(printed)


def test_a_foreign_module_compiles_from_its_text():
    foreign = ForeignModule(VECTOR_ADD)
    mod = pywave.compile(foreign, target="sm_90", format="ptx", disk_cache=False)
    assert mod.functions == ["main"] and foreign.operation.printed == 1
    op = ForeignOperation(VECTOR_ADD.replace("@add", "@add2"))
    assert list(pywave.compile(op, target="sm_90", format="ptx", disk_cache=False)
                .kernels) == ["kernels::add2"]


def test_diagnostics_name_the_module_object():
    with pytest.raises(pywave.CompileError) as info:
        pywave.compile(ForeignModule(VECTOR_ADD.replace("arith.addf", "arith.addff")),
                       target="sm_90", disk_cache=False)
    assert info.value.filename == "<ForeignModule object>" and info.value.line == 14


def test_a_module_object_that_cannot_print_is_a_compile_error():
    class Broken:
        def get_asm(self):
            raise RuntimeError("the context is gone")

    with pytest.raises(pywave.CompileError, match="cannot print the Broken object as MLIR "
                       "text: RuntimeError: the context is gone"):
        pywave.compile(Broken(), target="sm_90")

    class Bytes:
        def get_asm(self):
            return b"module {}"

    with pytest.raises(pywave.CompileError, match=r"Bytes.get_asm\(\) returned bytes"):
        pywave.compile(Bytes(), target="sm_90")


@pytest.mark.parametrize("bad", [b"module {}", 42, None, ["module {}"], object()])
def test_anything_else_is_a_type_error_naming_what_is_accepted(bad):
    with pytest.raises(TypeError, match=r"MLIR text \(str\), a path .*os.PathLike.*"
                       r"mlir.ir.Module, Operation or OpView.*got " + type(bad).__name__):
        pywave.compile(bad, target="sm_90")


def test_compile_many_takes_module_objects():
    from mlir import ir
    with ir.Context():
        module = ir.Module.parse(VECTOR_ADD.replace("@add", "@many_a"))
        mods = pywave.compile_many([module, ForeignModule(VECTOR_ADD.replace("@add",
                                                                             "@many_b")),
                                    VECTOR_ADD.replace("@add", "@many_c")],
                                   target="sm_90", format="ptx", disk_cache=False)
    assert [list(m.kernels) for m in mods] == [["kernels::many_a"], ["kernels::many_b"],
                                              ["kernels::many_c"]]
    with pytest.raises(pywave.CompileManyError) as info:
        pywave.compile_many([VECTOR_ADD, 42], target="sm_90", format="ptx", disk_cache=False)
    ((index, name, error),) = info.value.failures
    assert index == 1 and name == "<input 1>" and isinstance(error, TypeError)


@pytest.mark.skipif(shutil.which(os.environ.get("CC", "cc")) is None,
                    reason="needs a C compiler")
def test_export_takes_a_module_object(tmp_path):
    from mlir import ir
    with ir.Context():
        module = ir.Module.parse(VECTOR_ADD)
        done = pywave.export(module, tmp_path, "from_module", target="sm_90", format="ptx")
    assert done.functions == ("from_module_main",) and os.path.isfile(done.library)
    with pytest.raises(TypeError, match="MLIR text"):
        pywave.export(3.5, tmp_path, "bad", target="sm_90")


def test_a_foreign_module_needs_no_mlir_in_this_process():
    """The parent imports no MLIR for a module object it did not make with MLIR."""
    code = ("import sys, pywave\n"
            "class Op:\n"
            "    def get_asm(self): return sys.stdin.read()\n"
            "class Module:\n"
            "    operation = Op()\n"
            "mod = pywave.compile(Module(), target='sm_90', format='ptx', disk_cache=False)\n"
            "print(mod.functions, 'mlir' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], input=VECTOR_ADD, text=True,
                         capture_output=True, timeout=120, check=True, cwd="/")
    assert out.stdout.strip() == "['main'] False"
