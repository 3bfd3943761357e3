"""The gpu id and dimension queries MLIR 22 cannot lower, rewritten into ones it can.

Kernel rewrites of the ``gpu`` id and dimension queries that MLIR 22's NVVM or ROCDL
lowering has no pattern for, into queries it lowers (run before either lowering).

Both backends:

- ``gpu.num_subgroups`` becomes ``ceildivui(block_dim x * block_dim y * block_dim z,
  subgroup_size)``: the subgroups of a workgroup, the last one partial when the block size is
  not a multiple of the subgroup size;
- ``gpu.subgroup_id`` becomes ``(thread_id x + block_dim x * (thread_id y + block_dim y *
  thread_id z)) / subgroup_size``, upstream's own definition (``SubgroupIdRewriter.cpp``):
  subgroups are formed from consecutive linear thread ids.

``gpu.subgroup_size`` is what each backend makes of it: 32 on NVIDIA
(:mod:`pywave.kernels.rewrites.subgroups`), the wavefront size read from the hardware on AMD
(``llvm.amdgcn.wavefrontsize``: 64 on gfx9, 32 or 64 on gfx10 and newer).

ROCDL only: AMD GPUs launch without thread-block clusters (libwavert's HIP backend refuses a
clustered launch), so every block is its own cluster of one block, as on an NVIDIA GPU
launched without cluster dimensions: ``gpu.cluster_id`` is ``gpu.block_id``,
``gpu.cluster_dim`` (clusters per grid) is ``gpu.grid_dim``, ``gpu.cluster_block_id`` is 0 and
``gpu.cluster_dim_blocks`` is 1.

The ``upper_bound`` of a rewritten op is a promise about its value that the replacement does
not need; it is dropped.
"""

from __future__ import annotations

from mlir import ir
from mlir.dialects import arith, gpu

from ...mlirutil import find_ops

#: Ops rewritten for every backend.
SUBGROUP_QUERIES = ("gpu.num_subgroups", "gpu.subgroup_id")
#: Ops rewritten for ROCDL only (NVVM lowers them to the cluster special registers).
CLUSTER_QUERIES = ("gpu.cluster_id", "gpu.cluster_dim", "gpu.cluster_block_id",
                   "gpu.cluster_dim_blocks")


def lower_id_queries(gmod: ir.Operation, backend: str) -> int:
    """Rewrite the queries of one ``gpu.module`` that ``backend`` (``"nvvm"`` or ``"rocdl"``)
    does not lower; returns how many were rewritten."""
    names = SUBGROUP_QUERIES + (CLUSTER_QUERIES if backend == "rocdl" else ())
    found = find_ops(gmod, lambda op: op.name in names)
    with gmod.context:
        for op in found:
            with ir.InsertionPoint(op), op.location:
                value = _REWRITES[op.name](op)
            op.results[0].replace_all_uses_with(value)
            op.erase()
    return len(found)


def _dims(cls) -> list[ir.Value]:
    return [cls(getattr(gpu.Dimension, d)).result for d in ("x", "y", "z")]


def _num_subgroups(op: ir.Operation) -> ir.Value:
    bx, by, bz = _dims(gpu.BlockDimOp)
    threads = arith.MulIOp(arith.MulIOp(bx, by).result, bz).result
    return arith.CeilDivUIOp(threads, gpu.SubgroupSizeOp().result).result


def _subgroup_id(op: ir.Operation) -> ir.Value:
    bx, by, _ = _dims(gpu.BlockDimOp)
    tx, ty, tz = _dims(gpu.ThreadIdOp)
    inner = arith.AddIOp(ty, arith.MulIOp(by, tz).result).result
    linear = arith.AddIOp(tx, arith.MulIOp(bx, inner).result).result
    return arith.DivUIOp(linear, gpu.SubgroupSizeOp().result).result


def _dimension(op: ir.Operation) -> "gpu.Dimension":
    """The dimension of a query op (its ``#gpu<dim x>`` attribute)."""
    return getattr(gpu.Dimension, str(op.attributes["dimension"]).split()[-1].rstrip(">"))


def _index(value: int) -> ir.Value:
    return arith.ConstantOp(ir.IndexType.get(), value).result


_REWRITES = {
    "gpu.num_subgroups": _num_subgroups,
    "gpu.subgroup_id": _subgroup_id,
    "gpu.cluster_id": lambda op: gpu.BlockIdOp(_dimension(op)).result,
    "gpu.cluster_dim": lambda op: gpu.GridDimOp(_dimension(op)).result,
    "gpu.cluster_block_id": lambda op: _index(0),
    "gpu.cluster_dim_blocks": lambda op: _index(1),
}
