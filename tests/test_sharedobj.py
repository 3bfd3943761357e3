"""pywave.sharedobj: the compile cache's pre-linked host code. A stored entry gets a
``<digest>.pwso`` when a C compiler driver is present; a fresh process loads it with dlopen
without importing llvmlite; without a linker, or with a corrupt file, loading falls back to
MCJIT; two modules of one code keep separate kernel slots; and host code loaded this way runs
against the recording driver stand-in (libwavert/tests/fake_cuda.c, built here), calls
between its own functions included (one named ``main``)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import pywave
from pywave import api, cache, sharedobj

pytest.importorskip("pywave._native")

ROOT = Path(__file__).resolve().parent.parent
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
    assert len(list(cache_dir.glob("*.pwso"))) == 1 and len(list(cache_dir.glob("*.pwc"))) == 1
    warm = _fresh(LOAD, cache_dir)
    assert warm.returncode == 0, warm.stderr
    assert warm.stdout.split() == ["SharedObjectModule", "False"]


def test_without_a_linker_the_warm_start_uses_mcjit(tmp_path):
    cache_dir = tmp_path / "cache"
    assert _fresh(LOAD, cache_dir, CC="/nonexistent/cc").returncode == 0
    assert not list(cache_dir.glob("*.pwso"))
    warm = _fresh(LOAD, cache_dir)
    assert warm.stdout.split() == ["JitModule", "True"], warm.stderr


@needs_cc
def test_a_corrupt_shared_object_is_removed_and_mcjit_used(tmp_path):
    cache_dir = tmp_path / "cache"
    assert _fresh(LOAD, cache_dir).returncode == 0
    (pwso,) = cache_dir.glob("*.pwso")
    data = bytearray(pwso.read_bytes())
    data[-100] ^= 0xFF
    pwso.write_bytes(bytes(data))
    warm = _fresh(LOAD, cache_dir)
    assert warm.stdout.split() == ["JitModule", "True"], warm.stderr
    assert not pwso.exists()


@needs_cc
def test_two_modules_of_one_code_have_their_own_slots(tmp_path, monkeypatch):
    monkeypatch.setenv("PYWAVE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("PYWAVE_CACHE", raising=False)
    program = api.build(TEXT, target="sm_90").program()
    cache.store("k" * 64, program)
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
    program = api.build(TEXT, target="sm_90").program()
    cache.store("k" * 64, program)
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
def test_eviction_counts_shared_objects(tmp_path, monkeypatch):
    monkeypatch.setenv("PYWAVE_CACHE_DIR", str(tmp_path))
    program = api.build(TEXT, target="sm_90").program()
    cache.store("k" * 64, program)
    assert len(list(tmp_path.glob("*.pwso"))) == 1
    cache.evict(str(tmp_path), 0)
    assert not list(tmp_path.iterdir())


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


def test_host_code_uses_no_cpu_extensions():
    """The cached host object must run on any CPU of the triple (the cache key does not hold
    the CPU): a 512-byte copy, which the host CPU's AVX/AVX-512 would vectorise, stays in
    SSE2 registers."""
    from pywave import jit

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
