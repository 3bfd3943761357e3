"""The reference for host programs: MLIR's own CPU lowering and ExecutionEngine.

:func:`upstream_output` lowers a host program with upstream's CPU pipeline
(:data:`UPSTREAM_CPU_PIPELINE`: the passes of mlir-opt's ``test-lower-to-llvm``, which the
Vector/CPU integration tests run, with the complex, math-to-libm/-funcs and small-float
lowerings of the Complex/Math/Arith CPU tests' RUN lines) through the bindings' PassManager,
and runs its ``main`` in ``mlir.execution_engine.ExecutionEngine`` with libwavert_runner as
its runner-utils library (``printF32``, ``printMemrefF32``, ...); :func:`pywave_output` runs
the same file with ``pywave run FILE --entry-point-result=void``. Both run in a child process
(the programs print through C's stdout) and return what it printed.
"""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

#: MLIR's CPU lowering, in upstream's order (mlir/test/lib/Dialect/LLVM/TestLowerToLLVM.cpp,
#: mlir/test/Integration/Dialect/Complex/CPU/correctness.mlir): vector-to-scf, linalg to
#: loops, affine, scf-to-cf; complex-to-standard; the small-float casts; vector-to-llvm (masks
#: and multi-reductions first); math to intrinsics, functions and libm; memref, func, complex,
#: arith, index, cf and ub to LLVM.
UPSTREAM_CPU_PIPELINE = (
    "builtin.module(func.func(convert-vector-to-scf), func.func(convert-linalg-to-loops), "
    "lower-affine, convert-scf-to-cf, canonicalize, cse, convert-complex-to-standard, "
    "convert-arith-to-llvm, arith-expand{include-f4e2m1=true include-f8e8m0=true}, "
    "func.func(lower-vector-mask, lower-vector-multi-reduction), convert-vector-to-llvm, "
    "func.func(convert-math-to-llvm), convert-math-to-funcs, convert-math-to-libm, "
    "expand-strided-metadata, lower-affine, finalize-memref-to-llvm, convert-func-to-llvm, "
    "convert-complex-to-llvm, convert-arith-to-llvm, convert-index-to-llvm, "
    "convert-cf-to-llvm, convert-ub-to-llvm, reconcile-unrealized-casts)")

_ENGINE_SCRIPT = textwrap.dedent("""
    import ctypes, sys
    from mlir import ir, passmanager
    from mlir.execution_engine import ExecutionEngine
    from pywave import layout
    path, passes, lowering = sys.argv[1:4]
    with ir.Context():
        module = ir.Module.parse(open(path).read())
        if passes:
            passmanager.PassManager.parse(passes).run(module.operation)
        passmanager.PassManager.parse(lowering).run(module.operation)
        engine = ExecutionEngine(module, opt_level=2, shared_libs=[layout.runner_library()])
        main = engine.raw_lookup("main")     # the packed wrapper _mlir_main
        ctypes.CFUNCTYPE(None, ctypes.c_void_p)(main)((ctypes.c_void_p * 0)())
    """)


def upstream_output(path: Path, passes: str | None = None) -> str:
    """stdout of ``main`` of ``path`` (``passes`` first, then :data:`UPSTREAM_CPU_PIPELINE`)
    run by MLIR's ExecutionEngine; AssertionError with its stderr when it fails."""
    proc = subprocess.run([sys.executable, "-c", _ENGINE_SCRIPT, str(path), passes or "",
                           UPSTREAM_CPU_PIPELINE], capture_output=True, text=True,
                          timeout=300, cwd=Path(__file__).parent)
    assert proc.returncode == 0, f"MLIR's ExecutionEngine failed on {path.name}: {proc.stderr}"
    return proc.stdout


def pywave_output(path: Path, passes: str | None = None) -> subprocess.CompletedProcess:
    """``pywave run path --entry-point-result=void`` (with ``--pass-pipeline=passes``)."""
    extra = [f"--pass-pipeline={passes}"] if passes else []
    return subprocess.run([sys.executable, "-m", "pywave", "run", str(path),
                           "--entry-point-result=void", *extra], capture_output=True,
                          text=True, timeout=300, cwd=Path(__file__).parent)


def masked(text: str) -> str:
    """``text`` with the ``base@`` pointers of printMemref headers masked."""
    return re.sub(r"base@ = 0x[0-9a-f]+", "base@ = <ptr>", text)
