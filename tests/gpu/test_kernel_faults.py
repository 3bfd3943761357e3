"""Kernel faults and pywave.synchronize.

A kernel fault poisons the CUDA context for the rest of the process, so the faulting kernel runs
in a child interpreter; this process keeps working."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import pywave
from conftest import TESTS

DATA = TESTS / "data"

# The child: launch a store to address 0x10, then synchronise; print what each step raised.
CHILD = r"""
import sys, pywave
mod = pywave.compile(open(sys.argv[1]).read())
try:
    mod(16)                 # the launch itself succeeds: the fault is asynchronous
    pywave.synchronize(0)   # the documented synchronisation point
except pywave.DeviceError as exc:
    print("DeviceError:", exc, flush=True)
else:
    print("no error", flush=True)
try:
    mod(16)                 # the context is poisoned: later work fails, without an abort
    pywave.synchronize(0)
except pywave.Error as exc:
    print("next:", type(exc).__name__, flush=True)
else:
    print("next: no error", flush=True)
"""


@pytest.mark.gpu
def test_kernel_fault_is_a_device_error_at_synchronize(mlir, torch_cuda, compile_gpu):
    torch = torch_cuda
    env = dict(os.environ)
    here = str(Path(pywave.__file__).resolve().parent.parent)  # the pywave this run imported
    env["PYTHONPATH"] = os.pathsep.join(p for p in (here, env.get("PYTHONPATH")) if p)
    proc = subprocess.run([sys.executable, "-c", CHILD, str(DATA / "fault_store.mlir")],
                          text=True, capture_output=True, env=env, timeout=300)
    out = proc.stdout
    assert proc.returncode == 0, f"the child died (exit {proc.returncode}):\n{proc.stderr[-3000:]}"
    assert "terminate called" not in proc.stderr and "Aborted" not in proc.stderr, proc.stderr
    assert "DeviceError:" in out, out + proc.stderr
    assert "CUDA_ERROR_ILLEGAL_ADDRESS" in out or "illegal" in out.lower(), out
    assert "next: DeviceError" in out, out
    # This process (another CUDA context) is unaffected.
    mod = compile_gpu(mlir("scale_in_place.mlir"))
    x = torch.ones(1000, device="cuda")
    mod(x, 3.0)
    pywave.synchronize(x.device.index)
    assert torch.equal(x, torch.full((1000,), 3.0, device="cuda"))


@pytest.mark.gpu
def test_synchronize_waits_for_the_call(mlir, torch_cuda, compile_gpu):
    torch = torch_cuda
    mod = compile_gpu(mlir("scale_in_place.mlir"))
    n = 1 << 26
    x = torch.ones(n, device="cuda")
    torch.cuda.synchronize()
    mod(x, 3.0)
    pywave.synchronize(x.device.index)
    assert torch.equal(x, torch.full((n,), 3.0, device="cuda"))


@pytest.mark.parametrize("bad", [-1, "0", 1.0, True, None])
def test_synchronize_rejects_a_bad_device(bad):
    with pytest.raises(pywave.ArgumentError, match="GPU ordinal"):
        pywave.synchronize(bad)


def test_synchronize_is_exported():
    assert "synchronize" in pywave.__all__ and pywave.synchronize.__doc__
