"""Per-call launch overhead of pywave against its peers, measured in one process.

    python3 bench/launch.py [--calls N] [--reps R]

Workloads: a 3-tensor elementwise add at 1 element and an empty kernel. For each launcher
the host-side enqueue time per call (a loop of N calls, synchronised before and after the
loop but timed without the final sync), min and median over R repetitions. Peers: the raw
C cuLaunchKernel loop of bench/launch_c.c (the floor), CuPy RawKernel, torch.add(out=),
Triton. Needs an NVIDIA GPU; peers that are not installed are reported as missing.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import tempfile
import time

import pywave

HERE = os.path.dirname(os.path.abspath(__file__))

ADD = """
module attributes {gpu.container_module} {
  gpu.module @k {
    gpu.func @add(%a: memref<?xf32>, %b: memref<?xf32>, %c: memref<?xf32>, %n: index) kernel {
      %i = gpu.thread_id x
      %in = arith.cmpi ult, %i, %n : index
      scf.if %in {
        %x = memref.load %a[%i] : memref<?xf32>
        %y = memref.load %b[%i] : memref<?xf32>
        %z = arith.addf %x, %y : f32
        memref.store %z, %c[%i] : memref<?xf32>
      }
      gpu.return
    }
    gpu.func @empty() kernel { gpu.return }
  }
  func.func @add(%a: memref<?xf32>, %b: memref<?xf32>, %c: memref<?xf32>) {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %n = memref.dim %a, %c0 : memref<?xf32>
    gpu.launch_func @k::@add blocks in (%c1, %c1, %c1) threads in (%n, %c1, %c1)
        args(%a : memref<?xf32>, %b : memref<?xf32>, %c : memref<?xf32>, %n : index)
    return
  }
  func.func @empty() {
    %c1 = arith.constant 1 : index
    gpu.launch_func @k::@empty blocks in (%c1, %c1, %c1) threads in (%c1, %c1, %c1)
    return
  }
}
"""


def measure(fn, sync, calls: int, reps: int) -> tuple[float, float]:
    """(min, median) microseconds per call of ``fn()``."""
    for _ in range(min(calls, 1000)):
        fn()
    sync()
    times = []
    for _ in range(reps):
        sync()
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        t1 = time.perf_counter()
        sync()
        times.append((t1 - t0) / calls * 1e6)
    return min(times), statistics.median(times)


def c_floor(calls: int) -> float | None:
    """Raw cuLaunchKernel per launch (µs) from bench/launch_c.c, built against libwavert."""
    lib = os.path.dirname(pywave.__file__)
    exe = os.path.join(tempfile.mkdtemp(), "launch_c")
    inc = os.path.join(HERE, "..", "libwavert", "include")
    build = ["cc", "-std=c11", "-O2", os.path.join(HERE, "launch_c.c"), f"-I{inc}",
             os.path.join(lib, "libwavert.so"), f"-Wl,-rpath,{lib}", "-ldl", "-o", exe]
    if subprocess.run(build).returncode != 0:
        return None
    out = subprocess.run([exe, str(calls)], capture_output=True, text=True).stdout
    m = re.search(r"raw cuLaunchKernel:\s+([\d.]+)", out)
    return float(m.group(1)) if m else None


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=20000)
    parser.add_argument("--reps", type=int, default=7)
    args = parser.parse_args()
    import torch
    sync = torch.cuda.synchronize
    mod = pywave.compile(ADD)
    a, b, c = (torch.ones(1, device="cuda") for _ in range(3))
    rows: dict[str, tuple[float, float]] = {}
    rows["pywave add (torch)"] = measure(lambda: mod.add(a, b, c), sync, args.calls, args.reps)
    rows["pywave empty"] = measure(lambda: mod.empty(), sync, args.calls, args.reps)
    rows["torch.add(out=)"] = measure(lambda: torch.add(a, b, out=c), sync, args.calls,
                                      args.reps)
    try:
        import cupy
        ca, cb, cc = (cupy.ones(1, dtype=cupy.float32) for _ in range(3))
        rows["pywave add (cupy)"] = measure(lambda: mod.add(ca, cb, cc), sync, args.calls,
                                            args.reps)
        kern = cupy.RawKernel(r'''extern "C" __global__ void add(const float* a,
            const float* b, float* c, int n) { int i = threadIdx.x; if (i < n) c[i] = a[i] + b[i]; }''',
                              "add")
        one = cupy.int32(1)
        rows["cupy RawKernel"] = measure(lambda: kern((1,), (1,), (ca, cb, cc, one)), sync,
                                         args.calls, args.reps)
    except ImportError:
        print("cupy: missing")
    try:
        import triton
        import triton.language as tl

        @triton.jit
        def tadd(x, y, z, n, BLOCK: tl.constexpr):
            i = tl.arange(0, BLOCK)
            m = i < n
            tl.store(z + i, tl.load(x + i, mask=m) + tl.load(y + i, mask=m), mask=m)

        rows["triton"] = measure(lambda: tadd[(1,)](a, b, c, 1, BLOCK=32), sync, args.calls,
                                 args.reps)
    except ImportError:
        print("triton: missing")
    floor = c_floor(100000)
    print(f"{'launcher':24s} {'min us':>8s} {'median us':>10s}")
    if floor:
        print(f"{'raw cuLaunchKernel (C)':24s} {floor:8.3f} {'':>10s}")
    for name, (lo, med) in rows.items():
        print(f"{name:24s} {lo:8.3f} {med:10.3f}")
    pw = rows["pywave add (torch)"][0]
    if floor:
        print(f"ratio pywave(torch)/floor: {pw / floor:.2f}  (target <= 1.3)")
    for peer in ("cupy RawKernel", "torch.add(out=)", "triton"):
        if peer in rows:
            print(f"ratio pywave(torch)/{peer}: {pw / rows[peer][0]:.2f}")
    if "pywave add (cupy)" in rows and "cupy RawKernel" in rows:
        print(f"ratio pywave(cupy)/cupy RawKernel: "
              f"{rows['pywave add (cupy)'][0] / rows['cupy RawKernel'][0]:.2f}")


if __name__ == "__main__":
    main()
