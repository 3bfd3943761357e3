"""What compile isolation costs, and what it keeps bounded. Needs no GPU.

    python3 bench/isolation.py [--target sm_90] [--runs 7] [--modules 2000]

- **fresh process, cold cache**: a new interpreter imports pywave and compiles
  examples/vector_add.mlir (a new empty PYWAVE_CACHE_DIR each run), then compiles a second,
  distinct module; both compiles are timed inside the process (the import apart). Three ways:
  in-process (``PYWAVE_ISOLATE=0``), isolated with this set-up's compile server already
  running (any earlier process started it), isolated with no server running (this
  process starts it). Medians and mins over ``--runs``; ``python -c pass`` for scale.
- **worker memory**: ``--modules`` distinct modules compiled in one process with one
  worker; the worker's resident size every 10% of the way, with pywave's recycling and
  with recycling off (``MAX_COMPILES``/``MAX_GROWTH`` raised past reach).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
VECTOR_ADD = os.path.join(HERE, "..", "examples", "vector_add.mlir")

_FRESH = """
import json, sys, time
started = time.perf_counter()
import pywave
imported = time.perf_counter()
text = open(sys.argv[1]).read()
pywave.compile(text, target=sys.argv[2])
first = time.perf_counter()
pywave.compile(text.replace("@add", "@add_second"), target=sys.argv[2])
second = time.perf_counter()
print(json.dumps({"import": imported - started, "first": first - imported,
                  "second": second - first}))
"""

_MEMORY = """
import json, sys
from pywave import isolation, pipeline
if sys.argv[3] == "off":
    isolation.handles.MAX_COMPILES = 10 ** 9
    isolation.handles.MAX_GROWTH = 1 << 60
text = open(sys.argv[1]).read()
count = int(sys.argv[2])
samples = []
for i in range(count):
    isolation.program(pipeline.Pipeline(text.replace("@add", f"@add{i}"), target="sm_90",
                                        format="ptx"), workers=1)
    if (i + 1) % max(1, count // 10) == 0:
        if not isolation.POOL._idle:        # replaced right after this compile
            samples.append([i + 1, None, None])
            continue
        (worker,) = isolation.POOL._idle
        with open(f"/proc/{worker.pid}/statm") as fh:
            rss = int(fh.read().split()[1]) * 4096
        samples.append([i + 1, worker.pid, rss])
print(json.dumps(samples))
"""


def _run(code: str, *args: str, env: dict | None = None) -> dict:
    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True,
                          text=True, check=True, env=env, cwd=tempfile.gettempdir())
    return json.loads(done.stdout.strip().splitlines()[-1])


def _stop_server(env: dict) -> None:
    subprocess.run([sys.executable, "-c", "from pywave import isolation; "
                    "isolation.stop_server()"], check=True, env=env,
                   cwd=tempfile.gettempdir())


def fresh(target: str, runs: int) -> dict[str, dict[str, list[float]]]:
    """{mode: {"import"/"first"/"second": [seconds per run]}}."""
    modes = {"in-process": {"PYWAVE_ISOLATE": "0"}, "isolated, server running": {},
             "isolated, no server": {}}
    out: dict[str, dict[str, list[float]]] = {m: {} for m in modes}
    for _ in range(runs):
        for mode, extra in modes.items():
            with tempfile.TemporaryDirectory(prefix="pywave-bench-") as cache:
                env = dict(os.environ, PYWAVE_CACHE_DIR=cache, **extra)
                if mode == "isolated, no server":
                    _stop_server(env)
                elif mode == "isolated, server running":
                    _run("from pywave import isolation, pipeline; import json; "
                         "isolation.program(pipeline.Pipeline('func.func @f() { return }', target='sm_90')); "
                         "print('{}')", env=env)
                times = _run(_FRESH, VECTOR_ADD, target, env=env)
            for key, value in times.items():
                out[mode].setdefault(key, []).append(value)
    return out


def python_floor(runs: int) -> float:
    walls = []
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        walls.append(time.perf_counter() - started)
    return statistics.median(walls)


def memory(count: int, recycle: bool) -> list[list[int]]:
    return _run(_MEMORY, VECTOR_ADD, str(count), "on" if recycle else "off")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="sm_90")
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--modules", type=int, default=2000,
                        help="modules for the worker-memory curve (0: skip it)")
    parser.add_argument("--json", help="also write the numbers here")
    args = parser.parse_args()
    result: dict = {"python -c pass": python_floor(args.runs)}
    print(f"python -c pass: {result['python -c pass'] * 1e3:.0f} ms (median)")
    result["fresh"] = fresh(args.target, args.runs)
    base = result["fresh"]["in-process"]
    print(f"\nfresh process, cold cache, {args.runs} runs (median / min, ms; ratio to "
          "in-process on the median)")
    print(f"{'mode':<28}{'import':>14}{'first compile':>20}{'second compile':>20}")
    for mode, times in result["fresh"].items():
        cells = []
        for key in ("import", "first", "second"):
            med, low = statistics.median(times[key]), min(times[key])
            ratio = med / statistics.median(base[key])
            cells.append(f"{med * 1e3:6.0f} / {low * 1e3:4.0f} {ratio:4.2f}x")
        print(f"{mode:<28}" + "".join(f"{c:>20}" for c in cells))
    if args.modules:
        print(f"\nworker resident size over {args.modules} modules (MiB at each tenth)")
        for recycle in (True, False):
            samples = memory(args.modules, recycle)
            result[f"memory, recycle {'on' if recycle else 'off'}"] = samples
            pids = len({pid for _, pid, _ in samples if pid is not None})
            print(f"recycling {'on ' if recycle else 'off'}: "
                  + " ".join("new" if rss is None else f"{rss / 2**20:.0f}"
                             for _, _, rss in samples)
                  + f"  ({pids} worker pids seen)")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(result, fh, indent=1)


if __name__ == "__main__":
    main()
