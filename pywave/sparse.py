"""The sparse part of MLIR's mgpu* ABI: entry point names, libraries, the sparsifier pipeline.

The sparse part of MLIR's ``mgpu*`` runtime ABI: the cuSPARSE and cuSPARSELt entry points
libwavert implements (``libwavert/src/sparse.c``), the pass pipeline that hands sparse kernels
to them, and finding NVIDIA's libraries for libwavert; and the names of MLIR's sparse runtime
that libwavert implements: its file reader (``sparse_tensor.new`` of a file;
``libwavert/src/sparse_file.c``) and its tensor storage (``libwavert/src/sparse_storage.c``).

libwavert opens ``libcusparse`` / ``libcusparseLt`` itself, on the first sparse call:
``$WAVERT_CUSPARSE_LIBRARY`` / ``$WAVERT_CUSPARSELT_LIBRARY``, else the sonames (the loader's
path, or a copy already loaded), else ``lib64/`` of ``$CUDA_HOME``, ``$CUDA_PATH`` and
``/usr/local/cuda``. NVIDIA's pip wheels (``nvidia-cusparse-cu12``, ``nvidia-cusparselt-cu12``,
CUDA 13's ``nvidia/cu13``) are outside all of these, so before host code that calls the
library runs, :func:`preload` loads it from where the toolkit is looked for
(:mod:`pywave.kernels.toolkit`'s order: ``$PYWAVE_CUDA_PATH``, ``$CUDA_HOME``, ``$CUDA_PATH``, the
wheels on ``sys.path``, ``/usr/local/cuda``): libwavert's ``dlopen`` of the soname then finds
that copy. Imports no MLIR.
"""

from __future__ import annotations

import ctypes
import logging
import os
import sys
import threading
from collections.abc import Iterable

log = logging.getLogger("pywave.sparse")

#: cuSPARSE entry points of libwavert (CudaRuntimeWrappers.cpp's names and signatures).
CUSPARSE_FUNCTIONS = frozenset({
    "mgpuCreateSparseEnv", "mgpuDestroySparseEnv", "mgpuCreateDnVec", "mgpuDestroyDnVec",
    "mgpuCreateDnMat", "mgpuDestroyDnMat", "mgpuCreateCoo", "mgpuCreateCooAoS",
    "mgpuCreateCsr", "mgpuCreateCsc", "mgpuCreateBsr", "mgpuDestroySpMat",
    "mgpuSpMatGetSize", "mgpuSetCsrPointers", "mgpuSpMVBufferSize", "mgpuSpMV",
    "mgpuSpMMBufferSize", "mgpuSpMM", "mgpuSDDMMBufferSize", "mgpuSDDMM",
    "mgpuSpGEMMCreateDescr", "mgpuSpGEMMDestroyDescr", "mgpuSpGEMMWorkEstimation",
    "mgpuSpGEMMCompute", "mgpuSpGEMMCopy",
})
#: cuSPARSELt (2:4 structured sparsity) entry points of libwavert.
CUSPARSELT_FUNCTIONS = frozenset({
    "mgpuCreateSparseLtEnv", "mgpuDestroySparseLtEnv", "mgpuCreateCuSparseLtDnMat",
    "mgpuDestroyCuSparseLtDnMat", "mgpuCusparseLtCreate2To4SpMat",
    "mgpuDestroyCuSparseLtSpMat", "mgpuCuSparseLtSpMMBufferSize", "mgpuCuSparseLtSpMM",
})
#: Every sparse entry point (host code checks for a recorded error after each call).
FUNCTIONS = CUSPARSE_FUNCTIONS | CUSPARSELT_FUNCTIONS

#: The overhead (coordinate) and value type suffixes of the reader's ReadToBuffers functions,
#: MLIR's names: index (0) and unsigned widths; every PrimaryType.
READER_OVERHEADS = ("0", "64", "32", "16", "8")
READER_VALUES = ("F64", "F32", "F16", "BF16", "I64", "I32", "I16", "I8", "C64", "C32")
#: MLIR's sparse tensor file reader (SparseTensorRuntime.h) as libwavert implements it
#: (``wavert_sparse_file.h``): Matrix Market and FROSTT files read for ``sparse_tensor.new``.
#: Each records its errors as the ``mgpu*`` functions do, so host code checks after each call.
READER_FUNCTIONS = frozenset({
    "getTensorFilename", "_mlir_ciface_createCheckedSparseTensorReader",
    "_mlir_ciface_getSparseTensorReaderDimSizes", "getSparseTensorReaderDimRank",
    "getSparseTensorReaderNSE", "getSparseTensorReaderIsSymmetric", "delSparseTensorReader",
} | {f"_mlir_ciface_getSparseTensorReaderReadToBuffers{c}{v}"
     for c in READER_OVERHEADS for v in READER_VALUES})
#: The tensor storage of MLIR's sparse runtime (``enable-runtime-library=true``) as libwavert
#: implements it (``wavert_sparse_storage.h``; dense, compressed, loose compressed and
#: singleton levels).
STORAGE_FUNCTIONS = frozenset({
    "_mlir_ciface_newSparseTensor", "sparseLvlSize", "sparseDimSize", "endLexInsert",
    "delSparseTensor",
} | {f"_mlir_ciface_sparse{kind}{c}" for kind in ("Positions", "Coordinates", "CoordinatesBuffer")
     for c in READER_OVERHEADS}
  | {f"_mlir_ciface_{kind}{v}" for kind in ("sparseValues", "lexInsert") for v in READER_VALUES})
#: Every function of MLIR's sparse runtime that libwavert implements.
RUNTIME_FUNCTIONS = READER_FUNCTIONS | STORAGE_FUNCTIONS


def sparsifier_pipeline(chip: str = "sm_90") -> str:
    """The pass pipeline (``passes=`` / ``--pass-pipeline``) that lowers ``sparse_tensor``
    kernels as upstream's ``--sparsifier`` does, handing SpMV, SpMM and SDDMM on CSR/COO
    matrices to cuSPARSE (``enable-gpu-libgen``) without MLIR's sparse runtime library, to the
    LLVM dialect that pywave's host stage takes. ``gpu-triple`` is needed: without it the
    sparsifier does not lower the GPU ops it made."""
    return ("builtin.module(sparsifier{enable-runtime-library=false enable-gpu-libgen "
            f"gpu-triple=nvptx64-nvidia-cuda gpu-chip={chip}}})")


#: Per library: libwavert's override variable, the sonames it opens, and the wheel folders
#: (under site-packages) that hold it.
LIBRARIES = {
    "cuSPARSE": ("WAVERT_CUSPARSE_LIBRARY",
                 ("libcusparse.so.12", "libcusparse.so.13", "libcusparse.so.11"),
                 (os.path.join("nvidia", "cusparse", "lib"),
                  os.path.join("nvidia", "cu13", "lib"))),
    "cuSPARSELt": ("WAVERT_CUSPARSELT_LIBRARY", ("libcusparseLt.so.0",),
                   (os.path.join("nvidia", "cusparselt", "lib"),)),
}

_lock = threading.Lock()
_loaded: dict[str, ctypes.CDLL] = {}   # kept loaded for libwavert's dlopen to find
_tried: set[str] = set()               # each library is looked for once per process


def candidates(library: str) -> list[str]:
    """Paths where ``library`` (a key of :data:`LIBRARIES`) may be, in the toolkit's order:
    ``lib64``/``lib`` of ``$PYWAVE_CUDA_PATH``, ``$CUDA_HOME``, ``$CUDA_PATH``; the wheel
    folders on ``sys.path``; ``/usr/local/cuda/lib64``. Existing files only."""
    _, sonames, wheel_dirs = LIBRARIES[library]
    folders = []
    for variable in ("PYWAVE_CUDA_PATH", "CUDA_HOME", "CUDA_PATH"):
        root = os.environ.get(variable)
        if root:
            folders += [os.path.join(root, "lib64"), os.path.join(root, "lib")]
    folders += [os.path.join(entry or ".", rel) for entry in sys.path for rel in wheel_dirs]
    folders.append("/usr/local/cuda/lib64")
    return [os.path.join(f, name) for f in folders for name in sonames
            if os.path.isfile(os.path.join(f, name))]


def preload(symbols: Iterable[str]) -> None:
    """Load cuSPARSE / cuSPARSELt for host code whose undefined ``symbols`` call them, unless
    libwavert's override variable is set or the library is loaded already. Loads the soname
    from the loader's path if it can, else the first of :func:`candidates`. Never raises: a
    library not found (or not loadable) is reported by libwavert when the program calls it,
    naming what it tried. Thread-safe; each library is looked for once per process."""
    needed = set(symbols)
    for library, functions in (("cuSPARSE", CUSPARSE_FUNCTIONS),
                               ("cuSPARSELt", CUSPARSELT_FUNCTIONS)):
        if needed & functions and library not in _tried:
            with _lock:
                if library not in _tried:
                    _preload(library)
                    _tried.add(library)


def named_in(object_code: bytes) -> set[str]:
    """The sparse entry points whose names the ELF string table of ``object_code`` (host
    object code) holds, for loaders that do not read its symbol table
    (:mod:`pywave.host.sharedobj`). A name counts only as a whole NUL-terminated string."""
    return {f for f in FUNCTIONS if b"\0" + f.encode() + b"\0" in object_code}


def _preload(library: str) -> None:
    variable, sonames, _ = LIBRARIES[library]
    if os.environ.get(variable):
        log.debug("%s: $%s is set; libwavert opens it", library, variable)
        return
    for path in list(sonames) + candidates(library):
        try:
            _loaded[library] = ctypes.CDLL(path)
        except OSError as exc:
            log.debug("%s: cannot load %s: %s", library, path, exc)
            continue
        log.debug("%s: loaded %s", library, path)
        return
    log.debug("%s: not found (sonames %s, %s); libwavert reports it when called", library,
              ", ".join(sonames), ", ".join(LIBRARIES[library][2]))


__all__ = ["CUSPARSELT_FUNCTIONS", "CUSPARSE_FUNCTIONS", "FUNCTIONS", "LIBRARIES",
           "READER_FUNCTIONS", "READER_OVERHEADS", "READER_VALUES", "RUNTIME_FUNCTIONS",
           "STORAGE_FUNCTIONS", "candidates", "named_in", "preload", "sparsifier_pipeline"]
