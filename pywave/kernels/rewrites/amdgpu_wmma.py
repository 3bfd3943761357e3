"""Kernel rewrite before the ROCDL lowering: ``gpu.subgroup_mma_*`` ops as gfx11 WMMA.

MLIR 22's ``convert-gpu-to-rocdl`` has no pattern for the subgroup MMA ops, and the Python
bindings register no ``convert-gpu-to-amdgpu``. This module rewrites, inside one
``gpu.module`` (or any op) and before ``convert-gpu-to-rocdl``, the ops

* ``gpu.subgroup_mma_load_matrix`` / ``gpu.subgroup_mma_store_matrix`` (with ``transpose``),
* ``gpu.subgroup_mma_compute`` (``rocdl.wmma.f32.16x16x16.f16`` / ``rocdl.wmma.f16.16x16x16.f16``),
* ``gpu.subgroup_mma_constant_matrix`` and the floating-point
  ``gpu.subgroup_mma_elementwise`` kinds,

for 16x16x16 shapes with f16 A/B and f16 or f32 accumulators, into per-lane loads and stores
of ``vector`` fragments and the ROCDL WMMA intrinsics. Loop-carried fragments (``scf.for``
``iter_args``, branch arguments) change type with them.

Fragment layout of a wave32 lane ``l`` (RDNA3 ISA guide, "Wave Matrix Multiply Accumulate";
the layout ``V_WMMA_*_16X16X16_F16`` reads and writes):

* A (16x16 f16, ``vector<16xf16>``): element ``k`` = ``A[l % 16][k]``;
* B (16x16 f16, ``vector<16xf16>``): element ``k`` = ``B[k][l % 16]``;
  lanes 16-31 hold copies of lanes 0-15, as gfx11 requires;
* C/D f32 (``vector<8xf32>``): element ``v`` = ``C[2v + l // 16][l % 16]``;
* C/D f16 (``vector<16xf16>``, 8 VGPRs): ``C[2v + l // 16][l % 16]`` is element ``2v`` (low
  halves, OPSEL = 0) or ``2v + 1`` (high halves, OPSEL = 1).

A matrix element ``(i, j)`` of a load or store lies at ``&memref[indices] + i * ld + j``
(``ld`` = ``leadDimension``), or ``+ j * ld + i`` with ``transpose`` — the semantics of the
GPU dialect's ops. The ``a_transpose``/``b_transpose`` flags of ``gpu.subgroup_mma_compute``
annotate operands loaded with ``transpose`` (as ``convert-vector-to-gpu`` emits them); the
loaded fragments already hold the logical matrices, so the flags change nothing here.

The discardable ``opSelect`` unit attribute (as AMD's WMMA tests spell it) on an f16-accumulator
load or compute picks the high halves: such a load fills the high halves, a compute with
``opSelect`` runs the WMMA with OPSEL = 1 there, and a store writes whichever half its value is
in. A value is moved (duplicated into both halves by a shuffle) only where a compute wants the
other half, so every combination computes what the GPU dialect says; the attribute only picks
registers.

Other chips: gfx90a/gfx94x/gfx950 have MFMA, not WMMA; gfx12 has WMMA with another layout,
which this rewrite does not produce. Both get a CompileError naming the op and the chip.
"""

from __future__ import annotations

import dataclasses
import re

from mlir import ir
from mlir.dialects import arith, gpu, memref, rocdl, ub, vector

from ...errors import CompileError
from ...mlirutil import file_location

#: The ops this rewrite replaces.
MMA_OPS = ("gpu.subgroup_mma_load_matrix", "gpu.subgroup_mma_store_matrix",
           "gpu.subgroup_mma_compute", "gpu.subgroup_mma_constant_matrix",
           "gpu.subgroup_mma_elementwise")
#: Subgroup MMA ops with no lowering here (their per-thread layout is target-defined).
UNSUPPORTED_OPS = ("gpu.subgroup_mma_extract_thread_local",
                   "gpu.subgroup_mma_insert_thread_local")

#: Chips with the gfx11 (RDNA3, RDNA3.5) WMMA this rewrite emits.
WMMA_CHIPS = ("gfx1100", "gfx1101", "gfx1102", "gfx1103",
              "gfx1150", "gfx1151", "gfx1152", "gfx1153")
WMMA_CHIPS_TEXT = ("gfx11 chips (gfx1100-gfx1103, gfx1150-gfx1153, wave32); gfx90a/gfx94x/gfx950 "
                   "have MFMA (amdgpu.mfma) instead, and gfx12's WMMA layout is not lowered "
                   "by pywave")

#: The unit attribute that puts an f16 accumulator in the high halves of its registers.
OPSELECT_ATTR = "opSelect"

#: Side of the WMMA tile (M = N = K).
TILE = 16

#: Half of an f16 accumulator that holds the values (element ``2v + half``); BOTH: both do.
LOW, HIGH, BOTH = 0, 1, -1

_MMA_TYPE = re.compile(r'!gpu\.mma_matrix<(\d+)x(\d+)x(\w+), "(AOp|BOp|COp)">')

#: ``#gpu<mma_element_wise KIND>`` -> arith op of the floating-point kinds.
_ELEMENTWISE = {"addf": arith.AddFOp, "subf": arith.SubFOp, "mulf": arith.MulFOp,
                "divf": arith.DivFOp, "maxf": arith.MaximumFOp, "minf": arith.MinimumFOp}


@dataclasses.dataclass(frozen=True)
class Fragment:
    """One operand kind of the 16x16x16 WMMA: ``operand`` "AOp"/"BOp"/"COp", ``elt`` "f16" or
    "f32" (f32 only for COp)."""

    operand: str
    elt: str

    @property
    def length(self) -> int:
        """Elements of the per-lane vector: 16 (A, B, f16 C: 8 VGPRs of 2 halves), 8 (f32 C)."""
        return 8 if self.elt == "f32" else 16

    @property
    def half_tracked(self) -> bool:
        """An f16 accumulator: its values sit in one half of each VGPR (or both)."""
        return self.operand == "COp" and self.elt == "f16"

    def vector_type(self) -> ir.VectorType:
        return ir.VectorType.get([self.length], ir.Type.parse(self.elt))


def fragment(type_: ir.Type, what: str = "a gpu.mma_matrix") -> Fragment | None:
    """The Fragment of a ``!gpu.mma_matrix`` type (None for other types); CompileError for a
    shape or element type the gfx11 WMMA has no form for."""
    match = _MMA_TYPE.fullmatch(str(type_))
    if match is None:
        return None
    rows, cols, elt, operand = int(match[1]), int(match[2]), match[3], match[4]
    if (rows, cols) != (TILE, TILE):
        raise CompileError(f"{what} of type {type_}: the gfx11 WMMA lowering supports "
                           f"{TILE}x{TILE} fragments only")
    if elt not in ("f16", "f32") or (elt == "f32" and operand != "COp"):
        raise CompileError(f"{what} of type {type_}: the gfx11 WMMA lowering supports f16 A/B "
                           "and f16 or f32 accumulators (COp) only")
    return Fragment(operand, elt)


def _where(op: ir.Operation) -> str:
    loc = file_location(op.location)
    return f" (line {loc[0]}, column {loc[1]})" if loc else ""


def _is_mma_type(type_: ir.Type) -> bool:
    return str(type_).startswith("!gpu.mma_matrix<")


def lower_wmma(root: ir.Operation, chip: str) -> int:
    """Rewrite the subgroup MMA ops inside ``root`` (a ``gpu.module`` or any op with regions)
    for ``chip``; returns how many were rewritten (0 when there are none, for any chip).

    CompileError when ``chip`` has no gfx11 WMMA, for an op this rewrite has no form for, and
    for functions taking or returning fragments."""
    found: list[ir.Operation] = []
    blocks: list[ir.Block] = []

    def collect(op: ir.Operation) -> ir.WalkResult:
        found.append(op)
        for region in op.regions:
            blocks.extend(region.blocks)
        return ir.WalkResult.ADVANCE

    root.walk(collect, ir.WalkOrder.PRE_ORDER)
    mma = [op for op in found if op.name.startswith("gpu.subgroup_mma_")]
    if not mma:
        return 0
    first = mma[0]
    if chip not in WMMA_CHIPS:
        raise CompileError(f"{first.name}{_where(first)} cannot be lowered for {chip}: pywave "
                           f"lowers gpu.subgroup_mma_* to the WMMA of {WMMA_CHIPS_TEXT}")
    for op in mma:
        if op.name in UNSUPPORTED_OPS:
            raise CompileError(f"{op.name}{_where(op)}: the per-thread layout of WMMA fragments "
                               "is not exposed; pywave's gfx11 WMMA lowering supports "
                               f"{', '.join(MMA_OPS)}")
    with root.context, root.location:
        rewriter = _Rewriter()
        for block in blocks:
            rewriter.convert_block_arguments(block)
        for op in found:
            if op.name in MMA_OPS:
                rewriter.rewrite(op)
            else:
                rewriter.convert_other(op)
    return len(mma)


class _Rewriter:
    """Replaces subgroup MMA ops one by one, remembering the half of each f16 accumulator."""

    def __init__(self) -> None:
        self.frags: dict[ir.Value, Fragment] = {}
        self.half: dict[ir.Value, int] = {}

    def _record(self, value: ir.Value | ir.OpView, frag: Fragment,
                half: int = LOW) -> ir.Value:
        """Remember the Fragment (and the half) of a new value; returns the value."""
        if not isinstance(value, ir.Value):
            value = value.result
        self.frags[value] = frag
        if frag.half_tracked:
            self.half[value] = half
        return value

    # ---- values that cross ops the rewrite does not replace --------------------------------
    def convert_block_arguments(self, block: ir.Block) -> None:
        owner = block.owner
        for arg in block.arguments:
            frag = fragment(arg.type, "a block argument")
            if frag is None:
                continue
            if owner is not None and owner.name in ("func.func", "gpu.func", "llvm.func") and \
                    block == owner.regions[0].blocks[0]:
                raise CompileError(f"{owner.name}{_where(owner)} takes a gpu.mma_matrix "
                                   "argument; pywave's WMMA lowering keeps fragments inside one "
                                   "function")
            arg.set_type(frag.vector_type())
            self._record(arg, frag)

    def convert_other(self, op: ir.Operation) -> None:
        """An op that only passes fragments on (scf.for, scf.yield, cf.br, ...): its f16
        accumulator operands enter in the low halves, its fragment results become vectors."""
        for index, value in enumerate(op.operands):
            if self.half.get(value, LOW) == HIGH:
                with ir.InsertionPoint(op), op.location:
                    op.operands[index] = self._move_half(value, LOW)
        for result in op.results:
            frag = fragment(result.type, f"a result of {op.name}")
            if frag is None:
                continue
            if op.name in ("func.call", "func.return", "gpu.return"):
                raise CompileError(f"{op.name}{_where(op)} passes a gpu.mma_matrix; pywave's "
                                   "WMMA lowering keeps fragments inside one function")
            result.set_type(frag.vector_type())
            self._record(result, frag)
        if op.name in ("func.return", "gpu.return") and \
                any(_is_mma_type(v.type) or v in self.frags for v in op.operands):
            raise CompileError(f"{op.name}{_where(op)} returns a gpu.mma_matrix; pywave's WMMA "
                               "lowering keeps fragments inside one function")

    # ---- the subgroup MMA ops ---------------------------------------------------------------
    def rewrite(self, op: ir.Operation) -> None:
        handler = {"gpu.subgroup_mma_load_matrix": self._load,
                   "gpu.subgroup_mma_store_matrix": self._store,
                   "gpu.subgroup_mma_compute": self._compute,
                   "gpu.subgroup_mma_constant_matrix": self._constant,
                   "gpu.subgroup_mma_elementwise": self._elementwise}[op.name]
        with ir.InsertionPoint(op), op.location:
            result = handler(op)
        if result is not None:
            op.results[0].replace_all_uses_with(result)
        op.erase()

    def _load(self, op: ir.Operation) -> ir.Value:
        frag = fragment(op.results[0].type, op.name)
        source, indices = op.operands[0], list(op.operands[1:])
        view, lead, transpose = self._flat_view(op, source, indices, frag)
        lane = gpu.lane_id()
        if frag.operand == "COp":
            values = [memref.load(view, [self._offset(frag, lane, slot, lead, transpose)])
                      for slot in range(8)]
            if not frag.half_tracked:
                return self._record(vector.from_elements(frag.vector_type(), values), frag)
            # The half the load's opSelect names; the other half stays poison.
            half = HIGH if OPSELECT_ATTR in op.attributes else LOW
            result = ub.poison(frag.vector_type())
            for slot, value in enumerate(values):
                result = vector.insert(value, result, [], [2 * slot + half])
            return self._record(result, frag, half)
        contiguous = (frag.operand == "AOp") != transpose
        if contiguous:
            start = self._offset(frag, lane, 0, lead, transpose)
            return self._record(vector.load(frag.vector_type(), view, [start]), frag)
        values = [memref.load(view, [self._offset(frag, lane, slot, lead, transpose)])
                  for slot in range(TILE)]
        return self._record(vector.from_elements(frag.vector_type(), values), frag)

    def _store(self, op: ir.Operation) -> None:
        value, dest, indices = op.operands[0], op.operands[1], list(op.operands[2:])
        frag = self._fragment_of_value(value, op)
        if frag.operand != "COp":
            raise CompileError(f"{op.name}{_where(op)} stores a {frag.operand} fragment; only "
                               "accumulators (COp) can be stored")
        view, lead, transpose = self._flat_view(op, dest, indices, frag)
        lane = gpu.lane_id()
        half = self.half.get(value, LOW)
        for slot in range(8):
            element = 2 * slot + (HIGH if half == HIGH else LOW) if frag.half_tracked else slot
            scalar = vector.extract(value, [], [element])
            memref.store(scalar, view, [self._offset(frag, lane, slot, lead, transpose)])
        return None

    def _compute(self, op: ir.Operation) -> ir.Value:
        a, b, c = op.operands
        for operand, kind in ((a, "AOp"), (b, "BOp")):
            if self._fragment_of_value(operand, op) != Fragment(kind, "f16"):
                raise CompileError(f"{op.name}{_where(op)}: the gfx11 WMMA lowering multiplies "
                                   "f16 A and B fragments only")
        frag = fragment(op.results[0].type, op.name)
        if frag.elt == "f32":
            return self._record(rocdl.wmma_f32_16x16x16_f16(frag.vector_type(), a, b, c), frag)
        half = HIGH if OPSELECT_ATTR in op.attributes else LOW
        c = self._move_half(c, half)
        result = rocdl.wmma_f16_16x16x16_f16(frag.vector_type(), a, b, c,
                                             opsel=ir.BoolAttr.get(half == HIGH))
        return self._record(result, frag, half)

    def _constant(self, op: ir.Operation) -> ir.Value:
        frag = fragment(op.results[0].type, op.name)
        return self._record(vector.broadcast(frag.vector_type(), op.operands[0]), frag, BOTH)

    def _elementwise(self, op: ir.Operation) -> ir.Value:
        kind = str(op.attributes["opType"]).split()[-1].rstrip(">")
        frag = fragment(op.results[0].type, op.name)
        args = list(op.operands)
        if kind == "extf":
            source = self._fragment_of_value(args[0], op)
            if not (source.half_tracked and frag == Fragment("COp", "f32")):
                raise CompileError(f"{op.name} extf{_where(op)}: the gfx11 WMMA lowering "
                                   "extends f16 accumulators to f32 accumulators only")
            half = self.half.get(args[0], LOW)
            start = HIGH if half == HIGH else LOW
            narrow = vector.shuffle(args[0], args[0], [2 * v + start for v in range(8)])
            return self._record(arith.extf(frag.vector_type(), narrow), frag)
        if kind == "negatef":
            return self._record(arith.negf(args[0]), frag, self.half.get(args[0], LOW))
        combine = _ELEMENTWISE.get(kind)
        if combine is None:
            raise CompileError(f"{op.name} {kind}{_where(op)}: the gfx11 WMMA lowering supports "
                               f"the kinds {', '.join([*_ELEMENTWISE, 'negatef', 'extf'])}")
        half = BOTH
        if frag.half_tracked:
            halves = [self.half.get(arg, LOW) for arg in args]
            half = next((h for h in halves if h != BOTH), BOTH)
            args = [self._move_half(arg, half) for arg in args]
        return self._record(combine(args[0], args[1]).result, frag, half)

    # ---- helpers ----------------------------------------------------------------------------
    def _fragment_of_value(self, value: ir.Value, op: ir.Operation) -> Fragment:
        """The Fragment of an operand: a value this rewrite produced, or one still typed
        ``!gpu.mma_matrix``."""
        frag = self.frags.get(value) or fragment(value.type, op.name)
        if frag is None:
            raise CompileError(f"{op.name}{_where(op)}: an operand is not a WMMA fragment")
        return frag

    def _move_half(self, value: ir.Value, half: int) -> ir.Value:
        """``value`` (an f16 accumulator) with its values in ``half``: a duplicating shuffle
        when they sit in the other half; BOTH values are valid anywhere."""
        current = self.half.get(value, LOW)
        if current in (BOTH, half) or half == BOTH:
            return value
        moved = vector.shuffle(value, value, [2 * (j // 2) + current for j in range(16)])
        return self._record(moved, self.frags.get(value, Fragment("COp", "f16")), BOTH)

    def _flat_view(self, op: ir.Operation, source: ir.Value, indices: list[ir.Value],
                   frag: Fragment) -> tuple[ir.Value, int, bool]:
        """A 1-D, unit-stride view of ``source`` starting at ``source[indices]`` and spanning
        the tile, the leading dimension, and whether the op transposes."""
        mtype = ir.MemRefType(source.type)
        if str(mtype.element_type) != frag.elt:
            raise CompileError(f"{op.name}{_where(op)}: memref element type "
                               f"{mtype.element_type} differs from the fragment's {frag.elt}")
        lead = ir.IntegerAttr(op.attributes["leadDimension"]).value
        if lead < TILE:
            raise CompileError(f"{op.name}{_where(op)}: leadDimension = {lead} is less than "
                               f"the tile's {TILE} columns")
        transpose = "transpose" in op.attributes
        rank = mtype.rank
        meta = memref.ExtractStridedMetadataOp(source).results
        base, offset, strides = meta[0], meta[1], list(meta[2 + rank:])
        linear = offset
        for index, stride in zip(indices, strides):
            linear = arith.addi(linear, arith.muli(index, stride))
        span = (TILE - 1) * lead + TILE
        layout = ir.StridedLayoutAttr.get(ir.ShapedType.get_dynamic_stride_or_offset(), [1])
        view_type = ir.MemRefType.get([span], mtype.element_type, layout, mtype.memory_space)
        dynamic = ir.ShapedType.get_dynamic_stride_or_offset()
        view = memref.reinterpret_cast(view_type, base, [linear], [], [], [dynamic], [span], [1])
        return view, lead, transpose

    @staticmethod
    def _offset(frag: Fragment, lane: ir.Value, slot: int, lead: int,
                transpose: bool) -> ir.Value:
        """Index into the flat view of the element ``lane`` holds in ``slot`` (the layout in
        the module docstring): ``row * ld + col``, or ``col * ld + row`` transposed."""
        index = ir.IndexType.get()

        def const(n: int) -> ir.Value:
            return arith.constant(index, n)

        lane_mod = arith.remui(lane, const(TILE))
        if frag.operand == "AOp":
            row, col = lane_mod, const(slot)
        elif frag.operand == "BOp":
            row, col = const(slot), lane_mod
        else:
            row = arith.addi(const(2 * slot), arith.divui(lane, const(TILE)))
            col = lane_mod
        major, minor = (col, row) if transpose else (row, col)
        return arith.addi(arith.muli(major, const(lead)), minor)
