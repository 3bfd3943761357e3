"""CompiledModule lifetimes on real JIT code (issue 12, item 1): a host function keeps its
module's code alive, close() is deferred while calls are in flight, and is safe from a call's
own callbacks.

Without a GPU the host code runs against the driver stand-in (build/*/libwavert/tests/
libfake_cuda.so, built by the C tests) in a child process; the `gpu` tests launch kernels.
"""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from conftest import run_to_pass

import pywave

#: A host function without kernels: it runs on the driver stand-in.
SCALARS_ONLY = """
func.func @main(%k: i32, %x: f32) {
  return
}
"""


def test_function_outlives_its_module():
    f = pywave.compile(SCALARS_ONLY, target="sm_90", disk_cache=False).main
    gc.collect()
    assert not f.code.closed and not f.code.released
    mod = pywave.compile(SCALARS_ONLY, target="sm_90", disk_cache=False)
    g = mod.main
    mod.close()
    assert mod.closed and g.code.released and "closed" in repr(mod)
    with pytest.raises(pywave.ArgumentError, match="main\\(\\): the compiled module is closed"):
        g(1, 2.0)
    with pytest.raises(pywave.Error, match="closed"):
        mod.main
    assert not f.code.closed  # another module's code


def _run_on_fake_driver(code: str) -> None:
    run_to_pass(textwrap.dedent(code), timeout=300)


PRELUDE = f"""
import gc, sys, threading, time
import pywave
TEXT = {SCALARS_ONLY!r}
def compile_():
    return pywave.compile(TEXT, target="sm_90", disk_cache=False)
"""


def test_function_of_a_dropped_module_runs_on_the_stand_in():
    _run_on_fake_driver(PRELUDE + """
    f = compile_().main
    gc.collect()
    for i in range(100):
        f(i, 1.5)
    print("PASS")
    """.replace("\n    ", "\n"))


def test_close_inside_callbacks_on_the_stand_in():
    _run_on_fake_driver(PRELUDE + """
    class Closing:
        def __init__(self, mod): self.mod = mod
        def __index__(self): self.mod.close(); return 1
        def __float__(self): self.mod.close(); return 1.0
    for position in (0, 1):
        for _ in range(20):
            mod = compile_()
            f = mod.main
            call = [1, 1.0]
            call[position] = Closing(mod)
            try:
                f(*call)
            except pywave.ArgumentError as exc:
                assert "the compiled module is closed" in str(exc), exc
            else:
                raise AssertionError("the call ran after close()")
            assert f.code.released and f.code.in_flight == 0
    print("PASS")
    """.replace("\n    ", "\n"))


def test_close_while_threads_call_on_the_stand_in():
    _run_on_fake_driver(PRELUDE + """
    sys.setswitchinterval(1e-6)
    for repeat in range(30):
        mod = compile_()
        f = mod.main
        ran, closed, errors = [], [], []
        def worker():
            try:
                while True:
                    try:
                        f(1, 2.0)
                    except pywave.ArgumentError as exc:
                        assert "closed" in str(exc)
                        closed.append(1)
                        return
                    ran.append(1)
            except BaseException as exc:
                errors.append(exc)
        ts = [threading.Thread(target=worker) for _ in range(8)]
        for t in ts: t.start()
        time.sleep(0.001 * (repeat % 5))
        mod.close()
        for t in ts: t.join()
        assert not errors, errors
        assert len(closed) == 8 and f.code.released and f.code.in_flight == 0
        del mod, f
        gc.collect()
    print("PASS")
    """.replace("\n    ", "\n"))


# ------------------------------------------------------------------------------------------
# On a GPU: kernels launched by functions whose module is gone or closing
# ------------------------------------------------------------------------------------------
@pytest.mark.gpu
def test_gpu_function_outlives_its_module(torch_cuda, mlir):
    torch = torch_cuda
    f = pywave.compile(mlir("scale_in_place.mlir")).main
    gc.collect()
    x = torch.ones(1000, device="cuda")
    f(x, 3.0)
    torch.cuda.synchronize()
    assert torch.equal(x, torch.full_like(x, 3.0))


class _ClosingTensor:
    """A DLPack producer over a torch tensor that closes the module in `where`."""

    def __init__(self, tensor, mod, where):
        self.tensor, self.mod, self.where = tensor, mod, where

    def __dlpack_device__(self):
        if self.where == "__dlpack_device__":
            self.mod.close()
        return self.tensor.__dlpack_device__()

    def __dlpack__(self, **kw):
        if self.where == "__dlpack__":
            self.mod.close()
        return self.tensor.__dlpack__(**kw)


@pytest.mark.gpu
@pytest.mark.parametrize("where", ["__dlpack_device__", "__dlpack__"])
def test_gpu_close_inside_dlpack(torch_cuda, mlir, where):
    torch = torch_cuda
    for _ in range(10):
        mod = pywave.compile(mlir("scale_in_place.mlir"))
        f = mod.main
        x = torch.ones(256, device="cuda")
        with pytest.raises(pywave.ArgumentError, match="the compiled module is closed"):
            f(_ClosingTensor(x, mod, where), 2.0)
        assert f.code.released
        torch.cuda.synchronize()
        assert torch.equal(x, torch.ones_like(x))


@pytest.mark.gpu
@pytest.mark.parametrize("repeat", range(5))
def test_gpu_close_and_gc_while_threads_launch(torch_cuda, mlir, repeat):
    torch = torch_cuda
    mod = pywave.compile(mlir("scale_in_place.mlir"))
    f = mod.main
    xs = [torch.ones(1 << 16, device="cuda") for _ in range(8)]
    errors, launched = [], [0] * 8

    def worker(i):
        try:
            while True:
                try:
                    f(xs[i], 1.0)
                except pywave.ArgumentError as exc:
                    assert "closed" in str(exc)
                    return
                launched[i] += 1
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    ts = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in ts:
        t.start()
    while sum(launched) < 200:
        pass
    if repeat % 2:
        mod.close()
    else:       # the module collected during calls, then the code closed through a function
        del mod
        gc.collect()
        f.code.close()
    for t in ts:
        t.join()
    torch.cuda.synchronize()
    assert errors == [] and f.code.released
    assert all(torch.equal(x, torch.ones_like(x)) for x in xs)


def test_a_module_in_a_garbage_cycle_is_released_without_a_crash():
    """The garbage collector finalises a cycle's objects in no set order: the JIT engine
    must not be freed (llvmlite's __del__) before the module's release calls its code. Run
    in a child: before the fix the process died of SIGSEGV."""
    code = ("import gc, sys, pywave\n"
            "gc.disable()\n"
            "class Holder: pass\n"
            "h = Holder(); h.self = h\n"
            "h.mod = pywave.compile(sys.stdin.read(), target='sm_90', format='ptx', "
            "disk_cache=False)\n"
            "assert type(h.mod._engine).__name__ == 'JitModule'\n"
            "del h\n"
            "gc.collect()\n"
            "print('released')\n")
    text = (Path(__file__).parent / "data" / "vector_add.mlir").read_text()
    out = subprocess.run([sys.executable, "-c", code], input=text, text=True,
                         capture_output=True, timeout=120, cwd="/",
                         env={**os.environ, "PYWAVE_CACHE": "0"})
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "released"
