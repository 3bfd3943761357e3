/*
 * memref.c — the Memref type (part of the native.c unity build): a memref result of a host
 * function (results.c builds them) that owns or keeps alive its memory and exports it through
 * DLPack and, for CUDA memory, __cuda_array_interface__ (v3).
 *
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

static PyObject *memref_cai(Memref *self, void *closure) {
  (void)closure;
  if (self->device.device_type != kDLCUDA) {
    PyErr_SetString(PyExc_AttributeError,
                    "__cuda_array_interface__: the memref is not CUDA memory (use __dlpack__)");
    return NULL;
  }
  char ts[8];
  if (!numpy_typestr(self->dtype, ts)) {
    PyErr_Format(PyExc_AttributeError,
                 "__cuda_array_interface__: DLPack dtype (code=%u, bits=%u, lanes=%u) has no "
                 "NumPy type string (use __dlpack__)",
                 (unsigned)self->dtype.code, (unsigned)self->dtype.bits,
                 (unsigned)self->dtype.lanes);
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

/* _native.result_frees(): (host frees, device frees) done by Memrefs so far. */
static PyObject *result_frees(PyObject *mod, PyObject *unused) {
  (void)mod;
  (void)unused;
  return Py_BuildValue("(nn)", frees_host, frees_device);
}
