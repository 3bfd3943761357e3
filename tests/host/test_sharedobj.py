"""pywave.host.sharedobj: the compile cache's pre-linked host code. A stored entry holds its host
code linked into a shared object when a C compiler driver is present; a fresh process loads
it with dlopen without importing llvmlite; without a linker it falls back to MCJIT; damaged
bytes of it make the whole entry corrupt (rebuilt); two modules of one code keep separate
kernel slots; and host code loaded this way runs against the recording driver stand-in
(libwavert/tests/fake_cuda.c, built here), calls between its own functions included (one
named ``main``)."""

from __future__ import annotations

import dataclasses
import logging
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import pywave
from pywave import api, cache, lookup
from pywave.host import jit, sharedobj
from pywave.kernels import toolkit
from conftest import ROOT

pytest.importorskip("pywave._native")

TEXT = """
module attributes {gpu.container_module} {
  gpu.module @k {
    gpu.func @empty() kernel { gpu.return }
  }
  func.func @main() {
    %c1 = arith.constant 1 : index
    gpu.launch_func @k::@empty blocks in (%c1, %c1, %c1) threads in (%c1, %c1, %c1)
    return
  }
  func.func @twice() {
    call @main() : () -> ()
    call @main() : () -> ()
    return
  }
}
"""
needs_cc = pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler (cc)")


def _fresh(code: str, cache_dir: Path, **env: str) -> subprocess.CompletedProcess:
    """``code`` in a new interpreter with the cache in ``cache_dir`` (cwd: not the checkout,
    whose pywave/ would shadow the installed package)."""
    run_env = dict(os.environ, PYWAVE_CACHE_DIR=str(cache_dir), **env)
    run_env.pop("PYWAVE_CACHE", None)
    return subprocess.run([sys.executable, "-c", code], env=run_env, cwd=cache_dir.parent,
                          capture_output=True, text=True, timeout=300)


LOAD = (f"import sys, pywave; m = pywave.compile({TEXT!r}, target='sm_90'); "
        "print(type(m._engine).__name__, 'llvmlite' in sys.modules)")


@needs_cc
def test_warm_start_loads_the_shared_object_without_llvmlite(tmp_path):
    cache_dir = tmp_path / "cache"
    first = _fresh(LOAD, cache_dir)
    assert first.returncode == 0, first.stderr
    assert first.stdout.split() == ["SharedObjectModule", "False"]   # the miss, too
    assert len(list(cache_dir.glob("*.pwc"))) == 1 and not list(cache_dir.glob("*.pwso"))
    warm = _fresh(LOAD, cache_dir)
    assert warm.returncode == 0, warm.stderr
    assert warm.stdout.split() == ["SharedObjectModule", "False"]


def test_without_a_linker_the_warm_start_uses_mcjit(tmp_path):
    cache_dir = tmp_path / "cache"
    assert _fresh(LOAD, cache_dir, CC="/nonexistent/cc").returncode == 0
    warm = _fresh(LOAD, cache_dir)
    assert warm.stdout.split() == ["JitModule", "True"], warm.stderr


@needs_cc
def test_a_damaged_shared_object_makes_the_entry_corrupt_and_rebuilt(tmp_path):
    cache_dir = tmp_path / "cache"
    assert _fresh(LOAD, cache_dir).returncode == 0
    (entry,) = cache_dir.glob("*.pwc")
    good = entry.read_bytes()
    data = bytearray(good)
    data[-100] ^= 0xFF          # the shared object is the entry's last part
    entry.write_bytes(bytes(data))
    warm = _fresh("import logging; logging.basicConfig(); " + LOAD, cache_dir)
    assert warm.returncode == 0, warm.stderr
    assert warm.stdout.split()[0] == "SharedObjectModule"    # rebuilt, linked again
    assert "checksum mismatch" in warm.stderr and entry.name in warm.stderr
    assert entry.read_bytes() != bytes(data)


@needs_cc
def test_two_modules_of_one_code_have_their_own_slots(tmp_path, monkeypatch):
    monkeypatch.setenv("PYWAVE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("PYWAVE_CACHE", raising=False)
    program = cache.store("k" * 64, lookup.prelinked(api.build(TEXT, target="sm_90").program()))
    assert program.shared_object is not None
    one, two = api.CompiledModule(program), api.CompiledModule(program)
    try:
        assert isinstance(one._engine, sharedobj.SharedObjectModule)
        assert isinstance(two._engine, sharedobj.SharedObjectModule)
        assert one._engine.address("_pywave_release_kernels") != \
            two._engine.address("_pywave_release_kernels")
        with pytest.raises(pywave.CompileError, match="no symbol 'nonexistent'"):
            one._engine.address("nonexistent")
    finally:
        one.close()
        two.close()


@needs_cc
def test_release_imports_nothing(tmp_path, monkeypatch):
    """A module still open at interpreter exit is released while the interpreter sets
    sys.modules entries to None; the release must not import (H200, Python 3.12: "import of
    _ctypes halted" printed at exit)."""
    monkeypatch.setenv("PYWAVE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("PYWAVE_CACHE", raising=False)
    program = cache.store("k" * 64, lookup.prelinked(api.build(TEXT, target="sm_90").program()))
    module = api.CompiledModule(program)
    assert isinstance(module._engine, sharedobj.SharedObjectModule)
    monkeypatch.setitem(sys.modules, "_ctypes", None)
    monkeypatch.setitem(sys.modules, "ctypes", None)
    module.close()
    assert module._code.closed


@pytest.mark.parametrize("holder", ["m", "sys._kept = m", "sys._kept = m.main"])
@pytest.mark.parametrize("cc", ["cc", "/nonexistent/cc"])
def test_module_alive_at_exit_prints_nothing(tmp_path, holder, cc):
    """Released during interpreter exit, when module globals may already be None (a module
    held by an attribute of sys is released last): pre-linked and MCJIT host code alike."""
    if cc == "cc" and shutil.which("cc") is None:
        pytest.skip("needs a C compiler (cc)")
    cache_dir = tmp_path / "cache"
    keep = LOAD.replace("print(", f"{holder}; print(")
    assert _fresh(keep, cache_dir, CC=cc).returncode == 0
    warm = _fresh(keep, cache_dir, CC=cc)
    assert warm.returncode == 0
    engine = "SharedObjectModule" if cc == "cc" else "JitModule"
    assert warm.stdout.split()[0] == engine
    assert warm.stderr == ""


@needs_cc
def test_eviction_removes_entries_and_shared_objects_of_earlier_versions(tmp_path,
                                                                         monkeypatch):
    monkeypatch.setenv("PYWAVE_CACHE_DIR", str(tmp_path))
    (tmp_path / ("0" * 64 + ".pwso")).write_bytes(b"PYWAVE-SO-1\n")   # kept by pywave < 6
    cache.store("k" * 64, lookup.prelinked(api.build(TEXT, target="sm_90").program()))
    cache.evict(str(tmp_path), 0)
    assert sorted(p.name for p in tmp_path.iterdir()) in ([], [toolkit.VERSIONS_FILE])


@needs_cc
def test_shared_object_host_code_runs_on_the_driver_stand_in(tmp_path):
    fake = tmp_path / "libfake_cuda.so"
    built = subprocess.run(["cc", "-std=c11", "-shared", "-fPIC", "-pthread", "-o", str(fake),
                            str(ROOT / "libwavert" / "tests" / "fake_cuda.c")],
                           capture_output=True, text=True)
    assert built.returncode == 0, built.stderr
    code = (f"import ctypes, os, sys, pywave; m = pywave.compile({TEXT!r}, target='sm_90'); "
            "m.main(); m.twice(); "
            "f = ctypes.CDLL(os.environ['WAVERT_CUDA_LIBRARY']); "
            "print(type(m._engine).__name__, f.fake_cuda_launch_count()); m.close()")
    env = {"WAVERT_CUDA_LIBRARY": str(fake)}
    mcjit = _fresh(code, tmp_path / "no-linker", CC="/nonexistent/cc", **env)
    assert mcjit.returncode == 0, mcjit.stderr
    assert mcjit.stdout.split() == ["JitModule", "3"]
    linked = tmp_path / "linked"
    assert _fresh(LOAD, linked).returncode == 0          # fills the cache, .pwso included
    warm = _fresh(code, linked, **env)
    assert warm.returncode == 0, warm.stderr
    assert warm.stdout.split() == ["SharedObjectModule", "3"]


@needs_cc
def test_a_shared_object_lacking_the_modules_symbols_falls_back_to_mcjit(tmp_path,
                                                                          monkeypatch, caplog):
    """An entry whose (checksummed) shared object is another module's code: the module loads
    its object code with MCJIT, with a warning, instead of failing every compile."""
    monkeypatch.setenv("PYWAVE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("PYWAVE_CACHE", raising=False)
    other = sharedobj.link(api.build(TEXT.replace("@twice", "@thrice").replace(
        "@main", "@first"), target="sm_90").program().object_code)
    assert other is not None
    program = dataclasses.replace(api.build(TEXT, target="sm_90").program(),
                                  shared_object=other)
    cache.store("k" * 64, program)
    with caplog.at_level(logging.WARNING, logger="pywave"):
        module = api.CompiledModule(cache.load("k" * 64))
    try:
        assert isinstance(module._engine, jit.JitModule) and module.functions == ["main", "twice"]
        assert "has no symbol" in caplog.text and "MCJIT" in caplog.text
    finally:
        module.close()


def test_host_code_uses_no_cpu_extensions():
    """The cached host object must run on any CPU of the triple (the cache key does not hold
    the CPU): a 512-byte copy, which the host CPU's AVX/AVX-512 would vectorise, stays in
    SSE2 registers."""
    from pywave.host import jit

    ir = textwrap.dedent("""
        define void @copy(ptr %dst, ptr %src) {
          %v = load [64 x i64], ptr %src
          store [64 x i64] %v, ptr %dst
          ret void
        }
        """)
    _, assembly = jit.compile_object(ir, opt_level=3, assembly=True)
    assert "movups" in assembly or "movaps" in assembly, assembly
    assert "ymm" not in assembly and "zmm" not in assembly, assembly
