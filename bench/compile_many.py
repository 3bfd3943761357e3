"""Parallel compile: ``pywave.compile_many`` of many distinct modules with 1, 4, 16 workers.

    python3 bench/compile_many.py [--modules 64] [--workers 1 4 16] [--target sm_90]
                                  [--format ptx] [--runs 1]

Generates --modules distinct vector-add modules (each adds its own constant), writes them as
.mlir files, and for each worker count runs, in a fresh process with a fresh empty
PYWAVE_CACHE_DIR (cold cache, no warm workers), ``pywave.compile_many(paths, jobs=N,
load=False)``: the wall seconds of that call (the process's imports excluded; the workers'
start included; the compile server shared by the user's processes is started once before
the first run, as any earlier compile would have: bench/isolation.py measures its start), the minimum over --runs, and the speed-up against the first worker count.
First it prints the machine's parallel CPU capacity: the time of one busy-loop process
against os.cpu_count() of them at once (a VM whose vCPUs share one core shows ~1x: no
compile speed-up is possible there).
Needs no GPU (kernels are compiled for --target). Target (issue #15 item 2): use every core.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
VECTOR_ADD = os.path.join(HERE, "..", "tests", "data", "vector_add.mlir")

_CHILD = """
import json, pathlib, sys, time, pywave
from pywave import cache
from pywave.entry import many
names, jobs, target, fmt = json.loads(sys.argv[1])
paths = [pathlib.Path(name) for name in names]   # a str would be MLIR text
stored = []
_store = cache.store
def store(*args):
    t = time.perf_counter(); kept = _store(*args); stored.append(time.perf_counter() - t)
    return kept
cache.store = store
start = time.perf_counter()
outcomes = many.run(paths, jobs=jobs, load=False, target=target, format=fmt)
seconds = time.perf_counter() - start
bad = [str(o.error) for o in outcomes if o.status == many.FAILED]
if bad:
    raise SystemExit(bad[0])
compiles = sorted(o.seconds for o in outcomes)
print(json.dumps({"seconds": seconds, "keys": len({o.key for o in outcomes}),
                  "compile_median": compiles[len(compiles) // 2], "compile_max": compiles[-1],
                  "store_total": sum(stored)}))
"""


def module(k: int, base: str) -> str:
    """The vector add with ``c = a + b + (k + 0.5)``: distinct text, distinct cache key."""
    old = "%z = arith.addf %x, %y : f32"
    if old not in base:
        raise SystemExit(f"{VECTOR_ADD} no longer holds {old!r}")
    new = (f"%k = arith.constant {k}.5 : f32\n        %s = arith.addf %x, %y : f32\n"
           "        %z = arith.addf %s, %k : f32")
    return base.replace(old, new)


def write_modules(folder: str, count: int) -> list[str]:
    """``count`` distinct module files in ``folder``; their paths."""
    with open(VECTOR_ADD, encoding="utf-8") as fh:
        base = fh.read()
    paths = []
    for k in range(count):
        path = os.path.join(folder, f"vadd_{k:03d}.mlir")
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(module(k, base))
        paths.append(path)
    return paths


def cold_run(paths: list[str], jobs: int, target: str, fmt: str) -> dict:
    """compile_many in a fresh process with an empty cache: its wall ``seconds``, the
    median and largest time one input took (worker start-up and waiting for a worker
    included: ``compile_median``/``compile_max``) and the parent's total cache-write time
    (``store_total``, the host code's pre-linking included)."""
    import json
    cache_dir = tempfile.mkdtemp(prefix="pywave-bench-many-")
    try:
        env = dict(os.environ, PYWAVE_CACHE_DIR=cache_dir)
        out = subprocess.run([sys.executable, "-c", _CHILD,
                              json.dumps([paths, jobs, target, fmt])],
                             env=env, capture_output=True, text=True,
                             cwd=tempfile.gettempdir())
        if out.returncode:
            raise SystemExit(f"compile_many with {jobs} workers failed:\n{out.stderr}")
        result = json.loads(out.stdout.strip().splitlines()[-1])
        entries = [n for n in os.listdir(cache_dir) if n.endswith(".pwc")]
        if result["keys"] != len(paths) or len(entries) != len(paths):
            raise SystemExit(f"expected {len(paths)} distinct cache entries, got "
                             f"{result['keys']} keys and {len(entries)} files")
        return result
    finally:
        shutil.rmtree(cache_dir, ignore_errors=True)


def start_server() -> None:
    """Start this set-up's compile server (shared by processes), as any compile would."""
    subprocess.run([sys.executable, "-c", "from pywave import isolation, pipeline; "
                    "isolation.program(pipeline.Pipeline('func.func @f() { return }', target='sm_90'))"],
                   check=True, cwd=tempfile.gettempdir())


_SPIN = "sum(i * i for i in range(6_000_000))"


def cpu_capacity() -> float:
    """How many busy-loop processes run at full speed at once: ``n * t1 / tn``."""
    import time

    def spin(count: int) -> float:
        start = time.perf_counter()
        procs = [subprocess.Popen([sys.executable, "-c", _SPIN]) for _ in range(count)]
        for proc in procs:
            proc.wait()
        return time.perf_counter() - start
    count = os.cpu_count() or 1
    return count * spin(1) / spin(count)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--modules", type=int, default=64)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--target", default="sm_90")
    parser.add_argument("--format", default="ptx", choices=["auto", "ptx", "cubin", "fatbin"])
    parser.add_argument("--runs", type=int, default=1, help="cold runs per worker count (min)")
    args = parser.parse_args()
    if args.modules < 1 or args.runs < 1 or min(args.workers) < 1:
        parser.error("--modules, --runs and every --workers value must be >= 1")
    folder = tempfile.mkdtemp(prefix="pywave-bench-modules-")
    try:
        paths = write_modules(folder, args.modules)
        print(f"{args.modules} distinct modules, target {args.target}, format {args.format}, "
              f"{os.cpu_count()} CPUs, cold cache, min of {args.runs} run(s)")
        print(f"parallel CPU capacity: {cpu_capacity():.2f} of {os.cpu_count()} CPUs "
              "(busy-loop processes at full speed at once)")
        print(f"{'workers':>8} {'seconds':>9} {'per module':>11} {'speed-up':>9} "
              f"{'input median':>13} {'input max':>10} {'cache writes':>13}")
        start_server()
        base = None
        for jobs in args.workers:
            run = min((cold_run(paths, jobs, args.target, args.format)
                       for _ in range(args.runs)), key=lambda r: r["seconds"])
            secs = run["seconds"]
            base = base or secs
            print(f"{jobs:8d} {secs:9.2f} {secs / args.modules * 1e3:8.0f} ms "
                  f"{base / secs:8.2f}x {run['compile_median']:12.3f}s "
                  f"{run['compile_max']:9.3f}s {run['store_total']:12.2f}s")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
