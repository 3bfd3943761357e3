"""Stream ordering, threads, DLPack capsule ownership and module lifetime (GPU)."""

from __future__ import annotations

import gc
import os
import threading

import pytest

import pywave
from conftest import TESTS

pytestmark = pytest.mark.gpu

DATA = TESTS / "data"
SCALE = (DATA / "scale_in_place.mlir").read_text()


@pytest.fixture
def dev(torch_cuda):
    return torch_cuda.device("cuda", torch_cuda.cuda.current_device())


# ----------------------------------------------------------------------------------------
# The launch follows the producer's current stream without user synchronisation
# ----------------------------------------------------------------------------------------
def test_torch_current_stream(torch_cuda, dev, compile_gpu):
    torch = torch_cuda
    mod = compile_gpu(SCALE)
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


def test_cupy_current_stream(cupy_mod, compile_gpu):
    cp = cupy_mod
    mod = compile_gpu(SCALE)
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
    mod = compile_gpu(SCALE)
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
    mod = compile_gpu(SCALE)
    s = cp.cuda.Stream(non_blocking=True)
    x = cp.ones(1 << 20, dtype=cp.float32)
    cp.cuda.Device().synchronize()
    mod(x, 3.0, stream=s)
    s.synchronize()
    assert bool((x == 3.0).all())


def test_bad_stream_argument(torch_cuda, dev, compile_gpu):
    mod = compile_gpu(SCALE)
    x = torch_cuda.ones(16, device=dev)
    for bad in ("s", -1, 1.5):
        with pytest.raises(pywave.ArgumentError, match="'stream'"):
            mod(x, 3.0, stream=bad)
    assert torch_cuda.equal(x, torch_cuda.ones(16, device=dev))


# ----------------------------------------------------------------------------------------
# Threads
# ----------------------------------------------------------------------------------------
def test_eight_threads_thousand_calls_each(mlir, torch_cuda, dev, compile_gpu):
    torch = torch_cuda
    mod = compile_gpu(mlir("launch_outline.mlir"))  # a += s
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
    mod = pywave.compile(SCALE)
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
# Capsules and memory
# ----------------------------------------------------------------------------------------
def test_capsule_is_consumed_once(torch_cuda, dev, compile_gpu):
    torch = torch_cuda
    mod = compile_gpu(SCALE)
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


def test_no_leak_over_2000_calls(torch_cuda, dev, compile_gpu):
    torch = torch_cuda
    mod = compile_gpu(SCALE)
    n = 1 << 24  # 64 MiB
    mod(torch.ones(n, device=dev), 2.0)  # warm up caches
    torch.cuda.synchronize()
    gc.collect()        # tensors of earlier tests held in reference cycles go now, not mid-loop
    start = torch.cuda.memory_allocated(dev)
    for _ in range(2000):
        x = torch.ones(n, device=dev)
        mod(x, 2.0)
        del x
    torch.cuda.synchronize()
    gc.collect()
    assert torch.cuda.memory_allocated(dev) == start


# ----------------------------------------------------------------------------------------
# Module lifetime
# ----------------------------------------------------------------------------------------
def _rss_bytes() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_many_compiles_are_released(torch_cuda, dev):
    """3000 modules loaded and dropped: device and host memory stay bounded. 40 distinct
    sources are compiled once; later rounds are disk-cache hits, each a fresh module load and
    host-code JIT (the release path under test) without the MLIR compile (about 60 ms each)."""
    torch = torch_cuda
    head, tail = SCALE.split("func.func @main(%a: memref<?xf32>, %s: f32) {")
    a = torch.ones(256, device=dev)
    torch.cuda.synchronize()
    free_start = torch.cuda.mem_get_info(dev)[0]
    rss_mid = None
    for i in range(3000):
        value = i % 40
        src = (head + "func.func @main(%a: memref<?xf32>) {\n"
               f"    %s = arith.constant {value}.0 : f32\n" + tail)
        f = pywave.compile(src)
        a.fill_(1.0)
        f(a)
        assert a[0].item() == float(value)
        del f
        if i == 999:
            rss_mid = _rss_bytes()
    torch.cuda.synchronize()
    assert free_start - torch.cuda.mem_get_info(dev)[0] <= 64 << 20
    assert _rss_bytes() - rss_mid <= 256 << 20  # host memory bounded after warm-up


def test_drop_module_while_kernel_may_run(torch_cuda, dev):
    torch = torch_cuda
    a = torch.ones(1 << 24, device=dev)
    torch.cuda.synchronize()
    f = pywave.compile(SCALE)
    f(a, 2.0)
    del f  # no unload under a running kernel
    torch.cuda.synchronize()
    assert torch.equal(a, torch.full((1 << 24,), 2.0, device=dev))
    g = pywave.compile(SCALE)
    g(a, 2.0)
    g.close()
    torch.cuda.synchronize()
    assert torch.equal(a, torch.full((1 << 24,), 4.0, device=dev))


# ----------------------------------------------------------------------------------------
# Stream= with a cupy stream; producers without the exchange API (cupy, jax)
# ----------------------------------------------------------------------------------------
def test_cupy_stream_argument_orders_after_work_on_that_stream(cupy_mod, compile_gpu):
    # The work is on a non-blocking stream s while the current stream is the default one:
    # only a launch on s (after the fill and the multiply) gives 6 everywhere.
    cp = cupy_mod
    mod = compile_gpu(SCALE)
    n = 1 << 26
    x = cp.empty(n, dtype=cp.float32)
    s = cp.cuda.Stream(non_blocking=True)
    cp.cuda.Device().synchronize()
    for _ in range(20):
        with s:
            x.fill(1.0)
            x *= 2
        mod(x, 3.0, stream=s)
        with s:
            y = x.copy()
        s.synchronize()
        assert bool((y == 6.0).all())


def test_cupy_inputs_and_outputs(mlir, cupy_mod, compile_gpu):
    cp = cupy_mod
    mod = compile_gpu(mlir("vector_add.mlir"))
    a = cp.arange(100_000, dtype=cp.float32)
    b = cp.full(100_000, 0.5, dtype=cp.float32)
    c = cp.empty(100_000, dtype=cp.float32)
    mod(a, b, c)
    assert bool(cp.array_equal(c, a + b))


def test_cupy_no_leak_over_2000_calls(cupy_mod, compile_gpu):
    cp = cupy_mod
    mod = compile_gpu(SCALE)
    pool = cp.get_default_memory_pool()
    n = 1 << 24  # 64 MiB
    mod(cp.ones(n, dtype=cp.float32), 2.0)  # warm up caches
    cp.cuda.Device().synchronize()
    start = pool.used_bytes()
    for _ in range(2000):
        x = cp.ones(n, dtype=cp.float32)
        mod(x, 2.0)
        del x
    cp.cuda.Device().synchronize()
    assert pool.used_bytes() == start


def test_jax_pending_result_as_input_is_exact(mlir, torch_cuda, jax_gpu, compile_gpu):
    # JAX has no exchange API: pywave asks __dlpack__(stream=...) and JAX's pending
    # computation of `a` must be complete before the kernel reads it.
    torch, jnp = torch_cuda, jax_gpu.numpy
    mod = compile_gpu(mlir("vector_add.mlir"))
    n = 1 << 22
    for _ in range(5):
        a = jnp.arange(n, dtype=jnp.float32) * 2.0  # dispatched asynchronously
        b = jnp.ones(n, dtype=jnp.float32)
        dev = torch.device("cuda", next(iter(a.devices())).id)
        c = torch.empty(n, device=dev)
        mod(a, b, c)
        expected = torch.arange(n, dtype=torch.float32, device=dev) * 2.0 + 1.0
        assert torch.equal(c, expected)


def test_torch_jax_and_cupy_arguments_in_one_call(mlir, torch_cuda, cupy_mod, jax_gpu, compile_gpu):
    torch, cp, jnp = torch_cuda, cupy_mod, jax_gpu.numpy
    mod = compile_gpu(mlir("vector_add.mlir"))
    b = jnp.full((1000,), 0.5, dtype=jnp.float32)
    dev_id = next(iter(b.devices())).id
    a = torch.arange(1000, dtype=torch.float32, device=torch.device("cuda", dev_id))
    with cp.cuda.Device(dev_id):
        c = cp.empty(1000, dtype=cp.float32)
        mod(a, b, c)
        assert bool(cp.array_equal(c, cp.arange(1000, dtype=cp.float32) + 0.5))


# ----------------------------------------------------------------------------------------
# Async host code: ordering and independent chains
# ----------------------------------------------------------------------------------------
def test_async_host_code_follows_the_torch_stream(mlir, torch_cuda, dev, compile_gpu):
    # x.fill_/y.fill_ are still pending on s when the call creates its streams (after a
    # sleep kernel): only streams ordered after s at entry give x = 7, y = 5.
    torch = torch_cuda
    mod = compile_gpu(mlir("async_accumulate.mlir"))
    n = 1 << 24
    x = torch.empty(n, device=dev)
    y = torch.empty(n, device=dev)
    seven = torch.full((n,), 7.0, device=dev)
    five = torch.full((n,), 5.0, device=dev)
    s = torch.cuda.Stream(device=dev)
    torch.cuda.synchronize(dev)
    with torch.cuda.stream(s):
        for _ in range(20):
            if hasattr(torch.cuda, "_sleep"):
                torch.cuda._sleep(1_000_000)
            x.fill_(1.0)
            y.fill_(3.0)
            mod(x, y)
            x2 = x.clone()
            y2 = y.clone()
            assert torch.equal(x2, seven) and torch.equal(y2, five)


def test_independent_async_chains_run_concurrently(mlir, torch_cuda, dev, compile_gpu):
    # Each kernel sets its flag, then spins until it sees the other's: both see each other only
    # if the two `gpu.wait async` chains run at the same time. A serial run ends (bounded spin)
    # with seen == [0, 1] instead of hanging.
    torch = torch_cuda
    mod = compile_gpu(mlir("async_concurrent.mlir"))
    flags = torch.zeros(2, dtype=torch.int32, device=dev)
    seen = torch.zeros(2, dtype=torch.int32, device=dev)
    mod(flags, seen, 0)  # loads the kernel: no module load while a kernel spins
    torch.cuda.synchronize(dev)
    assert flags.tolist() == [1, 1] and seen.tolist() == [0, 0]
    for _ in range(5):
        flags.zero_()
        seen.zero_()
        mod(flags, seen, 10_000_000)
        torch.cuda.synchronize(dev)
        assert flags.tolist() == [1, 1]
        assert seen.tolist() == [1, 1], "the two token chains did not run concurrently"


# ----------------------------------------------------------------------------------------
# Threads: compile on one, call on another; a thread that only calls
# ----------------------------------------------------------------------------------------
def _in_thread(fn):
    errors = []

    def run():
        try:
            fn()
        except BaseException as exc:  # noqa: BLE001 - reported by the caller
            errors.append(exc)

    th = threading.Thread(target=run)
    th.start()
    th.join()
    assert not errors, errors


def test_compile_on_one_thread_call_on_another(torch_cuda, dev):
    torch = torch_cuda
    made = {}
    # A text of its own and no disk cache: the worker thread really compiles.
    source = SCALE + "\n// compiled on a worker thread (test_gpu_streams)\n"
    _in_thread(lambda: made.setdefault("mod", pywave.compile(source, disk_cache=False)))
    mod = made["mod"]
    try:
        x = torch.ones(1000, device=dev)
        torch.cuda.synchronize(dev)
        mod(x, 3.0)  # the main thread
        _in_thread(lambda: mod(x, 2.0))  # a third thread
        torch.cuda.synchronize(dev)
        assert torch.equal(x, torch.full((1000,), 6.0, device=dev))
    finally:
        mod.close()


def test_thread_that_never_touched_cuda_only_calls(torch_cuda, dev, compile_gpu):
    torch = torch_cuda
    mod = compile_gpu(SCALE)
    x = torch.ones(1000, device=dev)
    torch.cuda.synchronize(dev)
    _in_thread(lambda: mod(x, 3.0))  # no torch/CUDA call on that thread but pywave's
    torch.cuda.synchronize(dev)
    assert torch.equal(x, torch.full((1000,), 3.0, device=dev))
