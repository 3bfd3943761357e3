"""Sphinx directive ``c-header``: the C API reference rendered from libwavert's headers.

No doxygen: a header is read as libwavert writes it (libwavert/include/*.h; ``runner/NAME.h`` for libwavert_runner's). Its opening
comment becomes the section's text; then every group of lines that a blank line ends and
that declares something (a ``WAVERT_EXPORT`` function or variable, a ``typedef``, a
``struct``/``enum``, a ``#define WAVERT_...``/``MLIR_...`` constant, an ``extern`` function of
MLIR's runtime ABI) becomes an entry: a rubric naming it, the comment above it as text, and
the declaration as a C code block. Every exported name of the header must land in an entry:
one left out is a Sphinx warning (an error under ``-W``), so the page cannot silently fall
behind a header.

Usage, in a MyST page::

    ```{c-header} wavert.h
    ```
"""

from __future__ import annotations

import re
from pathlib import Path

from docutils import nodes
from docutils.parsers.rst import Directive
from sphinx.util import logging

log = logging.getLogger(__name__)

#: A line that begins a declaration worth an entry.
_DECL = re.compile(r"^\s*(WAVERT_EXPORT|typedef\b|struct\s+\w+\s*\{|enum\s+\w+\s*\{|"
                   r"#define\s+(WAVERT|MLIR|DL)\w*|extern\b|\w[\w\s\*]*\b(mgpu|_mlir|"
                   r"wave_|mlirAsync|print|verify|new|get|del|create|lex|end|sparse)\w*\s*\()")
#: An exported function or variable: its name is the identifier before ``(``, ``[`` or ``;``.
_EXPORTED = re.compile(r"WAVERT_(?:RUNNER_)?EXPORT[^;(]*?\b(\w+)\s*(\(|;|\[)", re.S)
_SEPARATOR = re.compile(r"^\s*/\*\s*-{3,}\s*\*/\s*$")


def _comment_text(lines: list[str]) -> str:
    """The text of a C comment block, its ``/*``, ``*/``, `` * `` and ``//`` marks removed."""
    out = []
    for line in lines:
        s = line.strip()
        s = re.sub(r"^/\*+\s?", "", s)
        s = re.sub(r"\s?\*+/$", "", s)
        s = re.sub(r"^\*\s?", "", s)
        s = re.sub(r"^//\s?", "", s)
        out.append(s)
    return "\n".join(out).strip()


def _name(decl: str) -> str:
    """The name an entry is shown under: a function's, a typedef's, a macro's."""
    m = re.match(r"\s*#define\s+(\w+)", decl) or (
        re.match(r"\s*#if", decl) and re.search(r"#define\s+(\w+)", decl))
    if m:
        return m.group(1)
    if re.match(r"\s*typedef\b", decl):
        m = re.search(r"\(\s*\*\s*(\w+)\s*\)", decl)      # a function pointer type
        if m:
            return m.group(1)
        idents = re.findall(r"(\w+)\s*;\s*$", decl.strip())
        if idents:
            return idents[-1]
    m = re.search(r"(\w+)\s*\(", decl)
    if m:
        return m.group(1)
    m = re.search(r"(struct|enum)\s+(\w+)", decl)
    return m.group(2) if m else decl.split()[0]


def parse_header(text: str) -> tuple[str, list[tuple[str, str, str]]]:
    """(opening comment, [(name, comment, declaration), ...]) of one header."""
    lines = text.splitlines()
    i, opening = 0, ""
    if lines and lines[0].lstrip().startswith("/*"):
        j = next(k for k, line in enumerate(lines) if "*/" in line)
        opening, i = _comment_text(lines[: j + 1]), j + 1
    entries: list[tuple[str, str, str]] = []
    comment: list[str] = []
    while i < len(lines):
        line = lines[i]
        if not line.strip():
            comment, i = [], i + 1
            continue
        if _SEPARATOR.match(line):
            comment, i = [], i + 1
            continue
        if line.lstrip().startswith("/*") or line.lstrip().startswith("//"):
            block = [line]
            if line.lstrip().startswith("/*"):
                while "*/" not in lines[i] and i + 1 < len(lines):
                    i += 1
                    block.append(lines[i])
            i += 1
            comment = comment + block
            continue
        group = []
        while i < len(lines) and lines[i].strip():
            group.append(lines[i])
            i += 1
        decl = "\n".join(group)
        if _DECL.match(group[0]) or "_EXPORT" in decl:
            entries.append((_name(decl), _comment_text(comment), decl))
        comment = []
    return opening, entries


class CHeader(Directive):
    """``c-header NAME``: one section per header of libwavert/include."""

    required_arguments = 1
    has_content = False

    def run(self) -> list[nodes.Node]:
        env = self.state.document.settings.env
        root = Path(env.srcdir).parent / "libwavert"
        name = self.arguments[0]
        path = root / (name if "/" in name else f"include/{name}")
        env.note_dependency(str(path))
        text = path.read_text()
        opening, entries = parse_header(text)
        out: list[nodes.Node] = []
        for para in opening.split("\n\n"):
            out.append(nodes.literal_block(para, para) if para.lstrip().startswith("-")
                       else nodes.paragraph(para, para))
        shown = set()
        for name, comment, decl in entries:
            out.append(nodes.rubric(name, name, ids=[nodes.make_id(f"c-{name}")]))
            for para in (p for p in comment.split("\n\n") if p.strip()):
                out.append(nodes.paragraph(para, para))
            block = nodes.literal_block(decl, decl)
            block["language"] = "c"
            out.append(block)
            shown.update(re.findall(r"\w+", decl))
        exported = {m.group(1) for m in _EXPORTED.finditer(text)}
        missing = sorted(exported - shown)
        if missing:
            log.warning("c-header %s: exported names in no entry: %s", path.name,
                        ", ".join(missing), location=(env.docname, self.lineno))
        if not entries:
            log.warning("c-header %s: no declaration found", path.name,
                        location=(env.docname, self.lineno))
        return out


def setup(app):
    app.add_directive("c-header", CHeader)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
