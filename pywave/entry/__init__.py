"""The entry points beside compile(): compile_many, export, run, ExecutionEngine, the CLI.

``many`` (:func:`pywave.compile_many`), ``c_export`` (:func:`pywave.export`), ``run``
(``pywave run``), ``engine`` (:class:`pywave.ExecutionEngine`) and the command line (``cli``,
``info``, ``cache_admin``). Each compiles through :mod:`pywave.lookup`."""
