"""Seeded MLIR mutations for the compile fuzzer.

Case ``i`` of seed ``s`` is a pure function of ``(s, i)`` (its own ``random.Random``), so any
case of a long run is reproduced with ``python -m fuzz --seed s --only i``.
"""

from __future__ import annotations

import glob
import os
import random
import re
from typing import Callable

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(os.path.dirname(HERE), "data")
TOKEN = re.compile(r'"[^"\n]*"|[%@^#!]?[\w.$-]+|[^\s\w]')
TYPES = ("f16", "bf16", "f32", "f64", "i1", "i8", "i16", "i32", "i64", "index")
ODD_TYPES = TYPES + ("i0", "i3", "i1024", "ui32", "si8", "f8E4M3FN", "complex<f32>",
                     "vector<4xf32>", "tensor<4xf32>", "memref<?xf32>", "!llvm.ptr", "none",
                     "memref<*xf32>", "vector<[4]xf32>", "tuple<>", "!gpu.async.token")
HUGE = ("0", "-1", "-2147483648", "2147483647", "2147483648", "4294967296",
        "9223372036854775807", "-9223372036854775808", "18446744073709551616",
        "99999999999999999999999999999", "1e308", "1e400", "-0.0", "0x7FC00000", "65536")
MEMORY_SPACES = ("-1", "1", "3", "4", "5", "7", "16777215", "16777216", "4294967296",
                 "#gpu.address_space<workgroup>", "#gpu.address_space<private>",
                 "#gpu.address_space<global>", '"x"')
UNICODE = ("\udc80", "\ud800", "\x00", "\u202e", "é", "😀", "\ufeff", "\u0301", "\x7f",
           "\U0010ffff", "\\", "\"", "\n")


def corpus() -> dict[str, str]:
    """The seed inputs: tests/data/*.mlir (bad/ and the runner programs included)."""
    files = sorted(glob.glob(os.path.join(DATA, "*.mlir")) +
                   glob.glob(os.path.join(DATA, "bad", "*.mlir")) +
                   glob.glob(os.path.join(DATA, "runner", "*.mlir")))
    out = {}
    for path in files:
        with open(path, encoding="utf-8") as fh:
            out[os.path.relpath(path, DATA)] = fh.read()
    return out


def _token_spans(text: str) -> list[tuple[int, int]]:
    return [m.span() for m in TOKEN.finditer(text)]


def token_edit(rng: random.Random, text: str, pool: list[str]) -> str:
    spans = _token_spans(text)
    for _ in range(rng.randint(1, 4)):
        if not spans:
            break
        a, b = rng.choice(spans)
        kind = rng.random()
        if kind < 0.4:
            text = text[:a] + rng.choice(pool) + text[b:]
        elif kind < 0.7:
            text = text[:a] + text[b:]
        else:
            text = text[:b] + " " + text[a:b] + text[b:]
        spans = _token_spans(text)
    return text


def type_change(rng: random.Random, text: str, pool: list[str]) -> str:
    hits = [m.span() for m in re.finditer(r"\b(f16|bf16|f32|f64|i1|i8|i16|i32|i64|index)\b",
                                          text)]
    for _ in range(rng.randint(1, 3)):
        if not hits:
            break
        a, b = rng.choice(hits)
        text = text[:a] + rng.choice(ODD_TYPES) + text[b:]
        hits = [m.span() for m in re.finditer(r"\b(f16|bf16|f32|f64|i32|i64|index)\b", text)]
    return text


def truncate(rng: random.Random, text: str, pool: list[str]) -> str:
    return text[:rng.randrange(len(text) + 1)]


def huge_constant(rng: random.Random, text: str, pool: list[str]) -> str:
    hits = [m.span() for m in re.finditer(r"(?<![\w%@#])-?\d+(\.\d+)?", text)]
    for _ in range(rng.randint(1, 3)):
        if not hits:
            break
        a, b = rng.choice(hits)
        text = text[:a] + rng.choice(HUGE) + text[b:]
        hits = [m.span() for m in re.finditer(r"(?<![\w%@#])-?\d+(\.\d+)?", text)]
    return text


def deep_nesting(rng: random.Random, text: str, pool: list[str]) -> str:
    depth = rng.choice((50, 500, 5000, 20000, 100000))
    style = rng.randrange(5)
    if style == 0:      # nested scf.if in a kernel
        body = "%t = arith.constant true\n" + "scf.if %t {\n" * depth + "}\n" * depth
        return _into_kernel(text, body)
    if style == 1:      # nested scf.execute_region in the host function
        body = "scf.execute_region {\n" * depth + ("scf.yield\n}\n" * depth)
        return _into_host(text, body)
    if style == 2:      # an affine map with deeply nested parentheses
        expr = "(" * depth + "d0" + ")" * depth
        return f"#map = affine_map<(d0) -> ({expr})>\n" + text
    if style == 3:      # nested array attribute
        return text.replace("module attributes {", "module attributes {x.deep = "
                            + "[" * depth + "]" * depth + ", ", 1)
    return "(" * depth + text          # unbalanced
    

def _into_kernel(text: str, body: str) -> str:
    m = re.search(r"gpu\.func @\w+\([^)]*\)[^{]*\{\n", text)
    return text[:m.end()] + body + text[m.end():] if m else body + text


def _into_host(text: str, body: str) -> str:
    m = re.search(r"func\.func @\w+\([^)]*\)[^{]*\{\n", text)
    return text[:m.end()] + body + text[m.end():] if m else body + text


def duplicate_symbol(rng: random.Random, text: str, pool: list[str]) -> str:
    starts = [m.start() for m in re.finditer(r"^\s*(gpu\.func|func\.func|gpu\.module) ", text,
                                             re.M)]
    if not starts:
        return text + text
    a = rng.choice(starts)
    indent = len(text[a:]) - len(text[a:].lstrip(" \n"))
    close = re.compile(r"^" + " " * (indent - 1 if indent else 0) + r"\}", re.M)
    m = close.search(text, a + indent + 1)
    b = m.end() if m else len(text)
    return text[:b] + "\n" + text[a:b] + text[b:]


def unicode(rng: random.Random, text: str, pool: list[str]) -> str:
    for _ in range(rng.randint(1, 3)):
        at = rng.randrange(len(text) + 1)
        text = text[:at] + rng.choice(UNICODE) + text[at:]
    return text


def huge_args(rng: random.Random, text: str, pool: list[str]) -> str:
    n = rng.choice((300, 1000, 5000, 20000))
    kind = rng.choice(("index", "f32", "memref<?xf32>"))
    params = ", ".join(f"%x{i}: {kind}" for i in range(n))
    func = f"  func.func @wide({params}) {{\n    return\n  }}\n"
    at = text.rfind("}")
    return text[:at] + func + text[at:] if at >= 0 else func


def memory_space(rng: random.Random, text: str, pool: list[str]) -> str:
    hits = [m.span() for m in re.finditer(r"memref<[^<>]*?x?(f32|i32|f16|i8|index)>", text)]
    if not hits:
        return text
    space = rng.choice(MEMORY_SPACES)
    for a, b in rng.sample(hits, k=min(len(hits), rng.randint(1, len(hits)))):
        text = text[:b - 1] + f", {space}" + text[b - 1:]
        break
    return text


def launch_size(rng: random.Random, text: str, pool: list[str]) -> str:
    value = rng.choice(HUGE)
    if rng.random() < 0.5:
        attr = rng.choice(("known_block_size", "known_grid_size", "nvvm.maxntid",
                           "nvvm.reqntid", "nvvm.minctasm", "nvvm.maxnreg"))
        entries = f"array<i32: {value}, 1, 1>" if "size" in attr or "ntid" in attr \
            else f"{value} : i32"
        return re.sub(r"\) kernel \{", f") kernel attributes {{{attr} = {entries}}} {{", text,
                      count=1)
    return re.sub(r"arith\.constant (\d+) : index", f"arith.constant {value} : index", text,
                  count=rng.randint(1, 3))


MUTATIONS: dict[str, Callable[[random.Random, str, list[str]], str]] = {
    "token": token_edit, "type": type_change, "truncate": truncate, "constant": huge_constant,
    "nesting": deep_nesting, "duplicate": duplicate_symbol, "unicode": unicode,
    "args": huge_args, "space": memory_space, "launch": launch_size,
}
WEIGHTS = {"token": 6, "type": 4, "truncate": 2, "constant": 3, "nesting": 1, "duplicate": 2,
           "unicode": 2, "args": 1, "space": 2, "launch": 2}


class Mutator:
    def __init__(self, seed: int) -> None:
        self.seed = seed
        self.inputs = corpus()
        self.names = sorted(self.inputs)
        self.pool = sorted({text[a:b] for text in self.inputs.values()
                            for a, b in _token_spans(text)})

    def case(self, index: int) -> tuple[str, str]:
        """(description, text) of case ``index``."""
        rng = random.Random(self.seed * 1_000_003 + index)
        name = rng.choice(self.names)
        text = self.inputs[name]
        done = []
        for _ in range(1 if rng.random() < 0.8 else 2):
            kind = rng.choices(list(WEIGHTS), weights=list(WEIGHTS.values()))[0]
            text = MUTATIONS[kind](rng, text, self.pool)
            done.append(kind)
        return f"{name}+{'+'.join(done)}", text
