/*
 * cupy.c — CuPy arrays read in place, without a DLPack capsule (part of the native.c unity
 * build). tensors.c routes a cupy.ndarray here (its ROUTE_CUPY) and takes the DLPack protocol
 * whenever this file says the array cannot be read so; streams.c asks it for CuPy's current
 * stream. Also repair_cupy_strides, for CuPy arrays that did take the protocol.
 *
 * A CuPy array's __dlpack__ costs a capsule, a malloc'd DLManagedTensor, a pointer-attribute
 * query and a deleter per argument (about 0.45 µs on the H200), and CuPy has no DLPack C
 * exchange API. What the memref descriptor needs is read from the array instead:
 *   CuPy >= 14.3  its public C API, the capsule `cupy._public_c_api` (a table of functions;
 *                 get_ndarray_metadata fills a cupy_metadata, get_current_stream_ptr gives the
 *                 current stream of a device);
 *   CuPy 8..14.2  the object layout of cupy's _ndarray_base and MemoryPointer (Cython classes,
 *                 stable over that range; CuPy's own cupy_public_c_api.h reads them so for
 *                 those versions), checked once per type against the Python attributes
 *                 (.dtype, .data, .data.ptr, .data.device_id, .size, .shape, .strides) of the
 *                 first array seen.
 * Anything unexpected (another version, a layout that disagrees, a dtype without a DLPack
 * code, a rank above CUPY_MAX_RANK, an array whose .data is not a MemoryPointer) sends the
 * array down the DLPack protocol, as before. The array is read in pass 3 (take_tensor) and
 * its descriptor filled at once, with no Python code in between, so the borrowed shape cannot
 * change under it. It is read so only when the call's stream is CuPy's current stream on the
 * array's device (no stream= and no exchange-API tensor among the arguments): that is when
 * CuPy's __dlpack__(stream=S) orders nothing; with another stream the protocol route keeps
 * CuPy's ordering of its current stream before S.
 */
#include "native.h"

#include <stdio.h>

typedef struct {
  void *ptr;
  int ndim;
  int device_id;
  size_t size;
  Py_ssize_t itemsize;
  const Py_ssize_t *shape;
  const Py_ssize_t *strides; /* bytes */
  PyObject *dtype;           /* borrowed numpy.dtype */
} cupy_metadata;

/* The table of `cupy._public_c_api` (CuPy >= 14.3; append-only, fields by version). */
typedef struct {
  int version_major;
  int version_minor;
  PyTypeObject *ndarray_type;
  int (*get_ndarray_ptr)(PyObject *arr, void **ptr);
  int (*get_ndarray_metadata)(PyObject *arr, cupy_metadata *out);
  int (*get_current_stream_ptr)(int device_id, void **ptr); /* >= 14.3 */
} cupy_c_api;

/* CuPy 8..14.2: cdef class layouts (a Cython object: the header, its vtable pointer, then the
 * declared fields in order; shape_t / strides_t are std::vector<Py_ssize_t>: begin, end,
 * end of storage). */
typedef struct {
  Py_ssize_t *begin, *end, *end_of_storage;
} cupy_vector;

typedef struct {
  PyObject_HEAD
  void *vtab;
  intptr_t ptr;
  int device_id;
  PyObject *mem;
} cupy_memptr_layout;

typedef struct {
  PyObject_HEAD
  void *vtab;
  PyObject *weakreflist;
  Py_ssize_t size;
  cupy_vector shape, strides;
  int c_contiguous, f_contiguous, index_32_bits;
  PyObject *dtype;
  cupy_memptr_layout *data;
  PyObject *base;
} cupy_array_layout;

_Static_assert(sizeof(Py_ssize_t) == sizeof(int64_t), "CuPy shapes are read as int64_t");

static struct {
  int state;                  /* 0 not looked up, 1 usable, -1 not (the DLPack protocol) */
  PyTypeObject *ndarray;      /* strong: cupy.ndarray */
  PyObject *capsule;          /* strong: cupy._public_c_api, NULL on the layout route */
  const cupy_c_api *api;      /* its table, or NULL */
  PyTypeObject *memptr;       /* strong: type of .data of the checked array (layout route) */
  int32_t device_type;        /* kDLCUDA, or kDLROCM for a ROCm build of CuPy */
} cupy_in;

/* dtype object -> DLPack dtype (numpy dtypes are immutable; the builtin ones are singletons,
 * so a few entries serve every call). code 0xFF: no DLPack code (the protocol route). */
#define DTYPE_CACHE_SIZE 16
static struct {
  PyObject *dtype; /* strong */
  DLDataType dl;
  int64_t itemsize;
} dtype_cache[DTYPE_CACHE_SIZE];
static int dtype_cache_next;

static PyObject *attr_chain(PyObject *obj, const char *const *names, int n) {
  Py_INCREF(obj);
  for (int k = 0; k < n && obj; k++) {
    PyObject *next = PyObject_GetAttrString(obj, names[k]);
    Py_DECREF(obj);
    obj = next;
  }
  return obj;
}

/* "14.2.0" -> 1 when 8.0 <= version < 14.3 (the layout route), else 0. */
static int cupy_layout_version(PyObject *mod) {
  PyObject *ver = PyObject_GetAttrString(mod, "__version__");
  const char *s = ver && PyUnicode_Check(ver) ? PyUnicode_AsUTF8(ver) : NULL;
  int major = 0, minor = 0, ok = 0;
  if (s && sscanf(s, "%d.%d", &major, &minor) == 2)
    ok = major >= 8 && (major < 14 || (major == 14 && minor < 3));
  Py_XDECREF(ver);
  return ok;
}

/* Find CuPy's table or layout once per process; every failure is cleared (state -1: the
 * DLPack protocol). CuPy is not imported here: a CuPy type was seen, so it is. */
static void cupy_setup(void) {
  static const char *const runtime_is_hip[] = {"cuda", "runtime", "is_hip"};
  cupy_in.state = -1;
  PyObject *name = PyUnicode_FromString("cupy");
  PyObject *mod = name ? PyImport_GetModule(name) : NULL;
  Py_XDECREF(name);
  if (!mod)
    goto out;
  PyObject *hip = attr_chain(mod, runtime_is_hip, 3);
  int is_hip = hip ? PyObject_IsTrue(hip) : -1;
  Py_XDECREF(hip);
  if (is_hip < 0)
    goto out;
  cupy_in.device_type = is_hip ? kDLROCM : kDLCUDA;
  PyObject *cap = PyObject_GetAttrString(mod, "_public_c_api");
  if (cap) {
    const cupy_c_api *api = PyCapsule_IsValid(cap, "cupy._public_c_api")
                                ? PyCapsule_GetPointer(cap, "cupy._public_c_api")
                                : NULL;
    if (api && api->version_major >= 14 && api->ndarray_type && api->get_ndarray_metadata &&
        PyType_Check((PyObject *)api->ndarray_type)) {
      Py_INCREF(api->ndarray_type);
      cupy_in.ndarray = api->ndarray_type;
      cupy_in.capsule = cap;
      cupy_in.api = api;
      cupy_in.state = 1;
    } else {
      Py_DECREF(cap);
    }
    goto out;
  }
  PyErr_Clear();
  if (!cupy_layout_version(mod))
    goto out;
  PyObject *nd = PyObject_GetAttrString(mod, "ndarray");
  if (nd && PyType_Check(nd) &&
      ((PyTypeObject *)nd)->tp_basicsize >= (Py_ssize_t)sizeof(cupy_array_layout)) {
    cupy_in.ndarray = (PyTypeObject *)nd;
    cupy_in.state = 1;
  } else {
    Py_XDECREF(nd);
  }
out:
  Py_XDECREF(mod);
  PyErr_Clear();
}

/* Python attribute `name` of `obj` as an int equal to `want` (1), else 0. */
static int attr_equals(PyObject *obj, const char *name, long long want) {
  PyObject *a = PyObject_GetAttrString(obj, name);
  long long v = a && PyLong_Check(a) ? PyLong_AsLongLong(a) : -1;
  int ok = a && !PyErr_Occurred() && v == want;
  Py_XDECREF(a);
  PyErr_Clear();
  return ok;
}

/* A tuple attribute of `obj` equal to the vector `vec` of n entries. */
static int tuple_equals(PyObject *obj, const char *name, const Py_ssize_t *vec, Py_ssize_t n) {
  PyObject *a = PyObject_GetAttrString(obj, name);
  int ok = a && PyTuple_Check(a) && PyTuple_GET_SIZE(a) == n;
  for (Py_ssize_t d = 0; ok && d < n; d++) {
    PyObject *x = PyTuple_GET_ITEM(a, d);
    ok = PyLong_Check(x) && PyLong_AsSsize_t(x) == vec[d] && !PyErr_Occurred();
  }
  Py_XDECREF(a);
  PyErr_Clear();
  return ok;
}

/* The layout route: does array `v` read as cupy_array_layout agree with what its Python
 * attributes say? Pointers are compared before they are followed, so a layout that is not
 * CuPy's is refused without being read through. */
static int cupy_layout_agrees(PyObject *v) {
  if (Py_TYPE(v)->tp_basicsize < (Py_ssize_t)sizeof(cupy_array_layout))
    return 0;
  const cupy_array_layout *a = (const cupy_array_layout *)v;
  PyObject *dtype = PyObject_GetAttrString(v, "dtype");
  PyObject *data = PyObject_GetAttrString(v, "data");
  int ok = dtype && data && dtype == a->dtype && data == (PyObject *)a->data &&
           Py_TYPE(data)->tp_basicsize >= (Py_ssize_t)sizeof(cupy_memptr_layout);
  Py_XDECREF(dtype);
  PyErr_Clear();
  Py_ssize_t ndim = a->shape.end - a->shape.begin;
  ok = ok && a->shape.begin <= a->shape.end && a->shape.end <= a->shape.end_of_storage &&
       a->strides.begin <= a->strides.end && a->strides.end <= a->strides.end_of_storage &&
       a->strides.end - a->strides.begin == ndim &&
       attr_equals(data, "ptr", (long long)a->data->ptr) &&
       attr_equals(data, "device_id", a->data->device_id) && attr_equals(v, "size", a->size) &&
       tuple_equals(v, "shape", a->shape.begin, ndim) &&
       tuple_equals(v, "strides", a->strides.begin, ndim);
  if (ok && !cupy_in.memptr) {
    Py_INCREF(Py_TYPE(data));
    cupy_in.memptr = Py_TYPE(data);
  }
  ok = ok && Py_TYPE(data) == cupy_in.memptr;
  Py_XDECREF(data);
  return ok;
}

/* Once per type (its first array `v`): can arrays of this type be read in place? */
static int cupy_type_usable(PyTypeObject *tp, PyObject *v) {
  if (cupy_in.state == 0)
    cupy_setup();
  if (cupy_in.state < 0 || !PyType_IsSubtype(tp, cupy_in.ndarray))
    return 0;
  return cupy_in.api ? 1 : cupy_layout_agrees(v);
}

/* The metadata of CuPy array `v`: 1 read, 0 not readable in place (the protocol route). */
static int cupy_read(PyObject *v, cupy_metadata *m) {
  if (cupy_in.api) {
    if (cupy_in.api->get_ndarray_metadata(v, m) == 0)
      return 1;
    PyErr_Clear();
    return 0;
  }
  const cupy_array_layout *a = (const cupy_array_layout *)v;
  if (Py_TYPE(a->data) != cupy_in.memptr) /* None: an array not set up by CuPy */
    return 0;
  Py_ssize_t ndim = a->shape.end - a->shape.begin;
  if (a->strides.end - a->strides.begin != ndim || ndim > INT32_MAX)
    return 0;
  m->ptr = (void *)a->data->ptr;
  m->ndim = (int)ndim;
  m->device_id = a->data->device_id;
  m->size = (size_t)a->size;
  m->itemsize = 0;
  m->shape = a->shape.begin;
  m->strides = a->strides.begin;
  m->dtype = a->dtype;
  return 1;
}

/* The DLPack device of CuPy array `v` (pass 1): 1 read, 0 not readable in place. */
static int cupy_device(PyObject *v, int32_t *type, int32_t *id) {
  *type = cupy_in.device_type;
  cupy_metadata m;
  if (cupy_in.api) {
    if (cupy_read(v, &m) == 0)
      return 0;
    *id = m.device_id;
    return 1;
  }
  const cupy_array_layout *a = (const cupy_array_layout *)v;
  if (Py_TYPE(a->data) != cupy_in.memptr)
    return 0;
  *id = a->data->device_id;
  return 1;
}

/* numpy dtype -> DLPack dtype as CuPy exports it (code of its kind in numpy_kinds, bits =
 * 8 * itemsize, one lane): 1 known, 0 none (the protocol route decides). */
static int cupy_dtype(PyObject *dtype, DLDataType *dl, int64_t *itemsize) {
  for (int k = 0; k < DTYPE_CACHE_SIZE; k++) {
    if (dtype_cache[k].dtype == dtype) {
      *dl = dtype_cache[k].dl;
      *itemsize = dtype_cache[k].itemsize;
      return dl->code != 0xFF;
    }
  }
  PyObject *kind = PyObject_GetAttrString(dtype, "kind");
  PyObject *order = kind ? PyObject_GetAttrString(dtype, "byteorder") : NULL;
  PyObject *size = order ? PyObject_GetAttrString(dtype, "itemsize") : NULL;
  if (!size) {
    Py_XDECREF(kind);
    Py_XDECREF(order);
    PyErr_Clear();
    return 0; /* not a dtype: not cached */
  }
  const char *k = PyUnicode_Check(kind) ? PyUnicode_AsUTF8(kind) : NULL;
  const char *o = PyUnicode_Check(order) ? PyUnicode_AsUTF8(order) : NULL;
  long n = PyLong_Check(size) ? PyLong_AsLong(size) : -1;
  PyErr_Clear();
  DLDataType d = {0xFF, 0, 1};
  if (k && o && k[0] && !k[1] && n >= 1 && n <= 31 &&
      (o[0] == '=' || o[0] == '|' || o[0] == (PY_LITTLE_ENDIAN ? '<' : '>'))) {
    int code = numpy_kind_code(k[0]);
    if (code >= 0) {
      d.code = (uint8_t)code;
      d.bits = (uint8_t)(8 * n);
    }
  }
  Py_DECREF(kind);
  Py_DECREF(order);
  Py_DECREF(size);
  int slot = dtype_cache_next;
  dtype_cache_next = (dtype_cache_next + 1) % DTYPE_CACHE_SIZE;
  PyObject *old = dtype_cache[slot].dtype;
  Py_INCREF(dtype);
  dtype_cache[slot].dtype = dtype;
  dtype_cache[slot].dl = d;
  dtype_cache[slot].itemsize = n;
  Py_XDECREF(old);
  *dl = d;
  *itemsize = n;
  return d.code != 0xFF;
}

/* CuPy's current stream on `device_id` from its C API (CuPy >= 14.3): 1 read into *out,
 * 0 no such API (the caller asks Python), -1 error. */
static int cupy_api_stream(int32_t device_id, void **out) {
  if (cupy_in.state == 0)
    cupy_setup();
  const cupy_c_api *api = cupy_in.api;
  if (!api || !api->get_current_stream_ptr ||
      (api->version_major == 14 && api->version_minor < 3))
    return 0;
  return api->get_current_stream_ptr(device_id, out) == 0 ? 1 : -1;
}

/* Pass 3 for CuPy array `v`, argument `i` named `name`, read in place: fill t->local (shape
 * borrowed from the array, element strides in `strides`, CUPY_MAX_RANK entries); the caller
 * checks its device. 1 done, 0 take the protocol route, -1 error: ArgumentError for a byte
 * stride that is not a multiple of the item size. */
static int cupy_take(PyObject *v, PyObject *name, Py_ssize_t i, tensor_state *t,
                     int64_t *strides) {
  cupy_metadata m;
  DLDataType dl;
  int64_t itemsize;
  if (!cupy_read(v, &m) || m.ndim < 0 || m.ndim > CUPY_MAX_RANK ||
      (m.ndim > 0 && (!m.shape || !m.strides)) || !cupy_dtype(m.dtype, &dl, &itemsize))
    return 0;
  for (int d = 0; d < m.ndim; d++) {
    if (m.strides[d] % itemsize != 0) {
      raise_arg(name, i,
                "CuPy array stride %zd bytes in dimension %d is not a multiple of its item "
                "size %lld bytes",
                m.strides[d], d, (long long)itemsize);
      return -1;
    }
    strides[d] = m.strides[d] / itemsize;
  }
  t->local.data = m.ptr;
  t->local.device.device_type = (DLDeviceType)cupy_in.device_type;
  t->local.device.device_id = m.device_id;
  t->local.ndim = m.ndim;
  t->local.dtype = dl;
  t->local.shape = (int64_t *)m.shape;
  t->local.strides = strides;
  t->local.byte_offset = 0;
  t->t = &t->local;
  return 1;
}

/* CuPy (14 and earlier) exports a negative stride as its byte stride divided by the item size
 * in unsigned arithmetic: a float32 view with stride -1 arrives as (2^64 - 4) / 4 = 2^62 - 1.
 * Multiplied back by the item size in 64-bit address arithmetic that wraps to the true byte
 * stride, which is what CuPy means; libwavert (rightly) rejects the literal value, whose
 * extent overflows int64. Such a stride is restored to its signed value in the capsule, which
 * is ours alone once consumed. Strides that are not of this form are left for libwavert. */
static void repair_cupy_strides(DLTensor *t) {
  uint64_t itemsize = ((uint64_t)t->dtype.bits * t->dtype.lanes) / 8;
  if (t->strides == NULL || itemsize < 2)
    return;
  for (int32_t d = 0; d < t->ndim; ++d) {
    int64_t s = t->strides[d];
    if (s <= 0 || (uint64_t)s <= (uint64_t)INT64_MAX / itemsize)
      continue;
    int64_t bytes = (int64_t)((uint64_t)s * itemsize); /* the wrapped byte stride, negative */
    if (bytes < 0 && bytes % (int64_t)itemsize == 0)
      t->strides[d] = bytes / (int64_t)itemsize;
  }
}
