"""The CPU device (target='cpu') against numpy and numba's CUDA simulator.

Prints one table: per case, the median time per call of pywave's CPU device, of numpy
(``numpy.add(a, b, out=c)``; ``a.reshape(-1, 256).sum(1)`` for the reduction) and, when numba
is installed, of the same kernel written for ``numba.cuda`` run by its simulator
(``NUMBA_ENABLE_CUDASIM=1``, set here before numba is imported), with the ratios. Cases: the
vector add of examples/vector_add.mlir (256-thread blocks) at 2^10, 2^16, 2^20, 2^24 float32
elements, and a shared-memory tree reduction of float32 blocks of 256 with a gpu.barrier per
step (8 steps + 1: loops over the block's threads cut at each barrier) at 2^20 elements. The simulator is slow (a
Python thread per GPU thread): it runs the vector add at 2^16 and the reduction at 2^14
elements, and its time is scaled per element to the row's size (marked ``*``).

Run: ``python bench/cpu_device.py`` ($WAVERT_CPU_THREADS sets the pool size). Targets (issue
33): vector add 2^16 <= 5.6 ms and >= 1000x the simulator; 2^24 within 3x of numpy.add;
the reduction over 2^20 <= 50 ms.

``python bench/cpu_device.py --checks`` instead times the checked mode (``checks=True``:
bounds, barrier and race checks; every thread a fiber) against the unchecked one: the vector
add at 2^16 and 2^20 and the reduction at 2^20, with the slowdown."""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")

import pywave  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
cuda = float32 = None


def median_seconds(fn, repeat: int = 7, number: int = 10) -> float:
    runs = []
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(number):
            fn()
        runs.append((time.perf_counter() - start) / number)
    return statistics.median(runs)


def numba_kernels():
    """(vector add, reduction) numba.cuda kernels, or None without numba."""
    global cuda, float32   # the simulator swaps the kernels' global `cuda` for its own
    try:
        from numba import cuda, float32
    except ImportError:
        return None

    @cuda.jit
    def add(a, b, c):
        i = cuda.grid(1)
        if i < c.size:
            c[i] = a[i] + b[i]

    @cuda.jit
    def reduce(a, out):
        s = cuda.shared.array(256, float32)
        t = cuda.threadIdx.x
        s[t] = a[cuda.grid(1)]
        cuda.syncthreads()
        step = 128
        while step > 0:
            if t < step:
                s[t] += s[t + step]
            cuda.syncthreads()
            step //= 2
        if t == 0:
            out[cuda.blockIdx.x] = s[0]

    return add, reduce


def reduce_f32_text() -> str:
    reduce_i32 = (ROOT / "tests" / "data" / "cpu_reduce.mlir").read_text()
    return reduce_i32.replace("i32", "f32").replace("arith.addi %x, %y", "arith.addf %x, %y")


def row(name, ours, numpy_s, sim_s, scaled):
    sim = "-" if sim_s is None else f"{sim_s * 1e3:.1f}{'*' if scaled else ''}"
    ratio = "-" if sim_s is None else f"{sim_s / ours:.0f}x"
    print(f"{name:<28} {ours * 1e3:>11.3f} {numpy_s * 1e3:>10.3f} {ours / numpy_s:>8.2f} "
          f"{sim:>13} {ratio:>10}")


def main() -> int:
    kernels = numba_kernels()
    if kernels is not None:
        from numba import cuda
    mod = pywave.compile((ROOT / "examples" / "vector_add.mlir").read_text(), target="cpu")
    print(f"{'case':<28} {'pywave ms':>11} {'numpy ms':>10} {'/numpy':>8} {'numba sim ms':>13} "
          f"{'sim/pywave':>10}")
    for log2 in (10, 16, 20, 24):
        n = 1 << log2
        a = np.random.rand(n).astype(np.float32)
        b = np.random.rand(n).astype(np.float32)
        c = np.empty_like(a)
        mod(a, b, c)
        assert np.array_equal(c, a + b)
        number = 10 if log2 < 24 else 3
        ours = median_seconds(lambda: mod(a, b, c), number=number)
        theirs = median_seconds(lambda: np.add(a, b, out=c), number=number)
        sim = None
        if kernels is not None and log2 == 16:
            start = time.perf_counter()
            kernels[0][n // 256, 256](a, b, c)
            sim = time.perf_counter() - start
            assert np.array_equal(c, a + b)
        row(f"vector add 2^{log2}", ours, theirs, sim, False)
    red = pywave.compile(reduce_f32_text(), target="cpu")
    n = 1 << 20
    x = np.random.default_rng(0).integers(0, 8, n).astype(np.float32)   # exact sums
    out = np.zeros(n // 256, dtype=np.float32)
    want = x.reshape(-1, 256).sum(axis=1)
    red.run(x, out)
    assert np.array_equal(out, want)
    ours = median_seconds(lambda: red.run(x, out), repeat=5, number=2)
    theirs = median_seconds(lambda: x.reshape(-1, 256).sum(axis=1), repeat=5, number=2)
    sim = None
    if kernels is not None:
        m = 1 << 14
        small = np.zeros(m // 256, dtype=np.float32)
        start = time.perf_counter()
        kernels[1][m // 256, 256](x[:m], small)
        sim = (time.perf_counter() - start) * (n / m)
        assert np.array_equal(small, want[: m // 256])
    row("barrier reduction 2^20", ours, theirs, sim, True)
    print(f"  {ours / (n * 9) * 1e9:.1f} ns per thread-barrier "
          f"(pool of {os.environ.get('WAVERT_CPU_THREADS', os.cpu_count())} threads)")
    return 0


def checks_main() -> int:
    """The checked mode's slowdown (``--checks``)."""
    text = (ROOT / "examples" / "vector_add.mlir").read_text()
    plain = pywave.compile(text, target="cpu")
    checked = pywave.compile(text, target="cpu", checks=True)
    print(f"{'case':<28} {'unchecked ms':>13} {'checked ms':>11} {'slowdown':>9}")
    for log2 in (16, 20):
        n = 1 << log2
        a = np.random.rand(n).astype(np.float32)
        b = np.random.rand(n).astype(np.float32)
        c = np.empty_like(a)
        times = []
        for mod in (plain, checked):
            c[:] = 0
            mod(a, b, c)
            assert np.array_equal(c, a + b)
            times.append(median_seconds(lambda: mod(a, b, c), repeat=5, number=3))
        print(f"{'vector add 2^' + str(log2):<28} {times[0] * 1e3:>13.3f} "
              f"{times[1] * 1e3:>11.3f} {times[1] / times[0]:>8.1f}x")
    n = 1 << 20
    x = np.random.default_rng(0).integers(0, 8, n).astype(np.float32)
    want = x.reshape(-1, 256).sum(axis=1)
    times = []
    for mod in (pywave.compile(reduce_f32_text(), target="cpu"),
                pywave.compile(reduce_f32_text(), target="cpu", checks=True)):
        out = np.zeros(n // 256, dtype=np.float32)
        mod.run(x, out)
        assert np.array_equal(out, want)
        times.append(median_seconds(lambda: mod.run(x, out), repeat=3, number=2))
    print(f"{'barrier reduction 2^20':<28} {times[0] * 1e3:>13.3f} {times[1] * 1e3:>11.3f} "
          f"{times[1] / times[0]:>8.1f}x")
    return 0


def parse_args(argv: list[str]):
    import argparse
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--checks", action="store_true",
                        help="time the checked mode (checks=True) against the unchecked one")
    return parser.parse_args(argv)


if __name__ == "__main__":
    raise SystemExit(checks_main() if parse_args(sys.argv[1:]).checks else main())
