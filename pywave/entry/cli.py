"""Command line: ``pywave`` / ``python -m pywave``.

- ``compile FILE.mlir [--target sm_90[,sm_80]] [--format cubin] [--dump-dir DIR]
  [--binary NAME=PATH] [-o FILE]`` compiles (no GPU needed when ``--target`` is given) and
  prints what each stage produced, with ptxas' figures per kernel; ``-o`` writes the images;
  ``compile``, ``run`` and ``export`` compile in a worker process (:mod:`pywave.isolation`;
  ``PYWAVE_ISOLATE=0`` compiles in-process);
- ``export FILE.mlir --target sm_90 --name NAME -o DIR`` writes a shared library, header and
  pkg-config file for C (:mod:`pywave.entry.c_export`);
- ``opt FILE.mlir --pass-pipeline=PIPELINE [-o OUT]``: ``mlir-opt`` for the passes the MLIR
  Python bindings register, in a compile worker (a crash is an error with a reproducer);
  prints the module after the passes (or writes it to OUT). ``compile``, ``run``, ``export``
  and ``precompile`` take ``--pass-pipeline`` too: those passes run before pywave's lowering;
- ``precompile PATH... [-j N] [--target sm_90]`` fills the compile cache from .mlir files and
  folders in parallel (:mod:`pywave.entry.many`): one line per input (ok/cached/error) and a
  summary; exit status 1 when any input failed;
- ``info [--json]``: versions, the built runtime, the toolkit and tools found, driver, GPUs,
  cache (:mod:`pywave.entry.info`);
- ``cache info|list|clear``: the disk compile cache (:mod:`pywave.entry.cache_admin`);
- ``config --cflags --libs --pkg-config-path``: how a C program builds against this
  installation's libwavert (in the style of ``python3-config``);
- ``--version``.

Each subcommand is a function adding its parser to the subparsers and setting
``handler=function(args) -> exit status`` (:data:`COMMANDS`); :func:`parser` gives each
``-v``, which may also come before the subcommand. ``compile``, ``export`` and ``run`` read
standard input for the file ``-``. Exit status: 0 on success, 1 for a pywave error or an
unreadable file (one ``error:`` line on stderr, no traceback), 2 for a usage error, 130 for
Ctrl-C (one line), 141 when stdout is closed early (``| head``). ConfigWarnings are printed
once, through the log.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import sys
import time
import warnings
from typing import Callable

from .._version import __version__
from ..errors import ConfigWarning, Error
from ..frontend.source import read_input
from ..program import FORMAT_CHOICES

log = logging.getLogger("pywave")


# ----------------------------------------------------------------------------------------------
# compile, export
# ----------------------------------------------------------------------------------------------

def _summary(artifacts, show_ir: bool) -> str:
    lines = [f"target: {artifacts.target.chip} ({artifacts.target.backend})"]
    for stage, secs in artifacts.seconds.items():
        lines.append(f"stage {stage:13s} {secs * 1e3:8.1f} ms")
    for b in artifacts.binaries:
        lines.append(f"kernel binary @{b.name}: {b.format}, {len(b.data)} bytes, chip {b.chip}")
        lines += [f"  {_kernel_line(k)}" for k in b.kernels]
    for f in artifacts.host.functions:
        sig = ", ".join(f"{p.name}: {p.type}{' (written)' if p.written else ''}"
                        for p in f.params)
        if f.convention == "wave":   # the stream first, the objects may be any tensor
            sig = ", ".join(["stream: !llvm.ptr"] + [f"{p.name}: !llvm.ptr" for p in f.params])
            sig += "; Wave's convention"
        lines.append(f"host function @{f.name}({sig})")
    lines.append(f"host object code: {len(artifacts.object_code)} bytes")
    if artifacts.dump_path:
        lines.append(f"dumped into: {artifacts.dump_path}")
    if show_ir:
        for stage, text in artifacts.stages.items():
            lines += [f"// ----- {stage} -----", elide_blobs(text)]
    return "\n".join(lines)


def _kernel_line(k) -> str:
    """One kernel's ptxas figures (:class:`pywave.program.KernelInfo`) on one line."""
    return (f"kernel @{k.name} ({k.chip}): {k.registers} registers, "
            f"{k.spill_stores} bytes spill stores, {k.spill_loads} bytes spill loads, "
            f"{k.local_bytes} bytes local (stack frame), {k.shared_bytes} bytes static shared, "
            f"{k.constant_bytes} bytes constant; PTX ISA {k.ptx_isa // 10}.{k.ptx_isa % 10}")


def write_images(binaries, output: str) -> list[str]:
    """Write the kernel images for ``-o``: one image into the file ``output`` (into
    ``output/<name><ext>`` when ``output`` is a folder); several into the folder ``output``
    (created when missing), one ``<gpu.module name><ext>`` each. Returns the paths written."""
    from ..program import FORMATS
    if not binaries:
        raise Error(f"-o {output}: the module has no kernel images to write")
    if len(binaries) == 1 and not os.path.isdir(output):
        paths = [output]
    else:
        if os.path.exists(output) and not os.path.isdir(output):
            raise Error(f"-o {output}: the module has {len(binaries)} kernel images ("
                        f"{', '.join('@' + b.name for b in binaries)}); -o takes a folder for "
                        "several (each written as <name>.cubin/.ptx/.fatbin), and "
                        f"{output} is a file")
        os.makedirs(output, exist_ok=True)
        paths = [os.path.join(output, b.name + FORMATS[b.format].extension) for b in binaries]
    for b, path in zip(binaries, paths):
        try:
            with open(path, "wb") as fh:
                fh.write(b.file_data)
        except OSError as exc:
            raise Error(f"-o {output}: cannot write {path}: {exc.strerror}") from None
    return paths


#: A quoted string literal of MLIR or LLVM IR at least this long (characters, escapes
#: included) is a binary blob (cubin, fatbin, embedded PTX) for :func:`elide_blobs`.
BLOB_CHARS = 512
_LITERAL = re.compile(r'"((?:[^"\\\n]|\\.){%d,})"' % BLOB_CHARS)
_LITERAL_CHAR = re.compile(r"\\[0-9A-Fa-f]{2}|\\.|.", re.S)
_HEX_BLOB = re.compile(r"0x(?:[0-9A-Fa-f]{2})+")


def elide_blobs(text: str) -> str:
    """``text`` with each long string literal (a kernel image inside ``gpu.binary``, an LLVM
    global, a ``dense<"0x...">`` hex blob) replaced by ``"<N bytes elided>"``, N its length
    in bytes (MLIR and LLVM write a byte as ``\\XX``): --print-ir shows the PTX as text of
    its own."""
    return _LITERAL.sub(lambda m: f'"<{_literal_bytes(m.group(1))} bytes elided>"', text)


def _literal_bytes(inner: str) -> int:
    if _HEX_BLOB.fullmatch(inner):
        return (len(inner) - 2) // 2
    return len(_LITERAL_CHAR.findall(inner))


def _binaries(specs: list[str]) -> dict[str, str]:
    out = {}
    for spec in specs:
        name, sep, path = spec.partition("=")
        if not sep or not name or not path:
            raise Error(f"--binary {spec!r}: expected NAME=PATH (a gpu.module name and a "
                        ".ptx/.cubin/.fatbin/.hsaco file)")
        out[name.lstrip("@")] = path
    return out


def _add_compile_options(p: argparse.ArgumentParser) -> None:
    """The input and the options of a compile (``compile`` and ``export``): target, format,
    host opt level, replaced images, the lowering options and a pass pipeline."""
    from . import run
    p.add_argument("file", help="MLIR file ('-' reads standard input)")
    p.add_argument("--target", help="chip, e.g. sm_90, or several: sm_80,sm_90 (one fatbin "
                   "per gpu.module); default: the GPU's")
    p.add_argument("--format", default="auto", choices=FORMAT_CHOICES)
    p.add_argument("-O", dest="opt_level", type=int, default=2,
                   help="LLVM optimisation level of the host code (0-3)")
    p.add_argument("--binary", action="append", default=[], metavar="NAME=PATH",
                   help="use this PTX/cubin/fatbin/hsaco for gpu.module NAME")
    run.add_lowering_options(p)
    run.add_pass_pipeline_option(p)


def _run_compile(args: argparse.Namespace) -> int:
    from .. import lookup, pipeline
    from . import run
    text, filename = read_input(args.file)
    started = time.perf_counter()
    artifacts = lookup.build_artifacts(pipeline.Pipeline(
        text, target=args.target, opt_level=args.opt_level, format=args.format,
        filename=filename, replacements=_binaries(args.binary),
        keep_stages=args.print_ir, dump_dir=args.dump_dir,
        lowering=run.lowering_options(args), passes=args.passes))
    log.info("compiled %s for %s in %.1f ms", filename, artifacts.target.chip,
             (time.perf_counter() - started) * 1e3)
    print(_summary(artifacts, args.print_ir))
    if args.output is not None:
        for path in write_images(artifacts.binaries, args.output):
            print(f"wrote: {path}")
    return 0


def register_compile(sub) -> None:
    p = sub.add_parser("compile", help="compile an MLIR file and print its stages")
    _add_compile_options(p)
    p.add_argument("--print-ir", action="store_true", help="print the IR after each stage")
    p.add_argument("--dump-dir", metavar="DIR",
                   help="write every intermediate into a numbered folder under DIR")
    p.add_argument("-o", "--output", metavar="FILE",
                   help="write the kernel image (PTX, cubin or fatbin) to FILE; a module of "
                        "several gpu.modules: into the folder FILE, one <name>.<ext> each")
    p.set_defaults(handler=_run_compile)


def _run_export(args: argparse.Namespace) -> int:
    from . import c_export, run
    text, filename = read_input(args.file)
    done = c_export.export(text, args.output, args.name, target=args.target,
                           opt_level=args.opt_level, format=args.format,
                           binaries=_binaries(args.binary), runtime_mode=args.runtime,
                           filename=filename, lowering=run.lowering_options(args),
                           passes=args.passes)
    print(f"target: {done.target}\nlibrary: {done.library}\nheader: {done.header}\n"
          f"pkg-config: {done.pkgconfig}\nentry points: {', '.join(done.functions)}")
    return 0


def register_export(sub) -> None:
    p = sub.add_parser("export", help="compile an MLIR file into a shared library for C")
    _add_compile_options(p)
    p.add_argument("--name", required=True, help="C name: lib<NAME>.so, <NAME>_<func>()")
    p.add_argument("-o", "--output", required=True, metavar="DIR", help="output folder")
    p.add_argument("--runtime", default="copy", choices=["copy", "link"],
                   help="copy libwavert.so into DIR (default) or link pywave's by rpath")
    p.set_defaults(handler=_run_export)


def _run_opt(args: argparse.Namespace) -> int:
    from .. import lookup, pipeline
    text, filename = read_input(args.file)
    done = lookup.build_artifacts(pipeline.Pipeline(text, filename=filename, passes=args.passes,
                                                   passes_only=True))
    out = done.text if done.text.endswith("\n") else done.text + "\n"
    if args.output in (None, "-"):
        sys.stdout.write(out)
    else:
        with open(args.output, "w", encoding="utf-8") as fh:
            fh.write(out)
    return 0


def register_opt(sub) -> None:
    from . import run
    p = sub.add_parser("opt", help="run MLIR passes on a file and print the result "
                       "(mlir-opt for the bindings' passes, crash-isolated)")
    p.add_argument("file", help="MLIR file ('-' reads stdin)")
    run.add_pass_pipeline_option(p)
    p.add_argument("-o", "--output", metavar="OUT", help="write the result here (default "
                   "stdout)")
    p.set_defaults(handler=_run_opt)


def _mlir_files(paths: list[str]) -> list[str]:
    """The inputs of ``precompile``: each file as given, each folder's ``*.mlir`` (recursive,
    sorted); a path that does not exist is an Error naming it."""
    found = []
    for path in paths:
        if os.path.isdir(path):
            inside = [os.path.join(root, name) for root, _, names in os.walk(path)
                      for name in names if name.endswith(".mlir")]
            found += sorted(inside)
        elif os.path.exists(path):
            found.append(path)
        else:
            raise Error(f"precompile: {path!r} is neither a file nor a folder")
    return found


def _run_precompile(args: argparse.Namespace) -> int:
    import pathlib

    from . import many, run
    from .. import cache
    files = _mlir_files(args.paths)
    if not files:
        raise Error(f"precompile: no .mlir files in {', '.join(args.paths)}")
    root = cache.directory()
    if root is None:
        raise Error("precompile: the disk compile cache is off or unusable ($PYWAVE_CACHE, "
                    "$PYWAVE_CACHE_DIR): there is nothing to fill")
    why = cache.unwritable(root)
    if why:
        raise Error(f"precompile: cannot write into the compile cache folder: {why}")
    started = time.perf_counter()
    outcomes = many.run([pathlib.Path(f) for f in files], jobs=args.jobs, load=False,
                        target=args.target, opt_level=args.opt_level, format=args.format,
                        lowering=run.lowering_options(args), passes=args.passes)
    for o in outcomes:
        if o.status == many.FAILED:
            message = str(o.error).strip().replace("\n", "\n    ")
            print(f"error     {o.name}: {type(o.error).__name__}: {message}")
        else:
            secs = f" ({o.seconds:.2f} s)" if o.status == many.COMPILED else ""
            print(f"{'ok' if o.status == many.COMPILED else 'cached':9s} {o.name}{secs}")
    counts = {s: sum(o.status == s for o in outcomes)
              for s in (many.COMPILED, many.CACHED, many.FAILED)}
    print(f"precompile: {len(outcomes)} inputs: {counts[many.COMPILED]} compiled, "
          f"{counts[many.CACHED]} cached, {counts[many.FAILED]} failed in "
          f"{time.perf_counter() - started:.2f} s into {cache.directory()}")
    return 1 if counts[many.FAILED] else 0


def register_precompile(sub) -> None:
    from . import run
    p = sub.add_parser("precompile", help="fill the compile cache from .mlir files, in "
                       "parallel (ahead of time)")
    p.add_argument("paths", nargs="+", metavar="PATH",
                   help="an .mlir file, or a folder searched for *.mlir")
    p.add_argument("-j", "--jobs", type=int, default=None,
                   help="compile worker processes at once (default: the CPU count)")
    p.add_argument("--target", help="chip, e.g. sm_90, or several: sm_80,sm_90 (one fatbin "
                   "per gpu.module); default: the GPU's")
    p.add_argument("--format", default="auto", choices=FORMAT_CHOICES)
    p.add_argument("-O", dest="opt_level", type=int, default=2,
                   help="LLVM optimisation level of the host code (0-3)")
    run.add_lowering_options(p)
    run.add_pass_pipeline_option(p)
    p.set_defaults(handler=_run_precompile)


# ----------------------------------------------------------------------------------------------
# info, cache, config
# ----------------------------------------------------------------------------------------------

def _size(n: int) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def _run_info(args: argparse.Namespace) -> int:
    from . import info
    data = info.collect()
    if args.json:
        print(json.dumps(data, indent=2))
        return 0
    for topic, values in data.items():
        print(f"{topic}:")
        if isinstance(values, list):
            for item in values:
                print("  " + ", ".join(f"{k} {v}" for k, v in item.items()))
            if not values:
                print("  (none found)")
            continue
        for key, value in values.items():
            shown = _size(value) if key in ("bytes", "max bytes") else \
                "-" if value is None else value
            print(f"  {key}: {shown}")
    return 0


def register_info(sub) -> None:
    p = sub.add_parser("info", help="versions, toolkit, driver, GPUs and cache of this install")
    p.add_argument("--json", action="store_true", help="print the same as JSON")
    p.set_defaults(handler=_run_info)


def _run_cache(args: argparse.Namespace) -> int:
    from . import cache_admin
    summary = cache_admin.summary()
    if summary.directory is None:
        print("the disk compile cache is off (PYWAVE_CACHE) or its folder is unusable "
              "(run with -v for the reason)")
        return 0
    if args.action == "info":
        print(f"directory: {summary.directory}\nentries: {summary.entries}\n"
              f"size: {_size(summary.total_bytes)} of {_size(summary.max_bytes)}")
    elif args.action == "list":
        for e in cache_admin.entries():
            used = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(e.last_used))
            what = f"unreadable ({e.problem})" if e.chip is None else \
                f"{e.chip} {','.join(e.functions or ())}"
            print(f"{e.key}  {_size(e.size):>10}  {used}  {what}")
    else:
        done = cache_admin.clear_all()
        noun = "entry" if done.entries == 1 else "entries"
        print(f"removed {done.entries} {noun} ({done.files} files, {_size(done.freed)}) from "
              f"{summary.directory}")
        if done.failed:
            for name, reason in done.failed:
                print(f"pywave cache clear: cannot remove {name}: {reason}", file=sys.stderr)
            print(f"pywave cache clear: {len(done.failed)} files left in "
                  f"{summary.directory}", file=sys.stderr)
            return 1
    return 0


def register_cache(sub) -> None:
    p = sub.add_parser("cache", help="show or clear the disk compile cache")
    p.add_argument("action", choices=["info", "list", "clear"],
                   help="info: folder, count, size; list: one line per entry (least recently "
                        "used first); clear: remove every entry")
    p.set_defaults(handler=_run_cache)


def _run_config(args: argparse.Namespace) -> int:
    from .. import layout
    lines = []
    if args.cflags:
        lines.append(" ".join(layout.cflags()))
    if args.libs:
        lines.append(" ".join(layout.libs()))
    if args.pkg_config_path:
        lines.append(layout.pkgconfig_dir())
    if not lines:
        sys.stderr.write("usage error: config: give --cflags, --libs and/or "
                         "--pkg-config-path\n")
        return 2
    print("\n".join(lines))
    return 0


def register_config(sub) -> None:
    p = sub.add_parser("config", help="C compiler and linker flags for libwavert",
                       description="cc app.c $(pywave config --cflags --libs), or "
                       "PKG_CONFIG_PATH=$(pywave config --pkg-config-path) "
                       "pkg-config --cflags --libs libwavert. The flags carry a run path: the "
                       "program starts without LD_LIBRARY_PATH.")
    p.add_argument("--cflags", action="store_true", help="-I of wavert.h")
    p.add_argument("--libs", action="store_true", help="-L, run path and -lwavert")
    p.add_argument("--pkg-config-path", action="store_true",
                   help="the folder holding libwavert.pc")
    p.set_defaults(handler=_run_config)


def register_run(sub) -> None:
    from . import run
    p = sub.add_parser("run", help="compile an MLIR file and run its entry function "
                       "(mlir-runner for GPU programs)")
    run.add_arguments(p)
    p.set_defaults(handler=run.main)


#: The subcommands, in help order: each adds its parser to the subparsers and sets ``handler``.
COMMANDS: list[Callable] = [register_compile, register_run, register_export,
                            register_opt, register_precompile, register_info, register_cache,
                            register_config]


def parser() -> argparse.ArgumentParser:
    """The command line: the subcommands of :data:`COMMANDS`, each given ``-v``."""
    top = argparse.ArgumentParser(prog="pywave", description="Run GPU programs written in "
                                  "upstream MLIR: compile, export for C, inspect.")
    top.add_argument("--version", action="version", version=f"pywave {__version__}")
    # -v before the subcommand (`pywave -v compile ...`); a subcommand's own -v adds to it
    # (a separate dest: argparse lets a subparser's default overwrite the top level's value).
    top.add_argument("-v", "--verbose", dest="global_verbose", action="count", default=0,
                     help="-v: compile times and cache hits (INFO); -vv: every stage and tool "
                          "found (DEBUG); also accepted after the command")
    sub = top.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for register in COMMANDS:
        register(sub)
    for command in sub.choices.values():
        command.add_argument("-v", "--verbose", action="count", default=0,
                             help="-v: compile times and cache hits (INFO); -vv: every stage "
                                  "and tool found (DEBUG)")
    top.set_defaults(parsers=sub.choices)
    return top


def _configure_logging(verbosity: int) -> None:
    """pywave's loggers at INFO (-v) or DEBUG (-vv) on stderr; other libraries stay quiet."""
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr,
                        format="%(name)s: %(message)s")
    if verbosity:
        logging.getLogger("pywave").setLevel(logging.DEBUG if verbosity > 1 else logging.INFO)


def main(argv: list[str] | None = None) -> int:
    """Run the command line ``argv`` (default ``sys.argv[1:]``); returns the exit status."""
    try:
        top = parser()
        args, extra = top.parse_known_args(argv)
        if extra:   # the usage of the command the argument was given to
            given = list(sys.argv[1:] if argv is None else argv)
            before = given.index(extra[0]) < given.index(args.command) \
                if extra[0] in given and args.command in given else False
            owner = top if before else args.parsers[args.command]
            owner.error(f"unrecognized arguments: {' '.join(extra)}")
        _configure_logging(args.verbose + args.global_verbose)
        with warnings.catch_warnings():
            # ConfigWarnings are logged as well (pywave.errors.warn_config): print them once.
            warnings.simplefilter("ignore", ConfigWarning)
            status = args.handler(args)
        sys.stdout.flush()
    except KeyboardInterrupt:
        # Ctrl-C: one line, and the shell's status for a SIGINT death (128 + 2).
        print("pywave: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader left (`| head`): stop quietly, and keep the exit-time flush of the
        # remaining buffer from raising again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except Error as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return status


if __name__ == "__main__":
    sys.exit(main())
