"""pywave: run GPU kernels written in upstream MLIR on DLPack tensors.

>>> mod = pywave.compile(mlir_text)          # doctest: +SKIP
>>> mod(a, b, c)                             # torch / cupy / jax tensors  # doctest: +SKIP
"""

from __future__ import annotations

import logging

from ._version import __version__
from .api import CompiledModule, compile, synchronize
from .errors import ArgumentError, CompileError, DeviceError, Error

__all__ = ["compile", "export", "synchronize", "CompiledModule", "Error", "CompileError",
           "ArgumentError", "DeviceError", "__version__"]

logging.getLogger("pywave").addHandler(logging.NullHandler())


def __getattr__(name: str):
    """``pywave.export``, imported on first use (a warm start does not need its subprocess)."""
    if name == "export":
        from .c_export import export
        return export
    raise AttributeError(f"module 'pywave' has no attribute {name!r}")


def _bind_exceptions() -> None:
    """Give the native call path pywave's classes and the status table of pywave.runtime."""
    try:
        from ._native import set_exceptions
        from .runtime import STATUS_ERRORS
    except ImportError:  # a source checkout without the built extensions: compile-only use
        logging.getLogger("pywave").debug("pywave._native is not built; calls are unavailable")
        return
    set_exceptions(ArgumentError, DeviceError, STATUS_ERRORS)


_bind_exceptions()
