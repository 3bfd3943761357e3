"""The chips a ``gpu.module`` names: the one reader of its ``targets`` attribute
(``#nvvm.target``/``#rocdl.target``), for the kernels stage and its rewrites."""

from __future__ import annotations

from mlir import ir

from . import validate
from .errors import CompileError
from .mlirutil import sym_name
from .program import Target


def module_targets(gmod: ir.Operation) -> list[Target]:
    """The targets of a ``gpu.module``'s ``#nvvm.target``/``#rocdl.target`` list, in order
    ([] when it has none; a target without a chip gets MLIR's default). CompileError for
    another kind of target, targets of two backends, and a chip LLVM does not know
    (:func:`pywave.validate.chip`: LLVM asserts on some)."""
    if "targets" not in gmod.attributes:
        return []
    out = []
    for attr in ir.ArrayAttr(gmod.attributes["targets"]):
        text = str(attr)
        backend = "nvvm" if text.startswith("#nvvm.target") else \
            "rocdl" if text.startswith("#rocdl.target") else None
        if backend is None:
            raise CompileError(f"gpu.module @{sym_name(gmod)} has the target {text}; pywave "
                               "supports #nvvm.target and #rocdl.target")
        chip = text.split('chip = "')[1].split('"')[0] if 'chip = "' in text else \
            ("sm_50" if backend == "nvvm" else "gfx900")
        validate.chip(chip, f"the chip of gpu.module @{sym_name(gmod)}")
        out.append(Target(backend, chip))
    if len({t.backend for t in out}) > 1:
        raise CompileError(f"gpu.module @{sym_name(gmod)} lists targets of two backends: "
                           + ", ".join(f"{t.chip} ({t.backend})" for t in out))
    return out


def module_target(gmod: ir.Operation) -> Target | None:
    """The first of :func:`module_targets` (None when the module has none)."""
    found = module_targets(gmod)
    return found[0] if found else None
