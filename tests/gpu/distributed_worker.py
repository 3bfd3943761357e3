"""One rank of gpu/test_distributed.py, started by ``torchrun --nproc-per-node N``.

    torchrun --standalone --nproc-per-node 2 tests/gpu/distributed_worker.py OUT_DIR

Each rank (LOCAL_RANK = its GPU) joins an NCCL process group, compiles the same two modules
at the same moment into the shared cache ($PYWAVE_CACHE_DIR), runs them on tensors of its own
GPU (the second one while another GPU is torch's current device), all-reduces both results
and compares them exactly with the closed form; it writes OUT_DIR/rank<R>.json and exits 0
when every check holds, 1 otherwise. Not collected by pytest (no test_ prefix).
"""

from __future__ import annotations

import json
import os
import sys

import pywave

#: y[i] = a * x[i] + b on int32 (exact; 256 threads per block).
AXPY_I32 = """
module attributes {gpu.container_module} {
  gpu.module @kernels {
    gpu.func @axpy(%x: memref<?xi32>, %y: memref<?xi32>, %a: i32, %b: i32, %n: index) kernel {
      %bid = gpu.block_id x
      %bdim = gpu.block_dim x
      %tid = gpu.thread_id x
      %t0 = arith.muli %bid, %bdim : index
      %i = arith.addi %t0, %tid : index
      %in = arith.cmpi ult, %i, %n : index
      scf.if %in {
        %v = memref.load %x[%i] : memref<?xi32>
        %m = arith.muli %v, %a : i32
        %w = arith.addi %m, %b : i32
        memref.store %w, %y[%i] : memref<?xi32>
      }
      gpu.return
    }
  }
  func.func @main(%x: memref<?xi32>, %y: memref<?xi32>, %a: i32, %b: i32) {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c256 = arith.constant 256 : index
    %n = memref.dim %x, %c0 : memref<?xi32>
    %g = arith.ceildivui %n, %c256 : index
    gpu.launch_func @kernels::@axpy blocks in (%g, %c1, %c1) threads in (%c256, %c1, %c1)
        args(%x : memref<?xi32>, %y : memref<?xi32>, %a : i32, %b : i32, %n : index)
    return
  }
}
"""

#: w[i] = u[i] * u[i] + v[i] on float32 (exact for the small integers used here).
SQUARE_ADD_F32 = """
module attributes {gpu.container_module} {
  gpu.module @kernels {
    gpu.func @square_add(%u: memref<?xf32>, %v: memref<?xf32>, %w: memref<?xf32>, %n: index)
        kernel {
      %bid = gpu.block_id x
      %bdim = gpu.block_dim x
      %tid = gpu.thread_id x
      %t0 = arith.muli %bid, %bdim : index
      %i = arith.addi %t0, %tid : index
      %in = arith.cmpi ult, %i, %n : index
      scf.if %in {
        %x = memref.load %u[%i] : memref<?xf32>
        %y = memref.load %v[%i] : memref<?xf32>
        %s = arith.mulf %x, %x : f32
        %z = arith.addf %s, %y : f32
        memref.store %z, %w[%i] : memref<?xf32>
      }
      gpu.return
    }
  }
  func.func @main(%u: memref<?xf32>, %v: memref<?xf32>, %w: memref<?xf32>) {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c256 = arith.constant 256 : index
    %n = memref.dim %u, %c0 : memref<?xf32>
    %g = arith.ceildivui %n, %c256 : index
    gpu.launch_func @kernels::@square_add blocks in (%g, %c1, %c1) threads in (%c256, %c1, %c1)
        args(%u : memref<?xf32>, %v : memref<?xf32>, %w : memref<?xf32>, %n : index)
    return
  }
}
"""

#: Elements per tensor: several blocks, a partial last one.
N = (1 << 16) + 3
A, B = 3, 7


def run(out_dir: str) -> bool:
    """This rank's checks; writes rank<R>.json. True when all hold."""
    import torch
    import torch.distributed as dist

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local)
    dev = torch.device("cuda", local)
    dist.init_process_group("nccl")
    checks: dict[str, bool] = {}
    try:
        dist.barrier()   # every rank compiles at once: concurrent writes to one cache entry
        axpy = pywave.compile(AXPY_I32)
        square_add = pywave.compile(SQUARE_ADD_F32)

        i = torch.arange(N, dtype=torch.int32, device=dev)
        y = torch.empty_like(i)
        axpy.main(i + rank, y, A, B)

        u = (torch.arange(N, device=dev) % 1024).to(torch.float32)   # u*u < 2^24: exact
        v = torch.full((N,), float(rank), device=dev)
        w = torch.empty_like(u)
        other = (local + 1) % torch.cuda.device_count()
        with torch.cuda.device(other):   # the tensors' device decides, not torch's current one
            square_add.main(u, v, w)
            checks["current device kept"] = torch.cuda.current_device() == other
        checks["local result"] = bool(torch.equal(w, u * u + rank))

        dist.all_reduce(y)
        dist.all_reduce(w)
        ranks_sum = world * (world - 1) // 2
        checks["all-reduced axpy"] = bool(torch.equal(y, world * A * i + A * ranks_sum + world * B))
        checks["all-reduced square_add"] = bool(torch.equal(w, world * u * u + ranks_sum))
        checks["results on this rank's GPU"] = y.device == dev and w.device == dev
        axpy.close()
        square_add.close()
    finally:
        with open(os.path.join(out_dir, f"rank{rank}.json"), "w", encoding="utf-8") as fh:
            json.dump({"rank": rank, "world": world, "device": str(dev), "checks": checks}, fh)
        dist.destroy_process_group()
    return bool(checks) and all(checks.values())


if __name__ == "__main__":
    sys.exit(0 if run(sys.argv[1]) else 1)
