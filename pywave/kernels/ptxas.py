"""ptxas and fatbinary: PTX to cubins per chip, fatbins, and ptxas's figures and warnings.

Stage ``kernels`` (:mod:`pywave.kernels.nvvm`): assemble PTX into cubins with the toolkit's
``ptxas`` and pack several chips into a fatbin with its ``fatbinary``. pywave runs both itself
(``gpu-module-to-binary`` writes PTX only), so:

- ptxas' own diagnostics reach the user: its warnings are logged at WARNING on the
  ``pywave.ptxas`` logger, its ``-v`` information lines at INFO (``pywave -v``);
- each kernel's figures (registers, spills, stack frame, shared memory) are read from ``-v``
  into :class:`pywave.program.KernelInfo`;
- a ``gpu.module`` may be built for several chips (:func:`fatbin`).

The arguments are those ``gpu-module-to-binary`` would give (``-arch``, ``--opt-level`` from
the target's ``O``, the target's ``ptxas-cmd-options``) plus ``-v``.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import subprocess
import tempfile

from ..errors import CompileError
from ..program import KernelInfo, ptx_text

log = logging.getLogger("pywave.ptxas")

#: Seconds one ptxas or fatbinary run may take.
TIMEOUT = 600

_ENTRY = re.compile(r"Compiling entry function '([^']+)' for '([^']+)'")
_PROPERTIES = re.compile(r"Function properties for (\S+)")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers")
_SMEM = re.compile(r"(\d+) bytes smem")
_CMEM = re.compile(r"(\d+) bytes cmem\[0\]")
_VERSION = re.compile(rb"^\s*\.version\s+(\d+)\.(\d+)", re.MULTILINE)
_TARGET = re.compile(rb"^\s*\.target\s+sm_(\d+)", re.MULTILINE)


@dataclasses.dataclass(frozen=True)
class TargetOptions:
    """What ptxas takes from one ``#nvvm.target``: the chip, ``O`` (ptxas' ``--opt-level``,
    2 when the target gives none, as MLIR's default) and its ``ptxas-cmd-options``."""

    chip: str
    opt_level: int = 2
    cmd_options: tuple[str, ...] = ()

    @classmethod
    def parse(cls, text: str) -> "TargetOptions":
        """The options of an ``#nvvm.target<...>`` attribute as MLIR prints it (a target
        without a chip is MLIR's default ``sm_50``), read by
        :class:`pywave.kernels.targets.TargetAttr`; CompileError for another attribute or
        options it cannot read."""
        from .targets import TargetAttr
        target = TargetAttr.parse(text)
        if target.dialect != "nvvm":
            raise CompileError(f"ptxas compiles for an #nvvm.target, not {text}")
        return cls(target.chip, target.opt_level, target.ptxas_cmd_options)

    def with_chip(self, chip: str) -> "TargetOptions":
        return dataclasses.replace(self, chip=chip)


def arguments(ptxas: str, target: TargetOptions, ptx_path: str, out_path: str) -> list[str]:
    """The ptxas command line for one chip (``-v`` once, whatever the options say)."""
    extra = [o for o in target.cmd_options if o not in ("-v", "--verbose")]
    return [ptxas, "-arch", target.chip, "--opt-level", str(target.opt_level), *extra, "-v",
            ptx_path, "-o", out_path]


def assemble(ptxas: str, ptx: bytes, target: TargetOptions,
             module: str) -> tuple[bytes, tuple[KernelInfo, ...]]:
    """The cubin of ``ptx`` for ``target.chip`` and the figures of each kernel in it.
    ``module`` names the ``gpu.module`` in messages. Warnings are logged; a failure is a
    CompileError quoting ptxas' messages."""
    with tempfile.TemporaryDirectory(prefix="pywave-ptxas-") as tmp:
        ptx_path, out_path = os.path.join(tmp, "kernels.ptx"), os.path.join(tmp, "kernels.cubin")
        with open(ptx_path, "wb") as fh:
            fh.write(ptx_text(ptx))
        command = arguments(ptxas, target, ptx_path, out_path)
        output = _run(command, f"ptxas for gpu.module @{module} ({target.chip})")
        with open(out_path, "rb") as fh:
            cubin = fh.read()
    where = f"gpu.module @{module}, {target.chip}"
    report(output, where)
    return cubin, figures(output, ptx, target.chip)


def report(output: str, where: str) -> None:
    """Log ptxas' output lines: warnings (and ``error`` lines of a run that still succeeded)
    at WARNING, the rest at INFO, each prefixed with ``where``."""
    for line in output.splitlines():
        if not line.strip():
            continue
        level = logging.WARNING if re.match(r"ptxas\s+(warning|error)", line) else logging.INFO
        log.log(level, "%s: %s", where, line.strip())


def figures(output: str, ptx: bytes, chip: str) -> tuple[KernelInfo, ...]:
    """The :class:`KernelInfo` of each entry function in ptxas ``-v`` output, in order."""
    version = _VERSION.search(ptx)
    isa = int(version.group(1)) * 10 + int(version.group(2)) if version else 0
    virtual = _TARGET.search(ptx)
    ptx_version = int(virtual.group(1)) if virtual else 0
    binary_version = int(re.sub(r"\D", "", chip.split("_", 1)[-1]) or 0)
    fields: dict[str, dict[str, int]] = {}
    current = None          # the entry that "Used N registers" lines describe
    properties = None       # the function a "N bytes stack frame" line describes
    for line in output.splitlines():
        if (m := _ENTRY.search(line)) is not None:
            current = m.group(1)
            fields[current] = {}
        elif (m := _PROPERTIES.search(line)) is not None:
            properties = m.group(1)
        elif (m := _FRAME.search(line)) is not None and properties in fields:
            fields[properties].update(local_bytes=int(m.group(1)), spill_stores=int(m.group(2)),
                                      spill_loads=int(m.group(3)))
        elif (m := _USED.search(line)) is not None and current in fields:
            smem, cmem = _SMEM.search(line), _CMEM.search(line)
            fields[current].update(registers=int(m.group(1)),
                                   shared_bytes=int(smem.group(1)) if smem else 0,
                                   constant_bytes=int(cmem.group(1)) if cmem else 0)
    return tuple(KernelInfo(name, chip, f.get("registers", 0), f.get("spill_stores", 0),
                            f.get("spill_loads", 0), f.get("local_bytes", 0),
                            f.get("shared_bytes", 0), f.get("constant_bytes", 0), ptx_version,
                            binary_version, isa)
                 for name, f in fields.items())


def fatbin(fatbinary: str, images: list[tuple[str, bytes, bytes | None]], module: str) -> bytes:
    """A fatbin holding, per ``(chip, ptx, cubin)``, the cubin (when not None) and the PTX
    (which the driver compiles for newer chips). The driver loads the best match for its GPU."""
    with tempfile.TemporaryDirectory(prefix="pywave-fatbin-") as tmp:
        command = [fatbinary, "-64", f"--create={os.path.join(tmp, 'out.fatbin')}"]
        for i, (chip, ptx, cubin) in enumerate(images):
            sm = chip.split("_", 1)[-1]
            path = os.path.join(tmp, f"{i}-{chip}")
            with open(path + ".ptx", "wb") as fh:
                fh.write(ptx_text(ptx))
            if cubin is not None:
                with open(path + ".cubin", "wb") as fh:
                    fh.write(cubin)
                command.append(f"--image3=kind=elf,sm={sm},file={path}.cubin")
            command.append(f"--image3=kind=ptx,sm={sm},file={path}.ptx")
        output = _run(command, f"fatbinary for gpu.module @{module}")
        report(output, f"gpu.module @{module}, fatbinary")
        with open(os.path.join(tmp, "out.fatbin"), "rb") as fh:
            return fh.read()


def _run(command: list[str], what: str) -> str:
    """Run ``command``; its stdout and stderr together. CompileError when it cannot be run,
    times out or fails."""
    log.debug("running %s", " ".join(command))
    try:
        proc = subprocess.run(command, capture_output=True, text=True, errors="replace",
                              timeout=TIMEOUT)
    except (OSError, subprocess.SubprocessError) as exc:
        raise CompileError(f"{what}: cannot run {command[0]}: {exc}") from None
    output = proc.stdout + proc.stderr
    if proc.returncode != 0:
        raise CompileError(f"{what} failed (exit status {proc.returncode}):\n{output.strip()}")
    return output
