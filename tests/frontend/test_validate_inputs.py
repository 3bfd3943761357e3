"""Inputs that used to compile to nothing or fail untyped (issue 34): nested or several
top-level modules, a NUL, no callable function, str subclasses, bytes, ptxas options that
compile nothing, a NUL in dump_dir; each a typed error naming what was found, isolated or
not."""

from __future__ import annotations

import os

import pytest

import pywave
from conftest import TESTS

DATA = os.path.join(TESTS, "data")
VECTOR_ADD = open(os.path.join(DATA, "vector_add.mlir"), encoding="utf-8").read()


def build(text, isolate, **kw):
    return pywave.compile(text, target="sm_90", format="ptx", isolate=isolate,
                          disk_cache=False, **kw)


@pytest.mark.parametrize("isolate", [True, False])
@pytest.mark.parametrize("text, said", [
    ("module {\n" + VECTOR_ADD + "\n}", "1 nested module"),
    (VECTOR_ADD + "\n" + VECTOR_ADD.replace("@main", "@main2"), "2 nested modules"),
    (VECTOR_ADD + "\0" + VECTOR_ADD.replace("@main", "@main2"), "NUL character at line"),
    ("module {}", "no function pywave can call"),
    ("func.func private @f(i32)", "found: func.func"),
])
def test_silently_empty_modules_are_compile_errors(text, said, isolate):
    with pytest.raises(pywave.CompileError, match=said):
        build(text, isolate)


def _local_str():
    class Local(str):
        pass
    return Local(VECTOR_ADD)


class TopLevel(str):
    pass


@pytest.mark.parametrize("isolate", [True, False])
@pytest.mark.parametrize("make", [_local_str, lambda: TopLevel(VECTOR_ADD)])
def test_a_str_subclass_compiles_as_its_text(make, isolate):
    assert build(make(), isolate).functions == build(VECTOR_ADD, isolate).functions


@pytest.mark.parametrize("raw", [VECTOR_ADD.encode(), bytearray(VECTOR_ADD.encode())])
def test_bytes_are_refused_naming_decode(raw):
    with pytest.raises(TypeError, match=r"decode MLIR source first"):
        build(raw, False)


@pytest.mark.parametrize("option", ["--version", "-V", "--help", "-h", "--list-version"])
def test_ptxas_options_that_compile_nothing_are_refused(option):
    with pytest.raises(pywave.CompileError, match=rf"ptxas_options\[0\] = '{option}' is "
                                                  "refused"):
        pywave.compile(VECTOR_ADD, target="sm_90", lowering={"ptxas_options": [option]})


def test_a_nul_in_dump_dir_is_a_compile_error(tmp_path):
    with pytest.raises(pywave.CompileError, match="dump_dir=.*NUL"):
        build(VECTOR_ADD, False, dump_dir=str(tmp_path) + "/a\0b")


def _deepest(text: str) -> int:
    """The deepest bracket nesting of ``text`` (no strings nor comments), one bracket at a
    time; a stray closer does not go below 0 (the check's rule)."""
    depth = deepest = 0
    for ch in text:
        if ch in "({[":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in ")}]":
            depth = max(depth - 1, 0)
    return deepest


def test_the_nesting_check_agrees_with_a_bracket_count():
    import random
    from pywave.frontend import validate
    rng = random.Random(34)
    for _ in range(60):
        depth = rng.choice([validate.MAX_NESTING - 1, validate.MAX_NESTING,
                            validate.MAX_NESTING + 1])
        text = ")" * rng.randint(0, 3) + "(" * depth + "x" + ")" * depth
        text += "".join(rng.choice("(){}[] x") for _ in range(rng.randint(0, 3000)))
        for spelled in (text, text.replace("x", '"x"')):     # with a string: cut out first
            try:
                validate.nesting(spelled)
                passed = True
            except pywave.CompileError:
                passed = False
            assert passed == (_deepest(text.replace("x", "")) <= validate.MAX_NESTING), \
                text[:80]


def test_fifty_megabytes_of_brackets_are_refused_in_seconds():
    import time
    text = ("(" * 999 + ")" * 999) * 25_000
    start = time.monotonic()
    with pytest.raises(pywave.CompileError, match="cannot parse MLIR"):
        build(text, False)
    assert time.monotonic() - start < 20
