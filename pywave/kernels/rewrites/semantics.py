"""Keep MLIR's semantics through upstream's kernel lowering.

Two places where the upstream NVVM path (MLIR 22.1: ``convert-gpu-to-nvvm``, then
``gpu-module-to-binary`` with LLVM's NVPTX back end and ptxas) computes something other than
what the MLIR program says, both found by the differential test (tests/gpu/test_op_semantics.py)
on an H200:

- :func:`set_data_layout`: ``gpu-module-to-binary`` translates a ``gpu.module`` to LLVM IR
  before it sets the target's data layout, so loads and stores without an explicit
  ``alignment`` get LLVM's default ABI alignment, 4 bytes for i64 and f64. NVPTX then splits
  each 8-byte access in two 4-byte ones, and with CUDA 13's ptxas the low word of a stored f64
  came out wrong (``arith.sitofp`` of 1 to f64 stored 0x3ff0000000000001). With the target's
  layout set first every access has its natural alignment, as memref elements do (MLIR's
  memref descriptor: the aligned pointer is aligned to the element type).
- :func:`precise_sqrt`: ``math.sqrt`` on f32 lowers to libdevice's ``__nv_sqrtf``, which is
  ``sqrt.approx.f32`` unless ``__CUDA_PREC_SQRT`` is set, and LLVM 22's NVVMReflect reads no
  module flag for it; results were 1 ulp off (sqrt(1.5)). MLIR's ``math.sqrt`` lowers to
  ``llvm.intr.sqrt`` everywhere else, which LLVM's LangRef defines as correctly rounded
  (IEEE 754 squareRoot), and NVPTX emits that as ``sqrt.rn.f32``.

Both run on the kernels only, before anything else sees them; neither changes a program that
already states what it means (an explicit alignment, a ``llvm.data_layout`` of its own, the
``afn`` fast-math flag that allows an approximation).
"""

from __future__ import annotations

import threading

from mlir import ir
from mlir.dialects import llvm

from ...llvm import all_targets
from ...mlirutil import gpu_modules
from ...program import BACKENDS
from ..targets import module_target

_layouts: dict[tuple[str, str], str] = {}
_layouts_lock = threading.Lock()


def data_layout(backend: str, chip: str) -> str:
    """LLVM's data layout string for ``backend`` (``"nvvm"``/``"rocdl"``) and ``chip``, as the
    LLVM target machine gives it (llvmlite). Thread-safe; cached per (backend, chip)."""
    key = (backend, chip)
    with _layouts_lock:
        found = _layouts.get(key)
        if found is None:
            machine = all_targets().Target.from_triple(BACKENDS[backend].triple) \
                .create_target_machine(cpu=chip)
            found = _layouts[key] = str(machine.target_data)
    return found


def set_data_layout(module: ir.Module) -> None:
    """Give every targeted ``gpu.module`` of ``module`` without a layout of its own
    (``llvm.data_layout`` or ``dlti.dl_spec``) its target's ``llvm.data_layout``, which MLIR's
    translation to LLVM IR reads when it gives loads and stores their alignment."""
    for gmod in gpu_modules(module):
        if "llvm.data_layout" in gmod.attributes or "dlti.dl_spec" in gmod.attributes:
            continue
        target = module_target(gmod)
        if target is not None:
            gmod.attributes["llvm.data_layout"] = ir.StringAttr.get(
                data_layout(target.backend, target.chip), module.context)


def precise_sqrt(module: ir.Module) -> int:
    """Replace each ``math.sqrt`` on f32 (or a 1-D vector of f32) inside the kernels whose
    fast-math flags lack ``afn`` by a call of LLVM's ``llvm.sqrt`` intrinsic with the same
    flags (``llvm.call_intrinsic``: the NVVM lowering turns ``math.sqrt`` and
    ``llvm.intr.sqrt`` alike into libdevice's approximate square root). Run before the NVVM
    lowering. Returns the count."""
    ctx = module.context
    f32 = ir.F32Type.get(ctx)
    found: list[tuple[ir.Operation, str, str]] = []

    def visit(op: ir.Operation) -> ir.WalkResult:
        if op.name == "math.sqrt":
            t = op.results[0].type
            name = "llvm.sqrt.f32" if t == f32 else None
            if isinstance(t, ir.VectorType):
                v = ir.VectorType(t)
                if v.rank == 1 and v.element_type == f32 and not v.scalable:
                    name = f"llvm.sqrt.v{v.shape[0]}f32"
            flags = str(op.attributes["fastmath"]) if "fastmath" in op.attributes else ""
            if name and "afn" not in flags and "fast>" not in flags:
                found.append((op, name, flags))
        return ir.WalkResult.ADVANCE

    for gmod in gpu_modules(module):
        gmod.walk(visit)
    for op, name, flags in found:
        fastmath = None
        if flags.startswith("#arith.fastmath<") and flags != "#arith.fastmath<none>":
            fastmath = ir.Attribute.parse("#llvm.fastmath<" + flags[len("#arith.fastmath<"):],
                                          ctx)
        with ir.InsertionPoint(op), op.location:
            new = llvm.CallIntrinsicOp(op.results[0].type, ir.StringAttr.get(name),
                                       [op.operands[0]], [], ir.DenseI32ArrayAttr.get([]),
                                       fastmathFlags=fastmath)
        op.results[0].replace_all_uses_with(new.results[0])
        op.erase()
    return len(found)
