"""What inspect.signature() and help() show for compiled host functions and launchers.

What ``inspect.signature`` and ``help()`` show for compiled functions: the
``__signature__`` and ``__doc__`` of ``pywave._native.HostFunction`` and
``pywave._native.KernelLauncher`` objects, built here from their parameter and result
records (:class:`pywave.program.Param`) when asked for (the C getters call :func:`signature`
and :func:`doc`). No MLIR import; thread-safe (pure functions of immutable records).

The notation: a tensor parameter is ``Tensor[float32, (?, 4)]`` (:class:`TensorType`: any
DLPack tensor of that NumPy dtype, rank and static sizes, ``?`` a dynamic size); a memref
result is ``Memref[float32, (?, 4)]`` (:class:`MemrefType`: the call returns a
``pywave._native.Memref`` of that dtype and rank, which exports its memory through DLPack);
scalars are ``int``, ``float`` or ``bool`` (the MLIR type is in ``help()``). The return
annotation is what the call returns (``results.c``): ``None`` without results, the one
result's annotation, else ``tuple[...]`` of them in order.
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any, Sequence

from .._native import LAUNCH_PARAMS
from ..program import DTYPES, DYNAMIC, SIGNLESS, dtype_of


def _scalar(kind: str) -> tuple[Any, str]:
    """A scalar kind's Python type and what it accepts, from its :data:`DTYPES` row."""
    d = DTYPES.get(kind)
    if d is None:
        return Any, "a number"
    if d.numpy == "bool":
        return bool, "a bool (or 0/1)"
    if d.numpy.startswith("int"):
        return int, f"an int in [-2**{d.bits - 1}, 2**{d.bits - 1} - 1]"
    if d.numpy.startswith("uint"):
        return int, f"an int in [0, 2**{d.bits} - 1]"
    if d.bits == 64:
        return float, "a float"
    return float, (f"a float (rounded to {d.mlir}; finite values beyond its range are "
                   "errors)")


#: The annotation of ``grid=`` and ``block=``: one extent or up to three (x, y, z).
_EXTENTS = int | tuple[int, ...]

_STREAM_DOC = ("the stream to launch on: a CUDA/HIP stream object (``__cuda_stream__``, "
               "torch/cupy streams) or a raw handle (int); default: the tensors' producer's "
               "current stream, else the legacy default stream")


@dataclasses.dataclass(frozen=True)
class TensorType:
    """The annotation of a tensor parameter: ``dtype`` (NumPy-style name, ``"float32"``),
    ``shape`` (static sizes; None where the size is dynamic), ``writable`` (the function may
    write it: read-only tensors are refused), ``mlir_type`` (the memref type). Its repr is
    ``Tensor[float32, (?, 4)]``."""

    dtype: str
    shape: tuple[int | None, ...]
    writable: bool
    mlir_type: str

    @property
    def rank(self) -> int:
        return len(self.shape)

    def __repr__(self) -> str:
        return f"Tensor[{self.dtype}, {_sizes(self.shape)}]"


@dataclasses.dataclass(frozen=True)
class MemrefType:
    """The annotation of a memref result: the call returns a ``pywave._native.Memref`` (not a
    torch/NumPy array: ``torch.from_dlpack``, ``np.from_dlpack``... take it without a copy)
    with ``dtype`` (NumPy-style name), ``shape`` (static sizes; None where the size is
    dynamic, known after the call), ``mlir_type`` (the memref type) and ``memory``
    (``"device"`` when the memory space says GPU memory, else ``""``: where the call's
    allocation lives, as the driver reports). Its repr is ``Memref[float32, (?, 4)]``."""

    dtype: str
    shape: tuple[int | None, ...]
    mlir_type: str
    memory: str

    @property
    def rank(self) -> int:
        return len(self.shape)

    def __repr__(self) -> str:
        return f"Memref[{self.dtype}, {_sizes(self.shape)}]"


def _sizes(shape: tuple[int | None, ...]) -> str:
    """``(?, 4)``, ``(16,)``, ``()``: a shape as annotations show it."""
    sizes = ", ".join("?" if s is None else str(s) for s in shape)
    return f"({sizes},)" if len(shape) == 1 else f"({sizes})"


def _numpy_dtype(param: Any) -> str:
    code, bits, _lanes = param.dtype
    row = dtype_of(code, bits)
    return row.numpy if row is not None else f"code{code}_{bits}"


def tensor_type(param: Any) -> TensorType:
    """The :class:`TensorType` of a memref parameter record."""
    return TensorType(_numpy_dtype(param), _shape(param), bool(param.written), str(param.type))


def memref_type(result: Any) -> MemrefType:
    """The :class:`MemrefType` of a memref result record."""
    return MemrefType(_numpy_dtype(result), _shape(result), str(result.type),
                      str(getattr(result, "memory", "")))


def _shape(param: Any) -> tuple[int | None, ...]:
    return tuple(None if s == DYNAMIC else int(s) for s in param.sizes)


def _result_annotation(result: Any) -> Any:
    if result.kind == "memref":
        return memref_type(result)
    return _scalar(result.scalar)[0]


def return_annotation(fn: Any) -> Any:
    """What a call of HostFunction ``fn`` returns, as an annotation: None (no results; a
    launcher or a function in Wave's convention), the one result's (:class:`MemrefType`,
    ``int``, ``float``, ``bool``), else ``tuple[...]`` of them in order (``results.c``:
    ``build_results``)."""
    if _is_launcher(fn):
        return None
    results = tuple(getattr(fn, "results", ()))
    if not results:
        return None
    annotations = tuple(_result_annotation(r) for r in results)
    return annotations[0] if len(annotations) == 1 else tuple[annotations]


def _annotation(param: Any) -> Any:
    if param.kind == "memref":
        return tensor_type(param)
    if param.kind == "object":
        return Any
    return _scalar(param.scalar)[0]


def _positional(params: Sequence[Any]) -> list[inspect.Parameter]:
    return [inspect.Parameter(p.name if p.name.isidentifier() else f"arg{i}",
                              inspect.Parameter.POSITIONAL_ONLY, annotation=_annotation(p))
            for i, p in enumerate(params)]


def _stream() -> inspect.Parameter:
    return inspect.Parameter("stream", inspect.Parameter.KEYWORD_ONLY, default=None)


def _is_launcher(fn: Any) -> bool:
    return hasattr(fn, "function")


def signature(fn: Any) -> inspect.Signature:
    """``inspect.signature`` of a HostFunction (its parameters, positional only, then the
    keyword ``stream=None``) or of a KernelLauncher (the kernel's parameters, then
    ``grid``, ``block``, ``shared_mem=0``, ``stream=None``). Parameter names that are not
    Python identifiers (MLIR allows ``%a.b``) show as ``argN``. The return annotation is
    :func:`return_annotation`'s."""
    if _is_launcher(fn):
        params = _positional(tuple(fn.function.params)[:-len(LAUNCH_PARAMS)])
        kw = inspect.Parameter.KEYWORD_ONLY
        params += [inspect.Parameter("grid", kw, annotation=_EXTENTS),
                   inspect.Parameter("block", kw, annotation=_EXTENTS),
                   inspect.Parameter("shared_mem", kw, default=0, annotation=int)]
    else:
        params = _positional(fn.params)
    return inspect.Signature(params + [_stream()], return_annotation=return_annotation(fn))


def _describe(param: Any) -> str:
    if param.kind == "memref":
        t = tensor_type(param)
        sizes = ", ".join("any" if s is None else str(s) for s in t.shape)
        dtype = t.dtype
        if param.flags & SIGNLESS and t.dtype.startswith("int"):
            dtype = f"{t.dtype} or u{t.dtype}"
        layout = f"; strides {list(param.strides)}" if param.strides is not None else ""
        access = "written" if t.writable else "read only (read-only tensors accepted)"
        return (f"{param.name} : {t!r}\n    {t.mlir_type}: a GPU tensor (DLPack) of {dtype}, "
                f"rank {t.rank}, sizes ({sizes}){layout}; {access}.")
    if param.kind == "object":
        of = f" of {tensor_type(param).dtype}" if tuple(param.dtype) != (0, 0, 0) else ""
        access = "may be written: read-only tensors are refused" if param.written \
            else "read only: read-only tensors accepted"
        return (f"{param.name} : Any\n    !llvm.ptr (Wave's convention): what the host code "
                f"reads with Wave's helpers: a GPU tensor{of} (DLPack; compact row-major for "
                f"wave_get_buffer; {access}), an int (wave_get_int64) or a float "
                "(wave_get_float64).")
    _type, accepted = _scalar(param.scalar)
    return f"{param.name} : {_type.__name__}\n    {param.scalar}: {accepted}."


def _scalar_result(kind: str) -> str:
    """What a scalar result of MLIR type ``kind`` becomes (``results.c``: ``unpack_scalar``)."""
    d = DTYPES.get(kind)
    if d is None:
        return "a number"
    if d.numpy == "bool":
        return "a bool (its low bit)"
    if d.numpy.startswith(("int", "uint")):
        return (f"an int in [-2**{d.bits - 1}, 2**{d.bits - 1} - 1] (the {d.bits}-bit value "
                "read as signed)")
    if d.bits == 64:
        return "a float"
    return f"a float (the {d.mlir} value, exactly)"


def _describe_result(result: Any) -> str:
    """A result's entry under Returns: its annotation, MLIR type, dtype, rank and sizes, the
    object the call returns and where its memory lives."""
    if result.kind != "memref":
        type_ = _scalar(result.scalar)[0]
        return (f"{result.name} : {type_.__name__}\n    {result.scalar}: "
                f"{_scalar_result(result.scalar)}.")
    t = memref_type(result)
    sizes = ", ".join("any" if s is None else str(s) for s in t.shape)
    layout = f"; strides {list(result.strides)}" if result.strides is not None else ""
    where = ("GPU memory (memory space 1)" if t.memory == "device" else
             "host memory (memref.alloc: a CPU array) or GPU memory (gpu.alloc), as the "
             "driver reports for its allocation")
    return (f"{result.name} : {t!r}\n    {t.mlir_type}: a pywave._native.Memref of {t.dtype}, "
            f"rank {t.rank}, sizes ({sizes}){layout}, exported without a copy through "
            f"__dlpack__ (torch/cupy/jax/np.from_dlpack) and, for CUDA memory, "
            f"__cuda_array_interface__; in {where}. It owns memory the call allocated (freed "
            "when it and every tensor exported from it are gone); a view of an argument or "
            "of an earlier result keeps that alive instead.")


def _returns_phrase(fn: Any) -> str:
    """The summary's words for what a call returns: ``returns None``, ``returns one
    float (f32)``, ``returns a tuple of 2: (Memref[float32, (?,)], int)``."""
    results = () if _is_launcher(fn) else tuple(getattr(fn, "results", ()))
    if not results:
        return "returns None"

    def one(r: Any) -> str:
        if r.kind == "memref":
            return repr(memref_type(r))
        return f"{_scalar(r.scalar)[0].__name__} ({r.scalar})"

    if len(results) == 1:
        return f"returns one {one(results[0])}"
    return f"returns a tuple of {len(results)}: ({', '.join(one(r) for r in results)})"


def doc(fn: Any) -> str:
    """``help()`` text of a HostFunction or KernelLauncher: its call signature, what it does,
    each parameter's MLIR type, dtype, rank, static sizes and access, what it returns (each
    result's MLIR type, the Python object, dtype, rank and sizes) and its errors."""
    launcher = _is_launcher(fn)
    host = fn.function if launcher else fn
    params = tuple(host.params)[:-len(LAUNCH_PARAMS)] if launcher else tuple(host.params)
    platform = {2: "CUDA", 10: "ROCm"}.get(host.device_type, str(host.device_type))
    lines = [f"{fn.name}{signature(fn)}", ""]
    if launcher:
        lines += [f"Kernel @{fn.name.replace('::', '::@')} ({platform}) compiled by pywave: "
                  "one launch with the grid, block and dynamic shared memory given, "
                  "asynchronous on the stream; returns None.", ""]
    elif getattr(host, "convention", "pywave") == "wave":
        lines += [f"Host function @{fn.name} ({platform}) in Wave's host-wrapper convention, "
                  "compiled by pywave: runs the host code with the call's stream as its first "
                  "argument, its kernel launches asynchronous on the stream; returns None.", ""]
    else:
        lines += [f"Host function @{fn.name} ({platform}) compiled by pywave: runs the host "
                  "code, whose kernel launches are asynchronous on the stream; "
                  f"{_returns_phrase(fn)}.", ""]
    lines += ["Parameters", "----------"]
    lines += [_describe(p) for p in params]
    if launcher:
        lines += ["grid : int or tuple of 1-3 ints",
                  "    blocks in x, y, z (missing ones are 1); each >= 1, within the device's "
                  "limits.",
                  "block : int or tuple of 1-3 ints",
                  "    threads per block in x, y, z (missing ones are 1); each >= 1, their "
                  "product within the device's and the kernel's limit.",
                  "shared_mem : int",
                  "    dynamic shared memory in bytes (0 to 2**31 - 1; with the kernel's static "
                  "shared memory within the device's opt-in maximum)."]
    lines += ["stream : optional", f"    {_STREAM_DOC}.", "",
              "Returns", "-------"]
    results = () if launcher else tuple(getattr(host, "results", ()))
    if not results:
        lines += ["None"]
    else:
        if len(results) > 1:
            lines += [f"tuple of {len(results)}", "    the results in order:"]
        lines += [_describe_result(r) for r in results]
    lines += ["",
              "Raises", "------",
              "ArgumentError",
              "    an argument that does not fit: count, dtype, rank, sizes, layout, device, "
              "read-only, scalar range, launch limits.",
              "DeviceError",
              "    a driver failure (module load, launch)."]
    return "\n".join(lines)
