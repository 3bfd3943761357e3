"""Differential fuzzing of the CPU device's thread-loop split (pywave/kernels/cpu_split.py).

``cd tests && nice python -m fuzz.split_fuzz --count 500 --seed 1 [--json out.json]``

Each case (:func:`fuzz.split_gen.make_case`: 1-3 random well-defined kernels with barriers
in uniform control flow, values of every scalar type and vector<4xf32> crossing them,
workgroup memory, atomics, private buffers, printf) is compiled for ``target="cpu"`` twice:
as pywave compiles it (kernels the split's rules allow run as thread loops) and with
``lowering={"kernel_opt_level": 0}`` (every kernel's fibers: the reference). Both run on the
same inputs, blocks in order on one host thread (``WAVERT_CPU_THREADS=1``); the outputs
(each thread's emitted values, as i64 bits) must be identical, and the printed lines the
same lines (their order may differ: where a control op holding barriers runs none, the
fibers run on while the split has cut its thread loops there). Outcomes:

- ``same`` (``split`` counts the kernels the split took, read from the image's symbols);
- ``mismatch``: outputs or printf lines differ (the first differing kernel/thread/slot named);
- ``split-error``: only the default compile or run failed (a compile must never fail
  because of the split); ``both-error``: both failed (a generator bug: reported as well);
- ``death``: the process running the case died (a crash of the kernel or the compiler).

Cases run in a child process (``--jobs`` of them), restarted after a death, as
:mod:`fuzz.__main__` does. ``--only N`` runs case N; ``--show N`` prints its MLIR.
``--bench`` also times each run (grids ``--grid-scale`` times wider) and reports cases
whose split kernels run slower than their fibers.
"""

from __future__ import annotations

import argparse
import collections
import ctypes
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

from .split_gen import make_case

BAD = ("mismatch", "split-error", "both-error", "death")


def _split_kernels(mod, names: list[str]) -> list[str]:
    """Kernels whose image exports a whole-block entry (``__wavert_cpu_block_K``) and has
    barriers (the barrier-free ones have that entry either way: not counted)."""
    (binary,) = mod.binaries
    with tempfile.NamedTemporaryFile(suffix=".so", delete=False) as fh:
        fh.write(binary.data)
    try:
        lib = ctypes.CDLL(fh.name)
        return [k for k in names if hasattr(lib, f"__wavert_cpu_block_{k}")]
    finally:
        os.unlink(fh.name)


def _run(case, lowering: dict, inputs, repeat: int):
    """(outputs, printed bytes, split kernels, best seconds of ``repeat`` runs)."""
    import pywave
    libc = ctypes.CDLL(None)
    outs = [np.full(case.threads * s, -7, dtype=np.int64) for s in case.slots]
    with pywave.compile(case.text, target="cpu", disk_cache=False, lowering=lowering) as mod:
        split = _split_kernels(mod, case.kernels)
        with tempfile.TemporaryFile() as cap:
            libc.fflush(None)
            sys.stdout.flush()
            saved = os.dup(1)
            os.dup2(cap.fileno(), 1)
            try:
                mod.run(*inputs, *outs)
                libc.fflush(None)
            finally:
                os.dup2(saved, 1)
                os.close(saved)
            cap.seek(0)
            printed = cap.read()
        best = float("inf")
        for _ in range(repeat):
            scratch = [np.empty_like(o) for o in outs]
            start = time.perf_counter()
            mod.run(*inputs, *scratch)
            best = min(best, time.perf_counter() - start)
    return outs, printed, split, best


def _first_difference(case, a: list, b: list) -> str:
    for k, (x, y) in enumerate(zip(a, b)):
        bad = np.nonzero(x != y)[0]
        if bad.size:
            i = int(bad[0])
            s = case.slots[k]
            return (f"kernel {case.kernels[k]} thread {i // s} slot {i % s}: split "
                    f"{x[i]:#x} fibers {y[i]:#x} ({bad.size} values differ)")
    return "printf output differs"


def run_case(seed: int, index: int, *, bench: bool = False, grid_scale: int = 1) -> dict:
    case = make_case(seed, index, grid_scale=grid_scale)
    rng = np.random.default_rng([seed, index])
    n = case.threads
    wide = rng.random() < 0.3
    ints = (rng.integers(-2**31, 2**31, n, dtype=np.int64) if wide else
            rng.integers(-1000, 1000, n)).astype(np.int32)
    floats = rng.uniform(-100, 100, n).astype(np.float32)
    record = {"index": index, "kernels": len(case.kernels), "block": case.block,
              "grid": case.grid}
    start = time.monotonic()
    results = {}
    for mode, lowering in (("split", {}), ("fibers", {"kernel_opt_level": 0})):
        try:
            results[mode] = _run(case, lowering, (ints, floats), 3 if bench else 0)
        except Exception as exc:  # noqa: BLE001 - counted and reported
            results[mode] = f"{type(exc).__name__}: {str(exc)[:400]}"
    record["seconds"] = round(time.monotonic() - start, 3)
    a, b = results["split"], results["fibers"]
    if isinstance(a, str) or isinstance(b, str):
        record["outcome"] = "both-error" if isinstance(b, str) else "split-error"
        record["detail"] = a if isinstance(a, str) else b
        return record
    record["split"] = len(a[2])
    if any((x != y).any() for x, y in zip(a[0], b[0])) or \
            sorted(a[1].splitlines()) != sorted(b[1].splitlines()):
        record["outcome"] = "mismatch"
        record["detail"] = _first_difference(case, a[0], b[0])
        return record
    record["outcome"] = "same"
    if bench:
        record["times"] = [a[3], b[3]]
    return record


def serve(seed: int, indices: list[int], bench: bool, grid_scale: int) -> None:
    """Run ``indices``, one JSON line per case ({"start": i} first)."""
    for index in indices:
        print(json.dumps({"start": index}), flush=True)
        print(json.dumps(run_case(seed, index, bench=bench, grid_scale=grid_scale)),
              flush=True)


def _child(seed, indices, bench, grid_scale, results, lock, log) -> None:
    todo = list(indices)
    env = dict(os.environ, WAVERT_CPU_THREADS="1")
    while todo:
        proc = subprocess.Popen(
            [sys.executable, "-m", "fuzz.split_fuzz", "--serve", str(seed), json.dumps(todo),
             str(int(bench)), str(grid_scale)], stdout=subprocess.PIPE, text=True, env=env,
            cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        current = None
        for line in proc.stdout:
            if not line.startswith("{"):
                continue
            record = json.loads(line)
            if "start" in record:
                current = record["start"]
                continue
            with lock:
                results.append(record)
                if log and record["outcome"] != "same":
                    print(json.dumps(record), file=log, flush=True)
            todo.remove(record["index"])
            current = None
        code = proc.wait()
        if current is None and todo:
            raise RuntimeError(f"split fuzz child exited with {code} between cases")
        if current is not None:
            record = {"index": current, "outcome": "death",
                      "detail": f"the process exited with {code}"}
            with lock:
                results.append(record)
                if log:
                    print(json.dumps(record), file=log, flush=True)
            todo.remove(current)


def run(seed: int, indices: list[int], jobs: int = 1, bench: bool = False,
        grid_scale: int = 1, log=None) -> list[dict]:
    results: list[dict] = []
    lock = threading.Lock()
    threads = [threading.Thread(target=_child, args=(seed, indices[j::jobs], bench,
                                                     grid_scale, results, lock, log))
               for j in range(jobs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sorted(results, key=lambda r: r["index"])


def report(results: list[dict], examples: int = 8) -> str:
    counts = collections.Counter(r["outcome"] for r in results)
    kernels = sum(r.get("kernels", 0) for r in results)
    split = sum(r.get("split", 0) for r in results)
    lines = [f"split fuzz: {len(results)} cases, {kernels} kernels ({split} split, "
             "the others fibers), " + ", ".join(f"{o} {counts.get(o, 0)}"
                                                 for o in ("same",) + BAD)]
    for outcome in BAD:
        for r in [r for r in results if r["outcome"] == outcome][:examples]:
            lines.append(f"  {outcome} #{r['index']}: {r.get('detail', '')[:300]}")
    slow = [r for r in results if "times" in r and r.get("split")
            and r["times"][0] > 1.2 * r["times"][1] and r["times"][0] > 2e-4]
    for r in slow[:examples]:
        lines.append(f"  slower #{r['index']}: split {r['times'][0] * 1e3:.3f} ms, fibers "
                     f"{r['times'][1] * 1e3:.3f} ms")
    if any("times" in r for r in results):
        ratios = [r["times"][1] / r["times"][0] for r in results
                  if "times" in r and r.get("split")]
        if ratios:
            lines.append(f"  timing: {len(slow)} split cases slower than fibers by > 1.2x; "
                         f"fibers/split time median {np.median(ratios):.2f}x, "
                         f"min {min(ratios):.2f}x")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--serve":
        serve(int(argv[1]), json.loads(argv[2]), bool(int(argv[3])), int(argv[4]))
        return 0
    parser = argparse.ArgumentParser(prog="python -m fuzz.split_fuzz")
    parser.add_argument("--count", type=int, default=100, help="cases")
    parser.add_argument("--start", type=int, default=0, help="first case index")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--jobs", type=int, default=1, help="child processes")
    parser.add_argument("--only", type=int, action="append", help="run only case N")
    parser.add_argument("--show", type=int, help="print case N's MLIR and exit")
    parser.add_argument("--bench", action="store_true", help="time both modes")
    parser.add_argument("--grid-scale", type=int, default=1, help="grid x multiplier")
    parser.add_argument("--json", metavar="PATH", help="write every case's outcome here")
    parser.add_argument("--log", metavar="PATH", help="append non-same outcomes as they come")
    args = parser.parse_args(argv)
    if args.show is not None:
        print(make_case(args.seed, args.show, grid_scale=args.grid_scale).text)
        return 0
    indices = args.only or list(range(args.start, args.start + args.count))
    log = open(args.log, "a", encoding="utf-8") if args.log else None
    results = run(args.seed, indices, args.jobs, args.bench, args.grid_scale, log)
    print(report(results), flush=True)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(results, fh, indent=1)
    return 1 if any(r["outcome"] in BAD for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
