/*
 * native.h — private header of pywave._native, the per-call path of compiled host functions.
 *
 * The extension is one translation unit (native.c includes every part, a unity build), so
 * every helper below is `static` and the compiler sees each per-call helper at its call site,
 * as when the parts were one file. The parts, by concern:
 *   errors.c        exceptions: chained argument errors, libwavert statuses, device names
 *   scalars.c       range-checked packing of Python numbers into slot words
 *   streams.c       stream= parsing, CuPy's current stream, the device handle cache
 *   cupy.c          CuPy arrays read in place (CuPy's C API or its object layout), without
 *                   a capsule; CuPy's current stream through that API
 *   tensors.c       DLPack intake: per-type route cache, __dlpack__ calls, capsules, the
 *                   descriptor memo, device checks, release
 *   params.c        parameter objects -> the compact param_t, their type text; the exported
 *                   tables (SCALAR_KINDS, DTYPES)
 *   memref.c        the Memref type: a memref result owning (or keeping) its memory, exported
 *                   through DLPack and __cuda_array_interface__
 *   results.c       results: scalars to numbers, memref descriptors to Memrefs and their owner
 *   objects.c       Wave's convention: Python objects read into wavert_objects for its helpers
 *   hostcode.c      the HostCode type: a module's code, its calls in flight, deferred release
 *   hostfunction.c  the HostFunction type: its call in named phases, its construction
 *   launcher.c      the KernelLauncher type: a kernel launched with grid=, block=
 *   module.c        the module: set_exceptions, result_frees, interned names, PyInit__native
 * Module state is only touched with the GIL held.
 */
#ifndef PYWAVE_NATIVE_H
#define PYWAVE_NATIVE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>

#include "dlpack_exchange.h"
#include "wavert.h"
#include "wavert_jit.h"

/* Signatures up to these sizes need no allocation per call (64 rank-1 memrefs: 320 slots;
 * the call state is then about 7.5 KiB of stack). */
#define STACK_SLOTS 384
#define STACK_TENSORS 64
/* Types remembered by the exchange-API / protocol cache (round-robin when full). */
#define TYPE_CACHE_SIZE 32
/* Device handles cached per device type (ordinals below this). */
#define DEVICE_CACHE_SIZE 64

/* ---------------------------------------------------------------------------------------- */
/* Module state (the GIL protects all of it; set up by PyInit__native)                      */
/* ---------------------------------------------------------------------------------------- */
static PyObject *ArgumentError; /* strong; ValueError until set_exceptions */
static PyObject *DeviceError;   /* strong; RuntimeError until set_exceptions */
static PyObject *status_errors; /* strong dict {status code: class} from set_exceptions, or NULL */

static PyObject *str_dlpack;           /* "__dlpack__" */
static PyObject *str_dlpack_device;    /* "__dlpack_device__" */
static PyObject *str_exchange_api;     /* "__dlpack_c_exchange_api__" */
static PyObject *str_exchange_api_v12; /* "__c_dlpack_exchange_api__" (DLPack 1.2: an int) */
static PyObject *str_cuda_stream_prot; /* "__cuda_stream__" */
static PyObject *str_cuda_stream;      /* "cuda_stream" */
static PyObject *str_ptr;              /* "ptr" */
static PyObject *str_stream;           /* "stream" */
static PyObject *str_module;           /* "__module__" */
static PyObject *str_qualname;         /* "__qualname__" */
static PyObject *kw_stream_maxver;     /* ("stream", "max_version") */
static PyObject *kw_stream;            /* ("stream",) */
static PyObject *kw_maxver;            /* ("max_version",) */
static PyObject *max_version;          /* (1, 3) */

/* ---------------------------------------------------------------------------------------- */
/* Parameters (params.c): the compact form read once per host function                      */
/* ---------------------------------------------------------------------------------------- */
typedef enum {
  SK_I1,
  SK_I8,
  SK_I16,
  SK_I32,
  SK_I64,
  SK_INDEX,
  SK_F16,
  SK_BF16,
  SK_F32,
  SK_F64,
  SK_COUNT
} scalar_kind;

/* The scalar kinds' MLIR names: the one list of scalar kinds, exported as
 * pywave._native.SCALAR_KINDS (pywave.host.signature accepts exactly these). */
static const char *const scalar_kind_names[SK_COUNT] = {"i1",    "i8",  "i16",  "i32", "i64",
                                                        "index", "f16", "bf16", "f32", "f64"};

/* The element types of memref parameters and results by DLPack dtype (one lane), as the call
 * path names them: MLIR's name, in messages and type text (`signless`: the dtype of a
 * parameter with WAVERT_MEMREF_SIGNLESS, whose MLIR name is iN). Exported as
 * pywave._native.DTYPES ((mlir, code, bits, signless, NumPy type string or None) tuples);
 * pywave.program.DTYPES is the source, and tests/test_tables.py checks that both list the
 * same dtypes with the same names. */
typedef struct {
  uint8_t code, bits;
  uint8_t signless;
  const char *mlir;
} dtype_row;

static const dtype_row dtype_rows[] = {
    {kDLBool, 8, 0, "i1"},    {kDLInt, 8, 1, "i8"},     {kDLInt, 16, 1, "i16"},
    {kDLInt, 32, 1, "i32"},   {kDLInt, 64, 1, "i64"},   {kDLInt, 8, 0, "si8"},
    {kDLInt, 16, 0, "si16"},  {kDLInt, 32, 0, "si32"},  {kDLInt, 64, 0, "si64"},
    {kDLUInt, 8, 0, "ui8"},   {kDLUInt, 16, 0, "ui16"}, {kDLUInt, 32, 0, "ui32"},
    {kDLUInt, 64, 0, "ui64"}, {kDLFloat, 16, 0, "f16"}, {kDLBfloat, 16, 0, "bf16"},
    {kDLFloat, 32, 0, "f32"}, {kDLFloat, 64, 0, "f64"},
};
#define DTYPE_ROWS ((int)(sizeof(dtype_rows) / sizeof(dtype_rows[0])))

/* The row of DLPack dtype (code, bits, lanes 1); `signless` picks MLIR's iN row of an integer
 * dtype (kDLUInt included: a signless parameter fits either). NULL when none. */
static inline const dtype_row *find_dtype(unsigned code, unsigned bits, int signless) {
  if (signless && code == kDLUInt)
    code = kDLInt;
  for (int i = 0; i < DTYPE_ROWS; i++) {
    const dtype_row *r = &dtype_rows[i];
    if (r->code == code && r->bits == bits && (code != kDLInt || r->signless == !!signless))
      return r;
  }
  return NULL;
}

/* NumPy's kind character of each DLPack type code NumPy has (its array interface): CuPy
 * dtypes are read by it (tensors.c) and Memref's __cuda_array_interface__ type string is
 * written from it (results.c). bfloat16 has none. */
static const struct {
  uint8_t code;
  char kind;
} numpy_kinds[] = {{kDLBool, 'b'}, {kDLInt, 'i'}, {kDLUInt, 'u'}, {kDLFloat, 'f'},
                   {kDLComplex, 'c'}};
#define NUMPY_KINDS ((int)(sizeof(numpy_kinds) / sizeof(numpy_kinds[0])))

/* The DLPack type code of NumPy kind character `kind` ('f'), or -1. Not on the per-call path
 * (CuPy dtypes are read once per dtype object); noinline: inlined through tensors.c into
 * hf_vectorcall, the loop cost every call 12 more instructions (bench/launch_instructions.py,
 * case empty). */
__attribute__((noinline)) static int numpy_kind_code(char kind) {
  for (int i = 0; i < NUMPY_KINDS; i++)
    if (numpy_kinds[i].kind == kind)
      return numpy_kinds[i].code;
  return -1;
}

/* NumPy's type string of DLPack dtype `d` ("<f4", "|b1"; little-endian, as CUDA and ROCm
 * memory) into out: 1 written, 0 none (no NumPy kind, several lanes, bits not bytes). */
static int numpy_typestr(DLDataType d, char out[8]) {
  if (d.lanes != 1 || d.bits == 0 || d.bits % 8)
    return 0;
  for (int i = 0; i < NUMPY_KINDS; i++)
    if (numpy_kinds[i].code == d.code) {
      snprintf(out, 8, "%c%c%u", d.bits == 8 ? '|' : '<', numpy_kinds[i].kind, d.bits / 8u);
      return 1;
    }
  return 0;
}

enum { MEMO_NONE = 0, MEMO_COMPACT = 1, MEMO_STRIDES = 2 };

typedef struct {
  uint8_t is_memref;
  uint8_t is_object; /* Wave's convention: any object, read into a wavert_object */
  uint8_t kind;    /* scalar_kind for scalars */
  uint8_t written; /* memref written by the function */
  uint8_t memory_device; /* results: the memory space says device memory (Param.memory) */
  Py_ssize_t slot; /* first slot */
  Py_ssize_t tensor_index; /* index among the memref (or object) parameters */
  wavert_memref_type mtype;
  int64_t *layout;    /* owned: sizes[rank], strides[rank], then the memo's 4 * rank + 1 words */
  PyObject *name;     /* str */
  PyObject *type_str; /* "memref<?xf32>", "f32" */
  /* The descriptor memo (tensors.c): the last tensor layout whose descriptor was derived for
   * this parameter. Key: memo_ndim_dtype (the tensor's ndim and dtype as one word,
   * tensors.c), memo_state (MEMO_NONE: nothing remembered; MEMO_COMPACT:
   * the tensor gave no strides; MEMO_STRIDES: it gave them), memo_key[0..rank) the
   * shape and memo_key[rank..2*rank) the strides; value: memo_key[2*rank..) the descriptor
   * words after allocated/aligned (offset, sizes, strides), memo_offset_bytes (the static
   * offset in bytes) and memo_empty. Only read and written with the GIL held. */
  int64_t *memo_key;  /* into layout */
  uint64_t memo_offset_bytes;
  uint64_t memo_ndim_dtype;
  uint8_t memo_state, memo_empty;
} param_t;

/* The host code of one compiled module, shared by its HostFunctions (hostfunction.c): counts
 * the calls in flight and runs `release` (free the JIT code, unload the kernels) once, when
 * the module is closed and no call is in flight, or when the last reference goes. */
typedef struct {
  PyObject_HEAD
  PyObject *release;    /* callable, called once with no arguments; NULL after it ran */
  Py_ssize_t in_flight; /* calls of its HostFunctions between entry and exit */
  int closed;           /* close() was called: new calls raise */
} HostCode;

typedef struct {
  PyObject_HEAD
  vectorcallfunc vectorcall;
  void (*entry)(uint64_t *);
  PyObject *name;      /* str */
  PyObject *params;    /* the parameter objects given to the constructor (a tuple) */
  HostCode *code;      /* strong: the code holding `entry`, or NULL (never closed) */
  PyObject *signature; /* "(a, s)" for messages */
  int32_t device_type;
  int cpu_device; /* device_type kDLCPU: 1 for the CPU device (target cpu), 0 for a host program */
  Py_ssize_t nparams, ntensors, nslots;
  int wave;            /* Wave's convention: slot 0 is the stream, every param an object */
  int memrefs_only;    /* pywave's convention and every parameter a memref */
  param_t *p;
  PyObject *results;   /* the result objects given to the constructor (a tuple) */
  Py_ssize_t nresults, nresult_slots; /* result slots follow the nslots argument slots */
  param_t *r;          /* results; r[i].slot counts from the first result slot */
} HostFunction;

static int parse_param(PyObject *obj, Py_ssize_t index, param_t *p);
static int add_tables(PyObject *module);
static int append(PyObject *list, PyObject *item /* stolen */);
static void free_params(param_t *p, Py_ssize_t n);

/* ---------------------------------------------------------------------------------------- */
/* One call's state (hostfunction.c fills it phase by phase)                                 */
/* ---------------------------------------------------------------------------------------- */
/* ROUTE_CUPY: a CuPy array read in place (cupy.c), or the protocol if that is not possible. */
enum { ROUTE_NONE = 0, ROUTE_PROTOCOL = 1, ROUTE_EXCHANGE = 2, ROUTE_CAPSULE = 3, ROUTE_CUPY = 4 };

typedef struct {
  DLTensor local;        /* filled by the exchange API (borrowed data) */
  const DLTensor *t;     /* the tensor read for the descriptor */
  void *managed;         /* owned DLManagedTensor(Versioned)*: deleter called after the call */
  uint8_t versioned;
  uint8_t route;
  uint8_t read_only;
  uint8_t deferred; /* protocol tensor whose device is read from its DLTensor in pass 2 */
  uint8_t cupy;     /* produced by CuPy (see repair_cupy_strides) */
} tensor_state;

typedef struct {
  uint64_t *slots;          /* self->nslots argument then self->nresult_slots result words */
  tensor_state *ts;         /* one per memref parameter */
  Py_ssize_t nstate;        /* ts[0..nstate) initialised (released at the end) */
  void *stream;             /* the call's stream (NULL = legacy default) */
  int explicit_stream;      /* stream= was given and not None */
  PyObject *stream_value;   /* DLPack's stream= value for protocol producers, or NULL */
  int32_t dev_id;           /* device id of the first tensor (0 when there is none) */
  Py_ssize_t dev_arg;       /* index of the first tensor argument, -1 when none */
  const DLPackExchangeAPI *stream_api; /* exchange API of the first such tensor, or NULL */
  int any_cupy;             /* a CuPy array is among the arguments */
  int cupy_stream;          /* the stream is CuPy's current one on dev_id (choose_stream) */
  wavert_object *objects;   /* Wave's convention: one per parameter (NULL otherwise) */
  Py_ssize_t to_take;       /* tensors left for pass 3 (all but exchange-API ones) */
  uint64_t slots_buf[STACK_SLOTS];
  tensor_state ts_buf[STACK_TENSORS];
} call_state;

/* ---------------------------------------------------------------------------------------- */
/* Parts                                                                                    */
/* ---------------------------------------------------------------------------------------- */
/* errors.c */
static void raise_chained(PyObject *type, PyObject *prefix);
static void raise_chained_arg(PyObject *type, PyObject *name, Py_ssize_t index, const char *what);
static void raise_arg(PyObject *name, Py_ssize_t index, const char *fmt, ...);
static void raise_status(wavert_status st);
/* cold: its calls are failure paths, kept out of the per-call code's way */
static void raise_status_fmt(wavert_status st, const char *fmt, ...) __attribute__((cold));
static PyObject *type_name(PyTypeObject *tp);
static const char *device_kind(int32_t type);
static PyObject *device_str(int32_t type, int32_t id);
static int wrong_device(HostFunction *self, param_t *p, Py_ssize_t index, PyObject *obj,
                        int32_t type, int32_t id);
static int read_only_error(param_t *p, Py_ssize_t index, const char *why);

/* scalars.c */
static int pack_scalar(scalar_kind kind, PyObject *v, uint64_t *out, PyObject *name,
                       Py_ssize_t index);

/* streams.c */
static int parse_stream(PyObject *s, void **out);
static int choose_stream(HostFunction *self, call_state *c);
static wavert_status get_device(int32_t type, int32_t id, wavert_device **out);

/* cupy.c */
#define CUPY_MAX_RANK 64 /* CuPy arrays of higher rank take the DLPack protocol */
static int cupy_api_stream(int32_t device_id, void **out);
static int cupy_type_usable(PyTypeObject *tp, PyObject *v);
static int cupy_device(PyObject *v, int32_t *type, int32_t *id);
/* noinline: read only for CuPy arrays; inlined, it would weigh on every call's code */
static int cupy_take(PyObject *v, PyObject *name, Py_ssize_t i, tensor_state *t,
                     int64_t *strides) __attribute__((noinline));
static void repair_cupy_strides(DLTensor *t);

/* tensors.c */
static int classify_tensor(HostFunction *self, call_state *c, Py_ssize_t i, PyObject *v);
static int take_tensor(HostFunction *self, call_state *c, Py_ssize_t i, PyObject *v);
static void release_tensors(tensor_state *ts, Py_ssize_t n);

/* objects.c */
static int classify_object(HostFunction *self, call_state *c, Py_ssize_t i, PyObject *v);
static int object_dtype_fits(const param_t *p, DLDataType dtype);
static int object_dtype_error(const param_t *p, Py_ssize_t i, DLDataType dtype);

/* launcher.c */
static int launcher_add_type(PyObject *module);

/* module.c */
static int intern(PyObject **slot, const char *s);
static int add_owned(PyObject *module, const char *name, PyObject *value);

#endif /* PYWAVE_NATIVE_H */
