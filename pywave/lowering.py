"""Lowering options: what upstream's ``gpu-lower-to-nvvm-pipeline`` lets a user choose
(index bitwidth, bare-pointer kernel arguments, chip features, kernel optimisation level),
the kernel pipeline they make, and the image format a chip can be compiled to.

Plain data and strings; no MLIR import (the options are part of the compile-cache key,
computed before MLIR loads).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
import re
import subprocess

from .errors import CompileError

log = logging.getLogger("pywave.lowering")


@dataclasses.dataclass(frozen=True)
class LoweringOptions:
    """Options of the kernel and host lowering (the defaults are pywave's historic ones).

    index_bitwidth : int
        Width of ``index`` inside kernels (32 or 64; upstream's ``index-bitwidth``).
    kernel_bare_ptr : bool
        Kernels take memrefs of static shape as bare pointers (upstream's
        ``kernel-bare-ptr-calling-convention``; every kernel memref must then be static with
        an identity layout).
    features : str
        PTX features of ``#nvvm.target`` (``"+ptx80"``); "" keeps MLIR's default.
    kernel_opt_level : int
        LLVM optimisation level of the kernels (0-3; ``#nvvm.target<O = N>``).
    """

    index_bitwidth: int = 64
    kernel_bare_ptr: bool = False
    features: str = ""
    kernel_opt_level: int = 3

    def __post_init__(self) -> None:
        if self.index_bitwidth not in (32, 64):
            raise CompileError(f"index_bitwidth must be 32 or 64, got {self.index_bitwidth!r}")
        if self.kernel_opt_level not in (0, 1, 2, 3):
            raise CompileError("kernel_opt_level must be 0, 1, 2 or 3, got "
                               f"{self.kernel_opt_level!r}")
        if self.features and not re.fullmatch(r"(\+[\w.]+)(,\+[\w.]+)*", self.features):
            raise CompileError(f"features must look like '+ptx80' (comma-separated, each "
                               f"starting with '+'), got {self.features!r}")

    def key(self) -> dict:
        """The options as plain data, for the compile-cache key and dumps."""
        return dataclasses.asdict(self)


def nvvm_target(chip: str, options: LoweringOptions) -> str:
    """The ``#nvvm.target`` attribute text for ``chip`` with ``options``."""
    features = f', features = "{options.features}"' if options.features else ""
    return f'#nvvm.target<chip = "{chip}", O = {options.kernel_opt_level}{features}>'


def nvvm_pipeline(options: LoweringOptions) -> str:
    """Kernel lowering to NVVM, the kernel half of upstream's ``gpu-lower-to-nvvm-pipeline``:
    nvgpu (TMA, mbarrier, warpgroup MMA; also the host's TMA descriptor encoding), the vector
    ops left after the prepare stage (transfer reads and writes of rank 1, transposes, type
    casts), the GPU ops (subgroup reductions and queries, all-reduce, shuffles, WMMA, printf,
    assert) and NVVM's own ops."""
    gpu_to_nvvm = (f"convert-gpu-to-nvvm{{index-bitwidth={options.index_bitwidth} "
                   f"use-bare-ptr-memref-call-conv={int(options.kernel_bare_ptr)}}}")
    return ("builtin.module(convert-nvgpu-to-nvvm, gpu.module(convert-vector-to-llvm, "
            f"{gpu_to_nvvm}, canonicalize, cse, convert-nvvm-to-llvm, "
            "reconcile-unrealized-casts))")


@functools.cache
def ptxas_chips(ptxas: str) -> frozenset[str]:
    """The ``sm_*`` chips this ``ptxas`` compiles for, read from its ``--help`` (empty when
    the list cannot be read: then every chip is tried)."""
    try:
        out = subprocess.run([ptxas, "--help"], capture_output=True, text=True,
                             timeout=30).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        log.debug("cannot ask %s for its chips: %s", ptxas, exc)
        return frozenset()
    block = out.split("--gpu-name", 1)[-1].split("\n--", 1)[0]
    return frozenset(re.findall(r"'(sm_\w+)'", block))


def image_format(fmt: str, chip: str, toolkit: str | None) -> str:
    """The kernel image format to produce for ``chip``: ``fmt``, except that a chip the
    toolkit's ptxas no longer compiles for (CUDA 13 dropped sm_50...sm_72) gets PTX when
    ``fmt`` is ``"auto"`` or ``"fatbin"``: the driver compiles PTX for the GPU it runs on,
    and a GPU runs PTX written for any older chip. ``"cubin"`` for such a chip is an error."""
    if fmt not in ("auto", "fatbin", "cubin") or not toolkit:
        return fmt
    ptxas = os.path.join(toolkit, "bin", "ptxas")
    if not os.access(ptxas, os.X_OK):
        return fmt
    chips = ptxas_chips(ptxas)
    if not chips or chip in chips:
        return fmt
    if fmt == "cubin":
        raise CompileError(f"format='cubin' for {chip}: the ptxas of {toolkit} does not compile "
                           f"for {chip} (it knows {', '.join(sorted(chips))}); use "
                           "format='ptx' or 'auto' (the driver compiles PTX for the GPU)")
    log.info("ptxas of %s does not compile for %s: emitting PTX for the driver to compile",
             toolkit, chip)
    return "ptx"
