"""Ahead-of-time export for C: ``pywave.export(text, out_dir, name, target="sm_90")``.

Writes into ``out_dir``:

- ``lib<name>.so``: the host code (object code from the same pipeline as ``compile``, built
  for the generic CPU, all its symbols hidden, kernel images embedded) plus a generated C
  wrapper with one entry point per host function::

      int32_t <name>_<func>(const DLTensor *a, ..., <scalar C types>, void *stream);

  returning a ``wavert_status``; ``<name>_last_error()`` (the message of the last failure on
  this thread) and ``<name>_unload()`` (releases the loaded kernels);
- ``<name>.h`` (the declarations, with each argument's MLIR type), ``wavert.h`` (DLTensor,
  status codes, device memory helpers), ``<name>.pc`` (pkg-config, absolute paths),
  ``<name>_wrapper.c`` and ``<name>_host.o`` (the inputs of the link);
- ``libwavert.so``: a copy of pywave's runtime, found through ``$ORIGIN``, so the folder is
  self-contained and survives changes to the Python installation (``runtime="link"``
  instead links the pywave package's copy by absolute rpath).

The shared library is linked with the system C compiler (``$CC``, else ``cc``). No GPU is
needed to export; a program calling an entry point on a machine without one gets
``WAVERT_ERROR_UNAVAILABLE`` and a message naming the missing driver.
"""

from __future__ import annotations

import dataclasses
import keyword
import os
import re
import shlex
import shutil
import subprocess

from . import api, isolation, jit, runtime
from .errors import CompileError

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_C_KEYWORDS = {
    "auto", "break", "case", "char", "const", "continue", "default", "do", "double", "else",
    "enum", "extern", "float", "for", "goto", "if", "inline", "int", "long", "register",
    "restrict", "return", "short", "signed", "sizeof", "static", "struct", "switch", "typedef",
    "union", "unsigned", "void", "volatile", "while", "bool", "true", "false", "stream"}

#: MLIR scalar kind -> (C parameter type, C expression giving the slot's low bytes).
SCALAR_C = {
    "i1": ("bool", "(uint8_t)({0} ? 1 : 0)", "uint8_t"),
    "i8": ("int8_t", "{0}", "int8_t"),
    "i16": ("int16_t", "{0}", "int16_t"),
    "i32": ("int32_t", "{0}", "int32_t"),
    "i64": ("int64_t", "{0}", "int64_t"),
    "index": ("int64_t", "{0}", "int64_t"),
    "f16": ("double", "wavert_f16_from_f64({0})", "uint16_t"),
    "bf16": ("double", "wavert_bf16_from_f64({0})", "uint16_t"),
    "f32": ("float", "{0}", "float"),
    "f64": ("double", "{0}", "double"),
}

DEVICE_TYPES = {"nvvm": ("kDLCUDA", "CUDA"), "rocdl": ("kDLROCM", "ROCm")}


@dataclasses.dataclass(frozen=True)
class Export:
    """What :func:`export` wrote: paths of the library, header and pkg-config file."""

    library: str
    header: str
    pkgconfig: str
    functions: tuple[str, ...]      # C entry points
    target: str


def export(text: str, out_dir: str | os.PathLike, name: str, *, target: str | None = None,
           opt_level: int = 2, format: str = "auto", binaries: dict | None = None,
           runtime_mode: str = "copy", filename: str = "<input>",
           cc: str | None = None) -> Export:
    """Compile ``text`` ahead of time into a shared library that C programs link.

    Parameters
    ----------
    text : str
        The MLIR module, as for :func:`pywave.compile`.
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

    Returns
    -------
    Export
        The paths written and the C entry points.

    Raises
    ------
    CompileError
        A compile failure, a name or host function that is not a C identifier, or a failing
        C compiler/linker (with its output).
    """
    if not isinstance(name, str) or not _IDENT.match(name):
        raise CompileError(f"export name {name!r} is not a C identifier")
    if runtime_mode not in ("copy", "link"):
        raise CompileError(f"runtime_mode must be 'copy' or 'link', got {runtime_mode!r}")
    if not os.path.exists(runtime.LIBRARY):
        raise CompileError(f"libwavert.so is missing from the pywave package "
                           f"({runtime.LIBRARY}); install pywave (pip install . or meson "
                           "install) before exporting")
    art = isolation.build(text, target=target, opt_level=opt_level,  # hook: compile worker
                          format=format, filename=filename, binaries=binaries)
    for fn in art.host.functions:
        if not _IDENT.match(fn.name):
            raise CompileError(f"host function @{fn.name} is not a C identifier; rename it "
                               "to export it")
    obj, _ = jit.compile_object(art.host.llvm_ir, opt_level=opt_level, library=True,
                                shared=art.host.kernel_slots)
    out = os.fspath(out_dir)
    os.makedirs(out, exist_ok=True)
    backend = art.target.backend
    files = {
        f"{name}.h": header(name, art.host.functions, art.target.chip, backend),
        f"{name}_wrapper.c": wrapper(name, art.host.functions, art.host.kernel_slots,
                                     backend),
    }
    for fname, content in files.items():
        with open(os.path.join(out, fname), "w", encoding="utf-8") as fh:
            fh.write(content)
    host_o = os.path.join(out, f"{name}_host.o")
    with open(host_o, "wb") as fh:
        fh.write(obj)
    shutil.copyfile(_wavert_header(), os.path.join(out, "wavert.h"))
    pywave_dir = os.path.dirname(runtime.LIBRARY)
    if runtime_mode == "copy":
        shutil.copyfile(runtime.LIBRARY, os.path.join(out, "libwavert.so"))
        libdir, rpath = out, "$ORIGIN"
    else:
        libdir = rpath = pywave_dir
    library = os.path.join(out, f"lib{name}.so")
    command = shlex.split(cc or os.environ.get("CC") or "cc") + [
        "-shared", "-fPIC", "-O2", "-std=c11", "-fvisibility=hidden", "-I", out,
        "-o", library, os.path.join(out, f"{name}_wrapper.c"), host_o,
        f"-L{libdir}", "-lwavert", f"-Wl,-rpath,{rpath}", "-Wl,-z,defs"]
    try:
        proc = subprocess.run(command, capture_output=True, text=True, timeout=300)
    except OSError as exc:
        raise CompileError(f"export needs a C compiler to link lib{name}.so: "
                           f"{command[0]}: {exc.strerror or exc} (set CC)") from None
    if proc.returncode != 0:
        raise CompileError(f"linking lib{name}.so failed ({shlex.join(command)}):\n"
                           f"{proc.stderr.strip()}")
    pc = os.path.join(out, f"{name}.pc")
    with open(pc, "w", encoding="utf-8") as fh:
        fh.write(pkgconfig(name, out, art.target.chip, filename,
                           None if runtime_mode == "copy" else pywave_dir))
    return Export(library, os.path.join(out, f"{name}.h"), pc,
                  tuple(f"{name}_{fn.name}" for fn in art.host.functions), art.target.chip)


def _wavert_header() -> str:
    here = os.path.dirname(os.path.abspath(__file__))
    for path in (os.path.join(here, "include", "wavert.h"),                       # installed
                 os.path.join(here, "..", "libwavert", "include", "wavert.h")):   # checkout
        if os.path.exists(path):
            return path
    raise CompileError("wavert.h is missing from the pywave package; reinstall pywave")


def _c_names(fn) -> list[str]:
    names, seen = [], set()
    for i, p in enumerate(fn.params):
        n = p.name if _IDENT.match(p.name) and p.name not in _C_KEYWORDS and \
            not keyword.iskeyword(p.name) and not p.name.startswith("pw_") else f"arg{i}"
        if n in seen:
            n = f"arg{i}"
        seen.add(n)
        names.append(n)
    return names


def _prototype(name: str, fn) -> str:
    args = []
    for p, n in zip(fn.params, _c_names(fn)):
        args.append(f"const DLTensor *{n}" if p.kind == "memref"
                    else f"{SCALAR_C[p.scalar][0]} {n}")
    return f"int32_t {name}_{fn.name}({', '.join(args + ['void *stream'])})"


def header(name: str, functions, chip: str, backend: str) -> str:
    """The text of ``<name>.h``."""
    guard = f"{name.upper()}_H"
    dev = DEVICE_TYPES[backend][0]
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
        "#include <stdbool.h>", "#include <stdint.h>", "", '#include "wavert.h"', "",
        "#ifdef __cplusplus", 'extern "C" {', "#endif", "",
        f'#define {name.upper()}_TARGET "{chip}"', ""]
    for fn in functions:
        lines.append(f"/* @{fn.name}:")
        for p, n in zip(fn.params, _c_names(fn)):
            extra = " (written)" if p.written else ""
            lines.append(f" *   {n}: {p.type}{extra}")
        lines.append(" */")
        lines.append(f"WAVERT_EXPORT {_prototype(name, fn)};")
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
    return "WAVERT_DYNAMIC" if v == -(2 ** 63) else f"INT64_C({v})"


def wrapper(name: str, functions, slots: tuple[str, ...], backend: str) -> str:
    """The C source of the entry points (DLTensor -> memref words, call bracket)."""
    dev_type, dev_name = DEVICE_TYPES[backend]
    out = [
        f"/* {name}_wrapper.c: entry points of lib{name}.so. Generated by pywave.export. */",
        "#include <stdarg.h>", "#include <stdio.h>", "#include <string.h>", "",
        f'#include "{name}.h"', "",
        "#define PW_HIDDEN __attribute__((visibility(\"hidden\")))", ""]
    out += [f"extern PW_HIDDEN wavert_kernel *{s};" for s in slots]
    out += [f"PW_HIDDEN void _pywave_packed_{fn.name}(uint64_t *slots);" for fn in functions]
    out += ["", r"""static _Thread_local char pw_message[1024];
static _Thread_local int pw_own;

static int32_t pw_fail(int32_t status, const char *format, ...) {
  va_list args;
  va_start(args, format);
  vsnprintf(pw_message, sizeof(pw_message), format, args);
  va_end(args);
  pw_own = 1;
  return status;
}

static int32_t pw_memref(const char *fn, const char *arg, const DLTensor *t,
                         const wavert_memref_type *type, uint64_t *words) {
  if (t == NULL)
    return pw_fail(WAVERT_ERROR_INVALID_ARGUMENT, "%s: argument '%s' is NULL", fn, arg);
  wavert_status s = wavert_memref_from_dltensor(t, type, (int64_t *)words);
  if (s != WAVERT_OK)
    return pw_fail(s, "%s: argument '%s': %s", fn, arg, wavert_last_error());
  return WAVERT_OK;
}
""", f"""static int32_t pw_device(const char *fn, const DLTensor *const *ts,
                         const char *const *names, int n, wavert_device **out) {{
  if (n == 0) return wavert_device_get({dev_type}, 0, out);
  for (int i = 0; i < n; ++i) {{
    if (ts[i]->device.device_type != {dev_type})
      return pw_fail(WAVERT_ERROR_INVALID_ARGUMENT,
                     "%s: argument '%s' is on DLPack device type %d; the kernels run on a "
                     "{dev_name} device ({dev_type} = %d)", fn, names[i],
                     (int)ts[i]->device.device_type, (int){dev_type});
    if (ts[i]->device.device_id != ts[0]->device.device_id)
      return pw_fail(WAVERT_ERROR_INVALID_ARGUMENT,
                     "%s: arguments on different devices: '%s' on device %d, '%s' on device %d",
                     fn, names[0], (int)ts[0]->device.device_id, names[i],
                     (int)ts[i]->device.device_id);
  }}
  return wavert_device_get({dev_type}, ts[0]->device.device_id, out);
}}

const char *{name}_last_error(void) {{ return pw_own ? pw_message : wavert_last_error(); }}

void {name}_unload(void) {{"""]
    for s in slots:
        out.append(f"  wavert_kernel_release({s});")
        out.append(f"  {s} = NULL;")
    out += ["}", ""]
    for fn in functions:
        names = _c_names(fn)
        qual = f"{name}_{fn.name}"
        words = sum(p.words for p in fn.params)
        memrefs = [(i, p, n) for i, (p, n) in enumerate(zip(fn.params, names))
                   if p.kind == "memref"]
        body = [f"{_prototype(name, fn)} {{", f'  static const char pw_fn[] = "{qual}";',
                f"  uint64_t pw_slots[{max(words, 1)}];", "  int32_t pw_status;",
                "  pw_own = 0;"]
        pos = 0
        for p, n in zip(fn.params, names):
            if p.kind == "memref":
                rank = len(p.sizes)
                sizes = f"pw_sizes_{n}" if rank else "NULL"
                strides = f"pw_strides_{n}" if rank and p.strides is not None else "NULL"
                if rank:
                    body.append(f"  static const int64_t pw_sizes_{n}[] = "
                                f"{{{', '.join(_i64(v) for v in p.sizes)}}};")
                if strides != "NULL":
                    body.append(f"  static const int64_t pw_strides_{n}[] = "
                                f"{{{', '.join(_i64(v) for v in p.strides)}}};")
                code, bits, lanes = p.dtype
                body.append(f"  static const wavert_memref_type pw_type_{n} = "
                            f"{{{{{code}, {bits}, {lanes}}}, {p.flags}u, {rank}, {sizes}, "
                            f"{strides}, {_i64(p.offset)}}};")
                body.append(f'  pw_status = pw_memref(pw_fn, "{n}", {n}, &pw_type_{n}, '
                            f"&pw_slots[{pos}]);")
                body.append("  if (pw_status != WAVERT_OK) return pw_status;")
            else:
                _, expr, ctype = SCALAR_C[p.scalar]
                body.append(f"  {{ {ctype} pw_v = {expr.format(n)}; pw_slots[{pos}] = 0; "
                            f"memcpy(&pw_slots[{pos}], &pw_v, sizeof pw_v); }}")
            pos += p.words
        tensors = ", ".join(n for _, _, n in memrefs) or "NULL"
        tnames = ", ".join(f'"{n}"' for _, _, n in memrefs) or "NULL"
        body += [f"  const DLTensor *const pw_tensors[] = {{{tensors}}};",
                 f"  static const char *const pw_names[] = {{{tnames}}};",
                 "  wavert_device *pw_dev;",
                 f"  pw_status = pw_device(pw_fn, pw_tensors, pw_names, {len(memrefs)}, "
                 "&pw_dev);",
                 "  if (pw_status != WAVERT_OK) return pw_status;",
                 "  wavert_call_state pw_state;",
                 "  pw_status = wavert_call_begin(pw_dev, stream, &pw_state);",
                 "  if (pw_status != WAVERT_OK) return pw_status;",
                 f"  _pywave_packed_{fn.name}(pw_slots);",
                 "  return wavert_call_end(&pw_state);", "}", ""]
        out += body
    return "\n".join(out)


def pkgconfig(name: str, out_dir: str, chip: str, source: str, pywave_dir: str | None) -> str:
    """The text of ``<name>.pc``. Paths are absolute (``${pcfiledir}`` would give programs
    a relative rpath when PKG_CONFIG_PATH is relative): re-export after moving the folder."""
    from . import __version__
    libs = "-L${libdir} -l" + name + " -lwavert -Wl,-rpath,${libdir}"
    if pywave_dir:
        libs += f" -L{pywave_dir} -Wl,-rpath,{pywave_dir}"
    return "\n".join([
        f"prefix={os.path.abspath(out_dir)}", "libdir=${prefix}", "includedir=${prefix}", "",
        f"Name: {name}",
        f"Description: pywave ahead-of-time export of {os.path.basename(source)} for {chip}",
        f"Version: {__version__}",
        "Cflags: -I${includedir}",
        f"Libs: {libs}", ""])
