"""sparse_tensor.assemble / disassemble through MLIR's sparsifier and ``pywave run``:
data/sparse/assemble.mlir assembles a 3 x 4 CSR tensor (rows 0 and 2) and a COO tensor (its
coordinates an array of (row, column) structures), converts both to dense and prints them,
then disassembles the CSR. With ``enable-runtime-library=true`` assemble is
``newSparseTensor`` action 2 (kPack) of libwavert's storage (before: "action 2 is not
supported"); without, the sparsifier's own buffers: both print the same, worked out by hand
from the program's constants.
"""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from conftest import TESTS, fake_driver_env

PROGRAM = TESTS / "data" / "sparse" / "assemble.mlir"

EXPECTED = """\
Unranked Memref base@ = <ptr> rank = 2 offset = 0 sizes = [3, 4] strides = [4, 1] data = 
[[0,   1.5,   0,   2], 
 [0,   0,   0,   0], 
 [3.25,   0,   0,   0]]
Unranked Memref base@ = <ptr> rank = 2 offset = 0 sizes = [3, 4] strides = [4, 1] data = 
[[0,   0,   4,   0], 
 [0,   5,   0,   0], 
 [0,   0,   0,   6]]
Unranked Memref base@ = <ptr> rank = 1 offset = 0 sizes = [3] strides = [1] data = 
[1.5,  2,  3.25]
3
4
3
( 0, 2, 2, 3 )
( 1, 3, 0 )
"""


@pytest.mark.parametrize("runtime_library", ["true", "false"])
def test_assemble_and_disassemble(runtime_library):
    proc = subprocess.run(
        [sys.executable, "-m", "pywave", "run", str(PROGRAM),
         f"--pass-pipeline=builtin.module(sparsifier{{enable-runtime-library={runtime_library}}})"],
        capture_output=True, text=True, timeout=300, env=fake_driver_env(PYWAVE_CACHE="0"),
        cwd=TESTS)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert re.sub(r"base@ = 0x[0-9a-f]+", "base@ = <ptr>", proc.stdout) == EXPECTED
