"""Devices: tensors on a second GPU, tensors on two GPUs, CPU tensors among GPU ones.

Every test here needs two CUDA GPUs and skips with "needs two CUDA GPUs" otherwise."""

from __future__ import annotations

import pytest

import pywave

pytestmark = pytest.mark.gpu


@pytest.fixture
def two_gpus(torch_cuda):
    if torch_cuda.cuda.device_count() < 2:
        pytest.skip("needs two CUDA GPUs")
    torch_cuda.cuda.set_device(0)
    return torch_cuda


def test_runs_on_the_tensors_device(mlir, two_gpus, compile_gpu):
    torch = two_gpus
    mod = compile_gpu(mlir("vector_add.mlir"))
    a = torch.arange(1000, dtype=torch.float32, device="cuda:1")
    b = torch.ones(1000, device="cuda:1")
    c = torch.empty(1000, device="cuda:1")
    mod(a, b, c)
    assert torch.cuda.current_device() == 0
    assert torch.equal(c, a + b)


def test_async_host_code_on_the_second_gpu(mlir, two_gpus, compile_gpu):
    # Streams and events that async host code creates belong to the tensors' device.
    torch = two_gpus
    mod = compile_gpu(mlir("async_accumulate.mlir"))
    n = 1 << 20
    x = torch.full((n,), 1.0, device="cuda:1")
    y = torch.full((n,), 3.0, device="cuda:1")
    mod(x, y)
    assert torch.cuda.current_device() == 0
    assert torch.equal(x, torch.full((n,), 7.0, device="cuda:1"))
    assert torch.equal(y, torch.full((n,), 5.0, device="cuda:1"))


def test_cupy_arrays_on_the_second_gpu(mlir, two_gpus, cupy_mod, compile_gpu):
    cp = cupy_mod
    mod = compile_gpu(mlir("vector_add.mlir"))
    with cp.cuda.Device(1):
        a = cp.arange(1000, dtype=cp.float32)
        b = cp.full(1000, 0.5, dtype=cp.float32)
        c = cp.empty(1000, dtype=cp.float32)
        cp.cuda.Device(1).synchronize()
    with cp.cuda.Device(0):
        mod(a, b, c)
        assert cp.cuda.Device().id == 0
    with cp.cuda.Device(1):
        assert bool(cp.array_equal(c, a + b))


def test_mixed_devices(mlir, two_gpus, compile_gpu):
    torch = two_gpus
    mod = compile_gpu(mlir("vector_add.mlir"))
    a = torch.ones(8, device="cuda:0")
    b = torch.ones(8, device="cuda:1")
    with pytest.raises(pywave.ArgumentError) as info:
        mod(a, b, a)
    msg = str(info.value)
    assert "'a'" in msg and "'b'" in msg and "cuda:0" in msg and "cuda:1" in msg, msg
    assert torch.equal(a, torch.ones(8, device="cuda:0"))


def test_cpu_tensor_with_gpu_tensors(mlir, two_gpus, compile_gpu):
    torch = two_gpus
    mod = compile_gpu(mlir("vector_add.mlir"))
    b = torch.ones(8, device="cuda:1")
    with pytest.raises(pywave.ArgumentError) as info:
        mod(b, torch.ones(8), b)
    msg = str(info.value)
    assert "'b'" in msg and "CPU" in msg and "'a'" not in msg, msg
