"""Exception types raised by pywave.

Every failure pywave reports is a :class:`Error`. The subclasses say which stage failed and,
where natural, also derive from the matching built-in so ``except ValueError`` keeps working.
"""

from __future__ import annotations

import logging
import os
import sys
import warnings


class Error(Exception):
    """Base class of every pywave exception."""


class CompileError(Error):
    """The MLIR text could not be parsed, verified, lowered, compiled or JIT-linked.

    Attributes
    ----------
    filename, line, column : str | None, int | None, int | None
        Location of the first diagnostic, when MLIR reported one (1-based line and column).
    source_line : str | None
        The offending line of the input text.
    """

    def __init__(self, message: str, *, filename: str | None = None, line: int | None = None,
                 column: int | None = None, source_line: str | None = None) -> None:
        super().__init__(message)
        self.filename = filename
        self.line = line
        self.column = column
        self.source_line = source_line


class ArgumentError(Error, ValueError):
    """An argument of a call does not fit the host function's signature or a device limit:
    wrong dtype, rank, shape, layout or device, an out-of-range scalar, an oversized grid."""


class DeviceError(Error, RuntimeError):
    """The GPU driver failed (module load, launch, kernel fault, missing driver or device).
    The message carries the driver call and its error name and text."""


class KernelFaultError(DeviceError):
    """A kernel failed a check of the CPU target's checked mode (``checks=True``): an
    out-of-bounds memref access, a ``gpu.barrier`` not reached by every thread of its block
    (divergence, an early return), or a data race on workgroup memory. The message names the
    kernel, the block (x, y, z), the thread(s) (x, y, z), the op, the index, the memref and
    the source line. The process goes on; what the kernel wrote before it is undefined."""


class NotFoundError(Error, KeyError):
    """A name looked up with ``[]`` is not in the module: ``mod["NAME"]`` (its host
    functions) or ``mod.kernels["NAME"]`` (its launchable kernels), or is ambiguous there.
    The message lists the names there are."""

    def __str__(self) -> str:       # the message, not KeyError's repr of it
        return str(self.args[0]) if self.args else ""


class NoAttributeError(Error, AttributeError):
    """``mod.NAME`` names no host function of the module (the message lists them); an
    AttributeError, so ``hasattr`` and ``getattr`` with a default work as usual."""


class NotBuiltError(Error, ImportError):
    """pywave's built parts (its C extensions, ``libwavert.so``) are missing: the package was
    imported from a source tree that was never built, or a build output was removed. The
    message says how to build or install it."""


class ConfigWarning(UserWarning):
    """A setting pywave was given cannot be used as asked, and pywave goes on without it: an
    environment variable naming a folder that is not there (``PYWAVE_CUDA_PATH``), a compile
    cache folder it cannot write. Issued through :mod:`warnings` (once per setting and
    process), so it shows by default; ``warnings.simplefilter("error", ConfigWarning)`` makes
    it an exception."""


def warn_config(logger: logging.Logger, message: str) -> None:
    """Report a :class:`ConfigWarning` both ways: on ``logger`` at WARNING (what the command
    line prints) and through :mod:`warnings` (what a Python program sees by default, pywave's
    loggers having only a NullHandler), attributed to the first caller outside pywave (the
    user's line that compiled, not pywave's own). The caller issues it once per setting."""
    logger.warning("%s", message)
    package = os.path.dirname(os.path.abspath(__file__)) + os.sep
    frame, level = sys._getframe(), 1           # level 1: this function
    while frame.f_back is not None and frame.f_code.co_filename.startswith(package):
        frame, level = frame.f_back, level + 1
    warnings.warn(message, ConfigWarning, stacklevel=level)
