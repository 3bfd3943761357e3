"""Ahead-of-time export for C: ``pywave.export(text, out_dir, name, target="sm_90")``.

(This module is ``c_export``, not ``export``, so that ``pywave.export`` stays the function.)

Writes into ``out_dir``:

- ``lib<name>.so``: the host code (object code from the same pipeline as ``compile``, built
  for the generic CPU, all its symbols hidden, kernel images embedded) plus a generated C
  wrapper with one entry point per host function::

      int32_t <name>_<func>(const DLTensor *a, ..., <scalar C types>, void *stream);

  returning a ``wavert_status``; ``<name>_last_error()`` (the message of the last failure on
  this thread) and ``<name>_unload()`` (releases the loaded kernels through the host code's
  own ``_pywave_release_kernels``, as ``CompiledModule.close`` does);
- ``<name>.h`` (the declarations, with each argument's MLIR type), ``wavert.h`` (DLTensor,
  status codes, device memory helpers), ``wavert_jit.h`` (the call bracket the wrapper
  uses), ``<name>.pc`` (pkg-config, absolute paths), ``<name>_wrapper.c`` and
  ``<name>_host.o`` (the inputs of the link; the host object comes from one run of the
  :class:`pywave.pipeline.Pipeline` with ``library=True``, in a compile worker as
  :func:`pywave.compile`'s: :mod:`pywave.isolation`);
- ``libwavert.so``: a copy of pywave's runtime, found through ``$ORIGIN``, so the folder is
  self-contained and survives changes to the Python installation (``runtime="link"``
  instead links the pywave package's copy by absolute rpath). The run path is a DT_RPATH
  (``--disable-new-dtags``), which the dynamic loader searches before ``LD_LIBRARY_PATH``:
  an unrelated ``libwavert.so`` there is not picked up. The loader shares a library by
  soname, so in one process every export (and pywave itself) uses the first
  ``libwavert.so`` loaded: exports made by one pywave version coexist.

Generated C names: the wrapper's parameters are ``pw_arg<i>`` (its helpers ``pw_*``); the
header keeps each MLIR argument name where it is a safe C identifier (not a C/C++ keyword,
a C library name, ``*_t``, a reserved form, or a libwavert/``pw_`` name), else ``arg<i>``
(with the MLIR name in the comment). An export name or host function whose global names
(``<name>_<f>``, ``<name>_last_error``, ``<name>_unload``, ``<NAME>_H``, ``<NAME>_TARGET``)
would clash is a CompileError naming both.

The shared library is linked with the system C compiler (``$CC``, else ``cc``). No GPU is
needed to export; a program calling an entry point on a machine without one gets
``WAVERT_ERROR_UNAVAILABLE`` and a message naming the missing driver.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shlex
import shutil
import subprocess
from typing import Mapping

from .. import layout, lookup, pipeline, runtime
from .._version import __version__
from ..errors import CompileError
from ..frontend.source import MlirModule, text_and_name
from ..lowering import LoweringOptions, options_of
from ..program import (DTYPES, DYNAMIC, PACKED_PREFIX, RELEASE_KERNELS, SIGNLESS,
                       WAVE_CONVENTION, HostSignature, Param, Target)

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
#: Keywords of C (C11 and C23) and C++ (the header is usable from both).
_KEYWORDS = frozenset("""
    auto break case char const continue default do double else enum extern float for goto if
    inline int long register restrict return short signed sizeof static struct switch typedef
    union unsigned void volatile while _Alignas _Alignof _Atomic _Bool _Complex _Generic
    _Imaginary _Noreturn _Static_assert _Thread_local alignas alignof bool constexpr false
    nullptr static_assert thread_local true typeof typeof_unqual and and_eq asm bitand bitor
    catch char8_t char16_t char32_t class compl concept consteval constinit const_cast
    co_await co_return co_yield decltype delete dynamic_cast explicit export friend mutable
    namespace new noexcept not not_eq operator or or_eq private protected public
    reinterpret_cast requires static_cast template this throw try typeid typename using
    virtual wchar_t xor xor_eq""".split())
#: Names the export's headers and the wrapper's includes (stdint, stddef, stdbool, stdarg,
#: stdio, string) define or that the C library may define as macros: never used as a C
#: parameter name, nor as an entry point name.
_LIBC = frozenset("""
    NULL EOF BUFSIZ FILE errno assert offsetof size_t ssize_t ptrdiff_t wchar_t max_align_t
    intptr_t uintptr_t intmax_t uintmax_t va_list va_start va_end va_arg va_copy stdin stdout
    stderr memcpy memmove memset memcmp memchr strlen strcpy strncpy strcat strncat strcmp
    strncmp strchr strrchr strstr strtok strerror strdup strndup printf fprintf sprintf
    snprintf vprintf vfprintf vsprintf vsnprintf puts fputs putc putchar getc getchar fgetc
    fputc fopen fclose fread fwrite fflush malloc calloc realloc free abort exit atexit
    quick_exit at_quick_exit aligned_alloc static_assert noreturn complex imaginary I
    unreachable main signal raise setjmp longjmp""".split())
#: Prefixes of libwavert (wavert.h, wavert_jit.h, dlpack.h) and of the wrapper's helpers.
_RESERVED_PREFIXES = ("wavert_", "WAVERT_", "DL", "kDL", "pw_", "PW_", "dlpack", "DLPACK")
#: MLIR scalar kind -> (C parameter type, C expression giving the value to store): one entry
#: per kind of ``pywave._native.SCALAR_KINDS`` (``tests/test_tables.py`` checks); the value is
#: stored as its :data:`pywave.program.DTYPES` row's C type.
SCALAR_C = {
    "i1": ("bool", "(uint8_t)({0} ? 1 : 0)"),
    "i8": ("int8_t", "{0}"),
    "i16": ("int16_t", "{0}"),
    "i32": ("int32_t", "{0}"),
    "i64": ("int64_t", "{0}"),
    "index": ("int64_t", "{0}"),
    "f16": ("double", "wavert_f16_from_f64({0})"),
    "bf16": ("double", "wavert_bf16_from_f64({0})"),
    "f32": ("float", "{0}"),
    "f64": ("double", "{0}"),
}


@dataclasses.dataclass(frozen=True)
class Export:
    """What :func:`export` wrote: paths of the library, header and pkg-config file."""

    library: str
    header: str
    pkgconfig: str
    functions: tuple[str, ...]      # C entry points
    target: str


def export(text: "str | os.PathLike[str] | MlirModule", out_dir: str | os.PathLike, name: str,
           *, target: str | None = None,
           opt_level: int = 2, format: str = "auto", binaries: dict | None = None,
           runtime_mode: str = "copy", filename: str = "<input>",
           cc: str | None = None,
           lowering: LoweringOptions | Mapping | None = None,
           passes: str | None = None) -> Export:
    """Compile ``text`` ahead of time into a shared library that C programs link.

    Parameters
    ----------
    text : str, os.PathLike or MLIR module object
        The MLIR module (text or a module object), or a path to read it from, as for
        :func:`pywave.compile` (``filename`` defaults to the path).
    out_dir : path
        Folder to write into (created).
    name : str
        A C identifier: the library is ``lib<name>.so`` and host function ``f`` becomes
        ``<name>_f``.
    target, opt_level, format, binaries
        As for :func:`pywave.compile` (``target`` is required without a GPU).
    runtime_mode : str
        ``"copy"`` (default): copy libwavert.so into ``out_dir`` and find it through
        ``$ORIGIN``. ``"link"``: link the pywave package's libwavert.so by absolute rpath.
    cc : str, optional
        C compiler command (default ``$CC``, else ``cc``).
    lowering : LoweringOptions or dict, optional
        The lowering and kernel compile options, as for :func:`pywave.compile`.
    passes : str, optional
        Your pass pipeline, run before pywave's lowering, as for :func:`pywave.compile`.

    Returns
    -------
    Export
        The paths written and the C entry points.

    Raises
    ------
    CompileError
        A compile failure, a name or host function that is not a C identifier, a name longer
        than :data:`MAX_NAME` characters, an output folder whose path a .pc file cannot
        carry (naming the character; :func:`check_output_folder`) or that cannot be created
        or written, a ``cc`` that is no command line, or a failing C compiler/linker (with
        its output).
    TypeError
        ``cc`` is not a str.
    """
    if not isinstance(name, str) or not _IDENT.match(name):
        raise CompileError(f"export name {name!r} is not a C identifier")
    if len(name) > MAX_NAME:
        raise CompileError(f"export name {name[:20]}... is {len(name)} characters long; at "
                           f"most {MAX_NAME} fit in the file name {name[:8]}..._wrapper.c "
                           f"({NAME_MAX} bytes per file name)")
    _check_names(name, ())
    if runtime_mode not in ("copy", "link"):
        raise CompileError(f"runtime_mode must be 'copy' or 'link', got {runtime_mode!r}")
    # Absolute paths: a folder named "-foo" can never read as a compiler option.
    out = os.path.abspath(os.fspath(out_dir))
    check_output_folder(out)
    compiler = _cc_command(cc)
    if not os.path.exists(runtime.LIBRARY):
        raise CompileError(f"libwavert.so is missing from the pywave package "
                           f"({runtime.LIBRARY}); install pywave (pip install . or meson "
                           "install) before exporting")
    text, path = text_and_name(text)
    filename = path if filename == "<input>" else filename
    art = lookup.build_artifacts(pipeline.Pipeline(
        text, target=target, opt_level=opt_level, format=format, filename=filename,
        replacements=binaries, library=True, lowering=options_of(lowering), passes=passes))
    for fn in art.host.functions:
        if not _IDENT.match(fn.name):
            raise CompileError(f"host function @{fn.name} is not a C identifier; rename it "
                               "to export it")
        if fn.results:
            raise CompileError(f"host function @{fn.name} returns values; exported C entry "
                               "points return only a status (write results into memref "
                               "arguments to export it)")
    _check_names(name, art.host.functions)
    pywave_dir = os.path.dirname(runtime.LIBRARY)
    if runtime_mode == "link":     # pywave's folder goes into the .pc too
        check_output_folder(pywave_dir, "pywave's library folder (runtime_mode='link')",
                            "use runtime_mode='copy', or install pywave in a folder")
    pc_text = pkgconfig(name, out, art.target.chip, filename,
                        None if runtime_mode == "copy" else pywave_dir)
    try:
        _write_inputs(out, name, art, runtime_mode)
    except OSError as exc:
        raise CompileError(f"export: cannot write into the output folder {out}: "
                           f"{exc.strerror or exc}"
                           + (f" ({exc.filename})" if exc.filename else "")) from None
    libdir, rpath = (out, "$ORIGIN") if runtime_mode == "copy" else (pywave_dir, pywave_dir)
    library = os.path.join(out, f"lib{name}.so")
    host_o = os.path.join(out, f"{name}_host.o")
    # libwavert by path (recorded by its soname); the run path as DT_RPATH, which the loader
    # searches before LD_LIBRARY_PATH (DT_RUNPATH comes after it), passed to the linker
    # verbatim (-Xlinker: a comma in the path is not split).
    command = compiler + [
        "-shared", "-fPIC", "-O2", "-std=c11", "-fvisibility=hidden", "-I", out,
        "-o", library, os.path.join(out, f"{name}_wrapper.c"), host_o,
        os.path.join(libdir, "libwavert.so"), "-Wl,--disable-new-dtags",
        "-Xlinker", "-rpath", "-Xlinker", rpath, "-Wl,-z,defs"]
    try:
        proc = subprocess.run(command, capture_output=True, text=True, timeout=300)
    except OSError as exc:
        raise CompileError(f"export needs a C compiler to link lib{name}.so: "
                           f"{command[0]}: {exc.strerror or exc} (set CC)") from None
    if proc.returncode != 0 or not os.path.isfile(library) or not os.path.getsize(library):
        raise CompileError(f"linking lib{name}.so failed ({shlex.join(command)}):\n"
                           f"{proc.stderr.strip() or 'no library was written'}")
    pc = os.path.join(out, f"{name}.pc")
    try:
        with open(pc, "w", encoding="ascii") as fh:
            fh.write(pc_text)
    except OSError as exc:
        raise CompileError(f"export: cannot write {pc}: {exc.strerror or exc}") from None
    return Export(library, os.path.join(out, f"{name}.h"), pc,
                  tuple(f"{name}_{fn.name}" for fn in art.host.functions), art.target.chip)


def _write_inputs(out: str, name: str, art: "pipeline.Artifacts", runtime_mode: str) -> None:
    """Create ``out`` and write the link's inputs there: header, wrapper, host object, the
    runtime headers and (``copy`` mode) libwavert.so. OSError as the system raises it."""
    os.makedirs(out, exist_ok=True)
    files = {
        f"{name}.h": header(name, art.host.functions, art.target),
        f"{name}_wrapper.c": wrapper(name, art.host.functions, art.target),
    }
    for fname, content in files.items():
        with open(os.path.join(out, fname), "w", encoding="utf-8") as fh:
            fh.write(content)
    with open(os.path.join(out, f"{name}_host.o"), "wb") as fh:
        fh.write(art.object_code)
    for runtime_header in ("wavert.h", "wavert_jit.h"):
        shutil.copyfile(_wavert_header(runtime_header), os.path.join(out, runtime_header))
    if runtime_mode == "copy":
        shutil.copyfile(runtime.LIBRARY, os.path.join(out, "libwavert.so"))


#: Longest file name of the system (bytes); the longest file an export writes is
#: ``<name>_wrapper.c``.
NAME_MAX = 255
MAX_NAME = NAME_MAX - len("_wrapper.c")

#: Characters an output folder cannot hold, and why: the folder goes into ``<name>.pc``'s
#: ``prefix``, and from there into the flags that ``cc app.c $(pkg-config --libs NAME)``
#: passes through the shell and the linker.
_FOLDER_REFUSED = {
    **dict.fromkeys(" \t\"'\\", "the shell splits or quotes pkg-config's flags on it"),
    **dict.fromkeys("*?[", "the shell expands it as a pattern in pkg-config's flags"),
    "$": "pkg-config expands it as a variable and the dynamic loader as a run-path token",
    "#": "it starts a comment in a .pc file",
    ",": "it splits -Wl,-rpath,FOLDER linker options",
    ":": "it separates folders in a run path",
}


def check_output_folder(out: str, what: str = "export output folder",
                        instead: str = "choose a folder") -> None:
    """CompileError naming the first character of the absolute folder ``out`` that a .pc
    file and the flags built from it cannot carry: a control character (a line break would
    add lines to the .pc), one of :data:`_FOLDER_REFUSED`, or a non-ASCII character
    (pkgconf escapes each such byte in the flags it prints). ``what`` names the folder in
    the message, ``instead`` says what to do."""
    for i, ch in enumerate(out):
        if ch in _FOLDER_REFUSED:
            why = _FOLDER_REFUSED[ch]
        elif not " " <= ch <= "~":
            why = "a .pc file and its flags hold printable ASCII only"
        else:
            continue
        raise CompileError(f"{what} {out!r} holds {ch!r} at position {i}: {why}; {instead} "
                           "whose path has only printable ASCII without spaces, quotes, "
                           "backslashes or $#,:*?[")


def _cc_command(cc: object) -> list[str]:
    """The C compiler command: ``cc`` (default ``$CC``, else ``cc``) split as a shell would;
    CompileError when it is not a str or cannot be split (an unclosed quote)."""
    if cc is not None and not isinstance(cc, str):
        raise TypeError(f"cc must be a command (str), got {type(cc).__name__}")
    value = cc or os.environ.get("CC") or "cc"
    where = "cc" if cc else "$CC" if os.environ.get("CC") else "cc"
    try:
        command = shlex.split(value)
    except ValueError as exc:
        raise CompileError(f"export: {where}={value!r} is not a command line: {exc}") from None
    if not command:
        raise CompileError(f"export: {where}={value!r} names no C compiler")
    return command


def _pc_text(text: str) -> str:
    """``text`` for a free-text .pc field: printable ASCII kept, except ``$`` (a variable),
    ``#`` (a comment) and the backslash; every other character (line breaks, non-ASCII, an
    undecodable byte of a file name) written as its code in Python's escapes (``\\x0a``,
    ``\\xe9``, ``\\udcff``)."""
    return "".join(ch if " " <= ch <= "~" and ch not in "$#\\" else _escape(ch)
                   for ch in text)


def _escape(ch: str) -> str:
    code = ord(ch)
    return f"\\x{code:02x}" if code < 0x100 else \
        f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def _wavert_header(filename: str) -> str:
    return os.path.join(layout.include_dir(), filename)


def _safe(ident: str) -> bool:
    """``ident`` can be a C identifier in the export's header and wrapper without colliding
    with a keyword, a standard or POSIX name (``*_t``, ``_X``/``__x`` reserved forms), the C
    library's names that may be macros, or libwavert's and the wrapper's own names."""
    return (bool(_IDENT.match(ident)) and ident not in _KEYWORDS and ident not in _LIBC
            and ident != "stream" and not ident.endswith("_t") and "__" not in ident
            and not (ident[0] == "_" and (len(ident) == 1 or ident[1].isupper()))
            and not ident.startswith(_RESERVED_PREFIXES))


def _c_names(fn: HostSignature) -> list[str]:
    """The parameter names of ``fn`` in the header: the MLIR name where it is a safe C
    identifier (:func:`_safe`), else ``arg<i>``. (The wrapper's definitions use ``pw_arg<i>``
    whatever the name: a prototype's parameter names need not match.)"""
    names, seen = [], set()
    if fn.convention == WAVE_CONVENTION:   # Wave's names are arg1, arg2...: kept when safe
        for i, p in enumerate(fn.params):
            n = p.name if _safe(p.name) and p.name not in seen else f"object{i}"
            seen.add(n)
            names.append(n)
        return names
    for i, p in enumerate(fn.params):
        n = p.name if _safe(p.name) and not re.fullmatch(r"arg[0-9]+", p.name) else f"arg{i}"
        if n in seen:
            n = f"arg{i}"
        seen.add(n)
        names.append(n)
    return names


def _c_string(text: str) -> str:
    """``text`` as a C string literal (quotes, backslashes and non-printables escaped)."""
    out = []
    for byte in text.encode():
        ch = chr(byte)
        out.append(ch if 0x20 <= byte < 0x7F and ch not in '"\\?' else f"\\{byte:03o}")
    return '"' + "".join(out) + '"'


def _check_names(name: str, functions: tuple[HostSignature, ...]) -> None:
    """Every global name the export defines (entry points, ``<name>_last_error``,
    ``<name>_unload``, the ``<NAME>_H`` / ``<NAME>_TARGET`` macros) is unique and collides
    with nothing of C, its library, libwavert or the wrapper (CompileError naming it)."""
    if not _safe(name):
        raise CompileError(f"export name {name!r} collides with a C keyword, a C library name "
                           "or a name reserved by libwavert/the wrapper (wavert_*, pw_*, "
                           "*_t, __*); choose another")
    globals_: dict[str, str] = {}
    for what, ident in ([(f"host function @{fn.name}", f"{name}_{fn.name}") for fn in functions]
                        + [("the error function", f"{name}_last_error"),
                           ("the unload function", f"{name}_unload"),
                           ("the header guard", f"{name.upper()}_H"),
                           ("the target macro", f"{name.upper()}_TARGET")]):
        if ident in globals_:
            raise CompileError(f"export {name!r}: {what} and {globals_[ident]} are both "
                               f"named {ident}; rename the host function")
        if not _safe(ident):
            raise CompileError(f"export {name!r}: {what} would be named {ident}, which "
                               "collides with a C or libwavert name; rename it")
        globals_[ident] = what


def _prototype(name: str, fn: HostSignature, names: list[str], stream: str) -> str:
    """The entry point's prototype with parameter ``names`` and ``stream`` last."""
    args = []
    for p, n in zip(fn.params, names):
        if p.kind == "object":
            args.append(f"const wavert_object *{n}")
        else:
            args.append(f"const DLTensor *{n}" if p.kind == "memref"
                        else f"{SCALAR_C[p.scalar][0]} {n}")
    return f"int32_t {name}_{fn.name}({', '.join(args + [f'void *{stream}'])})"


def header(name: str, functions: tuple[HostSignature, ...], target: Target) -> str:
    """The text of ``<name>.h``."""
    guard = f"{name.upper()}_H"
    chip, dev = target.chip, target.device_enum
    lines = [
        f"/* {name}.h: ahead-of-time export of pywave (target {chip}). Generated; do not edit.",
        " *",
        " * Each entry point runs one host function of the MLIR module and returns a",
        " * wavert_status (WAVERT_OK = 0). Tensors are DLPack DLTensors in device memory of one",
        f" * {dev} device (the launch goes to that device); their dtype, rank, static sizes and",
        " * layout must match the memref type. f16/bf16 scalars are given as double and rounded",
        " * to nearest even. `stream` is a CUstream/hipStream_t (NULL: the legacy default",
        " * stream); kernels run asynchronously on it. On failure <name>_last_error() says why.",
        " * Thread-safe. Link: pkg-config --cflags --libs " + name + " */",
        f"#ifndef {guard}", f"#define {guard}", "",
        "#include <stdbool.h>", "#include <stdint.h>", "",
        '#include "wavert_jit.h"' if any(f.convention == WAVE_CONVENTION for f in functions)
        else '#include "wavert.h"', "",
        "#ifdef __cplusplus", 'extern "C" {', "#endif", "",
        f'#define {name.upper()}_TARGET "{chip}"', ""]
    for fn in functions:
        lines.append(f"/* @{fn.name}:")
        if fn.convention == WAVE_CONVENTION:
            lines += [" *   In Wave's host-wrapper convention: each argument is a wavert_object",
                      " *   (wavert_jit.h) the caller fills: kind and a DLTensor (on the one",
                      " *   device of the call), an int64 (int_fits = 1) or a double; the",
                      " *   wrapper sets position and name. The records are copied."]
        for p, n in zip(fn.params, _c_names(fn)):
            if p.kind == "object":
                of = (f" (DLPack dtype {tuple(p.dtype)}: the host code views it so)"
                      if tuple(p.dtype) != (0, 0, 0) else "")
                lines.append(f" *   {n}: a tensor{of}, an int or a float, as the host code "
                             "reads it")
                continue
            extra = " (written)" if p.written else ""
            mlir_name = "" if n == p.name else f" (%{p.name.replace('*/', '* /')})"
            lines.append(f" *   {n}{mlir_name}: {p.type}{extra}")
        lines.append(" */")
        lines.append(f"WAVERT_EXPORT {_prototype(name, fn, _c_names(fn), 'stream')};")
        lines.append("")
    lines += [
        "/* The message of the last failing entry point on this thread (\"\" if none). */",
        f"WAVERT_EXPORT const char *{name}_last_error(void);", "",
        "/* Release the kernels loaded by earlier calls (waits for their pending work). Not",
        " * safe while another thread calls an entry point; later calls load them again. */",
        f"WAVERT_EXPORT void {name}_unload(void);", "",
        "#ifdef __cplusplus", "}", "#endif", f"#endif /* {guard} */", ""]
    return "\n".join(lines)


def _i64(v: int) -> str:
    return "WAVERT_DYNAMIC" if v == DYNAMIC else f"INT64_C({v})"


#: The fixed C of every export's wrapper, and the helpers of Wave's convention: package files
#: (``pywave/templates/``) whose ``@KEY@`` placeholders :func:`render` fills.
WRAPPER_TEMPLATE = "templates/export_wrapper.c.in"
WAVE_TEMPLATE = "templates/export_wave.c.in"
_PLACEHOLDER = re.compile(r"@([A-Z_]+)@")


def render(template: str, values: Mapping[str, str]) -> str:
    """The text of package file ``template`` with each ``@KEY@`` replaced by ``values[KEY]``,
    in one pass (a value is never scanned again). CompileError when a placeholder has no
    value or a value no placeholder (the template and this module disagree);
    :class:`pywave.NotBuiltError` when the file is missing from the package."""
    with open(layout.required_file(template), encoding="utf-8") as fh:
        text = fh.read()
    found = set(_PLACEHOLDER.findall(text))
    if found != set(values):
        raise CompileError(f"export: the template {template} has the placeholders "
                           f"{sorted(found)}, but pywave fills {sorted(values)}; reinstall "
                           "pywave")
    return _PLACEHOLDER.sub(lambda m: values[m.group(1)], text)


def wrapper(name: str, functions: tuple[HostSignature, ...], target: Target) -> str:
    """The C source of the entry points (DLTensor -> memref words, call bracket): the fixed
    part from :data:`WRAPPER_TEMPLATE`, one entry point per function written here."""
    declarations = [f"PW_HIDDEN void {PACKED_PREFIX}{fn.name}(uint64_t *slots);"
                    for fn in functions] + [f"PW_HIDDEN void {RELEASE_KERNELS}(void);"]
    wave = any(f.convention == WAVE_CONVENTION for f in functions)
    entries: list[str] = []
    for fn in functions:
        entries += _wave_entry(name, fn) if fn.convention == WAVE_CONVENTION \
            else _entry(name, fn)
    return render(WRAPPER_TEMPLATE, {
        "NAME": name, "HOST_ONLY": "1" if target.is_host else "0",
        "DEVICE_TYPE": target.device_enum, "DEVICE_NAME": target.platform,
        "RELEASE_KERNELS": RELEASE_KERNELS, "DECLARATIONS": "\n".join(declarations),
        "WAVE_HELPERS": render(WAVE_TEMPLATE, {}) if wave else "",
        "ENTRY_POINTS": "\n".join(entries)})


def _memref_argument(i: int, p: Param, arg: str, pos: int) -> list[str]:
    """The lines of an entry point that read tensor argument ``i`` (C name ``arg``) into the
    slots from ``pos``: its memref type as static data, then :c:func:`pw_memref`."""
    rank = len(p.sizes)
    sizes = f"pw_sizes_{i}" if rank else "NULL"
    strides = f"pw_strides_{i}" if rank and p.strides is not None else "NULL"
    lines = []
    if rank:
        lines.append(f"  static const int64_t pw_sizes_{i}[] = "
                     f"{{{', '.join(_i64(v) for v in p.sizes)}}};")
    if strides != "NULL":
        lines.append(f"  static const int64_t pw_strides_{i}[] = "
                     f"{{{', '.join(_i64(v) for v in p.strides)}}};")
    code, bits, lanes = p.dtype
    lines.append(f"  static const wavert_memref_type pw_type_{i} = "
                 f"{{{{{code}, {bits}, {lanes}}}, {p.flags}u, {rank}, {sizes}, "
                 f"{strides}, {_i64(p.offset)}}};")
    lines.append(f"  pw_status = pw_memref(pw_fn, {_c_string(p.name)}, {arg}, "
                 f"&pw_type_{i}, &pw_slots[{pos}]);")
    lines.append("  if (pw_status != WAVERT_OK) return pw_status;")
    return lines


def _entry(name: str, fn: HostSignature) -> list[str]:
    """The C entry point of a function in pywave's convention: tensors into memref
    descriptors, scalars into their slot's low bytes, the device from the tensors, the call
    in libwavert's bracket."""
    args = [f"pw_arg{i}" for i in range(len(fn.params))]
    memrefs = [(i, p) for i, p in enumerate(fn.params) if p.kind == "memref"]
    body = [f"{_prototype(name, fn, args, 'pw_stream')} {{",
            f'  static const char pw_fn[] = "{name}_{fn.name}";',
            f"  uint64_t pw_slots[{max(fn.words, 1)}];", "  int32_t pw_status;",
            "  pw_own = 0;"]
    pos = 0
    for i, p in enumerate(fn.params):
        if p.kind == "memref":
            body += _memref_argument(i, p, args[i], pos)
        else:
            _, expr = SCALAR_C[p.scalar]
            ctype = DTYPES[p.scalar].c_type
            body.append(f"  {{ {ctype} pw_v = {expr.format(args[i])}; pw_slots[{pos}] = 0; "
                        f"memcpy(&pw_slots[{pos}], &pw_v, sizeof pw_v); }}")
        pos += p.words
    tensors = ", ".join(args[i] for i, _ in memrefs) or "NULL"
    tnames = ", ".join(_c_string(p.name) for _, p in memrefs) or "NULL"
    return body + [
        f"  const DLTensor *const pw_tensors[] = {{{tensors}}};",
        f"  static const char *const pw_names[] = {{{tnames}}};",
        "  wavert_device *pw_dev;",
        f"  pw_status = pw_device(pw_fn, pw_tensors, pw_names, {len(memrefs)}, &pw_dev);",
        "  if (pw_status != WAVERT_OK) return pw_status;",
        "  wavert_call_state pw_state;",
        "  pw_status = wavert_call_begin(pw_dev, pw_stream, &pw_state);",
        "  if (pw_status != WAVERT_OK) return pw_status;",
        f"  {PACKED_PREFIX}{fn.name}(pw_slots);",
        "  return wavert_call_end(&pw_state);", "}", ""]


def _wave_entry(name: str, fn: HostSignature) -> list[str]:
    """The C entry point of a function in Wave's convention: the objects copied into one
    array of records (registered for the call), the device from their tensors, slot 0 the
    stream."""
    args = [f"pw_arg{i}" for i in range(len(fn.params))]
    n = max(len(fn.params), 1)
    body = [f"{_prototype(name, fn, args, 'pw_stream')} {{",
            f'  static const char pw_fn[] = "{name}_{fn.name}";',
            f"  uint64_t pw_slots[{fn.words}];", f"  wavert_object pw_objects[{n}];",
            f"  const DLTensor *pw_tensors[{n}];", f"  const char *pw_names[{n}];",
            "  int pw_ntensors = 0;", "  int32_t pw_status;", "  pw_own = 0;"]
    for i, p in enumerate(fn.params):
        code, bits, lanes = p.dtype
        body += [f"  pw_status = pw_object(pw_fn, {_c_string(p.name)}, {i}, {args[i]}, "
                 f"(DLDataType){{{code}, {bits}, {lanes}}}, {int(bool(p.flags & SIGNLESS))}, "
                 f"&pw_objects[{i}], pw_tensors, pw_names, &pw_ntensors);",
                 "  if (pw_status != WAVERT_OK) return pw_status;",
                 f"  pw_slots[{i + 1}] = (uint64_t)(uintptr_t)&pw_objects[{i}];"]
    body += ["  wavert_device *pw_dev;",
             "  pw_status = pw_device(pw_fn, pw_tensors, pw_names, pw_ntensors, &pw_dev);",
             "  if (pw_status != WAVERT_OK) return pw_status;",
             "  pw_slots[0] = (uint64_t)(uintptr_t)pw_stream;",
             "  wavert_call_state pw_state;",
             "  pw_status = wavert_call_begin(pw_dev, pw_stream, &pw_state);",
             "  if (pw_status != WAVERT_OK) return pw_status;",
             f"  pw_status = wavert_call_set_objects(pw_objects, {len(fn.params)});",
             f"  if (pw_status == WAVERT_OK) {PACKED_PREFIX}{fn.name}(pw_slots);",
             "  int32_t pw_end = wavert_call_end(&pw_state);",
             "  return pw_status != WAVERT_OK ? pw_status : pw_end;", "}", ""]
    return body


def pkgconfig(name: str, out_dir: str, chip: str, source: str, pywave_dir: str | None) -> str:
    """The text of ``<name>.pc``. Paths are absolute (``${pcfiledir}`` would give programs
    a relative rpath when PKG_CONFIG_PATH is relative): re-export after moving the folder.
    ``out_dir`` passed :func:`check_output_folder`; the source's file name is escaped
    (:func:`_pc_text`), so the text is ASCII and its lines are the ones written here."""
    # DT_RPATH (--disable-new-dtags): the program finds the export's libwavert before any
    # on LD_LIBRARY_PATH.
    libs = "-L${libdir} -l" + name + " -lwavert -Wl,--disable-new-dtags -Wl,-rpath,${libdir}"
    if pywave_dir:
        libs += f" -L{pywave_dir} -Wl,-rpath,{pywave_dir}"
    return "\n".join([
        f"prefix={os.path.abspath(out_dir)}", "libdir=${prefix}", "includedir=${prefix}", "",
        f"Name: {name}",
        f"Description: pywave ahead-of-time export of {_pc_text(os.path.basename(source))} "
        f"for {chip}",
        f"Version: {__version__}",
        "Cflags: -I${includedir}",
        f"Libs: {libs}", ""])
