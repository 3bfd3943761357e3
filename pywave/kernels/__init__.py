"""Stage kernels: outlined gpu.modules to kernel images; the stage runs through lower().

``targets`` assigns each ``gpu.module`` its chips (the one reader and writer of the
``targets`` attribute); ``options`` applies the kernel compile options; ``rewrites`` holds
the rewrites for what upstream's lowerings lack; ``nvvm`` lowers and serialises for NVIDIA
(``ptxas`` assembles per chip, ``toolkit`` finds the CUDA toolkit), ``rocdl`` for AMD;
``images`` swaps in images the user gives; ``params`` drops the kernel parameters no kernel
reads. The stage runs through :func:`lower` alone; from
outside, the pipeline reads ``toolkit`` (the cache key needs the toolkit's version) and
``images`` (``binaries=`` files, before any compile). MLIR
is imported when :func:`lower` runs, so importing ``toolkit`` or ``images`` loads none.
"""

from __future__ import annotations

import typing

from ..errors import CompileError

if typing.TYPE_CHECKING:   # the annotations' names only: help(pywave.kernels) shows lower()
    from collections.abc import Callable, Mapping

    from mlir import ir

    from ..lowering import LoweringOptions
    from ..program import Binary, Target


def lower(module: "ir.Module", *, requested: "Target | None", found: "Target | None",
          options: "LoweringOptions", fmt: str, text: str,
          replacements: "Mapping[str, Binary]",
          observe: "Callable[[ir.Module, str, Callable[[str], str]], None] | None" = None,
          ) -> "tuple[Target, list[Binary]]":
    """Assign the targets, lower and serialise the kernels, swap in the replacements.

    ``requested`` is the ``target=`` chip(s) (None: the IR's own, else ``found``, GPU 0's);
    ``fmt`` the image format asked for (``"auto"``, ``"cubin"``, ``"ptx"``, ``"fatbin"``,
    ``"hsaco"``); ``observe`` (dumps, ``keep_stages``) sees the NVVM-lowered module before
    serialisation (:func:`pywave.kernels.nvvm.lower_nvvm`). Returns the program's target and
    one :class:`pywave.program.Binary` per ``gpu.module``; CompileError for what cannot be
    built (naming the module, the option or the tool)."""
    from . import images, nvvm, targets, toolkit
    from . import compile_flags as kernel_options
    from .. import lowering
    if requested is not None and requested.is_cpu:
        from . import cpu
        if fmt not in ("auto", "cpu-so"):
            raise CompileError(f"format={fmt!r} is a GPU format; target='cpu' produces "
                               "format='cpu-so' (or 'auto')")
        binaries, dropped = cpu.lower_cpu(module, text=text,
                                          opt_level=min(options.kernel_opt_level, 3),
                                          keep_params=options.keep_kernel_params,
                                          checks=options.checks)
        binaries = [b._replace(params=dropped.get(b.name, ())) for b in binaries]
        return requested, images.replace(binaries, replacements, requested)
    if options.checks:
        raise CompileError("checks=True needs target='cpu': the checked mode (bounds, barrier "
                           "and race checks) runs the kernels on the CPU device")
    targets.add_ptxas_arguments(module, options)
    targets.add_features(module, options)
    targets.attach_nvvm_targets(module, requested or found, options)
    target = targets.assign_targets(module, requested, found)
    if target.backend == "rocdl":
        from . import rocdl
        kernel_options.check_amd(options, target.chip)
        binaries, dropped = rocdl.lower_rocdl(module, fmt=fmt, text=text,
                                              opt_level=options.kernel_opt_level,
                                              line_info=options.line_info,
                                              keep_params=options.keep_kernel_params)
    else:
        from .rewrites import subgroups
        subgroups.lower_subgroup_ops(module)
        if len(target.chips) == 1:
            fmt = lowering.image_format(fmt, target.chip, toolkit.cuda_toolkit())
        assembled, dropped = nvvm.lower_nvvm(module, fmt=fmt, text=text, observe=observe,
                                             options=options)
        binaries = [assembled.get(b.name, b) for b in nvvm.collect_binaries(module, target)]
    binaries = [b._replace(params=dropped.get(b.name, ())) for b in binaries]
    return target, images.replace(binaries, replacements, target)
