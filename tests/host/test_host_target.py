"""Host programs: a module with no GPU op needs no GPU and no driver (target ``host``).

Each test runs in a fresh interpreter whose GPU drivers cannot be opened
(``WAVERT_CUDA_LIBRARY``/``WAVERT_HIP_LIBRARY`` name files that do not exist, the driver
stand-in's variables removed): a host program compiles, is called and is run there as on any
machine. With the stand-in as the CUDA driver, a host program's process never maps it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import pywave
from pywave import api

from conftest import TESTS, need_fake_driver


#: In place, scalars in and out, a returned memref the call allocated.
HOST_MODULE = r"""
func.func @scale(%a: memref<?xf32>, %s: f32) -> (f32, i64) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %n = memref.dim %a, %c0 : memref<?xf32>
  %zero = arith.constant 0.0 : f32
  %sum = scf.for %i = %c0 to %n step %c1 iter_args(%acc = %zero) -> (f32) {
    %v = memref.load %a[%i] : memref<?xf32>
    %w = arith.mulf %v, %s : f32
    memref.store %w, %a[%i] : memref<?xf32>
    %next = arith.addf %acc, %w : f32
    scf.yield %next : f32
  }
  %n64 = arith.index_cast %n : index to i64
  return %sum, %n64 : f32, i64
}
func.func @iota(%n: index) -> memref<?xi32> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %m = memref.alloc(%n) : memref<?xi32>
  scf.for %i = %c0 to %n step %c1 {
    %v = arith.index_cast %i : index to i32
    memref.store %v, %m[%i] : memref<?xi32>
  }
  return %m : memref<?xi32>
}
"""

#: A runner program: vector.print, printMemrefF32, an i32 result from another entry.
HOST_PROGRAM = r"""
memref.global "private" constant @table : memref<2x3xf32> = dense<[[1.5, 2.0, 3.0], [4.0, 5.0, 6.25]]>
func.func private @printMemrefF32(memref<*xf32>)
func.func @main() {
  %c = arith.constant 42 : i32
  vector.print %c : i32
  %m = memref.get_global @table : memref<2x3xf32>
  %u = memref.cast %m : memref<2x3xf32> to memref<*xf32>
  call @printMemrefF32(%u) : (memref<*xf32>) -> ()
  return
}
func.func @answer() -> i32 {
  %c = arith.constant 7 : i32
  vector.print %c : i32
  return %c : i32
}
func.func @fails() {
  %false = arith.constant false
  cf.assert %false, "the entry fails"
  return
}
"""

GPU_PROGRAM = r"""
func.func @main() {
  %c1 = arith.constant 1 : index
  %m = gpu.alloc () : memref<4xf32>
  gpu.launch blocks(%bx, %by, %bz) in (%x = %c1, %y = %c1, %z = %c1)
             threads(%tx, %ty, %tz) in (%a = %c1, %b = %c1, %c = %c1) {
    %v = arith.constant 1.0 : f32
    memref.store %v, %m[%tx] : memref<4xf32>
    gpu.terminator
  }
  gpu.dealloc %m : memref<4xf32>
  return
}
"""


def _env(tmp_path: Path, cuda: str = "/nonexistent/libcuda.so.1") -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WAVERT_", "FAKE_CUDA"))}
    env.update(WAVERT_CUDA_LIBRARY=cuda, WAVERT_HIP_LIBRARY="/nonexistent/libamdhip64.so",
               PYWAVE_CACHE_DIR=str(tmp_path / "cache"), PYTHONPATH=str(TESTS))
    return env


def _python(code: str, tmp_path: Path, **env) -> str:
    """Run ``code`` in a fresh interpreter without a driver; its stdout (it must print PASS
    last and exit 0)."""
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=300, cwd=TESTS, env=_env(tmp_path, **env))
    assert proc.returncode == 0 and proc.stdout.strip().endswith("PASS"), \
        proc.stdout[-2000:] + proc.stderr[-4000:]
    return proc.stdout


def _run(tmp_path: Path, text: str, *argv: str) -> subprocess.CompletedProcess:
    program = tmp_path / "prog.mlir"
    program.write_text(text)
    return subprocess.run([sys.executable, "-m", "pywave", "run", str(program), *argv],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path,
                          env=_env(tmp_path))


def test_compile_and_call_on_numpy_without_a_driver(tmp_path):
    _python(f"""
        import numpy as np, pywave
        from pywave.program import HOST
        assert pywave.device_count() == 0
        m = pywave.compile({HOST_MODULE!r})
        assert m.target == "host", m.target
        assert m.program.target == HOST and m.binaries == []
        assert repr(m) == "<pywave.CompiledModule functions=['scale', 'iota'] target=host>", m
        a = np.arange(5, dtype=np.float32)
        total, n = m.scale(a, 2.0)
        assert a.tolist() == [0.0, 2.0, 4.0, 6.0, 8.0], a          # written in place
        assert (total, n) == (20.0, 5), (total, n)
        r = m.iota(4)
        assert r.__dlpack_device__() == (1, 0)                       # kDLCPU
        assert np.from_dlpack(r).tolist() == [0, 1, 2, 3]
        assert m.scale.device_type == 1
        print("PASS")
    """, tmp_path)


def test_disk_cache_hit_is_a_host_program(tmp_path):
    code = f"""
        import numpy as np, pywave
        m = pywave.compile({HOST_MODULE!r})
        assert m.target == "host"
        a = np.ones(3, dtype=np.float32)
        assert m.scale(a, 3.0) == (9.0, 3)
        print("PASS")
    """
    _python(code, tmp_path)
    assert list((tmp_path / "cache").rglob("*")), "nothing was stored"
    _python(code, tmp_path)                     # the stored program, loaded


def test_wrong_arguments_are_named(tmp_path):
    _python(f"""
        import numpy as np, pywave
        m = pywave.compile({HOST_MODULE!r})

        class OnGpu:                      # a DLPack producer on cuda:0
            def __init__(self, a): self.a = a
            def __dlpack_device__(self): return (2, 0)
            def __dlpack__(self, **kw): return self.a.__dlpack__()

        class Managed(OnGpu):
            def __dlpack_device__(self): return (13, 0)

        a = np.zeros(2, dtype=np.float32)
        for arg, device in ((OnGpu(a), "cuda:0"), (Managed(a), "cuda_managed:0")):
            try:
                m.scale(arg, 1.0)
            except pywave.ArgumentError as exc:
                text = str(exc)
                assert "argument 'a'" in text and device in text and "CPU tensor" in text, text
                assert "host program" in text, text
            else:
                raise AssertionError("a GPU tensor was accepted")
        try:
            m.scale(a, 1.0, stream=1)
        except pywave.ArgumentError as exc:
            assert "stream=" in str(exc) and "host program" in str(exc), exc
        else:
            raise AssertionError("stream= was accepted")
        try:
            m.scale(np.zeros(2, dtype=np.float64), 1.0)
        except pywave.ArgumentError as exc:
            assert "argument 'a'" in str(exc), exc
        else:
            raise AssertionError("a float64 array was accepted")
        print("PASS")
    """, tmp_path)


def test_torch_cpu_tensor(tmp_path):
    pytest.importorskip("torch")
    _python(f"""
        import torch, pywave
        m = pywave.compile({HOST_MODULE!r})
        t = torch.arange(4, dtype=torch.float32)
        assert m.scale(t, 0.5) == (3.0, 4)
        assert t.tolist() == [0.0, 0.5, 1.0, 1.5], t
        print("PASS")
    """, tmp_path)


def test_driver_is_never_mapped(tmp_path):
    """With the driver stand-in as the CUDA library, a host program's compile, calls and
    release never load it (/proc/self/maps)."""
    fake = need_fake_driver()
    _python(f"""
        import numpy as np, pywave
        m = pywave.compile({HOST_MODULE!r})
        a = np.ones(3, dtype=np.float32)
        assert m.scale(a, 2.0) == (6.0, 3)
        m.close()
        maps = open("/proc/self/maps").read()
        assert {fake.name!r} not in maps, "the driver was loaded"
        print("PASS")
    """, tmp_path, cuda=str(fake))


def test_execution_engine_host_module(tmp_path):
    _python("""
        import ctypes, pywave
        from pywave.entry.engine import ExecutionEngine
        engine = ExecutionEngine('''
          func.func @add(%a: i32, %b: i32) -> i32 attributes {llvm.emit_c_interface} {
            %s = arith.addi %a, %b : i32
            return %s : i32
          }''')
        assert "target=host" in repr(engine), repr(engine)
        a, b, r = ctypes.c_int32(40), ctypes.c_int32(2), ctypes.c_int32(0)
        engine.invoke("add", ctypes.pointer(a), ctypes.pointer(b), ctypes.pointer(r))
        assert r.value == 42, r.value
        engine.close()
        print("PASS")
    """, tmp_path)


def test_run_prints_as_mlir_runner(tmp_path):
    proc = _run(tmp_path, HOST_PROGRAM, "--entry-point-result=void")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "42"
    assert lines[1].startswith("Unranked Memref base@ = 0x") and \
        lines[1].endswith("rank = 2 offset = 0 sizes = [2, 3] strides = [3, 1] data = "), lines
    assert lines[2:] == ["[[1.5,   2,   3], ", " [4,   5,   6.25]]"], lines
    assert proc.stderr == ""


@pytest.mark.parametrize("flags", [["-e", "answer"], ["--e", "answer", "-O0"],
                                   ["-e", "answer", "-O3"]])
def test_run_entry_and_result(tmp_path, flags):
    proc = _run(tmp_path, HOST_PROGRAM, *flags, "-entry-point-result=i32")
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "7\n7\n", "")


def test_run_entry_that_fails_exits_non_zero(tmp_path):
    proc = _run(tmp_path, HOST_PROGRAM, "-e", "fails")
    assert proc.returncode != 0
    assert "the entry fails" in proc.stdout + proc.stderr


def test_run_result_mismatch_is_refused(tmp_path):
    proc = _run(tmp_path, HOST_PROGRAM, "-e", "answer", "--entry-point-result=f32")
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.startswith("error: --entry-point-result=f32: @answer returns i32")


def test_gpu_program_says_it_needs_a_gpu_in_one_line(tmp_path):
    proc = _run(tmp_path, GPU_PROGRAM, "--target", "sm_90")
    assert proc.returncode == 1 and proc.stdout == ""
    assert len(proc.stderr.splitlines()) == 1, proc.stderr
    assert proc.stderr.startswith("error: ") and "CUDA driver" in proc.stderr, proc.stderr


def test_the_module_decides_the_target():
    """In process, no driver asked for a chip: the first GPU op decides (gpu_use)."""
    from pywave.frontend import gpu_use
    from pywave.program import HOST
    assert api.build(HOST_MODULE).target == HOST
    # "gpu" in a comment: the driver may be asked, the program is still a host program
    assert gpu_use.may_use_gpu("// no gpu here\n" + HOST_MODULE)
    assert api.build("// no gpu here\n" + HOST_MODULE).target == HOST
    assert not gpu_use.may_use_gpu(HOST_MODULE)
    assert gpu_use.may_use_gpu(HOST_MODULE, "builtin.module(convert-parallel-loops-to-gpu)")
    assert api.build(GPU_PROGRAM, target="sm_90").target.chip == "sm_90"
    runtime_call = """
      func.func private @mgpuStreamCreate() -> !llvm.ptr
      func.func @f() {
        %s = func.call @mgpuStreamCreate() : () -> !llvm.ptr
        return
      }"""
    assert api.build(runtime_call, target="sm_90").target.chip == "sm_90"
