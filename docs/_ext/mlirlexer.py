"""A small Pygments lexer for MLIR's textual form, registered as ``mlir`` for code blocks.

Pygments has none; this one only colours what a reader scans for (comments, SSA values,
symbols, types, attributes, numbers, strings) and takes every other character as text, so no
input makes it fail.
"""

from pygments.lexer import RegexLexer
from pygments.token import Comment, Keyword, Name, Number, String, Text


class MlirLexer(RegexLexer):
    name = "MLIR"
    aliases = ["mlir"]
    tokens = {
        "root": [
            (r"//.*?$", Comment.Single),
            (r'"(\\\\|\\"|[^"])*"', String),
            (r"%[\w.$-]+", Name.Variable),
            (r"\^[\w.$-]+", Name.Label),
            (r"@[\w.$-]+", Name.Function),
            (r"#[\w.$-]+", Name.Attribute),
            (r"!\w[\w.$-]*", Keyword.Type),
            (r"\b(memref|tensor|vector|index|f16|bf16|f32|f64|i1|i8|i16|i32|i64)\b",
             Keyword.Type),
            (r"\b\d+(\.\d+)?([eE][-+]?\d+)?\b", Number),
            (r"\b[a-z_]+\.[\w.]+\b", Keyword),
            (r"\s+", Text),
            (r".", Text),
        ],
    }


def setup(app):
    app.add_lexer("mlir", MlirLexer)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
