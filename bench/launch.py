"""Per-call launch overhead of pywave against its peers, measured in one process.

    python3 bench/launch.py [--calls N] [--reps R] [--arg-counts 1,4,16,64] [--no-curve]
    python3 bench/launch.py --dry-run [--target sm_90]

Workloads: a 3-tensor elementwise add at 1 element and an empty kernel. For each launcher
the host-side enqueue time per call (a loop of N calls, synchronised before and after the
loop but timed without the final sync), min and median over R repetitions. Peers: the raw
C cuLaunchKernel loop of bench/launch_c.c (the floor), CuPy RawKernel, torch.add(out=),
Triton. Needs an NVIDIA GPU; peers that are not installed are reported as missing.

The argument-count curve: one single-thread kernel per count n that adds element 0 of its n
float32 tensors into the first, called with n tensors by pywave (torch tensors and CuPy
arrays) and by CuPy RawKernel, against the C floor for an empty kernel with n parameters
(what RawKernel passes: one pointer per tensor) and with 5n (what pywave passes: a memref
descriptor of 5 words per 1-D tensor), per-call µs (min over R) and their ratios.

--dry-run needs no GPU: it compiles every module for --target (default sm_90), checks the
kernels' parameter counts and builds launch_c.
"""

from __future__ import annotations

import argparse
import functools
import logging
import os
import re
import shutil
import statistics
import subprocess
import tempfile
import time
from typing import Callable

import pywave

HERE = os.path.dirname(os.path.abspath(__file__))
LOG = logging.getLogger("bench.launch")

#: Tensor counts of the argument-count curve.
ARG_COUNTS = (1, 4, 16, 64)
#: Kernel parameters per 1-D memref (allocated, aligned, offset, size, stride).
MEMREF_WORDS = 5
#: Kernel parameters of the floor for the add workload (as measured for issue #15).
ADD_FLOOR_PARAMS = 3

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


def args_module(counts: tuple[int, ...] = ARG_COUNTS) -> str:
    """MLIR with, per n in ``counts``, kernel and host function ``@args<n>`` of n
    ``memref<?xf32>``: one thread sets ``a0[0] = 1 + a0[0] + ... + a<n-1>[0]``."""
    kernels, hosts = [], []
    for n in counts:
        params = ", ".join(f"%a{i}: memref<?xf32>" for i in range(n))
        body = ["      %c0 = arith.constant 0 : index",
                "      %s0 = arith.constant 1.0 : f32"]
        for i in range(n):
            body += [f"      %v{i} = memref.load %a{i}[%c0] : memref<?xf32>",
                     f"      %s{i + 1} = arith.addf %s{i}, %v{i} : f32"]
        body.append(f"      memref.store %s{n}, %a0[%c0] : memref<?xf32>")
        kernels.append(f"    gpu.func @args{n}({params}) kernel {{\n" + "\n".join(body)
                       + "\n      gpu.return\n    }")
        operands = ", ".join(f"%a{i} : memref<?xf32>" for i in range(n))
        hosts.append(f"  func.func @args{n}({params}) {{\n"
                     "    %c1 = arith.constant 1 : index\n"
                     f"    gpu.launch_func @k::@args{n} blocks in (%c1, %c1, %c1) "
                     f"threads in (%c1, %c1, %c1)\n        args({operands})\n"
                     "    return\n  }")
    return ("module attributes {gpu.container_module} {\n  gpu.module @k {\n"
            + "\n".join(kernels) + "\n  }\n" + "\n".join(hosts) + "\n}\n")


def cupy_args_source(n: int) -> str:
    """CUDA C of RawKernel ``args<n>``: the same computation as ``args_module``'s kernel."""
    params = ", ".join(f"float* a{i}" for i in range(n))
    total = " + ".join(f"a{i}[0]" for i in range(n))
    return f'extern "C" __global__ void args{n}({params}) {{ a0[0] = 1.0f + {total}; }}'


def measure(fn: Callable[[], object], sync: Callable[[], object], calls: int,
            reps: int) -> tuple[float, float]:
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


@functools.lru_cache(maxsize=None)
def build_launch_c() -> str | None:
    """Path of bench/launch_c.c built against the installed libwavert, or None."""
    lib = os.path.dirname(pywave.__file__)
    exe = os.path.join(tempfile.mkdtemp(prefix="pywave-launch-c-"), "launch_c")
    inc = os.path.join(HERE, "..", "libwavert", "include")
    build = ["cc", "-std=c11", "-O2", os.path.join(HERE, "launch_c.c"), f"-I{inc}",
             os.path.join(lib, "libwavert.so"), f"-Wl,-rpath,{lib}", "-ldl", "-o", exe]
    done = subprocess.run(build, capture_output=True, text=True)
    if done.returncode != 0:
        LOG.warning("building launch_c failed:\n%s", done.stderr)
        return None
    return exe


def c_floor(calls: int, params: int) -> float | None:
    """Raw cuLaunchKernel per launch (µs) of an empty kernel with ``params`` 64-bit
    parameters, from bench/launch_c.c; None when it cannot be built or run."""
    exe = build_launch_c()
    if exe is None:
        return None
    done = subprocess.run([exe, str(calls), str(params)], capture_output=True, text=True)
    m = re.search(r"raw cuLaunchKernel:\s+([\d.]+)", done.stdout)
    if done.returncode != 0 or m is None:
        LOG.warning("launch_c %d %d: exit %d\n%s%s", calls, params, done.returncode,
                    done.stdout, done.stderr)
        return None
    return float(m.group(1))


def peer_rows(calls: int, reps: int) -> dict[str, tuple[float, float]]:
    """(min, median) µs per call of each launcher on the add and empty workloads, plus the C
    floors ("raw cuLaunchKernel (C)" for the add, "... 0 params" for the empty kernel)."""
    import torch
    sync = torch.cuda.synchronize
    mod = pywave.compile(ADD)
    a, b, c = (torch.ones(1, device="cuda") for _ in range(3))
    rows: dict[str, tuple[float, float]] = {}
    rows["pywave add (torch)"] = measure(lambda: mod.add(a, b, c), sync, calls, reps)
    rows["pywave empty"] = measure(lambda: mod.empty(), sync, calls, reps)
    rows["torch.add(out=)"] = measure(lambda: torch.add(a, b, out=c), sync, calls, reps)
    try:
        import cupy
        ca, cb, cc = (cupy.ones(1, dtype=cupy.float32) for _ in range(3))
        rows["pywave add (cupy)"] = measure(lambda: mod.add(ca, cb, cc), sync, calls, reps)
        kern = cupy.RawKernel(r'''extern "C" __global__ void add(const float* a,
            const float* b, float* c, int n) { int i = threadIdx.x; if (i < n) c[i] = a[i] + b[i]; }''',
                              "add")
        one = cupy.int32(1)
        rows["cupy RawKernel"] = measure(lambda: kern((1,), (1,), (ca, cb, cc, one)), sync,
                                         calls, reps)
    except ImportError:
        LOG.warning("cupy: missing")
    try:
        import triton
        import triton.language as tl

        @triton.jit
        def tadd(x, y, z, n, BLOCK: tl.constexpr):
            i = tl.arange(0, BLOCK)
            m = i < n
            tl.store(z + i, tl.load(x + i, mask=m) + tl.load(y + i, mask=m), mask=m)

        rows["triton"] = measure(lambda: tadd[(1,)](a, b, c, 1, BLOCK=32), sync, calls, reps)
    except ImportError:
        LOG.warning("triton: missing")
    for label, params in (("raw cuLaunchKernel (C)", ADD_FLOOR_PARAMS),
                          ("raw cuLaunchKernel (C) 0 params", 0)):
        floor = c_floor(100000, params)
        if floor is not None:
            rows[label] = (floor, floor)
    mod.close()
    return rows


def peer_ratios(rows: dict[str, tuple[float, float]]) -> list[tuple[str, float, str]]:
    """(label, ratio of minima, target) for issue #15's three targets and the peers."""
    out = []

    def ratio(label: str, ours: str, theirs: str, target: str) -> None:
        if ours in rows and theirs in rows:
            out.append((label, rows[ours][0] / rows[theirs][0], target))

    ratio("pywave(torch) / C floor", "pywave add (torch)", "raw cuLaunchKernel (C)", "<= 1.15")
    ratio("pywave empty / C floor (0 params)", "pywave empty",
          "raw cuLaunchKernel (C) 0 params", "<= 1.10")
    ratio("pywave(cupy) / cupy RawKernel", "pywave add (cupy)", "cupy RawKernel", "<= 0.90")
    for peer in ("cupy RawKernel", "torch.add(out=)", "triton"):
        ratio(f"pywave(torch) / {peer}", "pywave add (torch)", peer, "")
    return out


#: Columns of the argument-count curve, in table order.
CURVE_COLUMNS = ("C floor n", "C floor 5n", "cupy RawKernel", "pywave (torch)",
                 "pywave (cupy)")


def arg_curve(calls: int, reps: int,
              counts: tuple[int, ...] = ARG_COUNTS) -> dict[int, dict[str, float]]:
    """{n: {column: min µs per call}} for each tensor count n; a launcher that is missing
    (CuPy) or fails (the C floor) has no entry. Each pywave and RawKernel kernel's result is
    checked once (a0[0] = 1 + n with all-ones inputs) before it is timed."""
    import torch
    sync = torch.cuda.synchronize
    mod = pywave.compile(args_module(counts))
    try:
        import cupy
    except ImportError:
        cupy = None
        LOG.warning("cupy: missing (no RawKernel or CuPy-array columns)")
    curve: dict[int, dict[str, float]] = {}
    for n in counts:
        row: dict[str, float] = {}
        for column, params in (("C floor n", n), ("C floor 5n", MEMREF_WORDS * n)):
            floor = c_floor(calls, params)
            if floor is not None:
                row[column] = floor
        fn = getattr(mod, f"args{n}")
        ts = [torch.ones(1, device="cuda") for _ in range(n)]
        fn(*ts)
        sync()
        assert ts[0].item() == 1 + n, f"pywave args{n}: {ts[0].item()} != {1 + n}"
        row["pywave (torch)"] = measure(lambda: fn(*ts), sync, calls, reps)[0]
        if cupy is not None:
            cs = [cupy.ones(1, dtype=cupy.float32) for _ in range(n)]
            fn(*cs)
            cupy.cuda.get_current_stream().synchronize()
            assert float(cs[0][0]) == 1 + n, f"pywave args{n} (cupy): {float(cs[0][0])}"
            row["pywave (cupy)"] = measure(lambda: fn(*cs), sync, calls, reps)[0]
            kern = cupy.RawKernel(cupy_args_source(n), f"args{n}")
            rs = [cupy.ones(1, dtype=cupy.float32) for _ in range(n)]
            kern((1,), (1,), tuple(rs))
            cupy.cuda.get_current_stream().synchronize()
            assert float(rs[0][0]) == 1 + n, f"RawKernel args{n}: {float(rs[0][0])}"
            args = tuple(rs)
            row["cupy RawKernel"] = measure(lambda: kern((1,), (1,), args), sync, calls, reps)[0]
        curve[n] = row
    mod.close()
    return curve


#: Ratios of the curve: name -> (numerator column, denominator column).
CURVE_RATIOS = {"torch / floor 5n": ("pywave (torch)", "C floor 5n"),
                "torch / RawKernel": ("pywave (torch)", "cupy RawKernel"),
                "cupy / RawKernel": ("pywave (cupy)", "cupy RawKernel"),
                "RawKernel / floor n": ("cupy RawKernel", "C floor n")}


def curve_ratios(row: dict[str, float]) -> dict[str, float]:
    """The curve's ratios of one row (those whose two columns are present)."""
    return {k: row[a] / row[b] for k, (a, b) in CURVE_RATIOS.items() if a in row and b in row}


def curve_table(curve: dict[int, dict[str, float]]) -> list[str]:
    """The curve as text lines: µs per call, then the ratios."""
    ratio_names = tuple(CURVE_RATIOS)
    lines = ["tensors " + "".join(f"{c:>16s}" for c in CURVE_COLUMNS)
             + "".join(f"{r:>20s}" for r in ratio_names)]
    for n, row in curve.items():
        ratios = curve_ratios(row)
        lines.append(f"{n:7d} "
                     + "".join(f"{row[c]:16.3f}" if c in row else f"{'-':>16s}"
                               for c in CURVE_COLUMNS)
                     + "".join(f"{ratios[r]:20.2f}" if r in ratios else f"{'-':>20s}"
                               for r in ratio_names))
    return lines


def dry_run(target: str, counts: tuple[int, ...]) -> None:
    """Compile every module for ``target`` without a GPU, check that each ``args<n>`` kernel
    has 5n parameters, and build launch_c."""
    for name, text in (("add/empty", ADD), ("arg-count curve", args_module(counts))):
        art = pywave.api.build(text, target=target)
        LOG.info("%s: compiled for %s: %s", name, target,
                 ", ".join(f"{b.name} ({b.format}, {len(b.data)} bytes)" for b in art.binaries))
    ptx = pywave.api.build(args_module(counts), target=target, format="ptx").binaries[0].data
    text = ptx.decode() if isinstance(ptx, bytes) else ptx
    for n in counts:
        entry = re.search(rf"\.entry args{n}\((.*?)\)", text, re.S)
        found = entry.group(1).count(".param") if entry else -1
        if found != MEMREF_WORDS * n:
            raise SystemExit(f"args{n}: {found} kernel parameters, expected {MEMREF_WORDS * n}")
        LOG.info("args%d: %d kernel parameters", n, found)
    nvcc = shutil.which("nvcc")
    for n in counts:  # RawKernel's source, when nvcc is here to check it (CuPy uses NVRTC)
        if nvcc is None:
            LOG.info("nvcc not found: RawKernel sources not compiled")
            break
        with tempfile.TemporaryDirectory() as tmp:
            src = os.path.join(tmp, f"args{n}.cu")
            with open(src, "w", encoding="utf-8") as fh:
                fh.write(cupy_args_source(n))
            done = subprocess.run([nvcc, f"-arch={target}", "--ptx", src, "-o",
                                   os.path.join(tmp, "out.ptx")], capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f"RawKernel args{n} does not compile:\n{done.stderr}")
        LOG.info("RawKernel args%d: compiles (nvcc %s)", n, target)
    LOG.info("launch_c: %s", build_launch_c() or "NOT BUILT")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20000)
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--arg-counts", default=",".join(map(str, ARG_COUNTS)),
                        help="tensor counts of the argument-count curve (comma-separated)")
    parser.add_argument("--no-curve", action="store_true", help="skip the argument-count curve")
    parser.add_argument("--dry-run", action="store_true",
                        help="compile the modules for --target and build launch_c; no GPU")
    parser.add_argument("--target", default="sm_90", help="chip for --dry-run")
    args = parser.parse_args()
    try:
        counts = tuple(int(c) for c in args.arg_counts.split(","))
    except ValueError:
        parser.error(f"--arg-counts {args.arg_counts!r}: expected integers such as 1,4,16,64")
    if any(not 1 <= n <= 100 for n in counts):
        parser.error(f"--arg-counts {args.arg_counts!r}: each count must be in 1..100 "
                     "(5 parameters per tensor within the driver's 512)")
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if args.dry_run:
        dry_run(args.target, counts)
        return
    rows = peer_rows(args.calls, args.reps)
    LOG.info("%-32s %8s %10s", "launcher", "min us", "median us")
    for name, (lo, med) in rows.items():
        LOG.info("%-32s %8.3f %10.3f", name, lo, med)
    for label, ratio, target in peer_ratios(rows):
        LOG.info("ratio %s: %.2f%s", label, ratio, f"  (target {target})" if target else "")
    if not args.no_curve:
        LOG.info("\nargument-count curve, min us per call over %d reps of %d calls",
                 args.reps, args.calls)
        for line in curve_table(arg_curve(args.calls, args.reps, counts)):
            LOG.info("%s", line)


if __name__ == "__main__":
    main()
