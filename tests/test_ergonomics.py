"""Python surface details: compile() of a path, short reprs, py.typed."""

from __future__ import annotations

from pathlib import Path

import pytest

import pywave
from pywave import layout

DATA = Path(__file__).parent / "data"


def test_compile_a_path_is_compiling_its_text():
    path = DATA / "vector_add.mlir"
    by_path = pywave.compile(path, target="sm_90", format="ptx", disk_cache=False)
    by_text = pywave.compile(path.read_text(), target="sm_90", format="ptx", disk_cache=False)
    assert by_path is by_text        # the same text and options: the in-memory cache's module


def test_compile_a_path_names_the_file_in_diagnostics(tmp_path):
    bad = tmp_path / "broken.mlir"
    bad.write_text("module {\n  func.func @f( {\n}\n")
    with pytest.raises(pywave.CompileError) as info:
        pywave.compile(bad, target="sm_90", disk_cache=False)
    assert info.value.filename == str(bad) and info.value.line == 2


def test_compile_a_missing_or_non_utf8_path(tmp_path):
    with pytest.raises(pywave.CompileError, match=r"cannot read .*none\.mlir"):
        pywave.compile(tmp_path / "none.mlir", target="sm_90")
    latin1 = tmp_path / "latin1.mlir"
    latin1.write_bytes(b"// \xe9\n")
    with pytest.raises(pywave.CompileError, match=r"latin1\.mlir is not UTF-8 text: byte 0xe9 "
                                                  r"at offset 3 \(line 1\)"):
        pywave.compile(latin1, target="sm_90")


def test_a_str_is_always_text_never_a_file_name():
    with pytest.raises(pywave.CompileError):
        pywave.compile(str(DATA / "vector_add.mlir"), target="sm_90", disk_cache=False)


def test_binary_repr_shows_size_not_bytes():
    mod = pywave.compile(DATA / "vector_add.mlir", target="sm_90", format="ptx",
                         disk_cache=False)
    (binary,) = mod.binaries
    assert repr(binary) == (f"Binary(name='kernels', format='ptx', size={len(binary.data)}, "
                            "chip='sm_90')")
    assert len(repr(mod.binaries)) < 100


def test_package_is_typed():
    assert layout.package_file("py.typed") is not None
