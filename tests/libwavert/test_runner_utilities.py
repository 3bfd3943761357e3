"""The runner utilities through ``pywave run``: tests/data/runner/utilities.mlir calls every kind
of utility as MLIR programs call them (printMemref* unranked, C-interface and ranked,
printMemrefShape*, verifyMemRef* with its stderr line, memrefCopy through a transposed
memref.copy, vector.print of every scalar kind (i1, i8, index, f16, bf16, f8/f4 through
printApFloat, f64 vectors, 2-D vectors, strings, punctuation), rtsrand/rtrand/shuffle/stdSort
and the clocks). Its stdout must equal utilities.out byte for byte, base@ pointers masked;
the formats are upstream MLIR's (runner_formats.md), the random draws libstdc++'s.

The program is host code only; it runs on the driver stand-in (conftest.fake_driver_env).
"""

from __future__ import annotations

import re
import subprocess
import sys

from conftest import TESTS, fake_driver_env

RUNNER = TESTS / "data" / "runner"


def _run(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pywave", "run", *argv], capture_output=True,
                          text=True, timeout=300, env=fake_driver_env(PYWAVE_CACHE="0"),
                          cwd=TESTS)


def _masked(text: str) -> str:
    return re.sub(r"base@ = 0x[0-9a-f]+", "base@ = <ptr>", text)


def test_every_utility_prints_upstreams_format():
    proc = _run(str(RUNNER / "utilities.mlir"))
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert _masked(proc.stdout) == (RUNNER / "utilities.out").read_text()
    # verifyMemRefF32's one mismatch (the element at offset 5 was changed to 9).
    assert proc.stderr == "5.5 != 9 offset = 5\n"


def test_utilities_at_every_opt_level():
    """The same output at -O0 and -O3 (the utilities are called, not inlined or folded)."""
    expected = (RUNNER / "utilities.out").read_text()
    for level in ("-O0", "-O3"):
        proc = _run(level, str(RUNNER / "utilities.mlir"))
        assert proc.returncode == 0, proc.stderr[-4000:]
        assert _masked(proc.stdout) == expected, level


ASYNC_PIPELINE = ("--pass-pipeline=builtin.module(async-to-async-runtime, "
                  "async-runtime-ref-counting, async-runtime-ref-counting-opt, "
                  "convert-async-to-llvm)")


def test_async_groups_run_on_the_async_runtime_at_every_level():
    """async.create_group / add_to_group / await_all and an !async.value: pywave lowers them to
    coroutines and mlirAsyncRuntime* calls; -O0 runs LLVM's coroutine passes too (before, its
    instruction selection aborted on llvm.coro.* intrinsics). The same with the user's own
    async lowering in --pass-pipeline."""
    program = str(TESTS / "data" / "runner" / "async_group.mlir")
    for argv in (["-O0"], ["-O2"], ["-O0", ASYNC_PIPELINE], ["-O3", ASYNC_PIPELINE]):
        proc = _run(*argv, program)
        assert proc.returncode == 0, (argv, proc.stderr[-4000:])
        assert _masked(proc.stdout) == (
            "Unranked Memref base@ = <ptr> rank = 1 offset = 0 sizes = [4] strides = [1] "
            "data = \n[2,  1,  4,  9]\n"), argv
