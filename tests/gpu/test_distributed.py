"""pywave in a torch.distributed job: ``torchrun --nproc-per-node 2`` runs
tests/gpu/distributed_worker.py, whose ranks compile the same modules into one shared cache
directory, run them on their own GPUs and all-reduce the results over NCCL; every rank checks
the exact result. Needs two CUDA GPUs, torch with NCCL and torchrun (skipped with the missing
one named otherwise). The worker's modules are also compiled here without a GPU.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import pywave
from pywave.kernels import toolkit

WORKER = Path(__file__).with_name("distributed_worker.py")
RANKS = 2


def _worker():
    spec = importlib.util.spec_from_file_location("distributed_worker", WORKER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _torchrun() -> str:
    """The torchrun command, or skip naming what is missing."""
    try:
        import torch
        import torch.distributed as dist
    except ImportError:
        pytest.skip("needs torch")
    if not torch.cuda.is_available() or torch.cuda.device_count() < RANKS:
        pytest.skip(f"needs {RANKS} CUDA GPUs")
    if not dist.is_available() or not dist.is_nccl_available():
        pytest.skip("needs torch.distributed with NCCL")
    found = shutil.which("torchrun") or shutil.which("torchrun", path=os.path.dirname(sys.executable))
    if found is None:
        pytest.skip("needs torchrun")
    return found


def test_worker_modules_compile():
    worker = _worker()
    for text in (worker.AXPY_I32, worker.SQUARE_ADD_F32):
        art = pywave.api.build(text, target="sm_90")
        assert [b.name for b in art.binaries] == ["kernels"]
        assert [f.name for f in art.program().functions] == ["main"]


@pytest.mark.gpu
def test_torchrun_two_ranks_share_a_cache_and_all_reduce(tmp_path):
    torchrun = _torchrun()
    cache_dir, out_dir = tmp_path / "cache", tmp_path / "out"
    out_dir.mkdir()
    env = dict(os.environ, PYWAVE_CACHE_DIR=str(cache_dir), PYWAVE_CACHE="1")
    done = subprocess.run([torchrun, "--standalone", f"--nproc-per-node={RANKS}", str(WORKER),
                           str(out_dir)], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"torchrun failed:\n{done.stdout}\n{done.stderr}"
    reports = [json.loads((out_dir / f"rank{r}.json").read_text()) for r in range(RANKS)]
    for r, report in enumerate(reports):
        assert report["world"] == RANKS and report["device"] == f"cuda:{r}"
        assert report["checks"] and all(report["checks"].values()), report
    # One entry per module, shared by the ranks (no per-rank copies, no leftover temporaries);
    # beside each, at most one pre-linked host object (pywave.host.sharedobj, where cc exists).
    names = sorted(p.name for p in cache_dir.iterdir() if p.name != toolkit.VERSIONS_FILE)
    entries = [n for n in names if n.endswith(".pwc")]
    linked = [n for n in names if n.endswith(".pwso")]
    assert len(entries) == 2 and len(linked) <= 2 and len(entries) + len(linked) == len(names) \
        and not any(n.startswith(".tmp-") for n in names), names
