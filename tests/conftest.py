"""Shared fixtures. GPU libraries (torch, cupy, jax) are imported inside fixtures only, so every
test module imports on a machine without them; GPU tests skip with a reason there."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
TESTS = ROOT / "tests"

#: The test folders, one per part of the project (tests/<package>/, native/, cpu/, gpu/, ...;
#: the README's Tests section). Each goes first on sys.path, where pytest's prepend import mode
#: puts a test file's own folder when it imports it, so that a test module, a helper
#: (fake_cupy.py) and the child processes that take this sys.path import another folder's test
#: module by its file name (``import test_args``) whichever file is collected first. File names
#: are therefore unique across the folders.
TEST_FOLDERS = sorted({path.parent for path in TESTS.glob("*/**/test_*.py")
                       if path.relative_to(TESTS).parts[0] != "data"})
for _folder in TEST_FOLDERS:
    if str(_folder) not in sys.path:
        sys.path.insert(0, str(_folder))


def _skip_the_source_tree() -> None:
    """``python3 -m pytest tests/...`` in the repository root puts the root first on
    ``sys.path``, where ``./pywave`` is the unbuilt source tree (NotBuiltError). Take the root
    off when an installed pywave is found without it; otherwise leave it, so that the
    NotBuiltError says how to build. (An editable install's import hook comes before
    ``sys.path`` and is unaffected.)"""
    import importlib.util
    kept = [p for p in sys.path if Path(p or os.curdir).resolve() != ROOT]
    if len(kept) == len(sys.path) or "pywave" in sys.modules:
        return
    saved, sys.path[:] = list(sys.path), kept
    importlib.invalidate_caches()
    spec = importlib.util.find_spec("pywave")
    if spec is None or spec.origin is None or \
            Path(spec.origin).resolve().parent == ROOT / "pywave":
        sys.path[:] = saved


_skip_the_source_tree()

import pywave  # noqa: E402

DATA = Path(__file__).parent / "data"

#: The session's private folder (pytest_configure): its compile cache and runtime folder.
PRIVATE: Path | None = None


def pytest_configure(config: pytest.Config) -> None:
    """The tests write no file of the user's: the compile cache ($PYWAVE_CACHE_DIR, else
    ~/.cache/pywave) and the runtime folder of the compile server's socket, lock and log
    ($XDG_RUNTIME_DIR/pywave, else /tmp/pywave-<uid>) go into one temporary folder, made
    here and removed at the end of the session (pytest_unconfigure). Every process a test
    starts inherits the two variables. A test that needs another cache sets its own."""
    global PRIVATE
    if PRIVATE is not None:
        return
    PRIVATE = Path(tempfile.mkdtemp(prefix="pywave-tests-"))
    (PRIVATE / "run").mkdir(mode=0o700)
    os.environ["PYWAVE_CACHE_DIR"] = str(PRIVATE / "cache")
    os.environ["XDG_RUNTIME_DIR"] = str(PRIVATE / "run")


def pytest_unconfigure(config: pytest.Config) -> None:
    global PRIVATE
    if PRIVATE is not None:
        shutil.rmtree(PRIVATE, ignore_errors=True)
        PRIVATE = None


# Compile servers started by the tests (one per boot line the tests patch in) exit soon after
# the last test process using them is gone, instead of the default 600 s.
os.environ.setdefault("PYWAVE_COMPILE_SERVER_IDLE", "30")


def fake_driver() -> Path | None:
    """libwavert's recording driver stand-in (libfake_cuda.so) from a build folder of this
    checkout (`meson setup build/tests -Dtests=true`), or None when none is built. A build
    under AddressSanitizer (.ci/run's build/sanitize) is passed over: loading it into an
    uninstrumented process needs libasan preloaded."""
    for path in sorted((Path(__file__).resolve().parent.parent / "build").glob(
            "*/libwavert/tests/libfake_cuda.so")):
        if b"libasan.so" not in path.read_bytes():
            return path
    return None


def need_fake_driver() -> Path:
    """fake_driver(), or skip the test saying how to build it."""
    found = fake_driver()
    if found is None:
        pytest.skip("the driver stand-in is not built (meson setup build/tests -Dtests=true)")
    return found


def fake_driver_env(*, importable: bool = False, **extra: str) -> dict[str, str]:
    """The environment of a fresh interpreter on the driver stand-in (need_fake_driver: the
    test skips when it is not built): libwavert opens it for CUDA and no HIP library;
    ``importable``: tests/ and this process's sys.path on PYTHONPATH; ``extra``: more
    variables."""
    env = dict(os.environ, WAVERT_CUDA_LIBRARY=str(need_fake_driver()),
               WAVERT_HIP_LIBRARY="/nonexistent/libamdhip64.so", **extra)
    if importable:
        env["PYTHONPATH"] = os.pathsep.join([str(TESTS)] + [p for p in sys.path if p])
    return env


def run_to_pass(code: str, *, timeout: float = 120, **extra: str) -> None:
    """Run ``code`` in a fresh interpreter in tests/ on the driver stand-in
    (``fake_driver_env(importable=True, **extra)``) and assert that it exits with status 0
    and PASS as the last line of its output (their tails are the assertion's message)."""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=fake_driver_env(importable=True, **extra), timeout=timeout,
                          cwd=TESTS)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("PASS"), \
        proc.stdout[-2000:] + proc.stderr[-4000:]


def _native_built() -> bool:
    try:
        from pywave import _native
    except ImportError:
        return False
    return hasattr(_native, "HostFunction")


def _need_native() -> None:
    if not _native_built():
        pytest.skip("pywave._native is not built (pip install . first)")


@pytest.fixture
def mlir():
    """``mlir("scale_in_place.mlir")`` -> the text of tests/data/scale_in_place.mlir."""
    return lambda name: (DATA / name).read_text()


@pytest.fixture(scope="session")
def torch_cuda():
    """The torch module, when torch sees a CUDA GPU and pywave's native call path is built."""
    try:
        import torch
    except ImportError:
        pytest.skip("needs torch with a CUDA GPU")
    if not torch.cuda.is_available():
        pytest.skip("needs torch with a CUDA GPU")
    _need_native()
    return torch


@pytest.fixture(scope="session")
def cupy_mod():
    """The cupy module, when cupy is installed and sees a GPU."""
    try:
        import cupy
        if cupy.cuda.runtime.getDeviceCount() < 1:
            raise RuntimeError("no device")
    except Exception:  # noqa: BLE001 - ImportError, CUDARuntimeError, ...
        pytest.skip("needs cupy with a GPU")
    _need_native()
    return cupy


@pytest.fixture(scope="session")
def jax_gpu():
    """The jax module, when jax is installed with a GPU backend."""
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # leave memory to torch
    torch = sys.modules.get("torch")
    device = torch.cuda.current_device() \
        if torch is not None and torch.cuda.is_initialized() else None
    try:
        import jax
        if not jax.devices("gpu"):
            raise RuntimeError("no GPU device")
    except Exception:  # noqa: BLE001
        pytest.skip("needs jax with a GPU")
    finally:
        # Starting JAX's GPU client can leave another GPU's context current on this thread:
        # on the two-GPU H200 machine torch found device 1 current right after the first
        # test that asked for jax (pywave's own device test passed in the same run).
        if device is not None:
            torch.cuda.set_device(device)
    _need_native()
    return jax


@pytest.fixture
def compile_gpu():
    """``compile_gpu(text, **kw)`` -> pywave.compile(text, **kw); every module it made is closed
    at teardown."""
    made = []

    def _compile(text: str, **kwargs) -> pywave.CompiledModule:
        mod = pywave.compile(text, **kwargs)
        made.append(mod)
        return mod

    yield _compile
    for mod in made:
        mod.close()


def run_isolated(text: str, target: str = "sm_90") -> subprocess.CompletedProcess:
    """Build ``text`` with pywave.api.build in a child interpreter, so an abort inside MLIR fails
    one test instead of killing the run. The child prints "OK" or "CompileError: <message>"."""
    code = (
        "import sys, pywave, pywave.api as api\n"
        "try:\n"
        "    api.build(sys.stdin.read(), target=sys.argv[1])\n"
        "except pywave.CompileError as exc:\n"
        "    print('CompileError:', exc)\n"
        "else:\n"
        "    print('OK')\n")
    env = dict(os.environ)
    here = str(Path(pywave.__file__).resolve().parent.parent)  # the pywave this run imported
    env["PYTHONPATH"] = os.pathsep.join(p for p in (here, env.get("PYTHONPATH")) if p)
    return subprocess.run([sys.executable, "-c", code, target], input=text, text=True,
                          capture_output=True, env=env, cwd=here, timeout=300)


@pytest.fixture
def isolated_build():
    """``isolated_build(text)`` -> CompletedProcess of a build in a child process (see
    :func:`run_isolated`); fails the test with the child's stderr when it did not exit 0."""

    def _build(text: str, target: str = "sm_90") -> str:
        proc = run_isolated(text, target)
        if proc.returncode != 0:
            pytest.fail(f"the compiler process died (exit {proc.returncode}):\n"
                        f"{proc.stderr[-3000:]}")
        return proc.stdout.strip()

    return _build


@pytest.fixture(autouse=True)
def _current_device_unchanged():
    """Every test leaves torch's current CUDA device as it found it: a pywave call must never
    change the caller's current device (README: Streams, devices, threads). Checked only where
    torch has already initialised CUDA in this process."""
    torch = sys.modules.get("torch")
    before = torch.cuda.current_device() \
        if torch is not None and torch.cuda.is_initialized() else None
    yield
    if before is not None:
        after = torch.cuda.current_device()
        if after != before:
            torch.cuda.set_device(before)   # keep the tests after this one independent
            pytest.fail(f"the test left torch's current device at {after} (was {before})")


# ---------------------------------------------------------------------------------------------
# Kernel-semantics tests on both devices: a GPU (torch on CUDA) and the CPU device
# (target="cpu" on NumPy arrays, everywhere). README: "Semantics" / issue 33.
# ---------------------------------------------------------------------------------------------
class KernelDevice:
    """Where a kernel-semantics test runs: ``"gpu"`` (torch tensors on the current CUDA
    device, pywave's default target) or ``"cpu"`` (NumPy arrays, ``target="cpu"``). Tests
    build inputs and references with NumPy and move them with :meth:`put` / :meth:`get`, so
    both variants compare against the same expected values."""

    def __init__(self, name: str, torch=None) -> None:
        self.name = name
        self.torch = torch
        self._made: list[pywave.CompiledModule] = []

    @property
    def is_cpu(self) -> bool:
        return self.name == "cpu"

    def compile(self, text: str, **kwargs) -> pywave.CompiledModule:
        """pywave.compile(text, **kwargs), with ``target="cpu"`` on the CPU device; closed at
        teardown."""
        if self.is_cpu:
            kwargs.setdefault("target", "cpu")
        mod = pywave.compile(text, **kwargs)
        self._made.append(mod)
        return mod

    def put(self, array):
        """A copy of the NumPy ``array`` on the device (a torch CUDA tensor or a NumPy array)."""
        array = np.ascontiguousarray(array)
        if self.is_cpu:
            return array.copy()
        return self.torch.from_numpy(array.copy()).to(self.torch.device(
            "cuda", self.torch.cuda.current_device()))

    def zeros(self, shape, dtype=np.float32):
        return self.put(np.zeros(shape, dtype=dtype))

    def get(self, tensor) -> np.ndarray:
        """The device ``tensor`` as a NumPy array, after the device finished its work."""
        if self.is_cpu:
            return np.array(tensor)
        self.torch.cuda.synchronize()
        return tensor.cpu().numpy()

    def close(self) -> None:
        for mod in self._made:
            mod.close()


#: The two variants of a kernel-semantics test: the GPU one keeps the ``gpu`` mark.
KERNEL_DEVICES = [pytest.param("gpu", marks=pytest.mark.gpu), "cpu"]


def devices(*, cpu_xfail: str | None = None) -> pytest.MarkDecorator:
    """``@devices(cpu_xfail=reason)``: the two variants of the ``device`` fixture, the CPU
    one a strict xfail where the CPU target does not run the kernel yet (``reason``: the
    CompileError it raises, which the xfail expects). Strict, so the variant fails once
    support lands and the mark must go."""
    cpu = "cpu" if cpu_xfail is None else pytest.param("cpu", marks=pytest.mark.xfail(
        raises=pywave.CompileError, strict=True, reason=cpu_xfail))
    return pytest.mark.parametrize("device", [KERNEL_DEVICES[0], cpu], indirect=True)


@pytest.fixture(params=KERNEL_DEVICES)
def device(request) -> KernelDevice:
    """The device of a kernel-semantics test (``gpu``: needs torch with a CUDA GPU and is
    marked ``gpu``; ``cpu``: the CPU device, runs everywhere)."""
    torch = request.getfixturevalue("torch_cuda") if request.param == "gpu" else None
    made = KernelDevice(request.param, torch)
    yield made
    made.close()
