"""stream= integers that are not streams, on a real driver (issue 12, item 2): refused with an
ArgumentError naming the handle before any producer or the driver uses them, never a crash.
Each case runs in a child process, so a driver that crashes fails one test, not the run."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from conftest import TESTS

pytestmark = pytest.mark.gpu
SCALE = str(TESTS / "data" / "scale_in_place.mlir")

CHILD = """
import ctypes, sys, numpy as np, torch, pywave
mod = pywave.compile(open(sys.argv[1]).read())
x = torch.ones(256, device="cuda")
junk = np.zeros(64, np.uint64)          # readable memory that is not a stream
handles = {"5": 5, "0x1238": 0x1238, "top": 2**64 - 8, "heap": junk.ctypes.data,
           "freed": None, "other_device": None}
case = sys.argv[2]
if case == "freed":
    s = torch.cuda.Stream()
    handles["freed"] = s.cuda_stream
    del s
    torch.cuda.synchronize()
if case == "other_device":
    with torch.cuda.device(1):
        s1 = torch.cuda.Stream()
    handles["other_device"] = s1.cuda_stream
try:
    mod(x, 2.0, stream=handles[case])
except pywave.ArgumentError as exc:
    assert "argument 'stream'" in str(exc), exc
    print("REFUSED", exc)
else:
    torch.cuda.synchronize()
    print("RAN")
"""


def _run(case: str) -> str:
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(CHILD), SCALE, case],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"the process died ({proc.returncode}):\n{proc.stderr[-3000:]}"
    return proc.stdout


@pytest.mark.parametrize("case", ["5", "0x1238", "top", "heap"])
def test_integer_that_is_not_a_stream_is_refused(torch_cuda, case):
    assert "REFUSED" in _run(case)


def test_stream_of_another_device_is_refused(torch_cuda):
    if torch_cuda.cuda.device_count() < 2:
        pytest.skip("needs two GPUs")
    out = _run("other_device")
    assert "REFUSED" in out and "not to the primary context" in out


def test_destroyed_stream_does_not_crash(torch_cuda):
    # Torch pools its streams (the handle stays valid); either outcome is fine, a crash is not.
    out = _run("freed")
    assert "REFUSED" in out or "RAN" in out
