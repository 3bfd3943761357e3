"""Stage ``kernels``, CPU: the image ABI's constants shared with libwavert's CPU backend.

The modules that build the image (:mod:`pywave.kernels.cpu`, whose docstring describes the
ABI; :mod:`.cpu_lanes`, :mod:`.cpu_split`) take them from here; ``libwavert/src/backend_cpu.c``
defines the same values."""

#: Prefix of the image's ABI symbols.
PREFIX = "__wavert_cpu_"
#: Lanes of a subgroup, as on NVIDIA GPUs (libwavert's WAVERT_CPU_WARP).
SUBGROUP_SIZE = 32
