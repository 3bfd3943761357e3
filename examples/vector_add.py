"""Vector add with pywave: c = a + b on the GPU, or on the CPU device without one.

    python3 examples/vector_add.py

With a GPU, the tensors come from the first of torch and CuPy that is installed and sees the
GPU, else from pywave itself (examples/device_buffers.mlir: host functions that allocate GPU
memory and return it). Without a GPU, the same module is compiled with ``target="cpu"`` (its
kernel built for this machine's CPU, run by libwavert's CPU device) and runs on NumPy arrays.
The first lines printed name the device and the tensors used; the last says whether c equals
a + b exactly. Nothing but pywave (and NumPy, which it needs) is needed.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pywave

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


def numpy_arrays():
    """(name, a, b, c, check) with NumPy arrays, for the CPU device."""
    import numpy as np
    rng = np.random.default_rng(0)
    a = rng.standard_normal(N, dtype=np.float32)
    b = rng.standard_normal(N, dtype=np.float32)
    c = np.empty(N, dtype=np.float32)
    return "NumPy arrays", a, b, c, lambda: bool(np.array_equal(c, a + b))


def run(target: str | None) -> None:
    """Add the vectors on GPU 0 (``target`` None: its chip) or the CPU device (``"cpu"``),
    print the device, the tensors and the check; exit status 1 when c != a + b."""
    if target == "cpu":
        device = "CPU device (no GPU found: kernels compiled for this machine's CPU)"
        name, a, b, c, check = numpy_arrays()
    else:
        device = "GPU 0"
        name, a, b, c, check = torch_tensors() or cupy_arrays() or pywave_buffers()
    with pywave.compile(HERE / "vector_add.mlir", target=target) as mod:
        print(f"device: {device}, target {mod.target}")
        print(f"tensors: {name}")
        print(mod)
        mod(a, b, c)  # launched on the framework's current stream; no synchronisation needed
        ok = check()
    print(f"OK: c == a + b for all {N} elements" if ok else "MISMATCH: c != a + b")
    if not ok:
        raise SystemExit(1)


if __name__ == "__main__":
    argparse.ArgumentParser(description=__doc__.splitlines()[0],
                            epilog="Takes no options: it adds two vectors on GPU 0, or on the "
                            "CPU device where there is no GPU, and prints OK.").parse_args()
    run(None if pywave.device_count() else "cpu")
