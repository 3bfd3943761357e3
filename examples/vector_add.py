"""Vector add with pywave: c = a + b on torch CUDA tensors.

    python examples/vector_add.py

Without a CUDA GPU (or without torch) it compiles for sm_90 and prints what each stage made.
"""

from __future__ import annotations

from pathlib import Path

import pywave
import pywave.api

TEXT = (Path(__file__).parent / "vector_add.mlir").read_text()


def have_gpu() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def run_on_gpu() -> None:
    import torch

    n = 1_000_003
    a = torch.randn(n, device="cuda")
    b = torch.randn(n, device="cuda")
    c = torch.empty(n, device="cuda")
    with pywave.compile(TEXT) as mod:
        print(mod)
        mod(a, b, c)  # launched on torch's current stream; no synchronisation needed
        err = (c - (a + b)).abs().max().item()
    print(f"max error: {err}")
    assert err == 0.0
    print("OK")


def compile_only() -> None:
    art = pywave.api.build(TEXT, target="sm_90")
    print("no CUDA GPU: compiled for sm_90 only")
    for stage, secs in art.seconds.items():
        print(f"  stage {stage:13s} {secs * 1e3:8.1f} ms")
    for binary in art.binaries:
        print(f"  kernel binary @{binary.name}: {binary.format}, {len(binary.data)} bytes")
    for fn in art.host.functions:
        params = ", ".join(f"{p.name}: {p.type}" for p in fn.params)
        print(f"  host function @{fn.name}({params})")


if __name__ == "__main__":
    run_on_gpu() if have_gpu() else compile_only()
