/*
 * pywave._native — the per-call path of compiled host functions.
 *
 * A HostFunction wraps the JIT entry `void entry(uint64_t *slots)` of one MLIR host function
 * and turns a Python call into slots: each memref argument becomes its descriptor
 * (WAVERT_MEMREF_WORDS(rank) words, filled by wavert_memref_from_dltensor from a DLPack
 * tensor), each scalar one word holding its bits in the low bytes. Everything per call is C:
 * vectorcall, a per-type cache of the DLPack C exchange API (torch), the DLPack protocol called
 * from C for other producers, no allocation on the fast path.
 *
 * Per call:
 *   1. argument count, keyword `stream` only;
 *   2. pass 1, in argument order: scalars are range-checked and packed; each tensor is
 *      classified (exchange API / protocol / raw capsule), its device read (exchange API or
 *      capsule: the DLTensor; protocol: __dlpack_device__) and checked: the function's device
 *      type, one device id for all;
 *   3. the stream: `stream=` if given; else the exchange API's current_work_stream; else CuPy's
 *      current stream when a CuPy array is among the arguments; else the legacy default (NULL);
 *   4. pass 2: protocol producers are asked for a capsule with __dlpack__(stream=S) so their
 *      pending work is ordered before S; capsules are renamed "used_*" (never consumed twice)
 *      and their deleters run exactly once after the call; descriptors are filled;
 *   5. the device (tensors' device, or ordinal 0 when there is no tensor argument), then
 *      wavert_call_begin, entry(slots) without the GIL, wavert_call_end.
 *
 * Errors: ArgumentError (set by set_exceptions; a ValueError subclass) for anything about the
 * arguments, including launch configuration limits reported by generated code; DeviceError
 * for driver failures. Both default to ValueError / RuntimeError until set_exceptions.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <string.h>

#include "wavert.h"

/* Signatures up to these sizes need no allocation per call. */
#define STACK_SLOTS 256
#define STACK_TENSORS 32
/* Types remembered by the exchange-API / protocol cache (round-robin when full). */
#define TYPE_CACHE_SIZE 32
/* Device handles cached per device type (ordinals below this). */
#define DEVICE_CACHE_SIZE 64

/* ---------------------------------------------------------------------------------------- */
/* Module state (the GIL protects all of it)                                                */
/* ---------------------------------------------------------------------------------------- */
static PyObject *ArgumentError; /* strong; ValueError until set_exceptions */
static PyObject *DeviceError;   /* strong; RuntimeError until set_exceptions */

static PyObject *str_dlpack;           /* "__dlpack__" */
static PyObject *str_dlpack_device;    /* "__dlpack_device__" */
static PyObject *str_exchange_api;     /* "__dlpack_c_exchange_api__" */
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

static PyObject *cupy_get_current_stream; /* NULL: not looked up yet; Py_None: no CuPy */
static int cupy_stream_takes_device = -1; /* -1 unknown, 0 no, 1 yes */

enum { ROUTE_NONE = 0, ROUTE_PROTOCOL = 1, ROUTE_EXCHANGE = 2, ROUTE_CAPSULE = 3 };
enum { TYPE_JAX = 1, TYPE_CUPY = 2 };

typedef struct {
  PyTypeObject *type;  /* strong; NULL = free entry */
  PyObject *capsule;   /* strong; the exchange API capsule, or NULL */
  const DLPackExchangeAPI *api;
  uint8_t route;       /* ROUTE_NONE, ROUTE_PROTOCOL or ROUTE_EXCHANGE */
  uint8_t flags;       /* TYPE_JAX, TYPE_CUPY */
} type_info;

static type_info type_cache[TYPE_CACHE_SIZE];
static int type_cache_next;

static wavert_device *device_cache[2][DEVICE_CACHE_SIZE]; /* [0] CUDA, [1] ROCm */

/* ---------------------------------------------------------------------------------------- */
/* Parameters                                                                               */
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

static const char *const scalar_kind_names[SK_COUNT] = {"i1",    "i8",  "i16",  "i32", "i64",
                                                        "index", "f16", "bf16", "f32", "f64"};

typedef struct {
  uint8_t is_memref;
  uint8_t kind;    /* scalar_kind for scalars */
  uint8_t written; /* memref written by the function */
  Py_ssize_t slot; /* first slot */
  Py_ssize_t tensor_index; /* index among the memref parameters */
  wavert_memref_type mtype;
  int64_t *layout;    /* owned: sizes[rank] then strides[rank] */
  PyObject *name;     /* str */
  PyObject *type_str; /* "memref<?xf32>", "f32" */
} param_t;

typedef struct {
  PyObject_HEAD
  vectorcallfunc vectorcall;
  void (*entry)(uint64_t *);
  PyObject *name;      /* str */
  PyObject *params;    /* the tuple given to the constructor */
  PyObject *owner;     /* kept alive (the JIT engine holding `entry`), or NULL */
  PyObject *signature; /* "(a, s)" for messages */
  int32_t device_type;
  Py_ssize_t nparams, ntensors, nslots;
  param_t *p;
} HostFunction;

/* ---------------------------------------------------------------------------------------- */
/* Error helpers                                                                            */
/* ---------------------------------------------------------------------------------------- */
/* Raise `type` with "<prefix>: <message of the current exception>", chained from it. */
static void raise_chained(PyObject *type, PyObject *prefix /* borrowed str */) {
  PyObject *et, *ev, *tb;
  PyErr_Fetch(&et, &ev, &tb);
  if (!et) {
    PyErr_SetObject(type, prefix);
    return;
  }
  PyErr_NormalizeException(&et, &ev, &tb);
  if (tb && ev)
    PyException_SetTraceback(ev, tb);
  PyObject *msg = ev ? PyObject_Str(ev) : NULL;
  if (!msg) {
    PyErr_Clear();
    msg = PyUnicode_FromString("unknown error");
  }
  if (msg && PyUnicode_GET_LENGTH(msg) == 0) {
    Py_DECREF(msg);
    msg = PyObject_GetAttrString(et, "__name__");
    if (!msg)
      PyErr_Clear();
  }
  if (msg)
    PyErr_Format(type, "%U: %U", prefix, msg);
  else
    PyErr_SetObject(type, prefix);
  Py_XDECREF(msg);
  if (ev) {
    PyObject *nt, *nv, *ntb;
    PyErr_Fetch(&nt, &nv, &ntb);
    PyErr_NormalizeException(&nt, &nv, &ntb);
    if (nv) {
      Py_INCREF(ev);
      PyException_SetCause(nv, ev);   /* steals */
      Py_INCREF(ev);
      PyException_SetContext(nv, ev); /* steals */
    }
    PyErr_Restore(nt, nv, ntb);
  }
  Py_XDECREF(et);
  Py_XDECREF(ev);
  Py_XDECREF(tb);
}

static void raise_chained_arg(PyObject *type, PyObject *name, Py_ssize_t index,
                              const char *what) {
  PyObject *prefix = what ? PyUnicode_FromFormat("argument '%U' (#%zd): %s", name, index, what)
                          : PyUnicode_FromFormat("argument '%U' (#%zd)", name, index);
  if (!prefix)
    return; /* MemoryError replaces the original */
  raise_chained(type, prefix);
  Py_DECREF(prefix);
}

/* "argument 'a' (#0): <formatted>" (or just <formatted> when name is NULL). */
static void raise_arg(PyObject *name, Py_ssize_t index, const char *fmt, ...) {
  va_list va;
  va_start(va, fmt);
  PyObject *msg = PyUnicode_FromFormatV(fmt, va);
  va_end(va);
  if (!msg)
    return;
  if (name)
    PyErr_Format(ArgumentError, "argument '%U' (#%zd): %U", name, index, msg);
  else
    PyErr_SetObject(ArgumentError, msg);
  Py_DECREF(msg);
}

static void raise_status(wavert_status st) {
  PyObject *type = (st == WAVERT_ERROR_INVALID_ARGUMENT || st == WAVERT_ERROR_LIMIT_EXCEEDED)
                       ? ArgumentError
                       : DeviceError;
  const char *msg = wavert_last_error();
  if (!msg || !*msg)
    msg = wavert_status_string(st);
  PyErr_SetString(type, msg);
}

/* "numpy.ndarray", "int" (new reference, never fails silently). */
static PyObject *type_name(PyTypeObject *tp) {
  PyObject *mod = PyObject_GetAttr((PyObject *)tp, str_module);
  PyObject *qual = PyObject_GetAttr((PyObject *)tp, str_qualname);
  PyObject *r = NULL;
  if (!mod || !qual || !PyUnicode_Check(qual)) {
    PyErr_Clear();
    r = PyUnicode_FromString(tp->tp_name);
  } else if (PyUnicode_Check(mod) && PyUnicode_CompareWithASCIIString(mod, "builtins") != 0) {
    r = PyUnicode_FromFormat("%U.%U", mod, qual);
  } else {
    Py_INCREF(qual);
    r = qual;
  }
  Py_XDECREF(mod);
  Py_XDECREF(qual);
  return r;
}

static const char *device_kind(int32_t type) {
  switch (type) {
  case kDLCPU: return "cpu";
  case kDLCUDA: return "cuda";
  case kDLCUDAHost: return "cuda_host";
  case kDLOpenCL: return "opencl";
  case kDLVulkan: return "vulkan";
  case kDLMetal: return "metal";
  case kDLROCM: return "rocm";
  case kDLROCMHost: return "rocm_host";
  case kDLCUDAManaged: return "cuda_managed";
  case kDLOneAPI: return "oneapi";
  default: return NULL;
  }
}

/* "cuda:1", "device type 99:0" (new reference). */
static PyObject *device_str(int32_t type, int32_t id) {
  const char *k = device_kind(type);
  if (k)
    return PyUnicode_FromFormat("%s:%d", k, (int)id);
  return PyUnicode_FromFormat("device type %d:%d", (int)type, (int)id);
}

/* ---------------------------------------------------------------------------------------- */
/* Per-type cache: exchange API / protocol / neither, jax / cupy                            */
/* ---------------------------------------------------------------------------------------- */
static int module_starts_with(PyObject *mod, const char *prefix) {
  if (!mod || !PyUnicode_Check(mod))
    return 0;
  Py_ssize_t n = (Py_ssize_t)strlen(prefix);
  if (PyUnicode_GET_LENGTH(mod) < n)
    return 0;
  const char *s = PyUnicode_AsUTF8(mod);
  if (!s) {
    PyErr_Clear();
    return 0;
  }
  return strncmp(s, prefix, (size_t)n) == 0;
}

/* Look `name` up on the type; 1 found (*out new ref), 0 absent, -1 error. */
static int type_attr(PyTypeObject *tp, PyObject *name, PyObject **out) {
  *out = PyObject_GetAttr((PyObject *)tp, name);
  if (*out)
    return 1;
  if (PyErr_ExceptionMatches(PyExc_AttributeError)) {
    PyErr_Clear();
    return 0;
  }
  return -1;
}

/* Copy the cached info of `tp` into *out, filling the cache on a miss. 0 / -1 on error. */
static int type_info_get(PyTypeObject *tp, type_info *out) {
  for (int i = 0; i < TYPE_CACHE_SIZE; i++) {
    if (type_cache[i].type == tp) {
      *out = type_cache[i];
      return 0;
    }
  }
  type_info ti = {0};
  PyObject *cap;
  int r = type_attr(tp, str_exchange_api, &cap);
  if (r < 0)
    return -1;
  if (r > 0) {
    const DLPackExchangeAPI *api = NULL;
    if (PyCapsule_IsValid(cap, "dlpack_exchange_api"))
      api = (const DLPackExchangeAPI *)PyCapsule_GetPointer(cap, "dlpack_exchange_api");
    if (api && api->header.version.major == DLPACK_MAJOR_VERSION &&
        api->dltensor_from_py_object_no_sync) {
      ti.route = ROUTE_EXCHANGE;
      ti.api = api;
      ti.capsule = cap;
    } else {
      PyErr_Clear();
      Py_DECREF(cap);
    }
  }
  if (ti.route == ROUTE_NONE) {
    PyObject *a, *b;
    r = type_attr(tp, str_dlpack, &a);
    if (r < 0)
      goto fail;
    if (r > 0) {
      Py_DECREF(a);
      r = type_attr(tp, str_dlpack_device, &b);
      if (r < 0)
        goto fail;
      if (r > 0) {
        Py_DECREF(b);
        ti.route = ROUTE_PROTOCOL;
      }
    }
  }
  PyObject *mod;
  r = type_attr(tp, str_module, &mod);
  if (r < 0)
    goto fail;
  if (r > 0) {
    if (module_starts_with(mod, "jax"))
      ti.flags |= TYPE_JAX;
    if (module_starts_with(mod, "cupy"))
      ti.flags |= TYPE_CUPY;
    Py_DECREF(mod);
  }
  /* Remember it (holding the type keeps the pointer from being reused by another type). */
  type_info *slot = &type_cache[type_cache_next];
  type_cache_next = (type_cache_next + 1) % TYPE_CACHE_SIZE;
  PyTypeObject *old_type = slot->type;
  PyObject *old_cap = slot->capsule;
  Py_INCREF(tp);
  ti.type = tp;
  *slot = ti;
  *out = ti;
  Py_XDECREF(old_type);
  Py_XDECREF(old_cap);
  return 0;
fail:
  Py_XDECREF(ti.capsule);
  return -1;
}

/* ---------------------------------------------------------------------------------------- */
/* Scalars                                                                                  */
/* ---------------------------------------------------------------------------------------- */
/* Round `d` to f16 (ebits 5) or bf16 (ebits 8) with libwavert's round-to-nearest-even
 * conversion, written as its bit pattern. Returns -1 when a finite `d` overflows the format;
 * inf and nan map to inf and a quiet nan. */
static int narrow_float(double d, int ebits, uint16_t *out) {
  const uint16_t h = ebits == 5 ? wavert_f16_from_f64(d) : wavert_bf16_from_f64(d);
  const uint16_t exp_mask = ebits == 5 ? 0x7c00 : 0x7f80;
  if (isfinite(d) && (h & 0x7fff) == exp_mask)
    return -1;
  *out = h;
  return 0;
}

static int is_numpy_bool(PyObject *v) {
  const char *n = Py_TYPE(v)->tp_name;
  return strcmp(n, "numpy.bool") == 0 || strcmp(n, "numpy.bool_") == 0;
}

static int scalar_type_error(PyObject *name, Py_ssize_t index, scalar_kind kind, PyObject *v,
                             const char *expected) {
  PyObject *tn = type_name(Py_TYPE(v));
  if (!tn)
    return -1;
  raise_arg(name, index, "expects %s for %s, got %U (%R)", expected, scalar_kind_names[kind], tn,
            v);
  Py_DECREF(tn);
  return -1;
}

/* Pack `v` as a `kind` scalar into *out (bits in the low bytes, the rest zero). Errors name
 * the argument (or only the value when name is NULL). */
static int pack_scalar(scalar_kind kind, PyObject *v, uint64_t *out, PyObject *name,
                       Py_ssize_t index) {
  switch (kind) {
  case SK_I1: {
    if (v == Py_True || v == Py_False) {
      *out = v == Py_True;
      return 0;
    }
    if (is_numpy_bool(v)) {
      int t = PyObject_IsTrue(v);
      if (t < 0)
        return -1;
      *out = (uint64_t)t;
      return 0;
    }
    if (PyFloat_Check(v) || !PyIndex_Check(v))
      return scalar_type_error(name, index, kind, v, "a bool");
    PyObject *iv = PyNumber_Index(v);
    if (!iv)
      return -1;
    int overflow;
    long long x = PyLong_AsLongLongAndOverflow(iv, &overflow);
    if (x == -1 && PyErr_Occurred()) {
      Py_DECREF(iv);
      return -1;
    }
    if (overflow || (x != 0 && x != 1)) {
      raise_arg(name, index, "%R is out of range for i1 [0, 1] (pass a bool)", iv);
      Py_DECREF(iv);
      return -1;
    }
    Py_DECREF(iv);
    *out = (uint64_t)x;
    return 0;
  }
  case SK_I8:
  case SK_I16:
  case SK_I32:
  case SK_I64:
  case SK_INDEX: {
    if (PyFloat_Check(v) || !PyIndex_Check(v))
      return scalar_type_error(name, index, kind, v, "an integer");
    PyObject *iv = PyNumber_Index(v);
    if (!iv)
      return -1;
    const int bits = kind == SK_I8 ? 8 : kind == SK_I16 ? 16 : kind == SK_I32 ? 32 : 64;
    const long long hi = bits == 64 ? INT64_MAX : (long long)((INT64_C(1) << (bits - 1)) - 1);
    const long long lo = -hi - 1;
    int overflow;
    long long x = PyLong_AsLongLongAndOverflow(iv, &overflow);
    if (x == -1 && PyErr_Occurred()) {
      Py_DECREF(iv);
      return -1;
    }
    if (overflow || x < lo || x > hi) {
      raise_arg(name, index, "%R is out of range for %s [%lld, %lld]", iv,
                scalar_kind_names[kind], lo, hi);
      Py_DECREF(iv);
      return -1;
    }
    Py_DECREF(iv);
    *out = bits == 64 ? (uint64_t)x : ((uint64_t)x & ((UINT64_C(1) << bits) - 1));
    return 0;
  }
  case SK_F16:
  case SK_BF16:
  case SK_F32:
  case SK_F64: {
    double d;
    if (PyFloat_Check(v)) {
      d = PyFloat_AS_DOUBLE(v);
    } else if (Py_TYPE(v)->tp_as_number &&
               (Py_TYPE(v)->tp_as_number->nb_float || Py_TYPE(v)->tp_as_number->nb_index)) {
      if (Py_TYPE(v)->tp_as_number->nb_float) {
        d = PyFloat_AsDouble(v);
      } else {
        PyObject *iv = PyNumber_Index(v);
        if (!iv)
          return -1;
        d = PyLong_AsDouble(iv);
        Py_DECREF(iv);
      }
      if (d == -1.0 && PyErr_Occurred()) {
        if (PyErr_ExceptionMatches(PyExc_OverflowError)) {
          PyErr_Clear();
          raise_arg(name, index, "%R is out of range for %s", v, scalar_kind_names[kind]);
        } else if (PyErr_ExceptionMatches(PyExc_TypeError)) {
          PyErr_Clear();
          return scalar_type_error(name, index, kind, v, "a number");
        }
        return -1;
      }
    } else {
      return scalar_type_error(name, index, kind, v, "a number");
    }
    switch (kind) {
    case SK_F64:
      memcpy(out, &d, sizeof d);
      return 0;
    case SK_F32: {
      float f = (float)d;
      if (isinf(f) && isfinite(d)) {
        raise_arg(name, index,
                  "%R is out of range for f32 (largest finite value 3.4028234663852886e+38)", v);
        return -1;
      }
      uint32_t u;
      memcpy(&u, &f, sizeof u);
      *out = u;
      return 0;
    }
    default: {
      uint16_t h;
      const int f16 = kind == SK_F16;
      if (narrow_float(d, f16 ? 5 : 8, &h) < 0) {
        raise_arg(name, index, "%R is out of range for %s (largest finite value %s)", v,
                  scalar_kind_names[kind], f16 ? "65504.0" : "3.3895313892515355e+38");
        return -1;
      }
      *out = h;
      return 0;
    }
    }
  }
  default:
    PyErr_SetString(PyExc_SystemError, "pywave._native: bad scalar kind");
    return -1;
  }
}

/* ---------------------------------------------------------------------------------------- */
/* Streams and devices                                                                      */
/* ---------------------------------------------------------------------------------------- */
static int handle_from_int(PyObject *h, void **out) {
  if (!PyLong_Check(h) || PyBool_Check(h))
    return -1;
  unsigned long long u = PyLong_AsUnsignedLongLong(h);
  if (u == (unsigned long long)-1 && PyErr_Occurred()) {
    PyErr_Clear();
    return -1;
  }
  if (u > UINTPTR_MAX)
    return -1;
  *out = (void *)(uintptr_t)u;
  return 0;
}

static int bad_stream(PyObject *s) {
  PyObject *tn = type_name(Py_TYPE(s));
  if (!tn)
    return -1;
  PyErr_Format(ArgumentError,
               "argument 'stream' expects None, a stream handle (a non-negative int, 0 = the "
               "legacy default stream) or a stream object (__cuda_stream__, torch.cuda.Stream, "
               "cupy.cuda.Stream), got %U (%R)",
               tn, s);
  Py_DECREF(tn);
  return -1;
}

/* An explicit stream= value (not None) -> driver handle. */
static int parse_stream(PyObject *s, void **out) {
  if (PyLong_Check(s) && !PyBool_Check(s)) {
    if (handle_from_int(s, out) < 0)
      return bad_stream(s);
    return 0;
  }
  PyObject *a = PyObject_GetAttr(s, str_cuda_stream_prot);
  if (a) {
    PyObject *t = PyCallable_Check(a) ? PyObject_CallNoArgs(a) : (Py_INCREF(a), a);
    Py_DECREF(a);
    if (!t) {
      PyObject *prefix = PyUnicode_FromString("argument 'stream': __cuda_stream__() failed");
      if (prefix) {
        raise_chained(ArgumentError, prefix);
        Py_DECREF(prefix);
      }
      return -1;
    }
    int ok = PyTuple_Check(t) && PyTuple_GET_SIZE(t) == 2 &&
             handle_from_int(PyTuple_GET_ITEM(t, 1), out) == 0;
    if (!ok)
      PyErr_Format(ArgumentError,
                   "argument 'stream': __cuda_stream__() must return (version, handle), got %R",
                   t);
    Py_DECREF(t);
    return ok ? 0 : -1;
  }
  if (!PyErr_ExceptionMatches(PyExc_AttributeError))
    return -1;
  PyErr_Clear();
  PyObject *names[2] = {str_cuda_stream, str_ptr};
  for (int i = 0; i < 2; i++) {
    a = PyObject_GetAttr(s, names[i]);
    if (a) {
      int r = handle_from_int(a, out);
      Py_DECREF(a);
      if (r < 0)
        return bad_stream(s);
      return 0;
    }
    if (!PyErr_ExceptionMatches(PyExc_AttributeError))
      return -1;
    PyErr_Clear();
  }
  return bad_stream(s);
}

/* CuPy's current stream on `device_id` (NULL when CuPy or the per-device query is missing). */
static int cupy_current_stream(int32_t device_id, void **out) {
  *out = NULL;
  if (!cupy_get_current_stream) {
    PyObject *mod = PyImport_ImportModule("cupy.cuda");
    if (mod) {
      cupy_get_current_stream = PyObject_GetAttrString(mod, "get_current_stream");
      Py_DECREF(mod);
    }
    if (!cupy_get_current_stream) {
      PyErr_Clear();
      Py_INCREF(Py_None);
      cupy_get_current_stream = Py_None;
    }
  }
  if (cupy_get_current_stream == Py_None || cupy_stream_takes_device == 0)
    return 0;
  PyObject *id = PyLong_FromLong(device_id);
  if (!id)
    return -1;
  PyObject *st = PyObject_CallOneArg(cupy_get_current_stream, id);
  Py_DECREF(id);
  if (!st) {
    if (cupy_stream_takes_device < 0 && PyErr_ExceptionMatches(PyExc_TypeError)) {
      PyErr_Clear();
      cupy_stream_takes_device = 0; /* old CuPy: legacy default stream from now on */
      return 0;
    }
    return -1;
  }
  cupy_stream_takes_device = 1;
  PyObject *ptr = PyObject_GetAttr(st, str_ptr);
  Py_DECREF(st);
  if (!ptr)
    return -1;
  int r = handle_from_int(ptr, out);
  Py_DECREF(ptr);
  if (r < 0)
    PyErr_SetString(DeviceError, "cupy.cuda.get_current_stream().ptr is not a stream handle");
  return r;
}

static wavert_status get_device(int32_t type, int32_t id, wavert_device **out) {
  const int t = type == kDLROCM ? 1 : 0;
  if (id >= 0 && id < DEVICE_CACHE_SIZE && device_cache[t][id]) {
    *out = device_cache[t][id];
    return WAVERT_OK;
  }
  wavert_status st = wavert_device_get(type, id, out);
  if (st == WAVERT_OK && id >= 0 && id < DEVICE_CACHE_SIZE)
    device_cache[t][id] = *out;
  return st;
}

/* ---------------------------------------------------------------------------------------- */
/* DLPack                                                                                   */
/* ---------------------------------------------------------------------------------------- */
typedef struct {
  DLTensor local;        /* filled by the exchange API (borrowed data) */
  const DLTensor *t;     /* the tensor read for the descriptor */
  void *managed;         /* owned DLManagedTensor(Versioned)*: deleter called after the call */
  uint8_t versioned;
  uint8_t route;
  uint8_t read_only;
  uint8_t deferred; /* protocol tensor whose device is read from its DLTensor in pass 2 */
} tensor_state;

static void release_tensors(tensor_state *ts, Py_ssize_t n) {
  PyObject *et, *ev, *tb;
  PyErr_Fetch(&et, &ev, &tb); /* deleters may run Python code */
  for (Py_ssize_t i = 0; i < n; i++) {
    void *m = ts[i].managed;
    if (!m)
      continue;
    ts[i].managed = NULL;
    if (ts[i].versioned) {
      DLManagedTensorVersioned *mt = (DLManagedTensorVersioned *)m;
      if (mt->deleter)
        mt->deleter(mt);
    } else {
      DLManagedTensor *mt = (DLManagedTensor *)m;
      if (mt->deleter)
        mt->deleter(mt);
    }
  }
  PyErr_Restore(et, ev, tb);
}

/* obj.__dlpack__(stream=S, max_version=(1, 3)) with the fallbacks of the DLPack rules:
 * TypeError -> without max_version (legacy producer); a refused stream (TypeError,
 * ValueError, BufferError) -> stream=None. */
static PyObject *call_dlpack(PyObject *obj, PyObject *stream_value) {
  PyObject *argv[3] = {obj, stream_value, max_version};
  PyObject *r = PyObject_VectorcallMethod(str_dlpack, argv, 1, kw_stream_maxver);
  if (r)
    return r;
  int legacy = 0;
  if (PyErr_ExceptionMatches(PyExc_TypeError)) {
    PyErr_Clear();
    r = PyObject_VectorcallMethod(str_dlpack, argv, 1, kw_stream);
    if (r)
      return r;
    legacy = 1;
  }
  /* A producer refusing the stream value (NumPy raises RuntimeError for anything but None,
   * torch refuses 2): retry without a stream. */
  if (!PyErr_ExceptionMatches(PyExc_TypeError) && !PyErr_ExceptionMatches(PyExc_ValueError) &&
      !PyErr_ExceptionMatches(PyExc_BufferError) && !PyErr_ExceptionMatches(PyExc_RuntimeError))
    return NULL;
  PyErr_Clear();
  if (!legacy) {
    PyObject *argv2[2] = {obj, max_version};
    r = PyObject_VectorcallMethod(str_dlpack, argv2, 1, kw_maxver);
    if (r || !PyErr_ExceptionMatches(PyExc_TypeError))
      return r;
    PyErr_Clear();
  }
  return PyObject_VectorcallMethod(str_dlpack, argv, 1, NULL);
}

/* ---------------------------------------------------------------------------------------- */
/* The call                                                                                 */
/* ---------------------------------------------------------------------------------------- */
static int wrong_device(HostFunction *self, param_t *p, Py_ssize_t index, PyObject *obj,
                        int32_t type, int32_t id) {
  PyObject *tn = PyCapsule_CheckExact(obj) ? PyUnicode_FromString("DLPack capsule")
                                           : type_name(Py_TYPE(obj));
  if (!tn)
    return -1;
  if (type == kDLCPU) {
    PyErr_Format(ArgumentError,
                 "argument '%U' (#%zd) is on the CPU (%U); pass a GPU tensor on %s", p->name,
                 index, tn, device_kind(self->device_type));
  } else {
    PyObject *ds = device_str(type, id);
    if (ds) {
      PyErr_Format(ArgumentError, "argument '%U' (#%zd) is on %U (%U); pass a GPU tensor on %s",
                   p->name, index, ds, tn, device_kind(self->device_type));
      Py_DECREF(ds);
    }
  }
  Py_DECREF(tn);
  return -1;
}

static int read_only_error(param_t *p, Py_ssize_t index, const char *why) {
  PyErr_Format(ArgumentError,
               "argument '%U' (#%zd) is read-only (%s) but %U writes it; pass a writable tensor",
               p->name, index, why, p->type_str);
  return -1;
}

static PyObject *hf_vectorcall(PyObject *self_, PyObject *const *args, size_t nargsf,
                               PyObject *kwnames) {
  HostFunction *self = (HostFunction *)self_;
  const Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
  if (!self->entry) {
    PyErr_Format(ArgumentError, "%U(): the compiled module is closed", self->name);
    return NULL;
  }
  PyObject *stream_obj = NULL;
  if (kwnames) {
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(kwnames); i++) {
      PyObject *key = PyTuple_GET_ITEM(kwnames, i);
      if (key == str_stream || PyUnicode_Compare(key, str_stream) == 0) {
        stream_obj = args[nargs + i];
      } else {
        if (PyErr_Occurred())
          return NULL;
        PyErr_Format(ArgumentError,
                     "%U() got an unexpected keyword argument '%U' (only stream= is accepted)",
                     self->name, key);
        return NULL;
      }
    }
  }
  if (nargs != self->nparams) {
    PyErr_Format(ArgumentError, "%U() takes %zd argument%s %U, got %zd", self->name,
                 self->nparams, self->nparams == 1 ? "" : "s", self->signature, nargs);
    return NULL;
  }

  void *stream = NULL;
  int explicit_stream = stream_obj && stream_obj != Py_None;
  if (explicit_stream && parse_stream(stream_obj, &stream) < 0)
    return NULL;

  uint64_t slots_buf[STACK_SLOTS];
  tensor_state ts_buf[STACK_TENSORS];
  uint64_t *slots = slots_buf;
  tensor_state *ts = ts_buf;
  if (self->nslots > STACK_SLOTS) {
    slots = PyMem_Malloc((size_t)self->nslots * sizeof *slots);
    if (!slots)
      return PyErr_NoMemory();
  }
  if (self->ntensors > STACK_TENSORS) {
    ts = PyMem_Malloc((size_t)self->ntensors * sizeof *ts);
    if (!ts) {
      if (slots != slots_buf)
        PyMem_Free(slots);
      return PyErr_NoMemory();
    }
  }
  Py_ssize_t nstate = 0; /* ts[0..nstate) initialised */
  PyObject *result = NULL;
  PyObject *stream_value = NULL; /* DLPack's stream= value for protocol producers */

  /* Pass 1: scalars, and each tensor's route and device. */
  const int32_t dev_type = self->device_type;
  int32_t dev_id = -1;
  Py_ssize_t dev_arg = -1;
  const DLPackExchangeAPI *stream_api = NULL;
  int any_cupy = 0;
  for (Py_ssize_t i = 0; i < nargs; i++) {
    param_t *p = &self->p[i];
    PyObject *v = args[i];
    if (!p->is_memref) {
      slots[p->slot] = 0;
      if (pack_scalar((scalar_kind)p->kind, v, &slots[p->slot], p->name, i) < 0)
        goto done;
      continue;
    }
    tensor_state *t = &ts[p->tensor_index];
    t->t = NULL;
    t->managed = NULL;
    t->versioned = 0;
    t->read_only = 0;
    t->deferred = 0;
    nstate = p->tensor_index + 1;
    int32_t type, id;
    if (PyCapsule_CheckExact(v)) {
      const char *cname = PyCapsule_GetName(v);
      const DLTensor *dl = NULL;
      if (cname && strcmp(cname, "dltensor_versioned") == 0) {
        DLManagedTensorVersioned *mt = PyCapsule_GetPointer(v, cname);
        if (!mt)
          goto done;
        if (mt->version.major != DLPACK_MAJOR_VERSION) {
          raise_arg(p->name, i, "DLPack capsule of unsupported version %u.%u (expected 1.x)",
                    (unsigned)mt->version.major, (unsigned)mt->version.minor);
          goto done;
        }
        dl = &mt->dl_tensor;
        t->versioned = 1;
        t->read_only = (mt->flags & DLPACK_FLAG_BITMASK_READ_ONLY) != 0;
      } else if (cname && strcmp(cname, "dltensor") == 0) {
        DLManagedTensor *mt = PyCapsule_GetPointer(v, cname);
        if (!mt)
          goto done;
        dl = &mt->dl_tensor;
      } else if (cname && (strcmp(cname, "used_dltensor") == 0 ||
                           strcmp(cname, "used_dltensor_versioned") == 0)) {
        raise_arg(p->name, i, "DLPack capsule already consumed; pass the array itself");
        goto done;
      } else {
        raise_arg(p->name, i, "expects a DLPack tensor (%U), got a PyCapsule named %s",
                  p->type_str, cname ? cname : "NULL");
        goto done;
      }
      t->route = ROUTE_CAPSULE;
      type = (int32_t)dl->device.device_type;
      id = dl->device.device_id;
    } else {
      type_info ti;
      if (type_info_get(Py_TYPE(v), &ti) < 0) {
        raise_chained_arg(ArgumentError, p->name, i, NULL);
        goto done;
      }
      t->route = ti.route;
      if (ti.route == ROUTE_EXCHANGE) {
        if (ti.api->dltensor_from_py_object_no_sync(v, &t->local) != 0) {
          if (!PyErr_Occurred())
            PyErr_SetString(PyExc_RuntimeError, "DLPack exchange API conversion failed");
          raise_chained_arg(ArgumentError, p->name, i, NULL);
          goto done;
        }
        t->t = &t->local;
        type = (int32_t)t->local.device.device_type;
        id = t->local.device.device_id;
        if (!stream_api)
          stream_api = ti.api;
      } else if (ti.route == ROUTE_PROTOCOL) {
        if ((ti.flags & TYPE_JAX) && p->written) {
          read_only_error(p, i, "JAX arrays are immutable");
          goto done;
        }
        if (ti.flags & TYPE_CUPY)
          any_cupy = 1;
        if (dev_arg >= 0) {
          /* The stream is chosen from the first tensor's device; later protocol tensors are
           * checked against it from their own DLTensor (pass 2), which saves a
           * __dlpack_device__() call per argument. */
          t->deferred = 1;
          continue;
        }
        PyObject *dv = PyObject_VectorcallMethod(str_dlpack_device, &v, 1, NULL);
        if (!dv) {
          raise_chained_arg(ArgumentError, p->name, i, "__dlpack_device__() failed");
          goto done;
        }
        long lt = -1, li = -1;
        if (PyTuple_Check(dv) && PyTuple_GET_SIZE(dv) == 2) {
          lt = PyLong_AsLong(PyTuple_GET_ITEM(dv, 0));
          li = lt == -1 && PyErr_Occurred() ? -1 : PyLong_AsLong(PyTuple_GET_ITEM(dv, 1));
        }
        if (PyErr_Occurred() || lt < 0 || li < 0 || lt > INT32_MAX || li > INT32_MAX) {
          PyErr_Clear();
          raise_arg(p->name, i, "__dlpack_device__() must return (device_type, device_id), got %R",
                    dv);
          Py_DECREF(dv);
          goto done;
        }
        Py_DECREF(dv);
        type = (int32_t)lt;
        id = (int32_t)li;
      } else {
        PyObject *tn = type_name(Py_TYPE(v));
        if (tn) {
          raise_arg(p->name, i, "expects a DLPack tensor (%U), got %U", p->type_str, tn);
          Py_DECREF(tn);
        }
        goto done;
      }
    }
    if (type != dev_type) {
      wrong_device(self, p, i, v, type, id);
      goto done;
    }
    if (dev_arg < 0) {
      dev_arg = i;
      dev_id = id;
    } else if (id != dev_id) {
      PyObject *d0 = device_str(type, dev_id), *d1 = device_str(type, id);
      if (d0 && d1)
        PyErr_Format(ArgumentError, "arguments '%U' (%U) and '%U' (%U) are on different devices",
                     self->p[dev_arg].name, d0, p->name, d1);
      Py_XDECREF(d0);
      Py_XDECREF(d1);
      goto done;
    }
  }
  const int32_t device_id = dev_arg >= 0 ? dev_id : 0;

  /* The stream: explicit, else the producers' current one, else the legacy default. */
  if (!explicit_stream) {
    if (stream_api && stream_api->current_work_stream) {
      if (stream_api->current_work_stream((DLDeviceType)dev_type, device_id, &stream) != 0) {
        if (!PyErr_Occurred())
          PyErr_SetString(PyExc_RuntimeError, "current_work_stream failed");
        PyObject *prefix = PyUnicode_FromFormat(
            "%U(): could not read the current stream of the DLPack exchange API", self->name);
        if (prefix) {
          raise_chained(DeviceError, prefix);
          Py_DECREF(prefix);
        }
        goto done;
      }
    } else if (any_cupy) {
      if (cupy_current_stream(device_id, &stream) < 0) {
        PyObject *prefix =
            PyUnicode_FromFormat("%U(): could not read CuPy's current stream", self->name);
        if (prefix) {
          raise_chained(DeviceError, prefix);
          Py_DECREF(prefix);
        }
        goto done;
      }
    }
  }

  /* Pass 2: take the capsules and fill the descriptors. */
  for (Py_ssize_t i = 0; i < nargs; i++) {
    param_t *p = &self->p[i];
    if (!p->is_memref)
      continue;
    PyObject *v = args[i];
    tensor_state *t = &ts[p->tensor_index];
    if (t->route == ROUTE_CAPSULE || t->route == ROUTE_PROTOCOL) {
      PyObject *cap;
      if (t->route == ROUTE_CAPSULE) {
        cap = v;
        Py_INCREF(cap);
      } else {
        if (!stream_value) {
          if (stream)
            stream_value = PyLong_FromVoidPtr(stream);
          else /* the legacy default stream: 1 on CUDA, 0 on ROCm */
            stream_value = PyLong_FromLong(dev_type == kDLROCM ? 0 : 1);
          if (!stream_value)
            goto done;
        }
        cap = call_dlpack(v, stream_value);
        if (!cap) {
          raise_chained_arg(ArgumentError, p->name, i, "__dlpack__() failed");
          goto done;
        }
      }
      const char *cname = PyCapsule_CheckExact(cap) ? PyCapsule_GetName(cap) : NULL;
      int versioned;
      if (cname && strcmp(cname, "dltensor_versioned") == 0) {
        versioned = 1;
      } else if (cname && strcmp(cname, "dltensor") == 0) {
        versioned = 0;
      } else if (t->route == ROUTE_CAPSULE) { /* the same capsule passed twice */
        Py_DECREF(cap);
        raise_arg(p->name, i, "DLPack capsule already consumed; pass the array itself");
        goto done;
      } else {
        raise_arg(p->name, i, "__dlpack__() returned %R, not an unused DLPack capsule", cap);
        Py_DECREF(cap);
        goto done;
      }
      void *m = PyCapsule_GetPointer(cap, cname);
      if (!m || PyCapsule_SetName(cap, versioned ? "used_dltensor_versioned" : "used_dltensor")) {
        Py_DECREF(cap);
        goto done;
      }
      Py_DECREF(cap); /* renamed: its destructor leaves the tensor to us */
      t->managed = m;
      t->versioned = (uint8_t)versioned;
      if (versioned) {
        DLManagedTensorVersioned *mt = m;
        if (mt->version.major != DLPACK_MAJOR_VERSION) {
          raise_arg(p->name, i, "__dlpack__() gave DLPack version %u.%u (expected 1.x)",
                    (unsigned)mt->version.major, (unsigned)mt->version.minor);
          goto done;
        }
        t->t = &mt->dl_tensor;
        t->read_only = (mt->flags & DLPACK_FLAG_BITMASK_READ_ONLY) != 0;
      } else {
        t->t = &((DLManagedTensor *)m)->dl_tensor;
      }
      if ((int32_t)t->t->device.device_type != dev_type) {
        wrong_device(self, p, i, v, (int32_t)t->t->device.device_type, t->t->device.device_id);
        goto done;
      }
      if (t->t->device.device_id != device_id) {
        PyObject *d0 = device_str(dev_type, device_id);
        PyObject *d1 = device_str(dev_type, t->t->device.device_id);
        if (d0 && d1 && t->deferred)
          PyErr_Format(ArgumentError, "arguments '%U' (%U) and '%U' (%U) are on different devices",
                       self->p[dev_arg].name, d0, p->name, d1);
        else if (d0 && d1)
          raise_arg(p->name, i, "__dlpack_device__() said %U but the tensor is on %U", d0, d1);
        Py_XDECREF(d0);
        Py_XDECREF(d1);
        goto done;
      }
      if (t->read_only && p->written) {
        read_only_error(p, i, "its DLPack producer marks it READ_ONLY");
        goto done;
      }
    }
    if (wavert_memref_from_dltensor(t->t, &p->mtype, (int64_t *)&slots[p->slot]) != WAVERT_OK) {
      PyErr_Format(ArgumentError, "argument '%U' (#%zd): %s", p->name, i, wavert_last_error());
      goto done;
    }
  }

  wavert_device *device;
  wavert_status st = get_device(dev_type, device_id, &device);
  if (st != WAVERT_OK) {
    PyErr_Format(DeviceError, "%U(): no %s device %d: %s", self->name, device_kind(dev_type),
                 (int)device_id, wavert_last_error());
    goto done;
  }
  wavert_call_state state;
  st = wavert_call_begin(device, stream, &state);
  if (st != WAVERT_OK) {
    raise_status(st == WAVERT_ERROR_INVALID_ARGUMENT ? WAVERT_ERROR_DRIVER : st);
    goto done;
  }
  Py_BEGIN_ALLOW_THREADS
  self->entry(slots);
  Py_END_ALLOW_THREADS
  st = wavert_call_end(&state);
  if (st != WAVERT_OK) {
    raise_status(st);
    goto done;
  }
  Py_INCREF(Py_None);
  result = Py_None;

done:
  Py_XDECREF(stream_value);
  release_tensors(ts, nstate);
  if (slots != slots_buf)
    PyMem_Free(slots);
  if (ts != ts_buf)
    PyMem_Free(ts);
  return result;
}

/* ---------------------------------------------------------------------------------------- */
/* Construction                                                                             */
/* ---------------------------------------------------------------------------------------- */
/* "f32", "i1", "bf16", "si8", "vector<4xf32>" for a DLPack dtype (new reference). */
static PyObject *element_str(unsigned code, unsigned bits, unsigned lanes, unsigned flags) {
  PyObject *e;
  switch (code) {
  case kDLBool:
    e = bits == 8 ? PyUnicode_FromString("i1") : PyUnicode_FromFormat("bool%u", bits);
    break;
  case kDLInt:
    e = PyUnicode_FromFormat((flags & WAVERT_MEMREF_SIGNLESS) ? "i%u" : "si%u", bits);
    break;
  case kDLUInt:
    e = PyUnicode_FromFormat((flags & WAVERT_MEMREF_SIGNLESS) ? "i%u" : "ui%u", bits);
    break;
  case kDLFloat: e = PyUnicode_FromFormat("f%u", bits); break;
  case kDLBfloat: e = PyUnicode_FromFormat(bits == 16 ? "bf16" : "bf%u", bits); break;
  case kDLComplex: e = PyUnicode_FromFormat("complex<f%u>", bits / 2); break;
  default: e = PyUnicode_FromFormat("dlpack(%u, %u)", code, bits); break;
  }
  if (e && lanes != 1) {
    PyObject *v = PyUnicode_FromFormat("vector<%ux%U>", lanes, e);
    Py_DECREF(e);
    e = v;
  }
  return e;
}

static int append(PyObject *list, PyObject *item /* stolen */) {
  if (!item)
    return -1;
  int r = PyList_Append(list, item);
  Py_DECREF(item);
  return r;
}

static PyObject *dim_str(int64_t v) {
  if (v == WAVERT_DYNAMIC)
    return PyUnicode_FromString("?");
  return PyUnicode_FromFormat("%lld", (long long)v);
}

/* "memref<?x4xf32>", "memref<?xf32, strided<[?], offset: ?>>" (new reference). */
static PyObject *memref_str(const param_t *p) {
  const wavert_memref_type *m = &p->mtype;
  PyObject *parts = PyList_New(0), *r = NULL, *sep = NULL, *joined = NULL;
  if (!parts)
    return NULL;
  for (int32_t d = 0; d < m->rank; d++)
    if (append(parts, dim_str(m->sizes[d])) < 0)
      goto out;
  if (append(parts, element_str(m->dtype.code, m->dtype.bits, m->dtype.lanes, m->flags)) < 0)
    goto out;
  sep = PyUnicode_FromString("x");
  if (!sep || !(joined = PyUnicode_Join(sep, parts)))
    goto out;
  if (m->flags & WAVERT_MEMREF_STRIDED) {
    PyObject *sp = PyList_New(0);
    if (!sp)
      goto out;
    for (int32_t d = 0; d < m->rank; d++)
      if (append(sp, dim_str(m->strides[d])) < 0) {
        Py_DECREF(sp);
        goto out;
      }
    PyObject *comma = PyUnicode_FromString(", ");
    PyObject *sj = comma ? PyUnicode_Join(comma, sp) : NULL;
    PyObject *off = dim_str(m->offset);
    if (sj && off)
      r = PyUnicode_FromFormat("memref<%U, strided<[%U], offset: %U>>", joined, sj, off);
    Py_XDECREF(comma);
    Py_XDECREF(sj);
    Py_XDECREF(off);
    Py_DECREF(sp);
  } else {
    r = PyUnicode_FromFormat("memref<%U>", joined);
  }
out:
  Py_DECREF(parts);
  Py_XDECREF(sep);
  Py_XDECREF(joined);
  return r;
}

static int as_int64(PyObject *o, const char *what, PyObject *pname, int64_t *out) {
  if (!PyLong_Check(o) || PyBool_Check(o)) {
    PyErr_Format(PyExc_TypeError, "HostFunction: parameter '%U': %s must be an int, got %R",
                 pname, what, o);
    return -1;
  }
  long long v = PyLong_AsLongLong(o);
  if (v == -1 && PyErr_Occurred())
    return -1;
  *out = v;
  return 0;
}

/* Parse one ("memref", ...) or ("scalar", ...) tuple into *p (p zeroed by the caller). */
static int parse_param(PyObject *t, Py_ssize_t index, param_t *p) {
  if (!PyTuple_Check(t) || PyTuple_GET_SIZE(t) < 1 || !PyUnicode_Check(PyTuple_GET_ITEM(t, 0))) {
    PyErr_Format(PyExc_TypeError,
                 "HostFunction: params[%zd] must be a tuple (\"memref\"|\"scalar\", name, ...), "
                 "got %R",
                 index, t);
    return -1;
  }
  PyObject *tag = PyTuple_GET_ITEM(t, 0);
  Py_ssize_t n = PyTuple_GET_SIZE(t);
  int memref = PyUnicode_CompareWithASCIIString(tag, "memref") == 0;
  int scalar = PyUnicode_CompareWithASCIIString(tag, "scalar") == 0;
  if ((!memref && !scalar) || (memref && n != 10) || (scalar && n != 3) ||
      !PyUnicode_Check(PyTuple_GET_ITEM(t, 1))) {
    PyErr_Format(PyExc_ValueError,
                 "HostFunction: params[%zd] must be (\"memref\", name, code, bits, lanes, flags, "
                 "sizes, strides, offset, written) or (\"scalar\", name, kind), got %R",
                 index, t);
    return -1;
  }
  p->name = PyTuple_GET_ITEM(t, 1);
  Py_INCREF(p->name);
  if (scalar) {
    PyObject *k = PyTuple_GET_ITEM(t, 2);
    for (int i = 0; i < SK_COUNT; i++) {
      if (PyUnicode_Check(k) && PyUnicode_CompareWithASCIIString(k, scalar_kind_names[i]) == 0) {
        p->kind = (uint8_t)i;
        Py_INCREF(k);
        p->type_str = k;
        return 0;
      }
    }
    PyErr_Format(PyExc_ValueError,
                 "HostFunction: parameter '%U': scalar kind must be one of i1, i8, i16, i32, "
                 "i64, index, f16, bf16, f32, f64, got %R",
                 p->name, k);
    return -1;
  }
  p->is_memref = 1;
  int64_t code, bits, lanes, flags, offset;
  if (as_int64(PyTuple_GET_ITEM(t, 2), "code", p->name, &code) < 0 ||
      as_int64(PyTuple_GET_ITEM(t, 3), "bits", p->name, &bits) < 0 ||
      as_int64(PyTuple_GET_ITEM(t, 4), "lanes", p->name, &lanes) < 0 ||
      as_int64(PyTuple_GET_ITEM(t, 5), "flags", p->name, &flags) < 0 ||
      as_int64(PyTuple_GET_ITEM(t, 8), "offset", p->name, &offset) < 0)
    return -1;
  if (code < 0 || code > 255 || bits < 1 || bits > 255 || lanes < 1 || lanes > 65535) {
    PyErr_Format(PyExc_ValueError,
                 "HostFunction: parameter '%U': bad DLPack dtype (code=%lld, bits=%lld, "
                 "lanes=%lld)",
                 p->name, (long long)code, (long long)bits, (long long)lanes);
    return -1;
  }
  if (flags & ~(int64_t)(WAVERT_MEMREF_SIGNLESS | WAVERT_MEMREF_STRIDED)) {
    PyErr_Format(PyExc_ValueError, "HostFunction: parameter '%U': unknown flags %lld", p->name,
                 (long long)flags);
    return -1;
  }
  PyObject *sizes = PyTuple_GET_ITEM(t, 6), *strides = PyTuple_GET_ITEM(t, 7);
  if (!PyTuple_Check(sizes) || PyTuple_GET_SIZE(sizes) > 1024) {
    PyErr_Format(PyExc_TypeError, "HostFunction: parameter '%U': sizes must be a tuple, got %R",
                 p->name, sizes);
    return -1;
  }
  Py_ssize_t rank = PyTuple_GET_SIZE(sizes);
  if (strides != Py_None && (!PyTuple_Check(strides) || PyTuple_GET_SIZE(strides) != rank)) {
    PyErr_Format(PyExc_ValueError,
                 "HostFunction: parameter '%U': strides must be None or a tuple of %zd ints, "
                 "got %R",
                 p->name, rank, strides);
    return -1;
  }
  if ((flags & WAVERT_MEMREF_STRIDED) && strides == Py_None) {
    PyErr_Format(PyExc_ValueError,
                 "HostFunction: parameter '%U': a strided layout needs strides", p->name);
    return -1;
  }
  p->layout = PyMem_Malloc(sizeof(int64_t) * (size_t)(2 * rank + 1));
  if (!p->layout) {
    PyErr_NoMemory();
    return -1;
  }
  for (Py_ssize_t d = 0; d < rank; d++) {
    if (as_int64(PyTuple_GET_ITEM(sizes, d), "a size", p->name, &p->layout[d]) < 0)
      return -1;
    if (p->layout[d] < 0 && p->layout[d] != WAVERT_DYNAMIC) {
      PyErr_Format(PyExc_ValueError, "HostFunction: parameter '%U': negative size %lld", p->name,
                   (long long)p->layout[d]);
      return -1;
    }
    if (strides == Py_None)
      p->layout[rank + d] = WAVERT_DYNAMIC;
    else if (as_int64(PyTuple_GET_ITEM(strides, d), "a stride", p->name, &p->layout[rank + d]) < 0)
      return -1;
  }
  int w = PyObject_IsTrue(PyTuple_GET_ITEM(t, 9));
  if (w < 0)
    return -1;
  p->written = (uint8_t)w;
  p->mtype.dtype.code = (uint8_t)code;
  p->mtype.dtype.bits = (uint8_t)bits;
  p->mtype.dtype.lanes = (uint16_t)lanes;
  p->mtype.flags = (uint32_t)flags;
  p->mtype.rank = (int32_t)rank;
  p->mtype.sizes = p->layout;
  p->mtype.strides = p->layout + rank;
  p->mtype.offset = offset;
  p->type_str = memref_str(p);
  return p->type_str ? 0 : -1;
}

static void free_params(param_t *p, Py_ssize_t n) {
  if (!p)
    return;
  for (Py_ssize_t i = 0; i < n; i++) {
    Py_XDECREF(p[i].name);
    Py_XDECREF(p[i].type_str);
    PyMem_Free(p[i].layout);
  }
  PyMem_Free(p);
}

static PyObject *hf_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
  static char *kwlist[] = {"entry", "name", "params", "device_type", "owner", NULL};
  PyObject *entry_obj, *name, *params, *owner = NULL;
  int device_type;
  if (!PyArg_ParseTupleAndKeywords(args, kwds, "OUO!i|$O:HostFunction", kwlist, &entry_obj,
                                   &name, &PyTuple_Type, &params, &device_type, &owner))
    return NULL;
  if (!PyLong_Check(entry_obj)) {
    PyErr_Format(PyExc_TypeError, "HostFunction: entry must be an int address, got %R",
                 entry_obj);
    return NULL;
  }
  void *entry = PyLong_AsVoidPtr(entry_obj);
  if (!entry) {
    if (!PyErr_Occurred())
      PyErr_SetString(PyExc_ValueError, "HostFunction: entry address is 0");
    return NULL;
  }
  if (device_type != kDLCUDA && device_type != kDLROCM) {
    PyErr_Format(PyExc_ValueError,
                 "HostFunction: device_type must be 2 (kDLCUDA) or 10 (kDLROCM), got %d",
                 device_type);
    return NULL;
  }
  Py_ssize_t n = PyTuple_GET_SIZE(params);
  param_t *p = PyMem_Calloc((size_t)(n ? n : 1), sizeof *p);
  if (!p)
    return PyErr_NoMemory();
  Py_ssize_t nslots = 0, ntensors = 0;
  PyObject *names = PyList_New(0);
  if (!names)
    goto fail;
  for (Py_ssize_t i = 0; i < n; i++) {
    if (parse_param(PyTuple_GET_ITEM(params, i), i, &p[i]) < 0)
      goto fail;
    for (Py_ssize_t j = 0; j < i; j++) {
      if (PyUnicode_Compare(p[j].name, p[i].name) == 0) {
        PyErr_Format(PyExc_ValueError, "HostFunction: duplicate parameter name '%U'", p[i].name);
        goto fail;
      }
    }
    if (PyList_Append(names, p[i].name) < 0)
      goto fail;
    p[i].slot = nslots;
    if (p[i].is_memref) {
      p[i].tensor_index = ntensors++;
      nslots += WAVERT_MEMREF_WORDS(p[i].mtype.rank);
    } else {
      nslots += 1;
    }
  }
  PyObject *sep = PyUnicode_FromString(", ");
  PyObject *joined = sep ? PyUnicode_Join(sep, names) : NULL;
  Py_XDECREF(sep);
  PyObject *signature = joined ? PyUnicode_FromFormat("(%U)", joined) : NULL;
  Py_XDECREF(joined);
  Py_CLEAR(names);
  if (!signature)
    goto fail;
  HostFunction *self = (HostFunction *)type->tp_alloc(type, 0);
  if (!self) {
    Py_DECREF(signature);
    goto fail;
  }
  self->vectorcall = hf_vectorcall;
  self->entry = (void (*)(uint64_t *))(uintptr_t)entry;
  Py_INCREF(name);
  self->name = name;
  Py_INCREF(params);
  self->params = params;
  Py_XINCREF(owner == Py_None ? NULL : owner);
  self->owner = owner == Py_None ? NULL : owner;
  self->signature = signature;
  self->device_type = device_type;
  self->nparams = n;
  self->ntensors = ntensors;
  self->nslots = nslots;
  self->p = p;
  return (PyObject *)self;
fail:
  Py_XDECREF(names);
  free_params(p, n);
  return NULL;
}

static int hf_traverse(HostFunction *self, visitproc visit, void *arg) {
  Py_VISIT(self->owner);
  Py_VISIT(self->params);
  return 0;
}

static int hf_clear(HostFunction *self) {
  Py_CLEAR(self->owner);
  return 0;
}

static void hf_dealloc(HostFunction *self) {
  PyObject_GC_UnTrack(self);
  hf_clear(self);
  Py_CLEAR(self->name);
  Py_CLEAR(self->params);
  Py_CLEAR(self->signature);
  free_params(self->p, self->nparams);
  self->p = NULL;
  Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *hf_repr(HostFunction *self) {
  PyObject *parts = PyList_New(0), *r = NULL;
  if (!parts)
    return NULL;
  for (Py_ssize_t i = 0; i < self->nparams; i++)
    if (append(parts, PyUnicode_FromFormat("%U: %U", self->p[i].name, self->p[i].type_str)) < 0)
      goto out;
  PyObject *sep = PyUnicode_FromString(", ");
  PyObject *j = sep ? PyUnicode_Join(sep, parts) : NULL;
  Py_XDECREF(sep);
  if (j)
    r = PyUnicode_FromFormat("<pywave._native.HostFunction %U(%U) device=%s>", self->name, j,
                             device_kind(self->device_type));
  Py_XDECREF(j);
out:
  Py_DECREF(parts);
  return r;
}

static PyObject *hf_get_name(HostFunction *self, void *closure) {
  (void)closure;
  Py_INCREF(self->name);
  return self->name;
}

static PyObject *hf_get_params(HostFunction *self, void *closure) {
  (void)closure;
  Py_INCREF(self->params);
  return self->params;
}

static PyObject *hf_get_device_type(HostFunction *self, void *closure) {
  (void)closure;
  return PyLong_FromLong(self->device_type);
}

static PyObject *hf_invalidate(HostFunction *self, PyObject *unused) {
  (void)unused;
  self->entry = NULL;
  Py_CLEAR(self->owner);
  Py_RETURN_NONE;
}

static PyMethodDef hf_methods[] = {
    {"invalidate", (PyCFunction)hf_invalidate, METH_NOARGS,
     "Make later calls raise (the module that owns the entry was closed)."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef hf_getset[] = {
    {"name", (getter)hf_get_name, NULL, "Name of the host function.", NULL},
    {"params", (getter)hf_get_params, NULL, "The parameter tuples given at construction.", NULL},
    {"device_type", (getter)hf_get_device_type, NULL, "DLPack device type (2 CUDA, 10 ROCm).",
     NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyDoc_STRVAR(hf_doc,
             "HostFunction(entry, name, params, device_type, *, owner=None)\n"
             "--\n\n"
             "A compiled host function: call it with DLPack tensors and scalars, and\n"
             "optionally stream=. `entry` is the address of `void entry(uint64_t *slots)`;\n"
             "`owner` is kept alive as long as this object (the JIT engine owning `entry`).");

static PyTypeObject HostFunction_Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "pywave._native.HostFunction",
    .tp_basicsize = sizeof(HostFunction),
    .tp_dealloc = (destructor)hf_dealloc,
    .tp_vectorcall_offset = offsetof(HostFunction, vectorcall),
    .tp_repr = (reprfunc)hf_repr,
    .tp_call = PyVectorcall_Call,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = hf_doc,
    .tp_traverse = (traverseproc)hf_traverse,
    .tp_clear = (inquiry)hf_clear,
    .tp_getset = hf_getset,
    .tp_methods = hf_methods,
    .tp_new = hf_new,
};

/* ---------------------------------------------------------------------------------------- */
/* Module                                                                                   */
/* ---------------------------------------------------------------------------------------- */
static PyObject *set_exceptions(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
  (void)mod;
  if (nargs != 2 || !PyExceptionClass_Check(args[0]) || !PyExceptionClass_Check(args[1])) {
    PyErr_SetString(PyExc_TypeError,
                    "set_exceptions(ArgumentError, DeviceError) takes two exception classes");
    return NULL;
  }
  Py_INCREF(args[0]);
  Py_SETREF(ArgumentError, args[0]);
  Py_INCREF(args[1]);
  Py_SETREF(DeviceError, args[1]);
  Py_RETURN_NONE;
}

static PyObject *pack_scalar_py(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
  (void)mod;
  if (nargs != 2 || !PyUnicode_Check(args[0])) {
    PyErr_SetString(PyExc_TypeError, "_pack_scalar(kind, value)");
    return NULL;
  }
  for (int i = 0; i < SK_COUNT; i++) {
    if (PyUnicode_CompareWithASCIIString(args[0], scalar_kind_names[i]) == 0) {
      uint64_t out = 0;
      if (pack_scalar((scalar_kind)i, args[1], &out, NULL, 0) < 0)
        return NULL;
      return PyLong_FromUnsignedLongLong(out);
    }
  }
  PyErr_Format(PyExc_ValueError, "unknown scalar kind %R", args[0]);
  return NULL;
}

static PyMethodDef module_methods[] = {
    {"set_exceptions", (PyCFunction)(void (*)(void))set_exceptions, METH_FASTCALL,
     "set_exceptions(ArgumentError, DeviceError): the classes raised for bad arguments and "
     "for device failures."},
    {"_pack_scalar", (PyCFunction)(void (*)(void))pack_scalar_py, METH_FASTCALL,
     "_pack_scalar(kind, value) -> int: the slot word a scalar argument becomes (testing)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef native_module = {
    PyModuleDef_HEAD_INIT, .m_name = "pywave._native",
    .m_doc = "The native per-call path of pywave host functions.", .m_size = -1,
    .m_methods = module_methods,
};

static int intern(PyObject **slot, const char *s) {
  *slot = PyUnicode_InternFromString(s);
  return *slot ? 0 : -1;
}

PyMODINIT_FUNC PyInit__native(void) {
  if (intern(&str_dlpack, "__dlpack__") || intern(&str_dlpack_device, "__dlpack_device__") ||
      intern(&str_exchange_api, "__dlpack_c_exchange_api__") ||
      intern(&str_cuda_stream_prot, "__cuda_stream__") ||
      intern(&str_cuda_stream, "cuda_stream") || intern(&str_ptr, "ptr") ||
      intern(&str_stream, "stream") || intern(&str_module, "__module__") ||
      intern(&str_qualname, "__qualname__"))
    return NULL;
  PyObject *s_maxver = PyUnicode_InternFromString("max_version");
  if (!s_maxver)
    return NULL;
  kw_stream_maxver = PyTuple_Pack(2, str_stream, s_maxver);
  kw_stream = PyTuple_Pack(1, str_stream);
  kw_maxver = PyTuple_Pack(1, s_maxver);
  Py_DECREF(s_maxver);
  max_version = Py_BuildValue("(ii)", DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION);
  if (!kw_stream_maxver || !kw_stream || !kw_maxver || !max_version)
    return NULL;
  if (!ArgumentError) {
    Py_INCREF(PyExc_ValueError);
    ArgumentError = PyExc_ValueError;
    Py_INCREF(PyExc_RuntimeError);
    DeviceError = PyExc_RuntimeError;
  }
  if (PyType_Ready(&HostFunction_Type) < 0)
    return NULL;
  PyObject *m = PyModule_Create(&native_module);
  if (!m)
    return NULL;
  Py_INCREF(&HostFunction_Type);
  if (PyModule_AddObject(m, "HostFunction", (PyObject *)&HostFunction_Type) < 0) {
    Py_DECREF(&HostFunction_Type);
    Py_DECREF(m);
    return NULL;
  }
  if (PyModule_AddObject(m, "DYNAMIC", PyLong_FromLongLong(WAVERT_DYNAMIC)) < 0 ||
      PyModule_AddIntConstant(m, "MEMREF_SIGNLESS", WAVERT_MEMREF_SIGNLESS) < 0 ||
      PyModule_AddIntConstant(m, "MEMREF_STRIDED", WAVERT_MEMREF_STRIDED) < 0 ||
      PyModule_AddIntConstant(m, "STACK_SLOTS", STACK_SLOTS) < 0) {
    Py_DECREF(m);
    return NULL;
  }
  return m;
}
