/*
 * results.c — what a host function returns (part of the native.c unity build): scalar
 * results become Python numbers, memref results Memref objects that own their memory and
 * export it through DLPack and, for CUDA memory, __cuda_array_interface__ (v3).
 *
 * A call's result slots (after its argument slots, see pywave.host) hold each result in
 * order: a scalar in the low bytes of one word, a rank-r memref as its descriptor
 * {allocated, aligned, offset, sizes[r], strides[r]}. build_results turns them into objects
 * once the call has succeeded, deciding for each memref what owns its memory:
 *   1. a view of an earlier result of the same call (same allocated pointer): the earlier
 *      Memref is kept alive, nothing is freed twice;
 *   2. a view of an argument tensor (its allocated pointer is the argument's, or its first
 *      element lies in the argument's data): the argument is kept alive (the Python object,
 *      and the DLPack tensor the call took from it, whose deleter then runs when the Memref
 *      dies), nothing is freed;
 *   3. otherwise the call allocated it and the Memref owns it: device memory when the
 *      result's memory space says so (Param.memory == "device"), else as the driver answers
 *      for the allocated pointer (wavert_memory_kind): device or managed memory is freed with
 *      wavert_memory_free on the device the driver names; memory the driver does not know
 *      (or registered host memory) is host memory from malloc (memref.alloc) and freed with
 *      free(). The allocated pointer (descriptor field 0) is what is freed.
 * A Memref frees its memory exactly once, in its deallocation: exported DLPack tensors hold a
 * reference to it (released by their deleter, from any thread), so the memory lives until the
 * last consumer (NumPy, torch, CuPy, JAX...) lets go.
 *
 * DLPack devices: CUDA device and managed memory are kDLCUDA, ROCm memory kDLROCM (device id:
 * the driver's ordinal), host memory kDLCPU 0. The exported data pointer is the first element
 * (aligned + offset * element size) with byte_offset 0; shape and strides (in elements) are
 * the descriptor's.
 */
#include "native.h"

#include <stdlib.h>

typedef enum { OWN_NONE = 0, OWN_HOST = 1, OWN_DEVICE = 2 } ownership;

typedef struct {
  PyObject_HEAD
  void *allocated;   /* descriptor field 0: what is freed (OWN_HOST / OWN_DEVICE) */
  void *data;        /* the first element */
  int64_t *layout;   /* owned: shape[ndim] then strides[ndim] (elements) */
  int32_t ndim;
  uint8_t owner;     /* ownership */
  DLDataType dtype;
  DLDevice device;
  void *stream;      /* the call's stream: device memory is ready in its order */
  PyObject *keep;    /* strong: an argument or an earlier result whose memory this views */
  void *keep_managed;       /* an argument's DLPack tensor, its deleter run at death */
  uint8_t keep_versioned;   /* keep_managed is a DLManagedTensorVersioned */
  PyObject *weakreflist;
} Memref;

static PyTypeObject Memref_Type;

/* Frees done by Memrefs (host, device): diagnostics and tests (_native.result_frees()). */
static Py_ssize_t frees_host, frees_device;

/* ---------------------------------------------------------------------------------------- */
/* Scalars                                                                                  */
/* ---------------------------------------------------------------------------------------- */
/* The Python number of a scalar result word (low bytes hold the value). */
static PyObject *unpack_scalar(scalar_kind kind, uint64_t word) {
  switch (kind) {
  case SK_I1: return PyBool_FromLong((long)(word & 1));
  case SK_I8: return PyLong_FromLong((int8_t)(uint8_t)word);
  case SK_I16: return PyLong_FromLong((int16_t)(uint16_t)word);
  case SK_I32: return PyLong_FromLong((int32_t)(uint32_t)word);
  case SK_I64:
  case SK_INDEX: return PyLong_FromLongLong((long long)(int64_t)word);
  case SK_F16: return PyFloat_FromDouble(wavert_f32_from_f16((uint16_t)word));
  case SK_BF16: {
    uint32_t bits = (uint32_t)(uint16_t)word << 16;
    float f;
    memcpy(&f, &bits, sizeof f);
    return PyFloat_FromDouble(f);
  }
  case SK_F32: {
    uint32_t bits = (uint32_t)word;
    float f;
    memcpy(&f, &bits, sizeof f);
    return PyFloat_FromDouble(f);
  }
  case SK_F64: {
    double d;
    memcpy(&d, &word, sizeof d);
    return PyFloat_FromDouble(d);
  }
  default: break;
  }
  PyErr_Format(PyExc_SystemError, "unknown scalar kind %d", (int)kind);
  return NULL;
}

/* ---------------------------------------------------------------------------------------- */
/* Memref: lifetime                                                                         */
/* ---------------------------------------------------------------------------------------- */
static void run_deleter(void *managed, int versioned) {
  if (versioned) {
    DLManagedTensorVersioned *m = managed;
    if (m->deleter)
      m->deleter(m);
  } else {
    DLManagedTensor *m = managed;
    if (m->deleter)
      m->deleter(m);
  }
}

/* Free the owned memory (GIL held; errors go to sys.unraisablehook). */
static void memref_free_memory(Memref *self) {
  if (self->owner == OWN_HOST) {
    free(self->allocated);
    frees_host += 1;
  } else if (self->owner == OWN_DEVICE) {
    const int32_t type = self->device.device_type == kDLROCM ? kDLROCM : kDLCUDA;
    wavert_device *device;
    wavert_status st = get_device(type, self->device.device_id, &device);
    if (st == WAVERT_OK)
      st = wavert_memory_free(device, self->allocated);
    if (st == WAVERT_OK) {
      frees_device += 1;
    } else {
      raise_status_fmt(st, "freeing a returned memref (%p on %s device %d)", self->allocated,
                       device_kind(type), (int)self->device.device_id);
      PyErr_WriteUnraisable(NULL);
    }
  }
  self->owner = OWN_NONE;
}

static int memref_traverse(Memref *self, visitproc visit, void *arg) {
  Py_VISIT(self->keep);
  return 0;
}

static int memref_clear(Memref *self) {
  Py_CLEAR(self->keep);
  return 0;
}

static void memref_dealloc(Memref *self) {
  PyObject_GC_UnTrack(self);
  PyObject *et, *ev, *tb;
  PyErr_Fetch(&et, &ev, &tb);
  if (self->weakreflist)
    PyObject_ClearWeakRefs((PyObject *)self);
  memref_free_memory(self);
  if (self->keep_managed) {
    void *m = self->keep_managed;
    self->keep_managed = NULL;
    run_deleter(m, self->keep_versioned);
  }
  memref_clear(self);
  PyMem_Free(self->layout);
  PyErr_Restore(et, ev, tb);
  Py_TYPE(self)->tp_free((PyObject *)self);
}

/* ---------------------------------------------------------------------------------------- */
/* Memref: DLPack export                                                                    */
/* ---------------------------------------------------------------------------------------- */
/* One exported tensor: the DLPack struct plus its own shape and strides; manager_ctx holds a
 * strong reference to the Memref. Allocated with PyMem_Raw*: the deleter may run on any
 * thread without the GIL. */
typedef struct {
  union {
    DLManagedTensor legacy;
    DLManagedTensorVersioned versioned;
  } t;
  int64_t layout[]; /* shape then strides */
} exported;

static void release_owner(void *manager_ctx) {
  if (!Py_IsInitialized())
    return; /* the interpreter is gone: nothing can be released safely */
  PyGILState_STATE g = PyGILState_Ensure();
  Py_DECREF((PyObject *)manager_ctx);
  PyGILState_Release(g);
}

static void delete_legacy(DLManagedTensor *m) {
  release_owner(m->manager_ctx);
  PyMem_RawFree(m);
}

static void delete_versioned(DLManagedTensorVersioned *m) {
  release_owner(m->manager_ctx);
  PyMem_RawFree(m);
}

static void fill_dltensor(Memref *self, DLTensor *t, int64_t *layout) {
  memcpy(layout, self->layout, sizeof(int64_t) * (size_t)(2 * self->ndim));
  t->data = self->data;
  t->device = self->device;
  t->ndim = self->ndim;
  t->dtype = self->dtype;
  t->shape = layout;
  t->strides = layout + self->ndim;
  t->byte_offset = 0;
}

/* Capsule destructor: a capsule no consumer took still owns its tensor. */
static void capsule_legacy(PyObject *capsule) {
  if (PyCapsule_IsValid(capsule, "dltensor")) {
    DLManagedTensor *m = PyCapsule_GetPointer(capsule, "dltensor");
    m->deleter(m);
  }
}

static void capsule_versioned(PyObject *capsule) {
  if (PyCapsule_IsValid(capsule, "dltensor_versioned")) {
    DLManagedTensorVersioned *m = PyCapsule_GetPointer(capsule, "dltensor_versioned");
    m->deleter(m);
  }
}

static int is_gpu(const Memref *self) { return self->device.device_type != kDLCPU; }

/* Order the consumer's stream (DLPack's stream= value) after the call's stream. */
static int sync_consumer_stream(Memref *self, PyObject *stream) {
  if (stream == Py_None || !is_gpu(self))
    return 0;
  if (!PyLong_Check(stream)) {
    PyErr_Format(PyExc_TypeError, "__dlpack__: stream must be an int or None, got %R", stream);
    return -1;
  }
  long long value = PyLong_AsLongLong(stream);
  if (value == -1 && PyErr_Occurred())
    return -1;
  if (value == -1)
    return 0; /* the consumer asks for no synchronisation */
  if (value == 0 && self->device.device_type == kDLCUDA) {
    PyErr_SetString(PyExc_ValueError,
                    "__dlpack__: stream=0 is ambiguous for CUDA (DLPack: use 1 for the legacy "
                    "default stream or 2 for the per-thread default stream)");
    return -1;
  }
  void *consumer = (void *)(uintptr_t)value;
  void *producer = self->stream;
  if (self->device.device_type == kDLCUDA && value == 1)
    consumer = NULL; /* the legacy default stream, as libwavert names it */
  if (consumer == producer)
    return 0;
  wavert_device *device;
  wavert_status st = get_device(self->device.device_type, self->device.device_id, &device);
  if (st == WAVERT_OK)
    st = wavert_stream_wait_stream(device, consumer, producer);
  if (st != WAVERT_OK) {
    raise_status_fmt(st, "__dlpack__: cannot order stream %lld after the call's stream",
                     value);
    return -1;
  }
  return 0;
}

static PyObject *memref_dlpack(Memref *self, PyObject *args, PyObject *kwds) {
  static char *kwlist[] = {"stream", "max_version", "dl_device", "copy", NULL};
  PyObject *stream = Py_None, *maxver = Py_None, *dl_device = Py_None, *copy = Py_None;
  if (!PyArg_ParseTupleAndKeywords(args, kwds, "|$OOOO:__dlpack__", kwlist, &stream, &maxver,
                                   &dl_device, &copy))
    return NULL;
  if (copy != Py_None) {
    int want = PyObject_IsTrue(copy);
    if (want < 0)
      return NULL;
    if (want) {
      PyErr_SetString(PyExc_BufferError,
                      "__dlpack__(copy=True): a returned memref is exported without a copy only");
      return NULL;
    }
  }
  if (dl_device != Py_None) {
    int type, id;
    if (!PyArg_ParseTuple(dl_device, "ii:dl_device", &type, &id))
      return NULL;
    if (type != (int)self->device.device_type || id != self->device.device_id) {
      PyErr_Format(PyExc_BufferError,
                   "__dlpack__(dl_device=(%d, %d)): the memref lives on (%d, %d) and is not "
                   "copied",
                   type, id, (int)self->device.device_type, (int)self->device.device_id);
      return NULL;
    }
  }
  int versioned = 0;
  if (maxver != Py_None) {
    int major, minor;
    if (!PyArg_ParseTuple(maxver, "ii:max_version", &major, &minor))
      return NULL;
    versioned = major >= 1;
  }
  if (sync_consumer_stream(self, stream) < 0)
    return NULL;
  const size_t words = (size_t)(2 * self->ndim);
  exported *e = PyMem_RawCalloc(1, sizeof *e + words * sizeof(int64_t));
  if (!e)
    return PyErr_NoMemory();
  Py_INCREF(self); /* released by the deleter */
  PyObject *capsule;
  if (versioned) {
    DLManagedTensorVersioned *m = &e->t.versioned;
    m->version.major = DLPACK_MAJOR_VERSION;
    m->version.minor = DLPACK_MINOR_VERSION;
    m->manager_ctx = self;
    m->deleter = delete_versioned;
    m->flags = 0;
    fill_dltensor(self, &m->dl_tensor, e->layout);
    capsule = PyCapsule_New(m, "dltensor_versioned", capsule_versioned);
    if (!capsule)
      delete_versioned(m);
  } else {
    DLManagedTensor *m = &e->t.legacy;
    m->manager_ctx = self;
    m->deleter = delete_legacy;
    fill_dltensor(self, &m->dl_tensor, e->layout);
    capsule = PyCapsule_New(m, "dltensor", capsule_legacy);
    if (!capsule)
      delete_legacy(m);
  }
  return capsule;
}

static PyObject *memref_dlpack_device(Memref *self, PyObject *unused) {
  (void)unused;
  return Py_BuildValue("(ii)", (int)self->device.device_type, (int)self->device.device_id);
}

/* ---------------------------------------------------------------------------------------- */
/* Memref: attributes                                                                       */
/* ---------------------------------------------------------------------------------------- */
static PyObject *int_tuple(const int64_t *v, int32_t n, int64_t scale) {
  PyObject *t = PyTuple_New(n);
  for (int32_t i = 0; t && i < n; i++) {
    PyObject *x = PyLong_FromLongLong((long long)(v[i] * scale));
    if (!x) {
      Py_CLEAR(t);
      break;
    }
    PyTuple_SET_ITEM(t, i, x);
  }
  return t;
}

static int64_t element_bytes(const Memref *self) {
  return (int64_t)self->dtype.bits / 8 * (int64_t)self->dtype.lanes;
}

/* NumPy's type string of the element type, or NULL (bf16 has none). */
static const char *typestr(const Memref *self) {
  switch (self->dtype.code) {
  case kDLInt:
    return self->dtype.bits == 8 ? "|i1" : self->dtype.bits == 16 ? "<i2"
           : self->dtype.bits == 32 ? "<i4" : "<i8";
  case kDLUInt:
    return self->dtype.bits == 8 ? "|u1" : self->dtype.bits == 16 ? "<u2"
           : self->dtype.bits == 32 ? "<u4" : "<u8";
  case kDLFloat:
    return self->dtype.bits == 16 ? "<f2" : self->dtype.bits == 32 ? "<f4" : "<f8";
  case kDLBool: return "|b1";
  default: return NULL;
  }
}

static PyObject *memref_cai(Memref *self, void *closure) {
  (void)closure;
  if (self->device.device_type != kDLCUDA) {
    PyErr_SetString(PyExc_AttributeError,
                    "__cuda_array_interface__: the memref is not CUDA memory (use __dlpack__)");
    return NULL;
  }
  const char *ts = typestr(self);
  if (!ts) {
    PyErr_SetString(PyExc_AttributeError,
                    "__cuda_array_interface__: bf16 has no type string (use __dlpack__)");
    return NULL;
  }
  PyObject *shape = int_tuple(self->layout, self->ndim, 1);
  PyObject *strides = int_tuple(self->layout + self->ndim, self->ndim, element_bytes(self));
  PyObject *r = NULL;
  if (shape && strides)
    r = Py_BuildValue("{s:O,s:s,s:(NO),s:O,s:i,s:N}", "shape", shape, "typestr", ts, "data",
                      PyLong_FromVoidPtr(self->data), Py_False, "strides", strides,
                      "version", 3, "stream",
                      PyLong_FromUnsignedLongLong(self->stream ? (uintptr_t)self->stream : 1));
  Py_XDECREF(shape);
  Py_XDECREF(strides);
  return r;
}

static PyObject *memref_shape(Memref *self, void *closure) {
  (void)closure;
  return int_tuple(self->layout, self->ndim, 1);
}

static PyObject *memref_strides(Memref *self, void *closure) {
  (void)closure;
  return int_tuple(self->layout + self->ndim, self->ndim, 1);
}

static PyObject *memref_dtype(Memref *self, void *closure) {
  (void)closure;
  return Py_BuildValue("(iii)", self->dtype.code, self->dtype.bits, self->dtype.lanes);
}

static PyObject *memref_data_ptr(Memref *self, void *closure) {
  (void)closure;
  return PyLong_FromVoidPtr(self->data);
}

static PyObject *memref_owns(Memref *self, void *closure) {
  (void)closure;
  return PyBool_FromLong(self->owner != OWN_NONE);
}

static PyObject *memref_repr(Memref *self) {
  PyObject *shape = int_tuple(self->layout, self->ndim, 1);
  PyObject *strides = int_tuple(self->layout + self->ndim, self->ndim, 1);
  PyObject *r = NULL;
  if (shape && strides)
    r = PyUnicode_FromFormat("<pywave._native.Memref shape=%R strides=%R dtype=(%d, %d, %d) "
                             "device=(%d, %d)%s>",
                             shape, strides, self->dtype.code, self->dtype.bits,
                             self->dtype.lanes, (int)self->device.device_type,
                             (int)self->device.device_id,
                             self->owner == OWN_NONE ? " view" : "");
  Py_XDECREF(shape);
  Py_XDECREF(strides);
  return r;
}

static PyMethodDef memref_methods[] = {
    {"__dlpack__", (PyCFunction)(void (*)(void))memref_dlpack, METH_VARARGS | METH_KEYWORDS,
     "__dlpack__(*, stream=None, max_version=None, dl_device=None, copy=None): a DLPack "
     "capsule (\"dltensor_versioned\" when max_version >= (1, 0), else \"dltensor\") viewing "
     "the memory without a copy; the capsule's tensor keeps this object alive. For GPU "
     "memory, stream (DLPack's value: 1 legacy default, 2 per-thread, -1 no ordering, or a "
     "handle) is ordered after the call's stream. copy=True and another dl_device raise "
     "BufferError."},
    {"__dlpack_device__", (PyCFunction)memref_dlpack_device, METH_NOARGS,
     "__dlpack_device__() -> (device_type, device_id): (2, n) CUDA, (10, n) ROCm, (1, 0) host."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef memref_getset[] = {
    {"__cuda_array_interface__", (getter)memref_cai, NULL,
     "CUDA Array Interface v3 (CUDA memory only; AttributeError otherwise and for bf16): "
     "shape, typestr, data (pointer, False), strides in bytes, version 3, and stream (the "
     "call's stream; 1 for the legacy default).",
     NULL},
    {"shape", (getter)memref_shape, NULL, "Sizes (a tuple of ints).", NULL},
    {"strides", (getter)memref_strides, NULL, "Strides in elements (a tuple of ints).", NULL},
    {"dtype", (getter)memref_dtype, NULL, "The DLPack dtype (code, bits, lanes).", NULL},
    {"data_ptr", (getter)memref_data_ptr, NULL, "Address of the first element (an int).",
     NULL},
    {"owns_memory", (getter)memref_owns, NULL,
     "True when this object frees the memory at its death; False for a view of an argument "
     "or of another result (which it keeps alive).",
     NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyDoc_STRVAR(memref_doc,
             "A memref returned by a host function: owns (or keeps alive) its memory and "
             "exports it without a copy through __dlpack__ / __dlpack_device__ (torch, CuPy, "
             "JAX, NumPy for host memory) and, for CUDA memory, __cuda_array_interface__. The "
             "memory is freed once, on its device, when this object and every tensor exported "
             "from it are gone. Created by calls only.");

static PyTypeObject Memref_Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "pywave._native.Memref",
    .tp_basicsize = sizeof(Memref),
    .tp_dealloc = (destructor)memref_dealloc,
    .tp_repr = (reprfunc)memref_repr,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = memref_doc,
    .tp_traverse = (traverseproc)memref_traverse,
    .tp_clear = (inquiry)memref_clear,
    .tp_weaklistoffset = offsetof(Memref, weakreflist),
    .tp_methods = memref_methods,
    .tp_getset = memref_getset,
};

/* ---------------------------------------------------------------------------------------- */
/* Building the results of a call                                                           */
/* ---------------------------------------------------------------------------------------- */
/* [lo, hi) bytes spanned by the memref descriptor `w` of rank `rank` (elements of `esize`
 * bytes); 0 when empty or not computable. */
static int descriptor_range(const uint64_t *w, int32_t rank, int64_t esize, uintptr_t *lo,
                            uintptr_t *hi) {
  int64_t first = (int64_t)w[2], last = (int64_t)w[2];
  for (int32_t d = 0; d < rank; d++) {
    const int64_t size = (int64_t)w[3 + d], stride = (int64_t)w[3 + rank + d];
    if (size <= 0)
      return 0;
    int64_t span;
    if (__builtin_mul_overflow(size - 1, stride, &span))
      return 0;
    if (__builtin_add_overflow(span < 0 ? first : last, span, span < 0 ? &first : &last))
      return 0;
  }
  int64_t lo_b, hi_b;
  if (__builtin_mul_overflow(first, esize, &lo_b) || __builtin_mul_overflow(last + 1, esize, &hi_b))
    return 0;
  *lo = (uintptr_t)w[1] + (uintptr_t)lo_b;
  *hi = (uintptr_t)w[1] + (uintptr_t)hi_b;
  return 1;
}

/* The index of the argument tensor result descriptor `w` views, or -1. */
static Py_ssize_t aliased_argument(HostFunction *self, call_state *c, const uint64_t *w,
                                   uintptr_t first) {
  for (Py_ssize_t i = 0; i < self->nparams; i++) {
    const param_t *p = &self->p[i];
    if (!p->is_memref)
      continue;
    const uint64_t *a = &c->slots[p->slot];
    if (w[0] != 0 && w[0] == a[0])
      return i;
    uintptr_t lo, hi;
    const int64_t esize = (int64_t)p->mtype.dtype.bits / 8 * p->mtype.dtype.lanes;
    if (descriptor_range(a, p->mtype.rank, esize, &lo, &hi) && first >= lo && first < hi)
      return i;
  }
  return -1;
}

/* Where owned memory at `allocated` lives: (device type, id) and OWN_HOST / OWN_DEVICE. */
static int classify_owned(HostFunction *self, call_state *c, const param_t *r, void *allocated,
                          Memref *m) {
  m->device.device_type = (DLDeviceType)self->device_type;
  m->device.device_id = c->dev_id;
  if (allocated == NULL) { /* an empty allocation: nothing to free */
    m->owner = OWN_NONE;
    return 0;
  }
  if (r->memory_device) {
    m->owner = OWN_DEVICE;
    return 0;
  }
  wavert_device *device;
  wavert_memory_type kind;
  int32_t ordinal;
  wavert_status st = get_device(self->device_type, c->dev_id, &device);
  if (st == WAVERT_OK)
    st = wavert_memory_kind(device, allocated, &kind, &ordinal);
  if (st != WAVERT_OK) {
    raise_status_fmt(st, "%U(): cannot tell where result '%U' lives", self->name, r->name);
    return -1;
  }
  if (kind == WAVERT_MEMORY_DEVICE || kind == WAVERT_MEMORY_MANAGED) {
    m->owner = OWN_DEVICE;
    if (ordinal >= 0)
      m->device.device_id = ordinal;
  } else {
    m->owner = OWN_HOST;
    m->device.device_type = kDLCPU;
    m->device.device_id = 0;
  }
  return 0;
}

/* A Memref of result `r` whose descriptor is `w`; `made[0..n)` are the call's earlier
 * results (None for scalars). */
static PyObject *build_memref(HostFunction *self, call_state *c, PyObject *const *args,
                              const param_t *r, const uint64_t *w, PyObject **made,
                              Py_ssize_t n) {
  const int32_t rank = r->mtype.rank;
  Memref *m = PyObject_GC_New(Memref, &Memref_Type);
  if (!m)
    return NULL;
  m->allocated = (void *)(uintptr_t)w[0];
  m->layout = NULL;
  m->ndim = rank;
  m->owner = OWN_NONE;
  m->dtype.code = r->mtype.dtype.code;
  m->dtype.bits = r->mtype.dtype.bits;
  m->dtype.lanes = r->mtype.dtype.lanes;
  m->stream = c->stream;
  m->keep = NULL;
  m->keep_managed = NULL;
  m->keep_versioned = 0;
  m->weakreflist = NULL;
  m->device.device_type = (DLDeviceType)self->device_type;
  m->device.device_id = c->dev_id;
  PyObject_GC_Track(m);
  const int64_t esize = (int64_t)m->dtype.bits / 8 * m->dtype.lanes;
  int64_t offset_bytes;
  if (__builtin_mul_overflow((int64_t)w[2], esize, &offset_bytes)) {
    PyErr_Format(ArgumentError, "%U(): result '%U' has the offset %lld elements, beyond the "
                 "address space", self->name, r->name, (long long)(int64_t)w[2]);
    goto fail;
  }
  m->data = (char *)(uintptr_t)w[1] + offset_bytes;
  if (!(m->layout = PyMem_Malloc(sizeof(int64_t) * (size_t)(2 * rank + 1)))) {
    PyErr_NoMemory();
    goto fail;
  }
  for (int32_t d = 0; d < 2 * rank; d++)
    m->layout[d] = (int64_t)w[3 + d];
  /* 1. a view of an earlier result */
  for (Py_ssize_t k = 0; k < n; k++) {
    if (Py_TYPE(made[k]) == &Memref_Type && m->allocated &&
        ((Memref *)made[k])->allocated == m->allocated) {
      Memref *earlier = (Memref *)made[k];
      m->device = earlier->device;
      Py_INCREF(made[k]);
      m->keep = made[k];
      return (PyObject *)m;
    }
  }
  /* 2. a view of an argument */
  Py_ssize_t arg = aliased_argument(self, c, w, (uintptr_t)m->data);
  if (arg >= 0) {
    tensor_state *ts = &c->ts[self->p[arg].tensor_index];
    m->device.device_id = c->dev_id;
    Py_INCREF(args[arg]);
    m->keep = args[arg];
    if (ts->managed) { /* its deleter now runs when this Memref dies */
      m->keep_managed = ts->managed;
      m->keep_versioned = ts->versioned;
      ts->managed = NULL;
    }
    return (PyObject *)m;
  }
  /* 3. memory the call allocated */
  if (classify_owned(self, c, r, m->allocated, m) < 0)
    goto fail;
  return (PyObject *)m;
fail:
  Py_DECREF(m);
  return NULL;
}

/* The call's return value from its result slots: None, one object, or a tuple. On failure
 * the results built so far are released (their memory freed). */
static PyObject *build_results(HostFunction *self, call_state *c, PyObject *const *args) {
  if (self->nresults == 0)
    Py_RETURN_NONE;
  PyObject *tuple = PyTuple_New(self->nresults);
  if (!tuple)
    return NULL;
  PyObject **made = &PyTuple_GET_ITEM(tuple, 0);
  for (Py_ssize_t i = 0; i < self->nresults; i++) {
    const param_t *r = &self->r[i];
    const uint64_t *w = &c->slots[self->nslots + r->slot];
    PyObject *v = r->is_memref ? build_memref(self, c, args, r, w, made, i)
                               : unpack_scalar((scalar_kind)r->kind, w[0]);
    if (!v) {
      Py_DECREF(tuple);
      return NULL;
    }
    PyTuple_SET_ITEM(tuple, i, v);
  }
  if (self->nresults == 1) {
    PyObject *one = PyTuple_GET_ITEM(tuple, 0);
    Py_INCREF(one);
    Py_DECREF(tuple);
    return one;
  }
  return tuple;
}

static PyObject *result_frees(PyObject *mod, PyObject *unused) {
  (void)mod;
  (void)unused;
  return Py_BuildValue("(nn)", frees_host, frees_device);
}
