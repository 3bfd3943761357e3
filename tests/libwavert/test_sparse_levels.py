"""Loose compressed levels and COO coordinate layouts in libwavert's sparse tensor storage
(data/sparse/levels.mlir through MLIR's sparsifier and ``pywave run``): a dense matrix
converted to a loose compressed level, to an array-of-structures COO (printed through
``sparseCoordinatesBuffer``) and to a ``singleton(soa)`` COO; a loose level assembled from
(start, end) position pairs with a hole in its coordinates. Before, newSparseTensor refused
level types 0x100000 (loose compressed) and 0x80004 (singleton(soa)), and
sparseCoordinatesBuffer was missing. The expected output is worked out by hand from the
program's constants; the sparsifier's own buffers (no runtime library) print the same but for
the loose positions, whose unused pairs its codegen leaves as it likes.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from conftest import TESTS, fake_driver_env

PROGRAM = TESTS / "data" / "sparse" / "levels.mlir"

EXPECTED = """\
---- Sparse Tensor ----
nse = 4
dim = ( 3, 5 )
lvl = ( 3, 5 )
pos[1] : ( 0, 2, 2, 2, 2, 4 )
crd[1] : ( 1, 4, 0, 3 )
values : ( 7, 1, 2, 3 )
----
---- Sparse Tensor ----
nse = 4
dim = ( 3, 5 )
lvl = ( 3, 5 )
pos[0] : ( 0, 4 )
crd[0] : ( 0, 1, 0, 4, 2, 0, 2, 3 )
values : ( 7, 1, 2, 3 )
----
---- Sparse Tensor ----
nse = 4
dim = ( 3, 5 )
lvl = ( 3, 5 )
pos[0] : ( 0, 4 )
crd[0] : ( 0, 0, 2, 2 )
crd[1] : ( 1, 4, 0, 3 )
values : ( 7, 1, 2, 3 )
----
6
0
0
6
0
2
8
1
4
5
19
( ( 6, 0, 8, 0, 0 ), ( 0, 0, 0, 0, 5 ), ( 0, 0, 0, 0, 0 ) )
"""

LOOSE_POSITIONS_LINE = 4


def _run(program, runtime_library: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pywave", "run", str(program),
         f"--pass-pipeline=builtin.module(sparsifier{{enable-runtime-library={runtime_library}}})"],
        capture_output=True, text=True, timeout=300, env=fake_driver_env(PYWAVE_CACHE="0"),
        cwd=TESTS)


def test_loose_levels_and_coo_layouts_with_the_runtime_library():
    proc = _run(PROGRAM, "true")
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert proc.stdout == EXPECTED


def test_the_sparsifier_codegen_prints_the_same_entries():
    proc = _run(PROGRAM, "false")
    assert proc.returncode == 0, proc.stderr[-4000:]
    got, want = proc.stdout.splitlines(), EXPECTED.splitlines()
    del got[LOOSE_POSITIONS_LINE], want[LOOSE_POSITIONS_LINE]
    assert got == want


@pytest.mark.parametrize("positions, reason", [
    ("[0, 5, 0, 3]", "position 1 of level 1 is past the level's last position"),
    ("[2, 1, 0, 3]", "position 1 of level 1 is below the one before it"),
])
def test_assembled_loose_positions_are_checked(tmp_path, positions, reason):
    program = tmp_path / "bad_loose.mlir"
    program.write_text(
        "#Loose = #sparse_tensor.encoding<{ map = (i, j) -> (i : dense, j : loose_compressed) }>\n"
        "func.func @main() {\n"
        f"  %pos = arith.constant dense<{positions}> : tensor<4xindex>\n"
        "  %crd = arith.constant dense<[0, 1, 2]> : tensor<3xindex>\n"
        "  %val = arith.constant dense<[1.0, 2.0, 3.0]> : tensor<3xf64>\n"
        "  %s = sparse_tensor.assemble (%pos, %crd), %val : (tensor<4xindex>, tensor<3xindex>),"
        " tensor<3xf64> to tensor<2x4xf64, #Loose>\n"
        "  %n = sparse_tensor.number_of_entries %s : tensor<2x4xf64, #Loose>\n"
        "  vector.print %n : index\n"
        "  return\n"
        "}\n")
    proc = _run(program, "true")
    assert proc.returncode != 0
    assert reason in proc.stderr, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
