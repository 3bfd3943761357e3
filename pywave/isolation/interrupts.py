"""Ctrl-C during a compile: raised only while the client waits, never during bookkeeping.

Python raises KeyboardInterrupt between any two bytecodes of the main thread, so a second
Ctrl-C could land in the middle of handing a worker back or killing it, leaking a slot of
the pool. While a compile runs on the main thread, :class:`Shield` replaces the SIGINT
handler with one that raises only inside :meth:`Shield.waiting` blocks (the blocking calls)
and otherwise remembers the signal; when the compile ends, the original handler is put back
and a remembered Ctrl-C is delivered to it (one KeyboardInterrupt, however many presses).
Other threads never receive KeyboardInterrupt, so there the shield does nothing.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from types import FrameType
from typing import Any, Callable, Iterator


_active: "Shield | None" = None     # the shield whose handler is installed, if any


def after_fork_in_child() -> None:
    """In a child forked while a shield was installed (by another thread): put the
    original SIGINT handler back, or Ctrl-C would stay swallowed there."""
    global _active
    shield, _active = _active, None
    if shield is not None and shield._original is not None:
        signal.signal(signal.SIGINT, shield._original)
        shield._original = None


class Shield:
    """Context manager; see the module docstring. Not reentrant across threads: each
    compile makes its own, and only one main-thread compile runs at a time."""

    def __init__(self) -> None:
        self._original: Callable[[int, FrameType | None], Any] | None = None
        self._open = False
        self._pending: tuple[int, FrameType | None] | None = None

    def __enter__(self) -> "Shield":
        if threading.current_thread() is not threading.main_thread():
            return self
        original = signal.getsignal(signal.SIGINT)
        if not callable(original) or isinstance(getattr(original, "__self__", None), Shield):
            return self             # SIG_IGN / SIG_DFL, or an outer shield: nothing to do
        global _active
        self._original = original
        signal.signal(signal.SIGINT, self._handle)
        _active = self
        return self

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self._open and self._original is not None:
            self._original(signum, frame)
        else:
            self._pending = (signum, frame)

    @contextlib.contextmanager
    def waiting(self) -> Iterator[None]:
        """A blocking call that Ctrl-C may interrupt (a remembered one is raised first)."""
        if self._original is not None and self._pending is not None:
            signum, frame = self._pending
            self._pending = None
            self._original(signum, frame)
        self._open = True
        try:
            yield
        finally:
            self._open = False

    def __exit__(self, kind, value, tb) -> None:
        global _active
        if self._original is None:
            return
        original, self._original = self._original, None
        signal.signal(signal.SIGINT, original)
        _active = None
        pending, self._pending = self._pending, None
        if pending is not None and not isinstance(value, KeyboardInterrupt):
            original(*pending)
