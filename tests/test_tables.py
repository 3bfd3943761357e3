"""One table per fact (issue 21, item 4): each table the compile stages and the call path share
is defined once and derived, or checked, everywhere else.

- element types: :data:`pywave.program.DTYPES` is the source; ``pywave._native.DTYPES`` (the
  call path's MLIR names and NumPy type strings) and libwavert's dtype names in its messages
  must agree with it;
- scalar kinds and launch parameters: defined in C (``pywave._native.SCALAR_KINDS``,
  ``LAUNCH_PARAMS``), read by Python;
- ``DYNAMIC``/``SIGNLESS``/``STRIDED``: defined in :mod:`pywave.program` (importable without
  the built runtime), equal to libwavert's.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import pywave
from pywave import _native, program, runtime
from pywave.entry import c_export
from pywave.program import DTYPES, Dtype
from pywave.runtime import introspect

PACKAGE = Path(pywave.__file__).resolve().parent


def dtype_drift(source: dict[str, Dtype], native: tuple) -> list[str]:
    """How the call path's table (``_native.DTYPES`` rows: mlir, code, bits, signless,
    typestr) differs from ``source`` (program.DTYPES): one line per dtype missing on a side or
    named differently. ``index`` is i64 in C (the same dtype)."""
    problems = []
    by_dtype = {}
    for d in source.values():
        by_dtype.setdefault((d.code, d.bits, d.signless), d)
    by_name = {row[0]: row for row in native}
    for key, d in by_dtype.items():
        row = by_name.get(d.mlir)
        if row is None:
            problems.append(f"{d.mlir} {key}: in program.DTYPES, not in _native.DTYPES")
        elif tuple(row[1:4]) != key:
            problems.append(f"{d.mlir}: program.DTYPES says {key}, _native.DTYPES "
                            f"{tuple(row[1:4])}")
    for name, code, bits, signless, _typestr in native:
        d = by_dtype.get((code, bits, signless))
        if d is None or d.mlir != name:
            problems.append(f"{name} {(code, bits, signless)}: in _native.DTYPES, not in "
                            "program.DTYPES")
    return problems


def test_the_call_path_names_every_dtype_as_program_does():
    assert dtype_drift(DTYPES, _native.DTYPES) == []


def test_a_dtype_on_one_side_only_is_drift():
    extra = Dtype("f8E4M3FN", 10, 8, False, "float8_e4m3fn", "uint8_t")
    assert dtype_drift({**DTYPES, extra.mlir: extra}, _native.DTYPES) == [
        "f8E4M3FN (10, 8, False): in program.DTYPES, not in _native.DTYPES"]
    assert dtype_drift(DTYPES, _native.DTYPES + (("f8E4M3FN", 10, 8, False, None),)) == [
        "f8E4M3FN (10, 8, False): in _native.DTYPES, not in program.DTYPES"]
    moved = {**DTYPES, "f16": DTYPES["f16"]._replace(code=3)}
    assert "f16: program.DTYPES says (3, 16, False), _native.DTYPES (2, 16, False)" in \
        dtype_drift(moved, _native.DTYPES)


def test_numpy_type_strings_are_numpys():
    """Memref results' ``__cuda_array_interface__`` type string (and the kinds CuPy dtypes are
    read by) for each dtype's NumPy name; NumPy has no bfloat16."""
    numpy = pytest.importorskip("numpy")
    typestr = {row[0]: row[4] for row in _native.DTYPES}
    for d in DTYPES.values():
        if d.mlir not in typestr:
            continue
        want = None if d.numpy == "bfloat16" else numpy.dtype(d.numpy).str
        assert typestr[d.mlir] == want, d


def test_numpy_names_match_libwavert_messages():
    """libwavert's dtype names (its dtype-mismatch messages, libwavert/src/dlpack.c) are the
    NumPy names of program.DTYPES: a tensor of each dtype handed to a memref of another."""
    t = pytest.importorskip("test_args")
    for d in {(d.code, d.bits): d for d in DTYPES.values()}.values():
        other = (2, 32, 1) if (d.code, d.bits) != (2, 32) else (2, 64, 1)
        f, _ = t.make((t.memref("a", dtype=other),))
        with pytest.raises(Exception, match="dtype mismatch") as info:
            f(t.FakeTensor(dtype=(d.code, d.bits, 1)).capsule())
        assert f"got {d.numpy} (code={d.code}, bits={d.bits}, lanes=1)" in str(info.value)


def test_element_types_accepted_are_program_dtypes():
    from pywave.host import signature
    assert signature.ELEMENT_DTYPES == {
        d.mlir: (d.code, d.bits, d.signless) for d in DTYPES.values() if d.mlir != "i1"}


def test_scalar_kinds_are_the_call_paths():
    from pywave.host import signature
    assert signature.SCALAR_KINDS == set(_native.SCALAR_KINDS)
    assert set(c_export.SCALAR_C) == set(_native.SCALAR_KINDS)
    for kind in _native.SCALAR_KINDS:
        assert kind in DTYPES, f"scalar kind {kind} has no program.DTYPES row"
        assert introspect._scalar(kind)[1] != "a number", kind


def test_launch_parameters_are_the_launchers():
    from pywave.host import launchers
    assert launchers.LAUNCH_PARAMS is _native.LAUNCH_PARAMS
    assert [t for _, t in _native.LAUNCH_PARAMS] == ["index"] * 6 + ["i32"]
    assert introspect.LAUNCH_PARAMS is _native.LAUNCH_PARAMS


def test_memref_constants_equal_libwavert():
    assert program.DYNAMIC == runtime.lib.WAVERT_DYNAMIC == _native.DYNAMIC
    assert program.SIGNLESS == runtime.lib.WAVERT_MEMREF_SIGNLESS == _native.MEMREF_SIGNLESS
    assert program.STRIDED == runtime.lib.WAVERT_MEMREF_STRIDED == _native.MEMREF_STRIDED


def test_program_imports_without_the_built_runtime():
    """pywave.program, loaded with pywave's C extensions and runtime binding unimportable."""
    code = f"""
import importlib.abc, sys, types
class Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name in ("pywave._libwavert", "pywave._native", "pywave.runtime"):
            raise ImportError(f"{{name}} refused")
        return None
sys.meta_path.insert(0, Refuse())
package = types.ModuleType("pywave")
package.__path__ = [{str(PACKAGE)!r}]
sys.modules["pywave"] = package
import pywave.program as p
assert p.DTYPES["f32"].code == 2 and p.DYNAMIC == -2**63
print("PASS")
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, cwd=os.path.dirname(PACKAGE))
    assert proc.stdout.strip() == "PASS", proc.stderr[-2000:]
