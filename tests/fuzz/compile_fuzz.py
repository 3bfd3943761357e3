"""Mutated MLIR into ``pywave.compile`` (isolated), one case at a time, outcomes counted.

Outcomes: ``compiled``; ``typed`` (a pywave.Error); ``worker-crash`` (a CompileError for a
compile worker that died: typed for the user, but a class validation should catch);
``hang`` (the isolation time limit fired); ``untyped`` (any other exception); ``death``
(the process running the cases died; counted by the orchestrator in :mod:`fuzz.__main__`).
"""

from __future__ import annotations

import json
import sys
import time

from .mutate import Mutator

OUTCOMES = ("compiled", "typed", "worker-crash", "hang", "untyped", "death")
#: Lowering options the cases cycle through (pywave.lowering.LoweringOptions fields).
LOWERINGS = ({}, {"index_bitwidth": 32}, {"kernel_bare_ptr": True},
             {"kernel_opt_level": 0, "features": "+ptx80"})


def classify(exc: BaseException | None) -> str:
    import pywave
    if exc is None:
        return "compiled"
    if isinstance(exc, pywave.CompileError) and "did not finish within the time limit" in \
            str(exc):
        return "hang"
    if isinstance(exc, pywave.CompileError) and str(exc).startswith("the compiler "):
        return "worker-crash"
    if isinstance(exc, pywave.Error):
        return "typed"
    return "untyped"


def run_case(mutator: Mutator, index: int, timeout: float) -> dict:
    import pywave
    desc, text = mutator.case(index)
    fmt = ("auto", "ptx")[index % 2]
    lowering = LOWERINGS[index // 2 % len(LOWERINGS)]
    start = time.monotonic()
    exc: BaseException | None = None
    try:
        pywave.compile(text, target="sm_90", format=fmt, disk_cache=False, timeout=timeout,
                       lowering=lowering)
    except Exception as caught:  # noqa: BLE001 - the point is to count them
        exc = caught
    outcome = classify(exc)
    detail = "" if exc is None else f"{type(exc).__name__}: {str(exc)[:300]}"
    return {"index": index, "case": desc, "outcome": outcome, "detail": detail,
            "seconds": round(time.monotonic() - start, 3)}


def serve(seed: int, indices: list[int], timeout: float) -> None:
    """Run ``indices`` and print one JSON line per case ({"start": i} first)."""
    mutator = Mutator(seed)
    for index in indices:
        print(json.dumps({"start": index}), flush=True)
        print(json.dumps(run_case(mutator, index, timeout)), flush=True)


if __name__ == "__main__":
    serve(int(sys.argv[1]), json.loads(sys.argv[2]), float(sys.argv[3]))
