"""inspect.signature() and help() of host functions and kernel launchers (no GPU needed:
compiling and loading a module does not touch the device)."""

from __future__ import annotations

import inspect
import pydoc
from pathlib import Path

import pytest

import pywave
from pywave import _native
from pywave.runtime import introspect

DATA = Path(__file__).parent / "data"

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
