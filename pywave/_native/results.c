/*
 * results.c — what a host function returns (part of the native.c unity build): scalar
 * results become Python numbers, memref results Memref objects (memref.c) that own their
 * memory or keep its owner alive.
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
 */
#include "native.h"

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
  if (self->device_type == kDLCPU) { /* a host program allocates host memory only */
    m->owner = OWN_HOST;
    m->device.device_id = 0;
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
