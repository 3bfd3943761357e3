"""MLIR modules for the differential cases.

A module holds one ``gpu.module @cases`` with a kernel per case and, per case, a host
function of the same name taking the case's memrefs (``memref<?xT>``: the inputs, then the
output) and launching the kernel over the output's length, 256 threads a block. Inside the
kernel every operand is loaded from its memref (floats as integer bits and
``arith.bitcast``), so nothing is known at compile time and every op reaches the GPU.
"""

from __future__ import annotations

from collections import defaultdict

from .cases import Case, storage_type
from .floats import FORMATS

BLOCK = 256


def _memref(t: str) -> str:
    return f"memref<?x{storage_type(t)}>"


def kernel(case: Case) -> str:
    """The ``gpu.func`` of a case."""
    params = [f"%in{k}: {_memref(t)}" for k, t in enumerate(case.in_types)]
    params.append(f"%out: {_memref(case.out_type)}")
    lines = [
        f"  gpu.func @{case.name}({', '.join(params)}) kernel {{",
        "    %c0 = arith.constant 0 : index",
        "    %bx = gpu.block_id x",
        "    %bd = gpu.block_dim x",
        "    %tx = gpu.thread_id x",
        "    %base = arith.muli %bx, %bd : index",
        "    %i = arith.addi %base, %tx : index",
        f"    %n = memref.dim %out, %c0 : {_memref(case.out_type)}",
        "    %inside = arith.cmpi ult, %i, %n : index",
        "    scf.if %inside {",
    ]
    operands = []
    for k, t in enumerate(case.in_types):
        lines.append(f"      %s{k} = memref.load %in{k}[%i] : {_memref(t)}")
        if t in FORMATS:
            lines.append(f"      %v{k} = arith.bitcast %s{k} : {storage_type(t)} to {t}")
            operands.append(f"%v{k}")
        else:
            operands.append(f"%s{k}")
    lines += ["      " + line for line in case.body.format(*operands).splitlines()]
    result = "%r"
    if case.out_type in FORMATS:
        lines.append(f"      %rb = arith.bitcast %r : {case.out_type} to "
                     f"{storage_type(case.out_type)}")
        result = "%rb"
    lines += [f"      memref.store {result}, %out[%i] : {_memref(case.out_type)}",
              "    }",
              "    gpu.return",
              "  }"]
    return "\n".join(lines)


def host_function(case: Case) -> str:
    """The host function of a case: launches its kernel over the output's length."""
    types = [_memref(t) for t in case.in_types] + [_memref(case.out_type)]
    names = [f"%in{k}" for k in range(len(case.in_types))] + ["%out"]
    params = ", ".join(f"{n}: {t}" for n, t in zip(names, types))
    args = ", ".join(f"{n} : {t}" for n, t in zip(names, types))
    return "\n".join([
        f"func.func @{case.name}({params}) {{",
        "  %c0 = arith.constant 0 : index",
        "  %c1 = arith.constant 1 : index",
        f"  %cb = arith.constant {BLOCK} : index",
        f"  %n = memref.dim %out, %c0 : {types[-1]}",
        "  %grid = arith.ceildivui %n, %cb : index",
        f"  gpu.launch_func @cases::@{case.name} blocks in (%grid, %c1, %c1) "
        f"threads in (%cb, %c1, %c1) args({args})",
        "  return",
        "}"])


def module(cases: list[Case]) -> str:
    """One MLIR module holding every case of ``cases``."""
    parts = ["module attributes {gpu.container_module} {", "gpu.module @cases {"]
    parts += [kernel(c) for c in cases]
    parts.append("}")
    parts += [host_function(c) for c in cases]
    parts.append("}")
    return "\n".join(parts) + "\n"


def by_group(cases: list[Case]) -> dict[str, list[Case]]:
    """Cases by group (one module each), in order."""
    groups: dict[str, list[Case]] = defaultdict(list)
    for c in cases:
        groups[c.group].append(c)
    return dict(groups)
