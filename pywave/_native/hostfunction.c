/*
 * hostfunction.c — the HostFunction type: a compiled host function callable from Python
 * (part of the native.c unity build).
 *
 * A HostFunction wraps the JIT entry `void entry(uint64_t *slots)` of one MLIR host function
 * and turns a Python call into slots: each memref argument becomes its descriptor
 * (WAVERT_MEMREF_WORDS(rank) words, filled by wavert_memref_from_dltensor from a DLPack
 * tensor), each scalar one word holding its bits in the low bytes. Everything per call is C:
 * vectorcall, a per-type cache of the DLPack C exchange API (torch), the DLPack protocol called
 * from C for other producers, no allocation on the fast path.
 *
 * A call, in phases (hf_vectorcall):
 *   0. parse_call_keywords: the argument count, keyword `stream` only;
 *   1. in argument order: scalars are range-checked and packed (pack_scalar); each tensor is
 *      classified (classify_tensor: exchange API / protocol / raw capsule), its device read
 *      and checked: the function's device type, one device id for all; an exchange-API
 *      tensor's descriptor is filled at once (its view is borrowed);
 *   2. choose_stream: `stream=` if given; else the exchange API's current_work_stream; else
 *      CuPy's current stream when a CuPy array is among the arguments; else the legacy default;
 *   3. take_tensor: protocol producers are asked for a capsule with __dlpack__(stream=S) so
 *      their pending work is ordered before S; capsules are renamed "used_*" (never consumed
 *      twice) and their deleters run exactly once after the call; descriptors are filled;
 *   4. run_entry: the device (the tensors' device, or ordinal 0 without tensor arguments),
 *      wavert_call_begin, entry(slots) without the GIL, wavert_call_end. The device and stream
 *      reach generated code through libwavert's thread-local call context (wavert_jit.h), the
 *      one hidden channel of the path;
 *   5. build_results (results.c): the result slots after the argument slots become the
 *      return value: None without results, the one result, or a tuple; a memref result a
 *      Memref owning its memory (or keeping the argument it views alive).
 *
 * Lifetime: a HostFunction holds its HostCode (hostcode.c: the module's JIT code and kernels),
 * so the code lives as long as any function of the module. HostCode.close() marks it closed: calls
 * that have not reached phase 4 raise "the compiled module is closed" (the check is made
 * after the call's last Python callback, right before the GIL is released, and `entry` is
 * read there); the release itself is deferred while calls are in flight and run, with the
 * GIL held, by the last call to leave. close() therefore never waits and is safe from any
 * thread and from inside a call's own callbacks (__dlpack__, __index__, stream objects).
 *
 * Errors: ArgumentError (a ValueError subclass) for anything about the arguments, including
 * launch-configuration limits reported by generated code; for a libwavert status, the class
 * of the one table (pywave.runtime.STATUS_ERRORS, given by set_exceptions; errors.c). Until
 * set_exceptions the classes are ValueError / RuntimeError.
 */
#include "native.h"

static int closed_error(HostFunction *self) {
  PyErr_Format(ArgumentError, "%U(): the compiled module is closed", self->name);
  return -1;
}

/* ---------------------------------------------------------------------------------------- */
/* The call                                                                                 */
/* ---------------------------------------------------------------------------------------- */
/* Phase 0: `stream=` (the only keyword) into *stream_obj, and the argument count. */
static int parse_call_keywords(HostFunction *self, PyObject *const *args, Py_ssize_t nargs,
                               PyObject *kwnames, PyObject **stream_obj) {
  *stream_obj = NULL;
  for (Py_ssize_t i = 0; kwnames && i < PyTuple_GET_SIZE(kwnames); i++) {
    PyObject *key = PyTuple_GET_ITEM(kwnames, i);
    if (key == str_stream || PyUnicode_Compare(key, str_stream) == 0) {
      *stream_obj = args[nargs + i];
      continue;
    }
    if (!PyErr_Occurred())
      PyErr_Format(ArgumentError,
                   "%U() got an unexpected keyword argument '%U' (only stream= is accepted)",
                   self->name, key);
    return -1;
  }
  if (nargs != self->nparams) {
    PyErr_Format(ArgumentError, "%U() takes %zd argument%s %U, got %zd", self->name,
                 self->nparams, self->nparams == 1 ? "" : "s", self->signature, nargs);
    return -1;
  }
  return 0;
}

/* Slots and tensor states for one call: on the stack up to STACK_SLOTS / STACK_TENSORS. */
static int call_state_init(HostFunction *self, call_state *c) {
  c->slots = c->slots_buf;
  c->ts = c->ts_buf;
  c->nstate = 0;
  c->stream = NULL;
  c->explicit_stream = 0;
  c->stream_value = NULL;
  c->dev_id = 0;
  c->dev_arg = -1;
  c->stream_api = NULL;
  c->any_cupy = 0;
  c->objects = NULL;
  c->to_take = 0;
  const Py_ssize_t words = self->nslots + self->nresult_slots;
  if (words > STACK_SLOTS && !(c->slots = PyMem_Malloc((size_t)words * sizeof *c->slots))) {
    PyErr_NoMemory();
    return -1;
  }
  if (self->ntensors > STACK_TENSORS &&
      !(c->ts = PyMem_Malloc((size_t)self->ntensors * sizeof *c->ts))) {
    PyErr_NoMemory();
    return -1;
  }
  if (self->wave && self->ntensors &&
      !(c->objects = PyMem_Malloc((size_t)self->ntensors * sizeof *c->objects))) {
    PyErr_NoMemory();
    return -1;
  }
  return 0;
}

/* Run the tensors' deleters and free what call_state_init allocated. */
static void call_state_release(call_state *c) {
  Py_XDECREF(c->stream_value);
  if (c->to_take) /* only pass 3 takes tensors that own something */
    release_tensors(c->ts, c->nstate);
  if (c->slots != c->slots_buf)
    PyMem_Free(c->slots);
  if (c->ts && c->ts != c->ts_buf)
    PyMem_Free(c->ts);
  if (c->objects)
    PyMem_Free(c->objects);
}

/* Phase 4: the call itself on the tensors' device and the chosen stream. */
static int run_entry(HostFunction *self, call_state *c) {
  /* No Python code runs from here to the entry's return: a close() seen here is the last one
   * that can stop this call, and one after it is deferred (the call is in flight). */
  if (self->code && self->code->closed)
    return closed_error(self);
  void (*const entry)(uint64_t *) = self->entry;
  wavert_device *device;
  wavert_status st = get_device(self->device_type, c->dev_id, &device);
  if (st != WAVERT_OK) {
    raise_status_fmt(st, "%U(): no %s device %d", self->name, device_kind(self->device_type),
                     (int)c->dev_id);
    return -1;
  }
  if (self->nresult_slots) /* scalar results fill only their low bytes */
    memset(c->slots + self->nslots, 0, (size_t)self->nresult_slots * sizeof *c->slots);
  wavert_call_state state;
  st = wavert_call_begin(device, c->stream, &state);
  if (st != WAVERT_OK) { /* a bad stream handle is the driver's finding, not the caller's */
    raise_status(st == WAVERT_ERROR_INVALID_ARGUMENT ? WAVERT_ERROR_DRIVER : st);
    return -1;
  }
  if (self->wave) { /* slot 0: the stream; the objects' records for the helpers */
    c->slots[0] = (uint64_t)(uintptr_t)c->stream;
    st = wavert_call_set_objects(c->objects, (int32_t)self->ntensors);
    if (st != WAVERT_OK) {
      wavert_call_end(&state);
      raise_status(st);
      return -1;
    }
  }
  /* The GIL is released around the entry although the handoff costs about 415 instructions a
   * call uncontended (bench/launch_instructions.py: 1250 -> 838 for the empty kernel when
   * held): a launch can block while the launch queue is full, and entries may synchronise,
   * copy or allocate; a driver thread running a Python host callback enqueued earlier on the
   * stream needs the GIL to let either finish, so holding it could deadlock. Peers (torch
   * ops, CuPy's launch) release it too. */
  Py_BEGIN_ALLOW_THREADS
  entry(c->slots);
  Py_END_ALLOW_THREADS
  st = wavert_call_end(&state);
  if (st != WAVERT_OK) {
    raise_status(st);
    return -1;
  }
  return 0;
}

static PyObject *hf_vectorcall(PyObject *self_, PyObject *const *args, size_t nargsf,
                               PyObject *kwnames) {
  HostFunction *self = (HostFunction *)self_;
  const Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
  HostCode *const code = self->code; /* held below: callbacks may drop every other reference */
  if (code && code->closed) {
    closed_error(self);
    return NULL;
  }
  PyObject *stream_obj;
  if (parse_call_keywords(self, args, nargs, kwnames, &stream_obj) < 0)
    return NULL;
  if (code) {
    Py_INCREF(code);
    code->in_flight += 1;
  }
  call_state c;
  PyObject *result = NULL;
  if (call_state_init(self, &c) < 0)
    goto done;
  c.explicit_stream = stream_obj && stream_obj != Py_None;
  if (c.explicit_stream && parse_stream(stream_obj, &c.stream) < 0)
    goto done;
  /* 1. scalars packed; each tensor's route and device */
  for (Py_ssize_t i = 0; i < nargs; i++) {
    param_t *p = &self->p[i];
    if (p->is_object) {
      if (classify_object(self, &c, i, args[i]) < 0)
        goto done;
    } else if (!p->is_memref) {
      c.slots[p->slot] = 0;
      if (pack_scalar((scalar_kind)p->kind, args[i], &c.slots[p->slot], p->name, i) < 0)
        goto done;
    } else if (classify_tensor(self, &c, i, args[i]) < 0) {
      goto done;
    }
  }
  /* 2. the stream; 3. the tensors taken and their descriptors filled; 4. the call */
  if (choose_stream(self, &c) < 0)
    goto done;
  for (Py_ssize_t i = 0; c.to_take && i < nargs; i++) {
    const param_t *p = &self->p[i];
    const int tensor = p->is_memref ||
                       (p->is_object && c.objects[p->tensor_index].kind == WAVERT_OBJECT_TENSOR);
    if (tensor && take_tensor(self, &c, i, args[i]) < 0)
      goto done;
  }
  if (run_entry(self, &c) < 0)
    goto done;
  result = build_results(self, &c, args);
done:
  call_state_release(&c); /* producers' deleters: Python code that may close the module */
  if (code) {
    code_leave(code);
    Py_DECREF(code);
  }
  return result;
}

/* ---------------------------------------------------------------------------------------- */
/* Construction                                                                             */
/* ---------------------------------------------------------------------------------------- */
static PyObject *hf_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
  static char *kwlist[] = {"entry", "name",    "params",     "device_type",
                           "code",  "results", "convention", NULL};
  PyObject *entry_obj, *name, *params_arg, *code = NULL, *results_arg = NULL;
  const char *convention = "pywave";
  int device_type;
  if (!PyArg_ParseTupleAndKeywords(args, kwds, "OUOi|$OOs:HostFunction", kwlist, &entry_obj,
                                   &name, &params_arg, &device_type, &code, &results_arg,
                                   &convention))
    return NULL;
  const int wave = strcmp(convention, "wave") == 0;
  if (!wave && strcmp(convention, "pywave") != 0) {
    PyErr_Format(PyExc_ValueError,
                 "HostFunction: convention must be \"pywave\" or \"wave\", got '%s'",
                 convention);
    return NULL;
  }
  if (results_arg == Py_None)
    results_arg = NULL;
  if (results_arg && (PyUnicode_Check(results_arg) || !PySequence_Check(results_arg))) {
    PyErr_Format(PyExc_TypeError,
                 "HostFunction: results must be a sequence of parameter objects, got %R",
                 results_arg);
    return NULL;
  }
  if (code == Py_None)
    code = NULL;
  if (code && !PyObject_TypeCheck(code, &HostCode_Type)) {
    PyErr_Format(PyExc_TypeError, "HostFunction: code must be a HostCode or None, got %R",
                 code);
    return NULL;
  }
  if (PyUnicode_Check(params_arg) || PyBytes_Check(params_arg) || !PySequence_Check(params_arg)) {
    PyErr_Format(PyExc_TypeError,
                 "HostFunction: params must be a sequence of parameter objects, got %R",
                 params_arg);
    return NULL;
  }
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
  PyObject *params = PySequence_Tuple(params_arg);
  if (!params)
    return NULL;
  Py_ssize_t n = PyTuple_GET_SIZE(params);
  param_t *p = PyMem_Calloc((size_t)(n ? n : 1), sizeof *p);
  if (!p) {
    Py_DECREF(params);
    return PyErr_NoMemory();
  }
  Py_ssize_t nslots = wave, ntensors = 0, nresults = 0, nresult_slots = 0; /* 0: the stream */
  PyObject *results = NULL;
  param_t *r = NULL;
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
    if (p[i].is_object != wave) {
      PyErr_Format(PyExc_ValueError,
                   "HostFunction: parameter '%U' is %s object, and the convention is '%s' "
                   "(Wave's takes objects only, pywave's memrefs and scalars)",
                   p[i].name, p[i].is_object ? "an" : "not an", convention);
      goto fail;
    }
    p[i].slot = nslots;
    if (p[i].is_memref || p[i].is_object) {
      p[i].tensor_index = ntensors++;
      nslots += p[i].is_object ? 1 : WAVERT_MEMREF_WORDS(p[i].mtype.rank);
    } else {
      nslots += 1;
    }
  }
  results = results_arg ? PySequence_Tuple(results_arg) : PyTuple_New(0);
  if (!results)
    goto fail;
  nresults = PyTuple_GET_SIZE(results);
  if (wave && nresults) {
    PyErr_SetString(PyExc_ValueError, "HostFunction: Wave's convention has no results");
    goto fail;
  }
  if (!(r = PyMem_Calloc((size_t)(nresults ? nresults : 1), sizeof *r))) {
    PyErr_NoMemory();
    goto fail;
  }
  for (Py_ssize_t i = 0; i < nresults; i++) {
    if (parse_param(PyTuple_GET_ITEM(results, i), i, &r[i]) < 0)
      goto fail;
    r[i].slot = nresult_slots;
    nresult_slots += r[i].is_memref ? WAVERT_MEMREF_WORDS(r[i].mtype.rank) : 1;
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
  self->params = params; /* the reference from PySequence_Tuple */
  Py_XINCREF(code);
  self->code = (HostCode *)code;
  self->signature = signature;
  self->device_type = device_type;
  self->nparams = n;
  self->ntensors = ntensors;
  self->nslots = nslots;
  self->wave = wave;
  self->p = p;
  self->results = results;
  self->nresults = nresults;
  self->nresult_slots = nresult_slots;
  self->r = r;
  return (PyObject *)self;
fail:
  Py_XDECREF(names);
  free_params(p, n);
  free_params(r, nresults);
  Py_XDECREF(results);
  Py_DECREF(params);
  return NULL;
}

static int hf_traverse(HostFunction *self, visitproc visit, void *arg) {
  Py_VISIT(self->code);
  Py_VISIT(self->params);
  Py_VISIT(self->results);
  return 0;
}

static int hf_clear(HostFunction *self) {
  Py_CLEAR(self->code);
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
  free_params(self->r, self->nresults);
  self->r = NULL;
  Py_CLEAR(self->results);
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

static PyObject *hf_get_results(HostFunction *self, void *closure) {
  (void)closure;
  Py_INCREF(self->results);
  return self->results;
}

static PyObject *hf_get_device_type(HostFunction *self, void *closure) {
  (void)closure;
  return PyLong_FromLong(self->device_type);
}

static PyObject *hf_get_convention(HostFunction *self, void *closure) {
  (void)closure;
  return PyUnicode_FromString(self->wave ? "wave" : "pywave");
}

static PyObject *hf_get_code(HostFunction *self, void *closure) {
  (void)closure;
  PyObject *code = self->code ? (PyObject *)self->code : Py_None;
  Py_INCREF(code);
  return code;
}

/* `__signature__` and `__doc__` are built when asked for, by pywave.introspect.<what>(obj). */
static PyObject *introspect(PyObject *obj, const char *what) {
  PyObject *mod = PyImport_ImportModule("pywave.introspect");
  if (!mod)
    return NULL;
  PyObject *r = PyObject_CallMethod(mod, what, "O", obj);
  Py_DECREF(mod);
  return r;
}

static PyObject *hf_get_signature(PyObject *self, void *closure) {
  (void)closure;
  return introspect(self, "signature");
}

static PyObject *hf_get_doc(PyObject *self, void *closure) {
  (void)closure;
  return introspect(self, "doc");
}

static PyGetSetDef hf_getset[] = {
    {"name", (getter)hf_get_name, NULL, "Name of the host function.", NULL},
    {"params", (getter)hf_get_params, NULL, "The parameter objects given at construction (a tuple).", NULL},
    {"results", (getter)hf_get_results, NULL,
     "The result objects given at construction (a tuple; empty: the call returns None).",
     NULL},
    {"device_type", (getter)hf_get_device_type, NULL, "DLPack device type (2 CUDA, 10 ROCm).",
     NULL},
    {"code", (getter)hf_get_code, NULL, "The HostCode holding the entry (kept alive), or None.",
     NULL},
    {"convention", (getter)hf_get_convention, NULL,
     "\"pywave\" (memref and scalar parameters) or \"wave\" (Wave's host wrappers: the stream, "
     "then any Python objects).",
     NULL},
    {"__signature__", (getter)hf_get_signature, NULL,
     "inspect.Signature: the parameters (names, tensor dtypes and shapes), then stream=.", NULL},
    {"__doc__", (getter)hf_get_doc, NULL, "What help() shows: this function's parameters.",
     NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyDoc_STRVAR(hf_doc,
             "HostFunction(entry, name, params, device_type, *, code=None, results=None,\n"
             "             convention='pywave')\n"
             "--\n\n"
             "A compiled host function: call it with DLPack tensors and scalars, and\n"
             "optionally stream=. `entry` is the address of `void entry(uint64_t *slots)`;\n"
             "`params` a sequence of parameter objects (pywave's Param: name, kind, scalar,\n"
             "dtype, flags, sizes, strides, offset, written), read once here;\n"
             "`device_type` the DLPack device type (2 CUDA, 10 ROCm); `code` the HostCode\n"
             "holding `entry`, kept alive as long as this object: its calls are counted in\n"
             "flight, and after code.close() a call raises before it runs `entry` (the\n"
             "release waits for the calls in flight; see HostCode). `results`: parameter\n"
             "objects of the results (plus `memory`: \"device\" or \"\"); a call returns\n"
             "None, the one result or a tuple: scalars as bool/int/float, memrefs as Memref\n"
             "objects (DLPack, __cuda_array_interface__) owning their memory.\n"
             "convention='wave': Wave's host wrappers; `params` are objects (kind \"object\")\n"
             "and the entry's slot 0 is the call's stream, each object's slot the address of\n"
             "its wavert_object record, read by Wave's helpers in libwavert (objects.c).\n\n"
             "A call raises ArgumentError for an argument that does not fit (count, keyword,\n"
             "dtype, shape, layout, device, read-only, scalar range, launch limits) and\n"
             "DeviceError for a driver failure; see set_exceptions.");

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
    .tp_new = hf_new,
};
