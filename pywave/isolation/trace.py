"""A start-up timeline of compile isolation: ``$PYWAVE_TRACE=1`` (or a file path).

Each process of a compile (the client in the user's process, the compile server, its
workers) writes one line per event: ``pywave-trace <ms> <pid> <role> <event>``, where
``<ms>`` is ``time.monotonic()`` in milliseconds (CLOCK_MONOTONIC, one clock for every
process of the machine, so lines of different processes sort into one timeline). The
events: the client's compile call, the server's spawn, its imports (``preload``), its
socket bound, each fork, a worker's request and reply, and the server's trims and exit.
``1``: the client's lines on stderr (it sees its server spawned and listening and each
worker's start, stages and reply); a file path (absolute): every process appends its lines
there (``O_APPEND``: lines of different processes do not mix within a line), the whole
timeline. Unset, empty or ``0``: off, and each call costs one dictionary look-up. (A
server's or worker's stderr is its log or the client's crash record, so they write only
to a file.)
"""

from __future__ import annotations

import os
import sys
import time

ENV_TRACE = "PYWAVE_TRACE"


def enabled() -> bool:
    """Whether ``$PYWAVE_TRACE`` asks for the timeline."""
    return os.environ.get(ENV_TRACE, "0").strip() not in ("", "0")


def event(role: str, what: str) -> None:
    """Write one timeline line for this process (``role``: client, server or worker);
    never raises (a trace must not break a compile)."""
    where = os.environ.get(ENV_TRACE, "0").strip()
    if where in ("", "0") or (where == "1" and role != "client"):
        return
    line = f"pywave-trace {time.monotonic() * 1e3:.1f} {os.getpid()} {role} {what}\n"
    try:
        if where == "1":
            sys.stderr.write(line)
            sys.stderr.flush()
        else:
            fd = os.open(where, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                os.write(fd, line.encode("utf-8", "replace"))
            finally:
                os.close(fd)
    except (OSError, ValueError):
        pass
