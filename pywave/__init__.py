"""pywave: run GPU kernels written in upstream MLIR on DLPack tensors.

>>> mod = pywave.compile(mlir_text)          # doctest: +SKIP
>>> mod(a, b, c)                             # torch / cupy / jax tensors  # doctest: +SKIP
"""

from __future__ import annotations

import logging

from . import _source_tree

# Python started in the repository root imports the unbuilt ./pywave first. An installed pywave
# further on sys.path then takes its place (pywave/_source_tree.py says how) and the rest of
# this file is skipped: sys.modules["pywave"] is that copy, with all of its names.
_built = _source_tree.is_built(__name__)
if _built or _source_tree.defer_to_installed(__name__, __file__) is None:
    from ._version import __version__
    from .errors import (ArgumentError, CompileError, ConfigWarning, DeviceError, Error,
                         KernelFaultError, NoAttributeError, NotBuiltError, NotFoundError)

    def _not_built() -> NotBuiltError:
        """The error of an unbuilt pywave with no installed copy to defer to, saying how to
        build it. From the command line (``python -m pywave``, the ``pywave`` script) it is one
        ``error:`` line and exit status 1 instead, not a traceback."""
        import os
        from . import layout
        here = os.path.dirname(os.path.abspath(__file__))
        message = (f"pywave at {here} is not built (no pywave._native) and no installed "
                   f"pywave is on sys.path past it: {layout.REBUILD_HINT}")
        if _command_line():
            raise SystemExit(f"error: {message}")
        return NotBuiltError(message)

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

    if not _built:
        raise _not_built()

    from .api import CompiledModule, compile, device_count, synchronize  # noqa: E402

    __all__ = ["compile", "compile_many", "CompileManyError", "export", "synchronize",
               "device_count", "CompiledModule", "Error", "CompileError", "ArgumentError",
               "DeviceError", "KernelFaultError", "NotBuiltError", "NotFoundError",
               "NoAttributeError", "ConfigWarning",
               "ExecutionEngine", "__version__"]

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
