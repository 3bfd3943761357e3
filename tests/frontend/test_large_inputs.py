"""Large and hostile inputs to the parse stage (issue 34): modules of many functions (a
stated limit, :data:`pywave.frontend.validate.MAX_FUNCTIONS`, and no quadratic step below
it), and megabytes of garbage holding strings (the nesting check reads strings as MLIR's
lexer does and stops where it stops, in one pass)."""

from __future__ import annotations

import random
import time

import pytest

import pywave
from pywave.frontend import validate
from pywave.host import signature


def functions(count: int, *, kernels: int = 0) -> str:
    lines = ["module {"]
    lines += [f"  func.func @f{i}(%x{i}: i32) -> i32 {{ return %x{i} : i32 }}"
              for i in range(count)]
    if kernels:
        lines.append("  gpu.module @k {")
        lines += [f"    gpu.func @g{i}() kernel {{ gpu.return }}" for i in range(kernels)]
        lines.append("  }")
    lines.append("}")
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("isolate", [True, False])
def test_more_functions_than_the_limit_are_refused_naming_count_and_limit(isolate):
    limit = validate.MAX_FUNCTIONS
    with pytest.raises(pywave.CompileError) as info:
        pywave.compile(functions(limit + 1), isolate=isolate, disk_cache=False, timeout=120)
    assert f"defines {limit + 1} functions, more than the {limit}" in str(info.value)
    assert "MAX_FUNCTIONS" in str(info.value)


def test_kernels_count_toward_the_function_limit():
    limit = validate.MAX_FUNCTIONS
    with pytest.raises(pywave.CompileError, match=f"defines {limit + 1} functions"):
        pywave.compile(functions(limit - 9, kernels=10), target="sm_90", format="ptx",
                       isolate=False, disk_cache=False)


def test_a_hundred_thousand_functions_are_refused_without_compiling_them():
    """The count is read right after parsing: no stage after it runs (the pipeline's
    stage log names only parse)."""
    stages = []
    from pywave import pipeline
    pipeline.on_stage(stages.append)
    try:
        with pytest.raises(pywave.CompileError, match="defines 100000 functions"):
            pywave.compile(functions(100_000), isolate=False, disk_cache=False)
    finally:
        pipeline.on_stage(None)
    assert stages == [], stages


def test_many_functions_compile_with_their_argument_names():
    module = pywave.compile(functions(3000), isolate=True, disk_cache=False, timeout=300)
    assert len(module.functions) == 3000
    last = [sig for sig in module.program.functions if sig.name == "f2999"]
    assert [p.name for p in last[0].params] == ["x2999"]
    assert module.f1234(41) == 41


def test_signatures_split_the_source_text_once(monkeypatch):
    """One split per module, not one per argument (that was quadratic: 10^4 functions
    spent seconds splitting)."""
    from mlir import ir
    splits = []
    real = signature.SourceLines.__init__

    def counting(self, text):
        splits.append(len(text))
        real(self, text)
    monkeypatch.setattr(signature.SourceLines, "__init__", counting)
    text = functions(200)
    with ir.Context() as ctx:
        module = ir.Module.parse(text, ctx)
        found = signature.read_signatures(module, text)
    assert len(found) == 200 and found[150].params[0].name == "x150"
    assert len(splits) == 1


# --------------------------------------------------------------------------------------------
# The nesting check and strings
# --------------------------------------------------------------------------------------------
def _mlir_reading(text: str, limit: int) -> tuple[tuple[int, int] | None, int]:
    """MLIR's lexer, one character at a time (mlir/lib/AsmParser/Lexer.cpp): strings with
    escapes, ``//`` comments; it stops at an unterminated string and at a backslash outside
    a string. Returns (line and column where brackets first nest deeper than ``limit``, or
    None; the offset where it stopped reading)."""
    depth, line, i, n = 0, 1, 0, len(text)
    while i < n:
        c = text[i]
        if c == '"':
            j = i + 1
            while j < n and text[j] not in '"\n':
                j += 2 if text[j] == "\\" and j + 1 < n and text[j + 1] != "\n" else 1
            if j >= n or text[j] != '"':
                return None, i
            i = j + 1
            continue
        if c == "\\":
            return None, i
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
            continue
        if c in "({[":
            depth += 1
            if depth > limit:
                return (line, i - (text.rfind("\n", 0, i) + 1) + 1), i
        elif c in ")}]":
            depth = max(depth - 1, 0)
        elif c == "\n":
            line += 1
        i += 1
    return None, n


def test_the_nesting_check_reads_strings_as_mlirs_lexer_does(monkeypatch):
    """On random texts of brackets, quotes, escapes, comments and line breaks: every
    refusal MLIR's reading makes, the check makes at the same line and column; a refusal
    it makes that MLIR's reading does not is past the point where MLIR stops reading (a
    backslash outside a string, which MLIR refuses anyway)."""
    monkeypatch.setattr(validate, "MAX_NESTING", 6)
    rng = random.Random(3434)
    pieces = ["(", ")", "{", "}", "[", "]", '"', "\\", '\\"', "\\\\", "//", "/", "\n", "a",
              " ", '"x"', '"(("', "é"]
    same = 0
    for _ in range(5000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 60)))
        want, stop = _mlir_reading(text, 6)
        try:
            validate.nesting(text)
            got = None
        except pywave.CompileError as exc:
            got = (exc.line, exc.column)
        if got == want:
            same += 1
            continue
        assert want is None and got is not None, (text, want, got)
        lines = text.split("\n")
        offset = sum(len(line) + 1 for line in lines[:got[0] - 1]) + got[1] - 1
        assert offset > stop, (text, got, stop)
    assert same > 4000


def test_brackets_in_strings_and_comments_do_not_nest():
    text = '"' + "(" * 5000 + '" // ' + "{" * 5000 + "\n" + '"\\"' + "[" * 5000 + '"'
    validate.nesting(text)


def test_deep_nesting_after_strings_with_escapes_is_found_at_its_column():
    text = 'a "x\\"(((" b\n  "q\\\\" ' + "(" * (validate.MAX_NESTING + 1)
    with pytest.raises(pywave.CompileError, match="deeper than 1000 levels at line 2, "
                                                  "column 1009"):
        validate.nesting(text)


def test_the_check_stops_at_the_first_unterminated_string():
    """MLIR stops lexing at a string that does not close on its line; brackets after it
    never reach its parser and are not counted."""
    validate.nesting('"never closed (\n' + "(" * 5000)
    with pytest.raises(pywave.CompileError, match="at line 1, column 1001"):
        validate.nesting("(" * 5000 + '\n"never closed')


def test_a_line_of_escaped_quotes_that_never_closes_is_one_pass():
    """``"\\"\\"\\"...`` with no closing quote: a scan that retries at every quote was
    quadratic (80 KB took 26 s); 20 MB is refused by MLIR's parser, the check in one
    pass."""
    text = "()" * 1001 + '"' + '\\"' * 10_000_000
    start = time.monotonic()
    validate.nesting(text)
    checked = time.monotonic() - start
    with pytest.raises(pywave.CompileError, match="cannot parse MLIR"):
        pywave.compile(text, isolate=False, disk_cache=False)
    assert checked < 20, checked


def test_fifty_megabytes_of_tokens_and_strings_are_refused_at_the_first_error():
    rng = random.Random(34)
    tokens = ['"abc"', '"x\\"y"', "(x)", '{ "}" }', '"[("', "%a = ", "@f", "//c(\n", "\n",
              ": i32", "[1, 2]", '"\\""', "foo"]
    text = "".join(rng.choice(tokens) for _ in range(8_000_000))[:50_000_000]
    start = time.monotonic()
    with pytest.raises(pywave.CompileError, match="cannot parse MLIR"):
        pywave.compile(text, isolate=True, disk_cache=False, timeout=120)
    assert time.monotonic() - start < 60
