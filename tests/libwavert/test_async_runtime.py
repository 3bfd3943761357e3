"""Programs on MLIR's async runtime (libwavert_runner's mlirAsyncRuntime*), through
``pywave run`` and ``pywave.ExecutionEngine``.

* data/runner/async_parallel_for.mlir: scf.parallel loops (1-D strided, 2-D with steps, reductions
  into memory with atomics, an scf.reduce loop) lowered by MLIR's ``async-parallel-for`` with
  its options (dispatch tree or a loop of tasks, worker counts, task sizes) and upstream's
  RUN-line pipeline of mlir/test/Integration/Dialect/Async/CPU, at -O0 and -O2. The values
  are checked against NumPy; every variant must print what pywave's own (sequential)
  lowering prints. Before pywave left its early-return checks out of coroutines, the
  variants with more than one block died of "free(): invalid pointer" at -O0 and hung at -O2.
* data/runner/async_values.mlir: async.execute with dependencies, values, awaits inside bodies and
  a group awaited inside a body.
* a runtime call in an async.execute body is refused at compile time.
"""

from __future__ import annotations

import ctypes
import os
import re
import subprocess
import sys

import numpy as np
import pytest

from conftest import TESTS, fake_driver_env

DATA = TESTS / "data" / "runner"   # host programs

#: The passes after async-parallel-for in upstream's Async/CPU RUN lines.
LOWERING = ("convert-async-to-llvm, convert-scf-to-cf, finalize-memref-to-llvm, arith-expand, "
            "memref-expand, convert-func-to-llvm, convert-arith-to-llvm, convert-cf-to-llvm, "
            "reconcile-unrealized-casts")
REF_COUNTING = "async-to-async-runtime, async-runtime-ref-counting, async-runtime-ref-counting-opt"
POLICY = "async-to-async-runtime, async-runtime-policy-based-ref-counting"


def _pipeline(*parts: str) -> str:
    return "--pass-pipeline=builtin.module(" + ", ".join(parts) + ")"


def _run(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pywave", "run", *argv], capture_output=True,
                          text=True, timeout=300, env=fake_driver_env(PYWAVE_CACHE="0"),
                          cwd=TESTS)


def _masked(text: str) -> str:
    return re.sub(r"base@ = 0x[0-9a-f]+", "base@ = <ptr>", text)


def _printed_arrays(text: str) -> list[np.ndarray]:
    """The arrays printMemref printed: each header's sizes and the numbers after it."""
    arrays = []
    for block in text.split("Unranked Memref")[1:]:
        sizes = [int(s) for s in re.search(r"sizes = \[([0-9, ]*)\]", block).group(1).split(",")]
        data = block.split("data = ", 1)[1]
        numbers = [float(x) for x in re.findall(r"-?\d+(?:\.\d+)?", data)]
        arrays.append(np.array(numbers).reshape(sizes))
    return arrays


def _expected_parallel_for() -> list[np.ndarray]:
    a = np.zeros(37, np.int64)
    a[3::2] = np.arange(3, 37, 2) ** 2 - 5
    b = np.full((4, 7), -1)
    for i in range(1, 4, 2):
        for j in range(0, 7, 3):
            b[i, j] = 10 * i + j
    s = np.array([sum(i for i in range(37) if i % 4 == k) for k in range(4)])
    r = np.array([sum(i * j / 2 for j in range(9)) for i in range(6)])
    return [a, b, s, r, np.array([a.sum()])]


@pytest.fixture(scope="module")
def reference() -> str:
    """data/runner/async_parallel_for.mlir through pywave's own lowering (scf.parallel run
    sequentially), its values checked against NumPy."""
    proc = _run(str(DATA / "async_parallel_for.mlir"))
    assert proc.returncode == 0, proc.stderr[-4000:]
    got = _printed_arrays(proc.stdout)
    want = _expected_parallel_for()
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
    return _masked(proc.stdout)


PARALLEL_FOR = [
    "async-parallel-for{min-task-size=1}",                        # dispatch tree, 1 per block
    "async-parallel-for{async-dispatch=true num-workers=3 min-task-size=2}",
    "async-parallel-for{async-dispatch=false num-workers=20 min-task-size=1}",
    "async-parallel-for{async-dispatch=false num-workers=2 min-task-size=4}",
    "async-parallel-for",                                         # defaults: one block here
]


@pytest.mark.parametrize("level", ["-O0", "-O2"])
@pytest.mark.parametrize("pass_", PARALLEL_FOR)
def test_async_parallel_for(reference, pass_, level):
    proc = _run(level, _pipeline(pass_, REF_COUNTING, LOWERING),
                str(DATA / "async_parallel_for.mlir"))
    assert proc.returncode == 0, (pass_, level, proc.stderr[-4000:])
    assert _masked(proc.stdout) == reference, (pass_, level)


@pytest.mark.parametrize("level", ["-O0", "-O3"])
def test_async_parallel_for_policy_based_ref_counting(reference, level):
    proc = _run(level, _pipeline("async-parallel-for{min-task-size=3}", POLICY, LOWERING),
                str(DATA / "async_parallel_for.mlir"))
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert _masked(proc.stdout) == reference


VALUES_OUT = ("Unranked Memref base@ = <ptr> rank = 1 offset = 0 sizes = [8] strides = [1] "
              "data = \n[21,  105,  22,  1,  2,  5,  8,  16]\n")


@pytest.mark.parametrize("argv", [["-O0"], ["-O2"],
                                  ["-O0", _pipeline(REF_COUNTING, LOWERING)],
                                  ["-O2", _pipeline(REF_COUNTING, LOWERING)]])
def test_async_values_awaits_and_groups(argv):
    """[7*3, 100+5, 7*3+1, k*k+1 for k < 3, their sum, twice the sum]: with pywave's own
    lowering (groups: MLIR's async lowering) and with upstream's in --pass-pipeline. (Not
    with async-runtime-policy-based-ref-counting: its policy drops a reference at every
    await, and this program awaits values and tokens more than once.)"""
    proc = _run(*argv, str(DATA / "async_values.mlir"))
    assert proc.returncode == 0, (argv, proc.stderr[-4000:])
    assert _masked(proc.stdout) == VALUES_OUT, argv


RUNTIME_CALL_IN_BODY = """
func.func private @mgpuStreamCreate() -> !llvm.ptr
func.func @helper() {
  %s = func.call @mgpuStreamCreate() : () -> !llvm.ptr
  return
}
func.func @main() {
  %c1 = arith.constant 1 : index
  %g = async.create_group %c1 : !async.group
  %t = async.execute {
    func.call @helper() : () -> ()
    async.yield
  }
  %r = async.add_to_group %t, %g : !async.token
  async.await_all %g
  return
}
"""


def test_runtime_call_in_an_async_body_is_refused(tmp_path):
    program = tmp_path / "body.mlir"
    program.write_text(RUNTIME_CALL_IN_BODY)
    proc = _run(str(program))
    assert proc.returncode == 1
    assert "error: the coroutine @async_execute_fn" in proc.stderr
    assert "through @helper (@mgpuStreamCreate)" in proc.stderr
    assert "Traceback" not in proc.stderr


ENGINE_PROGRAM = """
func.func @fill(%m: memref<64xi32>) attributes {llvm.emit_c_interface} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c64 = arith.constant 64 : index
  %g = async.create_group %c64 : !async.group
  scf.for %i = %c0 to %c64 step %c1 {
    %t = async.execute {
      %v = arith.index_cast %i : index to i32
      %w = arith.muli %v, %v : i32
      memref.store %w, %m[%i] : memref<64xi32>
      async.yield
    }
    %r = async.add_to_group %t, %g : !async.token
  }
  async.await_all %g
  return
}
"""


def test_execution_engine_waits_for_tasks_before_freeing_code():
    """Engines whose function ends with tasks still finishing on the workers are closed at
    once, several times: close waits for the pool (else a worker runs freed code)."""
    import pywave
    from mlir import runtime as rt
    for level in (0, 2, 0, 2):
        engine = pywave.ExecutionEngine(ENGINE_PROGRAM, opt_level=level)
        out = np.zeros(64, np.int32)
        arg = ctypes.pointer(ctypes.pointer(rt.get_ranked_memref_descriptor(out)))
        engine.invoke("fill", arg)
        engine.close()
        np.testing.assert_array_equal(out, np.arange(64) ** 2)


GROUP_FILL = """
func.func @fill(%x: memref<2xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %g = async.create_group %c2 : !async.group
  %t0 = async.execute {
    %one = arith.constant 1.0 : f32
    memref.store %one, %x[%c0] : memref<2xf32>
    async.yield
  }
  %i0 = async.add_to_group %t0, %g : !async.token
  %t1 = async.execute {
    %two = arith.constant 2.0 : f32
    memref.store %two, %x[%c1] : memref<2xf32>
    async.yield
  }
  %i1 = async.add_to_group %t1, %g : !async.token
  async.await_all %g
  return
}
"""


def test_modules_dropped_after_async_calls_wait_for_the_pool(tmp_path):
    """Host programs whose async.execute bodies run on the runtime's pool, compiled (disk-cache
    hits load the pre-linked shared object) and called 30 times, each module dropped without
    close(): its code is unloaded only once the pool's tasks are done (a task may still run
    the tail of a coroutine after await_all returned; that segfaulted in one run of two)."""
    code = f"""
import numpy as np, pywave
text = {GROUP_FILL!r}
for i in range(30):
    a = pywave.compile(text + f"\\n// {{i % 3}}\\n")
    y = np.zeros(2, dtype=np.float32)
    a.fill(y)
    assert y.tolist() == [1.0, 2.0], y
print("PASS")
"""
    env = dict(os.environ, PYWAVE_CACHE_DIR=str(tmp_path))
    for _ in range(2):
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              timeout=300, env=env)
        assert proc.returncode == 0 and proc.stdout.strip() == "PASS", \
            f"rc {proc.returncode}: {proc.stdout[-500:]} {proc.stderr[-2000:]}"
