"""Vector add with pywave: c = a + b on the GPU.

    python3 examples/vector_add.py

With a GPU, the tensors come from the first of torch and CuPy that is installed and sees the
GPU, else from pywave itself (examples/device_buffers.mlir: host functions that allocate GPU
memory and return it); the first line printed names the one used. Nothing but pywave is
needed. Without a GPU it compiles for sm_90 and prints what each stage made.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pywave
import pywave.api

HERE = Path(__file__).parent
N = 1_000_003


def torch_tensors():
    """(framework name, a, b, c, check) with torch CUDA tensors; None without torch or GPU."""
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    a, b = torch.randn(N, device="cuda"), torch.randn(N, device="cuda")
    c = torch.empty(N, device="cuda")
    return "torch", a, b, c, lambda: bool(torch.equal(c, a + b))


def cupy_arrays():
    """The same with CuPy arrays; None without CuPy or GPU."""
    try:
        import cupy
        if cupy.cuda.runtime.getDeviceCount() < 1:
            return None
    except Exception:  # noqa: BLE001 - ImportError, or CuPy's own no-driver errors
        return None
    a = cupy.random.standard_normal(N, dtype=cupy.float32)
    b = cupy.random.standard_normal(N, dtype=cupy.float32)
    c = cupy.empty(N, dtype=cupy.float32)
    return "CuPy", a, b, c, lambda: bool(cupy.array_equal(c, a + b))


def pywave_buffers():
    """The same with pywave's own device buffers: a[i] = i, b[i] = 2i, c empty; the check
    copies c to host memory and compares it with 3i (exact in float32 below 2^24)."""
    import numpy as np
    buffers = pywave.compile(HERE / "device_buffers.mlir")
    a, b, c = buffers.ramp(N, 1.0), buffers.ramp(N, 2.0), buffers.empty(N)

    def check() -> bool:
        host = np.from_dlpack(buffers.to_host(c))
        return bool(np.array_equal(host, 3 * np.arange(N, dtype=np.float32)))
    return "pywave device buffers (no tensor framework)", a, b, c, check


def run_on_gpu() -> None:
    name, a, b, c, check = torch_tensors() or cupy_arrays() or pywave_buffers()
    print(f"tensors: {name}")
    with pywave.compile(HERE / "vector_add.mlir") as mod:
        print(mod)
        mod(a, b, c)  # launched on the framework's current stream; no synchronisation needed
        ok = check()
    print("OK" if ok else "MISMATCH: c != a + b")
    if not ok:
        raise SystemExit(1)


def compile_only() -> None:
    art = pywave.api.build((HERE / "vector_add.mlir").read_text(), target="sm_90")
    print("no GPU: compiled for sm_90 only")
    for stage, secs in art.seconds.items():
        print(f"  stage {stage:13s} {secs * 1e3:8.1f} ms")
    for binary in art.binaries:
        print(f"  kernel binary @{binary.name}: {binary.format}, {len(binary.data)} bytes")
    for fn in art.host.functions:
        params = ", ".join(f"{p.name}: {p.type}" for p in fn.params)
        print(f"  host function @{fn.name}({params})")


if __name__ == "__main__":
    argparse.ArgumentParser(description=__doc__.splitlines()[0],
                            epilog="Takes no options: with a GPU it adds two vectors and "
                            "prints OK, without one it compiles for sm_90.").parse_args()
    run_on_gpu() if pywave.device_count() else compile_only()
