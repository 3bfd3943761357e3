"""pywave: run GPU kernels written in upstream MLIR on DLPack tensors.

>>> mod = pywave.compile(mlir_text)          # doctest: +SKIP
>>> mod(a, b, c)                             # torch / cupy / jax tensors  # doctest: +SKIP
"""

from __future__ import annotations

import logging

from ._version import __version__
from .errors import (ArgumentError, CompileError, ConfigWarning, DeviceError, Error,
                     KernelFaultError, NotBuiltError)


def _check_built() -> None:
    """Raise NotBuiltError, saying how to fix it, when the C extensions are missing: pywave
    imported from a source tree that was never built (running Python in the repository root
    imports ``./pywave`` before an installed copy). From the command line (``python -m
    pywave``, the ``pywave`` script) the same message is one ``error:`` line and exit
    status 1, not a traceback."""
    from . import layout
    try:
        from . import _libwavert, _native  # noqa: F401
    except ImportError:
        import os
        here = os.path.dirname(os.path.abspath(__file__))
        message = (
            f"pywave at {here} has no built C extensions (pywave._libwavert, pywave._native)"
            ". If pywave is installed, Python found this source tree first because the "
            "current directory is the repository root: run from another folder, or use the "
            "`pywave` command or `python3 -P -m pywave` (Python 3.11+), which do not look in "
            f"the current directory. Otherwise {layout.REBUILD_HINT}")
        if _command_line():
            raise SystemExit(f"error: {message}")
        raise NotBuiltError(message) from None


def _command_line() -> bool:
    """pywave is being imported to run its command line: ``python -m pywave ...`` (while
    runpy imports the package, ``sys.argv[0]`` is ``-m``) or the ``pywave`` script."""
    import os
    import sys
    argv = getattr(sys, "orig_argv", [])
    if sys.argv[:1] == ["-m"] and "-m" in argv[:-1]:
        module = argv[argv.index("-m") + 1]
        return module == "pywave" or module.startswith("pywave.")
    return bool(sys.argv) and os.path.basename(sys.argv[0]) == "pywave"


_check_built()

from .api import CompiledModule, compile, device_count, synchronize  # noqa: E402

__all__ = ["compile", "compile_many", "CompileManyError", "export", "synchronize",
           "device_count", "CompiledModule", "Error", "CompileError", "ArgumentError",
           "DeviceError", "KernelFaultError", "NotBuiltError", "ConfigWarning", "ExecutionEngine", "__version__"]

logging.getLogger("pywave").addHandler(logging.NullHandler())


def __getattr__(name: str):
    """``pywave.export``, ``compile_many``, ``CompileManyError`` and ``ExecutionEngine``,
    imported on first use (a warm start needs neither the C export's subprocess nor the thread
    pool)."""
    if name == "ExecutionEngine":
        from .entry.engine import ExecutionEngine
        return ExecutionEngine
    if name == "export":
        from .entry.c_export import export
        return export
    if name in ("compile_many", "CompileManyError"):
        from .entry import many
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
