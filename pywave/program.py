"""The program model: the plain data that flows between stages, the cache and the call path.

The program model: the plain data that flows between the compile stages, that the disk
cache stores and that the call path reads. No MLIR import (a warm start loads a cached
:class:`Program` without MLIR).

- :data:`DYNAMIC`, :data:`SIGNLESS`, :data:`STRIDED`: the memref-type constants of
  ``wavert.h`` (equal to libwavert's; ``tests/test_tables.py`` checks).
- :data:`DTYPES`: the element types pywave passes, one row each (MLIR name, DLPack dtype,
  NumPy name, C type): the one table the compile stages, ``help()`` and the C export read,
  and that the C call path's table must match (``tests/test_tables.py``).
- :class:`Target`: backend and chip; the one converter from a backend to its DLPack device
  type.
- :data:`FORMATS`: the kernel image formats (name, file extension, backend that loads it).
- :class:`Binary`: one kernel image, as the host code embeds it.
- :class:`Param`, :class:`HostSignature`: a host function's arguments and results, as the
  native call path checks and builds them (``pywave._native.HostFunction`` reads a Param's
  fields by name).
- :class:`HostModule`: the host stage's output (LLVM IR and signatures).
- :class:`Program`: what a ``CompiledModule`` runs (and the disk cache stores).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping, NamedTuple

from .errors import CompileError

# --------------------------------------------------------------------------------------------
# Memref types: the constants of wavert.h, and the element types
# --------------------------------------------------------------------------------------------
#: MLIR's ``?`` in sizes, strides and offsets (``WAVERT_DYNAMIC``, INT64_MIN).
DYNAMIC = -2**63
#: ``wavert_memref_type.flags``: an integer element type that is signless in MLIR (``iN``),
#: so tensors of either signedness fit (``WAVERT_MEMREF_SIGNLESS``).
SIGNLESS = 1 << 0
#: ``wavert_memref_type.flags``: a ``strided<...>`` layout; without it the layout is the
#: identity (``WAVERT_MEMREF_STRIDED``).
STRIDED = 1 << 1


class Dtype(NamedTuple):
    """One element type: ``mlir`` its MLIR name; ``code``, ``bits`` its DLPack dtype (one
    lane); ``signless`` MLIR's signless integer (tensors of either signedness fit: the
    :data:`SIGNLESS` flag); ``numpy`` the NumPy-style name ``help()`` shows (``"float32"``);
    ``c_type`` the C type of one element in memory."""

    mlir: str
    code: int
    bits: int
    signless: bool
    numpy: str
    c_type: str


#: The element types pywave passes between Python and compiled code, by MLIR name: memref
#: elements (every row but ``i1``, whose memrefs are widened to bytes and take kDLBool
#: tensors) and, for the rows :data:`pywave._native.SCALAR_KINDS` names, scalars. ``index``
#: is a 64-bit signless integer. DLPack codes: kDLInt 0, kDLUInt 1, kDLFloat 2, kDLBfloat 4,
#: kDLBool 6. The C call path's table (``pywave._native.DTYPES``) must list the same dtypes.
DTYPES: dict[str, Dtype] = {d.mlir: d for d in (
    Dtype("i1", 6, 8, False, "bool", "bool"),
    Dtype("i8", 0, 8, True, "int8", "int8_t"),
    Dtype("i16", 0, 16, True, "int16", "int16_t"),
    Dtype("i32", 0, 32, True, "int32", "int32_t"),
    Dtype("i64", 0, 64, True, "int64", "int64_t"),
    Dtype("index", 0, 64, True, "int64", "int64_t"),
    Dtype("si8", 0, 8, False, "int8", "int8_t"),
    Dtype("si16", 0, 16, False, "int16", "int16_t"),
    Dtype("si32", 0, 32, False, "int32", "int32_t"),
    Dtype("si64", 0, 64, False, "int64", "int64_t"),
    Dtype("ui8", 1, 8, False, "uint8", "uint8_t"),
    Dtype("ui16", 1, 16, False, "uint16", "uint16_t"),
    Dtype("ui32", 1, 32, False, "uint32", "uint32_t"),
    Dtype("ui64", 1, 64, False, "uint64", "uint64_t"),
    Dtype("f16", 2, 16, False, "float16", "uint16_t"),
    Dtype("bf16", 4, 16, False, "bfloat16", "uint16_t"),
    Dtype("f32", 2, 32, False, "float32", "float"),
    Dtype("f64", 2, 64, False, "float64", "double"),
)}


def dtype_of(code: int, bits: int) -> Dtype | None:
    """The first :data:`DTYPES` row of a DLPack dtype (one lane), or None."""
    return next((d for d in DTYPES.values() if (d.code, d.bits) == (code, bits)), None)


# --------------------------------------------------------------------------------------------
# Targets
# --------------------------------------------------------------------------------------------


class Backend(NamedTuple):
    """A kernel backend and the DLPack device its kernels run on."""

    name: str            # "nvvm" or "rocdl"
    device_type: int     # DLPack DLDeviceType
    device_enum: str     # its name in dlpack.h
    platform: str        # the driver's name, for messages
    triple: str          # the kernels' LLVM target triple


#: Backends, in the order a default target is looked for (CUDA first, then HIP).
BACKENDS = {
    "nvvm": Backend("nvvm", 2, "kDLCUDA", "CUDA", "nvptx64-nvidia-cuda"),
    "rocdl": Backend("rocdl", 10, "kDLROCM", "ROCm", "amdgcn-amd-amdhsa"),
}

#: No device: the "backend" of a module with no GPU op (:data:`HOST`). Its host functions
#: run on the calling thread alone and take CPU tensors (DLPack kDLCPU = 1). Not in
#: :data:`BACKENDS`, which lists the devices a default target is looked for on.
HOST_BACKEND = Backend("host", 1, "kDLCPU", "host", "")
#: The host CPU as a device (``target="cpu"``, :mod:`pywave.kernels.cpu`): kernels compiled for
#: this machine, run by libwavert's CPU backend on CPU tensors (kDLCPU, device 0). Not in
#: :data:`BACKENDS`: it is used when asked for, never picked as a default target.
CPU_BACKEND = Backend("cpu", 1, "kDLCPU", "CPU", "")

#: Version of the CPU target's image ABI (:mod:`pywave.kernels.cpu`); libwavert's
#: WAVERT_CPU_ABI (backend_cpu.c) must be equal. Part of the compile-cache key of CPU-target
#: modules: bump it with every change of the layout, so no entry of another layout is loaded.
CPU_KERNEL_ABI = 6

#: Name suffix of a kernel's block-coarsened copy (:mod:`pywave.kernels.rewrites.coarsen`),
#: which only the host's own launches run: the kernel API does not list it.
COARSENED_SUFFIX = "__pywave_x4"

#: Discardable unit attribute on that copy's ``gpu.func``.
COARSENED_ATTR = "pywave.coarsened"


@dataclasses.dataclass(frozen=True)
class Target:
    """What a program runs on: a GPU target (``backend`` ``"nvvm"`` or ``"rocdl"``, ``chip``
    e.g. ``"sm_90"``) or :data:`HOST` (``backend`` and ``chip`` ``"host"``): a module with no
    GPU op (:func:`pywave.frontend.gpu_use.first_gpu_op` decides, once, at compile time),
    whose calls open no driver and take CPU tensors."""

    backend: str
    chip: str

    @property
    def is_host(self) -> bool:
        """The program needs no device (:data:`HOST`)."""
        return self.backend == HOST_BACKEND.name

    @property
    def is_cpu(self) -> bool:
        """The program's kernels run on the CPU device (``target="cpu"``, :data:`CPU`)."""
        return self.backend == CPU_BACKEND.name

    @classmethod
    def parse(cls, name: str) -> "Target":
        """The target of a chip name: ``"sm_90"`` (NVIDIA) or ``"gfx942"`` (AMD); several
        chips of one backend separated by commas (``"sm_80,sm_90"``)."""
        chips = [c.strip() for c in name.split(",")]
        if chips == [CPU_BACKEND.name]:
            return CPU
        backends = {"nvvm" if c.startswith("sm_") else "rocdl" if c.startswith("gfx") else ""
                    for c in chips}
        if "" in backends or len(backends) != 1:
            raise CompileError(f"unknown target {name!r}: expected an NVIDIA chip such as "
                               "'sm_90', an AMD chip such as 'gfx942' (several of one kind "
                               "separated by commas) or 'cpu'")
        return cls(backends.pop(), ",".join(chips))

    @property
    def chips(self) -> tuple[str, ...]:
        """The chips built for, in order (one, or several for a multi-chip NVIDIA build)."""
        return tuple(self.chip.split(","))

    @property
    def device_type(self) -> int:
        """DLPack device type the program's tensors live on (kDLCUDA = 2, kDLROCM = 10;
        kDLCPU = 1 for :data:`HOST`)."""
        return self._backend.device_type

    @property
    def device_enum(self) -> str:
        """The DLPack device type's name in dlpack.h (``"kDLCUDA"``)."""
        return self._backend.device_enum

    @property
    def platform(self) -> str:
        """The driver platform, for messages (``"CUDA"``, ``"ROCm"``; ``"host"``)."""
        return self._backend.platform

    @property
    def _backend(self) -> Backend:
        if self.is_host:
            return HOST_BACKEND
        return CPU_BACKEND if self.is_cpu else BACKENDS[self.backend]

    @property
    def formats(self) -> tuple[str, ...]:
        """The image formats this target's driver loads."""
        return tuple(f.name for f in FORMATS.values() if f.backend == self.backend)


#: The target of a module with no GPU op: no device, no driver, CPU tensors.
HOST = Target(HOST_BACKEND.name, HOST_BACKEND.name)
#: The CPU device's target (``target="cpu"``).
CPU = Target(CPU_BACKEND.name, CPU_BACKEND.name)


# --------------------------------------------------------------------------------------------
# Kernel images
# --------------------------------------------------------------------------------------------


class ImageFormat(NamedTuple):
    """A kernel image format: pywave's name, file extension, the backend that loads it, and
    the ``gpu-module-to-binary`` format that produces it (None: not produced by that pass)."""

    name: str
    extension: str
    backend: str
    serialised_as: str | None


#: The kernel image formats, by name.
FORMATS = {f.name: f for f in (
    ImageFormat("ptx", ".ptx", "nvvm", "isa"),
    ImageFormat("cubin", ".cubin", "nvvm", "bin"),
    ImageFormat("fatbin", ".fatbin", "nvvm", "fatbin"),
    ImageFormat("hsaco", ".hsaco", "rocdl", None),
    ImageFormat("cpu-so", ".so", "cpu", None),     # an ELF shared object for the host
)}


#: The ``format=`` values a compile accepts: ``"auto"`` (the target's best) and each format.
FORMAT_CHOICES = ("auto",) + tuple(FORMATS)


def ptx_image(ptx: bytes) -> bytes:
    """PTX text as a kernel image: NUL-terminated (the driver reads a PTX image as a C string:
    CUDA Driver API, ``cuModuleLoadData``). :func:`ptx_text` undoes it."""
    return ptx if ptx.endswith(b"\0") else ptx + b"\0"


def ptx_text(ptx: bytes) -> bytes:
    """PTX without a kernel image's trailing NUL (:func:`ptx_image`): what ptxas, fatbinary
    and a ``.ptx`` file take."""
    return ptx.rstrip(b"\0")


def format_of_extension(path: str) -> str | None:
    """The format a file name's extension names (``"k.ptx"`` -> ``"ptx"``), or None."""
    lowered = path.lower()
    return next((f.name for f in FORMATS.values() if lowered.endswith(f.extension)), None)


class KernelInfo(NamedTuple):
    """What ptxas reports (``-v``) for one kernel assembled for one chip; read at compile time
    (no GPU needed) and kept with the image, so cache hits have it too.

    ``registers`` per thread; ``spill_stores``/``spill_loads``, ``local_bytes`` (the stack
    frame: local memory) in bytes per thread; ``shared_bytes`` (static shared memory) and
    ``constant_bytes`` (bank 0, beyond the parameters) in bytes per block; ``ptx_version``
    the PTX's virtual architecture and ``binary_version`` the chip's, both major*10 + minor
    as the driver reports them (90 for ``sm_90``); ``ptx_isa`` the PTX ISA version x10 of the
    ``.version`` line (90 for 9.0)."""

    name: str
    chip: str
    registers: int
    spill_stores: int
    spill_loads: int
    local_bytes: int
    shared_bytes: int
    constant_bytes: int
    ptx_version: int
    binary_version: int
    ptx_isa: int


class Binary(NamedTuple):
    """One kernel image: ``name`` is the ``gpu.binary`` symbol launches refer to, ``format`` a
    key of :data:`FORMATS`, ``chip`` the target it was built for (a fatbin of several chips:
    ``"sm_80,sm_90"``, see :attr:`chips`). ``kernels``: ptxas' figures per kernel and chip
    (empty for PTX the driver compiles and for images given from outside). ``params``: the
    kernels that lost their unused parameters (:mod:`pywave.kernels.unused_params`), each as
    (kernel, MLIR's parameter count, indices of the parameters kept); a launch passes only
    those (empty for images given from outside: MLIR's ABI)."""

    name: str
    format: str
    data: bytes
    chip: str
    kernels: tuple[KernelInfo, ...] = ()
    params: tuple[tuple[str, int, tuple[int, ...]], ...] = ()

    @property
    def chips(self) -> tuple[str, ...]:
        """The chips the image holds code for, in the order they were asked for."""
        return tuple(self.chip.split(","))

    @property
    def file_data(self) -> bytes:
        """The image as its file (``<name>`` + the format's extension) holds it: PTX without
        its trailing NUL (:func:`ptx_text`), any other format as it is."""
        return ptx_text(self.data) if self.format == "ptx" else self.data

    def __repr__(self) -> str:   # the image's size, never its bytes
        return f"Binary(name={self.name!r}, format={self.format!r}, size={len(self.data)}, " \
               f"chip={self.chip!r})"


# --------------------------------------------------------------------------------------------
# Host signatures
# --------------------------------------------------------------------------------------------

# The Param encodings are libwavert's (wavert.h): DYNAMIC is ``?`` in sizes, strides and offset;
# ``flags`` holds SIGNLESS (signless integer elements accept signed and unsigned tensors) and
# STRIDED (a ``strided<...>`` layout, held in ``strides``/``offset``).


@dataclasses.dataclass(frozen=True)
class Param:
    """One host-function argument, as the call path checks and packs it.

    A memref: ``dtype`` is the DLPack (code, bits, lanes), ``sizes`` the static sizes
    (:data:`DYNAMIC` for ``?``), ``strides``/``offset`` the strided layout (None: identity),
    ``flags`` :data:`SIGNLESS` | :data:`STRIDED`, ``written`` whether the host code or a kernel
    may write it. A scalar: ``scalar`` is its MLIR type (``"f32"``, ``"index"``, ...).

    An object (``kind == "object"``, a host function in Wave's convention,
    :data:`WAVE_CONVENTION`): any Python object, passed as a pointer only Wave's helpers
    read; ``type`` is ``"!llvm.ptr"``.

    A result (``HostSignature.results``, named ``result0``, ``result1``...) uses the same
    fields; ``memory`` is ``"device"`` when its memref type's memory space says GPU memory
    (``#gpu.address_space<global>`` or ``1``), else ``""``: the driver is asked at run time.
    """

    name: str
    kind: str                     # "memref", "scalar" or "object"
    type: str                     # MLIR type text
    scalar: str = ""
    dtype: tuple[int, int, int] = (0, 0, 0)
    flags: int = 0
    sizes: tuple[int, ...] = ()
    strides: tuple[int, ...] | None = None
    offset: int = 0
    written: bool = False
    memory: str = ""              # results: "device" (a GPU address space), "" (ask the driver)

    @property
    def words(self) -> int:
        """Slots of the packed entry this argument fills (a rank-r memref: 3 + 2r)."""
        return 3 + 2 * len(self.sizes) if self.kind == "memref" else 1

    @classmethod
    def from_fields(cls, fields: Mapping[str, Any]) -> "Param":
        """The Param of ``dataclasses.asdict(param)`` after a JSON round trip (lists back to
        tuples)."""
        strides = fields.get("strides")
        return cls(**{**fields, "dtype": tuple(fields["dtype"]), "sizes": tuple(fields["sizes"]),
                      "strides": tuple(strides) if strides is not None else None})


#: Host functions written in pywave's own convention: memref and scalar arguments.
PYWAVE_CONVENTION = "pywave"
#: Host functions in Wave's convention (``f(!llvm.ptr stream, !llvm.ptr object, ...)``, no
#: results; :func:`pywave.host.signature.is_wave_function` says which): ``params`` are the objects,
#: the stream is the packed entry's first slot.
WAVE_CONVENTION = "wave"


#: Wave's runtime functions: a host function calling one of them directly is in Wave's
#: convention (:func:`pywave.host.signature.is_wave_function`), and a module calling one is
#: a GPU program (:mod:`pywave.frontend.gpu_use`). The helpers read Python objects; the
#: last two are what Wave's gpu-to-gpu-runtime pass lowers launches to.
WAVE_RUNTIME = ("wave_get_buffer", "wave_get_dim", "wave_get_int64", "wave_get_float64",
                "wave_load_kernel", "wave_launch_kernel")
#: The names a host function may call them by: lowered code calls the helpers' C interface.
WAVE_CALLEES = frozenset(WAVE_RUNTIME + tuple(f"_mlir_ciface_{n}" for n in WAVE_RUNTIME[:4]))


@dataclasses.dataclass(frozen=True)
class HostSignature:
    """A public host ``func.func``: its name, arguments and results (scalars and memrefs, in
    order; a call returns None, the one value, or a tuple), and its ``convention``
    (:data:`PYWAVE_CONVENTION` or :data:`WAVE_CONVENTION`). (The callable built from it is
    ``pywave._native.HostFunction``.)"""

    name: str
    params: tuple[Param, ...]
    results: tuple[Param, ...] = ()
    convention: str = PYWAVE_CONVENTION

    @property
    def words(self) -> int:
        """Argument slots of its packed entry ``_pywave_packed_<name>(uint64_t *slots)`` (in
        Wave's convention the stream's slot comes first)."""
        return sum(p.words for p in self.params) + (self.convention == WAVE_CONVENTION)

    @property
    def result_words(self) -> int:
        """Result slots of the packed entry, after the argument slots."""
        return sum(r.words for r in self.results)


# --------------------------------------------------------------------------------------------
# Stage outputs
# --------------------------------------------------------------------------------------------

#: Version of the runtime ABI that generated host code calls (which libwavert functions,
#: under which names). Part of the disk-cache key (:func:`pywave.pipeline.tool_versions`):
#: host code cached for another ABI is compiled again, never linked against functions the
#: runtime no longer has. 2: MLIR's ``mgpu*`` calls keep their upstream names (libwavert's
#: ``wavert_jit_*`` mirrors of 13 of them are gone). 3: launches pass only the kernel
#: parameters a kernel reads (:mod:`pywave.kernels.unused_params`). 4: a module with no GPU op is a
#: :data:`HOST` program, called in a host-only call (``wavert_call_begin`` with no device).
HOST_ABI = 4

#: Packed entry of host function ``f``: ``void _pywave_packed_f(uint64_t *slots)`` (the slot
#: layout is documented in :mod:`pywave.host.entries`).
PACKED_PREFIX = "_pywave_packed_"
#: ``void _pywave_release_kernels(void)``: releases every kernel the host code loaded and
#: clears its slot (later calls load them again). Not safe while a call runs.
RELEASE_KERNELS = "_pywave_release_kernels"
#: ``void _pywave_run(void *result)``: calls the entry function ``pywave run`` was asked for
#: (no arguments) and stores its scalar result, if any, at ``result`` (8 bytes).
RUN_ENTRY = "_pywave_run"
#: ``void _pywave_engine_init(void)`` / ``_pywave_engine_fini(void)``: the host code's global
#: constructors / destructors (loading / unloading the kernel images through ``mgpu*``), in
#: the ExecutionEngine's host code (:class:`pywave.entry.engine.ExecutionEngine`).
ENGINE_INIT = "_pywave_engine_init"
ENGINE_FINI = "_pywave_engine_fini"


@dataclasses.dataclass(frozen=True)
class HostModule:
    """Output of the host stage: LLVM IR text defining each host function, its packed entry
    and :data:`RELEASE_KERNELS`, plus the signatures; with a runner entry
    (:data:`RUN_ENTRY`), the LLVM type its function returns (``"void"``, ``"i32"``...)."""

    llvm_ir: str
    functions: tuple[HostSignature, ...]
    run_result: str | None = None


@dataclasses.dataclass(frozen=True)
class Program:
    """What a compiled module is made of (and the disk cache stores): kernel images, host
    object code and the host signatures; plain data, no MLIR objects.

    ``shared_object``: the same host object code pre-linked into an ELF shared object
    (:func:`pywave.host.sharedobj.link`), or None. The disk cache adds it when it stores the
    program and keeps it inside the entry's checksum; a ``CompiledModule`` opens it with
    ``dlopen`` instead of loading ``object_code`` with MCJIT. Not part of equality or
    ``repr``: a program is the same program with or without its pre-linked form."""

    target: Target
    binaries: tuple[Binary, ...]
    functions: tuple[HostSignature, ...]
    object_code: bytes
    shared_object: bytes | None = dataclasses.field(default=None, compare=False, repr=False)
