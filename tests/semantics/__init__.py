"""Differential test of pywave's kernel lowering against MLIR's documented semantics.

:mod:`.floats`    the floating-point formats (f16, bf16, f32, f64) as bit patterns: decoding,
                  correct rounding, ulp distances (NumPy only, no ml_dtypes).
:mod:`.cases`     one :class:`~.cases.Case` per (op, types): its MLIR body, its inputs (special
                  values; UB and poison inputs left out) and its host reference.
:mod:`.generate`  the cases as MLIR modules (one ``gpu.module`` per group, one kernel and one
                  host function per case), every value passed as integer bits.

tests/gpu/test_op_semantics.py runs them (GPU) and checks the generator and reference (CPU).
"""
