"""Command line: ``python -m pywave compile FILE.mlir [--target sm_90] [--format cubin]``.

Compiles without a GPU when ``--target`` is given and prints what each stage produced.
"""

from __future__ import annotations

import argparse
import logging
import sys

from . import api
from .errors import Error


def _summary(artifacts: api.Artifacts, show_ir: bool) -> str:
    lines = [f"target: {artifacts.target.chip} ({artifacts.target.backend})"]
    for stage, secs in artifacts.seconds.items():
        lines.append(f"stage {stage:13s} {secs * 1e3:8.1f} ms")
    for b in artifacts.binaries:
        lines.append(f"kernel binary @{b.name}: {b.format}, {len(b.data)} bytes, chip {b.chip}")
    for f in artifacts.host.functions:
        sig = ", ".join(f"{p.name}: {p.type}{' (written)' if p.written else ''}"
                        for p in f.params)
        lines.append(f"host function @{f.name}({sig})")
    lines.append(f"host object code: {len(artifacts.object_code)} bytes")
    if show_ir:
        for stage, text in artifacts.stages.items():
            lines += [f"// ----- {stage} -----", text]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pywave")
    sub = parser.add_subparsers(dest="command", required=True)
    comp = sub.add_parser("compile", help="compile an MLIR file and print its stages")
    comp.add_argument("file")
    comp.add_argument("--target", help="chip, e.g. sm_90 (default: the GPU's)")
    comp.add_argument("--format", default="auto", choices=["auto", "cubin", "ptx", "fatbin"])
    comp.add_argument("-O", dest="opt_level", type=int, default=2)
    comp.add_argument("--print-ir", action="store_true", help="print the IR after each stage")
    comp.add_argument("-v", "--verbose", action="store_true")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING)
    try:
        with open(args.file, encoding="utf-8") as fh:
            text = fh.read()
        artifacts = api.build(text, target=args.target, opt_level=args.opt_level,
                              format=args.format, filename=args.file, keep_stages=args.print_ir)
    except (Error, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(_summary(artifacts, args.print_ir))
    return 0


if __name__ == "__main__":
    sys.exit(main())
