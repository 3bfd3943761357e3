"""Stream ordering, threads, DLPack capsule ownership and module lifetime (GPU)."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

import pywave

pytestmark = pytest.mark.gpu

DATA = Path(__file__).parent / "data"
K0 = (DATA / "k0_scale.mlir").read_text()


@pytest.fixture
def dev(torch_cuda):
    return torch_cuda.device("cuda", torch_cuda.cuda.current_device())


# ----------------------------------------------------------------------------------------
# F13: the launch follows the producer's current stream without user synchronisation
# ----------------------------------------------------------------------------------------
def test_f13_torch_current_stream(torch_cuda, dev, compile_gpu):
    torch = torch_cuda
    mod = compile_gpu(K0)
    n = 1 << 26
    x = torch.empty(n, device=dev)
    six = torch.full((n,), 6.0, device=dev)
    s = torch.cuda.Stream(device=dev)
    torch.cuda.synchronize()
    with torch.cuda.stream(s):
        for _ in range(50):
            x.fill_(1.0)
            x.mul_(2)
            mod(x, 3.0)
            y = x.clone()
            assert torch.equal(y, six)


def test_f13_cupy_current_stream(cupy_mod, compile_gpu):
    cp = cupy_mod
    mod = compile_gpu(K0)
    n = 1 << 26
    x = cp.empty(n, dtype=cp.float32)
    cp.cuda.Device().synchronize()
    with cp.cuda.Stream(non_blocking=True):
        for _ in range(50):
            x.fill(1.0)
            x *= 2
            mod(x, 3.0)
            y = x.copy()
            assert bool((y == 6.0).all())


def test_explicit_stream_argument(torch_cuda, dev, compile_gpu):
    torch = torch_cuda
    mod = compile_gpu(K0)
    n = 1 << 20
    s = torch.cuda.Stream(device=dev)
    for stream in (s, s.cuda_stream, 0):
        x = torch.ones(n, device=dev)
        torch.cuda.synchronize()
        mod(x, 3.0, stream=stream)
        if isinstance(stream, int) and stream == 0:
            torch.cuda.synchronize()
        else:
            s.synchronize()
        assert torch.equal(x, torch.full((n,), 3.0, device=dev))


def test_explicit_cupy_stream_argument(cupy_mod, compile_gpu):
    cp = cupy_mod
    mod = compile_gpu(K0)
    s = cp.cuda.Stream(non_blocking=True)
    x = cp.ones(1 << 20, dtype=cp.float32)
    cp.cuda.Device().synchronize()
    mod(x, 3.0, stream=s)
    s.synchronize()
    assert bool((x == 3.0).all())


def test_bad_stream_argument(torch_cuda, dev, compile_gpu):
    mod = compile_gpu(K0)
    x = torch_cuda.ones(16, device=dev)
    for bad in ("s", -1, 1.5):
        with pytest.raises(pywave.ArgumentError, match="'stream'"):
            mod(x, 3.0, stream=bad)
    assert torch_cuda.equal(x, torch_cuda.ones(16, device=dev))


# ----------------------------------------------------------------------------------------
# Threads
# ----------------------------------------------------------------------------------------
def test_eight_threads_thousand_calls_each(torch_cuda, dev, compile_gpu):
    torch = torch_cuda
    mod = compile_gpu((DATA / "launch_outline.mlir").read_text())  # a += s
    tensors = [torch.zeros(4096, device=dev) for _ in range(8)]
    torch.cuda.synchronize()
    errors = []

    def work(t):
        try:
            with torch.cuda.device(dev):
                for _ in range(1000):
                    mod(t, 1.0)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(t,)) for t in tensors]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors
    torch.cuda.synchronize()
    for t in tensors:
        assert torch.equal(t, torch.full((4096,), 1000.0, device=dev))


def test_first_call_from_a_fresh_thread(torch_cuda, dev):
    torch = torch_cuda
    mod = pywave.compile(K0)
    x = torch.ones(1000, device=dev)
    torch.cuda.synchronize()
    errors = []

    def work():
        try:
            mod(x, 3.0)
            torch.cuda.synchronize(dev)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    th = threading.Thread(target=work)
    th.start()
    th.join()
    mod.close()
    assert not errors, errors
    assert torch.equal(x, torch.full((1000,), 3.0, device=dev))


# ----------------------------------------------------------------------------------------
# F20: capsules and memory
# ----------------------------------------------------------------------------------------
def test_f20_capsule_is_consumed_once(torch_cuda, dev, compile_gpu):
    torch = torch_cuda
    mod = compile_gpu(K0)
    x = torch.ones(1000, device=dev)
    cap = torch.utils.dlpack.to_dlpack(x)
    try:
        mod(cap, 3.0)
    except pywave.ArgumentError as exc:  # allowed: a clear "pass the array, not a capsule"
        assert "capsule" in str(exc)
    else:
        torch.cuda.synchronize()
        assert torch.equal(x, torch.full((1000,), 3.0, device=dev))
    with pytest.raises(pywave.ArgumentError) as info:
        mod(cap, 3.0)
    assert "'a'" in str(info.value) and "already consumed" in str(info.value)


def test_f20_no_leak_over_2000_calls(torch_cuda, dev, compile_gpu):
    torch = torch_cuda
    mod = compile_gpu(K0)
    n = 1 << 24  # 64 MiB
    mod(torch.ones(n, device=dev), 2.0)  # warm up caches
    torch.cuda.synchronize()
    start = torch.cuda.memory_allocated(dev)
    for _ in range(2000):
        x = torch.ones(n, device=dev)
        mod(x, 2.0)
        del x
    torch.cuda.synchronize()
    assert torch.cuda.memory_allocated(dev) == start


# ----------------------------------------------------------------------------------------
# F14: module lifetime
# ----------------------------------------------------------------------------------------
def _rss_bytes() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_f14_many_compiles_are_released(torch_cuda, dev):
    torch = torch_cuda
    head, tail = K0.split("func.func @main(%a: memref<?xf32>, %s: f32) {")
    a = torch.ones(256, device=dev)
    torch.cuda.synchronize()
    free_start = torch.cuda.mem_get_info(dev)[0]
    rss_mid = None
    for i in range(3000):
        src = (head + "func.func @main(%a: memref<?xf32>) {\n"
               f"    %s = arith.constant {i}.0 : f32\n" + tail)
        f = pywave.compile(src)
        a.fill_(1.0)
        f(a)
        assert a[0].item() == float(i)
        del f
        if i == 999:
            rss_mid = _rss_bytes()
    torch.cuda.synchronize()
    assert free_start - torch.cuda.mem_get_info(dev)[0] <= 64 << 20
    assert _rss_bytes() - rss_mid <= 256 << 20  # host memory bounded after warm-up


def test_f14_drop_module_while_kernel_may_run(torch_cuda, dev):
    torch = torch_cuda
    a = torch.ones(1 << 24, device=dev)
    torch.cuda.synchronize()
    f = pywave.compile(K0)
    f(a, 2.0)
    del f  # no unload under a running kernel
    torch.cuda.synchronize()
    assert torch.equal(a, torch.full((1 << 24,), 2.0, device=dev))
    g = pywave.compile(K0)
    g(a, 2.0)
    g.close()
    torch.cuda.synchronize()
    assert torch.equal(a, torch.full((1 << 24,), 4.0, device=dev))


# ----------------------------------------------------------------------------------------
# F08: two GPUs
# ----------------------------------------------------------------------------------------
@pytest.fixture
def two_gpus(torch_cuda):
    if torch_cuda.cuda.device_count() < 2:
        pytest.skip("needs two CUDA GPUs")
    return torch_cuda


def test_f08_runs_on_the_tensors_device(two_gpus, compile_gpu):
    torch = two_gpus
    torch.cuda.set_device(0)
    mod = compile_gpu((DATA / "vector_add.mlir").read_text())
    a = torch.arange(1000, dtype=torch.float32, device="cuda:1")
    b = torch.ones(1000, device="cuda:1")
    c = torch.empty(1000, device="cuda:1")
    mod(a, b, c)
    assert torch.cuda.current_device() == 0
    assert torch.equal(c, a + b)


def test_f08_mixed_devices(two_gpus, compile_gpu):
    torch = two_gpus
    mod = compile_gpu((DATA / "vector_add.mlir").read_text())
    a = torch.ones(8, device="cuda:0")
    b = torch.ones(8, device="cuda:1")
    with pytest.raises(pywave.ArgumentError) as info:
        mod(a, b, a)
    msg = str(info.value)
    assert "'a'" in msg and "'b'" in msg and ":0" in msg and ":1" in msg, msg
    with pytest.raises(pywave.ArgumentError) as info:
        mod(b, torch.ones(8), b)
    assert "'b'" in str(info.value) and "CPU" in str(info.value)
