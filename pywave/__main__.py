"""Command line: ``python -m pywave compile FILE.mlir [--target sm_90] [--format cubin]
[--dump-dir DIR] [--binary NAME=PATH]`` and ``python -m pywave export FILE.mlir --target sm_90
--name NAME -o DIR``.

Compiles without a GPU when ``--target`` is given and prints what each stage produced;
``export`` writes a shared library, header and pkg-config file for C (:mod:`pywave.aot`).
"""

from __future__ import annotations

import argparse
import logging
import sys

from . import api, isolation
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
    if artifacts.dump_path:
        lines.append(f"dumped into: {artifacts.dump_path}")
    if show_ir:
        for stage, text in artifacts.stages.items():
            lines += [f"// ----- {stage} -----", text]
    return "\n".join(lines)


def _binaries(specs: list[str]) -> dict[str, str]:
    out = {}
    for spec in specs:
        name, sep, path = spec.partition("=")
        if not sep or not name or not path:
            raise Error(f"--binary {spec!r}: expected NAME=PATH (a gpu.module name and a "
                        ".ptx/.cubin/.fatbin/.hsaco file)")
        out[name.lstrip("@")] = path
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pywave")
    sub = parser.add_subparsers(dest="command", required=True)
    comp = sub.add_parser("compile", help="compile an MLIR file and print its stages")
    exp = sub.add_parser("export", help="compile an MLIR file into a shared library for C")
    for p in (comp, exp):
        p.add_argument("file")
        p.add_argument("--target", help="chip, e.g. sm_90 (default: the GPU's)")
        p.add_argument("--format", default="auto", choices=["auto", "cubin", "ptx", "fatbin"])
        p.add_argument("-O", dest="opt_level", type=int, default=2)
        p.add_argument("--binary", action="append", default=[], metavar="NAME=PATH",
                       help="use this PTX/cubin/fatbin/hsaco for gpu.module NAME")
        p.add_argument("-v", "--verbose", action="store_true")
    comp.add_argument("--print-ir", action="store_true", help="print the IR after each stage")
    comp.add_argument("--dump-dir", metavar="DIR",
                      help="write every intermediate into a numbered folder under DIR")
    exp.add_argument("--name", required=True, help="C name: lib<NAME>.so, <NAME>_<func>()")
    exp.add_argument("-o", "--output", required=True, metavar="DIR", help="output folder")
    exp.add_argument("--runtime", default="copy", choices=["copy", "link"],
                     help="copy libwavert.so into DIR (default) or link pywave's by rpath")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING)
    try:
        with open(args.file, encoding="utf-8") as fh:
            text = fh.read()
        if args.command == "export":
            from . import aot
            done = aot.export(text, args.output, args.name, target=args.target,
                              opt_level=args.opt_level, format=args.format,
                              binaries=_binaries(args.binary), runtime_mode=args.runtime,
                              filename=args.file)
            print(f"target: {done.target}\nlibrary: {done.library}\nheader: {done.header}\n"
                  f"pkg-config: {done.pkgconfig}\nentry points: {', '.join(done.functions)}")
            return 0
        artifacts = isolation.build(text, target=args.target, opt_level=args.opt_level,
                                    format=args.format, filename=args.file,
                                    keep_stages=args.print_ir, dump_dir=args.dump_dir,
                                    binaries=_binaries(args.binary))
    except (Error, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(_summary(artifacts, args.print_ir))
    return 0


if __name__ == "__main__":
    sys.exit(main())
