"""Kernel rewrites for ops and semantics upstream's NVVM/ROCDL lowerings do not handle.

They run before the lowering; each module's docstring names the gap it fills."""
