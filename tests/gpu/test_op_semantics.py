"""Differential test: every arith and math op a kernel can use, on the GPU, against a host
reference with MLIR's documented semantics (tests/semantics/cases.py states them).

GPU (marked ``gpu``) and the CPU device (``target="cpu"``, everywhere): one module per group of cases (integer arith, integer math, casts,
float arith, float math), each case a kernel over a vector of special values; the results
are compared bit for bit (exact ops) or within the CUDA math library's ulp bounds (math
functions). CPU: the reference on hand-checked values, the rounding helpers against NumPy,
the generated modules compiling for sm_90, and the ops the NVVM lowering cannot lower.

Run on an H200:  cd tests && python -m pytest -q gpu/test_op_semantics.py
"""

from __future__ import annotations

import logging
from fractions import Fraction

import numpy as np
import pytest

import pywave
import pywave.api as api
from pywave.program import COARSENED_SUFFIX
from pywave import mlirutil
from pywave.frontend import prepare
from pywave.kernels import nvvm, toolkit
from semantics import cases as cs
from semantics import floats as fl
from semantics import generate

log = logging.getLogger("pywave.tests.semantics")

#: (op, element type) the NVVM lowering of MLIR 22 (``convert-gpu-to-nvvm``) leaves
#: unconverted: compiling them is a CompileError at LLVM translation, so they are not run.
#: ``math.absi`` on i32 is lowered (libdevice ``__nv_abs``), on other widths not.
UNSUPPORTED = {
    ("math.absi", t) for t in ("i8", "i16", "i64")} | {
    (op, t) for op in ("math.ctlz", "math.cttz", "math.ctpop", "math.ipowi")
    for t in cs.INT_TYPES} | {
    ("math.trunc", t) for t in cs.FLOAT_TYPES}

#: Case name -> why its results differ from MLIR's documented semantics on the GPU (a
#: documented deviation, stated in the README's "Semantics" section). A listed case must
#: still differ: one that matches fails the test, so the table stays true.
EXPECTED_DEVIATIONS: dict[str, str] = {}


def _supported(case: cs.Case) -> bool:
    return (case.op, case.in_types[0]) not in UNSUPPORTED


@pytest.fixture(scope="module")
def all_cases() -> list[cs.Case]:
    return cs.all_cases()


@pytest.fixture(scope="module")
def groups(all_cases) -> dict[str, list[cs.Case]]:
    return generate.by_group([c for c in all_cases if _supported(c)])


GROUPS = ("arith-int", "math-int", "arith-cast", "arith-float", "math-float")


# ---------------------------------------------------------------------------------------
# CPU: the reference and the generator
# ---------------------------------------------------------------------------------------
def _result(all_cases, name: str, *args) -> object:
    """The expected result of case ``name`` for the inputs ``args`` (storage values)."""
    case = next(c for c in all_cases if c.name == name)
    hit = np.ones(case.n, dtype=bool)
    for arr, t, want in zip(case.inputs, case.in_types, args):
        hit &= (cs.float_bits(arr, t) if t in fl.FORMATS else np.asarray(arr)) == want
    (index,) = np.nonzero(hit)[0][:1]
    e = case.expect
    if e.approx is not None:
        return e.approx[index]
    if case.out_type in fl.FORMATS:
        return int(e.bits[index])
    return np.asarray(e.bits)[index].item()


def _b(value: float, t: str) -> int:
    """The bits of ``value`` as a ``t``."""
    return fl.bits_of(value, fl.FORMATS[t])


def test_reference_on_hand_checked_values(all_cases):
    f32 = fl.F32
    pz, nz = 0, f32.sign_bit
    assert _result(all_cases, "maximumf_f32", _b(0.0, "f32"), _b(-0.0, "f32")) == pz
    assert _result(all_cases, "maximumf_f32", _b(-0.0, "f32"), _b(0.0, "f32")) == pz
    assert _result(all_cases, "minimumf_f32", _b(0.0, "f32"), _b(-0.0, "f32")) == nz
    assert fl.is_nan_bits(np.array([_result(all_cases, "maximumf_f32", _b(1.5, "f32"),
                                            _b(float("nan"), "f32"))]), f32)[0]
    assert _result(all_cases, "maxnumf_f32", _b(float("nan"), "f32"), _b(1.5, "f32")) == \
        fl.bits_of(1.5, f32)
    assert _result(all_cases, "remf_f32", _b(-7.25, "f32"), _b(2.5, "f32")) == \
        fl.bits_of(-2.25, f32)
    assert _result(all_cases, "round_f32", _b(2.5, "f32")) == fl.bits_of(3.0, f32)
    assert _result(all_cases, "round_f32", _b(-0.5, "f32")) == fl.bits_of(-1.0, f32)
    assert _result(all_cases, "roundeven_f32", _b(2.5, "f32")) == fl.bits_of(2.0, f32)
    assert _result(all_cases, "ceil_f32", _b(-0.5, "f32")) == nz
    assert _result(all_cases, "ceildivsi_i32", 7, -2) == -3        # MLIR's doc example
    assert _result(all_cases, "floordivsi_i32", -7, 2) == -4
    assert _result(all_cases, "remsi_i32", -7, 2) == -1
    assert _result(all_cases, "divui_i8", -1, 2) == 127
    assert _result(all_cases, "shrsi_i8", -128, 7) == -1
    assert _result(all_cases, "addi_i8", 127, 1) == -128
    assert _result(all_cases, "cmpi_ult_i16", -1, 0) is False
    assert _result(all_cases, "cmpf_une_f64", _b(float("nan"), "f64"),
                   _b(float("nan"), "f64")) is True
    assert _result(all_cases, "cmpf_oeq_f16", _b(0.0, "f16"), _b(-0.0, "f16")) is True
    assert _result(all_cases, "extui_i8_i64", -1) == 255
    assert _result(all_cases, "fptoui_f32_i8", _b(255.9, "f32")) == -1    # 255 as i8 bits
    # One rounding, not two: 2^40 + 2^32 + 1 is above the bf16 tie that f32 would round to.
    assert _result(all_cases, "sitofp_i64_bf16", (1 << 40) + (1 << 32) + 1) == \
        fl.round_exact((1 << 40) + (1 << 33), fl.BF16)
    assert _result(all_cases, "truncf_f64_bf16", _b(1 + 2.0 ** -8 + 2.0 ** -40, "f64")) == \
        fl.bits_of(1 + 2.0 ** -7, fl.BF16)
    one = fl.bits_of(1.0, f32)
    u = Fraction(1, 1 << 23)
    assert _result(all_cases, "fma_f32", one + 1, one - 1, one | f32.sign_bit) == \
        fl.round_exact(u / 2 - u * u / 2, f32)  # (1+u)(1-u/2) - 1 fused; unfused: 0
    assert abs(_result(all_cases, "exp_f32", _b(1.0, "f32")) - np.e) < 1e-15


def test_no_undefined_inputs(all_cases):
    """Zero divisors, INT_MIN / -1 and over-wide shifts are left out (UB / poison)."""
    for case in all_cases:
        name = case.op.split(".")[-1]
        if name in ("divsi", "divui", "remsi", "remui", "ceildivsi", "ceildivui",
                    "floordivsi"):
            assert not np.any(case.inputs[1] == 0), case.name
        if name in ("divsi", "remsi", "ceildivsi", "floordivsi"):
            lo = np.iinfo(case.inputs[0].dtype).min
            assert not np.any((case.inputs[0] == lo) & (case.inputs[1] == -1)), case.name
        if name in ("shli", "shrsi", "shrui"):
            width = case.inputs[1].dtype.itemsize * 8
            assert np.all(case.inputs[1].view(f"u{width // 8}") < width), case.name


@pytest.mark.parametrize("fmt", [fl.F16, fl.F32, fl.BF16], ids=lambda f: f.name)
def test_rounding_helpers_agree(fmt):
    rng = np.random.default_rng(5)
    x = np.concatenate([rng.normal(size=300) * 2.0 ** rng.integers(-150, 130, 300),
                        [6.103515625e-05 * 1.5, 65520.0, 65519.0, 3.4e38, 1e-45, 2.0 ** -150]])
    got = fl.round_array(x, fmt)
    exact = [fl.round_exact(Fraction(float(v)), fmt) for v in x]
    assert [int(g) for g in got] == exact
    if fmt is not fl.BF16:
        with np.errstate(over="ignore"):
            native = x.astype(np.float16 if fmt is fl.F16 else np.float32)
        assert np.array_equal(got, native.view(fmt.uint))


def test_every_op_is_covered(all_cases):
    ops = {c.op.split()[0] for c in all_cases}
    for name in ("addi subi muli divsi divui ceildivsi ceildivui floordivsi remsi remui andi "
                 "ori xori shli shrsi shrui maxsi maxui minsi minui cmpi extsi extui trunci "
                 "sitofp uitofp fptosi fptoui addf subf mulf divf remf negf maximumf minimumf "
                 "maxnumf minnumf cmpf extf truncf select index_cast index_castui").split():
        assert f"arith.{name}" in ops, name
    for name in ("absf absi ceil floor round roundeven trunc sqrt rsqrt exp exp2 expm1 log "
                 "log2 log10 log1p sin cos tan tanh atan atan2 powf fpowi ipowi copysign fma "
                 "ctlz cttz ctpop erf erfc cbrt sinh cosh asin acos asinh acosh atanh isnan "
                 "isinf isfinite").split():
        assert f"math.{name}" in ops, name
    preds = {c.op.split()[1] for c in all_cases if c.op.startswith("arith.cmpf ")}
    assert preds == set(cs.CMPF)


def _as_storage(case: cs.Case, bits: np.ndarray) -> np.ndarray:
    return np.asarray(bits).astype(cs.FORMATS[case.out_type].uint).view(
        cs.storage_dtype(case.out_type)) if case.out_type in cs.FORMATS else np.asarray(bits)


def _rounded_reference(case: cs.Case) -> np.ndarray:
    """What a correctly rounded GPU would write for ``case``."""
    e = case.expect
    if e.approx is None:
        return _as_storage(case, e.bits)
    fmt = cs.FORMATS[case.out_type]
    with np.errstate(over="ignore"):
        wide = np.asarray(e.approx, dtype=np.float64)
    return _as_storage(case, fl.round_array(wide, fmt))


def test_comparison_accepts_the_reference_and_rejects_a_wrong_result(all_cases):
    """Each case accepts its own (correctly rounded) reference, and rejects a result moved
    by more than its tolerance (a flipped bit: exact cases; tol + 2 ulps: math functions)."""
    for case in all_cases:
        good = _rounded_reference(case)
        assert cs.mismatches(case, good) == [], case.name
        bad = good.copy()
        if case.out_type == "i1":
            bad[0] = not bad[0]
        elif case.out_type in cs.FORMATS:
            fmt = cs.FORMATS[case.out_type]
            bits = bad.view(fmt.uint)
            finite = np.nonzero(~fl.is_nan_bits(bits, fmt) &
                                ((bits & fmt.exp_mask) != fmt.exp_mask) &
                                ((bits & ~fmt.uint(fmt.sign_bit)) > 16))[0]
            tol = np.broadcast_to(case.expect.tol, (case.n,))[finite[0]]
            step = 1 if case.expect.approx is None else int(tol) + 2
            bits[finite[0]] += fmt.uint(step)
        else:
            bad[0] ^= 1
        assert cs.mismatches(case, bad), case.name


def _needs_libdevice() -> None:
    if not nvvm.has_ptxas(toolkit.cuda_toolkit()):
        pytest.skip("needs a CUDA toolkit (ptxas, libdevice) to compile the math kernels")


@pytest.mark.parametrize("group", GROUPS)
def test_module_compiles_for_sm_90(groups, group):
    _needs_libdevice()
    artifacts = api.build(generate.module(groups[group]), target="sm_90", format="ptx",
                          opt_level=0)   # the host code is not what this checks
    ptx = artifacts.binaries[0].data.decode(errors="replace")
    for case in groups[group]:
        assert f".entry {case.name}(" in ptx, case.name
    if group.startswith("arith"):
        # Denormals are kept (no flush-to-zero) and divisions are IEEE; remf calls libdevice's
        # fmodf, whose exact algorithm uses an approximate reciprocal internally.
        for entry in ptx.split(".entry ")[1:]:
            name = entry.split("(", 1)[0].removesuffix(COARSENED_SUFFIX)   # a copy: the same
            if not name.startswith("remf_"):
                assert ".ftz" not in entry and ".approx" not in entry, name
            if name.startswith(("maximumf_", "minimumf_")) and not name.endswith("f64"):
                # LLVM's IEEE maximum/minimum (-0 < +0), not arith-expand's compare+select.
                assert "max.NaN." in entry or "min.NaN." in entry, name


def test_unsupported_ops_are_exactly_those_listed(all_cases):
    """The ops left unconverted by the NVVM lowering are the UNSUPPORTED table: an op that
    becomes supported (or stops being) fails here, naming it."""
    from mlir import ir

    from pywave.mlirutil import run_pipeline

    chosen = [c for c in all_cases if not _supported(c)] + \
        [c for c in all_cases if c.op in ("math.absi", "math.trunc") and _supported(c)]
    text = generate.module(chosen)
    left: set[tuple[str, str]] = set()
    by_name = {c.name: c for c in chosen}
    with ir.Context():
        module = ir.Module.parse(text)
        prepare.widen_bool_memrefs(module)
        run_pipeline(module, prepare.PREPARE_PIPELINE, "preparing", text)
        for gmod in mlirutil.gpu_modules(module):
            gmod.attributes["targets"] = ir.Attribute.parse(
                '[#nvvm.target<chip = "sm_90">]')
        run_pipeline(module, nvvm.NVVM_PIPELINE, "lowering to NVVM", text)

        def visit(op: ir.Operation) -> ir.WalkResult:
            if op.name.startswith(("math.", "arith.")):
                func = op.parent
                while func.name != "llvm.func":
                    func = func.parent
                case = by_name[ir.StringAttr(func.attributes["sym_name"]).value]
                left.add((op.name, case.in_types[0]))
            return ir.WalkResult.ADVANCE

        for gmod in mlirutil.gpu_modules(module):
            gmod.walk(visit)
    assert left == UNSUPPORTED


# ---------------------------------------------------------------------------------------
# GPU: run every case and compare
# ---------------------------------------------------------------------------------------
def _run_case(device, fn, case: cs.Case) -> np.ndarray:
    """Run one case's host function on ``device``; the output as a NumPy array."""
    args = [device.put(a) for a in case.inputs]
    out = device.zeros(case.n, cs.storage_dtype(case.out_type))
    fn(*args, out)
    return device.get(out)


#: Case name -> why the CPU device's result differs from MLIR's semantics (as
#: EXPECTED_DEVIATIONS: a listed case must still differ).
CPU_DEVIATIONS: dict[str, str] = {
    "sitofp_i64_bf16": "LLVM converts i64 -> bf16 through f32: rounded twice",
    "uitofp_i64_bf16": "LLVM converts i64 -> bf16 through f32: rounded twice",
    "tanh_f64": "glibc's tanh is off by 2 ulps where CUDA's bound is 1",
    "cbrt_f64": "glibc's cbrt is off by 2 ulps where CUDA's bound is 1",
}


@pytest.mark.parametrize("group", GROUPS)
def test_kernels_match_mlir_semantics(device, groups, group):
    """Every case of ``group`` on ``device`` (the GPU with torch, or the CPU device)."""
    chosen = groups[group]
    deviating = EXPECTED_DEVIATIONS
    if device.is_cpu:       # every case compiles for the CPU (kernels/cpu.py's libdevice map)
        deviating = {**EXPECTED_DEVIATIONS, **CPU_DEVIATIONS}
    failures, deviations = [], []
    mod = device.compile(generate.module(chosen))
    for case in chosen:
        got = _run_case(device, mod[case.name], case)
        bad = cs.mismatches(case, got)
        if case.name in deviating:
            if not bad:
                failures.append(f"{case.name}: listed as a deviation on {device.name} "
                                f"({deviating[case.name]}) but matches")
            else:
                deviations.append(f"{case.name}: {len(bad)} of {case.n} "
                                  f"({deviating[case.name]})")
            continue
        if bad:
            shown = "\n    ".join(cs.describe(case, got, i) for i in bad[:4])
            failures.append(f"{case.name}: {len(bad)} of {case.n} differ\n    {shown}")
    for line in deviations:
        log.info("expected deviation: %s", line)
    assert not failures, f"{len(failures)} cases differ from MLIR's semantics:\n" + \
        "\n".join(failures)


# ---------------------------------------------------------------------------------------
# pywave's own rewrites: the subgroup reduction
# ---------------------------------------------------------------------------------------
_CLUSTER_REDUCE = """
module attributes {gpu.container_module} {
gpu.module @k {
  gpu.func @f(%m: memref<64xf32>) kernel {
    %t = gpu.thread_id x
    %v = memref.load %m[%t] : memref<64xf32>
    %r = gpu.subgroup_reduce add %v cluster(size = SIZE, stride = STRIDE) : (f32) -> f32
    memref.store %r, %m[%t] : memref<64xf32>
    gpu.return
  }
}
}
"""


@pytest.mark.parametrize("size,stride", [(64, 1), (16, 4), (4, 16)])
def test_cluster_wider_than_a_warp_is_refused(size, stride):
    """A cluster lies within one subgroup: one wider than the 32-lane warp would shuffle with
    lanes that do not exist (returning the lane's own value) and double-count it."""
    text = _CLUSTER_REDUCE.replace("SIZE", str(size)).replace("STRIDE", str(stride))
    with pytest.raises(pywave.CompileError, match=rf"size = {size}, stride = {stride}.*32"):
        api.build(text, target="sm_90", format="ptx")


@pytest.mark.parametrize("size,stride", [(32, 1), (4, 8), (8, 4)])
def test_cluster_shuffles_stay_inside_the_warp(size, stride):
    text = _CLUSTER_REDUCE.replace("SIZE", str(size)).replace("STRIDE", str(stride))
    ptx = api.build(text, target="sm_90", format="ptx").binaries[0].data.decode(
        errors="replace")
    masks = [int(line.split(",")[2]) for line in ptx.splitlines()
             if "shfl.sync.bfly.b32" in line]
    assert masks == [stride << k for k in range(size.bit_length() - 1)]


# ---------------------------------------------------------------------------------------
# pywave's own rewrites: id queries upstream does not lower, reductions as redux.sync
# ---------------------------------------------------------------------------------------
#: The queries each thread of _IDS writes, in column order: the subgroup ones, then the
#: cluster ones (which the CPU device refuses).
_ID_COLUMNS = ["num_subgroups : index", "subgroup_id : index", "lane_id",
               "subgroup_size : index", "cluster_id x", "cluster_dim x", "cluster_block_id x",
               "cluster_dim_blocks x"]
_SUBGROUP_COLUMNS, _CLUSTER_COLUMNS = range(4), range(4, 8)


def _ids_module(columns) -> str:
    """A kernel @ids writing the queries ``columns`` (indices of _ID_COLUMNS) of each thread
    into its row of %o, a memref<?x8xi64> (row = block * size + linear thread id)."""
    stores = "\n".join(
        f"""    %q{i} = gpu.{_ID_COLUMNS[i]}
    %v{i} = arith.index_cast %q{i} : index to i64
    %c{i} = arith.constant {i} : index
    memref.store %v{i}, %o[%row, %c{i}] : memref<?x{len(_ID_COLUMNS)}xi64>"""
        for i in columns)
    return f"""
module attributes {{gpu.container_module}} {{
gpu.module @k {{
  gpu.func @ids(%o: memref<?x{len(_ID_COLUMNS)}xi64>) kernel {{
    %tx = gpu.thread_id x
    %ty = gpu.thread_id y
    %tz = gpu.thread_id z
    %bx = gpu.block_dim x
    %by = gpu.block_dim y
    %bz = gpu.block_dim z
    %b = gpu.block_id x
    %yz = arith.muli %by, %tz : index
    %inner = arith.addi %ty, %yz : index
    %scaled = arith.muli %bx, %inner : index
    %linear = arith.addi %tx, %scaled : index
    %bxy = arith.muli %bx, %by : index
    %size = arith.muli %bxy, %bz : index
    %base = arith.muli %b, %size : index
    %row = arith.addi %base, %linear : index
{stores}
    gpu.return
  }}
}}
}}
"""


_IDS = _ids_module(range(len(_ID_COLUMNS)))


def _ids_reference(grid: int, block: tuple[int, int, int]) -> np.ndarray:
    """What MLIR defines each query as, per thread (row = block * size + linear thread id),
    on an NVIDIA GPU (32-lane warps; the CPU device's subgroups are the same) launched
    without clusters (each block its own cluster)."""
    size = block[0] * block[1] * block[2]
    rows = []
    for b in range(grid):
        for linear in range(size):            # x fastest, as warps are formed
            rows.append([-(-size // 32), linear // 32, linear % 32, 32, b, grid, 0, 1])
    return np.array(rows, dtype=np.int64)


def _check_ids(device, block, columns) -> None:
    grid = 3
    want = _ids_reference(grid, block)
    out = device.put(np.full(want.shape, -1, dtype=np.int64))
    device.compile(_ids_module(columns)).kernels["ids"](out, grid=grid, block=block)
    got = device.get(out)
    bad = [(r, c) for r, c in np.argwhere(got != want) if c in columns]
    unwritten = [c for c in range(len(_ID_COLUMNS)) if c not in columns
                 and not (got[:, c] == -1).all()]
    assert not unwritten, f"columns {unwritten} were not to be written"
    assert not bad, "\n".join(
        f"row {r} ({_ID_COLUMNS[c]}): got {got[r, c]}, MLIR says {want[r, c]}"
        for r, c in bad[:8])


@pytest.mark.parametrize("block", [(5, 3, 3), (32, 2, 1), (7, 1, 9)])
def test_subgroup_id_queries_match_mlir_semantics(device, block):
    """45, 64 and 63 threads: a partial last subgroup, an exact one, one lane short."""
    _check_ids(device, block, _SUBGROUP_COLUMNS)


@pytest.mark.parametrize("block", [(5, 3, 3), (32, 2, 1), (7, 1, 9)])
def test_cluster_id_queries_match_mlir_semantics(device, block):
    """Launched without clusters: each block is its own cluster of one."""
    _check_ids(device, block, _CLUSTER_COLUMNS)


#: gpu.subgroup_reduce kinds on i32 -> the reduction over a warp's values (Python ints,
#: wrapped to 32 bits two's complement as the i32 result).
_REDUCTIONS = {
    "add": lambda v: sum(v), "mul": lambda v: np.prod([int(x) for x in v], dtype=object),
    "and": lambda v: np.bitwise_and.reduce(v), "or": lambda v: np.bitwise_or.reduce(v),
    "xor": lambda v: np.bitwise_xor.reduce(v), "minsi": lambda v: min(v),
    "maxsi": lambda v: max(v), "minui": lambda v: min(int(x) & 0xFFFFFFFF for x in v),
    "maxui": lambda v: max(int(x) & 0xFFFFFFFF for x in v)}
_REDUCE_KERNEL = """
  gpu.func @NAME(%i: memref<64xi32>, %o: memref<64xi32>) kernel {
    %t = gpu.thread_id x
    %x = memref.load %i[%t] : memref<64xi32>
    %r = gpu.subgroup_reduce KIND %x FORM: (i32) -> i32
    memref.store %r, %o[%t] : memref<64xi32>
    gpu.return
  }"""


def _wrap32(value: int) -> int:
    return (int(value) + (1 << 31)) % (1 << 32) - (1 << 31)


@pytest.mark.parametrize("form", ["uniform ", ""])
def test_i32_subgroup_reductions_match_mlir_semantics(device, form):
    """Every kind on two warps of i32 values (extremes included): the uniform ones are
    redux.sync on sm_80 and newer (kernels/rewrites/test_semantics.py checks the PTX), the others
    shuffles; each lane gets its warp's reduction."""
    kernels = "".join(_REDUCE_KERNEL.replace("NAME", f"r_{kind}").replace("KIND", kind)
                      .replace("FORM", form) for kind in _REDUCTIONS)
    mod = device.compile("module attributes {gpu.container_module} {\ngpu.module @k {"
                      + kernels + "\n}\n}")
    rng = np.random.default_rng(7)
    values = rng.integers(-2**31, 2**31, size=64, dtype=np.int64)
    values[:4] = [-2**31, 2**31 - 1, -1, 0]
    values[32:35] = [3, 5, -7]
    data = device.put(values.astype(np.int32))
    failures = []
    for kind, reduce in _REDUCTIONS.items():
        out = device.zeros(64, np.int32)
        mod.kernels[f"r_{kind}"](data, out, grid=1, block=64)
        got = device.get(out)
        want = [_wrap32(reduce(values[w * 32:(w + 1) * 32])) for w in (0, 1)]
        for lane in range(64):
            if int(got[lane]) != want[lane // 32]:
                failures.append(f"{kind} {form}lane {lane}: got {got[lane]}, "
                                f"want {want[lane // 32]}")
    assert not failures, "\n".join(failures[:10])


def test_reduction_module_compiles_for_sm_80():
    kernels = "".join(_REDUCE_KERNEL.replace("NAME", f"r_{kind}").replace("KIND", kind)
                      .replace("FORM", "uniform ") for kind in _REDUCTIONS)
    text = "module attributes {gpu.container_module} {\ngpu.module @k {" + kernels + "\n}\n}"
    code = api.build(text, target="sm_80", format="ptx").binaries[0].data.decode()
    assert code.count("redux.sync") == len(_REDUCTIONS) - 1        # all but mul
    assert _ids_reference(1, (5, 3, 3))[44].tolist() == [2, 1, 12, 32, 0, 1, 0, 1]
    api.build(_IDS, target="sm_90", format="ptx")
