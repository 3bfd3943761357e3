"""inspect.signature() and help() of host functions and kernel launchers (no GPU needed:
compiling and loading a module does not touch the device)."""

from __future__ import annotations

import inspect
import pydoc

import pytest

import pywave
from pywave import _native
from pywave.runtime import introspect
from conftest import TESTS

DATA = TESTS / "data"

SHAPES = r"""
module attributes {gpu.container_module} {
  func.func @shapes(%img: memref<?x4xf32>, %lut: memref<16xi8>, %mask: memref<?xi1>,
                    %s: memref<2x3xbf16, strided<[4, 1]>>, %n: index, %scale: f32,
                    %on: i1) {
    return
  }
}
"""


def compile_sm90(text: str) -> pywave.CompiledModule:
    return pywave.compile(text, target="sm_90", format="ptx", disk_cache=False)


def test_host_function_signature_names_dtypes_ranks_static_sizes_and_stream():
    sig = inspect.signature(compile_sm90(SHAPES).shapes)
    assert list(sig.parameters) == ["img", "lut", "mask", "s", "n", "scale", "on", "stream"]
    p = sig.parameters
    assert all(p[name].kind is inspect.Parameter.POSITIONAL_ONLY for name in list(p)[:-1])
    assert p["stream"].kind is inspect.Parameter.KEYWORD_ONLY and p["stream"].default is None
    img = p["img"].annotation
    assert (img.dtype, img.shape, img.rank, img.writable) == ("float32", (None, 4), 2, False)
    assert repr(img) == "Tensor[float32, (?, 4)]"
    assert repr(p["lut"].annotation) == "Tensor[int8, (16,)]"
    assert p["mask"].annotation.dtype == "bool"
    assert p["s"].annotation.mlir_type == "memref<2x3xbf16, strided<[4, 1]>>"
    assert repr(p["s"].annotation) == "Tensor[bfloat16, (2, 3)]"
    assert (p["n"].annotation, p["scale"].annotation, p["on"].annotation) == (int, float, bool)
    assert str(sig).startswith("(img: Tensor[float32, (?, 4)], lut: Tensor[int8, (16,)], ")
    assert str(sig).endswith("on: bool, /, *, stream=None) -> None")


def test_help_shows_each_parameter():
    fn = compile_sm90(SHAPES).shapes
    text = pydoc.render_doc(fn)
    assert "shapes(img: Tensor[float32, (?, 4)]" in text
    assert "memref<?x4xf32>: a GPU tensor (DLPack) of float32, rank 2, sizes (any, 4); " \
           "read only" in text
    assert "memref<16xi8>: a GPU tensor (DLPack) of int8 or uint8," in text  # signless
    assert "strides [4, 1]" in text
    assert "index: an int in [-2**63, 2**63 - 1]" in text
    assert "stream : optional" in text and "ArgumentError" in text
    assert fn.__doc__ == introspect.doc(fn)
    assert _native.HostFunction.__doc__.startswith("A compiled host function")  # the type's


def test_written_memrefs_are_marked(mlir):
    sig = inspect.signature(compile_sm90(mlir("vector_add.mlir")).main)
    assert [p.annotation.writable for p in list(sig.parameters.values())[:3]] == \
        [False, False, True]


def test_argument_names_that_are_not_identifiers_show_as_argn():
    text = SHAPES.replace("%img", "%img.0").replace("%img.0:", "%img.0:")
    sig = inspect.signature(compile_sm90(text).shapes)
    assert list(sig.parameters)[0] == "arg0"


def test_kernel_launcher_signature_and_help(mlir):
    add = compile_sm90(mlir("vector_add.mlir")).kernels["add"]
    sig = inspect.signature(add)
    assert list(sig.parameters) == ["a", "b", "c", "n", "grid", "block", "shared_mem",
                                    "stream"]
    assert sig.parameters["shared_mem"].default == 0
    assert sig.parameters["grid"].default is inspect.Parameter.empty   # required
    assert repr(sig.parameters["c"].annotation) == "Tensor[float32, (?,)]"
    assert sig.parameters["c"].annotation.writable and \
        not sig.parameters["a"].annotation.writable
    text = pydoc.render_doc(add)
    assert "Kernel @kernels::@add (CUDA)" in text
    assert "grid : int or tuple of 1-3 ints" in text and "shared_mem : int" in text


@pytest.mark.parametrize("name", ["named_functions.mlir", "scalars_mixed.mlir",
                                  "strided.mlir", "bool_i1.mlir"])
def test_every_function_of_the_suite_has_a_signature(mlir, name):
    mod = compile_sm90(mlir(name))
    for fn in [mod[f] for f in mod.functions] + list(mod.kernels.values()):
        sig = inspect.signature(fn)
        assert "stream" in sig.parameters
        assert fn.name in fn.__doc__


# ------------------------------------------------------------------------------------------
# Results: the return annotation and help()'s Returns section say what a call returns
# (results.c: None, the one result, or a tuple; scalars as bool/int/float, memrefs as
# pywave._native.Memref)
# ------------------------------------------------------------------------------------------
RESULTS = r"""
func.func @none(%n: index) {
  return
}
func.func @r_i32(%x: i32) -> i32 {
  return %x : i32
}
func.func @r_f32(%x: f32) -> f32 {
  return %x : f32
}
func.func @r_i1(%x: i1) -> i1 {
  return %x : i1
}
func.func @r_index(%x: index) -> index {
  return %x : index
}
func.func @r_f16(%x: f16) -> f16 {
  return %x : f16
}
func.func @r_static1() -> memref<16xi8> {
  %m = memref.alloc() : memref<16xi8>
  return %m : memref<16xi8>
}
func.func @r_dynamic2(%n: index) -> memref<?x4xf32> {
  %m = memref.alloc(%n) : memref<?x4xf32>
  return %m : memref<?x4xf32>
}
func.func @r_device(%d: memref<?xf64, 1>) -> memref<?xf64, 1> {
  return %d : memref<?xf64, 1>
}
func.func @r_mixed(%n: index, %x: f16) -> (memref<?xi32>, f16, i1, memref<2x3xbf16>) {
  %m = gpu.alloc (%n) : memref<?xi32>
  %k = memref.alloc() : memref<2x3xbf16>
  %t = arith.constant 1 : i1
  return %m, %x, %t, %k : memref<?xi32>, f16, i1, memref<2x3xbf16>
}
"""


@pytest.fixture(scope="module")
def results_module():
    return compile_sm90(RESULTS)


@pytest.mark.parametrize("name, signature, phrase", [
    ("none", "(n: int, /, *, stream=None) -> None", "returns None"),
    ("r_i32", "(x: int, /, *, stream=None) -> int", "returns one int (i32)"),
    ("r_f32", "(x: float, /, *, stream=None) -> float", "returns one float (f32)"),
    ("r_i1", "(x: bool, /, *, stream=None) -> bool", "returns one bool (i1)"),
    ("r_index", "(x: int, /, *, stream=None) -> int", "returns one int (index)"),
    ("r_f16", "(x: float, /, *, stream=None) -> float", "returns one float (f16)"),
    ("r_static1", "(*, stream=None) -> Memref[int8, (16,)]", "returns one Memref[int8, (16,)]"),
    ("r_dynamic2", "(n: int, /, *, stream=None) -> Memref[float32, (?, 4)]",
     "returns one Memref[float32, (?, 4)]"),
    ("r_device", "(d: Tensor[float64, (?,)], /, *, stream=None) -> "
     "Memref[float64, (?,)]", "returns one Memref[float64, (?,)]"),
    ("r_mixed", "(n: int, x: float, /, *, stream=None) -> tuple[Memref[int32, (?,)], float, "
     "bool, Memref[bfloat16, (2, 3)]]",
     "returns a tuple of 4: (Memref[int32, (?,)], float (f16), bool (i1), "
     "Memref[bfloat16, (2, 3)])"),
])
def test_signature_and_help_state_the_result(results_module, name, signature, phrase):
    fn = results_module[name]
    sig = str(inspect.signature(fn))
    assert sig == signature
    text = pydoc.render_doc(fn)
    assert f"{name}{sig}" in text
    assert f"; {phrase}." in fn.__doc__
    assert fn.__doc__.count("returns None") == (name == "none")


def _returns_section(fn) -> str:
    doc = fn.__doc__
    return doc[doc.index("Returns\n-------\n") + 16:doc.index("\n\nRaises\n")]


@pytest.mark.parametrize("name, entry", [
    ("none", "None"),
    ("r_i32", "result0 : int\n    i32: an int in [-2**31, 2**31 - 1] (the 32-bit value read "
              "as signed)."),
    ("r_f32", "result0 : float\n    f32: a float (the f32 value, exactly)."),
    ("r_i1", "result0 : bool\n    i1: a bool (its low bit)."),
    ("r_index", "result0 : int\n    index: an int in [-2**63, 2**63 - 1]"),
    ("r_f16", "result0 : float\n    f16: a float (the f16 value, exactly)."),
    ("r_static1", "result0 : Memref[int8, (16,)]\n    memref<16xi8>: a pywave._native.Memref "
                  "of int8, rank 1, sizes (16), exported without a copy through __dlpack__"),
    ("r_dynamic2", "result0 : Memref[float32, (?, 4)]\n    memref<?x4xf32>: a "
                   "pywave._native.Memref of float32, rank 2, sizes (any, 4), "),
    ("r_device", "result0 : Memref[float64, (?,)]\n    memref<?xf64, 1>: a pywave._native.Memref "
                 "of float64, rank 1, sizes (any), "),
])
def test_help_returns_section_names_dtype_and_rank(results_module, name, entry):
    section = _returns_section(results_module[name])
    assert section.startswith(entry), section
    if "Memref" in entry:
        assert "; in " in section and "keeps that alive" in section


def test_help_of_a_memref_result_says_where_its_memory_lives(results_module):
    assert "in GPU memory (memory space 1)." in _returns_section(results_module["r_device"])
    host = _returns_section(results_module["r_dynamic2"])
    assert "in host memory (memref.alloc: a CPU array) or GPU memory (gpu.alloc), as the " \
           "driver reports for its allocation." in host


def test_help_of_several_results_lists_each_in_order(results_module):
    section = _returns_section(results_module["r_mixed"])
    assert section.startswith("tuple of 4\n    the results in order:\nresult0 : ")
    names = [line.split(" : ")[0] for line in section.splitlines() if " : " in line
             and not line.startswith(" ")]
    assert names == ["result0", "result1", "result2", "result3"]
    assert "result0 : Memref[int32, (?,)]\n    memref<?xi32>: a pywave._native.Memref of " \
           "int32, rank 1," in section
    assert "result1 : float\n    f16: a float" in section
    assert "result2 : bool\n    i1: a bool" in section
    assert "result3 : Memref[bfloat16, (2, 3)]\n    memref<2x3xbf16>: a pywave._native.Memref " \
           "of bfloat16, rank 2, sizes (2, 3)," in section


def test_result_annotation_objects(results_module):
    ann = inspect.signature(results_module["r_dynamic2"]).return_annotation
    assert isinstance(ann, introspect.MemrefType)
    assert (ann.dtype, ann.shape, ann.rank, ann.mlir_type, ann.memory) == \
        ("float32", (None, 4), 2, "memref<?x4xf32>", "")
    mixed = inspect.signature(results_module["r_mixed"]).return_annotation
    assert mixed.__origin__ is tuple
    assert [getattr(a, "rank", a) for a in mixed.__args__] == [1, float, bool, 2]
    assert inspect.signature(results_module["r_device"]).return_annotation.memory == "device"
    assert inspect.signature(results_module["none"]).return_annotation is None


def test_launchers_return_none(mlir):
    add = compile_sm90(mlir("vector_add.mlir")).kernels["add"]
    assert inspect.signature(add).return_annotation is None
    assert "; returns None." in add.__doc__ and "Returns\n-------\nNone\n" in add.__doc__
