"""Ground: llvmlite's binding, imported on first use, and LLVM's targets initialised once.

Both compile stages use LLVM: the host stage (:mod:`pywave.host.jit`) for the native target,
the kernels stage (:mod:`pywave.kernels.rocdl`, :mod:`pywave.kernels.rewrites.semantics`)
for the GPU targets' machines. A warm start through a pre-linked shared object
(:mod:`pywave.host.sharedobj`) imports neither llvmlite nor this module's targets.
"""

from __future__ import annotations

import functools
import threading


class _LazyBinding:
    """``llvmlite.binding``, imported on the first attribute read; each attribute read is
    then kept on this object, so later reads cost a plain attribute lookup."""

    def __getattr__(self, name: str):
        import llvmlite.binding
        value = getattr(llvmlite.binding, name)
        setattr(self, name, value)
        return value


#: ``llvmlite.binding``, imported when first used.
binding = _LazyBinding()

_lock = threading.Lock()
_native = False
_all = False


def native_target():
    """``llvmlite.binding`` with the host's native target, assembly printer and parser
    initialised, once; thread-safe."""
    global _native
    with _lock:
        if not _native:
            binding.initialize_native_target()
            binding.initialize_native_asmprinter()
            binding.initialize_native_asmparser()
            _native = True
    return binding


def all_targets():
    """``llvmlite.binding`` with every LLVM target (NVPTX, AMDGPU...) initialised, once;
    thread-safe. For the GPU targets' machines (data layouts, AMD code generation)."""
    global _all
    with _lock:
        if not _all:
            binding.initialize_all_targets()
            binding.initialize_all_asmprinters()
            _all = True
    return binding


@functools.cache
def host_cpu() -> tuple[str, str]:
    """(CPU name, feature string) of this machine, as LLVM names them: what the CPU target's
    kernels are compiled for (:mod:`pywave.kernels.cpu`), and part of their compile-cache key
    (an image for this CPU's extensions would die of SIGILL on another one)."""
    native_target()
    return binding.get_host_cpu_name(), binding.get_host_cpu_features().flatten()
