"""Isolation settings read from the caller's arguments and the environment, validated."""

from __future__ import annotations

import os
import signal
import socket

from ..errors import Error
from ..frontend import validate

ENV_ISOLATE = "PYWAVE_ISOLATE"
ENV_TIMEOUT = "PYWAVE_COMPILE_TIMEOUT"
ENV_WORKERS = "PYWAVE_COMPILE_WORKERS"
ENV_SERVER = "PYWAVE_COMPILE_SERVER"
ENV_SERVER_IDLE = "PYWAVE_COMPILE_SERVER_IDLE"
ENV_SERVER_TRIM = "PYWAVE_COMPILE_SERVER_TRIM"
DEFAULT_TIMEOUT = 300.0
DEFAULT_WORKERS = 2
#: Seconds a compile server with no client connected waits before it exits.
DEFAULT_SERVER_IDLE = 600.0
#: Seconds without a fork request after which the compile server gives its memory back.
DEFAULT_SERVER_TRIM = 5.0


def _flag(name: str, default: str = "1") -> bool:
    return os.environ.get(name, default).strip().lower() not in ("0", "false", "no", "off")


def enabled(isolate: bool | None) -> bool:
    """Whether a compile runs in a worker: ``isolate`` if given, else ``$PYWAVE_ISOLATE``."""
    validate.isolate(isolate)
    return isolate if isolate is not None else _flag(ENV_ISOLATE)


def server_enabled() -> bool:
    """Whether workers are forked by the compile server: on Linux (fork, pidfd, fd passing)
    unless ``$PYWAVE_COMPILE_SERVER`` is 0; else each worker starts its own interpreter."""
    if not (hasattr(os, "fork") and hasattr(os, "pidfd_open")
            and hasattr(socket, "send_fds") and hasattr(signal, "pidfd_send_signal")):
        return False
    return _flag(ENV_SERVER)


def _seconds(raw: str, name: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        raise Error(f"{name}={raw!r} is not a number of seconds") from None
    return validate.timeout(value, name)


def time_limit(timeout: float | None) -> float:
    """Seconds one isolated compile may take: ``timeout``, else ``$PYWAVE_COMPILE_TIMEOUT``,
    else 300. Any finite float > 0 (TypeError for a non-number, pywave.Error otherwise)."""
    if timeout is not None:
        return validate.timeout(timeout)
    raw = os.environ.get(ENV_TIMEOUT)
    return DEFAULT_TIMEOUT if raw is None else _seconds(raw, ENV_TIMEOUT)


def server_idle() -> float:
    """Seconds the compile server lingers with no client (``$PYWAVE_COMPILE_SERVER_IDLE``,
    at least 1)."""
    raw = os.environ.get(ENV_SERVER_IDLE)
    if raw is None:
        return DEFAULT_SERVER_IDLE
    value = _seconds(raw, ENV_SERVER_IDLE)
    if value < 1:
        raise Error(f"{ENV_SERVER_IDLE} must be at least 1 second, got {raw!r}")
    return value


def server_trim() -> float:
    """Seconds without a fork request after which the compile server gives back the memory
    it can (``$PYWAVE_COMPILE_SERVER_TRIM``, default 5, any finite float > 0): its pages of
    the shared libraries and modules (read again from the page cache by the next worker
    that uses them) and the C heap's free memory (:func:`pywave.isolation.server.trim`)."""
    raw = os.environ.get(ENV_SERVER_TRIM)
    return DEFAULT_SERVER_TRIM if raw is None else _seconds(raw, ENV_SERVER_TRIM)


def pool_size() -> int:
    """The bound on concurrent workers, ``$PYWAVE_COMPILE_WORKERS`` (default 2)."""
    raw = os.environ.get(ENV_WORKERS, str(DEFAULT_WORKERS))
    try:
        size = int(raw)
    except ValueError:
        raise Error(f"{ENV_WORKERS}={raw!r} is not a whole number") from None
    if size < 1:
        raise Error(f"{ENV_WORKERS} must be >= 1, got {size}")
    return size
