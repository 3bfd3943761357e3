"""pywave: run GPU kernels written in upstream MLIR on DLPack tensors.

>>> mod = pywave.compile(mlir_text)          # doctest: +SKIP
>>> mod(a, b, c)                             # torch / cupy / jax tensors  # doctest: +SKIP
"""

from __future__ import annotations

import logging

from ._version import __version__
from .errors import ArgumentError, CompileError, DeviceError, Error, NotBuiltError


def _check_built() -> None:
    """Raise NotBuiltError, saying how to fix it, when the C extensions are missing: pywave
    imported from a source tree that was never built (running Python in the repository root
    imports ``./pywave`` before an installed copy)."""
    from . import layout
    try:
        from . import _libwavert, _native  # noqa: F401
    except ImportError:
        import os
        here = os.path.dirname(os.path.abspath(__file__))
        raise NotBuiltError(
            f"pywave at {here} has no built C extensions (pywave._libwavert, pywave._native)"
            ". If pywave is installed, "
            "Python found this source tree first (the current directory is the repository "
            f"root): run from another folder. Otherwise {layout.REBUILD_HINT}") from None


_check_built()

from .api import CompiledModule, compile, synchronize  # noqa: E402

__all__ = ["compile", "compile_many", "CompileManyError", "export", "synchronize", "CompiledModule", "Error", "CompileError",
           "ArgumentError", "DeviceError", "NotBuiltError", "ExecutionEngine", "__version__"]

logging.getLogger("pywave").addHandler(logging.NullHandler())


def __getattr__(name: str):
    """``pywave.export``, ``compile_many``, ``CompileManyError`` and ``ExecutionEngine``,
    imported on first use (a warm start needs neither the C export's subprocess nor the thread
    pool)."""
    if name == "ExecutionEngine":
        from .engine import ExecutionEngine
        return ExecutionEngine
    if name == "export":
        from .c_export import export
        return export
    if name in ("compile_many", "CompileManyError"):
        from . import many
        return getattr(many, name)
    raise AttributeError(f"module 'pywave' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


def _bind_exceptions() -> None:
    """Give the native call path pywave's classes and the status table of pywave.runtime."""
    from ._native import set_exceptions
    from .runtime import STATUS_ERRORS
    set_exceptions(ArgumentError, DeviceError, STATUS_ERRORS)


_bind_exceptions()
