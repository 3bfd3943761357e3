"""Sparse GPU programs: MLIR's sparsifier with ``enable-gpu-libgen`` hands SpMV, SpMM, SDDMM and
SpGEMM to cuSPARSE through the sparse ``mgpu*`` calls that libwavert implements
(tests/data/sparse); a 2:4 SpMM written with the gpu dialect's sparse ops runs on cuSPARSELt.

Here (no GPU): the sparsifier turns each program into those calls; the signatures MLIR's
gpu-to-llvm declares for every sparse op match libwavert's ``wavert_mgpu.h``; the lowered
programs compile for ``pywave run`` and their host code links against libwavert; each sparse
call is followed by an early return on a recorded error; :mod:`pywave.sparse` finds NVIDIA's
wheels. On an NVIDIA GPU with cuSPARSE (tests marked ``gpu``): ``pywave run`` prints what the
CPU computes (the ``.out`` files: the output of the sparsifier's CPU code run with MLIR's
ExecutionEngine; SpGEMM's worked out by hand, as MLIR 22.1's CPU sparsifier
asserts on a sparse matmul output; the 2:4 SpMM's from its formula).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
from mlir import ir, passmanager

from pywave import pipeline, runtime, sparse
from pywave.host import jit
from conftest import ROOT, TESTS

DATA = TESTS / "data" / "sparse"
HEADER = ROOT / "libwavert" / "include" / "wavert_mgpu.h"
#: Each program and the sparse calls the sparsifier must make for it.
PROGRAMS = {
    "spmv_csr": {"mgpuCreateSparseEnv", "mgpuCreateCsr", "mgpuCreateDnVec",
                 "mgpuSpMVBufferSize", "mgpuSpMV", "mgpuDestroySpMat", "mgpuDestroyDnVec",
                 "mgpuDestroySparseEnv"},
    "spmm_csr": {"mgpuCreateCsr", "mgpuCreateDnMat", "mgpuSpMMBufferSize", "mgpuSpMM",
                 "mgpuDestroySpMat", "mgpuDestroyDnMat"},
    "sddmm_csr": {"mgpuCreateCsr", "mgpuCreateDnMat", "mgpuSDDMMBufferSize", "mgpuSDDMM",
                  "mgpuDestroySpMat", "mgpuDestroyDnMat"},
    "spgemm_csr": {"mgpuCreateSparseEnv", "mgpuCreateCsr", "mgpuSpGEMMCreateDescr",
                   "mgpuSpGEMMWorkEstimation", "mgpuSpGEMMCompute", "mgpuSpMatGetSize",
                   "mgpuSetCsrPointers", "mgpuSpGEMMCopy", "mgpuSpGEMMDestroyDescr",
                   "mgpuDestroySpMat", "mgpuDestroySparseEnv"},
}
#: Programs written with the gpu dialect's sparse ops (no sparsifier), and their sparse calls.
DIRECT = {
    "spmm_24_lt": {"mgpuCreateSparseLtEnv", "mgpuCusparseLtCreate2To4SpMat",
                   "mgpuCreateCuSparseLtDnMat", "mgpuCuSparseLtSpMMBufferSize",
                   "mgpuCuSparseLtSpMM", "mgpuDestroyCuSparseLtSpMat",
                   "mgpuDestroyCuSparseLtDnMat", "mgpuDestroySparseLtEnv"},
}
#: Every program's sparse calls.
CALLS = PROGRAMS | DIRECT


def _lower(text: str, passes: str) -> str:
    with ir.Context():
        module = ir.Module.parse(text)
        passmanager.PassManager.parse(passes).run(module.operation)
        return str(module)


def _sparsified(name: str) -> str:
    """The program as pywave's pipeline gets it: sparsified, or as written (:data:`DIRECT`)."""
    text = (DATA / f"{name}.mlir").read_text()
    return text if name in DIRECT else _lower(text, sparse.sparsifier_pipeline())


def _called(text: str) -> set[str]:
    return set(re.findall(r"llvm\.call @(mgpu\w+)\(", text))


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_sparsifier_hands_the_kernel_to_cusparse(name):
    called = _called(_sparsified(name))
    assert PROGRAMS[name] <= called
    assert called & sparse.FUNCTIONS <= sparse.FUNCTIONS


# ---------------------------------------------------------------------- the ABI

_C_TYPES = {"intptr_t": "i64", "int64_t": "i64", "size_t": "i64", "int32_t": "i32"}


def _llvm_type(c_type: str) -> str | None:
    c_type = c_type.strip()
    if "*" in c_type:
        return "!llvm.ptr"
    return None if c_type == "void" else _C_TYPES.get(c_type, f"<{c_type}>")


def _header_signatures() -> dict[str, tuple[list[str], str | None]]:
    """wavert_mgpu.h's declarations as (LLVM parameter types, LLVM result type or None)."""
    text = re.sub(r"/\*.*?\*/", "", HEADER.read_text(), flags=re.S)
    found = {}
    for ret, name, params in re.findall(r"WAVERT_MGPU_EXPORT\s+([\w\s\*]+?)\s*\b(mgpu\w+)\s*"
                                        r"\(([^)]*)\)\s*;", text):
        types = [] if params.strip() == "void" else \
            [_llvm_type(re.sub(r"\b\w+\s*$", "", p.strip()) or p) for p in params.split(",")]
        found[name] = (types, _llvm_type(ret))
    return found


def _lowered_declarations() -> dict[str, tuple[list[str], str | None]]:
    """The mgpu* declarations gpu-to-llvm makes for every sparse op of the gpu dialect."""
    text = _lower((DATA / "gpu_sparse_ops.mlir").read_text(),
                  "builtin.module(gpu-to-llvm, convert-to-llvm, reconcile-unrealized-casts)")
    found = {}
    for name, params, ret in re.findall(r"llvm\.func @(mgpu\w+)\(([^)]*)\)(?: -> (\S+))?\n",
                                        text):
        found[name] = ([p.strip() for p in params.split(",") if p.strip()], ret or None)
    return found


def test_header_declares_what_gpu_to_llvm_calls():
    declared = _header_signatures()
    lowered = {n: s for n, s in _lowered_declarations().items() if n in sparse.FUNCTIONS}
    # Every entry point but the four environment ones, which programs call themselves.
    assert set(lowered) == sparse.FUNCTIONS - {"mgpuCreateSparseEnv", "mgpuDestroySparseEnv",
                                               "mgpuCreateSparseLtEnv", "mgpuDestroySparseLtEnv"}
    for name, signature in lowered.items():
        assert declared.get(name) == signature, name


def test_every_sparse_function_is_declared_and_exported():
    import ctypes
    declared = _header_signatures()
    library = ctypes.CDLL(runtime.LIBRARY)
    for name in sparse.FUNCTIONS:
        assert name in declared, name
        assert hasattr(library, name), name
    assert declared["mgpuCreateSparseEnv"] == ([], None)
    assert declared["mgpuCreateSparseLtEnv"] == ([], None)


# ---------------------------------------------------------------------- compile and link

@pytest.fixture(scope="module")
def built() -> dict[str, pipeline.Artifacts]:
    return {name: pipeline.Pipeline(_sparsified(name), target="sm_90", run_entry="main").run()
            for name in CALLS}


@pytest.mark.parametrize("name", sorted(CALLS))
def test_sparse_program_links_against_libwavert(name, built):
    art = built[name]
    assert art.host.run_result == "void"
    jit.initialise(runtime.LIBRARY)
    jit.JitModule(art.object_code).close()   # CompileError if a symbol is unresolved


@pytest.mark.parametrize("name", sorted(CALLS))
def test_each_sparse_call_returns_early_on_error(name, built):
    """After every call of a sparse entry point, the host code asks wavert_jit_failed and
    returns when the call recorded an error (no call runs on a failed handle)."""
    lines = built[name].host.llvm_ir.splitlines()
    calls = [i for i, line in enumerate(lines)
             if any(f"@{f}(" in line for f in sparse.FUNCTIONS) and "call " in line]
    called = {f for line in (lines[i] for i in calls) for f in sparse.FUNCTIONS
              if f"@{f}(" in line}
    assert called == CALLS[name]
    for i in calls:
        following = next(line for line in lines[i + 1:] if "call " in line)
        assert "@wavert_jit_failed()" in following, lines[i]


def test_callers_of_a_failed_helper_return_too(built):
    """@matvec returns a memref; when a sparse call in it failed it returns early with a poison
    descriptor, which @main must not read: it returns at once after the call."""
    lines = built["spmv_csr"].host.llvm_ir.splitlines()
    calls = [i for i, line in enumerate(lines) if "call " in line and "@matvec(" in line]
    assert calls
    for i in calls:
        following = next(line for line in lines[i + 1:] if "call " in line)
        assert "@wavert_jit_failed()" in following, lines[i]


# ---------------------------------------------------------------------- finding the libraries

def test_candidates_follow_the_toolkit_order(tmp_path, monkeypatch):
    home = tmp_path / "home" / "lib64"
    wheel = tmp_path / "site" / "nvidia" / "cusparse" / "lib"
    lt_wheel = tmp_path / "site" / "nvidia" / "cusparselt" / "lib"
    for folder, name in ((home, "libcusparse.so.12"), (wheel, "libcusparse.so.12"),
                         (lt_wheel, "libcusparseLt.so.0")):
        folder.mkdir(parents=True)
        (folder / name).write_bytes(b"")
    for variable in ("PYWAVE_CUDA_PATH", "CUDA_PATH"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(sys, "path", [str(tmp_path / "site")])
    found = sparse.candidates("cuSPARSE")
    assert found[:2] == [str(home / "libcusparse.so.12"), str(wheel / "libcusparse.so.12")]
    assert sparse.candidates("cuSPARSELt")[0] == str(lt_wheel / "libcusparseLt.so.0")


def test_preload_leaves_an_override_to_libwavert(tmp_path, monkeypatch):
    monkeypatch.setenv("WAVERT_CUSPARSE_LIBRARY", str(tmp_path / "nowhere.so"))
    monkeypatch.setattr(sparse, "_loaded", {})
    monkeypatch.setattr(sparse, "_tried", set())
    monkeypatch.setattr(sparse, "candidates", lambda library: pytest.fail("searched"))
    sparse.preload(["mgpuSpMV", "printF64"])
    assert sparse._loaded == {} and sparse._tried == {"cuSPARSE"}


@pytest.mark.parametrize("name", sorted(CALLS))
def test_object_code_names_its_sparse_calls(name, built):
    """What the pre-linked loader (which reads no symbol table) preloads for."""
    assert sparse.named_in(built[name].object_code) == CALLS[name]


def test_preload_ignores_host_code_without_sparse_calls(monkeypatch):
    monkeypatch.setattr(sparse, "_preload", lambda library: pytest.fail(library))
    sparse.preload(["mgpuMemAlloc", "printF64"])


# ---------------------------------------------------------------------- on the GPU

@pytest.fixture(scope="session")
def cuda_device() -> None:
    if not runtime.device_count(runtime.KDLCUDA):
        pytest.skip("needs an NVIDIA GPU")


def _pywave(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pywave", *argv], capture_output=True,
                          text=True, timeout=600, cwd=TESTS)


@pytest.mark.gpu
@pytest.mark.parametrize("name", sorted(CALLS))
def test_sparse_program_output(name, tmp_path, cuda_device):
    """The sparsifier's output (as the pass pipeline leaves it; :data:`DIRECT` programs as
    written) run by ``pywave run``."""
    lowered = tmp_path / f"{name}.mlir"
    lowered.write_text(_sparsified(name))
    proc = _pywave("run", str(lowered))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == (DATA / f"{name}.out").read_text()


@pytest.mark.gpu
def test_missing_cusparse_is_an_error_not_a_crash(tmp_path, cuda_device):
    """cuSPARSE that cannot be opened: the first sparse call (in @matmul) records the error
    naming the library, @matmul returns early, @main returns before reading its result (a
    poison descriptor), exit status 1."""
    lowered = tmp_path / "spmm_csr.mlir"
    lowered.write_text(_sparsified("spmm_csr"))
    env = dict(os.environ, WAVERT_CUSPARSE_LIBRARY=str(tmp_path / "libcusparse.so.12"))
    proc = subprocess.run([sys.executable, "-m", "pywave", "run", str(lowered)],
                          capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 1, (proc.returncode, proc.stderr)
    assert "mgpuCreateCsr: cannot open the cuSPARSE library" in proc.stderr
    assert proc.stdout == ""


@pytest.mark.gpu
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_sparse_program_through_pass_pipeline(name, cuda_device):
    """``pywave run FILE --pass-pipeline=<sparsifier>`` on the sparse_tensor source."""
    proc = _pywave("run", str(DATA / f"{name}.mlir"),
                   f"--pass-pipeline={sparse.sparsifier_pipeline()}")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == (DATA / f"{name}.out").read_text()
