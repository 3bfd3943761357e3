"""The chips each gpu.module is built for: the one reader and writer of its targets.

The ``targets`` attribute (``#nvvm.target``/``#rocdl.target``) is read and written here
only, and the rule that assigns a module its chips lives here.

A target is handled as a :class:`TargetAttr`: its dialect and its parameters by name (the
values as MLIR prints them). Every change (a chip, the PTX features, ptxas arguments) is a
parameter change written back with :func:`write`; nothing else in pywave edits the
attribute. Upstream's Python bindings give these attributes no accessors, so the printed
form is split into parameters here, once (the syntax: MLIR's ``NVVMTargetAttr`` and
``ROCDLTargetAttr`` assembly formats, ``key = value`` pairs).
"""

from __future__ import annotations

import dataclasses
import logging
import string
from typing import Callable

from mlir import ir

from ..errors import CompileError
from ..frontend import validate
from ..lowering import LoweringOptions
from ..mlirutil import gpu_modules, kernels_of, sym_name
from ..program import Target

log = logging.getLogger("pywave.kernels")

#: The chip MLIR gives a target that names none (``NVVMTargetAttr``/``ROCDLTargetAttr``).
DEFAULT_CHIPS = {"nvvm": "sm_50", "rocdl": "gfx900"}

_CLOSERS = {"[": "]", "{": "}", "(": ")", "<": ">"}


@dataclasses.dataclass(frozen=True)
class TargetAttr:
    """One entry of a ``targets`` list.

    ``dialect`` is ``"nvvm"`` or ``"rocdl"`` for GPU targets and ``""`` for any other
    attribute (kept as ``text``); ``params`` are the ``(name, value)`` pairs in printed order,
    each value as MLIR prints it (``("chip", '"sm_90"')``, ``("O", "3")``)."""
    dialect: str
    params: tuple[tuple[str, str], ...] = ()
    text: str = ""

    @classmethod
    def parse(cls, text: str) -> "TargetAttr":
        """A target from its printed form (``#nvvm.target<chip = "sm_90", O = 3>``)."""
        for dialect in ("nvvm", "rocdl"):
            head = f"#{dialect}.target"
            if text == head:
                return cls(dialect)
            if text.startswith(head + "<") and text.endswith(">"):
                pairs = tuple(_pair(p) for p in _split_top(text[len(head) + 1:-1]))
                return cls(dialect, pairs)
        return cls("", (), text)

    @classmethod
    def make(cls, dialect: str, **params: str) -> "TargetAttr":
        return cls(dialect, tuple(params.items()))

    def get(self, name: str) -> str | None:
        return next((v for k, v in self.params if k == name), None)

    def with_param(self, name: str, value: str) -> "TargetAttr":
        """This target with ``name`` set to ``value`` (replaced in place, else appended)."""
        if self.get(name) is None:
            return dataclasses.replace(self, params=self.params + ((name, value),))
        return dataclasses.replace(self, params=tuple(
            (k, value if k == name else v) for k, v in self.params))

    @property
    def chip(self) -> str:
        """The chip, MLIR's default where the target names none."""
        value = self.get("chip")
        return value.strip('"') if value else DEFAULT_CHIPS[self.dialect]

    @property
    def opt_level(self) -> int:
        """``O``, MLIR's default 2 where the target names none."""
        value = self.get("O")
        if value is None:
            return 2
        if not value.isdigit():
            raise CompileError(f"cannot read the optimisation level O = {value} of {self}")
        return int(value)

    @property
    def ptxas_cmd_options(self) -> tuple[str, ...]:
        """The strings of ``flags``' ``"ptxas-cmd-options"`` array, decoded (() without one).
        CompileError for an entry that is not a string or a value this reader cannot take."""
        flags = self.get("flags")
        if flags is None:
            return ()
        if not (flags.startswith("{") and flags.endswith("}")):
            raise CompileError(f"cannot read the flags of {self}")
        for entry in _split_top(flags[1:-1]):
            key, sep, value = entry.partition(" = ")
            if key.strip() not in ('"ptxas-cmd-options"', "ptxas-cmd-options"):
                continue
            value = value.strip()
            if not (sep and value.startswith("[") and value.endswith("]")):
                raise CompileError(f"ptxas-cmd-options of {self} is not an array of strings")
            return tuple(_string(s, self) for s in _split_top(value[1:-1]))
        return ()

    def __str__(self) -> str:
        if not self.dialect:
            return self.text
        head = f"#{self.dialect}.target"
        return head + ("<" + ", ".join(f"{k} = {v}" for k, v in self.params) + ">"
                       if self.params else "")


def _split_top(body: str) -> list[str]:
    """``body`` split at its top-level commas (not inside quotes or brackets)."""
    parts, depth, start, quoted, i = [], [], 0, False, 0
    while i < len(body):
        c = body[i]
        if quoted:
            if c == "\\":
                i += 1
            elif c == '"':
                quoted = False
        elif c == '"':
            quoted = True
        elif c in _CLOSERS:
            depth.append(_CLOSERS[c])
        elif depth and c == depth[-1]:
            depth.pop()
        elif c == "," and not depth:
            parts.append(body[start:i].strip())
            start = i + 1
        i += 1
    parts.append(body[start:].strip())
    return [p for p in parts if p]


def _string(literal: str, where: "TargetAttr") -> str:
    """The value of a string literal as MLIR prints it (``"a\\5Cb"``): printable ASCII as it
    is, ``\\\\`` a backslash, ``\\XX`` any other byte in hex (``\\22`` a quote); UTF-8."""
    if len(literal) < 2 or literal[0] != '"' or literal[-1] != '"':
        raise CompileError(f"ptxas-cmd-options of {where} holds {literal}, not a string")
    out, body, i = bytearray(), literal[1:-1], 0
    while i < len(body):
        c = body[i]
        if c != "\\":
            out += c.encode()
            i += 1
        elif body[i + 1:i + 2] == "\\":
            out += b"\\"
            i += 2
        else:
            digits = body[i + 1:i + 3]
            if len(digits) != 2 or not all(d in string.hexdigits for d in digits):
                raise CompileError(f"cannot read the string {literal} of {where}")
            out.append(int(digits, 16))
            i += 3
    try:
        return out.decode()
    except UnicodeDecodeError:
        raise CompileError(f"the string {literal} of {where} is not UTF-8") from None


def _pair(part: str) -> tuple[str, str]:
    name, sep, value = part.partition(" = ")
    if not sep:
        raise CompileError(f"cannot read the target parameter {part!r}")
    return name.strip(), value.strip()


def read(gmod: ir.Operation) -> list[TargetAttr]:
    """The ``gpu.module``'s targets, in order ([] when it has none)."""
    if "targets" not in gmod.attributes:
        return []
    return [TargetAttr.parse(str(a)) for a in ir.ArrayAttr(gmod.attributes["targets"])]


def first_attribute(gmod: ir.Operation) -> ir.Attribute:
    """The ``gpu.module``'s first target as an MLIR attribute (what a ``gpu.binary`` object
    names as its target); the module must have one."""
    return ir.ArrayAttr(gmod.attributes["targets"])[0]


def write(gmod: ir.Operation, targets: list[TargetAttr]) -> None:
    """Set the ``gpu.module``'s ``targets`` list: the one writer of the attribute."""
    gmod.attributes["targets"] = ir.ArrayAttr.get(
        [ir.Attribute.parse(str(t), gmod.context) for t in targets], gmod.context)


def module_targets(gmod: ir.Operation) -> list[Target]:
    """The targets of a ``gpu.module``'s ``#nvvm.target``/``#rocdl.target`` list, in order
    ([] when it has none; a target without a chip gets MLIR's default). CompileError for
    another kind of target, targets of two backends, and a chip LLVM does not know
    (:func:`pywave.frontend.validate.chip`: LLVM asserts on some)."""
    out = []
    for attr in read(gmod):
        if not attr.dialect:
            raise CompileError(f"gpu.module @{sym_name(gmod)} has the target {attr}; pywave "
                               "supports #nvvm.target and #rocdl.target")
        validate.chip(attr.chip, f"the chip of gpu.module @{sym_name(gmod)}")
        out.append(Target(attr.dialect, attr.chip))
    if len({t.backend for t in out}) > 1:
        raise CompileError(f"gpu.module @{sym_name(gmod)} lists targets of two backends: "
                           + ", ".join(f"{t.chip} ({t.backend})" for t in out))
    return out


def module_target(gmod: ir.Operation) -> Target | None:
    """The first of :func:`module_targets` (None when the module has none)."""
    found = module_targets(gmod)
    return found[0] if found else None


# --------------------------------------------------------------------------------------------
# What pywave writes: its own NVVM target, ptxas arguments, the PTX version, chips
# --------------------------------------------------------------------------------------------
def ptxas_flags(options: LoweringOptions) -> str | None:
    """The ``flags`` value carrying :attr:`LoweringOptions.ptxas_arguments`
    (``{"ptxas-cmd-options" = [...]}``; None without any). The arguments are validated
    strings: no quote or backslash to escape."""
    args = options.ptxas_arguments
    if not args:
        return None
    return '{"ptxas-cmd-options" = [' + ", ".join(f'"{a}"' for a in args) + "]}"


def nvvm_target(chip: str, options: LoweringOptions) -> TargetAttr:
    """pywave's ``#nvvm.target`` for ``chip`` with the lowering options (kernel opt level,
    features, ptxas arguments)."""
    target = TargetAttr.make("nvvm", chip=f'"{chip}"', O=str(options.kernel_opt_level))
    if options.features:
        target = target.with_param("features", f'"{options.features}"')
    flags = ptxas_flags(options)
    return target.with_param("flags", flags) if flags else target


def add_ptxas_arguments(module: ir.Module, options: LoweringOptions) -> None:
    """Give each ``gpu.module`` that brings its own ``#nvvm.target`` the ptxas arguments
    (``-lineinfo``, ``ptxas_options``). Run before target-less modules get pywave's target
    (which carries them already). A target with ``flags`` of its own is a CompileError (they
    would be replaced)."""
    flags = ptxas_flags(options)
    if flags:
        _fill_nvvm_param(module, "flags", flags, lambda gmod, t, own: (
            f"gpu.module @{sym_name(gmod)} has the target {t} with flags of its own: put the "
            "ptxas options (ptxas-cmd-options) and -lineinfo there, or drop "
            "line_info/ptxas_options"))


def add_features(module: ir.Module, options: LoweringOptions) -> None:
    """Give each ``gpu.module``'s own ``#nvvm.target`` without ``features`` the requested
    ``features`` (``lowering=LoweringOptions(features=...)``, ``--features``), as pywave's own
    targets get them. A target whose ``features`` differ is a CompileError naming both (one
    would be dropped)."""
    if not options.features:
        return
    wanted = f'"{options.features}"'
    _fill_nvvm_param(module, "features", wanted, lambda gmod, t, own: None if own == wanted else (
        f"gpu.module @{sym_name(gmod)} has the target {t} but the requested "
        f"features are {options.features}: drop one of them"))


def _fill_nvvm_param(module: ir.Module, name: str, value: str,
                     refuse: "Callable[[ir.Operation, TargetAttr, str], str | None] | None"
                     ) -> None:
    """Set the parameter ``name`` to ``value`` (as MLIR prints it) on every ``#nvvm.target``
    that has none. One that has its own is kept, unless ``refuse(gmod, target, own value)``
    gives a message: then that is a CompileError."""
    for gmod in gpu_modules(module):
        targets = read(gmod)
        filled = []
        for t in targets:
            own = t.get(name) if t.dialect == "nvvm" else None
            if t.dialect == "nvvm" and own is None:
                t = t.with_param(name, value)
            elif own is not None and refuse is not None and (why := refuse(gmod, t, own)):
                raise CompileError(why)
            filled.append(t)
        if filled != targets:
            write(gmod, filled)


def attach_nvvm_targets(module: ir.Module, target: Target | None,
                        options: LoweringOptions) -> None:
    """Give target-less ``gpu.module``s with kernels pywave's ``#nvvm.target`` per chip of
    ``target`` when it is an NVIDIA target; the others are left to :func:`assign_targets`."""
    if target is None or target.backend != "nvvm":
        return
    made = [nvvm_target(chip, options) for chip in target.chips]
    for gmod in gpu_modules(module):
        if kernels_of(gmod) and not read(gmod):
            write(gmod, made)


def raise_ptx_version(module: ir.Module, version: int | None) -> None:
    """Give every ``#nvvm.target`` without ``features`` ``+ptx<version>`` (the highest PTX ISA
    the toolkit's ptxas accepts). Targets with ``features`` (the user's,
    ``lowering=LoweringOptions(features=...)``) are left as they are."""
    if version is not None:
        _fill_nvvm_param(module, "features", f'"+ptx{version}"', None)


def assign_targets(module: ir.Module, requested: Target | None,
                   default: Target | None) -> Target:
    """Decide each ``gpu.module``'s chips (the rule of README "Targets and chips"):

    - ``requested`` (``target=``, one chip or several) applies to every module. A module
      whose own ``#nvvm.target`` list names other chips is rebuilt for the requested ones,
      keeping its targets' other parameters (``O``, features, flags; those of its target of
      the same chip, else of its first), with a WARNING naming both lists;
    - without ``requested``, a module keeps the chips its IR lists (all of them), and one
      without targets gets ``default`` (GPU 0's chip).

    Another backend than the requested one is a CompileError. Empty ``gpu.module``s are
    removed. Returns the program's target: its backend and every chip built, in order
    (``Target.chip`` ``"sm_80,sm_90"`` for several)."""
    found: dict[str, list[Target]] = {}
    for gmod in gpu_modules(module):
        name = sym_name(gmod)
        if not kernels_of(gmod):
            log.debug("removing empty gpu.module @%s", name)
            gmod.erase()
            continue
        own = module_targets(gmod)
        wanted = requested or default
        if own and wanted is not None and own[0].backend != wanted.backend:
            origin = "the requested target" if requested else "the GPU's chip"
            raise CompileError(
                f"gpu.module @{name} has the target {own[0].backend} ({own[0].chip}) but "
                f"{origin} is {wanted.chip} ({wanted.backend}); a {own[0].backend} module "
                f"cannot run on a {wanted.backend} device")
        if own and requested is not None:
            found[name] = _retarget(gmod, own, requested)
        elif own:
            found[name] = own
        elif wanted is None:
            raise CompileError(
                f"gpu.module @{name} has no target and no GPU was found to take one from; "
                "pass target='cpu' to run the kernels on this machine's CPU, or "
                "target='sm_90' (NVIDIA) or target='gfx942' (AMD) to compile for a GPU; on "
                "the command line --target cpu or --target sm_90")
        else:
            write(gmod, [TargetAttr.make(wanted.backend, chip=f'"{chip}"', O="3")
                         for chip in wanted.chips])
            found[name] = [Target(wanted.backend, chip) for chip in wanted.chips]
    backends = {t.backend for targets in found.values() for t in targets}
    if len(backends) > 1:
        raise CompileError("gpu.modules target different backends: " + ", ".join(
            f"@{n}: {t[0].backend} ({t[0].chip})" for n, t in found.items()))
    chips = list(dict.fromkeys(t.chip for targets in found.values() for t in targets))
    if backends == {"rocdl"} and any(len(t) > 1 for t in found.values()):
        raise CompileError("several chips per gpu.module are supported on NVIDIA targets only; "
                           "AMD modules: " + ", ".join(
                               f"@{n}: {', '.join(x.chip for x in t)}" for n, t in found.items()))
    if chips:
        return Target(backends.pop(), ",".join(chips))
    return requested or default or Target("nvvm", "sm_90")


def _retarget(gmod: ir.Operation, own: list[Target], requested: Target) -> list[Target]:
    """Give ``gmod`` one target per requested chip (see :func:`assign_targets`)."""
    own_chips = [t.chip for t in own]
    if own_chips == list(requested.chips):
        return own
    log.warning("gpu.module @%s lists the chip%s %s in its IR but the requested target is %s: "
                "building for %s (the request wins; drop the chip from the IR, or request it, "
                "to silence this)", sym_name(gmod), "s" if len(own) > 1 else "",
                ", ".join(own_chips), requested.chip, requested.chip)
    attrs = read(gmod)
    write(gmod, [attrs[own_chips.index(chip)] if chip in own_chips else
                 attrs[0].with_param("chip", f'"{chip}"') for chip in requested.chips])
    return [Target(requested.backend, chip) for chip in requested.chips]
