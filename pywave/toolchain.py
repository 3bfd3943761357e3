"""The PTX ISA version kernels are emitted for: the highest that the found ptxas and LLVM's
NVPTX backend accept (LLVM 22 defaults to PTX 7.8, which caps kernel parameters at 4 KiB;
PTX 8.1+, CUDA 12.1+, allows 32,764 bytes).

Used only when ptxas assembles the PTX (cubin, fatbin): PTX handed to the driver is left at
LLVM's default, since the driver's own PTX version is known at run time only.
"""

from __future__ import annotations

import functools
import logging
import os
import re
import subprocess

log = logging.getLogger("pywave.toolchain")

#: PTX ISA version (x10) introduced by each CUDA release (PTX ISA manual, release notes).
PTX_OF_CUDA = {(11, 8): 78, (12, 0): 80, (12, 1): 81, (12, 2): 82, (12, 3): 83, (12, 4): 84,
               (12, 5): 85, (12, 6): 85, (12, 7): 86, (12, 8): 87, (12, 9): 88, (13, 0): 90}
#: Highest PTX ISA version LLVM 22's NVPTX backend knows (+ptx90).
LLVM_MAX_PTX = 90


@functools.lru_cache(maxsize=8)
def _ptxas_release(ptxas: str, mtime: float) -> tuple[int, int] | None:
    try:
        out = subprocess.run([ptxas, "--version"], capture_output=True, text=True,
                             timeout=60).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        log.debug("ptxas --version failed: %s", exc)
        return None
    match = re.search(r"release (\d+)\.(\d+)", out)
    return (int(match.group(1)), int(match.group(2))) if match else None


def ptxas_release(toolkit: str | None) -> tuple[int, int] | None:
    """(major, minor) CUDA release of ``toolkit``'s ptxas, or None."""
    if not toolkit:
        return None
    ptxas = os.path.join(toolkit, "bin", "ptxas")
    try:
        return _ptxas_release(ptxas, os.stat(ptxas).st_mtime)
    except OSError:
        return None


def ptx_isa(release: tuple[int, int]) -> int | None:
    """PTX ISA version (x10) for a CUDA release, capped at what LLVM knows; None when the
    release is older than the table."""
    known = [v for r, v in PTX_OF_CUDA.items() if r <= release]
    return min(max(known), LLVM_MAX_PTX) if known else None


def raise_ptx_version(module, toolkit: str | None) -> int | None:
    """Give every ``#nvvm.target`` without ``features`` the ``+ptxNN`` that ptxas accepts;
    returns NN (None when nothing was changed)."""
    from mlir import ir
    release = ptxas_release(toolkit)
    version = ptx_isa(release) if release else None
    if version is None:
        return None
    for op in module.body.operations:
        op = op.operation
        if op.name != "gpu.module" or "targets" not in op.attributes:
            continue
        targets = [str(t) for t in ir.ArrayAttr(op.attributes["targets"])]
        changed = [t[:-1] + f', features = "+ptx{version}">'
                   if t.startswith("#nvvm.target") and "features" not in t else t
                   for t in targets]
        if changed != targets:
            op.attributes["targets"] = ir.Attribute.parse(f"[{', '.join(changed)}]",
                                                          module.context)
    return version
