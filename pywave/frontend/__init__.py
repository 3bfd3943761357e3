"""What runs first: the input, the checks, parsing, the user's passes and the prepare stage.

The module as given (``source``), the checks that run before MLIR or LLVM sees a value
(``validate``), parsing (``parse``), the user's own passes (``passes``, ``transform_passes``)
and the preparation every module gets (``prepare``)."""
