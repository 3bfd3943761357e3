"""Per-call launch overhead of pywave against its peers, measured in one process.

    python3 bench/launch.py [--calls N] [--reps R] [--arg-counts 1,4,16,64] [--no-curve]
                            [--no-pin] [--cpu C]
    python3 bench/launch.py --dry-run [--target sm_90]

Workloads: a 3-tensor elementwise add at 1 element and an empty kernel. For each launcher
the host-side enqueue time per call (a loop of N calls, synchronised before and after the
loop but timed without the final sync), min and median over R repetitions. Peers: the raw
driver floor (bench/launch_floor.c: a C loop of cuLaunchKernel calls of an empty kernel with
3 or 0 parameters, built as a shared library and called through ctypes), CuPy RawKernel,
torch.add(out=), Triton. Needs torch and an NVIDIA GPU: without them it says in one line
which is missing and exits with status 77 (skipped), measuring nothing; the peers CuPy and
Triton are optional (a missing one is reported and left out).

Robustness: every launcher runs in this process and thread, on torch's current stream in the
primary context (the floor loads its own empty kernels there); the thread is pinned to one
CPU (--cpu, default the highest-numbered allowed; --no-pin: not pinned); the repetitions are
interleaved (each round measures every launcher once, the order rotated per round), so that
clock or load drift reaches all launchers alike. Ratios are of minima, with the ratio of
medians beside.

The argument-count curve: one single-thread kernel per count n that adds element 0 of its n
float32 tensors into the first, called with n tensors by pywave (torch tensors and CuPy
arrays) and by CuPy RawKernel, against the floor for an empty kernel with n parameters
(what RawKernel passes, one pointer per tensor, and what pywave passes: the kernel reads
only the aligned pointer of each memref descriptor, pywave.kernels.unused_params) and with 5n
(MLIR's whole kernel ABI, 5 words per 1-D memref, for reference), and "torch exchange":
torch's own share, a C loop of the n conversions by torch's DLPack C exchange API
(bench/exchange_floor.c), which any consumer of torch tensors through it pays; per-call µs
(min over R, interleaved per n) and their ratios ("torch / floor+exchange": pywave against
the floor n plus torch's share).

--dry-run needs no GPU: it compiles every module for --target (default sm_90), checks the
kernels' parameter counts (n for args<n>) and builds and loads the floor libraries.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import ctypes
import functools
import gc
import itertools
import logging
import os
import re
import shutil
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from typing import Callable, Iterator

import pywave

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from needs import skip, torch_and_gpu  # noqa: E402  (bench/needs.py)
LOG = logging.getLogger("bench.launch")

#: Tensor counts of the argument-count curve.
ARG_COUNTS = (1, 4, 16, 64)
#: Kernel parameters per 1-D memref in MLIR's kernel ABI (allocated, aligned, offset, size,
#: stride); the curve's kernels read one, the aligned pointer, and pywave passes only it.
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


#: A launcher's timed loop: ``loop(calls)`` makes ``calls`` calls and returns their seconds
#: (enqueue time: synchronised by the caller before and after, not inside the timing).
Loop = Callable[[int], float]


def call_loop(fn: Callable[..., object], *args: object) -> Loop:
    """The loop ``fn(*args)`` ``calls`` times: no lambda or attribute lookup per call."""
    def loop(calls: int) -> float:
        t0 = time.perf_counter()
        for _ in itertools.repeat(None, calls):
            fn(*args)
        return time.perf_counter() - t0
    return loop


def measure_interleaved(loops: dict[str, Loop], sync: Callable[[], object], calls: int,
                        reps: int) -> dict[str, tuple[float, float]]:
    """{name: (min, median) µs per call}: after one warm-up round, ``reps`` rounds; each
    round runs every loop once (synchronised before and after each), in an order rotated by
    one launcher per round, so that drift (clock frequency, other load) reaches all alike and
    no launcher always follows the same one. The cyclic garbage collector is off meanwhile."""
    names = list(loops)
    for name in names:
        loops[name](min(calls, 1000))
    sync()
    times: dict[str, list[float]] = {name: [] for name in names}
    enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        for rep in range(reps):
            shift = rep % len(names)
            for name in names[shift:] + names[:shift]:
                sync()
                seconds = loops[name](calls)
                sync()
                times[name].append(seconds / calls * 1e6)
    finally:
        if enabled:
            gc.enable()
    return {name: (min(t), statistics.median(t)) for name, t in times.items()}


@functools.lru_cache(maxsize=None)
def build_library(source: str) -> str | None:
    """Path of bench/``source`` (a C file) built as a shared library in a fresh temporary
    folder, with Python's and pywave's DLPack headers on the include path, or None when the C
    compiler fails. The folder is removed when the process exits (the loaded library stays
    mapped)."""
    stem = os.path.splitext(source)[0]
    folder = tempfile.mkdtemp(prefix=f"pywave-{stem}-")
    atexit.register(shutil.rmtree, folder, True)
    lib = os.path.join(folder, f"lib{stem}.so")
    root = os.path.dirname(HERE)
    build = ["cc", "-std=c11", "-O2", "-shared", "-fPIC",
             f"-I{sysconfig.get_paths()['include']}",
             f"-I{os.path.join(root, 'libwavert', 'include')}",
             f"-I{os.path.join(root, 'pywave', '_native')}",
             os.path.join(HERE, source), "-ldl", "-o", lib]
    done = subprocess.run(build, capture_output=True, text=True)
    if done.returncode != 0:
        LOG.warning("building %s failed:\n%s", source, done.stderr)
        return None
    return lib


class ExchangeFloor:
    """The producer's share of tensor arguments (bench/exchange_floor.c through ctypes.PyDLL):
    a C loop converting each tensor of a tuple with its type's DLPack C exchange API, as
    pywave does per call. Raises RuntimeError when the library does not build; its loop
    raises what the conversion raises (a type without the exchange API: AttributeError)."""

    def __init__(self) -> None:
        path = build_library("exchange_floor.c")
        if path is None:
            raise RuntimeError("the exchange floor library does not build (see the warning)")
        self._run = ctypes.PyDLL(path).exchange_floor_run
        self._run.argtypes = [ctypes.py_object, ctypes.c_longlong,
                              ctypes.POINTER(ctypes.c_double)]

    def loop(self, tensors: tuple[object, ...]) -> Loop:
        """The timed loop: ``calls`` conversions of every tensor in ``tensors``."""
        seconds = ctypes.c_double()

        def loop(calls: int) -> float:
            self._run(tensors, calls, ctypes.byref(seconds))
            return seconds.value
        return loop


class Floor:
    """The raw-driver floor in this process (bench/launch_floor.c through ctypes): empty
    kernels of P 8-byte parameters loaded into the context current on this thread (the
    primary context of ``ordinal`` when none is), launched on a given stream.

    ``library``: the driver, default $WAVERT_CUDA_LIBRARY (the one libwavert opens) else
    libcuda.so.1. Raises RuntimeError with the library's message when a step fails."""

    def __init__(self, library: str | None = None, ordinal: int = 0) -> None:
        path = build_library("launch_floor.c")
        if path is None:
            raise RuntimeError("the launch floor library does not build (see the warning)")
        self._lib = ctypes.CDLL(path)
        self._lib.launch_floor_error.restype = ctypes.c_char_p
        self._lib.launch_floor_open.argtypes = [ctypes.c_char_p, ctypes.c_int]
        self._lib.launch_floor_kernel.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_void_p)]
        self._lib.launch_floor_run.argtypes = [ctypes.c_void_p, ctypes.c_void_p,
                                               ctypes.c_longlong,
                                               ctypes.POINTER(ctypes.c_double)]
        if library is None:
            library = os.environ.get("WAVERT_CUDA_LIBRARY") or None
        self._check(self._lib.launch_floor_open(library.encode() if library else None, ordinal))
        self._kernels: dict[int, ctypes.c_void_p] = {}

    def _check(self, rc: int) -> None:
        if rc != 0:
            raise RuntimeError(f"launch floor: {self._lib.launch_floor_error().decode()}")

    def kernel(self, params: int) -> ctypes.c_void_p:
        """The CUfunction of ``empty`` with ``params`` parameters (0..512), loaded once."""
        if params not in self._kernels:
            function = ctypes.c_void_p()
            self._check(self._lib.launch_floor_kernel(params, ctypes.byref(function)))
            self._kernels[params] = function
        return self._kernels[params]

    def loop(self, params: int, stream: int = 0) -> Loop:
        """The timed loop of raw cuLaunchKernel calls of the ``params`` kernel on ``stream``
        (a CUstream as an int; 0 the legacy default stream)."""
        function, handle, seconds = self.kernel(params), ctypes.c_void_p(stream), ctypes.c_double()

        def loop(calls: int) -> float:
            self._check(self._lib.launch_floor_run(function, handle, calls,
                                                   ctypes.byref(seconds)))
            return seconds.value
        return loop


def pin_cpu(cpu: int | None = None) -> int:
    """Pin the calling thread (Linux: only it, not threads already started by torch or the
    driver) to ``cpu``, default the highest-numbered CPU it may run on (CPU 0 usually takes
    the most interrupts); returns the CPU."""
    allowed = os.sched_getaffinity(0)
    chosen = max(allowed) if cpu is None else cpu
    if chosen not in allowed:
        raise SystemExit(f"--cpu {chosen}: not among the CPUs this process may use "
                         f"({sorted(allowed)})")
    os.sched_setaffinity(0, {chosen})
    return chosen


@contextlib.contextmanager
def pinned(pin: bool, cpu: int | None = None) -> Iterator[None]:
    """Run the block pinned to one CPU (pin_cpu) when ``pin``; the previous affinity after."""
    if not pin:
        yield
        return
    before = os.sched_getaffinity(0)
    LOG.info("pinned to CPU %d", pin_cpu(cpu))
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


def peer_rows(calls: int, reps: int, pin: bool = True,
              cpu: int | None = None) -> dict[str, tuple[float, float]]:
    """(min, median) µs per call of each launcher on the add and empty workloads, plus the raw
    driver floors ("raw cuLaunchKernel (C)": 3 parameters, for the add; "... 0 params" for the
    empty kernel), all in this process on torch's current stream, measured interleaved
    (measure_interleaved), pinned to one CPU unless ``pin`` is False."""
    import torch
    sync = torch.cuda.synchronize
    mod = pywave.compile(ADD)
    a, b, c = (torch.ones(1, device="cuda") for _ in range(3))
    stream = torch.cuda.current_stream().cuda_stream
    loops: dict[str, Loop] = {
        "pywave add (torch)": call_loop(mod.add, a, b, c),
        "pywave empty": call_loop(mod.empty),
        "torch.add(out=)": call_loop(functools.partial(torch.add, out=c), a, b),
    }
    try:
        import cupy
        ca, cb, cc = (cupy.ones(1, dtype=cupy.float32) for _ in range(3))
        loops["pywave add (cupy)"] = call_loop(mod.add, ca, cb, cc)
        kern = cupy.RawKernel(r'''extern "C" __global__ void add(const float* a,
            const float* b, float* c, int n) { int i = threadIdx.x; if (i < n) c[i] = a[i] + b[i]; }''',
                              "add")
        loops["cupy RawKernel"] = call_loop(kern, (1,), (1,), (ca, cb, cc, cupy.int32(1)))
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

        loops["triton"] = call_loop(lambda: tadd[(1,)](a, b, c, 1, BLOCK=32))
    except ImportError:
        LOG.warning("triton: missing")
    try:
        floor = Floor()
        loops["raw cuLaunchKernel (C)"] = floor.loop(ADD_FLOOR_PARAMS, stream)
        loops["raw cuLaunchKernel (C) 0 params"] = floor.loop(0, stream)
    except RuntimeError as e:
        LOG.warning("%s", e)
    with pinned(pin, cpu):
        rows = measure_interleaved(loops, sync, calls, reps)
    mod.close()
    return rows


def peer_ratios(rows: dict[str, tuple[float, float]],
                column: int = 0) -> list[tuple[str, float, str]]:
    """(label, ratio, target) for issue #15's three targets and the peers: ratios of the
    minima (``column`` 0) or of the medians (1)."""
    out = []

    def ratio(label: str, ours: str, theirs: str, target: str) -> None:
        if ours in rows and theirs in rows:
            out.append((label, rows[ours][column] / rows[theirs][column], target))

    ratio("pywave(torch) / C floor", "pywave add (torch)", "raw cuLaunchKernel (C)", "<= 1.15")
    ratio("pywave empty / C floor (0 params)", "pywave empty",
          "raw cuLaunchKernel (C) 0 params", "<= 1.10")
    ratio("pywave(cupy) / cupy RawKernel", "pywave add (cupy)", "cupy RawKernel", "<= 0.90")
    for peer in ("cupy RawKernel", "torch.add(out=)", "triton"):
        ratio(f"pywave(torch) / {peer}", "pywave add (torch)", peer, "")
    return out


#: Columns of the argument-count curve, in table order.
CURVE_COLUMNS = ("C floor n", "C floor 5n", "torch exchange", "cupy RawKernel",
                 "pywave (torch)", "pywave (cupy)")


def arg_curve(calls: int, reps: int, counts: tuple[int, ...] = ARG_COUNTS, pin: bool = True,
              cpu: int | None = None) -> dict[int, dict[str, float]]:
    """{n: {column: min µs per call}} for each tensor count n; a launcher that is missing
    (CuPy) or fails (the floor) has no entry. Each pywave and RawKernel kernel's result is
    checked once (a0[0] = 1 + n with all-ones inputs) before it is timed. Per n, the columns
    are measured interleaved (measure_interleaved) in this process, on torch's current stream
    (CuPy's for the CuPy columns), pinned to one CPU unless ``pin`` is False."""
    import torch
    sync = torch.cuda.synchronize
    mod = pywave.compile(args_module(counts))
    try:
        import cupy
    except ImportError:
        cupy = None
        LOG.warning("cupy: missing (no RawKernel or CuPy-array columns)")
    try:
        floor: Floor | None = Floor()
    except RuntimeError as e:
        floor = None
        LOG.warning("%s", e)
    try:
        exchange: ExchangeFloor | None = ExchangeFloor()
    except RuntimeError as e:
        exchange = None
        LOG.warning("%s", e)
    stream = torch.cuda.current_stream().cuda_stream
    curve: dict[int, dict[str, float]] = {}
    for n in counts:
        loops: dict[str, Loop] = {}
        if floor is not None:
            loops["C floor n"] = floor.loop(n, stream)
            loops["C floor 5n"] = floor.loop(MEMREF_WORDS * n, stream)
        fn = getattr(mod, f"args{n}")
        ts = [torch.ones(1, device="cuda") for _ in range(n)]
        fn(*ts)
        sync()
        assert ts[0].item() == 1 + n, f"pywave args{n}: {ts[0].item()} != {1 + n}"
        loops["pywave (torch)"] = call_loop(fn, *ts)
        if exchange is not None:
            loops["torch exchange"] = exchange.loop(tuple(ts))
        if cupy is not None:
            cs = [cupy.ones(1, dtype=cupy.float32) for _ in range(n)]
            fn(*cs)
            cupy.cuda.get_current_stream().synchronize()
            assert float(cs[0][0]) == 1 + n, f"pywave args{n} (cupy): {float(cs[0][0])}"
            loops["pywave (cupy)"] = call_loop(fn, *cs)
            kern = cupy.RawKernel(cupy_args_source(n), f"args{n}")
            rs = [cupy.ones(1, dtype=cupy.float32) for _ in range(n)]
            kern((1,), (1,), tuple(rs))
            cupy.cuda.get_current_stream().synchronize()
            assert float(rs[0][0]) == 1 + n, f"RawKernel args{n}: {float(rs[0][0])}"
            loops["cupy RawKernel"] = call_loop(kern, (1,), (1,), tuple(rs))
        with pinned(pin, cpu):
            rows = measure_interleaved(loops, sync, calls, reps)
        curve[n] = {column: lo for column, (lo, _) in rows.items()}
    mod.close()
    return curve


#: Ratios of the curve: name -> (numerator column, denominator column).
CURVE_RATIOS = {"torch / floor n": ("pywave (torch)", "C floor n"),
                "torch / floor 5n": ("pywave (torch)", "C floor 5n"),
                "torch / floor+exchange": ("pywave (torch)", "floor n + exchange"),
                "torch / RawKernel": ("pywave (torch)", "cupy RawKernel"),
                "cupy / RawKernel": ("pywave (cupy)", "cupy RawKernel"),
                "RawKernel / floor n": ("cupy RawKernel", "C floor n")}


def curve_ratios(row: dict[str, float]) -> dict[str, float]:
    """The curve's ratios of one row (those whose two columns are present). "floor n +
    exchange" is what any consumer of these torch tensors pays that passes pywave's kernel
    parameters: the driver's launch and torch's conversions."""
    row = dict(row)
    if "C floor n" in row and "torch exchange" in row:
        row["floor n + exchange"] = row["C floor n"] + row["torch exchange"]
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
    has n parameters (the aligned pointers it reads), and build the floor libraries."""
    for name, text in (("add/empty", ADD), ("arg-count curve", args_module(counts))):
        art = pywave.api.build(text, target=target)
        LOG.info("%s: compiled for %s: %s", name, target,
                 ", ".join(f"{b.name} ({b.format}, {len(b.data)} bytes)" for b in art.binaries))
    ptx = pywave.api.build(args_module(counts), target=target, format="ptx").binaries[0].data
    text = ptx.decode() if isinstance(ptx, bytes) else ptx
    for n in counts:
        entry = re.search(rf"\.entry args{n}\((.*?)\)", text, re.S)
        found = entry.group(1).count(".param") if entry else -1
        if found != n:
            raise SystemExit(f"args{n}: {found} kernel parameters, expected {n}")
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
    lib = build_library("launch_floor.c")
    if lib is None:
        raise SystemExit("the launch floor library (bench/launch_floor.c) does not build")
    loaded = ctypes.CDLL(lib)
    for entry in ("launch_floor_open", "launch_floor_kernel", "launch_floor_run",
                  "launch_floor_error"):
        getattr(loaded, entry)  # AttributeError: not exported
    LOG.info("launch floor library: %s", lib)
    ExchangeFloor()
    LOG.info("exchange floor library: built")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20000)
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--arg-counts", default=",".join(map(str, ARG_COUNTS)),
                        help="tensor counts of the argument-count curve (comma-separated)")
    parser.add_argument("--no-curve", action="store_true", help="skip the argument-count curve")
    parser.add_argument("--dry-run", action="store_true",
                        help="compile the modules for --target and build the floor library; "
                        "no GPU")
    parser.add_argument("--target", default="sm_90", help="chip for --dry-run")
    parser.add_argument("--no-pin", action="store_true",
                        help="do not pin the measuring thread to one CPU")
    parser.add_argument("--cpu", type=int, default=None,
                        help="the CPU to pin to (default: the highest-numbered one allowed)")
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
    why = torch_and_gpu()
    if why:
        skip("bench/launch.py", why)
    pin = not args.no_pin
    rows = peer_rows(args.calls, args.reps, pin, args.cpu)
    LOG.info("%-32s %8s %10s", "launcher", "min us", "median us")
    for name, (lo, med) in rows.items():
        LOG.info("%-32s %8.3f %10.3f", name, lo, med)
    medians = {label: ratio for label, ratio, _ in peer_ratios(rows, 1)}
    for label, ratio, target in peer_ratios(rows):
        LOG.info("ratio %s: %.2f (medians %.2f)%s", label, ratio, medians[label],
                 f"  (target {target})" if target else "")
    if not args.no_curve:
        LOG.info("\nargument-count curve, min us per call over %d interleaved reps of %d calls",
                 args.reps, args.calls)
        for line in curve_table(arg_curve(args.calls, args.reps, counts, pin, args.cpu)):
            LOG.info("%s", line)


if __name__ == "__main__":
    main()
