"""The Python launch API of kernels: ``mod.kernels["add"](a, b, c, n, grid=..., block=...)``.

Each launchable kernel of a compiled module has a generated host function, its *launcher*
(:mod:`pywave.host.launchers`), named ``_pywave_kernel$<gpu.module>$<kernel>``; it is stored and
cached like any host function, and :class:`pywave.api.CompiledModule` wraps it in a
``pywave._native.KernelLauncher``. This module holds the naming rule and the :class:`Kernels`
mapping; it imports no MLIR (a cache hit builds the table without it).
"""

from __future__ import annotations

import dataclasses
import re
from typing import Iterator, Mapping, Sequence

from ..errors import ArgumentError, Error, NotFoundError
from ..program import COARSENED_SUFFIX, Binary, KernelInfo

#: Name prefix of the generated launcher host functions (``$`` cannot start or appear in a
#: C identifier, so no user function of an export collides; MLIR and LLVM accept it).
LAUNCHER_PREFIX = "_pywave_kernel$"

#: gpu.module and kernel names a launcher name can carry (MLIR's bare identifiers without
#: ``$``, the separator).
_NAME = r"[A-Za-z_][\w.]*"


def launcher_name(module: str, kernel: str) -> str | None:
    """The launcher host function's name for ``@module::@kernel`` (None when either name is
    not a bare identifier without ``$``: such a kernel gets no launcher)."""
    if re.fullmatch(_NAME, module) and re.fullmatch(_NAME, kernel):
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
            raise NotFoundError(f"kernel {name!r} is ambiguous: {', '.join(sorted(matches))}; use "
                           "'module::kernel'")
        raise NotFoundError(f"no launchable kernel {name!r}; kernels: {list(self._launchers)} "
                       "(kernels whose arguments Python cannot pass, e.g. unranked memrefs "
                       "or vectors, have no launcher)")

    def __iter__(self) -> Iterator[str]:
        return iter(self._launchers)

    def __len__(self) -> int:
        return len(self._launchers)

    def __repr__(self) -> str:
        return f"<pywave.Kernels {list(self._launchers)}>"


@dataclasses.dataclass(frozen=True)
class KernelAttributes:
    """Resource figures of one kernel on one chip (``mod.kernel_attributes(...)``).

    ``source`` says where they were read: ``"ptxas"`` (its ``-v`` report at compile time, no
    GPU needed; kept in the compile cache) or ``"driver"`` (``cuFuncGetAttribute`` on a GPU,
    for the code the driver loaded from the image). ``name`` is ``"module::kernel"``,
    ``chip`` the chip of the code described. Counts: ``registers`` per thread,
    ``max_threads_per_block``; bytes: ``spill_stores``/``spill_loads``/``local_bytes`` per
    thread, ``shared_bytes`` (static), ``constant_bytes`` and ``max_dynamic_shared_bytes``
    (what a launch may use before opting in to more) per block; ``ptx_version`` and
    ``binary_version`` are major*10 + minor (90 for sm_90). A figure the source does not give
    is None: ptxas gives no thread or dynamic shared limit, the driver no spill counts
    (filled from ptxas' report for the same chip when there is one)."""

    name: str
    chip: str
    source: str
    registers: int
    spill_stores: int | None
    spill_loads: int | None
    local_bytes: int
    shared_bytes: int
    constant_bytes: int
    max_threads_per_block: int | None
    max_dynamic_shared_bytes: int | None
    ptx_version: int
    binary_version: int


def find_kernel(binaries: Sequence[Binary], name: str,
                launchable: Sequence[str]) -> tuple[Binary, str]:
    """The binary holding kernel ``name`` (``"module::kernel"``, or a kernel name unique in
    the module) and the kernel's own name. Kernels are known from ptxas' figures and from the
    launchers (``launchable``: ``"module::kernel"`` names). ArgumentError naming the
    kernels for an unknown or ambiguous name."""
    if not isinstance(name, str):
        raise TypeError(f"kernel name must be a str, got {type(name).__name__} {name!r}")
    known = dict.fromkeys([f"{b.name}::{k.name}" for b in binaries for k in b.kernels
                           if not k.name.endswith(COARSENED_SUFFIX)] + list(launchable))
    matches = [q for q in known if q == name] or [q for q in known if q.split("::")[1] == name]
    if len(matches) != 1:
        what = "is ambiguous" if matches else "is not a kernel of the module"
        raise ArgumentError(f"kernel {name!r} {what}; kernels: {list(known)}")
    module, kernel = matches[0].split("::")
    return next(b for b in binaries if b.name == module), kernel


def compiled_attributes(binary: Binary, kernel: str, chip: str | None) -> KernelAttributes:
    """ptxas' figures of ``kernel`` in ``binary`` for ``chip`` (default: the binary's
    first). ArgumentError when there are none: an image ptxas did not assemble (PTX for the
    driver, an image given with ``binaries=``), or a chip the image was not built for."""
    wanted = chip or binary.chips[0]
    info = _figures(binary, kernel, wanted)
    if info is None:
        reason = f"chip={wanted!r} is not one of its chips {list(binary.chips)}" \
            if wanted not in binary.chips else \
            f"the {binary.format} image was not assembled by pywave's ptxas run"
        raise ArgumentError(f"kernel {binary.name}::{kernel}: no compile-time figures ({reason}); "
                            "pass device=N to read the driver's on a GPU")
    return KernelAttributes(f"{binary.name}::{kernel}", info.chip, "ptxas", info.registers,
                            info.spill_stores, info.spill_loads, info.local_bytes,
                            info.shared_bytes, info.constant_bytes, None, None,
                            info.ptx_version, info.binary_version)


def driver_attributes(binary: Binary, kernel: str, values: Mapping[str, int]) -> KernelAttributes:
    """The driver's ``values`` (:data:`pywave.runtime.FUNCTION_ATTRIBUTES`) as
    KernelAttributes; spill counts from ptxas' figures for the chip the driver loaded."""
    version = values["binary_version"]
    chip = f"sm_{version}" if binary.chips[0].startswith("sm_") else binary.chips[0]
    info = next((k for k in binary.kernels if k.name == kernel and
                 k.binary_version == version), None)
    return KernelAttributes(f"{binary.name}::{kernel}", chip, "driver", values["registers"],
                            info.spill_stores if info else None,
                            info.spill_loads if info else None, values["local_bytes"],
                            values["shared_bytes"], values["constant_bytes"],
                            values["max_threads_per_block"], values["max_dynamic_shared_bytes"],
                            values["ptx_version"], version)


def _figures(binary: Binary, kernel: str, chip: str) -> KernelInfo | None:
    return next((k for k in binary.kernels if k.name == kernel and k.chip == chip), None)
