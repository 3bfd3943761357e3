"""Instructions per call of a pywave host function, counted with callgrind on libwavert's
recording driver stand-in (no GPU, no torch needed).

    python3 bench/launch_instructions.py [--cases empty,streams,exchange3,exchange16,exchange64]
                                         [--annotate DIR]

Cases (bench/launch.py's modules, compiled for sm_90 and served from the disk cache):
  empty       ``mod.empty()``: no arguments, one launch of a kernel without parameters;
  streams     ``mod.streamed()`` (:data:`STREAMED`): host code that uses a stream of its own,
              the launch of ``empty`` between ``mgpuStreamCreate`` and
              ``mgpuStreamSynchronize`` / ``mgpuStreamDestroy`` (three runtime calls, each
              followed by the failure check);
  exchange3   ``mod.add(a, b, c)`` with three 1-element float32 "CUDA" tensors that take the
              DLPack C exchange API route of torch tensors (bench/exchange_standin.c);
  exchangeN   (N = 16, 64) ``args<N>`` of bench/launch.py's argument-count curve with N such
              tensors.
Device 0's primary context is made current first (what torch and CuPy leave), so a call
makes one driver call, the launch. Per case, the program runs under callgrind twice, with N = 1000 and 11000 calls; the
difference / 10000 cancels start-up and compilation. Printed per call: "whole" (everything:
the Python loop, the call, pywave._native, libwavert, the stand-in), "native" (inclusive
cost of hf_vectorcall: from the call's entry into pywave._native to its return) and
"stand-in" (the driver stand-in's and the exchange stand-in's own instructions, which a
real driver and torch replace). --annotate DIR keeps the callgrind files there for
callgrind_annotate (e.g. ``callgrind_annotate --inclusive=yes DIR/exchange3.11000``).

Needs valgrind, a C compiler and the stand-in: meson setup build/tests -Dtests=true && ninja -C
build/tests (WAVERT_CUDA_LIBRARY is set to it for the runs). Without one of them it says which
and exits with status 77 (skipped), measuring nothing.
"""

from __future__ import annotations

import argparse
import ctypes
import logging
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
LOG = logging.getLogger("bench.launch_instructions")
CASES = ("empty", "streams", "exchange3", "exchange16", "exchange64")
#: Tensor counts of the exchangeN cases (bench/launch.py's args<N> functions).
CURVE_COUNTS = (16, 64)
CALLS = (1000, 11000)
#: Exit status when this machine cannot run the benchmark (automake's "skipped").
SKIPPED = 77

#: The streams case: a launch on a stream the host code creates, waits for and destroys
#: (gpu-to-llvm: mgpuStreamCreate, the launch, mgpuStreamSynchronize, mgpuStreamDestroy).
STREAMED = """
module attributes {gpu.container_module} {
  gpu.module @k {
    gpu.func @empty() kernel { gpu.return }
  }
  func.func @streamed() {
    %c1 = arith.constant 1 : index
    %t0 = gpu.wait async
    %t1 = gpu.launch_func async [%t0] @k::@empty blocks in (%c1, %c1, %c1)
        threads in (%c1, %c1, %c1)
    gpu.wait [%t1]
    return
  }
}
"""


def missing_tools() -> list[str]:
    """What this machine lacks to run the benchmark: valgrind's callgrind tools and a C
    compiler, each with what provides it."""
    needed = {"valgrind": "valgrind (apt-get install valgrind)",
              "callgrind_annotate": "callgrind_annotate (valgrind)", "cc": "a C compiler (cc)"}
    return [what for tool, what in needed.items() if shutil.which(tool) is None]


def build_standin(out_dir: Path) -> Path:
    """bench/exchange_standin.c built into ``out_dir``."""
    lib = out_dir / "libexchange_standin.so"
    include = sysconfig.get_paths()["include"]
    subprocess.run(["cc", "-std=c11", "-O2", "-shared", "-fPIC", f"-I{include}",
                    f"-I{ROOT / 'libwavert' / 'include'}", f"-I{ROOT / 'pywave' / '_native'}",
                    str(HERE / "exchange_standin.c"), "-o", str(lib)], check=True)
    return lib


def standin_tensors(standin: str, count: int) -> tuple[list, list]:
    """``count`` 1-element float32 "CUDA" tensors of a class whose exchange API is the stand-in
    library ``standin`` (build_standin), at data addresses 0x10000, 0x20000...; and the
    FakeTensors (tests/native/test_args.py) holding their DLTensors, which must outlive them.
    Setting a tensor's ``dl`` to 0 makes its conversion fail (ValueError)."""
    lib = ctypes.PyDLL(standin)
    lib.standin_exchange_api_capsule.restype = ctypes.py_object
    if str(ROOT / "tests" / "native") not in sys.path:
        sys.path.insert(0, str(ROOT / "tests" / "native"))
    from test_args import FakeTensor

    class Tensor:
        __slots__ = ("dl",)
        __dlpack_c_exchange_api__ = lib.standin_exchange_api_capsule()

    fakes = [FakeTensor(shape=(1,), data=0x10000 * (k + 1)) for k in range(count)]
    tensors = []
    for fake in fakes:
        t = Tensor()
        t.dl = ctypes.addressof(fake.mt.dl_tensor)
        tensors.append(t)
    return tensors, fakes


def worker(case: str, calls: int, standin: str) -> None:
    """Compile bench/launch.py's module and call the case's function ``calls`` times."""
    sys.path.insert(0, str(HERE))
    import launch
    import pywave
    mod = pywave.compile(launch.ADD, target="sm_90")
    # The steady state of torch and CuPy users: device 0's primary context current.
    driver = ctypes.CDLL(os.environ["WAVERT_CUDA_LIBRARY"])
    context = ctypes.c_void_p()
    if driver.cuDevicePrimaryCtxRetain(ctypes.byref(context), 0) != 0 or \
            driver.cuCtxSetCurrent(context) != 0:
        raise SystemExit("the driver stand-in did not make the primary context current")
    if case == "empty":
        fn, args = mod.empty, ()
    elif case == "streams":
        fn, args = pywave.compile(STREAMED, target="sm_90").streamed, ()
    else:
        count = 3 if case == "exchange3" else int(case.removeprefix("exchange"))
        held, _fakes = standin_tensors(standin, count)
        if count == 3:
            fn = mod.add
        else:
            curve = pywave.compile(launch.args_module(CURVE_COUNTS), target="sm_90")
            fn = getattr(curve, f"args{count}")
        args = tuple(held)
    for _ in range(calls):
        fn(*args)
    mod.close()
    print(f"launches: {driver.fake_cuda_launch_count()}")


def total_ir(path: Path) -> int:
    """The "summary:" (or "totals:") Ir of a callgrind output file."""
    text = path.read_text()
    m = re.search(r"^(?:summary|totals):\s+(\d+)", text, re.M)
    if m is None:
        raise SystemExit(f"{path}: no totals")
    return int(m.group(1))


def annotate(path: Path) -> dict[str, int]:
    """{function: inclusive Ir} from callgrind_annotate --inclusive=yes."""
    done = subprocess.run(["callgrind_annotate", "--inclusive=yes", "--threshold=100",
                           str(path)], capture_output=True, text=True, check=True)
    out: dict[str, int] = {}
    for line in done.stdout.splitlines():
        m = re.match(r"\s*([\d,]+)\s+(?:\([^)]*\)\s+)?(\S.*?)\s*(?:\[.*\])?$", line)
        if m:
            name = m.group(2).split(":")[-1].strip()
            out.setdefault(name, int(m.group(1).replace(",", "")))
    return out


def self_ir(path: Path, objects: tuple[str, ...]) -> int:
    """Exclusive Ir of the functions whose object file name contains one of ``objects``."""
    done = subprocess.run(["callgrind_annotate", "--threshold=100", str(path)],
                          capture_output=True, text=True, check=True)
    total = 0
    for line in done.stdout.splitlines():
        m = re.match(r"\s*([\d,]+)\s+(?:\([^)]*\)\s+)?(\S+):", line)
        if m and any(o in line for o in objects):
            total += int(m.group(1).replace(",", ""))
    return total


def measure(case: str, fake: Path, standin: Path, out_dir: Path) -> dict[str, float]:
    env = dict(os.environ, WAVERT_CUDA_LIBRARY=str(fake),
               WAVERT_HIP_LIBRARY="/nonexistent/libamdhip64.so",
               OPENBLAS_NUM_THREADS="1")  # numpy (imported by the tests' FakeTensor) idles
    files = {}
    for calls in CALLS:
        files[calls] = out_dir / f"{case}.{calls}"
        subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={files[calls]}",
                        sys.executable, __file__, "--worker", case, str(calls), str(standin)],
                       env=env, check=True, capture_output=True)
    span = CALLS[1] - CALLS[0]
    inc = {calls: annotate(path) for calls, path in files.items()}
    stand = {calls: self_ir(path, ("fake_cuda", "exchange_standin"))
             for calls, path in files.items()}
    return {"whole": (total_ir(files[CALLS[1]]) - total_ir(files[CALLS[0]])) / span,
            "native": (inc[CALLS[1]].get("hf_vectorcall", 0)
                       - inc[CALLS[0]].get("hf_vectorcall", 0)) / span,
            "stand-in": (stand[CALLS[1]] - stand[CALLS[0]]) / span}


def main() -> None:
    if len(sys.argv) == 5 and sys.argv[1] == "--worker":
        worker(sys.argv[2], int(sys.argv[3]), sys.argv[4])
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--annotate", default=None, help="keep the callgrind files here")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    lacking = missing_tools()
    if lacking:
        LOG.error("bench/launch_instructions.py: needs %s; nothing measured",
                  ", ".join(lacking))
        raise SystemExit(SKIPPED)
    sys.path.insert(0, str(ROOT / "tests"))
    from conftest import fake_driver
    fake = fake_driver()
    if fake is None:
        LOG.error("bench/launch_instructions.py: the driver stand-in is not built (meson "
                  "setup build/tests -Dtests=true && ninja -C build/tests); nothing measured")
        raise SystemExit(SKIPPED)
    # Callgrind's files stay only in the --annotate folder; a temporary one goes at the end.
    out_dir = Path(args.annotate or tempfile.mkdtemp(prefix="pywave-instructions-"))
    out_dir.mkdir(parents=True, exist_ok=True)
    try:
        standin = build_standin(out_dir)
        for warm in ("empty", "streams", "exchange16"):  # the compile cache, outside callgrind
            subprocess.run([sys.executable, __file__, "--worker", warm, "1", str(standin)],
                           env=dict(os.environ, WAVERT_CUDA_LIBRARY=str(fake)), check=True)
        LOG.info("%-10s %10s %10s %10s", "case", "whole", "native", "stand-in")
        for case in args.cases.split(","):
            if case not in CASES:
                parser.error(f"--cases: unknown case {case!r} (known: {', '.join(CASES)})")
            r = measure(case, fake, standin, out_dir)
            LOG.info("%-10s %10.0f %10.0f %10.0f", case, r["whole"], r["native"], r["stand-in"])
        LOG.info("instructions per call (callgrind, %d - %d calls)%s", CALLS[1], CALLS[0],
                 f"; files in {out_dir}" if args.annotate else "")
    finally:
        if not args.annotate:
            shutil.rmtree(out_dir, ignore_errors=True)

if __name__ == "__main__":
    main()
