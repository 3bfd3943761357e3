"""What a benchmark needs, and how it says that this machine lacks it.

A benchmark that cannot run here prints one line to stderr naming the script and what is
missing (``bench/launch.py: needs torch (not installed) and an NVIDIA GPU (pywave sees
none); nothing measured``) and exits with :data:`SKIPPED`, without a traceback; the README's
Benchmarks section promises this and tests/bench/test_bench.py checks it for every script the
README names.
"""

from __future__ import annotations

import sys
from typing import NoReturn

#: Exit status when this machine cannot run the benchmark (automake's "skipped").
SKIPPED = 77


def torch_and_gpu() -> str | None:
    """What is missing for a benchmark on torch's CUDA tensors: torch, and a GPU torch sees
    (without torch, one pywave sees); None when both are here."""
    try:
        import torch
    except ImportError:
        torch = None
    lacking = []
    if torch is None:
        lacking.append("torch (not installed)")
        import pywave
        try:
            gpus = pywave.device_count()
        except pywave.Error as exc:   # a driver that is present but fails
            lacking.append(f"an NVIDIA GPU ({exc})")
        else:
            if not gpus:
                lacking.append("an NVIDIA GPU (pywave sees none)")
    elif not torch.cuda.is_available():
        lacking.append("an NVIDIA GPU (torch sees none)")
    return " and ".join(lacking) if lacking else None


def skip(script: str, why: str) -> NoReturn:
    """Say in one line that ``script`` (``bench/launch.py``) needs ``why`` and exit with
    :data:`SKIPPED`."""
    print(f"{script}: needs {why}; nothing measured", file=sys.stderr)
    raise SystemExit(SKIPPED)
