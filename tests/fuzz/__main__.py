"""``cd tests && python -m fuzz --count 5000 --seed 1``: the compile and DLPack fuzzers.

Cases run in child processes (``--jobs`` of them, disjoint cases each) so that a death of
the process that calls pywave is counted, not fatal: the case it was running is recorded as
``death`` and a new child carries on after it. Prints the outcome counts and the first
examples of every outcome other than ``compiled``/``typed``; exits 1 when any case died,
hung or raised an untyped exception.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import threading

from . import dlpack_fuzz
from .compile_fuzz import OUTCOMES

BAD = ("death", "hang", "untyped")


def _child(seed: int, indices: list[int], timeout: float, results: list[dict],
           lock: threading.Lock) -> None:
    todo = list(indices)
    while todo:
        proc = subprocess.Popen(
            [sys.executable, "-m", "fuzz.compile_fuzz", str(seed), json.dumps(todo),
             str(timeout)], stdout=subprocess.PIPE, text=True,
            cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        current = None
        for line in proc.stdout:
            record = json.loads(line)
            if "start" in record:
                current = record["start"]
                continue
            with lock:
                results.append(record)
            todo.remove(record["index"])
            current = None
        code = proc.wait()
        if current is not None:
            with lock:
                results.append({"index": current, "case": "", "outcome": "death",
                                "detail": f"the process exited with {code}", "seconds": 0})
            todo.remove(current)
        elif todo:
            raise RuntimeError(f"fuzz child exited with {code} between cases")


def run_compile(seed: int, count: int, jobs: int, timeout: float,
                only: list[int] | None = None) -> list[dict]:
    indices = only if only else list(range(count))
    results: list[dict] = []
    lock = threading.Lock()
    threads = [threading.Thread(target=_child, args=(seed, indices[j::jobs], timeout,
                                                     results, lock)) for j in range(jobs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sorted(results, key=lambda r: r["index"])


def report(results: list[dict], examples: int = 5) -> str:
    counts = collections.Counter(r["outcome"] for r in results)
    lines = ["compile fuzz: " + ", ".join(f"{o} {counts.get(o, 0)}" for o in OUTCOMES)
             + f" (of {len(results)})"]
    for outcome in ("worker-crash",) + BAD:
        for r in [r for r in results if r["outcome"] == outcome][:examples]:
            lines.append(f"  {outcome} #{r['index']} {r['case']} ({r['seconds']} s): "
                         f"{r['detail'][:240]}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fuzz")
    parser.add_argument("--count", type=int, default=200, help="mutated MLIR inputs")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--jobs", type=int, default=2, help="child processes")
    parser.add_argument("--timeout", type=float, default=60.0,
                        help="seconds per compile before it counts as a hang")
    parser.add_argument("--only", type=int, action="append", help="run only case N")
    parser.add_argument("--dlpack", type=int, default=2000, help="malformed DLPack calls")
    parser.add_argument("--json", metavar="PATH", help="write every case's outcome here")
    args = parser.parse_args(argv)
    results = run_compile(args.seed, args.count, args.jobs, args.timeout, args.only)
    print(report(results), flush=True)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(results, fh, indent=1)
    dl = dlpack_fuzz.run_isolated(args.seed, args.dlpack) if args.dlpack else {}
    if dl:
        print("dlpack fuzz: " + ", ".join(f"{k} {v}" for k, v in sorted(dl.items())))
    bad = sum(1 for r in results if r["outcome"] in BAD) + sum(dl.get(o, 0) for o in BAD)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
