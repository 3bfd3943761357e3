"""The host stages: signatures and launchers, host code lowered to LLVM, object code.

Stages ``signatures``, ``host`` and ``llvm-codegen``: the host functions' arguments
(``signature``, ``launchers``), host code lowered to LLVM with launches rewritten into
libwavert calls (``lowering``, ``async_inline``), and LLVM IR to object code (``jit``,
``sharedobj``)."""
