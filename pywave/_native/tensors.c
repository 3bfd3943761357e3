/*
 * tensors.c — DLPack intake (part of the native.c unity build).
 *
 * Each tensor argument takes one of four routes, decided per Python type and cached:
 *   exchange API  type(obj).__dlpack_c_exchange_api__ (torch): a borrowed DLTensor, no capsule;
 *   CuPy          a cupy.ndarray read in place (CuPy's C API or its object layout: cupy.c),
 *                 falling back to the protocol when it cannot be;
 *   protocol      __dlpack__ / __dlpack_device__ (JAX, NumPy, ...): a capsule asked for
 *                 with __dlpack__(stream=S) in pass 2, once the stream S is known;
 *   capsule       a raw "dltensor" / "dltensor_versioned" PyCapsule passed by the caller.
 * Capsules taken are renamed "used_*" (never consumed twice) and their deleters run exactly
 * once, after the call (release_tensors). Each parameter remembers the last layout it accepted
 * (the descriptor memo), so a tensor of the same dtype, shape and strides skips re-deriving
 * its descriptor; every check still applies (see "The descriptor memo").
 */
#include "native.h"

#include <string.h>

/* type_info.flags: JAX; CuPy; CuPy checked for in-place reading (cupy_check_type), and the
 * answer. */
enum { TYPE_JAX = 1, TYPE_CUPY = 2, TYPE_CUPY_CHECKED = 4, TYPE_CUPY_IN_PLACE = 8 };

typedef struct {
  PyTypeObject *type;  /* strong; NULL = free entry */
  PyObject *capsule;   /* strong; the exchange API capsule, or NULL */
  const DLPackExchangeAPI *api;
  uint8_t route;       /* ROUTE_NONE, ROUTE_PROTOCOL or ROUTE_EXCHANGE */
  uint8_t flags;       /* TYPE_JAX, TYPE_CUPY */
} type_info;

static type_info type_cache[TYPE_CACHE_SIZE];
static int type_cache_next;

/* The type of the last exchange-API tensor classified, and its API: one compare per tensor
 * instead of the cache's scan (torch calls pass tensors of one type). The type's type_cache
 * entry holds it; type_info_get clears these when it evicts that entry. */
static PyTypeObject *last_exchange_type;
static const DLPackExchangeAPI *last_exchange_api;

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

/* The cached info of `tp`, filling the cache on a miss. On a hit *out points into the cache
 * (read it before any Python code runs: a later miss may reuse the entry); on a miss it points
 * at `miss`, a copy. 0 / -1 on error. */
static int type_info_get(PyTypeObject *tp, type_info *miss, const type_info **out) {
  for (int i = 0; i < TYPE_CACHE_SIZE; i++) {
    if (type_cache[i].type == tp) {
      *out = &type_cache[i];
      return 0;
    }
  }
  type_info ti = {0};
  PyObject *cap;
  /* DLPack 1.3's capsule; else the name DLPack 1.2 published, an int holding the pointer,
   * which some producers still use. */
  int older = 0;
  int r = type_attr(tp, str_exchange_api, &cap);
  if (r == 0) {
    older = 1;
    r = type_attr(tp, str_exchange_api_v12, &cap);
  }
  if (r < 0)
    return -1;
  if (r > 0) {
    const DLPackExchangeAPI *api = NULL;
    if (!older && PyCapsule_IsValid(cap, "dlpack_exchange_api"))
      api = (const DLPackExchangeAPI *)PyCapsule_GetPointer(cap, "dlpack_exchange_api");
    else if (older && PyLong_Check(cap))
      api = (const DLPackExchangeAPI *)PyLong_AsVoidPtr(cap);
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
  if (old_type == last_exchange_type)
    last_exchange_type = NULL;
  Py_INCREF(tp);
  ti.type = tp;
  *slot = ti;
  *miss = ti;
  *out = miss;
  Py_XDECREF(old_type);
  Py_XDECREF(old_cap);
  return 0;
fail:
  Py_XDECREF(ti.capsule);
  return -1;
}

/* cupy_type_usable (cupy.c) once per type, remembered in its type_info flags (`flags`: the cached
 * ones); returns the new flags. The check runs Python code, so the entry is looked up again. */
static uint8_t cupy_check_type(PyTypeObject *tp, PyObject *v, uint8_t flags) {
  flags |= TYPE_CUPY_CHECKED;
  if (cupy_type_usable(tp, v))
    flags |= TYPE_CUPY_IN_PLACE;
  for (int k = 0; k < TYPE_CACHE_SIZE; k++)
    if (type_cache[k].type == tp)
      type_cache[k].flags = flags;
  return flags;
}

/* ---------------------------------------------------------------------------------------- */
/* Capsules and the protocol                                                                */
/* ---------------------------------------------------------------------------------------- */
static void release_tensors(tensor_state *ts, Py_ssize_t n) {
  Py_ssize_t first = 0;
  while (first < n && !ts[first].managed) /* exchange-API calls own nothing: no error dance */
    first++;
  if (first == n)
    return;
  PyObject *et, *ev, *tb;
  PyErr_Fetch(&et, &ev, &tb); /* deleters may run Python code */
  for (Py_ssize_t i = first; i < n; i++) {
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
/* The descriptor memo                                                                      */
/* ---------------------------------------------------------------------------------------- */
/* wavert_memref_from_dltensor is a pure function of the parameter's memref type (fixed) and
 * the tensor's dtype, ndim, shape and strides (their values), data and byte_offset. All it
 * checks but two (data not NULL unless the tensor is empty; data + byte_offset not wrapping)
 * and all the descriptor words but two (allocated, aligned) depend on dtype, ndim, shape and
 * strides alone. So each parameter remembers the last of those it accepted with the words
 * derived from them (param_t.memo_*), and a tensor with the same dtype, ndim, shape and
 * strides, compared value by value, gets those words, its own address words and the two
 * address checks; anything else takes the full derivation (which also raises, with its
 * message). Nothing is keyed on the tensor object, its id or a version counter: a tensor
 * resized, restrided or viewed as another dtype in place, or another tensor at the same
 * address, has another key or is checked from its own fields. */
_Static_assert(offsetof(DLTensor, dtype) == offsetof(DLTensor, ndim) + 4 &&
                   sizeof(DLDataType) == 4,
               "DLTensor's ndim and dtype (code, bits, lanes) are one 8-byte word");

/* A tensor's ndim and dtype as one word, compared with one instruction. */
static inline uint64_t ndim_dtype_word(const DLTensor *t) {
  uint64_t w;
  memcpy(&w, (const char *)t + offsetof(DLTensor, ndim), sizeof w);
  return w;
}

static inline int memo_hit(const param_t *p, const DLTensor *t, int64_t *words) {
  const int32_t rank = p->mtype.rank;
  /* The key's ndim is the one the derivation accepted for this parameter (its rank). */
  if ((t->strides ? MEMO_STRIDES : MEMO_COMPACT) != p->memo_state ||
      ndim_dtype_word(t) != p->memo_ndim_dtype || (rank > 0 && t->shape == NULL))
    return 0;
  const int64_t *key = p->memo_key;
  for (int32_t d = 0; d < rank; d++)
    if (t->shape[d] != key[d])
      return 0;
  if (t->strides)
    for (int32_t d = 0; d < rank; d++)
      if (t->strides[d] != key[rank + d])
        return 0;
  const uint64_t data = (uint64_t)(uintptr_t)t->data;
  uint64_t first;
  if ((data == 0 && !p->memo_empty) || __builtin_add_overflow(data, t->byte_offset, &first))
    return 0;
  words[0] = (int64_t)data;
  words[1] = (int64_t)(first - p->memo_offset_bytes);
  if (rank == 1) { /* the common case, without memcpy's call */
    words[2] = key[2];
    words[3] = key[3];
    words[4] = key[4];
  } else {
    memcpy(words + 2, key + 2 * rank, sizeof(int64_t) * (size_t)(1 + 2 * rank));
  }
  return 1;
}

/* Remember tensor `t`, whose descriptor `words` wavert_memref_from_dltensor just derived. */
static void memo_store(param_t *p, const DLTensor *t, const int64_t *words) {
  const int32_t rank = p->mtype.rank;
  int64_t *key = p->memo_key;
  uint8_t empty = 0;
  for (int32_t d = 0; d < rank; d++) {
    key[d] = t->shape[d];
    key[rank + d] = t->strides ? t->strides[d] : 0;
    empty |= t->shape[d] == 0;
  }
  memcpy(key + 2 * rank, words + 2, sizeof(int64_t) * (size_t)(1 + 2 * rank));
  /* aligned = data + byte_offset - offset bytes, neither sum wrapping once accepted */
  p->memo_offset_bytes = (uint64_t)(uintptr_t)t->data + t->byte_offset - (uint64_t)words[1];
  p->memo_ndim_dtype = ndim_dtype_word(t);
  p->memo_empty = empty;
  p->memo_state = t->strides ? MEMO_STRIDES : MEMO_COMPACT;
}

/* fill_descriptor's miss: the descriptor derived and checked by libwavert (the table's class
 * for its status, ArgumentError for a mismatch, with a message naming the argument), then
 * remembered. Out of line: the hit is the per-call path. */
__attribute__((noinline)) static int derive_descriptor(param_t *p, Py_ssize_t i,
                                                       const DLTensor *t, int64_t *words) {
  const wavert_status st = wavert_memref_from_dltensor(t, &p->mtype, words);
  if (st != WAVERT_OK) {
    raise_status_fmt(st, "argument '%U' (#%zd)", p->name, i);
    return -1;
  }
  memo_store(p, t, words);
  return 0;
}

/* The memref descriptor of tensor argument `i` into its slots: from the memo, or derived. */
static inline int fill_descriptor(HostFunction *self, call_state *c, Py_ssize_t i,
                                  const DLTensor *t) {
  param_t *p = &self->p[i];
  int64_t *words = (int64_t *)&c->slots[p->slot];
  if (__builtin_expect(memo_hit(p, t, words), 1))
    return 0;
  return derive_descriptor(p, i, t, words);
}

/* An object argument of Wave's convention: its record pointed at the tensor (objects.c),
 * after the dtype check the host code states. Out of line, as it is not the common case. */
__attribute__((noinline)) static int use_object_tensor(HostFunction *self, call_state *c,
                                                       Py_ssize_t i, const DLTensor *t) {
  const param_t *p = &self->p[i];
  if (p->mtype.dtype.bits && !object_dtype_fits(p, t->dtype))
    return object_dtype_error(p, i, t->dtype);
  c->objects[p->tensor_index].tensor = t;
  return 0;
}

/* A checked tensor put to use: argument `i`'s memref descriptor filled (fill_descriptor), or,
 * for an object argument of Wave's convention, its record (use_object_tensor). */
static inline int use_tensor(HostFunction *self, call_state *c, Py_ssize_t i,
                             const DLTensor *t) {
  if (__builtin_expect(self->p[i].is_object, 0))
    return use_object_tensor(self, c, i, t);
  return fill_descriptor(self, c, i, t);
}

/* ---------------------------------------------------------------------------------------- */
/* Pass 1: classify                                                                         */
/* ---------------------------------------------------------------------------------------- */
/* A raw capsule argument: its DLTensor, version and read-only flag, without consuming it. */
static int classify_capsule(param_t *p, Py_ssize_t i, PyObject *v, tensor_state *t,
                            const DLTensor **out) {
  const char *cname = PyCapsule_GetName(v);
  if (cname && strcmp(cname, "dltensor_versioned") == 0) {
    DLManagedTensorVersioned *mt = PyCapsule_GetPointer(v, cname);
    if (!mt)
      return -1;
    if (mt->version.major != DLPACK_MAJOR_VERSION) {
      raise_arg(p->name, i, "DLPack capsule of unsupported version %u.%u (expected 1.x)",
                (unsigned)mt->version.major, (unsigned)mt->version.minor);
      return -1;
    }
    t->versioned = 1;
    t->read_only = (mt->flags & DLPACK_FLAG_BITMASK_READ_ONLY) != 0;
    *out = &mt->dl_tensor;
    return 0;
  }
  if (cname && strcmp(cname, "dltensor") == 0) {
    DLManagedTensor *mt = PyCapsule_GetPointer(v, cname);
    if (!mt)
      return -1;
    *out = &mt->dl_tensor;
    return 0;
  }
  if (cname && (strcmp(cname, "used_dltensor") == 0 ||
                strcmp(cname, "used_dltensor_versioned") == 0))
    raise_arg(p->name, i, "DLPack capsule already consumed; pass the array itself");
  else
    raise_arg(p->name, i, "expects a DLPack tensor (%U), got a PyCapsule named %s", p->type_str,
              cname ? cname : "NULL");
  return -1;
}

/* obj.__dlpack_device__() -> (type, id), checked. */
static int protocol_device(param_t *p, Py_ssize_t i, PyObject *v, int32_t *type, int32_t *id) {
  PyObject *dv = PyObject_VectorcallMethod(str_dlpack_device, &v, 1, NULL);
  if (!dv) {
    raise_chained_arg(ArgumentError, p->name, i, "__dlpack_device__() failed");
    return -1;
  }
  long lt = -1, li = -1;
  if (PyTuple_Check(dv) && PyTuple_GET_SIZE(dv) == 2) {
    lt = PyLong_AsLong(PyTuple_GET_ITEM(dv, 0));
    li = lt == -1 && PyErr_Occurred() ? -1 : PyLong_AsLong(PyTuple_GET_ITEM(dv, 1));
  }
  if (PyErr_Occurred() || lt < 0 || li < 0 || lt > INT32_MAX || li > INT32_MAX) {
    PyErr_Clear();
    raise_arg(p->name, i, "__dlpack_device__() must return (device_type, device_id), got %R", dv);
    Py_DECREF(dv);
    return -1;
  }
  Py_DECREF(dv);
  *type = (int32_t)lt;
  *id = (int32_t)li;
  return 0;
}

/* A tensor of DLPack device type `type` can be used by a function of the device type `want`:
 * the same type, or CUDA managed memory (kDLCUDAManaged) for a CUDA function, which the
 * device reaches as it does its own memory (CuPy exports managed allocations so). */
static inline int device_type_fits(int32_t want, int32_t type) {
  return type == want || (want == kDLCUDA && type == kDLCUDAManaged);
}

/* Host memory a host program (want == kDLCPU) reads and writes as its own: kDLCPU, and the
 * drivers' page-locked host memory (kDLCUDAHost, kDLROCMHost), plain host pointers. Managed
 * memory is refused: the host may not touch it while GPU work is pending (no stream orders
 * a host program's call). Device ids are not compared: host memory is one device. */
static inline int host_memory(int32_t type) {
  return type == kDLCPU || type == kDLCUDAHost || type == kDLROCMHost;
}

/* check_device's cases other than "same device type and id as the first tensor"; out of
 * line, so that the common case inlined into the call's loop stays small. */
__attribute__((noinline)) static int check_device_slow(HostFunction *self, call_state *c,
                                                       Py_ssize_t i, PyObject *v, int32_t type,
                                                       int32_t id, int claimed) {
  param_t *p = &self->p[i];
  if (self->device_type == kDLCPU) {
    if (!host_memory(type))
      return wrong_device(self, p, i, v, type, id);
    if (c->dev_arg < 0)
      c->dev_arg = i;
    return 0;
  }
  if (!device_type_fits(self->device_type, type))
    return wrong_device(self, p, i, v, type, id);
  if (c->dev_arg < 0) {
    c->dev_arg = i;
    c->dev_id = id;
    return 0;
  }
  if (id == c->dev_id)
    return 0;
  PyObject *d0 = device_str(self->device_type, c->dev_id), *d1 = device_str(type, id);
  if (d0 && d1 && claimed)
    raise_arg(p->name, i, "__dlpack_device__() said %U but the tensor is on %U", d0, d1);
  else if (d0 && d1)
    PyErr_Format(ArgumentError, "arguments '%U' (%U) and '%U' (%U) are on different devices",
                 self->p[c->dev_arg].name, d0, p->name, d1);
  Py_XDECREF(d0);
  Py_XDECREF(d1);
  return -1;
}

/* The tensor's device must fit the function's device type (device_type_fits), and its id be
 * the first tensor's (the first tensor sets it). `claimed`: pass 2 re-reading a device that
 * pass 1 already checked from the producer's __dlpack_device__(), so a difference means the
 * producer lied. Inline: the common case is two compares. */
static inline int check_device(HostFunction *self, call_state *c, Py_ssize_t i, PyObject *v,
                               int32_t type, int32_t id, int claimed) {
  if (type == self->device_type) {
    if (c->dev_arg >= 0 && id == c->dev_id)
      return 0;
    if (c->dev_arg < 0) {
      c->dev_arg = i;
      c->dev_id = id;
      return 0;
    }
  }
  return check_device_slow(self, c, i, v, type, id, claimed);
}

/* The exchange API refused argument `i`: ArgumentError chained to what it raised. */
__attribute__((cold, noinline)) static int exchange_failed(HostFunction *self, Py_ssize_t i) {
  if (!PyErr_Occurred())
    PyErr_SetString(PyExc_RuntimeError, "DLPack exchange API conversion failed");
  raise_chained_arg(ArgumentError, self->p[i].name, i, NULL);
  return -1;
}

/* Phase 1 for an exchange-API tensor (torch): its borrowed view, device (checked) and, while
 * the view is current (before any Python code runs), its descriptor. Inlined into the call's
 * loop (classify_last_exchange): its cases other than a memo hit on the first tensor's device
 * are calls out of line. */
__attribute__((always_inline)) static inline int classify_exchange(HostFunction *self,
                                                                   call_state *c, Py_ssize_t i,
                                                                   PyObject *v, tensor_state *t,
                                                                   const DLPackExchangeAPI *api) {
  t->route = ROUTE_EXCHANGE;
  if (__builtin_expect(api->dltensor_from_py_object_no_sync(v, &t->local) != 0, 0))
    return exchange_failed(self, i);
  t->t = &t->local;
  if (!c->stream_api)
    c->stream_api = api;
  if (check_device(self, c, i, v, (int32_t)t->local.device.device_type,
                   t->local.device.device_id, 0) < 0)
    return -1;
  return use_tensor(self, c, i, &t->local);
}

/* Phase 1 for tensor argument `i` whose type is last_exchange_type: hf_vectorcall checks the
 * type and calls this, inlined into its loop, before it would call classify_tensor. */
__attribute__((always_inline)) static inline int classify_last_exchange(HostFunction *self,
                                                                        call_state *c,
                                                                        Py_ssize_t i,
                                                                        PyObject *v) {
  tensor_state *t = &c->ts[self->p[i].tensor_index];
  t->managed = NULL; /* release_tensors and build_results read it for every tensor */
  c->nstate = self->p[i].tensor_index + 1;
  return classify_exchange(self, c, i, v, t, last_exchange_api);
}

/* classify_last_exchange for hf_vectorcall's loop over a function of memrefs only
 * (memrefs_only): argument `i` is memref parameter `i` (its tensor state ts[i]), and the call's
 * stream_api was set to the exchange API before the loop (the first argument is of
 * last_exchange_type). The same steps and checks, fewer loads. */
__attribute__((always_inline)) static inline int classify_exchange_memref(HostFunction *self,
                                                                          call_state *c,
                                                                          Py_ssize_t i,
                                                                          PyObject *v) {
  tensor_state *t = &c->ts[i];
  t->managed = NULL; /* release_tensors and build_results read it for every tensor */
  c->nstate = i + 1;
  t->route = ROUTE_EXCHANGE;
  if (__builtin_expect(last_exchange_api->dltensor_from_py_object_no_sync(v, &t->local) != 0, 0))
    return exchange_failed(self, i);
  t->t = &t->local;
  if (check_device(self, c, i, v, (int32_t)t->local.device.device_type,
                   t->local.device.device_id, 0) < 0)
    return -1;
  return fill_descriptor(self, c, i, &t->local);
}

/* Phase 1 for tensor argument `i`: its route and device (checked), without taking it; an
 * exchange-API tensor's descriptor is filled here too, while its borrowed view is current.
 * Protocol tensors after the first tensor are left for take_tensor to check from their own
 * DLTensor, which saves a __dlpack_device__() call per argument. */
static int classify_tensor(HostFunction *self, call_state *c, Py_ssize_t i, PyObject *v) {
  param_t *p = &self->p[i];
  tensor_state *t = &c->ts[p->tensor_index];
  t->managed = NULL; /* release_tensors and build_results read it for every tensor */
  c->nstate = p->tensor_index + 1;
  type_info miss;
  const type_info *ti = NULL;
  if (!PyCapsule_CheckExact(v) && type_info_get(Py_TYPE(v), &miss, &ti) < 0) {
    raise_chained_arg(ArgumentError, p->name, i, NULL);
    return -1;
  }
  if (ti && ti->route == ROUTE_EXCHANGE) {
    last_exchange_type = ti->type;
    last_exchange_api = ti->api;
    return classify_exchange(self, c, i, v, t, ti->api);
  }
  /* Every other route is taken in pass 3. */
  c->to_take++;
  t->t = NULL;
  t->versioned = 0;
  t->read_only = 0;
  t->deferred = 0;
  t->cupy = 0;
  int32_t type, id;
  if (!ti) {
    const DLTensor *dl;
    if (classify_capsule(p, i, v, t, &dl) < 0)
      return -1;
    t->route = ROUTE_CAPSULE;
    type = (int32_t)dl->device.device_type;
    id = dl->device.device_id;
    return check_device(self, c, i, v, type, id, 0);
  }
  const uint8_t route = ti->route;
  uint8_t flags = ti->flags;
  t->route = route;
  if (route == ROUTE_PROTOCOL) {
    if ((flags & TYPE_JAX) && p->written)
      return read_only_error(p, i, "JAX arrays are immutable");
    if (flags & TYPE_CUPY) {
      c->any_cupy = t->cupy = 1;
      if (!(flags & TYPE_CUPY_CHECKED))
        flags = cupy_check_type(Py_TYPE(v), v, flags);
      if ((flags & TYPE_CUPY_IN_PLACE) && cupy_device(v, &type, &id)) {
        t->route = ROUTE_CUPY;
        return check_device(self, c, i, v, type, id, 0);
      }
    }
    if (c->dev_arg >= 0) {
      t->deferred = 1;
      return 0;
    }
    if (protocol_device(p, i, v, &type, &id) < 0)
      return -1;
    return check_device(self, c, i, v, type, id, 0);
  }
  PyObject *tn = type_name(Py_TYPE(v));
  if (tn) {
    raise_arg(p->name, i, "expects a DLPack tensor (%U), got %U", p->type_str, tn);
    Py_DECREF(tn);
  }
  return -1;
}

/* ---------------------------------------------------------------------------------------- */
/* Pass 2: take                                                                             */
/* ---------------------------------------------------------------------------------------- */
/* The capsule of a capsule or protocol argument (new reference): the argument itself, or
 * __dlpack__(stream=S) with S the call's stream in DLPack's numbering. */
static PyObject *tensor_capsule(HostFunction *self, call_state *c, Py_ssize_t i, PyObject *v) {
  tensor_state *t = &c->ts[self->p[i].tensor_index];
  if (t->route == ROUTE_CAPSULE) {
    Py_INCREF(v);
    return v;
  }
  if (!c->stream_value) {
    if (self->device_type == kDLCPU) { /* DLPack: stream=None for host memory */
      Py_INCREF(Py_None);
      c->stream_value = Py_None;
    } else if (c->stream)
      c->stream_value = PyLong_FromVoidPtr(c->stream);
    else /* the legacy default stream: 1 on CUDA, 0 on ROCm */
      c->stream_value = PyLong_FromLong(self->device_type == kDLROCM ? 0 : 1);
    if (!c->stream_value)
      return NULL;
  }
  PyObject *cap = call_dlpack(v, c->stream_value);
  if (!cap)
    raise_chained_arg(ArgumentError, self->p[i].name, i, "__dlpack__() failed");
  return cap;
}

/* Rename `cap` "used_*" and keep its managed tensor in `t` (its deleter then runs in
 * release_tensors). Steals `cap`. */
static int consume_capsule(param_t *p, Py_ssize_t i, PyObject *cap, tensor_state *t) {
  const char *cname = PyCapsule_CheckExact(cap) ? PyCapsule_GetName(cap) : NULL;
  int versioned;
  if (cname && strcmp(cname, "dltensor_versioned") == 0) {
    versioned = 1;
  } else if (cname && strcmp(cname, "dltensor") == 0) {
    versioned = 0;
  } else if (t->route == ROUTE_CAPSULE) { /* the same capsule passed twice */
    Py_DECREF(cap);
    raise_arg(p->name, i, "DLPack capsule already consumed; pass the array itself");
    return -1;
  } else {
    raise_arg(p->name, i, "__dlpack__() returned %R, not an unused DLPack capsule", cap);
    Py_DECREF(cap);
    return -1;
  }
  void *m = PyCapsule_GetPointer(cap, cname);
  if (!m || PyCapsule_SetName(cap, versioned ? "used_dltensor_versioned" : "used_dltensor")) {
    Py_DECREF(cap);
    return -1;
  }
  Py_DECREF(cap); /* renamed: its destructor leaves the tensor to us */
  t->managed = m;
  t->versioned = (uint8_t)versioned;
  if (!versioned) {
    t->t = &((DLManagedTensor *)m)->dl_tensor;
    return 0;
  }
  DLManagedTensorVersioned *mt = m;
  if (mt->version.major != DLPACK_MAJOR_VERSION) {
    raise_arg(p->name, i, "__dlpack__() gave DLPack version %u.%u (expected 1.x)",
              (unsigned)mt->version.major, (unsigned)mt->version.minor);
    return -1;
  }
  t->t = &mt->dl_tensor;
  t->read_only = (mt->flags & DLPACK_FLAG_BITMASK_READ_ONLY) != 0;
  return 0;
}

/* Phase 3 for tensor argument `i`: take capsule and protocol tensors (their deleters are now
 * ours), check device and writability, and fill the memref descriptor in the slots (for an
 * object argument of Wave's convention, point its record at the tensor; an exchange-API
 * tensor's was done in pass 1). */
static int take_tensor(HostFunction *self, call_state *c, Py_ssize_t i, PyObject *v) {
  param_t *p = &self->p[i];
  tensor_state *t = &c->ts[p->tensor_index];
  if (t->route == ROUTE_EXCHANGE) /* filled in pass 1 */
    return 0;
  int64_t strides[CUPY_MAX_RANK];
  if (t->route == ROUTE_CUPY) {
    /* An object of Wave's convention keeps its DLTensor past this function, whose `strides`
     * a CuPy array read in place would borrow: it takes the protocol route. */
    const int r = c->cupy_stream && !p->is_object ? cupy_take(v, p->name, i, t, strides) : 0;
    if (r < 0 || (r > 0 && check_device(self, c, i, v, (int32_t)t->local.device.device_type,
                                        t->local.device.device_id, 0) < 0))
      return -1;
    if (r == 0) { /* the protocol route: CuPy orders its current stream before ours */
      t->route = ROUTE_PROTOCOL;
      t->deferred = 1;
    }
  }
  if (t->route == ROUTE_CAPSULE || t->route == ROUTE_PROTOCOL) {
    PyObject *cap = tensor_capsule(self, c, i, v);
    if (!cap || consume_capsule(p, i, cap, t) < 0 ||
        check_device(self, c, i, v, (int32_t)t->t->device.device_type, t->t->device.device_id,
                     !t->deferred) < 0)
      return -1;
    if (t->read_only && p->written)
      return read_only_error(p, i, "its DLPack producer marks it READ_ONLY");
    if (t->cupy)
      repair_cupy_strides((DLTensor *)t->t);
  }
  return use_tensor(self, c, i, t->t);
}
