"""Dense elements attributes (memref.global initializers, constants) of every element type
MLIR takes: run on the host where MLIR's lowerings take them, a CompileError naming the
type where they do not (pywave/frontend/dense.py), and never a Python traceback.

Runs go through ``python -m pywave run`` on the driver stand-in (conftest.fake_driver_env):
host-only programs, printed by libwavert_runner in mlir-runner's format."""

from __future__ import annotations

import logging
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest

import pywave
from pywave import isolation, pipeline

from conftest import TESTS, fake_driver_env

log = logging.getLogger(__name__)


def _run(tmp_path: Path, text: str) -> str:
    """stdout of ``pywave run`` on ``text`` (``base@`` pointers masked); asserts status 0."""
    path = tmp_path / "program.mlir"
    path.write_text(text)
    proc = subprocess.run([sys.executable, "-m", "pywave", "run", str(path)],
                          capture_output=True, text=True, timeout=300, cwd=TESTS,
                          env=fake_driver_env(PYWAVE_CACHE="0"))
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-4000:]
    return re.sub(r"base@ = 0x[0-9a-f]+", "base@ = <ptr>", proc.stdout)


def _compile(text: str) -> pipeline.Artifacts:
    """Compile ``text`` as ``pywave run`` does (entry @main), in a compile worker."""
    return isolation.artifacts(pipeline.Pipeline(text, target="sm_90", run_entry="main"))


def _refused(text: str, *names: str) -> str:
    """The CompileError's message for ``text``, asserting that it names each of ``names``."""
    with pytest.raises(pywave.CompileError) as info:
        _compile(text)
    message = str(info.value)
    for name in names:
        assert name in message, message
    assert not message.startswith("the compiler "), message       # a refusal, not a crash
    return message


def _header(sizes: str, strides: str, rank: int) -> str:
    return (f"Unranked Memref base@ = <ptr> rank = {rank} offset = 0 sizes = [{sizes}] "
            f"strides = [{strides}] data = \n")


# ----------------------------------------------------------------------------- complex

COMPLEX = """
module {
  func.func private @printMemrefC32(memref<*xcomplex<f32>>)
  func.func private @printMemrefC64(memref<*xcomplex<f64>>)
  memref.global "private" constant @z32 : memref<2x2xcomplex<f32>> =
      dense<[[(1.5, -2.0), (0.0, 3.25)], [(7.0, 8.0), (-1.0, 0.5)]]>
  memref.global "private" constant @z64 : memref<3xcomplex<f64>> = dense<(2.0e+01, 5.0)>
  func.func @main() {
    %a = memref.get_global @z32 : memref<2x2xcomplex<f32>>
    %ua = memref.cast %a : memref<2x2xcomplex<f32>> to memref<*xcomplex<f32>>
    call @printMemrefC32(%ua) : (memref<*xcomplex<f32>>) -> ()
    %b = memref.get_global @z64 : memref<3xcomplex<f64>>
    %ub = memref.cast %b : memref<3xcomplex<f64>> to memref<*xcomplex<f64>>
    call @printMemrefC64(%ub) : (memref<*xcomplex<f64>>) -> ()
    return
  }
}
"""


def test_complex_globals_run_and_print_as_the_runner_does(tmp_path):
    """A complex<f32> global (not a splat) and a complex<f64> splat: before, the validator's
    read of the initializer raised the bindings' TypeError (Can't cast unknown element
    type DenseIntOrFPElementsAttr) as a raw traceback."""
    assert _run(tmp_path, COMPLEX) == (
        _header("2, 2", "2, 1", 2) + "[[(1.5,-2),   (0,3.25)], \n [(7,8),   (-1,0.5)]]\n"
        + _header("3", "1", 1) + "[(20,5),  (20,5),  (20,5)]\n")


# ----------------------------------------------------------------- values of each type

def _widened_print(elements: list[tuple[str, str, int, str]], out: str = "i64") -> str:
    """A program that loads each global ``(name, type, count, initializer)``, converts each
    element to ``out`` with the ops in ``_TO`` and prints them all as one memref."""
    total = sum(count for _, _, count, _ in elements)
    lines = [f"  func.func private @printMemref{out.upper()}(memref<*x{out}>)"]
    body = [f"    %o = memref.alloc() : memref<{total}x{out}>",
            "    %c1 = arith.constant 1 : index"]
    at = 0
    for k, (name, t, count, init) in enumerate(elements):
        lines.append(f'  memref.global "private" constant @{name} : memref<{count}x{t}> = {init}')
        body += [f"    %g{k} = memref.get_global @{name} : memref<{count}x{t}>",
                 f"    %lo{k} = arith.constant 0 : index",
                 f"    %hi{k} = arith.constant {count} : index",
                 f"    %at{k} = arith.constant {at} : index",
                 f"    scf.for %i{k} = %lo{k} to %hi{k} step %c1 {{",
                 f"      %v{k} = memref.load %g{k}[%i{k}] : memref<{count}x{t}>"]
        body += [f"      {line}" for line in _TO[t](k, t, out)]
        body += [f"      %j{k} = arith.addi %i{k}, %at{k} : index",
                 f"      memref.store %w{k}, %o[%j{k}] : memref<{total}x{out}>",
                 "    }"]
        at += count
    body += [f"    %u = memref.cast %o : memref<{total}x{out}> to memref<*x{out}>",
             f"    call @printMemref{out.upper()}(%u) : (memref<*x{out}>) -> ()",
             "    return"]
    return "module {\n" + "\n".join(lines) + "\n  func.func @main() {\n" + \
        "\n".join(body) + "\n  }\n}\n"


def _ext(op: str):
    return lambda k, t, out: [f"%w{k} = arith.{op} %v{k} : {t} to {out}"]


def _bits_of(width: int):
    return lambda k, t, out: [f"%b{k} = arith.bitcast %v{k} : {t} to i{width}",
                              f"%w{k} = arith.extui %b{k} : i{width} to {out}"]


#: (format, bits, mantissa bits, exponent bias, signed): the float formats' parameters as
#: their names define them (LLVM's APFloat semantics of the same names).
SMALL_FLOATS = [("f8E4M3FN", 8, 3, 7, True), ("f8E5M2", 8, 2, 15, True),
                ("f8E4M3FNUZ", 8, 3, 8, True), ("f8E5M2FNUZ", 8, 2, 16, True),
                ("f8E4M3B11FNUZ", 8, 3, 11, True), ("f8E8M0FNU", 8, 0, 127, False),
                ("f6E2M3FN", 6, 3, 1, True), ("f6E3M2FN", 6, 2, 3, True),
                ("f4E2M1FN", 4, 1, 1, True), ("f8E4M3", 8, 3, 7, True),
                ("f8E3M4", 8, 4, 3, True)]

_TO = {"i1": _ext("extui"), "i8": _ext("extsi"), "i16": _ext("extsi"), "i32": _ext("extsi"),
       "i64": lambda k, t, out: [f"%w{k} = arith.bitcast %v{k} : i64 to {out}"],
       "index": lambda k, t, out: [f"%w{k} = arith.index_cast %v{k} : index to {out}"]}
for _name, _bits, *_ in SMALL_FLOATS:
    _TO[_name] = _bits_of(_bits)


def _encoding(value: float, bits: int, mantissa: int, bias: int, signed: bool) -> int:
    """The bit pattern of a power of two ``value``: a normal number's biased exponent, or a
    subnormal's mantissa (exponent field 0, scale 2**(1 - bias))."""
    e = int(abs(value).hex().split("p")[1])          # '0x1.0000000000000p+1' -> 1
    sign = (1 << (bits - 1)) if signed and value < 0 else 0
    if e + bias > 0:
        return sign | ((e + bias) << mantissa)
    return sign | int(abs(value) * 2.0 ** (bias - 1 + mantissa))


def test_integer_and_index_globals_hold_their_values(tmp_path):
    text = _widened_print([("a", "i8", 4, "dense<[1, -2, 127, -128]>"),
                           ("b", "i16", 3, "dense<-300>"),
                           ("c", "i32", 2, "dense<[70000, -1]>"),
                           ("d", "i64", 2, "dense<[-5000000000, 7]>"),
                           ("e", "index", 3, "dense<[0, 9, 4096]>")])
    assert _run(tmp_path, text) == _header("14", "1", 1) + \
        "[1,  -2,  127,  -128,  -300,  -300,  -300,  70000,  -1,  -5000000000,  7,  0,  9,  " \
        "4096]\n"


def test_i1_globals_are_widened_to_bytes(tmp_path):
    """A memref.global of i1 (before: refused) holds its bools, splat or not."""
    text = _widened_print([("a", "i1", 5, "dense<[true, false, true, true, false]>"),
                           ("b", "i1", 3, "dense<true>"), ("c", "i1", 2, "dense<false>")])
    assert _run(tmp_path, text) == _header("10", "1", 1) + \
        "[1,  0,  1,  1,  0,  1,  1,  1,  0,  0]\n"


def test_small_float_globals_hold_their_encodings(tmp_path):
    """Each f8/f6/f4 global of powers of two (and -2 in the signed formats), splat or not,
    read back as its bits: the encodings the formats define."""
    elements, want = [], []
    for name, bits, mantissa, bias, signed in SMALL_FLOATS:
        values = [1.0, 2.0, 0.5, 4.0] + ([-2.0] if signed else [])
        init = "dense<[" + ", ".join(map(str, values)) + "]>"
        elements.append((f"{name}_list", name, len(values), init))
        elements.append((f"{name}_splat", name, 2, "dense<4.0>"))
        want += [_encoding(v, bits, mantissa, bias, signed) for v in values]
        want += [_encoding(4.0, bits, mantissa, bias, signed)] * 2
    out = _run(tmp_path, _widened_print(elements))
    assert out == _header(str(len(want)), "1", 1) + "[" + ",  ".join(map(str, want)) + "]\n"


def test_float_globals_print(tmp_path):
    kinds = [("F16", "f16", "dense<[1.5, -2.25, 0.0, 65504.0]>"),
             ("BF16", "bf16", "dense<[1.5, -2.25, 0.0, 256.0]>"),
             ("F32", "f32", 'dense<"0x0000C03F000010C00000000000008040">'),    # hex form
             ("F64", "f64", "dense<[1.5, -2.25, 0.0, 4.0]>")]
    lines, body = [], []
    for k, (name, t, init) in enumerate(kinds):
        lines.append(f"  func.func private @printMemref{name}(memref<*x{t}>)")
        lines.append(f'  memref.global "private" constant @g{k} : memref<4x{t}> = {init}')
        body += [f"    %g{k} = memref.get_global @g{k} : memref<4x{t}>",
                 f"    %u{k} = memref.cast %g{k} : memref<4x{t}> to memref<*x{t}>",
                 f"    call @printMemref{name}(%u{k}) : (memref<*x{t}>) -> ()"]
    text = "module {\n" + "\n".join(lines) + "\n  func.func @main() {\n" + "\n".join(body) + \
        "\n    return\n  }\n}\n"
    row = _header("4", "1", 1)
    assert _run(tmp_path, text) == (row + "[1.5,  -2.25,  0,  65504]\n" +
                                    row + "[1.5,  -2.25,  0,  256]\n" +
                                    row + "[1.5,  -2.25,  0,  4]\n" +
                                    row + "[1.5,  -2.25,  0,  4]\n")


RESOURCE = """
module {
  func.func private @printMemrefI32(memref<*xi32>)
  memref.global "private" constant @r : memref<3xi32> = dense_resource<three>
  memref.global "private" constant @e : memref<0xi32> = dense_resource<none>
  memref.global "private" constant @d : memref<0x4xi32> = dense<>
  func.func @main() {
    %r = memref.get_global @r : memref<3xi32>
    %ur = memref.cast %r : memref<3xi32> to memref<*xi32>
    call @printMemrefI32(%ur) : (memref<*xi32>) -> ()
    %e = memref.get_global @e : memref<0xi32>
    %ue = memref.cast %e : memref<0xi32> to memref<*xi32>
    call @printMemrefI32(%ue) : (memref<*xi32>) -> ()
    %d = memref.get_global @d : memref<0x4xi32>
    %ud = memref.cast %d : memref<0x4xi32> to memref<*xi32>
    call @printMemrefI32(%ud) : (memref<*xi32>) -> ()
    return
  }
}
{-#
  dialect_resources: {
    builtin: {
      three: "0x04000000070000000800000009000000",
      none: "0x04000000"
    }
  }
#-}
"""


def test_dense_resource_and_empty_globals_run(tmp_path):
    """A dense_resource blob, an empty one (before: an assertion in the LLVM translation)
    and dense<> of a zero-size shape."""
    out = _run(tmp_path, RESOURCE)
    assert out.startswith(_header("3", "1", 1) + "[7,  8,  9]\n" + _header("0", "1", 1)), out
    assert _header("0, 4", "4, 1", 2) in out, out


# ---------------------------------------------------------------------------- refused

def _global(t: str, init: str, n: int = 2, kernel: bool = False, tail: str = "") -> str:
    mt = f"memref<{n}x{t}>"
    g = f'memref.global "private" constant @g : {mt} = {init}'
    if not kernel:
        return f"""module {{
  {g}
  func.func @main() {{
    %m = memref.get_global @g : {mt}
    %a = memref.alloc() : {mt}
    memref.copy %m, %a : {mt} to {mt}
    memref.dealloc %a : {mt}
    return
  }}
}}
{tail}"""
    return f"""module attributes {{gpu.container_module}} {{
  gpu.module @k {{
    {g}
    gpu.func @kern(%out: memref<{n}xi8>) kernel {{
      %m = memref.get_global @g : {mt}
      gpu.return
    }}
  }}
  func.func @main() {{
    %c1 = arith.constant 1 : index
    %a = memref.alloc() : memref<{n}xi8>
    gpu.launch_func @k::@kern blocks in (%c1, %c1, %c1) threads in (%c1, %c1, %c1)
        args(%a : memref<{n}xi8>)
    return
  }}
}}"""


def _blob(key: str, hexdata: str) -> str:
    return ('{-#\n  dialect_resources: {\n    builtin: {\n      ' + key + ': "0x' + hexdata +
            '"\n    }\n  }\n#-}')


REFUSED = {
    "tf32": (_global("tf32", "dense<1.0>"), ["memref.global", "tf32", "no LLVM type"]),
    "i4 global": (_global("i4", "dense<[1, -2]>"), ["memref.global", "tensor<2xi4>", "i8"]),
    "complex<i1>": (_global("complex<i1>", "dense<(true, false)>"), ["complex<i1>"]),
    "f80 in a kernel": (_global("f80", "dense<1.0>", kernel=True), ["f80", "GPU"]),
    "f4 in a kernel": (_global("f4E2M1FN", "dense<1.0>", kernel=True), ["f4E2M1FN"]),
    "complex resource": (_global("complex<f32>", "dense_resource<b>", 1,
                                 tail=_blob("b", "040000000000803F00000040")),
                         ["dense_resource", "complex<f32>"]),
    "i1 resource": (_global("i1", "dense_resource<b>", tail=_blob("b", "040000000101")),
                    ["dense_resource", "i1"]),
    "f4 resource": (_global("f4E2M1FN", "dense_resource<b>", tail=_blob("b", "040000000101")),
                    ["dense_resource", "f4E2M1FN"]),
    "missing blob": (_global("i32", "dense_resource<nowhere>"), ["'nowhere'", "i32"]),
    "short blob": (_global("f32", "dense_resource<b>", tail=_blob("b", "040000000000803F")),
                   ["'b'", "4 bytes", "f32", "8"]),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_unsupported_dense_attributes_are_a_compile_error_naming_the_type(case):
    text, names = REFUSED[case]
    message = _refused(text, *names)
    assert "supported element types" in message


# ------------------------------------------------------------------------------- fuzz

FUZZ_TYPES = ["i1", "i2", "i4", "i7", "i8", "i16", "i32", "i64", "i128", "index", "si8",
              "ui16", "f16", "bf16", "f32", "f64", "tf32", "f80", "f128",
              *[name for name, *_ in SMALL_FLOATS],
              "complex<f32>", "complex<f64>", "complex<f16>", "complex<i32>", "complex<i8>",
              "complex<i1>"]


def _element(t: str, i: int) -> str:
    if t.startswith("complex<i1"):
        return "(true, false)"
    if t.startswith("complex<i"):
        return f"({i + 1}, {-i})"
    if t.startswith("complex"):
        return f"({i + 1}.0, -0.5)"
    if t == "i1":
        return ["true", "false"][i % 2]
    if t[0] in "fbt":
        return ["1.0", "2.0", "0.5", "4.0"][i % 4]
    return str([1, 0, 1, 1][i % 4] if t.startswith("ui") else [1, -1, 0, 1][i % 4])


def _initializer(t: str, shape: tuple[int, ...], kind: str) -> str:
    if kind == "splat":
        return f"dense<{_element(t, 0)}>"
    if 0 in shape:
        return "dense<>"
    flat = [_element(t, i) for i in range(math.prod(shape))]

    def nest(values: list[str], dims: tuple[int, ...]) -> str:
        if not dims:
            return values[0]
        step = len(values) // dims[0]
        return "[" + ", ".join(nest(values[k * step:(k + 1) * step], dims[1:])
                               for k in range(dims[0])) + "]"
    return f"dense<{nest(flat, shape)}>"


def test_fuzz_every_element_type_compiles_or_is_refused():
    """Element types x splat/non-splat x shapes x host/kernel globals and host vector
    constants: each compile succeeds or raises a pywave.Error that is a refusal (never a
    crash of the compiler, never another exception)."""
    outcomes = {"ok": 0, "refused": 0}
    for t in FUZZ_TYPES:
        for shape in [(), (3,), (2, 2), (0,), (1, 0, 2)]:
            dims = "x".join(map(str, shape))
            mt = f"memref<{dims}x{t}>" if shape else f"memref<{t}>"
            for kind in ("splat", "list"):
                init = _initializer(t, shape, kind)
                texts = [_global(t, init).replace(f"memref<2x{t}>", mt),
                         _global(t, init, kernel=True).replace(f"memref<2x{t}>", mt)]
                if len(shape) == 1 and shape[0] and not t.startswith("complex"):
                    texts.append(f"""module {{
  func.func @main() {{
    %v = arith.constant {init} : vector<{dims}x{t}>
    %a = memref.alloc() : {mt}
    %c0 = arith.constant 0 : index
    vector.store %v, %a[%c0] : {mt}, vector<{dims}x{t}>
    memref.dealloc %a : {mt}
    return
  }}
}}""")
                for text in texts:
                    try:
                        _compile(text)
                        outcomes["ok"] += 1
                    except pywave.Error as exc:
                        assert not str(exc).startswith("the compiler "), (text, str(exc))
                        outcomes["refused"] += 1
    log.info("dense fuzz: %s", outcomes)
    assert outcomes["ok"] > 300 and outcomes["refused"] > 50, outcomes
