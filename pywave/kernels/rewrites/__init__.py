"""Kernel rewrites that run before upstream's NVVM or ROCDL lowering, for ops and semantics
those lowerings do not handle (each module's docstring names its gap)."""
