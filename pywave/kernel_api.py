"""The Python launch API of kernels: ``mod.kernels["add"](a, b, c, n, grid=..., block=...)``.

Each launchable kernel of a compiled module has a generated host function, its *launcher*
(:mod:`pywave.launchers`), named ``_pywave_kernel$<gpu.module>$<kernel>``; it is stored and
cached like any host function, and :class:`pywave.api.CompiledModule` wraps it in a
``pywave._native.KernelLauncher``. This module holds the naming rule and the :class:`Kernels`
mapping; it imports no MLIR (a cache hit builds the table without it).
"""

from __future__ import annotations

import re
from typing import Iterator, Mapping

from .errors import Error

#: Name prefix of the generated launcher host functions (``$`` cannot start or appear in a
#: C identifier, so no user function of an export collides; MLIR and LLVM accept it).
LAUNCHER_PREFIX = "_pywave_kernel$"

#: gpu.module and kernel names a launcher name can carry (MLIR's bare identifiers without
#: ``$``, the separator).
_NAME = re.compile(r"[A-Za-z_][\w.]*")


def launcher_name(module: str, kernel: str) -> str | None:
    """The launcher host function's name for ``@module::@kernel`` (None when either name is
    not a bare identifier without ``$``: such a kernel gets no launcher)."""
    if _NAME.fullmatch(module) and _NAME.fullmatch(kernel):
        return f"{LAUNCHER_PREFIX}{module}${kernel}"
    return None


def kernel_of(function: str) -> str | None:
    """``"module::kernel"`` for a launcher's name, None for any other host function."""
    if not function.startswith(LAUNCHER_PREFIX):
        return None
    module, _, kernel = function[len(LAUNCHER_PREFIX):].partition("$")
    return f"{module}::{kernel}"


class Kernels(Mapping):
    """The kernels of a compiled module that Python can launch, by ``"module::kernel"``; a
    kernel's own name (``"add"``) also finds it when no other gpu.module has a kernel of that
    name. Values are ``pywave._native.KernelLauncher``: call one as
    ``launcher(*args, grid=(gx, gy, gz), block=(bx, by, bz), shared_mem=0, stream=None)``.
    Read-only; thread-safe."""

    def __init__(self, launchers: dict, code) -> None:
        self._launchers = launchers
        # The module's HostCode (for `closed`), never the module: a reference back to the
        # module would make a cycle, and the garbage collector may then free the JIT code
        # before the release that still runs it.
        self._code = code
        short: dict[str, list[str]] = {}
        for qualified in launchers:
            short.setdefault(qualified.split("::", 1)[1], []).append(qualified)
        self._short = short

    def __getitem__(self, name: str):
        if self._code.closed:
            raise Error("the compiled module is closed")
        found = self._launchers.get(name)
        if found is not None:
            return found
        matches = self._short.get(name, [])
        if len(matches) == 1:
            return self._launchers[matches[0]]
        if matches:
            raise KeyError(f"kernel {name!r} is ambiguous: {', '.join(sorted(matches))}; use "
                           "'module::kernel'")
        raise KeyError(f"no launchable kernel {name!r}; kernels: {list(self._launchers)} "
                       "(kernels whose arguments Python cannot pass, e.g. unranked memrefs "
                       "or vectors, have no launcher)")

    def __iter__(self) -> Iterator[str]:
        return iter(self._launchers)

    def __len__(self) -> int:
        return len(self._launchers)

    def __repr__(self) -> str:
        return f"<pywave.Kernels {list(self._launchers)}>"
