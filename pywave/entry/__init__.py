"""The entry points beside :func:`pywave.compile`: :func:`pywave.compile_many` (``many``),
:func:`pywave.export` (``c_export``), ``pywave run`` (``run``), :class:`pywave.ExecutionEngine`
(``engine``) and the command line (``cli``, ``info``, ``cache_admin``)."""
