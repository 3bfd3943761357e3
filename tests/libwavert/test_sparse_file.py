"""Sparse tensors read from files: ``sparse_tensor.new`` of a file name, which MLIR's sparsifier
lowers to the sparse tensor file reader of MLIR's runtime, implemented by libwavert
(``wavert_sparse_file.h``, ``libwavert/src/sparse_file.c``; its own C test,
``libwavert/tests/test_sparse_file.c``, covers the formats and hostile files); with
``enable-runtime-library=true`` the entries go into MLIR's sparse tensor storage, also
libwavert's (``wavert_sparse_storage.h``, ``libwavert/tests/test_sparse_storage.c``).

Here (no GPU): every reader function is declared, exported and a checked runtime call; the
programs of ``tests/data/sparse`` that read ``sampling.mtx`` compile, their host code links
against libwavert (MCJIT and the pre-linked shared object) and returns early after each
reader call; on the driver stand-in, ``pywave run`` of ``read_file.mlir`` prints the matrix as
this file parses it independently (CSR and CSC), with and without the runtime library, and
hostile files or a missing ``$TENSOR0`` are errors naming the problem; ``read_blocks.mlir``
reads ``blocks.mtx`` into 2 x 2 blocks (the floor / mod level map); ``convert_blocks.mlir``
fills CSR and BSR tensors of the storage by insertion; ``sddmm_file.mlir`` through the sparsifier's CPU loops matches
NumPy. On an NVIDIA GPU with cuSPARSE (marked ``gpu``): the same SDDMM handed to cuSPARSE,
against the same NumPy result.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import ROOT, TESTS, fake_driver_env, need_fake_driver
from pywave import image_params, pipeline, runtime, sparse
from pywave.host import jit, launch_rewrite, sharedobj

DATA = TESTS / "data" / "sparse"
MATRIX = DATA / "sampling.mtx"
HEADER = ROOT / "libwavert" / "include" / "wavert_sparse_file.h"
#: Each program and the reader functions its host code calls.
PROGRAMS = {
    "read_file": {"getTensorFilename", "_mlir_ciface_createCheckedSparseTensorReader",
                  "_mlir_ciface_getSparseTensorReaderDimSizes", "getSparseTensorReaderNSE",
                  "_mlir_ciface_getSparseTensorReaderReadToBuffers0F64",
                  "_mlir_ciface_getSparseTensorReaderReadToBuffers0F32",
                  "delSparseTensorReader"},
    "sddmm_file": {"getTensorFilename", "_mlir_ciface_createCheckedSparseTensorReader",
                   "_mlir_ciface_getSparseTensorReaderDimSizes", "getSparseTensorReaderNSE",
                   "_mlir_ciface_getSparseTensorReaderReadToBuffers0F32",
                   "delSparseTensorReader"},
}


def read_mtx(path: Path) -> tuple[tuple[int, int], np.ndarray, np.ndarray, np.ndarray]:
    """A general real Matrix Market file parsed here, independently of libwavert: its shape and
    0-based rows, columns and values in file order."""
    lines = [l for l in path.read_text().splitlines()[1:] if l.strip() and l[0] != "%"]
    m, n, nse = map(int, lines[0].split())
    entries = [l.split() for l in lines[1:]]
    assert len(entries) == nse
    rows = np.array([int(e[0]) - 1 for e in entries])
    cols = np.array([int(e[1]) - 1 for e in entries])
    return (m, n), rows, cols, np.array([float(e[2]) for e in entries])


def compressed(outer: np.ndarray, inner: np.ndarray, values: np.ndarray, extent: int):
    """Positions, coordinates and values of a matrix compressed along `outer`."""
    order = np.lexsort((inner, outer))
    positions = np.concatenate([[0], np.cumsum(np.bincount(outer, minlength=extent))])
    return positions, inner[order], values[order]


def printed(text: str) -> list[dict[str, list[float]]]:
    """The tensors ``sparse_tensor.print`` printed: per tensor, each line's numbers by name."""
    tensors = []
    for block in text.split("---- Sparse Tensor ----")[1:]:
        fields = {}
        for line in block.splitlines():
            match = re.match(r"\s*([\w\[\]]+)\s*[:=]\s*\(?([^)]*)\)?\s*$", line)
            if match:
                fields[match.group(1)] = [float(x) for x in match.group(2).replace(",", " ")
                                          .split()]
        tensors.append(fields)
    return tensors


# ---------------------------------------------------------------------- the ABI

def _declared(header: Path) -> set[str]:
    """The functions a header declares, those of its macros over suffixes included."""
    text = header.read_text()
    declared = set(re.findall(r"^WAVERT_SPARSE_FILE_EXPORT [^;(]*?\b(\w+)\(", text, re.M))
    for suffix in re.findall(r"^WAVERT_SPARSE_READ_TO_BUFFERS_V\((\w+)\)", text, re.M):
        declared |= {f"_mlir_ciface_getSparseTensorReaderReadToBuffers{suffix}{v}"
                     for v in sparse.READER_VALUES}
    for suffix in re.findall(r"^WAVERT_SPARSE_OVERHEAD_ACCESSORS\((\w+)\)", text, re.M):
        declared |= {f"_mlir_ciface_sparsePositions{suffix}",
                     f"_mlir_ciface_sparseCoordinates{suffix}",
                     f"_mlir_ciface_sparseCoordinatesBuffer{suffix}"}
    for suffix in re.findall(r"^WAVERT_SPARSE_VALUE_ACCESSORS\((\w+)\)", text, re.M):
        declared |= {f"_mlir_ciface_sparseValues{suffix}", f"_mlir_ciface_lexInsert{suffix}"}
    return declared


def test_every_runtime_function_is_declared_exported_and_checked():
    import ctypes
    assert _declared(HEADER) == sparse.READER_FUNCTIONS
    assert _declared(HEADER.with_name("wavert_sparse_storage.h")) == sparse.STORAGE_FUNCTIONS
    assert len(sparse.READER_FUNCTIONS) == 7 + 50
    assert len(sparse.STORAGE_FUNCTIONS) == 5 + 15 + 20
    library = ctypes.CDLL(runtime.LIBRARY)
    for name in sparse.RUNTIME_FUNCTIONS:
        assert hasattr(library, name), name
        assert launch_rewrite.is_runtime_call(name), name


# ---------------------------------------------------------------------- compile and link

@pytest.fixture(scope="module")
def built() -> dict[str, pipeline.Artifacts]:
    return {name: pipeline.Pipeline((DATA / f"{name}.mlir").read_text(), target="sm_90",
                                    run_entry="main",
                                    passes=sparse.sparsifier_pipeline()).run()
            for name in PROGRAMS}


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_reading_program_links_against_libwavert(name, built):
    code = built[name].object_code
    assert PROGRAMS[name] <= set(image_params.undefined_symbols(code))
    jit.initialise(runtime.LIBRARY)
    jit.JitModule(code).close()   # CompileError naming any symbol nothing provides


@pytest.mark.parametrize("name", ["read_file"])
def test_reading_program_loads_prelinked(name, built):
    """The pre-linked shared object (warm starts) is opened with RTLD_NOW: a reader function
    libwavert lacked would fail the load."""
    shared = sharedobj.link(built[name].object_code)
    if shared is None:
        pytest.skip("no C compiler driver to link the shared object")
    module = sharedobj.load(shared, runtime.LIBRARY)
    assert module is not None
    module.close()


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_each_reader_call_returns_early_on_error(name, built):
    """After each reader call the host code asks wavert_jit_failed: a file that fails to open
    or parse stops the program before it reads a NULL reader or unwritten buffers."""
    lines = built[name].host.llvm_ir.splitlines()
    calls = [i for i, line in enumerate(lines) if "call " in line
             and any(f"@{f}(" in line for f in sparse.READER_FUNCTIONS)]
    called = {f for i in calls for f in sparse.READER_FUNCTIONS if f"@{f}(" in lines[i]}
    assert called == PROGRAMS[name]
    for i in calls:
        following = next(line for line in lines[i + 1:] if "call " in line)
        assert "@wavert_jit_failed()" in following, lines[i]


# ---------------------------------------------------------------------- on the driver stand-in

#: The sparsifier without and with MLIR's sparse runtime library (libwavert's storage).
RUNTIME_LIBRARY = {
    False: sparse.sparsifier_pipeline(),
    True: "builtin.module(sparsifier{enable-runtime-library=true})",
}


def _run(program: str, tensor0: str | None,
         runtime_library: bool = False) -> subprocess.CompletedProcess:
    env = fake_driver_env()
    env.pop("TENSOR0", None)
    if tensor0 is not None:
        env["TENSOR0"] = tensor0
    return subprocess.run([sys.executable, "-m", "pywave", "run", str(DATA / program),
                           "--target", "sm_90",
                           f"--pass-pipeline={RUNTIME_LIBRARY[runtime_library]}"],
                          capture_output=True, text=True, timeout=600, env=env,
                          cwd=TESTS)


def _run_read_file(tensor0: str | None, runtime_library: bool = False):
    return _run("read_file.mlir", tensor0, runtime_library)


@pytest.mark.parametrize("runtime_library", [False, True])
def test_read_file_prints_the_matrix(runtime_library):
    proc = _run_read_file(str(MATRIX), runtime_library)
    assert proc.returncode == 0, proc.stderr
    (m, n), rows, cols, values = read_mtx(MATRIX)
    csr, csc = printed(proc.stdout)
    for tensor, dims, lvls, (outer, inner, extent) in (
            (csr, [m, n], [m, n], (rows, cols, m)), (csc, [m, n], [n, m], (cols, rows, n))):
        positions, coordinates, stored = compressed(outer, inner, values, extent)
        assert tensor["nse"] == [len(values)]
        assert tensor["dim"] == dims and tensor["lvl"] == lvls
        assert tensor["pos[1]"] == positions.tolist()
        assert tensor["crd[1]"] == coordinates.tolist()
        np.testing.assert_allclose(tensor["values"], stored)   # every value exact in f32 too


@pytest.mark.parametrize("text, message", [
    ("%%MatrixMarket matrix coordinate real general\n3 3 2\n1 1 1\n0 2 2\n",
     "getSparseTensorReaderReadToBuffers0F64: {path} line 4: coordinate 0 is 0, not within "
     "1..3 (1-based)"),
    ("%%MatrixMarket matrix coordinate real general\n3 3 2\n1 1 1.000000\n",
     "{path} ends after 1 of its 2 entries"),
    ("%%MatrixMarket matrix array real general\n3 3\n",
     "createCheckedSparseTensorReader: {path} line 1: 'matrix array' is not supported"),
    ("%%MatrixMarket matrix coordinate real general\n1000000 1000000 999999999\n1 1 1\n",
     "the header announces 999999999 entries"),
    ("%%MatrixMarket matrix coordinate complex general\n1 1 1\n1 1 1 0\n",
     "holds complex values, which are not read as f64"),
])
def test_hostile_file_is_an_error(tmp_path, text, message):
    path = tmp_path / "hostile.mtx"
    path.write_text(text)
    proc = _run_read_file(str(path))
    assert proc.returncode == 1, (proc.returncode, proc.stderr)
    assert message.format(path=path) in proc.stderr
    assert "Sparse Tensor" not in proc.stdout   # the program stopped at the failed call


def test_hostile_file_through_the_storage_is_an_error(tmp_path):
    """With the runtime library the reader's entries go into libwavert's storage
    (newSparseTensor from a reader): the same checks, named by that call."""
    path = tmp_path / "hostile.mtx"
    path.write_text("%%MatrixMarket matrix coordinate real general\n3 3 2\n1 1 1\n2 9 2\n")
    proc = _run_read_file(str(path), runtime_library=True)
    assert proc.returncode == 1, (proc.returncode, proc.stderr)
    assert f"newSparseTensor: {path} line 4: coordinate 1 is 9, not within 1..3" in proc.stderr
    assert "Sparse Tensor" not in proc.stdout


def bsr_expected(path: Path) -> dict[str, list[float]]:
    """What sparse_tensor.print shows of the matrix in `path` stored in 2 x 2 blocks: the
    nonzero blocks in block-row order, each stored dense."""
    (m, n), rows, cols, values = read_mtx(path)
    dense = np.zeros((m, n))
    dense[rows, cols] = values
    blocks = sorted({(i // 2, j // 2) for i, j in zip(rows, cols)})
    block_rows = np.array([r for r, _ in blocks])
    return {
        "dim": [m, n], "lvl": [m // 2, n // 2, 2, 2], "nse": [4 * len(blocks)],
        "pos[1]": np.concatenate([[0], np.cumsum(np.bincount(block_rows,
                                                             minlength=m // 2))]).tolist(),
        "crd[1]": [c for _, c in blocks],
        "values": [dense[2 * r + a, 2 * c + b] for r, c in blocks for a in range(2)
                   for b in range(2)],
    }


@pytest.mark.parametrize("runtime_library", [False, True])
def test_read_blocks_maps_entries_to_block_levels(runtime_library):
    proc = _run("read_blocks.mlir", str(DATA / "blocks.mtx"), runtime_library)
    assert proc.returncode == 0, proc.stderr
    (got,) = printed(proc.stdout)
    assert got == bsr_expected(DATA / "blocks.mtx")


def test_conversions_fill_the_storage_by_insertion():
    """convert_blocks.mlir with the runtime library: a constant inserted entry by entry
    (lexInsertF32) into a CSR and a BSR tensor, against the formats built here from the
    constant's entries."""
    proc = _run("convert_blocks.mlir", None, runtime_library=True)
    assert proc.returncode == 0, proc.stderr
    entries = {(0, 0): 1.0, (0, 1): 2.0, (1, 0): 3.0, (3, 4): 4.0, (7, 7): 5.0, (6, 2): 6.0}
    rows = np.array([i for i, _ in entries])
    cols = np.array([j for _, j in entries])
    values = np.array(list(entries.values()))
    csr, bsr = printed(proc.stdout)
    positions, coordinates, stored = compressed(rows, cols, values, 8)
    assert csr["lvl"] == [8, 8] and csr["nse"] == [len(entries)]
    assert csr["pos[1]"] == positions.tolist() and csr["crd[1]"] == coordinates.tolist()
    assert csr["values"] == stored.tolist()
    # BSR: the nonzero 2 x 2 blocks in block-row order, each stored dense.
    blocks = sorted({(i // 2, j // 2) for i, j in entries})
    block_rows = np.array([r for r, _ in blocks])
    assert bsr["lvl"] == [4, 4, 2, 2]
    assert bsr["pos[1]"] == np.concatenate(
        [[0], np.cumsum(np.bincount(block_rows, minlength=4))]).tolist()
    assert bsr["crd[1]"] == [c for _, c in blocks]
    dense = np.zeros((8, 8))
    for (i, j), v in entries.items():
        dense[i, j] = v
    assert bsr["values"] == [dense[2 * r + a, 2 * c + b] for r, c in blocks
                             for a in range(2) for b in range(2)]


@pytest.mark.parametrize("runtime_library", [False, True])
def test_execution_engine_reads_files_and_survives_bad_ones(tmp_path, runtime_library):
    """pywave.ExecutionEngine (MLIR's convention: no early return after a failed call): the
    sparsifier's helpers, named @"_insert_dense_compressed_-9223372036854775808_...", get
    their packed wrappers; a good file prints the matrix; a hostile one runs on over empty or
    zeroed buffers (never out of bounds) and ``invoke`` raises the first error."""
    program = tmp_path / "read_file.mlir"
    program.write_text((DATA / "read_file.mlir").read_text().replace(
        "func.func @main() {", "func.func @main() attributes {llvm.emit_c_interface} {"))
    bad = tmp_path / "bad.mtx"
    bad.write_text("%%MatrixMarket matrix coordinate real general\n3 4 2\n1 1 1\n0 2 2\n")
    code = f"""
import os, sys, pywave
engine = pywave.ExecutionEngine(open({str(program)!r}).read(), target="sm_90",
                                passes={RUNTIME_LIBRARY[runtime_library]!r})
for name in ({str(MATRIX)!r}, {str(bad)!r}):
    os.environ["TENSOR0"] = name
    try:
        engine.invoke("main")
    except pywave.ArgumentError as exc:
        print("ArgumentError:", exc)
    sys.stdout.flush()
engine.close()
"""
    env = fake_driver_env()
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=600, env=env, cwd=TESTS)
    assert proc.returncode == 0, proc.stderr
    good, _, after = proc.stdout.partition("ArgumentError:")
    (m, n), rows, cols, values = read_mtx(MATRIX)
    csr = printed(good)[0]
    positions, coordinates, _ = compressed(rows, cols, values, m)
    assert csr["pos[1]"] == positions.tolist() and csr["crd[1]"] == coordinates.tolist()
    assert f"{bad} line 4: coordinate 0 is 0, not within 1..3 (1-based)" in after


def test_missing_file_and_variable_are_errors(tmp_path):
    proc = _run_read_file(str(tmp_path / "none.mtx"))
    assert proc.returncode == 1
    assert f"cannot open {tmp_path / 'none.mtx'}: No such file or directory" in proc.stderr
    proc = _run_read_file(None)
    assert proc.returncode == 1
    assert "getTensorFilename: environment variable TENSOR0 (the file of tensor 0) is not set" \
        in proc.stderr


# ---------------------------------------------------------------------- on the GPU

@pytest.fixture(scope="session")
def cuda_device() -> None:
    if not runtime.device_count(runtime.KDLCUDA):
        pytest.skip("needs an NVIDIA GPU")


def check_sddmm(stdout: str) -> None:
    """``sddmm_file.mlir``'s printed result is S + (A B) at S's entries, by NumPy."""
    (m, n), rows, cols, values = read_mtx(MATRIX)
    a = np.add.outer(np.arange(m), np.arange(4)) + 1.0           # A[i][k] = i + k + 1
    b = np.subtract.outer(np.arange(n), np.arange(4)).T * 1.0    # B[k][j] = j - k
    product = a @ b
    positions, coordinates, stored = compressed(rows, cols, values, m)
    order = np.lexsort((cols, rows))
    expected = stored + product[rows[order], cols[order]]
    (result,) = printed(stdout)
    assert result["pos[1]"] == positions.tolist()
    assert result["crd[1]"] == coordinates.tolist()
    np.testing.assert_allclose(result["values"], expected, rtol=1e-6)


@pytest.mark.parametrize("runtime_library", ["false", "true"])
def test_sddmm_program_on_the_cpu_sparsifier(runtime_library):
    """The GPU test's program and oracle, with the sparsifier's own CPU loops instead of
    cuSPARSE (no enable-gpu-libgen; the program's mgpuCreateSparseEnv / Destroy go to the
    cuSPARSE stand-in)."""
    fake = need_fake_driver()
    env = fake_driver_env(TENSOR0=str(MATRIX),
                          WAVERT_CUSPARSE_LIBRARY=str(fake.with_name("libfake_cusparse.so")))
    proc = subprocess.run([sys.executable, "-m", "pywave", "run", str(DATA / "sddmm_file.mlir"),
                           "--target", "sm_90",
                           "--pass-pipeline=builtin.module(sparsifier{"
                           f"enable-runtime-library={runtime_library}}})"],
                          capture_output=True, text=True, timeout=600, env=env,
                          cwd=TESTS)
    assert proc.returncode == 0, proc.stderr
    check_sddmm(proc.stdout)


@pytest.mark.gpu
@pytest.mark.parametrize("runtime_library", ["false", "true"])
def test_sddmm_of_a_file_matrix(runtime_library, cuda_device):
    """cuSPARSE's SDDMM on the sampling matrix read from the file, against NumPy; the sparse
    tensors in generated code, or in libwavert's storage (the runtime library)."""
    env = dict(os.environ, TENSOR0=str(MATRIX))
    passes = sparse.sparsifier_pipeline().replace("enable-runtime-library=false",
                                                  f"enable-runtime-library={runtime_library}")
    proc = subprocess.run([sys.executable, "-m", "pywave", "run", str(DATA / "sddmm_file.mlir"),
                           f"--pass-pipeline={passes}"],
                          capture_output=True, text=True, timeout=600, env=env,
                          cwd=TESTS)
    assert proc.returncode == 0, proc.stderr
    check_sddmm(proc.stdout)
