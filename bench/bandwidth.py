"""Kernel quality: vector add over 2^28 float32 elements against torch.add(out=) on the same
tensors, as achieved memory bandwidth. Three kernels: examples/vector_add.mlir (one element
per thread, scalar loads; launches this large run its block-coarsened copy,
pywave.kernels.rewrites.coarsen), the same compiled with coarsen_threads=0 (the kernel as
written), and bench/vector_add_v4.mlir (four elements per thread, 16-byte vector loads and
stores, as torch's own kernel does).

    python3 bench/bandwidth.py [--log2n 28] [--reps 20]

Both are timed with CUDA events around ``reps`` back-to-back calls after a warm-up; bytes
moved per call = 3 * 4 * n (two reads, one write). Needs torch with an NVIDIA GPU: without
them it says which is missing and exits with status 77 (skipped), measuring nothing.
"""

from __future__ import annotations

import argparse
import os
import sys

import pywave

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from needs import skip, torch_and_gpu  # noqa: E402  (bench/needs.py)


def gbps(fn, n: int, reps: int) -> float:
    import torch
    for _ in range(3):
        fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(reps):
        fn()
    end.record()
    torch.cuda.synchronize()
    seconds = start.elapsed_time(end) / 1e3 / reps
    return 3 * 4 * n / seconds / 1e9


#: (name, file, lowering options) of each kernel measured.
KERNELS = (("vector_add.mlir", os.path.join(HERE, "..", "examples", "vector_add.mlir"), None),
           ("vector_add.mlir uncoarsened", os.path.join(HERE, "..", "examples", "vector_add.mlir"),
            {"coarsen_threads": 0}),
           ("vector_add_v4.mlir", os.path.join(HERE, "vector_add_v4.mlir"), None))


def measure_bandwidth(log2n: int, reps: int) -> dict[str, float]:
    """GB/s of torch.add(out=) ("torch.add(out=)") and of each pywave kernel (by its name in
    :data:`KERNELS`), each pywave result checked against torch's first."""
    import torch
    n = 1 << log2n
    a = torch.rand(n, device="cuda")
    b = torch.rand(n, device="cuda")
    c = torch.empty_like(a)
    out = {"torch.add(out=)": gbps(lambda: torch.add(a, b, out=c), n, reps)}
    for name, path, lowering in KERNELS:
        with open(path, encoding="utf-8") as fh:
            mod = pywave.compile(fh.read(), lowering=lowering)
        c.zero_()
        mod(a, b, c)
        assert torch.equal(c, a + b), f"{name}: result differs from torch"
        out[f"pywave {name}"] = gbps(lambda: mod(a, b, c), n, reps)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--log2n", type=int, default=28)
    parser.add_argument("--reps", type=int, default=20)
    args = parser.parse_args()
    why = torch_and_gpu()
    if why:
        skip("bench/bandwidth.py", why)
    results = measure_bandwidth(args.log2n, args.reps)
    theirs = results.pop("torch.add(out=)")
    print(f"n = 2^{args.log2n} float32")
    print(f"{'torch.add(out=):':40s} {theirs:8.1f} GB/s")
    for name, ours in results.items():
        print(f"{name:40s} {ours:8.1f} GB/s  ratio to torch {ours / theirs:.3f} "
              "(target >= 0.90)")


if __name__ == "__main__":
    main()
