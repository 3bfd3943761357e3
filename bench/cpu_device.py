"""The CPU device (target='cpu') against numpy.add: c = a + b on float32 arrays.

Prints, per size, the median time per call of the compiled vector add
(examples/vector_add.mlir, 256-thread blocks) and of ``numpy.add(a, b, out=c)``, and the
reduction kernel of tests/test_cpu_device.py (a gpu.barrier per step: fibers). Run:
``python bench/cpu_device.py`` (WAVERT_CPU_THREADS sets the pool size)."""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import numpy as np

import pywave

ROOT = Path(__file__).resolve().parent.parent


def median_seconds(fn, repeat: int = 7, number: int = 20) -> float:
    runs = []
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(number):
            fn()
        runs.append((time.perf_counter() - start) / number)
    return statistics.median(runs)


def main() -> int:
    mod = pywave.compile((ROOT / "examples" / "vector_add.mlir").read_text(), target="cpu")
    print(f"{'n':>10} {'pywave cpu us':>14} {'numpy.add us':>13} {'ratio':>7}")
    for n in (1 << 10, 1 << 16, 1 << 20, 1 << 24):
        a = np.random.rand(n).astype(np.float32)
        b = np.random.rand(n).astype(np.float32)
        c = np.empty_like(a)
        mod(a, b, c)
        assert np.array_equal(c, a + b)
        ours = median_seconds(lambda: mod(a, b, c))
        theirs = median_seconds(lambda: np.add(a, b, out=c))
        print(f"{n:>10} {ours * 1e6:>14.1f} {theirs * 1e6:>13.1f} {ours / theirs:>7.1f}")
    sys.path.insert(0, str(ROOT / "tests"))
    from test_cpu_device import REDUCE
    red = pywave.compile(REDUCE, target="cpu")
    blocks = 256
    x = np.ones(blocks * 256, dtype=np.int32)
    out = np.zeros(blocks, dtype=np.int32)
    t = median_seconds(lambda: red.run(x, out), repeat=3, number=3)
    assert np.all(out == 256)
    print(f"barrier reduction, {blocks} blocks of 256 threads (9 barriers each): "
          f"{t * 1e3:.2f} ms per call, {t / (blocks * 256 * 9) * 1e9:.0f} ns per thread-barrier")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
